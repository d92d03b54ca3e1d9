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
//! Outputs may be `f32` (what trainers hold in tensors) or `f64` ([`TokenFloat`]).

use ndarray::{Array2, ArrayView2, ArrayViewMut2};

use crate::error::{Error, Result};

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

/// Float types token advantages can be written as (`f32`, `f64`). Sealed.
///
/// ```
/// use beacon_rl::token::TokenFloat;
/// assert_eq!(<f32 as TokenFloat>::from_f64(0.5), 0.5f32);
/// ```
pub trait TokenFloat: Copy + sealed::Sealed + Send + Sync + 'static {
    /// Zero.
    const ZERO: Self;
    /// Rounds an `f64` to this type.
    fn from_f64(v: f64) -> Self;
}

impl TokenFloat for f32 {
    const ZERO: Self = 0.0;
    #[inline]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
}

impl TokenFloat for f64 {
    const ZERO: Self = 0.0;
    #[inline]
    fn from_f64(v: f64) -> Self {
        v
    }
}

/// Writes `step_values[r] · mask[r, j]` into `out[r, j]` (one sequence row per step).
///
/// # Errors
/// [`Error::LengthMismatch`] when `mask` has not one row per step value;
/// [`Error::OutputShape`] when `out`'s shape differs from `mask`'s.
///
/// ```
/// use beacon_rl::token::broadcast_into;
/// use ndarray::{array, Array2};
/// let mask = array![[true, true, false], [true, false, false]];
/// let mut out = Array2::<f32>::zeros((2, 3));
/// broadcast_into(&[0.5, -1.0], mask.view(), out.view_mut())?;
/// assert_eq!(out, array![[0.5, 0.5, 0.0], [-1.0, 0.0, 0.0]]);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
pub fn broadcast_into<T: TokenFloat>(
    step_values: &[f64],
    mask: ArrayView2<'_, bool>,
    mut out: ArrayViewMut2<'_, T>,
) -> Result<()> {
    if mask.nrows() != step_values.len() {
        return Err(Error::LengthMismatch {
            what: "response_mask rows",
            expected: step_values.len(),
            actual: mask.nrows(),
        });
    }
    check_out_shape(&mask, &out)?;
    for ((mut orow, mrow), &v) in out.rows_mut().into_iter().zip(mask.rows()).zip(step_values) {
        let v = T::from_f64(v);
        match (orow.as_slice_mut(), mrow.as_slice()) {
            (Some(o), Some(m)) => fill_masked(o, m, v),
            _ => orow.zip_mut_with(&mrow, |o, &m| *o = if m { v } else { T::ZERO }),
        }
    }
    Ok(())
}

/// Allocating form of [`broadcast_into`], returning an `f64` array of the mask's shape.
///
/// # Errors
/// As [`broadcast_into`].
///
/// ```
/// use beacon_rl::token::broadcast;
/// use ndarray::array;
/// let out = broadcast(&[2.0], array![[false, true]].view())?;
/// assert_eq!(out, array![[0.0, 2.0]]);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
pub fn broadcast(step_values: &[f64], mask: ArrayView2<'_, bool>) -> Result<Array2<f64>> {
    let mut out = Array2::zeros(mask.raw_dim());
    broadcast_into(step_values, mask, out.view_mut())?;
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
pub fn spans_into<T: TokenFloat>(
    step_values: &[f64],
    spans: &[TokenSpan],
    mask: ArrayView2<'_, bool>,
    mut out: ArrayViewMut2<'_, T>,
) -> Result<()> {
    check_out_shape(&mask, &out)?;
    let (rows, cols) = mask.dim();
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
    out.fill(T::ZERO);
    for s in spans {
        let v = T::from_f64(step_values[s.step]);
        let m = mask.row(s.seq);
        let m = m.slice(ndarray::s![s.start..s.end]);
        let mut o = out.row_mut(s.seq);
        let mut o = o.slice_mut(ndarray::s![s.start..s.end]);
        match (o.as_slice_mut(), m.as_slice()) {
            (Some(o), Some(m)) => fill_masked(o, m, v),
            (_, _) => o.zip_mut_with(&m, |o, &m| *o = if m { v } else { T::ZERO }),
        }
    }
    Ok(())
}

#[inline]
fn fill_masked<T: TokenFloat>(out: &mut [T], mask: &[bool], v: T) {
    for (o, &m) in out.iter_mut().zip(mask) {
        *o = if m { v } else { T::ZERO };
    }
}

fn check_out_shape<T>(mask: &ArrayView2<'_, bool>, out: &ArrayViewMut2<'_, T>) -> Result<()> {
    if mask.dim() != out.dim() {
        let (r, c) = mask.dim();
        let (or, oc) = out.dim();
        return Err(Error::OutputShape {
            what: "token advantages",
            expected: r * c,
            actual: or * oc,
        });
    }
    Ok(())
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
        let mask = array![[true; 4], [true; 4]];
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
