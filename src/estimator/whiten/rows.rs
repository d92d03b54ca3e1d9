//! verl's batch whitening over masked tokens (`verl.utils.torch_functional.masked_whiten`);
//! the public description is the [estimator module's](super#batch-whitening).
//!
//! One mean and one variance over **all** masked tokens of the batch (not per row, not per
//! group), then every position (masked or not) is shifted and scaled:
//!
//! ```text
//! n    = Σ mask
//! μ    = Σ_{mask} x / (n + 1e-8)
//! σ²   = Σ_{mask} (x − μ)² / (n + 1e-8) · n / (n − 1)        (unbiased)
//! x'   = (x − μ) · 1 / √(σ² + 1e-8)
//! ```
//!
//! Used by GAE, REINFORCE++, REINFORCE++-baseline and GDPO.
//!
//! # Order of the sums
//! Σx and Σ(x − μ)² run over every masked token of the batch, and their order of additions
//! is part of the result's bits. Each row's masked values are summed in [`SUM_LANES`] = 8
//! partial sums, partial j taking the tokens t ≡ j (mod 8) left to right from +0.0, combined
//! as ((p0 + p4) + (p2 + p6)) + ((p1 + p5) + (p3 + p7)); the row sums are added in row order
//! from +0.0 ([`row_sum`], [`row_sq`]). Eight independent chains (0.1 had one, latency-bound)
//! let the additions overlap and vectorize. torch's reductions are not left to right either,
//! so parity with verl is a tolerance (1e-5); within the crate the order is fixed, so the
//! bits do not depend on the output dtype, the mask form or the `rayon` feature. Results
//! differ from 0.1 in the last bits. The overflow fallback ([`MaskedSum::rescaled`]) sums
//! left to right.
//!
//! # Peer behaviour reproduced
//! - verl's masks are int64 tensors, so `n + 1e-8` and the Bessel factor `n / (n − 1)` are
//!   computed in **float32** even when the values are float64: `n + 1e-8` rounds to `f32(n)`
//!   (exactly `n` below 2²⁴) and the factor is `f32(n) / f32(n − 1)` rounded to float32
//!   (e.g. 5/4 = 1.25 exactly, 4/3 = 1.3333334326744 instead of 1.3333333333333).
//! - verl raises `ValueError` when the mask holds 0 or 1 valid tokens; we return
//!   [`Error::Undefined`].
//! - Positions outside the mask are transformed too (GAE keeps them; other callers re-mask).
//!
//! # Deliberate difference
//! When finite inputs overflow Σx or Σ(x − μ)², verl silently returns zeros or NaN; we
//! recompute μ and σ in units of the masked values' max |x| (only then, so every finite result
//! keeps verl's bits), which gives the exact whitened values. When a whitened value itself
//! is ±inf (or the rescaled statistics are not representable) we return
//! [`Error::NonFinite`].

#[cfg(test)]
use super::kernel::Tokens;
use super::kernel::{
    masked_class_counts, put_row_checked, put_row_from, put_row_masked, select, Out, LANES, SUM_LANES,
};
use crate::error::{check_finite, Error, Result};
use crate::tensor::MaskView;
use crate::tensor::{overflows_f32, FloatViewMut};
#[cfg(test)]
use ndarray::{Array2, ArrayView2};

/// Whitens `values` in place with one masked mean/variance over the whole batch (see the
/// [module docs](self) for the equation and verl's float32 quirks).
///
/// Every position is transformed, including those outside the mask.
///
/// # Errors
/// [`Error::LengthMismatch`] when the shapes differ; [`Error::Undefined`] when fewer than two
/// tokens are masked (verl raises); [`Error::NonFinite`] when the statistics or a whitened
/// value overflow (index = row-major position).
#[cfg(test)]
pub(crate) fn masked_whiten(values: &mut Array2<f64>, mask: ArrayView2<'_, bool>) -> Result<()> {
    super::check_matrix_shape("response_mask", mask.dim(), values.dim())?;
    let mask = Tokens::mask(MaskView::Bool(mask), &mut Vec::new())?;
    let cols = values.ncols();
    match values.as_slice_mut() {
        Some(v) => whiten_in_place(v, mask.as_slice(), cols),
        None => {
            // Not in standard layout: whiten a row-major copy, then write it back.
            let mut tmp: Vec<f64> = values.iter().copied().collect();
            whiten_in_place(&mut tmp, mask.as_slice(), cols)?;
            for (x, y) in values.iter_mut().zip(tmp) {
                *x = y;
            }
            Ok(())
        }
    }
}

