//! Oracle of the `discover` fuzz target: `MilestoneDiscovery` (and `frequency_baseline`) on
//! arbitrary configs, batch layouts, actions, responses and task names, over a few batches
//! (the memory carries over between calls).
//!
//! Oracles:
//! 1. Config: `MilestoneDiscovery::new` is `Ok` exactly when every field is in the range its
//!    docs give (checked here independently); otherwise `Error::InvalidConfig` names the first
//!    bad field in `validate`'s order with its value.
//! 2. No panic; one flag per caller row; `step(row, t)` is only asked for a row of the batch
//!    at its own step t.
//! 3. Determinism and what is documented as not read: a clone given the same call, and a
//!    twin detector given every call with the actions re-cased and re-spaced (ASCII case,
//!    runs of ASCII whitespace), `score`, `next_score`, `env_flag`, `new_subgoals`, `step`
//!    and the observation of every step but the first changed, return the same flags; both
//!    agree on `num_tasks` / `num_learned`.
//! 4. Errors: a wrong number of task names is `LengthMismatch` on `tasks` and does not change
//!    the memory (the twin, which never sees it, keeps agreeing); `clear` gives a detector
//!    equal to a fresh one.
//! 5. Memory bounds: `num_tasks() <= max_tasks`, no-ops `<= max_noops`, feedback sentences
//!    `<= max_feedback`.
//! 6. Rules of the module docs that hold whatever the data: a task never seen succeeding is
//!    flagged only by irreversible first visits (a flagged step's response is no state seen
//!    before in its trajectory) or, without `novelty`, not at all; without `novelty` a flagged
//!    step is the first occurrence of its action in its trajectory and no no-op (an action
//!    repeated within `noop_window` steps with the identical response; discovery's own rule,
//!    the same first sentence, takes in every such action). An action is normalised, and a
//!    bare number after the first step is the previous step's action resolved (an answer).
//! 7. `frequency_baseline` equals a naive reimplementation of its docs.

use std::collections::{HashMap, HashSet};

use beacon_rl::milestone::{frequency_baseline, DiscoveryConfig, MilestoneDiscovery, Transition};
use beacon_rl::{Error, RolloutBatch};

use super::bytes::Bytes;

/// Actions of text games, with case and spacing variants, so that repeats and no-ops occur.
const ACTIONS: [&str; 10] = [
    "look",
    "take key",
    "open door",
    "go north",
    "inventory",
    "drop key",
    "Take  Key",
    "examine\tbox",
    " LOOK ",
    "",
];

/// Response sentences: states, feedback-like lines, failures, the prompt.
const SENTENCES: [&str; 10] = [
    "A room.",
    "Taken.",
    "You win.",
    "Your score has just gone up by one point.",
    "Nothing happens!",
    "Dropped.",
    ">",
    "You can't see any such thing.",
    "Is it open?",
    "The door is now open.",
];

const SEPARATORS: [&str; 5] = [" ", "\n", "", "  ", "\r\n"];

const TASKS: [&str; 4] = ["door", "window", "Door", "kitchen"];

/// Runs one fuzz input through the oracles; panics on a violation.
pub fn run(data: &[u8]) {
    let mut u = Bytes::new(data);
    let config = config(&mut u);
    let made = MilestoneDiscovery::new(config);
    match (first_invalid(&config), made) {
        (None, Ok(d)) => calls(&mut u, d, config),
        (
            Some((name, value)),
            Err(Error::InvalidConfig {
                name: n, value: v, ..
            }),
        ) => {
            assert_eq!(n, name, "InvalidConfig names the first bad field");
            assert_eq!(v.to_bits(), value.to_bits(), "InvalidConfig value of {name}");
        }
        (want, got) => panic!("config {config:?}: expected the first bad field {want:?}, got {got:?}"),
    }
}

