//! Views of the tensors a trainer holds: values in `f32` or `f64`, response masks as `bool`,
//! `u8` or `i64` matrices or as per-row response lengths, and outputs in `f32` or `f64`.
//!
//! The estimators and the token broadcast read these views where they lie; nothing converts a
//! whole input first. The element type is dispatched once per call, and the kernels run over
//! the caller's element type:
//!
//! - [`FloatView`]: a rows × L matrix of `f32` or `f64` values (rewards, critic values, …).
//! - [`MaskView`]: verl's `response_mask` (1 = a generated token, 0 = not) as `bool`, `u8` or
//!   `i64`, or [`MaskView::Lengths`]: row r's first `lengths[r]` tokens are generated (a
//!   prefix mask, the common case for single-turn responses), stored as one number per row.
//! - [`FloatViewMut`]: where `f32` or `f64` results are written.
//!
//! # Integer masks hold 0 and 1
//! verl multiplies by `response_mask`, so an entry of 2 would double a token's advantage
//! there, while a reader that takes "nonzero" as generated would not: any value other than 0
//! and 1 in a `u8` or `i64` mask is [`Error::MaskValue`] (row, token, value), from every
//! estimator and every function of [`token`](crate::token). The check costs no extra pass
//! where it matters: the estimators and the token broadcast test each entry in the loop that
//! first reads it (writes its token, or converts or counts the mask), and the other token
//! functions check the mask once up front ([`MaskView::validate`]).
//!
//! # Precision contract
//! `f32` inputs are widened to `f64` exactly (every `f32` is an `f64`), the estimator computes
//! in `f64` with the same operations in the same order as for `f64` inputs, and each result
//! is rounded once to the output type. So an `f32` run gives **the `f64` path's result on the
//! same (widened) values, rounded to `f32`** — not verl's float32 path, which rounds every
//! intermediate and differs from it by up to a few float32 ulps (more after whitening).
//!
//! ```
//! use beacon_rl::tensor::{FloatView, MaskView};
//! use ndarray::array;
//!
//! let rewards = array![[0.0f32, 1.0], [0.5, 0.0]];
//! let view = FloatView::from(rewards.view());
//! assert_eq!(view.dim(), (2, 2));
//! assert_eq!(view.get(0, 1), Some(1.0));
//!
//! let mask = array![[1i64, 1], [1, 0]];
//! let mask = MaskView::from(mask.view());
//! assert!(mask.is_set(1, 0) && !mask.is_set(1, 1));
//! let prefix = MaskView::Lengths { lengths: &[2, 1], cols: 2 };
//! assert_eq!(prefix.row_count(1), 1);
//! ```

use ndarray::{Array2, ArrayView2, ArrayViewMut2};

use crate::error::{Error, Result};
use crate::stream::Chunk;

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for bool {}
    impl Sealed for u8 {}
    impl Sealed for i64 {}
}

/// A floating-point element a trainer's tensors hold (`f32`, `f64`). Sealed.
///
/// ```
/// use beacon_rl::tensor::Float;
/// assert_eq!(<f32 as Float>::from_f64(0.1), 0.1f32);
/// assert_eq!(0.5f32.to_f64(), 0.5);
/// ```
pub trait Float: Copy + PartialEq + std::fmt::Debug + sealed::Sealed + Send + Sync + 'static {
    /// Zero.
    const ZERO: Self;
    /// Rounds an `f64` to this type (round to nearest even).
    fn from_f64(v: f64) -> Self;
    /// Widens to `f64` (exact).
    fn to_f64(self) -> f64;
}

impl Float for f32 {
    const ZERO: Self = 0.0;
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
}

impl Float for f64 {
    const ZERO: Self = 0.0;
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
}

/// A mask element (`bool`, `u8`, `i64`): 1 (true) marks a generated token, 0 (false) not.
/// Other integer values are invalid (see the [module docs](self#integer-masks-hold-0-and-1)).
/// Sealed.
///
/// ```
/// use beacon_rl::tensor::MaskElem;
/// assert!(1i64.is_set() && !0u8.is_set() && true.is_set());
/// ```
pub trait MaskElem: Copy + sealed::Sealed + Send + Sync + 'static {
    /// True for a generated token (for an invalid integer value: nonzero).
    fn is_set(self) -> bool;
}

