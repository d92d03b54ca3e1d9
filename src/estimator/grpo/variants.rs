//! `grpo_vectorized` (float32 group statistics), `grpo_passk` (best row only) and `gdpo`
//! (GRPO, then batch whitening): the variants of the module docs of `grpo`.

use super::scalars::{group_mean, token_scalars, unbiased_std};
use super::{Gdpo, GrpoConfig, GrpoPassk, GrpoVectorized, NormMode};
use crate::batch::RolloutBatch;
use crate::error::{Error, Result};
use crate::estimator::kernel::{outcome_scalars, step_scalars};
use crate::estimator::whiten::whiten_outcome;
use crate::estimator::{fill_estimator, group_rows, row_groups_into, EstimatorInput, Out, Scratch};

impl GrpoVectorized {
    fn fill(&self, input: &EstimatorInput<'_>, out: &mut Out<'_>, ws: &mut Scratch) -> Result<()> {
        let mask = outcome_scalars(input, ws, |_, scores, out, ws| {
            grpo_vectorized_scalars(input.batch, &self.config, scores, ws, out);
            Ok(())
        })?;
        out.outcome(&ws.scalars, &mask)
    }

    fn steps(&self, input: &EstimatorInput<'_>, advantages: &mut [f64], ws: &mut Scratch) -> Result<()> {
        step_scalars(input, advantages, ws, |scores, out, ws| {
            grpo_vectorized_scalars(input.batch, &self.config, scores, ws, out);
            Ok(())
        })
    }
}

fill_estimator!(GrpoVectorized, "grpo_vectorized", returns = false, steps);

/// verl 0.9.1's `verl.utils.group_mean_std` in float32 (row-order accumulation, as
/// `index_add_`; two-pass variance), then the float64 normalization of
/// `compute_grpo_vectorized_outcome_advantage`, into `out` (one entry per row, every entry
/// written).
fn grpo_vectorized_scalars(
    batch: &RolloutBatch,
    config: &GrpoConfig,
    scores: &[f64],
    ws: &mut Scratch,
    out: &mut [f64],
) {
    let num_groups = batch.num_groups();
    row_groups_into(batch, &mut ws.groups);
    let groups = &ws.groups;
    let (count, mean, sq) = (&mut ws.f32_a, &mut ws.f32_b, &mut ws.f32_c);
    for v in [&mut *count, &mut *mean, &mut *sq] {
        v.clear();
        v.resize(num_groups, 0.0);
    }
    for (&g, &s) in groups.iter().zip(scores) {
        count[g] += 1.0;
        mean[g] += s as f32;
    }
    for (m, &c) in mean.iter_mut().zip(count.iter()) {
        *m /= c.max(1.0);
    }
    // Two-pass variance in float32: Σ (x − μ)² accumulated in row order.
    for (&g, &s) in groups.iter().zip(scores) {
        let d = s as f32 - mean[g];
        sq[g] += d * d;
    }
    let eps32 = config.std_eps as f32;
    // (mean, std + ε) per group, both float32 like verl: the std replaces `sq` in place.
    // verl 0.9.1 calls `group_mean_std` with `eps=0.0`: the variance has no floor (verl 0.8
    // floored it at ε).
    for g in 0..num_groups {
        if count[g] <= 1.0 {
            mean[g] = 0.0;
            sq[g] = 1.0 + eps32;
        } else {
            let var = sq[g] / (count[g] - 1.0).max(1.0);
            let std = if var.is_finite() {
                var.sqrt()
            } else {
                // Σ(x − μ)² overflowed float32: recompute σ in units of the group's max |x|
                // (only here, so every finite result keeps verl's bits).
                scaled_std_f32(groups, scores, g, mean[g], count[g])
            };
            sq[g] = std + eps32;
        }
    }
    for (o, (&g, &s)) in out.iter_mut().zip(groups.iter().zip(scores)) {
        let centered = s - f64::from(mean[g]);
        *o = match config.norm {
            NormMode::MeanStdNorm => centered / f64::from(sq[g]),
            NormMode::MeanNorm => centered,
        };
    }
}

/// Float32 unbiased standard deviation of group `g`'s scores around `mean`, computed as
/// s·√(Σ((x − μ)/s)² / (n − 1)) with s the group's max |x|: the fallback when the plain sum of
/// squares overflows float32. NaN when σ itself exceeds f32::MAX, so that the caller's output
/// check reports it instead of dividing by ∞ into a plausible 0.
fn scaled_std_f32(groups: &[usize], scores: &[f64], g: usize, mean: f32, count: f32) -> f32 {
    let in_group = || {
        groups
            .iter()
            .zip(scores)
            .filter(move |&(&gg, _)| gg == g)
            .map(|(_, &s)| s as f32)
    };
    let scale = in_group().fold(0.0f32, |m, x| m.max(x.abs()));
    let sq: f32 = in_group()
        .map(|x| {
            let d = x / scale - mean / scale;
            d * d
        })
        .sum();
    let std = scale * (sq / (count - 1.0).max(1.0)).sqrt();
    if std.is_finite() {
        std
    } else {
        f32::NAN
    }
}

impl GrpoPassk {
    fn fill(&self, input: &EstimatorInput<'_>, out: &mut Out<'_>, ws: &mut Scratch) -> Result<()> {
        let batch = input.batch;
        let mask = outcome_scalars(input, ws, |_, scores, scalars, _| {
            passk_scalars(batch, &self.config, scores, scalars)
        })?;
        out.outcome(&ws.scalars, &mask)
    }
}

fill_estimator!(GrpoPassk, "grpo_passk", returns = false);

/// `grpo_passk`'s scalar per row into `scalars` (zeros): only each group's best row gets one.
fn passk_scalars(
    batch: &RolloutBatch,
    config: &GrpoConfig,
    scores: &[f64],
    scalars: &mut [f64],
) -> Result<()> {
    for g in 0..batch.num_groups() {
        let rows = group_rows(batch, g);
        if rows.len() < 2 {
            return Err(Error::Undefined(format!(
                "grpo_passk requires at least 2 samples per group; group {g} has {} (verl raises ValueError)",
                rows.len()
            )));
        }
        // Best row (first of equal maxima) and the second-largest score.
        let mut best = rows[0];
        for &r in &rows[1..] {
            if scores[r] > scores[best] {
                best = r;
            }
        }
        let second = rows
            .iter()
            .filter(|&&r| r != best)
            .map(|&r| scores[r])
            .fold(f64::NEG_INFINITY, f64::max);
        let mut adv = scores[best] - second;
        if config.norm == NormMode::MeanStdNorm {
            let mean = group_mean(rows, scores);
            adv /= unbiased_std(rows, scores, mean) + config.std_eps;
        }
        scalars[best] = adv;
    }
    Ok(())
}

impl Gdpo {
    fn fill(&self, input: &EstimatorInput<'_>, out: &mut Out<'_>, ws: &mut Scratch) -> Result<()> {
        let mask = token_scalars(&self.config, input, ws)?;
        whiten_outcome(out, &ws.scalars, &mask, &mut ws.counts, &mut ws.acc_a)
    }
}

fill_estimator!(Gdpo, "gdpo", returns = false);
