//! Masked writes: a value per row at its generated tokens and `+0.0` elsewhere, in the output's
//! dtype, streamed past the cache for large outputs.

use ndarray::{ArrayView2, ArrayViewMut2};

use super::elem::{Float, MaskBits};
use super::{FloatViewMut, MaskView};
use crate::error::Result;
use crate::parallel::for_row_chunks;
use crate::stream::Chunk;

/// True when the finite `v` rounds to an infinite `f32`: |v| ≥ f32::MAX plus half an ulp,
/// 2¹²⁸ − 2¹⁰³ (the midpoint between f32::MAX and 2¹²⁸ rounds to even, which is ∞). Compared
/// in `f64` rather than by converting, so that a fold of it stays in `f64` lanes (as a fold
/// over a whitening scan's returns it cost GAE 15% at B converting, none comparing; those
/// rows are now tested as they are stored, `put_row_checked`).
#[inline(always)]
pub(crate) fn overflows_f32(v: f64) -> bool {
    const ROUNDS_TO_INF: f64 = 340_282_356_779_733_661_637_539_395_458_142_568_448.0;
    let a = v.abs();
    (ROUNDS_TO_INF..f64::INFINITY).contains(&a)
}

/// Writes `values[r]` at the generated tokens of row r and `+0.0` elsewhere, for every row:
/// verl's `scalar.unsqueeze(-1) * response_mask`, which the step broadcast and the outcome
/// estimators share. `out` and `mask` have the same shape and `values` one entry per row
/// (checked by the callers); lengths are checked by the callers too.
///
/// Integer masks are tested for 0/1 while they are read (no pass of its own): the per-token
/// select also ORs the entries' bits other than bit 0. (Measured at B, `benches/trainer.rs`:
/// testing each row for a 0/1 prefix and writing it as two fills, which the broadcast did
/// before, took 23–36% longer for `grpo` on `i64`, `u8` and `bool` masks than this single
/// pass, and BEACON end to end got 8–15% faster with the select.) Under the `rayon` feature contiguous blocks of rows run on the pool; every
/// token is written from its own row's value alone, so any split gives the same bits.
///
/// # Errors
/// [`Error::MaskValue`] for an integer entry other than 0 and 1 (the output is then partly
/// written); then [`Error::NonFinite`] naming `what` for a value written into an `f32` buffer
/// that rounds to ∞ ([`FloatViewMut::f32_overflow`]).
pub(crate) fn write_masked(
    what: &'static str,
    values: &[f64],
    mask: &MaskView<'_>,
    out: &mut FloatViewMut<'_>,
) -> Result<()> {
    let valid = match out {
        FloatViewMut::F32(o) => write_masked_as(values, mask, o),
        FloatViewMut::F64(o) => write_masked_as(values, mask, o),
    };
    if valid {
        out.f32_overflow(what, values)
    } else {
        Err(mask.value_error())
    }
}

/// [`write_masked`] into a fresh row-major `f64` buffer: `out` cleared, then extended row by
/// row (each element written once, so fresh memory is not zero-filled first).
///
/// # Errors
/// As [`write_masked`], and [`Error::CapacityExceeded`] when the mask's rows × L cannot be
/// allocated.
pub(crate) fn extend_masked(values: &[f64], mask: &MaskView<'_>, out: &mut Vec<f64>) -> Result<()> {
    fn rows<M: MaskBits>(values: &[f64], m: &ArrayView2<'_, M>, out: &mut Vec<f64>) -> bool {
        let mut extra = M::Extra::default();
        for (row, &v) in m.rows().into_iter().zip(values) {
            let select = |x: &M| {
                extra = extra | x.extra_bits();
                if x.is_set() {
                    v
                } else {
                    0.0
                }
            };
            match row.as_slice() {
                Some(s) => out.extend(s.iter().map(select)),
                None => out.extend(row.iter().map(select)),
            }
        }
        extra == M::Extra::default()
    }
    let (r, cols) = mask.dim();
    out.clear();
    crate::huge_pages::reserve(out, (r, cols))?;
    let valid = match mask {
        MaskView::Bool(m) => rows(values, m, out),
        MaskView::U8(m) => rows(values, m, out),
        MaskView::I64(m) => rows(values, m, out),
        MaskView::Lengths { lengths, cols } => {
            for (&v, &n) in values.iter().zip(*lengths) {
                let start = out.len();
                out.resize(start + n.min(*cols), v);
                out.resize(start + cols, 0.0);
            }
            true
        }
    };
    if valid {
        Ok(())
    } else {
        Err(mask.value_error())
    }
}

