//! From trajectory records to the crate's inputs: a [`RolloutBatch`] and one milestone
//! [`Transition`] per row, borrowing the records' text.

use std::collections::HashMap;
use std::sync::OnceLock;

use super::schema::name;
use super::sealed::Sealed;
use super::{record_error, TrajectoryRecord};
use crate::batch::RolloutBatch;
use crate::error::Result;
use crate::estimator::EstimatorInput;
use crate::milestone::Transition;
use ndarray::Array2;

/// Trajectory records laid out as a [`RolloutBatch`], with each row's [`Transition`].
///
/// Rows are the records' steps in order: all steps of the first record, then of the second,
/// and so on (row = the caller's row for every per-row output of the crate). The batch is
/// built with [`RolloutBatch::from_row_keys`] from `group_id` (group key), the record (trajectory
/// key) and `terminal_reward` (repeated on each row), so groups and trajectories are numbered
/// in order of first appearance.
///
/// Row `r`, step t of its record, has the transition
/// - `observation` (s_t) = the previous step's `observation`, or `initial_observation` for
///   t = 0 (`""` when absent);
/// - `action` = the step's `action`; `next_observation` (s_{t+1}) = the step's `observation`;
/// - `score` = the previous step's `score`, or `initial_score` for t = 0; **no default**: a
///   record without `initial_score` has `score: None` at t = 0 (an unknown start is not
///   assumed to be 0, because some environments start above 0), so score-based detectors see
///   no milestone there; write `"initial_score": 0` when the environment starts at 0;
/// - `next_score` = the step's `score`; `env_flag` = its `milestone`; `new_subgoals` = its
///   `new_subgoals` (empty when absent).
///
/// Transitions borrow from the records: no string is copied. A detector runs over them with
/// [`milestone::detect_milestones`](crate::milestone::detect_milestones)`(rb.batch(), &mut detector, |row, _| rb.transition(row))`.
///
/// ```
/// use beacon_rl::milestone::{detect_milestones, ScoreIncrease};
/// use beacon_rl::record::{RecordBatch, StepRecord, TrajectoryRecord};
///
/// let step = |obs: &str, score: f64| StepRecord { score: Some(score), ..StepRecord::new("act", obs, 0.0, false) };
/// let mut a = TrajectoryRecord::new("g", "a", 1.0);
/// a.initial_observation = Some("s0".into());
/// a.initial_score = Some(0.0);
/// a.steps = vec![step("s1", 5.0), step("s2", 5.0)];
/// let mut b = TrajectoryRecord::new("g", "b", 0.0);
/// b.steps = vec![step("t1", 3.0)]; // no initial_score: step 0 has score None
/// let records = [a, b];
///
/// let rb = RecordBatch::new(&records)?;
/// assert_eq!(rb.batch().trajectory_rows(0), &[0, 1]);
/// let t1 = rb.transition(1);
/// assert_eq!((t1.step, t1.observation, t1.next_observation), (1, "s1", "s2"));
/// assert_eq!((t1.score, t1.next_score), (Some(5.0), Some(5.0)));
/// assert_eq!(detect_milestones(rb.batch(), &mut ScoreIncrease, |row, _| rb.transition(row))?, vec![true, false, false]);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct RecordBatch<'a> {
    records: &'a [TrajectoryRecord],
    batch: RolloutBatch,
    /// For each row, its record.
    row_record: Vec<usize>,
    /// For each record, its first row (length records + 1).
    first_row: Vec<usize>,
    /// The estimator columns, built on the first [`input`](Self::input).
    columns: OnceLock<Columns<'a>>,
}

