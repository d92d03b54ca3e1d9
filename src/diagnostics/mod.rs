//! Credit-assignment diagnostics: CAR, EGR, ZAR, CCR and the sample split.
//!
//! These are the measurements of the BEACON paper (§2 "Failures in Flat Trajectory
//! Optimization", §5.3 "Analysis" and the appendix "Diagnostic Metrics"), computed over one
//! rollout batch and *any* estimator's per-step advantages (one `f64` per caller row), so GRPO,
//! GiGPO and BEACON can be compared on the same batch. They follow the appendix's formulas (no
//! reference code was used), with the choices the paper leaves open stated below.
//!
//! # Zero convention
//!
//! A step whose |A| < τ (`zero_threshold`, default 10⁻⁶) counts as *zero advantage* in every
//! metric: it is neither positive nor negative for CAR, contributes no magnitude to EGR or CCR,
//! counts as zero for ZAR and does not make its trajectory effective. One threshold everywhere
//! keeps the metrics consistent with each other (ZAR + fraction of signed steps = 1) and makes
//! them insensitive to floating-point residue such as 1e-17 from a mean subtraction.
//!
//! # Metrics
//!
//! Let S_shared be the state–action pairs (s, a) (keys supplied by the caller) that occur in at
//! least two distinct trajectories of the batch.
//!
//! - **CAR** (Contradictory Action Ratio):
//!   CAR = (1/|S_shared|) Σ_{(s,a)∈S_shared} 𝟙[A⁺ > 0 ∧ A⁻ > 0],
//!   A⁺ (A⁻) = the number of trajectories in which the pair receives a positive (negative)
//!   advantage. A pair that occurs several times in one trajectory counts that trajectory in
//!   A⁺ if *any* of its occurrences there is positive and in A⁻ if any is negative (so one
//!   trajectory can count in both): this is the appendix's wording read literally, and a
//!   trajectory that pushes the same pair both ways does send contradictory gradient. It
//!   follows that A⁺ > 0 ∧ A⁻ > 0 holds exactly when the pair has at least one positive and one
//!   negative occurrence in the batch. For trajectory-level estimators (GRPO) every occurrence
//!   in a trajectory has the same sign, so the choice does not matter there.
//! - **EGR** (Effective Gradient Ratio):
//!   EGR = Σ_{S_shared} |g⁺ − g⁻| / Σ_{S_shared} (g⁺ + g⁻),
//!   g⁺ = Σ A over the pair's occurrences with A > 0, g⁻ = Σ |A| over those with A < 0.
//!   Magnitudes are summed over *occurrences* (steps), not per trajectory: each occurrence is a
//!   separate A·∇log π(a|s) term of the policy gradient, and identical (s, a) share ∇log π, so
//!   the pair's net gradient is (g⁺ − g⁻)·∇log π and EGR is exactly the fraction of gradient
//!   magnitude that survives cancellation. Summing per trajectory first would cancel within a
//!   trajectory before measuring, hiding part of the conflict.
//! - **ZAR** (Zero-Advantage Ratio): |{t : |A_t| < τ}| / N over all N steps.
//! - **CCR** (Credit Concentration Ratio): mean |A| over milestone steps / mean |A| over
//!   non-milestone steps.
//! - **Sample split**: each trajectory is a *full success* (terminal reward R > the
//!   `success_threshold`, default 0, or a caller-supplied success flag), a *partial success*
//!   (failed, ≥ 1 milestone) or a *complete failure* (failed, no milestone).
//!   **Effective sample utilisation** = fraction of trajectories with at least one step of
//!   non-zero advantage (|A| ≥ τ).
//!
//! The paper gives ZAR and utilisation in words only (§5.3: "the fraction of samples receiving
//! near-zero advantage", "trajectories providing useful gradient signal"); the formulas above
//! are this crate's reading. Its figures for them come from training, where a group whose
//! rollouts all fail (or all succeed) gives GRPO a zero advantage on every step: GRPO's ZAR
//! starts near 100% there. On a recorded batch whose groups mix outcomes, as the bundled one,
//! GRPO's ZAR is near 0.
//!
//! # Comparing estimators
//!
//! [`Diagnostics::compare`](crate::diagnostics::Diagnostics::compare) measures advantage vectors the caller computed;
//! [`Diagnostics::compare_estimators`](crate::diagnostics::Diagnostics::compare_estimators) runs [`AdvantageEstimator`](crate::estimator::AdvantageEstimator)s on one
//! [`EstimatorInput`](crate::estimator::EstimatorInput) and measures each, taking a row's advantage from the first masked
//! token of its output. Either way a failure is an [`Error::Estimator`](crate::Error::Estimator)
//! that names the estimator.
//!
//! # Edge cases
//!
//! - No shared pair: CAR and EGR are `None` (not NaN).
//! - Shared pairs whose occurrences all have zero advantage: CAR is `Some(0)` (none is
//!   contradictory), EGR is `None` (no gradient to cancel: 0/0).
//! - No milestone step, no non-milestone step, or zero mean |A| over non-milestone steps: CCR
//!   is `None`.
//! - Length mismatches: [`Error::LengthMismatch`](crate::Error::LengthMismatch); NaN or infinite advantages:
//!   [`Error::NonFinite`](crate::Error::NonFinite); invalid thresholds: [`Error::InvalidConfig`](crate::Error::InvalidConfig).
//! - Finite advantages whose sums (EGR's Σ|g⁺ − g⁻| and Σ(g⁺ + g⁻), CCR's Σ|A|) exceed
//!   f64::MAX, or whose CCR ratio does (10³⁰⁸ over 10⁻⁶): [`Error::NonFinite`](crate::Error::NonFinite) naming the sum or
//!   ratio. The reports hold the sums themselves, which such inputs cannot represent, so the
//!   error is the choice here rather than a rescaled computation; a report never holds ∞ or
//!   NaN.
//!
//! ```
//! use beacon_rl::diagnostics::{Diagnostics, DiagnosticsConfig};
//! use beacon_rl::RolloutBatch;
//!
//! // One task, two trajectories that both start with "open door" in the same state.
//! let batch = RolloutBatch::from_row_keys(&["t"; 4], &["win", "win", "lose", "lose"], &[1.0, 1.0, 0.0, 0.0])?;
//! let state = ["start", "hall", "start", "hall"];
//! let action = ["open door", "go north", "open door", "go south"];
//! let milestones = [true, false, true, false];
//! let diag = Diagnostics::new(&batch, &state, &action, &milestones, DiagnosticsConfig::default())?;
//!
//! // GRPO-style credit: +0.7 on every step of the winner, -0.7 on the loser.
//! let report = diag.report(&[0.7, 0.7, -0.7, -0.7])?;
//! assert_eq!(report.car.value, Some(1.0)); // "open door" at "start" is pushed both ways
//! assert_eq!(report.egr.value, Some(0.0)); // and its gradient cancels completely
//! assert_eq!(report.zar.value, 0.0);
//! assert_eq!(report.samples.partial_success, 1);
//! # Ok::<(), beacon_rl::Error>(())
//! ```

mod config;
mod metrics;
mod prepared;
mod report;

pub use config::DiagnosticsConfig;
pub use prepared::Diagnostics;
pub use report::{
    CarReport, CcrReport, Comparison, DiagnosticsReport, EgrReport, SampleCategory, SampleSplit,
    UtilisationReport, ZarReport,
};
