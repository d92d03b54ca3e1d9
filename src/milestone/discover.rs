//! Milestone discovery from rollouts alone: no score, no per-step reward, no subgoal list.
//!
//! Most agent tasks have no score channel and no walkthrough. [`MilestoneDiscovery`] mines
//! milestones from what every rollout has: each step's action text a_t, the response text
//! s_{t+1}, and the episode outcome R(τ). It works a batch at a time (a group of rollouts of
//! one task is what makes "common to successes" measurable), keeps a bounded memory per task
//! across batches, and outputs one flag per caller row, like
//! [`detect_milestones`](super::detect_milestones), so BEACON takes the flags like any other
//! detector's.
//!
//! # What counts as a milestone
//!
//! Actions are compared after normalisation (lower case, whitespace collapsed), responses
//! sentence by sentence (split at `.`, `!`, `?`, line breaks; exact text after trimming).
//! Step t of a trajectory is an **event** when
//! - its action is the **first occurrence** of that action in the trajectory (a repeat
//!   completes nothing new), and
//! - its action is not a **no-op**: an action that, done twice at most `noop_window` steps
//!   apart (default 3: in a row, or with one or two other steps between) anywhere in the
//!   data, got the identical response both times. Either it changes nothing (`look`,
//!   `inventory`) or what it changed was undone right after (`drop knife`, `take knife`,
//!   `drop knife`): no progress in both cases, and the data shows it, no word list is
//!   involved. No-ops are remembered across tasks.
//!
//! An action that is only digits answers the previous step's prompt (`0` to "which one do you
//! mean?") and is keyed as the previous action combined with the digits, so two answers to
//! two different prompts are two actions.
//!
//! The event's key is (action, gist of the response), the gist being the response's first
//! sentence, so a failed attempt ("You can't see any such thing.") is not the same event as
//! the successful one. An event is **novel** when its gist has not been seen earlier in the
//! trajectory (the second "The door is now open." is no new progress).
//!
//! For a task with remembered successful rollouts τ_1 … τ_n (the last `max_successes`, this
//! batch's included), the milestone events are
//!
//! ```text
//! M = { e : #{ i : e is a novel event of τ_i } ≥ ⌈min_support · n⌉ }
//! ```
//!
//! and step t of any trajectory of the task (success or failure) is flagged when it is an
//! event with key in M. A group without success uses the memory.
//!
//! # Before the first success
//!
//! A task never seen succeeding has no M. Its milestones then come from a signal that needs
//! no success (`novelty`, on by default): **irreversible first visits**. Read each rollout as
//! a walk through states s_0, s_1, …, s_T (s_0 = the first step's `observation`, s_{t+1} =
//! step t's response, compared whole, sentence by sentence). A transition (a → b) is
//! *reversed* when some rollout, after reaching b from a, later shows a again; reversed
//! transitions are remembered over all tasks and batches. Step t is flagged when
//!
//! ```text
//! s_{t+1} ∉ {s_0, …, s_t}   and   s_t ≠ s_{t+1}   and   (s_t → s_{t+1}) never seen reversed
//! ```
//!
//! that is, the rollout reached a state it had not been in by a move nobody has been seen to
//! undo (a door passed, not a key picked up and dropped again), and s_{t+1} is not a **dead
//! end**: a state in which a failed rollout ended while another rollout of its group went on
//! longer (the environment stopped it, not the step budget), and from which no rollout has
//! been seen to go on. A trapdoor that ends the episode in failure is a first visit nobody
//! undoes; it precedes failure every time and success never, so it is a decoy, not a
//! milestone. Dead ends are remembered over all tasks (at most `max_edges`). It fits environments whose
//! responses describe the state; where responses only echo the action (most text games)
//! little is ever seen reversed and it over-flags, so it is used only until the task's first
//! success.
//!
//! **Feedback channel.** Some environments print progress feedback ("Your score has just gone
//! up by one point."). Discovery finds such sentences without knowing their words: a sentence
//! is *feedback* when, within one group with a success, it appears in every successful
//! rollout at two steps or more, after at least `feedback_min_verbs` distinct action verbs (first words), in a
//! larger share of success steps than of failure steps, and in at most
//! `feedback_max_step_fraction` of all steps (the prompt `>` that ends every response is not
//! feedback), and never in the response of a no-op (a no-op makes no progress to report: a
//! status line naming the current room is a state, not feedback). Feedback sentences are remembered across tasks. When a task shows feedback
//! (in this batch or before), its milestones are the events whose response carries a feedback
//! sentence instead of the support rule. It is off by default (`feedback: false`): such
//! sentences are the environment's progress messages, a score in words, and discovery is meant
//! to work without any environment signal (`feedback: true` turns it on where that is wanted).
//!
//! # Memory bound
//!
//! Per task: at most `max_successes` event lists of at most `max_events` keys (8 bytes each);
//! at most `max_tasks` tasks (the least recently updated is forgotten first); at most
//! `max_noops` no-op actions and `max_feedback` feedback sentences over all tasks (later ones
//! are ignored once full), and `max_edges` reversed transitions (512 KiB by default). With the
//! defaults the task memory is at most 1024 × 16 × 256 × 8 B = 32 MiB, in practice far less
//! (one list per success, as long as its events).
//!
//! # Determinism
//!
//! The same sequence of calls gives the same flags: keys are fixed hashes, ties are broken
//! by key order, and nothing depends on table iteration order.
//!
//! ```
//! use beacon_rl::milestone::discover::{DiscoveryConfig, MilestoneDiscovery};
//! use beacon_rl::milestone::Transition;
//! use beacon_rl::RolloutBatch;
//!
//! // One task, three rollouts: two succeed (R = 1), one fails.
//! let steps: [&[(&str, &str)]; 3] = [
//!     &[("look", "A room."), ("take key", "Taken."), ("open door", "You win.")],
//!     &[("take key", "Taken."), ("look", "A room."), ("look", "A room."), ("open door", "You win.")],
//!     &[("look", "A room."), ("sing", "You sing.")],
//! ];
//! let lens: Vec<usize> = steps.iter().map(|s| s.len()).collect();
//! let batch = RolloutBatch::from_blocks(3, &lens, vec![1.0, 1.0, 0.0])?;
//! let rows: Vec<(&str, &str)> = steps.iter().flat_map(|s| s.iter().copied()).collect();
//!
//! let mut discovery = MilestoneDiscovery::new(DiscoveryConfig::default())?;
//! let flags = discovery.discover(&batch, &["open-the-door"], |row, _step| Transition {
//!     action: rows[row].0,
//!     next_observation: rows[row].1,
//!     ..Transition::default()
//! })?;
//! // `look` repeated gave the same response: a no-op. Both successes took the key and
//! // opened the door; the failure did neither.
//! assert_eq!(flags, [false, true, true, true, false, false, true, false, false]);
//! # Ok::<(), beacon_rl::Error>(())
//! ```