/// A mask element's bits, for the 0/1 test (internal).
pub(crate) trait MaskBits: MaskElem {
    /// The element's bits other than bit 0, in its own width (zero iff the element is 0 or
    /// 1), so that an OR over a row vectorizes without widening.
    type Extra: Copy + Default + PartialEq + std::ops::BitOr<Output = Self::Extra>;
    fn extra_bits(self) -> Self::Extra;
    /// The two's complement bits, widened (for [`unit_prefix_len`]'s sum).
    fn bits(self) -> u64;
    /// The entry's low 32 bits: 1 or 0 for a valid entry (for [`write_row`]'s select).
    fn unit(self) -> u32;
}

impl MaskBits for bool {
    #[inline(always)]
    fn unit(self) -> u32 {
        u32::from(self)
    }
    // Always 0 or 1: the test compiles away.
    type Extra = u8;
    #[inline(always)]
    fn extra_bits(self) -> u8 {
        0
    }
    #[inline(always)]
    fn bits(self) -> u64 {
        u64::from(self)
    }
}

impl MaskBits for u8 {
    #[inline(always)]
    fn unit(self) -> u32 {
        u32::from(self)
    }
    type Extra = u8;
    #[inline(always)]
    fn extra_bits(self) -> u8 {
        self & !1
    }
    #[inline(always)]
    fn bits(self) -> u64 {
        u64::from(self)
    }
}

impl MaskBits for i64 {
    #[inline(always)]
    fn unit(self) -> u32 {
        // Truncation on purpose: 0 and 1 keep their value, and other entries are reported.
        self as u32
    }
    type Extra = u64;
    #[inline(always)]
    fn extra_bits(self) -> u64 {
        self as u64 & !1
    }
    #[inline(always)]
    fn bits(self) -> u64 {
        self as u64
    }
}

/// `Some(n)` when the row is exactly n ones followed by zeros (so every entry is 0 or 1),
/// else `None` (a row with a gap, or with an invalid value). One branch-free pass that
/// vectorizes with plain SSE2 adds, and-nots and ors: the row is such a prefix iff its first
/// entry is 0 or 1 and no later entry b has a bit its predecessor a lacks (`b & !a == 0`):
/// after a 1 only 0 or 1 may follow, after a 0 only 0, so by induction every entry is 0 or 1
/// and no 1 follows a 0. Then the wrapping sum of the entries is n.
#[inline]
// Index loops on purpose: lane j of the accumulators takes token j of each chunk.
#[allow(clippy::needless_range_loop)]
pub(crate) fn unit_prefix_len<M: MaskBits>(row: &[M]) -> Option<usize> {
    const LANES: usize = 8;
    let Some((first, rest)) = row.split_first() else {
        return Some(0);
    };
    let (mut sum, mut bad) = ([0u64; LANES], [0u64; LANES]);
    // Entry t + 1 (in `rest`) against entry t (in `row`), LANES tokens at a time.
    let mut next = rest.chunks_exact(LANES);
    let mut this = row.chunks_exact(LANES);
    for (b, a) in (&mut next).zip(&mut this) {
        for j in 0..LANES {
            let (a, b) = (a[j].bits(), b[j].bits());
            sum[j] = sum[j].wrapping_add(b);
            bad[j] |= b & !a;
        }
    }
    let done = rest.len() - next.remainder().len();
    let (mut sum, mut bad) = (
        sum.iter().fold(first.bits(), |x, &y| x.wrapping_add(y)),
        bad.iter().fold(first.bits() & !1, |x, &y| x | y),
    );
    for (b, a) in next.remainder().iter().zip(&row[done..]) {
        let (a, b) = (a.bits(), b.bits());
        sum = sum.wrapping_add(b);
        bad |= b & !a;
    }
    if bad != 0 {
        return None;
    }
    usize::try_from(sum).ok()
}

impl MaskElem for bool {
    #[inline(always)]
    fn is_set(self) -> bool {
        self
    }
}

impl MaskElem for u8 {
    #[inline(always)]
    fn is_set(self) -> bool {
        self != 0
    }
}

impl MaskElem for i64 {
    #[inline(always)]
    fn is_set(self) -> bool {
        self != 0
    }
}

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
    ///
    /// ```
    /// # use beacon_rl::tensor::FloatView;
    /// let a = ndarray::array![[1.5f32]];
    /// let v = FloatView::from(&a);
    /// assert_eq!((v.get(0, 0), v.get(1, 0)), (Some(1.5), None));
    /// ```
    pub fn get(&self, row: usize, t: usize) -> Option<f64> {
        match self {
            Self::F32(v) => v.get((row, t)).map(|x| f64::from(*x)),
            Self::F64(v) => v.get((row, t)).copied(),
        }
    }

    /// The same view with a shorter lifetime (views are invariant in theirs).
    ///
    /// ```
    /// # use beacon_rl::tensor::FloatView;
    /// let a = ndarray::array![[1.0f64]];
    /// let v = FloatView::from(&a);
    /// assert_eq!(v.reborrow().dim(), (1, 1));
    /// ```
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

