//! Milestone discovery from rollouts alone: no score, no per-step reward, no subgoal list.

pub(super) mod baseline;
pub(super) mod config;
mod discovery;
mod feedback;
mod novelty;
mod support;
mod text;
mod workspace;

use config::DiscoveryConfig;

/// Milestone discovery from rollouts alone: no score, no per-step reward, no subgoal list.
///
/// Most agent tasks have no score channel and no walkthrough. [`MilestoneDiscovery`] mines
/// milestones from what every rollout has: each step's action text a_t, the response text
/// s_{t+1}, and the episode outcome R(τ). It works a batch at a time (a group of rollouts of
/// one task is what makes "common to successes" measurable), keeps a bounded memory per task
/// across batches, and outputs one flag per caller row, like
/// [`detect_milestones`](super::detect_milestones), so BEACON takes the flags like any other
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
///   remembered across tasks; and
/// - it is not a **prompt**: a step the next step answers with a bare number.
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
/// *shared*: got, in the same group (the batch's rollouts of the task, in one rollout or
/// two), by another action with the same verb (first word). A shared response ("The door is
/// now open." after opening the kitchen door in one rollout and the hallway door in another)
/// acknowledges the kind of action, not which one, so none of those steps is new progress,
/// the first included (`shared_responses`, on by default).
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
/// when it is an event with key in M. A group without success uses the memory.
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
/// end**: a state in which a failed rollout ended while another rollout of its group went on
/// longer (the environment stopped it, not the step budget), and from which no rollout has
/// been seen to go on. A trapdoor that ends the episode in failure is a first visit nobody
/// undoes; it precedes failure every time and success never, so it is a decoy, not a
/// milestone. Dead ends are remembered over all tasks (at most `max_edges`). It fits environments whose
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
/// are ignored once full), and `max_edges` reversed transitions (512 KiB by default). With the
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
pub use discovery::MilestoneDiscovery;

use self::workspace::StepKeys;
