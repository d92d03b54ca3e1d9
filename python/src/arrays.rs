//! The caller's numeric arrays borrowed as the views the adapter reads, in the dtype the
//! caller holds: `f32`/`f64` values, `bool`/`uint8`/`int64` masks read in place, `int32` and
//! float masks converted once into bytes checked to be 0 or 1 (`mask`), and the outputs
//! borrowed writeable. Each reader checks the layout first (`checks`) and names the argument
//! in its error; a borrow that clashes with another of the call's arrays is a `ValueError`.

use ndarray::{Dimension, Ix1, Ix2};
use numpy::{
    PyArray, PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray, PyReadonlyArray1, PyReadonlyArray2,
    PyReadwriteArray2, PyUntypedArray, PyUntypedArrayMethods,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::adapter::{Floats1, Mask1};
use crate::checks::{check_distinct_elements, checked, type_error};
use crate::mask;
use beacon_rl::tensor::{FloatView, FloatViewMut, MaskView};

/// What [`M2::read`] accepts, for its `TypeError`.
const MASK_DTYPES: &str = "a 2-D bool, uint8, int32, int64, float16, float32 or float64 array";

/// `read(what, obj)` for an argument the caller may leave out (`None`).
pub(crate) fn optional<'py, T>(
    what: &str,
    obj: Option<&Bound<'py, PyAny>>,
    read: impl FnOnce(&str, &Bound<'py, PyAny>) -> PyResult<T>,
) -> PyResult<Option<T>> {
    obj.map(|o| read(what, o)).transpose()
}

pub(crate) fn borrow_err(what: &str) -> impl Fn(numpy::BorrowError) -> PyErr + '_ {
    move |_| PyValueError::new_err(format!("{what}: the same memory as an output"))
}

/// Floats in the caller's dtype (`float32` or `float64`), read in place: a rows × L matrix
/// ([`F2`]) or one value per row ([`F1`]).
pub(crate) enum FloatArray<'py, D: Dimension> {
    F32(PyReadonlyArray<'py, f32, D>),
    F64(PyReadonlyArray<'py, f64, D>),
}

pub(crate) type F2<'py> = FloatArray<'py, Ix2>;
pub(crate) type F1<'py> = FloatArray<'py, Ix1>;

impl<'py, D: Dimension> FloatArray<'py, D> {
    pub(crate) fn read(what: &str, obj: &Bound<'py, PyAny>) -> PyResult<Self> {
        let obj = checked(what, obj)?;
        if let Ok(a) = obj.cast::<PyArray<f64, D>>() {
            Ok(FloatArray::F64(a.try_readonly().map_err(borrow_err(what))?))
        } else if let Ok(a) = obj.cast::<PyArray<f32, D>>() {
            Ok(FloatArray::F32(a.try_readonly().map_err(borrow_err(what))?))
        } else {
            let ndim = D::NDIM.unwrap_or_default();
            Err(type_error(
                what,
                &format!("a {ndim}-D float32 or float64 array"),
                obj,
            ))
        }
    }
}

impl F2<'_> {
    pub(crate) fn view(&self) -> FloatView<'_> {
        match self {
            FloatArray::F32(a) => FloatView::F32(a.as_array()),
            FloatArray::F64(a) => FloatView::F64(a.as_array()),
        }
    }
}

impl F1<'_> {
    pub(crate) fn view(&self) -> Floats1<'_> {
        match self {
            FloatArray::F32(a) => Floats1::F32(a.as_array()),
            FloatArray::F64(a) => Floats1::F64(a.as_array()),
        }
    }
}

/// A numpy `bool` array read as the bytes it holds. numpy reads any nonzero byte as True and
/// a `bool` view of another array (`u8_array.view(bool)`, torch's `.view(torch.bool)`) may
/// hold 2, which is no valid Rust `bool` (the crate's kernels would count it as 2): as `u8`,
/// the crate's 0/1 check of integer masks names such an entry instead.
fn bool_bytes<'a, D: ndarray::Dimension>(
    a: &'a numpy::PyReadonlyArray<'_, bool, D>,
) -> ndarray::ArrayView<'a, u8, D> {
    // SAFETY: `bool` and `u8` have one size and alignment; the view borrows `a`, which keeps
    // the array borrowed (readonly) and alive, and is never read as `bool`.
    unsafe { a.as_raw_array().cast::<u8>().deref_into_view() }
}

