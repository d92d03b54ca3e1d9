//! `beacon_rl._native`: the PyO3 layer of the Python package.
//!
//! This file turns Python objects (numpy arrays, `None`) into borrowed views and calls
//! `adapter`, the one module that talks to the `beacon-rl` crate. Inputs are read in place
//! in the caller's dtype (`f32`/`f64` values, `bool`/`uint8`/`int64` masks, no conversion;
//! `int32` and float masks are converted once into bytes checked to be 0 or 1),
//! outputs are written into arrays the caller allocated, and the GIL is released while the
//! crate computes. The Python package (`beacon_rl/__init__.py`) wraps these functions for torch
//! tensors and verl.

mod adapter;
// The benchmark scripts' timer of the crate's own call (python/bench/): built only with the
// `bench-timers` feature, so the shipped module carries no timer.
#[cfg(feature = "bench-timers")]
mod bench;
mod discovery;
mod mask;
mod threads;

use numpy::{
    PyArray1, PyArray2, PyArrayDescrMethods, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2,
    PyReadwriteArray2, PyUntypedArray, PyUntypedArrayMethods,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use adapter::{Estimator, Failure, Floats1, Mask1, Request};
use beacon_rl::tensor::{FloatView, FloatViewMut, MaskView};

impl From<Failure> for PyErr {
    fn from(f: Failure) -> Self {
        PyValueError::new_err(f.0)
    }
}

/// "float32 array with 3 dimensions" or the Python type's name, for error messages.
fn describe(obj: &Bound<'_, PyAny>) -> String {
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

fn type_error(what: &str, want: &str, obj: &Bound<'_, PyAny>) -> PyErr {
    PyTypeError::new_err(format!("{what}: expected {want}, got {}", describe(obj)))
}

/// Refuses a layout the views below would misread: rust-numpy divides each stride by the item
/// size, so a stride that is not a whole number of items (a field of a packed structured
/// array, `as_strided`) would read other elements than numpy's, and an unaligned pointer
/// (`np.frombuffer(..., offset=1)`) is not a valid `f32`/`f64`/`i64` reference.
fn check_layout(what: &str, a: &Bound<'_, PyUntypedArray>) -> PyResult<()> {
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
fn check_distinct_elements(what: &str, a: &Bound<'_, PyUntypedArray>) -> PyResult<()> {
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
fn check_disjoint(
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
fn checked<'a, 'py>(what: &str, obj: &'a Bound<'py, PyAny>) -> PyResult<&'a Bound<'py, PyAny>> {
    if let Ok(a) = obj.cast::<PyUntypedArray>() {
        check_layout(what, a)?;
    }
    Ok(obj)
}

enum F2<'py> {
    F32(PyReadonlyArray2<'py, f32>),
    F64(PyReadonlyArray2<'py, f64>),
}

impl F2<'_> {
    fn view(&self) -> FloatView<'_> {
        match self {
            F2::F32(a) => FloatView::F32(a.as_array()),
            F2::F64(a) => FloatView::F64(a.as_array()),
        }
    }
}

fn f2<'py>(what: &str, obj: Option<&Bound<'py, PyAny>>) -> PyResult<Option<F2<'py>>> {
    let Some(obj) = obj else { return Ok(None) };
    let obj = checked(what, obj)?;
    if let Ok(a) = obj.cast::<PyArray2<f64>>() {
        Ok(Some(F2::F64(a.try_readonly().map_err(borrow_err(what))?)))
    } else if let Ok(a) = obj.cast::<PyArray2<f32>>() {
        Ok(Some(F2::F32(a.try_readonly().map_err(borrow_err(what))?)))
    } else {
        Err(type_error(what, "a 2-D float32 or float64 array", obj))
    }
}

enum F1<'py> {
    F32(PyReadonlyArray1<'py, f32>),
    F64(PyReadonlyArray1<'py, f64>),
}

impl F1<'_> {
    fn view(&self) -> Floats1<'_> {
        match self {
            F1::F32(a) => Floats1::F32(a.as_array()),
            F1::F64(a) => Floats1::F64(a.as_array()),
        }
    }
}

fn f1<'py>(what: &str, obj: Option<&Bound<'py, PyAny>>) -> PyResult<Option<F1<'py>>> {
    let Some(obj) = obj else { return Ok(None) };
    let obj = checked(what, obj)?;
    if let Ok(a) = obj.cast::<PyArray1<f64>>() {
        Ok(Some(F1::F64(a.try_readonly().map_err(borrow_err(what))?)))
    } else if let Ok(a) = obj.cast::<PyArray1<f32>>() {
        Ok(Some(F1::F32(a.try_readonly().map_err(borrow_err(what))?)))
    } else {
        Err(type_error(what, "a 1-D float32 or float64 array", obj))
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

enum M2<'py> {
    Bool(PyReadonlyArray2<'py, bool>),
    U8(PyReadonlyArray2<'py, u8>),
    I64(PyReadonlyArray2<'py, i64>),
    /// An `int32` or float mask (verl's `.float()` masks), as bytes checked to be 0 or 1, in
    /// this thread's kept buffer.
    Converted(ndarray::Array2<u8>),
}

impl M2<'_> {
    fn view(&self) -> MaskView<'_> {
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

fn m2<'py>(what: &str, obj: Option<&Bound<'py, PyAny>>) -> PyResult<Option<M2<'py>>> {
    let Some(obj) = obj else { return Ok(None) };
    let obj = checked(what, obj)?;
    let e = borrow_err(what);
    let py = obj.py();
    if let Ok(a) = obj.cast::<PyArray2<bool>>() {
        Ok(Some(M2::Bool(a.try_readonly().map_err(e)?)))
    } else if let Ok(a) = obj.cast::<PyArray2<u8>>() {
        Ok(Some(M2::U8(a.try_readonly().map_err(e)?)))
    } else if let Ok(a) = obj.cast::<PyArray2<i64>>() {
        Ok(Some(M2::I64(a.try_readonly().map_err(e)?)))
    } else if let Ok(a) = obj.cast::<PyArray2<i32>>() {
        let a = a.try_readonly().map_err(e)?;
        Ok(Some(M2::Converted(mask::convert(py, what, &a, 0, 1)?)))
    } else if let Ok(a) = obj.cast::<PyArray2<f32>>() {
        let a = a.try_readonly().map_err(e)?;
        Ok(Some(M2::Converted(mask::convert(py, what, &a, 0.0, 1.0)?)))
    } else if let Ok(a) = obj.cast::<PyArray2<f64>>() {
        let a = a.try_readonly().map_err(e)?;
        Ok(Some(M2::Converted(mask::convert(py, what, &a, 0.0, 1.0)?)))
    } else {
        Err(type_error(
            what,
            "a 2-D bool, uint8, int32, int64, float16, float32 or float64 array",
            obj,
        ))
    }
}

/// The shape of a mask `m2` accepts, without reading (or converting) its entries.
fn m2_dim(what: &str, obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<(usize, usize)>> {
    let Some(obj) = obj else { return Ok(None) };
    let accepted = obj.cast::<PyArray2<bool>>().is_ok()
        || obj.cast::<PyArray2<u8>>().is_ok()
        || obj.cast::<PyArray2<i64>>().is_ok()
        || obj.cast::<PyArray2<i32>>().is_ok()
        || obj.cast::<PyArray2<f32>>().is_ok()
        || obj.cast::<PyArray2<f64>>().is_ok();
    if !accepted {
        return Err(type_error(
            what,
            "a 2-D bool, uint8, int32, int64, float16, float32 or float64 array",
            obj,
        ));
    }
    let a = obj.cast::<PyUntypedArray>()?;
    Ok(Some((a.shape()[0], a.shape()[1])))
}

enum M1<'py> {
    Bool(PyReadonlyArray1<'py, bool>),
    U8(PyReadonlyArray1<'py, u8>),
    I64(PyReadonlyArray1<'py, i64>),
}

impl M1<'_> {
    fn view(&self) -> Mask1<'_> {
        match self {
            M1::Bool(a) => Mask1::U8(bool_bytes(a)),
            M1::U8(a) => Mask1::U8(a.as_array()),
            M1::I64(a) => Mask1::I64(a.as_array()),
        }
    }
}

fn m1<'py>(what: &str, obj: Option<&Bound<'py, PyAny>>) -> PyResult<Option<M1<'py>>> {
    let Some(obj) = obj else { return Ok(None) };
    let obj = checked(what, obj)?;
    let e = borrow_err(what);
    if let Ok(a) = obj.cast::<PyArray1<bool>>() {
        Ok(Some(M1::Bool(a.try_readonly().map_err(e)?)))
    } else if let Ok(a) = obj.cast::<PyArray1<u8>>() {
        Ok(Some(M1::U8(a.try_readonly().map_err(e)?)))
    } else if let Ok(a) = obj.cast::<PyArray1<i64>>() {
        Ok(Some(M1::I64(a.try_readonly().map_err(e)?)))
    } else {
        Err(type_error(what, "a 1-D bool, uint8 or int64 array", obj))
    }
}

