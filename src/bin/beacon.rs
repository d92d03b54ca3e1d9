//! Credit on recorded trajectories, from the command line.
//!
//! ```text
//! cargo run --release --example beacon -- [FILE…]
//! ```
//!
//! Reads recorded trajectories (JSON Lines, one trajectory a line; `-` for stdin; the bundled
//! ScienceWorld/TextWorld sample when no file is given), detects milestones, runs an advantage
//! estimator and prints the credit per trajectory: a table on a terminal, JSON Lines otherwise.
//!
//! Examples:
//!
//! ```text
//! cargo run --release --example beacon                                  # BEACON (paper) on the sample
//! cargo run --release --example beacon -- --estimator grpo --format jsonl
//! cargo run --release --example beacon -- --estimator beacon_official -p mode=mean_std_norm
//! cargo run --release --example beacon -- --detector text --pattern 'score has just gone up'
//! cargo run --release --example beacon -- --diagnostics
//! cargo run --release --example beacon -- --detector discover              # no score, reward or subgoal read
//! ```
//!
//! Estimator parameters are given as `-p NAME=VALUE` with the names of the estimator's config
//! type (for example `segment_decay`, `segment_weight`, `milestone_reward` for BEACON;
//! `step_decay`, `step_advantage_weight`, `mode` for GiGPO; `norm=mean_only` for Dr.GRPO). They
//! are validated like a trainer's config file: an unknown name or an out-of-range value is an
//! error.
//!
//! The input is processed one group at a time (memory of a few groups, not the file; parsing
//! runs on a second thread): a group's trajectories must be on contiguous lines over the files
//! in order. Estimators that normalise over the whole batch (REINFORCE++, GAE, GDPO, GPG, ...)
//! and `--diagnostics` read the whole input into one batch instead (`needs_whole_input`). On an
//! input error the groups before it have been written; the error names the file and line.
//! Lines longer than `--max-line-bytes` (default 64 MiB) are an error.

use std::io::{self, IsTerminal, Write};
use std::process::ExitCode;
use std::sync::mpsc;

use beacon_rl::diagnostics::{Diagnostics, DiagnosticsConfig};
use beacon_rl::estimator::beacon::Beacon;
use beacon_rl::estimator::gigpo::Gigpo;
use beacon_rl::estimator::{AdvantageEstimator, EstimatorConfig};
use beacon_rl::milestone::discover::{DiscoveryConfig, MilestoneDiscovery};
use beacon_rl::milestone::preset::DetectorPreset;
use beacon_rl::milestone::text::TextPatterns;
use beacon_rl::milestone::walkthrough::WalkthroughMap;
use beacon_rl::milestone::MilestoneDetector;
use beacon_rl::record::{
    open_jsonl, read_trajectories, RecordBatch, RecordGroup, TrajectoryGroups, TrajectoryRecord,
    DEFAULT_MAX_LINE_BYTES,
};
use clap::{Parser, ValueEnum};
use serde::Serialize;
use serde_json::{json, Map, Value};

const BUNDLED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/sample_trajectories.jsonl");

#[derive(Parser, Debug)]
#[command(
    name = "beacon",
    about = "Advantages (BEACON, GRPO, GiGPO, …) on recorded trajectories"
)]
struct Args {
    /// JSON Lines files of recorded trajectories (`-` = stdin). Default: the bundled sample.
    /// A group's trajectories must be on contiguous lines (the files taken in order) unless
    /// the whole input is read at once (estimators that normalise over the batch,
    /// --diagnostics).
    files: Vec<String>,

    /// Estimator, by verl-style name: beacon, beacon_official, grpo, gigpo, rloo, opo, gpg, …
    #[arg(long, short, default_value = "beacon")]
    estimator: String,

    /// Estimator parameter NAME=VALUE (repeatable), as in a config file.
    #[arg(long = "param", short = 'p', value_name = "NAME=VALUE")]
    params: Vec<String>,

