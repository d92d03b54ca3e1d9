//! GRPO and its verl variants: `grpo`, `grpo_vectorized`, `grpo_passk`, `gdpo`.
//!
//! Each row's score is the sum of its `token_level_rewards` over **all** L positions (not only
//! masked ones): s_i = Σ_t r_{i,t}. Rows are grouped by uid (the batch's groups; for agent
//! data a group holds every row of every trajectory of the task).
//!
//! # `grpo` ([`Grpo`], verl `compute_grpo_outcome_advantage`)
//! ```text
//! A_i = (s_i − μ_g) / (σ_g + ε)      (NormMode::MeanStdNorm, verl norm_adv_by_std_in_grpo = true)
//! A_i =  s_i − μ_g                   (NormMode::MeanNorm, Dr.GRPO)
//! ```
//! μ_g the group mean, σ_g the **unbiased** (n − 1) standard deviation (`torch.std`), ε =
//! `std_eps` (1e-6) added to σ, not to σ². A group of one row uses μ = 0, σ = 1. The scalar is
//! broadcast to the row's tokens and multiplied by the response mask; returns = advantages.
//!
//! ## Trajectory-level statistics on step rows ([`GrpoStatistics::Trajectories`])
//! On agent data (one row per step, the batch built from `uid` and `traj_uid`) verl's statistics
//! run over rows, so a trajectory with more steps weighs more in μ_g and σ_g. verl-agent's
//! `compute_mean_std_cross_steps=False` (the paper's GRPO) counts each trajectory once instead:
//! ```text
//! μ_g = (1/N) Σ_j s_j,   σ_g = √( Σ_j (s_j − μ_g)² / (N − 1) ),   A_r = (s_r − μ_g) / (σ_g + ε)
//! ```
//! over the N trajectories j of group g, s_j the score of trajectory j's first row (verl-agent
//! keeps the first row of each `(uid, traj_uid)` pair); every row r of the group is then
//! normalised with its own score s_r. ε is added to σ; a group holding one trajectory uses
//! μ = 0, σ = 1 (divided by `float32(1 + ε)` under `MeanStd`, as `grpo`'s singletons).
//! verl-agent leaves rows of one trajectory free to carry different scores (its invalid-action
//! penalty makes them differ). Here they must agree (the terminal reward, repeated on every
//! step row), else [`Error::InconsistentTerminalReward`] names the first disagreeing row in
//! caller order, unless the caller declares per-row scores with
//! [`EstimatorInput::with_row_scores`]: then, as in verl-agent, each trajectory's first row
//! (caller order) enters the statistics and every row is normalised with its own score.
//! Supported by `grpo` and `gdpo`.
//!
//! # `grpo_vectorized` (`EstimatorConfig::GrpoVectorized`, verl `compute_grpo_vectorized_outcome_advantage`)
//! Same equation, but the group statistics come from `verl.utils.group_mean_std`: scores cast
//! to float32, μ = Σs / n and σ² = Σ(s − μ)² / (n − 1) accumulated in float32 in row order,
//! σ = √σ² with **no floor** (verl 0.9.1 calls `group_mean_std(scores, g, eps=0.0)`; verl 0.8
//! floored the variance at ε, so σ ≥ 1e-3), singletons μ = 0, σ = 1. (verl 0.9.1's float64
//! vectors match this two-pass variance to the last bit; older verl releases used the one-pass
//! (Σs² − (Σs)²/n) / (n − 1), which differs by ~3e-7 relative on some groups.)
//!
//! # `grpo_passk` (`EstimatorConfig::GrpoPassk`, verl `compute_grpo_passk_outcome_advantage`)
//! Only the best row of each group gets a nonzero advantage: A_max = r_max − r_second_max,
//! divided by (σ_g + ε) under `MeanStd`; every other row gets 0. verl raises for a group of
//! fewer than two rows: we return [`Error::Undefined`].
//!
//! # `gdpo` (`EstimatorConfig::Gdpo`, verl `compute_gdpo_outcome_advantage`, single reward)
//! With one reward component (verl's `config=None` fallback) GDPO is the `grpo` advantage
//! broadcast under the mask, then [batch-whitened](super#batch-whitening) and re-masked.
//! Multi-component GDPO (`gdpo_reward_keys`) is not implemented.
//!
//! # Peer behaviour reproduced
//! - `grpo` singleton groups divide by `float32(1 + ε)` (= 1.0000009537 for ε = 1e-6) even in
//!   a float64 run: verl's singleton σ is `torch.tensor(1.0)`, a float32 tensor, and adding
//!   ε to it stays float32. So a singleton's advantage is s / 1.0000009537, not s.
//! - `grpo_vectorized` computes μ_g and σ_g in float32 (see above), and σ_g + ε in float32;
//!   only the final (s − μ_g) / (σ_g + ε) is float64. Equal scores can therefore give small
//!   nonzero advantages: three scores f32(0.9) give 0.0555495 each (the float32 residual
//!   2^-24 divided by σ + ε ≈ 1.07e-6), as verl 0.9.1 does.
//! - verl's `gdpo` weight is a float32 1.0 (exact) and its whitening counts tokens in float32
//!   (see [batch whitening](super#batch-whitening)).
//!
//! `grpo_vectorized`'s σ_g is the correctly rounded float32 square root. torch's CPU float32
//! `sqrt` is not always correctly rounded (torch 2.15's wheel is 1 ulp off on some inputs), so
//! on those groups verl's advantages differ from ours by a float32 ulp of σ_g (≈ 1.2e-7
//! relative): scores [0, 0, 1, 1, 1] give σ_g = 0.54772252 here, 0.54772258 in that torch.
//!
//! # Deliberate difference
//! Rows are grouped by key equality in every estimator, as verl's `grpo` does. verl 0.9.1's
//! `grpo_vectorized` maps uids through `verl.utils.groupwise.as_torch_index`, which parses
//! strings Python's `int()` accepts: uids `"1"` and `"01"` (or `"7"` and `" 7"`) become one
//! group there, and a negative one (`"-1"`) raises `IndexError`. verl's trainer uids are uuid4
//! strings, which never parse, so its batches group the same on both sides.

