//! BEACON: milestone-anchored dual-scale advantages (paper §3, Algorithm 1).
//!
//! Given milestone flags, each trajectory is partitioned into segments (a milestone step
//! closes its segment; the steps after the last milestone form the unfinished segment; see
//! [`BeaconOutput::segments`]), rewards are shaped within completed segments (temporal decay
//! from each segment's milestone), and two advantages are combined per step:
//!
//! Â_{i,t} = w_traj · A^traj_i + λ · A^seg_{i,t}
//!
//! (w_traj = 1 in the paper; 0 is the "w/o trajectory-level advantage" ablation).
//!
//! # Paper flavour ([`BeaconConfig::paper`])
//!
//! - A^traj_i = (R_i − μ) / (σ + ε) over the G trajectories of the group, σ unbiased; a group of
//!   one trajectory follows [`SingletonRule`] (μ = 0, σ = 1 by default).
//! - For completed segment k of trajectory i: r_t = R_ms·γ^(t_k − t),
//!   G_k = { j : K_j ≥ k },  b_k = (1/|G_k|) Σ_{j∈G_k} R_k^(j) / |Seg_k^(j)|,
//!   A^seg_{i,t} = r_t − b_k.
//! - Steps of the unfinished segment get r_t = 0 and A^seg = 0: the paper defines no
//!   comparison for them, so they carry the trajectory term only.
//! - Defaults: γ = 0.95 and λ = 1 (the paper's Hyperparameters table); R_ms = 1 and ε = 1e-6,
//!   which the paper does not give (its terminal reward R(τ) is in {0, 1}).
//!
//! # The completion blind spot, and [`SegmentBaseline::Entered`]
//!
//! In the paper flavour, b_k averages over G_k, the rollouts that *completed* segment k, and
//! the steps of an unfinished segment get A^seg = 0. Over G_k the per-step means of A^seg sum
//! to zero, so completing a segment slower than the others earns negative segment credit,
//! while not completing it at all (running out of budget, or an action that ends the episode)
//! earns 0. While no rollout of a group succeeds, A^traj is 0 for all of them and this is the
//! only signal: quitting is never penalised. Constructed example (R_ms = 1, γ = 0.5, no
//! success, only real doors flagged):
//!
//! | rollout | flags | paper A^seg | `Entered` A^seg |
//! |---|---|---|---|
//! | a: door in 2 steps, 1 more step | `[·, m, ·]` | `[−0.375, 0.125, 0]` (sum −0.25) | `[−1/12, 5/12, 0]` |
//! | b: door in 1 step, 1 more step | `[m, ·]` | `[0.125, 0]` | `[5/12, 0]` |
//! | c: trapdoor (episode ends) | `[·]` | `[0]` | `[−7/12]` |
//!
//! Paper: b_1 = (0.75 + 1)/2 = 0.875 over {a, b}; c is in no G_k. `Entered`: c entered
//! segment 1 and did not finish it, so it counts with return 0: b_1 = (0.75 + 1 + 0)/3 = 7/12,
//! and its step gets 0 − b_1 (a unit test below).
//!
//! Why: r_t = R_ms·γ^(t_k − t) is the discounted return-to-go of a reward R_ms paid at the
//! milestone (0 if it is never reached), so Σ_{t∈Seg_k} ∇log π(a_t|s_t)(r_t − b) is the usual
//! reward-to-go policy-gradient term with baseline b. Averaged over every rollout that enters
//! segment k, the baseline part vanishes when b does not depend on the rollout, because
//! whether step t lies in segment k is decided before a_t. The paper keeps the completers
//! only: its expectation is the reward-to-go term minus b_k·∇P(complete segment k | entered
//! it), a push *away* from completing of size b_k ∈ (0, R_ms]. [`SegmentBaseline::Entered`]
//! keeps every rollout with a step in segment k (E_k ⊇ G_k; unfinished ones with return 0,
//! their steps getting 0 − b_k), so the baseline part is zero in expectation up to b_k's
//! 1/|E_k| share of the rollout's own return (the self-inclusion GRPO's group mean and the
//! paper's b_k also have). It fixes quitting, not misleading milestones: a flagged decoy that
//! completes a segment in one step still earns the most. `docs/completion-credit.md` has the
//! derivation and the testbed's measurements.
//!
//! # Official flavour ([`BeaconConfig::official`]): the paper's public code release (MiGPO)
//!
//! The release computes something different from the equations, and this flavour reproduces it
//! (parity with the release's own outputs is tested to 1e-5):
//!
//! - Statistics are over step *rows*, not trajectories. Every row of trajectory i carries
//!   score R_i, and the trajectory term normalises it against all rows of the group:
//!   `mean_norm` A = R_i − mean_rows, `mean_std_norm` (R_i − mean_rows)/(std_rows + ε).
//!   A trajectory with more steps therefore weighs more in μ. A group with a single row: μ = 0,
//!   σ = 1. Through the trait, the caller's
//!   [`row_scores`](crate::estimator::EstimatorInput::with_row_scores) replace R_i as each
//!   row's score (the release's `episode_norm_reward` sums each row's token rewards, which
//!   verl-agent's invalid-action penalty makes differ within a trajectory).
//! - Segment groups are all rows with the same (group, segment id) — completed *and*
//!   unfinished. Unfinished rows have r = 0 and get A^seg = 0 − mean ≤ 0, where the paper gives
//!   them 0. A singleton segment group gives 0. Same [`NormMode`] at both levels.
//! - Defaults: R_ms = 10, γ = 0.95, w = 1, ε = 1e-6, `mean_norm` (the release's ALFWorld
//!   scripts use γ = 0.9, w = 10).
//!
//! A worked difference: one group, trajectory a = [ms, ·] (R = 1), b = [·, ·, ·] (R = 0),
//! R_ms = 10, γ = 0.5.
//! Paper: A^traj = ±0.7071 (σ = 0.7071), a's segment 1 is alone in G_1 so b_1 = 10 and
//! A^seg(a, 0) = 0; every other step gets A^seg = 0.
//! Official (`mean_norm`): row mean = (2·1 + 3·0)/5 = 0.4, so A^traj = 0.6 for a, −0.4 for b;
//! segment 0 rows are a0 (r = 10) and b0, b1, b2 (unfinished, r = 0), mean 2.5, so
//! A^seg(a0) = 7.5, A^seg(b·) = −2.5; a's step 1 is alone in segment 1: A^seg = 0.
//! (This case is a unit test below.)

use crate::batch::RolloutBatch;
use crate::error::{Error, Range, Result};
use crate::estimator::{
    check_all_finite, estimate_via_steps, estimate_via_steps_fresh, AdvantageEstimator, Advantages,
    EstimatorInput, StepScores, Workspace,
};
use crate::milestone::check_flags;
use crate::partition;
use crate::shaping::DecayTable;
use crate::stats::{group_means, group_spreads, GroupStats, NormMode, SingletonRule};
use crate::tensor::FloatViewMut;

/// Which computation the estimator follows.
///
/// ```
/// use beacon_rl::estimator::beacon::BeaconFlavour;
/// use beacon_rl::estimator::NormMode;
/// let f = BeaconFlavour::Official { mode: NormMode::MeanStdNorm };
/// assert_ne!(f, BeaconFlavour::Paper);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum BeaconFlavour {
    /// The paper's equations: statistics over trajectories, segment baseline over G_k,
    /// unfinished segment A^seg = 0.
    Paper,
    /// The public code release: statistics over step rows, segment groups by (group, segment
    /// id) including unfinished rows, `mode` at both levels.
    Official {
        /// Normalisation at both levels.
        mode: NormMode,
    },
}

/// Which rollouts form the paper flavour's segment baseline b_k, and what the steps of an
/// unfinished segment get (see the module docs, "The completion blind spot").
///
/// ```
/// use beacon_rl::estimator::beacon::{BeaconConfig, SegmentBaseline};
/// assert_eq!(BeaconConfig::paper().segment_baseline, SegmentBaseline::Completed);
/// let c = BeaconConfig::paper().with_segment_baseline(SegmentBaseline::Entered);
/// assert_eq!(c.segment_baseline, SegmentBaseline::Entered);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum SegmentBaseline {
    /// The paper: b_k over G_k = { j : K_j ≥ k }, the rollouts that completed segment k; the
    /// steps of an unfinished segment get A^seg = 0.
    #[default]
    Completed,
    /// Completion credit: b_k over E_k, the rollouts with at least one step in segment k,
    /// where a rollout that entered segment k and did not finish it counts with shaped return
    /// 0; its unfinished steps get A^seg = 0 − b_k. Paper flavour only.
    Entered,
}