/// [`write_masked`] for one output dtype; false when an integer entry is neither 0 nor 1.
fn write_masked_as<O: SelectBits>(values: &[f64], mask: &MaskView<'_>, out: &mut ArrayViewMut2<'_, O>) -> bool
where
    [O; 8]: Chunk,
    [O; 16]: Chunk,
{
    match mask {
        // Chunks of 16 tokens for byte masks, of 8 for i64 (whose 16-token chunk spills
        // registers under SSE2 and measured slower).
        MaskView::Bool(m) => write_masked_elems::<_, _, 16>(values, m, out),
        MaskView::U8(m) => write_masked_elems::<_, _, 16>(values, m, out),
        MaskView::I64(m) => write_masked_elems::<_, _, 8>(values, m, out),
        MaskView::Lengths { lengths, .. } => {
            let cols = out.ncols();
            if let (Some(o), true) = (out.as_slice_mut(), cols > 0) {
                // Large outputs bypass the cache as the matrix masks' do (see `crate::stream`):
                // a plain fill first reads every output line it writes.
                let stream = crate::stream::pays(std::mem::size_of_val(o));
                for_row_chunks(o, cols, cols, |r0, o| {
                    let rows = o.chunks_exact_mut(cols).zip(&values[r0..]).zip(&lengths[r0..]);
                    if stream {
                        for ((o, &v), &n) in rows {
                            stream_prefix_row::<O, 16>(o, n, O::from_f64(v));
                        }
                        crate::stream::fence();
                    } else {
                        for ((o, &v), &n) in rows {
                            let n = n.min(cols);
                            o[..n].fill(O::from_f64(v));
                            o[n..].fill(O::ZERO);
                        }
                    }
                });
                return true;
            }
            for (mut orow, (&v, &n)) in out.rows_mut().into_iter().zip(values.iter().zip(*lengths)) {
                let v = O::from_f64(v);
                let n = n.min(orow.len());
                match orow.as_slice_mut() {
                    Some(o) => {
                        o[..n].fill(v);
                        o[n..].fill(O::ZERO);
                    }
                    None => {
                        for (t, o) in orow.iter_mut().enumerate() {
                            *o = if t < n { v } else { O::ZERO };
                        }
                    }
                }
            }
            true
        }
    }
}

/// One row of a [`Lengths`](MaskView::Lengths) mask: `o[..n] = v`, `o[n..] = +0.0`, in chunks
/// of `N` stored with [`crate::stream::store`] (the tail past the last whole chunk plainly).
#[inline]
fn stream_prefix_row<O: SelectBits, const N: usize>(o: &mut [O], n: usize, v: O)
where
    [O; N]: Chunk,
{
    let (len, n) = (o.len(), n.min(o.len()));
    let mut chunks = o.chunks_exact_mut(N);
    let (full, zero) = ([v; N], [O::ZERO; N]);
    for (k, c) in (&mut chunks).enumerate() {
        let start = k * N;
        let w = if start + N <= n {
            full
        } else if start >= n {
            zero
        } else {
            std::array::from_fn(|j| if start + j < n { v } else { O::ZERO })
        };
        // (A chunk always converts: `chunks_exact_mut(N)` gives N elements.)
        if let Ok(c) = <&mut [O; N]>::try_from(c) {
            crate::stream::store(c, w);
        }
    }
    let tail = chunks.into_remainder();
    for (t, x) in (len - tail.len()..).zip(tail) {
        *x = if t < n { v } else { O::ZERO };
    }
}