/// The default config with some fields fuzzed (out of range too).
fn config(u: &mut Bytes<'_>) -> DiscoveryConfig {
    let mut c = DiscoveryConfig::default();
    // Two bits per field, fuzzed when both are 0: most configs keep most defaults.
    let fuzzed = u.u64();
    let pick = |i: u32| (fuzzed >> (2 * i)) & 3 == 0;
    let size = |u: &mut Bytes<'_>| match u.u8() {
        0..=191 => usize::from(u.u8() % 10),
        192..=253 => usize::from(u.u8()),
        _ => u.size(),
    };
    if pick(0) {
        c = c.with_success_threshold(u.f64());
    }
    if pick(1) {
        c = c.with_min_support(u.f64());
    }
    if pick(2) {
        c = c.with_max_tasks(size(u));
    }
    if pick(3) {
        c = c.with_max_successes(size(u));
    }
    if pick(4) {
        c = c.with_max_events(size(u));
    }
    if pick(5) {
        c = c.with_max_noops(size(u));
    }
    if pick(6) {
        c = c.with_noop_window(size(u));
    }
    if pick(7) {
        c = c.with_max_feedback(size(u));
    }
    if pick(8) {
        c = c.with_feedback(u.bool());
    }
    if pick(9) {
        c = c.with_feedback_min_verbs(size(u));
    }
    if pick(10) {
        c = c.with_feedback_max_step_fraction(u.f64());
    }
    if pick(11) {
        c = c.with_novelty(u.bool());
    }
    if pick(12) {
        c = c.with_max_edges(size(u));
    }
    if pick(13) {
        c = c.with_shared_responses(u.bool());
    }
    if pick(14) {
        c = c.with_max_responses(size(u));
    }
    c
}

/// The first field out of its documented range, in `validate`'s order, with its value.
fn first_invalid(c: &DiscoveryConfig) -> Option<(&'static str, f64)> {
    let share = |v: f64| v > 0.0 && v <= 1.0;
    let checks: [(&str, f64, bool); 12] = [
        (
            "success_threshold",
            c.success_threshold,
            c.success_threshold.is_finite(),
        ),
        ("min_support", c.min_support, share(c.min_support)),
        ("max_tasks", c.max_tasks as f64, c.max_tasks >= 1),
        ("max_successes", c.max_successes as f64, c.max_successes >= 1),
        ("max_events", c.max_events as f64, c.max_events >= 1),
        ("max_noops", c.max_noops as f64, c.max_noops >= 1),
        ("max_feedback", c.max_feedback as f64, c.max_feedback >= 1),
        ("max_edges", c.max_edges as f64, c.max_edges >= 1),
        ("max_responses", c.max_responses as f64, c.max_responses >= 1),
        (
            "feedback_min_verbs",
            c.feedback_min_verbs as f64,
            (2..=8).contains(&c.feedback_min_verbs),
        ),
        (
            "noop_window",
            c.noop_window as f64,
            (1..=64).contains(&c.noop_window),
        ),
        (
            "feedback_max_step_fraction",
            c.feedback_max_step_fraction,
            share(c.feedback_max_step_fraction),
        ),
    ];
    checks
        .into_iter()
        .find(|&(_, _, ok)| !ok)
        .map(|(name, value, _)| (name, value))
}

/// One caller row's texts, and the twin's variant of them.
struct Row {
    observation: String,
    action: String,
    response: String,
    /// The action re-cased and re-spaced (same normalised action).
    twin_action: String,
    /// What the twin passes in the fields discovery does not read.
    twin_observation: String,
    twin_step: usize,
    twin_score: Option<f64>,
    twin_next_score: Option<f64>,
    twin_flag: Option<bool>,
    twin_subgoals: Vec<String>,
}

/// What the oracle itself remembers across calls (cleared with the detector).
#[derive(Default)]
struct Known {
    /// Normalised task names that had a successful rollout.
    succeeded: HashSet<String>,
    /// Normalised actions seen repeated within `noop_window` steps with the identical response.
    noops: HashSet<String>,
}

