//! The benchmark scripts' timer of the crate's own call (`python/bench/`): what a Rust trainer
//! holding the caller's arrays pays, against which the binding's overhead is measured. Built
//! only with the `bench-timers` feature (`MATURIN_PEP517_ARGS="--features bench-timers" pip
//! install ./python`), so the shipped module carries no timer.

use std::time::Instant;

use beacon_rl::estimator::{EstimatorInput, Workspace};
use beacon_rl::tensor::{FloatView, FloatViewMut, MaskView};
use beacon_rl::{BatchBuilder, RolloutBatch};
use numpy::{PyArrayMethods, PyReadonlyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::adapter::{Estimator, Failure, Res};
use crate::arrays::{F2, M2, O2};
use crate::checks::{check_disjoint, check_layout};
use crate::threads;

/// Times `reps` runs of the crate's own call on these arrays, with
/// no binding around it (see [`time_crate_call`]), and returns each run's wall-clock
/// and CPU seconds (`time.process_time`, read around each run; the GIL is held throughout, so
/// no other Python thread runs meanwhile).
/// `index` must be int64 group ids; `lengths` (int64, one per row, each at least 0) passes the
/// mask as per-row lengths instead of the matrix.
#[pyfunction]
#[pyo3(signature = (name, out_advantages, *, token_level_rewards, response_mask, index, reps, lengths=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn _time_crate_call<'py>(
    py: Python<'py>,
    name: &str,
    out_advantages: &Bound<'py, PyAny>,
    token_level_rewards: &Bound<'py, PyAny>,
    response_mask: &Bound<'py, PyAny>,
    index: PyReadonlyArray1<'py, i64>,
    reps: usize,
    lengths: Option<PyReadonlyArray1<'py, i64>>,
) -> PyResult<(Vec<f64>, Vec<f64>)> {
    // The crate on the caller's thread, as `estimate` runs it by default (the Python clock read
    // around each run needs this thread and the GIL).
    threads::init();
    let est = Estimator::new(name, None)?;
    let rewards = F2::read("token_level_rewards", token_level_rewards)?;
    let mask = M2::read("response_mask", response_mask)?;
    let ids = index
        .as_slice()
        .map_err(|_| PyValueError::new_err("index: not contiguous"))?;
    if let Some(l) = &lengths {
        check_layout("lengths", l.as_untyped())?;
    }
    let lengths: Option<Vec<usize>> = lengths
        .map(|l| {
            l.as_array()
                .iter()
                .enumerate()
                .map(|(row, &n)| {
                    usize::try_from(n).map_err(|_| {
                        PyValueError::new_err(format!(
                            "lengths: row {row} has length {n}, expected at least 0"
                        ))
                    })
                })
                .collect()
        })
        .transpose()?;
    check_disjoint(
        &[("out_advantages", Some(out_advantages))],
        &[
            ("token_level_rewards", Some(token_level_rewards)),
            ("response_mask", Some(response_mask)),
            ("index", Some(index.as_any())),
        ],
    )?;
    let mut adv = O2::writeable("out_advantages", out_advantages)?;
    let (rv, mv, a) = (rewards.view(), mask.view(), adv.view());
    let process_time = py.import("time")?.getattr("process_time")?;
    let clock = || -> Res<f64> {
        process_time
            .call0()
            .and_then(|t| t.extract::<f64>())
            .map_err(|e| Failure(e.to_string()))
    };
    Ok(time_crate_call(
        &est,
        &rv,
        &mv,
        ids,
        a,
        reps,
        lengths.as_deref(),
        clock,
    )?)
}

/// Times the crate's own call, with no binding around it, for the benchmark of the binding's
/// overhead: `reps` runs of what a Rust trainer holding the same arrays does (integer group ids,
/// the mask as its `i64`/`u8`/`bool` matrix or, with `lengths`, as [`MaskView::Lengths`]):
/// rebuild a kept batch with a kept [`BatchBuilder`], then `estimate_into` the advantages with a
/// kept [`Workspace`]. Returns each run's wall-clock seconds and, read from `cpu_clock` (the
/// process's CPU time in seconds), its CPU seconds, after one untimed warm-up run.
#[allow(clippy::too_many_arguments)]
fn time_crate_call(
    est: &Estimator,
    rewards: &FloatView<'_>,
    mask: &MaskView<'_>,
    ids: &[i64],
    mut adv: FloatViewMut<'_>,
    reps: usize,
    lengths: Option<&[usize]>,
    mut cpu_clock: impl FnMut() -> Res<f64>,
) -> Res<(Vec<f64>, Vec<f64>)> {
    let mut builder = BatchBuilder::default();
    let zeros = vec![0.0; ids.len()];
    let mut batch = RolloutBatch::from_group_keys(ids, &zeros)?;
    let mut ws = Workspace::default();
    let cols = mask.dim().1;
    let (mut wall, mut cpu) = (Vec::with_capacity(reps), Vec::with_capacity(reps));
    for rep in 0..=reps {
        let c0 = cpu_clock()?;
        let t0 = Instant::now();
        builder.rebuild_from_group_keys(&mut batch, ids, &zeros)?;
        let m = match lengths {
            Some(lengths) => MaskView::Lengths { lengths, cols },
            None => mask.reborrow(),
        };
        let input = EstimatorInput::new(&batch)
            .with_token_level_rewards(rewards.reborrow())
            .with_response_mask(m);
        est.inner.estimate_into(&input, adv.reborrow(), None, &mut ws)?;
        let t = t0.elapsed().as_secs_f64();
        let c = cpu_clock()? - c0;
        if rep > 0 {
            wall.push(t);
            cpu.push(c);
        }
    }
    Ok((wall, cpu))
}