impl SegmentBaseline {
    /// True for the paper's [`Completed`](Self::Completed) (the default, which serde omits).
    pub fn is_completed(&self) -> bool {
        *self == Self::Completed
    }
}

/// BEACON parameters. Build from a preset and adjust fields; [`Beacon::new`] validates.
///
/// ```
/// use beacon_rl::estimator::beacon::{Beacon, BeaconConfig};
/// let mut cfg = BeaconConfig::paper();
/// cfg.segment_decay = 0.9;
/// let beacon = Beacon::new(cfg)?;
/// assert_eq!(beacon.config().segment_decay, 0.9);
///
/// cfg.segment_decay = 1.5; // γ must be in [0, 1]
/// assert!(Beacon::new(cfg).is_err());
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
#[non_exhaustive]
pub struct BeaconConfig {
    /// Paper equations or the release's behaviour.
    pub flavour: BeaconFlavour,
    /// R_ms > 0: the shaped reward of a milestone step. The paper gives no value; the paper
    /// preset uses 1.0 (the scale of its R(τ) ∈ {0, 1}), the release 10.0.
    pub milestone_reward: f64,
    /// γ ∈ [0, 1]: temporal decay within a segment. Default 0.95.
    pub segment_decay: f64,
    /// λ ≥ 0: weight of the segment-level advantage. Default 1.0.
    pub segment_weight: f64,
    /// ≥ 0: weight of the trajectory-level advantage. Default 1.0 (0 = the paper's
    /// "w/o trajectory-level advantage" ablation).
    pub trajectory_weight: f64,
    /// ε > 0 added to σ. Default 1e-6.
    pub std_eps: f64,
    /// Trajectory term of a group with one trajectory (paper flavour; the release always
    /// passes the value through). Default [`SingletonRule::PassThrough`].
    pub singleton: SingletonRule,
    /// Paper flavour: which rollouts form b_k. Default [`SegmentBaseline::Completed`] (the
    /// paper); [`SegmentBaseline::Entered`] credits completing a segment against not
    /// completing it. Serde omits the default.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "SegmentBaseline::is_completed")
    )]
    pub segment_baseline: SegmentBaseline,
}

impl BeaconConfig {
    /// The paper's equations and hyperparameters: γ = 0.95, λ = 1 (its Table of
    /// hyperparameters), and R_ms = 1, ε = 1e-6, which the paper leaves open.
    ///
    /// ```
    /// use beacon_rl::estimator::beacon::{BeaconConfig, BeaconFlavour};
    /// let c = BeaconConfig::paper();
    /// assert_eq!((c.flavour, c.milestone_reward, c.segment_decay), (BeaconFlavour::Paper, 1.0, 0.95));
    /// ```
    pub fn paper() -> Self {
        Self {
            flavour: BeaconFlavour::Paper,
            milestone_reward: 1.0,
            segment_decay: 0.95,
            segment_weight: 1.0,
            trajectory_weight: 1.0,
            std_eps: 1e-6,
            singleton: SingletonRule::PassThrough,
            segment_baseline: SegmentBaseline::Completed,
        }
    }

    /// The public code release's defaults: R_ms = 10, γ = 0.95, w = 1, `mean_norm`.
    ///
    /// ```
    /// use beacon_rl::estimator::beacon::{BeaconConfig, BeaconFlavour};
    /// use beacon_rl::estimator::NormMode;
    /// let c = BeaconConfig::official();
    /// assert_eq!(c.flavour, BeaconFlavour::Official { mode: NormMode::MeanNorm });
    /// assert_eq!(c.milestone_reward, 10.0);
    /// ```
    pub fn official() -> Self {
        Self {
            flavour: BeaconFlavour::Official {
                mode: NormMode::MeanNorm,
            },
            milestone_reward: 10.0,
            ..Self::paper()
        }
    }

    /// The release's ALFWorld scripts: [`official`](Self::official) with γ = 0.9, w = 10.
    ///
    /// ```
    /// use beacon_rl::estimator::beacon::BeaconConfig;
    /// let c = BeaconConfig::official_alfworld();
    /// assert_eq!((c.segment_decay, c.segment_weight), (0.9, 10.0));
    /// ```
    pub fn official_alfworld() -> Self {
        Self {
            segment_decay: 0.9,
            segment_weight: 10.0,
            ..Self::official()
        }
    }

    /// Checks every parameter's range.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the first parameter out of range: γ ∉ [0, 1], R_ms ≤ 0,
    /// λ < 0, trajectory weight < 0, ε ≤ 0, or any non-finite value; `segment_baseline`
    /// (value 1, for `entered`) with the official flavour, whose segment groups hold the
    /// unfinished rows already.
    ///
    /// ```
    /// use beacon_rl::estimator::beacon::BeaconConfig;
    /// use beacon_rl::Error;
    /// let mut c = BeaconConfig::paper();
    /// c.std_eps = 0.0;
    /// assert!(matches!(c.validate(), Err(Error::InvalidConfig { name: "std_eps", .. })));
    /// ```
    pub fn validate(&self) -> Result<()> {
        Range::POSITIVE.check("milestone_reward", self.milestone_reward)?;
        Range::UNIT.check("segment_decay", self.segment_decay)?;
        Range::NON_NEGATIVE.check("segment_weight", self.segment_weight)?;
        Range::NON_NEGATIVE.check("trajectory_weight", self.trajectory_weight)?;
        Range::POSITIVE.check("std_eps", self.std_eps)?;
        if self.segment_baseline == SegmentBaseline::Entered && self.flavour != BeaconFlavour::Paper {
            return Err(Error::InvalidConfig {
                name: "segment_baseline",
                value: 1.0,
                expected: "completed with the official flavour (its segment groups include unfinished rows)",
            });
        }
        Ok(())
    }
}

/// Deserialises a [`BeaconConfig`] whose omitted fields take `preset`'s values, so a config file
/// naming `beacon_official` gets the release's defaults (R_ms = 10), not the paper's.
#[cfg(feature = "serde")]
pub(crate) fn deserialize_over_preset<'de, D>(
    preset: BeaconConfig,
    d: D,
) -> std::result::Result<BeaconConfig, D::Error>
where
    D: serde::Deserializer<'de>,
{
    deserialize_patch(|_| preset, d)
}

/// Deserialises a [`BeaconConfig`] whose omitted fields take the preset of its `flavour`
/// ([`BeaconConfig::official`] for `official`, else [`BeaconConfig::paper`]): for a
/// configuration that may hold either flavour (an ablation's `base`).
#[cfg(feature = "serde")]
pub(crate) fn deserialize_over_flavour_preset<'de, D>(d: D) -> std::result::Result<BeaconConfig, D::Error>
where
    D: serde::Deserializer<'de>,
{
    deserialize_patch(
        |flavour| match flavour {
            Some(BeaconFlavour::Official { .. }) => BeaconConfig::official(),
            _ => BeaconConfig::paper(),
        },
        d,
    )
}

/// The fields given, over the preset `preset(flavour given)` picks.
#[cfg(feature = "serde")]
fn deserialize_patch<'de, D>(
    preset: impl FnOnce(Option<BeaconFlavour>) -> BeaconConfig,
    d: D,
) -> std::result::Result<BeaconConfig, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Patch {
        flavour: Option<BeaconFlavour>,
        milestone_reward: Option<f64>,
        segment_decay: Option<f64>,
        segment_weight: Option<f64>,
        trajectory_weight: Option<f64>,
        std_eps: Option<f64>,
        singleton: Option<SingletonRule>,
        segment_baseline: Option<SegmentBaseline>,
    }
    let p = <Patch as serde::Deserialize>::deserialize(d)?;
    let preset = preset(p.flavour);
    Ok(BeaconConfig {
        flavour: p.flavour.unwrap_or(preset.flavour),
        milestone_reward: p.milestone_reward.unwrap_or(preset.milestone_reward),
        segment_decay: p.segment_decay.unwrap_or(preset.segment_decay),
        segment_weight: p.segment_weight.unwrap_or(preset.segment_weight),
        trajectory_weight: p.trajectory_weight.unwrap_or(preset.trajectory_weight),
        std_eps: p.std_eps.unwrap_or(preset.std_eps),
        singleton: p.singleton.unwrap_or(preset.singleton),
        segment_baseline: p.segment_baseline.unwrap_or(preset.segment_baseline),
    })
}

impl Default for BeaconConfig {
    /// [`BeaconConfig::paper`].
    fn default() -> Self {
        Self::paper()
    }
}

