//! How close do milestones discovered from rollouts alone come to the environments' own, on
//! recorded trajectories discovery was not tuned on?
//!
//! Reads recorded ScienceWorld and TextWorld trajectories (by default the bundled
//! `data/sample_trajectories.jsonl`, 4 groups × 8; `--data PATH` for another file of the same
//! format), removes every environment signal (`protocol.rs`: score sentences, TextWorld's
//! status-bar counter, score and reward fields, milestone and subgoal fields), splits the
//! groups into a development and an evaluation part (`protocol.rs`: by the FNV-1a hash of the
//! group id, within each environment), and scores [`MilestoneDiscovery`] (which reads only
//! actions, responses and outcomes) and the naive action-frequency baseline against the
//! recorded score-increase milestones: precision, recall, F1, per part and environment.
//!
//! Protocols:
//! - `leave-one-out` (the headline): for each trajectory, a fresh discovery learns from every
//!   other trajectory of its part and environment (the 7 others of its group, and the other
//!   tasks' groups, as a trainer's discovery has seen other tasks), then flags the held-out
//!   one from memory alone (its outcome hidden), so no rollout is flagged from its own
//!   outcome;
//! - `batch`: each part is one batch (one call; unsupervised: it never sees the labels);
//! - `online`: per part, a batch of the failures first (no success: the success-free signal
//!   only), then the successes, then the failures again (flagged from memory).
//!
//! The error classes of the leave-one-out protocol follow: a miss is *invisible* when the same
//! action with the same response occurs unlabelled elsewhere in the part (no text rule can
//! flag one and not the other), otherwise *visible*; a false positive is in a successful or in
//! a failed rollout.
//!
//! Beside each leave-one-out F1 it prints a 95% interval over groups (`interval.rs`): how far
//! the figure could move with other groups drawn.
//!
//! Last, the *ceiling* of four kinds of rule (`ceiling.rs`): the best F1 a rule could reach
//! that flags alike every step with the same signature (its text; and its task; and whether
//! it repeats an action; and how many times), knowing the labels; and the best F1 of
//! discovery's flags adjusted verb by verb, knowing the labels (`adjust.rs`).
//!
//! ```text
//! cargo run --release --example discover_eval [-- --data PATH] [--failures]
//!     [--config '{"noop_window": 1}'] [--part development]
//! ```
//!
//! `--config` takes a JSON object of [`DiscoveryConfig`] fields over the defaults; `--part`
//! (`development` or `evaluation`) prints one part only: rules are compared with
//! `--part development`, so the evaluation figures are not read while a rule is chosen.
//! `--part whole` reads a file recorded after the rules were fixed as one part, unsplit.
//! `--pool PATH:PART ...` prints the leave-one-out rows of several such parts and their sum
//! (`pooled.rs`): the figure judged on all the data no rule was tuned on.

mod adjust;
mod ceiling;
mod interval;
mod pooled;
mod protocol;

use std::collections::{BTreeMap, HashSet};

use beacon_rl::milestone::{frequency_baseline, DiscoveryConfig, MilestoneAgreement, MilestoneDiscovery};
use beacon_rl::record::{read_trajectories, RecordBatch, TrajectoryRecord};
use beacon_rl::{Result, RolloutBatch};

use protocol::{env_of, extra_str, records_of, strip_all, Part};

type BoxResult<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1).cloned()
}

/// The defaults, or `--config JSON` over them.
fn config() -> BoxResult<DiscoveryConfig> {
    match arg("--config") {
        Some(json) => Ok(serde_json::from_str(&json)?),
        None => Ok(DiscoveryConfig::default()),
    }
}

/// Per-environment and overall agreement of `flags` with `labels` (both in row order).
fn agreement(
    records: &[TrajectoryRecord],
    flags: &[bool],
    labels: &[bool],
) -> Result<BTreeMap<String, MilestoneAgreement>> {
    let mut out: BTreeMap<String, MilestoneAgreement> = BTreeMap::new();
    let mut at = 0;
    for r in records {
        let n = r.steps.len();
        let one = RolloutBatch::from_blocks(1, &[n], vec![0.0])?;
        let a = MilestoneAgreement::compare(&one, &flags[at..at + n], &labels[at..at + n])?;
        *out.entry(env_of(r)).or_default() += a;
        *out.entry("overall".into()).or_default() += a;
        at += n;
    }
    Ok(out)
}

