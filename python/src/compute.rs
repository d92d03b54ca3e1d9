//! The compute functions of `beacon_rl._native`: `estimate`, `estimate_turns` and
//! `output_shape`. Each borrows the caller's arrays (`arrays`, `objects`), refuses outputs
//! that share memory with an input (`checks`), and runs `adapter` with the GIL released, on the
//! pool of `set_num_threads` (`threads`).

use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::adapter::{self, Estimator, Request};
use crate::arrays::{optional, F1, F2, M1, M2, O2};
use crate::checks::{check_disjoint, type_error};
use crate::objects::{anchor_texts, anchors, KeyCol};
use crate::threads;

/// The inputs of `estimate` as Python passed them (`None`: left out).
struct Inputs<'a, 'py> {
    token_level_rewards: Option<&'a Bound<'py, PyAny>>,
    response_mask: Option<&'a Bound<'py, PyAny>>,
    index: &'a Bound<'py, PyAny>,
    traj_index: Option<&'a Bound<'py, PyAny>>,
    terminal_rewards: Option<&'a Bound<'py, PyAny>>,
    row_scores: Option<&'a Bound<'py, PyAny>>,
    values: Option<&'a Bound<'py, PyAny>>,
    old_log_probs: Option<&'a Bound<'py, PyAny>>,
    sum_pi_squared: Option<&'a Bound<'py, PyAny>>,
    rollout_is_weights: Option<&'a Bound<'py, PyAny>>,
    reward_baselines: Option<&'a Bound<'py, PyAny>>,
    milestones: Option<&'a Bound<'py, PyAny>>,
    step_rewards: Option<&'a Bound<'py, PyAny>>,
    turn_values: Option<&'a Bound<'py, PyAny>>,
    anchor_obs: Option<&'a Bound<'py, PyAny>>,
    tree_parents: Option<&'a Bound<'py, PyAny>>,
    step_entropy: Option<&'a Bound<'py, PyAny>>,
}

type Named<'a, 'py> = (&'static str, Option<&'a Bound<'py, PyAny>>);

impl<'a, 'py> Inputs<'a, 'py> {
    /// Every input by its argument's name, for [`check_outputs`].
    fn named(&self) -> [Named<'a, 'py>; 17] {
        [
            ("token_level_rewards", self.token_level_rewards),
            ("response_mask", self.response_mask),
            ("index", Some(self.index)),
            ("traj_index", self.traj_index),
            ("terminal_rewards", self.terminal_rewards),
            ("row_scores", self.row_scores),
            ("values", self.values),
            ("old_log_probs", self.old_log_probs),
            ("sum_pi_squared", self.sum_pi_squared),
            ("rollout_is_weights", self.rollout_is_weights),
            ("reward_baselines", self.reward_baselines),
            ("milestones", self.milestones),
            ("step_rewards", self.step_rewards),
            ("turn_values", self.turn_values),
            ("anchor_obs", self.anchor_obs),
            ("tree_parents", self.tree_parents),
            ("step_entropy", self.step_entropy),
        ]
    }
}

/// The inputs of `estimate` borrowed read-only in the caller's dtypes.
struct Borrowed<'py> {
    tree_parents: Option<PyReadonlyArray1<'py, i64>>,
    token_level_rewards: Option<F2<'py>>,
    response_mask: Option<M2<'py>>,
    index: KeyCol<'py>,
    traj_index: Option<KeyCol<'py>>,
    terminal_rewards: Option<F1<'py>>,
    row_scores: Option<F1<'py>>,
    values: Option<F2<'py>>,
    old_log_probs: Option<F2<'py>>,
    sum_pi_squared: Option<F2<'py>>,
    rollout_is_weights: Option<F2<'py>>,
    reward_baselines: Option<F1<'py>>,
    milestones: Option<M1<'py>>,
    step_rewards: Option<F1<'py>>,
    turn_values: Option<F1<'py>>,
    step_entropy: Option<F1<'py>>,
    anchor_obs: Option<Vec<Bound<'py, PyString>>>,
}

/// `tree_parents` as the crate reads it. The Python layer hands over a contiguous int64 array
/// (it converts and checks).
fn parents<'a>(p: &'a PyReadonlyArray1<'_, i64>) -> PyResult<&'a [i64]> {
    p.as_slice()
        .map_err(|_| PyValueError::new_err("tree_parents: expected a contiguous array"))
}

impl<'py> Borrowed<'py> {
    /// Borrows every input the caller passed, each checked as it is read (in argument order,
    /// `tree_parents` first).
    fn read(i: &Inputs<'_, 'py>) -> PyResult<Self> {
        let tree_parents = i
            .tree_parents
            .map(|t| {
                t.cast::<PyArray1<i64>>()
                    .map(|a| a.readonly())
                    .map_err(|_| type_error("tree_parents", "a 1-D int64 array", t))
            })
            .transpose()?;
        tree_parents.as_ref().map(parents).transpose()?;
        Ok(Self {
            tree_parents,
            token_level_rewards: optional("token_level_rewards", i.token_level_rewards, F2::read)?,
            response_mask: optional("response_mask", i.response_mask, M2::read)?,
            index: KeyCol::read("index", i.index)?,
            traj_index: optional("traj_index", i.traj_index, KeyCol::read)?,
            terminal_rewards: optional("terminal_rewards", i.terminal_rewards, F1::read)?,
            row_scores: optional("row_scores", i.row_scores, F1::read)?,
            values: optional("values", i.values, F2::read)?,
            old_log_probs: optional("old_log_probs", i.old_log_probs, F2::read)?,
            sum_pi_squared: optional("sum_pi_squared", i.sum_pi_squared, F2::read)?,
            rollout_is_weights: optional("rollout_is_weights", i.rollout_is_weights, F2::read)?,
            reward_baselines: optional("reward_baselines", i.reward_baselines, F1::read)?,
            milestones: optional("milestones", i.milestones, M1::read)?,
            step_rewards: optional("step_rewards", i.step_rewards, F1::read)?,
            turn_values: optional("turn_values", i.turn_values, F1::read)?,
            step_entropy: optional("step_entropy", i.step_entropy, F1::read)?,
            anchor_obs: i.anchor_obs.map(anchors).transpose()?,
        })
    }

