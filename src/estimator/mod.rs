//! Advantage estimators behind one interface.
//!
//! Every estimator implements [`AdvantageEstimator`]: it reads an [`EstimatorInput`] (the
//! batch's group structure plus per-row columns in the caller's row order and dtypes: `f32` or
//! `f64` values, `bool`/`u8`/`i64` masks or per-row response lengths, see [`crate::tensor`])
//! and writes advantages (and, for GAE, turn-level GAE, REINFORCE++, ReMax and OTB, returns) as `f32` or `f64`
//! rows × L token matrices. [`EstimatorConfig`] names each estimator by verl's `adv_estimator`
//! string, holds its parameters with verl's defaults, and [`builds`](EstimatorConfig::build) a
//! validated, boxed estimator: the one way to construct an estimator, shared by the string
//! grammar, serde, the command line and the Python package. [`Beacon`] and [`Gigpo`] also
//! have types of their own, for their parts API (below).
//!
//! This module holds that interface ([`AdvantageEstimator`], [`EstimatorConfig`],
//! [`EstimatorInput`], [`Advantages`], [`Workspace`]) and every estimator's configuration,
//! flat: one path each ([`BeaconConfig`], [`GigpoConfig`], [`GrpoConfig`], ..., table below).
//! Each [`EstimatorConfig`] variant states what its estimator computes and reads; the
//! equations are in its `src/estimator/` file's module docs.
//!
//! The baselines reproduce verl 0.9.1 (`verl/trainer/ppo/core_algos.py`) to 1e-5 relative on
//! the peer's float64 run; each documents its equation, the verl function and every
//! "peer behaviour reproduced" (numerical quirks of the peer that we copy on purpose):
//!
//! | `adv_estimator` | config |
//! |---|---|
//! | `grpo`, `grpo_vectorized`, `grpo_passk`, `gdpo` | [`GrpoConfig`] |
//! | `rloo`, `rloo_vectorized`, `opo`, `reinforce_plus_plus_baseline`, `remax` | none |
//! | `gpg` | [`GpgConfig`] |
//! | `reinforce_plus_plus` | [`ReinforcePlusPlusConfig`] |
//! | `gae` | [`GaeConfig`] |
//! | `optimal_token_baseline`, `tir_optimal_token_baseline` | [`OptimalTokenBaselineConfig`] |
//! | `beacon`, `beacon_official` | [`BeaconConfig`] (type [`Beacon`]) |
//! | `gigpo` | [`GigpoConfig`] (type [`Gigpo`]) |
//!
//! Turn-level estimators (one value per turn of a multi-turn episode, on step rows or on
//! verl's multi-turn rows, see `docs/turn-level.md`):
//!
//! | name | config |
//! |---|---|
//! | `step_reinforce` | [`StepReinforceConfig`] |
//! | `mt_grpo` | [`MtGrpoConfig`] |
//! | `turn_gae` | [`TurnGaeConfig`] |
//! | `tree_grpo` | [`TreeGrpoConfig`] |
//! | `empg` | [`EmpgConfig`] |
//!
//! # One way to call an estimator
//! Every estimator is called the same way, through [`AdvantageEstimator`]:
//! [`estimate`](AdvantageEstimator::estimate) (fresh `f64` arrays),
//! [`estimate_into`](AdvantageEstimator::estimate_into) (caller buffers, token level) and, for
//! the step-level ones, [`estimate_steps_into`](AdvantageEstimator::estimate_steps_into) (one
//! value per row). Use the trait to train; use the parts API of BEACON and GiGPO only to
//! read an advantage's terms (a trajectory and a segment term, shaped rewards, segment ids;
//! an episode and a step term, step returns, step groups):
//!
//! [`Beacon::compute`](crate::estimator::Beacon::compute) and
//! [`Gigpo::compute`](crate::estimator::Gigpo::compute) return the full output
//! ([`BeaconOutput`], [`GigpoOutput`]); GiGPO's non-text anchors go through
//! [`Gigpo::compute_by_key`](crate::estimator::Gigpo::compute_by_key). They allocate their output:
//! the trait is the path that reuses buffers.
//!
//! # The trainer's path
//! [`estimate_into`](AdvantageEstimator::estimate_into) writes into buffers the caller keeps
//! across batches, in the caller's dtype, with scratch space in a [`Workspace`] the caller
//! also keeps: after the first batch of a given size it allocates nothing, through
//! `Box<dyn AdvantageEstimator>` too (`tests/allocations.rs` counts). Returns are written
//! only when asked for, and differ from the advantages only for GAE, turn-level GAE,
//! REINFORCE++, ReMax and OTB ([`has_returns`](AdvantageEstimator::has_returns)).
//! [`estimate`](AdvantageEstimator::estimate) allocates fresh `f64` arrays per call; at
//! trainer sizes (thousands of rows × 512 tokens) its extra time is the kernel mapping and
//! zeroing those fresh pages. On Linux the arrays are advised for transparent huge pages
//! (one fault per 2 MiB instead of per 4 KiB), which at C (30,720 × 512) took `grpo`'s
//! `estimate` from about 2.2× `estimate_into` to about 1.45× (`benches/trainer.rs`).
//! [`estimate_steps_into`](AdvantageEstimator::estimate_steps_into) is the step-row form of
//! the step-level estimators: one value per row, no token matrix; broadcast to tokens with
//! [`tensor::broadcast_into`](crate::tensor::broadcast_into).
//!
//! The verl estimators read each input matrix once (finiteness is checked inside the
//! kernels, and the eager checks only re-run to name the offending value) and write each
//! output element once. Every sum keeps verl's (and the previous release's) order of
//! additions, so outputs are bit-identical to the straightforward implementation
//! (`tests/it/fast_path_equivalence.rs`), except batch whitening's masked sums, which run in
//! eight partial sums per row (see [Batch whitening](#batch-whitening)).
//!
//! # Rows and groups
//! verl's estimators see one row per response (`index` = the row's uid). For single-turn data
//! build the batch with [`RolloutBatch::from_group_keys`](crate::RolloutBatch::from_group_keys) (each row its own trajectory). For
//! agent data rows are steps of trajectories; verl's estimators still group *rows* by uid, so a
//! group's statistics run over all rows of all its trajectories. Groups come from the batch's
//! interned ids: no key is hashed while estimating.
//!
//! ```
//! use beacon_rl::estimator::{EstimatorConfig, EstimatorInput};
//! use beacon_rl::RolloutBatch;
//!
//! // Two prompts, two responses each, 3 tokens per response, outcome reward on the last token.
//! let uids = ["p0", "p0", "p1", "p1"];
//! let rewards = [[0.0, 0.0, 1.0], [0.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 1.0]];
//! let mask = [[true, true, true], [true, true, false], [true, true, true], [true, false, false]];
//! let terminal_rewards = [1.0, 0.0, 1.0, 1.0];
//! let batch = RolloutBatch::from_group_keys(&uids, &terminal_rewards)?;
//!
//! let grpo = "grpo".parse::<EstimatorConfig>()?.build()?;
//! let input = EstimatorInput::new(&batch)
//!     .with_token_level_rewards(&rewards)
//!     .with_response_mask(&mask);
//! let out = grpo.estimate(&input)?;
//! // Group p0: row scores (reward sums) 1 and 0, mean 0.5, unbiased std 0.7071: (1 - 0.5) / (0.7071 + 1e-6).
//! assert!((out.advantages[[0, 0]] - 0.7071058).abs() < 1e-6);
//! assert_eq!(out.advantages[[1, 2]], 0.0); // masked token
//! // Group p1: equal row scores, zero advantage.
//! assert_eq!(out.advantages[[2, 0]], 0.0);
//! # Ok::<(), beacon_rl::Error>(())
//! ```
//!
//! # Audit against verl 0.9.1
//! Each estimator was re-read against verl 0.9.1's `verl/trainer/ppo/core_algos.py`,
//! `verl/utils/groupwise.py` and `verl/utils/torch_functional.py` for the conventions that
//! moved between verl releases (ε placement, floors, biased vs unbiased σ, singletons, masked
//! sums). One line per estimator:
//!
//! - `grpo`: ε added to σ (not σ²), `torch.std` unbiased, singleton μ = 0, σ = f32 1.0 (so
//!   ÷ f32(1 + ε)); no floor. Matches.
//! - `grpo_vectorized`: `group_mean_std(..., eps=0.0)`: **no variance floor** (verl 0.8 floored
//!   σ² at ε); two-pass f32 variance, singleton μ = 0, σ = 1, ε added to σ in f32. 0.1.0
//!   kept the floor; hand-computed tests pin its absence. uids grouped by
//!   equality, not parsed as integers (`grpo`'s deliberate difference).
//! - `grpo_passk`: σ unbiased, ε added to σ, the normalisation flag read from the config, < 2
//!   rows raises. Matches.
//! - `gdpo` (single reward): f32 weight 1.0 × `grpo`, then `masked_whiten(·) * mask`. Matches.
//! - `rloo`: s·n/(n−1) − μ·n/(n−1), singleton keeps its score. Matches.
//! - `rloo_vectorized`: (n·s − Σs)/max(n − 1, 1) where n > 1, singleton 0. Matches.
//! - `opo`: length-weighted baseline, singleton baseline 0 (all-empty masks: a documented
//!   deliberate difference). Matches.
//! - `reinforce_plus_plus`: running return carried through interior mask-0 spans (verl ≥ PR
//!   #7300), whitened, × mask. Matches.
//! - `reinforce_plus_plus_baseline`: s − μ (singleton μ = 0), broadcast, whitened, × mask.
//!   Matches.
//! - `remax`: unmasked reverse cumsum of masked rewards minus b·mask, no re-mask. Matches.
//! - `gpg`: α = f32(B / max(#nonzero, 1)) (the `alpha` argument ignored), unused σ. Matches.
//! - `gae`: whitened, not re-masked; returns = GAE + values. Matches.
//! - `optimal_token_baseline` / `tir_optimal_token_baseline`: ε = 1e-8 in the denominator,
//!   singleton baseline 0, zero tail, TIR drops empty rows from their group. Matches.
//! - `masked_whiten` (used by gae, reinforce_plus_plus(_baseline), gdpo): masked sums ignore
//!   values outside the mask (0.9.1's `torch.where` in `masked_sum`), μ = Σ/(n + 1e-8) and the
//!   Bessel factor n/(n − 1) in f32, `rsqrt(σ² + 1e-8)` (ε inside the root). Matches.
//!
//! # Batch whitening
//!
//! verl's `masked_whiten` (`verl.utils.torch_functional.masked_whiten`), used by `gae`,
//! `reinforce_plus_plus`, `reinforce_plus_plus_baseline` and `gdpo`.
//!
//! One mean and one variance over **all** masked tokens of the batch (not per row, not per
//! group), then every position (masked or not) is shifted and scaled:
//!
//! ```text
//! n    = Σ mask
//! μ    = Σ_{mask} x / (n + 1e-8)
//! σ²   = Σ_{mask} (x − μ)² / (n + 1e-8) · n / (n − 1)        (unbiased)
//! x'   = (x − μ) · 1 / √(σ² + 1e-8)
//! ```
//!
//! Used by GAE, REINFORCE++, REINFORCE++-baseline and GDPO.
//!
//! The masked sums Σx and Σ(x − μ)² have a fixed order of additions (part of the bits): per
//! row, eight partial sums, partial j adding the masked tokens t ≡ j (mod 8) left to right
//! from +0.0, combined as ((p0 + p4) + (p2 + p6)) + ((p1 + p5) + (p3 + p7)), and the row sums
//! added in row order. Release 0.1 summed left to right in one chain, so these four
//! estimators' outputs differ from 0.1 in the last bits (within the parity tolerance); the
//! result does not depend on the output dtype, the mask form or the `rayon` feature.
//!
//! # Peer behaviour reproduced
//! - verl's masks are int64 tensors, so `n + 1e-8` and the Bessel factor `n / (n − 1)` are
//!   computed in **float32** even when the values are float64: `n + 1e-8` rounds to `f32(n)`
//!   (exactly `n` below 2²⁴) and the factor is `f32(n) / f32(n − 1)` rounded to float32
//!   (e.g. 5/4 = 1.25 exactly, 4/3 = 1.3333334326744 instead of 1.3333333333333).
//! - verl raises `ValueError` when the mask holds 0 or 1 valid tokens; we return
//!   [`Error::Undefined`].
//! - Positions outside the mask are transformed too (GAE keeps them; other callers re-mask).
//!
//! # Deliberate difference
//! When finite inputs overflow Σx or Σ(x − μ)², verl silently returns zeros or NaN; we
//! recompute μ and σ in units of the masked values' max |x| (only then, so every finite result
//! keeps verl's bits), which gives the exact whitened values. When a whitened value itself
//! is ±inf (or the rescaled statistics are not representable) we return
//! [`Error::NonFinite`].

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::tensor::FloatViewMut;

