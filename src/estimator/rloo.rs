//! RLOO (REINFORCE leave-one-out): `rloo` and `rloo_vectorized`.
//!
//! Each row's score is the sum of its `token_level_rewards` over all L positions; rows are
//! grouped by uid. The baseline of a row is the mean score of the *other* rows of its group:
//!
//! ```text
//! A_i = s_i − (Σ_{j≠i} s_j) / (n − 1) = n/(n − 1) · (s_i − μ_g)      (n ≥ 2)
//! ```
//!
//! The scalar is broadcast to the row's tokens and multiplied by the response mask;
//! returns = advantages.
//!
//! - `rloo` (`EstimatorConfig::Rloo`, verl `compute_rloo_outcome_advantage`): computed as
//!   `s·n/(n−1) − μ·n/(n−1)`; a **singleton keeps its raw score** (A = s).
//! - `rloo_vectorized` (`EstimatorConfig::RlooVectorized`, verl `compute_rloo_vectorized_outcome_advantage`):
//!   computed as `(n·s − Σ_g s) / max(n − 1, 1) · [n > 1]`; a **singleton gets 0**.
//!
//! # Peer behaviour reproduced
//! The two verl functions disagree on singletons (raw score vs 0); each estimator follows its
//! own verl function. No deliberate difference from verl.

use super::kernel::{outcome_scalars, step_scalars};
use super::{fill_estimator, group_rows, EstimatorInput, Out, Scratch};
use crate::batch::RolloutBatch;
use crate::error::Result;

/// verl's `rloo` (see the module docs (`src/estimator/rloo.rs`)). Needs `token_level_rewards` and
/// `response_mask`.
///
/// ```
/// use beacon_rl::estimator::EstimatorConfig;
/// use beacon_rl::estimator::{AdvantageEstimator, EstimatorInput};
/// use beacon_rl::RolloutBatch;
/// let batch = RolloutBatch::from_group_keys(&[0, 0, 1], &[0.0; 3])?;
/// let rewards = [[1.0], [0.0], [0.7]];
/// let mask = [[true], [true], [true]];
/// let input = EstimatorInput::new(&batch).with_token_level_rewards(&rewards).with_response_mask(&mask);
/// let out = EstimatorConfig::Rloo.build()?.estimate(&input)?;
/// assert_eq!(out.advantages.column(0).to_vec(), vec![1.0, -1.0, 0.7]); // singleton keeps 0.7
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Rloo;

/// verl's `rloo_vectorized` (see the module docs (`src/estimator/rloo.rs`)). Needs `token_level_rewards` and
/// `response_mask`.
///
/// ```
/// use beacon_rl::estimator::EstimatorConfig;
/// use beacon_rl::estimator::{AdvantageEstimator, EstimatorInput};
/// use beacon_rl::RolloutBatch;
/// let batch = RolloutBatch::from_group_keys(&[0, 0, 1], &[0.0; 3])?;
/// let rewards = [[1.0], [0.0], [0.7]];
/// let mask = [[true], [true], [true]];
/// let input = EstimatorInput::new(&batch).with_token_level_rewards(&rewards).with_response_mask(&mask);
/// let out = EstimatorConfig::RlooVectorized.build()?.estimate(&input)?;
/// assert_eq!(out.advantages.column(0).to_vec(), vec![1.0, -1.0, 0.0]); // singleton gets 0
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct RlooVectorized;

/// Into `out` (one entry per row, every entry written).
fn rloo_scalars(batch: &RolloutBatch, scores: &[f64], out: &mut [f64]) {
    out.copy_from_slice(scores); // singletons keep their score
    for g in 0..batch.num_groups() {
        let rows = group_rows(batch, g);
        if rows.len() < 2 {
            continue;
        }
        let n = rows.len() as f64;
        let mean = rows.iter().map(|&r| scores[r]).sum::<f64>() / n;
        // Same operation order as verl: s·n/(n−1) − μ·n/(n−1).
        let mean_term = mean * n / (n - 1.0);
        for &r in rows {
            out[r] = scores[r] * n / (n - 1.0) - mean_term;
        }
    }
}