crate::setters::with_setters! {
    BeaconConfig, "use beacon_rl::estimator::beacon::{BeaconConfig, BeaconFlavour, SegmentBaseline}; use beacon_rl::estimator::{NormMode, SingletonRule};", BeaconConfig::paper();
    /// Sets the flavour (default [`BeaconFlavour::Paper`]; the presets set it).
    with_flavour(flavour: BeaconFlavour) = BeaconFlavour::Official { mode: NormMode::MeanNorm };
    /// Sets R_ms, the shaped reward of a milestone step (default 1.0, release 10.0; > 0).
    with_milestone_reward(milestone_reward: f64) = 10.0;
    /// Sets γ, the temporal decay within a segment (default 0.95; in [0, 1]).
    with_segment_decay(segment_decay: f64) = 0.9;
    /// Sets λ, the weight of the segment-level advantage (default 1.0; ≥ 0).
    with_segment_weight(segment_weight: f64) = 10.0;
    /// Sets the weight of the trajectory-level advantage (default 1.0; ≥ 0).
    with_trajectory_weight(trajectory_weight: f64) = 0.0;
    /// Sets ε added to σ (default 1e-6; > 0).
    with_std_eps(std_eps: f64) = 1e-8;
    /// Sets the trajectory term of a single-trajectory group (default
    /// [`SingletonRule::PassThrough`]).
    with_singleton(singleton: SingletonRule) = SingletonRule::Zero;
    /// Sets which rollouts form the paper flavour's segment baseline (default
    /// [`SegmentBaseline::Completed`], the paper).
    with_segment_baseline(segment_baseline: SegmentBaseline) = SegmentBaseline::Entered;
}

/// The BEACON estimator with a validated configuration.
///
/// ```
/// use beacon_rl::estimator::beacon::{Beacon, BeaconConfig};
/// use beacon_rl::RolloutBatch;
///
/// // One task, two trajectories: "a" succeeds (2 steps, milestone at step 0),
/// // "b" fails (2 steps, no milestone).
/// let batch = RolloutBatch::from_row_keys(&["task"; 4], &["a", "a", "b", "b"], &[1.0, 1.0, 0.0, 0.0])?;
/// let flags = [true, false, false, false];
/// let out = Beacon::new(BeaconConfig::paper())?.compute(&batch, &flags)?;
///
/// // A^traj = ±(0.5 / (0.7071 + 1e-6)); a's milestone step is alone in G_1, so A^seg = 0 there.
/// assert!((out.trajectory_advantages[0] - 0.70710578).abs() < 1e-6);
/// assert_eq!(out.segment_advantages, vec![0.0; 4]);
/// assert_eq!(out.segments, vec![0, 1, 0, 0]);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Beacon {
    config: BeaconConfig,
}

/// Per-row results of [`Beacon::compute`], all in the caller's row order.
///
/// ```
/// use beacon_rl::estimator::beacon::BeaconOutput;
/// let out = BeaconOutput::default();
/// assert!(out.advantages.is_empty());
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct BeaconOutput {
    /// Â = w_traj·A^traj + λ·A^seg.
    pub advantages: Vec<f64>,
    /// A^traj of the row's trajectory (official flavour: of the row).
    pub trajectory_advantages: Vec<f64>,
    /// A^seg of the row.
    pub segment_advantages: Vec<f64>,
    /// Shaped reward r_t (0 in the unfinished segment).
    pub shaped_rewards: Vec<f64>,
    /// 0-based segment id: the number of milestone steps strictly before the step.
    pub segments: Vec<usize>,
    /// The milestone flag of the row (a copy of the input).
    pub milestones: Vec<bool>,
}

/// Reusable scratch space for [`Beacon::advantages_into`]; buffers grow to the largest batch seen
/// and are then reused without allocating.
///
/// ```
/// use beacon_rl::estimator::beacon::BeaconWorkspace;
/// let ws = BeaconWorkspace::default();
/// # drop(ws);
/// ```
#[derive(Debug, Clone, Default)]
pub struct BeaconWorkspace {
    table: DecayTable,
    /// Per internal step: milestone flag, segment id, shaped reward, A^traj, A^seg.
    flags: Vec<bool>,
    seg: Vec<usize>,
    reward: Vec<f64>,
    traj: Vec<f64>,
    seg_adv: Vec<f64>,
    /// Per-group scratch, one per chunk of groups (one for the serial path; under the `rayon`
    /// feature one per pool thread, kept and reused across calls).
    scratch: Vec<GroupScratch>,
    /// With the caller's `row_scores`: each row's score in internal step order, and each
    /// trajectory's score (its first row's), in batch order.
    row_scores: Vec<f64>,
    traj_scores: Vec<f64>,
    /// The milestone flags a random Table 3 row draws (per caller row), kept across calls by
    /// [`BeaconAblation`](crate::ablation::BeaconAblation)'s workspace entry points.
    pub(crate) ablation_flags: Vec<bool>,
}

/// Scratch of one group at a time.
#[derive(Debug, Clone, Default)]
struct GroupScratch {
    /// Paper flavour, per segment id within the current group: Σ, count, min and max of
    /// R_k/|Seg_k|.
    sum: Vec<f64>,
    count: Vec<usize>,
    lo: Vec<f64>,
    hi: Vec<f64>,
    /// Official flavour: statistics of each (group, segment id).
    seg_stats: Vec<GroupStats>,
}

/// The internal steps `base..base + len` of a run of whole groups (every column indexed by
/// step − base), with the scratch of the chunk that runs them.
struct Part<'a> {
    base: usize,
    table: &'a DecayTable,
    /// Each trajectory's score (absolute trajectory index): R(τ), or its first row's score.
    traj_scores: &'a [f64],
    /// The caller's row scores in internal step order (absolute step index), when given.
    row_scores: Option<&'a [f64]>,
    flags: &'a [bool],
    seg: &'a mut [usize],
    reward: &'a mut [f64],
    traj: &'a mut [f64],
    seg_adv: &'a mut [f64],
    sum: &'a mut Vec<f64>,
    count: &'a mut Vec<usize>,
    lo: &'a mut Vec<f64>,
    hi: &'a mut Vec<f64>,
    seg_stats: &'a mut Vec<GroupStats>,
}

/// Internal steps per chunk below which running BEACON's groups in parallel does not pay.
const MIN_STEPS_PER_CHUNK: usize = 4096;

