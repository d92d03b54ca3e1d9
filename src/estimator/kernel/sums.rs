//! Sums and counts over token rows, with their SIMD: verl's row scores (the sum of a row's
//! `token_level_rewards`, each row left to right, eight rows in flight, SSE2 for `f32`), the
//! generated tokens per row and per class t mod [`SUM_LANES`] (the partial sums of batch
//! whitening), and the branch-free finiteness test.

use ndarray::ArrayView2;

use crate::error::{check_finite, Result};
use crate::parallel::for_row_chunks;
use crate::tensor::{FloatView, MaskBits, MaskView};

/// Partial sums per row in batch whitening's masked sums: partial j adds the tokens
/// t ≡ j (mod `SUM_LANES`) (see `whiten.rs`).
pub(crate) const SUM_LANES: usize = 8;

/// The number of generated tokens of every row, into `counts`. Integer entries are tested for
/// 0/1 as they are counted ([`lane_counts`]), so that a bad entry is reported before any
/// error the counts lead to.
///
/// # Errors
/// [`Error::MaskValue`] for the first integer entry (row-major) other than 0 and 1.
pub(crate) fn masked_counts(mask: &MaskView<'_>, counts: &mut Vec<usize>) -> Result<()> {
    fn count<M: MaskBits>(m: &ArrayView2<'_, M>, counts: &mut Vec<usize>) -> bool {
        let mut seen = 0u64;
        let cols = m.ncols();
        // Wrapping: an invalid entry's bits may overflow (its sum is never used).
        let total = |c: [u64; SUM_LANES]| c.iter().fold(0u64, |a, &x| a.wrapping_add(x)) as usize;
        match m.as_slice() {
            Some(s) if cols > 0 => {
                counts.extend(s.chunks_exact(cols).map(|row| total(lane_counts(row, &mut seen))))
            }
            _ => counts.extend(m.rows().into_iter().map(|row| match row.as_slice() {
                Some(s) => total(lane_counts(s, &mut seen)),
                None => total(lane_counts_strided(row.iter(), &mut seen)),
            })),
        }
        seen & !1 == 0
    }
    counts.clear();
    // `bool` through the same counting: its bits are 0 or 1, so it always passes the test.
    let valid = match mask {
        MaskView::Bool(m) => count(m, counts),
        MaskView::U8(m) => count(m, counts),
        MaskView::I64(m) => count(m, counts),
        MaskView::Lengths { lengths, cols } => {
            counts.extend(lengths.iter().map(|&n| n.min(*cols)));
            true
        }
    };
    if valid {
        Ok(())
    } else {
        Err(mask.value_error())
    }
}

/// Per class t mod [`SUM_LANES`], the sum of one contiguous integer mask row's entries (their
/// bits, wrapping), with the OR of those bits folded into `seen`: the row holds only 0 and 1
/// iff `seen` has no bit but bit 0, and then the sums are the counts of generated tokens.
/// One add and one OR per entry, in lanes of [`SUM_LANES`] (branch-free and vectorizable;
/// no 64-bit compare `!= 0`, which SSE2 lacks for an `i64`). A row with an invalid entry
/// gives sums that are never used (the caller reports [`Error::MaskValue`]).
#[inline(always)]
fn lane_counts<M: MaskBits>(row: &[M], seen: &mut u64) -> [u64; SUM_LANES] {
    let mut c = [0u64; SUM_LANES];
    let mut e = [0u64; SUM_LANES];
    let mut chunks = row.chunks_exact(SUM_LANES);
    for ch in &mut chunks {
        for j in 0..SUM_LANES {
            let b = ch[j].bits();
            c[j] = c[j].wrapping_add(b);
            e[j] |= b;
        }
    }
    for (j, x) in chunks.remainder().iter().enumerate() {
        let b = x.bits();
        c[j] = c[j].wrapping_add(b);
        e[j] |= b;
    }
    *seen |= e.iter().fold(0, |a, &x| a | x);
    c
}

/// [`lane_counts`] of a row that is not contiguous.
fn lane_counts_strided<'x, M: MaskBits + 'x>(
    row: impl Iterator<Item = &'x M>,
    seen: &mut u64,
) -> [u64; SUM_LANES] {
    let mut c = [0u64; SUM_LANES];
    for (t, x) in row.enumerate() {
        let b = x.bits();
        c[t % SUM_LANES] = c[t % SUM_LANES].wrapping_add(b);
        *seen |= b;
    }
    c
}