mod baseline;
mod feedback;
mod text;

pub use baseline::frequency_baseline;

use std::collections::VecDeque;

use self::feedback::{SentenceStats, MAX_VERBS};
use self::text::{action_keys, pair, response_keys, KeyMap, KeySet};
use super::Transition;
use crate::batch::RolloutBatch;
use crate::error::{check_len, check_out_len, Range, Result};
#[cfg(doc)]
use crate::Error;

/// Settings of [`MilestoneDiscovery`]; every cap bounds its memory.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct DiscoveryConfig {
    /// A rollout succeeded when its terminal reward R(τ) is above this. Default 0.
    pub success_threshold: f64,
    /// Share of the remembered successes of a task that must show an event for it to be a
    /// milestone, in (0, 1]. Default 1 (every success).
    pub min_support: f64,
    /// Tasks remembered; the least recently updated is forgotten first. Default 1024.
    pub max_tasks: usize,
    /// Successful rollouts remembered per task (the most recent). Default 16.
    pub max_successes: usize,
    /// Events kept per remembered rollout (its first ones). Default 256.
    pub max_events: usize,
    /// No-op actions remembered over all tasks. Default 4096.
    pub max_noops: usize,
    /// Largest distance in steps between two occurrences of an action with the identical
    /// response that makes it a no-op (module docs), in 1..=64; 1 = only in a row.
    /// Default 3.
    pub noop_window: usize,
    /// Feedback sentences remembered over all tasks. Default 64.
    pub max_feedback: usize,
    /// Look for a feedback channel (module docs). Default false: the sentences it finds are
    /// the environment's own progress messages (a score in words), an environment signal.
    pub feedback: bool,
    /// Distinct action verbs a feedback sentence must follow, in 2..=8. Default 3.
    pub feedback_min_verbs: usize,
    /// Largest share of a group's steps a feedback sentence may appear in, in (0, 1].
    /// Default 0.75.
    pub feedback_max_step_fraction: f64,
    /// Flag irreversible first visits in tasks never seen succeeding (module docs,
    /// "Before the first success"). Default true.
    pub novelty: bool,
    /// Reversed transitions remembered over all tasks (later ones are ignored once full).
    /// Default 65536.
    pub max_edges: usize,
}

