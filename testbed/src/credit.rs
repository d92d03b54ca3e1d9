use beacon_rl::estimator::{
    Ablation, AdvantageEstimator, BeaconConfig, EstimatorConfig, EstimatorInput, GigpoConfig, GrpoConfig,
    SegmentBaseline, Workspace,
};
use beacon_rl::ndarray::{Array2, ArrayView2};
use beacon_rl::{Error, Result, RolloutBatch};

use crate::Method;

/// Per-row columns of one batch, in step order (group → episode → step).
#[derive(Debug, Clone, Copy)]
pub struct CreditColumns<'a> {
    /// The episode's terminal reward R (1 on success, else 0), repeated on each of its rows.
    pub terminal_reward: &'a [f64],
    /// The episode's progress score (milestones reached / K), repeated on each of its rows.
    pub progress: &'a [f64],
    /// The environment's reward for the step: 1 on the goal step, else 0.
    pub env_reward: &'a [f64],
    /// The trainer's milestone flags (from its [`MilestoneSource`](super::MilestoneSource)).
    pub milestones: &'a [bool],
    /// The observation text each step acted on (GiGPO's anchor state).
    pub anchors: &'a [&'a str],
}

/// A method's built estimator plus the buffers it writes into.
///
/// The one place where the testbed calls the library's estimators, exactly as a trainer would:
/// [`EstimatorConfig`] → `Box<dyn AdvantageEstimator>` once, then per batch a [`RolloutBatch`]
/// plus an [`EstimatorInput`] with the columns the method reads, and
/// [`estimate_into`](AdvantageEstimator::estimate_into) into buffers kept across batches.
/// When the estimator interface changes, this file is the one to port.
///
/// Rows are steps (verl-agent's layout): every step row carries its episode's terminal reward in
/// `token_level_rewards` (one token per row, so the row score is that value), `response_mask`
/// is all true, and the output is one advantage per step.
pub struct Credit {
    method: Method,
    estimator: Box<dyn AdvantageEstimator>,
    advantages: Array2<f64>,
    workspace: Workspace,
    mask: Vec<bool>,
    scratch: Vec<f64>,
}

impl std::fmt::Debug for Credit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credit({})", self.method)
    }
}

/// The estimator configuration of each method.
fn config(method: Method) -> EstimatorConfig {
    match method {
        Method::Grpo | Method::GrpoProgress => EstimatorConfig::Grpo(GrpoConfig::default()),
        Method::GrpoTrajectory => {
            EstimatorConfig::Beacon(Ablation::NoSegmentAdvantage.config(BeaconConfig::default()))
        }
        Method::Gigpo | Method::GigpoMilestoneRewards => EstimatorConfig::Gigpo(GigpoConfig::default()),
        Method::Beacon => EstimatorConfig::Beacon(BeaconConfig::default()),
        Method::BeaconOfficial => EstimatorConfig::Beacon(BeaconConfig::official()),
        Method::BeaconCompletion => {
            EstimatorConfig::Beacon(BeaconConfig::default().with_segment_baseline(SegmentBaseline::Entered))
        }
        Method::Ablation(a) => EstimatorConfig::Beacon(a.config(BeaconConfig::default())),
    }
}

impl Credit {
    /// Builds the method's estimator.
    ///
    /// # Errors
    /// The estimator's configuration errors (none for the built-in methods).
    pub fn new(method: Method) -> Result<Self> {
        Ok(Self {
            method,
            estimator: config(method).build()?,
            advantages: Array2::zeros((0, 1)),
            workspace: Workspace::default(),
            mask: Vec::new(),
            scratch: Vec::new(),
        })
    }

    /// The method.
    pub fn method(&self) -> Method {
        self.method
    }

