//! `beacon`: credit on recorded trajectories, from the command line.
//!
//! ```text
//! cargo run --features cli -- [FILE…]              # --release for large inputs
//! ```
//!
//! Reads recorded trajectories (JSON Lines, one trajectory a line; `-` for stdin; the bundled
//! ScienceWorld/TextWorld sample, built into the program, when no file is given), detects
//! milestones, runs an advantage estimator and prints the credit per trajectory: a table
//! (default), or JSON Lines with `--format jsonl`. The guide's chapter `docs/cli.md` describes
//! the options, the record format and the output.
//!
//! Examples:
//!
//! ```text
//! beacon                                          # BEACON (paper) on the bundled sample
//! beacon --estimator grpo --format jsonl
//! beacon --estimator 'beacon_official:segment_decay=0.9,segment_weight=10'
//! beacon --detector text --pattern 'score has just gone up'
//! beacon --diagnostics
//! beacon --detector discover                      # no score, reward or subgoal read
//! ```
//!
//! The estimator is given in the library's configuration grammar, `NAME` or
//! `NAME:KEY=VALUE,KEY=VALUE` (`EstimatorConfig`'s `FromStr`): the keys are the fields of the
//! estimator's config (for example `segment_decay`, `segment_weight`, `milestone_reward`,
//! `ablation` for BEACON; `step_decay`, `mode` for GiGPO; `grpo:norm=mean_only` for Dr.GRPO).
//! An unknown name or key is an error listing the valid ones; an out-of-range value names its
//! key.
//!
//! The input is processed one group at a time (memory of a few groups, not the file; parsing
//! runs on a second thread): a group's trajectories must be on contiguous lines over the files
//! in order. Estimators that normalise over the whole batch (REINFORCE++, GAE, GDPO, GPG, ...),
//! `--diagnostics` and `--whole-input` read the whole input into one batch instead
//! (`needs_whole_input`). On an input error the program exits with status 1 and the error
//! names the file and line; JSON Lines already written for earlier groups stay valid, except
//! those of a group that reappears later, which the last output line marks (`Written`). The
//! table is written only once the whole input has been read. Lines longer than
//! `--max-line-bytes` (default 64 MiB) are an error.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{self, BufRead, Write};
use std::process::ExitCode;
use std::sync::mpsc;

use beacon_rl::diagnostics::{Diagnostics, DiagnosticsConfig};
use beacon_rl::estimator::Beacon;
use beacon_rl::estimator::Gigpo;
use beacon_rl::estimator::{AdvantageEstimator, EstimatorConfig};
use beacon_rl::milestone::DetectorPreset;
use beacon_rl::milestone::MilestoneDetector;
use beacon_rl::milestone::TextPatterns;
use beacon_rl::milestone::WalkthroughMap;
use beacon_rl::milestone::{DiscoveryConfig, MilestoneDiscovery};
use beacon_rl::record::{
    open_jsonl, read_trajectories, RecordBatch, RecordGroup, TrajectoryGroups, TrajectoryRecord,
};
use beacon_rl::Escaped;
use clap::{Parser, ValueEnum};
use serde::Serialize;
use serde_json::json;

/// The sample read when no file is given, built into the program so that an installed
/// `beacon` has it too.
const BUNDLED: &str = include_str!("../../data/sample_trajectories.jsonl");
/// How errors name the bundled sample.
const BUNDLED_NAME: &str = "the bundled sample (data/sample_trajectories.jsonl)";

/// The width the table fits in.
const TABLE_WIDTH: usize = 100;

#[derive(Parser, Debug)]
#[command(
    name = "beacon",
    about = "Advantages (BEACON, GRPO, GiGPO, …) on recorded trajectories"
)]
struct Args {
    /// JSON Lines files of recorded trajectories (`-` = stdin). Default: the bundled sample
    /// (data/sample_trajectories.jsonl). A group's trajectories must be on contiguous lines (the
    /// files taken in order) unless the whole input is read at once (--whole-input, estimators
    /// that normalise over the batch, --diagnostics).
    files: Vec<String>,