impl Default for DiscoveryConfig {
    fn default() -> Self {
        Self {
            success_threshold: 0.0,
            min_support: 1.0,
            max_tasks: 1024,
            max_successes: 16,
            max_events: 256,
            max_noops: 4096,
            noop_window: 3,
            max_feedback: 64,
            feedback: false,
            feedback_min_verbs: 3,
            feedback_max_step_fraction: 0.75,
            novelty: true,
            max_edges: 1 << 16,
        }
    }
}

crate::setters::with_setters! {
    DiscoveryConfig, "use beacon_rl::milestone::discover::DiscoveryConfig;", DiscoveryConfig::default();
    /// Sets the success threshold on R(τ) (default 0; finite).
    with_success_threshold(success_threshold: f64) = 0.5;
    /// Sets the share of remembered successes an event needs (default 1; in (0, 1]).
    with_min_support(min_support: f64) = 0.5;
    /// Sets the tasks remembered (default 1024; ≥ 1).
    with_max_tasks(max_tasks: usize) = 16;
    /// Sets the successful rollouts remembered per task (default 16; ≥ 1).
    with_max_successes(max_successes: usize) = 4;
    /// Sets the events kept per remembered rollout (default 256; ≥ 1).
    with_max_events(max_events: usize) = 64;
    /// Sets the no-op actions remembered (default 4096; ≥ 1).
    with_max_noops(max_noops: usize) = 128;
    /// Sets the distance within which a repeat with the identical response makes a no-op
    /// (default 3; in 1..=64).
    with_noop_window(noop_window: usize) = 1;
    /// Sets the feedback sentences remembered (default 64; ≥ 1).
    with_max_feedback(max_feedback: usize) = 8;
    /// Sets whether to look for a feedback channel (default false).
    with_feedback(feedback: bool) = true;
    /// Sets the distinct verbs a feedback sentence must follow (default 3; in 2..=8).
    with_feedback_min_verbs(feedback_min_verbs: usize) = 4;
    /// Sets the largest share of a group's steps a feedback sentence may appear in (default
    /// 0.75; in (0, 1]).
    with_feedback_max_step_fraction(feedback_max_step_fraction: f64) = 0.5;
    /// Sets whether tasks never seen succeeding get irreversible first visits (default true).
    with_novelty(novelty: bool) = false;
    /// Sets the reversed transitions remembered (default 65536; ≥ 1).
    with_max_edges(max_edges: usize) = 1024;
}

const FINITE: Range = Range {
    expected: "finite",
    ok: f64::is_finite,
};
const SHARE: Range = Range {
    expected: "in (0, 1]",
    ok: |v| v > 0.0 && v <= 1.0,
};
const AT_LEAST_ONE: Range = Range {
    expected: ">= 1",
    ok: |v| v >= 1.0,
};
const WINDOW: Range = Range {
    expected: "an integer in 1..=64",
    ok: |v| (1.0..=64.0).contains(&v),
};
const VERBS: Range = Range {
    expected: "an integer in 2..=8",
    ok: |v| (2.0..=MAX_VERBS as f64).contains(&v),
};

impl DiscoveryConfig {
    /// Checks every field's range.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the first field out of range.
    ///
    /// ```
    /// use beacon_rl::milestone::discover::DiscoveryConfig;
    /// use beacon_rl::Error;
    /// let cfg = DiscoveryConfig::default().with_min_support(0.0);
    /// assert!(matches!(cfg.validate(), Err(Error::InvalidConfig { name: "min_support", .. })));
    /// ```
    pub fn validate(&self) -> Result<()> {
        FINITE.check("success_threshold", self.success_threshold)?;
        SHARE.check("min_support", self.min_support)?;
        for (name, v) in [
            ("max_tasks", self.max_tasks),
            ("max_successes", self.max_successes),
            ("max_events", self.max_events),
            ("max_noops", self.max_noops),
            ("max_feedback", self.max_feedback),
            ("max_edges", self.max_edges),
        ] {
            AT_LEAST_ONE.check(name, v as f64)?;
        }
        VERBS.check("feedback_min_verbs", self.feedback_min_verbs as f64)?;
        WINDOW.check("noop_window", self.noop_window as f64)?;
        SHARE.check("feedback_max_step_fraction", self.feedback_max_step_fraction)?;
        Ok(())
    }
}