/// [`masked_whiten`] over row-major slices of equal length (checked by the callers), rows of
/// `cols` tokens.
#[cfg(test)]
pub(crate) fn whiten_in_place(values: &mut [f64], mask: &[bool], cols: usize) -> Result<()> {
    let mask: Vec<u8> = mask.iter().map(|&m| u8::from(m)).collect();
    let mask = &mask[..];
    let mut acc = MaskedSum::default();
    if cols > 0 {
        for (v, m) in values.chunks_exact(cols).zip(mask.chunks_exact(cols)) {
            acc.add_row(v, m);
        }
    }
    let (mean, scale) = acc.stats(values, mask, cols)?;
    apply_in_place(values, mean, scale)
}

/// `x ← (x − μ)·scale` at every position, then the overflow check (first non-finite
/// position).
pub(crate) fn apply_in_place(values: &mut [f64], mean: f64, scale: f64) -> Result<()> {
    let mut finite = FiniteAcc::default();
    for x in values.iter_mut() {
        *x = (*x - mean) * scale;
        finite.push(*x);
    }
    if finite.all() {
        Ok(())
    } else {
        check_finite("whitened values (overflow)", values)
    }
}

/// `dst = ((src − μ)·scale) · mask`: whitening `src` and re-masking it (verl's
/// `masked_whiten(x, mask) * mask`) in one pass that leaves `src` intact. Overflow is
/// reported at the first non-finite whitened value **before** re-masking, as whitening a
/// copy of `src` in place and then re-masking it does.
pub(crate) fn apply_remasked(src: &[f64], mask: &[u8], dst: &mut [f64], mean: f64, scale: f64) -> Result<()> {
    let n = src.len();
    let (mask, dst) = (&mask[..n], &mut dst[..n]);
    let mut finite = FiniteAcc::default();
    for t in 0..n {
        let y = (src[t] - mean) * scale;
        finite.push(y);
        dst[t] = select(mask[t] != 0, y);
    }
    if finite.all() {
        return Ok(());
    }
    match src.iter().position(|&x| !((x - mean) * scale).is_finite()) {
        Some(index) => Err(Error::NonFinite {
            what: "whitened values (overflow)",
            index,
            value: (src[index] - mean) * scale,
        }),
        None => Ok(()),
    }
}

/// verl's `masked_whiten(s.unsqueeze(-1) * mask, mask) * mask` for one scalar `s_r` per row
/// (GDPO, REINFORCE++-baseline), written as both advantages and returns.
///
/// The broadcast matrix is never materialized: the masked values of row r are `s_r` at every
/// generated token, so each partial sum of [`row_sum`] (and of [`row_sq`]) over that row is
/// `s_r` (or `(s_r − μ)²`) added once per generated token of its class t mod [`SUM_LANES`]:
/// exactly the additions over the broadcast matrix, in the same order. Unmasked positions
/// held +0.0 before whitening: their whitened value `(0 − μ)·scale` only matters for the
/// overflow check, which reports the first non-finite position in row-major order.
pub(crate) fn whiten_outcome(
    out: &mut Out<'_>,
    scalars: &[f64],
    mask: &MaskView<'_>,
    counts: &mut Vec<usize>,
    whitened: &mut Vec<f64>,
) -> Result<()> {
    masked_class_counts(mask, counts)?;
    let classes = || counts.chunks_exact(SUM_LANES);
    let mut acc = MaskedSum::default();
    for (&s, c) in scalars.iter().zip(classes()) {
        acc.add_repeated(s, c);
    }
    let (mean, denom) = acc.mean()?;
    let mut sq = 0.0f64;
    for (&s, c) in scalars.iter().zip(classes()) {
        let d = s - mean;
        sq += repeated_sum(d * d, c);
    }
    let row_count = |c: &[usize]| c.iter().sum::<usize>();
    let (mean, scale) = match acc.scale(mean, denom, sq) {
        Ok(scale) => (mean, scale),
        Err(_) => acc.rescaled(scalars.iter().copied().zip(classes().map(row_count)), denom)?,
    };
    whitened.clear();
    whitened.extend(scalars.iter().map(|&s| (s - mean) * scale));
    let cols = mask.dim().1;
    let unmasked_overflow = !((0.0 - mean) * scale).is_finite() && classes().any(|c| row_count(c) < cols);
    let masked_overflow = whitened
        .iter()
        .zip(classes())
        .any(|(y, c)| row_count(c) > 0 && !y.is_finite());
    if unmasked_overflow || masked_overflow {
        for (r, &s) in scalars.iter().enumerate() {
            for t in 0..cols {
                let x = select(mask.is_set(r, t), s);
                let y = (x - mean) * scale;
                if !y.is_finite() {
                    return Err(Error::NonFinite {
                        what: "whitened values (overflow)",
                        index: r * cols + t,
                        value: y,
                    });
                }
            }
        }
    }
    out.outcome(whitened, mask)
}

