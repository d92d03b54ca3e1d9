//! What the adapter keeps between calls on one thread, so that a call of a size seen before
//! allocates nothing.

use std::cell::RefCell;
use std::hash::Hash;

use beacon_rl::estimator::Workspace;
use beacon_rl::{BatchBuilder, RolloutBatch};

use super::turns::Turns;

/// What the binding keeps between calls on one thread: the crate's scratch space, the batch
/// builder's key tables, the last batch (rebuilt in place by the next call) and the per-row
/// columns the binding derives. Once they have grown to the batch size, a call allocates
/// nothing in the crate nor in these columns. verl's layout (each group's rows one contiguous
/// run, as `np.repeat` of one uuid per prompt gives) is the builder's own cheap case: one key
/// hashed per run, no sort.
#[derive(Default)]
pub(super) struct State {
    pub(super) ws: Workspace,
    pub(super) builder: BatchBuilder,
    pub(super) batch: Option<RolloutBatch>,
    pub(super) cols: Columns,
    pub(super) turns: Turns,
}

/// Per-row columns the binding derives from the caller's: each row's reward (the caller's
/// `f32` terminal rewards widened, or zeros), each row's score (the caller's `row_scores`
/// widened, or the token rewards' row sums), `f64` copies of `f32` or strided baselines and
/// step rewards, and milestone flags checked to be 0 or 1.
#[derive(Default)]
pub(super) struct Columns {
    pub(super) episode: Vec<f64>,
    pub(super) rows: Vec<f64>,
    pub(super) baselines: Vec<f64>,
    pub(super) step: Vec<f64>,
    pub(super) turn_values: Vec<f64>,
    pub(super) entropy: Vec<f64>,
    pub(super) flags: Vec<bool>,
}

/// Rebuilds the kept batch in `slot` from this call's keys (a new batch on the thread's first
/// call) and returns it. On error the kept batch is left as it was and nothing of it is read.
pub(super) fn rebuild<'s, G: Hash + Eq, T: Hash + Eq>(
    builder: &mut BatchBuilder,
    slot: &'s mut Option<RolloutBatch>,
    groups: &[G],
    trajs: Option<&[T]>,
    episode: &[f64],
) -> beacon_rl::Result<&'s RolloutBatch> {
    Ok(match (slot, trajs) {
        (Some(batch), Some(t)) => {
            builder.rebuild_from_row_keys(batch, groups, t, episode)?;
            batch
        }
        (Some(batch), None) => {
            builder.rebuild_from_group_keys(batch, groups, episode)?;
            batch
        }
        (s @ None, Some(t)) => s.insert(RolloutBatch::from_row_keys(groups, t, episode)?),
        (s @ None, None) => s.insert(RolloutBatch::from_group_keys(groups, episode)?),
    })
}

thread_local! {
    /// Kept per thread: calls run on the caller's thread (the GIL is released, not handed to
    /// another thread), and nothing in a call re-enters the binding.
    static STATE: RefCell<State> = RefCell::new(State::default());
}

/// Runs `f` with this thread's kept state (a fresh one if it is somehow already in use).
pub(super) fn with_state<T>(f: impl FnOnce(&mut State) -> T) -> T {
    STATE.with(|st| match st.try_borrow_mut() {
        Ok(mut st) => f(&mut st),
        Err(_) => f(&mut State::default()),
    })
}
