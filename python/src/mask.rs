//! Response masks in dtypes the crate does not read directly: `int32` and the float masks verl
//! builds with `.float()`. Each is converted once per call into bytes (1 where the entry is 1),
//! every entry checked to be exactly 0 or 1, into a byte buffer kept per thread (a call of a
//! size seen before allocates nothing). bool, uint8 and int64 masks never come here: the crate
//! reads them in place.

use numpy::PyReadonlyArray2;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

thread_local! {
    /// The byte buffer of the last converted mask, reused so that a call of a size seen before
    /// allocates none.
    static MASK_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Writes `a` as bytes (1 where an entry equals `one`) into `out`; `Err((row, token))` names
/// the first entry that is neither `zero` nor `one` (NaN included).
fn mask_bytes<T: Copy + PartialEq>(
    a: ndarray::ArrayView2<'_, T>,
    zero: T,
    one: T,
    out: &mut Vec<u8>,
) -> Result<(), (usize, usize)> {
    let (rows, cols) = a.dim();
    out.clear();
    out.resize(rows * cols, 0);
    if cols == 0 {
        return Ok(());
    }
    for ((r, row), dst) in a.outer_iter().enumerate().zip(out.chunks_exact_mut(cols)) {
        // One branch-free pass per row; the offending entry is searched only on failure.
        let mut bad = false;
        match row.as_slice() {
            Some(src) => {
                for (o, &v) in dst.iter_mut().zip(src) {
                    *o = u8::from(v == one);
                    bad |= (v != zero) & (v != one);
                }
            }
            None => {
                for (o, &v) in dst.iter_mut().zip(row.iter()) {
                    *o = u8::from(v == one);
                    bad |= (v != zero) & (v != one);
                }
            }
        }
        if bad {
            let t = row.iter().position(|&v| v != zero && v != one).unwrap_or(0);
            return Err((r, t));
        }
    }
    Ok(())
}

/// A mask the crate does not read directly (`int32`, `float32`, `float64`), converted into
/// bytes with the GIL released; any entry other than exactly 0 or 1 is a `ValueError` naming
/// its row and token.
pub fn convert<T: Copy + PartialEq + Sync + std::fmt::Display + numpy::Element>(
    py: Python<'_>,
    what: &str,
    a: &PyReadonlyArray2<'_, T>,
    zero: T,
    one: T,
) -> PyResult<ndarray::Array2<u8>> {
    let view = a.as_array();
    let mut buf = MASK_BUF
        .with(|b| b.try_borrow_mut().ok().map(|mut b| std::mem::take(&mut *b)))
        .unwrap_or_default();
    let res = py.detach(|| mask_bytes(view, zero, one, &mut buf));
    if let Err((r, t)) = res {
        return Err(PyValueError::new_err(format!(
            "{what}[{r}, {t}] = {}: a mask holds only 0 and 1",
            view[[r, t]]
        )));
    }
    ndarray::Array2::from_shape_vec(view.dim(), buf)
        .map_err(|e| PyValueError::new_err(format!("internal: {what}: {e}")))
}

/// Gives a converted mask's buffer back to this thread's pool (leaving an empty array).
pub fn give_back(a: &mut ndarray::Array2<u8>) {
    let a = std::mem::replace(a, ndarray::Array2::zeros((0, 0)));
    let (mut v, _) = a.into_raw_vec_and_offset();
    v.clear();
    MASK_BUF.with(|b| {
        if let Ok(mut b) = b.try_borrow_mut() {
            *b = v;
        }
    });
}
