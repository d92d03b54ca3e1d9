//! Step advantages → token advantages under a response mask.
//!
//! A policy-gradient loss needs one advantage per generated token. Every token of step t's
//! response gets that step's advantage, and tokens outside the response mask get 0:
//!
//! `A_tok[r, j] = A_step[r] · mask[r, j]`
//!
//! Two layouts are supported:
//! - one sequence row per step ([`broadcast_into`], [`broadcast`]): row r of the mask is
//!   the response of caller row r;
//! - several steps in one sequence row ([`spans_into`]), for trainers that keep a whole
//!   multi-turn dialogue in one sequence: each [`TokenSpan`] says which token range of which
//!   sequence row belongs to which step. Tokens in no span (prompts, observations) get 0.
//!
//! Masks may be `bool`, `u8` or `i64` matrices or per-row response lengths
//! ([`MaskView`]); outputs `f32` or `f64` ([`FloatViewMut`]), each value rounded once from the
//! `f64` step value.

use ndarray::Array2;

use ndarray::ArrayView2;

use super::{unit_prefix_len, FloatView, FloatViewMut, MaskBits, MaskView};
use crate::error::{check_finite, Error, Result};

/// Writes `step_values[r] · mask[r, j]` into `out[r, j]` (one sequence row per step), in the
/// output's dtype under any mask dtype.
///
/// # Errors
/// [`Error::LengthMismatch`] when `mask` has not one row per step value;
/// [`Error::NonFinite`] for a NaN or infinite step value;
/// [`Error::OutputShape`] when `out`'s shape differs from `mask`'s;
/// [`Error::InvalidMask`] for a response length past L; [`Error::MaskValue`] for an integer
/// mask entry other than 0 and 1 (`out` is then partly written); [`Error::NonFinite`] when a
/// value written into an `f32` buffer lies past `f32::MAX` (it would round to ∞), naming the
/// first such token (index `row * L + t`).
///
/// ```
/// use beacon_rl::tensor::broadcast_into;
/// use beacon_rl::tensor::MaskView;
/// use ndarray::{array, Array2};
/// let mask = array![[1i64, 1, 0], [1, 0, 0]];
/// let mut out = Array2::<f32>::zeros((2, 3));
/// broadcast_into(&[0.5, -1.0], &mask, &mut out)?;
/// assert_eq!(out, array![[0.5, 0.5, 0.0], [-1.0, 0.0, 0.0]]);
/// // The same from per-row response lengths.
/// let mut again = Array2::<f32>::zeros((2, 3));
/// broadcast_into(&[0.5, -1.0], MaskView::Lengths { lengths: &[2, 1], cols: 3 }, &mut again)?;
/// assert_eq!(again, out);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
pub fn broadcast_into<'m, 'o>(
    step_values: &[f64],
    mask: impl Into<MaskView<'m>>,
    out: impl Into<FloatViewMut<'o>>,
) -> Result<()> {
    let (mask, mut out) = (mask.into(), out.into());
    check_broadcast_mask(step_values, &mask)?;
    out.check_dim("token advantages", mask.dim())?;
    crate::tensor::write_masked("token advantages (overflows f32)", step_values, &mask, &mut out)
}

/// The checks of [`broadcast_into`] on its inputs: one mask row per step value, lengths ≤ L
/// (integer entries are tested for 0/1 as the rows are written), finite step values.
pub(crate) fn check_broadcast_mask(step_values: &[f64], mask: &MaskView<'_>) -> Result<()> {
    let rows = mask.dim().0;
    if rows != step_values.len() {
        return Err(Error::LengthMismatch {
            what: "response_mask rows",
            expected: step_values.len(),
            actual: rows,
        });
    }
    mask.validate_lengths()?;
    check_finite("step_values", step_values)
}