/// True when every value is finite. Branch-free and vectorizable: a value is NaN or ±inf
/// iff its exponent bits are all ones, and adding one to an all-ones exponent carries into
/// the sign bit, so OR-ing `(bits & EXP) + ONE` over the values sets bit 63 iff some value
/// is not finite.
pub(crate) fn all_finite(values: &[f64]) -> bool {
    const EXP: u64 = 0x7ff0_0000_0000_0000;
    const ONE: u64 = 0x0010_0000_0000_0000;
    let mut acc = [0u64; 8];
    let mut chunks = values.chunks_exact(8);
    for c in &mut chunks {
        for (a, x) in acc.iter_mut().zip(c) {
            *a |= (x.to_bits() & EXP) + ONE;
        }
    }
    let tail = chunks
        .remainder()
        .iter()
        .fold(0u64, |a, x| a | ((x.to_bits() & EXP) + ONE));
    (acc.iter().fold(tail, |a, &x| a | x) >> 63) == 0
}

/// [`check_finite`] with a fast all-finite pass first: the first offender is only searched
/// for on the error path.
pub(crate) fn check_all_finite(what: &'static str, values: &[f64]) -> Result<()> {
    if all_finite(values) {
        Ok(())
    } else {
        check_finite(what, values)
    }
}

/// verl's row score: the sum of `token_level_rewards` over all L positions (not masked),
/// each row summed left to right exactly as `row.iter().sum::<f64>()` does over the values
/// widened to `f64` (exact for `f32`), into `out`.
///
/// A row's sum is a chain of dependent additions (latency-bound); summing 8 rows at once
/// keeps 8 independent chains in flight without changing any row's order of additions.
pub(crate) fn row_sums(rewards: FloatView<'_>, out: &mut Vec<f64>) {
    out.clear();
    out.resize(rewards.dim().0, 0.0);
    row_sums_to(rewards, out);
}

/// [`row_sums`] into a slice of one entry per row (the public `token::row_sums_into` and the
/// estimators share this one implementation).
pub(crate) fn row_sums_to(rewards: FloatView<'_>, out: &mut [f64]) {
    match rewards {
        FloatView::F32(r) => row_sums_typed(r, out, lead_f32),
        FloatView::F64(r) => row_sums_typed(r, out, lead_chunks::<f64>),
    }
}

/// Rows summed at once: independent chains of additions in flight.
const SUM_ROWS: usize = 8;

/// Advances the sums of [`SUM_ROWS`] rows over their first tokens, each row's additions in
/// its own order, and returns how many tokens it added (the rest are added one by one).
type Lead<R> = fn(&[&[R]; SUM_ROWS], &mut [f64; SUM_ROWS]) -> usize;

/// [`row_sums_to`] for one element type: blocks of [`SUM_ROWS`] rows through `lead`, then
/// their remaining tokens, then the rows after the last whole block, each left to right.
fn row_sums_typed<R: crate::tensor::Float>(rewards: ArrayView2<'_, R>, out: &mut [f64], lead: Lead<R>) {
    let cols = rewards.ncols();
    // The start value of `Iterator::sum` for f64 (-0.0 in current std), so that every row
    // (including an empty one) gets the very bits `iter().sum()` gives.
    let start: f64 = std::iter::empty::<f64>().sum();
    if cols == 0 {
        out.fill(start);
        return;
    }
    let Some(data) = rewards.as_slice() else {
        for (s, row) in out.iter_mut().zip(rewards.rows()) {
            *s = row.iter().map(|x| x.to_f64()).sum();
        }
        return;
    };
    for_row_chunks(out, 1, cols, |r0, out| {
        let data = &data[r0 * cols..(r0 + out.len()) * cols];
        let mut blocks = data.chunks_exact(SUM_ROWS * cols);
        let mut sums = out.chunks_exact_mut(SUM_ROWS);
        for (block, sums) in (&mut blocks).zip(&mut sums) {
            let lane: [&[R]; SUM_ROWS] = std::array::from_fn(|k| &block[k * cols..(k + 1) * cols]);
            let mut acc = [start; SUM_ROWS];
            for t in lead(&lane, &mut acc)..cols {
                for (acc, lane) in acc.iter_mut().zip(&lane) {
                    *acc += lane[t].to_f64();
                }
            }
            sums.copy_from_slice(&acc);
        }
        for (row, s) in blocks.remainder().chunks_exact(cols).zip(sums.into_remainder()) {
            *s = row.iter().fold(start, |a, x| a + x.to_f64());
        }
    });
}

