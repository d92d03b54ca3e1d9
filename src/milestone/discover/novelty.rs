//! Milestones before a task's first success: irreversible first visits, and the dead ends
//! (decoys) they must avoid (module docs of [`discover`](super), "Before the first success").

use super::discovery::MilestoneDiscovery;
use super::text::pair;
use super::workspace::StepKeys;
use crate::batch::RolloutBatch;

/// Whether some rollout of group `g` takes a step from state `state` (its start state or a
/// state it reached before its last step).
fn trajs_continue_from(batch: &RolloutBatch, steps: &[StepKeys], g: usize, state: u64) -> bool {
    batch
        .group_trajectories(g)
        .any(|j| steps[batch.trajectory_steps(j)].iter().any(|s| s.from == state))
}

impl MilestoneDiscovery {
    /// rollout; reversed transitions are remembered over all tasks.
    pub(super) fn learn_reversals(&mut self, batch: &RolloutBatch) {
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
    pub(super) fn learn_dead_ends(&mut self, batch: &RolloutBatch, g: usize) {
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

    /// Flags the irreversible first visits of trajectory `j` (a task without success), but no
    /// description (`ws.description_from`, set for its group by `remember_successes`).
    pub(super) fn flag_novelty(&mut self, batch: &RolloutBatch, j: usize, flags: &mut [bool]) {
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
                && !self.dead_ends.contains(&s.whole)
                && s.length < ws.description_from;
        }
    }
}
