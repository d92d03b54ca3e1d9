//! What the binding refuses of the caller's arrays before it reads them: a dtype it does not
//! take (`TypeError` naming the argument and what came), a layout its views would misread,
//! an output whose elements overlap, and outputs that share memory with an input or with each
//! other. Nothing here reads an element.

use numpy::{PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

/// "float32 array with 3 dimensions" or the Python type's name, for error messages.
pub(crate) fn describe(obj: &Bound<'_, PyAny>) -> String {
    if let Ok(a) = obj.cast::<PyUntypedArray>() {
        let dtype = a
            .dtype()
            .str()
            .map(|s| s.to_string())
            .unwrap_or_else(|_| "?".into());
        format!("{dtype} array of shape {:?}", a.shape())
    } else {
        obj.get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_else(|_| "?".into())
    }
}

pub(crate) fn type_error(what: &str, want: &str, obj: &Bound<'_, PyAny>) -> PyErr {
    PyTypeError::new_err(format!("{what}: expected {want}, got {}", describe(obj)))
}

/// Refuses a layout the views of `arrays` would misread: rust-numpy divides each stride by the item
/// size, so a stride that is not a whole number of items (a field of a packed structured
/// array, `as_strided`) would read other elements than numpy's, and an unaligned pointer
/// (`np.frombuffer(..., offset=1)`) is not a valid `f32`/`f64`/`i64` reference.
pub(crate) fn check_layout(what: &str, a: &Bound<'_, PyUntypedArray>) -> PyResult<()> {
    let item = a.dtype().itemsize() as isize;
    let odd = a
        .shape()
        .iter()
        .zip(a.strides())
        .any(|(&n, &s)| n > 1 && s % item != 0);
    if odd || !a.is_aligned() {
        return Err(PyValueError::new_err(format!(
            "{what}: unaligned {} (byte strides {:?}): pass a contiguous copy (numpy.ascontiguousarray)",
            describe(a),
            a.strides()
        )));
    }
    Ok(())
}

/// The memory an array's elements span, as rust-numpy's borrow checker sees it: bytes
/// `[lo, hi)`, the first element's address and the gcd of the strides (`None`: no element).
struct Extent {
    lo: isize,
    hi: isize,
    ptr: isize,
    gcd: isize,
}

fn extent(a: &Bound<'_, PyUntypedArray>) -> Option<Extent> {
    if a.shape().contains(&0) {
        return None;
    }
    // SAFETY: `a` is a live ndarray (the GIL is held); only the data pointer is read.
    let ptr = unsafe { (*numpy::npyffi::_PyArray_GET_ITEM_DATA(a.as_array_ptr())).data } as isize;
    let (mut lo, mut hi) = (ptr, ptr + a.dtype().itemsize() as isize);
    let mut gcd = 0isize;
    for (&n, &s) in a.shape().iter().zip(a.strides()) {
        let reach = (n as isize - 1) * s;
        if reach < 0 {
            lo += reach;
        } else {
            hi += reach;
        }
        gcd = gcd_isize(gcd, s);
    }
    Some(Extent { lo, hi, ptr, gcd })
}

fn gcd_isize(a: isize, b: isize) -> isize {
    let (mut a, mut b) = (a.unsigned_abs(), b.unsigned_abs());
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a as isize
}

/// rust-numpy's test for two arrays that may share an element (spans overlap and the gcd of
/// the strides divides the distance of the first elements), applied whatever the arrays'
/// base objects: rust-numpy only compares arrays of one base, and two torch tensors over one
/// storage (`t` and `t[:]`, a `TensorDict`'s stored views) are two bases.
fn may_overlap(a: &Extent, b: &Extent) -> bool {
    if a.lo >= b.hi || b.lo >= a.hi {
        return false;
    }
    let g = gcd_isize(a.gcd, b.gcd);
    g == 0 || (a.ptr - b.ptr) % g == 0
}

/// Refuses an output whose elements overlap each other (a stride of 0 over more than one
/// element, as torch's `expand` and numpy's `as_strided` give): the rows written into it
/// would overwrite one another and the caller would read back only the last. The test (the
/// smaller stride at least one item, the larger at least the smaller axis' span) also refuses
/// the rare interleaved layouts that do not overlap.
pub(crate) fn check_distinct_elements(what: &str, a: &Bound<'_, PyUntypedArray>) -> PyResult<()> {
    if a.shape().contains(&0) {
        return Ok(());
    }
    let item = a.dtype().itemsize();
    let mut axes: Vec<(usize, usize)> = a
        .shape()
        .iter()
        .zip(a.strides())
        .filter(|(&n, _)| n > 1)
        .map(|(&n, &s)| (s.unsigned_abs(), n))
        .collect();
    axes.sort_unstable();
    let mut span = item;
    for (stride, n) in axes {
        if stride < span {
            return Err(PyValueError::new_err(format!(
                "{what}: its elements overlap (byte strides {:?} for shape {:?}), so rows would overwrite each other: pass an array with distinct elements",
                a.strides(),
                a.shape()
            )));
        }
        span = stride.saturating_mul(n);
    }
    Ok(())
}

/// Refuses outputs that may share memory with an input or with each other, wherever their
/// memory comes from (see [`may_overlap`]).
pub(crate) fn check_disjoint(
    outs: &[(&str, Option<&Bound<'_, PyAny>>)],
    ins: &[(&str, Option<&Bound<'_, PyAny>>)],
) -> PyResult<()> {
    let ext = |o: Option<&Bound<'_, PyAny>>| {
        o.and_then(|o| o.cast::<PyUntypedArray>().ok().and_then(|a| extent(a)))
    };
    for (i, &(what, out)) in outs.iter().enumerate() {
        let Some(e) = ext(out) else { continue };
        for &(other, arr) in outs[..i].iter().chain(ins) {
            if ext(arr).is_some_and(|f| may_overlap(&e, &f)) {
                return Err(PyValueError::new_err(format!(
                    "{what}: the same memory as {other} (an output must not share memory with an input or the other output)"
                )));
            }
        }
    }
    Ok(())
}

/// The untyped array behind `obj`, its layout checked (see [`check_layout`]).
pub(crate) fn checked<'a, 'py>(what: &str, obj: &'a Bound<'py, PyAny>) -> PyResult<&'a Bound<'py, PyAny>> {
    if let Ok(a) = obj.cast::<PyUntypedArray>() {
        check_layout(what, a)?;
    }
    Ok(obj)
}
