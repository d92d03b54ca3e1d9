//! [`FloatView`] (values read) and [`FloatViewMut`] (results written): rows × L matrices of
//! `f32` or `f64`.

use ndarray::{Array2, ArrayView2, ArrayViewMut2};

use super::elem::Float;
use super::write::overflows_f32;
use crate::error::{Error, Result};

/// A rows × L matrix of `f32` or `f64` values.
///
/// Built with `From` from an [`ArrayView2`] or a reference to an [`Array2`] of either type.
///
/// ```
/// use beacon_rl::tensor::FloatView;
/// use ndarray::Array2;
/// let a = Array2::<f64>::zeros((3, 4));
/// assert_eq!(FloatView::from(&a).dim(), (3, 4));
/// ```
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum FloatView<'a> {
    /// `f32` values (widened exactly to `f64` when read).
    F32(ArrayView2<'a, f32>),
    /// `f64` values.
    F64(ArrayView2<'a, f64>),
}

impl FloatView<'_> {
    /// (rows, L).
    ///
    /// ```
    /// # use beacon_rl::tensor::FloatView;
    /// let a = ndarray::array![[1.0f32, 2.0]];
    /// assert_eq!(FloatView::from(&a).dim(), (1, 2));
    /// ```
    pub fn dim(&self) -> (usize, usize) {
        match self {
            Self::F32(v) => v.dim(),
            Self::F64(v) => v.dim(),
        }
    }

    /// The value at (row, t) widened to `f64`, `None` out of range.
    pub fn get(&self, row: usize, t: usize) -> Option<f64> {
        match self {
            Self::F32(v) => v.get((row, t)).map(|x| f64::from(*x)),
            Self::F64(v) => v.get((row, t)).copied(),
        }
    }

    /// The same view with a shorter lifetime (views are invariant in theirs).
    pub fn reborrow(&self) -> FloatView<'_> {
        match self {
            Self::F32(v) => FloatView::F32(v.view()),
            Self::F64(v) => FloatView::F64(v.view()),
        }
    }

    /// The first non-finite value in row-major order: (row · L + t, value).
    pub(crate) fn first_non_finite(&self) -> Option<(usize, f64)> {
        fn find<T: Float>(v: &ArrayView2<'_, T>) -> Option<(usize, f64)> {
            v.iter()
                .map(|x| x.to_f64())
                .enumerate()
                .find(|(_, x)| !x.is_finite())
        }
        match self {
            Self::F32(v) => find(v),
            Self::F64(v) => find(v),
        }
    }
}

macro_rules! float_view_from {
    ($t:ty, $variant:ident) => {
        impl<'a> From<ArrayView2<'a, $t>> for FloatView<'a> {
            fn from(v: ArrayView2<'a, $t>) -> Self {
                Self::$variant(v)
            }
        }
        impl<'a> From<&'a Array2<$t>> for FloatView<'a> {
            fn from(v: &'a Array2<$t>) -> Self {
                Self::$variant(v.view())
            }
        }
        impl<'a, const N: usize> From<&'a [[$t; N]]> for FloatView<'a> {
            fn from(v: &'a [[$t; N]]) -> Self {
                Self::$variant(ArrayView2::from(v))
            }
        }
        impl<'a, const N: usize, const M: usize> From<&'a [[$t; N]; M]> for FloatView<'a> {
            fn from(v: &'a [[$t; N]; M]) -> Self {
                Self::$variant(ArrayView2::from(&v[..]))
            }
        }
        impl<'a> From<ArrayViewMut2<'a, $t>> for FloatViewMut<'a> {
            fn from(v: ArrayViewMut2<'a, $t>) -> Self {
                Self::$variant(v)
            }
        }
        impl<'a> From<&'a mut Array2<$t>> for FloatViewMut<'a> {
            fn from(v: &'a mut Array2<$t>) -> Self {
                Self::$variant(v.view_mut())
            }
        }
    };
}
float_view_from!(f32, F32);
float_view_from!(f64, F64);

