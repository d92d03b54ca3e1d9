//! How high could any rule of a given kind reach, if it knew the labels?
//!
//! A kind of rule is named by what it reads of a step: its *signature*. A rule of that kind
//! flags every step with one signature alike. For the signatures of a part, each with `t`
//! labelled and `f` unlabelled steps, flagging a set S of them gives
//!
//! ```text
//! F1(S) = 2·Σ_S t / (Σ_S t + Σ_S f + P)        (P: the labelled steps of the part)
//! ```
//!
//! At the best value λ, the best S maximises Σ_S ((2 − λ)t − λf), which takes every
//! signature whose precision t / (t + f) exceeds λ / 2 (Dinkelbach's argument): iterating λ
//! finds the exact maximum (`adjust.rs`, where a signature's choices are to flag it or not),
//! the *ceiling* of that kind of rule on that part. It reads the labels, so no rule reaches
//! it; a rule above it must read more of a step than its signature.
//!
//! The kinds, each reading more than the one before:
//! - `text`: the action and the whole response;
//! - `text, task`: and the task (a response is progress in one task and not in another);
//! - `text, task, repeat`: and whether the action occurred earlier in the rollout. All of it
//!   is there for discovery to read when it flags a step (under leave-one-out it is not told
//!   the rollout's outcome, so no kind reads that);
//! - `text, task, occurrence`: and how many times the action occurred before (the third
//!   `wait` of a rollout apart from the second).

use std::collections::{BTreeMap, HashMap};

use beacon_rl::record::TrajectoryRecord;

use crate::adjust;
use crate::protocol::env_of;
use crate::task_of;

/// The kinds of rule, by the signature they read.
pub const KINDS: [&str; 4] = [
    "text",
    "text, task",
    "text, task, repeat",
    "text, task, occurrence",
];

/// Per environment, the ceiling of each of [`KINDS`] against `labels` (row order of
/// `records`).
pub fn ceilings(records: &[TrajectoryRecord], labels: &[bool]) -> BTreeMap<String, [f64; 4]> {
    let mut counts: BTreeMap<String, [HashMap<String, [usize; 2]>; 4]> = BTreeMap::new();
    let mut at = 0;
    for r in records {
        let per_kind = counts.entry(env_of(r)).or_default();
        let task = task_of(r);
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (t, s) in r.steps.iter().enumerate() {
            let before = seen.entry(s.action.as_str()).or_default();
            let text = format!("{}\u{1f}{}", s.action, s.observation);
            let keys = [
                text.clone(),
                format!("{text}\u{1f}{task}"),
                format!("{text}\u{1f}{task}\u{1f}{}", *before > 0),
                format!("{text}\u{1f}{task}\u{1f}{before}"),
            ];
            *before += 1;
            for (map, key) in per_kind.iter_mut().zip(keys) {
                map.entry(key).or_default()[usize::from(!labels[at + t])] += 1;
            }
        }
        at += r.steps.len();
    }
    counts
        .into_iter()
        .map(|(env, per_kind)| (env, per_kind.map(|map| best_f1(map.into_values().collect()))))
        .collect()
}

/// The best F1 over sets of `signatures` (`[labelled, unlabelled]` steps each).
fn best_f1(signatures: Vec<[usize; 2]>) -> f64 {
    let positives = signatures.iter().map(|[t, _]| t).sum();
    let choices: Vec<_> = signatures.into_iter().map(|s| [[0, 0], s]).collect();
    adjust::best_f1(&choices, positives)
}

#[cfg(test)]
mod tests {
    use super::best_f1;

    #[test]
    fn the_best_set_of_signatures_is_found_by_hand() {
        // P = 4. Taking [3, 0] alone: 6 / 7 = 0.857; with [1, 3]: 8 / 11 = 0.727.
        assert!((best_f1(vec![[1, 3], [3, 0], [0, 5]]) - 6.0 / 7.0).abs() < 1e-12);
        // The best set takes both: P = 3; [1, 1] alone: 2 / 5; with [2, 3]: 6 / 10.
        assert!((best_f1(vec![[2, 3], [1, 1]]) - 0.6).abs() < 1e-12);
        assert_eq!(best_f1(vec![[0, 4]]), 0.0);
    }
}