mod beacon;
mod empg;
mod gae;
mod gigpo;
mod gpg;
mod grpo;
mod mt_grpo;
mod opo;
mod optimal_baseline;
mod reinforce;
mod remax;
mod rloo;
mod step_reinforce;
mod tree_grpo;
mod turn_gae;
mod turns;
mod whiten;

mod ablation;
mod config;
mod input;
mod kernel;
mod keys;
mod output;
mod workspace;

pub use crate::stats::{NormMode, SingletonRule};
#[cfg(test)]
pub(crate) use ablation::SplitMix64;
pub use ablation::{Ablation, BeaconAblationConfig};
pub use beacon::{
    config::{BeaconConfig, BeaconFlavour, SegmentBaseline},
    estimator::{Beacon, BeaconOutput},
};
pub use config::EstimatorConfig;
pub use empg::EmpgConfig;
pub use gae::GaeConfig;
pub use gigpo::{
    config::{GigpoConfig, StepGrouping},
    estimator::{Gigpo, GigpoOutput},
};
pub use gpg::GpgConfig;
pub use grpo::{GrpoConfig, GrpoStatistics};
pub use input::EstimatorInput;
pub(crate) use input::{report_non_finite_input, validate_deferred, FiniteCheck, StepScores};
#[cfg(test)]
pub(crate) use kernel::row_groups;
pub(crate) use kernel::{
    check_all_finite, check_matrix_shape, check_steps_out, estimate_via_steps, estimate_via_steps_fresh,
    fill_estimator, float_row, group_rows, mask_row, masked_counts, prefetch_line, row_groups_into,
    row_sums_to, select, Out, Prefetch, Tokens, LANES,
};
pub use mt_grpo::{MtGrpoConfig, TurnBaseline};
pub use optimal_baseline::{OptimalTokenBaselineConfig, ZeroTail};
pub use output::Advantages;
pub use reinforce::ReinforcePlusPlusConfig;
pub use step_reinforce::{Grouping, NormScope, StepReinforceConfig};
pub use tree_grpo::{TreeGrpoConfig, TreeGrpoVariant};
pub use turn_gae::TurnGaeConfig;
pub use workspace::Workspace;
pub(crate) use workspace::{InputBufs, Scratch, Stage};