impl Beacon {
    /// Validates `config` and builds the estimator.
    ///
    /// # Errors
    /// See [`BeaconConfig::validate`].
    ///
    /// ```
    /// use beacon_rl::estimator::beacon::{Beacon, BeaconConfig};
    /// assert!(Beacon::new(BeaconConfig::official()).is_ok());
    /// ```
    pub fn new(config: BeaconConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self { config })
    }

    /// The validated configuration.
    ///
    /// ```
    /// use beacon_rl::estimator::beacon::{Beacon, BeaconConfig};
    /// let b = Beacon::new(BeaconConfig::paper())?;
    /// assert_eq!(b.config().segment_weight, 1.0);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn config(&self) -> &BeaconConfig {
        &self.config
    }

    /// Computes per-row advantages and their parts. `milestones[r]` flags caller row `r`.
    ///
    /// The trajectory term reads each trajectory's episode reward R(τ) from the batch. Rows
    /// that carry scores of their own (verl-agent's invalid-action penalty) go through the
    /// trait instead: [`estimate_steps_into`](crate::estimator::AdvantageEstimator::estimate_steps_into)
    /// with [`EstimatorInput::with_row_scores`](crate::estimator::EstimatorInput::with_row_scores),
    /// whose advantages these parts then do not add up to.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] when `milestones.len() != batch.num_steps()`;
    /// [`Error::NonFinite`] when a result overflows (finite but extreme rewards or weights).
    ///
    /// ```
    /// use beacon_rl::estimator::beacon::{Beacon, BeaconConfig};
    /// use beacon_rl::RolloutBatch;
    /// let batch = RolloutBatch::from_blocks(2, &[2, 2], vec![1.0, 0.0])?;
    /// let out = Beacon::new(BeaconConfig::official())?.compute(&batch, &[true, false, false, false])?;
    /// assert_eq!(out.shaped_rewards, vec![10.0, 0.0, 0.0, 0.0]);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn compute(&self, batch: &RolloutBatch, milestones: &[bool]) -> Result<BeaconOutput> {
        let mut out = BeaconOutput::default();
        self.compute_into(batch, milestones, &mut BeaconWorkspace::default(), &mut out)?;
        Ok(out)
    }

    /// Like [`compute`](Self::compute), reusing `out`'s and `ws`'s buffers (no allocation
    /// once they are large enough).
    ///
    /// # Errors
    /// As [`compute`](Self::compute).
    ///
    /// ```
    /// use beacon_rl::estimator::beacon::{Beacon, BeaconConfig, BeaconOutput, BeaconWorkspace};
    /// use beacon_rl::RolloutBatch;
    /// let beacon = Beacon::new(BeaconConfig::paper())?;
    /// let (mut ws, mut out) = (BeaconWorkspace::default(), BeaconOutput::default());
    /// let batch = RolloutBatch::from_blocks(2, &[3, 3], vec![1.0, 0.0])?;
    /// beacon.compute_into(&batch, &[false, true, false, false, false, false], &mut ws, &mut out)?;
    /// assert_eq!(out.segments, vec![0, 0, 1, 0, 0, 0]);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn compute_into(
        &self,
        batch: &RolloutBatch,
        milestones: &[bool],
        ws: &mut BeaconWorkspace,
        out: &mut BeaconOutput,
    ) -> Result<()> {
        check_flags(batch, milestones)?;
        let n = batch.num_steps();
        for v in [
            &mut out.advantages,
            &mut out.trajectory_advantages,
            &mut out.segment_advantages,
            &mut out.shaped_rewards,
        ] {
            v.resize(n, 0.0);
        }
        out.segments.resize(n, 0);
        out.milestones.clear();
        out.milestones.extend_from_slice(milestones);
        self.run(batch, milestones, StepScores::of_batch(batch), ws);
        let rows = batch.step_rows();
        for (s, &r) in rows.iter().enumerate() {
            out.trajectory_advantages[r] = ws.traj[s];
            out.segment_advantages[r] = ws.seg_adv[s];
            out.shaped_rewards[r] = ws.reward[s];
            out.segments[r] = ws.seg[s];
            out.advantages[r] = self.combine(ws.traj[s], ws.seg_adv[s]);
        }
        // Finite inputs and a valid config can still overflow (rewards near f64::MAX, R_ms
        // summed over a long segment, a huge weight): never return such a value as Ok.
        check_all_finite(
            "beacon trajectory_advantages (overflow)",
            &out.trajectory_advantages,
        )?;
        check_all_finite("beacon segment_advantages (overflow)", &out.segment_advantages)?;
        check_all_finite("beacon advantages (overflow)", &out.advantages)?;
        Ok(())
    }

    /// Writes only the combined per-row advantages into `advantages` (length = rows).
    /// Allocation-free once `ws` has seen a batch this large.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] for the flags, [`Error::OutputShape`] for the buffer,
    /// [`Error::NonFinite`] when a result overflows.
    ///
    /// ```
    /// use beacon_rl::estimator::beacon::{Beacon, BeaconConfig, BeaconWorkspace};
    /// use beacon_rl::RolloutBatch;
    /// let beacon = Beacon::new(BeaconConfig::paper())?;
    /// let batch = RolloutBatch::from_blocks(2, &[1, 1], vec![1.0, 0.0])?;
    /// let mut adv = [0.0; 2];
    /// beacon.advantages_into(&batch, &[false, false], &mut BeaconWorkspace::default(), &mut adv)?;
    /// assert!(adv[0] > 0.0 && adv[1] < 0.0);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn advantages_into(
        &self,
        batch: &RolloutBatch,
        milestones: &[bool],
        ws: &mut BeaconWorkspace,
        advantages: &mut [f64],
    ) -> Result<()> {
        check_flags(batch, milestones)?;
        crate::error::check_out_len("advantages", batch.num_steps(), advantages.len())?;
        self.advantages_with(batch, milestones, StepScores::of_batch(batch), ws, advantages)
    }

    /// [`advantages_into`](Self::advantages_into) with each row's score from `scores` (checked
    /// by the caller, as are the flags' and the buffer's lengths).
    fn advantages_with(
        &self,
        batch: &RolloutBatch,
        milestones: &[bool],
        scores: StepScores<'_>,
        ws: &mut BeaconWorkspace,
        advantages: &mut [f64],
    ) -> Result<()> {
        self.run(batch, milestones, scores, ws);
        for (s, &r) in batch.step_rows().iter().enumerate() {
            advantages[r] = self.combine(ws.traj[s], ws.seg_adv[s]);
        }
        // As in `compute_into`: an overflow is an error, never an `Ok` output.
        check_all_finite("beacon advantages (overflow)", advantages)
    }

    #[inline]
    fn combine(&self, traj: f64, seg: f64) -> f64 {
        self.config.trajectory_weight * traj + self.config.segment_weight * seg
    }

    /// Fills the workspace's per-internal-step columns.
    fn run(
        &self,
        batch: &RolloutBatch,
        milestones: &[bool],
        scores: StepScores<'_>,
        ws: &mut BeaconWorkspace,
    ) {
        let n = batch.num_steps();
        ws.flags.resize(n, false);
        batch.gather_into(milestones, &mut ws.flags);
        if let Some(rows) = scores.per_row() {
            ws.row_scores.resize(n, 0.0);
            batch.gather_into(rows, &mut ws.row_scores);
            ws.traj_scores.clear();
            ws.traj_scores
                .extend((0..batch.num_trajectories()).map(|j| scores.trajectory(j)));
        }
        ws.seg.resize(n, 0);
        ws.reward.resize(n, 0.0);
        ws.traj.resize(n, 0.0);
        ws.seg_adv.resize(n, 0.0);
        let offs = batch.trajectory_offsets();
        let max_len = offs.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
        let c = &self.config;
        ws.table.prepare(c.milestone_reward, c.segment_decay, max_len);
        let chunks = crate::parallel::chunk_count(n, MIN_STEPS_PER_CHUNK);
        if ws.scratch.len() < chunks {
            ws.scratch.resize_with(chunks, GroupScratch::default);
        }
        // Segment ids never exceed the trajectory length.
        for sc in &mut ws.scratch[..chunks] {
            sc.sum.resize(max_len + 1, 0.0);
            sc.count.resize(max_len + 1, 0);
            sc.lo.resize(max_len + 1, 0.0);
            sc.hi.resize(max_len + 1, 0.0);
        }
        let (table, flags) = (&ws.table, &ws.flags[..]);
        let (traj_scores, row_scores) = match scores.per_row() {
            Some(_) => (&ws.traj_scores[..], Some(&ws.row_scores[..])),
            None => (batch.terminal_rewards(), None),
        };
        let (first, rest) = ws.scratch.split_at_mut(1);
        let GroupScratch {
            sum,
            count,
            lo,
            hi,
            seg_stats,
        } = &mut first[0];
        let whole = Part {
            base: 0,
            table,
            traj_scores,
            row_scores,
            flags,
            seg: &mut ws.seg,
            reward: &mut ws.reward,
            traj: &mut ws.traj,
            seg_adv: &mut ws.seg_adv,
            sum,
            count,
            lo,
            hi,
            seg_stats,
        };
        let groups = 0..batch.num_groups();
        if chunks <= 1 {
            self.groups(batch, groups, whole);
            return;
        }
        // Chunks of whole groups with about n / chunks steps each; each chunk owns its groups'
        // steps (contiguous) and one scratch.
        let (goffs, mut bounds) = (batch.group_offsets(), [0; crate::parallel::MAX_CHUNKS + 1]);
        let step_of = |g: usize| offs[goffs[g]];
        let bounds = crate::parallel::balance(groups.end, chunks, step_of, &mut bounds);
        // A part holds its first chunk's scratch; `pool` those of its other chunks.
        crate::parallel::for_chunks(
            bounds,
            (whole, rest),
            &|(p, pool): (Part<'_>, &mut [GroupScratch]), g, left| {
                let (pool_a, pool_b) = pool.split_at_mut(left - 1);
                let Some((first_b, pool_b)) = pool_b.split_first_mut() else {
                    unreachable!("one scratch per chunk")
                };
                let (a, b) = p.split(step_of(g), first_b);
                ((a, pool_a), (b, pool_b))
            },
            &|c, (p, _)| self.groups(batch, bounds[c]..bounds[c + 1], p),
        );
    }

    /// Runs groups `groups` (whose steps `part` covers).
    fn groups(&self, batch: &RolloutBatch, groups: std::ops::Range<usize>, mut part: Part<'_>) {
        for g in groups {
            let trajs = batch.group_trajectories(g);
            match self.config.flavour {
                BeaconFlavour::Paper => self.paper_group(batch, trajs, &mut part),
                BeaconFlavour::Official { mode } => self.official_group(batch, trajs, mode, &mut part),
            }
        }
    }

    /// Shapes rewards and assigns segment ids for one trajectory (internal steps `lo..hi`);
    /// returns K, its number of milestones.
    fn shape_trajectory(ws: &mut Part<'_>, lo: usize, hi: usize) -> usize {
        let (seg, reward, table) = (&mut ws.seg[lo..hi], &mut ws.reward[lo..hi], ws.table);
        partition::for_each_step_rev(&ws.flags[lo..hi], |t, k, distance| {
            seg[t] = k;
            reward[t] = match distance {
                // The table covers the longest trajectory; NaN (caught by the output check)
                // rather than a panic if that invariant ever broke.
                Some(d) => table.reward(d).unwrap_or(f64::NAN),
                None => 0.0,
            };
        })
    }

    fn paper_group(&self, batch: &RolloutBatch, trajs: std::ops::Range<usize>, ws: &mut Part<'_>) {
        let c = &self.config;
        let offs = batch.trajectory_offsets();
        // Steps are indexed within the part.
        let b = ws.base;
        // R(τ), or each trajectory's row score (its rows agree: checked by the caller).
        let traj_scores = ws.traj_scores;
        let rewards = &traj_scores[trajs.clone()];
        // Trajectory level: GRPO over the group's terminal rewards.
        let (mean, std) = if rewards.len() == 1 {
            (0.0, 1.0)
        } else {
            let s = GroupStats::of(rewards);
            (s.mean, s.std)
        };
        let singleton_zero = rewards.len() == 1 && c.singleton == SingletonRule::Zero;

        // Segment level, pass 1: per-step mean return R_k/|Seg_k| summed over G_k (E_k under
        // `Entered`: an unfinished segment with steps counts with return 0).
        let entered = c.segment_baseline == SegmentBaseline::Entered;
        let mut max_k = 0;
        for j in trajs.clone() {
            let (lo, hi) = (offs[j] - b, offs[j + 1] - b);
            Self::shape_trajectory(ws, lo, hi);
            let completed = partition::completed_lengths(&ws.flags[lo..hi])
                .map(|len| ws.table.mean_return(len).unwrap_or(f64::NAN));
            // Steps after the last milestone: a segment entered and not finished.
            let unfinished = (entered && !ws.flags[hi - 1]).then_some(0.0);
            for (k, m) in completed.chain(unfinished).enumerate() {
                if k >= max_k {
                    ws.sum[k] = 0.0;
                    ws.count[k] = 0;
                    ws.lo[k] = f64::INFINITY;
                    ws.hi[k] = f64::NEG_INFINITY;
                    max_k = k + 1;
                }
                ws.sum[k] += m;
                ws.count[k] += 1;
                ws.lo[k] = ws.lo[k].min(m);
                ws.hi[k] = ws.hi[k].max(m);
            }
        }
        // Pass 2: b_k and the advantages. b_k is a mean of per-step returns, each in
        // [R_ms·γ^(L−1), R_ms] ⊆ [0, R_ms]: kept in [min, max] of them, so that equal returns
        // (γ = 1, or equal lengths) give exactly that return, as the official flavour's means.
        for k in 0..max_k {
            let mean = ws.sum[k] / ws.count[k] as f64;
            ws.sum[k] = if mean.is_finite() {
                mean.clamp(ws.lo[k], ws.hi[k])
            } else {
                mean
            };
        }
        for (j, &r) in trajs.zip(rewards) {
            let a_traj = if singleton_zero {
                0.0
            } else {
                (r - mean) / (std + c.std_eps)
            };
            let (lo, hi) = (offs[j] - b, offs[j + 1] - b);
            let completed = ws.seg[hi - 1] + usize::from(ws.flags[hi - 1]);
            for s in lo..hi {
                ws.traj[s] = a_traj;
                let k = ws.seg[s];
                ws.seg_adv[s] = if k < completed || entered {
                    // Unfinished steps (k = completed) have r = 0: 0 − b_k under `Entered`.
                    ws.reward[s] - ws.sum[k]
                } else {
                    0.0
                };
            }
        }
    }

    fn official_group(
        &self,
        batch: &RolloutBatch,
        trajs: std::ops::Range<usize>,
        mode: NormMode,
        ws: &mut Part<'_>,
    ) {
        let eps = self.config.std_eps;
        let offs = batch.trajectory_offsets();
        let (traj_scores, row_scores) = (ws.traj_scores, ws.row_scores);
        let rewards = &traj_scores[trajs.clone()];
        let (lo_g, hi_g) = (offs[trajs.start], offs[trajs.end]);
        // Steps are indexed within the part.
        let b = ws.base;
        let rows = hi_g - lo_g;
        // Row scores that differ within a trajectory of the group (verl-agent's invalid-action
        // penalty): the release's statistics over the rows' own scores. Otherwise every row
        // carries its trajectory's score and the closed form below gives the same statistics
        // (and, for R(τ), the same bits as without row scores).
        let own = row_scores.filter(|s| {
            trajs
                .clone()
                .any(|j| s[offs[j]..offs[j + 1]].iter().any(|&x| x != traj_scores[j]))
        });

        // Trajectory level over rows: trajectory j contributes its reward once per step, so
        // the row sums are Σ n_j·R_j and Σ n_j·(R_j − μ)² (one term per trajectory). The mean
        // is clamped to the rewards' range, as in [`GroupStats`], so equal rewards give 0.
        let lens = trajs.clone().map(|j| (offs[j + 1] - offs[j]) as f64);
        let (mean, std) = if rows == 1 {
            (0.0, 1.0)
        } else if let Some(s) = own {
            let st = GroupStats::of(&s[lo_g..hi_g]);
            (st.mean, st.std)
        } else {
            let (lo, hi) = rewards
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &r| {
                    (l.min(r), h.max(r))
                });
            let raw_mean = lens.clone().zip(rewards).map(|(n, &r)| n * r).sum::<f64>() / rows as f64;
            let mean = raw_mean.clamp(lo, hi);
            let ss: f64 = lens
                .clone()
                .zip(rewards)
                .map(|(n, &r)| n * (r - mean) * (r - mean))
                .sum();
            let std = (ss / (rows - 1) as f64).sqrt();
            if raw_mean.is_finite() && std.is_finite() {
                (mean, std)
            } else {
                // A sum overflowed (finite rewards near f64::MAX; the clamp would hide it in
                // the mean): redo both in units of the group's max |R| (only here, so every
                // finite result keeps its bits).
                scaled_row_stats(lens, rewards, rows, lo, hi)
            }
        };

        // Segment level: the group's rows (contiguous steps lo_g..hi_g) grouped by segment id.
        let mut num_ids = 0;
        for j in trajs.clone() {
            Self::shape_trajectory(ws, offs[j] - b, offs[j + 1] - b);
            num_ids = num_ids.max(ws.seg[offs[j + 1] - b - 1] + 1);
        }
        let (values, labels) = (&ws.reward[lo_g - b..hi_g - b], &ws.seg[lo_g - b..hi_g - b]);
        group_means(values, labels, num_ids, ws.seg_stats);
        if mode == NormMode::MeanStdNorm {
            group_spreads(values, labels, ws.seg_stats);
        }
        for (j, &r) in trajs.zip(rewards) {
            let a_traj = mode.normalize(r, mean, std, eps);
            for s in offs[j] - b..offs[j + 1] - b {
                ws.traj[s] = match own {
                    Some(x) => mode.normalize(x[s + b], mean, std, eps),
                    None => a_traj,
                };
                let k = &ws.seg_stats[ws.seg[s]];
                // A singleton segment group has nothing to compare with: 0, as in the release.
                ws.seg_adv[s] = if k.count == 1 {
                    0.0
                } else {
                    mode.normalize(ws.reward[s], k.mean, k.std, eps)
                };
            }
        }
    }
}

