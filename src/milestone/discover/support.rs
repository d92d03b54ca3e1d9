//! Milestones from the successes: the events enough of the remembered
//! successes of a task show (the support rule), or, with the feedback channel on, the events that carry a feedback sentence.

use super::discovery::MilestoneDiscovery;
use super::excursion::drop_excursions;
use super::feedback;
use super::text::pair;

use super::workspace::Event;
use crate::batch::RolloutBatch;

/// A response of at least this many times the group's median number of sentences, and of
/// at least [`DESCRIPTION_MIN`] sentences, is a description, not an effect (module docs:
/// events).
pub(crate) const DESCRIPTION_RATIO: u32 = 3;

/// The fewest sentences a description has. Effects take one to three; a listing far more. The
/// floor keeps a line an environment appends to some responses (a progress message) from
/// moving a short response across the bound.
pub(crate) const DESCRIPTION_MIN: u32 = 10;

/// The number of sentences from which a response of `steps` (one group) is a description:
/// [`DESCRIPTION_RATIO`] times their median length (at least 1 sentence), and at least
/// [`DESCRIPTION_MIN`]. `lengths` is a reused buffer.
fn description_from(steps: impl Iterator<Item = u32>, lengths: &mut Vec<u32>) -> u32 {
    lengths.clear();
    lengths.extend(steps);
    let mid = lengths.len() / 2;
    let median = if mid < lengths.len() {
        *lengths.select_nth_unstable(mid).1
    } else {
        0
    };
    DESCRIPTION_MIN.max(median.max(1).saturating_mul(DESCRIPTION_RATIO))
}

impl MilestoneDiscovery {
    /// Finds the feedback sentences of group `g` (module docs) and remembers them.
    pub(super) fn learn_feedback(&mut self, batch: &RolloutBatch, g: usize) {
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
            let novel = ws.seen_gists.insert(s.gist) && !self.shared.contains(&s.gist);
            let first = ws.seen_actions.insert(s.action);
            let description = s.length >= ws.description_from;
            if !first || s.answered || description || self.noops.contains(&s.action) {
                ws.events_of[i] = Event::default();
                continue;
            }
            let feedback = any_feedback
                && ws.sentences[s.sentences.0..s.sentences.1]
                    .iter()
                    .any(|k| self.feedback.contains(k));
            let key = pair(s.action, s.shape);
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

    /// Adds the novel events of group `g`'s successes to task `task`'s memory; returns
    /// whether any step of the group carries a feedback sentence.
    fn remember_successes(&mut self, batch: &RolloutBatch, g: usize, task: u64) -> bool {
        // This group's successes: their novel events, sorted and deduplicated.
        let mut group_feedback = false;
        // Events of every success of the group, one after the other, with their ends.
        let mut events = std::mem::take(&mut self.ws.events);
        let mut ends = std::mem::take(&mut self.ws.ends);
        events.clear();
        ends.clear();
        let max_events = self.config.max_events;
        let ws = &mut self.ws;
        let lengths = batch
            .group_trajectories(g)
            .flat_map(|j| ws.steps[batch.trajectory_steps(j)].iter().map(|s| s.length));
        ws.description_from = description_from(lengths, &mut ws.lengths);
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
        group_feedback
    }

    /// Flags the rows of group `g` (task `task`) after adding its successes to the memory:
    /// the support rule (or feedback) with a memory, irreversible first visits without.
    pub(super) fn discover_group(&mut self, batch: &RolloutBatch, g: usize, task: u64, flags: &mut [bool]) {
        let calls = self.calls;
        let group_feedback = self.remember_successes(batch, g, task);
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
            if !use_feedback {
                let ws = &mut self.ws;
                drop_excursions(
                    &ws.steps[batch.trajectory_steps(j)],
                    rows,
                    &self.common,
                    flags,
                    &mut ws.flagged,
                    &mut ws.excursion_gists,
                );
            }
        }
        counts.clear();
        self.ws.counts = counts;
    }
}
