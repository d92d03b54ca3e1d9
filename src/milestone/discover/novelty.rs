//! Milestones before a task's first success: irreversible first visits, and the dead ends
//! (decoys) they must avoid (module docs of [`discover`](super), "Before the first success").

use super::discovery::MilestoneDiscovery;
use super::text::pair;
use super::workspace::StepKeys;
use crate::batch::RolloutBatch;

/// Whether some rollout of group `g` took a step from state `state`, and whether one left
/// it (a step from it to another state).
fn steps_from(batch: &RolloutBatch, steps: &[StepKeys], g: usize, state: u64) -> (bool, bool) {
    let mut from = false;
    for j in batch.group_trajectories(g) {
        for s in steps[batch.trajectory_steps(j)]
            .iter()
            .filter(|s| s.from == state)
        {
            from = true;
            if s.whole != state {
                return (true, true);
            }
        }
    }
    (from, false)
}

/// Whether a rollout's last steps stayed in its last state with two different actions or
/// more: nothing it tried there changed anything (a cellar that the budget, not the
/// environment, ends). Two actions, so a rollout whose budget ran out one idle step after it
/// reached a new state does not make that state a dead end.
fn stayed(steps: &[StepKeys]) -> bool {
    let Some(last) = steps.last() else { return false };
    let mut idle = steps
        .iter()
        .rev()
        .take_while(|s| s.from == last.whole && s.whole == last.whole);
    let Some(first) = idle.next() else { return false };
    idle.any(|s| s.action != first.action)
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

    /// A state a failed rollout of group `g` ended in is a dead end when another rollout of
    /// the group went on longer and none took a step from it (the environment stopped it),
    /// or when the rollout tried two different actions there that changed nothing and no
    /// rollout left it (only the budget stopped it). A state some rollout left is no dead end,
    /// now or later.
    pub(super) fn learn_dead_ends(&mut self, batch: &RolloutBatch, g: usize) {
        let trajs = batch.group_trajectories(g);
        let longest = trajs.clone().map(|j| batch.trajectory_steps(j).len()).max();
        let longest = longest.unwrap_or(0);
        for j in trajs.clone() {
            for s in &self.ws.steps[batch.trajectory_steps(j)] {
                if s.from != s.whole {
                    self.dead_ends.remove(&s.from);
                }
            }
        }
        for j in trajs {
            let steps = &self.ws.steps[batch.trajectory_steps(j)];
            let Some(last) = steps.last() else { continue };
            let (early, idle) = (steps.len() < longest, stayed(steps));
            // The group is scanned only for a failed rollout that ended early or idle.
            if !(early || idle) || self.is_success(batch, j) || self.dead_ends.len() >= self.config.max_edges
            {
                continue;
            }
            let (from, left) = steps_from(batch, &self.ws.steps, g, last.whole);
            if (early && !from) || (idle && !left) {
                self.dead_ends.insert(last.whole);
            }
        }
    }

    /// Remembers every trajectory's steps in the states they left and settles the dead
    /// region (module docs of `region`).
    pub(super) fn learn_regions(&mut self, batch: &RolloutBatch) {
        for j in 0..batch.num_trajectories() {
            let success = self.is_success(batch, j);
            let steps = &self.ws.steps[batch.trajectory_steps(j)];
            self.regions.learn(steps, success, self.config.max_edges);
        }
        self.regions.settle();
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
                && !self.regions.is_dead(s.whole)
                && s.length < ws.description_from;
        }
    }
}
