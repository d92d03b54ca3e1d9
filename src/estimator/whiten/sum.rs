//! The masked sums of batch whitening in their fixed order (part of the result's bits): per
//! row, [`SUM_LANES`] = 8 partial sums, partial j adding the masked tokens t ≡ j (mod 8)
//! left to right from +0.0, combined as ((p0 + p4) + (p2 + p6)) + ((p1 + p5) + (p3 + p7)),
//! and the row sums added in row order ([`MaskedSum`]):
//!
//! ```text
//! n = Σ mask,   μ = Σ_{mask} x / (n + 1e-8),   σ² = Σ_{mask} (x − μ)² / (n + 1e-8) · n / (n − 1)
//! ```
//!
//! with the float32 `n + 1e-8` and Bessel factor of verl's int64 masks, and the rescaled
//! fallback when finite inputs overflow a sum.

use crate::error::{Error, Result};
use crate::estimator::kernel::{select, SUM_LANES};

/// Combines a row's partial sums in the fixed order ((p0 + p4) + (p2 + p6)) + ((p1 + p5) +
/// (p3 + p7)) (what pairwise SIMD reductions of 2- or 4-wide lanes give).
#[inline(always)]
fn combine(p: &[f64; SUM_LANES]) -> f64 {
    ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]))
}

/// All eight mask bytes of a chunk set (each byte is 0 or 1).
const ALL_SET: u64 = 0x0101_0101_0101_0101;

/// Eight mask bytes as one word (0 = none set, [`ALL_SET`] = all set).
#[inline(always)]
fn word(m: &[u8]) -> u64 {
    u64::from_le_bytes(<[u8; 8]>::try_from(m).unwrap_or([1; 8]))
}

/// Σ of the masked values of one row and their count, in the crate's documented order:
/// partial sum j adds the masked `x_t` with t ≡ j (mod [`SUM_LANES`]) left to right from
/// +0.0, and the partials are combined by [`combine`]. An unmasked value adds +0.0, which
/// leaves every partial unchanged (a partial is never −0.0: it starts at +0.0 and a sum of
/// two values is −0.0 only when both are), so the sum only depends on the masked values.
/// `mask` holds 0/1 bytes; chunks of [`SUM_LANES`] tokens that are all generated (or all
/// not) skip the per-token select, which gives the same additions.
#[inline]
pub(crate) fn row_sum(values: &[f64], mask: &[u8]) -> (u64, f64) {
    let n = values.len().min(mask.len());
    let (values, mask) = (&values[..n], &mask[..n]);
    let mut p = [0.0f64; SUM_LANES];
    let mut count = 0u64;
    let (mut xs, mut ms) = (values.chunks_exact(SUM_LANES), mask.chunks_exact(SUM_LANES));
    for (x, m) in (&mut xs).zip(&mut ms) {
        let w = word(m);
        if w == ALL_SET {
            for j in 0..SUM_LANES {
                p[j] += x[j];
            }
        } else if w != 0 {
            for j in 0..SUM_LANES {
                p[j] += select(m[j] != 0, x[j]);
            }
        }
        // The sum of the eight 0/1 bytes, in the top byte.
        count += w.wrapping_mul(ALL_SET) >> 56;
    }
    for (j, (&x, &m)) in xs.remainder().iter().zip(ms.remainder()).enumerate() {
        p[j] += select(m != 0, x);
        count += u64::from(m);
    }
    (count, combine(&p))
}

/// Σ_mask (x − μ)² of one row, in [`row_sum`]'s order.
#[inline]
pub(crate) fn row_sq(values: &[f64], mask: &[u8], mean: f64) -> f64 {
    let n = values.len().min(mask.len());
    let (values, mask) = (&values[..n], &mask[..n]);
    let mut p = [0.0f64; SUM_LANES];
    let (mut xs, mut ms) = (values.chunks_exact(SUM_LANES), mask.chunks_exact(SUM_LANES));
    for (x, m) in (&mut xs).zip(&mut ms) {
        let w = word(m);
        if w == ALL_SET {
            for j in 0..SUM_LANES {
                let d = x[j] - mean;
                p[j] += d * d;
            }
        } else if w != 0 {
            for j in 0..SUM_LANES {
                let d = x[j] - mean;
                p[j] += select(m[j] != 0, d * d);
            }
        }
    }
    for (j, (&x, &m)) in xs.remainder().iter().zip(ms.remainder()).enumerate() {
        let d = x - mean;
        p[j] += select(m != 0, d * d);
    }
    combine(&p)
}

