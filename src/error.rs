mod check;
pub(crate) mod escape;

pub(crate) use check::{check_finite, check_len, check_out_len, Range};
#[cfg(test)]
use escape::hides_or_controls;
use escape::{Escaped, EscapedLines};

/// Errors returned by `beacon-rl`.
///
/// Every fallible function returns [`Result<T>`]. Bad caller data (NaN rewards, mismatched
/// lengths, empty groups, out-of-range positions, invalid configs) is reported here instead of
/// panicking or silently producing a wrong number.
///
/// The enum is `#[non_exhaustive]`: new checks may add variants in minor releases, so match
/// with a wildcard arm.
///
/// ```
/// use beacon_rl::{Error, RolloutBatch};
///
/// // Two group keys but three trajectory keys: the columns must have one entry per row.
/// let err = RolloutBatch::from_row_keys(&["g", "g"], &["a", "a", "b"], &[1.0, 1.0]).unwrap_err();
/// assert!(matches!(err, Error::LengthMismatch { .. }));
/// ```
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Two inputs that must describe the same rows (or steps, tokens, trajectories) differ in
    /// length. `what` names the input that disagrees with the reference length.
    #[error("length mismatch: {what} has {actual} entries, expected {expected}")]
    LengthMismatch {
        /// The input whose length is wrong.
        what: &'static str,
        /// The length it should have.
        expected: usize,
        /// The length it has.
        actual: usize,
    },

    /// A reward, value or other numeric input is NaN or infinite, or finite inputs gave an
    /// output that is not (an overflow; for an `f32` output buffer, a value past `f32::MAX`,
    /// reported as the ∞ it would round to).
    #[error("non-finite value {value} in {what} at index {index}")]
    NonFinite {
        /// The input holding the value.
        what: &'static str,
        /// Index of the value in that input (caller's order).
        index: usize,
        /// The offending value.
        value: f64,
    },

    /// The batch holds no rows at all.
    #[error("empty batch: at least one step is required")]
    EmptyBatch,

    /// A group holds no trajectories (only possible through explicit offsets).
    #[error("group {group} has no trajectories")]
    EmptyGroup {
        /// Index of the group in batch order.
        group: usize,
    },

    /// A trajectory holds no steps (only possible through explicit offsets or lengths).
    #[error("trajectory {trajectory} has no steps")]
    EmptyTrajectory {
        /// Index of the trajectory in batch order.
        trajectory: usize,
    },

    /// Offsets are not a valid CSR index: they must start at 0, never decrease and end at the
    /// length of the indexed column.
    #[error("invalid offsets for {what}: {reason}")]
    InvalidOffsets {
        /// Which offset array.
        what: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// One trajectory key appears with two different group keys.
    #[error("trajectory at row {row} already belongs to another group (a trajectory cannot span groups)")]
    TrajectoryAcrossGroups {
        /// First row (caller's order) where the trajectory appears with a second group key.
        row: usize,
    },

    /// Rows of one trajectory carry different terminal rewards, or different row scores where each
    /// trajectory is counted once (the paper flavour of BEACON given
    /// [`row_scores`](crate::estimator::EstimatorInput::with_row_scores), `grpo`'s trajectory
    /// statistics on token sums without them).
    #[error("row {row} carries terminal reward {value}, but its trajectory's earlier rows carry {expected}")]
    InconsistentTerminalReward {
        /// Row (caller's order) that disagrees.
        row: usize,
        /// The reward found on earlier rows of the trajectory.
        expected: f64,
        /// The reward on this row.
        value: f64,
    },

    /// A milestone position does not fall inside its trajectory.
    #[error("milestone position {position} is out of range for trajectory {trajectory} with {len} steps")]
    MilestoneOutOfRange {
        /// Trajectory index in batch order.
        trajectory: usize,
        /// The offending step index.
        position: usize,
        /// Number of steps of the trajectory.
        len: usize,
    },

    /// A configuration parameter is outside its valid range.
    #[error("invalid config: {name} = {value} ({expected})")]
    InvalidConfig {
        /// Parameter name as it appears in the config type.
        name: &'static str,
        /// The rejected value.
        value: f64,
        /// The valid range, in words.
        expected: &'static str,
    },

    /// An output buffer handed to an `_into` function (or an estimator's output read by the
    /// diagnostics) has the wrong shape. Shapes are (rows, columns): a rows × L token matrix
    /// is (rows, L) (the expected L may be a [`Lengths`](crate::tensor::MaskView::Lengths)
    /// mask's claim, reported as claimed), a buffer of one value per row (step advantages,
    /// milestone flags) is (len, 1). So a transposed buffer reads "(3, 4), expected (4, 3)".
    #[error("output buffer {what} has shape {actual:?}, expected {expected:?}")]
    OutputShape {
        /// Which buffer.
        what: &'static str,
        /// Required shape (rows, columns).
        expected: (usize, usize),
        /// Provided shape (rows, columns).
        actual: (usize, usize),
    },

    /// A token span of a multi-step sequence row is invalid: it exceeds the row, overlaps
    /// another span or names a step that does not exist.
    #[error("invalid token span {index}: {reason}")]
    InvalidSpan {
        /// Index of the span in the caller's span list.
        index: usize,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// The estimator needs an input the caller did not supply.
    #[error("missing input: {0}")]
    MissingInput(&'static str),

    /// A milestone detector was configured with a pattern it cannot use: a regular expression
    /// that does not compile, one that matches the empty string (it would flag every step), or
    /// an empty WebShop option. `message` says which.
    #[error("invalid detector pattern {pattern:?}: {}", EscapedLines(.message))]
    InvalidPattern {
        /// The offending pattern, as the caller wrote it.
        pattern: String,
        /// Why it is rejected (the regex compiler's message where there is one).
        message: String,
    },

    /// A name given as a string (a detector preset on a command line or in a config file) is
    /// not one the crate knows.
    #[error("unknown {what} {name:?}: expected one of {expected}")]
    UnknownName {
        /// What kind of name was looked up.
        what: &'static str,
        /// The name as given.
        name: String,
        /// The accepted names, comma-separated.
        expected: &'static str,
    },

    /// The operation is undefined for these inputs in the reference implementation (which
    /// raises); the message says why.
    #[error("undefined for these inputs: {}", Escaped(.0))]
    Undefined(String),

    /// An estimator name that the crate does not know; the message lists the known ones
    /// (`EstimatorConfig::NAMES`).
    #[error("unknown estimator {}; known: {}", Escaped(.name), .known.join(", "))]
    UnknownEstimator {
        /// The name given.
        name: String,
        /// The names that exist.
        known: &'static [&'static str],
    },

    /// A configuration key the estimator does not have; the message lists its keys.
    #[error(
        "estimator {estimator} has no key {}; {}",
        Escaped(.key),
        if .known.is_empty() { "it takes none".to_owned() } else { format!("its keys: {}", .known.join(", ")) }
    )]
    UnknownKey {
        /// The estimator's name.
        estimator: &'static str,
        /// The key given.
        key: String,
        /// The estimator's keys.
        known: Vec<&'static str>,
    },

    /// A configuration value that does not parse as its key's type.
    #[error("estimator {estimator}: key {key} = {}: expected {expected}", Escaped(.value))]
    InvalidValue {
        /// The estimator's name.
        estimator: &'static str,
        /// The key.
        key: &'static str,
        /// The value given.
        value: String,
        /// What the value must look like.
        expected: &'static str,
    },

    /// Serialized input (for example an expert-walkthrough JSON file) could not be parsed or
    /// does not have the expected shape.
    #[error("cannot parse {what}: {}", Escaped(.reason))]
    Parse {
        /// What was being parsed.
        what: &'static str,
        /// The parser's message (with line and column where it gives them).
        reason: String,
    },

    /// A recorded trajectory or row (JSON Lines, see the `record` module) is malformed: invalid
    /// JSON, a missing or mistyped field, a non-finite number, or records that contradict each
    /// other (a repeated trajectory key, terminal rewards that differ within a trajectory).
    #[error("record at line {line}{}{}: {}", file_suffix(.file), field_suffix(.field), Escaped(.message))]
    Record {
        /// The input (file path, `-` for stdin) when the reader was given its name
        /// ([`JsonlReader::with_source`](crate::record::JsonlReader::with_source)).
        file: Option<String>,
        /// 1-based line of the record in its input (blank lines count). For records checked
        /// in memory, the record's 1-based position in the caller's slice.
        line: usize,
        /// Path of the offending field when known, e.g. `terminal_reward` or
        /// `steps[3].reward` (step index 0-based).
        field: Option<String>,
        /// What is wrong, in words.
        message: String,
    },

    /// One of several estimators compared side by side failed (its own error, or invalid
    /// advantages it produced); `name` is the display name the caller gave it and `source`
    /// the underlying error. Raised by the diagnostics comparisons
    /// ([`Diagnostics::compare`](crate::diagnostics::Diagnostics::compare) and
    /// [`Diagnostics::compare_estimators`](crate::diagnostics::Diagnostics::compare_estimators)),
    /// so that a table of many estimators says which one broke.
    #[error("estimator {}: {source}", Escaped(.name))]
    Estimator {
        /// The estimator's display name in the comparison.
        name: String,
        /// What went wrong.
        #[source]
        source: Box<Error>,
    },

    /// Two inputs that must describe the same rollout batch describe different ones (for
    /// example an [`EstimatorInput`](crate::estimator::EstimatorInput) built over another
    /// batch than the one being diagnosed): per-row values would be matched to the wrong rows.
    #[error("batch mismatch: {0}")]
    BatchMismatch(&'static str),

    /// The milestone flags of an [`EstimatorInput`](crate::estimator::EstimatorInput) differ
    /// from the ones a [`Diagnostics`](crate::diagnostics::Diagnostics) was prepared with: an
    /// estimator reading the input's flags (BEACON) and the metrics reading the diagnostics'
    /// (CCR, the sample split) would describe two milestone sets in one report. `row` is the
    /// first differing caller row.
    #[error("row {row}: the estimator input's milestone flag is {input}, but the diagnostics were prepared with {diagnosed}")]
    MilestoneMismatch {
        /// The first differing caller row.
        row: usize,
        /// The input's flag on that row.
        input: bool,
        /// The diagnostics' flag on that row.
        diagnosed: bool,
    },

    /// Reading or writing a file or stream failed. Holds the I/O error's kind and message (not
    /// the `std::io::Error` itself, so that `Error` stays `Clone + PartialEq`).
    #[error("I/O error: {}", Escaped(.message))]
    Io {
        /// The kind of the underlying I/O error.
        kind: std::io::ErrorKind,
        /// The underlying error's message, with the path or stream when known.
        message: String,
    },

    /// A size claimed by caller input (offsets, lengths, a `Lengths` mask's L) exceeds what
    /// the crate will allocate, or is within that limit but the allocator refused it (then
    /// `requested ≤ limit`): checked before allocating or by a fallible allocation, so a bogus
    /// claim is an error, not an abort.
    #[error("{what}: {}", capacity_message(*.requested, *.limit))]
    CapacityExceeded {
        /// The input making the claim.
        what: &'static str,
        /// The claimed size (`usize::MAX` when the claim itself overflowed).
        requested: usize,
        /// The largest accepted size.
        limit: usize,
    },

    /// A JSON Lines input has a line longer than the reader's limit (see
    /// [`JsonlReader::with_max_line_bytes`](crate::record::JsonlReader::with_max_line_bytes)):
    /// reading stops there instead of buffering an unbounded line.
    #[error("line {line}{} is longer than {limit} bytes (the maximum line length; raise it if the records are that long)", file_suffix(.file))]
    LineTooLong {
        /// The input, when the reader was given its name.
        file: Option<String>,
        /// 1-based line number of the long line.
        line: usize,
        /// The limit in bytes (line break not counted).
        limit: usize,
    },

    /// Trajectories of one group are not on contiguous lines: the group reappears after other
    /// groups' trajectories were read. Streaming group by group
    /// ([`TrajectoryGroups`](crate::record::TrajectoryGroups)) needs each group's lines together.
    #[error("group `{}` reappears at line {line}{} after it was closed (its trajectories must be on contiguous lines; it ended before line {closed_line}{})", Escaped(.group_id), file_suffix(.file), file_suffix(.closed_file))]
    GroupNotContiguous {
        /// The group's `group_id`.
        group_id: String,
        /// The input of the line where the group reappears.
        file: Option<String>,
        /// 1-based line where the group reappears.
        line: usize,
        /// The input where the group's earlier run ended.
        closed_file: Option<String>,
        /// The 1-based line of the first record after the group's earlier run.
        closed_line: usize,
    },

    /// A per-row response length (a prefix mask, `MaskView::Lengths`) exceeds the row's
    /// number of tokens.
    #[error("response length {length} of row {row} exceeds the {cols} tokens per row")]
    InvalidMask {
        /// The first row whose length is too large.
        row: usize,
        /// Its length.
        length: usize,
        /// Tokens per row (L).
        cols: usize,
    },

    /// An integer response mask (`u8`, `i64`) holds a value other than 0 and 1. verl multiplies
    /// by its mask, so a 2 would double a token's advantage there; a reader that took "nonzero"
    /// as generated would give another number, so neither is done silently.
    #[error("response_mask[{row}, {token}] = {value}: an integer mask holds only 0 and 1")]
    MaskValue {
        /// The row of the first invalid entry (row-major order).
        row: usize,
        /// Its token (column).
        token: usize,
        /// The value found.
        value: i64,
    },

    /// The step-row entry point (`estimate_steps_into`) was called on an estimator that only
    /// defines token-level advantages (GAE, REINFORCE++, ReMax, OTB, ...).
    #[error("estimator {estimator} has no step-level (one value per row) form")]
    NotStepLevel {
        /// The estimator's name.
        estimator: &'static str,
    },

    /// The terminal reward has two sources that disagree: the batch's terminal reward R(τ) of
    /// row `row`'s trajectory and the row's own score (the sum of its `token_level_rewards`),
    /// both given to an estimator that reads R(τ). `row` is the first such row in caller order.
    /// The two must agree to a relative 1e-6 (|a − b| ≤ 1e-6 · max(1, |a|, |b|), so that
    /// float32 token rewards of the same terminal reward pass).
    #[error("row {row}: token_level_rewards sum to {tokens}, but the batch's terminal reward of its trajectory is {batch}")]
    TerminalRewardMismatch {
        /// The first disagreeing caller row.
        row: usize,
        /// The batch's terminal reward of the row's trajectory.
        batch: f64,
        /// The row's score from `token_level_rewards`.
        tokens: f64,
    },

    /// A row's two scores disagree: its `row_scores` entry (the score the caller declares,
    /// e.g. verl-agent's reward sum after the invalid-action penalty) and the sum of its
    /// `token_level_rewards`, both given. `row` is the first such row in caller order; the
    /// tolerance is [`TerminalRewardMismatch`](Self::TerminalRewardMismatch)'s.
    #[error("row {row}: token_level_rewards sum to {tokens}, but its row_scores entry is {row_score}")]
    RowScoreMismatch {
        /// The first disagreeing caller row.
        row: usize,
        /// The row's `row_scores` entry.
        row_score: f64,
        /// The row's score from `token_level_rewards`.
        tokens: f64,
    },

    /// Two inputs give the same information and only one may be set (e.g. GiGPO's
    /// `anchor_obs` and `anchor_ids`).
    #[error("conflicting inputs: {first} and {second} are both set; give one")]
    ConflictingInputs {
        /// The first input.
        first: &'static str,
        /// The second input.
        second: &'static str,
    },

    /// A response mask read as per-row lengths
    /// ([`tensor::prefix_lengths_into`](crate::tensor::prefix_lengths_into)) is not a prefix
    /// mask: token `token` of row `row` is generated after a token that is not.
    #[error("response mask row {row} is not a prefix mask: token {token} is set after an unset token")]
    NotPrefixMask {
        /// The first such row.
        row: usize,
        /// The first generated token after the row's first non-generated one.
        token: usize,
    },

    /// `tree_parents` does not describe trees of the batch's rollouts (`tree_grpo`): an entry
    /// that names no row, a parent in another group, rows of one rollout naming different
    /// parents, or a cycle.
    #[error("tree_parents[{row}] = {parent}: {problem}")]
    InvalidTree {
        /// The first offending row.
        row: usize,
        /// Its `tree_parents` entry.
        parent: i64,
        /// What is wrong with it.
        problem: &'static str,
    },

    /// A `step_entropy` entry is negative (`empg`): a Shannon entropy is ≥ 0, so the column
    /// holds something else (log-probabilities, say).
    #[error("step_entropy[{index}] = {value}: an entropy is >= 0")]
    NegativeEntropy {
        /// Index of the entry (row order).
        index: usize,
        /// The entry.
        value: f64,
    },
}

