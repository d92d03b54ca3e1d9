//! The GRPO scalar per row: group mean and unbiased standard deviation over rows or over
//! trajectories (see the module docs of `grpo`), with the overflow fallbacks.

use super::{GrpoConfig, GrpoStatistics, NormMode};
use crate::batch::RolloutBatch;
use crate::error::Result;
use crate::estimator::input::check_trajectories_agree;
use crate::estimator::kernel::outcome_scalars;
use crate::estimator::{group_rows, EstimatorInput, Scratch};
use crate::tensor::MaskView;

/// verl's GRPO scalar per row (`compute_grpo_outcome_advantage` before broadcasting), or
/// verl-agent's with trajectory-level statistics, into `out` (one entry per row; every entry
/// is written).
///
/// `rows_may_differ`: the caller declared per-row scores (`row_scores`), so rows of one
/// trajectory may carry different scores (verl-agent's invalid-action penalty).
///
/// # Errors
/// [`Error::InconsistentTerminalReward`](crate::Error::InconsistentTerminalReward) under [`GrpoStatistics::Trajectories`] when rows of
/// one trajectory carry different scores and `rows_may_differ` is false.
pub(crate) fn grpo_scalars(
    batch: &RolloutBatch,
    scores: &[f64],
    rows_may_differ: bool,
    config: &GrpoConfig,
    out: &mut [f64],
) -> Result<()> {
    if config.statistics == GrpoStatistics::Trajectories {
        return grpo_trajectory_scalars(batch, scores, rows_may_differ, config, out);
    }
    // Singleton σ = float32 1.0, plus ε in float32 (peer behaviour reproduced).
    let singleton_denom = f64::from(1.0f32 + config.std_eps as f32);
    for g in 0..batch.num_groups() {
        let rows = group_rows(batch, g);
        let n = rows.len();
        if n == 1 {
            let r = rows[0];
            out[r] = match config.norm {
                NormMode::MeanStdNorm => scores[r] / singleton_denom,
                NormMode::MeanNorm => scores[r],
            };
            continue;
        }
        let mean = group_mean(rows, scores);
        match config.norm {
            NormMode::MeanNorm => {
                for &r in rows {
                    out[r] = scores[r] - mean;
                }
            }
            NormMode::MeanStdNorm => {
                let denom = unbiased_std(rows, scores, mean) + config.std_eps;
                for &r in rows {
                    out[r] = (scores[r] - mean) / denom;
                }
            }
        }
    }
    Ok(())
}

/// verl-agent's `compute_grpo_outcome_advantage(..., compute_mean_std_cross_steps=False)`:
/// statistics over each group's trajectories (first row's score), each row normalised with its
/// own score (see the module docs). Unless `rows_may_differ`, rows of a trajectory must agree.
fn grpo_trajectory_scalars(
    batch: &RolloutBatch,
    scores: &[f64],
    rows_may_differ: bool,
    config: &GrpoConfig,
    out: &mut [f64],
) -> Result<()> {
    // One score per trajectory: every row must carry its trajectory's (first row's) score,
    // unless the caller declared per-row scores (then verl-agent's first row counts).
    if !rows_may_differ {
        check_trajectories_agree(batch, scores)?;
    }
    let traj_score = |j: usize| scores[batch.trajectory_rows(j)[0]];
    let singleton_denom = f64::from(1.0f32 + config.std_eps as f32);
    for g in 0..batch.num_groups() {
        let trajs = batch.group_trajectories(g);
        let n = trajs.len();
        let (mean, denom) = if n == 1 {
            // torch.tensor(0.0) and torch.tensor(1.0) + ε, the latter in float32.
            (0.0, singleton_denom)
        } else {
            let mean = trajs.clone().map(traj_score).sum::<f64>() / n as f64;
            let sq: f64 = trajs
                .clone()
                .map(|j| {
                    let d = traj_score(j) - mean;
                    d * d
                })
                .sum();
            (mean, (sq / (n - 1) as f64).sqrt() + config.std_eps)
        };
        for &r in group_rows(batch, g) {
            out[r] = match config.norm {
                NormMode::MeanStdNorm => (scores[r] - mean) / denom,
                NormMode::MeanNorm => scores[r] - mean,
            };
        }
    }
    Ok(())
}

/// The group's mean score Σs / n; when the plain sum overflows, s·Σ(x/s)/n with s = max |x|
/// (only then, so every finite result keeps verl's bits).
pub(super) fn group_mean(rows: &[usize], scores: &[f64]) -> f64 {
    let n = rows.len() as f64;
    let mean = rows.iter().map(|&r| scores[r]).sum::<f64>() / n;
    if mean.is_finite() {
        return mean;
    }
    let scale = group_scale(rows, scores);
    rows.iter().map(|&r| scores[r] / scale).sum::<f64>() / n * scale
}

/// `torch.std` (n − 1) of the group's scores; `rows.len() >= 2`.
pub(super) fn unbiased_std(rows: &[usize], scores: &[f64], mean: f64) -> f64 {
    let sq: f64 = rows
        .iter()
        .map(|&r| {
            let d = scores[r] - mean;
            d * d
        })
        .sum();
    let std = (sq / (rows.len() - 1) as f64).sqrt();
    if std.is_finite() {
        return std;
    }
    // Σ(x − μ)² overflowed: σ = s·√(Σ((x − μ)/s)² / (n − 1)), s = max |x|. NaN when σ itself
    // exceeds f64::MAX, so the caller's output check reports it instead of dividing by ∞ into
    // a plausible 0.
    let scale = group_scale(rows, scores);
    let sq: f64 = rows
        .iter()
        .map(|&r| {
            let d = scores[r] / scale - mean / scale;
            d * d
        })
        .sum();
    let std = scale * (sq / (rows.len() - 1) as f64).sqrt();
    if std.is_finite() {
        std
    } else {
        f64::NAN
    }
}

/// The group's max |score|, the unit of the overflow fallbacks.
fn group_scale(rows: &[usize], scores: &[f64]) -> f64 {
    rows.iter().fold(0.0f64, |m, &r| m.max(scores[r].abs()))
}

/// The token path of `grpo` and `gdpo`: the checked row scores and mask, then the per-row
/// advantages into `ws.scalars` (checked finite); returns the mask.
pub(super) fn token_scalars<'a>(
    config: &GrpoConfig,
    input: &EstimatorInput<'a>,
    ws: &mut Scratch,
) -> Result<MaskView<'a>> {
    let rows_may_differ = input.row_scores.is_some();
    outcome_scalars(input, ws, |_, scores, out, _| {
        grpo_scalars(input.batch, scores, rows_may_differ, config, out)
    })
}
