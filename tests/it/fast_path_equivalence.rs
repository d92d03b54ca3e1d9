//! The optimised verl baselines against a frozen copy of the straightforward implementation
//! they replaced (commit ed3db21), compared **bit for bit** (`f64::to_bits`, so −0.0 vs +0.0
//! and NaN payloads count) and error for error, on random batches: random and prefix masks,
//! singleton groups, agent batches (several rows per trajectory), strided (column-major)
//! inputs, huge values that overflow, zero-width matrices. Also checks that `estimate_into`
//! into dirty, contiguous or strided caller buffers equals `estimate` for every estimator.
//!
//! The `reference` module below is the old code, kept deliberately naive (sequential sums,
//! zero-filled outputs, one pass per step) and written against the public API only. Its
//! `masked_whiten` sums follow the order release 0.2 documents (eight partial sums per row,
//! see `masked_sum`), written naively here.

use beacon_rl::estimator::{
    AdvantageEstimator, EstimatorConfig, EstimatorInput, GaeConfig, GpgConfig, GrpoConfig, NormMode,
    OptimalTokenBaselineConfig, ReinforcePlusPlusConfig, Workspace, ZeroTail,
};
use beacon_rl::tensor::{FloatView, MaskView};
use beacon_rl::{Error, RolloutBatch};
use ndarray::{Array2, ArrayView2};
use proptest::prelude::*;

use crate::common;

/// Advantages and returns (the latter equal to the former for outcome estimators), as the
/// old API returned them.
#[derive(Debug)]
struct Advantages {
    advantages: Array2<f64>,
    returns: Array2<f64>,
}

impl From<beacon_rl::estimator::Advantages> for Advantages {
    fn from(out: beacon_rl::estimator::Advantages) -> Self {
        Self {
            returns: out.returns().clone(),
            advantages: out.advantages,
        }
    }
}