    /// Estimator: NAME or NAME:KEY=VALUE,KEY=VALUE (beacon, beacon_official, grpo, gigpo, rloo,
    /// opo, gpg, …; e.g. 'beacon:segment_decay=0.9').
    #[arg(long, short, default_value = "beacon", value_name = "NAME[:KEY=VALUE,…]")]
    estimator: String,

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

    /// Output format: `table`, for reading, or `jsonl`, one JSON object per trajectory with
    /// every value at full precision, for programs.
    #[arg(long, short, value_enum, default_value = "table")]
    format: Format,

    /// In the table, a second estimator's mean credit per trajectory beside the first
    /// (`none` to hide).
    #[arg(long, default_value = "grpo")]
    beside: String,

    /// In the table, each trajectory's advantage per step under its line (* = milestone).
    #[arg(long)]
    steps: bool,

    /// Read the whole input into one batch before computing, so that a group's trajectories
    /// may be on any lines (memory grows with the input).
    #[arg(long)]
    whole_input: bool,

    /// Also print credit-assignment diagnostics (CAR, EGR, ZAR, CCR, sample split). Reads the
    /// whole input at once.
    #[arg(long)]
    diagnostics: bool,

    /// Longest input line accepted, in bytes; a longer line is an error.
    #[arg(long, default_value_t = beacon_rl::record::JsonlReader::<(), ()>::DEFAULT_MAX_LINE_BYTES)]
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
fn needs_whole_input(args: &Args, estimator: &EstimatorConfig, beside: Option<&str>) -> bool {
    let local = |name: &str| GROUP_LOCAL.contains(&name);
    // An ablation draws its random milestones once per call: one call over the whole input.
    let ablation = matches!(estimator, EstimatorConfig::BeaconAblation(_));
    args.whole_input
        || args.diagnostics
        || ablation
        || !local(estimator.name())
        || beside.is_some_and(|b| !local(b))
}

fn run(args: Args) -> Result<(), BoxError> {
    let config = estimator_config(&args.estimator)?;
    let estimator = config.build()?;
    let format = args.format;
    let beside = match (format, args.beside.as_str()) {
        (Format::Table, "none") | (Format::Jsonl, _) => None,
        (Format::Table, name) => Some(estimator_config(name)?.build()?),
    };
    let mut detector = Detector::new(&args)?;
    let whole = needs_whole_input(&args, &config, beside.as_ref().map(|b| b.name()));
    let run = Run {
        config: &config,
        estimator: estimator.as_ref(),
        beside: beside.as_deref(),
        format,
        diagnostics: args.diagnostics,
        step_groups_before: std::cell::Cell::new(0),
    };

    let inputs: Vec<Input> = if args.files.is_empty() {
        vec![Input::Bundled]
    } else {
        args.files.iter().cloned().map(Input::Path).collect()
    };
    let input_names: Vec<&str> = inputs.iter().map(Input::name).collect();
    let (groups, done) = read_in_background(inputs.clone(), args.max_line_bytes, whole);

    let stdout = io::stdout();
    let mut out = io::BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut table = Table::new(&args, estimator.name(), beside.as_ref().map(|b| b.name()));
    let mut written = Written {
        jsonl: format == Format::Jsonl,
        ..Written::default()
    };
    if whole {
        // Runs of one group may be interleaved here: the batch gathers them.
        let mut records: Vec<TrajectoryRecord> = Vec::new();
        for group in groups {
            records.append(&mut group?.records);
        }
        detector.prepare(&mut records);
        written.trajectories = records.len();
        run.chunk(&records, &mut detector, &mut out, &mut table)?;
    } else {
        for group in groups {
            let mut group = group.map_err(|e| written.refuse(e, &mut out))?;
            detector.prepare(&mut group.records);
            run.chunk(&group.records, &mut detector, &mut out, &mut table)?;
            written.add(&group.records);
            // Back to the reader, which reads the next lines into its allocations. (The
            // reader may have stopped already: nothing to hand back to then.)
            let _ = done.send(group);
        }
    }
    if written.trajectories == 0 {
        return Err(format!("empty batch: no trajectory in {}", input_names.join(", ")).into());
    }
    if format == Format::Table {
        table.finish(&mut out)?;
    }
    out.flush()?;
    Ok(())
}

/// An input of the run: a file (`-` for stdin) or the sample built into the program.
#[derive(Clone, Debug)]
enum Input {
    Path(String),
    Bundled,
}

impl Input {
    fn name(&self) -> &str {
        match self {
            Input::Path(p) => p,
            Input::Bundled => BUNDLED_NAME,
        }
    }