/// Buffers of [`whiten_rows`], reused across calls: the scan's block buffers, one set per
/// chunk of rows ([`BlockBufs`]); the values to whiten and the mask, rows × L; and per row,
/// its masked count and sum, then its Σ(x − μ)².
#[derive(Debug, Clone, Default)]
pub(crate) struct RowSlabs {
    blocks: Vec<BlockBufs>,
    stage: Vec<f64>,
    stage_mask: Vec<u8>,
    row_n: Vec<u64>,
    row_s: Vec<f64>,
}

/// One chunk's block of [`LANES`] rows for the scan (`ret`, `a`, `b` of [`Lanes`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct BlockBufs {
    ret: Vec<f64>,
    a: Vec<f64>,
    b: Vec<f64>,
}

/// One block of k ≤ [`LANES`] rows as a scan fills it, each slice k × L row-major (row l of
/// the block at `l · L ..`): `pre` the values to whiten and `mask` the rows' response mask
/// (both the block's rows of the whole-batch stage; the mask as 0/1 bytes), `ret` the returns; `a` and `b` are free
/// for the scan's widened input rows. The scan folds its inputs and returns into `finite`
/// (see [`FiniteCheck`](super::FiniteCheck)) and clears `mask_ok` when it converted an
/// integer mask entry other than 0 and 1 ([`mask_row`](super::mask_row)).
pub(crate) struct Lanes<'s> {
    pub(crate) pre: &'s mut [f64],
    pub(crate) ret: &'s mut [f64],
    pub(crate) mask: &'s mut [u8],
    pub(crate) a: &'s mut [f64],
    pub(crate) b: &'s mut [f64],
    pub(crate) finite: FiniteAcc,
    pub(crate) mask_ok: bool,
}

/// 4 KiB: loads and stores whose addresses agree in their low 12 bits are taken for the same
/// address until the full addresses are compared (4K aliasing).
const PAGE: usize = 4096;

/// Where a scratch buffer's block starts (in `f64`s, < `PAGE / 8`) so that it lies `target`
/// bytes past the stage rows `anchor` modulo [`PAGE`]. The scan stores into the stage and
/// `ret` and loads from `a` and `b` at the same token of rows that are often a multiple of
/// 4 KiB long (512 `f64` tokens); at one address class (mod 4 KiB) each load would wait on
/// the stores before it. A quarter page apart, they never meet within a row's few tokens in
/// flight. (Measured at C, GAE: about 25% of the call.)
fn skew(buf: &[f64], anchor: &[f64], target: usize) -> usize {
    let (buf, anchor) = (buf.as_ptr() as usize, anchor.as_ptr() as usize);
    (anchor.wrapping_add(target).wrapping_sub(buf) % PAGE) / 8
}

impl<'s> Lanes<'s> {
    /// The block of stage rows `pre` and their `mask`, with `ret`, `a` and `b` taken from the
    /// scratch buffers (each `PAGE / 8` longer than the block) at the starts [`skew`]
    /// picks: a quarter page apart from the stage and from one another. Nothing seen yet.
    #[inline(always)]
    fn new(
        ret: &'s mut [f64],
        a: &'s mut [f64],
        b: &'s mut [f64],
        pre: &'s mut [f64],
        mask: &'s mut [u8],
    ) -> Self {
        let len = pre.len();
        let (o_ret, o_a, o_b) = (
            skew(ret, pre, 3 * PAGE / 4),
            skew(a, pre, PAGE / 4),
            skew(b, pre, PAGE / 2),
        );
        Self {
            ret: &mut ret[o_ret..][..len],
            a: &mut a[o_a..][..len],
            b: &mut b[o_b..][..len],
            pre,
            mask,
            finite: FiniteAcc::default(),
            mask_ok: true,
        }
    }
}

