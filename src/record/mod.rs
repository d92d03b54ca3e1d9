//! Recorded trajectories: a JSON Lines format for rollouts dumped by a trainer or an
//! environment, so that credit can be computed and inspected without writing code.
//!
//! Available with the `serde` feature (on by default); the module uses `serde_json`.
//!
//! # Format: one trajectory a line
//!
//! Each non-blank line is one JSON object, a [`TrajectoryRecord`]:
//!
//! ```text
//! {"group_id": "sw/find-animal/v146", "traj_id": "sw/find-animal/v146/0_gold",
//!  "terminal_reward": 1, "initial_observation": "This room is called the kitchen...",
//!  "initial_score": 0, "env": "scienceworld", "kind": "gold",
//!  "steps": [{"t": 0, "action": "open door to hallway", "observation": "The door is now open.",
//!             "score": 8, "reward": 8, "done": false, "milestone": true,
//!             "new_subgoals": ["Be in a room with an open door"], "isCompleted": false}, ...]}
//! ```
//!
//! (shown wrapped; in the file a record is one line). Trajectory fields: `group_id` (the
//! group, verl's `uid`: same task, same start), `traj_id` (unique over the file), the
//! terminal reward R(τ), optional `initial_observation` (s_0) and `initial_score`, and
//! `steps`. Step fields ([`StepRecord`]): `action` a_t, `observation` (the environment's
//! response, s_{t+1}), optional `score` (running score after the step), `reward`, `done`,
//! optional `milestone` flag, `new_subgoals` and free-form `info`. Any other field, at either
//! level (`t`, `env`, `task`, `isCompleted`, `meta`, ...), is kept in `extra` as its JSON text
//! ([`Extra`]: one string per record or step, not a map of values) and written back. A key
//! may appear once per object, named or not: a repeated key is an error.
//!
//! Round trips are exact: `read → write → read` gives equal records, and writing a record read
//! from a line gives JSON equal to that line when its numbers are written the usual way.
//! Two rules make that hold:
//! - Numbers of the named fields are `f64`; integral values up to 2^53 in magnitude are written
//!   without a fractional part (`1`, not `1.0`), others in shortest round-trip form. A line
//!   that writes `1.0` is read back equal but re-written as `1`.
//! - An explicit `null` in an optional named field reads as absent and is not written back.
//!
//! Unknown fields keep their text: numbers (`1.0`, `1e400`, 30-digit integers) and string
//! escapes as written, only the whitespace outside strings dropped; so writing a record read
//! from a file written by [`write_jsonl`] gives the same bytes.
//!
//! # Verl-agent row dumps
//!
//! Trainers in the verl-agent style hold one row per step (`uid`, `traj_uid`, `rewards`,
//! `episode_rewards`, `anchor_obs`); [`RowRecord`] reads such dumps and [`group_rows`] /
//! [`read_row_dump`] turn them into trajectory records (mapping documented on [`group_rows`]).
//!
//! # Reading, writing, errors
//!
//! [`read_trajectories`] streams records from any `BufRead` in constant memory (one line
//! buffer, at most [`JsonlReader::DEFAULT_MAX_LINE_BYTES`] = 64 MiB unless set with
//! [`JsonlReader::with_max_line_bytes`]; a longer line is an [`Error::LineTooLong`]),
//! skipping blank lines; [`write_jsonl`] writes one record a line. Every malformed record is an
//! [`Error::Record`] naming its line, its input (when the reader has a name,
//! [`JsonlReader::with_source`]) and, where it can be told, the
//! field path (`steps[3].reward`): invalid JSON or UTF-8, a missing, mistyped or repeated
//! field, `NaN` / `Infinity` (not JSON, but written by Python's `json.dumps`), numbers of named
//! fields out of range, no steps, non-finite numbers in records built in code. Describing an
//! error costs at most one more pass over the line.
//!
//! # Group by group
//!
//! [`TrajectoryGroups`] (several inputs in order) yield one [`RecordGroup`]
//! at a time, so a program holds one group, not the file. The rule that makes this possible:
//! **a group's trajectories are on contiguous lines**; a group that reappears after another
//! group is an [`Error::GroupNotContiguous`] naming the input and line. `traj_id`s are checked
//! unique over all inputs. Each group gives its own [`RecordBatch`]
//! (`RecordBatch::new(&group.records)`); for estimators whose result for a group depends only on that
//! group (GRPO, RLOO, GiGPO, BEACON, ...) this gives the same advantages as one batch of the
//! whole file.
//!
//! # From records to the crate's inputs
//!
//! [`RecordBatch`] turns `&[TrajectoryRecord]` (a file, or one group of it) into a
//! [`RolloutBatch`](crate::RolloutBatch)
//! (one row per step, records in file order) and gives each row's milestone
//! [`Transition`](crate::milestone::Transition) (s_t, a_t, s_{t+1}) borrowing the records'
//! text, so milestone detection over a file copies no strings.
//!
//! ```
//! use beacon_rl::milestone::{detect_milestones, EnvFlag, ScoreIncrease};
//! use beacon_rl::record::{read_trajectories, RecordBatch};
//!
//! let file = concat!(
//!     r#"{"group_id": "g", "traj_id": "a", "terminal_reward": 1, "initial_score": 0, "steps": ["#,
//!     r#"{"action": "take key", "observation": "Taken.", "score": 1, "reward": 1, "done": false, "milestone": true},"#,
//!     r#"{"action": "open door", "observation": "You win.", "score": 2, "reward": 1, "done": true, "milestone": true}]}"#,
//!     "\n\n", // blank lines are skipped
//!     r#"{"group_id": "g", "traj_id": "b", "terminal_reward": 0, "initial_score": 0, "steps": ["#,
//!     r#"{"action": "look", "observation": "A room.", "score": 0, "reward": 0, "done": true, "milestone": false}]}"#,
//! );
//! let records = read_trajectories(file.as_bytes()).collect::<Result<Vec<_>, _>>()?;
//! let rb = RecordBatch::new(&records)?;
//! assert_eq!(rb.batch().num_groups(), 1);
//! assert_eq!(rb.batch().terminal_rewards(), &[1.0, 0.0]);
//! // The score-increase detector agrees with the recorded flags.
//! let detected = detect_milestones(rb.batch(), &mut ScoreIncrease, |row, _| rb.transition(row))?;
//! assert_eq!(detected, detect_milestones(rb.batch(), &mut EnvFlag, |row, _| rb.transition(row))?);
//! # Ok::<(), beacon_rl::Error>(())
//! ```

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};
use schema::{name, Field};

