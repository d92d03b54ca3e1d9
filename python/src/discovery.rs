//! `beacon_rl._native.MilestoneDiscovery`: the crate's milestone discovery
//! ([`beacon_rl::milestone::MilestoneDiscovery`]) with its memory kept in a Python object, so a
//! trainer relearns milestones batch after batch as its policy changes.
//!
//! Rows are steps in verl-agent's layout: `index[r]` names row r's group, `traj_index[r]` its
//! trajectory, `terminal_rewards[r]` that trajectory's outcome R(τ); a trajectory's rows are its
//! steps in row order. Discovery reads only each row's action and response text (and the first
//! step's observation, for its novelty rule), never a score: the caller removes the
//! environment's own progress messages from the text first. The Python layer
//! (`beacon_rl.MilestoneDiscovery`) turns any keys into the int64 ids read here.

use beacon_rl::milestone::{DiscoveryConfig, MilestoneDiscovery, Transition};
use beacon_rl::RolloutBatch;
use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

fn value_error(e: beacon_rl::Error) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// One string per row from any iterable of `str` (list, tuple, object or str array); a bare
/// `str` or `bytes` (which would iterate as characters) and any non-`str` item are TypeErrors
/// naming the row.
fn texts(what: &str, obj: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    if obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyBytes>() {
        return Err(PyTypeError::new_err(format!(
            "{what}: expected one str per row, got a single {}",
            obj.get_type().name()?
        )));
    }
    let items = obj.try_iter().map_err(|_| {
        let name = obj.get_type().name().map(|n| n.to_string()).unwrap_or_default();
        PyTypeError::new_err(format!("{what}: expected a sequence of str, got {name}"))
    })?;
    let mut out = Vec::new();
    for (row, item) in items.enumerate() {
        let item = item?;
        let s = item.cast::<PyString>().map_err(|_| {
            let name = item.get_type().name().map(|n| n.to_string()).unwrap_or_default();
            PyTypeError::new_err(format!("{what}: row {row} is a {name}, expected str"))
        })?;
        out.push(s.to_str()?.to_owned());
    }
    Ok(out)
}

fn check_rows(what: &str, rows: usize, got: usize) -> PyResult<()> {
    if got == rows {
        Ok(())
    } else {
        Err(PyValueError::new_err(format!(
            "{what}: expected one entry per row ({rows}), got {got}"
        )))
    }
}

/// The task of each group of `batch`: its first row's, every row of the group agreeing.
fn group_tasks<'t>(batch: &RolloutBatch, tasks: &'t [String]) -> PyResult<Vec<&'t str>> {
    let mut out = Vec::with_capacity(batch.num_groups());
    for g in 0..batch.num_groups() {
        let trajs = batch.group_trajectories(g);
        let first = &tasks[batch.trajectory_rows(trajs.start)[0]];
        for j in trajs {
            if let Some(&r) = batch.trajectory_rows(j).iter().find(|&&r| tasks[r] != *first) {
                return Err(PyValueError::new_err(format!(
                    "tasks: row {r} names task {:?}, another row of its group {first:?}",
                    tasks[r]
                )));
            }
        }
        out.push(first.as_str());
    }
    Ok(out)
}

/// Online milestone discovery with a bounded memory across calls (see the crate's
/// `MilestoneDiscovery`). Use `beacon_rl.MilestoneDiscovery`, which wraps this class.
#[pyclass(name = "MilestoneDiscovery", module = "beacon_rl._native")]
pub struct Discovery {
    inner: MilestoneDiscovery,
    /// The settings it was built with, for `config_json`.
    config: DiscoveryConfig,
}

#[pymethods]
impl Discovery {
    /// A discovery with an empty memory; `config_json` holds the crate's `DiscoveryConfig`
    /// fields as a JSON object (missing fields take their defaults, unknown ones are refused).
    #[new]
    #[pyo3(signature = (config_json=None))]
    fn new(config_json: Option<&str>) -> PyResult<Self> {
        let config = match config_json {
            None => DiscoveryConfig::default(),
            Some(json) => serde_json::from_str(json)
                .map_err(|e| PyValueError::new_err(format!("discovery config: {e}")))?,
        };
        let inner = MilestoneDiscovery::new(config).map_err(value_error)?;
        Ok(Self { inner, config })
    }

    /// One flag per row (bool array): the milestones of this batch, with the memory updated.
    #[pyo3(signature = (actions, responses, *, index, traj_index, terminal_rewards, tasks, observations=None))]
    #[allow(clippy::too_many_arguments)]
    fn discover<'py>(
        &mut self,
        py: Python<'py>,
        actions: &Bound<'py, PyAny>,
        responses: &Bound<'py, PyAny>,
        index: PyReadonlyArray1<'py, i64>,
        traj_index: PyReadonlyArray1<'py, i64>,
        terminal_rewards: PyReadonlyArray1<'py, f64>,
        tasks: &Bound<'py, PyAny>,
        observations: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyArray1<bool>>> {
        let (index, traj_index) = (index.as_array(), traj_index.as_array());
        let rows = index.len();
        let actions = texts("actions", actions)?;
        let responses = texts("responses", responses)?;
        let tasks = texts("tasks", tasks)?;
        let observations = observations.map(|o| texts("observations", o)).transpose()?;
        check_rows("actions", rows, actions.len())?;
        check_rows("responses", rows, responses.len())?;
        check_rows("tasks", rows, tasks.len())?;
        if let Some(o) = &observations {
            check_rows("observations", rows, o.len())?;
        }
        // `from_row_keys` checks the keys' and rewards' lengths, finite rewards, one reward and
        // one group per trajectory, and refuses an empty batch.
        let (groups, trajs) = (index.to_vec(), traj_index.to_vec());
        let rewards = terminal_rewards.as_array().to_vec();
        let batch = RolloutBatch::from_row_keys(&groups, &trajs, &rewards).map_err(value_error)?;
        let tasks = group_tasks(&batch, &tasks)?;
        let inner = &mut self.inner;
        let flags = py
            .detach(|| {
                inner.discover(&batch, &tasks, |row, _| Transition {
                    action: &actions[row],
                    next_observation: &responses[row],
                    observation: observations.as_ref().map_or("", |o| &o[row]),
                    ..Transition::default()
                })
            })
            .map_err(value_error)?;
        Ok(PyArray1::from_vec(py, flags))
    }

    /// Forgets everything learned.
    fn clear(&mut self) {
        self.inner.clear();
    }

    /// Number of tasks in memory.
    #[getter]
    fn num_tasks(&self) -> usize {
        self.inner.num_tasks()
    }

    /// (no-op actions, feedback sentences) learned so far.
    fn num_learned(&self) -> (usize, usize) {
        self.inner.num_learned()
    }

    /// The settings as a JSON object (every field).
    fn config_json(&self) -> PyResult<String> {
        serde_json::to_string(&self.config)
            .map_err(|e| PyValueError::new_err(format!("discovery config: {e}")))
    }
}