fn write_masked_elems<M: MaskBits, O: SelectBits, const N: usize>(
    values: &[f64],
    mask: &ArrayView2<'_, M>,
    out: &mut ArrayViewMut2<'_, O>,
) -> bool
where
    [O; N]: Chunk,
{
    let cols = mask.ncols();
    if cols == 0 {
        return true;
    }
    if let (Some(m), Some(o)) = (mask.as_slice(), out.as_slice_mut()) {
        // One flag per call, set by the block that saw an invalid entry (blocks run on the
        // pool under the `rayon` feature).
        let invalid = std::sync::atomic::AtomicBool::new(false);
        // Large outputs bypass the cache (see `crate::stream`); same bits either way.
        let stream = crate::stream::pays(std::mem::size_of_val(o));
        for_row_chunks(o, cols, cols, |r0, o| {
            let m = &m[r0 * cols..];
            let mut extra = M::Extra::default();
            let rows = m
                .chunks_exact(cols)
                .zip(o.chunks_exact_mut(cols))
                .zip(&values[r0..]);
            if stream {
                for ((m, o), &v) in rows {
                    extra = extra | write_row::<M, O, N, true>(m, o, O::from_f64(v));
                }
                crate::stream::fence();
            } else {
                for ((m, o), &v) in rows {
                    extra = extra | write_row::<M, O, N, false>(m, o, O::from_f64(v));
                }
            }
            if extra != M::Extra::default() {
                invalid.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        });
        return !invalid.into_inner();
    }
    let mut extra = M::Extra::default();
    for ((mrow, mut orow), &v) in mask.rows().into_iter().zip(out.rows_mut()).zip(values) {
        let v = O::from_f64(v);
        match (mrow.as_slice(), orow.as_slice_mut()) {
            (Some(m), Some(o)) => extra = extra | write_row::<M, O, N, false>(m, o, v),
            _ => orow.zip_mut_with(&mrow, |o, &m| {
                extra = extra | m.extra_bits();
                *o = if m.is_set() { v } else { O::ZERO };
            }),
        }
    }
    extra == M::Extra::default()
}

/// One row: `o[t] = if m[t] set { v } else { +0.0 }`, with the OR of the entries'
/// [extra bits](MaskBits::extra_bits) folded in (returned; nonzero iff some entry is neither 0
/// nor 1). One pass: the test costs no read of its own.
///
/// The select is a bitwise AND of `v`'s bits with an all-ones or all-zeros word made from the
/// entry (`0 − m`: 1 gives all ones, 0 gives +0.0's zero bits), in chunks of `N` tokens with
/// `N` OR lanes, so that it vectorizes as integer ops in the mask's width without a compare
/// (an `i64` compare is not in SSE2). With `STREAM` each chunk is stored with
/// [`crate::stream::store`]. An entry other than 0 and 1 writes unspecified bits; the caller
/// reports it ([`Error::MaskValue`]).
#[inline]
fn write_row<M: MaskBits, O: SelectBits, const N: usize, const STREAM: bool>(
    m: &[M],
    o: &mut [O],
    v: O,
) -> M::Extra
where
    [O; N]: Chunk,
{
    let n = m.len().min(o.len());
    let (m, o) = (&m[..n], &mut o[..n]);
    let mut lanes = [M::Extra::default(); N];
    let (mut mc, mut oc) = (m.chunks_exact(N), o.chunks_exact_mut(N));
    for (m, o) in (&mut mc).zip(&mut oc) {
        for j in 0..N {
            lanes[j] = lanes[j] | m[j].extra_bits();
        }
        if STREAM {
            let w: [O; N] = std::array::from_fn(|j| v.select(m[j].unit()));
            // (A chunk always converts: `chunks_exact_mut(N)` gives N elements.)
            if let Ok(o) = <&mut [O; N]>::try_from(o) {
                crate::stream::store(o, w);
            }
        } else {
            for j in 0..N {
                o[j] = v.select(m[j].unit());
            }
        }
    }
    let mut extra = lanes.into_iter().fold(M::Extra::default(), |a, b| a | b);
    for (m, o) in mc.remainder().iter().zip(oc.into_remainder()) {
        extra = extra | m.extra_bits();
        *o = v.select(m.unit());
    }
    extra
}

/// An output float's bitwise select (internal): `v` where `unit` is 1, +0.0 where it is 0.
pub(crate) trait SelectBits: Float {
    fn select(self, unit: u32) -> Self;
}

impl SelectBits for f32 {
    #[inline(always)]
    fn select(self, unit: u32) -> f32 {
        f32::from_bits(self.to_bits() & 0u32.wrapping_sub(unit))
    }
}

impl SelectBits for f64 {
    #[inline(always)]
    fn select(self, unit: u32) -> f64 {
        f64::from_bits(self.to_bits() & 0u64.wrapping_sub(u64::from(unit)))
    }
}