    /// Milestone detector: score, flag, subgoals, textworld-score, alfworld, text, walkthrough,
    /// discover (mined from actions, responses and outcomes; ignores scores, rewards, subgoals).
    #[arg(long, short, default_value = "score")]
    detector: String,

    /// Regular expression on the environment's response (with `--detector text`; repeatable).
    #[arg(long)]
    pattern: Vec<String>,

    /// JSON file mapping each task (group_id) to its expert actions (`--detector walkthrough`).
    #[arg(long)]
    walkthrough: Option<String>,

    /// Similarity threshold for matching expert actions.
    #[arg(long, default_value_t = 0.85)]
    threshold: f64,

    /// Output format (default: table on a terminal, jsonl otherwise).
    #[arg(long, short, value_enum)]
    format: Option<Format>,

    /// In the table, a second estimator's mean credit per trajectory beside the first
    /// (`none` to hide).
    #[arg(long, default_value = "grpo")]
    beside: String,

    /// Also print credit-assignment diagnostics (CAR, EGR, ZAR, CCR, sample split). Reads the
    /// whole input at once.
    #[arg(long)]
    diagnostics: bool,

    /// Longest input line accepted, in bytes; a longer line is an error.
    #[arg(long, default_value_t = DEFAULT_MAX_LINE_BYTES)]
    max_line_bytes: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Format {
    Jsonl,
    Table,
}

type BoxError = Box<dyn std::error::Error>;

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Estimators whose output for a group depends on that group's rows only: the input can be
/// processed group by group with the same result. The others (batch whitening in
/// REINFORCE++, GAE and GDPO, GPG's batch-size factor, ...) see the whole input at once.
const GROUP_LOCAL: &[&str] = &[
    "grpo",
    "grpo_vectorized",
    "grpo_passk",
    "rloo",
    "rloo_vectorized",
    "opo",
    "gigpo",
    "beacon",
    "beacon_official",
];

/// Whether the run needs every group in one batch (else it streams group by group, holding
/// one group at a time). A detector that learns from the whole input belongs here too.
fn needs_whole_input(args: &Args, beside: Option<&str>) -> bool {
    let local = |name: &str| GROUP_LOCAL.contains(&name);
    args.diagnostics || !local(&args.estimator) || beside.is_some_and(|b| !local(b))
}

fn run(args: Args) -> Result<(), BoxError> {
    let config = estimator_config(&args.estimator, &args.params)?;
    let estimator = config.build()?;
    let format = args.format.unwrap_or(if io::stdout().is_terminal() {
        Format::Table
    } else {
        Format::Jsonl
    });
    let beside = match (format, args.beside.as_str()) {
        (Format::Table, "none") | (Format::Jsonl, _) => None,
        (Format::Table, name) => Some(estimator_config(name, &[])?.build()?),
    };
    let mut detector = Detector::new(&args)?;
    let whole = needs_whole_input(&args, beside.as_ref().map(|b| b.name()));
    let run = Run {
        config: &config,
        estimator: estimator.as_ref(),
        beside: beside.as_deref(),
        format,
        diagnostics: args.diagnostics,
        step_groups_before: std::cell::Cell::new(0),
    };

    let files = if args.files.is_empty() {
        vec![BUNDLED.to_string()]
    } else {
        args.files.clone()
    };
    let (groups, done) = read_in_background(files, args.max_line_bytes, whole);

    let stdout = io::stdout();
    let mut out = io::BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut table = Table::default();
    if whole {
        // Runs of one group may be interleaved here: the batch gathers them.
        let mut records: Vec<TrajectoryRecord> = Vec::new();
        for group in groups {
            records.append(&mut group?.records);
        }
        detector.prepare(&mut records);
        run.chunk(&records, &mut detector, &mut out, &mut table)?;
    } else {
        for group in groups {
            let mut group = group?;
            detector.prepare(&mut group.records);
            run.chunk(&group.records, &mut detector, &mut out, &mut table)?;
            // Back to the reader, which reads the next lines into its allocations. (The
            // reader may have stopped already: nothing to hand back to then.)
            let _ = done.send(group);
        }
    }
    if format == Format::Table {
        table.finish(&mut out, estimator.name())?;
    }
    out.flush()?;
    Ok(())
}

/// Groups read and parsed on a second thread while this one computes and writes: parsing
/// is most of the work. A few groups are in flight at most (bounded channel), so memory stays
/// that of a few groups; groups sent back on the second channel once written are recycled
/// (`TrajectoryGroups::recycle`), so that reading allocates almost nothing per line and this
/// thread frees nothing the other allocated. `interleaved`: yield runs without the
/// contiguity rule.
fn read_in_background(
    files: Vec<String>,
    max_line_bytes: usize,
    interleaved: bool,
) -> (
    mpsc::Receiver<beacon_rl::Result<RecordGroup>>,
    mpsc::Sender<RecordGroup>,
) {
    let (tx, rx) = mpsc::sync_channel(4);
    let (done, back) = mpsc::channel::<RecordGroup>();
    std::thread::spawn(move || {
        let mut readers = Vec::with_capacity(files.len());
        // Every file is opened before any is read, so a missing file fails before output.
        for f in &files {
            match open_jsonl(f) {
                Ok(input) => readers.push(
                    read_trajectories(input)
                        .with_source(f.as_str())
                        .with_max_line_bytes(max_line_bytes),
                ),
                Err(e) => {
                    // The receiver may be gone already: nothing left to tell.
                    let _ = tx.send(Err(e));
                    return;
                }
            }
        }
        let groups = TrajectoryGroups::new(readers);
        let mut groups = if interleaved {
            groups.allow_interleaved()
        } else {
            groups
        };
        loop {
            while let Ok(used) = back.try_recv() {
                groups.recycle(used);
            }
            let Some(group) = groups.next() else { return };
            if tx.send(group).is_err() {
                return;
            }
        }
    });
    (rx, done)
}

/// What the run computes and prints, for each chunk of the input (a group, or everything).
struct Run<'a> {
    config: &'a EstimatorConfig,
    estimator: &'a dyn AdvantageEstimator,
    beside: Option<&'a dyn AdvantageEstimator>,
    format: Format,
    diagnostics: bool,
    /// GiGPO step groups of the chunks before: its labels are numbered over the whole input.
    step_groups_before: std::cell::Cell<usize>,
}