/// verl's row score, `sums[r] = Σ_t rewards[r, t]` over all L tokens (masked or not: verl's
/// `token_level_rewards.sum(-1)`), each row summed left to right in `f64` (`f32` values widened
/// exactly): the very bits of `row.iter().map(|&x| f64::from(x)).sum::<f64>()`, which is what
/// the estimators compare with the batch's terminal rewards.
///
/// A row's sum is a chain of dependent additions; 8 rows are summed side by side so that 8
/// chains are in flight (each row's order of additions unchanged), which makes the pass bound
/// by memory bandwidth instead of add latency. Under the `rayon` feature, blocks of rows run on
/// the pool.
///
/// # Errors
/// [`Error::LengthMismatch`] when `sums` has not one entry per row.
///
/// ```
/// use beacon_rl::tensor::row_sums_into;
/// use ndarray::array;
/// let rewards = array![[0.0f32, 0.5, 0.25], [0.0, 0.0, 1.0]];
/// let mut sums = [0.0; 2];
/// row_sums_into(&rewards, &mut sums)?;
/// assert_eq!(sums, [0.75, 1.0]);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
pub fn row_sums_into<'r>(rewards: impl Into<FloatView<'r>>, sums: &mut [f64]) -> Result<()> {
    let rewards = rewards.into();
    let rows = rewards.dim().0;
    if sums.len() != rows {
        return Err(Error::LengthMismatch {
            what: "row sums",
            expected: rows,
            actual: sums.len(),
        });
    }
    crate::estimator::row_sums_to(rewards, sums);
    Ok(())
}

/// Per-row response lengths of a prefix mask (each row's generated tokens are its first ones,
/// as verl's `response_mask` is): `lengths[r]` = generated tokens of row r. The lengths make a
/// [`MaskView::Lengths`], which later passes read instead of the whole mask (one `usize` per
/// row instead of L mask entries), so a trainer holding an `i64` mask reads it once per batch.
///
/// # Errors
/// [`Error::LengthMismatch`] when `lengths` has not one entry per row; [`Error::NotPrefixMask`]
/// naming the first row (and token) that is not a prefix; [`Error::InvalidMask`] for a
/// `Lengths` mask with a length past L; [`Error::MaskValue`] for an integer entry other than
/// 0 and 1.
///
/// ```
/// use beacon_rl::tensor::prefix_lengths_into;
/// use beacon_rl::Error;
/// use ndarray::array;
/// let mut lengths = [0; 2];
/// prefix_lengths_into(&array![[1i64, 1, 0], [0, 0, 0]], &mut lengths)?;
/// assert_eq!(lengths, [2, 0]);
/// assert_eq!(
///     prefix_lengths_into(&array![[1i64, 1, 0], [1, 0, 1]], &mut lengths),
///     Err(Error::NotPrefixMask { row: 1, token: 2 })
/// );
/// # Ok::<(), beacon_rl::Error>(())
/// ```
pub fn prefix_lengths_into<'m>(mask: impl Into<MaskView<'m>>, lengths: &mut [usize]) -> Result<()> {
    let mask = mask.into();
    let (rows, cols) = mask.dim();
    if lengths.len() != rows {
        return Err(Error::LengthMismatch {
            what: "response lengths",
            expected: rows,
            actual: lengths.len(),
        });
    }
    let first_bad = match mask {
        MaskView::Bool(m) => prefix_lengths(m, lengths),
        MaskView::U8(m) => prefix_lengths(m, lengths),
        MaskView::I64(m) => prefix_lengths(m, lengths),
        MaskView::Lengths { lengths: l, .. } => {
            mask.validate()?;
            lengths.copy_from_slice(l);
            None
        }
    };
    match first_bad {
        None => Ok(()),
        Some(row) => {
            // An invalid entry is named first, wherever it is.
            mask.validate()?;
            let token = mask_row_first_gap(&mask, row, cols);
            Err(Error::NotPrefixMask { row, token })
        }
    }
}

/// Lengths of every row (rows in parallel blocks under `rayon`); the first row that is not a
/// prefix, if any (its length is left unspecified).
fn prefix_lengths<M: MaskBits>(mask: ArrayView2<'_, M>, lengths: &mut [usize]) -> Option<usize> {
    let (rows, cols) = mask.dim();
    for_row_blocks(rows, cols, (mask, &mut *lengths), |(m, l)| {
        for (row, n) in m.rows().into_iter().zip(l.iter_mut()) {
            *n = match row.as_slice() {
                Some(s) => prefix_len(s),
                None => prefix_len(&row.to_vec()),
            };
        }
    });
    lengths.iter().position(|&n| n == usize::MAX)
}