mod convert;
mod de;
mod extra;
mod groups;
mod ids;
mod jsonl;
mod num;
mod rows;
mod scan;
mod schema;

pub use convert::RecordBatch;
pub use extra::Extra;
pub use groups::{RecordGroup, TrajectoryGroups};
pub use jsonl::{read_trajectories, write_jsonl, JsonlReader};
pub use rows::{group_rows, read_row_dump, RowRecord};
/// One recorded trajectory: a line of a trajectory JSON Lines file.
///
/// Named fields are the ones the crate uses; every other field of the line is kept in
/// [`extra`](TrajectoryRecord::extra) and written back. `extra` is declared before `steps` so
/// that written lines carry their metadata before the (long) step list.
///
/// ```
/// use beacon_rl::record::{JsonlRecord, StepRecord, TrajectoryRecord};
///
/// let line = r#"{"group_id": "g", "traj_id": "g/0", "terminal_reward": 1, "kind": "gold",
///   "steps": [{"action": "go north", "observation": "You are in a hall.", "reward": 0, "done": true}]}"#;
/// let rec = TrajectoryRecord::from_json_line(line, 1)?;
/// assert_eq!(rec.terminal_reward, 1.0);
/// assert_eq!(rec.extra.get("kind").unwrap().get(), r#""gold""#); // unknown fields are kept
///
/// // Built in code:
/// let mut built = TrajectoryRecord::new("g", "g/0", 1.0);
/// built.steps.push(StepRecord::new("go north", "You are in a hall.", 0.0, true));
/// built.extra.insert("kind", "gold");
/// assert_eq!(built, rec);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TrajectoryRecord {
    /// The group (verl's `uid`): trajectories sampled for the same task and start.
    pub group_id: String,
    /// The trajectory's key, unique over a file (verl-agent's `traj_uid`).
    pub traj_id: String,
    /// Terminal reward R(τ) of the trajectory.
    #[serde(serialize_with = "num::ser")]
    pub terminal_reward: f64,
    /// s_0: what the agent saw before its first action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_observation: Option<String>,
    /// The environment's score before the first step.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "num::ser_opt"
    )]
    pub initial_score: Option<f64>,
    /// Every other field of the line, kept as JSON text (`env`, `task`, `kind`, `meta`, ...).
    #[serde(flatten)]
    pub extra: Extra,
    /// The steps, in order. A record needs at least one.
    pub steps: Vec<StepRecord>,
}

