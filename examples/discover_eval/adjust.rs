//! How far could discovery go by adjusting its flags one verb at a time, if it knew the labels?
//!
//! The ceilings of `ceiling.rs` bound rules that judge each step by its signature, whatever
//! discovery does. This bounds the other way in: keep discovery's leave-one-out flags and
//! adjust them by a *key*, the action's first word (its verb) or more. For each key a rule
//! chooses one of three things: refuse every flag of the key, keep discovery's flags, or flag
//! every step of the key. With `t_k(c)` labelled and `f_k(c)` unlabelled steps flagged under
//! choice `c` of key `k`,
//!
//! ```text
//! F1(c) = 2·Σ_k t_k(c_k) / (Σ_k t_k(c_k) + Σ_k f_k(c_k) + P)        (P: the labelled steps)
//! ```
//!
//! At the best value λ, the best choices maximise Σ_k ((2 − λ)·t_k(c_k) − λ·f_k(c_k)), one
//! key at a time; iterating λ ← F1(c) from λ = 0 rises to that value in finitely many steps
//! (Dinkelbach's method), so the figure is the exact maximum over every such rule. It reads
//! the labels of the data it is judged on, so no rule fitted elsewhere reaches it.
//!
//! The keys, each reading more than the one before:
//! - `verb`: a word list of verbs to refuse, keep or flag throughout (`open` never, `wait1`
//!   always);
//! - `verb, names the task`: and whether the action names a word of the task's description
//!   (letter runs of 3 or more, less the words held by the descriptions of at least half
//!   of the set's tasks, such as "your", "task" and "focus"): what the agent is shown of
//!   its goal;
//! - `verb, task`: and the task itself: which verbs the rubric of that task scores.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use beacon_rl::record::TrajectoryRecord;

use crate::protocol::{env_of, extra_str};
use crate::task_of;

/// The keys, by what they read.
pub const KEYS: [&str; 3] = ["verb", "verb, names the task", "verb, task"];

/// Per key, `[labelled, unlabelled]` steps flagged by discovery and in all.
type Counts = HashMap<String, [[usize; 2]; 2]>;

/// Counts gathered over one set or several, per environment.
#[derive(Default)]
pub struct Adjustments {
    counts: BTreeMap<String, ([Counts; 3], usize)>,
}

impl Adjustments {
    /// Adds a set: its records, discovery's flags and the labels (row order of `records`).
    pub fn add(&mut self, records: &[TrajectoryRecord], flags: &[bool], labels: &[bool]) {
        let goal_words = goal_words(records);
        let mut at = 0;
        for r in records {
            let (per_key, positives) = self.counts.entry(env_of(r)).or_default();
            let task = task_of(r);
            let goal = goal_words.get(&task);
            for (t, s) in r.steps.iter().enumerate() {
                let verb = s.action.split_whitespace().next().unwrap_or("");
                let names = goal.is_some_and(|g| words(&s.action).any(|w| g.contains(&w)));
                let keys = [
                    verb.to_string(),
                    format!("{verb}\u{1f}{names}"),
                    format!("{verb}\u{1f}{task}"),
                ];
                let (flag, label) = (flags[at + t], labels[at + t]);
                *positives += usize::from(label);
                for (map, key) in per_key.iter_mut().zip(keys) {
                    let [flagged, all] = map.entry(key).or_default();
                    all[usize::from(!label)] += 1;
                    if flag {
                        flagged[usize::from(!label)] += 1;
                    }
                }
            }
            at += r.steps.len();
        }
    }

    /// Per environment, the best F1 of each of [`KEYS`].
    pub fn ceilings(&self) -> BTreeMap<String, [f64; 3]> {
        self.counts
            .iter()
            .map(|(env, (per_key, positives))| {
                let best = |map: &Counts| best_f1(&map.values().copied().collect::<Vec<_>>(), *positives);
                (
                    env.clone(),
                    [best(&per_key[0]), best(&per_key[1]), best(&per_key[2])],
                )
            })
            .collect()
    }
}

/// Lower-case letter runs of 3 or more.
fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_ascii_alphabetic())
        .filter(|w| w.len() >= 3)
        .map(str::to_ascii_lowercase)
}