enum O2<'py> {
    F32(PyReadwriteArray2<'py, f32>),
    F64(PyReadwriteArray2<'py, f64>),
}

impl O2<'_> {
    fn view(&mut self) -> FloatViewMut<'_> {
        match self {
            O2::F32(a) => FloatViewMut::F32(a.as_array_mut()),
            O2::F64(a) => FloatViewMut::F64(a.as_array_mut()),
        }
    }
}

fn o2<'py>(what: &str, obj: &Bound<'py, PyAny>) -> PyResult<O2<'py>> {
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

fn borrow_err(what: &str) -> impl Fn(numpy::BorrowError) -> PyErr + '_ {
    move |_| PyValueError::new_err(format!("{what}: the same memory as an output"))
}

/// Group or trajectory keys as the caller holds them: int64 arrays are read in place; object
/// arrays are interned into ids numbered by first appearance, with the GIL held. Exact `str`
/// keys (verl's uuids) are compared by their UTF-8 (no copy: CPython caches it in the object);
/// a row holding the same object as the previous row (verl's `np.repeat` copies one reference
/// over a group's rows) takes its id without a lookup. Any other object array goes through a
/// dict, so keys that compare equal in Python get one id.
enum KeyCol<'py> {
    Ints(PyReadonlyArray1<'py, i64>),
    /// A non-contiguous int64 column, copied.
    Copied(Vec<i64>),
    /// Ids numbered by first appearance.
    Interned(Vec<i64>),
}