/// Where `f32` or `f64` results are written (rows × L).
///
/// Built with `From` from an [`ArrayViewMut2`] or a mutable reference to an [`Array2`].
///
/// ```
/// use beacon_rl::tensor::FloatViewMut;
/// let mut a = ndarray::Array2::<f32>::zeros((2, 3));
/// assert_eq!(FloatViewMut::from(&mut a).dim(), (2, 3));
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum FloatViewMut<'a> {
    /// `f32` outputs (each value rounded once from `f64`).
    F32(ArrayViewMut2<'a, f32>),
    /// `f64` outputs.
    F64(ArrayViewMut2<'a, f64>),
}

impl FloatViewMut<'_> {
    /// (rows, L).
    ///
    /// ```
    /// # use beacon_rl::tensor::FloatViewMut;
    /// let mut a = ndarray::Array2::<f64>::zeros((1, 4));
    /// assert_eq!(FloatViewMut::from(&mut a).dim(), (1, 4));
    /// ```
    pub fn dim(&self) -> (usize, usize) {
        match self {
            Self::F32(v) => v.dim(),
            Self::F64(v) => v.dim(),
        }
    }

    /// A shorter-lived view of the same buffer, to write through it more than once.
    pub fn reborrow(&mut self) -> FloatViewMut<'_> {
        match self {
            Self::F32(v) => FloatViewMut::F32(v.view_mut()),
            Self::F64(v) => FloatViewMut::F64(v.view_mut()),
        }
    }

    /// Whether the buffer is large enough to be written with streaming stores
    /// ([`crate::stream::pays`]).
    pub(crate) fn streams(&self) -> bool {
        let (r, c) = self.dim();
        let elem = match self {
            Self::F32(_) => 4,
            Self::F64(_) => 8,
        };
        crate::stream::pays(r.saturating_mul(c).saturating_mul(elem))
    }

    /// The rows before `at` and the rest (row-parallel writers).
    pub(crate) fn split_rows(self, at: usize) -> (Self, Self) {
        match self {
            Self::F32(v) => {
                let (a, b) = v.split_at(ndarray::Axis(0), at);
                (Self::F32(a), Self::F32(b))
            }
            Self::F64(v) => {
                let (a, b) = v.split_at(ndarray::Axis(0), at);
                (Self::F64(a), Self::F64(b))
            }
        }
    }

    /// Checks that the buffer has the shape `dim`.
    pub(crate) fn check_dim(&self, what: &'static str, dim: (usize, usize)) -> Result<()> {
        let actual = self.dim();
        if actual == dim {
            Ok(())
        } else {
            Err(Error::OutputShape {
                what,
                expected: dim,
                actual,
            })
        }
    }

    /// Rounds the row-major `f64` values `src` into the buffer (same shape, checked).
    ///
    /// # Errors
    /// [`Error::NonFinite`] naming `what` when a finite value rounds to an infinite `f32` (see
    /// [`f32_overflow`](Self::f32_overflow)).
    pub(crate) fn assign_f64(&mut self, what: &'static str, src: &[f64]) -> Result<()> {
        fn put<T: Float>(v: &mut ArrayViewMut2<'_, T>, src: &[f64]) {
            match v.as_slice_mut() {
                Some(o) => {
                    for (o, &x) in o.iter_mut().zip(src) {
                        *o = T::from_f64(x);
                    }
                }
                None => {
                    for (o, &x) in v.iter_mut().zip(src) {
                        *o = T::from_f64(x);
                    }
                }
            }
        }
        match self {
            Self::F32(v) => put(v, src),
            Self::F64(v) => put(v, src),
        }
        self.f32_overflow(what, src)
    }

    /// For an `f32` buffer just written from the `f64` values `written` (per element or per
    /// row): when one of them lies past `f32::MAX` (it rounds to ∞), the first infinite
    /// element of the buffer in row-major order, as [`Error::NonFinite`] naming `what`. An
    /// `Ok` output never holds ∞ from finite values. A pass over `written` (the values, not
    /// the buffer) when none overflows; the buffer is searched on the error path only, so an
    /// overflowing value that was not written (a row without generated tokens) is no error.
    pub(crate) fn f32_overflow(&self, what: &'static str, written: &[f64]) -> Result<()> {
        if !matches!(self, Self::F32(_)) {
            return Ok(());
        }
        // One fold, no early exit, so that it vectorizes.
        if written.iter().fold(false, |any, &x| any | overflows_f32(x)) {
            self.infinite_f32(what)
        } else {
            Ok(())
        }
    }

    /// The first infinite element (row-major) of an `f32` buffer, as [`Error::NonFinite`]
    /// naming `what` (error path: a pass over the buffer).
    pub(crate) fn infinite_f32(&self, what: &'static str) -> Result<()> {
        let Self::F32(v) = self else { return Ok(()) };
        let cols = v.ncols();
        match v.indexed_iter().find(|(_, x)| x.is_infinite()) {
            Some(((r, t), &x)) => Err(Error::NonFinite {
                what,
                index: r * cols + t,
                value: f64::from(x),
            }),
            None => Ok(()),
        }
    }
}
