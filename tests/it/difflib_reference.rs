//! The reference similarity of the GiGPO tests: Python's
//! `difflib.SequenceMatcher(None, a, b).ratio()`, from the naive port of CPython's code that
//! the library's own difflib unit tests and the detectors fuzz oracle use.

#[allow(dead_code)]
#[path = "../../src/milestone/difflib/py.rs"]
pub mod py;

/// `SequenceMatcher(None, a, b).ratio()`.
pub fn ratio(a: &str, b: &str) -> f64 {
    py::SequenceMatcher::new(a, b).ratio()
}