/// What discovery remembers about one task.
#[derive(Debug, Clone, Default)]
struct TaskMemory {
    /// Novel events of the last successful rollouts, each sorted and deduplicated.
    successes: VecDeque<Vec<u64>>,
    /// The task has shown a feedback sentence.
    feedback: bool,
    /// Call number of the last update (for forgetting the least recently updated task).
    last_used: u64,
}

/// Keys of one step.
#[derive(Debug, Clone, Copy, Default)]
struct StepKeys {
    action: u64,
    verb: u64,
    whole: u64,
    gist: u64,
    /// Key of the state before the step: the previous response's `whole`, or the
    /// observation's for a trajectory's first step.
    from: u64,
    /// Range of this step's sentence keys in `Workspace::sentences`.
    sentences: (usize, usize),
}

/// Buffers reused across calls.
#[derive(Debug, Clone, Default)]
struct Workspace {
    /// Keys per internal step (trajectory-major order).
    steps: Vec<StepKeys>,
    sentences: Vec<u64>,
    stats: KeyMap<SentenceStats>,
    counts: KeyMap<u32>,
    seen_actions: KeySet,
    seen_gists: KeySet,
    events: Vec<u64>,
    /// End of each success's events in `events`.
    ends: Vec<usize>,
    found: Vec<u64>,
    /// Last position of each state in the current trajectory (reversal search).
    last: KeyMap<usize>,
    /// An action (or task name) normalised before it is hashed.
    normalised: Vec<u8>,
    /// Per internal step, the event found there by `for_each_event` (read back when flagging).
    events_of: Vec<Event>,
}

/// What `for_each_event` found at one step.
#[derive(Debug, Clone, Copy, Default)]
struct Event {
    key: u64,
    /// The step is an event (a first, non-no-op action).
    event: bool,
    novel: bool,
    feedback: bool,
}

/// Whether some rollout of group `g` takes a step from state `state` (its start state or a
/// state it reached before its last step).
fn trajs_continue_from(batch: &RolloutBatch, steps: &[StepKeys], g: usize, state: u64) -> bool {
    batch
        .group_trajectories(g)
        .any(|j| steps[batch.trajectory_steps(j)].iter().any(|s| s.from == state))
}

/// Online milestone discovery with a bounded per-task memory (module docs).
///
/// One [`discover`](Self::discover) call per batch; the memory carries over between calls.
#[derive(Debug, Clone)]
pub struct MilestoneDiscovery {
    config: DiscoveryConfig,
    tasks: KeyMap<TaskMemory>,
    noops: KeySet,
    feedback: KeySet,
    /// Transitions (state before, state after) seen undone: the state before came back.
    reversed: KeySet,
    /// States failed rollouts ended in early and no rollout went on from (module docs).
    dead_ends: KeySet,
    calls: u64,
    ws: Workspace,
}