mod scalars;
mod variants;

use scalars::{grpo_scalars, token_scalars};

use super::kernel::step_scalars;
use super::{fill_estimator, EstimatorInput, Out, Scratch};
use crate::error::{Error, Range, Result};
use crate::stats::NormMode;

/// Which rows GRPO's group statistics count (verl-agent's `compute_mean_std_cross_steps`).
///
/// ```
/// use beacon_rl::estimator::{GrpoConfig, GrpoStatistics};
/// assert_eq!(GrpoStatistics::default(), GrpoStatistics::Rows);
/// let paper = GrpoConfig::default().with_statistics(GrpoStatistics::Trajectories);
/// assert_eq!(paper.statistics, GrpoStatistics::Trajectories);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum GrpoStatistics {
    /// Every row of the group counts once (verl; verl-agent `compute_mean_std_cross_steps=True`).
    #[default]
    Rows,
    /// Every trajectory of the group counts once, with its first row's score (verl-agent
    /// `compute_mean_std_cross_steps=False`, the paper's GRPO on step rows). See the
    /// module docs (`src/estimator/grpo.rs`).
    Trajectories,
}

/// Parameters of `grpo`, `grpo_vectorized`, `grpo_passk` and `gdpo`. Dr.GRPO is GRPO without
/// the division by the group standard deviation: `with_norm(NormMode::MeanNorm)`, written
/// `grpo:norm=mean_norm`.
///
/// ```
/// use beacon_rl::estimator::{EstimatorConfig, GrpoConfig, NormMode};
/// let c = GrpoConfig::default();
/// assert_eq!((c.std_eps, c.norm), (1e-6, NormMode::MeanStdNorm));
/// let dr_grpo = EstimatorConfig::Grpo(c.with_norm(NormMode::MeanNorm));
/// assert_eq!(dr_grpo, "grpo:norm=mean_norm".parse()?);
/// assert!(EstimatorConfig::Grpo(c.with_std_eps(-1.0)).build().is_err());
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct GrpoConfig {
    /// ε added to the group standard deviation (verl `epsilon`, default 1e-6). Must be finite
    /// and > 0 (an all-equal group would otherwise divide 0 by 0).
    pub std_eps: f64,
    /// Normalization mode (default [`NormMode::MeanStdNorm`]).
    pub norm: NormMode,
    /// Rows or trajectories in the group statistics (default [`GrpoStatistics::Rows`]);
    /// `Trajectories` is supported by `grpo` and `gdpo`.
    pub statistics: GrpoStatistics,
}

