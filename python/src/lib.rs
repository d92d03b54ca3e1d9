//! `beacon_rl._native`: the PyO3 layer of the Python package.
//!
//! It turns Python objects (numpy arrays, `None`) into borrowed views and calls `adapter`, the
//! one module that talks to the `beacon-rl` crate. Inputs are read in place in the caller's
//! dtype (`f32`/`f64` values, `bool`/`uint8`/`int64` masks, no conversion; `int32` and float
//! masks are converted once into bytes checked to be 0 or 1), outputs are written into arrays
//! the caller allocated, and the GIL is released while the crate computes. The Python package
//! (`beacon_rl/__init__.py`) wraps these functions for torch tensors and verl.
//!
//! Files:
//! - `lib.rs`: the module's registration and its small functions (names, validation, threads);
//! - `compute.rs`: `estimate`, `estimate_turns` and `output_shape`;
//! - `checks.rs`: what is refused before anything is read (dtypes, layouts, overlapping memory);
//! - `arrays.rs`: numeric arrays and outputs borrowed as views, in the caller's dtype;
//! - `mask.rs`: `int32` and float masks converted into checked bytes;
//! - `objects.rs`: object arrays: group and trajectory keys interned into ids, anchor strings;
//! - `discovery.rs`: `MilestoneDiscovery`, milestones mined from texts and outcomes;
//! - `threads.rs`: the caller's thread, or the pool of `set_num_threads`;
//! - `adapter/`: the calls into the crate, with no Python type (the GIL released);
//! - `bench.rs`: the benchmark scripts' timer, built only with the `bench-timers` feature.

mod adapter;
mod arrays;
// The benchmark scripts' timer of the crate's own call (python/bench/): built only with the
// `bench-timers` feature, so the shipped module carries no timer.
#[cfg(feature = "bench-timers")]
mod bench;
mod checks;
mod compute;
mod discovery;
mod mask;
mod objects;
mod threads;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use adapter::{Estimator, Failure};

impl From<Failure> for PyErr {
    fn from(f: Failure) -> Self {
        PyValueError::new_err(f.0)
    }
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

/// The compiled part of `beacon_rl`: one line per function.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(compute::estimate, m)?)?;
    m.add_function(wrap_pyfunction!(compute::estimate_turns, m)?)?;
    m.add_function(wrap_pyfunction!(compute::output_shape, m)?)?;
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