/// An advantage estimator: turns one rollout batch into per-token advantages (and, where the
/// estimator defines them, returns).
///
/// Implementations are immutable (`&self`) and thread-safe, so one estimator can serve many
/// batches and threads. The trait is object-safe: [`EstimatorConfig::build`] returns a
/// `Box<dyn AdvantageEstimator>`. References, boxes and `Arc`s of estimators are estimators.
///
/// One method set for every estimator:
/// - [`estimate_into`](Self::estimate_into): the trainer's path. Writes `f32` or `f64`
///   advantages (and optionally returns) into caller buffers, reading the caller's dtypes
///   ([`EstimatorInput`]), with scratch space in a [`Workspace`] the caller keeps: no heap
///   allocation once the workspace has seen a batch this large.
/// - [`estimate`](Self::estimate): the same into fresh `f64` arrays.
/// - [`estimate_steps_into`](Self::estimate_steps_into): step-level estimators (BEACON, its
///   ablations, GiGPO, GRPO and RLOO on step rows) write one advantage per row, no token
///   matrix; the token broadcast is then [`tensor::broadcast_into`](crate::tensor::broadcast_into).
///
/// # Returns
/// Only GAE, turn-level GAE, REINFORCE++, ReMax and the optimal token baselines define
/// returns that differ from their advantages ([`has_returns`](Self::has_returns)). For every other estimator
/// (the outcome estimators, BEACON, GiGPO) the returns **equal the advantages**, as in verl;
/// pass `None` for them and use the advantages.
///
/// ```
/// use beacon_rl::estimator::EstimatorConfig;
/// use beacon_rl::estimator::{AdvantageEstimator, EstimatorInput};
/// use beacon_rl::RolloutBatch;
///
/// let batch = RolloutBatch::from_group_keys(&[0, 0, 0], &[1.0, 0.0, 0.5])?;
/// let rewards = [[1.0], [0.0], [0.5]];
/// let mask = [[true], [true], [true]];
/// let input = EstimatorInput::new(&batch).with_token_level_rewards(&rewards).with_response_mask(&mask);
/// let est: Box<dyn AdvantageEstimator> = EstimatorConfig::Rloo.build()?;
/// assert_eq!(est.name(), "rloo");
/// let out = est.estimate(&input)?;
/// // Row 0: 1.0 minus the mean of the others (0.0 + 0.5) / 2 = 0.75.
/// assert!((out.advantages[[0, 0]] - 0.75).abs() < 1e-12);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
pub trait AdvantageEstimator: Send + Sync {
    /// verl's `adv_estimator` string for this estimator (e.g. `"grpo"`).
    fn name(&self) -> &'static str;