fn calls(u: &mut Bytes<'_>, mut d: MilestoneDiscovery, config: DiscoveryConfig) {
    let mut twin = MilestoneDiscovery::new(config).expect("the same valid config");
    let mut known = Known::default();
    // Text pools of this input: fixed texts or fuzzed ones.
    let actions: Vec<String> = (0..u.range(1, 6))
        .map(|_| match u.u8() % 4 {
            0 => u.text(24),
            _ => ACTIONS[usize::from(u.u8()) % ACTIONS.len()].to_string(),
        })
        .collect();
    let sentences: Vec<String> = (0..u.range(1, 6))
        .map(|_| match u.u8() % 4 {
            0 => u.text(24),
            _ => SENTENCES[usize::from(u.u8()) % SENTENCES.len()].to_string(),
        })
        .collect();
    let task_pool: Vec<String> = (0..u.range(1, 3))
        .map(|_| match u.u8() % 4 {
            0 => u.text(8),
            _ => TASKS[usize::from(u.u8()) % TASKS.len()].to_string(),
        })
        .collect();
    for _ in 0..u.range(1, 4) {
        if u.is_empty() {
            break;
        }
        if u.u8() < 16 {
            d.clear();
            twin = MilestoneDiscovery::new(config).expect("the same valid config");
            known = Known::default();
        }
        let Some(batch) = batch(u) else { continue };
        let rows: Vec<Row> = (0..batch.num_steps())
            .map(|_| row(u, &actions, &sentences))
            .collect();
        let tasks: Vec<&str> = (0..batch.num_groups())
            .map(|_| task_pool[usize::from(u.u8()) % task_pool.len()].as_str())
            .collect();
        errors(u, &mut d, &batch, &tasks, &rows);
        one_call(&mut d, &mut twin, &mut known, &batch, &tasks, &rows, config);
    }
}

/// A small batch: contiguous blocks, or rows of several trajectories interleaved.
fn batch(u: &mut Bytes<'_>) -> Option<RolloutBatch> {
    let groups = u.range(1, 3);
    let group_size = u.range(1, 3);
    let n = groups * group_size;
    let lens: Vec<usize> = (0..n).map(|_| u.range(0, 6)).collect();
    let rewards: Vec<f64> = (0..n)
        .map(|_| match u.u8() % 8 {
            0..=2 => 1.0,
            3..=5 => 0.0,
            6 => -1.0,
            _ => u.f64(),
        })
        .collect();
    let made = if u.bool() {
        RolloutBatch::from_blocks(group_size, &lens, rewards)
    } else {
        // Round robin over the trajectories: step t of every trajectory, then step t + 1.
        let (mut gk, mut tk, mut rk) = (Vec::new(), Vec::new(), Vec::new());
        for t in 0..lens.iter().copied().max().unwrap_or(0) {
            for (j, &len) in lens.iter().enumerate() {
                if t < len {
                    gk.push(j / group_size);
                    tk.push(j);
                    rk.push(rewards[j]);
                }
            }
        }
        RolloutBatch::from_row_keys(&gk, &tk, &rk)
    };
    made.ok()
}

fn row(u: &mut Bytes<'_>, actions: &[String], sentences: &[String]) -> Row {
    let response = |u: &mut Bytes<'_>| -> String {
        if u.u8() < 16 {
            return u.text(40);
        }
        let mut out = String::new();
        for i in 0..u.range(0, 3) {
            if i > 0 {
                out.push_str(SEPARATORS[usize::from(u.u8()) % SEPARATORS.len()]);
            }
            out.push_str(&sentences[usize::from(u.u8()) % sentences.len()]);
        }
        out
    };
    let observation = response(u);
    let action = actions[usize::from(u.u8()) % actions.len()].clone();
    let response = response(u);
    let twin_action = respell(u, &action);
    let opt = |u: &mut Bytes<'_>| if u.bool() { Some(u.f64()) } else { None };
    Row {
        observation,
        action,
        response,
        twin_action,
        twin_observation: u.text(12),
        twin_step: u.range(0, 255),
        twin_score: opt(u),
        twin_next_score: opt(u),
        twin_flag: if u.bool() { Some(u.bool()) } else { None },
        twin_subgoals: (0..u.range(0, 2)).map(|_| u.text(8)).collect(),
    }
}

/// `s` with its ASCII letters' case flipped at random and each run of ASCII whitespace
/// replaced by another, maybe with whitespace added around: the same normalised action.
fn respell(u: &mut Bytes<'_>, s: &str) -> String {
    const WS: [char; 5] = [' ', '\t', '\n', '\r', '\u{c}'];
    fn ws(u: &mut Bytes<'_>, out: &mut String) {
        for _ in 0..u.range(1, 2) {
            out.push(WS[usize::from(u.u8()) % WS.len()]);
        }
    }
    let mut out = String::new();
    if u.bool() {
        ws(u, &mut out);
    }
    let mut in_space = false;
    for c in s.chars() {
        if c.is_ascii_whitespace() {
            if !in_space {
                ws(u, &mut out);
            }
            in_space = true;
            continue;
        }
        in_space = false;
        let flip = c.is_ascii_alphabetic() && u.bool();
        out.push(if !flip {
            c
        } else if c.is_ascii_lowercase() {
            c.to_ascii_uppercase()
        } else {
            c.to_ascii_lowercase()
        });
    }
    if u.bool() {
        ws(u, &mut out);
    }
    out
}