impl GrpoConfig {
    /// Checks the parameters.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) unless `std_eps` is finite and > 0.
    pub(crate) fn validate(&self) -> Result<()> {
        Range::POSITIVE.check("std_eps", self.std_eps)
    }

    /// [`validate`](Self::validate), plus: only `grpo` and `gdpo` implement trajectory
    /// statistics.
    fn validate_for(&self, estimator: &'static str) -> Result<()> {
        self.validate()?;
        if self.statistics == GrpoStatistics::Trajectories && !matches!(estimator, "Grpo" | "Gdpo") {
            return Err(Error::InvalidConfig {
                name: "statistics",
                value: f64::NAN,
                expected: "rows (trajectory statistics are implemented by grpo and gdpo)",
            });
        }
        Ok(())
    }
}

impl Default for GrpoConfig {
    /// verl's defaults: `epsilon = 1e-6`, `norm_adv_by_std_in_grpo = true`.
    fn default() -> Self {
        Self {
            std_eps: 1e-6,
            norm: NormMode::MeanStdNorm,
            statistics: GrpoStatistics::Rows,
        }
    }
}

crate::setters::with_setters! {
    GrpoConfig, "use beacon_rl::estimator::{GrpoConfig, GrpoStatistics, NormMode};", GrpoConfig::default();
    /// Sets ε added to the group standard deviation (default 1e-6; finite, > 0).
    with_std_eps(std_eps: f64) = 1e-3;
    /// Sets the normalization mode (default [`NormMode::MeanStdNorm`]).
    with_norm(norm: NormMode) = NormMode::MeanNorm;
    /// Sets which rows the group statistics count (default [`GrpoStatistics::Rows`];
    /// `Trajectories` for `grpo` and `gdpo`).
    with_statistics(statistics: GrpoStatistics) = GrpoStatistics::Trajectories;
}

/// verl's `grpo` (see the module docs (`src/estimator/grpo.rs`)).
///
/// Needs `token_level_rewards` and `response_mask`. Built through [`EstimatorConfig`], as
/// every estimator is; `grpo_vectorized`, `grpo_passk` and `gdpo` take the same [`GrpoConfig`].
///
/// ```
/// use beacon_rl::estimator::{AdvantageEstimator, EstimatorConfig, EstimatorInput, GrpoConfig};
/// use beacon_rl::RolloutBatch;
/// let batch = RolloutBatch::from_group_keys(&["a", "a", "b"], &[1.0, 0.0, 1.0])?;
/// let rewards = [[0.0, 1.0], [0.0, 0.0], [0.0, 1.0]];
/// let mask = [[true, true], [true, true], [true, false]];
/// let input = EstimatorInput::new(&batch).with_token_level_rewards(&rewards).with_response_mask(&mask);
/// let out = EstimatorConfig::Grpo(GrpoConfig::default()).build()?.estimate(&input)?;
/// // Group "a": mean 0.5, std √0.5; group "b" is a singleton: 1 / f32(1 + 1e-6).
/// assert!((out.advantages[[0, 0]] - 0.5 / (0.5f64.sqrt() + 1e-6)).abs() < 1e-12);
/// assert!((out.advantages[[2, 0]] - 1.0 / 1.000_000_953_674_316_4).abs() < 1e-12);
/// assert_eq!(out.advantages[[2, 1]], 0.0);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
///
/// [`EstimatorConfig`]: crate::estimator::EstimatorConfig
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Grpo {
    config: GrpoConfig,
}

impl Grpo {
    /// Validates the parameters and builds the estimator.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when `config` is out of range.
    ///
    /// ```
    /// use beacon_rl::estimator::{EstimatorConfig, GrpoConfig};
    /// assert!(EstimatorConfig::Grpo(GrpoConfig::default()).build().is_ok());
    /// assert!(EstimatorConfig::Grpo(GrpoConfig::default().with_std_eps(0.0)).build().is_err());
    /// ```
    pub(crate) fn new(config: GrpoConfig) -> Result<Self> {
        config.validate_for("Grpo")?;
        Ok(Self { config })
    }
}