    fn open(&self) -> beacon_rl::Result<Box<dyn BufRead>> {
        match self {
            Input::Path(p) => open_jsonl(p),
            Input::Bundled => Ok(Box::new(BUNDLED.as_bytes())),
        }
    }
}

/// What has been written group by group: the trajectories (one JSON line each), and each
/// group's output lines, which a later line of the same group would invalidate (its
/// advantages were computed on part of the group).
#[derive(Default)]
struct Written {
    /// Whether the output is JSON Lines, written as groups are computed.
    jsonl: bool,
    trajectories: usize,
    /// group_id → (first output line, 1-based; number of lines), in JSON Lines output.
    groups: HashMap<String, (usize, usize)>,
}

impl Written {
    fn add(&mut self, records: &[TrajectoryRecord]) {
        if let (true, Some(first)) = (self.jsonl, records.first()) {
            let lines = (self.trajectories + 1, records.len());
            self.groups.insert(first.group_id.clone(), lines);
        }
        self.trajectories += records.len();
    }

    /// The error that ends the run. When a group reappears after its lines were written,
    /// a last JSON line marks them invalid: `{"error": ..., "invalid_lines": {"group_id": ..,
    /// "first": .., "count": ..}}` (the table is written only at the end: nothing to mark).
    fn refuse(&self, e: beacon_rl::Error, out: &mut impl Write) -> BoxError {
        let beacon_rl::Error::GroupNotContiguous { group_id, .. } = &e else {
            return e.into();
        };
        let hint = "Put each group's lines together, or pass --whole-input";
        let Some(&(first, count)) = self.groups.get(group_id) else {
            return format!("{e}. {hint}").into();
        };
        let lines = match count {
            1 => format!("output line {first}"),
            _ => format!("output lines {first}-{}", first + count - 1),
        };
        let message = format!(
            "{e}. The advantages already written for it ({lines}) were computed on part of the \
             group and are invalid; the last output line says so. {hint}"
        );
        let marker = json!({
            "error": message,
            "invalid_lines": { "group_id": group_id, "first": first, "count": count },
        });
        // The run fails either way: if the mark cannot be written, the exit status tells.
        let _ = writeln!(out, "{marker}").and_then(|()| out.flush());
        message.into()
    }
}

/// Groups read and parsed on a second thread while this one computes and writes: parsing
/// is most of the work. A few groups are in flight at most (bounded channel), so memory stays
/// that of a few groups; groups sent back on the second channel once written are recycled
/// (`TrajectoryGroups::recycle`), so that reading allocates almost nothing per line and this
/// thread frees nothing the other allocated. `interleaved`: yield runs without the
/// contiguity rule.
fn read_in_background(
    inputs: Vec<Input>,
    max_line_bytes: usize,
    interleaved: bool,
) -> (
    mpsc::Receiver<beacon_rl::Result<RecordGroup>>,
    mpsc::Sender<RecordGroup>,
) {
    let (tx, rx) = mpsc::sync_channel(4);
    let (done, back) = mpsc::channel::<RecordGroup>();
    std::thread::spawn(move || {
        let mut readers = Vec::with_capacity(inputs.len());
        // Every file is opened before any is read, so a missing file fails before output.
        for input in &inputs {
            match input.open() {
                Ok(reader) => readers.push(
                    read_trajectories(reader)
                        .with_source(input.name())
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
                    Some(other) => Some(other.estimate(&input)?.advantages.column(0).to_vec()),
                };
                table.add(&rb, adv, &flags, beside.as_deref())?
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

/// The estimator config from `NAME[:KEY=VALUE,…]`, validated (the library's grammar and
/// errors, which list the valid names and keys).
fn estimator_config(spec: &str) -> Result<EstimatorConfig, BoxError> {
    let config: EstimatorConfig = spec.parse()?;
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
    Beacon(beacon_rl::estimator::BeaconOutput),
    Gigpo(beacon_rl::estimator::GigpoOutput),
}

fn parts(
    config: &EstimatorConfig,
    rb: &RecordBatch<'_>,
    step_rewards: &[f64],
    anchors: &[&str],
    flags: &[bool],
) -> Result<Parts, BoxError> {
    Ok(match config {
        EstimatorConfig::Beacon(c) => Parts::Beacon(Beacon::new(*c)?.compute(rb.batch(), flags)?),
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

/// The table: its totals line and the columns' legend come first, so group sections are kept
/// until the end (text, much smaller than the records they summarise). Every line fits
/// [`TABLE_WIDTH`] columns: long ids are shortened from the left (`…`), and the per-step
/// advantages (`--steps`) are wrapped.
struct Table {
    /// Estimator, second estimator (`--beside`) and detector names.
    name: &'static str,
    beside: Option<&'static str>,
    detector: String,
    steps_per_line: bool,
    groups: usize,
    trajectories: usize,
    steps: usize,
    milestones: usize,
    body: Vec<u8>,
    diagnostics: Option<String>,
}

impl Table {
    fn new(args: &Args, name: &'static str, beside: Option<&'static str>) -> Self {
        Self {
            name,
            beside,
            detector: args.detector.clone(),
            steps_per_line: args.steps,
            groups: 0,
            trajectories: 0,
            steps: 0,
            milestones: 0,
            body: Vec::new(),
            diagnostics: None,
        }
    }

    fn add(
        &mut self,
        rb: &RecordBatch<'_>,
        adv: &[f64],
        flags: &[bool],
        beside: Option<&[f64]>,
    ) -> Result<(), BoxError> {
        let batch = rb.batch();
        self.groups += batch.num_groups();
        self.trajectories += batch.num_trajectories();
        self.steps += batch.num_steps();
        self.milestones += flags.iter().filter(|&&f| f).count();
        self.write_groups(rb, adv, flags, beside)?;
        Ok(())
    }

    fn finish(&self, out: &mut impl Write) -> io::Result<()> {
        let name = self.name;
        writeln!(
            out,
            "{name}: {} groups, {} trajectories, {} steps, {} milestones (detector: {})",
            self.groups,
            self.trajectories,
            self.steps,
            self.milestones,
            printable(&self.detector)
        )?;
        writeln!(
            out,
            "  R: terminal reward. steps: steps taken. milestones: steps flagged as such."
        )?;
        let short = fit(name, 8);
        let by = if short == name {
            String::new()
        } else {
            format!(" ({name})")
        };
        writeln!(out, "  {short}: the trajectory's mean advantage per step{by}.")?;
        writeln!(out, "  min, max: its lowest and highest step advantage.")?;
        if let Some(other) = self.beside {
            let short = fit(other, 8);
            writeln!(
                out,
                "  {short}: the same by {other}, for comparison (--beside NAME, or none)."
            )?;
        }
        writeln!(
            out,
            "  Each step's advantage: --steps, or --format jsonl for every value in full."
        )?;
        out.write_all(&self.body)?;
        if let Some(d) = &self.diagnostics {
            writeln!(out, "{d}")?;
        }
        Ok(())
    }

    fn write_groups(
        &mut self,
        rb: &RecordBatch<'_>,
        adv: &[f64],
        flags: &[bool],
        beside: Option<&[f64]>,
    ) -> io::Result<()> {
        let batch = rb.batch();
        let record = |rows: &[usize]| &rb.records()[rb.row_location(rows[0]).0];
        let mean = |v: &[f64], rows: &[usize]| rows.iter().map(|&r| v[r]).sum::<f64>() / rows.len() as f64;
        let out = &mut self.body;
        for g in 0..batch.num_groups() {
            let first = batch.group_trajectories(g).start;
            let group_id = &record(batch.trajectory_rows(first)).group_id;
            writeln!(out, "\ngroup {}", fit(&printable(group_id), TABLE_WIDTH - 6))?;
            let other = self
                .beside
                .map_or(String::new(), |n| format!(" {:>8}", fit(n, 8)));
            writeln!(
                out,
                "  {:<38} {:>6} {:>5} {:>10} {:>8} {:>8} {:>8}{other}",
                "trajectory",
                "R",
                "steps",
                "milestones",
                fit(self.name, 8),
                "min",
                "max"
            )?;
            for j in batch.group_trajectories(g) {
                let rows = batch.trajectory_rows(j);
                let rec = record(rows);
                let (lo, hi) = rows
                    .iter()
                    .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &r| {
                        (l.min(adv[r]), h.max(adv[r]))
                    });
                let other = beside.map_or(String::new(), |v| format!(" {:>+8.3}", mean(v, rows)));
                writeln!(
                    out,
                    "  {:<38} {:>6} {:>5} {:>10} {:>+8.3} {:>+8.3} {:>+8.3}{other}",
                    fit(&printable(&rec.traj_id), 38),
                    reward_cell(rec.terminal_reward),
                    rows.len(),
                    rows.iter().filter(|&&r| flags[r]).count(),
                    mean(adv, rows),
                    lo,
                    hi,
                )?;
                if self.steps_per_line {
                    let cells = rows
                        .iter()
                        .map(|&r| format!("{:+.2}{}", adv[r], if flags[r] { "*" } else { "" }));
                    write_wrapped(out, cells, 6)?;
                }
            }
        }
        Ok(())
    }
}

/// Writes `cells` separated by spaces on lines of at most [`TABLE_WIDTH`] columns, each
/// indented by `indent`.
fn write_wrapped(out: &mut impl Write, cells: impl Iterator<Item = String>, indent: usize) -> io::Result<()> {
    let mut line = String::new();
    for cell in cells {
        if !line.is_empty() && indent + line.chars().count() + 1 + cell.chars().count() > TABLE_WIDTH {
            writeln!(out, "{:indent$}{line}", "")?;
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&cell);
    }
    if !line.is_empty() {
        writeln!(out, "{:indent$}{line}", "")?;
    }
    Ok(())
}

/// A terminal reward in at most 6 columns: as written when short (`1`, `0.5`, `-100`), else
/// rounded.
fn reward_cell(r: f64) -> String {
    let plain = r.to_string();
    if plain.len() <= 6 {
        return plain;
    }
    let rounded = format!("{r:.3}");
    if rounded.len() <= 6 {
        rounded
    } else {
        format!("{r:.0e}")
    }
}

/// `s` in at most `width` characters: a longer `s` keeps its end (where ids differ) after `…`.
fn fit(s: &str, width: usize) -> Cow<'_, str> {
    let n = s.chars().count();
    if n <= width {
        return Cow::Borrowed(s);
    }
    let (cut, _) = s.char_indices().nth(n - (width - 1)).unwrap_or((0, ' '));
    Cow::Owned(format!("…{}", &s[cut..]))
}

/// `s` safe to print on a terminal, as the library's error messages print caller text: see
/// [`Escaped`]. Borrowed when nothing needs escaping.
fn printable(s: &str) -> Cow<'_, str> {
    let shown = Escaped(s).to_string();
    if shown == s {
        Cow::Borrowed(s)
    } else {
        Cow::Owned(shown)
    }
}