impl MilestoneDiscovery {
    /// A discovery with an empty memory.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] from [`DiscoveryConfig::validate`].
    ///
    /// ```
    /// use beacon_rl::milestone::discover::{DiscoveryConfig, MilestoneDiscovery};
    /// let d = MilestoneDiscovery::new(DiscoveryConfig::default())?;
    /// assert_eq!(d.num_tasks(), 0);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn new(config: DiscoveryConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self {
            config,
            tasks: KeyMap::default(),
            noops: KeySet::default(),
            feedback: KeySet::default(),
            reversed: KeySet::default(),
            dead_ends: KeySet::default(),
            calls: 0,
            ws: Workspace::default(),
        })
    }

    /// The settings.
    pub fn config(&self) -> &DiscoveryConfig {
        &self.config
    }

    /// Number of tasks in memory (at most `max_tasks`).
    pub fn num_tasks(&self) -> usize {
        self.tasks.len()
    }

    /// Number of no-op actions and feedback sentences learned so far.
    ///
    /// ```
    /// # use beacon_rl::milestone::discover::{DiscoveryConfig, MilestoneDiscovery};
    /// let d = MilestoneDiscovery::new(DiscoveryConfig::default())?;
    /// assert_eq!(d.num_learned(), (0, 0));
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn num_learned(&self) -> (usize, usize) {
        (self.noops.len(), self.feedback.len())
    }

    /// Forgets everything learned (tasks, no-ops, feedback sentences, reversed transitions,
    /// dead ends).
    pub fn clear(&mut self) {
        self.tasks.clear();
        self.noops.clear();
        self.feedback.clear();
        self.reversed.clear();
        self.dead_ends.clear();
    }

    /// Discovers the milestones of one batch, updates the memory, and returns one flag per
    /// caller row.
    ///
    /// `tasks[g]` names the task of group g (rollouts of one task share a memory across
    /// batches; the group id works when a group is one task). `step(row, t)` gives row's
    /// transition (t = its 0-based step in its trajectory); only its `action` and
    /// `next_observation` are read, and with `novelty` the first step's `observation` (the
    /// start state s_0, module docs): scores, flags and subgoals are ignored.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] when `tasks.len() != batch.num_groups()`;
    /// [`Error::CapacityExceeded`] when the flags or the batch's row index cannot be allocated
    /// (a [`RolloutBatch::from_offsets`] batch's row count is a claim no column backs here).
    ///
    /// ```
    /// use beacon_rl::milestone::discover::{DiscoveryConfig, MilestoneDiscovery};
    /// use beacon_rl::milestone::Transition;
    /// use beacon_rl::RolloutBatch;
    ///
    /// let mut d = MilestoneDiscovery::new(DiscoveryConfig::default())?;
    /// let one = RolloutBatch::from_blocks(1, &[2], vec![1.0])?; // one success
    /// let acts = ["take key", "open door"];
    /// let t = |row: usize, _| Transition { action: acts[row], next_observation: acts[row], ..Transition::default() };
    /// assert_eq!(d.discover(&one, &["door"], t)?, [true, true]);
    /// // Next batch: the task fails, and only opens the door; the memory still knows it.
    /// let fail = RolloutBatch::from_blocks(1, &[1], vec![0.0])?;
    /// let t = |_, _| Transition { action: "open door", next_observation: "open door", ..Transition::default() };
    /// assert_eq!(d.discover(&fail, &["door"], t)?, [true]);
    /// // A task never seen succeeding: a first visit nobody was seen to undo (module docs).
    /// assert_eq!(d.discover(&fail, &["window"], t)?, [true]);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn discover<'a, T, F>(&mut self, batch: &RolloutBatch, tasks: &[T], step: F) -> Result<Vec<bool>>
    where
        T: AsRef<str>,
        F: FnMut(usize, usize) -> Transition<'a>,
    {
        check_len("tasks", batch.num_groups(), tasks.len())?;
        batch.try_step_rows()?;
        let mut flags = batch.try_row_flags()?;
        self.discover_into(batch, tasks, step, &mut flags)?;
        Ok(flags)
    }

    /// [`discover`](Self::discover) into a caller-owned buffer of one flag per row (every
    /// row is written).
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] when `tasks.len() != batch.num_groups()`,
    /// [`Error::OutputShape`] when `flags.len() != batch.num_steps()`,
    /// [`Error::CapacityExceeded`] when the batch's row index cannot be allocated. On error
    /// the memory is unchanged.
    ///
    /// ```
    /// # use beacon_rl::milestone::discover::{DiscoveryConfig, MilestoneDiscovery};
    /// # use beacon_rl::milestone::Transition;
    /// # use beacon_rl::{Error, RolloutBatch};
    /// let mut d = MilestoneDiscovery::new(DiscoveryConfig::default())?;
    /// let batch = RolloutBatch::from_blocks(1, &[2], vec![1.0])?;
    /// let mut flags = [false; 3];
    /// let err = d.discover_into(&batch, &["t"], |_, _| Transition::default(), &mut flags);
    /// assert!(matches!(err, Err(Error::OutputShape { .. })));
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn discover_into<'a, T, F>(
        &mut self,
        batch: &RolloutBatch,
        tasks: &[T],
        mut step: F,
        flags: &mut [bool],
    ) -> Result<()>
    where
        T: AsRef<str>,
        F: FnMut(usize, usize) -> Transition<'a>,
    {
        check_len("tasks", batch.num_groups(), tasks.len())?;
        check_out_len("flags", batch.num_steps(), flags.len())?;
        batch.try_step_rows()?;
        self.calls += 1;
        self.read_keys(batch, &mut step);
        self.learn_noops(batch);
        if self.config.novelty {
            self.learn_reversals(batch);
            for g in 0..batch.num_groups() {
                self.learn_dead_ends(batch, g);
            }
        }
        if self.config.feedback {
            for g in 0..batch.num_groups() {
                self.learn_feedback(batch, g);
            }
        }
        for (g, task) in tasks.iter().enumerate() {
            let task = action_keys(task.as_ref(), &mut self.ws.normalised).0;
            self.discover_group(batch, g, task, flags);
        }
        self.forget();
        Ok(())
    }

    /// [`discover`](Self::discover) over recorded trajectories: each group's task is its
    /// `group_id`, and only each step's `action` and `observation` are read (never `score`,
    /// `reward`, `milestone` or `new_subgoals`).
    ///
    /// # Errors
    /// None in practice (the record batch is consistent by construction); the signature
    /// keeps [`discover`](Self::discover)'s.
    ///
    /// ```
    /// use beacon_rl::milestone::discover::{DiscoveryConfig, MilestoneDiscovery};
    /// use beacon_rl::record::{RecordBatch, StepRecord, TrajectoryRecord};
    ///
    /// let mut win = TrajectoryRecord::new("door", "a", 1.0);
    /// win.steps = vec![StepRecord::new("take key", "Taken.", 0.0, false), StepRecord::new("open door", "Open.", 1.0, true)];
    /// let mut lose = TrajectoryRecord::new("door", "b", 0.0);
    /// lose.steps = vec![StepRecord::new("take key", "Taken.", 0.0, true)];
    /// let records = [win, lose];
    /// let rb = RecordBatch::new(&records)?;
    /// let mut d = MilestoneDiscovery::new(DiscoveryConfig::default())?;
    /// assert_eq!(d.discover_records(&rb)?, [true, true, true]);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    #[cfg(feature = "serde")]
    pub fn discover_records(&mut self, records: &crate::record::RecordBatch<'_>) -> Result<Vec<bool>> {
        let batch = records.batch();
        let tasks: Vec<&str> = (0..batch.num_groups())
            .map(|g| {
                let j = batch.group_trajectories(g).start;
                let (record, _) = records.row_location(batch.trajectory_rows(j)[0]);
                records.records()[record].group_id.as_str()
            })
            .collect();
        self.discover(batch, &tasks, |row, _| records.transition(row))
    }

    /// Fills the workspace with every step's keys, in trajectory-major order.
    fn read_keys<'a, F>(&mut self, batch: &RolloutBatch, step: &mut F)
    where
        F: FnMut(usize, usize) -> Transition<'a>,
    {
        let ws = &mut self.ws;
        ws.steps.clear();
        ws.sentences.clear();
        let novelty = self.config.novelty;
        for j in 0..batch.num_trajectories() {
            let (mut from, mut prev_action) = (0, 0);
            for (t, &row) in batch.trajectory_rows(j).iter().enumerate() {
                let tr = step(row, t);
                if t == 0 && novelty {
                    // The start state, hashed like a response (so a return to it is seen).
                    let start = ws.sentences.len();
                    from = response_keys(tr.observation, &mut ws.sentences).0;
                    ws.sentences.truncate(start);
                }
                let (mut action, verb) = action_keys(tr.action, &mut ws.normalised);
                // A bare number answers the previous step's prompt ("0" to "which one do you
                // mean?"): it is that action, resolved, not a new one.
                if t > 0 && !ws.normalised.is_empty() && ws.normalised.iter().all(u8::is_ascii_digit) {
                    action = pair(prev_action, action);
                }
                prev_action = action;
                let start = ws.sentences.len();
                let (whole, gist) = response_keys(tr.next_observation, &mut ws.sentences);
                if !self.config.feedback {
                    ws.sentences.truncate(start);
                }
                ws.steps.push(StepKeys {
                    action,
                    verb,
                    whole,
                    gist,
                    from,
                    sentences: (start, ws.sentences.len()),
                });
                from = whole;
            }
        }
        ws.events_of.clear();
        ws.events_of.resize(ws.steps.len(), Event::default());
    }

    /// An action done twice at most `noop_window` steps apart with the identical response
    /// both times is a no-op.
    fn learn_noops(&mut self, batch: &RolloutBatch) {
        for j in 0..batch.num_trajectories() {
            let steps = &self.ws.steps[batch.trajectory_steps(j)];
            // One pass per distance: a tight zip, no bounds check, no slice per step.
            for d in 1..=self.config.noop_window {
                let later = steps.get(d..).unwrap_or_default();
                for (a, b) in steps.iter().zip(later) {
                    let repeat = a.action == b.action && a.whole == b.whole;
                    if repeat && self.noops.len() < self.config.max_noops {
                        self.noops.insert(a.action);
                    }
                }
            }
        }
    }

    /// A transition (a → b) is *reversed* when a comes back after b later in the same
    /// rollout; reversed transitions are remembered over all tasks.
    fn learn_reversals(&mut self, batch: &RolloutBatch) {
        let ws = &mut self.ws;
        for j in 0..batch.num_trajectories() {
            let range = batch.trajectory_steps(j);
            let steps = &ws.steps[range];
            let Some(first) = steps.first() else { continue };
            // Position 0 is the start state, position t + 1 the state after step t.
            ws.last.clear();
            ws.last.insert(first.from, 0);
            for (t, s) in steps.iter().enumerate() {
                ws.last.insert(s.whole, t + 1);
            }
            for (t, s) in steps.iter().enumerate() {
                let back = s.from != s.whole && ws.last.get(&s.from).is_some_and(|&p| p > t + 1);
                if back && self.reversed.len() < self.config.max_edges {
                    self.reversed.insert(pair(s.from, s.whole));
                }
            }
        }
    }

    /// A state a failed rollout of group `g` ended in, while another rollout of the group
    /// went on longer, is a dead end, unless some rollout went on from it (then it is not,
    /// now or later).
    fn learn_dead_ends(&mut self, batch: &RolloutBatch, g: usize) {
        let trajs = batch.group_trajectories(g);
        let longest = trajs.clone().map(|j| batch.trajectory_steps(j).len()).max();
        let longest = longest.unwrap_or(0);
        // A step's start state was gone on from: not a dead end (any more).
        for j in trajs.clone() {
            for s in &self.ws.steps[batch.trajectory_steps(j)] {
                self.dead_ends.remove(&s.from);
            }
        }
        for j in trajs {
            let steps = &self.ws.steps[batch.trajectory_steps(j)];
            let Some(last) = steps.last() else { continue };
            let early = steps.len() < longest;
            let gone_on = trajs_continue_from(batch, &self.ws.steps, g, last.whole);
            if early && !self.is_success(batch, j) && !gone_on && self.dead_ends.len() < self.config.max_edges
            {
                self.dead_ends.insert(last.whole);
            }
        }
    }

    /// Flags the irreversible first visits of trajectory `j` (a task without success).
    fn flag_novelty(&mut self, batch: &RolloutBatch, j: usize, flags: &mut [bool]) {
        let ws = &mut self.ws;
        let rows = batch.trajectory_rows(j);
        let range = batch.trajectory_steps(j);
        ws.seen_gists.clear();
        if let Some(first) = ws.steps.get(range.start) {
            ws.seen_gists.insert(first.from);
        }
        for (t, i) in range.enumerate() {
            let s = ws.steps[i];
            let first_visit = ws.seen_gists.insert(s.whole);
            flags[rows[t]] = first_visit
                && s.from != s.whole
                && !self.reversed.contains(&pair(s.from, s.whole))
                && !self.dead_ends.contains(&s.whole);
        }
    }

    fn is_success(&self, batch: &RolloutBatch, j: usize) -> bool {
        batch.terminal_rewards()[j] > self.config.success_threshold
    }

    /// Finds the feedback sentences of group `g` (module docs) and remembers them.
    fn learn_feedback(&mut self, batch: &RolloutBatch, g: usize) {
        let ws = &mut self.ws;
        feedback::find(
            batch,
            g,
            &self.config,
            &ws.steps,
            &ws.sentences,
            &mut ws.stats,
            &mut ws.found,
        );
        // A sentence a no-op's response shows is a state line, not feedback (module docs).
        // Checked on the few candidates only: the search itself stays as it was.
        if !ws.found.is_empty() && !self.noops.is_empty() {
            for j in batch.group_trajectories(g) {
                for s in &ws.steps[batch.trajectory_steps(j)] {
                    if self.noops.contains(&s.action) {
                        let shown = &ws.sentences[s.sentences.0..s.sentences.1];
                        ws.found.retain(|k| !shown.contains(k));
                    }
                }
            }
        }
        for &key in &ws.found {
            if self.feedback.len() < self.config.max_feedback {
                self.feedback.insert(key);
            }
        }
    }

    /// Calls `f(t, key, novel, feedback)` for every event of trajectory `j` (step t of it).
    fn for_each_event(&mut self, batch: &RolloutBatch, j: usize, mut f: impl FnMut(usize, u64, bool, bool)) {
        let ws = &mut self.ws;
        ws.seen_actions.clear();
        ws.seen_gists.clear();
        let any_feedback = !self.feedback.is_empty();
        for (t, i) in batch.trajectory_steps(j).enumerate() {
            let s = ws.steps[i];
            let novel = ws.seen_gists.insert(s.gist);
            let first = ws.seen_actions.insert(s.action);
            if !first || self.noops.contains(&s.action) {
                ws.events_of[i] = Event::default();
                continue;
            }
            let feedback = any_feedback
                && ws.sentences[s.sentences.0..s.sentences.1]
                    .iter()
                    .any(|k| self.feedback.contains(k));
            let key = pair(s.action, s.gist);
            ws.events_of[i] = Event {
                key,
                event: true,
                novel,
                feedback,
            };
            f(t, key, novel, feedback);
        }
    }

    /// [`for_each_event`](Self::for_each_event) again for trajectory `j`, from what its
    /// first call recorded (no hashing).
    fn for_each_recorded_event(
        &self,
        batch: &RolloutBatch,
        j: usize,
        mut f: impl FnMut(usize, u64, bool, bool),
    ) {
        for (t, i) in batch.trajectory_steps(j).enumerate() {
            let e = self.ws.events_of[i];
            if e.event {
                f(t, e.key, e.novel, e.feedback);
            }
        }
    }

    fn discover_group(&mut self, batch: &RolloutBatch, g: usize, task: u64, flags: &mut [bool]) {
        let calls = self.calls;
        // This group's successes: their novel events, sorted and deduplicated.
        let mut group_feedback = false;
        // Events of every success of the group, one after the other, with their ends.
        let mut events = std::mem::take(&mut self.ws.events);
        let mut ends = std::mem::take(&mut self.ws.ends);
        events.clear();
        ends.clear();
        let max_events = self.config.max_events;
        for j in batch.group_trajectories(g) {
            let success = self.is_success(batch, j);
            let start = events.len();
            self.for_each_event(batch, j, |_, key, novel, fb| {
                group_feedback |= fb;
                if success && novel && events.len() - start < max_events {
                    events.push(key);
                }
            });
            if success {
                events[start..].sort_unstable();
                ends.push(events.len());
            }
        }
        if !ends.is_empty() {
            let cap = self.config.max_successes;
            let memory = self.tasks.entry(task).or_default();
            let mut start = 0;
            for &end in &ends {
                // The oldest list's buffer is reused once the memory is full.
                let mut list = if memory.successes.len() == cap {
                    memory.successes.pop_front().unwrap_or_default()
                } else {
                    Vec::new()
                };
                list.clear();
                list.extend_from_slice(&events[start..end]);
                list.dedup();
                memory.successes.push_back(list);
                start = end;
            }
        }
        self.ws.events = events;
        self.ws.ends = ends;
        let Some(memory) = self.tasks.get_mut(&task) else {
            // Never seen succeeding: irreversible first visits, or no milestone.
            for j in batch.group_trajectories(g) {
                if self.config.novelty {
                    self.flag_novelty(batch, j, flags);
                } else {
                    for &row in batch.trajectory_rows(j) {
                        flags[row] = false;
                    }
                }
            }
            return;
        };
        memory.last_used = calls;
        memory.feedback |= group_feedback;
        let use_feedback = memory.feedback;
        let counts = &mut self.ws.counts;
        counts.clear();
        for list in &memory.successes {
            for &key in list {
                *counts.entry(key).or_insert(0) += 1;
            }
        }
        let n = memory.successes.len() as f64;
        let need = (self.config.min_support * n).ceil().max(1.0) as u32;
        let mut counts = std::mem::take(&mut self.ws.counts);
        for j in batch.group_trajectories(g) {
            let rows = batch.trajectory_rows(j);
            for &row in rows {
                flags[row] = false;
            }
            self.for_each_recorded_event(batch, j, |t, key, novel, fb| {
                flags[rows[t]] = if use_feedback {
                    fb
                } else {
                    novel && counts.get(&key).is_some_and(|&c| c >= need)
                };
            });
        }
        counts.clear();
        self.ws.counts = counts;
    }

    /// Forgets the least recently updated tasks beyond `max_tasks`.
    fn forget(&mut self) {
        while self.tasks.len() > self.config.max_tasks {
            let oldest = self.tasks.iter().map(|(&k, m)| (m.last_used, k)).min();
            if let Some((_, k)) = oldest {
                self.tasks.remove(&k);
            }
        }
    }
}