/// Row-weighted mean and unbiased std of the trajectory rewards (trajectory j counted once per
/// step), computed in units of s = max |R|: μ = s·Σ n_j (R_j/s) / N,
/// σ = s·√(Σ n_j (R_j/s − μ/s)² / (N − 1)). σ is NaN when it exceeds f64::MAX, so that the
/// output check reports it instead of a division by ∞ giving a plausible 0.
fn scaled_row_stats(
    lens: impl Iterator<Item = f64> + Clone,
    rewards: &[f64],
    rows: usize,
    lo: f64,
    hi: f64,
) -> (f64, f64) {
    let scale = hi.max(-lo);
    let mean_s = lens
        .clone()
        .zip(rewards)
        .map(|(n, &r)| n * (r / scale))
        .sum::<f64>()
        / rows as f64;
    let mean = (mean_s * scale).clamp(lo, hi);
    let ss: f64 = lens
        .zip(rewards)
        .map(|(n, &r)| {
            let d = r / scale - mean / scale;
            n * d * d
        })
        .sum();
    let std = scale * (ss / (rows - 1) as f64).sqrt();
    (mean, if std.is_finite() { std } else { f64::NAN })
}

impl<'a> Part<'a> {
    /// The steps before absolute step `at` (keeping this part's scratch) and the rest (with
    /// `scratch`).
    fn split(self, at: usize, scratch: &'a mut GroupScratch) -> (Self, Self) {
        let local = at - self.base;
        let (flags_a, flags_b) = self.flags.split_at(local);
        let (seg_a, seg_b) = self.seg.split_at_mut(local);
        let (reward_a, reward_b) = self.reward.split_at_mut(local);
        let (traj_a, traj_b) = self.traj.split_at_mut(local);
        let (adv_a, adv_b) = self.seg_adv.split_at_mut(local);
        let b = Part {
            base: at,
            table: self.table,
            traj_scores: self.traj_scores,
            row_scores: self.row_scores,
            flags: flags_b,
            seg: seg_b,
            reward: reward_b,
            traj: traj_b,
            seg_adv: adv_b,
            sum: &mut scratch.sum,
            count: &mut scratch.count,
            lo: &mut scratch.lo,
            hi: &mut scratch.hi,
            seg_stats: &mut scratch.seg_stats,
        };
        let a = Part {
            flags: flags_a,
            seg: seg_a,
            reward: reward_a,
            traj: traj_a,
            seg_adv: adv_a,
            ..self
        };
        (a, b)
    }
}