    /// The adapter's request over these borrows; `anchor_obs` is the anchors' text
    /// (`objects::anchor_texts`).
    fn request<'s>(&'s self, anchor_obs: Option<&'s [&'s str]>) -> PyResult<Request<'s>> {
        Ok(Request {
            token_level_rewards: self.token_level_rewards.as_ref().map(F2::view),
            response_mask: self.response_mask.as_ref().map(M2::view),
            index: self.index.keys()?,
            traj_index: self.traj_index.as_ref().map(KeyCol::keys).transpose()?,
            terminal_rewards: self.terminal_rewards.as_ref().map(F1::view),
            row_scores: self.row_scores.as_ref().map(F1::view),
            values: self.values.as_ref().map(F2::view),
            old_log_probs: self.old_log_probs.as_ref().map(F2::view),
            sum_pi_squared: self.sum_pi_squared.as_ref().map(F2::view),
            rollout_is_weights: self.rollout_is_weights.as_ref().map(F2::view),
            reward_baselines: self.reward_baselines.as_ref().map(F1::view),
            milestones: self.milestones.as_ref().map(M1::view),
            step_rewards: self.step_rewards.as_ref().map(F1::view),
            turn_values: self.turn_values.as_ref().map(F1::view),
            anchor_obs,
            tree_parents: self.tree_parents.as_ref().map(parents).transpose()?,
            step_entropy: self.step_entropy.as_ref().map(F1::view),
        })
    }
}

/// Refuses outputs that share memory with an input in `ins` or with each other.
fn check_outputs<'py>(
    out_advantages: &Bound<'py, PyAny>,
    out_returns: Option<&Bound<'py, PyAny>>,
    ins: &[Named<'_, 'py>],
) -> PyResult<()> {
    check_disjoint(
        &[
            ("out_advantages", Some(out_advantages)),
            ("out_returns", out_returns),
        ],
        ins,
    )
}

/// The outputs borrowed writeable (after [`check_outputs`]).
fn outputs<'py>(
    out_advantages: &Bound<'py, PyAny>,
    out_returns: Option<&Bound<'py, PyAny>>,
) -> PyResult<(O2<'py>, Option<O2<'py>>)> {
    let adv = O2::writeable("out_advantages", out_advantages)?;
    let ret = optional("out_returns", out_returns, O2::writeable)?;
    Ok((adv, ret))
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
pub(crate) fn estimate<'py>(
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
    let inputs = Inputs {
        token_level_rewards,
        response_mask,
        index,
        traj_index,
        terminal_rewards,
        row_scores,
        values,
        old_log_probs,
        sum_pi_squared,
        rollout_is_weights,
        reward_baselines,
        milestones,
        step_rewards,
        turn_values,
        anchor_obs,
        tree_parents,
        step_entropy,
    };
    let held = Borrowed::read(&inputs)?;
    let texts: Option<Vec<&str>> = held.anchor_obs.as_deref().map(anchor_texts).transpose()?;
    check_outputs(out_advantages, out_returns, &inputs.named())?;
    let (mut adv, mut ret) = outputs(out_advantages, out_returns)?;
    let req = held.request(texts.as_deref())?;
    let (a, r) = (adv.view(), ret.as_mut().map(O2::view));
    py.detach(|| threads::run(|| adapter::estimate(&est, &req, a, r)))?;
    Ok(())
}

/// The shape `estimate` writes for these inputs: `response_mask`'s, else
/// `token_level_rewards`'s, else (rows, 1).
#[pyfunction]
#[pyo3(signature = (*, index, token_level_rewards=None, response_mask=None))]
pub(crate) fn output_shape<'py>(
    index: &Bound<'py, PyAny>,
    token_level_rewards: Option<&Bound<'py, PyAny>>,
    response_mask: Option<&Bound<'py, PyAny>>,
) -> PyResult<(usize, usize)> {
    let rewards = optional("token_level_rewards", token_level_rewards, F2::read)?;
    let mask = optional("response_mask", response_mask, M2::shape)?;
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
pub(crate) fn estimate_turns<'py>(
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
    let rewards = F2::read("token_level_rewards", token_level_rewards)?;
    let mask = M2::read("response_mask", response_mask)?;
    check_outputs(
        out_advantages,
        out_returns,
        &[
            ("token_level_rewards", Some(token_level_rewards)),
            ("response_mask", Some(response_mask)),
            ("index", Some(index)),
        ],
    )?;
    let index = KeyCol::read("index", index)?;
    let (mut adv, mut ret) = outputs(out_advantages, out_returns)?;
    let index = index.keys()?;
    let (rv, mv) = (rewards.view(), mask.view());
    let (a, r) = (adv.view(), ret.as_mut().map(O2::view));
    let stats = py.detach(|| threads::run(|| adapter::estimate_turns(&est, &rv, &mv, index, a, r)))?;
    Ok((stats.turns, stats.milestones, stats.empty_rows))
}