/// The `K` rows (`cols` each) of a row-major block, as separate slices of length `cols`.
pub(crate) fn rows_of<T, const K: usize>(block: &[T], cols: usize) -> [&[T]; K] {
    std::array::from_fn(|l| &block[l * cols..][..cols])
}

/// [`rows_of`] for a block the scan writes.
pub(crate) fn rows_of_mut<T, const K: usize>(block: &mut [T], cols: usize) -> [&mut [T]; K] {
    let mut rest = block;
    std::array::from_fn(|_| {
        let (row, tail) = std::mem::take(&mut rest).split_at_mut(cols);
        rest = tail;
        row
    })
}

/// A token scan followed by verl's batch whitening, writing straight into the caller's
/// buffers (any dtype): returns `ret` rounded once, advantages `(pre − μ)·scale` rounded once
/// (times the mask when `remask`), μ and scale from the masked sums over the whole `pre`
/// matrix in [`MaskedSum`]'s order: the bits of the whole-matrix computation.
///
/// Rows are independent until the statistics, so each of the three passes (the scan, each
/// row's Σ(x − μ)², the whitened writes) runs on contiguous chunks of rows, in parallel under
/// the `rayon` feature ([`crate::parallel`]). The chunks keep one [`row_sum`] and one
/// [`row_sq`] per row, and these are added in row order after the pass, so μ and the scale
/// have the serial bits however the rows were split.
///
/// `fill(r0, lanes)` computes the block's rows `r0 ..` (k ≤ [`LANES`] of them, in lockstep)
/// from the caller's inputs in their dtype, one block at a time while it is in cache, writing
/// `pre` and the mask straight into their rows of the stage; while the block is in cache its
/// returns are written out, and its masked count and [`row_sum`]s and the range of `pre` are
/// taken. Only `pre` (`f64`, which the whitening's two further passes need) and the mask
/// (`bool`) are kept rows × L. `response_mask` is the mask the scan converts (rows × L, the
/// shape of every input). `inputs_error` gives the eager input checks' error, in their order
/// (a non-finite reward before a bad mask entry before a non-finite value of a later
/// column), when the scan saw a non-finite value or an integer mask entry other than 0 and 1:
/// no pass of its own tests the mask first.
pub(crate) fn whiten_rows(
    response_mask: &MaskView<'_>,
    remask: bool,
    slabs: &mut RowSlabs,
    advantages: &mut FloatViewMut<'_>,
    mut returns: Option<&mut FloatViewMut<'_>>,
    fill: impl Fn(usize, &mut Lanes<'_>) + Sync,
    inputs_error: impl FnOnce() -> Result<()>,
) -> Result<()> {
    let (rows, cols) = response_mask.dim();
    let n = LANES * cols;
    let chunks = crate::parallel::chunk_count(rows.saturating_mul(cols), PAR_TOKENS);
    let RowSlabs {
        blocks,
        stage,
        stage_mask,
        row_n,
        row_s,
    } = slabs;
    blocks.resize_with(chunks.max(blocks.len()), BlockBufs::default);
    for bufs in blocks.iter_mut().take(chunks) {
        for v in [&mut bufs.ret, &mut bufs.a, &mut bufs.b] {
            v.resize(n + PAGE / 8, 0.0);
        }
    }
    stage.resize(rows * cols, 0.0);
    stage_mask.resize(rows * cols, 0);
    row_n.resize(rows, 0);
    row_s.resize(rows, 0.0);
    let (stage, stage_mask) = (&mut stage[..rows * cols], &mut stage_mask[..rows * cols]);
    let (row_n, row_s) = (&mut row_n[..rows], &mut row_s[..rows]);
    if cols == 0 {
        // No token: verl raises on the empty mask.
        return MaskedSum::default().mean().map(|_| ());
    }
    let mut bounds = [0; crate::parallel::MAX_CHUNKS + 1];
    let bounds = crate::parallel::balance(rows, chunks, |r| r, &mut bounds);
    let mut accs = [ChunkAcc::default(); crate::parallel::MAX_CHUNKS];

    // Pass 1, per chunk of rows: the scan one block at a time while it is in cache, then the
    // block's returns written out and each row's masked count and sum taken.
    let whole = Part {
        r0: 0,
        cols,
        stage: &mut *stage,
        mask: &mut *stage_mask,
        out: returns.as_deref_mut().map(|r| r.reborrow()),
        n: &mut *row_n,
        s: &mut *row_s,
        blocks: &mut blocks[..chunks],
        accs: &mut accs[..chunks],
    };
    let stream_ret = whole.out.as_ref().is_some_and(FloatViewMut::streams);
    crate::parallel::for_chunks(bounds, whole, &Part::split, &|_, mut p: Part<'_>| {
        let (BlockBufs { ret, a, b }, acc) = (&mut p.blocks[0], &mut p.accs[0]);
        let rows = p.stage.chunks_mut(n).zip(p.mask.chunks_mut(n));
        for (i, (pre, mask)) in rows.enumerate() {
            let mut lanes = Lanes::new(ret, a, b, pre, mask);
            fill(p.r0 + i * LANES, &mut lanes);
            acc.finite.merge(lanes.finite);
            acc.mask_ok &= lanes.mask_ok;
            let Lanes { pre, mask, ret, .. } = lanes;
            let block = pre.chunks_exact(cols).zip(mask.chunks_exact(cols));
            for (l, ((pr, m), g)) in block.zip(ret.chunks_exact(cols)).enumerate() {
                let r = i * LANES + l;
                if let Some(out) = p.out.as_mut() {
                    // `f32` returns past f32::MAX, reported after the `f64` errors (the end).
                    acc.f32_overflow |= put_row_checked(out, r, g, stream_ret);
                }
                (p.n[r], p.s[r]) = row_sum(pr, m);
                (acc.lo, acc.hi) = range(pr, acc.lo, acc.hi);
            }
        }
        if stream_ret {
            crate::stream::fence();
        }
    });
    let acc = accs[..chunks].iter().fold(ChunkAcc::default(), |a, c| a.merge(c));
    if !(acc.finite.all() && acc.mask_ok) {
        inputs_error()?;
        if !acc.mask_ok {
            // Reached only if the eager checks missed the entry the scan saw (a crate bug).
            return Err(response_mask.value_error());
        }
        // The first non-finite return, in row-major order (error path: allocates).
        let BlockBufs { ret, a, b } = &mut blocks[0];
        let mut all = Vec::with_capacity(rows * cols);
        let block = stage.chunks_mut(n).zip(stage_mask.chunks_mut(n));
        for (i, (pre, mask)) in block.enumerate() {
            let mut lanes = Lanes::new(ret, a, b, pre, mask);
            fill(i * LANES, &mut lanes);
            all.extend_from_slice(lanes.ret);
        }
        check_finite("returns", &all)?;
    }
    // The row sums added in row order from +0.0: the serial order, however the rows were
    // split.
    let mut sum = MaskedSum::default();
    for (&count, &s) in row_n.iter().zip(&*row_s) {
        sum.add(count, s);
    }
    let (mean, denom) = sum.mean()?;

    // Pass 2, per chunk: each row's Σ(x − μ)², added in row order as pass 1's sums.
    let whole = Part {
        r0: 0,
        cols,
        stage: &mut *stage,
        mask: &mut *stage_mask,
        out: None,
        n: &mut [],
        s: &mut *row_s,
        blocks: &mut [],
        accs: &mut [],
    };
    crate::parallel::for_chunks(bounds, whole, &Part::split, &|_, p: Part<'_>| {
        let rows = p.stage.chunks_exact(cols).zip(p.mask.chunks_exact(cols));
        for ((v, m), s) in rows.zip(p.s.iter_mut()) {
            *s = row_sq(v, m, mean);
        }
    });
    let sq = row_s.iter().fold(0.0f64, |a, &s| a + s);
    let (mean, scale) = sum.finish(mean, denom, sq, stage, stage_mask)?;

    // (x − μ)·scale rounded is non-decreasing in x (scale > 0), so every whitened value is
    // finite iff those of the smallest and the largest value are.
    if ((acc.lo - mean) * scale).is_finite() && ((acc.hi - mean) * scale).is_finite() {
        // Pass 3, per chunk: the whitened rows.
        let stream_adv = advantages.streams();
        let whole = Part {
            r0: 0,
            cols,
            stage: &mut *stage,
            mask: &mut *stage_mask,
            out: Some(advantages.reborrow()),
            n: &mut [],
            s: &mut [],
            blocks: &mut [],
            accs: &mut [],
        };
        crate::parallel::for_chunks(bounds, whole, &Part::split, &|_, mut p: Part<'_>| {
            let Some(out) = p.out.as_mut() else { return };
            let rows = p.stage.chunks_exact(cols).zip(p.mask.chunks_exact(cols));
            for (r, (v, m)) in rows.enumerate() {
                if remask {
                    put_row_masked(out, r, v, m, stream_adv, |x| (x - mean) * scale);
                } else {
                    put_row_from(out, r, v, stream_adv, |x| (x - mean) * scale);
                }
            }
            if stream_adv {
                crate::stream::fence();
            }
        });
        // A counted token's whitened value is at most √(n − 1) in size (|x − μ|² ≤ Σ(x − μ)² =
        // (n − 1)·σ²), but without `remask` the tokens the statistics did not count (GAE, as
        // verl) are written too, and (x − μ)·scale may lie past f32::MAX there: for a counted
        // μ of 1e225 with a tiny σ, a masked 0 whitens to about −μ/σ. The written values are
        // monotone in x, so the extremes tell (found by fuzzing the f32 path).
        let past_f32 = |x: f64| overflows_f32((x - mean) * scale);
        if !remask && (past_f32(acc.lo) || past_f32(acc.hi)) {
            advantages.infinite_f32("advantages (overflows f32)")?;
        }
        if let (true, Some(r)) = (acc.f32_overflow, returns) {
            r.infinite_f32("returns (overflows f32)")?;
        }
        return Ok(());
    }
    // Overflow: the whole-matrix computation's error (first position in row-major order).
    if remask {
        apply_remasked(stage, stage_mask, &mut vec![0.0; stage.len()], mean, scale)
    } else {
        apply_in_place(&mut stage.to_vec(), mean, scale)
    }
}