thread_local! {
    /// Id columns of this thread's earlier calls (`index`, `traj_index`), reused so that a call
    /// of a size seen before allocates none: a verl batch's uuid column is rows long.
    static ID_BUFS: std::cell::RefCell<Vec<Vec<i64>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// An empty id column from this thread's pool (its capacity kept from an earlier call).
fn id_buf() -> Vec<i64> {
    ID_BUFS
        .with(|p| p.try_borrow_mut().ok().and_then(|mut p| p.pop()))
        .unwrap_or_default()
}

impl Drop for KeyCol<'_> {
    /// Gives the column's buffer back to the pool, emptied (at most the two columns a call has).
    fn drop(&mut self) {
        if let KeyCol::Copied(v) | KeyCol::Interned(v) = self {
            let mut v = std::mem::take(v);
            v.clear();
            ID_BUFS.with(|p| {
                if let Ok(mut p) = p.try_borrow_mut() {
                    if p.len() < 2 {
                        p.push(v);
                    }
                }
            });
        }
    }
}

impl KeyCol<'_> {
    fn keys(&self) -> PyResult<adapter::Keys<'_>> {
        Ok(match self {
            // `keys` copies non-contiguous int64 columns, so this one is contiguous.
            KeyCol::Ints(a) => adapter::Keys::ints(
                a.as_slice()
                    .map_err(|_| PyValueError::new_err("internal: non-contiguous key column"))?,
            ),
            KeyCol::Copied(v) | KeyCol::Interned(v) => adapter::Keys::ints(v),
        })
    }
}