    /// True when the estimator defines returns that differ from its advantages (GAE,
    /// `turn_gae`, REINFORCE++, ReMax, the optimal token baselines). Otherwise returns equal advantages
    /// and callers can skip them. Default: false.
    ///
    /// ```
    /// use beacon_rl::estimator::EstimatorConfig;
    /// assert!("gae".parse::<EstimatorConfig>()?.build()?.has_returns());
    /// assert!(!"grpo".parse::<EstimatorConfig>()?.build()?.has_returns());
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    fn has_returns(&self) -> bool {
        false
    }

    /// Computes advantages (and, when `returns` is given, returns) for every row into the
    /// caller's buffers: `f32` or `f64`, rows × L ([`EstimatorInput::output_dim`]).
    ///
    /// Every element of the given buffers is overwritten on success, so they need no clearing
    /// between calls; on error their contents are unspecified. `workspace` holds the scratch
    /// space: keep one per thread across batches and the call allocates nothing once it has
    /// seen a batch this large. Values are bit-identical whatever the buffers' dtype (each
    /// `f32` output is the `f64` value rounded once) and whatever the workspace's history.
    ///
    /// # Errors
    /// [`Error::MissingInput`] when a column the estimator needs is absent,
    /// [`Error::LengthMismatch`] when a column's shape disagrees with the batch (rows) or with
    /// `token_level_rewards` (columns), [`Error::InvalidMask`] for a response length past L,
    /// [`Error::MaskValue`] for an integer mask entry other than 0 and 1,
    /// [`Error::NonFinite`] for NaN/infinite inputs (index `row * L + t` for matrices) or when
    /// finite inputs overflow (into an `f32` buffer also when an output lies past `f32::MAX`,
    /// which would round to ∞: `what` ends in "(overflows f32)"), [`Error::Undefined`] where verl raises (or would silently
    /// return NaN), and [`Error::OutputShape`] when a buffer's shape is not the output's
    /// (checked once the inputs are validated).
    ///
    /// # Order of the checks
    /// The first error in this order is returned. The verl estimators check their inputs
    /// column by column, in the order of release 0.1 (pinned against that code by
    /// `tests/it/fast_path_equivalence.rs`): `token_level_rewards` (present, rows, then its
    /// values: finite, or for the outcome estimators finite row sums), then `response_mask`
    /// (present, shape, lengths; integer entries as they are read), then each further column
    /// (present, shape, finite; the outcome estimators' `row_scores`, when given, after the
    /// mask: length, finite, each equal to its row's token sum, `RowScoreMismatch`). So an
    /// earlier column's values come before a later column's shape: a NaN reward is reported before a missing or misshapen mask, and the outcome
    /// estimators sum the rewards before they compare the mask's L with theirs.
    /// This differs from the step path ([`estimate_steps_into`](Self::estimate_steps_into)),
    /// which checks every shape first. BEACON, GiGPO and the ablation run their step path's
    /// checks, in its order, and then check the mask (one row per batch row, lengths) and
    /// the buffers against it.
    ///
    /// ```
    /// use beacon_rl::estimator::{AdvantageEstimator, EstimatorConfig, EstimatorInput, Workspace};
    /// use beacon_rl::RolloutBatch;
    /// use ndarray::{array, Array2};
    ///
    /// // A trainer's dtypes: f32 rewards, an i64 mask, f32 advantages out.
    /// let batch = RolloutBatch::from_group_keys(&["p", "p"], &[0.0, 0.0])?;
    /// let rewards = array![[0.0f32, 1.0], [0.0, 0.0]];
    /// let mask = array![[1i64, 1], [1, 0]];
    /// let input = EstimatorInput::new(&batch).with_token_level_rewards(&rewards).with_response_mask(&mask);
    /// let grpo = "grpo".parse::<EstimatorConfig>()?.build()?;
    ///
    /// let mut ws = Workspace::default(); // kept across batches, like the buffer
    /// let mut adv = Array2::<f32>::from_elem((2, 2), f32::NAN);
    /// grpo.estimate_into(&input, (&mut adv).into(), None, &mut ws)?;
    /// let fresh = grpo.estimate(&input)?; // f64
    /// assert_eq!(adv, fresh.advantages.mapv(|x| x as f32));
    ///
    /// // A buffer of the wrong shape is a typed error.
    /// let mut short = Array2::<f64>::zeros((2, 1));
    /// assert!(grpo.estimate_into(&input, (&mut short).into(), None, &mut ws).is_err());
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    fn estimate_into(
        &self,
        input: &EstimatorInput<'_>,
        advantages: FloatViewMut<'_>,
        returns: Option<FloatViewMut<'_>>,
        workspace: &mut Workspace,
    ) -> Result<()>;

