//! The [`Beacon`] estimator: the trait's entry points, and the parts API
//! ([`Beacon::compute`]) that returns Â_{i,t} = w_traj·A^traj_i +
//! λ·A^seg_{i,t} with its terms, shaped rewards and segment ids for inspection.

use crate::batch::RolloutBatch;
use crate::error::{Error, Result};
use crate::estimator::kernel::step_entry_points;
use crate::estimator::{
    check_all_finite, check_steps_out, AdvantageEstimator, EstimatorInput, StepScores, Workspace,
};
use crate::milestone::check_flags;

use super::advantage::{self, combine};
#[cfg(doc)]
use super::config::SegmentBaseline;
use super::config::{BeaconConfig, BeaconFlavour};

/// BEACON: milestone-anchored dual-scale advantages (paper §3, Algorithm 1).
///
/// Given milestone flags, each trajectory is partitioned into segments (a milestone step
/// closes its segment; the steps after the last milestone form the unfinished segment; see
/// [`BeaconOutput::segments`]), rewards are shaped within completed segments (temporal decay
/// from each segment's milestone), and two advantages are combined per step:
///
/// Â_{i,t} = w_traj · A^traj_i + λ · A^seg_{i,t}
///
/// (w_traj = 1 in the paper; 0 is the "w/o trajectory-level advantage" ablation).
///
/// # Paper flavour (`BeaconConfig::default()`)
///
/// - A^traj_i = (R_i − μ) / (σ + ε) over the G trajectories of the group, σ unbiased; a group of
///   one trajectory follows [`SingletonRule`](crate::estimator::SingletonRule) (μ = 0, σ = 1 by default).
/// - For completed segment k of trajectory i: r_t = R_ms·γ^(t_k − t),
///   G_k = { j : K_j ≥ k },  b_k = (1/|G_k|) Σ_{j∈G_k} R_k^(j) / |Seg_k^(j)|,
///   A^seg_{i,t} = r_t − b_k.
/// - Steps of the unfinished segment get r_t = 0 and A^seg = 0: the paper defines no
///   comparison for them, so they carry the trajectory term only.
/// - Defaults: γ = 0.95 and λ = 1 (the paper's Hyperparameters table); R_ms = 1 and ε = 1e-6,
///   which the paper does not give (its terminal reward R(τ) is in {0, 1}).
///
/// # The completion blind spot, and [`SegmentBaseline::Entered`]
///
/// In the paper flavour, b_k averages over G_k, the rollouts that *completed* segment k, and
/// the steps of an unfinished segment get A^seg = 0. Over G_k the per-step means of A^seg sum
/// to zero, so completing a segment slower than the others earns negative segment credit,
/// while not completing it at all (running out of budget, or an action that ends the episode)
/// earns 0. While no rollout of a group succeeds, A^traj is 0 for all of them and this is the
/// only signal: quitting is never penalised. Constructed example (R_ms = 1, γ = 0.5, no
/// success, only real doors flagged):
///
/// | rollout | flags | paper A^seg | `Entered` A^seg |
/// |---|---|---|---|
/// | a: door in 2 steps, 1 more step | `[·, m, ·]` | `[−0.375, 0.125, 0]` (sum −0.25) | `[−1/12, 5/12, 0]` |
/// | b: door in 1 step, 1 more step | `[m, ·]` | `[0.125, 0]` | `[5/12, 0]` |
/// | c: trapdoor (episode ends) | `[·]` | `[0]` | `[−7/12]` |
///
/// Paper: b_1 = (0.75 + 1)/2 = 0.875 over {a, b}; c is in no G_k. `Entered`: c entered
/// segment 1 and did not finish it, so it counts with return 0: b_1 = (0.75 + 1 + 0)/3 = 7/12,
/// and its step gets 0 − b_1 (a unit test in `advantage.rs`).
///
/// Why: r_t = R_ms·γ^(t_k − t) is the discounted return-to-go of a reward R_ms paid at the
/// milestone (0 if it is never reached), so Σ_{t∈Seg_k} ∇log π(a_t|s_t)(r_t − b) is the usual
/// reward-to-go policy-gradient term with baseline b. Averaged over every rollout that enters
/// segment k, the baseline part vanishes when b does not depend on the rollout, because
/// whether step t lies in segment k is decided before a_t. The paper keeps the completers
/// only: its expectation is the reward-to-go term minus b_k·∇P(complete segment k | entered
/// it), a push *away* from completing of size b_k ∈ (0, R_ms]. [`SegmentBaseline::Entered`]
/// keeps every rollout with a step in segment k (E_k ⊇ G_k; unfinished ones with return 0,
/// their steps getting 0 − b_k), so the baseline part is zero in expectation up to b_k's
/// 1/|E_k| share of the rollout's own return (the self-inclusion GRPO's group mean and the
/// paper's b_k also have). It fixes quitting, not misleading milestones: a flagged decoy that
/// completes a segment in one step still earns the most. `docs/completion-credit.md` has the
/// derivation and the testbed's measurements.
///
/// # Official flavour ([`BeaconConfig::official`]): the paper's public code release (MiGPO)
///
/// The release computes something different from the equations, and this flavour reproduces it
/// (parity with the release's own outputs is tested to 1e-5):
///
/// - Statistics are over step *rows*, not trajectories. Every row of trajectory i carries
///   score R_i, and the trajectory term normalises it against all rows of the group:
///   `mean_norm` A = R_i − mean_rows, `mean_std_norm` (R_i − mean_rows)/(std_rows + ε).
///   A trajectory with more steps therefore weighs more in μ. A group with a single row: μ = 0,
///   σ = 1. Through the trait, the caller's
///   [`row_scores`](crate::estimator::EstimatorInput::with_row_scores) replace R_i as each
///   row's score (the release's `episode_norm_reward` sums each row's token rewards, which
///   verl-agent's invalid-action penalty makes differ within a trajectory).
/// - Segment groups are all rows with the same (group, segment id) — completed *and*
///   unfinished. Unfinished rows have r = 0 and get A^seg = 0 − mean ≤ 0, where the paper gives
///   them 0. A singleton segment group gives 0. Same [`NormMode`](crate::estimator::NormMode) at both levels.
/// - Defaults: R_ms = 10, γ = 0.95, w = 1, ε = 1e-6, `mean_norm` (the release's ALFWorld
///   scripts use γ = 0.9, w = 10).
///
/// A worked difference: one group, trajectory a = [ms, ·] (R = 1), b = [·, ·, ·] (R = 0),
/// R_ms = 10, γ = 0.5.
/// Paper: A^traj = ±0.7071 (σ = 0.7071), a's segment 1 is alone in G_1 so b_1 = 10 and
/// A^seg(a, 0) = 0; every other step gets A^seg = 0.
/// Official (`mean_norm`): row mean = (2·1 + 3·0)/5 = 0.4, so A^traj = 0.6 for a, −0.4 for b;
/// segment 0 rows are a0 (r = 10) and b0, b1, b2 (unfinished, r = 0), mean 2.5, so
/// A^seg(a0) = 7.5, A^seg(b·) = −2.5; a's step 1 is alone in segment 1: A^seg = 0.
/// (This case is a unit test in `advantage.rs`.)
///
/// # Where each equation lives
///
/// | file | computes |
/// |---|---|
/// | `partition.rs` | Seg_k = { t : t_{k−1} < t ≤ t_k }, the segments milestones close |
/// | `shaping.rs` | r_t = R_ms·γ^(t_k − t), temporal shaping within a segment |
/// | `advantage.rs` | A^traj, b_k, A^seg and Â = w_traj·A^traj + λ·A^seg, both flavours |
/// | `config.rs` | [`BeaconConfig`]: the constants, flavours and presets |
/// | `estimator.rs` | [`Beacon`]: the [`AdvantageEstimator`](crate::estimator::AdvantageEstimator) entry points and the parts API |
///
/// Milestone flags come from a detector Φ (`crate::milestone`).
///
/// The BEACON estimator with a validated configuration.
///
/// ```
/// use beacon_rl::estimator::{Beacon, BeaconConfig};
/// use beacon_rl::RolloutBatch;
///
/// // One task, two trajectories: "a" succeeds (2 steps, milestone at step 0),
/// // "b" fails (2 steps, no milestone).
/// let batch = RolloutBatch::from_row_keys(&["task"; 4], &["a", "a", "b", "b"], &[1.0, 1.0, 0.0, 0.0])?;
/// let flags = [true, false, false, false];
/// let out = Beacon::new(BeaconConfig::default())?.compute(&batch, &flags)?;
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
/// use beacon_rl::estimator::BeaconOutput;
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

