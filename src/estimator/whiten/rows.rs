//! Batch whitening fused with a token scan (GAE, REINFORCE++): the scan fills a block of
//! [`LANES`] rows while it is in cache, and three passes over chunks of rows (the scan with
//! each row's masked count and sum, each row's Σ(x − μ)², the whitened writes) give
//! x' = (x − μ) · 1/√(σ² + 1e-8) with μ and σ² over all masked tokens of the batch, in the
//! fixed order of [`MaskedSum`](super::sum::MaskedSum): the bits of the whole-matrix
//! computation, however the rows are split.

use crate::error::{check_finite, Result};
use crate::estimator::kernel::{put_row_checked, put_row_from, put_row_masked, LANES, SUM_LANES};
use crate::tensor::{overflows_f32, FloatViewMut, MaskView};

use super::sum::{row_sq, row_sum, FiniteAcc, MaskedSum};
use super::{apply_in_place, apply_remasked};

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
/// (see `FiniteCheck`) and clears `mask_ok` when it converted an
/// integer mask entry other than 0 and 1 (`kernel::mask_row`).
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
    let chunks = crate::parallel::chunk_count(rows.saturating_mul(cols), PAR_TOKENS);
    let mut s = slabs.sized(rows, cols, chunks);
    if cols == 0 {
        // No token: verl raises on the empty mask.
        return MaskedSum::default().mean().map(|_| ());
    }
    let mut bounds = [0; crate::parallel::MAX_CHUNKS + 1];
    let bounds = crate::parallel::balance(rows, chunks, |r| r, &mut bounds);

    let acc = scan(bounds, &mut s, returns.as_deref_mut(), &fill);
    if !(acc.finite.all() && acc.mask_ok) {
        inputs_error()?;
        if !acc.mask_ok {
            // Reached only if the eager checks missed the entry the scan saw (a crate bug).
            return Err(response_mask.value_error());
        }
        first_non_finite_return(&mut s, &fill)?;
    }
    // The row sums added in row order from +0.0: the serial order, however the rows were
    // split.
    let mut sum = MaskedSum::default();
    for (&count, &x) in s.row_n.iter().zip(&*s.row_s) {
        sum.add(count, x);
    }
    let (mean, denom) = sum.mean()?;

    // Pass 2, per chunk: each row's Σ(x − μ)², added in row order as pass 1's sums.
    let whole = s.part(None, &mut []);
    crate::parallel::for_chunks(bounds, whole, &Part::split, &|_, p: Part<'_>| {
        let rows = p.stage.chunks_exact(cols).zip(p.mask.chunks_exact(cols));
        for ((v, m), s) in rows.zip(p.s.iter_mut()) {
            *s = row_sq(v, m, mean);
        }
    });
    let sq = s.row_s.iter().fold(0.0f64, |a, &x| a + x);
    let (mean, scale) = sum.finish(mean, denom, sq, s.stage, s.stage_mask)?;

    // (x − μ)·scale rounded is non-decreasing in x (scale > 0), so every whitened value is
    // finite iff those of the smallest and the largest value are.
    if ((acc.lo - mean) * scale).is_finite() && ((acc.hi - mean) * scale).is_finite() {
        write_whitened(bounds, &mut s, advantages, remask, (mean, scale));
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
        apply_remasked(s.stage, s.stage_mask, &mut vec![0.0; s.stage.len()], mean, scale)
    } else {
        apply_in_place(&mut s.stage.to_vec(), mean, scale)
    }
}

/// [`RowSlabs`] sized for one call: `rows` × `cols` stage and mask, per-row counts and sums,
/// and the block buffers of `chunks` chunks.
struct Sized<'a> {
    cols: usize,
    blocks: &'a mut [BlockBufs],
    stage: &'a mut [f64],
    stage_mask: &'a mut [u8],
    row_n: &'a mut [u64],
    row_s: &'a mut [f64],
}