    /// [`estimate_into`](Self::estimate_into) into fresh `f64` arrays of
    /// [`EstimatorInput::output_dim`]; `returns` is `Some` only when
    /// [`has_returns`](Self::has_returns).
    ///
    /// At trainer sizes most of its extra time goes to the kernel mapping and zeroing fresh
    /// pages (advised for huge pages on Linux); a trainer keeps buffers and a [`Workspace`]
    /// and calls `estimate_into`.
    ///
    /// # Errors
    /// As [`estimate_into`](Self::estimate_into), and [`Error::CapacityExceeded`] when the
    /// output's rows × L (a [`MaskView::Lengths`](crate::tensor::MaskView::Lengths) mask's
    /// L is the caller's claim) overflows, exceeds `isize::MAX` bytes or cannot be allocated
    /// (then `requested ≤ limit`).
    fn estimate(&self, input: &EstimatorInput<'_>) -> Result<Advantages> {
        let dim = input.output_dim();
        let mut advantages = crate::huge_pages::zeros(dim)?;
        let mut returns = match self.has_returns() {
            true => Some(crate::huge_pages::zeros(dim)?),
            false => None,
        };
        self.estimate_into(
            input,
            FloatViewMut::F64(advantages.view_mut()),
            returns.as_mut().map(|r| FloatViewMut::F64(r.view_mut())),
            &mut Workspace::default(),
        )?;
        Ok(Advantages { advantages, returns })
    }