/// The module docs' normalisation: ASCII lower case, runs of ASCII whitespace collapsed to one
/// space, leading and trailing whitespace dropped.
/// Each step's action as discovery tells actions apart (module docs): normalised, and a
/// bare number after the first step is the previous step's action resolved (an answer to its
/// prompt), so "1" after "focus on egg" and "1" after "1" are two actions.
fn resolved(rows: &[Row], trajectory: &[usize]) -> Vec<String> {
    let mut keys: Vec<String> = Vec::with_capacity(trajectory.len());
    for (t, &r) in trajectory.iter().enumerate() {
        let action = normalise(&rows[r].action);
        let answer = !action.is_empty() && action.bytes().all(|b| b.is_ascii_digit());
        let key = match keys.last() {
            Some(prompt) if t > 0 && answer => format!("{prompt}\u{0}{action}"),
            _ => action,
        };
        keys.push(key);
    }
    keys
}

fn normalise(s: &str) -> String {
    s.split_ascii_whitespace()
        .map(str::to_ascii_lowercase)
        .collect::<Vec<_>>()
        .join(" ")
}

fn transition(r: &Row) -> Transition<'_> {
    Transition {
        observation: &r.observation,
        action: &r.action,
        next_observation: &r.response,
        ..Transition::default()
    }
}

/// Sometimes a call with a wrong number of task names: the typed error, and (checked by the
/// twin on the next calls) no change to the memory.
fn errors(u: &mut Bytes<'_>, d: &mut MilestoneDiscovery, batch: &RolloutBatch, tasks: &[&str], rows: &[Row]) {
    if u.u8() >= 32 {
        return;
    }
    let mut wrong_tasks = tasks.to_vec();
    if u.bool() || wrong_tasks.is_empty() {
        wrong_tasks.push("extra");
    } else {
        wrong_tasks.pop();
    }
    let got = d.discover(batch, &wrong_tasks, |row, _| transition(&rows[row]));
    let want = Error::LengthMismatch {
        what: "tasks",
        expected: tasks.len(),
        actual: wrong_tasks.len(),
    };
    assert_eq!(got, Err(want), "wrongly shaped call");
}

fn one_call(
    d: &mut MilestoneDiscovery,
    twin: &mut MilestoneDiscovery,
    known: &mut Known,
    batch: &RolloutBatch,
    tasks: &[&str],
    rows: &[Row],
    config: DiscoveryConfig,
) {
    // Where each row is: (trajectory, step).
    let mut at = vec![(usize::MAX, usize::MAX); batch.num_steps()];
    for j in 0..batch.num_trajectories() {
        for (t, &r) in batch.trajectory_rows(j).iter().enumerate() {
            at[r] = (j, t);
        }
    }
    let mut clone = d.clone();
    let flags = d
        .discover(batch, tasks, |row, t| {
            assert!(row < at.len(), "step({row}, {t}) of a batch of {} rows", at.len());
            assert_eq!(
                at[row].1, t,
                "step({row}, {t}): row {row} is step {} of its trajectory",
                at[row].1
            );
            transition(&rows[row])
        })
        .expect("a well-shaped call");
    assert_eq!(flags.len(), batch.num_steps(), "one flag per row");
    let again = clone
        .discover(batch, tasks, |row, _| transition(&rows[row]))
        .expect("a well-shaped call");
    assert_eq!(again, flags, "a clone given the same call");

    let twin_flags = twin
        .discover(batch, tasks, |row, _| {
            let r = &rows[row];
            let first = at[row].1 == 0;
            Transition {
                step: r.twin_step,
                observation: if first {
                    &r.observation
                } else {
                    &r.twin_observation
                },
                action: &r.twin_action,
                next_observation: &r.response,
                score: r.twin_score,
                next_score: r.twin_next_score,
                env_flag: r.twin_flag,
                new_subgoals: &r.twin_subgoals,
            }
        })
        .expect("a well-shaped call");
    assert_eq!(
        twin_flags, flags,
        "the twin (respelt actions, unread fields changed)"
    );
    assert_eq!(twin.num_tasks(), d.num_tasks(), "num_tasks of the twin");
    assert_eq!(twin.num_learned(), d.num_learned(), "num_learned of the twin");

    assert!(d.num_tasks() <= config.max_tasks, "num_tasks over max_tasks");
    let (noops, feedback) = d.num_learned();
    assert!(noops <= config.max_noops, "no-ops over max_noops");
    assert!(feedback <= config.max_feedback, "feedback over max_feedback");

    rules(batch, tasks, rows, &flags, known, &config, noops);
    baseline(batch, rows, config.success_threshold);
}

