//! [`MilestoneDiscovery`]: its memory, its public calls, and the per-batch order of the
//! rules (read the keys, learn no-ops, reversals, dead ends and feedback, then flag each
//! group).

use super::config::DiscoveryConfig;
use super::region::Regions;
use super::text::{action_keys, pair, response_keys, KeyMap, KeySet};
use super::workspace::{Event, Response, StepKeys, TaskMemory, Workspace};
use crate::batch::RolloutBatch;
use crate::error::{check_len, check_out_len, Result};
use crate::milestone::Transition;
#[cfg(doc)]
use crate::Error;
use std::collections::hash_map::Entry;

/// Milestone discovery from rollouts alone: no score, no per-step reward, no subgoal list.
///
/// Most agent tasks have no score channel and no walkthrough. [`MilestoneDiscovery`] mines
/// milestones from what every rollout has: each step's action text a_t, the response text
/// s_{t+1}, and the episode outcome R(τ). It works a batch at a time (a group of rollouts of
/// one task is what makes "common to successes" measurable), keeps a bounded memory per task
/// across batches, and outputs one flag per caller row, like
/// [`detect_milestones`](crate::milestone::detect_milestones), so BEACON takes the flags like any other
/// detector's.
///
/// # What counts as a milestone
///
/// Actions are compared after normalisation (lower case, whitespace collapsed), responses
/// sentence by sentence (split at `.`, `!`, `?`, line breaks; exact text after trimming).
/// Step t of a trajectory is an **event** when
/// - its action is the **first occurrence** of that action in the trajectory (a repeat
///   completes nothing new), and
/// - its action is not a **no-op**: an action that, done twice at most `noop_window` steps
///   apart (default 3: in a row, or with one or two other steps between) anywhere in the
///   data, got the same first sentence of its response both times (what follows it, such as
///   a room's listing, may differ). Either it changes nothing (`look`, `inventory`) or what
///   it changed was undone right after (`drop knife`, `take knife`, `drop knife`): no
///   progress in both cases, and the data shows it, no word list is involved. No-ops are
///   remembered across tasks;
/// - it is not a **prompt**: a step the next step answers with a bare number; and
/// - its response is not a **description**: a response of at least 10 sentences and at
///   least 3 times as many as the median response of its group (the batch's rollouts of the
///   task; the median counted as at least 1). An effect is reported in a line or a few ("You
///   move to the kitchen."); a response many times longer lists a place or what it holds
///   (ScienceWorld's `look around`, TextWorld's room on entering it): the agent looked, and
///   looking is no progress. The floor of 10 keeps a line an environment appends to some
///   responses (its progress message) from turning a short response into a description or
///   from moving the median's bound below the listings.
///
/// An action that is only digits answers the previous step's prompt (`0` to "which one do you
/// mean?") and is keyed as the previous action combined with the digits, so two answers to
/// two different prompts are two actions. The prompt itself changed nothing yet; its answer
/// is the event.
///
/// The event's key is (action, shape of the gist of the response), the gist being the
/// response's first sentence, so a failed attempt ("You can't see any such thing.") is not
/// the same event as the successful one, and its shape the gist with every run of digits read
/// as one mark, so a reading ("the thermometer measures a temperature of 29 degrees") is one
/// event whatever value it read. An event is **novel** when its gist has not been seen earlier in the
/// trajectory (the second "The door is now open." is no new progress) and it is not
/// *shared*: got by different actions with the same verb (first word) and in different
/// tasks, anywhere in the memory (this batch or an earlier one). A shared response ("The
/// door is now open." after the kitchen door in one task and the hallway door in another)
/// acknowledges the kind of action, not which one, so none of those steps is new progress,
/// the first included (`shared_responses`, on by default). Which response only acknowledges
/// is a property of the environment, so shared responses are remembered over all tasks,
/// like no-ops. Within one task, two actions with one response may be the task's own
/// structure, which counts step by step (the brick moved onto each of two planes, "You move
/// the brick to the plane." both times): there the first is an event, the second no novelty.
/// The verb must match so that in an environment whose responses describe the state, a
/// state reached again another way (`drop key` back to "you hold nothing") does not unmake
/// the step that first reached it.
///
/// For a task with remembered successful rollouts τ_1 … τ_n (the last `max_successes`, this
/// batch's included), the milestone events are
///
/// ```text
/// M = { e : #{ i : e is a novel event of τ_i } ≥ ⌈min_support · n⌉ }
/// ```
///
/// (`min_support` = 0.6 by default: with 1, a step one success reached another way would
/// never count), and step t of any trajectory of the task (success or failure) is flagged
/// when it is an event with key in M, unless it is an **excursion**: the trajectory got one
/// response, particular to one action, to t's verb before and after it, with no other step flagged
/// between (`go to hallway`, `go to bedroom`, `go to hallway`: "You move to the hallway."
/// twice, the bedroom a detour however many successes took it). A detour in which something
/// counted keeps its steps. A response that different actions of the verb got (in any task)
/// closes no loop: it answers attempts ("You can't see any such thing."), not a place. A
/// group without success uses the memory.
///
/// # Before the first success
///
/// A task never seen succeeding has no M. Its milestones then come from a signal that needs
/// no success (`novelty`, on by default): **irreversible first visits**. Read each rollout as
/// a walk through states s_0, s_1, …, s_T (s_0 = the first step's `observation`, s_{t+1} =
/// step t's response, compared whole, sentence by sentence). A transition (a → b) is
/// *reversed* when some rollout, after reaching b from a, later shows a again; reversed
/// transitions are remembered over all tasks and batches. Step t is flagged when
///
/// ```text
/// s_{t+1} ∉ {s_0, …, s_t}   and   s_t ≠ s_{t+1}   and   (s_t → s_{t+1}) never seen reversed
/// ```
///
/// that is, the rollout reached a state it had not been in by a move nobody has been seen to
/// undo (a door passed, not a key picked up and dropped again), and s_{t+1} is not a **dead
/// end**: a state in which a failed rollout ended, either while another rollout of its group
/// went on longer and no rollout took a step from it (the environment stopped it, not the
/// step budget), or after it tried two different actions there that changed nothing and no
/// rollout left it (a cellar with no way out, where the budget ends the episode), and s_{t+1}
/// is not in a **dead region**: a set of states no success visited, in each of which as many
/// different actions were tried as in the state where most were (every action, once some
/// state has seen them all), and from which no step led out (a cellar whose keys can be
/// taken and dropped; module docs of `region` in the source). A trapdoor into any
/// of these is a first visit nobody undoes; it precedes failure every time and success never,
/// so it is a decoy, not a milestone. A state some rollout left is no dead end. Nor is
/// a **description** (above) flagged: a room listed by `look around` is a state not seen
/// before, but the agent only looked. Dead ends, and the states a dead region is found
/// among, are remembered over all tasks (at most `max_edges` of each). It fits environments whose
/// responses describe the state; where responses only echo the action (most text games)
/// little is ever seen reversed and it over-flags, so it is used only until the task's first
/// success.
///
/// **Feedback channel.** Some environments print progress feedback ("Your score has just gone
/// up by one point."). Discovery finds such sentences without knowing their words: a sentence
/// is *feedback* when, within one group with a success, it appears in every successful
/// rollout at two steps or more, after at least `feedback_min_verbs` distinct action verbs (first words), in a
/// larger share of success steps than of failure steps, and in at most
/// `feedback_max_step_fraction` of all steps (the prompt `>` that ends every response is not
/// feedback), and never in the response of a no-op (a no-op makes no progress to report: a
/// status line naming the current room is a state, not feedback). Feedback sentences are remembered across tasks. When a task shows feedback
/// (in this batch or before), its milestones are the events whose response carries a feedback
/// sentence instead of the support rule. It is off by default (`feedback: false`): such
/// sentences are the environment's progress messages, a score in words, and discovery is meant
/// to work without any environment signal (`feedback: true` turns it on where that is wanted).
///
/// # Memory bound
///
/// Per task: at most `max_successes` event lists of at most `max_events` keys (8 bytes each);
/// at most `max_tasks` tasks (the least recently updated is forgotten first); at most
/// `max_noops` no-op actions and `max_feedback` feedback sentences over all tasks (later ones
/// are ignored once full), `max_edges` reversed transitions (512 KiB by default) and as
/// many states with up to 16 actions and 16 successors each (208 bytes a state with its
/// key, 13 MiB by default; the hash table's free slots can double it), and
/// `max_responses` responses with the first action and task that got each (40 bytes each, 2.5
/// MiB by default, and 8 bytes more for each common or shared one). With the
/// defaults the task memory is at most 1024 × 16 × 256 × 8 B = 32 MiB, in practice far less
/// (one list per success, as long as its events).
///
/// # Determinism
///
/// The same sequence of calls gives the same flags: keys are fixed hashes, ties are broken
/// by key order, and nothing depends on table iteration order.
///
/// ```
/// use beacon_rl::milestone::{DiscoveryConfig, MilestoneDiscovery};
/// use beacon_rl::milestone::Transition;
/// use beacon_rl::RolloutBatch;
///
/// // One task, three rollouts: two succeed (R = 1), one fails.
/// let steps: [&[(&str, &str)]; 3] = [
///     &[("look", "A room."), ("take key", "Taken."), ("open door", "You win.")],
///     &[("take key", "Taken."), ("look", "A room."), ("look", "A room."), ("open door", "You win.")],
///     &[("look", "A room."), ("sing", "You sing.")],
/// ];
/// let lens: Vec<usize> = steps.iter().map(|s| s.len()).collect();
/// let batch = RolloutBatch::from_blocks(3, &lens, vec![1.0, 1.0, 0.0])?;
/// let rows: Vec<(&str, &str)> = steps.iter().flat_map(|s| s.iter().copied()).collect();
///
/// let mut discovery = MilestoneDiscovery::new(DiscoveryConfig::default())?;
/// let flags = discovery.discover(&batch, &["open-the-door"], |row, _step| Transition {
///     action: rows[row].0,
///     next_observation: rows[row].1,
///     ..Transition::default()
/// })?;
/// // `look` repeated gave the same response: a no-op. Both successes took the key and
/// // opened the door; the failure did neither.
/// assert_eq!(flags, [false, true, true, true, false, false, true, false, false]);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct MilestoneDiscovery {
    pub(super) config: DiscoveryConfig,
    pub(super) tasks: KeyMap<TaskMemory>,
    pub(super) noops: KeySet,
    pub(super) feedback: KeySet,
    /// Transitions (state before, state after) seen undone: the state before came back.
    pub(super) reversed: KeySet,
    /// States failed rollouts ended in early and no rollout went on from (module docs).
    pub(super) dead_ends: KeySet,
    /// What each state has seen, and the dead region it gives (module docs).
    pub(super) regions: Regions,
    /// Per response gist, who got it (shared responses), over all tasks.
    pub(super) responses: KeyMap<Response>,
    /// Gists two different actions of one verb got: not particular to one action
    /// (excursions).
    pub(super) common: KeySet,
    /// Common gists got in two tasks too: acknowledgements (module docs: novel events).
    pub(super) shared: KeySet,
    pub(super) calls: u64,
    pub(super) ws: Workspace,
}