/// The variants share [`Grpo`]'s parameters and shape; like it, each is built through
/// `EstimatorConfig`.
macro_rules! grpo_variant {
    ($(#[$doc:meta])* $ty:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq)]
        pub(crate) struct $ty {
            config: GrpoConfig,
        }

        impl $ty {
            /// Validates the parameters ([`Error::InvalidConfig`] when out of range, or when
            /// asking for [`GrpoStatistics::Trajectories`] from `grpo_vectorized` or
            /// `grpo_passk`) and builds the estimator.
            pub(crate) fn new(config: GrpoConfig) -> Result<Self> {
                config.validate_for(stringify!($ty))?;
                Ok(Self { config })
            }
        }
    };
}

grpo_variant!(
    /// verl's `grpo_vectorized`: GRPO with float32 group statistics (see the
    /// module docs (`src/estimator/grpo.rs`)).
    ///
    /// Needs `token_level_rewards` and `response_mask`.
    ///
    /// ```
    /// use beacon_rl::estimator::{AdvantageEstimator, EstimatorConfig, EstimatorInput, GrpoConfig};
    /// use beacon_rl::RolloutBatch;
    /// let batch = RolloutBatch::from_group_keys(&[0, 0, 1], &[0.0; 3])?;
    /// let rewards = [[1.0], [0.0], [0.5]];
    /// let mask = [[true], [true], [true]];
    /// let input = EstimatorInput::new(&batch).with_token_level_rewards(&rewards).with_response_mask(&mask);
    /// let out = EstimatorConfig::GrpoVectorized(GrpoConfig::default()).build()?.estimate(&input)?;
    /// // Singletons use std 1 and add ε in float32, like `grpo`.
    /// assert!((out.advantages[[2, 0]] - 0.5 / 1.000_000_953_674_316_4).abs() < 1e-12);
    /// assert!((out.advantages[[0, 0]] + out.advantages[[1, 0]]).abs() < 1e-6);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    GrpoVectorized
);

grpo_variant!(
    /// verl's `grpo_passk`: only the best row of each group gets r_max − r_second_max (see the
    /// module docs (`src/estimator/grpo.rs`)).
    ///
    /// Needs `token_level_rewards` and `response_mask`; every group must hold ≥ 2 rows.
    ///
    /// ```
    /// use beacon_rl::estimator::{AdvantageEstimator, EstimatorConfig, EstimatorInput, GrpoConfig, NormMode};
    /// use beacon_rl::RolloutBatch;
    /// let batch = RolloutBatch::from_group_keys(&[0, 0, 0], &[0.0; 3])?;
    /// let rewards = [[0.2], [1.0], [0.6]];
    /// let mask = [[true], [true], [true]];
    /// let input = EstimatorInput::new(&batch).with_token_level_rewards(&rewards).with_response_mask(&mask);
    /// let out = EstimatorConfig::GrpoPassk(GrpoConfig::default().with_norm(NormMode::MeanNorm)).build()?.estimate(&input)?;
    /// assert_eq!(out.advantages.column(0).to_vec(), vec![0.0, 1.0 - 0.6, 0.0]);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    GrpoPassk
);

grpo_variant!(
    /// verl's `gdpo` with a single reward: GRPO, then batch whitening under the mask (see the
    /// module docs (`src/estimator/grpo.rs`)).
    ///
    /// Needs `token_level_rewards` and `response_mask` (≥ 2 masked tokens in the batch).
    ///
    /// ```
    /// use beacon_rl::estimator::{AdvantageEstimator, EstimatorConfig, EstimatorInput, GrpoConfig};
    /// use beacon_rl::RolloutBatch;
    /// let batch = RolloutBatch::from_group_keys(&[0, 0], &[0.0; 2])?;
    /// let rewards = [[1.0, 0.0], [0.0, 0.0]];
    /// let mask = [[true, true], [true, false]];
    /// let input = EstimatorInput::new(&batch).with_token_level_rewards(&rewards).with_response_mask(&mask);
    /// let out = EstimatorConfig::Gdpo(GrpoConfig::default()).build()?.estimate(&input)?;
    /// // Masked tokens are whitened to mean 0 over the batch; padding stays 0.
    /// let total: f64 = out.advantages.iter().sum();
    /// assert!(total.abs() < 1e-9);
    /// assert_eq!(out.advantages[[1, 1]], 0.0);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    Gdpo
);

impl Grpo {
    fn fill(&self, input: &EstimatorInput<'_>, out: &mut Out<'_>, ws: &mut Scratch) -> Result<()> {
        let mask = token_scalars(&self.config, input, ws)?;
        out.outcome(&ws.scalars, &mask)
    }

    fn steps(&self, input: &EstimatorInput<'_>, advantages: &mut [f64], ws: &mut Scratch) -> Result<()> {
        let rows_may_differ = input.row_scores.is_some();
        step_scalars(input, advantages, ws, |scores, out, _| {
            grpo_scalars(input.batch, scores, rows_may_differ, &self.config, out)
        })
    }
}

fill_estimator!(Grpo, "grpo", returns = false, steps);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::RolloutBatch;
    use crate::estimator::AdvantageEstimator;
    use ndarray::Array2;

    fn single_token_input(scores: &[f64]) -> (Array2<f64>, Array2<bool>) {
        let rewards = Array2::from_shape_vec((scores.len(), 1), scores.to_vec()).unwrap();
        let mask = Array2::from_elem((scores.len(), 1), true);
        (rewards, mask)
    }

    fn run(est: &dyn AdvantageEstimator, keys: &[u32], scores: &[f64]) -> Result<Vec<f64>> {
        let batch = RolloutBatch::from_group_keys(keys, scores).unwrap();
        let (rewards, mask) = single_token_input(scores);
        let input = EstimatorInput::new(&batch)
            .with_token_level_rewards(&rewards)
            .with_response_mask(&mask);
        Ok(est.estimate(&input)?.advantages.column(0).to_vec())
    }

    #[test]
    fn grpo_hand_computed() {
        // Group of 4 with scores 1, 0, 0, 1: mean 0.5, Σ(s−μ)² = 4 · 0.25 = 1,
        // unbiased var 1/3, std 0.5773502691896258; A = ±0.5 / (0.5773502691896258 + 1e-6).
        let a = run(
            &Grpo::new(GrpoConfig::default()).unwrap(),
            &[0, 0, 0, 0],
            &[1.0, 0.0, 0.0, 1.0],
        )
        .unwrap();
        let expect = 0.5 / (0.577_350_269_189_625_8 + 1e-6);
        assert!((a[0] - expect).abs() < 1e-15);
        assert!((a[1] + expect).abs() < 1e-15);
        // Dr.GRPO: just s − μ = ±0.5.
        let d = run(
            &Grpo::new(GrpoConfig::default().with_norm(NormMode::MeanNorm)).unwrap(),
            &[0, 0, 0, 0],
            &[1.0, 0.0, 0.0, 1.0],
        )
        .unwrap();
        assert_eq!(d, vec![0.5, -0.5, -0.5, 0.5]);
    }

    #[test]
    fn grpo_singleton_divides_by_f32_one_plus_eps() {
        // f32(1 + 1e-6) = 1 + 8 · 2^-23 = 1.00000095367431640625.
        let a = run(&Grpo::new(GrpoConfig::default()).unwrap(), &[0], &[2.0]).unwrap();
        assert_eq!(a[0], 2.0 / 1.000_000_953_674_316_4);
        let d = run(
            &Grpo::new(GrpoConfig::default().with_norm(NormMode::MeanNorm)).unwrap(),
            &[0],
            &[2.0],
        )
        .unwrap();
        assert_eq!(d[0], 2.0);
    }

    #[test]
    fn grpo_all_equal_group_is_zero_in_f64() {
        let a = run(
            &Grpo::new(GrpoConfig::default()).unwrap(),
            &[0, 0, 0],
            &[0.9, 0.9, 0.9],
        )
        .unwrap();
        assert_eq!(a, vec![0.0, 0.0, 0.0]);
    }

    #[test]
    fn grpo_vectorized_has_no_variance_floor_f32_nine_tenths() {
        // verl 0.9.1 calls group_mean_std(scores, g, eps=0.0): no floor on the variance.
        // x = f32(0.9) = 15099494·2^-24. Summed in f32: 3x = 45298482·2^-24 is a tie between
        // multiples of 2^-22 and rounds to even, 45298480·2^-24; / 3 rounds to
        // μ = 15099493·2^-24, so every x − μ = 2^-24 exactly. Σ(x − μ)² = 3·2^-48,
        // var = 1.5·2^-48, σ = √1.5·2^-24 ≈ 7.30e-8, σ + f32(1e-6) ≈ 1.0730e-6 in f32:
        // A = 2^-24 / 1.0730e-6 = 0.0555495 (verl 0.9.1's float64 run). An earlier
        // floor (σ ≥ √1e-6) gave 5.95e-5.
        let x = f64::from(0.9f32);
        let a = run(
            &GrpoVectorized::new(GrpoConfig::default()).unwrap(),
            &[0, 0, 0],
            &[x, x, x],
        )
        .unwrap();
        let denom = 1.5f32.sqrt() * 2f32.powi(-24) + 1e-6f32;
        let expect = 2f64.powi(-24) / f64::from(denom);
        for v in a {
            assert!((v - expect).abs() < 1e-15, "{v} vs {expect}");
            assert!((v - 0.055_549_5).abs() < 1e-7, "{v}");
        }
    }

    #[test]
    fn grpo_vectorized_has_no_variance_floor_close_pair() {
        // [0.5, 0.5005]: d = (f32(0.5005) − 0.5)/2 ≈ 2.5e-4, unbiased var = 2d², σ = √2·d, so
        // A ≈ ±d / (√2·d + 1e-6) = ±1 / (1.41421 + 0.004) = ±0.7051 (verl 0.9.1: ±0.705, the
        // crate's `grpo` agrees); the old floor gave ±0.2497.
        let a = run(
            &GrpoVectorized::new(GrpoConfig::default()).unwrap(),
            &[0, 0],
            &[0.5, 0.5005],
        )
        .unwrap();
        assert!(
            (a[0] + 0.7051).abs() < 2e-4 && (a[1] - 0.7051).abs() < 2e-4,
            "{a:?}"
        );
        let g = run(
            &Grpo::new(GrpoConfig::default()).unwrap(),
            &[0, 0],
            &[0.5, 0.5005],
        )
        .unwrap();
        assert!((a[1] - g[1]).abs() < 1e-3, "{a:?} vs grpo {g:?}");
    }

    #[test]
    fn grpo_vectorized_five_equal_f32_twelve_hundredths() {
        // verl 0.9.1's own note: [f32(0.12)] * 5 -> 0.0074 for every member (float32 mean one
        // ulp off, σ ~ 1e-8 unfloored, divided by σ + 1e-6). Model of the f32 arithmetic
        // (struct-rounded Python): 0.00738903037466948.
        let x = f64::from(0.12f32);
        let a = run(
            &GrpoVectorized::new(GrpoConfig::default()).unwrap(),
            &[0; 5],
            &[x; 5],
        )
        .unwrap();
        for v in a {
            assert!((v - 0.007_389_030_374_669_48).abs() < 1e-12, "{v}");
        }
    }

    #[test]
    fn grpo_vectorized_matches_grpo_on_simple_scores() {
        // 0/1 scores are exact in f32; group 0: 1, 0, 1 -> mean 2/3, var (2 − 4/3)/2 = 1/3.
        let v = run(
            &GrpoVectorized::new(GrpoConfig::default()).unwrap(),
            &[0, 0, 0, 1],
            &[1.0, 0.0, 1.0, 3.0],
        )
        .unwrap();
        let g = run(
            &Grpo::new(GrpoConfig::default()).unwrap(),
            &[0, 0, 0, 1],
            &[1.0, 0.0, 1.0, 3.0],
        )
        .unwrap();
        for (a, b) in v.iter().zip(&g) {
            assert!((a - b).abs() < 1e-6, "{v:?} vs {g:?}");
        }
    }

    #[test]
    fn passk_hand_computed_and_singleton_error() {
        // Scores 0.2, 1.0, 0.6: r_max − r_second = 0.4; mean 0.6, Σ(s−μ)² = 0.16 + 0.16 + 0
        // = 0.32, unbiased var 0.16, std 0.4 -> A = 0.4 / (0.4 + 1e-6).
        let a = run(
            &GrpoPassk::new(GrpoConfig::default()).unwrap(),
            &[0, 0, 0],
            &[0.2, 1.0, 0.6],
        )
        .unwrap();
        assert_eq!(a[0], 0.0);
        assert_eq!(a[2], 0.0);
        assert!((a[1] - 0.4 / (0.4 + 1e-6)).abs() < 1e-12);
        // Ties at the top: r_max − r_second = 0 for everyone.
        let t = run(
            &GrpoPassk::new(GrpoConfig::default()).unwrap(),
            &[0, 0, 0],
            &[1.0, 1.0, 0.0],
        )
        .unwrap();
        assert_eq!(t, vec![0.0, 0.0, 0.0]);
        let err = run(
            &GrpoPassk::new(GrpoConfig::default()).unwrap(),
            &[0, 0, 1],
            &[1.0, 0.0, 1.0],
        )
        .unwrap_err();
        assert!(
            matches!(err, Error::Undefined(ref m) if m.contains("group 1 has 1")),
            "{err}"
        );
    }

    #[test]
    fn gdpo_whitens_grpo_over_masked_tokens() {
        // GRPO scalars ±0.5/(√0.5 + 1e-6) = ±a on two rows of two tokens, one token of row 1
        // masked out: masked tokens a, a, −a: mean a/3, deviations 2a/3, 2a/3, −4a/3,
        // Σ d² = 24a²/9, biased var 8a²/9, × f32(3/2) = 1.5 -> var 4a²/3.
        let batch = RolloutBatch::from_group_keys(&[0, 0], &[1.0, 0.0]).unwrap();
        let rewards = ndarray::array![[1.0, 0.0], [0.0, 0.0]];
        let mask = ndarray::array![[true, true], [true, false]];
        let input = EstimatorInput::new(&batch)
            .with_token_level_rewards(&rewards)
            .with_response_mask(&mask);
        let out = Gdpo::new(GrpoConfig::default())
            .unwrap()
            .estimate(&input)
            .unwrap();
        let a = 0.5 / (0.5f64.sqrt() + 1e-6);
        let var = 4.0 * a * a / 3.0;
        let s = 1.0 / (var + 1e-8).sqrt();
        assert!((out.advantages[[0, 0]] - 2.0 * a / 3.0 * s).abs() < 1e-12);
        assert!((out.advantages[[1, 0]] + 4.0 * a / 3.0 * s).abs() < 1e-12);
        assert_eq!(out.advantages[[1, 1]], 0.0);
        assert!(out.returns.is_none());
    }

    /// GRPO on step rows: `uid`, `traj_uid` and each row's score (its single token's reward).
    fn run_steps(config: GrpoConfig, uid: &[u32], traj: &[u32], scores: &[f64]) -> Result<Vec<f64>> {
        let batch = RolloutBatch::from_row_keys(uid, traj, scores).unwrap();
        let (rewards, mask) = single_token_input(scores);
        let input = EstimatorInput::new(&batch)
            .with_token_level_rewards(&rewards)
            .with_response_mask(&mask);
        Ok(Grpo::new(config)?.estimate(&input)?.advantages.column(0).to_vec())
    }

    fn trajectories(config: GrpoConfig) -> GrpoConfig {
        config.with_statistics(GrpoStatistics::Trajectories)
    }

    #[test]
    fn trajectory_statistics_count_each_trajectory_once() {
        // One task, rows interleaved: a (3 steps, score 1), b (1 step, 0), c (2 steps, 0.5).
        // verl-agent, compute_mean_std_cross_steps=False: one score per (uid, traj_uid), so the
        // statistics are over {1, 0, 0.5}: μ = 1.5 / 3 = 0.5, Σ(s − μ)² = 0.25 + 0.25 + 0 = 0.5,
        // unbiased var 0.5 / 2 = 0.25, σ = 0.5; A = (s − 0.5) / (0.5 + 1e-6) on every row.
        let (uid, traj) = ([0; 6], [1, 2, 1, 3, 1, 3]);
        let scores = [1.0, 0.0, 1.0, 0.5, 1.0, 0.5];
        let a = run_steps(trajectories(GrpoConfig::default()), &uid, &traj, &scores).unwrap();
        let d = 0.5 + 1e-6;
        assert_eq!(a, vec![0.5 / d, -0.5 / d, 0.5 / d, 0.0, 0.5 / d, 0.0]);
        // Dr.GRPO: s − μ = 0.5, −0.5, 0.
        let a = run_steps(
            trajectories(GrpoConfig::default().with_norm(NormMode::MeanNorm)),
            &uid,
            &traj,
            &scores,
        )
        .unwrap();
        assert_eq!(a, vec![0.5, -0.5, 0.5, 0.0, 0.5, 0.0]);
        // Row statistics (verl) weigh a three times: μ = (3 + 0 + 1) / 6 = 2/3, not 0.5.
        let rows = run_steps(
            GrpoConfig::default().with_norm(NormMode::MeanNorm),
            &uid,
            &traj,
            &scores,
        )
        .unwrap();
        assert!((rows[1] + 2.0 / 3.0).abs() < 1e-15, "{rows:?}");
    }

    #[test]
    fn trajectory_statistics_singletons_and_several_groups() {
        // Group 7: one trajectory of two steps, score 2: μ = 0, σ = 1 -> 2 / f32(1 + 1e-6)
        // = 2 / 1.00000095367431640625 on both rows (Dr.GRPO: 2).
        // Group 8: trajectories x (score 3, 1 step) and y (score 1, 2 steps): μ = 2,
        // Σ(s − μ)² = 1 + 1 = 2, var 2 / 1 = 2, σ = √2 -> ±1 / (√2 + 1e-6).
        let uid = [7, 8, 7, 8, 8];
        let traj = [0, 1, 0, 2, 2];
        let scores = [2.0, 3.0, 2.0, 1.0, 1.0];
        let a = run_steps(trajectories(GrpoConfig::default()), &uid, &traj, &scores).unwrap();
        let s = 2.0 / 1.000_000_953_674_316_4;
        let t = 1.0 / (2f64.sqrt() + 1e-6);
        assert_eq!(a, vec![s, t, s, -t, -t]);
        let d = run_steps(
            trajectories(GrpoConfig::default().with_norm(NormMode::MeanNorm)),
            &uid,
            &traj,
            &scores,
        )
        .unwrap();
        assert_eq!(d, vec![2.0, 1.0, 2.0, -1.0, -1.0]);
    }

    #[test]
    fn trajectory_statistics_need_one_score_per_trajectory() {
        // Row 3 (trajectory 1's second row) sums to 0.5 where its first row (row 1) has 0:
        // the trajectory has no single score to count once.
        let batch = RolloutBatch::from_row_keys(&[0; 4], &[0, 1, 0, 1], &[1.0, 0.0, 1.0, 0.0]).unwrap();
        let rewards = ndarray::array![[1.0], [0.0], [1.0], [0.5]];
        let mask = Array2::from_elem((4, 1), true);
        let input = EstimatorInput::new(&batch)
            .with_token_level_rewards(&rewards)
            .with_response_mask(&mask);
        let grpo = Grpo::new(trajectories(GrpoConfig::default())).unwrap();
        assert_eq!(
            grpo.estimate(&input),
            Err(Error::InconsistentTerminalReward {
                row: 3,
                expected: 0.0,
                value: 0.5
            })
        );
        // verl's row statistics take each row as it is.
        assert!(Grpo::new(GrpoConfig::default()).unwrap().estimate(&input).is_ok());
        // Only grpo and gdpo implement trajectory statistics.
        let c = trajectories(GrpoConfig::default());
        assert!(Gdpo::new(c).is_ok());
        assert!(matches!(
            GrpoVectorized::new(c),
            Err(Error::InvalidConfig {
                name: "statistics",
                ..
            })
        ));
        assert!(GrpoPassk::new(c).is_err());
    }

    #[test]
    fn invalid_configs_rejected() {
        for eps in [0.0, -1e-6, f64::NAN, f64::INFINITY] {
            let c = GrpoConfig {
                std_eps: eps,
                ..GrpoConfig::default()
            };
            assert!(matches!(
                Grpo::new(c),
                Err(Error::InvalidConfig { name: "std_eps", .. })
            ));
            assert!(GrpoVectorized::new(c).is_err());
            assert!(GrpoPassk::new(c).is_err());
            assert!(Gdpo::new(c).is_err());
        }
    }
}