/// Oracle 6 (module docs' rules that hold whatever the data).
fn rules(
    batch: &RolloutBatch,
    tasks: &[&str],
    rows: &[Row],
    flags: &[bool],
    known: &mut Known,
    config: &DiscoveryConfig,
    noops: usize,
) {
    // What this call teaches: successes of tasks and repeated actions.
    for (g, task) in tasks.iter().enumerate() {
        if batch
            .group_trajectories(g)
            .any(|j| batch.terminal_rewards()[j] > config.success_threshold)
        {
            known.succeeded.insert(normalise(task));
        }
    }
    for j in 0..batch.num_trajectories() {
        let tr = batch.trajectory_rows(j);
        let keys = resolved(rows, tr);
        for (t, &a) in tr.iter().enumerate() {
            for (u, &b) in tr.iter().enumerate().skip(t + 1).take(config.noop_window) {
                if keys[t] == keys[u] && rows[a].response == rows[b].response {
                    known.noops.insert(keys[t].clone());
                }
            }
        }
    }
    // Every no-op was stored only if the set never filled up.
    let noops_complete = noops < config.max_noops;
    for (g, task) in tasks.iter().enumerate() {
        let succeeded = known.succeeded.contains(&normalise(task));
        for j in batch.group_trajectories(g) {
            let tr = batch.trajectory_rows(j);
            let keys = resolved(rows, tr);
            let mut actions = HashSet::new();
            let mut states = HashSet::new();
            if let Some(&first) = tr.first() {
                states.insert(rows[first].observation.as_str());
            }
            for (t, &r) in tr.iter().enumerate() {
                let row = &rows[r];
                let first_action = actions.insert(keys[t].as_str());
                let new_state = states.insert(row.response.as_str());
                if !flags[r] {
                    continue;
                }
                let whom = format!("row {r} (group {g}, task {task:?}, trajectory {j}, step {t})");
                if !succeeded {
                    assert!(
                        config.novelty,
                        "{whom}: flagged without novelty and never a success"
                    );
                    assert!(
                        new_state,
                        "{whom}: flagged as a first visit, response {:?} seen before",
                        row.response
                    );
                }
                if !config.novelty {
                    assert!(first_action, "{whom}: flagged a repeated action {:?}", row.action);
                    assert!(
                        !(noops_complete && known.noops.contains(&keys[t])),
                        "{whom}: flagged the no-op {:?}",
                        row.action
                    );
                }
            }
        }
    }
}

/// Oracle 7: `frequency_baseline` against its docs, written naively.
fn baseline(batch: &RolloutBatch, rows: &[Row], threshold: f64) {
    let got = frequency_baseline(batch, threshold, |row, _| transition(&rows[row]))
        .expect("the batch backs its rows");
    let mut want = vec![false; batch.num_steps()];
    for g in 0..batch.num_groups() {
        let mut counts: HashMap<String, usize> = HashMap::new();
        let mut successes = 0;
        for j in batch.group_trajectories(g) {
            if batch.terminal_rewards()[j] > threshold {
                successes += 1;
                let distinct: HashSet<String> = batch
                    .trajectory_rows(j)
                    .iter()
                    .map(|&r| normalise(&rows[r].action))
                    .collect();
                for a in distinct {
                    *counts.entry(a).or_default() += 1;
                }
            }
        }
        for j in batch.group_trajectories(g) {
            let mut seen = HashSet::new();
            for &r in batch.trajectory_rows(j) {
                let a = normalise(&rows[r].action);
                let frequent = counts.get(&a).is_some_and(|&c| 2 * c > successes);
                want[r] = seen.insert(a) && frequent;
            }
        }
    }
    assert_eq!(
        got, want,
        "frequency_baseline against its docs (threshold {threshold})"
    );
}