    /// Step-level estimators: one advantage per row into `advantages` (length = rows), no
    /// token matrix and no response mask read. BEACON (`beacon`, `beacon_official`,
    /// the `ablation` key of `beacon`), GiGPO, and the outcome estimators `grpo`, `grpo_vectorized`, `rloo`,
    /// `rloo_vectorized` on step rows (each row's score is the batch's terminal reward of its
    /// trajectory, grouped by uid over rows, as verl-agent runs them on step rows); and the
    /// turn-level estimators (`step_reinforce`, `mt_grpo`, `turn_gae`, `tree_grpo`: one turn per
    /// row, its reward from `step_rewards`), and `empg` (GRPO's row advantages modulated by
    /// `step_entropy`).
    ///
    /// Every one of them but the turn-level ones (which read their turn rewards, and check
    /// the rest as the others do) reads the terminal reward from the batch, or each row's own
    /// score from [`EstimatorInput::row_scores`] when given (verl-agent's penalised step rows, see
    /// [`with_row_scores`](EstimatorInput::with_row_scores)); when `token_level_rewards` are
    /// given too, each row's sum must equal the row's score
    /// (to a relative 1e-6: [`Error::TerminalRewardMismatch`]).
    ///
    /// # Errors
    /// [`Error::NotStepLevel`] for token-level estimators (the default);
    /// [`Error::OutputShape`] when `advantages` has not one entry per row;
    /// [`Error::TerminalRewardMismatch`] when given `token_level_rewards` disagree with the
    /// batch, [`Error::RowScoreMismatch`] when they disagree with `row_scores`;
    /// [`Error::InconsistentTerminalReward`] when the paper flavour of BEACON is given
    /// `row_scores` that differ within a trajectory; otherwise as
    /// [`estimate_into`](Self::estimate_into).
    ///
    /// # Order of the checks
    /// Every step-level estimator checks shapes before it reads a value, and returns the first
    /// error in this order: `NotStepLevel`; the output's length (`OutputShape`); the
    /// estimator's own columns, each present (`MissingInput`, `ConflictingInputs`) and of one
    /// entry per row (`LengthMismatch`): BEACON's `milestones`, GiGPO's `step_rewards` then
    /// its anchors (the outcome estimators have none); the length of `row_scores`, then the
    /// rows of `token_level_rewards`, each when given; then values: `row_scores` finite
    /// (`NonFinite`), the token sums against the rows' scores (`RowScoreMismatch` with
    /// `row_scores`, else `TerminalRewardMismatch`), then the estimator's own (the paper
    /// flavour's `InconsistentTerminalReward` for row scores that differ within a trajectory,
    /// GiGPO's non-finite `step_rewards`). `tests/it/step_rows.rs` pins it for every
    /// estimator. (The token-level
    /// [`estimate_into`](Self::estimate_into) of the verl estimators keeps release 0.1's
    /// column-by-column order instead; see its docs.)
    ///
    /// ```
    /// use beacon_rl::estimator::{AdvantageEstimator, EstimatorConfig, EstimatorInput, Workspace};
    /// use beacon_rl::tensor::broadcast_into;
    /// use beacon_rl::tensor::MaskView;
    /// use beacon_rl::RolloutBatch;
    /// use ndarray::Array2;
    ///
    /// // Two trajectories of one task, 2 and 1 steps, rewards 1 and 0.
    /// let batch = RolloutBatch::from_row_keys(&["t"; 3], &["a", "b", "a"], &[1.0, 0.0, 1.0])?;
    /// let grpo = "grpo".parse::<EstimatorConfig>()?.build()?;
    /// let mut ws = Workspace::default();
    /// let mut step = [0.0; 3];
    /// grpo.estimate_steps_into(&EstimatorInput::new(&batch), &mut step, &mut ws)?;
    /// assert!(step[0] > 0.0 && step[1] < 0.0 && step[2] == step[0]);
    ///
    /// // The token broadcast is a separate step, here under per-row response lengths.
    /// let mut tokens = Array2::<f32>::zeros((3, 4));
    /// broadcast_into(&step, MaskView::Lengths { lengths: &[4, 2, 0], cols: 4 }, &mut tokens)?;
    /// assert_eq!(tokens[[1, 1]], step[1] as f32);
    /// assert_eq!(tokens[[1, 2]], 0.0);
    ///
    /// let gae = "gae".parse::<EstimatorConfig>()?.build()?;
    /// assert!(gae.estimate_steps_into(&EstimatorInput::new(&batch), &mut step, &mut ws).is_err());
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    fn estimate_steps_into(
        &self,
        input: &EstimatorInput<'_>,
        advantages: &mut [f64],
        workspace: &mut Workspace,
    ) -> Result<()> {
        let _ = (input, advantages, workspace);
        Err(Error::NotStepLevel {
            estimator: self.name(),
        })
    }
}