impl Run<'_> {
    fn chunk(
        &self,
        records: &[TrajectoryRecord],
        detector: &mut Detector,
        out: &mut impl Write,
        table: &mut Table,
    ) -> Result<(), BoxError> {
        if records.is_empty() {
            return Ok(());
        }
        let rb = RecordBatch::new(records)?;
        let flags = detector.flags(&rb)?;
        let cols = rb.columns();
        let input = cols.input(rb.batch(), &flags);
        // BEACON and GiGPO are run once, for their parts; their advantages are among them.
        let parts = parts(self.config, &rb, &cols.step_rewards, &cols.anchor_obs, &flags)?;
        let estimated;
        let adv: &[f64] = match &parts {
            Parts::Beacon(p) => &p.advantages,
            Parts::Gigpo(p) => &p.advantages,
            Parts::None => {
                estimated = self.estimator.estimate(&input)?.advantages.column(0).to_vec();
                &estimated
            }
        };
        match self.format {
            Format::Jsonl => write_jsonl(out, &rb, adv, &flags, &parts, self.step_groups_before.get())?,
            Format::Table => {
                let beside = match self.beside {
                    None => None,
                    Some(other) => Some((
                        other.name(),
                        other.estimate(&input)?.advantages.column(0).to_vec(),
                    )),
                };
                table.add(&rb, adv, &flags, self.estimator.name(), beside.as_ref())?
            }
        }
        if self.diagnostics {
            // State key: (task, observation before the step); action key: the action text.
            let states: Vec<(&str, &str)> = (0..rb.num_rows())
                .map(|row| {
                    (
                        records[rb.row_location(row).0].group_id.as_str(),
                        cols.anchor_obs[row],
                    )
                })
                .collect();
            let actions: Vec<&str> = rb.transitions().map(|t| t.action).collect();
            let diag = Diagnostics::new(
                rb.batch(),
                &states,
                &actions,
                &flags,
                DiagnosticsConfig::default(),
            )?;
            let report = diag.report(adv)?;
            if self.format == Format::Jsonl {
                writeln!(out, "{}", json!({ "diagnostics": report }))?;
            } else {
                table.diagnostics = Some(format!("\ndiagnostics ({}):\n{report}", self.estimator.name()));
            }
        }
        if let Parts::Gigpo(p) = &parts {
            self.step_groups_before
                .set(self.step_groups_before.get() + p.num_step_groups);
        }
        Ok(())
    }
}