impl Beacon {
    /// Per-row advantages for the trait's entry points (`milestones` required), with the
    /// workspace's BEACON scratch.
    ///
    /// Shapes before values, in the step path's order (`estimate_steps_into`'s docs): the
    /// output, `milestones` (present, length), `row_scores`' length, `token_level_rewards`'
    /// rows; then `row_scores`' values, the token sums against the rows' scores, and (paper
    /// flavour, which counts each trajectory once) the rows of each trajectory agreeing.
    fn steps_with(
        &self,
        input: &EstimatorInput<'_>,
        advantages: &mut [f64],
        ws: &mut Workspace,
    ) -> Result<()> {
        crate::estimator::check_steps_out(input, advantages)?;
        let flags = Self::step_columns(input)?;
        // Two sources of a row's score must agree (see the `batch` module docs).
        input.check_step_values()?;
        let scores = input.step_scores();
        if self.config.flavour == BeaconFlavour::Paper {
            scores.check_trajectories_agree()?;
        }
        self.advantages_with(input.batch, flags, scores, &mut ws.beacon, advantages)
    }

    /// The step path's input shapes: `milestones` present and one per row, then the length of
    /// `row_scores` and the rows of `token_level_rewards`, when given. Returns the flags.
    fn step_columns<'a>(input: &EstimatorInput<'a>) -> Result<&'a [bool]> {
        let flags = input.milestones.ok_or(Error::MissingInput("milestones"))?;
        check_flags(input.batch, flags)?;
        input.check_step_shapes()?;
        Ok(flags)
    }
}