/// Appends to `ids` (empty) the first-appearance ids of an object column whose entries are all
/// exact `str` with a UTF-8 form, compared by value; `None` as soon as an entry is anything else
/// (a `str` subclass may redefine equality; a lone surrogate has no UTF-8), for the dict to
/// decide.
fn intern_strs(py: Python<'_>, keys: ndarray::ArrayView1<'_, Py<PyAny>>, ids: &mut Vec<i64>) -> Option<()> {
    ids.reserve(keys.len());
    let mut table: std::collections::HashMap<&str, i64> = std::collections::HashMap::new();
    let mut prev: Option<(*mut pyo3::ffi::PyObject, i64)> = None;
    for key in keys.iter() {
        let ptr = key.as_ptr();
        let id = match prev {
            Some((p, id)) if p == ptr => id,
            _ => {
                let s = key.bind(py).cast_exact::<PyString>().ok()?.to_str().ok()?;
                let next = table.len() as i64;
                *table.entry(s).or_insert(next)
            }
        };
        prev = Some((ptr, id));
        ids.push(id);
    }
    Some(())
}

fn keys<'py>(what: &str, obj: &Bound<'py, PyAny>) -> PyResult<KeyCol<'py>> {
    let obj = checked(what, obj)?;
    if let Ok(a) = obj.cast::<PyArray1<i64>>() {
        let a = a.try_readonly().map_err(borrow_err(what))?;
        if a.as_slice().is_ok() {
            return Ok(KeyCol::Ints(a));
        }
        let mut v = id_buf();
        v.extend(a.as_array().iter().copied());
        return Ok(KeyCol::Copied(v));
    }
    if let Ok(a) = obj.cast::<PyArray1<Py<PyAny>>>() {
        let py = obj.py();
        let a = a.try_readonly().map_err(borrow_err(what))?;
        let mut out = id_buf();
        if intern_strs(py, a.as_array(), &mut out).is_some() {
            return Ok(KeyCol::Interned(out));
        }
        // Some ids of the str prefix may be written: the dict numbers every row again.
        out.clear();
        let ids = PyDict::new(py);
        for (row, key) in a.as_array().iter().enumerate() {
            let key = key.bind(py);
            let id = match ids
                .get_item(key)
                .map_err(|e| PyTypeError::new_err(format!("{what}: key at row {row} is not hashable: {e}")))?
            {
                Some(id) => id.extract::<i64>()?,
                None => {
                    // A new key: None (a missing uuid) or one unequal to itself (NaN) would
                    // group rows that share nothing, or split rows one by one.
                    if key.is_none() || key.ne(key)? {
                        return Err(PyValueError::new_err(format!(
                            "{what}: row {row} holds {}, not a group key",
                            key.repr().map(|r| r.to_string()).unwrap_or_else(|_| "?".into())
                        )));
                    }
                    let id = ids.len() as i64;
                    ids.set_item(key, id)?;
                    id
                }
            };
            out.push(id);
        }
        return Ok(KeyCol::Interned(out));
    }
    Err(type_error(what, "a 1-D int64 or object array", obj))
}

/// Anchor observations: an object array of `str` (verl-agent's `anchor_obs`), read in place.
fn anchors<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, PyString>>> {
    let obj = checked("anchor_obs", obj)?;
    let a = obj
        .cast::<PyArray1<Py<PyAny>>>()
        .map_err(|_| type_error("anchor_obs", "a 1-D object array of str", obj))?;
    let a = a.try_readonly().map_err(borrow_err("anchor_obs"))?;
    let py = obj.py();
    a.as_array()
        .iter()
        .enumerate()
        .map(|(row, o)| {
            let o = o.bind(py);
            o.cast::<PyString>().cloned().map_err(|_| {
                PyTypeError::new_err(format!("anchor_obs: row {row} is {}, expected str", describe(o)))
            })
        })
        .collect()
}

