//! The feedback-channel search of [`MilestoneDiscovery`](super::discovery::MilestoneDiscovery): sentences
//! that progress feedback looks like (module docs of [`discover`](super)).

use super::text::KeyMap;
use super::{DiscoveryConfig, StepKeys};
use crate::batch::RolloutBatch;

/// Most verbs a feedback sentence is checked against (the cap of `feedback_min_verbs`).
pub(super) const MAX_VERBS: usize = 8;
/// Steps of every successful rollout a feedback sentence must appear at: a progress channel
/// reports more than once per success (a one-off line at the same step of a few rollouts,
/// such as a status bar, is not one).
const FEEDBACK_MIN_REPEATS: usize = 2;

/// Per-sentence counts within one group (feedback search).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct SentenceStats {
    verbs: [u64; MAX_VERBS],
    num_verbs: usize,
    success_steps: usize,
    failure_steps: usize,
    /// Successful rollouts showing the sentence at `FEEDBACK_MIN_REPEATS` steps or more.
    success_rollouts: usize,
    /// Steps of the current rollout showing it.
    steps_in_rollout: usize,
    /// Last (trajectory, step) counted, so a repeat within one step or rollout counts once.
    last_step: usize,
    last_rollout: usize,
}

impl SentenceStats {
    /// Counts one more step of successful rollout `j` (action verb `verb`) showing the
    /// sentence.
    fn count_success_step(&mut self, j: usize, verb: u64) {
        self.success_steps += 1;
        if self.last_rollout != j {
            self.last_rollout = j;
            self.steps_in_rollout = 0;
        }
        self.steps_in_rollout += 1;
        if self.steps_in_rollout == FEEDBACK_MIN_REPEATS {
            self.success_rollouts += 1;
        }
        let known = self.verbs[..self.num_verbs].contains(&verb);
        if !known && self.num_verbs < MAX_VERBS {
            self.verbs[self.num_verbs] = verb;
            self.num_verbs += 1;
        }
    }
}

/// Writes the keys of group `g`'s feedback sentences, sorted, into `found` (cleared first;
/// empty when the group has no success). `steps` and `sentences` are the batch's keys in
/// trajectory-major order; `stats` is scratch space.
pub(super) fn find(
    batch: &RolloutBatch,
    g: usize,
    cfg: &DiscoveryConfig,
    steps: &[StepKeys],
    sentences: &[u64],
    stats: &mut KeyMap<SentenceStats>,
    found: &mut Vec<u64>,
) {
    found.clear();
    let is_success = |j: usize| batch.terminal_rewards()[j] > cfg.success_threshold;
    let trajs = batch.group_trajectories(g);
    let num_success = trajs.clone().filter(|&j| is_success(j)).count();
    if num_success == 0 {
        return;
    }
    stats.clear();
    let (mut success_steps, mut failure_steps) = (0usize, 0usize);
    // Successes first: only sentences they show can be feedback, so failures only update
    // sentences already counted (a lookup, no insertion).
    for success in [true, false] {
        for j in trajs.clone().filter(|&j| is_success(j) == success) {
            for i in batch.trajectory_steps(j) {
                let s = steps[i];
                if success {
                    success_steps += 1;
                } else {
                    failure_steps += 1;
                }
                for &key in &sentences[s.sentences.0..s.sentences.1] {
                    let st = if success {
                        stats.entry(key).or_insert(SentenceStats {
                            last_step: usize::MAX,
                            last_rollout: usize::MAX,
                            ..SentenceStats::default()
                        })
                    } else {
                        match stats.get_mut(&key) {
                            Some(st) => st,
                            None => continue,
                        }
                    };
                    if st.last_step == i {
                        continue;
                    }
                    st.last_step = i;
                    if !success {
                        st.failure_steps += 1;
                        continue;
                    }
                    st.count_success_step(j, s.verb);
                }
            }
        }
    }
    let total = (success_steps + failure_steps) as f64;
    for (&key, st) in stats.iter() {
        // success share > failure share, cross-multiplied to stay in integers
        let more_in_successes =
            failure_steps == 0 || st.success_steps * failure_steps > st.failure_steps * success_steps;
        let share = (st.success_steps + st.failure_steps) as f64 / total;
        if st.success_rollouts == num_success
            && st.num_verbs >= cfg.feedback_min_verbs
            && more_in_successes
            && share <= cfg.feedback_max_step_fraction
        {
            found.push(key);
        }
    }
    // Sorted: which sentences fit under the memory cap must not depend on table order.
    found.sort_unstable();
}
