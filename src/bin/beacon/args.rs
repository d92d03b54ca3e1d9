//! The command line: the options and the output formats.

use clap::{Parser, ValueEnum};

#[derive(Parser, Debug)]
#[command(
    name = "beacon",
    about = "Advantages (BEACON, GRPO, GiGPO, …) on recorded trajectories"
)]
pub(crate) struct Args {
    /// JSON Lines files of recorded trajectories (`-` = stdin). Default: the bundled sample
    /// (data/sample_trajectories.jsonl). A group's trajectories must be on contiguous lines (the
    /// files taken in order) unless the whole input is read at once (--whole-input, estimators
    /// that normalise over the batch, --diagnostics).
    pub(crate) files: Vec<String>,

    /// Estimator: NAME or NAME:KEY=VALUE,KEY=VALUE (beacon, beacon_official, grpo, gigpo, rloo,
    /// opo, gpg, …; e.g. 'beacon:segment_decay=0.9').
    #[arg(long, short, default_value = "beacon", value_name = "NAME[:KEY=VALUE,…]")]
    pub(crate) estimator: String,

    /// Milestone detector: score, flag, subgoals, textworld-score, alfworld, text, walkthrough,
    /// discover (mined from actions, responses and outcomes; ignores scores, rewards, subgoals).
    #[arg(long, short, default_value = "score")]
    pub(crate) detector: String,

    /// Regular expression on the environment's response (with `--detector text`; repeatable).
    #[arg(long)]
    pub(crate) pattern: Vec<String>,

    /// JSON file mapping each task (group_id) to its expert actions (`--detector walkthrough`).
    #[arg(long)]
    pub(crate) walkthrough: Option<String>,

    /// Similarity threshold for matching expert actions.
    #[arg(long, default_value_t = 0.85)]
    pub(crate) threshold: f64,

    /// Output format: `table`, for reading, or `jsonl`, one JSON object per trajectory with
    /// every value at full precision, for programs.
    #[arg(long, short, value_enum, default_value = "table")]
    pub(crate) format: Format,

    /// In the table, a second estimator's mean credit per trajectory beside the first
    /// (`none` to hide).
    #[arg(long, default_value = "grpo")]
    pub(crate) beside: String,

    /// In the table, each trajectory's advantage per step under its line (* = milestone).
    #[arg(long)]
    pub(crate) steps: bool,

    /// Read the whole input into one batch before computing, so that a group's trajectories
    /// may be on any lines (memory grows with the input).
    #[arg(long)]
    pub(crate) whole_input: bool,

    /// Also print credit-assignment diagnostics (CAR, EGR, ZAR, CCR, sample split). Reads the
    /// whole input at once.
    #[arg(long)]
    pub(crate) diagnostics: bool,

    /// Longest input line accepted, in bytes; a longer line is an error.
    #[arg(long, default_value_t = beacon_rl::record::JsonlReader::<(), ()>::DEFAULT_MAX_LINE_BYTES)]
    pub(crate) max_line_bytes: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    Jsonl,
    Table,
}
