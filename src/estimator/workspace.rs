//! The caller-kept scratch space of [`AdvantageEstimator::estimate_into`](crate::estimator::AdvantageEstimator::estimate_into): one type for every
//! estimator, so it is reachable through `Box<dyn AdvantageEstimator>`.

use super::{beacon, gigpo, turns, whiten};

/// Scratch space for [`AdvantageEstimator::estimate_into`](crate::estimator::AdvantageEstimator::estimate_into): keep one per thread (or per
/// estimator) across batches. Buffers grow to the largest batch seen and are then reused, so
/// every later call allocates nothing; `Workspace::default()` allocates nothing until used. One type serves every estimator, so it is reachable
/// through `Box<dyn AdvantageEstimator>` without knowing the concrete type; its contents never
/// change a result.
///
/// ```
/// use beacon_rl::estimator::{AdvantageEstimator, EstimatorConfig, EstimatorInput, Workspace};
/// use beacon_rl::RolloutBatch;
/// let est = "rloo".parse::<EstimatorConfig>()?.build()?;
/// let batch = RolloutBatch::from_group_keys(&[0, 0], &[1.0, 0.0])?;
/// let input = EstimatorInput::new(&batch).with_token_level_rewards(&[[1.0], [0.0]]).with_response_mask(beacon_rl::tensor::MaskView::Lengths { lengths: &[1, 1], cols: 1 });
/// let mut ws = Workspace::default();
/// let mut adv = ndarray::Array2::<f32>::zeros((2, 1));
/// for _ in 0..3 {
///     est.estimate_into(&input, (&mut adv).into(), None, &mut ws)?;
/// }
/// assert_eq!(adv.column(0).to_vec(), vec![1.0, -1.0]);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct Workspace {
    pub(crate) scratch: Scratch,
    pub(crate) stage: Stage,
    pub(crate) steps: Vec<f64>,
    pub(crate) beacon: beacon::BeaconScratch,
    pub(crate) gigpo: gigpo::GigpoScratch,
    pub(crate) gigpo_out: super::GigpoOutput,
    pub(crate) turns: turns::TurnWorkspace,
}

/// The kernels' reusable scratch (see [`Workspace`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct Scratch {
    /// Row scores and per-row scalars of the outcome estimators.
    pub(crate) scores: Vec<f64>,
    pub(crate) scalars: Vec<f64>,
    /// Per-column or per-row accumulators (OTB numerator/denominator, whitened scalars).
    pub(crate) acc_a: Vec<f64>,
    pub(crate) acc_b: Vec<f64>,
    pub(crate) acc_c: Vec<f64>,
    /// Per-row counts, lengths, group ids, member rows.
    pub(crate) counts: Vec<usize>,
    pub(crate) lengths: Vec<usize>,
    pub(crate) groups: Vec<usize>,
    pub(crate) members: Vec<usize>,
    /// `grpo_vectorized`'s float32 group statistics.
    pub(crate) f32_a: Vec<f32>,
    pub(crate) f32_b: Vec<f32>,
    pub(crate) f32_c: Vec<f32>,
    /// Inputs that are not `f64`/`bool` in standard layout, widened for the token-level
    /// kernels that need whole matrices (ReMax, OTB).
    pub(crate) inputs: InputBufs,
    /// Row blocks of the token scans that whiten (GAE, REINFORCE++).
    pub(crate) rows: whiten::RowSlabs,
}

/// Conversion buffers of the token-level kernels' inputs (see [`Tokens`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct InputBufs {
    pub(crate) rewards: Vec<f64>,
    pub(crate) values: Vec<f64>,
    pub(crate) log_probs: Vec<f64>,
    pub(crate) sum_pi_sq: Vec<f64>,
    pub(crate) is_weights: Vec<f64>,
    pub(crate) mask: Vec<bool>,
}

/// `f64` stand-ins for outputs that are `f32` or strided.
#[derive(Debug, Clone, Default)]
pub(crate) struct Stage {
    pub(crate) advantages: Vec<f64>,
    pub(crate) returns: Vec<f64>,
}