/// One step of a [`TrajectoryRecord`]: the action a_t and the environment's response.
///
/// ```
/// use beacon_rl::record::StepRecord;
///
/// let step: StepRecord = serde_json::from_str(
///     r#"{"t": 3, "action": "focus on egg", "observation": "You focus on the egg.",
///         "score": 67, "reward": 50, "done": false, "milestone": true,
///         "new_subgoals": ["focus on an animal"]}"#,
/// )?;
/// assert_eq!(step.score, Some(67.0));
/// assert_eq!(step.new_subgoals.as_deref(), Some(&["focus on an animal".to_string()][..]));
/// assert_eq!(step.extra.get("t").unwrap().get(), "3"); // unknown fields are kept
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StepRecord {
    /// a_t: the agent's action.
    pub action: String,
    /// s_{t+1}: the environment's response to the action.
    pub observation: String,
    /// The environment's running score after the step, if it reports one.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "num::ser_opt"
    )]
    pub score: Option<f64>,
    /// The step's reward.
    #[serde(serialize_with = "num::ser")]
    pub reward: f64,
    /// Whether the episode ended at this step.
    pub done: bool,
    /// A milestone flag the environment (or the recorder) reports for this step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub milestone: Option<bool>,
    /// Subgoals reported as newly completed at this step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_subgoals: Option<Vec<String>>,
    /// Free-form information from the environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info: Option<Value>,
    /// Every other field of the step, kept as JSON text (`t`, `isCompleted`, ...).
    #[serde(flatten)]
    pub extra: Extra,
}

impl TrajectoryRecord {
    /// A record with the required fields set, no steps yet, and nothing else.
    ///
    /// ```
    /// use beacon_rl::record::TrajectoryRecord;
    /// let rec = TrajectoryRecord::new("task-1", "task-1/a", 0.0);
    /// assert!(rec.steps.is_empty() && rec.extra == Default::default());
    /// ```
    pub fn new(group_id: impl Into<String>, traj_id: impl Into<String>, terminal_reward: f64) -> Self {
        Self {
            group_id: group_id.into(),
            traj_id: traj_id.into(),
            terminal_reward,
            ..Self::default()
        }
    }
}

impl StepRecord {
    /// A step with the required fields set and nothing else.
    ///
    /// ```
    /// use beacon_rl::record::StepRecord;
    /// let step = StepRecord::new("open door", "The door is now open.", 0.0, false);
    /// assert_eq!(step.score, None);
    /// ```
    pub fn new(action: impl Into<String>, observation: impl Into<String>, reward: f64, done: bool) -> Self {
        Self {
            action: action.into(),
            observation: observation.into(),
            reward,
            done,
            ..Self::default()
        }
    }
}

