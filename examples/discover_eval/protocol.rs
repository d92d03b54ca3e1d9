//! The evaluation protocol of milestone discovery on recorded trajectories: what is removed
//! from the records before discovery sees them, and which groups are for development and which
//! for evaluation. Shared by `examples/discover_eval` and the crate's tests.
//!
//! **No environment signal.** [`without_signal`] returns a copy of a record with
//! - every sentence that mentions a score removed from every text (`initial_observation`,
//!   `task_description` and each step's `observation`): the text is split after `.`, `!`, `?`
//!   and line breaks, and a sentence containing `score` in any case is dropped (TextWorld's
//!   "Your score has just gone up by one point.", "You scored 11 out of a possible 11");
//! - the counter of TextWorld's status bar removed: the last line of its responses,
//!   `-= Kitchen =-7/14`, is the room name then `score/moves`; every `=-` directly followed
//!   by `digits/digits` loses the digits and the slash;
//! - `initial_score` and every step's `score` cleared, every `reward` set to 0, every
//!   `milestone` and `new_subgoals` field removed, and the fields that repeat the score or
//!   how the trajectory was made (`final_score`, `max_score`, `kind`, `meta`, `isCompleted`)
//!   removed;
//!
//! and, separately, the reference labels (the recorded `milestone` flags) that the evaluation
//! scores against. The terminal reward R(τ) stays: discovery learns from outcomes.
//!
//! **The split.** Within each environment (`env`), groups are ordered by the FNV-1a 64-bit
//! hash of their `group_id` (ties by the id); even ranks (0, 2, …) are the development part,
//! odd ranks the evaluation part ([`part_of_groups`]). Deterministic, independent of file
//! order, and each environment is on both sides. Rules are tuned on the development part only.
//! A file recorded after the rules were fixed is read whole ([`Part::Whole`]): it is not split.

#![allow(dead_code)] // each includer uses part of it

use std::collections::BTreeMap;

use beacon_rl::record::TrajectoryRecord;

/// The parts of the recorded data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Part {
    /// Rules may be tuned here.
    Development,
    /// Figures are reported here; nothing is tuned on it.
    Evaluation,
    /// Every group of a file recorded after the rules were fixed: nothing is tuned on it.
    Whole,
}

impl Part {
    pub fn name(self) -> &'static str {
        match self {
            Part::Development => "development",
            Part::Evaluation => "evaluation",
            Part::Whole => "whole",
        }
    }
}

/// FNV-1a, 64 bits, over the bytes of `s`: a fixed hash anyone can recompute.
pub fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A string field the record carries beside the schema's (`None` when absent or not a string).
pub fn extra_str(r: &TrajectoryRecord, key: &str) -> Option<String> {
    r.extra
        .get(key)
        .and_then(|v| serde_json::from_str::<String>(v.get()).ok())
}

/// The environment of a record (`env` field), or `unknown`.
pub fn env_of(r: &TrajectoryRecord) -> String {
    extra_str(r, "env").unwrap_or_else(|| "unknown".to_string())
}

/// The part of every group id of `records` (module docs: the split).
pub fn part_of_groups(records: &[TrajectoryRecord]) -> BTreeMap<String, Part> {
    let mut by_env: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
    for r in records {
        let groups = by_env.entry(env_of(r)).or_default();
        if !groups.iter().any(|(_, g)| *g == r.group_id) {
            groups.push((fnv1a(&r.group_id), r.group_id.clone()));
        }
    }
    let mut out = BTreeMap::new();
    for groups in by_env.values_mut() {
        groups.sort();
        for (rank, (_, g)) in groups.iter().enumerate() {
            let part = if rank % 2 == 0 {
                Part::Development
            } else {
                Part::Evaluation
            };
            out.insert(g.clone(), part);
        }
    }
    out
}

/// The records of one part, in file order ([`Part::Whole`]: all of them).
pub fn records_of(records: &[TrajectoryRecord], part: Part) -> Vec<TrajectoryRecord> {
    if part == Part::Whole {
        return records.to_vec();
    }
    let parts = part_of_groups(records);
    records
        .iter()
        .filter(|r| parts.get(&r.group_id) == Some(&part))
        .cloned()
        .collect()
}

/// `text` without its sentences that mention a score and without the status-bar counter
/// (module docs).
pub fn strip_signal_text(text: &str) -> String {
    let mut kept = String::with_capacity(text.len());
    let mut keep = |sentence: &str| {
        if !sentence.to_ascii_lowercase().contains("score") {
            kept.push_str(sentence);
        }
    };
    let mut start = 0;
    for (i, c) in text.char_indices() {
        if matches!(c, '.' | '!' | '?' | '\n' | '\r') {
            keep(&text[start..i + c.len_utf8()]);
            start = i + c.len_utf8();
        }
    }
    keep(&text[start..]);
    let mut out = String::with_capacity(kept.len());
    let mut rest = kept.as_str();
    let digits = |s: &str| s.bytes().take_while(u8::is_ascii_digit).count();
    while let Some(at) = rest.find("=-") {
        out.push_str(&rest[..at + 2]);
        rest = &rest[at + 2..];
        let score = digits(rest);
        if score > 0 && rest[score..].starts_with('/') {
            let moves = digits(&rest[score + 1..]);
            if moves > 0 {
                rest = &rest[score + 1 + moves..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Whether `text` still carries a score: the word, or a status-bar counter `=-digits/digits`.
pub fn shows_signal(text: &str) -> bool {
    if text.to_ascii_lowercase().contains("score") {
        return true;
    }
    text.match_indices("=-").any(|(at, _)| {
        let rest = &text[at + 2..];
        let n = rest.bytes().take_while(u8::is_ascii_digit).count();
        n > 0 && rest[n..].starts_with('/') && rest[n + 1..].starts_with(|c: char| c.is_ascii_digit())
    })
}

/// A copy of `r` with every environment signal removed, and its reference labels (one per
/// step: the recorded `milestone` flag).
pub fn without_signal(r: &TrajectoryRecord) -> (TrajectoryRecord, Vec<bool>) {
    let labels = r.steps.iter().map(|s| s.milestone == Some(true)).collect();
    let mut c = r.clone();
    c.initial_observation = c.initial_observation.as_deref().map(strip_signal_text);
    c.initial_score = None;
    if let Some(task) = c.extra.get("task_description") {
        if let Ok(text) = serde_json::from_str::<String>(task.get()) {
            let stripped = strip_signal_text(&text);
            c.extra.insert("task_description", stripped);
        }
    }
    for key in ["final_score", "max_score", "kind", "meta"] {
        c.extra.remove(key);
    }
    for s in &mut c.steps {
        s.observation = strip_signal_text(&s.observation);
        s.score = None;
        s.reward = 0.0;
        s.milestone = None;
        s.new_subgoals = None;
        s.info = None;
        s.extra.remove("isCompleted");
    }
    (c, labels)
}

/// [`without_signal`] over many records: the stripped records and their labels, row order.
pub fn strip_all(records: &[TrajectoryRecord]) -> (Vec<TrajectoryRecord>, Vec<bool>) {
    let mut out = Vec::with_capacity(records.len());
    let mut labels = Vec::new();
    for r in records {
        let (c, l) = without_signal(r);
        out.push(c);
        labels.extend(l);
    }
    (out, labels)
}