/// The anchors' UTF-8 text, read in place. A Python `str` may hold lone surrogates, which
/// have no UTF-8 form: that is a `ValueError` naming the row (Python's own
/// `UnicodeEncodeError` names none).
fn anchor_texts<'a>(anchors: &'a [Bound<'_, PyString>]) -> PyResult<Vec<&'a str>> {
    anchors
        .iter()
        .enumerate()
        .map(|(row, s)| {
            s.to_str()
                .map_err(|e| PyValueError::new_err(format!("anchor_obs: row {row} has no UTF-8 form ({e})")))
        })
        .collect()
}

/// Computes advantages and returns of estimator `name` into `out_advantages` and
/// `out_returns` (numpy arrays the caller allocated, float32 or float64). `out_returns` may be
/// `None` for estimators whose returns equal their advantages (see `has_returns`). See
/// `beacon_rl.estimate` for the arguments.
#[pyfunction]
#[pyo3(signature = (
    name, config_json, out_advantages, out_returns, *, token_level_rewards=None,
    response_mask=None, index, traj_index=None, terminal_rewards=None, row_scores=None,
    values=None, old_log_probs=None, sum_pi_squared=None, rollout_is_weights=None,
    reward_baselines=None, milestones=None, step_rewards=None, turn_values=None,
    anchor_obs=None, tree_parents=None, step_entropy=None
))]
#[allow(clippy::too_many_arguments)]
fn estimate<'py>(
    py: Python<'py>,
    name: &str,
    config_json: Option<&str>,
    out_advantages: &Bound<'py, PyAny>,
    out_returns: Option<&Bound<'py, PyAny>>,
    token_level_rewards: Option<&Bound<'py, PyAny>>,
    response_mask: Option<&Bound<'py, PyAny>>,
    index: &Bound<'py, PyAny>,
    traj_index: Option<&Bound<'py, PyAny>>,
    terminal_rewards: Option<&Bound<'py, PyAny>>,
    row_scores: Option<&Bound<'py, PyAny>>,
    values: Option<&Bound<'py, PyAny>>,
    old_log_probs: Option<&Bound<'py, PyAny>>,
    sum_pi_squared: Option<&Bound<'py, PyAny>>,
    rollout_is_weights: Option<&Bound<'py, PyAny>>,
    reward_baselines: Option<&Bound<'py, PyAny>>,
    milestones: Option<&Bound<'py, PyAny>>,
    step_rewards: Option<&Bound<'py, PyAny>>,
    turn_values: Option<&Bound<'py, PyAny>>,
    anchor_obs: Option<&Bound<'py, PyAny>>,
    tree_parents: Option<&Bound<'py, PyAny>>,
    step_entropy: Option<&Bound<'py, PyAny>>,
) -> PyResult<()> {
    let est = Estimator::new(name, config_json)?;
    // The Python layer hands over a contiguous int64 array (it converts and checks).
    let parents = tree_parents
        .map(|t| {
            t.cast::<PyArray1<i64>>()
                .map(|a| a.readonly())
                .map_err(|_| type_error("tree_parents", "a 1-D int64 array", t))
        })
        .transpose()?;
    let parents_slice = parents
        .as_ref()
        .map(|p| {
            p.as_slice()
                .map_err(|_| PyValueError::new_err("tree_parents: expected a contiguous array"))
        })
        .transpose()?;
    let rewards = f2("token_level_rewards", token_level_rewards)?;
    let mask = m2("response_mask", response_mask)?;
    let (index_obj, values_obj) = (index, values);
    let index = keys("index", index)?;
    let traj = traj_index.map(|t| keys("traj_index", t)).transpose()?;
    let episode = f1("terminal_rewards", terminal_rewards)?;
    let row_scores_col = f1("row_scores", row_scores)?;
    let values = f2("values", values)?;
    let olp = f2("old_log_probs", old_log_probs)?;
    let spi = f2("sum_pi_squared", sum_pi_squared)?;
    let isw = f2("rollout_is_weights", rollout_is_weights)?;
    let baselines = f1("reward_baselines", reward_baselines)?;
    let flags = m1("milestones", milestones)?;
    let step = f1("step_rewards", step_rewards)?;
    let tv = f1("turn_values", turn_values)?;
    let entropy = f1("step_entropy", step_entropy)?;
    let anchor_objs = anchor_obs.map(anchors).transpose()?;
    let anchor_strs: Option<Vec<&str>> = anchor_objs.as_deref().map(anchor_texts).transpose()?;
    check_disjoint(
        &[
            ("out_advantages", Some(out_advantages)),
            ("out_returns", out_returns),
        ],
        &[
            ("token_level_rewards", token_level_rewards),
            ("response_mask", response_mask),
            ("index", Some(index_obj)),
            ("traj_index", traj_index),
            ("terminal_rewards", terminal_rewards),
            ("row_scores", row_scores),
            ("values", values_obj),
            ("old_log_probs", old_log_probs),
            ("sum_pi_squared", sum_pi_squared),
            ("rollout_is_weights", rollout_is_weights),
            ("reward_baselines", reward_baselines),
            ("milestones", milestones),
            ("step_rewards", step_rewards),
            ("turn_values", turn_values),
            ("anchor_obs", anchor_obs),
            ("tree_parents", tree_parents),
            ("step_entropy", step_entropy),
        ],
    )?;
    let mut adv = o2("out_advantages", out_advantages)?;
    let mut ret = out_returns.map(|r| o2("out_returns", r)).transpose()?;
    let index = index.keys()?;
    let traj = traj.as_ref().map(KeyCol::keys).transpose()?;
    let req = Request {
        token_level_rewards: rewards.as_ref().map(F2::view),
        response_mask: mask.as_ref().map(M2::view),
        index,
        traj_index: traj,
        terminal_rewards: episode.as_ref().map(F1::view),
        row_scores: row_scores_col.as_ref().map(F1::view),
        values: values.as_ref().map(F2::view),
        old_log_probs: olp.as_ref().map(F2::view),
        sum_pi_squared: spi.as_ref().map(F2::view),
        rollout_is_weights: isw.as_ref().map(F2::view),
        reward_baselines: baselines.as_ref().map(F1::view),
        milestones: flags.as_ref().map(M1::view),
        step_rewards: step.as_ref().map(F1::view),
        turn_values: tv.as_ref().map(F1::view),
        anchor_obs: anchor_strs.as_deref(),
        tree_parents: parents_slice,
        step_entropy: entropy.as_ref().map(F1::view),
    };
    let (a, r) = (adv.view(), ret.as_mut().map(O2::view));
    py.detach(|| threads::run(|| adapter::estimate(&est, &req, a, r)))?;
    Ok(())
}