impl RowSlabs {
    /// Grows the buffers for a call (no allocation once they are large enough).
    fn sized(&mut self, rows: usize, cols: usize, chunks: usize) -> Sized<'_> {
        let n = LANES * cols;
        self.blocks
            .resize_with(chunks.max(self.blocks.len()), BlockBufs::default);
        for bufs in self.blocks.iter_mut().take(chunks) {
            for v in [&mut bufs.ret, &mut bufs.a, &mut bufs.b] {
                v.resize(n + PAGE / 8, 0.0);
            }
        }
        self.stage.resize(rows * cols, 0.0);
        self.stage_mask.resize(rows * cols, 0);
        self.row_n.resize(rows, 0);
        self.row_s.resize(rows, 0.0);
        Sized {
            cols,
            blocks: &mut self.blocks[..chunks],
            stage: &mut self.stage[..rows * cols],
            stage_mask: &mut self.stage_mask[..rows * cols],
            row_n: &mut self.row_n[..rows],
            row_s: &mut self.row_s[..rows],
        }
    }
}

impl Sized<'_> {
    /// Every row as one [`Part`] with the output `out` and accumulators `accs` (the other
    /// per-pass parts: pass 1 takes them itself).
    fn part<'p>(&'p mut self, out: Option<FloatViewMut<'p>>, accs: &'p mut [ChunkAcc]) -> Part<'p> {
        Part {
            r0: 0,
            cols: self.cols,
            stage: &mut *self.stage,
            mask: &mut *self.stage_mask,
            out,
            n: &mut [],
            s: &mut *self.row_s,
            blocks: &mut [],
            accs,
        }
    }
}

/// Pass 1, per chunk of rows: the scan one block at a time while it is in cache, then the
/// block's returns written out and each row's masked count and sum taken. Returns what the
/// chunks saw, merged.
fn scan<F>(bounds: &[usize], s: &mut Sized<'_>, returns: Option<&mut FloatViewMut<'_>>, fill: &F) -> ChunkAcc
where
    F: Fn(usize, &mut Lanes<'_>) + Sync,
{
    let (cols, chunks) = (s.cols, s.blocks.len());
    let n = LANES * cols;
    let mut accs = [ChunkAcc::default(); crate::parallel::MAX_CHUNKS];
    let whole = Part {
        r0: 0,
        cols,
        stage: &mut *s.stage,
        mask: &mut *s.stage_mask,
        out: returns.map(|r| r.reborrow()),
        n: &mut *s.row_n,
        s: &mut *s.row_s,
        blocks: &mut *s.blocks,
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
    accs[..chunks].iter().fold(ChunkAcc::default(), |a, c| a.merge(c))
}

/// The first non-finite return, in row-major order (error path: reruns the scan serially
/// and allocates).
fn first_non_finite_return<F>(s: &mut Sized<'_>, fill: &F) -> Result<()>
where
    F: Fn(usize, &mut Lanes<'_>) + Sync,
{
    let n = LANES * s.cols;
    let BlockBufs { ret, a, b } = &mut s.blocks[0];
    let mut all = Vec::with_capacity(s.stage.len());
    let block = s.stage.chunks_mut(n).zip(s.stage_mask.chunks_mut(n));
    for (i, (pre, mask)) in block.enumerate() {
        let mut lanes = Lanes::new(ret, a, b, pre, mask);
        fill(i * LANES, &mut lanes);
        all.extend_from_slice(lanes.ret);
    }
    check_finite("returns", &all)
}

/// Pass 3, per chunk: the whitened rows `(x − μ)·scale`, times the mask when `remask`.
fn write_whitened(
    bounds: &[usize],
    s: &mut Sized<'_>,
    advantages: &mut FloatViewMut<'_>,
    remask: bool,
    (mean, scale): (f64, f64),
) {
    let (cols, stream_adv) = (s.cols, advantages.streams());
    let whole = s.part(Some(advantages.reborrow()), &mut []);
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