/// Tokens per chunk below which splitting [`whiten_rows`] costs more than it saves (the
/// outcome estimators' threshold).
const PAR_TOKENS: usize = crate::parallel::PAR_TOKENS;

/// What one chunk of [`whiten_rows`]' first pass saw: its inputs' and returns' finiteness,
/// whether its integer mask entries were all 0 or 1, and the range of its values to whiten.
#[derive(Debug, Clone, Copy)]
struct ChunkAcc {
    finite: FiniteAcc,
    mask_ok: bool,
    lo: f64,
    hi: f64,
    /// A return written into an `f32` buffer lies past f32::MAX.
    f32_overflow: bool,
}

impl Default for ChunkAcc {
    fn default() -> Self {
        Self {
            finite: FiniteAcc::default(),
            mask_ok: true,
            lo: f64::INFINITY,
            hi: f64::NEG_INFINITY,
            f32_overflow: false,
        }
    }
}

impl ChunkAcc {
    /// Both chunks' observations (min and max do not depend on the order).
    fn merge(mut self, other: &Self) -> Self {
        self.finite.merge(other.finite);
        self.mask_ok &= other.mask_ok;
        self.lo = self.lo.min(other.lo);
        self.hi = self.hi.max(other.hi);
        self.f32_overflow |= other.f32_overflow;
        self
    }
}