macro_rules! forward_estimator {
    ($($wrapper:tt)*) => {
        impl<T: AdvantageEstimator + ?Sized> AdvantageEstimator for $($wrapper)* {
            fn name(&self) -> &'static str {
                (**self).name()
            }
            fn has_returns(&self) -> bool {
                (**self).has_returns()
            }
            fn estimate_into(
                &self,
                input: &EstimatorInput<'_>,
                advantages: FloatViewMut<'_>,
                returns: Option<FloatViewMut<'_>>,
                workspace: &mut Workspace,
            ) -> Result<()> {
                (**self).estimate_into(input, advantages, returns, workspace)
            }
            fn estimate(&self, input: &EstimatorInput<'_>) -> Result<Advantages> {
                (**self).estimate(input)
            }
            fn estimate_steps_into(
                &self,
                input: &EstimatorInput<'_>,
                advantages: &mut [f64],
                workspace: &mut Workspace,
            ) -> Result<()> {
                (**self).estimate_steps_into(input, advantages, workspace)
            }
        }
    };
}
forward_estimator!(&T);
forward_estimator!(Box<T>);
forward_estimator!(Arc<T>);

#[cfg(test)]
mod tests {
    use super::grpo::{Grpo, GrpoConfig};
    use super::*;
    use crate::batch::RolloutBatch;