/// The estimator config from its name and `NAME=VALUE` parameters, validated through the same
/// serde path as a trainer's config file (unknown names are rejected).
fn estimator_config(name: &str, params: &[String]) -> Result<EstimatorConfig, BoxError> {
    if !EstimatorConfig::NAMES.contains(&name) {
        return Err(format!(
            "unknown estimator `{name}`; known: {}",
            EstimatorConfig::NAMES.join(", ")
        )
        .into());
    }
    let mut obj = Map::new();
    obj.insert("adv_estimator".into(), Value::from(name));
    for p in params {
        let (k, v) = p
            .split_once('=')
            .ok_or_else(|| format!("parameter `{p}` is not NAME=VALUE"))?;
        // Numbers and JSON values as such; anything else (mean_std_norm, …) as a string.
        let value = serde_json::from_str(v).unwrap_or_else(|_| Value::from(v));
        obj.insert(k.to_string(), value);
    }
    let config: EstimatorConfig =
        serde_json::from_value(Value::Object(obj)).map_err(|e| format!("estimator `{name}`: {e}"))?;
    config.validate()?;
    Ok(config)
}

/// The milestone detector of the run, built once and applied to each chunk.
enum Detector {
    /// A detector over transitions (presets, text patterns).
    Transitions(Box<dyn MilestoneDetector>),
    /// Each task's own expert actions.
    Walkthrough { map: WalkthroughMap, threshold: f64 },
    /// Mined from the rollouts themselves, one task per group_id (milestone::discover). Its
    /// per-task memory carries over from group to group, as it would across training batches.
    /// (Boxed: the memory's tables are much larger than the other variants.)
    Discover(Box<MilestoneDiscovery>),
}

impl Detector {
    fn new(args: &Args) -> Result<Self, BoxError> {
        Ok(match args.detector.as_str() {
            "text" => {
                if args.pattern.is_empty() {
                    return Err("--detector text needs at least one --pattern REGEX".into());
                }
                let mut b = TextPatterns::builder();
                for p in &args.pattern {
                    b = b.response(p.clone());
                }
                Detector::Transitions(Box::new(b.build()?))
            }
            "walkthrough" => {
                let path = args
                    .walkthrough
                    .as_ref()
                    .ok_or("--detector walkthrough needs --walkthrough FILE")?;
                let file = std::fs::File::open(path).map_err(|e| format!("{path}: {e}"))?;
                let map = WalkthroughMap::from_json_reader(io::BufReader::new(file))?;
                Detector::Walkthrough {
                    map,
                    threshold: args.threshold,
                }
            }
            "discover" => Detector::Discover(Box::new(MilestoneDiscovery::new(DiscoveryConfig::default())?)),
            name => {
                let preset: DetectorPreset = name.parse()?;
                Detector::Transitions(Box::new(preset.build()?))
            }
        })
    }

    /// `--detector discover` works from actions, responses and outcomes only: every score,
    /// per-step reward, milestone flag and subgoal list is dropped before anything reads it.
    fn prepare(&self, records: &mut [TrajectoryRecord]) {
        if !matches!(self, Detector::Discover(_)) {
            return;
        }
        for r in records {
            r.initial_score = None;
            for s in &mut r.steps {
                s.score = None;
                s.reward = 0.0;
                s.milestone = None;
                s.new_subgoals = None;
            }
        }
    }