/// The rows `r0 ..` of [`whiten_rows`]' buffers that one chunk works on: their stage rows and
/// mask, their rows of an output (returns in the first pass, advantages in the last), their
/// per-row counts and sums, and the chunk's block buffers and accumulator (`blocks[0]`,
/// `accs[0]`). A pass leaves the parts it does not use empty.
struct Part<'a> {
    r0: usize,
    cols: usize,
    stage: &'a mut [f64],
    mask: &'a mut [u8],
    out: Option<FloatViewMut<'a>>,
    n: &'a mut [u64],
    s: &'a mut [f64],
    blocks: &'a mut [BlockBufs],
    accs: &'a mut [ChunkAcc],
}

impl<'a> Part<'a> {
    /// The rows before absolute row `at` (`left` chunks) and the rest.
    fn split(self, at: usize, left: usize) -> (Self, Self) {
        let (k, cols) = (at - self.r0, self.cols);
        let (stage_a, stage_b) = self.stage.split_at_mut(k * cols);
        let (mask_a, mask_b) = self.mask.split_at_mut(k * cols);
        let (out_a, out_b) = match self.out {
            Some(o) => {
                let (a, b) = o.split_rows(k);
                (Some(a), Some(b))
            }
            None => (None, None),
        };
        let (n_a, n_b) = self.n.split_at_mut(k.min(self.n.len()));
        let (s_a, s_b) = self.s.split_at_mut(k.min(self.s.len()));
        let (blocks_a, blocks_b) = self.blocks.split_at_mut(left.min(self.blocks.len()));
        let (accs_a, accs_b) = self.accs.split_at_mut(left.min(self.accs.len()));
        (
            Part {
                r0: self.r0,
                cols,
                stage: stage_a,
                mask: mask_a,
                out: out_a,
                n: n_a,
                s: s_a,
                blocks: blocks_a,
                accs: accs_a,
            },
            Part {
                r0: at,
                cols,
                stage: stage_b,
                mask: mask_b,
                out: out_b,
                n: n_b,
                s: s_b,
                blocks: blocks_b,
                accs: accs_b,
            },
        )
    }
}