/// A record type of a JSON Lines file: [`TrajectoryRecord`] or [`RowRecord`].
///
/// Adds what serde alone cannot check ([`validate`](JsonlRecord::validate)) and line-level
/// parsing with located errors. The trait is sealed.
///
/// ```
/// use beacon_rl::record::{JsonlRecord, TrajectoryRecord};
/// use beacon_rl::Error;
///
/// let line = r#"{"group_id": "g", "traj_id": "a", "terminal_reward": 1, "steps": [{"action": "x"}]}"#;
/// let err = TrajectoryRecord::from_json_line(line, 7).unwrap_err();
/// assert!(matches!(err, Error::Record { line: 7, field: Some(f), .. } if f == "steps[0].observation"));
/// ```
pub trait JsonlRecord: Serialize + for<'de> Deserialize<'de> + sealed::Sealed {
    /// Checks the record beyond its JSON types: finite numbers, at least one step, no `extra`
    /// key shadowing a named field. `line` goes into the error.
    ///
    /// # Errors
    /// [`Error::Record`] naming `line` and the offending field.
    ///
    /// ```
    /// use beacon_rl::record::{JsonlRecord, StepRecord, TrajectoryRecord};
    /// let mut rec = TrajectoryRecord::new("g", "a", f64::NAN);
    /// rec.steps.push(StepRecord::new("look", "A room.", 0.0, true));
    /// assert!(rec.validate(3).is_err());
    /// rec.terminal_reward = 1.0;
    /// assert!(rec.validate(3).is_ok());
    /// ```
    fn validate(&self, line: usize) -> Result<()>;

    /// Parses and validates one line (without its line break). `line` goes into errors.
    ///
    /// # Errors
    /// [`Error::Record`] naming `line` and, where it can be told, the field path.
    ///
    /// ```
    /// use beacon_rl::record::{JsonlRecord, TrajectoryRecord};
    /// use beacon_rl::Error;
    /// let err = TrajectoryRecord::from_json_line(
    ///     r#"{"group_id": "g", "traj_id": "a", "terminal_reward": NaN, "steps": []}"#, 2,
    /// ).unwrap_err();
    /// assert!(matches!(err, Error::Record { line: 2, field: Some(f), .. } if f == "terminal_reward"));
    /// ```
    fn from_json_line(text: &str, line: usize) -> Result<Self> {
        jsonl::parse_line(text.as_bytes(), line)
    }

    /// Validates and writes the record as one JSON line (no line break).
    ///
    /// # Errors
    /// [`Error::Record`] (with line 1) when [`validate`](JsonlRecord::validate) fails.
    ///
    /// ```
    /// use beacon_rl::record::{JsonlRecord, StepRecord, TrajectoryRecord};
    /// let mut rec = TrajectoryRecord::new("g", "a", 1.0);
    /// rec.steps.push(StepRecord::new("look", "A room.", 0.5, true));
    /// assert_eq!(
    ///     rec.to_json_line()?,
    ///     r#"{"group_id":"g","traj_id":"a","terminal_reward":1,"steps":[{"action":"look","observation":"A room.","reward":0.5,"done":true}]}"#
    /// );
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    fn to_json_line(&self) -> Result<String> {
        let mut buf = Vec::new();
        jsonl::encode(self, 1, &mut buf)?;
        // serde_json writes UTF-8 only.
        String::from_utf8(buf).map_err(|e| record_error(1, None, e.to_string()))
    }
}

impl JsonlRecord for TrajectoryRecord {
    fn validate(&self, line: usize) -> Result<()> {
        self.check(line, true)
    }
}

impl TrajectoryRecord {
    /// [`JsonlRecord::validate`]; `extra`: also check that no `extra` key is a named field
    /// (records read from a line cannot have one).
    fn check(&self, line: usize, extra: bool) -> Result<()> {
        check_finite_field(line, || name::TERMINAL_REWARD.into(), self.terminal_reward)?;
        if let Some(s) = self.initial_score {
            check_finite_field(line, || name::INITIAL_SCORE.into(), s)?;
        }
        if extra {
            check_extra(line, String::new, &self.extra, schema::TRAJECTORY)?;
        }
        if self.steps.is_empty() {
            return Err(record_error(
                line,
                Some(name::STEPS.into()),
                "a trajectory needs at least one step".into(),
            ));
        }
        for (t, step) in self.steps.iter().enumerate() {
            // Field paths are formatted on the error path only.
            check_finite_field(line, || format!("steps[{t}].reward"), step.reward)?;
            if let Some(s) = step.score {
                check_finite_field(line, || format!("steps[{t}].score"), s)?;
            }
            if extra {
                check_extra(
                    line,
                    || format!("{}[{t}].", name::STEPS),
                    &step.extra,
                    schema::STEP,
                )?;
            }
        }
        Ok(())
    }
}