/// One row per environment: `part` (a part's name, or `pooled`), `label` (the protocol), the
/// counts, precision, recall and F1.
fn print_rows(part: &str, label: &str, table: &BTreeMap<String, MilestoneAgreement>) {
    for (env, a) in table {
        println!(
            "{part:<12} {label:<26} {env:<13} {:>4} {:>4} {:>4}  {:.3}  {:.3}  {:.3}",
            a.true_positives,
            a.false_positives,
            a.false_negatives,
            a.precision(),
            a.recall(),
            a.f1()
        );
    }
}

/// Flags of `records` in row order, one list per record.
fn run(d: &mut MilestoneDiscovery, records: &[TrajectoryRecord]) -> Result<Vec<Vec<bool>>> {
    let flags = d.discover_records(&RecordBatch::new(records)?)?;
    let mut at = 0;
    Ok(records
        .iter()
        .map(|r| {
            at += r.steps.len();
            flags[at - r.steps.len()..at].to_vec()
        })
        .collect())
}

/// Record indices per group, groups in order of first appearance.
fn groups(records: &[TrajectoryRecord]) -> Vec<Vec<usize>> {
    let mut out: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, r) in records.iter().enumerate() {
        match out.iter_mut().find(|(g, _)| *g == r.group_id) {
            Some((_, v)) => v.push(i),
            None => out.push((r.group_id.clone(), vec![i])),
        }
    }
    out.into_iter().map(|(_, v)| v).collect()
}

/// Flags each record from the memory of a fresh discovery that learned every other record of
/// its environment in `records` (the 7 others of its group and the other tasks' groups, as a
/// trainer's discovery has seen other tasks), its own outcome hidden.
fn leave_one_out(cfg: DiscoveryConfig, records: &[TrajectoryRecord]) -> Result<Vec<bool>> {
    let mut per_record = vec![Vec::new(); records.len()];
    for idx in groups(records) {
        for &held in &idx {
            let env = env_of(&records[held]);
            let rest: Vec<TrajectoryRecord> = (0..records.len())
                .filter(|&i| i != held && env_of(&records[i]) == env)
                .map(|i| records[i].clone())
                .collect();
            let mut d = MilestoneDiscovery::new(cfg)?;
            run(&mut d, &rest)?;
            let mut hidden = records[held].clone();
            hidden.terminal_reward = 0.0;
            per_record[held] = run(&mut d, &[hidden])?.remove(0);
        }
    }
    Ok(per_record.concat())
}

/// The failed records, their labels, and their flags the first and the last time.
type Online = (Vec<TrajectoryRecord>, Vec<bool>, Vec<bool>, Vec<bool>);

/// Failures (no memory), then successes, then failures again.
fn online(cfg: DiscoveryConfig, records: &[TrajectoryRecord], labels: &[bool]) -> Result<Online> {
    let (mut fails, mut wins, mut fail_labels) = (Vec::new(), Vec::new(), Vec::new());
    let mut at = 0;
    for r in records {
        let n = r.steps.len();
        if r.terminal_reward > 0.0 {
            wins.push(r.clone());
        } else {
            fails.push(r.clone());
            fail_labels.extend_from_slice(&labels[at..at + n]);
        }
        at += n;
    }
    let mut d = MilestoneDiscovery::new(cfg)?;
    let first = run(&mut d, &fails)?.concat();
    run(&mut d, &wins)?;
    let last = run(&mut d, &fails)?.concat();
    Ok((fails, fail_labels, first, last))
}

/// The error classes (module docs) per environment: (invisible misses, visible misses,
/// false positives in successes, in failures).
fn error_classes(
    records: &[TrajectoryRecord],
    flags: &[bool],
    labels: &[bool],
) -> BTreeMap<String, [usize; 4]> {
    // (action, response) pairs that occur unlabelled somewhere in the part.
    let mut unlabelled = HashSet::new();
    let mut at = 0;
    for r in records {
        for (t, s) in r.steps.iter().enumerate() {
            if !labels[at + t] {
                unlabelled.insert((s.action.clone(), s.observation.clone()));
            }
        }
        at += r.steps.len();
    }
    let mut out: BTreeMap<String, [usize; 4]> = BTreeMap::new();
    let mut at = 0;
    for r in records {
        let c = out.entry(env_of(r)).or_default();
        for (t, s) in r.steps.iter().enumerate() {
            match (flags[at + t], labels[at + t]) {
                (false, true) => {
                    let key = (s.action.clone(), s.observation.clone());
                    c[usize::from(!unlabelled.contains(&key))] += 1;
                }
                (true, false) => c[2 + usize::from(r.terminal_reward <= 0.0)] += 1,
                _ => {}
            }
        }
        at += r.steps.len();
    }
    out
}