impl MilestoneDiscovery {
    /// A discovery with an empty memory.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the first field of `config` out of range.
    ///
    /// ```
    /// use beacon_rl::milestone::{DiscoveryConfig, MilestoneDiscovery};
    /// use beacon_rl::Error;
    /// let d = MilestoneDiscovery::new(DiscoveryConfig::default())?;
    /// assert_eq!(d.num_tasks(), 0);
    /// let bad = DiscoveryConfig::default().with_min_support(0.0);
    /// let err = MilestoneDiscovery::new(bad).unwrap_err();
    /// assert!(matches!(err, Error::InvalidConfig { name: "min_support", .. }));
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
            regions: Regions::default(),
            responses: KeyMap::default(),
            common: KeySet::default(),
            shared: KeySet::default(),
            calls: 0,
            ws: Workspace::default(),
        })
    }

    /// Number of tasks in memory (at most `max_tasks`).
    pub fn num_tasks(&self) -> usize {
        self.tasks.len()
    }

    /// Number of no-op actions and feedback sentences learned so far.
    ///
    /// ```
    /// # use beacon_rl::milestone::{DiscoveryConfig, MilestoneDiscovery};
    /// let d = MilestoneDiscovery::new(DiscoveryConfig::default())?;
    /// assert_eq!(d.num_learned(), (0, 0));
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn num_learned(&self) -> (usize, usize) {
        (self.noops.len(), self.feedback.len())
    }

    /// Forgets everything learned (tasks, no-ops, feedback sentences, reversed transitions,
    /// dead ends, shared responses).
    pub fn clear(&mut self) {
        self.tasks.clear();
        self.noops.clear();
        self.feedback.clear();
        self.reversed.clear();
        self.dead_ends.clear();
        self.regions.clear();
        self.responses.clear();
        self.common.clear();
        self.shared.clear();
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
    /// use beacon_rl::milestone::{DiscoveryConfig, MilestoneDiscovery};
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

    /// [`discover`](Self::discover) into `flags`, one per row (every row is written; on
    /// error the memory is unchanged).
    pub(crate) fn discover_into<'a, T, F>(
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
        self.ws.tasks.clear();
        for task in tasks {
            let key = action_keys(task.as_ref(), &mut self.ws.normalised).0;
            self.ws.tasks.push(key);
        }
        self.read_keys(batch, &mut step);
        self.learn_noops(batch);
        if self.config.shared_responses {
            self.learn_shared(batch);
        }
        if self.config.novelty {
            self.learn_reversals(batch);
            for g in 0..batch.num_groups() {
                self.learn_dead_ends(batch, g);
            }
            self.learn_regions(batch);
        }
        if self.config.feedback {
            for g in 0..batch.num_groups() {
                self.learn_feedback(batch, g);
            }
        }
        for g in 0..batch.num_groups() {
            self.discover_group(batch, g, self.ws.tasks[g], flags);
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
    /// use beacon_rl::milestone::{DiscoveryConfig, MilestoneDiscovery};
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
                    from = response_keys(tr.observation, &mut ws.sentences, &mut ws.shaped).whole;
                    ws.sentences.truncate(start);
                }
                let (mut action, verb) = action_keys(tr.action, &mut ws.normalised);
                // A bare number answers the previous step's prompt ("0" to "which one do you
                // mean?"): it is that action, resolved, not a new one.
                // The prompt itself (the previous step) did nothing yet: its answer is the event.
                if t > 0 && !ws.normalised.is_empty() && ws.normalised.iter().all(u8::is_ascii_digit) {
                    action = pair(prev_action, action);
                    if let Some(prompt) = ws.steps.last_mut() {
                        prompt.answered = true;
                    }
                }
                prev_action = action;
                let start = ws.sentences.len();
                let keys = response_keys(tr.next_observation, &mut ws.sentences, &mut ws.shaped);
                let length = u32::try_from(ws.sentences.len() - start).unwrap_or(u32::MAX);
                if !self.config.feedback {
                    ws.sentences.truncate(start);
                }
                ws.steps.push(StepKeys {
                    action,
                    verb,
                    whole: keys.whole,
                    gist: keys.gist,
                    shape: keys.shape,
                    from,
                    sentences: (start, ws.sentences.len()),
                    answered: false,
                    length,
                });
                from = keys.whole;
            }
        }
        ws.events_of.clear();
        ws.events_of.resize(ws.steps.len(), Event::default());
    }

    /// An action done twice at most `noop_window` steps apart with the same first sentence
    /// of its response both times is a no-op (a room's listing after that sentence may
    /// differ: `look around` once something was picked up).
    fn learn_noops(&mut self, batch: &RolloutBatch) {
        for j in 0..batch.num_trajectories() {
            let steps = &self.ws.steps[batch.trajectory_steps(j)];
            // One pass per distance: a tight zip, no bounds check, no slice per step.
            for d in 1..=self.config.noop_window {
                let later = steps.get(d..).unwrap_or_default();
                for (a, b) in steps.iter().zip(later) {
                    let repeat = a.action == b.action && a.gist == b.gist;
                    if repeat && self.noops.len() < self.config.max_noops {
                        self.noops.insert(a.action);
                    }
                }
            }
        }
    }

    /// Learns which responses different actions of one verb got (`common`, for excursions)
    /// and which of those were got in different tasks too (`shared`), in this batch or an
    /// earlier one (module docs: novel events). The verb compared is the first action's.
    fn learn_shared(&mut self, batch: &RolloutBatch) {
        for g in 0..batch.num_groups() {
            let task = self.ws.tasks[g];
            for j in batch.group_trajectories(g) {
                for s in &self.ws.steps[batch.trajectory_steps(j)] {
                    let full = self.responses.len() >= self.config.max_responses;
                    let seen = match self.responses.entry(s.gist) {
                        Entry::Occupied(e) => e.into_mut(),
                        Entry::Vacant(_) if full => continue,
                        Entry::Vacant(e) => e.insert(Response::first(s.action, s.verb, task)),
                    };
                    let (common, shared) = seen.also(s.action, s.verb, task);
                    if common {
                        self.common.insert(s.gist);
                    }
                    if shared {
                        self.shared.insert(s.gist);
                    }
                }
            }
        }
    }

    pub(super) fn is_success(&self, batch: &RolloutBatch, j: usize) -> bool {
        batch.terminal_rewards()[j] > self.config.success_threshold
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
