//! Explicit subgoal signals: Φ(s, a, s′) = 1 when the environment reports subgoals that became
//! true at this step.
//!
//! ScienceWorld keeps its own list of task subgoals and reports which ones a step completed;
//! the paper's ScienceWorld detector "directly consumes" that signal (Preliminaries). Callers
//! pass the newly completed subgoals of a step in [`Transition::new_subgoals`].
//!
//! Relation to the score: ScienceWorld's score is its progress over the same subgoal list, so
//! every score increase comes with a newly completed subgoal. On the bundled sample
//! (`data/sample_trajectories.jsonl`, 196 ScienceWorld steps, 62 milestones) [`NewSubgoals`]
//! and [`ScoreIncrease`](super::ScoreIncrease) flag exactly the same steps, the recorded
//! `milestone` flags (`tests/it/detectors_real_data.rs` checks it). The two differ only where the
//! environment reports no subgoals (older ScienceWorld builds) or where a failure drops the
//! score to −100: neither detector fires there.

use super::{MilestoneDetector, Transition};

/// Milestone wherever the environment reports at least one newly completed subgoal
/// ([`Transition::new_subgoals`] non-empty).
///
/// Stateless. The subgoal names are not inspected: an environment that reports a subgoal
/// completed twice yields two milestones, as it reports.
///
/// ```
/// use beacon_rl::milestone::{NewSubgoals, MilestoneDetector, Transition};
/// let done = vec!["focus on an animal".to_string()];
/// let step = Transition { new_subgoals: &done, ..Default::default() };
/// assert!(NewSubgoals.detect(&step));
/// assert!(!NewSubgoals.detect(&Transition::default()));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct NewSubgoals;

impl MilestoneDetector for NewSubgoals {
    fn detect(&mut self, t: &Transition<'_>) -> bool {
        !t.new_subgoals.is_empty()
    }
}