fn print_failures(records: &[TrajectoryRecord], flags: &[bool], labels: &[bool]) {
    let mut rows: BTreeMap<(String, String, &str), usize> = BTreeMap::new();
    let mut at = 0;
    for r in records {
        for (t, s) in r.steps.iter().enumerate() {
            let kind = match (flags[at + t], labels[at + t]) {
                (true, false) => "FP",
                (false, true) => "FN",
                _ => continue,
            };
            *rows
                .entry((r.group_id.clone(), s.action.clone(), kind))
                .or_default() += 1;
        }
        at += r.steps.len();
    }
    for ((g, a, kind), n) in rows {
        println!("  {kind} {g:<24} {a:<50} {n}");
    }
}

/// Writes one line per step (group, trajectory, step, R(τ), flag, label, action) for reading
/// the disagreements in context.
fn dump(path: &str, records: &[TrajectoryRecord], flags: &[bool], labels: &[bool]) -> BoxResult<()> {
    use std::fmt::Write as _;
    let mut out = String::from("group\ttrajectory\tstep\treward\tflag\tlabel\taction\n");
    let mut at = 0;
    for r in records {
        for (t, s) in r.steps.iter().enumerate() {
            let (f, l) = (u8::from(flags[at + t]), u8::from(labels[at + t]));
            let action = s.action.replace(['\t', '\n'], " ");
            writeln!(
                out,
                "{}\t{}\t{t}\t{}\t{f}\t{l}\t{action}",
                r.group_id, r.traj_id, r.terminal_reward
            )?;
        }
        at += r.steps.len();
    }
    std::fs::write(path, out)?;
    Ok(())
}

/// The task of a record (`task` field), or its group id.
fn task_of(r: &TrajectoryRecord) -> String {
    extra_str(r, "task").unwrap_or_else(|| r.group_id.clone())
}

/// What each part holds, read from the records and their labels alone (no discovery): per
/// environment, groups, successes, steps and scored steps in the successes, and the tasks
/// that only one part has. Tells whether a part is harder by its make-up.
fn print_composition(all: &[TrajectoryRecord], parts: &[Part]) {
    println!(
        "composition: groups, successes / trajectories, steps in successes (scored), tasks in this part only"
    );
    let mut tasks: BTreeMap<(String, String), Vec<Part>> = BTreeMap::new();
    for &part in parts {
        for r in records_of(all, part) {
            tasks.entry((env_of(&r), task_of(&r))).or_default().push(part);
        }
    }
    for &part in parts {
        let mut rows: BTreeMap<String, (HashSet<String>, usize, usize, usize, usize)> = BTreeMap::new();
        for r in records_of(all, part) {
            let row = rows.entry(env_of(&r)).or_default();
            row.0.insert(r.group_id.clone());
            row.2 += 1;
            if r.terminal_reward > 0.0 {
                row.1 += 1;
                row.3 += r.steps.len();
                row.4 += r.steps.iter().filter(|s| s.milestone == Some(true)).count();
            }
        }
        for (env, (groups, wins, n, steps, scored)) in rows {
            let only: Vec<&str> = tasks
                .iter()
                .filter(|((e, _), parts)| *e == env && parts.iter().all(|p| *p == part))
                .map(|((_, t), _)| t.as_str())
                .collect();
            println!(
                "{:<12} {env:<13} {} groups, {wins} / {n}, {steps} ({scored}; {:.1} steps a success, {:.2} scored), only here: {only:?}",
                part.name(),
                groups.len(),
                steps as f64 / wins.max(1) as f64,
                scored as f64 / steps.max(1) as f64
            );
        }
    }
    println!();
}

