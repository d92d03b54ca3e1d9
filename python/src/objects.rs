//! The caller's object arrays: group and trajectory keys, interned into ids (`int64` keys are
//! read in place), and anchor observations, read in place as `str`.

use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::adapter::Keys;
use crate::arrays::borrow_err;
use crate::checks::{checked, describe, type_error};

/// Group or trajectory keys as the caller holds them: int64 arrays are read in place; object
/// arrays are interned into ids numbered by first appearance, with the GIL held. Exact `str`
/// keys (verl's uuids) are compared by their UTF-8 (no copy: CPython caches it in the object);
/// a row holding the same object as the previous row (verl's `np.repeat` copies one reference
/// over a group's rows) takes its id without a lookup. Any other object array goes through a
/// dict, so keys that compare equal in Python get one id.
pub(crate) enum KeyCol<'py> {
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

impl<'py> KeyCol<'py> {
    /// The key column `obj` (`int64`, or objects interned into ids; see [`KeyCol`]).
    pub(crate) fn read(what: &str, obj: &Bound<'py, PyAny>) -> PyResult<Self> {
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
                let id = match ids.get_item(key).map_err(|e| {
                    PyTypeError::new_err(format!("{what}: key at row {row} is not hashable: {e}"))
                })? {
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

    pub(crate) fn keys(&self) -> PyResult<Keys<'_>> {
        Ok(match self {
            // `read` copies non-contiguous int64 columns, so this one is contiguous.
            KeyCol::Ints(a) => Keys::ints(
                a.as_slice()
                    .map_err(|_| PyValueError::new_err("internal: non-contiguous key column"))?,
            ),
            KeyCol::Copied(v) | KeyCol::Interned(v) => Keys::ints(v),
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

/// Anchor observations: an object array of `str` (verl-agent's `anchor_obs`), read in place.
pub(crate) fn anchors<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, PyString>>> {
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
pub(crate) fn anchor_texts<'a>(anchors: &'a [Bound<'_, PyString>]) -> PyResult<Vec<&'a str>> {
    anchors
        .iter()
        .enumerate()
        .map(|(row, s)| {
            s.to_str()
                .map_err(|e| PyValueError::new_err(format!("anchor_obs: row {row} has no UTF-8 form ({e})")))
        })
        .collect()
}
