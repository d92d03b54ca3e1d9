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
//! # Comparing estimators
//!
//! [`Diagnostics::compare`] measures advantage vectors the caller computed;
//! [`Diagnostics::compare_estimators`] runs [`AdvantageEstimator`]s on one
//! [`EstimatorInput`] and measures each, taking a row's advantage from the first masked
//! token of its output ([`row_advantages`]). Either way a failure is an [`Error::Estimator`]
//! that names the estimator.
//!
//! # Edge cases
//!
//! - No shared pair: CAR and EGR are `None` (not NaN).
//! - Shared pairs whose occurrences all have zero advantage: CAR is `Some(0)` (none is
//!   contradictory), EGR is `None` (no gradient to cancel: 0/0).
//! - No milestone step, no non-milestone step, or zero mean |A| over non-milestone steps: CCR
//!   is `None`.
//! - Empty input: [`Error::EmptyBatch`] (a [`RolloutBatch`] is never empty, so this only arises
//!   in the slice-level functions [`zero_advantage_ratio`] and [`credit_concentration`]).
//! - Length mismatches: [`Error::LengthMismatch`]; NaN or infinite advantages:
//!   [`Error::NonFinite`]; invalid thresholds: [`Error::InvalidConfig`].
//! - Finite advantages whose sums (EGR's Σ|g⁺ − g⁻| and Σ(g⁺ + g⁻), CCR's Σ|A|) exceed
//!   f64::MAX, or whose CCR ratio does (10³⁰⁸ over 10⁻⁶): [`Error::NonFinite`] naming the sum or
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

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;

use crate::batch::RolloutBatch;
use ndarray::ArrayView2;

use crate::error::{check_finite, check_len, Error, Range, Result};
use crate::estimator::{AdvantageEstimator, EstimatorInput};
use crate::milestone::check_flags;
use crate::tensor::MaskView;

/// Thresholds of the diagnostics. Build with [`Default`] and the `with_*` setters;
/// [`Diagnostics::new`] validates.
///
/// ```
/// use beacon_rl::diagnostics::DiagnosticsConfig;
/// let mut cfg = DiagnosticsConfig::default();
/// assert_eq!((cfg.zero_threshold, cfg.success_threshold), (1e-6, 0.0));
/// cfg.zero_threshold = 0.0; // must be > 0
/// assert!(cfg.validate().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct DiagnosticsConfig {
    /// τ > 0: a step with |A| < τ counts as zero advantage in every metric. Default 1e-6.
    pub zero_threshold: f64,
    /// A trajectory is a full success when its terminal reward is strictly greater than this
    /// (finite). Default 0.0. Ignored after [`Diagnostics::with_success_flags`].
    pub success_threshold: f64,
}

impl Default for DiagnosticsConfig {
    /// τ = 1e-6, success when R > 0.
    fn default() -> Self {
        Self {
            zero_threshold: 1e-6,
            success_threshold: 0.0,
        }
    }
}

crate::setters::with_setters! {
    DiagnosticsConfig, "use beacon_rl::DiagnosticsConfig;", DiagnosticsConfig::default();
    /// Sets τ: |A| < τ counts as zero advantage (default 1e-6; finite, > 0).
    with_zero_threshold(zero_threshold: f64) = 1e-3;
    /// Sets the success threshold on the terminal reward (default 0.0; finite).
    with_success_threshold(success_threshold: f64) = 0.5;
}

const FINITE: Range = Range {
    expected: "finite",
    ok: f64::is_finite,
};

impl DiagnosticsConfig {
    /// Checks both thresholds.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when `zero_threshold` is not finite and > 0, or
    /// `success_threshold` is not finite.
    ///
    /// ```
    /// use beacon_rl::diagnostics::DiagnosticsConfig;
    /// use beacon_rl::Error;
    /// let cfg = DiagnosticsConfig::default().with_success_threshold(f64::NAN);
    /// assert!(matches!(cfg.validate(), Err(Error::InvalidConfig { name: "success_threshold", .. })));
    /// ```
    pub fn validate(&self) -> Result<()> {
        Range::POSITIVE.check("zero_threshold", self.zero_threshold)?;
        FINITE.check("success_threshold", self.success_threshold)?;
        Ok(())
    }
}

/// The outcome class of a trajectory (paper §2, Figure 2a; §5.3, Figure 4).
///
/// ```
/// use beacon_rl::diagnostics::SampleCategory;
/// assert_eq!(SampleCategory::classify(false, true), SampleCategory::PartialSuccess);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum SampleCategory {
    /// The task was completed.
    FullSuccess,
    /// The task failed after completing at least one milestone.
    PartialSuccess,
    /// The task failed without any milestone.
    CompleteFailure,
}

impl SampleCategory {
    /// Classifies a trajectory from its success and whether it has any milestone step.
    ///
    /// ```
    /// use beacon_rl::diagnostics::SampleCategory;
    /// assert_eq!(SampleCategory::classify(true, false), SampleCategory::FullSuccess);
    /// assert_eq!(SampleCategory::classify(false, false), SampleCategory::CompleteFailure);
    /// ```
    pub fn classify(success: bool, has_milestone: bool) -> Self {
        match (success, has_milestone) {
            (true, _) => Self::FullSuccess,
            (false, true) => Self::PartialSuccess,
            (false, false) => Self::CompleteFailure,
        }
    }
}

/// CAR with the counts behind it.
///
/// ```
/// use beacon_rl::diagnostics::CarReport;
/// let r = CarReport::default();
/// assert_eq!(r.value, None); // no shared pair
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct CarReport {
    /// Numerator: shared pairs with A⁺ > 0 and A⁻ > 0.
    pub contradictory_pairs: usize,
    /// Denominator: |S_shared|, pairs occurring in ≥ 2 trajectories.
    pub shared_pairs: usize,
    /// Shared pairs with A⁺ > 0.
    pub pairs_with_positive: usize,
    /// Shared pairs with A⁻ > 0.
    pub pairs_with_negative: usize,
    /// Steps (occurrences) belonging to shared pairs.
    pub shared_steps: usize,
    /// Distinct pairs in the batch, shared or not.
    pub distinct_pairs: usize,
    /// contradictory / shared; `None` when no pair is shared.
    pub value: Option<f64>,
}