    /// One milestone flag per row of `rb`.
    fn flags(&mut self, rb: &RecordBatch<'_>) -> Result<Vec<bool>, BoxError> {
        match self {
            Detector::Transitions(d) => Ok(rb.detect_milestones(d)?),
            Detector::Discover(d) => Ok(d.discover_records(rb)?),
            Detector::Walkthrough { map, threshold } => {
                // Each task's own expert actions; a task without a walkthrough gets no milestone.
                let batch = rb.batch();
                let mut flags = vec![false; rb.num_rows()];
                for j in 0..batch.num_trajectories() {
                    let rows = batch.trajectory_rows(j);
                    let task = &rb.records()[rb.row_location(rows[0]).0].group_id;
                    if let Some(mut d) = map.detector_with_threshold(task, *threshold)? {
                        d.reset();
                        for &row in rows {
                            flags[row] = d.detect(&rb.transition(row));
                        }
                    }
                }
                Ok(flags)
            }
        }
    }
}

/// The parts behind the advantage for the estimators that have them, per row.
enum Parts {
    None,
    Beacon(beacon_rl::estimator::beacon::BeaconOutput),
    Gigpo(beacon_rl::estimator::gigpo::GigpoOutput),
}

fn parts(
    config: &EstimatorConfig,
    rb: &RecordBatch<'_>,
    step_rewards: &[f64],
    anchors: &[&str],
    flags: &[bool],
) -> Result<Parts, BoxError> {
    Ok(match config {
        EstimatorConfig::Beacon(c) | EstimatorConfig::BeaconOfficial(c) => {
            Parts::Beacon(Beacon::new(*c)?.compute(rb.batch(), flags)?)
        }
        EstimatorConfig::Gigpo(c) => {
            Parts::Gigpo(Gigpo::new(*c)?.compute(rb.batch(), step_rewards, anchors)?)
        }
        _ => Parts::None,
    })
}

/// One output line. Keys in byte order: the output is what `serde_json::json!` (a sorted
/// map) gave before, written without building a `Value` per line.
#[derive(Serialize)]
struct Line<'a> {
    advantages: &'a [f64],
    #[serde(skip_serializing_if = "Option::is_none")]
    episode_advantage: Option<f64>,
    group_id: &'a str,
    milestones: &'a [bool],
    #[serde(skip_serializing_if = "Option::is_none")]
    segment_advantages: Option<&'a [f64]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    segments: Option<&'a [usize]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    shaped_rewards: Option<&'a [f64]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    step_advantages: Option<&'a [f64]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    step_groups: Option<Vec<usize>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    step_returns: Option<&'a [f64]>,
    terminal_reward: f64,
    traj_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    trajectory_advantage: Option<f64>,
}

