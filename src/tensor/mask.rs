//! [`MaskView`]: verl's `response_mask` as a `bool`, `u8` or `i64` matrix or per-row response
//! lengths.

use ndarray::{Array2, ArrayView2};

use super::elem::{MaskBits, MaskElem};
use crate::error::{Error, Result};

/// verl's `response_mask`: which tokens of each row the policy generated.
///
/// Built with `From` from an [`ArrayView2`] or a reference to an [`Array2`] of `bool`, `u8`
/// or `i64` (1 = generated, 0 = not; other values are [`Error::MaskValue`]), or directly as [`Lengths`](Self::Lengths).
///
/// ```
/// use beacon_rl::tensor::MaskView;
/// let m = MaskView::from(&[[true, false]]);
/// assert_eq!(m.dim(), (1, 2));
/// let p = MaskView::Lengths { lengths: &[1], cols: 2 }; // the same mask, as lengths
/// assert_eq!(p.dim(), (1, 2));
/// ```
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum MaskView<'a> {
    /// `bool` (true = generated).
    Bool(ArrayView2<'a, bool>),
    /// `u8` (1 = generated, 0 = not).
    U8(ArrayView2<'a, u8>),
    /// `i64`, verl's dtype (1 = generated, 0 = not).
    I64(ArrayView2<'a, i64>),
    /// A prefix mask: token t of row r is generated iff `t < lengths[r]`; `cols` is L. Every
    /// length must be ≤ `cols` (checked by the readers: [`Error::InvalidMask`]).
    Lengths {
        /// Generated tokens of each row.
        lengths: &'a [usize],
        /// Tokens per row (L).
        cols: usize,
    },
}

impl MaskView<'_> {
    /// (rows, L).
    ///
    /// ```
    /// # use beacon_rl::tensor::MaskView;
    /// assert_eq!(MaskView::Lengths { lengths: &[1, 2, 0], cols: 4 }.dim(), (3, 4));
    /// ```
    pub fn dim(&self) -> (usize, usize) {
        match self {
            Self::Bool(m) => m.dim(),
            Self::U8(m) => m.dim(),
            Self::I64(m) => m.dim(),
            Self::Lengths { lengths, cols } => (lengths.len(), *cols),
        }
    }

    /// The same view with a shorter lifetime (views are invariant in theirs).
    pub fn reborrow(&self) -> MaskView<'_> {
        match self {
            Self::Bool(m) => MaskView::Bool(m.view()),
            Self::U8(m) => MaskView::U8(m.view()),
            Self::I64(m) => MaskView::I64(m.view()),
            Self::Lengths { lengths, cols } => MaskView::Lengths { lengths, cols: *cols },
        }
    }

    /// Whether token (row, t) is generated (false out of range).
    pub(crate) fn is_set(&self, row: usize, t: usize) -> bool {
        match self {
            Self::Bool(m) => m.get((row, t)).is_some_and(|x| x.is_set()),
            Self::U8(m) => m.get((row, t)).is_some_and(|x| x.is_set()),
            Self::I64(m) => m.get((row, t)).is_some_and(|x| x.is_set()),
            Self::Lengths { lengths, cols } => t < *cols && lengths.get(row).is_some_and(|&n| t < n),
        }
    }

    /// The number of generated tokens of row `row` (0 out of range).
    #[cfg(test)]
    pub(crate) fn row_count(&self, row: usize) -> usize {
        fn count<M: MaskElem>(m: &ArrayView2<'_, M>, row: usize) -> usize {
            if row >= m.nrows() {
                return 0;
            }
            m.row(row).iter().map(|x| usize::from(x.is_set())).sum()
        }
        match self {
            Self::Bool(m) => count(m, row),
            Self::U8(m) => count(m, row),
            Self::I64(m) => count(m, row),
            Self::Lengths { lengths, cols } => lengths.get(row).map_or(0, |&n| n.min(*cols)),
        }
    }

    /// Checks the mask: every entry of a `u8` or `i64` mask is 0 or 1, every length of a
    /// [`Lengths`](Self::Lengths) mask is ≤ L. (One pass over an integer mask; the estimators
    /// and the token broadcast check as they read instead.)
    ///
    /// # Errors
    /// [`Error::MaskValue`] naming the first entry (row-major) that is neither 0 nor 1;
    /// [`Error::InvalidMask`] naming the first row whose length exceeds L.
    ///
    /// ```
    /// # use beacon_rl::tensor::MaskView;
    /// # use beacon_rl::Error;
    /// assert!(MaskView::Lengths { lengths: &[2], cols: 2 }.validate().is_ok());
    /// assert!(MaskView::Lengths { lengths: &[3], cols: 2 }.validate().is_err());
    /// assert!(MaskView::from(&[[1i64, 0]]).validate().is_ok());
    /// assert_eq!(
    ///     MaskView::from(&[[1i64, 0], [1, 2]]).validate(),
    ///     Err(Error::MaskValue { row: 1, token: 1, value: 2 })
    /// );
    /// ```
    pub fn validate(&self) -> Result<()> {
        self.validate_lengths()?;
        match self.first_invalid_value() {
            Some((row, token, value)) => Err(Error::MaskValue { row, token, value }),
            None => Ok(()),
        }
    }

    /// The entry of an integer mask that is neither 0 nor 1 (first in row-major order), as
    /// `(row, token, value)`.
    fn first_invalid_value(&self) -> Option<(usize, usize, i64)> {
        fn find<M: MaskBits>(m: &ArrayView2<'_, M>) -> Option<(usize, usize, i64)> {
            m.rows().into_iter().enumerate().find_map(|(r, row)| {
                let t = row.iter().position(|x| x.extra_bits() != M::Extra::default())?;
                Some((r, t, row[t].bits() as i64))
            })
        }
        match self {
            Self::Bool(_) | Self::Lengths { .. } => None,
            Self::U8(m) => find(m),
            Self::I64(m) => find(m),
        }
    }

    /// The error for a mask in which a kernel saw an invalid value while reading it: the
    /// first such entry, found by a second read (error path only).
    ///
    /// A kernel that reports an entry the mask does not hold is a bug in this crate: debug
    /// builds stop on it; release builds still return an error (never a panic, never `Ok`).
    pub(crate) fn value_error(&self) -> Error {
        let found = self.first_invalid_value();
        debug_assert!(
            found.is_some(),
            "a mask reader reported an invalid entry the mask does not hold"
        );
        match found {
            Some((row, token, value)) => Error::MaskValue { row, token, value },
            None => Error::Undefined("a mask reader reported an invalid entry the mask does not hold".into()),
        }
    }

    /// The [`Lengths`](Self::Lengths) half of [`validate`](Self::validate), for readers that
    /// test integer entries as they read them.
    pub(crate) fn validate_lengths(&self) -> Result<()> {
        if let Self::Lengths { lengths, cols } = self {
            if let Some(row) = lengths.iter().position(|&n| n > *cols) {
                return Err(Error::InvalidMask {
                    row,
                    length: lengths[row],
                    cols: *cols,
                });
            }
        }
        Ok(())
    }

    /// Writes the mask of row `row` as `bool`s into `out` (length L).
    pub(crate) fn row_into(&self, row: usize, out: &mut [bool]) {
        fn copy<M: MaskElem>(m: &ArrayView2<'_, M>, row: usize, out: &mut [bool]) {
            for (o, x) in out.iter_mut().zip(m.row(row)) {
                *o = x.is_set();
            }
        }
        match self {
            Self::Bool(m) => match m.row(row).to_slice() {
                Some(s) => out.copy_from_slice(s),
                None => copy(m, row, out),
            },
            Self::U8(m) => copy(m, row, out),
            Self::I64(m) => copy(m, row, out),
            Self::Lengths { lengths, .. } => {
                let n = lengths[row].min(out.len());
                out[..n].fill(true);
                out[n..].fill(false);
            }
        }
    }
}

macro_rules! mask_view_from {
    ($t:ty, $variant:ident) => {
        impl<'a> From<ArrayView2<'a, $t>> for MaskView<'a> {
            fn from(v: ArrayView2<'a, $t>) -> Self {
                Self::$variant(v)
            }
        }
        impl<'a> From<&'a Array2<$t>> for MaskView<'a> {
            fn from(v: &'a Array2<$t>) -> Self {
                Self::$variant(v.view())
            }
        }
        impl<'a, const N: usize> From<&'a [[$t; N]]> for MaskView<'a> {
            fn from(v: &'a [[$t; N]]) -> Self {
                Self::$variant(ArrayView2::from(v))
            }
        }
        impl<'a, const N: usize, const M: usize> From<&'a [[$t; N]; M]> for MaskView<'a> {
            fn from(v: &'a [[$t; N]; M]) -> Self {
                Self::$variant(ArrayView2::from(&v[..]))
            }
        }
    };
}
mask_view_from!(bool, Bool);
mask_view_from!(u8, U8);
mask_view_from!(i64, I64);
