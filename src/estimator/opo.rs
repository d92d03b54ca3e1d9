//! OPO (on-policy RL with optimal baseline): `opo` (`EstimatorConfig::Opo`, verl
//! `compute_opo_outcome_advantage`).
//!
//! Each row's score s_i is the sum of its `token_level_rewards` over all L positions and its
//! length ℓ_i the number of masked tokens. The baseline of a group is the length-weighted mean
//! score:
//!
//! ```text
//! b_g = Σ_{i∈g} ℓ_i s_i / Σ_{i∈g} ℓ_i        A_i = s_i − b_g      (singleton: b = 0)
//! ```
//!
//! broadcast to the row's tokens and multiplied by the response mask; returns = advantages.
//!
//! # Deliberate difference
//! A group of ≥ 2 rows whose masks are all empty has Σ ℓ = 0: verl divides 0 by 0 and returns
//! NaN silently; we return [`Error::Undefined`].

use super::kernel::outcome_scalars;
use super::{fill_estimator, group_rows, masked_counts, EstimatorInput, Out, Scratch};
use crate::error::{Error, Result};

/// verl's `opo` (see the module docs (`src/estimator/opo.rs`)). Needs `token_level_rewards` and
/// `response_mask`.
///
/// ```
/// use beacon_rl::estimator::EstimatorConfig;
/// use beacon_rl::estimator::{AdvantageEstimator, EstimatorInput};
/// use beacon_rl::RolloutBatch;
/// let batch = RolloutBatch::from_group_keys(&[0, 0], &[0.0; 2])?;
/// let rewards = [[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]];
/// let mask = [[true, true, true], [true, false, false]];
/// let input = EstimatorInput::new(&batch).with_token_level_rewards(&rewards).with_response_mask(&mask);
/// let out = EstimatorConfig::Opo.build()?.estimate(&input)?;
/// // b = (3 · 1 + 1 · 0) / (3 + 1) = 0.75.
/// assert_eq!(out.advantages.row(0).to_vec(), vec![0.25, 0.25, 0.25]);
/// assert_eq!(out.advantages.row(1).to_vec(), vec![-0.75, 0.0, 0.0]);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Opo;

impl Opo {
    fn fill(&self, input: &EstimatorInput<'_>, out: &mut Out<'_>, ws: &mut Scratch) -> Result<()> {
        let batch = input.batch;
        let mask = outcome_scalars(input, ws, |mask, scores, scalars, ws| {
            masked_counts(mask, &mut ws.counts)?;
            let lengths = &ws.counts;
            scalars.copy_from_slice(scores); // singletons: baseline 0
            for g in 0..batch.num_groups() {
                let rows = group_rows(batch, g);
                if rows.len() < 2 {
                    continue;
                }
                let total_len: f64 = rows.iter().map(|&r| lengths[r] as f64).sum();
                if total_len == 0.0 {
                    return Err(Error::Undefined(format!(
                        "opo: every row of group {g} has an empty response mask (verl divides 0 by 0)"
                    )));
                }
                let weighted: f64 = rows.iter().map(|&r| lengths[r] as f64 * scores[r]).sum();
                let baseline = weighted / total_len;
                for &r in rows {
                    scalars[r] = scores[r] - baseline;
                }
            }
            Ok(())
        })?;
        out.outcome(&ws.scalars, &mask)
    }
}

fill_estimator!(Opo, "opo", returns = false);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimator::AdvantageEstimator;
    use crate::RolloutBatch;
    use ndarray::array;

    #[test]
    fn length_weighted_baseline_and_singleton() {
        // Group 0: lengths 2 and 1, scores 1 and 0.5: b = (2·1 + 1·0.5)/3 = 2.5/3.
        // Group 1 (singleton): score 0.25 passes through.
        let batch = RolloutBatch::from_group_keys(&[0, 0, 1], &[0.0; 3]).unwrap();
        let rewards = array![[0.0, 1.0], [0.5, 0.0], [0.25, 0.0]];
        let mask = array![[true, true], [true, false], [true, false]];
        let input = EstimatorInput::new(&batch)
            .with_token_level_rewards(&rewards)
            .with_response_mask(&mask);
        let a = Opo.estimate(&input).unwrap().advantages;
        let b = 2.5 / 3.0;
        assert!((a[[0, 1]] - (1.0 - b)).abs() < 1e-15);
        assert!((a[[1, 0]] - (0.5 - b)).abs() < 1e-15);
        assert_eq!(a[[1, 1]], 0.0);
        assert_eq!(a[[2, 0]], 0.25);
    }

    #[test]
    fn empty_group_masks_are_undefined() {
        let batch = RolloutBatch::from_group_keys(&[0, 0], &[0.0; 2]).unwrap();
        let rewards = array![[1.0], [0.0]];
        let mask = array![[false], [false]];
        let input = EstimatorInput::new(&batch)
            .with_token_level_rewards(&rewards)
            .with_response_mask(&mask);
        assert!(matches!(Opo.estimate(&input), Err(Error::Undefined(_))));
    }
}