    #[test]
    fn missing_and_misshapen_inputs_are_typed() {
        let batch = RolloutBatch::from_group_keys(&[0, 0], &[0.0, 1.0]).unwrap();
        let est = Grpo::new(GrpoConfig::default()).unwrap();
        let input = EstimatorInput::new(&batch);
        assert_eq!(
            est.estimate(&input),
            Err(Error::MissingInput("token_level_rewards"))
        );
        let rewards = [[0.0, 1.0], [0.0, 0.0]];
        let input = input.with_token_level_rewards(&rewards);
        assert_eq!(est.estimate(&input), Err(Error::MissingInput("response_mask")));
        let short_mask = [[true], [true]];
        assert!(matches!(
            est.estimate(&input.with_response_mask(&short_mask)),
            Err(Error::LengthMismatch {
                what: "response_mask columns",
                expected: 2,
                actual: 1
            })
        ));
        let three_rows = [[0.0, 1.0], [0.0, 0.0], [1.0, 1.0]];
        assert!(matches!(
            est.estimate(&EstimatorInput::new(&batch).with_token_level_rewards(&three_rows)),
            Err(Error::LengthMismatch {
                what: "token_level_rewards rows",
                expected: 2,
                actual: 3
            })
        ));
        let nan = [[0.0, 1.0], [f64::NAN, 0.0]];
        let mask = [[true, true], [true, true]];
        assert!(matches!(
            est.estimate(
                &EstimatorInput::new(&batch)
                    .with_token_level_rewards(&nan)
                    .with_response_mask(&mask)
            ),
            Err(Error::NonFinite {
                what: "token_level_rewards",
                index: 2,
                ..
            })
        ));
    }

    #[test]
    fn overflow_of_finite_inputs_is_reported() {
        let batch = RolloutBatch::from_group_keys(&[0, 0], &[0.0, 0.0]).unwrap();
        let rewards = [[f64::MAX, f64::MAX], [0.0, 0.0]];
        let mask = [[true, true], [true, true]];
        let input = EstimatorInput::new(&batch)
            .with_token_level_rewards(&rewards)
            .with_response_mask(&mask);
        for name in ["grpo", "rloo", "opo", "gpg", "reinforce_plus_plus_baseline"] {
            let est = name.parse::<EstimatorConfig>().unwrap().build().unwrap();
            assert!(
                matches!(est.estimate(&input), Err(Error::NonFinite { .. })),
                "{name}"
            );
        }
    }

    #[test]
    fn non_contiguous_views_give_the_same_result() {
        // The same rows × L data as a standard-layout array and as a transposed view of its
        // transpose (column-major): every estimator must agree exactly.
        let batch = RolloutBatch::from_group_keys(&[0, 0, 1, 1], &[0.0; 4]).unwrap();
        let rewards = ndarray::array![[0.0, 1.0, 0.5], [0.2, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.3]];
        let mask = ndarray::array![
            [true, true, false],
            [true, false, true],
            [true, true, true],
            [false, true, true]
        ];
        let values = rewards.mapv(|x| 0.5 - x);
        let rewards_cm = rewards.t().as_standard_layout().into_owned();
        let mask_cm = mask.t().as_standard_layout().into_owned();
        let values_cm = values.t().as_standard_layout().into_owned();
        let baselines = [0.1, 0.2, 0.3, 0.4];
        let standard = EstimatorInput::new(&batch)
            .with_token_level_rewards(&rewards)
            .with_response_mask(&mask)
            .with_values(&values)
            .with_old_log_probs(&values)
            .with_sum_pi_squared(&rewards)
            .with_reward_baselines(&baselines);
        let strided = EstimatorInput::new(&batch)
            .with_token_level_rewards(rewards_cm.t())
            .with_response_mask(mask_cm.t())
            .with_values(values_cm.t())
            .with_old_log_probs(values_cm.t())
            .with_sum_pi_squared(rewards_cm.t())
            .with_reward_baselines(&baselines);
        assert!(
            matches!(strided.token_level_rewards, Some(crate::tensor::FloatView::F64(v)) if v.to_slice().is_none())
        );
        for name in EstimatorConfig::VERL_NAMES {
            let est = name.parse::<EstimatorConfig>().unwrap().build().unwrap();
            assert_eq!(est.estimate(&standard), est.estimate(&strided), "{name}");
        }
    }

    #[test]
    fn group_rows_cover_agent_batches() {
        // Two trajectories of group "u" interleaved with one of group "v".
        let batch = RolloutBatch::from_row_keys(
            &["u", "v", "u", "u"],
            &["a", "c", "b", "a"],
            &[1.0, 0.0, 0.0, 1.0],
        )
        .unwrap();
        assert_eq!(group_rows(&batch, 0), &[0, 3, 2]);
        assert_eq!(group_rows(&batch, 1), &[1]);
        assert_eq!(row_groups(&batch), vec![0, 1, 0, 0]);
    }
}