/// The number of set entries if the row is a 0/1 prefix row (n ones, then zeros), else
/// `usize::MAX` (a gap, or an entry other than 0 and 1).
#[inline]
fn prefix_len<M: MaskBits>(row: &[M]) -> usize {
    unit_prefix_len(row).unwrap_or(usize::MAX)
}

/// The first set token after row `row`'s first unset one (the error's position).
fn mask_row_first_gap(mask: &MaskView<'_>, row: usize, cols: usize) -> usize {
    let mut seen_gap = false;
    for t in 0..cols {
        let set = mask.is_set(row, t);
        if seen_gap && set {
            return t;
        }
        seen_gap |= !set;
    }
    cols
}

/// Tokens per chunk below which splitting a pass over the mask costs more than it saves.
const MIN_TOKENS_PER_CHUNK: usize = 1 << 16;

/// Runs `f` on blocks of whole rows of a rows × cols matrix and a per-row slice: one block
/// without the `rayon` feature (or for small inputs), one per pool thread with it.
fn for_row_blocks<T: Sync, X: Send>(
    rows: usize,
    cols: usize,
    state: (ArrayView2<'_, T>, &mut [X]),
    f: impl Fn((ArrayView2<'_, T>, &mut [X])) + Sync,
) {
    let k = crate::parallel::chunk_count(rows.saturating_mul(cols), MIN_TOKENS_PER_CHUNK);
    if k <= 1 {
        f(state);
        return;
    }
    let mut bounds = [0; crate::parallel::MAX_CHUNKS + 1];
    let bounds = crate::parallel::balance(rows, k, |r| r, &mut bounds);
    crate::parallel::for_chunks(
        bounds,
        (0usize, state.0, state.1),
        &|(base, m, s): (usize, ArrayView2<'_, T>, &mut [X]), at, _| {
            let (m0, m1) = m.split_at(ndarray::Axis(0), at - base);
            let (s0, s1) = s.split_at_mut(at - base);
            ((base, m0, s0), (at, m1, s1))
        },
        &|_, (_, m, s)| f((m, s)),
    );
}

/// Allocating form of [`broadcast_into`], returning an `f64` array of the mask's shape.
///
/// # Errors
/// As [`broadcast_into`] (checked before allocating), and [`Error::CapacityExceeded`] when the
/// mask's rows × L (a [`MaskView::Lengths`] mask's L is the caller's claim) overflows,
/// exceeds `isize::MAX` bytes or cannot be allocated.
///
/// ```
/// use beacon_rl::tensor::broadcast;
/// use ndarray::array;
/// let out = broadcast(&[2.0], &array![[false, true]])?;
/// assert_eq!(out, array![[0.0, 2.0]]);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
pub fn broadcast<'m>(step_values: &[f64], mask: impl Into<MaskView<'m>>) -> Result<Array2<f64>> {
    let mask = mask.into();
    // The inputs first: a mask the broadcast rejects allocates nothing of its claimed size.
    check_broadcast_mask(step_values, &mask)?;
    let mut out = crate::huge_pages::zeros(mask.dim())?;
    broadcast_into(step_values, mask, FloatViewMut::F64(out.view_mut()))?;
    Ok(out)
}

/// The tokens `start..end` of sequence row `seq` are the response of step (caller row) `step`.
///
/// ```
/// use beacon_rl::tensor::TokenSpan;
/// let s = TokenSpan { seq: 0, step: 3, start: 10, end: 42 };
/// assert_eq!(s.end - s.start, 32);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct TokenSpan {
    /// Sequence row of the token arrays.
    pub seq: usize,
    /// Caller row (step) whose advantage the span receives.
    pub step: usize,
    /// First token (inclusive).
    pub start: usize,
    /// One past the last token.
    pub end: usize,
}

/// Writes step advantages into multi-step sequence rows: `out[seq, j] = step_values[step] ·
/// mask[seq, j]` for `j` in a span of `step`, and 0 for tokens in no span.
///
/// Spans must be listed in increasing `(seq, start)` order and must not overlap.
///
/// # Errors
/// [`Error::InvalidSpan`] for a span past the row's end, with `start > end`, naming a missing
/// sequence row or step, or out of order / overlapping; [`Error::NonFinite`] for a NaN or
/// infinite step value; [`Error::OutputShape`] when `out`'s
/// shape differs from `mask`'s; [`Error::MaskValue`] for an integer mask entry other than 0
/// and 1; [`Error::InvalidMask`] for a response length past L; [`Error::NonFinite`] when a
/// value written into an `f32` buffer lies past `f32::MAX` (it would round to ∞; `out` is then
/// written).
///
/// ```
/// use beacon_rl::tensor::{spans_into, TokenSpan};
/// use ndarray::{array, Array2};
/// // One dialogue row: [prompt prompt | step0 step0 | obs | step1]
/// let mask = array![[false, false, true, true, false, true]];
/// let spans = [
///     TokenSpan { seq: 0, step: 0, start: 2, end: 4 },
///     TokenSpan { seq: 0, step: 1, start: 5, end: 6 },
/// ];
/// let mut out = Array2::<f32>::zeros((1, 6));
/// spans_into(&[1.5, -0.5], &spans, mask.view(), out.view_mut())?;
/// assert_eq!(out, array![[0.0, 0.0, 1.5, 1.5, 0.0, -0.5]]);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
pub fn spans_into<'m, 'o>(
    step_values: &[f64],
    spans: &[TokenSpan],
    mask: impl Into<MaskView<'m>>,
    out: impl Into<FloatViewMut<'o>>,
) -> Result<()> {
    let (mask, mut out) = (mask.into(), out.into());
    let (rows, cols) = mask.dim();
    mask.validate()?;
    check_finite("step_values", step_values)?;
    out.check_dim("token advantages", (rows, cols))?;
    let mut prev: Option<(usize, usize)> = None;
    for (index, s) in spans.iter().enumerate() {
        let reason = if s.seq >= rows {
            Some("sequence row out of range")
        } else if s.step >= step_values.len() {
            Some("step out of range")
        } else if s.start > s.end || s.end > cols {
            Some("token range outside the row")
        } else if prev.is_some_and(|(seq, end)| (s.seq, s.start) < (seq, end)) {
            Some("spans out of (seq, start) order or overlapping")
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(Error::InvalidSpan { index, reason });
        }
        prev = Some((s.seq, s.end));
    }
    match &mut out {
        FloatViewMut::F32(o) => write_spans(step_values, spans, &mask, o),
        FloatViewMut::F64(o) => write_spans(step_values, spans, &mask, o),
    }
    out.f32_overflow("token advantages (overflows f32)", step_values)
}

fn write_spans<T: crate::tensor::Float>(
    step_values: &[f64],
    spans: &[TokenSpan],
    mask: &MaskView<'_>,
    out: &mut ndarray::ArrayViewMut2<'_, T>,
) {
    out.fill(T::ZERO);
    for s in spans {
        let v = T::from_f64(step_values[s.step]);
        let mut o = out.row_mut(s.seq);
        for t in s.start..s.end {
            if mask.is_set(s.seq, t) {
                o[t] = v;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    #[test]
    fn interior_mask_gaps_and_negative_values() {
        let mask = array![[true, false, true], [false, false, false]];
        let out = broadcast(&[-2.0, 3.0], mask.view()).unwrap();
        assert_eq!(out, array![[-2.0, 0.0, -2.0], [0.0, 0.0, 0.0]]);
    }

    #[test]
    fn non_contiguous_views_take_the_slow_path() {
        let mask = array![[true, false], [true, true]];
        let mask_t = mask.t(); // column-major view
        let mut out = Array2::<f64>::zeros((2, 2));
        broadcast_into(&[1.0, 2.0], mask_t, out.view_mut()).unwrap();
        // mask^T = [[t, t], [f, t]]
        assert_eq!(out, array![[1.0, 1.0], [0.0, 2.0]]);
    }

    #[test]
    fn shape_errors() {
        let mask = array![[true, true]];
        assert!(matches!(
            broadcast(&[1.0, 2.0], mask.view()),
            Err(Error::LengthMismatch { .. })
        ));
        let mut out = Array2::<f32>::zeros((1, 3));
        assert!(matches!(
            broadcast_into(&[1.0], mask.view(), out.view_mut()),
            Err(Error::OutputShape { .. })
        ));
    }

    #[test]
    fn prefix_rows_and_every_other_row_write_the_same_tokens() {
        // Rows: a 0/1 prefix (two fills), a gap (select), all generated, none; i64 and u8
        // masks, f32 and f64 outputs.
        let m = array![[1i64, 1, 0, 0], [1, 0, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]];
        let v = [1.0, 2.0, 3.0, 4.0];
        let want = array![
            [1.0, 1.0, 0.0, 0.0],
            [2.0, 0.0, 2.0, 0.0],
            [3.0, 3.0, 3.0, 3.0],
            [0.0, 0.0, 0.0, 0.0]
        ];
        let mut out = Array2::<f64>::from_elem((4, 4), f64::NAN);
        broadcast_into(&v, &m, &mut out).unwrap();
        assert_eq!(out, want);
        let mut out32 = Array2::<f32>::from_elem((4, 4), f32::NAN);
        broadcast_into(&v, &m.mapv(|x| x as u8), &mut out32).unwrap();
        assert_eq!(out32, want.mapv(|x| x as f32));
        assert_eq!(unit_prefix_len(&[1i64, 1, 0]), Some(2));
        assert_eq!(unit_prefix_len(&[0i64, 0]), Some(0));
        // Sum 1 but not [1, 0]: rejected by the 0/1 test.
        assert_eq!(unit_prefix_len(&[3i64, -2]), None);
        assert_eq!(unit_prefix_len(&[0u8, 1]), None);
        let mut lengths = [0; 4];
        assert_eq!(
            prefix_lengths_into(&m, &mut lengths),
            Err(Error::NotPrefixMask { row: 1, token: 2 })
        );
        // Entries other than 0 and 1 are an error, not "nonzero = generated": a row whose
        // wrapping sum (2 − 1 = 1) passes for a prefix length is caught by the 0/1 test.
        let mut bad = m.clone();
        bad.row_mut(3).assign(&array![2, -1, 0, 0]);
        let want = Error::MaskValue {
            row: 3,
            token: 0,
            value: 2,
        };
        assert_eq!(broadcast_into(&v, &bad, &mut out), Err(want.clone()));
        assert_eq!(prefix_lengths_into(&bad, &mut lengths), Err(want));
    }

    #[test]
    fn row_sums_keep_each_rows_left_to_right_bits() {
        // 11 rows (one block of 8 and a remainder of 3): [B, x, −B, x] with B = 1e20f32 and
        // x = 0.1f32 · (r + 1). Left to right: B + x rounds to B (x is far below B's ulp of
        // 2^14), B − B = 0, 0 + x = x. A pairwise order ((B + x) + (−B + x)) gives 0 instead.
        let rows = 11;
        let m = Array2::from_shape_fn((rows, 4), |(r, t)| match t {
            0 => 1e20f32,
            2 => -1e20,
            _ => 0.1 * (r + 1) as f32,
        });
        let mut sums = vec![f64::NAN; rows];
        row_sums_into(&m, &mut sums).unwrap();
        for (r, &s) in sums.iter().enumerate() {
            let x = f64::from(0.1f32 * (r + 1) as f32);
            assert_eq!(s.to_bits(), x.to_bits(), "row {r}");
        }
        // A strided (column-major) view and f64 input give the same sums.
        let t = m.t().as_standard_layout().into_owned();
        let mut strided = vec![0.0; rows];
        row_sums_into(t.t(), &mut strided).unwrap();
        assert_eq!(strided, sums);
        let mut wide = vec![0.0; rows];
        row_sums_into(&m.mapv(f64::from), &mut wide).unwrap();
        assert_eq!(wide, sums);
        assert!(matches!(
            row_sums_into(&m, &mut [0.0; 3]),
            Err(Error::LengthMismatch { .. })
        ));
        // Rows of 21 tokens (chunks of eight and a tail) of wildly different magnitudes, so
        // that any other order of additions changes bits: each row's sum is the bits of the
        // plain left-to-right `Iterator::sum` over the widened values.
        let mut rng = crate::estimator::SplitMix64::new(3);
        let wide = Array2::from_shape_fn((19, 21), |_| {
            let scale = 10f64.powi((rng.next_u64() % 24) as i32 - 8);
            ((rng.next_f64() - 0.5) * scale) as f32
        });
        let mut got = vec![f64::NAN; 19];
        row_sums_into(&wide, &mut got).unwrap();
        for (r, row) in wide.rows().into_iter().enumerate() {
            let want: f64 = row.iter().map(|&x| f64::from(x)).sum();
            assert_eq!(got[r].to_bits(), want.to_bits(), "row {r}");
        }
    }

    #[test]
    fn prefix_lengths_of_every_mask_form() {
        let b = array![[true, true, false], [false, false, false], [true, true, true]];
        let mut lengths = [9; 3];
        for m in [
            MaskView::from(&b),
            MaskView::from(&b.mapv(u8::from)),
            MaskView::from(b.t().t()),
        ] {
            prefix_lengths_into(m, &mut lengths).unwrap();
            assert_eq!(lengths, [2, 0, 3]);
        }
        // Not a prefix: row 1 = [f, t, f] sets token 1 after the gap at 0.
        let gap = array![[1i64, 0, 0], [0, 1, 0]];
        assert_eq!(
            prefix_lengths_into(&gap, &mut [0; 2]),
            Err(Error::NotPrefixMask { row: 1, token: 1 })
        );
        // An entry other than 0 and 1 is named as such, before any prefix test.
        let seven = array![[1i64, 0, 0], [0, 7, 0]];
        assert_eq!(
            prefix_lengths_into(&seven, &mut [0; 2]),
            Err(Error::MaskValue {
                row: 1,
                token: 1,
                value: 7
            })
        );
        let l = MaskView::Lengths {
            lengths: &[1, 3],
            cols: 3,
        };
        let mut two = [0; 2];
        prefix_lengths_into(l, &mut two).unwrap();
        assert_eq!(two, [1, 3]);
        let bad = MaskView::Lengths {
            lengths: &[4, 0],
            cols: 3,
        };
        assert!(matches!(
            prefix_lengths_into(bad, &mut two),
            Err(Error::InvalidMask { row: 0, .. })
        ));
        assert!(matches!(
            prefix_lengths_into(&gap, &mut [0; 5]),
            Err(Error::LengthMismatch { .. })
        ));
    }

    #[test]
    fn span_validation() {
        let mask: Array2<bool> = array![[true; 4], [true; 4]];
        let mut out = Array2::<f64>::zeros((2, 4));
        let sp = |seq, step, start, end| TokenSpan {
            seq,
            step,
            start,
            end,
        };
        let bad: [(&[TokenSpan], usize); 5] = [
            (&[sp(2, 0, 0, 1)], 0),
            (&[sp(0, 5, 0, 1)], 0),
            (&[sp(0, 0, 3, 5)], 0),
            (&[sp(0, 0, 0, 2), sp(0, 1, 1, 3)], 1),
            (&[sp(1, 0, 0, 2), sp(0, 1, 0, 1)], 1),
        ];
        for (spans, idx) in bad {
            match spans_into(&[1.0, 2.0], spans, mask.view(), out.view_mut()) {
                Err(Error::InvalidSpan { index, .. }) => assert_eq!(index, idx),
                other => panic!("{spans:?}: {other:?}"),
            }
        }
        // Adjacent spans are fine; uncovered tokens are zeroed even if out held data.
        out.fill(9.0);
        spans_into(
            &[1.0, 2.0],
            &[sp(0, 0, 0, 2), sp(0, 1, 2, 3)],
            mask.view(),
            out.view_mut(),
        )
        .unwrap();
        assert_eq!(out, array![[1.0, 1.0, 2.0, 0.0], [0.0; 4]]);
    }
}