/// [`row_sum`] of a row whose masked values all equal `x`, `counts[j]` of them in class j:
/// partial j is `x` added `counts[j]` times from +0.0 (all partials in lockstep, then the
/// leftovers), combined by [`combine`].
pub(crate) fn repeated_sum(x: f64, counts: &[usize]) -> f64 {
    let mut p = [0.0f64; SUM_LANES];
    let common = counts.iter().copied().min().unwrap_or(0);
    for _ in 0..common {
        for q in p.iter_mut() {
            *q += x;
        }
    }
    for (q, &c) in p.iter_mut().zip(counts) {
        for _ in common..c {
            *q += x;
        }
    }
    combine(&p)
}

/// The count and sum of the masked values. The order of the additions is part of the
/// result's bits: each row's sum is taken by [`row_sum`] and the row sums are added in row
/// order from +0.0, so callers feed whole rows, in order.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct MaskedSum {
    n: u64,
    sum: f64,
}

impl MaskedSum {
    /// Adds one row's masked values ([`row_sum`]).
    #[cfg(test)]
    pub(crate) fn add_row(&mut self, values: &[f64], mask: &[u8]) {
        let (count, sum) = row_sum(values, mask);
        self.add(count, sum);
    }

    /// Adds a row's masked count and [`row_sum`].
    #[inline]
    pub(crate) fn add(&mut self, count: u64, sum: f64) {
        self.n += count;
        self.sum += sum;
    }

    /// Adds a broadcast row: `counts[j]` masked copies of `x` in class j (see [`repeated_sum`]),
    /// the same additions as [`add_row`](Self::add_row) over the broadcast row.
    pub(crate) fn add_repeated(&mut self, x: f64, counts: &[usize]) {
        self.sum += repeated_sum(x, counts);
        self.n += counts.iter().sum::<usize>() as u64;
    }

    /// verl's mean over the masked values and its `float32` count, or
    /// [`Error::Undefined`] for fewer than 2 masked values.
    pub(crate) fn mean(&self) -> Result<(f64, f64)> {
        let n = self.n;
        if n < 2 {
            return Err(Error::Undefined(format!(
                "masked_whiten needs at least 2 valid tokens in the batch, found {n} (verl raises ValueError)"
            )));
        }
        // int64 mask sum + 1e-8 is a float32 tensor in torch (peer behaviour reproduced).
        let denom = f64::from(n as f32 + 1e-8f32);
        Ok((self.sum / denom, denom))
    }

    /// verl's scale 1/√(σ² + 1e-8) from Σ_mask (x − μ)², or [`Error::NonFinite`] when the
    /// statistics overflowed.
    pub(crate) fn scale(&self, mean: f64, denom: f64, sq: f64) -> Result<f64> {
        let n = self.n;
        // int64 / int64 true division is float32 in torch (peer behaviour reproduced).
        let bessel = f64::from(n as f32 / (n - 1) as f32);
        let var = sq / denom * bessel;
        if !mean.is_finite() || !var.is_finite() {
            return Err(Error::NonFinite {
                what: "masked_whiten statistics (overflow)",
                index: 0,
                value: if mean.is_finite() { var } else { mean },
            });
        }
        Ok(1.0 / (var + 1e-8).sqrt())
    }

    /// Mean and scale of the masked `values` (rows of `cols`) this sum was accumulated over:
    /// the second pass, Σ(x − μ)² per row by [`row_sq`], rows added in order from +0.0.
    #[cfg(test)]
    pub(crate) fn stats(&self, values: &[f64], mask: &[u8], cols: usize) -> Result<(f64, f64)> {
        let (mean, denom) = self.mean()?;
        let mut sq = 0.0f64;
        if cols > 0 {
            for (v, m) in values.chunks_exact(cols).zip(mask.chunks_exact(cols)) {
                sq += row_sq(v, m, mean);
            }
        }
        self.finish(mean, denom, sq, values, mask)
    }

