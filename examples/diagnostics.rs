//! Credit-assignment diagnostics (CAR, EGR, ZAR, CCR, utilisation) of GRPO, GiGPO and BEACON
//! side by side on recorded trajectories, through the `AdvantageEstimator` trait.
//!
//! ```text
//! cargo run --release --example diagnostics -- [--json] [--ablations] [--failures-only] [--seed N]
//!     [--estimators grpo,gigpo,beacon,beacon_official] [--detector score] [FILE.jsonl | - ...]
//! ```
//!
//! Reads trajectory JSON Lines (the `record` module's format; `-` is standard input); without
//! files, the bundled `data/sample_trajectories.jsonl` (ScienceWorld and TextWorld, 4 groups ×
//! 8 trajectories). One row per step, records in file order.
//!
//! - Milestones: the `--detector` preset (`score`, the default, flags the steps where the
//!   environment's score went up; `flag`, `subgoals`, `textworld-score`, `alfworld`; `webshop`
//!   and `walkthrough` need per-task input and are refused).
//! - Estimators (`--estimators`, comma-separated `adv_estimator` names, default
//!   `grpo,gigpo,beacon,beacon_official`), each with its default preset and the columns of
//!   `RecordBatch::columns`: `grpo` is verl's GRPO over step rows grouped by `group_id`, with
//!   the trajectory's terminal reward on every row (as verl-agent feeds it); `gigpo` is the
//!   verl-agent preset (γ = 0.95, w = 1, mean_norm, exact anchors), anchor = the observation
//!   before the step, step reward = the recorded `reward`; `beacon` is the paper's equations,
//!   `beacon_official` the paper's code release (MiGPO). Any other name of
//!   `EstimatorConfig::NAMES` is accepted; those needing a critic, a greedy baseline or
//!   log-probabilities fail with an error naming them.
//! - Diagnostics: state key = (group, observation before the step), action key = the action
//!   text; a row's advantage is the estimator's value on the row's one token.
//!
//! `--ablations` adds the paper's Table 3 variants (paper flavour, seeded by `--seed`, default
//! 0). `--failures-only` drops the successful trajectories (terminal reward > 0), leaving each
//! group with failures only (the situation early in training, where GRPO has no signal).
//! `--json` prints the reports as JSON instead of tables.

use std::error::Error as StdError;
use std::process::ExitCode;

use beacon_rl::diagnostics::{Comparison, Diagnostics, DiagnosticsConfig};
use beacon_rl::estimator::{Ablation, AdvantageEstimator, Beacon, BeaconConfig, EstimatorConfig};
use beacon_rl::milestone::{detect_milestones, DetectorPreset};
use beacon_rl::record::{read_trajectories, RecordBatch, TrajectoryRecord};

const USAGE: &str = "usage: diagnostics [--json] [--ablations] [--failures-only] [--seed N] \
     [--estimators NAME,NAME,...] [--detector PRESET] [FILE.jsonl | - ...]";

const DEFAULT_ESTIMATORS: [&str; 4] = ["grpo", "gigpo", "beacon", "beacon_official"];

struct Args {
    json: bool,
    ablations: bool,
    failures_only: bool,
    seed: u64,
    estimators: Vec<String>,
    detector: DetectorPreset,
    files: Vec<String>,
}

fn parse_args() -> Result<Args, Box<dyn StdError>> {
    let mut args = Args {
        json: false,
        ablations: false,
        failures_only: false,
        seed: 0,
        estimators: DEFAULT_ESTIMATORS.map(str::to_owned).to_vec(),
        detector: DetectorPreset::Score,
        files: vec![],
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        // Value options take `--opt VALUE` or `--opt=VALUE`.
        let (opt, inline) = match arg.split_once('=') {
            Some((o, v)) if o.starts_with("--") => (o.to_owned(), Some(v.to_owned())),
            _ => (arg.clone(), None),
        };
        let mut value = |name: &str| {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| format!("{name} needs a value\n{USAGE}"))
        };
        match opt.as_str() {
            "--json" => args.json = true,
            "--ablations" => args.ablations = true,
            "--failures-only" => args.failures_only = true,
            "--seed" => {
                let v = value("--seed")?;
                args.seed = v.parse().map_err(|_| format!("--seed: not a u64: {v}"))?;
            }
            "--estimators" => {
                args.estimators = value("--estimators")?
                    .split(',')
                    .map(|s| s.trim().to_owned())
                    .filter(|s| !s.is_empty())
                    .collect();
                if args.estimators.is_empty() {
                    return Err(format!("--estimators: no name given\n{USAGE}").into());
                }
            }
            "--detector" => args.detector = value("--detector")?.parse()?,
            "-h" | "--help" => {
                println!("{USAGE}\nestimators: {}", EstimatorConfig::NAMES.join(", "));
                std::process::exit(0);
            }
            o if o.starts_with("--") => return Err(format!("unknown option {o}\n{USAGE}").into()),
            _ => args.files.push(arg),
        }
    }
    if args.files.is_empty() {
        args.files
            .push(concat!(env!("CARGO_MANIFEST_DIR"), "/data/sample_trajectories.jsonl").to_owned());
    }
    Ok(args)
}