    /// One advantage per row of `batch`. `seed` drives the partition ablations' draws.
    ///
    /// # Errors
    /// The estimator's input errors (lengths, non-finite values).
    pub fn assign(&mut self, batch: &RolloutBatch, cols: &CreditColumns<'_>, seed: u64) -> Result<&[f64]> {
        let rows = batch.num_steps();
        if self.advantages.nrows() != rows {
            self.advantages = Array2::zeros((rows, 1));
        }
        self.mask.clear();
        self.mask.resize(rows, true);
        let mask = column(&self.mask)?;
        let input = EstimatorInput::new(batch).with_response_mask(mask);
        let ablated;
        let input = match self.method {
            Method::Grpo => input.with_token_level_rewards(column(cols.terminal_reward)?),
            Method::GrpoProgress => input.with_token_level_rewards(column(cols.progress)?),
            Method::GrpoTrajectory => input.with_milestones(cols.milestones),
            Method::Gigpo => input
                .with_step_rewards(cols.env_reward)
                .with_anchor_obs(cols.anchors),
            Method::GigpoMilestoneRewards => {
                self.scratch.clear();
                let with_ms = cols.env_reward.iter().zip(cols.milestones);
                self.scratch
                    .extend(with_ms.map(|(&r, &m)| r + f64::from(u8::from(m))));
                input
                    .with_step_rewards(&self.scratch)
                    .with_anchor_obs(cols.anchors)
            }
            Method::Beacon | Method::BeaconOfficial | Method::BeaconCompletion => {
                input.with_milestones(cols.milestones)
            }
            Method::Ablation(a) => {
                ablated = a.milestones(batch, cols.milestones, seed)?;
                input.with_milestones(&ablated)
            }
        };
        self.estimator
            .estimate_into(&input, (&mut self.advantages).into(), None, &mut self.workspace)?;
        Ok(self.advantages.as_slice().unwrap_or(&[]))
    }
}

/// A per-row value as a rows × 1 token matrix.
fn column<T>(values: &[T]) -> Result<ArrayView2<'_, T>> {
    ArrayView2::from_shape((values.len(), 1), values).map_err(|_| Error::LengthMismatch {
        what: "testbed column",
        expected: values.len(),
        actual: values.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpo_and_beacon_by_hand() {
        // One group: episode a (2 steps, success, milestone on step 0), b (1 step, failure).
        let batch = RolloutBatch::from_offsets(vec![0, 2], vec![0, 2, 3], vec![1.0, 0.0]).unwrap();
        let cols = CreditColumns {
            terminal_reward: &[1.0, 1.0, 0.0],
            progress: &[1.0, 1.0, 0.0],
            env_reward: &[0.0, 1.0, 0.0],
            milestones: &[true, false, false],
            anchors: &["s0", "s1", "s0"],
        };
        // grpo over rows: scores (1, 1, 0), mean 2/3, unbiased std √((2·(1/3)² + (2/3)²)/2)
        // = √(1/3) = 0.577350; (1/3)/0.577350 = 0.577350, (−2/3)/0.577350 = −1.154701.
        let mut grpo = Credit::new(Method::Grpo).unwrap();
        let a = grpo.assign(&batch, &cols, 0).unwrap().to_vec();
        assert!((a[0] - 0.577_350).abs() < 1e-5 && (a[1] - a[0]).abs() < 1e-12);
        assert!((a[2] + 1.154_701).abs() < 1e-5);
        // grpo_trajectory: over episodes (1, 0): mean 0.5, std √0.5, so ±0.5/(√0.5 + ε).
        let mut traj = Credit::new(Method::GrpoTrajectory).unwrap();
        let t = traj.assign(&batch, &cols, 0).unwrap().to_vec();
        let e = 0.5 / (0.5f64.sqrt() + 1e-6);
        assert!((t[0] - e).abs() < 1e-12 && (t[2] + e).abs() < 1e-12);
        // beacon (paper): a's milestone segment {0} is alone in G_1, so A^seg = 0 and the
        // advantages are the trajectory term's.
        let mut beacon = Credit::new(Method::Beacon).unwrap();
        assert_eq!(beacon.assign(&batch, &cols, 0).unwrap(), &t[..]);
        // The buffers are reused: a second call gives the same values.
        assert_eq!(grpo.assign(&batch, &cols, 0).unwrap(), &a[..]);
    }
}