/// EGR with the sums behind it.
///
/// ```
/// use beacon_rl::diagnostics::EgrReport;
/// assert_eq!(EgrReport::default().value, None);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct EgrReport {
    /// Numerator: Σ |g⁺ − g⁻| over shared pairs.
    pub surviving: f64,
    /// Denominator: Σ (g⁺ + g⁻) over shared pairs.
    pub total: f64,
    /// surviving / total; `None` when no pair is shared or `total` = 0.
    pub value: Option<f64>,
}

/// ZAR with the counts behind it.
///
/// ```
/// use beacon_rl::diagnostics::zero_advantage_ratio;
/// let r = zero_advantage_ratio(&[0.0, 0.5, 1e-9, -2.0], 1e-6)?;
/// assert_eq!((r.zero_steps, r.steps, r.value), (2, 4, 0.5));
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct ZarReport {
    /// Numerator: steps with |A| < τ.
    pub zero_steps: usize,
    /// Denominator: all steps.
    pub steps: usize,
    /// The threshold τ used.
    pub threshold: f64,
    /// zero_steps / steps.
    pub value: f64,
}

/// CCR with the sums behind it. Magnitudes below τ count as 0.
///
/// ```
/// use beacon_rl::diagnostics::credit_concentration;
/// // milestone |A| mean = 2, non-milestone mean = (1 + 3)/2 = 2, CCR = 1
/// let r = credit_concentration(&[2.0, -1.0, 3.0], &[true, false, false], 1e-6)?;
/// assert_eq!(r.value, Some(1.0));
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct CcrReport {
    /// Milestone steps.
    pub milestone_steps: usize,
    /// Σ |A| over milestone steps.
    pub milestone_abs_sum: f64,
    /// Non-milestone steps.
    pub non_milestone_steps: usize,
    /// Σ |A| over non-milestone steps.
    pub non_milestone_abs_sum: f64,
    /// Numerator: mean |A| over milestone steps (`None` without milestone steps).
    pub milestone_mean: Option<f64>,
    /// Denominator: mean |A| over non-milestone steps (`None` without such steps).
    pub non_milestone_mean: Option<f64>,
    /// milestone_mean / non_milestone_mean; `None` when either is missing or the denominator
    /// is 0.
    pub value: Option<f64>,
}

/// How the trajectories split into full successes, partial successes and complete failures.
/// Independent of the advantages.
///
/// ```
/// use beacon_rl::diagnostics::SampleSplit;
/// let s = SampleSplit { full_success: 1, partial_success: 2, complete_failure: 1, trajectories: 4 };
/// assert_eq!(s.fractions(), [0.25, 0.5, 0.25]);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct SampleSplit {
    /// Trajectories that completed the task.
    pub full_success: usize,
    /// Failed trajectories with at least one milestone.
    pub partial_success: usize,
    /// Failed trajectories without milestones.
    pub complete_failure: usize,
    /// All trajectories (the sum of the three).
    pub trajectories: usize,
}

impl SampleSplit {
    /// [full, partial, failure] as fractions of all trajectories (zeros when there are none).
    ///
    /// ```
    /// use beacon_rl::diagnostics::SampleSplit;
    /// assert_eq!(SampleSplit::default().fractions(), [0.0; 3]);
    /// ```
    pub fn fractions(&self) -> [f64; 3] {
        if self.trajectories == 0 {
            return [0.0; 3];
        }
        let n = self.trajectories as f64;
        [
            self.full_success as f64 / n,
            self.partial_success as f64 / n,
            self.complete_failure as f64 / n,
        ]
    }
}

/// Effective sample utilisation with the counts behind it, also broken down by category.
///
/// ```
/// use beacon_rl::diagnostics::UtilisationReport;
/// assert_eq!(UtilisationReport::default().effective, 0);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct UtilisationReport {
    /// Numerator: trajectories with at least one step with |A| ≥ τ.
    pub effective: usize,
    /// Denominator: all trajectories.
    pub trajectories: usize,
    /// Effective full successes.
    pub effective_full_success: usize,
    /// Effective partial successes.
    pub effective_partial_success: usize,
    /// Effective complete failures.
    pub effective_complete_failure: usize,
    /// effective / trajectories.
    pub value: f64,
}

/// All diagnostics of one estimator's advantages on one batch.
///
/// ```
/// use beacon_rl::diagnostics::{Diagnostics, DiagnosticsConfig};
/// use beacon_rl::RolloutBatch;
/// let batch = RolloutBatch::from_blocks(2, &[1, 1], vec![1.0, 0.0])?;
/// let diag = Diagnostics::new(&batch, &["s", "s"], &["a", "a"], &[false, false], DiagnosticsConfig::default())?;
/// let report = diag.report(&[1.0, 1.0])?; // same sign everywhere
/// assert_eq!((report.car.value, report.egr.value), (Some(0.0), Some(1.0)));
/// println!("{report}");
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct DiagnosticsReport {
    /// Contradictory Action Ratio.
    pub car: CarReport,
    /// Effective Gradient Ratio.
    pub egr: EgrReport,
    /// Zero-Advantage Ratio.
    pub zar: ZarReport,
    /// Credit Concentration Ratio.
    pub ccr: CcrReport,
    /// Full / partial success / complete failure counts.
    pub samples: SampleSplit,
    /// Effective sample utilisation.
    pub utilisation: UtilisationReport,
}