/// The shape `estimate` writes for these inputs: `response_mask`'s, else
/// `token_level_rewards`'s, else (rows, 1).
#[pyfunction]
#[pyo3(signature = (*, index, token_level_rewards=None, response_mask=None))]
fn output_shape<'py>(
    index: &Bound<'py, PyAny>,
    token_level_rewards: Option<&Bound<'py, PyAny>>,
    response_mask: Option<&Bound<'py, PyAny>>,
) -> PyResult<(usize, usize)> {
    let rewards = f2("token_level_rewards", token_level_rewards)?;
    let mask = m2_dim("response_mask", response_mask)?;
    let rows = index
        .cast::<PyUntypedArray>()
        .map_err(|_| type_error("index", "a 1-D array", index))?
        .len();
    Ok(adapter::output_dim(
        rewards.as_ref().map(|r| r.view().dim()),
        mask,
        rows,
    ))
}

/// verl's multi-turn convention (see `beacon_rl.estimate_turns`): writes per-turn advantages of
/// `name` over each turn's tokens. Returns `(turns, milestones, empty_rows)`.
#[pyfunction]
#[pyo3(signature = (name, config_json, out_advantages, out_returns, *, token_level_rewards, response_mask, index))]
#[allow(clippy::too_many_arguments)]
fn estimate_turns<'py>(
    py: Python<'py>,
    name: &str,
    config_json: Option<&str>,
    out_advantages: &Bound<'py, PyAny>,
    out_returns: Option<&Bound<'py, PyAny>>,
    token_level_rewards: &Bound<'py, PyAny>,
    response_mask: &Bound<'py, PyAny>,
    index: &Bound<'py, PyAny>,
) -> PyResult<(usize, usize, usize)> {
    let est = Estimator::new(name, config_json)?;
    if !matches!(est.name(), "beacon" | "beacon_official" | "gigpo") {
        return Err(PyValueError::new_err(format!(
            "estimate_turns: {name} is not a step-level estimator (beacon, beacon_official, gigpo)"
        )));
    }
    let rewards = f2("token_level_rewards", Some(token_level_rewards))?
        .ok_or_else(|| PyTypeError::new_err("token_level_rewards: required"))?;
    let mask = m2("response_mask", Some(response_mask))?
        .ok_or_else(|| PyTypeError::new_err("response_mask: required"))?;
    check_disjoint(
        &[
            ("out_advantages", Some(out_advantages)),
            ("out_returns", out_returns),
        ],
        &[
            ("token_level_rewards", Some(token_level_rewards)),
            ("response_mask", Some(response_mask)),
            ("index", Some(index)),
        ],
    )?;
    let index = keys("index", index)?;
    let mut adv = o2("out_advantages", out_advantages)?;
    let mut ret = out_returns.map(|r| o2("out_returns", r)).transpose()?;
    let index = index.keys()?;
    let (rv, mv) = (rewards.view(), mask.view());
    let (a, r) = (adv.view(), ret.as_mut().map(O2::view));
    let stats = py.detach(|| threads::run(|| adapter::estimate_turns(&est, &rv, &mv, index, a, r)))?;
    Ok((stats.turns, stats.milestones, stats.empty_rows))
}