/// Seals [`JsonlRecord`]: the record types and their schema tables.
mod sealed {
    use super::{de, schema};
    use crate::error::Result;
    use serde::Deserializer;
    use serde_json::Value;

    pub trait Sealed: Sized {
        /// The field a type error is on, and its message: `value` (the line, parsed) against
        /// the record's schema table (`schema::locate`).
        fn locate(value: &Value) -> Option<(Option<String>, String)>;

        /// `validate` without the `extra` check, for records just read from a line.
        fn validate_values(&self, line: usize) -> Result<()>;

        /// The record through serde, borrowing unknown fields' text (the JSON Lines reader's
        /// path).
        fn deserialize_borrowing<'de, D: Deserializer<'de>>(
            deserializer: D,
        ) -> std::result::Result<Self, D::Error>;

        /// The record read by a hand-written parser (into `reuse`'s allocations when given), or
        /// `None` to read it through serde (which then gives the record or the error). Must give
        /// what serde gives whenever it is `Some`.
        fn parse_fast(_text: &str, _reuse: Option<Self>) -> Option<Self> {
            None
        }
    }

    impl Sealed for super::TrajectoryRecord {
        fn locate(value: &Value) -> Option<(Option<String>, String)> {
            schema::locate(value, schema::TRAJECTORY, "")
        }

        fn deserialize_borrowing<'de, D: Deserializer<'de>>(
            deserializer: D,
        ) -> std::result::Result<Self, D::Error> {
            de::trajectory_borrowing(deserializer)
        }

        fn parse_fast(text: &str, reuse: Option<Self>) -> Option<Self> {
            let mut rec = reuse.unwrap_or_default();
            super::scan::trajectory_into(text, &mut rec).map(|()| rec)
        }

        fn validate_values(&self, line: usize) -> Result<()> {
            self.check(line, false)
        }
    }

    impl Sealed for super::RowRecord {
        fn locate(value: &Value) -> Option<(Option<String>, String)> {
            schema::locate(value, schema::ROW, "")
        }

        fn deserialize_borrowing<'de, D: Deserializer<'de>>(
            deserializer: D,
        ) -> std::result::Result<Self, D::Error> {
            de::row_borrowing(deserializer)
        }

        fn validate_values(&self, line: usize) -> Result<()> {
            // A row has few fields: the full check is cheap.
            super::JsonlRecord::validate(self, line)
        }
    }
}

/// Builds an [`Error::Record`].
fn record_error(line: usize, field: Option<String>, message: String) -> Error {
    Error::Record {
        file: None,
        line,
        field,
        message,
    }
}

fn check_finite_field(line: usize, field: impl FnOnce() -> String, value: f64) -> Result<()> {
    if value.is_finite() {
        Ok(())
    } else {
        Err(record_error(
            line,
            Some(field()),
            format!("non-finite number {value}"),
        ))
    }
}

/// An `extra` key equal to a named field would be written twice (only possible for records
/// built in code).
fn check_extra(
    line: usize,
    prefix: impl FnOnce() -> String,
    extra: &Extra,
    named: &'static [Field],
) -> Result<()> {
    match extra.find_any(schema::all_names(named)) {
        None => Ok(()),
        Some(n) => Err(record_error(
            line,
            Some(format!("{}{n}", prefix())),
            format!("`extra` holds `{n}`, which is a named field; set the field instead"),
        )),
    }
}