/// verl's `response_mask`: which tokens of each row the policy generated.
///
/// Built with `From` from an [`ArrayView2`] or a reference to an [`Array2`] of `bool`, `u8`
/// or `i64` (1 = generated, 0 = not; other values are [`Error::MaskValue`]), or directly as [`Lengths`](Self::Lengths).
///
/// ```
/// use beacon_rl::tensor::MaskView;
/// let m = MaskView::from(&[[true, false]]);
/// assert_eq!(m.dim(), (1, 2));
/// let p = MaskView::Lengths { lengths: &[1], cols: 2 };
/// assert!(p.is_set(0, 0) && !p.is_set(0, 1));
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
    ///
    /// ```
    /// # use beacon_rl::tensor::MaskView;
    /// let m = MaskView::Lengths { lengths: &[1], cols: 2 };
    /// assert_eq!(m.reborrow().dim(), (1, 2));
    /// ```
    pub fn reborrow(&self) -> MaskView<'_> {
        match self {
            Self::Bool(m) => MaskView::Bool(m.view()),
            Self::U8(m) => MaskView::U8(m.view()),
            Self::I64(m) => MaskView::I64(m.view()),
            Self::Lengths { lengths, cols } => MaskView::Lengths { lengths, cols: *cols },
        }
    }

    /// Whether token (row, t) is generated (false out of range).
    ///
    /// ```
    /// # use beacon_rl::tensor::MaskView;
    /// let m = MaskView::from(&[[0u8, 1]]);
    /// assert!(!m.is_set(0, 0) && m.is_set(0, 1) && !m.is_set(5, 0));
    /// ```
    pub fn is_set(&self, row: usize, t: usize) -> bool {
        match self {
            Self::Bool(m) => m.get((row, t)).is_some_and(|x| x.is_set()),
            Self::U8(m) => m.get((row, t)).is_some_and(|x| x.is_set()),
            Self::I64(m) => m.get((row, t)).is_some_and(|x| x.is_set()),
            Self::Lengths { lengths, cols } => t < *cols && lengths.get(row).is_some_and(|&n| t < n),
        }
    }

    /// The number of generated tokens of row `row` (0 out of range).
    ///
    /// ```
    /// # use beacon_rl::tensor::MaskView;
    /// assert_eq!(MaskView::from(&[[1i64, 0, 1]]).row_count(0), 2);
    /// ```
    pub fn row_count(&self, row: usize) -> usize {
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

    /// A shorter-lived view of the same buffer.
    ///
    /// ```
    /// # use beacon_rl::tensor::FloatViewMut;
    /// let mut a = ndarray::Array2::<f64>::zeros((1, 1));
    /// let mut v = FloatViewMut::from(&mut a);
    /// assert_eq!(v.reborrow().dim(), (1, 1));
    /// ```
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
                crate::parallel::for_row_chunks(o, cols, cols, |r0, o| {
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
        crate::parallel::for_row_chunks(o, cols, cols, |r0, o| {
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

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;
    use proptest::prelude::*;

    /// `overflows_f32` is its definition, "finite and rounds to an infinite f32", at the
    /// rounding threshold, around it, and on arbitrary bit patterns.
    #[test]
    fn overflows_f32_is_a_finite_value_rounding_to_infinity() {
        let definition = |v: f64| (v as f32).is_infinite() & v.is_finite();
        let t = 2f64.powi(128) - 2f64.powi(103);
        let edges = [
            t,
            t.next_down(),
            t.next_up(),
            f64::from(f32::MAX),
            2f64.powi(128),
            f64::MAX,
        ];
        for v in edges
            .into_iter()
            .flat_map(|v| [v, -v])
            .chain([0.0, f64::INFINITY, f64::NAN])
        {
            assert_eq!(overflows_f32(v), definition(v), "{v:e}");
        }
        assert!(overflows_f32(t) && !overflows_f32(t.next_down()));
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = f64::from_bits(x);
            assert_eq!(overflows_f32(v), definition(v), "{v:e}");
        }
    }

    /// The definition, token by token: every entry 0 or 1, and no 1 after a 0.
    fn naive_prefix_len(row: &[i64]) -> Option<usize> {
        let mut seen_zero = false;
        for &m in row {
            match m {
                0 => seen_zero = true,
                1 if !seen_zero => {}
                _ => return None,
            }
        }
        Some(row.iter().filter(|&&m| m == 1).count())
    }

    /// A prefix row of `len` tokens with `n` ones, and maybe one entry replaced: (position,
    /// value) with the position inside the row.
    fn prefix_rows() -> impl Strategy<Value = (usize, usize, Option<(usize, i64)>)> {
        (1usize..41).prop_flat_map(|len| {
            let values = prop::sample::select(vec![0i64, 1, 0, 1, 2, 255, -1, 1 << 40, i64::MIN]);
            (Just(len), 0..=len, prop::option::of((0..len, values)))
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]
        /// Prefix rows of every length up to 40 (chunks of eight and tails of every length),
        /// some with one entry replaced (a gap, a late 1, or a value that is not a mask
        /// value), in every dtype that can hold the replacement.
        #[test]
        fn unit_prefix_len_is_the_definition((len, n, hit) in prefix_rows()) {
            let mut row: Vec<i64> = (0..len).map(|t| i64::from(t < n)).collect();
            if let Some((at, value)) = hit {
                row[at] = value;
            }
            let want = naive_prefix_len(&row);
            prop_assert_eq!(unit_prefix_len(&row), want);
            if row.iter().all(|&m| (0..=255).contains(&m)) {
                let bytes: Vec<u8> = row.iter().map(|&m| m as u8).collect();
                prop_assert_eq!(unit_prefix_len(&bytes), want);
            }
            if row.iter().all(|&m| m == 0 || m == 1) {
                let flags: Vec<bool> = row.iter().map(|&m| m == 1).collect();
                prop_assert_eq!(unit_prefix_len(&flags), want);
            }
        }
    }

    #[test]
    fn every_mask_dtype_writes_the_same_tokens() {
        // Row 0 generated tokens 0 and 1, row 1 token 0 only (a prefix mask each).
        let want = array![[1.5f32, 1.5, 0.0], [-2.0, 0.0, 0.0]];
        let b = array![[true, true, false], [true, false, false]];
        let u = b.mapv(u8::from);
        let i = b.mapv(i64::from);
        let lengths = [2usize, 1];
        // Column-major storage: a strided view of the same mask.
        let col_major = b.t().as_standard_layout().into_owned();
        let masks = [
            MaskView::from(&b),
            MaskView::from(&u),
            MaskView::from(&i),
            MaskView::Lengths {
                lengths: &lengths,
                cols: 3,
            },
            MaskView::from(col_major.t()),
        ];
        for m in masks {
            let mut out = Array2::<f32>::from_elem((2, 3), f32::NAN);
            write_masked("out", &[1.5, -2.0], &m, &mut FloatViewMut::from(&mut out)).unwrap();
            assert_eq!(out, want, "{m:?}");
            assert_eq!((m.row_count(0), m.row_count(1)), (2, 1));
            let mut row = [true; 3];
            m.row_into(1, &mut row);
            assert_eq!(row, [true, false, false]);
        }
    }

    #[test]
    fn lengths_past_the_row_are_an_error() {
        let m = MaskView::Lengths {
            lengths: &[1, 4, 9],
            cols: 3,
        };
        assert_eq!(
            m.validate(),
            Err(Error::InvalidMask {
                row: 1,
                length: 4,
                cols: 3
            })
        );
    }

    #[test]
    fn value_error_names_the_first_invalid_entry() {
        // Row-major order: (0, 2) comes before (1, 0).
        let m = array![[1i64, 0, -3], [7, 1, 1]];
        assert_eq!(
            MaskView::from(&m).value_error(),
            Error::MaskValue {
                row: 0,
                token: 2,
                value: -3
            }
        );
    }

    /// A reader that claims a bad entry in a valid mask is a crate bug: debug builds stop,
    /// release builds return an error rather than panic.
    #[test]
    #[cfg_attr(debug_assertions, should_panic(expected = "does not hold"))]
    fn value_error_on_a_valid_mask_is_a_bug() {
        let m = array![[1u8, 0]];
        assert!(matches!(MaskView::from(&m).value_error(), Error::Undefined(_)));
    }

    #[test]
    fn f32_output_rounds_once() {
        // 0.1 is not an f32: the output is the nearest f32, 0.100000001490116…
        let m = array![[true]];
        let mut out = Array2::<f32>::zeros((1, 1));
        write_masked(
            "out",
            &[0.1],
            &MaskView::from(&m),
            &mut FloatViewMut::from(&mut out),
        )
        .unwrap();
        assert_eq!(out[[0, 0]], 0.1f32);
        assert_eq!(FloatView::from(&out).first_non_finite(), None);
        let bad = array![[0.0f32, f32::INFINITY]];
        assert_eq!(FloatView::from(&bad).first_non_finite(), Some((1, f64::INFINITY)));
    }
}