    /// Mean and scale from [`mean`](Self::mean)'s `(mean, denom)` and Σ_mask (x − μ)² =
    /// `sq`, or the overflow fallback over the masked `values`.
    pub(crate) fn finish(
        &self,
        mean: f64,
        denom: f64,
        sq: f64,
        values: &[f64],
        mask: &[u8],
    ) -> Result<(f64, f64)> {
        match self.scale(mean, denom, sq) {
            Ok(scale) => Ok((mean, scale)),
            Err(_) => self.rescaled(values.iter().zip(mask).map(|(&x, &m)| (x, usize::from(m))), denom),
        }
    }

    /// The overflow fallback (Σx or Σ(x − μ)² overflowed for finite values): μ and
    /// 1/√(σ² + 1e-8) recomputed in units of s = max |x| over the masked values, with the
    /// same float32 count and Bessel factor: μ = s·μ_s, scale = 1/(s·√(σ²_s + 1e-8/s²)).
    /// Only called after [`scale`](Self::scale) failed, so every finite result keeps the
    /// regular path's bits. `masked` yields each value with its number of masked copies, in
    /// row-major order; its sums run plainly left to right (this path is rare and not
    /// timed). [`Error::NonFinite`] when even the rescaled statistics are not representable.
    pub(crate) fn rescaled(
        &self,
        masked: impl Iterator<Item = (f64, usize)> + Clone,
        denom: f64,
    ) -> Result<(f64, f64)> {
        let s = masked
            .clone()
            .filter(|&(_, k)| k > 0)
            .fold(0.0f64, |m, (x, _)| m.max(x.abs()));
        let (mut sum, mut sq) = (0.0f64, 0.0f64);
        for (x, k) in masked.clone() {
            for _ in 0..k {
                sum += x / s;
            }
        }
        let mean_s = sum / denom;
        for (x, k) in masked {
            let d = x / s - mean_s;
            for _ in 0..k {
                sq += d * d;
            }
        }
        let n = self.n;
        let bessel = f64::from(n as f32 / (n - 1) as f32);
        let var_s = sq / denom * bessel;
        let (mean, scale) = (mean_s * s, 1.0 / (var_s + 1e-8 / (s * s)).sqrt() / s);
        if !mean.is_finite() || !scale.is_finite() || scale == 0.0 {
            return Err(Error::NonFinite {
                what: "masked_whiten statistics (overflow)",
                index: 0,
                value: if mean.is_finite() { scale } else { mean },
            });
        }
        Ok((mean, scale))
    }
}

/// Branch-free "were all these values finite" accumulator (see
/// `kernel::all_finite`), cheap enough to ride along a loop that writes them.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct FiniteAcc(u64);

impl FiniteAcc {
    #[inline(always)]
    pub(crate) fn push(&mut self, x: f64) {
        self.0 |= (x.to_bits() & 0x7ff0_0000_0000_0000) + 0x0010_0000_0000_0000;
    }

    /// Folds in another accumulator (e.g. one kept in a register through a row).
    #[inline(always)]
    pub(crate) fn merge(&mut self, other: FiniteAcc) {
        self.0 |= other.0;
    }

    /// Folds in every value of `values` (vectorizable lanes).
    pub(crate) fn extend(&mut self, values: &[f64]) {
        let mut acc = [0u64; SUM_LANES];
        let mut chunks = values.chunks_exact(SUM_LANES);
        for c in &mut chunks {
            for (a, x) in acc.iter_mut().zip(c) {
                *a |= (x.to_bits() & 0x7ff0_0000_0000_0000) + 0x0010_0000_0000_0000;
            }
        }
        for a in acc {
            self.0 |= a;
        }
        for &x in chunks.remainder() {
            self.push(x);
        }
    }

    pub(crate) fn all(self) -> bool {
        self.0 >> 63 == 0
    }
}
