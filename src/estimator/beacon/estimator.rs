//! The [`Beacon`] estimator: the trait's entry points, and the parts API
//! ([`Beacon::compute`], [`Beacon::compute_into`]) that returns Â_{i,t} = w_traj·A^traj_i +
//! λ·A^seg_{i,t} with its terms, shaped rewards and segment ids for inspection.

use crate::batch::RolloutBatch;
use crate::error::{Error, Result};
use crate::estimator::kernel::step_entry_points;
use crate::estimator::{
    check_all_finite, check_steps_out, AdvantageEstimator, EstimatorInput, StepScores, Workspace,
};
use crate::milestone::check_flags;

use super::advantage::{self, combine};
use super::config::{BeaconConfig, BeaconFlavour};

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
        self.compute_into(batch, milestones, &mut Workspace::new(), &mut out)?;
        Ok(out)
    }

    /// Like [`compute`](Self::compute), reusing `out`'s and `ws`'s buffers (no allocation
    /// once they are large enough).
    ///
    /// # Errors
    /// As [`compute`](Self::compute).
    ///
    /// ```
    /// use beacon_rl::estimator::{Beacon, BeaconConfig, BeaconOutput, Workspace};
    /// use beacon_rl::RolloutBatch;
    /// let beacon = Beacon::new(BeaconConfig::paper())?;
    /// let (mut ws, mut out) = (Workspace::new(), BeaconOutput::default());
    /// let batch = RolloutBatch::from_blocks(2, &[3, 3], vec![1.0, 0.0])?;
    /// beacon.compute_into(&batch, &[false, true, false, false, false, false], &mut ws, &mut out)?;
    /// assert_eq!(out.segments, vec![0, 0, 1, 0, 0, 0]);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn compute_into(
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
        /// ([`RolloutBatch::check_row_scores`](crate::RolloutBatch::check_row_scores)).
        /// Broadcasts the per-row advantages under `response_mask` when given (else one
        /// column). Returns equal advantages, as in the release.
        ///
        /// ```
        /// use beacon_rl::estimator::{AdvantageEstimator, EstimatorInput, Workspace};
        /// use beacon_rl::estimator::{Beacon, BeaconConfig};
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
        for c in [BeaconConfig::paper(), BeaconConfig::official()] {
            let b = Beacon::new(c).unwrap();
            let full = b.compute(&batch, &flags).unwrap();
            let (mut ws, mut adv, mut parts) = (Workspace::new(), vec![0.0; 5], BeaconOutput::default());
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