/// The smallest and largest of `lo`, `hi` and `values` (finite values; branch-free lanes).
fn range(values: &[f64], lo: f64, hi: f64) -> (f64, f64) {
    let (mut l, mut h) = ([lo; SUM_LANES], [hi; SUM_LANES]);
    let mut chunks = values.chunks_exact(SUM_LANES);
    for c in &mut chunks {
        for j in 0..SUM_LANES {
            l[j] = if c[j] < l[j] { c[j] } else { l[j] };
            h[j] = if c[j] > h[j] { c[j] } else { h[j] };
        }
    }
    let l = l.iter().fold(lo, |a, &x| a.min(x));
    let h = h.iter().fold(hi, |a, &x| a.max(x));
    chunks
        .remainder()
        .iter()
        .fold((l, h), |(l, h), &x| (l.min(x), h.max(x)))
}

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
fn repeated_sum(x: f64, counts: &[usize]) -> f64 {
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
/// [`all_finite`](super::all_finite)), cheap enough to ride along a loop that writes them.
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

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    #[test]
    fn hand_computed_example() {
        let mut x = array![[1.0, 2.0, 3.0, 100.0]];
        let mask = array![[true, true, true, false]];
        masked_whiten(&mut x, mask.view()).unwrap();
        // mean 2, unbiased variance 1 over the three masked tokens.
        let s = 1.0 / (1.0f64 + 1e-8).sqrt();
        assert!((x[[0, 0]] + s).abs() < 1e-12);
        assert!(x[[0, 1]].abs() < 1e-12);
        assert!((x[[0, 3]] - 98.0 * s).abs() < 1e-9); // unmasked: shifted and scaled too
    }

    proptest::proptest! {
        /// masked_whiten on values whose raw unbiased variance s² is computed here: the
        /// whitened masked values have variance s²/(s² + 1e-8), up to verl's float32 token
        /// count and Bessel factor (relative 1e-6). (Moved from tests/it/properties_baselines.rs
        /// when `whiten` became crate-private.)
        #[test]
        fn masked_whiten_follows_its_variance_law(
            x in proptest::collection::vec(-1.0..1.0f64, 2..40),
            scale in proptest::prop_oneof![
                proptest::strategy::Just(1e-5),
                proptest::strategy::Just(1e-3),
                proptest::strategy::Just(1.0),
                proptest::strategy::Just(1e3)
            ],
        ) {
            let n = x.len();
            let raw: Vec<f64> = x.iter().map(|v| v * scale).collect();
            let mean = raw.iter().sum::<f64>() / n as f64;
            let s2 = raw.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (n - 1) as f64;
            let mut m = Array2::from_shape_vec((1, n), raw).unwrap();
            let mask = Array2::from_elem((1, n), true);
            masked_whiten(&mut m, mask.view()).unwrap();
            let w_mean = m.iter().sum::<f64>() / n as f64;
            let w_var = m.iter().map(|v| (v - w_mean) * (v - w_mean)).sum::<f64>() / (n - 1) as f64;
            let expected = s2 / (s2 + 1e-8);
            proptest::prop_assert!((w_var - expected).abs() <= 1e-6 * expected.max(1e-12) + 1e-12,
                "n {}: var {} vs s2/(s2+1e-8) = {}", n, w_var, expected);
        }
    }

    #[test]
    fn bessel_factor_is_float32() {
        // Three masked tokens 0, 0, 3: mean 1, Σ(x−μ)² = 1 + 1 + 4 = 6, biased var 2,
        // Bessel f32(3/2) = 1.5 exactly -> var 3.
        let mut x = array![[0.0, 0.0, 3.0]];
        let mask = array![[true, true, true]];
        masked_whiten(&mut x, mask.view()).unwrap();
        let s = 1.0 / (3.0f64 + 1e-8).sqrt();
        assert!((x[[0, 2]] - 2.0 * s).abs() < 1e-15);

        // Four tokens 0, 0, 0, 4: mean 1, Σ(x−μ)² = 3 + 9 = 12, biased var 3,
        // Bessel f32(4/3) = 1.33333337306976... (not 1.3333333333), var = 4.0000001192...
        let mut y = array![[0.0, 0.0, 0.0, 4.0]];
        let mask4 = array![[true, true, true, true]];
        masked_whiten(&mut y, mask4.view()).unwrap();
        let var = 3.0 * f64::from(4.0f32 / 3.0f32);
        assert!((var - 4.000_000_119_209_29).abs() < 1e-12);
        let expect = 3.0 / (var + 1e-8).sqrt();
        assert_eq!(y[[0, 3]], expect);
    }

    #[test]
    fn fewer_than_two_tokens_is_undefined() {
        let mut x = array![[1.0, 2.0]];
        assert!(matches!(
            masked_whiten(&mut x, array![[false, true]].view()),
            Err(Error::Undefined(_))
        ));
        assert!(matches!(
            masked_whiten(&mut x, array![[false, false]].view()),
            Err(Error::Undefined(_))
        ));
        assert!(matches!(
            masked_whiten(&mut x, array![[true]].view()),
            Err(Error::LengthMismatch { .. })
        ));
    }

    #[test]
    fn overflowing_variance_is_rescaled_not_zeroed() {
        // ±1e200: Σ(x − μ)² = 2e400 overflows, and verl would scale everything to 0. In units
        // of s = 1e200: μ_s = 0, Σd² = 2, σ²_s = 2/f32(2 + 1e-8) · f32(2/1) = 2, so the
        // whitened values are ±1/√2 (to the 1e-8/s² term, which underflows to 0).
        let mut x = array![[1e200, -1e200]];
        masked_whiten(&mut x, array![[true, true]].view()).unwrap();
        let h = std::f64::consts::FRAC_1_SQRT_2;
        assert!(
            (x[[0, 0]] - h).abs() < 1e-15 && (x[[0, 1]] + h).abs() < 1e-15,
            "{x}"
        );
        // A whitened value that is itself beyond f64::MAX is still an error: μ = 1.7e308/3,
        // and −1.7e308 − μ overflows before scaling.
        let mut x = array![[1.7e308, 1.7e308, -1.7e308]];
        assert!(matches!(
            masked_whiten(&mut x, array![[true, true, true]].view()),
            Err(Error::NonFinite { .. })
        ));
    }

    #[test]
    fn column_major_values_match_row_major() {
        let x = array![[1.0, 2.0, 7.0], [4.0, -1.0, 0.5]];
        let mask = array![[true, false, true], [true, true, false]];
        let mut row_major = x.clone();
        masked_whiten(&mut row_major, mask.view()).unwrap();
        let mut col_major = x.t().as_standard_layout().into_owned().reversed_axes();
        assert!(col_major.as_slice().is_none());
        masked_whiten(&mut col_major, mask.t().as_standard_layout().t()).unwrap();
        assert_eq!(row_major, col_major);
    }

    #[test]
    fn statistics_span_rows() {
        // One token per row: mean over rows, not per row. Values 1 and 3: mean 2, var 2.
        let mut x = array![[1.0, 9.0], [3.0, 9.0]];
        let mask = array![[true, false], [true, false]];
        masked_whiten(&mut x, mask.view()).unwrap();
        let s = 1.0 / (2.0f64 + 1e-8).sqrt();
        assert!((x[[0, 0]] + s).abs() < 1e-15);
        assert!((x[[1, 0]] - s).abs() < 1e-15);
        assert!((x[[0, 1]] - 7.0 * s).abs() < 1e-12);
    }
}