/// Per task, the words of its description, less those the descriptions of at least half of
/// the set's tasks hold.
fn goal_words(records: &[TrajectoryRecord]) -> HashMap<String, BTreeSet<String>> {
    let mut descriptions: HashMap<String, BTreeSet<String>> = HashMap::new();
    for r in records {
        if let Some(d) = extra_str(r, "task_description").filter(|d| !d.is_empty()) {
            descriptions.entry(task_of(r)).or_default().extend(words(&d));
        }
    }
    let mut held: HashMap<&str, usize> = HashMap::new();
    for w in descriptions.values().flatten() {
        *held.entry(w).or_default() += 1;
    }
    let common: BTreeSet<String> = held
        .into_iter()
        .filter(|&(_, n)| 2 * n >= descriptions.len())
        .map(|(w, _)| w.to_string())
        .collect();
    descriptions
        .into_iter()
        .map(|(task, ws)| (task, ws.difference(&common).cloned().collect()))
        .collect()
}

/// The best F1 over a choice per key of none, discovery's flags (`[flagged, _]`) or every
/// step (`[_, all]`), each `[labelled, unlabelled]`; `positives` labelled steps in all.
pub fn best_f1(keys: &[[[usize; 2]; 2]], positives: usize) -> f64 {
    let f1 = |tp: usize, fp: usize| 2.0 * tp as f64 / (tp + fp + positives).max(1) as f64;
    let mut lambda = 0.0_f64;
    loop {
        let (mut tp, mut fp) = (0, 0);
        for options in keys {
            let gain = |[t, f]: [usize; 2]| (2.0 - lambda) * t as f64 - lambda * f as f64;
            let best = options
                .iter()
                .copied()
                .fold([0, 0], |a, b| if gain(b) > gain(a) { b } else { a });
            tp += best[0];
            fp += best[1];
        }
        let next = f1(tp, fp);
        if next <= lambda + 1e-12 {
            return lambda;
        }
        lambda = next;
    }
}

#[cfg(test)]
mod tests {
    use super::best_f1;

    #[test]
    fn the_best_choice_per_key_is_found_by_hand() {
        // P = 6. Key a: discovery 2/3 (t, f), all 4/4; key b: discovery 1/4, all 2/9;
        // key c: discovery 0/2, all 0/5. Choices by hand: a all, b none, c none:
        // 8 / (4 + 4 + 6) = 0.571; a discovery alone: 4 / 11 = 0.364; a all, b discovery:
        // 10 / 19 = 0.526; a all, b all: 12 / 25 = 0.48.
        let keys = [[[2, 3], [4, 4]], [[1, 4], [2, 9]], [[0, 2], [0, 5]]];
        assert!((best_f1(&keys, 6) - 8.0 / 14.0).abs() < 1e-12);
        // Keeping discovery's flags is the best when they are exact.
        assert!((best_f1(&[[[3, 0], [3, 7]]], 3) - 1.0).abs() < 1e-12);
        assert_eq!(best_f1(&[[[0, 1], [0, 2]]], 0), 0.0);
    }

    /// Every choice of none, discovery or all over 4 keys (81 of them), tried one by one.
    fn by_enumeration(keys: &[[[usize; 2]; 2]], positives: usize) -> f64 {
        let mut best = 0.0_f64;
        for code in 0..3_usize.pow(keys.len() as u32) {
            let (mut tp, mut fp, mut c) = (0, 0, code);
            for options in keys {
                if c % 3 > 0 {
                    tp += options[c % 3 - 1][0];
                    fp += options[c % 3 - 1][1];
                }
                c /= 3;
            }
            best = best.max(2.0 * tp as f64 / (tp + fp + positives) as f64);
        }
        best
    }

    #[test]
    fn the_iteration_finds_what_enumeration_finds() {
        let mut state = 7_u64;
        let mut next = |bound: u64| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 33) % bound) as usize
        };
        for _ in 0..500 {
            let keys: Vec<[[usize; 2]; 2]> = (0..4)
                .map(|_| {
                    let flagged = [next(6), next(6)];
                    [flagged, [flagged[0] + next(6), flagged[1] + next(12)]]
                })
                .collect();
            let positives = keys.iter().map(|k| k[1][0]).sum::<usize>() + next(4);
            let (fast, slow) = (best_f1(&keys, positives), by_enumeration(&keys, positives));
            assert!(
                (fast - slow).abs() < 1e-12,
                "{keys:?} {positives}: {fast} against {slow}"
            );
        }
    }
}