/// The scalar [`Lead`]: eight tokens of each row loaded as one chunk, then added token by
/// token (one token of eight rows at a time was eight scalar loads per step; this reaches
/// the speed of a plain read of the rewards at C).
// Index loops on purpose: j walks 8 rows in lockstep (one column at a time).
#[allow(clippy::needless_range_loop)]
fn lead_chunks<R: crate::tensor::Float>(lane: &[&[R]; SUM_ROWS], acc: &mut [f64; SUM_ROWS]) -> usize {
    const CHUNK: usize = 8;
    let cols = lane[0].len();
    let whole = cols - cols % CHUNK;
    for t in (0..whole).step_by(CHUNK) {
        let x: [&[R]; SUM_ROWS] = std::array::from_fn(|k| &lane[k][t..t + CHUNK]);
        for j in 0..CHUNK {
            for k in 0..SUM_ROWS {
                acc[k] += x[k][j].to_f64();
            }
        }
    }
    whole
}

/// The [`Lead`] for `f32` rewards (verl's dtype) with SSE2's two-lane `f64` additions: lane
/// 0 of a register carries one row's chain, lane 1 the next row's, so each addition
/// instruction advances two rows by one token, in each row's own order (the same bits as the
/// scalar chains; SSE2 is part of x86-64 and has no fused or reassociated additions). Four
/// tokens of a row pair are loaded at once, interleaved (`unpack`) and widened two at a time
/// (`cvtps2pd`): half the additions and conversions of the scalar loop, which at B is bound
/// by them rather than by reading the rewards.
///
/// Four tokens of all eight rows that are all ±0.0 are skipped: verl places a response's
/// reward on its last token, so most of a row is zeros. Adding ±0.0 leaves a sum unchanged
/// unless the sum is -0.0 (then +0.0 makes it +0.0), and a sum of `f64`s is -0.0 only while
/// every value added so far was -0.0 (an exact zero from nonzero values is +0.0, and an
/// addition near zero is exact). So the first four tokens are always added, and the skip
/// runs only when none of the eight sums is -0.0 after them. After [`DENSE_RUN`] chunks in
/// a row that hold a nonzero, the rest of the block is added without the test.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code, unused_unsafe)]
fn lead_f32(lane: &[&[f32]; SUM_ROWS], acc: &mut [f64; SUM_ROWS]) -> usize {
    use std::arch::x86_64::{
        __m128, __m128d, _mm_add_pd, _mm_castps_si128, _mm_cmpeq_epi32, _mm_cvtps_pd, _mm_loadu_pd,
        _mm_loadu_ps, _mm_movehl_ps, _mm_movemask_epi8, _mm_or_ps, _mm_setzero_si128, _mm_slli_epi32,
        _mm_storeu_pd, _mm_unpackhi_ps, _mm_unpacklo_ps,
    };
    let cols = lane[0].len();
    let whole = cols - cols % 4;
    if whole == 0 {
        return 0;
    }
    // SAFETY (every `unsafe` below): SSE2 is part of x86-64, and the loads and stores touch
    // 16 bytes inside the slices named (4 f32 of a row, 2 f64 of `acc`).
    let load = |t: usize| -> [__m128; SUM_ROWS] {
        std::array::from_fn(|k| unsafe { _mm_loadu_ps(lane[k][t..t + 4].as_ptr()) })
    };
    // Token-major, so that the four pairs' chains are in flight together.
    let add = |sums: &mut [__m128d; SUM_ROWS / 2], x: &[__m128; SUM_ROWS]| {
        for (p, sum) in sums.iter_mut().enumerate() {
            unsafe {
                let lo = _mm_unpacklo_ps(x[2 * p], x[2 * p + 1]); // a0 b0 a1 b1
                let hi = _mm_unpackhi_ps(x[2 * p], x[2 * p + 1]); // a2 b2 a3 b3
                *sum = _mm_add_pd(*sum, _mm_cvtps_pd(lo));
                *sum = _mm_add_pd(*sum, _mm_cvtps_pd(_mm_movehl_ps(lo, lo)));
                *sum = _mm_add_pd(*sum, _mm_cvtps_pd(hi));
                *sum = _mm_add_pd(*sum, _mm_cvtps_pd(_mm_movehl_ps(hi, hi)));
            }
        }
    };
    // Every one of the 32 values is ±0.0: no bit set but the sign bits.
    let all_zero = |x: &[__m128; SUM_ROWS]| unsafe {
        let any = x[1..].iter().fold(x[0], |a, &v| _mm_or_ps(a, v));
        let magnitude = _mm_slli_epi32::<1>(_mm_castps_si128(any));
        _mm_movemask_epi8(_mm_cmpeq_epi32(magnitude, _mm_setzero_si128())) == 0xffff
    };
    let mut sums: [_; SUM_ROWS / 2] = std::array::from_fn(|p| unsafe { _mm_loadu_pd(acc[2 * p..].as_ptr()) });
    add(&mut sums, &load(0));
    let store = |sums: &[__m128d; SUM_ROWS / 2], acc: &mut [f64; SUM_ROWS]| {
        for (pair, sum) in acc.chunks_exact_mut(2).zip(sums) {
            unsafe { _mm_storeu_pd(pair.as_mut_ptr(), *sum) };
        }
    };
    store(&sums, acc);
    // Chunks left to test for zeros: none while a sum is -0.0 (see above); dense rows (a KL
    // penalty on every token) run out after a few chunks in a row that hold a nonzero, so that
    // they pay for the test only a few times per block.
    let mut tests = if acc.iter().all(|s| s.to_bits() != (-0.0f64).to_bits()) {
        DENSE_RUN
    } else {
        0
    };
    for t in (4..whole).step_by(4) {
        let x = load(t);
        if tests > 0 && all_zero(&x) {
            tests = DENSE_RUN;
        } else {
            tests = tests.saturating_sub(1);
            add(&mut sums, &x);
        }
    }
    store(&sums, acc);
    whole
}