/// The `f64` matrix behind a view (these tests only build `f64` inputs).
fn f64_view(v: FloatView<'_>) -> ArrayView2<'_, f64> {
    match v {
        FloatView::F64(v) => v,
        other => panic!("f64 inputs only: {other:?}"),
    }
}

/// The `bool` matrix behind a mask view (these tests only build `bool` masks).
fn bool_view(m: MaskView<'_>) -> ArrayView2<'_, bool> {
    match m {
        MaskView::Bool(m) => m,
        other => panic!("bool masks only: {other:?}"),
    }
}

// The old code's index loops are kept as they were.
#[allow(clippy::needless_range_loop)]
mod reference {
    //! The pre-optimisation estimators, ported verbatim to the public API.
    use super::*;

    type Result<T> = std::result::Result<T, Error>;

    fn check_finite(what: &'static str, values: &[f64]) -> Result<()> {
        match values.iter().position(|v| !v.is_finite()) {
            None => Ok(()),
            Some(index) => Err(Error::NonFinite {
                what,
                index,
                value: values[index],
            }),
        }
    }

    fn check_len(what: &'static str, expected: usize, actual: usize) -> Result<()> {
        if expected == actual {
            Ok(())
        } else {
            Err(Error::LengthMismatch {
                what,
                expected,
                actual,
            })
        }
    }

    struct Tokens<T> {
        data: Vec<T>,
        rows: usize,
        cols: usize,
    }

    impl<T: Clone> Tokens<T> {
        fn new(m: ArrayView2<'_, T>) -> Self {
            let (rows, cols) = m.dim();
            Self {
                data: m.iter().cloned().collect(),
                rows,
                cols,
            }
        }
        fn dim(&self) -> (usize, usize) {
            (self.rows, self.cols)
        }
        fn row(&self, r: usize) -> &[T] {
            &self.data[r * self.cols..(r + 1) * self.cols]
        }
    }

    struct Buf {
        data: Vec<f64>,
        rows: usize,
        cols: usize,
    }

    impl Buf {
        fn zeros((rows, cols): (usize, usize)) -> Self {
            Self {
                data: vec![0.0; rows * cols],
                rows,
                cols,
            }
        }
        fn row(&self, r: usize) -> &[f64] {
            &self.data[r * self.cols..(r + 1) * self.cols]
        }
        fn row_mut(&mut self, r: usize) -> &mut [f64] {
            &mut self.data[r * self.cols..(r + 1) * self.cols]
        }
        fn remask(&mut self, mask: &Tokens<bool>) {
            for (x, &m) in self.data.iter_mut().zip(&mask.data) {
                if !m {
                    *x = 0.0;
                }
            }
        }
        fn array(self) -> Array2<f64> {
            Array2::from_shape_vec((self.rows, self.cols), self.data).unwrap()
        }
    }

    fn same(b: Buf) -> Advantages {
        let a = b.array();
        Advantages {
            returns: a.clone(),
            advantages: a,
        }
    }

    fn pair(a: Buf, r: Buf) -> Advantages {
        Advantages {
            advantages: a.array(),
            returns: r.array(),
        }
    }

    fn checked_rewards(input: &EstimatorInput<'_>) -> Result<Tokens<f64>> {
        let rewards = f64_view(
            input
                .token_level_rewards
                .ok_or(Error::MissingInput("token_level_rewards"))?,
        );
        check_len(
            "token_level_rewards rows",
            input.batch.num_steps(),
            rewards.nrows(),
        )?;
        let rewards = Tokens::new(rewards);
        check_finite("token_level_rewards", &rewards.data)?;
        Ok(rewards)
    }

    fn checked_rewards_and_mask(input: &EstimatorInput<'_>) -> Result<(Tokens<f64>, Tokens<bool>)> {
        let rewards = checked_rewards(input)?;
        let mask = bool_view(input.response_mask.ok_or(Error::MissingInput("response_mask"))?);
        check_len("response_mask rows", rewards.rows, mask.nrows())?;
        check_len("response_mask columns", rewards.cols, mask.ncols())?;
        Ok((rewards, Tokens::new(mask)))
    }

    fn checked_scores_and_mask(input: &EstimatorInput<'_>) -> Result<(Vec<f64>, Tokens<bool>)> {
        let rewards = f64_view(
            input
                .token_level_rewards
                .ok_or(Error::MissingInput("token_level_rewards"))?,
        );
        check_len(
            "token_level_rewards rows",
            input.batch.num_steps(),
            rewards.nrows(),
        )?;
        let rewards = Tokens::new(rewards);
        let scores: Vec<f64> = (0..rewards.rows).map(|r| rewards.row(r).iter().sum()).collect();
        if scores.iter().any(|s| !s.is_finite()) {
            check_finite("token_level_rewards", &rewards.data)?;
            check_finite("row scores (overflow)", &scores)?;
        }
        let mask = bool_view(input.response_mask.ok_or(Error::MissingInput("response_mask"))?);
        check_len("response_mask rows", rewards.rows, mask.nrows())?;
        check_len("response_mask columns", rewards.cols, mask.ncols())?;
        Ok((scores, Tokens::new(mask)))
    }

    fn checked_matrix(
        what: &'static str,
        column: Option<FloatView<'_>>,
        dim: (usize, usize),
    ) -> Result<Tokens<f64>> {
        let m = f64_view(column.ok_or(Error::MissingInput(what))?);
        if m.nrows() != dim.0 {
            return Err(Error::LengthMismatch {
                what,
                expected: dim.0,
                actual: m.nrows(),
            });
        }
        if m.ncols() != dim.1 {
            return Err(Error::LengthMismatch {
                what,
                expected: dim.1,
                actual: m.ncols(),
            });
        }
        let m = Tokens::new(m);
        check_finite(what, &m.data)?;
        Ok(m)
    }

    fn group_rows(batch: &RolloutBatch, g: usize) -> &[usize] {
        let trajs = batch.group_trajectories(g);
        let steps = crate::common::trajectory_steps(batch, trajs.start).start
            ..crate::common::trajectory_steps(batch, trajs.end - 1).end;
        &batch.try_step_rows().unwrap()[steps]
    }

    fn row_groups(batch: &RolloutBatch) -> Vec<usize> {
        let mut out = vec![0usize; batch.num_steps()];
        for g in 0..batch.num_groups() {
            for &r in group_rows(batch, g) {
                out[r] = g;
            }
        }
        out
    }

    fn broadcast_masked(scalars: &[f64], mask: &Tokens<bool>) -> Buf {
        let mut out = Buf::zeros(mask.dim());
        for (r, &s) in scalars.iter().enumerate().take(mask.rows) {
            for (o, &m) in out.row_mut(r).iter_mut().zip(mask.row(r)) {
                if m {
                    *o = s;
                }
            }
        }
        out
    }

    /// Σ f(x) over the masked values in the order release 0.2 documents for `masked_whiten`
    /// (written here independently of the crate's code): per row, partial j adds the masked
    /// values at t with t % 8 == j, left to right from 0.0; the row's sum is
    /// ((p0 + p4) + (p2 + p6)) + ((p1 + p5) + (p3 + p7)); the row sums are added in row order
    /// from 0.0. (0.1 summed every masked value left to right in one chain.)
    fn masked_sum(values: &[f64], mask: &[bool], cols: usize, f: impl Fn(f64) -> f64) -> f64 {
        let mut total = 0.0f64;
        if cols == 0 {
            return total;
        }
        for r in 0..values.len() / cols {
            let mut p = [0.0f64; 8];
            for t in 0..cols {
                if mask[r * cols + t] {
                    p[t % 8] += f(values[r * cols + t]);
                }
            }
            total += ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]));
        }
        total
    }

    fn whiten_in_place(values: &mut [f64], mask: &[bool], cols: usize) -> Result<()> {
        let n = mask.iter().filter(|&&m| m).count() as u64;
        let sum = masked_sum(values, mask, cols, |x| x);
        if n < 2 {
            return Err(Error::Undefined(format!(
                "masked_whiten needs at least 2 valid tokens in the batch, found {n} (verl raises ValueError)"
            )));
        }
        let denom = f64::from(n as f32 + 1e-8f32);
        let mean = sum / denom;
        let sq = masked_sum(values, mask, cols, |x| (x - mean) * (x - mean));
        let bessel = f64::from(n as f32 / (n - 1) as f32);
        let var = sq / denom * bessel;
        let (mean, scale) = if mean.is_finite() && var.is_finite() {
            (mean, 1.0 / (var + 1e-8).sqrt())
        } else {
            // The overflow fallback, statistics in units of the max masked |x|.
            let s = values
                .iter()
                .zip(mask)
                .filter(|&(_, &m)| m)
                .fold(0.0f64, |a, (&x, _)| a.max(x.abs()));
            let (mut sum, mut sq) = (0.0f64, 0.0f64);
            for (&x, &m) in values.iter().zip(mask) {
                if m {
                    sum += x / s;
                }
            }
            let mean_s = sum / denom;
            for (&x, &m) in values.iter().zip(mask) {
                if m {
                    let d = x / s - mean_s;
                    sq += d * d;
                }
            }
            let var_s = sq / denom * bessel;
            let (mean, scale) = (mean_s * s, 1.0 / (var_s + 1e-8 / (s * s)).sqrt() / s);
            if !mean.is_finite() || !scale.is_finite() || scale == 0.0 {
                return Err(Error::NonFinite {
                    what: "masked_whiten statistics (overflow)",
                    index: 0,
                    value: if mean.is_finite() { scale } else { mean },
                });
            }
            (mean, scale)
        };
        for x in values.iter_mut() {
            *x = (*x - mean) * scale;
        }
        check_finite("whitened values (overflow)", values)
    }

    // The overflow fixes (W1–W3) and verl 0.9.1's unfloored `grpo_vectorized` variance changed
    // results on purpose, so the frozen code carries the same changes: the overflow fallbacks below act
    // only where the old code's mean or sum of squares overflowed, and the floor is gone.
    fn group_scale(rows: &[usize], scores: &[f64]) -> f64 {
        rows.iter().fold(0.0f64, |m, &r| m.max(scores[r].abs()))
    }

    fn group_mean(rows: &[usize], scores: &[f64]) -> f64 {
        let n = rows.len() as f64;
        let mean = rows.iter().map(|&r| scores[r]).sum::<f64>() / n;
        if mean.is_finite() {
            return mean;
        }
        let scale = group_scale(rows, scores);
        rows.iter().map(|&r| scores[r] / scale).sum::<f64>() / n * scale
    }

    fn unbiased_std(rows: &[usize], scores: &[f64], mean: f64) -> f64 {
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

    fn grpo_scalars(batch: &RolloutBatch, scores: &[f64], config: &GrpoConfig) -> Vec<f64> {
        let mut out = vec![0.0; scores.len()];
        let singleton_denom = f64::from(1.0f32 + config.std_eps as f32);
        for g in 0..batch.num_groups() {
            let rows = group_rows(batch, g);
            let n = rows.len();
            if n == 1 {
                let r = rows[0];
                out[r] = match config.norm {
                    NormMode::MeanStdNorm => scores[r] / singleton_denom,
                    _ => scores[r],
                };
                continue;
            }
            let mean = group_mean(rows, scores);
            match config.norm {
                NormMode::MeanStdNorm => {
                    let denom = unbiased_std(rows, scores, mean) + config.std_eps;
                    for &r in rows {
                        out[r] = (scores[r] - mean) / denom;
                    }
                }
                _ => {
                    for &r in rows {
                        out[r] = scores[r] - mean;
                    }
                }
            }
        }
        out
    }

    fn grpo_vectorized_scalars(batch: &RolloutBatch, scores: &[f64], config: &GrpoConfig) -> Vec<f64> {
        let groups = row_groups(batch);
        let num_groups = batch.num_groups();
        let mut count = vec![0.0f32; num_groups];
        let mut mean = vec![0.0f32; num_groups];
        for (&g, &s) in groups.iter().zip(scores) {
            count[g] += 1.0;
            mean[g] += s as f32;
        }
        for (m, &c) in mean.iter_mut().zip(&count) {
            *m /= c.max(1.0);
        }
        let mut sq = vec![0.0f32; num_groups];
        for (&g, &s) in groups.iter().zip(scores) {
            let d = s as f32 - mean[g];
            sq[g] += d * d;
        }
        let eps32 = config.std_eps as f32;
        let stats: Vec<(f32, f32)> = (0..num_groups)
            .map(|g| {
                if count[g] <= 1.0 {
                    return (0.0, 1.0 + eps32);
                }
                let var = sq[g] / (count[g] - 1.0).max(1.0);
                let std = if var.is_finite() {
                    var.sqrt()
                } else {
                    let xs = || {
                        groups
                            .iter()
                            .zip(scores)
                            .filter(|&(&h, _)| h == g)
                            .map(|(_, &s)| s as f32)
                    };
                    let scale = xs().fold(0.0f32, |m, x| m.max(x.abs()));
                    let sq: f32 = xs()
                        .map(|x| (x / scale - mean[g] / scale) * (x / scale - mean[g] / scale))
                        .sum();
                    let std = scale * (sq / (count[g] - 1.0).max(1.0)).sqrt();
                    if std.is_finite() {
                        std
                    } else {
                        f32::NAN
                    }
                };
                (mean[g], std + eps32)
            })
            .collect();
        groups
            .iter()
            .zip(scores)
            .map(|(&g, &s)| {
                let (mean, denom) = stats[g];
                let centered = s - f64::from(mean);
                match config.norm {
                    NormMode::MeanStdNorm => centered / f64::from(denom),
                    _ => centered,
                }
            })
            .collect()
    }

    fn outcome(input: &EstimatorInput<'_>, f: impl FnOnce(&[f64]) -> Result<Vec<f64>>) -> Result<Advantages> {
        let (scores, mask) = checked_scores_and_mask(input)?;
        let scalars = f(&scores)?;
        check_finite("advantages", &scalars)?;
        Ok(same(broadcast_masked(&scalars, &mask)))
    }

    fn outcome_whitened(
        input: &EstimatorInput<'_>,
        f: impl FnOnce(&[f64]) -> Vec<f64>,
    ) -> Result<Advantages> {
        let (scores, mask) = checked_scores_and_mask(input)?;
        let scalars = f(&scores);
        check_finite("advantages", &scalars)?;
        let mut adv = broadcast_masked(&scalars, &mask);
        whiten_in_place(&mut adv.data, &mask.data, mask.cols)?;
        adv.remask(&mask);
        Ok(same(adv))
    }

    fn passk(batch: &RolloutBatch, scores: &[f64], config: &GrpoConfig) -> Result<Vec<f64>> {
        let mut scalars = vec![0.0; scores.len()];
        for g in 0..batch.num_groups() {
            let rows = group_rows(batch, g);
            if rows.len() < 2 {
                return Err(Error::Undefined(format!(
                    "grpo_passk requires at least 2 samples per group; group {g} has {} (verl raises ValueError)",
                    rows.len()
                )));
            }
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
        Ok(scalars)
    }

    fn rloo(batch: &RolloutBatch, scores: &[f64]) -> Vec<f64> {
        let mut out = scores.to_vec();
        for g in 0..batch.num_groups() {
            let rows = group_rows(batch, g);
            if rows.len() < 2 {
                continue;
            }
            let n = rows.len() as f64;
            let mean = rows.iter().map(|&r| scores[r]).sum::<f64>() / n;
            let mean_term = mean * n / (n - 1.0);
            for &r in rows {
                out[r] = scores[r] * n / (n - 1.0) - mean_term;
            }
        }
        out
    }

    fn rloo_vectorized(batch: &RolloutBatch, scores: &[f64]) -> Vec<f64> {
        let mut out = vec![0.0; scores.len()];
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
        out
    }

    fn opo(input: &EstimatorInput<'_>) -> Result<Advantages> {
        let (scores, mask) = checked_scores_and_mask(input)?;
        let lengths: Vec<f64> = (0..mask.rows)
            .map(|r| mask.row(r).iter().filter(|&&m| m).count() as f64)
            .collect();
        let batch = input.batch;
        let mut scalars = scores.clone();
        for g in 0..batch.num_groups() {
            let rows = group_rows(batch, g);
            if rows.len() < 2 {
                continue;
            }
            let total_len: f64 = rows.iter().map(|&r| lengths[r]).sum();
            if total_len == 0.0 {
                return Err(Error::Undefined(format!(
                    "opo: every row of group {g} has an empty response mask (verl divides 0 by 0)"
                )));
            }
            let weighted: f64 = rows.iter().map(|&r| lengths[r] * scores[r]).sum();
            let baseline = weighted / total_len;
            for &r in rows {
                scalars[r] = scores[r] - baseline;
            }
        }
        check_finite("advantages", &scalars)?;
        Ok(same(broadcast_masked(&scalars, &mask)))
    }

    fn gpg(batch: &RolloutBatch, scores: &[f64], f_norm: f64) -> Vec<f64> {
        let nonzero = scores.iter().filter(|&&s| s != 0.0).count();
        let alpha = f64::from(1.0f32 / nonzero.max(1) as f32 * scores.len() as f32);
        let mut scalars = vec![0.0; scores.len()];
        for g in 0..batch.num_groups() {
            let rows = group_rows(batch, g);
            let mean = if rows.len() == 1 {
                0.0
            } else {
                rows.iter().map(|&r| scores[r]).sum::<f64>() / rows.len() as f64
            };
            for &r in rows {
                scalars[r] = alpha * (scores[r] - mean) / f_norm;
            }
        }
        scalars
    }

    fn group_mean_centered(batch: &RolloutBatch, scores: &[f64]) -> Vec<f64> {
        let mut scalars = scores.to_vec();
        for g in 0..batch.num_groups() {
            let rows = group_rows(batch, g);
            if rows.len() < 2 {
                continue;
            }
            let mean = rows.iter().map(|&r| scores[r]).sum::<f64>() / rows.len() as f64;
            for &r in rows {
                scalars[r] = scores[r] - mean;
            }
        }
        scalars
    }

    fn reinforce_pp(input: &EstimatorInput<'_>, discount: f64) -> Result<Advantages> {
        let (rewards, mask) = checked_rewards_and_mask(input)?;
        let mut returns = Buf::zeros(rewards.dim());
        for r in 0..rewards.rows {
            let (rrow, mrow) = (rewards.row(r), mask.row(r));
            let out = returns.row_mut(r);
            let mut running = 0.0f64;
            for t in (0..rrow.len()).rev() {
                if mrow[t] {
                    running = rrow[t] + discount * running;
                    out[t] = running;
                }
            }
        }
        check_finite("returns", &returns.data)?;
        let mut advantages = Buf::zeros(rewards.dim());
        advantages.data.copy_from_slice(&returns.data);
        whiten_in_place(&mut advantages.data, &mask.data, mask.cols)?;
        advantages.remask(&mask);
        Ok(pair(advantages, returns))
    }

    fn remax(input: &EstimatorInput<'_>) -> Result<Advantages> {
        let (rewards, mask) = checked_rewards_and_mask(input)?;
        let baselines = input
            .reward_baselines
            .ok_or(Error::MissingInput("reward_baselines"))?;
        check_len("reward_baselines", rewards.rows, baselines.len())?;
        check_finite("reward_baselines", baselines)?;
        let mut returns = Buf::zeros(rewards.dim());
        let mut advantages = Buf::zeros(rewards.dim());
        for (r, &b) in baselines.iter().enumerate() {
            let (rrow, mrow) = (rewards.row(r), mask.row(r));
            let mut acc = 0.0f64;
            for t in (0..rrow.len()).rev() {
                if mrow[t] {
                    acc += rrow[t];
                    advantages.row_mut(r)[t] = acc - b;
                } else {
                    advantages.row_mut(r)[t] = acc;
                }
                returns.row_mut(r)[t] = acc;
            }
        }
        check_finite("returns", &returns.data)?;
        check_finite("advantages", &advantages.data)?;
        Ok(pair(advantages, returns))
    }

    fn gae(input: &EstimatorInput<'_>, config: GaeConfig) -> Result<Advantages> {
        let (rewards, mask) = checked_rewards_and_mask(input)?;
        let values = checked_matrix("values", input.values, rewards.dim())?;
        let gamma = config.discount;
        let gamma_lambda = gamma * config.gae_lambda;
        let mut gae = Buf::zeros(rewards.dim());
        let mut returns = Buf::zeros(rewards.dim());
        for r in 0..rewards.rows {
            let (rrow, mrow, vrow) = (rewards.row(r), mask.row(r), values.row(r));
            let mut next_value = 0.0f64;
            let mut last = 0.0f64;
            for t in (0..rrow.len()).rev() {
                let v = vrow[t];
                if mrow[t] {
                    let delta = rrow[t] + gamma * next_value - v;
                    last = delta + gamma_lambda * last;
                    next_value = v;
                }
                gae.row_mut(r)[t] = last;
                returns.row_mut(r)[t] = last + v;
            }
        }
        check_finite("returns", &returns.data)?;
        whiten_in_place(&mut gae.data, &mask.data, mask.cols)?;
        Ok(pair(gae, returns))
    }

    struct Otb {
        mask: Tokens<bool>,
        returns: Buf,
        w: Buf,
        lengths: Vec<usize>,
    }

    fn otb_tokens(input: &EstimatorInput<'_>) -> Result<Otb> {
        let (rewards, mask) = checked_rewards_and_mask(input)?;
        let dim = rewards.dim();
        let lp = checked_matrix("old_log_probs", input.old_log_probs, dim)?;
        let sp = checked_matrix("sum_pi_squared", input.sum_pi_squared, dim)?;
        let is = match input.rollout_is_weights {
            Some(w) => Some(checked_matrix("rollout_is_weights", Some(w), dim)?),
            None => None,
        };
        let mut returns = Buf::zeros(dim);
        let mut w = Buf::zeros(dim);
        let mut lengths = Vec::new();
        for r in 0..dim.0 {
            let (rrow, mrow) = (rewards.row(r), mask.row(r));
            let mut acc = 0.0;
            for t in (0..dim.1).rev() {
                if mrow[t] {
                    acc += rrow[t];
                }
                returns.row_mut(r)[t] = acc;
            }
            let mut w_acc = 0.0;
            let mut len = 0;
            for t in 0..dim.1 {
                if mrow[t] {
                    let mut x = 1.0 - 2.0 * lp.row(r)[t].exp() + sp.row(r)[t];
                    if let Some(is) = &is {
                        x *= is.row(r)[t] * is.row(r)[t];
                    }
                    w_acc += x;
                    len += 1;
                }
                w.row_mut(r)[t] = w_acc;
            }
            lengths.push(len);
        }
        check_finite("returns", &returns.data)?;
        check_finite("w_cumulative (overflow of exp(old_log_probs))", &w.data)?;
        Ok(Otb {
            mask,
            returns,
            w,
            lengths,
        })
    }

    fn zero_tail_row(rows: &[usize], lengths: &[usize]) -> Option<(usize, usize)> {
        let (mut longest, mut count, mut row_longest, mut second) = (0usize, 0usize, 0usize, 0usize);
        for &r in rows {
            let len = lengths[r];
            if len > longest || count == 0 {
                if count > 0 {
                    second = longest;
                }
                longest = len;
                count = 1;
                row_longest = r;
            } else if len == longest {
                count += 1;
            } else if len > second {
                second = len;
            }
        }
        (count == 1 && longest > second).then_some((row_longest, second))
    }

    fn otb(input: &EstimatorInput<'_>, config: OptimalTokenBaselineConfig) -> Result<Advantages> {
        let tok = otb_tokens(input)?;
        let cols = tok.mask.cols;
        let mut adv = Buf::zeros(tok.mask.dim());
        for g in 0..input.batch.num_groups() {
            let rows = group_rows(input.batch, g);
            if rows.len() == 1 {
                let r = rows[0];
                for t in 0..cols {
                    if tok.mask.row(r)[t] {
                        adv.row_mut(r)[t] = tok.returns.row(r)[t];
                    }
                }
                continue;
            }
            let mut numer = vec![0.0f64; cols];
            let mut denom = vec![0.0f64; cols];
            for &r in rows {
                for t in 0..cols {
                    if tok.mask.row(r)[t] {
                        numer[t] += tok.returns.row(r)[t] * tok.w.row(r)[t];
                        denom[t] += tok.w.row(r)[t];
                    }
                }
            }
            for (n, d) in numer.iter_mut().zip(&denom) {
                *n /= d + config.denominator_eps;
            }
            let tail = match config.zero_tail {
                ZeroTail::ZeroBaseline => zero_tail_row(rows, &tok.lengths),
                _ => None,
            };
            for &r in rows {
                let tail_start = match tail {
                    Some((row, start)) if row == r => start,
                    _ => cols,
                };
                for t in 0..cols {
                    if tok.mask.row(r)[t] {
                        let g_t = tok.returns.row(r)[t];
                        adv.row_mut(r)[t] = if t >= tail_start { g_t } else { g_t - numer[t] };
                    }
                }
            }
        }
        check_finite("advantages", &adv.data)?;
        Ok(pair(adv, tok.returns))
    }

    fn tir_otb(input: &EstimatorInput<'_>, config: OptimalTokenBaselineConfig) -> Result<Advantages> {
        let tok = otb_tokens(input)?;
        let cols = tok.mask.cols;
        let mut adv = Buf::zeros(tok.mask.dim());
        for g in 0..input.batch.num_groups() {
            let members: Vec<usize> = group_rows(input.batch, g)
                .iter()
                .copied()
                .filter(|&r| tok.lengths[r] > 0)
                .collect();
            if members.is_empty() {
                continue;
            }
            let mut numer = vec![0.0f64; cols];
            let mut denom = vec![0.0f64; cols];
            let single = members.len() == 1;
            if !single {
                for &r in &members {
                    let mut k = 0;
                    for t in 0..cols {
                        if tok.mask.row(r)[t] {
                            numer[k] += tok.returns.row(r)[t] * tok.w.row(r)[t];
                            denom[k] += tok.w.row(r)[t];
                            k += 1;
                        }
                    }
                }
                let max_len = members.iter().map(|&r| tok.lengths[r]).max().unwrap();
                for k in 0..max_len {
                    numer[k] /= denom[k] + config.denominator_eps;
                }
            }
            let tail = match config.zero_tail {
                ZeroTail::ZeroBaseline if !single => zero_tail_row(&members, &tok.lengths),
                _ => None,
            };
            for &r in &members {
                let tail_start = match tail {
                    Some((row, start)) if row == r => start,
                    _ => cols,
                };
                let mut k = 0;
                for t in 0..cols {
                    if tok.mask.row(r)[t] {
                        let g_t = tok.returns.row(r)[t];
                        adv.row_mut(r)[t] = if k >= tail_start { g_t } else { g_t - numer[k] };
                        k += 1;
                    }
                }
            }
        }
        check_finite("advantages", &adv.data)?;
        Ok(pair(adv, tok.returns))
    }

    /// The old result of the estimator `config` on `input`.
    pub fn estimate(config: &EstimatorConfig, input: &EstimatorInput<'_>) -> Result<Advantages> {
        let batch = input.batch;
        match config {
            EstimatorConfig::Grpo(c) => outcome(input, |s| Ok(grpo_scalars(batch, s, c))),
            EstimatorConfig::GrpoVectorized(c) => {
                outcome(input, |s| Ok(grpo_vectorized_scalars(batch, s, c)))
            }
            EstimatorConfig::GrpoPassk(c) => outcome(input, |s| passk(batch, s, c)),
            EstimatorConfig::Gdpo(c) => outcome_whitened(input, |s| grpo_scalars(batch, s, c)),
            EstimatorConfig::Rloo => outcome(input, |s| Ok(rloo(batch, s))),
            EstimatorConfig::RlooVectorized => outcome(input, |s| Ok(rloo_vectorized(batch, s))),
            EstimatorConfig::Opo => opo(input),
            EstimatorConfig::Gpg(c) => outcome(input, |s| Ok(gpg(batch, s, c.f_norm))),
            EstimatorConfig::ReinforcePlusPlus(c) => reinforce_pp(input, c.discount),
            EstimatorConfig::ReinforcePlusPlusBaseline => {
                outcome_whitened(input, |s| group_mean_centered(batch, s))
            }
            EstimatorConfig::Remax => remax(input),
            EstimatorConfig::Gae(c) => gae(input, *c),
            EstimatorConfig::OptimalTokenBaseline(c) => otb(input, *c),
            EstimatorConfig::TirOptimalTokenBaseline(c) => tir_otb(input, *c),
            other => panic!("no reference for {other}"),
        }
    }
}

/// Every verl estimator with verl's defaults plus non-default parameters for each knob.
fn configs() -> Vec<EstimatorConfig> {
    let mut v: Vec<EstimatorConfig> = EstimatorConfig::VERL_NAMES
        .iter()
        .map(|n| n.parse().unwrap())
        .collect();
    v.extend([
        EstimatorConfig::Grpo(GrpoConfig::default().with_norm(NormMode::MeanNorm)),
        EstimatorConfig::GrpoVectorized(GrpoConfig::default().with_norm(NormMode::MeanNorm)),
        EstimatorConfig::GrpoPassk(GrpoConfig::default().with_norm(NormMode::MeanNorm)),
        EstimatorConfig::Gdpo(
            GrpoConfig::default()
                .with_std_eps(1e-3)
                .with_norm(NormMode::MeanStdNorm),
        ),
        EstimatorConfig::Gpg(GpgConfig::default().with_f_norm(0.7)),
        EstimatorConfig::ReinforcePlusPlus(ReinforcePlusPlusConfig::default().with_discount(0.9)),
        EstimatorConfig::Gae(GaeConfig::default().with_discount(0.99).with_gae_lambda(0.95)),
        EstimatorConfig::OptimalTokenBaseline(
            OptimalTokenBaselineConfig::default()
                .with_zero_tail(ZeroTail::KeepBaseline)
                .with_denominator_eps(1e-6),
        ),
        EstimatorConfig::TirOptimalTokenBaseline(
            OptimalTokenBaselineConfig::default()
                .with_zero_tail(ZeroTail::KeepBaseline)
                .with_denominator_eps(1e-6),
        ),
    ]);
    v
}

/// A random batch: rows of `groups` uids, trajectories of 1..=3 rows (agent data), token
/// columns with random or prefix masks.
#[derive(Debug, Clone)]
struct Case {
    group_keys: Vec<u8>,
    traj_keys: Vec<u16>,
    rewards: Array2<f64>,
    mask: Array2<bool>,
    values: Array2<f64>,
    log_probs: Array2<f64>,
    sum_pi_sq: Array2<f64>,
    is_weights: Option<Array2<f64>>,
    baselines: Vec<f64>,
}

fn cell() -> impl Strategy<Value = f64> {
    prop_oneof![
        6 => -5.0..5.0f64,
        2 => Just(0.0),
        1 => Just(-0.0),
        1 => Just(1e-310),
    ]
}

/// Values that overflow sums, squares or `exp`, or are not finite, planted in one cell of
/// some cases.
fn huge() -> impl Strategy<Value = Option<(prop::sample::Index, f64)>> {
    prop::option::weighted(
        0.2,
        (
            any::<prop::sample::Index>(),
            prop::sample::select(vec![1e300, -1e300, f64::MAX, 1e200, f64::INFINITY, f64::NAN]),
        ),
    )
}

fn case_strategy() -> impl Strategy<Value = Case> {
    (1usize..=20, 0usize..=9, 1usize..=4, any::<bool>(), any::<bool>()).prop_flat_map(
        |(rows, cols, groups, prefix, with_is)| {
            let cells = rows * cols;
            (
                prop::collection::vec(0..groups as u8, rows),
                prop::collection::vec(0u16..6, rows),
                prop::collection::vec(cell(), cells),
                prop::collection::vec(any::<bool>(), cells),
                prop::collection::vec(0..=cols, rows),
                prop::collection::vec(-3.0..3.0f64, cells),
                prop::collection::vec(-6.0..0.0f64, cells),
                prop::collection::vec(0.0..1.0f64, cells),
                prop::collection::vec(0.0..2.0f64, cells),
                prop::collection::vec(-1.0..1.0f64, rows),
                (huge(), huge(), huge()),
            )
                .prop_map(
                    move |(g, t, mut rw, bits, lens, mut vals, mut lp, sp, isw, bl, (h_rw, h_vals, h_lp))| {
                        for (v, h) in [(&mut rw, h_rw), (&mut vals, h_vals), (&mut lp, h_lp)] {
                            if let (Some((i, x)), false) = (h, v.is_empty()) {
                                v[i.index(cells)] = x;
                            }
                        }
                        let mask = if prefix {
                            Array2::from_shape_fn((rows, cols), |(r, c)| c < lens[r])
                        } else {
                            Array2::from_shape_vec((rows, cols), bits).unwrap()
                        };
                        let m = |v| Array2::from_shape_vec((rows, cols), v).unwrap();
                        Case {
                            // Trajectory keys are made unique per group, so a trajectory never spans groups.
                            traj_keys: t.iter().zip(&g).map(|(&t, &g)| t * 16 + u16::from(g)).collect(),
                            group_keys: g,
                            rewards: m(rw),
                            mask,
                            values: m(vals),
                            log_probs: m(lp),
                            sum_pi_sq: m(sp),
                            is_weights: with_is.then(|| m(isw)),
                            baselines: bl,
                        }
                    },
                )
        },
    )
}

/// A column-major copy of `m` seen as rows × L: same values, non-contiguous rows.
fn column_major<T: Clone>(m: &Array2<T>) -> Array2<T> {
    m.t().as_standard_layout().into_owned().reversed_axes()
}

fn bits(a: &Array2<f64>) -> (Vec<u64>, (usize, usize)) {
    (a.iter().map(|x| x.to_bits()).collect(), a.dim())
}

fn assert_bit_equal(
    name: &str,
    new: &Result<Advantages, Error>,
    old: &Result<Advantages, Error>,
) -> Result<(), TestCaseError> {
    match (new, old) {
        (Ok(n), Ok(o)) => {
            prop_assert_eq!(bits(&n.advantages), bits(&o.advantages), "{} advantages", name);
            prop_assert_eq!(bits(&n.returns), bits(&o.returns), "{} returns", name);
        }
        (Err(n), Err(o)) => prop_assert_eq!(error_key(n), error_key(o), "{}", name),
        (n, o) => prop_assert!(false, "{}: new {:?}, old {:?}", name, n, o),
    }
    Ok(())
}

/// An error's variant and fields, with a non-finite value by its bits (NaN != NaN).
fn error_key(e: &Error) -> String {
    match e {
        Error::NonFinite { what, index, value } => {
            format!("NonFinite({what}, {index}, {:#x})", value.to_bits())
        }
        other => format!("{other:?}"),
    }
}

fn run_all(case: &Case, strided: bool) -> Result<(), TestCaseError> {
    let batch = RolloutBatch::from_row_keys(
        &case.group_keys,
        &case.traj_keys,
        &vec![0.0; case.baselines.len()],
    )
    .expect("valid batch");
    let cm = |m: &Array2<f64>| if strided { column_major(m) } else { m.clone() };
    let (rewards, values, lp, sp) = (
        cm(&case.rewards),
        cm(&case.values),
        cm(&case.log_probs),
        cm(&case.sum_pi_sq),
    );
    let mask = if strided {
        column_major(&case.mask)
    } else {
        case.mask.clone()
    };
    let isw = case.is_weights.as_ref().map(cm);
    let mut input = EstimatorInput::new(&batch)
        .with_token_level_rewards(&rewards)
        .with_response_mask(&mask)
        .with_values(&values)
        .with_old_log_probs(&lp)
        .with_sum_pi_squared(&sp)
        .with_reward_baselines(&case.baselines);
    if let Some(w) = &isw {
        input = input.with_rollout_is_weights(w);
    }
    for config in configs() {
        let est = config.build().unwrap();
        let new = est.estimate(&input).map(Advantages::from);
        let old = reference::estimate(&config, &input);
        assert_bit_equal(est.name(), &new, &old)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Contiguous inputs: the optimised estimators equal the old code bit for bit.
    #[test]
    fn optimised_estimators_equal_the_old_code(case in case_strategy()) {
        run_all(&case, false)?;
    }

    /// Column-major inputs take the copying path: still bit-identical.
    #[test]
    fn strided_inputs_equal_the_old_code(case in case_strategy()) {
        run_all(&case, true)?;
    }
}

#[test]
fn wide_rows_use_the_blocked_kernels() {
    // Rows × L large enough for every blocked / unrolled kernel to run full blocks and a
    // remainder (19 rows = 2 blocks of 8 + 3), with a reward on every token so that row
    // sums depend on their order.
    let (rows, cols) = (19, 37);
    let mut state = 0x1234_5678_9abc_def0u64;
    let mut unit = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let case = Case {
        group_keys: (0..rows).map(|r| (r % 4) as u8).collect(),
        traj_keys: (0..rows).map(|r| r as u16).collect(),
        rewards: Array2::from_shape_fn((rows, cols), |_| unit() * 2.0 - 1.0),
        mask: Array2::from_shape_fn((rows, cols), |_| unit() < 0.7),
        values: Array2::from_shape_fn((rows, cols), |_| unit()),
        log_probs: Array2::from_shape_fn((rows, cols), |_| -3.0 * unit()),
        sum_pi_sq: Array2::from_shape_fn((rows, cols), |_| unit()),
        is_weights: None,
        baselines: (0..rows).map(|_| unit()).collect(),
    };
    run_all(&case, false).unwrap();
    run_all(&case, true).unwrap();
}

/// Bad inputs, alone and in pairs: the optimised estimators check input finiteness inside
/// their kernels, so the error must still be the first one in the documented order (e.g. a
/// NaN reward is reported before a missing `values`).
#[test]
fn errors_keep_their_precedence_when_several_inputs_are_bad() {
    let (rows, cols) = (4, 3);
    let uids = [0u8, 1, 0, 1];
    let batch = RolloutBatch::from_group_keys(&uids, &[0.0; 4]).unwrap();
    let m = |f: &dyn Fn(usize, usize) -> f64| Array2::from_shape_fn((rows, cols), |(r, t)| f(r, t));
    let rewards = m(&|r, t| (r * cols + t) as f64 * 0.25 - 1.0);
    let mask = Array2::from_shape_fn((rows, cols), |(r, t)| t <= r % cols);
    let values = m(&|r, t| 0.5 - 0.1 * (r + t) as f64);
    let lp = m(&|r, t| -0.2 - 0.3 * (r + 2 * t) as f64);
    let sp = m(&|r, t| 0.1 * ((r + t) % 5) as f64);
    let isw = m(&|r, t| 0.5 + 0.1 * ((r * t) % 7) as f64);
    let baselines = [0.1, -0.2, 0.3, 0.0];
    let poisoned = |a: &Array2<f64>, at: (usize, usize), x: f64| {
        let mut a = a.clone();
        a[at] = x;
        a
    };
    // Masked (2, 1) and unmasked (0, 2) rewards: kernels see them on different paths.
    let (rewards_nan, values_inf) = (
        poisoned(&rewards, (2, 1), f64::NAN),
        poisoned(&values, (1, 2), f64::INFINITY),
    );
    let rewards_inf_unmasked = poisoned(&rewards, (0, 2), f64::INFINITY);
    assert!(mask[(2, 1)] && !mask[(0, 2)] && !mask[(1, 2)]);
    let (lp_nan, sp_inf) = (
        poisoned(&lp, (3, 0), f64::NAN),
        poisoned(&sp, (0, 2), f64::NEG_INFINITY),
    );
    let (lp_overflow, is_nan) = (poisoned(&lp, (3, 1), 800.0), poisoned(&isw, (2, 2), f64::NAN));
    let short = Array2::<f64>::zeros((rows, cols - 1));
    let short_mask = Array2::from_elem((rows - 1, cols), true);
    let baselines_nan = [0.1, f64::NAN, 0.3, 0.0];

    type Mutation<'a> = Box<dyn Fn(&mut EstimatorInput<'a>) + 'a>;
    let mutations: Vec<(&str, Mutation<'_>)> = vec![
        (
            "rewards NaN",
            Box::new(|i| i.token_level_rewards = Some(rewards_nan.view().into())),
        ),
        (
            "unmasked reward inf",
            Box::new(|i| i.token_level_rewards = Some(rewards_inf_unmasked.view().into())),
        ),
        ("rewards missing", Box::new(|i| i.token_level_rewards = None)),
        ("mask missing", Box::new(|i| i.response_mask = None)),
        (
            "mask short",
            Box::new(|i| i.response_mask = Some(short_mask.view().into())),
        ),
        (
            "values inf",
            Box::new(|i| i.values = Some(values_inf.view().into())),
        ),
        ("values missing", Box::new(|i| i.values = None)),
        ("values short", Box::new(|i| i.values = Some(short.view().into()))),
        (
            "log_probs NaN",
            Box::new(|i| i.old_log_probs = Some(lp_nan.view().into())),
        ),
        (
            "log_probs overflow exp",
            Box::new(|i| i.old_log_probs = Some(lp_overflow.view().into())),
        ),
        ("log_probs missing", Box::new(|i| i.old_log_probs = None)),
        (
            "sum_pi_squared -inf",
            Box::new(|i| i.sum_pi_squared = Some(sp_inf.view().into())),
        ),
        (
            "sum_pi_squared short",
            Box::new(|i| i.sum_pi_squared = Some(short.view().into())),
        ),
        (
            "is_weights NaN",
            Box::new(|i| i.rollout_is_weights = Some(is_nan.view().into())),
        ),
        (
            "is_weights short",
            Box::new(|i| i.rollout_is_weights = Some(short.view().into())),
        ),
        (
            "baselines NaN",
            Box::new(|i| i.reward_baselines = Some(&baselines_nan)),
        ),
        ("baselines missing", Box::new(|i| i.reward_baselines = None)),
        (
            "baselines short",
            Box::new(|i| i.reward_baselines = Some(&baselines[..2])),
        ),
    ];
    let base = EstimatorInput::new(&batch)
        .with_token_level_rewards(&rewards)
        .with_response_mask(&mask)
        .with_values(&values)
        .with_old_log_probs(&lp)
        .with_sum_pi_squared(&sp)
        .with_rollout_is_weights(&isw)
        .with_reward_baselines(&baselines);
    let mut compared_errors = 0;
    for (i, (name_a, a)) in mutations.iter().enumerate() {
        for (name_b, b) in mutations.iter().skip(i) {
            let mut input = base;
            a(&mut input);
            b(&mut input);
            for config in configs() {
                let est = config.build().unwrap();
                let new = est.estimate(&input).map(Advantages::from);
                let old = reference::estimate(&config, &input);
                compared_errors += usize::from(old.is_err());
                assert_bit_equal(&format!("{} [{name_a} + {name_b}]", est.name()), &new, &old).unwrap();
            }
        }
    }
    assert!(compared_errors > 1000, "{compared_errors}");
}

/// A buffer pre-filled with garbage, standard layout or strided: `Contiguous`, column-major
/// (`ColumnMajor`), or every other column of a wider array (`Sliced`).
#[derive(Debug, Clone, Copy)]
enum Layout {
    Contiguous,
    ColumnMajor,
    Sliced,
}

fn run_into(
    est: &dyn AdvantageEstimator,
    input: &EstimatorInput<'_>,
    dim: (usize, usize),
    layout: Layout,
) -> Result<Advantages, Error> {
    let garbage = |(r, t): (usize, usize)| if (r + t) % 2 == 0 { f64::NAN } else { -1e300 };
    let mut a = Array2::from_shape_fn((dim.0, 2 * dim.1), garbage);
    let mut b = Array2::from_shape_fn((dim.0, 2 * dim.1), garbage);
    let mut ws = Workspace::default();
    let result = match layout {
        Layout::Contiguous => {
            let mut a = Array2::from_shape_fn(dim, garbage);
            let mut b = Array2::from_shape_fn(dim, garbage);
            est.estimate_into(input, (&mut a).into(), Some((&mut b).into()), &mut ws)
                .map(|()| (a, b))
        }
        Layout::ColumnMajor => {
            let mut a = column_major(&Array2::from_shape_fn(dim, garbage));
            let mut b = column_major(&Array2::from_shape_fn(dim, garbage));
            est.estimate_into(input, (&mut a).into(), Some((&mut b).into()), &mut ws)
                .map(|()| (a, b))
        }
        Layout::Sliced => {
            let (va, vb) = (
                a.slice_mut(ndarray::s![.., ..;2]),
                b.slice_mut(ndarray::s![.., ..;2]),
            );
            est.estimate_into(input, va.into(), Some(vb.into()), &mut ws)
                .map(|()| {
                    (
                        a.slice(ndarray::s![.., ..;2]).to_owned(),
                        b.slice(ndarray::s![.., ..;2]).to_owned(),
                    )
                })
        }
    };
    result.map(|(advantages, returns)| Advantages { advantages, returns })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// `estimate_into` writes exactly what `estimate` returns (every element, over garbage),
    /// or the same error, for every estimator (BEACON and GiGPO through the provided
    /// default), into contiguous and strided buffers.
    #[test]
    fn estimate_into_equals_estimate(
        case in case_strategy(),
        milestones in prop::collection::vec(any::<bool>(), 20),
        step_rewards in prop::collection::vec(-1.0..1.0f64, 20),
        obs in prop::collection::vec(0usize..3, 20),
        with_mask in any::<bool>(),
    ) {
        let rows = case.baselines.len();
        // R(τ) for BEACON: one value per trajectory.
        let terminal: Vec<f64> = case.traj_keys.iter().map(|&k| f64::from(k % 7) * 0.25 - 0.5).collect();
        let batch = RolloutBatch::from_row_keys(&case.group_keys, &case.traj_keys, &terminal)
            .expect("valid batch");
        let anchors: Vec<&str> = obs[..rows].iter().map(|&o| ["kitchen", "hall", "garden"][o]).collect();
        let mut input = EstimatorInput::new(&batch)
            .with_token_level_rewards(&case.rewards)
            .with_values(&case.values)
            .with_old_log_probs(&case.log_probs)
            .with_sum_pi_squared(&case.sum_pi_sq)
            .with_reward_baselines(&case.baselines)
            .with_milestones(&milestones[..rows])
            .with_step_rewards(&step_rewards[..rows])
            .with_anchor_obs(&anchors);
        if with_mask {
            input = input.with_response_mask(&case.mask);
        }
        for name in EstimatorConfig::NAMES {
            let est = name.parse::<EstimatorConfig>().unwrap().build().unwrap();
            let fresh = est.estimate(&input).map(Advantages::from);
            let dim = fresh.as_ref().map(|o| o.advantages.dim()).unwrap_or(case.rewards.dim());
            for layout in [Layout::Contiguous, Layout::ColumnMajor, Layout::Sliced] {
                let into = run_into(est.as_ref(), &input, dim, layout);
                assert_bit_equal(&format!("{name} {layout:?}"), &into, &fresh)?;
            }
        }
    }
}

#[test]
fn estimate_into_rejects_misshapen_buffers() {
    let every = common::EveryColumn::new();
    let mask = Array2::from_elem((4, 3), true);
    let input = every.input(&mask);
    for name in EstimatorConfig::NAMES {
        let est = name.parse::<EstimatorConfig>().unwrap().build().unwrap();
        // A wrong L, then a transposed buffer (equal element counts: the shapes tell them apart).
        for (adv_dim, ret_dim, what) in [((4, 2), (4, 3), "advantages"), ((4, 3), (3, 4), "returns")] {
            let mut a = Array2::<f64>::zeros(adv_dim);
            let mut b = Array2::<f64>::zeros(ret_dim);
            let err = est
                .estimate_into(
                    &input,
                    (&mut a).into(),
                    Some((&mut b).into()),
                    &mut Workspace::default(),
                )
                .unwrap_err();
            let given = if what == "advantages" { adv_dim } else { ret_dim };
            assert_eq!(
                err,
                Error::OutputShape {
                    what,
                    expected: (4, 3),
                    actual: given
                },
                "{name}"
            );
            assert_eq!(
                err.to_string(),
                format!("output buffer {what} has shape {given:?}, expected (4, 3)"),
                "{name}"
            );
        }
    }
}