fn main() -> BoxResult<()> {
    let bundled = concat!(env!("CARGO_MANIFEST_DIR"), "/data/sample_trajectories.jsonl");
    let path = arg("--data").unwrap_or_else(|| bundled.to_string());
    let cfg = config()?;
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--pool") {
        let specs: Vec<String> = args[i + 1..]
            .iter()
            .take_while(|a| !a.starts_with("--"))
            .cloned()
            .collect();
        return pooled::run(cfg, &specs);
    }
    let all = read_trajectories(std::io::BufReader::new(std::fs::File::open(&path)?))
        .collect::<Result<Vec<_>>>()?;
    println!("{path}: {} trajectories; config {cfg:?}\n", all.len());
    let parts = match arg("--part").as_deref() {
        None => vec![Part::Development, Part::Evaluation],
        Some("development") => vec![Part::Development],
        Some("evaluation") => vec![Part::Evaluation],
        Some("whole") => vec![Part::Whole],
        Some(p) => return Err(format!("--part must be development, evaluation or whole, not {p:?}").into()),
    };
    print_composition(
        &all,
        if parts == [Part::Whole] {
            &parts
        } else {
            &[Part::Development, Part::Evaluation]
        },
    );
    println!(
        "{:<12} {:<26} {:<13} {:>4} {:>4} {:>4}  {:<5}  {:<5}  {:<5}",
        "part", "protocol", "env", "TP", "FP", "FN", "P", "R", "F1"
    );
    let mut classes = Vec::new();
    let mut intervals = Vec::new();
    let mut ceilings = Vec::new();
    let mut adjusted = Vec::new();
    for part in parts {
        let raw = records_of(&all, part);
        let (records, labels) = strip_all(&raw);
        let rb = RecordBatch::new(&records)?;
        let base = frequency_baseline(rb.batch(), 0.0, |row, _| rb.transition(row))?;
        print_rows(
            part.name(),
            "baseline (frequency)",
            &agreement(&records, &base, &labels)?,
        );
        let loo = leave_one_out(cfg, &records)?;
        print_rows(part.name(), "leave-one-out", &agreement(&records, &loo, &labels)?);
        intervals.push((part, interval::f1_intervals(&records, &loo, &labels)?));
        let batch = run(&mut MilestoneDiscovery::new(cfg)?, &records)?.concat();
        print_rows(part.name(), "batch", &agreement(&records, &batch, &labels)?);
        let (fails, fail_labels, first, last) = online(cfg, &records, &labels)?;
        print_rows(
            part.name(),
            "online: failures, no memory",
            &agreement(&fails, &first, &fail_labels)?,
        );
        print_rows(
            part.name(),
            "online: failures, memory",
            &agreement(&fails, &last, &fail_labels)?,
        );
        classes.push((part, error_classes(&records, &loo, &labels)));
        ceilings.push((part, ceiling::ceilings(&records, &labels)));
        let mut adjustments = adjust::Adjustments::default();
        adjustments.add(&records, &loo, &labels);
        adjusted.push((part.name(), adjustments));
        if let Some(path) = arg("--dump") {
            dump(&format!("{path}.{}.tsv", part.name()), &records, &loo, &labels)?;
        }
        if std::env::args().any(|a| a == "--failures") {
            println!("{} disagreements (leave-one-out):", part.name());
            print_failures(&records, &loo, &labels);
        }
    }
    println!("\nleave-one-out F1, 95% interval over groups (bootstrap, 2,000 draws)");
    for (part, table) in intervals {
        for (env, (lo, hi)) in table {
            println!("{:<12} {env:<13} {lo:.3} to {hi:.3}", part.name());
        }
    }
    println!("\nerror classes (leave-one-out): misses invisible / visible in the text, false positives in successes / failures");
    for (part, table) in classes {
        for (env, [inv, vis, fp_s, fp_f]) in table {
            println!(
                "{:<12} {env:<13} misses {inv} / {vis}, false positives {fp_s} / {fp_f}",
                part.name()
            );
        }
    }
    println!(
        "\nceiling: the best F1 of a rule that flags alike every step with the same signature, knowing the labels\n{:<12} {:<13} {:?}",
        "part", "env", ceiling::KINDS
    );
    for (part, table) in ceilings {
        for (env, best) in table {
            let best = best.map(|f| format!("{f:.3}")).join(" / ");
            println!("{:<12} {env:<13} {best}", part.name());
        }
    }
    print_adjusted(&adjusted);
    Ok(())
}

/// The best F1 of discovery's leave-one-out flags adjusted by each of [`adjust::KEYS`].
fn print_adjusted(adjusted: &[(&str, adjust::Adjustments)]) {
    println!(
        "\nadjusted: the best F1 of discovery's flags, each key refused, kept or flagged throughout, knowing the labels\n{:<12} {:<13} {:?}",
        "part", "env", adjust::KEYS
    );
    for (part, adjustments) in adjusted {
        for (env, best) in adjustments.ceilings() {
            let best = best.map(|f| format!("{f:.3}")).join(" / ");
            println!("{part:<12} {env:<13} {best}");
        }
    }
}
