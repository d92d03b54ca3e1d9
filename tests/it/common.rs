//! Helpers shared by the integration tests (`use crate::common;` in each test module).
//!
//! The parity tolerance against the peers' vectors (verl, verl-agent, the BEACON release) is
//! written here once: `|ours − expected| ≤ 1e-5 · max(1, |expected|)`, relative above 1 and
//! absolute below (peer values near 0 carry float32 noise of their own).

/// BEACON under `ablation` of `base`, with the ablation's milestone flags drawn under `seed`:
/// the two public steps a Table 3 row is made of.
pub fn ablation_output(
    ablation: beacon_rl::estimator::Ablation,
    base: beacon_rl::estimator::BeaconConfig,
    batch: &beacon_rl::RolloutBatch,
    flags: &[bool],
    seed: u64,
) -> beacon_rl::Result<beacon_rl::estimator::BeaconOutput> {
    let flags = ablation.milestones(batch, flags, seed)?;
    beacon_rl::estimator::Beacon::new(ablation.config(base))?.compute(batch, &flags)
}

/// The registered estimator `name` with its default parameters, behind the trait.
pub fn build(name: &str) -> Box<dyn beacon_rl::estimator::AdvantageEstimator> {
    name.parse::<beacon_rl::estimator::EstimatorConfig>()
        .unwrap()
        .build()
        .unwrap()
}

/// The documented step-level estimators (`estimate_steps_into`'s docs): BEACON, GiGPO, the
/// ablation (`beacon:ablation=...`), the outcome estimators on step rows and the turn-level
/// estimators, in the order of `EstimatorConfig::NAMES`.
pub const STEP_ESTIMATORS: [&str; 12] = [
    "grpo",
    "grpo_vectorized",
    "rloo",
    "rloo_vectorized",
    "beacon",
    "beacon_official",
    "gigpo",
    "step_reinforce",
    "mt_grpo",
    "turn_gae",
    "tree_grpo",
    "empg",
];

/// The parity tolerance (see the module docs).
pub const PARITY_TOL: f64 = 1e-5;

/// `|ours − expected| / max(1, |expected|)`: the error the tolerance bounds.
pub fn parity_err(ours: f64, expected: f64) -> f64 {
    (ours - expected).abs() / expected.abs().max(1.0)
}

/// True when `ours` matches the peer's `expected` within [`PARITY_TOL`].
pub fn parity_ok(ours: f64, expected: f64) -> bool {
    parity_err(ours, expected) <= PARITY_TOL
}

use beacon_rl::estimator::EstimatorInput;
#[path = "../support/splitmix64.rs"]
mod splitmix64;
#[path = "../support/step_order.rs"]
mod step_order;
use beacon_rl::tensor::MaskView;
use beacon_rl::RolloutBatch;
use ndarray::Array2;
pub use splitmix64::SplitMix64;
pub use step_order::in_step_order;

/// A small batch with every column some estimator reads, for tests that run every
/// estimator in the registry on one input: 4 rows in 2 groups ({0, 1}, {2, 3}), L = 3
/// (or `cols`), token rewards r + t (so row r sums to 3r + 3, which is also its episode
/// reward: the step-level estimators, which check both sources, accept the input).
pub struct EveryColumn {
    pub batch: RolloutBatch,
    pub rewards: Array2<f64>,
    pub log_probs: Array2<f64>,
}

impl EveryColumn {
    pub fn new() -> Self {
        Self::with_cols(3)
    }

    /// Rows of `cols` tokens (row r's episode reward Σ_t (r + t) = cols·r + cols(cols − 1)/2).
    pub fn with_cols(cols: usize) -> Self {
        let rewards = Array2::from_shape_fn((4, cols), |(r, t)| (r + t) as f64);
        let sums: Vec<f64> = (0..4)
            .map(|r| (cols * r + cols * cols.saturating_sub(1) / 2) as f64)
            .collect();
        let batch = RolloutBatch::from_group_keys(&[0, 0, 1, 1], &sums).unwrap();
        let log_probs = -&rewards;
        Self {
            batch,
            rewards,
            log_probs,
        }
    }

    /// The input with every column set (values and Σπ² reuse the rewards) under `mask`.
    pub fn input<'a>(&'a self, mask: impl Into<MaskView<'a>>) -> EstimatorInput<'a> {
        EstimatorInput::new(&self.batch)
            .with_token_level_rewards(&self.rewards)
            .with_response_mask(mask)
            .with_values(&self.rewards)
            .with_old_log_probs(&self.log_probs)
            .with_sum_pi_squared(&self.rewards)
            .with_reward_baselines(&[0.0; 4])
            .with_milestones(&[false; 4])
            .with_step_rewards(&[0.0; 4])
            .with_anchor_obs(&["s"; 4])
            .with_tree_parents(&[-1, 0, -1, 2])
            .with_step_entropy(&[0.5, 1.0, 1.5, 2.0])
    }
}

/// A rayon pool of `threads` threads (the `rayon` feature's bit-identity tests).
#[cfg(feature = "rayon")]
pub fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("pool")
}

/// The internal step range of trajectory `j` (trajectory-major: the lengths of the
/// trajectories before it, then its own). For a batch built from blocks these are its rows.
pub fn trajectory_steps(batch: &RolloutBatch, j: usize) -> std::ops::Range<usize> {
    let start: usize = (0..j).map(|i| batch.trajectory_rows(i).len()).sum();
    start..start + batch.trajectory_rows(j).len()
}