fn capacity_message(requested: usize, limit: usize) -> String {
    if requested > limit {
        format!("{requested} exceeds the limit {limit}")
    } else {
        format!("{requested} could not be allocated (out of memory; the limit is {limit})")
    }
}

fn file_suffix(file: &Option<String>) -> String {
    file.as_ref()
        .map(|f| format!(" of {}", Escaped(f)))
        .unwrap_or_default()
}

fn field_suffix(field: &Option<String>) -> String {
    field
        .as_ref()
        .map(|f| format!(", field `{}`", Escaped(f)))
        .unwrap_or_default()
}

/// `Result` with [`Error`] as the error type.
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    const CLEAR: &str = "\u{1b}[2J";

    fn shown(e: Error) -> String {
        let text = e.to_string();
        assert!(!text.chars().any(hides_or_controls), "{text:?}");
        text
    }

    #[test]
    fn caller_text_in_messages_is_escaped() {
        let id = format!("t{CLEAR}\n\u{202e}x");
        let escaped = r"t\u{1b}[2J\u{a}\u{202e}x";
        let record = Error::Record {
            file: Some(id.clone()),
            line: 3,
            field: Some(id.clone()),
            message: format!("trajectory `{id}` appears twice"),
        };
        assert_eq!(
            shown(record),
            format!("record at line 3 of {escaped}, field `{escaped}`: trajectory `{escaped}` appears twice")
        );
        let group = Error::GroupNotContiguous {
            group_id: id.clone(),
            file: Some(id.clone()),
            line: 9,
            closed_file: None,
            closed_line: 4,
        };
        assert!(shown(group).starts_with(&format!("group `{escaped}` reappears at line 9 of {escaped}")));
        let too_long = Error::LineTooLong {
            file: Some(id.clone()),
            line: 1,
            limit: 8,
        };
        assert!(shown(too_long).starts_with(&format!("line 1 of {escaped} is longer")));
        let nested = Error::Estimator {
            name: id.clone(),
            source: Box::new(Error::Undefined(id.clone())),
        };
        assert_eq!(
            shown(nested),
            format!("estimator {escaped}: undefined for these inputs: {escaped}")
        );
        let parse = Error::Parse {
            what: "walkthrough JSON",
            reason: id.clone(),
        };
        assert_eq!(shown(parse), format!("cannot parse walkthrough JSON: {escaped}"));
        let io = Error::Io {
            kind: std::io::ErrorKind::NotFound,
            message: id.clone(),
        };
        assert_eq!(shown(io), format!("I/O error: {escaped}"));
        // Names already printed with `{:?}` stay escaped that way.
        assert!(!Error::UnknownEstimator {
            name: id.clone(),
            known: &[]
        }
        .to_string()
        .contains('\u{1b}'));
        // The fields keep the caller's text.
        let Error::Undefined(kept) = Error::Undefined(id.clone()) else {
            unreachable!()
        };
        assert_eq!(kept, id);
    }

    #[test]
    fn regex_messages_keep_their_lines_but_not_control_characters() {
        let e = Error::InvalidPattern {
            pattern: format!("({CLEAR}"),
            message: format!("regex parse error:\n    ({CLEAR}\n    ^\nerror: unclosed group"),
        };
        let text = e.to_string();
        assert!(!text.contains('\u{1b}'));
        assert_eq!(text.lines().count(), 4);
        assert!(text.contains(r"({\u{1b}[2J") || text.contains(r"(\u{1b}[2J"));
    }

    #[test]
    fn plain_text_is_unchanged() {
        let plain = "épisode 3 / tâche \\ `q` \"x\" 🙂";
        assert_eq!(Escaped(plain).to_string(), plain);
        assert_eq!(Escaped("").to_string(), "");
        // DEL and a C1 control (CSI, which some terminals act on like ESC [).
        assert_eq!(Escaped("a\u{7f}\u{9b}2J").to_string(), r"a\u{7f}\u{9b}2J");
    }
}