impl AdvantageEstimator for Beacon {
    /// `beacon` (paper flavour) or `beacon_official` (the release's flavour).
    fn name(&self) -> &'static str {
        match self.config.flavour {
            BeaconFlavour::Paper => "beacon",
            BeaconFlavour::Official { .. } => "beacon_official",
        }
    }

    /// Reads the batch's terminal rewards R(τ), or the caller's `row_scores` in their place
    /// ([`EstimatorInput::with_row_scores`]; the paper flavour needs the rows of each
    /// trajectory to agree), and `milestones` (required); when `token_level_rewards` are given
    /// as well, every row's sum must equal its score, its `row_scores` entry or else its
    /// trajectory's R(τ)
    /// ([`RolloutBatch::check_row_scores`](crate::RolloutBatch::check_row_scores)). Broadcasts the
    /// per-row advantages under `response_mask` when given (else one column). Returns equal
    /// advantages, as in the release.
    ///
    /// ```
    /// use beacon_rl::estimator::{AdvantageEstimator, EstimatorInput, Workspace};
    /// use beacon_rl::estimator::beacon::{Beacon, BeaconConfig};
    /// use beacon_rl::{Error, RolloutBatch};
    /// let batch = RolloutBatch::from_blocks(2, &[1, 1], vec![1.0, 0.0])?;
    /// let beacon = Beacon::new(BeaconConfig::paper())?;
    /// assert_eq!(beacon.estimate(&EstimatorInput::new(&batch)), Err(Error::MissingInput("milestones")));
    /// let input = EstimatorInput::new(&batch).with_milestones(&[false, false]).with_response_lengths(&[2, 1], 3);
    /// let mut tokens = ndarray::Array2::<f32>::zeros((2, 3));
    /// beacon.estimate_into(&input, (&mut tokens).into(), None, &mut Workspace::new())?;
    /// assert!(tokens[[0, 1]] > 0.0 && tokens[[0, 2]] == 0.0);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    fn estimate_into(
        &self,
        input: &EstimatorInput<'_>,
        advantages: FloatViewMut<'_>,
        returns: Option<FloatViewMut<'_>>,
        ws: &mut Workspace,
    ) -> Result<()> {
        estimate_via_steps(
            input,
            advantages,
            returns,
            ws,
            || Self::step_columns(input).map(drop),
            |steps, ws| self.steps_with(input, steps, ws),
        )
    }

    /// As the trait's `estimate`, but every input check runs before the output is allocated:
    /// a refused input allocates nothing, and a `Lengths` mask's claimed L is asked of the
    /// allocator only for an otherwise valid input.
    fn estimate(&self, input: &EstimatorInput<'_>) -> Result<Advantages> {
        estimate_via_steps_fresh(
            input,
            || Self::step_columns(input).map(drop),
            |steps, ws| self.steps_with(input, steps, ws),
        )
    }

    /// One advantage per row (the per-row `advantages` of [`Beacon::compute`]).
    fn estimate_steps_into(
        &self,
        input: &EstimatorInput<'_>,
        advantages: &mut [f64],
        ws: &mut Workspace,
    ) -> Result<()> {
        self.steps_with(input, advantages, ws)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_abs_diff_eq;

    fn beacon(c: BeaconConfig) -> Beacon {
        Beacon::new(c).unwrap()
    }

    #[test]
    fn paper_hand_case_three_trajectories() {
        // Group of 3, R_ms = 1, γ = 0.5, λ = 1, ε = 1e-6.
        // a: [m, ., m, .]  R=1   segments: {0} len 1, {1,2} len 2, unfinished {3}
        // b: [., m, .]     R=0   segments: {0,1} len 2, unfinished {2}
        // c: [., .]        R=0   no milestone
        // A_traj: mean 1/3, std = sqrt(((2/3)^2 + 2(1/3)^2)/2) = sqrt(1/3)
        // G_1 = {a, b}: a's seg 1 mean return 1/1 = 1; b's seg 1 (len 2): (0.5 + 1)/2 = 0.75
        //   b_1 = (1 + 0.75)/2 = 0.875
        // G_2 = {a}: a's seg 2 (len 2) mean return 0.75, b_2 = 0.75
        // a: r = [1, 0.5, 1, 0] -> A_seg = [1-0.875, 0.5-0.75, 1-0.75, 0] = [0.125, -0.25, 0.25, 0]
        // b: r = [0.5, 1, 0]    -> A_seg = [0.5-0.875, 1-0.875, 0] = [-0.375, 0.125, 0]
        // c: A_seg = [0, 0]
        let mut c = BeaconConfig::paper();
        c.segment_decay = 0.5;
        let batch = RolloutBatch::from_blocks(3, &[4, 3, 2], vec![1.0, 0.0, 0.0]).unwrap();
        let flags = [true, false, true, false, false, true, false, false, false];
        let out = beacon(c).compute(&batch, &flags).unwrap();
        let std = (1.0f64 / 3.0).sqrt();
        let ta = (2.0 / 3.0) / (std + 1e-6);
        let tb = (-1.0 / 3.0) / (std + 1e-6);
        let seg = [0.125, -0.25, 0.25, 0.0, -0.375, 0.125, 0.0, 0.0, 0.0];
        let traj = [ta, ta, ta, ta, tb, tb, tb, tb, tb];
        assert_eq!(
            out.shaped_rewards,
            vec![1.0, 0.5, 1.0, 0.0, 0.5, 1.0, 0.0, 0.0, 0.0]
        );
        assert_eq!(out.segments, vec![0, 1, 1, 2, 0, 0, 1, 0, 0]);
        for i in 0..9 {
            assert_abs_diff_eq!(out.segment_advantages[i], seg[i], epsilon = 1e-12);
            assert_abs_diff_eq!(out.trajectory_advantages[i], traj[i], epsilon = 1e-12);
            assert_abs_diff_eq!(out.advantages[i], traj[i] + seg[i], epsilon = 1e-12);
        }
    }

    #[test]
    fn paper_hand_case_partition_edges() {
        // One group of four, R_ms = 1, γ = 0.5, λ = 2, w_traj = 0.5, ε = 1e-6 (paper §3.2–3.4,
        // 0-indexed steps, t_0 = −1):
        // a: [m]        R=1  single step on a milestone: Seg_1 = {0}, K = 1, Seg_2 empty
        // b: [.]        R=0  single step, no milestone: K = 0, everything unfinished
        // c: [m, m, .]  R=0  consecutive milestones: Seg_1 = {0}, Seg_2 = {1}, unfinished {2}
        // d: [., ., m]  R=1  milestone on the last step: Seg_1 = {0, 1, 2}, K = 1, Seg_2 empty
        // r_t = γ^(t_k − t): a [1]; b [0]; c [1, 1, 0]; d [0.25, 0.5, 1] (rising toward t_k).
        // A_traj: R = (1, 0, 0, 1), μ = 1/2, σ = √((4 · 1/4)/3) = √(1/3), A = ±(1/2)/(σ + ε).
        // G_1 = {a, c, d}: R_1/|Seg_1| = 1, 1, 1.75/3 = 7/12, so b_1 = (2 + 7/12)/3 = 31/36.
        // G_2 = {c}: b_2 = 1/1 = 1.
        // A_seg: a [1 − 31/36 = 5/36]; b [0]; c [5/36, 1 − 1 = 0, 0 (unfinished)];
        //        d [9/36 − 31/36 = −22/36, 18/36 − 31/36 = −13/36, 5/36].
        // Zero sum over G_1 of the per-segment means: 5/36 + 5/36 + (−30/36)/3 = 0.
        let mut c = BeaconConfig::paper();
        c.segment_decay = 0.5;
        c.segment_weight = 2.0;
        c.trajectory_weight = 0.5;
        let batch = RolloutBatch::from_blocks(4, &[1, 1, 3, 3], vec![1.0, 0.0, 0.0, 1.0]).unwrap();
        let flags = [true, false, true, true, false, false, false, true];
        let out = beacon(c).compute(&batch, &flags).unwrap();
        assert_eq!(out.segments, vec![0, 0, 0, 1, 2, 0, 0, 0]);
        assert_eq!(out.shaped_rewards, vec![1.0, 0.0, 1.0, 1.0, 0.0, 0.25, 0.5, 1.0]);
        let t = 0.5 / ((1.0f64 / 3.0).sqrt() + 1e-6);
        let traj = [t, -t, -t, -t, -t, t, t, t];
        let seg = [5.0, 0.0, 5.0, 0.0, 0.0, -22.0, -13.0, 5.0].map(|x| x / 36.0);
        for i in 0..8 {
            assert_abs_diff_eq!(out.trajectory_advantages[i], traj[i], epsilon = 1e-12);
            assert_abs_diff_eq!(out.segment_advantages[i], seg[i], epsilon = 1e-12);
            assert_abs_diff_eq!(out.advantages[i], 0.5 * traj[i] + 2.0 * seg[i], epsilon = 1e-12);
        }
    }

    #[test]
    fn paper_singleton_group_compares_its_segments_with_themselves() {
        // One trajectory [., m, .], R = 0.7, R_ms = 1, γ = 0.5: μ = 0, σ = 1, so
        // A_traj = 0.7/(1 + 1e-6). G_1 = {itself}: r = [0.5, 1, 0], b_1 = 1.5/2 = 0.75,
        // A_seg = [−0.25, 0.25, 0 (unfinished)]. Under SingletonRule::Zero only A_traj is 0.
        let batch = RolloutBatch::from_blocks(1, &[3], vec![0.7]).unwrap();
        let flags = [false, true, false];
        let mut c = BeaconConfig::paper();
        c.segment_decay = 0.5;
        let out = beacon(c).compute(&batch, &flags).unwrap();
        assert_eq!(out.segment_advantages, vec![-0.25, 0.25, 0.0]);
        assert_eq!(out.trajectory_advantages, vec![0.7 / (1.0 + 1e-6); 3]);
        c.singleton = SingletonRule::Zero;
        let out = beacon(c).compute(&batch, &flags).unwrap();
        assert_eq!(out.advantages, vec![-0.25, 0.25, 0.0]);
    }

    #[test]
    fn documented_paper_vs_official_difference() {
        // The worked example of the module docs.
        let batch = RolloutBatch::from_blocks(2, &[2, 3], vec![1.0, 0.0]).unwrap();
        let flags = [true, false, false, false, false];
        let mut c = BeaconConfig::official();
        c.segment_decay = 0.5;
        let out = beacon(c).compute(&batch, &flags).unwrap();
        // row mean of R = (1 + 1 + 0 + 0 + 0)/5 = 0.4
        let traj = [0.6, 0.6, -0.4, -0.4, -0.4];
        // segment 0: a0 (10), b0..b2 (0): mean 2.5; segment 1: a1 alone -> 0
        let seg = [7.5, 0.0, -2.5, -2.5, -2.5];
        for i in 0..5 {
            assert_abs_diff_eq!(out.trajectory_advantages[i], traj[i], epsilon = 1e-12);
            assert_abs_diff_eq!(out.segment_advantages[i], seg[i], epsilon = 1e-12);
        }
        let mut p = BeaconConfig::paper();
        p.milestone_reward = 10.0;
        p.segment_decay = 0.5;
        let out = beacon(p).compute(&batch, &flags).unwrap();
        // std of (1, 0) = 0.7071..; a's segment 1 is alone in G_1 -> A_seg = 10 - 10 = 0
        let t = 0.5 / (0.5f64.sqrt() + 1e-6);
        assert_abs_diff_eq!(out.trajectory_advantages[0], t, epsilon = 1e-12);
        assert_abs_diff_eq!(out.trajectory_advantages[2], -t, epsilon = 1e-12);
        assert_eq!(out.segment_advantages, vec![0.0; 5]);
    }

    fn entered(decay: f64) -> Beacon {
        let c = BeaconConfig::paper()
            .with_segment_decay(decay)
            .with_segment_baseline(SegmentBaseline::Entered);
        beacon(c)
    }

    #[test]
    fn blind_spot_example_completed_vs_entered() {
        // The module docs' example. One group, no success (R = 0 everywhere, so A^traj = 0),
        // R_ms = 1, γ = 0.5, doors-only flags:
        // a: [., m, .]  the door in two steps, then one step (segment 2, unfinished)
        // b: [m, .]     the door in one step, then one step (segment 2, unfinished)
        // c: [.]        the trapdoor: the episode ends at once, no milestone
        // Completed (paper): G_1 = {a, b}; a's per-step mean (0.5 + 1)/2 = 0.75, b's 1,
        //   b_1 = 0.875. A^seg a = [−0.375, 0.125, 0], b = [0.125, 0], c = [0]: reaching the
        //   door slowly sums to −0.25, quitting to 0.
        // Entered: E_1 = {a, b, c}, c counting 0: b_1 = 1.75/3 = 7/12; E_2 = {a, b}, both 0:
        //   b_2 = 0. A^seg a = [0.5 − 7/12, 1 − 7/12, 0] = [−1/12, 5/12, 0], b = [5/12, 0],
        //   c = [−7/12]: quitting is now the worst.
        let batch = RolloutBatch::from_blocks(3, &[3, 2, 1], vec![0.0; 3]).unwrap();
        let flags = [false, true, false, true, false, false];
        let mut p = BeaconConfig::paper();
        p.segment_decay = 0.5;
        let out = beacon(p).compute(&batch, &flags).unwrap();
        let want = [-0.375, 0.125, 0.0, 0.125, 0.0, 0.0];
        for (got, want) in out.segment_advantages.iter().zip(want) {
            assert_abs_diff_eq!(*got, want, epsilon = 1e-12);
        }
        let out = entered(0.5).compute(&batch, &flags).unwrap();
        let want = [-1.0, 5.0, 0.0, 5.0, 0.0, -7.0].map(|x| x / 12.0);
        for (got, want) in out.segment_advantages.iter().zip(want) {
            assert_abs_diff_eq!(*got, want, epsilon = 1e-12);
        }
        assert_eq!(out.trajectory_advantages, vec![0.0; 6]);
        assert_eq!(out.shaped_rewards, vec![0.5, 1.0, 0.0, 1.0, 0.0, 0.0]);
    }

    #[test]
    fn entered_hand_case_three_trajectories() {
        // The group of `paper_hand_case_three_trajectories` under `Entered` (R_ms = 1, γ = 0.5):
        // a: [m, ., m, .] R=1: seg 1 {0} (mean 1), seg 2 {1, 2} (mean 0.75), unfinished {3}
        // b: [., m, .]    R=0: seg 1 {0, 1} (mean 0.75), unfinished {2} (segment 2)
        // c: [., .]       R=0: unfinished {0, 1} (segment 1)
        // E_1 = {a, b, c}: b_1 = (1 + 0.75 + 0)/3 = 7/12; E_2 = {a, b}: (0.75 + 0)/2 = 0.375;
        // E_3 = {a}: 0.
        // a: r = [1, .5, 1, 0] → [5/12, 0.125, 0.625, 0]; b: r = [.5, 1, 0] → [−1/12, 5/12,
        // −0.375]; c → [−7/12, −7/12]. The trajectory term is the paper's.
        let batch = RolloutBatch::from_blocks(3, &[4, 3, 2], vec![1.0, 0.0, 0.0]).unwrap();
        let flags = [true, false, true, false, false, true, false, false, false];
        let out = entered(0.5).compute(&batch, &flags).unwrap();
        let seg = [
            5.0 / 12.0,
            0.125,
            0.625,
            0.0,
            -1.0 / 12.0,
            5.0 / 12.0,
            -0.375,
            -7.0 / 12.0,
            -7.0 / 12.0,
        ];
        let std = (1.0f64 / 3.0).sqrt();
        let (ta, tb) = ((2.0 / 3.0) / (std + 1e-6), (-1.0 / 3.0) / (std + 1e-6));
        let traj = [ta, ta, ta, ta, tb, tb, tb, tb, tb];
        for i in 0..9 {
            assert_abs_diff_eq!(out.segment_advantages[i], seg[i], epsilon = 1e-12);
            assert_abs_diff_eq!(out.advantages[i], traj[i] + seg[i], epsilon = 1e-12);
        }
        // The trait path agrees with `compute`.
        let input = EstimatorInput::new(&batch).with_milestones(&flags);
        let mut adv = vec![0.0; 9];
        entered(0.5)
            .estimate_steps_into(&input, &mut adv, &mut Workspace::new())
            .unwrap();
        assert_eq!(adv, out.advantages);
    }

    #[test]
    fn entered_equals_completed_when_every_rollout_ends_on_a_milestone() {
        // No unfinished segment anywhere: E_k = G_k, the same numbers bit for bit.
        let batch = RolloutBatch::from_blocks(3, &[2, 3, 1], vec![1.0, 0.0, 1.0]).unwrap();
        let flags = [false, true, true, false, true, true];
        let mut p = BeaconConfig::paper();
        p.segment_decay = 0.5;
        let a = beacon(p).compute(&batch, &flags).unwrap();
        let b = entered(0.5).compute(&batch, &flags).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn entered_is_paper_flavour_only() {
        let c = BeaconConfig::official().with_segment_baseline(SegmentBaseline::Entered);
        assert!(matches!(
            Beacon::new(c),
            Err(Error::InvalidConfig {
                name: "segment_baseline",
                ..
            })
        ));
        let c = BeaconConfig::paper().with_segment_baseline(SegmentBaseline::Entered);
        assert_eq!(Beacon::new(c).unwrap().name(), "beacon");
    }

    #[test]
    fn official_mean_std_norm_hand_case() {
        // One group: a = [m, .] R=1, b = [m, .] R=0; R_ms=10, γ=0.5.
        // Rows R: 1,1,0,0 -> mean 0.5, std = sqrt(4*0.25/3) = sqrt(1/3)
        // Segment 0: a0 = 10, b0 = 10 -> mean 10, std 0 -> A_seg = 0/(0+eps) = 0
        // Segment 1: a1 = 0, b1 = 0 (unfinished) -> 0
        let mut c = BeaconConfig::official();
        c.flavour = BeaconFlavour::Official {
            mode: NormMode::MeanStdNorm,
        };
        c.segment_decay = 0.5;
        let batch = RolloutBatch::from_blocks(2, &[2, 2], vec![1.0, 0.0]).unwrap();
        let out = beacon(c).compute(&batch, &[true, false, true, false]).unwrap();
        let t = 0.5 / ((1.0f64 / 3.0).sqrt() + 1e-6);
        assert_abs_diff_eq!(out.trajectory_advantages[0], t, epsilon = 1e-12);
        assert_abs_diff_eq!(out.trajectory_advantages[3], -t, epsilon = 1e-12);
        assert_eq!(out.segment_advantages, vec![0.0; 4]);
    }

    #[test]
    fn official_equal_values_normalise_to_exact_zero() {
        // Three trajectories, each a milestone at step 0 then one step; R_ms = 0.1, γ = 1, all
        // terminal rewards 0.1. Segment 0 holds three rows of 0.1, whose plain f64 mean is
        // 0.30000000000000004 / 3 != 0.1: without the exact mean, mean_std_norm would divide
        // that ulp by ε and give ~1e-11 instead of 0. The trajectory term is likewise 0.
        let mut c = BeaconConfig::official();
        c.flavour = BeaconFlavour::Official {
            mode: NormMode::MeanStdNorm,
        };
        c.milestone_reward = 0.1;
        c.segment_decay = 1.0;
        let batch = RolloutBatch::from_blocks(3, &[2, 2, 2], vec![0.1; 3]).unwrap();
        let flags = [true, false, true, false, true, false];
        let out = beacon(c).compute(&batch, &flags).unwrap();
        assert_eq!(out.segment_advantages, vec![0.0; 6]);
        assert_eq!(out.trajectory_advantages, vec![0.0; 6]);
    }

    #[test]
    fn singleton_rules() {
        let batch = RolloutBatch::from_blocks(1, &[2], vec![0.7]).unwrap();
        let out = beacon(BeaconConfig::paper())
            .compute(&batch, &[false, false])
            .unwrap();
        // μ = 0, σ = 1: 0.7 / (1 + 1e-6)
        assert_eq!(out.trajectory_advantages[0], 0.7 / (1.0 + 1e-6));
        let mut c = BeaconConfig::paper();
        c.singleton = SingletonRule::Zero;
        let out = beacon(c).compute(&batch, &[false, false]).unwrap();
        assert_eq!(out.advantages, vec![0.0, 0.0]);
        // Official, a single row: mean 0 -> A = R in mean_norm
        let batch = RolloutBatch::from_blocks(1, &[1], vec![0.7]).unwrap();
        let out = beacon(BeaconConfig::official()).compute(&batch, &[true]).unwrap();
        assert_eq!(out.trajectory_advantages, vec![0.7]);
        assert_eq!(out.segment_advantages, vec![0.0]);
    }

    #[test]
    fn into_variants_agree_with_compute_and_check_shapes() {
        let batch =
            RolloutBatch::from_row_keys(&[1, 2, 1, 2, 1], &[1, 2, 3, 2, 1], &[1.0, 0.0, 0.0, 0.0, 1.0])
                .unwrap();
        let flags = [true, false, true, true, false];
        for c in [BeaconConfig::paper(), BeaconConfig::official()] {
            let b = beacon(c);
            let full = b.compute(&batch, &flags).unwrap();
            let mut adv = vec![0.0; 5];
            b.advantages_into(&batch, &flags, &mut BeaconWorkspace::default(), &mut adv)
                .unwrap();
            assert_eq!(adv, full.advantages);
            assert!(matches!(
                b.advantages_into(&batch, &flags, &mut BeaconWorkspace::default(), &mut [0.0; 4]),
                Err(Error::OutputShape { .. })
            ));
            assert!(matches!(
                b.compute(&batch, &flags[..4]),
                Err(Error::LengthMismatch { .. })
            ));
        }
    }

    #[test]
    fn config_validation_names_each_parameter() {
        type Edit = fn(&mut BeaconConfig);
        let cases: [(Edit, &str); 6] = [
            (|c| c.segment_decay = -0.1, "segment_decay"),
            (|c| c.segment_decay = f64::NAN, "segment_decay"),
            (|c| c.milestone_reward = 0.0, "milestone_reward"),
            (|c| c.segment_weight = -1.0, "segment_weight"),
            (|c| c.trajectory_weight = f64::INFINITY, "trajectory_weight"),
            (|c| c.std_eps = -1e-6, "std_eps"),
        ];
        for (edit, name) in cases {
            let mut c = BeaconConfig::paper();
            edit(&mut c);
            match Beacon::new(c) {
                Err(Error::InvalidConfig { name: n, .. }) => assert_eq!(n, name),
                other => panic!("{name}: {other:?}"),
            }
        }
    }
}