impl Beacon {
    /// Validates `config` and builds the estimator.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) naming the first field out of
    /// its range (each [`BeaconConfig`] field states it), or `segment_baseline` when
    /// [`SegmentBaseline::Entered`](crate::estimator::SegmentBaseline::Entered) is asked of the
    /// official flavour.
    ///
    /// ```
    /// use beacon_rl::estimator::{Beacon, BeaconConfig};
    /// assert!(Beacon::new(BeaconConfig::official()).is_ok());
    /// ```
    pub fn new(config: BeaconConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self { config })
    }

    /// Computes per-row advantages and their parts. `milestones[r]` flags caller row `r`.
    ///
    /// The trajectory term reads each trajectory's terminal reward R(τ) from the batch. Rows
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
    /// use beacon_rl::estimator::{Beacon, BeaconConfig};
    /// use beacon_rl::RolloutBatch;
    /// let batch = RolloutBatch::from_blocks(2, &[2, 2], vec![1.0, 0.0])?;
    /// let out = Beacon::new(BeaconConfig::official())?.compute(&batch, &[true, false, false, false])?;
    /// assert_eq!(out.shaped_rewards, vec![10.0, 0.0, 0.0, 0.0]);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn compute(&self, batch: &RolloutBatch, milestones: &[bool]) -> Result<BeaconOutput> {
        let mut out = BeaconOutput::default();
        self.compute_into(batch, milestones, &mut Workspace::default(), &mut out)?;
        Ok(out)
    }

    /// [`compute`](Self::compute) into `out`, reusing its and `ws`'s buffers (the trait's
    /// paths and the tests share it).
    pub(crate) fn compute_into(
        &self,
        batch: &RolloutBatch,
        milestones: &[bool],
        ws: &mut Workspace,
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
        advantage::run(
            &self.config,
            batch,
            milestones,
            StepScores::of_batch(batch),
            &mut ws.beacon,
        );
        let ws = &ws.beacon;
        let rows = batch.step_rows();
        for (s, &r) in rows.iter().enumerate() {
            out.trajectory_advantages[r] = ws.traj[s];
            out.segment_advantages[r] = ws.seg_adv[s];
            out.shaped_rewards[r] = ws.reward[s];
            out.segments[r] = ws.seg[s];
            out.advantages[r] = combine(&self.config, ws.traj[s], ws.seg_adv[s]);
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

    /// The combined per-row advantages with each row's score from `scores` (checked by the
    /// caller, as are the flags' and the buffer's lengths).
    fn advantages_with(
        &self,
        batch: &RolloutBatch,
        milestones: &[bool],
        scores: StepScores<'_>,
        ws: &mut Workspace,
        advantages: &mut [f64],
    ) -> Result<()> {
        advantage::run(&self.config, batch, milestones, scores, &mut ws.beacon);
        let ws = &ws.beacon;
        for (s, &r) in batch.step_rows().iter().enumerate() {
            advantages[r] = combine(&self.config, ws.traj[s], ws.seg_adv[s]);
        }
        // As in `compute_into`: an overflow is an error, never an `Ok` output.
        check_all_finite("beacon advantages (overflow)", advantages)
    }

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
        check_steps_out(input, advantages)?;
        let flags = self.step_columns(input)?;
        // Two sources of a row's score must agree (see the `batch` module docs).
        input.check_step_values()?;
        let scores = input.step_scores();
        if self.config.flavour == BeaconFlavour::Paper {
            scores.check_trajectories_agree()?;
        }
        self.advantages_with(input.batch, flags, scores, ws, advantages)
    }

    /// The step path's input shapes: `milestones` present and one per row, then the length of
    /// `row_scores` and the rows of `token_level_rewards`, when given. Returns the flags.
    fn step_columns<'a>(&self, input: &EstimatorInput<'a>) -> Result<&'a [bool]> {
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

    step_entry_points! {
        /// Reads the batch's terminal rewards R(τ), or the caller's `row_scores` in their
        /// place ([`EstimatorInput::with_row_scores`]; the paper flavour needs the rows of each
        /// trajectory to agree), and `milestones` (required); when `token_level_rewards` are
        /// given as well, every row's sum must equal its score, its `row_scores` entry or else
        /// its trajectory's R(τ)
        /// (to a relative 1e-6: [`Error::TerminalRewardMismatch`]).
        /// Broadcasts the per-row advantages under `response_mask` when given (else one
        /// column). Returns equal advantages, as in the release.
        ///
        /// ```
        /// use beacon_rl::estimator::{AdvantageEstimator, EstimatorInput, Workspace};
        /// use beacon_rl::estimator::{Beacon, BeaconConfig};
        /// use beacon_rl::{Error, RolloutBatch};
        /// let batch = RolloutBatch::from_blocks(2, &[1, 1], vec![1.0, 0.0])?;
        /// let beacon = Beacon::new(BeaconConfig::default())?;
        /// assert_eq!(beacon.estimate(&EstimatorInput::new(&batch)), Err(Error::MissingInput("milestones")));
        /// let input = EstimatorInput::new(&batch).with_milestones(&[false, false]).with_response_mask(beacon_rl::tensor::MaskView::Lengths { lengths: &[2, 1], cols: 3 });
        /// let mut tokens = ndarray::Array2::<f32>::zeros((2, 3));
        /// beacon.estimate_into(&input, (&mut tokens).into(), None, &mut Workspace::default())?;
        /// assert!(tokens[[0, 1]] > 0.0 && tokens[[0, 2]] == 0.0);
        /// # Ok::<(), beacon_rl::Error>(())
        /// ```
        columns = step_columns,
        steps = steps_with,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn into_variants_agree_with_compute_and_check_shapes() {
        let batch =
            RolloutBatch::from_row_keys(&[1, 2, 1, 2, 1], &[1, 2, 3, 2, 1], &[1.0, 0.0, 0.0, 0.0, 1.0])
                .unwrap();
        let flags = [true, false, true, true, false];
        for c in [BeaconConfig::default(), BeaconConfig::official()] {
            let b = Beacon::new(c).unwrap();
            let full = b.compute(&batch, &flags).unwrap();
            let (mut ws, mut adv, mut parts) = (Workspace::default(), vec![0.0; 5], BeaconOutput::default());
            let input = EstimatorInput::new(&batch).with_milestones(&flags);
            b.estimate_steps_into(&input, &mut adv, &mut ws).unwrap();
            assert_eq!(adv, full.advantages);
            b.compute_into(&batch, &flags, &mut ws, &mut parts).unwrap();
            assert_eq!(parts, full);
            assert!(matches!(
                b.estimate_steps_into(&input, &mut [0.0; 4], &mut ws),
                Err(Error::OutputShape { .. })
            ));
            assert!(matches!(
                b.compute(&batch, &flags[..4]),
                Err(Error::LengthMismatch { .. })
            ));
        }
    }
}
