//! Verl-agent style per-row dumps: one JSON object per step row, grouped into trajectories.

use std::collections::HashMap;
use std::io::BufRead;

use serde::Serialize;

use super::jsonl::read_rows;
use super::schema::{self, name};
use super::{check_extra, check_finite_field, num, record_error, Extra, JsonlRecord, Value};
use super::{StepRecord, TrajectoryRecord};
use crate::error::Result;

/// One step row of a verl-agent style dump (the trainer's `non_tensor_batch` columns, one
/// object per row).
///
/// Field names follow verl-agent: `uid` (group), `traj_uid` (trajectory), `rewards` (the
/// step's reward; `reward` is accepted too), `episode_rewards` (verl-agent's name for the
/// trajectory's terminal reward, repeated on each of its rows; `episode_reward` accepted), optional `anchor_obs`
/// (what the agent saw before acting), and optionally the step's `action`, `observation`
/// (the environment's response), `score`, `done`, `milestone`, `new_subgoals`, `info`. Other
/// fields are kept in [`extra`](RowRecord::extra). See [`group_rows`] for the mapping to
/// [`TrajectoryRecord`]s.
///
/// ```
/// use beacon_rl::record::{JsonlRecord, RowRecord};
/// let row = RowRecord::from_json_line(
///     r#"{"uid": "q1", "traj_uid": "q1-a", "rewards": 0.5, "episode_rewards": 1, "anchor_obs": "You are in a kitchen.", "step": 0}"#,
///     1,
/// )?;
/// assert_eq!((row.reward, row.terminal_reward), (0.5, 1.0));
/// assert_eq!(row.extra.get("step").unwrap().get(), "0");
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RowRecord {
    /// The group key (verl's `uid`).
    pub uid: String,
    /// The trajectory key (verl-agent's `traj_uid`).
    pub traj_uid: String,
    /// The step's reward (`rewards`).
    #[serde(rename = "rewards", serialize_with = "num::ser")]
    pub reward: f64,
    /// The trajectory's terminal reward R(τ) (JSON field `episode_rewards`, verl-agent's name;
    /// `episode_reward` is read too), the same on all its rows.
    #[serde(rename = "episode_rewards", serialize_with = "num::ser")]
    pub terminal_reward: f64,
    /// s_t: the observation the agent acted on (verl-agent's GiGPO anchor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anchor_obs: Option<String>,
    /// a_t: the agent's action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// s_{t+1}: the environment's response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observation: Option<String>,
    /// The environment's running score after the step.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "num::ser_opt"
    )]
    pub score: Option<f64>,
    /// Whether the episode ended at this step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done: Option<bool>,
    /// A milestone flag reported for this step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub milestone: Option<bool>,
    /// Subgoals reported as newly completed at this step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_subgoals: Option<Vec<String>>,
    /// Free-form information from the environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info: Option<Value>,
    /// Every other field of the row, kept as JSON text.
    #[serde(flatten)]
    pub extra: Extra,
}

impl JsonlRecord for RowRecord {
    /// Finite rewards and score, no `extra` key shadowing a named field, and no padding row:
    /// verl-agent marks rows after an episode's end with `active_masks` false (or 0); such
    /// rows are not steps and must be dropped before grouping.
    fn validate(&self, line: usize) -> Result<()> {
        check_finite_field(line, || name::REWARDS.into(), self.reward)?;
        check_finite_field(line, || name::EPISODE_REWARDS.into(), self.terminal_reward)?;
        if let Some(s) = self.score {
            check_finite_field(line, || name::SCORE.into(), s)?;
        }
        check_extra(line, String::new, &self.extra, schema::ROW)?;
        let active = self
            .extra
            .value(name::ACTIVE_MASKS)
            .map_err(|e| record_error(line, Some(name::ACTIVE_MASKS.into()), e.to_string()))?;
        let inactive = match active {
            Some(Value::Bool(b)) => !b,
            Some(Value::Number(n)) => n.as_f64() == Some(0.0),
            _ => false,
        };
        if inactive {
            return Err(record_error(
                line,
                Some(name::ACTIVE_MASKS.into()),
                "inactive (padding) row: drop rows with active_masks false before grouping".into(),
            ));
        }
        Ok(())
    }
}