impl<'a> RecordBatch<'a> {
    /// Validates the records and lays them out as a batch.
    ///
    /// # Errors
    /// [`Error::Record`](crate::Error::Record) (with `line` = the record's 1-based position in
    /// `records`) when a record is invalid (as [`JsonlRecord::validate`](super::JsonlRecord::validate)
    /// finds: no steps, a non-finite number; an `extra` key shadowing a named field is left to
    /// the writer) or repeats an earlier record's `traj_id` (field `traj_id`);
    /// [`Error::EmptyBatch`](crate::Error::EmptyBatch) for no records.
    ///
    /// ```
    /// use beacon_rl::record::{RecordBatch, StepRecord, TrajectoryRecord};
    /// use beacon_rl::Error;
    /// let mut rec = TrajectoryRecord::new("g", "a", 1.0);
    /// rec.steps.push(StepRecord::new("look", "A room.", 0.0, true));
    /// let twice = [rec.clone(), rec];
    /// let err = RecordBatch::new(&twice).unwrap_err();
    /// assert!(matches!(err, Error::Record { line: 2, field: Some(f), .. } if f == "traj_id"));
    /// assert_eq!(RecordBatch::new(&[]).unwrap_err(), Error::EmptyBatch);
    /// ```
    pub fn new(records: &'a [TrajectoryRecord]) -> Result<Self> {
        let mut seen: HashMap<&str, usize> = HashMap::with_capacity(records.len());
        let mut first_row = Vec::with_capacity(records.len() + 1);
        first_row.push(0);
        for (i, rec) in records.iter().enumerate() {
            // The values only: an `extra` key shadowing a named field matters to the writer.
            rec.validate_values(i + 1)?;
            if let Some(first) = seen.insert(rec.traj_id.as_str(), i) {
                return Err(record_error(
                    i + 1,
                    Some(name::TRAJ_ID.into()),
                    format!(
                        "trajectory `{}` appears twice (first as record {})",
                        rec.traj_id,
                        first + 1
                    ),
                ));
            }
            first_row.push(first_row[i] + rec.steps.len());
        }
        let rows = first_row[records.len()];
        let mut group_keys: Vec<&str> = Vec::with_capacity(rows);
        let mut traj_keys: Vec<usize> = Vec::with_capacity(rows);
        let mut rewards: Vec<f64> = Vec::with_capacity(rows);
        for (i, rec) in records.iter().enumerate() {
            let n = rec.steps.len();
            group_keys.extend(std::iter::repeat_n(rec.group_id.as_str(), n));
            // traj_ids are unique (checked above), so the record index is the trajectory key.
            traj_keys.extend(std::iter::repeat_n(i, n));
            rewards.extend(std::iter::repeat_n(rec.terminal_reward, n));
        }
        let batch = RolloutBatch::from_row_keys(&group_keys, &traj_keys, &rewards)?;
        Ok(Self {
            records,
            batch,
            row_record: traj_keys,
            first_row,
            columns: OnceLock::new(),
        })
    }

