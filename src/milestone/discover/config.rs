//! [`DiscoveryConfig`]: the settings of [`MilestoneDiscovery`](super::discovery::MilestoneDiscovery) and
//! their ranges.

use super::feedback::MAX_VERBS;
use crate::error::{Range, Result};
#[cfg(doc)]
use crate::Error;

/// Settings of [`MilestoneDiscovery`](super::discovery::MilestoneDiscovery); every cap bounds its memory.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct DiscoveryConfig {
    /// A rollout succeeded when its terminal reward R(τ) is above this. Default 0.
    pub success_threshold: f64,
    /// Share of the remembered successes of a task that must show an event for it to be a
    /// milestone, in (0, 1]. Default 0.6.
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
    /// "Before the first success"). Default true: while no rollout of a task succeeds, it is
    /// the only signal BEACON gets. In a text environment most responses are new, so a task
    /// that never succeeds has many of its steps flagged (a ScienceWorld task whose every
    /// rollout failed: 156 steps flagged, 12 of them scored); false trades that for no credit
    /// before a first success.
    pub novelty: bool,
    /// Treat a response that different actions with the same verb got, in different tasks
    /// ("The door is now open." after a door in one task and another door in another), as no
    /// new progress for any of them (module docs: novel events). Default true: such a
    /// response acknowledges the kind of action, not which one. False keeps such steps,
    /// which some environments score (ScienceWorld's find tasks score the first door
    /// opened).
    pub shared_responses: bool,
    /// Reversed transitions, dead ends, and states with the actions tried in each (the dead
    /// region's), remembered over all tasks: at most this many of each, later ones ignored
    /// once full. Default 65536.
    pub max_edges: usize,
    /// Responses remembered over all tasks with the first action and task that got each
    /// (what makes a response shared: `shared_responses`); later ones are ignored once full.
    /// Default 65536.
    pub max_responses: usize,
}

impl Default for DiscoveryConfig {
    fn default() -> Self {
        Self {
            success_threshold: 0.0,
            min_support: 0.6,
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
            shared_responses: true,
            max_edges: 1 << 16,
            max_responses: 1 << 16,
        }
    }
}

crate::setters::with_setters! {
    DiscoveryConfig, "use beacon_rl::milestone::DiscoveryConfig;", DiscoveryConfig::default();
    /// Sets the success threshold on R(τ) (default 0; finite).
    with_success_threshold(success_threshold: f64) = 0.5;
    /// Sets the share of remembered successes an event needs (default 0.6; in (0, 1]).
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
    /// Sets whether a response two actions of one verb got is no progress (default true).
    with_shared_responses(shared_responses: bool) = false;
    /// Sets the reversed transitions, dead ends and states remembered (default 65536; ≥ 1).
    with_max_edges(max_edges: usize) = 1024;
    /// Sets the responses remembered for `shared_responses` (default 65536; ≥ 1).
    with_max_responses(max_responses: usize) = 1024;
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
    /// Checks every field's range ([`MilestoneDiscovery::new`](super::discovery::MilestoneDiscovery::new)
    /// calls it: building validates).
    pub(crate) fn validate(&self) -> Result<()> {
        FINITE.check("success_threshold", self.success_threshold)?;
        SHARE.check("min_support", self.min_support)?;
        for (name, v) in [
            ("max_tasks", self.max_tasks),
            ("max_successes", self.max_successes),
            ("max_events", self.max_events),
            ("max_noops", self.max_noops),
            ("max_feedback", self.max_feedback),
            ("max_edges", self.max_edges),
            ("max_responses", self.max_responses),
        ] {
            AT_LEAST_ONE.check(name, v as f64)?;
        }
        VERBS.check("feedback_min_verbs", self.feedback_min_verbs as f64)?;
        WINDOW.check("noop_window", self.noop_window as f64)?;
        SHARE.check("feedback_max_step_fraction", self.feedback_max_step_fraction)?;
        Ok(())
    }
}