/// Groups verl-agent style rows into trajectory records.
///
/// `rows` yields `(line, row)`: `line` is the row's 1-based line, used in errors
/// ([`JsonlReader::line`](super::JsonlReader::line) after each record gives it; for rows in
/// memory use their 1-based position). Each row is validated first.
///
/// Mapping:
/// - one trajectory per `traj_uid`, in order of first appearance; its rows are its steps in
///   input order (rows of different trajectories may be interleaved);
/// - `group_id` = `uid`, `traj_id` = `traj_uid`, `terminal_reward` = `episode_rewards`;
/// - `initial_observation` = the first row's `anchor_obs`; `initial_score` is absent;
/// - step `observation` = the row's `observation`, else the next row's `anchor_obs` (the state
///   the action led to), else `""`; `action` = the row's `action`, else `""`;
/// - step `done` = the row's `done`, else true on the trajectory's last row only;
/// - `reward` = `rewards`; `score`, `milestone`, `new_subgoals`, `info` as given; the row's
///   other fields go to the step's `extra`.
///
/// # Errors
/// [`Error::Record`](crate::Error::Record) naming the row's line when a row is invalid
/// ([`JsonlRecord::validate`]), when its `uid` differs from the trajectory's first row
/// (field `uid`), when its `episode_rewards` differs from the trajectory's first row (field
/// `episode_rewards`), or when its `anchor_obs` differs from the previous row's explicit
/// `observation` (field `anchor_obs`: one state cannot have two texts).
///
/// ```
/// use beacon_rl::record::{group_rows, JsonlRecord, RowRecord};
/// let row = |traj: &str, anchor: &str, r: f64| RowRecord {
///     uid: "q".into(), traj_uid: traj.into(), reward: 0.0, terminal_reward: r,
///     anchor_obs: Some(anchor.into()), ..RowRecord::default()
/// };
/// // Two interleaved trajectories: a (rows 1, 3) and b (row 2).
/// let rows = vec![row("a", "s0", 1.0), row("b", "s0", 0.0), row("a", "s1", 1.0)];
/// let trajs = group_rows(rows.into_iter().enumerate().map(|(i, r)| (i + 1, r)))?;
/// assert_eq!(trajs.len(), 2);
/// assert_eq!(trajs[0].traj_id, "a");
/// assert_eq!(trajs[0].initial_observation.as_deref(), Some("s0"));
/// assert_eq!(trajs[0].steps[0].observation, "s1"); // the next row's anchor
/// assert_eq!((trajs[0].steps[0].done, trajs[0].steps[1].done), (false, true));
///
/// let bad = vec![(1, row("a", "s0", 1.0)), (2, row("a", "s1", 0.0))];
/// let err = group_rows(bad).unwrap_err();
/// assert!(matches!(err, beacon_rl::Error::Record { line: 2, .. }));
/// # Ok::<(), beacon_rl::Error>(())
/// ```
pub fn group_rows<I>(rows: I) -> Result<Vec<TrajectoryRecord>>
where
    I: IntoIterator<Item = (usize, RowRecord)>,
{
    let mut grouper = Grouper::default();
    for (line, row) in rows {
        grouper.push(line, row)?;
    }
    Ok(grouper.finish())
}

/// Reads a verl-agent style row dump (JSON Lines, one row a line) and groups it into
/// trajectory records as [`group_rows`] does; rows are streamed, not held twice.
///
/// # Errors
/// The first malformed row ([`Error::Record`](crate::Error::Record) with its line), the
/// errors of [`group_rows`], or [`Error::Io`](crate::Error::Io).
///
/// ```
/// use beacon_rl::record::read_row_dump;
/// let dump = concat!(
///     r#"{"uid": "q", "traj_uid": "a", "rewards": 0, "episode_rewards": 1, "anchor_obs": "s0", "action": "go"}"#, "\n",
///     r#"{"uid": "q", "traj_uid": "a", "rewards": 1, "episode_rewards": 1, "anchor_obs": "s1", "action": "win"}"#, "\n",
/// );
/// let trajs = read_row_dump(dump.as_bytes())?;
/// assert_eq!(trajs[0].steps.len(), 2);
/// assert_eq!(trajs[0].steps[1].action, "win");
/// # Ok::<(), beacon_rl::Error>(())
/// ```
pub fn read_row_dump<R: BufRead>(reader: R) -> Result<Vec<TrajectoryRecord>> {
    let mut grouper = Grouper::default();
    let mut rows = read_rows(reader);
    while let Some(next) = rows.next_numbered() {
        let (line, row) = next?;
        grouper.push(line, row)?;
    }
    Ok(grouper.finish())
}