fn write_jsonl(
    out: &mut impl Write,
    rb: &RecordBatch<'_>,
    adv: &[f64],
    flags: &[bool],
    parts: &Parts,
    step_groups_before: usize,
) -> Result<(), BoxError> {
    // Rows are the records' steps in input order: record i's rows follow record i-1's.
    let mut first = 0;
    for rec in rb.records() {
        let rows = first..first + rec.steps.len();
        first = rows.end;
        let mut line = Line {
            advantages: &adv[rows.clone()],
            episode_advantage: None,
            group_id: &rec.group_id,
            milestones: &flags[rows.clone()],
            segment_advantages: None,
            segments: None,
            shaped_rewards: None,
            step_advantages: None,
            step_groups: None,
            step_returns: None,
            terminal_reward: rec.terminal_reward,
            traj_id: &rec.traj_id,
            trajectory_advantage: None,
        };
        match parts {
            Parts::Beacon(p) => {
                line.trajectory_advantage = Some(p.trajectory_advantages[rows.start]);
                line.segment_advantages = Some(&p.segment_advantages[rows.clone()]);
                line.shaped_rewards = Some(&p.shaped_rewards[rows.clone()]);
                line.segments = Some(&p.segments[rows.clone()]);
            }
            Parts::Gigpo(p) => {
                line.episode_advantage = Some(p.episode_advantages[rows.start]);
                line.step_advantages = Some(&p.step_advantages[rows.clone()]);
                line.step_returns = Some(&p.step_returns[rows.clone()]);
                let labels = p.step_groups[rows.clone()].iter();
                line.step_groups = Some(labels.map(|g| g + step_groups_before).collect());
            }
            Parts::None => {}
        }
        serde_json::to_writer(&mut *out, &line)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// The table: its totals line comes first, so group sections are kept until the end (text,
/// much smaller than the records they summarise).
#[derive(Default)]
struct Table {
    groups: usize,
    trajectories: usize,
    steps: usize,
    milestones: usize,
    body: Vec<u8>,
    diagnostics: Option<String>,
}

impl Table {
    fn add(
        &mut self,
        rb: &RecordBatch<'_>,
        adv: &[f64],
        flags: &[bool],
        name: &str,
        beside: Option<&(&str, Vec<f64>)>,
    ) -> Result<(), BoxError> {
        let batch = rb.batch();
        self.groups += batch.num_groups();
        self.trajectories += batch.num_trajectories();
        self.steps += batch.num_steps();
        self.milestones += flags.iter().filter(|&&f| f).count();
        write_table(&mut self.body, rb, adv, flags, name, beside)
    }

    fn finish(&self, out: &mut impl Write, name: &str) -> Result<(), BoxError> {
        writeln!(
            out,
            "{name}: {} groups, {} trajectories, {} steps, {} milestones (columns: mean credit per trajectory)",
            self.groups, self.trajectories, self.steps, self.milestones
        )?;
        out.write_all(&self.body)?;
        if let Some(d) = &self.diagnostics {
            writeln!(out, "{d}")?;
        }
        Ok(())
    }
}

fn write_table(
    out: &mut impl Write,
    rb: &RecordBatch<'_>,
    adv: &[f64],
    flags: &[bool],
    name: &str,
    beside: Option<&(&str, Vec<f64>)>,
) -> Result<(), BoxError> {
    let batch = rb.batch();
    let mean = |v: &[f64], rows: &[usize]| rows.iter().map(|&r| v[r]).sum::<f64>() / rows.len() as f64;
    for g in 0..batch.num_groups() {
        let first_traj = batch.group_trajectories(g).start;
        let group_id = &rb.records()[rb.row_location(batch.trajectory_rows(first_traj)[0]).0].group_id;
        writeln!(out, "\ngroup {group_id}")?;
        let other = beside.map_or(String::new(), |(n, _)| format!(" {:>8}", truncate(n, 8)));
        writeln!(
            out,
            "  {:<32} {:>4} {:>5} {:>3}{other} {:>8} {:>8} {:>8}   {name} per step (* = milestone)",
            "trajectory",
            "R",
            "steps",
            "K",
            truncate(name, 8),
            "min",
            "max"
        )?;
        for j in batch.group_trajectories(g) {
            let rows = batch.trajectory_rows(j);
            let rec = &rb.records()[rb.row_location(rows[0]).0];
            let a: Vec<f64> = rows.iter().map(|&r| adv[r]).collect();
            let k = rows.iter().filter(|&&r| flags[r]).count();
            let other = beside.map_or(String::new(), |(_, v)| format!(" {:>+8.3}", mean(v, rows)));
            let (lo, hi) = a.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &x| {
                (l.min(x), h.max(x))
            });
            let steps: Vec<String> = rows
                .iter()
                .map(|&r| format!("{:+.2}{}", adv[r], if flags[r] { "*" } else { "" }))
                .collect();
            writeln!(
                out,
                "  {:<32} {:>4} {:>5} {:>3}{other} {:>+8.3} {:>+8.3} {:>+8.3}   {}",
                rec.traj_id,
                rec.terminal_reward,
                rows.len(),
                k,
                mean(adv, rows),
                lo,
                hi,
                steps.join(" ")
            )?;
        }
    }
    Ok(())
}

fn truncate(s: &str, n: usize) -> &str {
    s.char_indices().nth(n).map_or(s, |(i, _)| &s[..i])
}