/// A rows × L mask.
pub(crate) enum M2<'py> {
    Bool(PyReadonlyArray2<'py, bool>),
    U8(PyReadonlyArray2<'py, u8>),
    I64(PyReadonlyArray2<'py, i64>),
    /// An `int32` or float mask (verl's `.float()` masks), as bytes checked to be 0 or 1, in
    /// this thread's kept buffer.
    Converted(ndarray::Array2<u8>),
}

impl<'py> M2<'py> {
    pub(crate) fn read(what: &str, obj: &Bound<'py, PyAny>) -> PyResult<Self> {
        let obj = checked(what, obj)?;
        let e = borrow_err(what);
        let py = obj.py();
        if let Ok(a) = obj.cast::<PyArray2<bool>>() {
            Ok(M2::Bool(a.try_readonly().map_err(e)?))
        } else if let Ok(a) = obj.cast::<PyArray2<u8>>() {
            Ok(M2::U8(a.try_readonly().map_err(e)?))
        } else if let Ok(a) = obj.cast::<PyArray2<i64>>() {
            Ok(M2::I64(a.try_readonly().map_err(e)?))
        } else if let Ok(a) = obj.cast::<PyArray2<i32>>() {
            let a = a.try_readonly().map_err(e)?;
            Ok(M2::Converted(mask::convert(py, what, &a, 0, 1)?))
        } else if let Ok(a) = obj.cast::<PyArray2<f32>>() {
            let a = a.try_readonly().map_err(e)?;
            Ok(M2::Converted(mask::convert(py, what, &a, 0.0, 1.0)?))
        } else if let Ok(a) = obj.cast::<PyArray2<f64>>() {
            let a = a.try_readonly().map_err(e)?;
            Ok(M2::Converted(mask::convert(py, what, &a, 0.0, 1.0)?))
        } else {
            Err(type_error(what, MASK_DTYPES, obj))
        }
    }

    /// The shape of a mask [`M2::read`] accepts, without reading (or converting) its entries.
    pub(crate) fn shape(what: &str, obj: &Bound<'_, PyAny>) -> PyResult<(usize, usize)> {
        let accepted = obj.cast::<PyArray2<bool>>().is_ok()
            || obj.cast::<PyArray2<u8>>().is_ok()
            || obj.cast::<PyArray2<i64>>().is_ok()
            || obj.cast::<PyArray2<i32>>().is_ok()
            || obj.cast::<PyArray2<f32>>().is_ok()
            || obj.cast::<PyArray2<f64>>().is_ok();
        if !accepted {
            return Err(type_error(what, MASK_DTYPES, obj));
        }
        let a = obj.cast::<PyUntypedArray>()?;
        Ok((a.shape()[0], a.shape()[1]))
    }

    pub(crate) fn view(&self) -> MaskView<'_> {
        match self {
            M2::Bool(a) => MaskView::U8(bool_bytes(a)),
            M2::U8(a) => MaskView::U8(a.as_array()),
            M2::I64(a) => MaskView::I64(a.as_array()),
            M2::Converted(a) => MaskView::U8(a.view()),
        }
    }
}

impl Drop for M2<'_> {
    /// Gives a converted mask's buffer back to this thread.
    fn drop(&mut self) {
        if let M2::Converted(a) = self {
            mask::give_back(a);
        }
    }
}

/// One flag per row (`bool`, `uint8` or `int64`), read in place.
pub(crate) enum M1<'py> {
    Bool(PyReadonlyArray1<'py, bool>),
    U8(PyReadonlyArray1<'py, u8>),
    I64(PyReadonlyArray1<'py, i64>),
}

impl<'py> M1<'py> {
    pub(crate) fn read(what: &str, obj: &Bound<'py, PyAny>) -> PyResult<Self> {
        let obj = checked(what, obj)?;
        let e = borrow_err(what);
        if let Ok(a) = obj.cast::<PyArray1<bool>>() {
            Ok(M1::Bool(a.try_readonly().map_err(e)?))
        } else if let Ok(a) = obj.cast::<PyArray1<u8>>() {
            Ok(M1::U8(a.try_readonly().map_err(e)?))
        } else if let Ok(a) = obj.cast::<PyArray1<i64>>() {
            Ok(M1::I64(a.try_readonly().map_err(e)?))
        } else {
            Err(type_error(what, "a 1-D bool, uint8 or int64 array", obj))
        }
    }

    pub(crate) fn view(&self) -> Mask1<'_> {
        match self {
            M1::Bool(a) => Mask1::U8(bool_bytes(a)),
            M1::U8(a) => Mask1::U8(a.as_array()),
            M1::I64(a) => Mask1::I64(a.as_array()),
        }
    }
}

/// An output the caller allocated (`float32` or `float64`, rows × L), borrowed writeable.
pub(crate) enum O2<'py> {
    F32(PyReadwriteArray2<'py, f32>),
    F64(PyReadwriteArray2<'py, f64>),
}

impl<'py> O2<'py> {
    pub(crate) fn writeable(what: &str, obj: &Bound<'py, PyAny>) -> PyResult<Self> {
        let e = |_| {
            PyValueError::new_err(format!(
                "{what}: not writeable, or the same memory as an input or the other output"
            ))
        };
        let obj = checked(what, obj)?;
        if let Ok(a) = obj.cast::<PyUntypedArray>() {
            check_distinct_elements(what, a)?;
        }
        if let Ok(a) = obj.cast::<PyArray2<f64>>() {
            Ok(O2::F64(a.try_readwrite().map_err(e)?))
        } else if let Ok(a) = obj.cast::<PyArray2<f32>>() {
            Ok(O2::F32(a.try_readwrite().map_err(e)?))
        } else {
            Err(type_error(what, "a 2-D float32 or float64 array", obj))
        }
    }

    pub(crate) fn view(&mut self) -> FloatViewMut<'_> {
        match self {
            O2::F32(a) => FloatViewMut::F32(a.as_array_mut()),
            O2::F64(a) => FloatViewMut::F64(a.as_array_mut()),
        }
    }
}