/// Per-trajectory state while grouping.
struct Pending {
    first_line: usize,
    /// The last step has no `observation` yet: the next row's anchor fills it.
    observation: bool,
    /// The last step has no `done`: false if another row follows, else true.
    done: bool,
}

#[derive(Default)]
struct Grouper {
    index: HashMap<String, usize>,
    trajectories: Vec<TrajectoryRecord>,
    pending: Vec<Pending>,
}

impl Grouper {
    fn push(&mut self, line: usize, row: RowRecord) -> Result<()> {
        row.validate(line)?;
        let RowRecord {
            uid,
            traj_uid,
            reward,
            terminal_reward,
            anchor_obs,
            action,
            observation,
            score,
            done,
            milestone,
            new_subgoals,
            info,
            extra,
        } = row;
        let j = match self.index.get(&traj_uid) {
            Some(&j) => {
                self.continue_trajectory(j, line, &uid, terminal_reward, anchor_obs)?;
                j
            }
            None => {
                let j = self.trajectories.len();
                self.index.insert(traj_uid.clone(), j);
                self.trajectories.push(TrajectoryRecord {
                    initial_observation: anchor_obs,
                    ..TrajectoryRecord::new(uid, traj_uid, terminal_reward)
                });
                self.pending.push(Pending {
                    first_line: line,
                    observation: false,
                    done: false,
                });
                j
            }
        };
        self.pending[j].observation = observation.is_none();
        self.pending[j].done = done.is_none();
        self.trajectories[j].steps.push(StepRecord {
            action: action.unwrap_or_default(),
            observation: observation.unwrap_or_default(),
            score,
            reward,
            done: done.unwrap_or(false),
            milestone,
            new_subgoals,
            info,
            extra,
        });
        Ok(())
    }

    /// Checks a further row of trajectory `j` against it and settles its previous step.
    fn continue_trajectory(
        &mut self,
        j: usize,
        line: usize,
        uid: &str,
        terminal_reward: f64,
        anchor_obs: Option<String>,
    ) -> Result<()> {
        let traj = &mut self.trajectories[j];
        let pending = &self.pending[j];
        if traj.group_id != uid {
            return Err(record_error(
                line,
                Some(name::UID.into()),
                format!(
                    "trajectory `{}` has uid `{}` on line {} but `{uid}` here (a trajectory cannot span groups)",
                    traj.traj_id, traj.group_id, pending.first_line
                ),
            ));
        }
        if traj.terminal_reward != terminal_reward {
            return Err(record_error(
                line,
                Some(name::EPISODE_REWARDS.into()),
                format!(
                    "trajectory `{}` has terminal reward {} on line {} but {terminal_reward} here",
                    traj.traj_id, traj.terminal_reward, pending.first_line
                ),
            ));
        }
        // Rows of a known trajectory always follow one of its steps.
        if let Some(prev) = traj.steps.last_mut() {
            if let Some(anchor) = anchor_obs {
                if pending.observation {
                    prev.observation = anchor;
                } else if prev.observation != anchor {
                    return Err(record_error(
                        line,
                        Some(name::ANCHOR_OBS.into()),
                        format!(
                            "anchor_obs differs from the previous row's observation in trajectory `{}`",
                            traj.traj_id
                        ),
                    ));
                }
            }
            if pending.done {
                prev.done = false;
            }
        }
        Ok(())
    }

    fn finish(mut self) -> Vec<TrajectoryRecord> {
        for (traj, pending) in self.trajectories.iter_mut().zip(&self.pending) {
            if let (true, Some(last)) = (pending.done, traj.steps.last_mut()) {
                last.done = true;
            }
        }
        self.trajectories
    }
}
