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
//! `ablation` for BEACON; `step_decay`, `mode` for GiGPO; `grpo:norm=mean_norm` for Dr.GRPO).
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

mod args;
mod detector;
mod input;
mod jsonl;
mod run;
mod table;

use std::io::{self, Write};
use std::process::ExitCode;

use beacon_rl::estimator::EstimatorConfig;
use beacon_rl::record::TrajectoryRecord;
use clap::Parser;

use args::{Args, Format};
use detector::Detector;
use input::{read_in_background, Input};
use jsonl::Written;
use run::Run;
use table::Table;

pub(crate) type BoxError = Box<dyn std::error::Error>;

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

/// The estimator config from `NAME[:KEY=VALUE,…]`, validated (the library's grammar and
/// errors, which list the valid names and keys).
fn estimator_config(spec: &str) -> Result<EstimatorConfig, BoxError> {
    let config: EstimatorConfig = spec.parse()?;
    config.build()?;
    Ok(config)
}