/// Chunks in a row holding a nonzero after which [`lead_f32`] stops looking for zeros.
#[cfg(target_arch = "x86_64")]
const DENSE_RUN: u32 = 4;

/// The scalar chains where there is no SSE2.
#[cfg(not(target_arch = "x86_64"))]
fn lead_f32(lane: &[&[f32]; SUM_ROWS], acc: &mut [f64; SUM_ROWS]) -> usize {
    lead_chunks(lane, acc)
}

/// Per row, how many generated tokens fall in each class t mod [`SUM_LANES`] (the partial
/// sums of `whiten::row_sum`): `counts[r · SUM_LANES + j]`. Integer
/// entries are tested for 0/1 as they are counted ([`lane_counts`]), so that a bad entry is
/// reported before any error the counts lead to (e.g. whitening's "fewer than two tokens").
///
/// # Errors
/// [`Error::MaskValue`] for the first integer entry (row-major) other than 0 and 1.
pub(crate) fn masked_class_counts(mask: &MaskView<'_>, counts: &mut Vec<usize>) -> Result<()> {
    fn count<M: MaskBits>(m: &ArrayView2<'_, M>, counts: &mut [usize]) -> bool {
        let mut seen = 0u64;
        for (row, out) in m.rows().into_iter().zip(counts.chunks_exact_mut(SUM_LANES)) {
            let lanes = match row.as_slice() {
                Some(s) => lane_counts(s, &mut seen),
                None => lane_counts_strided(row.iter(), &mut seen),
            };
            for (o, c) in out.iter_mut().zip(lanes) {
                *o = c as usize;
            }
        }
        seen & !1 == 0
    }
    let rows = mask.dim().0;
    counts.clear();
    counts.resize(rows * SUM_LANES, 0);
    // `bool` through the same counting: its bits are 0 or 1, so it always passes the test.
    let valid = match mask {
        MaskView::Bool(m) => count(m, counts),
        MaskView::U8(m) => count(m, counts),
        MaskView::I64(m) => count(m, counts),
        MaskView::Lengths { lengths, cols } => {
            for (&n, out) in lengths.iter().zip(counts.chunks_exact_mut(SUM_LANES)) {
                let n = n.min(*cols);
                for (j, c) in out.iter_mut().enumerate() {
                    *c = n / SUM_LANES + usize::from(j < n % SUM_LANES);
                }
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