/// One batch prepared for diagnostics: keys interned, shared pairs indexed and trajectories
/// classified once, so that any number of advantage vectors (one per estimator) can then be
/// measured without hashing.
///
/// ```
/// use beacon_rl::diagnostics::{Diagnostics, DiagnosticsConfig};
/// use beacon_rl::RolloutBatch;
///
/// // Keys may be any Hash + Eq type: here (group, observation) tuples and action strings.
/// let batch = RolloutBatch::from_row_keys(&["g"; 3], &["a", "b", "b"], &[1.0, 0.0, 0.0])?;
/// let state = [("g", "kitchen"), ("g", "kitchen"), ("g", "hall")];
/// let action = ["take knife", "take knife", "look"];
/// let diag = Diagnostics::new(&batch, &state, &action, &[true, true, false], DiagnosticsConfig::default())?;
/// assert_eq!(diag.shared_pairs(), 1);
/// assert_eq!(diag.distinct_pairs(), 2);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Diagnostics<'a> {
    batch: &'a RolloutBatch,
    milestones: &'a [bool],
    config: DiagnosticsConfig,
    has_milestone: Vec<bool>,
    categories: Vec<SampleCategory>,
    distinct_pairs: usize,
    /// CSR over shared pairs: occurrences of shared pair p are `pair_offsets[p]..[p + 1]`,
    /// in batch (trajectory-major) order.
    pair_offsets: Vec<usize>,
    occ_rows: Vec<usize>,
}

impl<'a> Diagnostics<'a> {
    /// Prepares `batch` for diagnostics.
    ///
    /// `state_keys[r]` and `action_keys[r]` identify the state and action of caller row `r`
    /// (for example (group, observation text) and the action text); two rows are the same
    /// state–action pair when both keys are equal. Include the group in the state key unless
    /// identical states of different tasks should count as shared. `milestones[r]` flags
    /// milestone rows. Keys are interned once here.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for an invalid `config`; [`Error::LengthMismatch`] when a
    /// column's length differs from `batch.num_steps()`.
    ///
    /// ```
    /// use beacon_rl::diagnostics::{Diagnostics, DiagnosticsConfig};
    /// use beacon_rl::{Error, RolloutBatch};
    /// let batch = RolloutBatch::from_blocks(1, &[2], vec![0.0])?;
    /// let err = Diagnostics::new(&batch, &[0, 1], &[0], &[false, false], DiagnosticsConfig::default()).unwrap_err();
    /// assert!(matches!(err, Error::LengthMismatch { what: "action_keys", .. }));
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn new<S, A>(
        batch: &'a RolloutBatch,
        state_keys: &[S],
        action_keys: &[A],
        milestones: &'a [bool],
        config: DiagnosticsConfig,
    ) -> Result<Self>
    where
        S: Hash + Eq,
        A: Hash + Eq,
    {
        config.validate()?;
        let n = batch.num_steps();
        check_len("state_keys", n, state_keys.len())?;
        check_len("action_keys", n, action_keys.len())?;
        check_flags(batch, milestones)?;

        // Intern (state, action) once, visiting steps trajectory by trajectory so that "seen in
        // a new trajectory" is a comparison with the last trajectory seen.
        let mut ids: HashMap<(&S, &A), usize> = HashMap::with_capacity(n);
        let mut pair_of_step: Vec<usize> = Vec::with_capacity(n);
        let mut traj_count: Vec<usize> = Vec::new();
        let mut last_traj: Vec<usize> = Vec::new();
        let num_traj = batch.num_trajectories();
        let mut has_milestone = vec![false; num_traj];
        for (j, has) in has_milestone.iter_mut().enumerate() {
            for &r in batch.trajectory_rows(j) {
                let next = ids.len();
                let id = *ids.entry((&state_keys[r], &action_keys[r])).or_insert(next);
                if id == traj_count.len() {
                    traj_count.push(1);
                    last_traj.push(j);
                } else if last_traj[id] != j {
                    traj_count[id] += 1;
                    last_traj[id] = j;
                }
                pair_of_step.push(id);
                *has |= milestones[r];
            }
        }
        let distinct_pairs = traj_count.len();

        // Compact the shared pairs (≥ 2 trajectories) and bucket their occurrences (CSR).
        let mut shared_id = vec![usize::MAX; distinct_pairs];
        let mut shared = 0usize;
        for (sid, &c) in shared_id.iter_mut().zip(&traj_count) {
            if c >= 2 {
                *sid = shared;
                shared += 1;
            }
        }
        let mut pair_offsets = vec![0usize; shared + 1];
        for &id in &pair_of_step {
            if let Some(&s) = shared_id.get(id).filter(|&&s| s != usize::MAX) {
                pair_offsets[s + 1] += 1;
            }
        }
        for i in 1..pair_offsets.len() {
            pair_offsets[i] += pair_offsets[i - 1];
        }
        let mut cursor = pair_offsets.clone();
        let mut occ_rows = vec![0usize; pair_offsets[shared]];
        for (&id, &r) in pair_of_step.iter().zip(batch.step_rows()) {
            let s = shared_id[id];
            if s != usize::MAX {
                occ_rows[cursor[s]] = r;
                cursor[s] += 1;
            }
        }

        let categories = batch
            .terminal_rewards()
            .iter()
            .zip(&has_milestone)
            .map(|(&reward, &has)| SampleCategory::classify(reward > config.success_threshold, has))
            .collect();
        Ok(Self {
            batch,
            milestones,
            config,
            has_milestone,
            categories,
            distinct_pairs,
            pair_offsets,
            occ_rows,
        })
    }