    /// The batch layout (groups, trajectories, terminal rewards).
    ///
    /// ```
    /// # use beacon_rl::record::{RecordBatch, StepRecord, TrajectoryRecord};
    /// # let mut rec = TrajectoryRecord::new("g", "a", 1.0);
    /// # rec.steps.push(StepRecord::new("look", "A room.", 0.0, true));
    /// # let records = [rec];
    /// let rb = RecordBatch::new(&records)?;
    /// assert_eq!(rb.batch().num_steps(), 1);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn batch(&self) -> &RolloutBatch {
        &self.batch
    }

    /// The records the batch was built from.
    ///
    /// ```
    /// # use beacon_rl::record::{RecordBatch, StepRecord, TrajectoryRecord};
    /// # let mut rec = TrajectoryRecord::new("g", "a", 1.0);
    /// # rec.steps.push(StepRecord::new("look", "A room.", 0.0, true));
    /// # let records = [rec];
    /// let rb = RecordBatch::new(&records)?;
    /// assert_eq!(rb.records()[0].traj_id, "a");
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn records(&self) -> &'a [TrajectoryRecord] {
        self.records
    }

    /// The (record index, step index) of a row.
    ///
    /// # Panics
    /// If `row` is not a row of [`batch`](Self::batch), like slice indexing.
    ///
    /// ```
    /// # use beacon_rl::record::{RecordBatch, StepRecord, TrajectoryRecord};
    /// # let step = StepRecord::new("a", "b", 0.0, true);
    /// # let mut x = TrajectoryRecord::new("g", "x", 1.0);
    /// # x.steps = vec![step.clone(), step.clone()];
    /// # let mut y = TrajectoryRecord::new("g", "y", 0.0);
    /// # y.steps = vec![step];
    /// # let records = [x, y];
    /// let rb = RecordBatch::new(&records)?; // records of 2 and 1 steps
    /// assert_eq!(rb.row_location(2), (1, 0));
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn row_location(&self, row: usize) -> (usize, usize) {
        let record = self.row_record[row];
        (record, row - self.first_row[record])
    }

    /// The milestone transition of a row (see the type's docs for the field mapping).
    ///
    /// # Panics
    /// If `row` is not a row of [`batch`](Self::batch), like slice indexing.
    ///
    /// ```
    /// use beacon_rl::record::{RecordBatch, StepRecord, TrajectoryRecord};
    /// let mut rec = TrajectoryRecord::new("g", "a", 1.0);
    /// rec.initial_observation = Some("A dark room.".into());
    /// rec.steps.push(StepRecord { milestone: Some(true), ..StepRecord::new("light lamp", "A lit room.", 1.0, true) });
    /// let records = [rec];
    /// let rb = RecordBatch::new(&records)?;
    /// let t = rb.transition(0);
    /// assert_eq!((t.observation, t.action, t.next_observation), ("A dark room.", "light lamp", "A lit room."));
    /// assert_eq!((t.score, t.env_flag), (None, Some(true)));
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn transition(&self, row: usize) -> Transition<'a> {
        let (record, t) = self.row_location(row);
        let rec = &self.records[record];
        let step = &rec.steps[t];
        let (observation, score) = match t.checked_sub(1).map(|p| &rec.steps[p]) {
            Some(prev) => (prev.observation.as_str(), prev.score),
            None => (
                rec.initial_observation.as_deref().unwrap_or(""),
                rec.initial_score,
            ),
        };
        Transition {
            step: t,
            observation,
            action: &step.action,
            next_observation: &step.observation,
            score,
            next_score: step.score,
            env_flag: step.milestone,
            new_subgoals: step.new_subgoals.as_deref().unwrap_or(&[]),
        }
    }

    /// An [`EstimatorInput`] over the batch with the columns the records give, one row per
    /// step, and the given milestone flags:
    ///
    /// - `token_level_rewards` (rows × 1): the trajectory's terminal reward on every row, as
    ///   verl-agent places the terminal reward on each step row's last token, so that verl's
    ///   outcome estimators (GRPO, RLOO, ...) group and normalise step rows by `uid`;
    /// - `response_mask` (rows × 1): all true (one "token" per row: the step's advantage);
    /// - `step_rewards`: each step's environment `reward` (GiGPO's step returns);
    /// - `anchor_obs`: the observation the action answered (s_t, see [`RecordBatch`]), GiGPO's
    ///   anchor state.
    ///
    /// The columns are built on the first call and kept (the text is borrowed from the
    /// records); later calls only set the flags.
    ///
    /// ```
    /// use beacon_rl::estimator::EstimatorConfig;
    /// # use beacon_rl::record::{RecordBatch, StepRecord, TrajectoryRecord};
    /// # let mut a = TrajectoryRecord::new("g", "a", 1.0);
    /// # a.initial_observation = Some("Kitchen.".into());
    /// # a.steps = vec![StepRecord::new("go", "Hall.", 0.5, false)];
    /// # let mut b = TrajectoryRecord::new("g", "b", 0.0);
    /// # b.steps = vec![StepRecord::new("go", "Hall.", 0.0, false)];
    /// # let records = [a, b];
    /// let rb = RecordBatch::new(&records)?;
    /// let flags = vec![false; rb.batch().num_steps()];
    /// let input = rb.input(&flags);
    /// assert_eq!(input.anchor_obs, Some(&["Kitchen.", ""][..]));
    /// assert_eq!(input.step_rewards, Some(&[0.5, 0.0][..]));
    /// assert_eq!(input.token_level_rewards.unwrap().get(0, 0), Some(1.0));
    /// // Every estimator but those needing a critic, a greedy baseline, log-probabilities,
    /// // a rollout tree or step entropies.
    /// let needs_more = ["gae", "turn_gae", "remax", "optimal_token_baseline", "tir_optimal_token_baseline", "tree_grpo", "empg"];
    /// for name in EstimatorConfig::NAMES.iter().filter(|n| !needs_more.contains(n)) {
    ///     let est = name.parse::<EstimatorConfig>()?.build()?;
    ///     let out = est.estimate(&rb.input(&flags))?;
    ///     assert_eq!(out.advantages.dim(), (2, 1), "{name}");
    /// }
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn input<'b>(&'b self, milestones: &'b [bool]) -> EstimatorInput<'b> {
        let c = self.columns.get_or_init(|| self.build_columns());
        EstimatorInput::new(&self.batch)
            .with_token_level_rewards(c.terminal_rewards.view())
            .with_response_mask(c.response_mask.view())
            .with_step_rewards(&c.step_rewards)
            .with_anchor_obs(&c.anchor_obs)
            .with_milestones(milestones)
    }

    fn build_columns(&self) -> Columns<'a> {
        let rows = self.batch.num_steps();
        let mut terminal = Array2::zeros((rows, 1));
        let mut step_rewards = Vec::with_capacity(rows);
        let mut anchors = Vec::with_capacity(rows);
        for row in 0..rows {
            let t = self.transition(row);
            let (record, step) = self.row_location(row);
            terminal[[row, 0]] = self.records[record].terminal_reward;
            step_rewards.push(self.records[record].steps[step].reward);
            anchors.push(t.observation);
        }
        Columns {
            terminal_rewards: terminal,
            response_mask: Array2::from_elem((rows, 1), true),
            step_rewards,
            anchor_obs: anchors,
        }
    }
}

/// Per-row estimator columns derived from records ([`RecordBatch::input`] lists them).
#[derive(Debug, Clone)]
struct Columns<'a> {
    terminal_rewards: Array2<f64>,
    response_mask: Array2<bool>,
    step_rewards: Vec<f64>,
    anchor_obs: Vec<&'a str>,
}
