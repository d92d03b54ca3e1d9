//! What [`MilestoneDiscovery`](super::discovery::MilestoneDiscovery) keeps between and within calls:
//! the per-task memory, each step's keys, and the buffers reused across calls.

use std::collections::VecDeque;

use super::feedback::SentenceStats;
use super::text::{KeyMap, KeySet};

/// What discovery remembers about one task.
#[derive(Debug, Clone, Default)]
pub(super) struct TaskMemory {
    /// Novel events of the last successful rollouts, each sorted and deduplicated.
    pub(super) successes: VecDeque<Vec<u64>>,
    /// The task has shown a feedback sentence.
    pub(super) feedback: bool,
    /// Call number of the last update (for forgetting the least recently updated task).
    pub(super) last_used: u64,
}

/// Who got one response, remembered over all tasks: the first action (and its verb and
/// task), and whether another action of that verb, and another task, got it since.
#[derive(Debug, Clone, Copy)]
pub(super) struct Response {
    action: u64,
    verb: u64,
    task: u64,
    other_action: bool,
    other_task: bool,
}

impl Response {
    pub(super) fn first(action: u64, verb: u64, task: u64) -> Self {
        Self {
            action,
            verb,
            task,
            other_action: false,
            other_task: false,
        }
    }

    /// Records that `action` (of `verb`, in `task`) got the response; returns (common,
    /// shared): whether different actions of the first one's verb got it, and whether they
    /// did in different tasks too.
    pub(super) fn also(&mut self, action: u64, verb: u64, task: u64) -> (bool, bool) {
        if verb == self.verb {
            self.other_action |= action != self.action;
            self.other_task |= task != self.task;
        }
        (self.other_action, self.other_action && self.other_task)
    }
}

/// Keys of one step.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct StepKeys {
    pub(super) action: u64,
    pub(super) verb: u64,
    pub(super) whole: u64,
    pub(super) gist: u64,
    /// The gist with its numbers masked: the event's key, so a reading matches whatever value
    /// it read (novelty still compares the exact gist).
    pub(super) shape: u64,
    /// Key of the state before the step: the previous response's `whole`, or the
    /// observation's for a trajectory's first step.
    pub(super) from: u64,
    /// Range of this step's sentence keys in `Workspace::sentences`.
    pub(super) sentences: (usize, usize),
    /// The next step answers this one with a bare number: this step was a prompt.
    pub(super) answered: bool,
    /// Number of sentences of the response (a description when many: module docs).
    pub(super) length: u32,
}

/// Buffers reused across calls.
#[derive(Debug, Clone, Default)]
pub(super) struct Workspace {
    /// Keys per internal step (trajectory-major order).
    pub(super) steps: Vec<StepKeys>,
    pub(super) sentences: Vec<u64>,
    pub(super) stats: KeyMap<SentenceStats>,
    pub(super) counts: KeyMap<u32>,
    pub(super) seen_actions: KeySet,
    pub(super) seen_gists: KeySet,
    /// Response lengths of the current group, sorted for their median.
    pub(super) lengths: Vec<u32>,
    /// Responses of the current group with at least this many sentences are descriptions.
    pub(super) description_from: u32,
    pub(super) events: Vec<u64>,
    /// End of each success's events in `events`.
    pub(super) ends: Vec<usize>,
    pub(super) found: Vec<u64>,
    /// Last position of each state in the current trajectory (reversal search).
    pub(super) last: KeyMap<usize>,
    /// The task key of each group of the current batch.
    pub(super) tasks: Vec<u64>,
    /// An action (or task name) normalised before it is hashed.
    pub(super) normalised: Vec<u8>,
    /// A first sentence with its numbers masked before it is hashed.
    pub(super) shaped: Vec<u8>,
    /// Flagged positions of the current trajectory, and the gists of one excursion's start
    /// (`excursion::drop_excursions`).
    pub(super) flagged: Vec<usize>,
    pub(super) excursion_gists: KeySet,
    /// Per internal step, the event found there by `for_each_event` (read back when flagging).
    pub(super) events_of: Vec<Event>,
}

/// What `for_each_event` found at one step.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Event {
    pub(super) key: u64,
    /// The step is an event (a first, non-no-op action).
    pub(super) event: bool,
    pub(super) novel: bool,
    pub(super) feedback: bool,
}

#[cfg(test)]
mod tests {
    use super::Response;

    #[test]
    fn a_response_is_shared_once_other_actions_and_other_tasks_got_it() {
        // (action, verb, task): door 1 in task a first.
        let mut r = Response::first(1, 10, 100);
        assert_eq!(
            r.also(1, 10, 200),
            (false, false),
            "the same door in another task"
        );
        assert_eq!(r.also(2, 11, 300), (false, false), "another verb is ignored");
        assert_eq!(
            r.also(2, 10, 100),
            (true, true),
            "another door: both conditions now hold"
        );
        // Common but in one task only.
        let mut r = Response::first(1, 10, 100);
        assert_eq!(r.also(2, 10, 100), (true, false));
        assert_eq!(r.also(3, 10, 100), (true, false));
    }
}