/// Into `out` (one entry per row, every entry written).
fn rloo_vectorized_scalars(batch: &RolloutBatch, scores: &[f64], out: &mut [f64]) {
    out.fill(0.0); // singletons get 0
    for g in 0..batch.num_groups() {
        let rows = group_rows(batch, g);
        if rows.len() < 2 {
            continue;
        }
        let c = rows.len() as f64;
        let sum: f64 = rows.iter().map(|&r| scores[r]).sum();
        for &r in rows {
            out[r] = (c * scores[r] - sum) / (c - 1.0);
        }
    }
}

impl Rloo {
    fn fill(&self, input: &EstimatorInput<'_>, out: &mut Out<'_>, ws: &mut Scratch) -> Result<()> {
        let mask = outcome_scalars(input, ws, |_, scores, out, _| {
            rloo_scalars(input.batch, scores, out);
            Ok(())
        })?;
        out.outcome(&ws.scalars, &mask)
    }

    fn steps(&self, input: &EstimatorInput<'_>, advantages: &mut [f64], ws: &mut Scratch) -> Result<()> {
        step_scalars(input, advantages, ws, |scores, out, _| {
            rloo_scalars(input.batch, scores, out);
            Ok(())
        })
    }
}

fill_estimator!(Rloo, "rloo", returns = false, steps);

impl RlooVectorized {
    fn fill(&self, input: &EstimatorInput<'_>, out: &mut Out<'_>, ws: &mut Scratch) -> Result<()> {
        let mask = outcome_scalars(input, ws, |_, scores, out, _| {
            rloo_vectorized_scalars(input.batch, scores, out);
            Ok(())
        })?;
        out.outcome(&ws.scalars, &mask)
    }

    fn steps(&self, input: &EstimatorInput<'_>, advantages: &mut [f64], ws: &mut Scratch) -> Result<()> {
        step_scalars(input, advantages, ws, |scores, out, _| {
            rloo_vectorized_scalars(input.batch, scores, out);
            Ok(())
        })
    }
}

fill_estimator!(RlooVectorized, "rloo_vectorized", returns = false, steps);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leave_one_out_hand_computed() {
        // Scores 1, 0, 0.5 in one group: baselines (0 + 0.5)/2 = 0.25, (1 + 0.5)/2 = 0.75,
        // (1 + 0)/2 = 0.5 -> A = 0.75, −0.75, 0.0.
        let batch = RolloutBatch::from_group_keys(&[0, 0, 0], &[0.0; 3]).unwrap();
        let s = [1.0, 0.0, 0.5];
        let (mut a, mut v) = ([0.0; 3], [f64::NAN; 3]);
        rloo_scalars(&batch, &s, &mut a);
        rloo_vectorized_scalars(&batch, &s, &mut v);
        for (x, e) in a.iter().zip([0.75, -0.75, 0.0]) {
            assert!((x - e).abs() < 1e-15);
        }
        for (x, e) in v.iter().zip([0.75, -0.75, 0.0]) {
            assert!((x - e).abs() < 1e-15);
        }
    }

    #[test]
    fn agent_rows_group_across_trajectories() {
        // Group "u": trajectory a has rows 0, 2 (score 1 each row), trajectory b row 1 (0):
        // verl groups the 3 rows: mean 2/3, A = 3/2 · (s − 2/3) = 0.5, −1, 0.5.
        let batch =
            RolloutBatch::from_row_keys(&["u", "u", "u"], &["a", "b", "a"], &[1.0, 0.0, 1.0]).unwrap();
        let mut a = [f64::NAN; 3];
        rloo_scalars(&batch, &[1.0, 0.0, 1.0], &mut a);
        for (x, e) in a.iter().zip([0.5, -1.0, 0.5]) {
            assert!((x - e).abs() < 1e-15);
        }
    }
}