    /// Replaces the reward-threshold success rule by explicit flags, one per trajectory in
    /// batch order (for environments whose success is not `R > threshold`).
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] unless `success.len() == batch.num_trajectories()`.
    ///
    /// ```
    /// use beacon_rl::diagnostics::{Diagnostics, DiagnosticsConfig, SampleCategory};
    /// use beacon_rl::RolloutBatch;
    /// // Rewards 0.4 and 0.9 (partial credit); only the second is a success.
    /// let batch = RolloutBatch::from_blocks(2, &[1, 1], vec![0.4, 0.9])?;
    /// let diag = Diagnostics::new(&batch, &[0, 0], &[0, 0], &[false, false], DiagnosticsConfig::default())?
    ///     .with_success_flags(&[false, true])?;
    /// assert_eq!(diag.categories(), [SampleCategory::CompleteFailure, SampleCategory::FullSuccess]);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn with_success_flags(mut self, success: &[bool]) -> Result<Self> {
        check_len("success flags", self.batch.num_trajectories(), success.len())?;
        for ((c, &ok), &has) in self.categories.iter_mut().zip(success).zip(&self.has_milestone) {
            *c = SampleCategory::classify(ok, has);
        }
        Ok(self)
    }

    /// The validated configuration.
    ///
    /// ```
    /// use beacon_rl::diagnostics::{Diagnostics, DiagnosticsConfig};
    /// use beacon_rl::RolloutBatch;
    /// let batch = RolloutBatch::from_blocks(1, &[1], vec![0.0])?;
    /// let diag = Diagnostics::new(&batch, &[0], &[0], &[false], DiagnosticsConfig::default())?;
    /// assert_eq!(diag.config().zero_threshold, 1e-6);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn config(&self) -> &DiagnosticsConfig {
        &self.config
    }

    /// The category of each trajectory, in batch order.
    ///
    /// ```
    /// use beacon_rl::diagnostics::{Diagnostics, DiagnosticsConfig, SampleCategory};
    /// use beacon_rl::RolloutBatch;
    /// let batch = RolloutBatch::from_blocks(2, &[2, 2], vec![1.0, 0.0])?;
    /// let diag = Diagnostics::new(&batch, &[0; 4], &[0; 4], &[false, false, true, false], DiagnosticsConfig::default())?;
    /// assert_eq!(diag.categories(), [SampleCategory::FullSuccess, SampleCategory::PartialSuccess]);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn categories(&self) -> &[SampleCategory] {
        &self.categories
    }

    /// |S_shared|: pairs occurring in at least two trajectories.
    ///
    /// ```
    /// use beacon_rl::diagnostics::{Diagnostics, DiagnosticsConfig};
    /// use beacon_rl::RolloutBatch;
    /// // One trajectory repeating a pair twice: repeated, but not shared.
    /// let batch = RolloutBatch::from_blocks(1, &[2], vec![1.0])?;
    /// let diag = Diagnostics::new(&batch, &["s", "s"], &["a", "a"], &[false, false], DiagnosticsConfig::default())?;
    /// assert_eq!(diag.shared_pairs(), 0);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn shared_pairs(&self) -> usize {
        self.pair_offsets.len() - 1
    }

    /// Distinct state–action pairs in the batch.
    ///
    /// ```
    /// use beacon_rl::diagnostics::{Diagnostics, DiagnosticsConfig};
    /// use beacon_rl::RolloutBatch;
    /// let batch = RolloutBatch::from_blocks(1, &[3], vec![1.0])?;
    /// let diag = Diagnostics::new(&batch, &["s", "s", "t"], &["a", "a", "a"], &[false; 3], DiagnosticsConfig::default())?;
    /// assert_eq!(diag.distinct_pairs(), 2);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn distinct_pairs(&self) -> usize {
        self.distinct_pairs
    }

    /// The sample split (does not depend on advantages).
    ///
    /// ```
    /// use beacon_rl::diagnostics::{Diagnostics, DiagnosticsConfig};
    /// use beacon_rl::RolloutBatch;
    /// let batch = RolloutBatch::from_blocks(3, &[1, 1, 1], vec![1.0, 0.0, 0.0])?;
    /// let diag = Diagnostics::new(&batch, &[0; 3], &[0; 3], &[true, true, false], DiagnosticsConfig::default())?;
    /// let s = diag.sample_split();
    /// assert_eq!((s.full_success, s.partial_success, s.complete_failure), (1, 1, 1));
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn sample_split(&self) -> SampleSplit {
        let mut s = SampleSplit {
            trajectories: self.categories.len(),
            ..SampleSplit::default()
        };
        for c in &self.categories {
            match c {
                SampleCategory::FullSuccess => s.full_success += 1,
                SampleCategory::PartialSuccess => s.partial_success += 1,
                SampleCategory::CompleteFailure => s.complete_failure += 1,
            }
        }
        s
    }

    /// Measures one estimator's advantages (`advantages[r]` for caller row `r`).
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] unless there is one advantage per row; [`Error::NonFinite`]
    /// for a NaN or infinite advantage, or for an EGR or CCR sum or ratio that overflows (see
    /// the module's edge cases).
    ///
    /// ```
    /// use beacon_rl::diagnostics::{Diagnostics, DiagnosticsConfig};
    /// use beacon_rl::{Error, RolloutBatch};
    /// let batch = RolloutBatch::from_blocks(2, &[1, 1], vec![1.0, 0.0])?;
    /// let diag = Diagnostics::new(&batch, &[0, 0], &[0, 0], &[false, false], DiagnosticsConfig::default())?;
    /// assert!(matches!(diag.report(&[1.0, f64::NAN]), Err(Error::NonFinite { index: 1, .. })));
    /// // Both trajectories take the shared pair, one with +1, one with 0 (no signal).
    /// let r = diag.report(&[1.0, 0.0])?;
    /// assert_eq!((r.car.value, r.zar.value, r.utilisation.value), (Some(0.0), 0.5, 0.5));
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn report(&self, advantages: &[f64]) -> Result<DiagnosticsReport> {
        check_len("advantages", self.batch.num_steps(), advantages.len())?;
        check_finite("advantages", advantages)?;
        let tau = self.config.zero_threshold;
        let (car, egr) = self.car_egr(advantages)?;
        Ok(DiagnosticsReport {
            car,
            egr,
            zar: zar_unchecked(advantages, tau),
            ccr: ccr_unchecked(advantages, self.milestones, tau)?,
            samples: self.sample_split(),
            utilisation: self.utilisation(advantages),
        })
    }

    /// Measures several estimators' advantages on this batch, in the given order. `estimators`
    /// pairs a display name with per-row advantages (`&[(&str, &[f64])]`, `Vec<(String,
    /// Vec<f64>)>`, ...).
    ///
    /// # Errors
    /// [`Error::Estimator`] naming the first estimator (in list order) whose advantages are
    /// invalid, with [`report`](Self::report)'s error as its `source`.
    ///
    /// ```
    /// use beacon_rl::diagnostics::{Diagnostics, DiagnosticsConfig};
    /// use beacon_rl::RolloutBatch;
    /// let batch = RolloutBatch::from_blocks(2, &[1, 1], vec![1.0, 0.0])?;
    /// let diag = Diagnostics::new(&batch, &[0, 0], &[0, 0], &[false, false], DiagnosticsConfig::default())?;
    /// let table = diag.compare(&[("grpo", &[0.7, -0.7][..]), ("flat", &[0.5, 0.5][..])])?;
    /// assert_eq!(table.entries[0].report.car.value, Some(1.0));
    /// assert_eq!(table.entries[1].report.car.value, Some(0.0));
    /// println!("{table}");
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn compare<N, V>(&self, estimators: &[(N, V)]) -> Result<Comparison>
    where
        N: AsRef<str>,
        V: AsRef<[f64]>,
    {
        let entries = estimators
            .iter()
            .map(|(name, adv)| {
                let name = name.as_ref();
                Ok(NamedReport {
                    name: name.to_owned(),
                    report: self.report(adv.as_ref()).map_err(|e| named(name, e))?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(self.comparison(entries))
    }

    /// Runs each estimator on `input` and measures its per-row advantages on this batch, in
    /// the given order: GRPO, GiGPO and BEACON side by side through the
    /// [`AdvantageEstimator`] trait. `estimators` pairs a display name with an estimator.
    ///
    /// **Per-row advantage.** Each estimator returns a rows × L matrix; the row's advantage is
    /// [`row_advantages`] of it: with a response mask in `input`, the value on the row's
    /// *first masked token*; without one, column 0. Every step-level or outcome estimator of
    /// the crate (GRPO and its variants, RLOO, OPO, GPG, REINFORCE++-baseline, ReMax, GiGPO,
    /// BEACON) writes one value on all masked tokens of a row, so the first one *is* the row's
    /// advantage. Token-level estimators (`reinforce_plus_plus`, `gae`, the optimal token
    /// baselines) vary along the row; for them this measures the first generated token only.
    /// A row without masked tokens receives no gradient and counts as advantage 0.
    ///
    /// `input.batch` must be this diagnostics' batch (the same value): the advantages are
    /// matched to state–action keys and milestones by row.
    ///
    /// Call it as `diag.compare_estimators(..)` or `Diagnostics::compare_estimators(&diag, ..)`.
    ///
    /// # Errors
    /// [`Error::BatchMismatch`] when `input.batch` differs from the diagnosed batch;
    /// [`Error::Estimator`] naming the first estimator (in list order) that fails, with its
    /// error as `source`: the estimator's own error (a missing input column, NaN rewards,
    /// ...), [`Error::OutputShape`] for an output that is not rows × L (L ≥ 1, matching the
    /// mask), or [`report`](Self::report)'s error (NaN advantages).
    ///
    /// ```
    /// use beacon_rl::diagnostics::{Diagnostics, DiagnosticsConfig};
    /// use beacon_rl::estimator::{AdvantageEstimator, EstimatorConfig, EstimatorInput};
    /// use beacon_rl::{Beacon, BeaconConfig, Error, RolloutBatch};
    ///
    /// // One task, a success "w" and a failure "l" that both open with "go" in state "s".
    /// let batch = RolloutBatch::from_row_keys(&["t"; 4], &["w", "w", "l", "l"], &[1.0, 1.0, 0.0, 0.0])?;
    /// let (state, action) = (["s", "hall", "s", "yard"], ["go", "take", "go", "dig"]);
    /// let milestones = [true, false, true, false];
    /// let diag = Diagnostics::new(&batch, &state, &action, &milestones, DiagnosticsConfig::default())?;
    ///
    /// let rewards = [[1.0], [1.0], [0.0], [0.0]]; // episode reward on every step row
    /// let mask = [[true]; 4];
    /// let input = EstimatorInput::new(&batch)
    ///     .with_token_level_rewards(&rewards)
    ///     .with_response_mask(&mask)
    ///     .with_milestones(&milestones);
    /// let grpo = "grpo".parse::<EstimatorConfig>()?.build()?;
    /// let beacon = Beacon::new(BeaconConfig::paper())?;
    /// let table = diag.compare_estimators(&[("grpo", &*grpo), ("beacon", &beacon)], &input)?;
    /// // GRPO: +0.707 on the success, -0.707 on the failure: "go" at "s" is pushed both ways.
    /// assert_eq!(table.entries[0].report.car.value, Some(1.0));
    /// println!("{table}");
    ///
    /// // GiGPO needs step rewards and anchors this input lacks: the error names it.
    /// let gigpo = "gigpo".parse::<EstimatorConfig>()?.build()?;
    /// let err = diag.compare_estimators(&[("grpo", &*grpo), ("GiGPO", &*gigpo)], &input).unwrap_err();
    /// assert!(matches!(&err, Error::Estimator { name, source }
    ///     if name == "GiGPO" && **source == Error::MissingInput("step_rewards")));
    /// assert_eq!(err.to_string(), "estimator GiGPO: missing input: step_rewards");
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn compare_estimators(
        &self,
        estimators: &[(&str, &dyn AdvantageEstimator)],
        input: &EstimatorInput<'_>,
    ) -> Result<Comparison> {
        if !std::ptr::eq(input.batch, self.batch) && input.batch != self.batch {
            return Err(Error::BatchMismatch(
                "the estimator input's batch is not the batch being diagnosed",
            ));
        }
        let entries = estimators
            .iter()
            .map(|&(name, estimator)| {
                let report = estimator
                    .estimate(input)
                    .and_then(|out| row_advantages(out.advantages.view(), input.response_mask))
                    .and_then(|adv| self.report(&adv))
                    .map_err(|e| named(name, e))?;
                Ok(NamedReport {
                    name: name.to_owned(),
                    report,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(self.comparison(entries))
    }

    fn comparison(&self, entries: Vec<NamedReport>) -> Comparison {
        Comparison {
            distinct_pairs: self.distinct_pairs,
            zero_threshold: self.config.zero_threshold,
            samples: self.sample_split(),
            entries,
        }
    }

    fn car_egr(&self, advantages: &[f64]) -> Result<(CarReport, EgrReport)> {
        let tau = self.config.zero_threshold;
        let mut car = CarReport {
            shared_pairs: self.shared_pairs(),
            shared_steps: self.occ_rows.len(),
            distinct_pairs: self.distinct_pairs,
            ..CarReport::default()
        };
        let (mut surviving, mut total) = (0.0, 0.0);
        for w in self.pair_offsets.windows(2) {
            let (mut g_plus, mut g_minus) = (0.0f64, 0.0f64);
            let (mut pos, mut neg) = (false, false);
            for &r in &self.occ_rows[w[0]..w[1]] {
                let a = effective(advantages[r], tau);
                if a > 0.0 {
                    pos = true;
                    g_plus += a;
                } else if a < 0.0 {
                    neg = true;
                    g_minus -= a;
                }
            }
            // With the "any occurrence" convention, A⁺ > 0 ⟺ some occurrence is positive.
            car.pairs_with_positive += usize::from(pos);
            car.pairs_with_negative += usize::from(neg);
            car.contradictory_pairs += usize::from(pos && neg);
            surviving += (g_plus - g_minus).abs();
            total += g_plus + g_minus;
        }
        car.value = ratio(car.contradictory_pairs as f64, car.shared_pairs as f64);
        let egr = EgrReport {
            surviving,
            total,
            value: if car.shared_pairs == 0 {
                None
            } else {
                ratio(surviving, total)
            },
        };
        // Finite advantages near f64::MAX can overflow the sums: an error, never a report
        // holding ∞ or NaN.
        finite("EGR surviving (Σ|g⁺ − g⁻| overflows)", egr.surviving)?;
        finite("EGR total (Σ(g⁺ + g⁻) overflows)", egr.total)?;
        Ok((car, egr))
    }

    fn utilisation(&self, advantages: &[f64]) -> UtilisationReport {
        let tau = self.config.zero_threshold;
        let mut u = UtilisationReport {
            trajectories: self.categories.len(),
            ..UtilisationReport::default()
        };
        for (j, c) in self.categories.iter().enumerate() {
            let effective = self
                .batch
                .trajectory_rows(j)
                .iter()
                .any(|&r| advantages[r].abs() >= tau);
            if effective {
                u.effective += 1;
                match c {
                    SampleCategory::FullSuccess => u.effective_full_success += 1,
                    SampleCategory::PartialSuccess => u.effective_partial_success += 1,
                    SampleCategory::CompleteFailure => u.effective_complete_failure += 1,
                }
            }
        }
        u.value = u.effective as f64 / u.trajectories as f64;
        u
    }
}

/// Wraps an error of one compared estimator with its display name.
fn named(name: &str, source: Error) -> Error {
    Error::Estimator {
        name: name.to_owned(),
        source: Box::new(source),
    }
}

/// One advantage per row from an estimator's rows × L output: the value on the row's first
/// masked token when `response_mask` is given (0 for a row with no masked token: it receives
/// no gradient), else column 0. See [`Diagnostics::compare_estimators`] for why the first
/// masked token is the row's advantage for step-level and outcome estimators.
///
/// # Errors
/// [`Error::OutputShape`] when the output has no column, or a number of rows (`advantages
/// rows`) or columns (`advantages columns`) that differs from the mask's.
///
/// ```
/// use beacon_rl::diagnostics::row_advantages;
/// use ndarray::array;
///
/// // Row 0 starts with a prompt token (masked out, 0.0), then carries 0.5 on its response.
/// let adv = array![[0.0, 0.5, 0.5], [-1.0, -1.0, 0.0], [0.0, 0.0, 0.0]];
/// let mask = array![[false, true, true], [true, true, false], [false, false, false]];
/// assert_eq!(row_advantages(adv.view(), Some((&mask).into()))?, [0.5, -1.0, 0.0]);
/// assert_eq!(row_advantages(adv.view(), None)?, [0.0, -1.0, 0.0]); // column 0
/// # Ok::<(), beacon_rl::Error>(())
/// ```
pub fn row_advantages(adv: ArrayView2<'_, f64>, response_mask: Option<MaskView<'_>>) -> Result<Vec<f64>> {
    if adv.ncols() == 0 {
        return Err(Error::OutputShape {
            what: "advantages columns",
            expected: 1,
            actual: 0,
        });
    }
    let Some(mask) = response_mask else {
        return Ok(adv.column(0).to_vec());
    };
    let (rows, cols) = mask.dim();
    for (what, expected, actual) in [
        ("advantages rows", rows, adv.nrows()),
        ("advantages columns", cols, adv.ncols()),
    ] {
        if expected != actual {
            return Err(Error::OutputShape {
                what,
                expected,
                actual,
            });
        }
    }
    Ok(adv
        .outer_iter()
        .enumerate()
        .map(|(r, a)| {
            a.iter()
                .enumerate()
                .find(|&(t, _)| mask.is_set(r, t))
                .map_or(0.0, |(_, &a)| a)
        })
        .collect())
}

/// The advantage with the zero convention applied: |A| < τ becomes 0.
#[inline]
fn effective(a: f64, tau: f64) -> f64 {
    if a.abs() < tau {
        0.0
    } else {
        a
    }
}

/// `num / den`, or `None` when `den` is 0.
#[inline]
fn ratio(num: f64, den: f64) -> Option<f64> {
    (den > 0.0).then(|| num / den)
}

fn zar_unchecked(advantages: &[f64], tau: f64) -> ZarReport {
    let zero_steps = advantages.iter().filter(|a| a.abs() < tau).count();
    ZarReport {
        zero_steps,
        steps: advantages.len(),
        threshold: tau,
        value: zero_steps as f64 / advantages.len() as f64,
    }
}

/// `Ok(v)` for a finite `v`, else [`Error::NonFinite`] naming `what` (a sum or ratio of the
/// report, index 0).
fn finite(what: &'static str, v: f64) -> Result<f64> {
    if v.is_finite() {
        Ok(v)
    } else {
        Err(Error::NonFinite {
            what,
            index: 0,
            value: v,
        })
    }
}

fn ccr_unchecked(advantages: &[f64], milestones: &[bool], tau: f64) -> Result<CcrReport> {
    let mut r = CcrReport::default();
    for (&a, &m) in advantages.iter().zip(milestones) {
        let mag = effective(a, tau).abs();
        if m {
            r.milestone_steps += 1;
            r.milestone_abs_sum += mag;
        } else {
            r.non_milestone_steps += 1;
            r.non_milestone_abs_sum += mag;
        }
    }
    r.milestone_mean = ratio(r.milestone_abs_sum, r.milestone_steps as f64);
    r.non_milestone_mean = ratio(r.non_milestone_abs_sum, r.non_milestone_steps as f64);
    r.value = match (r.milestone_mean, r.non_milestone_mean) {
        (Some(num), Some(den)) => ratio(num, den),
        _ => None,
    };
    // As for EGR: overflowing sums, or a ratio beyond f64::MAX (a huge milestone mean over a
    // tiny other mean), are errors rather than ∞ in the report.
    finite("CCR milestone Σ|A| (overflows)", r.milestone_abs_sum)?;
    finite("CCR non-milestone Σ|A| (overflows)", r.non_milestone_abs_sum)?;
    finite("CCR ratio (overflows)", r.value.unwrap_or(0.0))?;
    Ok(r)
}

/// ZAR over a plain slice of advantages: the fraction with |A| < `zero_threshold`.
///
/// # Errors
/// [`Error::EmptyBatch`] for no advantages, [`Error::NonFinite`] for NaN/inf,
/// [`Error::InvalidConfig`] unless `zero_threshold` is finite and > 0.
///
/// ```
/// use beacon_rl::diagnostics::zero_advantage_ratio;
/// use beacon_rl::Error;
/// assert_eq!(zero_advantage_ratio(&[], 1e-6), Err(Error::EmptyBatch));
/// assert_eq!(zero_advantage_ratio(&[0.0, 1.0], 1e-6)?.value, 0.5);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
pub fn zero_advantage_ratio(advantages: &[f64], zero_threshold: f64) -> Result<ZarReport> {
    Range::POSITIVE.check("zero_threshold", zero_threshold)?;
    if advantages.is_empty() {
        return Err(Error::EmptyBatch);
    }
    check_finite("advantages", advantages)?;
    Ok(zar_unchecked(advantages, zero_threshold))
}

/// CCR over plain slices: mean |A| over flagged steps / mean |A| over the others, with
/// |A| < `zero_threshold` counted as 0.
///
/// # Errors
/// [`Error::EmptyBatch`] for no advantages, [`Error::LengthMismatch`] when `milestones`
/// differs in length, [`Error::NonFinite`] for NaN/inf or for a sum or ratio that overflows
/// (`credit_concentration(&[1e308, 1e-6], &[true, false], 1e-6)`), [`Error::InvalidConfig`]
/// for the threshold.
///
/// ```
/// use beacon_rl::diagnostics::credit_concentration;
/// // No non-milestone step: CCR undefined.
/// assert_eq!(credit_concentration(&[1.0], &[true], 1e-6)?.value, None);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
pub fn credit_concentration(
    advantages: &[f64],
    milestones: &[bool],
    zero_threshold: f64,
) -> Result<CcrReport> {
    Range::POSITIVE.check("zero_threshold", zero_threshold)?;
    if advantages.is_empty() {
        return Err(Error::EmptyBatch);
    }
    check_len("milestones", advantages.len(), milestones.len())?;
    check_finite("advantages", advantages)?;
    ccr_unchecked(advantages, milestones, zero_threshold)
}

/// Diagnostics of one estimator's advantages on one batch, in one call.
///
/// Interns the keys for this call only; to measure several estimators on the same batch use
/// [`compare`] or [`Diagnostics`] directly.
///
/// # Errors
/// As [`Diagnostics::new`] and [`Diagnostics::report`].
///
/// ```
/// use beacon_rl::diagnostics::{diagnose, DiagnosticsConfig};
/// use beacon_rl::RolloutBatch;
/// let batch = RolloutBatch::from_blocks(2, &[2, 2], vec![1.0, 0.0])?;
/// let keys = ["s0", "s1", "s0", "s1"];
/// let adv = [1.0, 1.0, -1.0, -1.0];
/// let r = diagnose(&batch, &keys, &keys, &[true, false, false, false], &adv, DiagnosticsConfig::default())?;
/// assert_eq!(r.car.value, Some(1.0));
/// assert_eq!(r.ccr.value, Some(1.0));
/// # Ok::<(), beacon_rl::Error>(())
/// ```
pub fn diagnose<S, A>(
    batch: &RolloutBatch,
    state_keys: &[S],
    action_keys: &[A],
    milestones: &[bool],
    advantages: &[f64],
    config: DiagnosticsConfig,
) -> Result<DiagnosticsReport>
where
    S: Hash + Eq,
    A: Hash + Eq,
{
    Diagnostics::new(batch, state_keys, action_keys, milestones, config)?.report(advantages)
}

/// Side-by-side diagnostics of several estimators on one batch (keys interned once).
///
/// # Errors
/// As [`Diagnostics::new`] and [`Diagnostics::compare`].
///
/// ```
/// use beacon_rl::diagnostics::{compare, DiagnosticsConfig};
/// use beacon_rl::RolloutBatch;
/// let batch = RolloutBatch::from_blocks(2, &[1, 1], vec![1.0, 0.0])?;
/// let grpo = vec![0.7, -0.7];
/// let other = vec![0.0, -0.3];
/// let cmp = compare(&batch, &["s", "s"], &["a", "a"], &[false, false],
///                   &[("GRPO", &grpo), ("other", &other)], DiagnosticsConfig::default())?;
/// assert_eq!(cmp.entries.len(), 2);
/// assert!(cmp.to_string().contains("GRPO"));
/// # Ok::<(), beacon_rl::Error>(())
/// ```
pub fn compare<S, A, N, V>(
    batch: &RolloutBatch,
    state_keys: &[S],
    action_keys: &[A],
    milestones: &[bool],
    estimators: &[(N, V)],
    config: DiagnosticsConfig,
) -> Result<Comparison>
where
    S: Hash + Eq,
    A: Hash + Eq,
    N: AsRef<str>,
    V: AsRef<[f64]>,
{
    Diagnostics::new(batch, state_keys, action_keys, milestones, config)?.compare(estimators)
}

/// One row of a [`Comparison`].
///
/// ```
/// use beacon_rl::diagnostics::{DiagnosticsReport, NamedReport};
/// let row = NamedReport::default(); // rows come from `Diagnostics::compare`
/// assert_eq!((row.name.as_str(), row.report), ("", DiagnosticsReport::default()));
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct NamedReport {
    /// The estimator's display name.
    pub name: String,
    /// Its diagnostics.
    pub report: DiagnosticsReport,
}

/// Diagnostics of several estimators on the same batch. `Display` prints a plain-text table.
///
/// ```
/// use beacon_rl::diagnostics::{compare, DiagnosticsConfig};
/// use beacon_rl::RolloutBatch;
/// let batch = RolloutBatch::from_blocks(2, &[1, 1], vec![1.0, 0.0])?;
/// let cmp = compare(&batch, &[0, 0], &[0, 0], &[false, false], &[("GRPO", [0.7, -0.7])], DiagnosticsConfig::default())?;
/// let text = cmp.to_string();
/// assert!(text.lines().next().unwrap().starts_with("estimator"));
/// assert!(text.contains("1.000 (1/1)")); // CAR: the one shared pair is contradictory
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct Comparison {
    /// Distinct state–action pairs in the batch.
    pub distinct_pairs: usize,
    /// The zero threshold τ used.
    pub zero_threshold: f64,
    /// The batch's sample split (the same for every estimator).
    pub samples: SampleSplit,
    /// One report per estimator, in the order given.
    pub entries: Vec<NamedReport>,
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_owned(), |x| format!("{x:.3}"))
}

fn with_counts(v: Option<f64>, num: usize, den: usize) -> String {
    format!("{} ({num}/{den})", opt(v))
}

/// One table line: the first cell left-aligned, the others right-aligned, two spaces apart.
fn table_line<S: AsRef<str>>(f: &mut fmt::Formatter<'_>, cells: &[S; 6], width: &[usize; 6]) -> fmt::Result {
    write!(f, "{:<w$}", cells[0].as_ref(), w = width[0])?;
    for (cell, &w) in cells.iter().zip(width).skip(1) {
        write!(f, "  {:>w$}", cell.as_ref())?;
    }
    writeln!(f)
}

impl fmt::Display for Comparison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const HEADER: [&str; 6] = ["estimator", "CAR", "EGR", "ZAR", "CCR", "utilisation"];
        let rows: Vec<[String; 6]> = self
            .entries
            .iter()
            .map(|e| {
                let r = &e.report;
                [
                    e.name.clone(),
                    with_counts(r.car.value, r.car.contradictory_pairs, r.car.shared_pairs),
                    opt(r.egr.value),
                    with_counts(Some(r.zar.value), r.zar.zero_steps, r.zar.steps),
                    opt(r.ccr.value),
                    with_counts(
                        Some(r.utilisation.value),
                        r.utilisation.effective,
                        r.utilisation.trajectories,
                    ),
                ]
            })
            .collect();
        // Column widths in characters (names may hold non-ASCII such as λ or γ).
        let mut width = HEADER.map(|h| h.chars().count());
        for row in &rows {
            for (w, cell) in width.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        table_line(f, &HEADER, &width)?;
        for row in &rows {
            table_line(f, row, &width)?;
        }
        let s = &self.samples;
        let shared = self.entries.first().map_or(0, |e| e.report.car.shared_pairs);
        writeln!(
            f,
            "trajectories: {} = {} full success + {} partial success + {} complete failure; \
             shared (s, a) pairs: {} of {} distinct; zero threshold {:e}",
            s.trajectories,
            s.full_success,
            s.partial_success,
            s.complete_failure,
            shared,
            self.distinct_pairs,
            self.zero_threshold
        )
    }
}

impl fmt::Display for DiagnosticsReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (c, e, z, k, s, u) = (
            &self.car,
            &self.egr,
            &self.zar,
            &self.ccr,
            &self.samples,
            &self.utilisation,
        );
        writeln!(
            f,
            "CAR {} ({} contradictory of {} shared pairs)",
            opt(c.value),
            c.contradictory_pairs,
            c.shared_pairs
        )?;
        writeln!(
            f,
            "EGR {} ({:.4} of {:.4} surviving)",
            opt(e.value),
            e.surviving,
            e.total
        )?;
        writeln!(
            f,
            "ZAR {:.3} ({} of {} steps with |A| < {:e})",
            z.value, z.zero_steps, z.steps, z.threshold
        )?;
        writeln!(
            f,
            "CCR {} (milestone mean |A| {} over {} steps, other {} over {} steps)",
            opt(k.value),
            opt(k.milestone_mean),
            k.milestone_steps,
            opt(k.non_milestone_mean),
            k.non_milestone_steps
        )?;
        writeln!(
            f,
            "samples: {} full success, {} partial success, {} complete failure",
            s.full_success, s.partial_success, s.complete_failure
        )?;
        write!(
            f,
            "utilisation {:.3} ({} of {} trajectories carry signal)",
            u.value, u.effective, u.trajectories
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn effective_and_ratio_helpers() {
        assert_eq!(effective(5e-7, 1e-6), 0.0);
        assert_eq!(effective(-1e-6, 1e-6), -1e-6); // |A| = τ is not below τ
        assert_eq!(ratio(1.0, 0.0), None);
        assert_eq!(ratio(1.0, 4.0), Some(0.25));
    }

    #[test]
    fn csr_groups_occurrences_by_pair_in_batch_order() {
        // rows: traj x = rows 0, 2; traj y = rows 1, 3 (interleaved)
        let batch =
            RolloutBatch::from_row_keys(&[0; 4], &["x", "y", "x", "y"], &[1.0, 0.0, 1.0, 0.0]).unwrap();
        let s = ["p", "p", "q", "r"];
        let a = [0; 4];
        let d = Diagnostics::new(&batch, &s, &a, &[false; 4], DiagnosticsConfig::default()).unwrap();
        // pairs: p (rows 0, 1: both trajectories) shared; q, r single.
        assert_eq!(d.pair_offsets, vec![0, 2]);
        assert_eq!(d.occ_rows, vec![0, 1]);
        assert_eq!(d.distinct_pairs, 3);
    }
}
