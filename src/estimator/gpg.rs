//! GPG (group policy gradient): `gpg` ([`Gpg`], verl `compute_gpg_outcome_advantage`).
//!
//! Each row's score s_i is the sum of its `token_level_rewards` over all L positions; rows are
//! grouped by uid:
//!
//! ```text
//! α   = B / max(#{i : s_i ≠ 0}, 1)          (B = rows in the batch)
//! A_i = α · (s_i − μ_g) / f_norm            (singleton: μ = 0)
//! ```
//!
//! broadcast to the row's tokens and multiplied by the response mask; returns = advantages.
//!
//! # Peer behaviour reproduced
//! - verl's function takes an `alpha` argument but **ignores** it: α is always recomputed from
//!   the batch as above, so there is no `alpha` parameter here.
//! - α is a float32 tensor in verl, and torch evaluates `B / m` (a Python int over an int64
//!   tensor) as `m.reciprocal() * B`: α = f32(f32(1/m) · B). For B = 12, m = 7 that is
//!   1.7142858505 (f32(12/7) would be 1.7142857313, the exact value 1.7142857143).
//! - verl computes a group standard deviation it never uses; so do we not.
//!
//! No deliberate difference from verl.

use super::kernel::outcome_scalars;
use super::{fill_estimator, group_rows, EstimatorInput, Out, Scratch};
use crate::error::{Range, Result};

/// Parameters of `gpg`.
///
/// ```
/// use beacon_rl::estimator::{EstimatorConfig, GpgConfig};
/// assert_eq!(GpgConfig::default().f_norm, 1.0);
/// assert!(EstimatorConfig::Gpg(GpgConfig::default().with_f_norm(-1.0)).build().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct GpgConfig {
    /// Divisor of every advantage (verl `f_norm`, default 1.0). Must be finite and > 0.
    pub f_norm: f64,
}

impl GpgConfig {
    /// Checks the parameters.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) unless `f_norm` is finite and > 0.
    pub(crate) fn validate(&self) -> Result<()> {
        Range::POSITIVE.check("f_norm", self.f_norm)
    }
}

impl Default for GpgConfig {
    /// verl's default: `f_norm = 1.0`.
    fn default() -> Self {
        Self { f_norm: 1.0 }
    }
}

crate::setters::with_setters! {
    GpgConfig, "use beacon_rl::estimator::GpgConfig;", GpgConfig::default();
    /// Sets the divisor of every advantage (default 1.0; finite, > 0).
    with_f_norm(f_norm: f64) = 2.0;
}

/// verl's `gpg` (see the module docs (`src/estimator/gpg.rs`)). Needs `token_level_rewards` and
/// `response_mask`.
///
/// ```
/// use beacon_rl::estimator::{EstimatorConfig, GpgConfig};
/// use beacon_rl::estimator::{AdvantageEstimator, EstimatorInput};
/// use beacon_rl::RolloutBatch;
/// let batch = RolloutBatch::from_group_keys(&[0, 0, 0, 0], &[0.0; 4])?;
/// let rewards = [[1.0], [0.0], [0.0], [0.0]];
/// let mask = [[true]; 4];
/// let input = EstimatorInput::new(&batch).with_token_level_rewards(&rewards).with_response_mask(&mask);
/// let out = EstimatorConfig::Gpg(GpgConfig::default()).build()?.estimate(&input)?;
/// // α = 4 rows / 1 nonzero score = 4; mean 0.25: A = 4 · 0.75 = 3 and 4 · (−0.25) = −1.
/// assert_eq!(out.advantages.column(0).to_vec(), vec![3.0, -1.0, -1.0, -1.0]);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Gpg {
    config: GpgConfig,
}

impl Gpg {
    /// Validates the parameters and builds the estimator.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) when `config` is out of range.
    ///
    /// ```
    /// # use beacon_rl::estimator::{EstimatorConfig, GpgConfig};
    /// assert!(EstimatorConfig::Gpg(GpgConfig::default().with_f_norm(f64::NAN)).build().is_err());
    /// ```
    pub(crate) fn new(config: GpgConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self { config })
    }
}

/// α = B / max(m, 1) as verl's `bsz / m.clamp(min=1)` computes it: torch's reflected division
/// `int / tensor` is `tensor.reciprocal() * int`, in float32.
fn gpg_alpha(rows: usize, nonzero: usize) -> f64 {
    let reciprocal = 1.0f32 / nonzero.max(1) as f32;
    f64::from(reciprocal * rows as f32)
}

impl Gpg {
    fn fill(&self, input: &EstimatorInput<'_>, out: &mut Out<'_>, ws: &mut Scratch) -> Result<()> {
        let batch = input.batch;
        let mask = outcome_scalars(input, ws, |_, scores, scalars, _| {
            let nonzero = scores.iter().filter(|&&s| s != 0.0).count();
            let alpha = gpg_alpha(scores.len(), nonzero);
            for g in 0..batch.num_groups() {
                let rows = group_rows(batch, g);
                let mean = if rows.len() == 1 {
                    0.0
                } else {
                    rows.iter().map(|&r| scores[r]).sum::<f64>() / rows.len() as f64
                };
                for &r in rows {
                    scalars[r] = alpha * (scores[r] - mean) / self.config.f_norm;
                }
            }
            Ok(())
        })?;
        out.outcome(&ws.scalars, &mask)
    }
}

fill_estimator!(Gpg, "gpg", returns = false);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimator::AdvantageEstimator;
    use crate::RolloutBatch;

    #[test]
    fn alpha_is_float32_reciprocal_times_rows() {
        // f32(1/7) = 0.1428571492433548; × 12 = 1.7142857909202576, a tie between the f32
        // neighbours 1.7142857313156128 and 1.7142858505249023, rounded to even: the latter.
        assert_eq!(gpg_alpha(12, 7), 1.714_285_850_524_902_3);
        // f32(1/6) · 16 = 2.6666667461395264.
        assert_eq!(gpg_alpha(16, 6), 2.666_666_746_139_526_4);
        // No nonzero score: clamp to 1 -> α = B.
        assert_eq!(gpg_alpha(5, 0), 5.0);
    }

    #[test]
    fn singleton_keeps_scaled_score_and_f_norm_divides() {
        // Rows: group 0 = {1.0, 0.0}, group 1 = {0.5}. Nonzero scores: 2 of 3 -> α = 1.5.
        // Group 0 mean 0.5 -> A = 1.5 · (±0.5) / 2 = ±0.375; singleton A = 1.5 · 0.5 / 2 = 0.375.
        let batch = RolloutBatch::from_group_keys(&[0, 0, 1], &[0.0; 3]).unwrap();
        let rewards = [[1.0], [0.0], [0.5]];
        let mask = [[true], [true], [true]];
        let input = EstimatorInput::new(&batch)
            .with_token_level_rewards(&rewards)
            .with_response_mask(&mask);
        let a = Gpg::new(GpgConfig { f_norm: 2.0 })
            .unwrap()
            .estimate(&input)
            .unwrap()
            .advantages;
        assert_eq!(a.column(0).to_vec(), vec![0.375, -0.375, 0.375]);
    }
}