/// Every estimator name the crate knows (verl's `adv_estimator` strings plus `gigpo`,
/// `beacon`, `beacon_official` and the turn-level `step_reinforce`,
/// `mt_grpo`, `turn_gae`, `tree_grpo`, `empg`).
#[pyfunction]
fn names() -> Vec<&'static str> {
    adapter::names().to_vec()
}

/// The names that are verl's own estimators.
#[pyfunction]
fn verl_names() -> Vec<&'static str> {
    adapter::verl_names().to_vec()
}

/// Checks that `name` with `config_json` builds (raises ValueError with the crate's message).
#[pyfunction]
#[pyo3(signature = (name, config_json=None))]
fn validate(name: &str, config_json: Option<&str>) -> PyResult<()> {
    Estimator::new(name, config_json)?;
    Ok(())
}

/// True when estimator `name` computes returns of its own (`gae`, `reinforce_plus_plus`, …);
/// for the others the returns equal the advantages.
#[pyfunction]
#[pyo3(signature = (name, config_json=None))]
fn has_returns(name: &str, config_json: Option<&str>) -> PyResult<bool> {
    Ok(Estimator::new(name, config_json)?.has_returns())
}

/// Runs the crate's parallel paths (groups, row blocks) on a pool of `n` threads from now on;
/// 1 (the default) computes on the caller's thread. Results are bit-identical either way.
/// Raises ValueError for 0, for more than 1024, or when the pool cannot be built.
#[pyfunction]
fn set_num_threads(n: usize) -> PyResult<()> {
    threads::set(n).map_err(|e| PyValueError::new_err(e.0))
}

/// The number of threads `estimate` computes on (1: the caller's thread).
#[pyfunction]
fn get_num_threads() -> usize {
    threads::get()
}

/// The compiled part of `beacon_rl`.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(estimate, m)?)?;
    m.add_function(wrap_pyfunction!(estimate_turns, m)?)?;
    m.add_function(wrap_pyfunction!(output_shape, m)?)?;
    m.add_function(wrap_pyfunction!(names, m)?)?;
    m.add_function(wrap_pyfunction!(verl_names, m)?)?;
    m.add_function(wrap_pyfunction!(validate, m)?)?;
    m.add_function(wrap_pyfunction!(has_returns, m)?)?;
    #[cfg(feature = "bench-timers")]
    m.add_function(wrap_pyfunction!(bench::_time_crate_call, m)?)?;
    m.add_function(wrap_pyfunction!(set_num_threads, m)?)?;
    m.add_function(wrap_pyfunction!(get_num_threads, m)?)?;
    m.add_class::<discovery::Discovery>()?;
    Ok(())
}