/// All records of all files, in order; with `failures_only`, only those with terminal reward
/// ≤ 0. Errors name the file (the record module's errors name the line and field).
fn load(files: &[String], failures_only: bool) -> Result<Vec<TrajectoryRecord>, Box<dyn StdError>> {
    let mut records = Vec::new();
    for path in files {
        let name = if path == "-" { "<stdin>" } else { path.as_str() };
        for rec in read_trajectories(std::io::BufReader::new(std::fs::File::open(path)?)) {
            let rec = rec.map_err(|e| format!("{name}: {e}"))?;
            if !(failures_only && rec.terminal_reward > 0.0) {
                records.push(rec);
            }
        }
    }
    Ok(records)
}

fn main() -> ExitCode {
    // Errors print with Display (the crate's messages name the estimator, file, line and
    // field), not Debug.
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("diagnostics: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn StdError>> {
    let args = parse_args()?;
    let records = load(&args.files, args.failures_only)?;
    let rb = RecordBatch::new(&records)?;
    let batch = rb.batch();
    let flags = detect_milestones(rb.batch(), &mut args.detector.build()?, |row, _| {
        rb.transition(row)
    })?;

    // State = (group, observation before the step), borrowed from the records.
    let (state, action): (Vec<(&str, &str)>, Vec<&str>) = (0..batch.num_steps())
        .map(|row| {
            let t = rb.transition(row);
            let group = records[rb.row_location(row).0].group_id.as_str();
            ((group, t.observation), t.action)
        })
        .unzip();
    let diag = Diagnostics::new(batch, &state, &action, &flags, DiagnosticsConfig::default())?;

    let built = args
        .estimators
        .iter()
        .map(|name| name.parse::<EstimatorConfig>()?.build())
        .collect::<beacon_rl::Result<Vec<_>>>()?;
    let named: Vec<(&str, &dyn AdvantageEstimator)> = args
        .estimators
        .iter()
        .zip(&built)
        .map(|(name, est)| (name.as_str(), &**est))
        .collect();
    let main = diag.compare_estimators(&named, &rb.input(&flags))?;

    let ablations: Option<Comparison> = if args.ablations {
        let mut rows = Vec::new();
        for a in Ablation::paper_table3() {
            let beacon = Beacon::new(a.config(BeaconConfig::default()))?;
            let out = beacon.compute(batch, &a.milestones(batch, &flags, args.seed)?)?;
            rows.push((a.label(), out.advantages));
        }
        Some(diag.compare(&rows)?)
    } else {
        None
    };

    let milestone_steps = flags.iter().filter(|&&f| f).count();
    if args.json {
        let doc = serde_json::json!({
            "files": args.files,
            "failures_only": args.failures_only,
            "detector": args.detector,
            "steps": batch.num_steps(),
            "trajectories": batch.num_trajectories(),
            "groups": batch.num_groups(),
            "milestone_steps": milestone_steps,
            "estimators": main,
            "ablations": ablations,
            "ablation_seed": args.seed,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }

    println!(
        "{} steps, {} trajectories in {} groups, {} milestone steps (detector `{}`){}\n",
        batch.num_steps(),
        batch.num_trajectories(),
        batch.num_groups(),
        milestone_steps,
        args.detector,
        if args.failures_only { "; failures only" } else { "" },
    );
    print!("{main}");
    if let Some(t) = ablations {
        println!("\nPaper Table 3 ablations (paper flavour, seed {}):", args.seed);
        print!("{t}");
    }
    println!(
        "\nCAR: shared (state, action) pairs pushed both ways; EGR: gradient surviving cancellation;\n\
         ZAR: steps with |A| < 1e-6; CCR: milestone / non-milestone mean |A|;\n\
         utilisation: trajectories with at least one step of non-zero advantage."
    );
    Ok(())
}
