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

use crate::error::{Error, Result};
use crate::tensor::{FloatViewMut, MaskView};

/// Writes `step_values[r] · mask[r, j]` into `out[r, j]` (one sequence row per step), in the
/// output's dtype under any mask dtype.
///
/// # Errors
/// [`Error::LengthMismatch`] when `mask` has not one row per step value;
/// [`Error::OutputShape`] when `out`'s shape differs from `mask`'s;
/// [`Error::InvalidMask`] for a response length past L.
///
/// ```
/// use beacon_rl::token::broadcast_into;
/// use beacon_rl::MaskView;
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
    let (mask, out) = (mask.into(), out.into());
    let (rows, cols) = mask.dim();
    if rows != step_values.len() {
        return Err(Error::LengthMismatch {
            what: "response_mask rows",
            expected: step_values.len(),
            actual: rows,
        });
    }
    mask.validate()?;
    out.check_dim("token advantages", (rows, cols))?;
    write_rows(step_values, mask, out);
    Ok(())
}

/// Tokens per chunk below which splitting the broadcast costs more than it saves.
const MIN_TOKENS_PER_CHUNK: usize = 1 << 16;

/// `write_masked` over all rows; under the `rayon` feature, contiguous blocks of rows on the
/// pool. Every token is written from its own row's value alone, so any split gives the same
/// bits.
pub(crate) fn write_rows(values: &[f64], mask: MaskView<'_>, mut out: FloatViewMut<'_>) {
    let (rows, cols) = mask.dim();
    let k = crate::parallel::chunk_count(rows.saturating_mul(cols), MIN_TOKENS_PER_CHUNK);
    if k <= 1 {
        crate::tensor::write_masked(values, &mask, &mut out);
        return;
    }
    let mut bounds = [0; crate::parallel::MAX_CHUNKS + 1];
    let bounds = crate::parallel::balance(rows, k, |r| r, &mut bounds);
    crate::parallel::for_chunks(
        bounds,
        (0usize, values, mask, out),
        &|(base, v, m, o): (usize, &[f64], MaskView<'_>, FloatViewMut<'_>), at, _| {
            let local = at - base;
            let (v0, v1) = v.split_at(local);
            let (m0, m1) = split_mask(m, local);
            let (o0, o1) = split_out(o, local);
            ((base, v0, m0, o0), (at, v1, m1, o1))
        },
        &|_, (_, v, m, mut o)| crate::tensor::write_masked(v, &m, &mut o),
    );
}

/// The mask's rows `..at` and `at..`.
fn split_mask(mask: MaskView<'_>, at: usize) -> (MaskView<'_>, MaskView<'_>) {
    use ndarray::Axis;
    match mask {
        MaskView::Bool(m) => {
            let (a, b) = m.split_at(Axis(0), at);
            (MaskView::Bool(a), MaskView::Bool(b))
        }
        MaskView::U8(m) => {
            let (a, b) = m.split_at(Axis(0), at);
            (MaskView::U8(a), MaskView::U8(b))
        }
        MaskView::I64(m) => {
            let (a, b) = m.split_at(Axis(0), at);
            (MaskView::I64(a), MaskView::I64(b))
        }
        MaskView::Lengths { lengths, cols } => {
            let (a, b) = lengths.split_at(at);
            (
                MaskView::Lengths { lengths: a, cols },
                MaskView::Lengths { lengths: b, cols },
            )
        }
    }
}

/// The output's rows `..at` and `at..`.
fn split_out(out: FloatViewMut<'_>, at: usize) -> (FloatViewMut<'_>, FloatViewMut<'_>) {
    use ndarray::Axis;
    match out {
        FloatViewMut::F32(o) => {
            let (a, b) = o.split_at(Axis(0), at);
            (FloatViewMut::F32(a), FloatViewMut::F32(b))
        }
        FloatViewMut::F64(o) => {
            let (a, b) = o.split_at(Axis(0), at);
            (FloatViewMut::F64(a), FloatViewMut::F64(b))
        }
    }
}

/// Allocating form of [`broadcast_into`], returning an `f64` array of the mask's shape.
///
/// # Errors
/// As [`broadcast_into`].
///
/// ```
/// use beacon_rl::token::broadcast;
/// use ndarray::array;
/// let out = broadcast(&[2.0], &array![[false, true]])?;
/// assert_eq!(out, array![[0.0, 2.0]]);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
pub fn broadcast<'m>(step_values: &[f64], mask: impl Into<MaskView<'m>>) -> Result<Array2<f64>> {
    let mask = mask.into();
    let mut out = Array2::zeros(mask.dim());
    broadcast_into(step_values, mask, FloatViewMut::F64(out.view_mut()))?;
    Ok(out)
}

/// The tokens `start..end` of sequence row `seq` are the response of step (caller row) `step`.
///
/// ```
/// use beacon_rl::token::TokenSpan;
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
/// sequence row or step, or out of order / overlapping; [`Error::OutputShape`] when `out`'s
/// shape differs from `mask`'s.
///
/// ```
/// use beacon_rl::token::{spans_into, TokenSpan};
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
    Ok(())
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
