use std::hash::{Hash, Hasher};

use crate::error::{check_finite, check_len, Error, Result};
use crate::hash::FxHasher;

/// A validated rollout batch: the group/trajectory/step layout and each trajectory's terminal
/// reward R(τ).
///
/// Groups and trajectories are numbered in order of first appearance in the caller's rows.
///
/// ```
/// use beacon_rl::RolloutBatch;
///
/// // Rows as a verl-agent trainer holds them: two trajectories of one task, interleaved.
/// let uid = ["task-7", "task-7", "task-7", "task-7", "task-7"];
/// let traj = ["a", "b", "a", "b", "a"];
/// let reward = [1.0, 0.0, 1.0, 0.0, 1.0]; // episode reward repeated on every row
/// let batch = RolloutBatch::from_row_keys(&uid, &traj, &reward)?;
///
/// assert_eq!(batch.num_groups(), 1);
/// assert_eq!(batch.num_trajectories(), 2);
/// assert_eq!(batch.trajectory_rows(0), &[0, 2, 4]); // trajectory "a", in step order
/// assert_eq!(batch.trajectory_rows(1), &[1, 3]);
/// assert_eq!(batch.terminal_rewards(), &[1.0, 0.0]);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
///
/// # Layout
///
/// A trainer hands the crate one batch per update: for each task (a *group*, verl's `uid`) it
/// sampled G trajectories (verl-agent's `traj_uid`), each a sequence of steps. [`RolloutBatch`]
/// stores that hierarchy as two CSR offset arrays, so that trajectory `j` owns the internal
/// steps `traj_offsets[j]..traj_offsets[j + 1]` and group `g` owns the trajectories
/// `group_offsets[g]..group_offsets[g + 1]`. Steps are stored trajectory-major (all steps of a
/// trajectory are adjacent, trajectories of a group are adjacent); `step_rows` maps each
/// internal step back to the caller's row, so every output comes back in the caller's order.
///
/// Three ways to build one:
/// - [`RolloutBatch::from_row_keys`]: verl-agent style, a group key and a trajectory key per
///   step row; rows of different trajectories may be interleaved and groups may come in any
///   order. Step order within a trajectory is row order.
/// - [`RolloutBatch::from_offsets`]: CSR offsets directly (rows already trajectory-major).
/// - [`RolloutBatch::from_blocks`]: TRL style, contiguous blocks of `G` trajectories per group.
///
/// A trainer that builds a batch per iteration keeps a [`BatchBuilder`] and rebuilds one batch
/// in place ([`BatchBuilder::rebuild_from_row_keys`]): no allocation after warm-up.
///
/// # One episode reward
/// A batch carries each trajectory's terminal reward R(τ), given once per row by the key
/// constructors (rows of one trajectory must agree: [`Error::InconsistentTerminalReward`]).
/// The step-level estimators (BEACON, GiGPO, the ablations) read R(τ) from the batch; the
/// outcome estimators (verl's GRPO family, RLOO, ...) read each row's score as the sum of its
/// `token_level_rewards`, as verl does, and do not read the batch's rewards, except on step
/// rows ([`estimate_steps_into`](crate::estimator::AdvantageEstimator::estimate_steps_into),
/// where R(τ) is the score). When a step-level estimator or entry point is given
/// `token_level_rewards` too, both sources are present: it then checks every
/// row's token sum against its trajectory's R(τ) and returns
/// [`Error::EpisodeRewardMismatch`] for the first row (in caller order) where they differ, so a
/// trainer never silently trains on one reward while logging another
/// ([`RolloutBatch::check_row_scores`]). Where the rows of one trajectory carry different
/// scores (verl-agent's invalid-action penalty), the caller gives each row's own score with
/// [`EstimatorInput::with_row_scores`](crate::estimator::EstimatorInput::with_row_scores): the
/// step paths then read those instead of R(τ), and token sums are checked against them.
#[derive(Debug, Clone, PartialEq)]
pub struct RolloutBatch {
    group_offsets: Vec<usize>,
    traj_offsets: Vec<usize>,
    /// Built on first use for batches from offsets (see `StepRows`).
    step_rows: StepRows,
    /// True when `step_rows` is the identity (rows already trajectory-major).
    identity_rows: bool,
    terminal_rewards: Vec<f64>,
}

impl RolloutBatch {
    /// The largest number of steps a batch may hold: 2³² − 1 (a 34 GB row index alone).
    /// [`from_offsets`](Self::from_offsets) and [`from_blocks`](Self::from_blocks) take the
    /// step count from caller-supplied offsets or lengths, not from data already in memory, so
    /// they check it against this limit and allocate nothing per claimed step: their memory is
    /// that of the arrays passed. The row index of such a batch (the identity) is built on the
    /// first call of [`step_rows`](Self::step_rows) or
    /// [`trajectory_rows`](Self::trajectory_rows), 8 bytes a step; estimators call them after
    /// checking that the caller's per-step columns have that many rows.
    ///
    /// ```
    /// use beacon_rl::{Error, RolloutBatch};
    /// let err = RolloutBatch::from_offsets(vec![0, 1], vec![0, 1 << 40], vec![0.0]).unwrap_err();
    /// assert!(matches!(err, Error::CapacityExceeded { requested, .. } if requested == 1 << 40));
    /// // A claim under the limit costs the arrays passed, not 8 bytes a step.
    /// let max = RolloutBatch::from_offsets(vec![0, 1], vec![0, RolloutBatch::MAX_STEPS], vec![0.0])?;
    /// assert_eq!(max.num_steps(), RolloutBatch::MAX_STEPS);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub const MAX_STEPS: usize = u32::MAX as usize;

    /// Builds a batch from verl-agent style per-row keys.
    ///
    /// `group_keys[r]` and `traj_keys[r]` name the group (`uid`) and trajectory (`traj_uid`)
    /// of row `r`; `row_rewards[r]` is the terminal reward of that row's trajectory (verl-agent
    /// repeats the episode reward on every row). Rows of one trajectory are its steps in row
    /// order. Any `Hash + Eq` key type works (`&str`, `String`, `u64` ids). A trainer building
    /// one batch per iteration should keep a [`BatchBuilder`] and rebuild in place
    /// ([`BatchBuilder::rebuild_from_row_keys`]), which allocates nothing after warm-up.
    ///
    /// # Errors
    /// [`Error::EmptyBatch`] for no rows, [`Error::LengthMismatch`] when the three columns
    /// differ in length, [`Error::NonFinite`] for a NaN or infinite reward,
    /// [`Error::TrajectoryAcrossGroups`] when a trajectory key appears under two group keys,
    /// [`Error::InconsistentTerminalReward`] when rows of one trajectory disagree on its reward.
    ///
    /// ```
    /// use beacon_rl::{Error, RolloutBatch};
    /// let err = RolloutBatch::from_row_keys(&[1, 2], &["t", "t"], &[0.0, 0.0]).unwrap_err();
    /// assert_eq!(err, Error::TrajectoryAcrossGroups { row: 1 });
    /// ```
    pub fn from_row_keys<G, T>(group_keys: &[G], traj_keys: &[T], row_rewards: &[f64]) -> Result<Self>
    where
        G: Hash + Eq,
        T: Hash + Eq,
    {
        let mut builder = BatchBuilder::new();
        builder.build(group_keys, TrajKeys(traj_keys), row_rewards)?;
        Ok(builder.spare)
    }

    /// Builds a batch where every row is its own one-step trajectory (single-turn RL, as in
    /// verl's outcome estimators): `group_keys[r]` is row `r`'s group (`uid`/`index`) and
    /// `rewards[r]` its score.
    ///
    /// # Errors
    /// As [`RolloutBatch::from_row_keys`].
    ///
    /// ```
    /// use beacon_rl::RolloutBatch;
    /// let batch = RolloutBatch::from_group_keys(&["q1", "q2", "q1"], &[1.0, 0.0, 0.0])?;
    /// assert_eq!(batch.num_groups(), 2);
    /// assert_eq!(batch.num_trajectories(), 3);
    /// assert_eq!(batch.step_rows(), &[0, 2, 1]);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn from_group_keys<G: Hash + Eq>(group_keys: &[G], rewards: &[f64]) -> Result<Self> {
        let mut builder = BatchBuilder::new();
        builder.build(group_keys, RowPerTraj, rewards)?;
        Ok(builder.spare)
    }

    /// Builds a batch from CSR offsets; rows are already trajectory-major (row = step index).
    ///
    /// `group_offsets` (length groups + 1) indexes trajectories; `traj_offsets` (length
    /// trajectories + 1) indexes steps; `terminal_rewards` has one entry per trajectory.
    ///
    /// # Errors
    /// [`Error::InvalidOffsets`] unless both arrays start at 0, never decrease and end at the
    /// length they index; [`Error::EmptyGroup`] / [`Error::EmptyTrajectory`] for an empty range;
    /// [`Error::EmptyBatch`]; [`Error::NonFinite`] for a NaN or infinite reward;
    /// [`Error::CapacityExceeded`] when the offsets claim more than
    /// [`MAX_STEPS`](Self::MAX_STEPS) steps or the row index cannot be allocated.
    ///
    /// ```
    /// use beacon_rl::RolloutBatch;
    /// // One group of two trajectories with 3 and 2 steps.
    /// let batch = RolloutBatch::from_offsets(vec![0, 2], vec![0, 3, 5], vec![1.0, 0.0])?;
    /// assert_eq!(batch.num_steps(), 5);
    /// assert_eq!(batch.trajectory_steps(1), 3..5);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn from_offsets(
        group_offsets: Vec<usize>,
        traj_offsets: Vec<usize>,
        terminal_rewards: Vec<f64>,
    ) -> Result<Self> {
        let num_traj = terminal_rewards.len();
        validate_offsets("group_offsets", &group_offsets, num_traj)?;
        let steps = *traj_offsets.last().unwrap_or(&0);
        validate_offsets("traj_offsets", &traj_offsets, steps)?;
        check_len("traj_offsets", num_traj + 1, traj_offsets.len())?;
        if steps == 0 {
            return Err(Error::EmptyBatch);
        }
        if let Some(group) = group_offsets.windows(2).position(|w| w[0] == w[1]) {
            return Err(Error::EmptyGroup { group });
        }
        if let Some(trajectory) = traj_offsets.windows(2).position(|w| w[0] == w[1]) {
            return Err(Error::EmptyTrajectory { trajectory });
        }
        check_finite("terminal_rewards", &terminal_rewards)?;
        // `steps` is a claim of the offsets, not backed by data the caller passed: nothing is
        // allocated for it here (the identity row index is built on first use), so memory is
        // that of the arrays passed; the documented limit still holds.
        if steps > Self::MAX_STEPS {
            return Err(Error::CapacityExceeded {
                what: "traj_offsets (number of steps)",
                requested: steps,
                limit: Self::MAX_STEPS,
            });
        }
        Ok(Self {
            group_offsets,
            traj_offsets,
            step_rows: StepRows::identity(steps),
            identity_rows: true,
            terminal_rewards,
        })
    }

    /// Builds a batch from TRL-style contiguous blocks: trajectories `0..G` form group 0,
    /// `G..2G` group 1, and so on; `traj_lens[j]` is the number of steps of trajectory `j`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for `group_size == 0`, [`Error::LengthMismatch`] when the
    /// number of trajectories is not a multiple of `group_size` or `terminal_rewards` differs in
    /// length from `traj_lens`, [`Error::CapacityExceeded`] when the lengths' sum overflows
    /// `usize`, plus the errors of [`RolloutBatch::from_offsets`].
    ///
    /// ```
    /// use beacon_rl::RolloutBatch;
    /// let batch = RolloutBatch::from_blocks(2, &[3, 1, 2, 2], vec![1.0, 0.0, 0.0, 0.0])?;
    /// assert_eq!(batch.num_groups(), 2);
    /// assert_eq!(batch.group_trajectories(1), 2..4);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn from_blocks(group_size: usize, traj_lens: &[usize], terminal_rewards: Vec<f64>) -> Result<Self> {
        if group_size == 0 {
            return Err(Error::InvalidConfig {
                name: "group_size",
                value: 0.0,
                expected: ">= 1",
            });
        }
        check_len("terminal_rewards", traj_lens.len(), terminal_rewards.len())?;
        let groups = traj_lens.len() / group_size;
        check_len(
            "traj_lens (multiple of group_size)",
            groups * group_size,
            traj_lens.len(),
        )?;
        let group_offsets = (0..=groups).map(|g| g * group_size).collect();
        let mut traj_offsets = Vec::with_capacity(traj_lens.len() + 1);
        traj_offsets.push(0);
        let mut acc = 0usize;
        for &len in traj_lens {
            // Checked: lengths are caller data, and their sum may not fit a usize.
            acc = acc.checked_add(len).ok_or(Error::CapacityExceeded {
                what: "traj_lens (sum of lengths overflows usize)",
                requested: usize::MAX,
                limit: Self::MAX_STEPS,
            })?;
            traj_offsets.push(acc);
        }
        Self::from_offsets(group_offsets, traj_offsets, terminal_rewards)
    }

    /// Number of groups.
    ///
    /// ```
    /// # use beacon_rl::RolloutBatch;
    /// let b = RolloutBatch::from_blocks(1, &[2, 2], vec![0.0, 1.0])?;
    /// assert_eq!(b.num_groups(), 2);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn num_groups(&self) -> usize {
        self.group_offsets.len() - 1
    }

    /// Number of trajectories.
    ///
    /// ```
    /// # use beacon_rl::RolloutBatch;
    /// let b = RolloutBatch::from_blocks(2, &[2, 2], vec![0.0, 1.0])?;
    /// assert_eq!(b.num_trajectories(), 2);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn num_trajectories(&self) -> usize {
        self.terminal_rewards.len()
    }

    /// Number of steps (= caller rows).
    ///
    /// ```
    /// # use beacon_rl::RolloutBatch;
    /// let b = RolloutBatch::from_blocks(2, &[2, 3], vec![0.0, 1.0])?;
    /// assert_eq!(b.num_steps(), 5);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn num_steps(&self) -> usize {
        self.step_rows.len()
    }

    /// Trajectory index range of group `g`.
    ///
    /// # Panics
    /// If `g >= num_groups()`, like slice indexing.
    ///
    /// ```
    /// # use beacon_rl::RolloutBatch;
    /// let b = RolloutBatch::from_blocks(2, &[2, 3, 1, 1], vec![0.0; 4])?;
    /// assert_eq!(b.group_trajectories(0), 0..2);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn group_trajectories(&self, g: usize) -> std::ops::Range<usize> {
        self.group_offsets[g]..self.group_offsets[g + 1]
    }

    /// Internal step range of trajectory `j`.
    ///
    /// # Panics
    /// If `j >= num_trajectories()`, like slice indexing.
    ///
    /// ```
    /// # use beacon_rl::RolloutBatch;
    /// let b = RolloutBatch::from_blocks(2, &[2, 3], vec![0.0; 2])?;
    /// assert_eq!(b.trajectory_steps(1), 2..5);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn trajectory_steps(&self, j: usize) -> std::ops::Range<usize> {
        self.traj_offsets[j]..self.traj_offsets[j + 1]
    }

    /// The caller rows of trajectory `j`, in step order.
    ///
    /// # Panics
    /// If `j >= num_trajectories()`, like slice indexing.
    ///
    /// ```
    /// # use beacon_rl::RolloutBatch;
    /// let b = RolloutBatch::from_row_keys(&[0, 0, 0], &["x", "y", "x"], &[1.0, 0.0, 1.0])?;
    /// assert_eq!(b.trajectory_rows(0), &[0, 2]);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn trajectory_rows(&self, j: usize) -> &[usize] {
        &self.step_rows[self.trajectory_steps(j)]
    }

    /// Group offsets (length `num_groups() + 1`) into trajectories.
    ///
    /// ```
    /// # use beacon_rl::RolloutBatch;
    /// let b = RolloutBatch::from_blocks(2, &[1, 1, 1, 1], vec![0.0; 4])?;
    /// assert_eq!(b.group_offsets(), &[0, 2, 4]);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn group_offsets(&self) -> &[usize] {
        &self.group_offsets
    }

    /// Trajectory offsets (length `num_trajectories() + 1`) into internal steps.
    ///
    /// ```
    /// # use beacon_rl::RolloutBatch;
    /// let b = RolloutBatch::from_blocks(2, &[1, 3], vec![0.0; 2])?;
    /// assert_eq!(b.trajectory_offsets(), &[0, 1, 4]);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn trajectory_offsets(&self) -> &[usize] {
        &self.traj_offsets
    }

    /// For each internal step (trajectory-major order), the caller's row.
    ///
    /// ```
    /// # use beacon_rl::RolloutBatch;
    /// let b = RolloutBatch::from_row_keys(&[0, 1, 0], &[0, 1, 0], &[1.0, 0.0, 1.0])?;
    /// assert_eq!(b.step_rows(), &[0, 2, 1]);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn step_rows(&self) -> &[usize] {
        &self.step_rows
    }

    /// True when caller rows are already in internal (trajectory-major) order, so no gather
    /// is needed.
    ///
    /// ```
    /// # use beacon_rl::RolloutBatch;
    /// let b = RolloutBatch::from_blocks(1, &[2], vec![0.0])?;
    /// assert!(b.rows_in_step_order());
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn rows_in_step_order(&self) -> bool {
        self.identity_rows
    }

    /// Terminal reward R(τ) of each trajectory, in batch order.
    ///
    /// ```
    /// # use beacon_rl::RolloutBatch;
    /// let b = RolloutBatch::from_blocks(2, &[1, 1], vec![1.0, 0.5])?;
    /// assert_eq!(b.terminal_rewards(), &[1.0, 0.5]);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn terminal_rewards(&self) -> &[f64] {
        &self.terminal_rewards
    }

    /// The per-row milestone flags for explicit milestone positions: `positions[j]` lists the
    /// 0-based step indices of trajectory `j` (batch order) that are milestone steps.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] unless there is one list per trajectory;
    /// [`Error::MilestoneOutOfRange`] for a position at or past the trajectory's length.
    ///
    /// ```
    /// use beacon_rl::RolloutBatch;
    /// let b = RolloutBatch::from_row_keys(&[0, 0, 0], &["x", "y", "x"], &[1.0, 0.0, 1.0])?;
    /// // trajectory "x" (rows 0, 2): milestone at its step 1 = row 2
    /// let flags = b.milestone_flags_from_positions(&[vec![1], vec![]])?;
    /// assert_eq!(flags, vec![false, false, true]);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn milestone_flags_from_positions<P: AsRef<[usize]>>(&self, positions: &[P]) -> Result<Vec<bool>> {
        check_len("milestone positions", self.num_trajectories(), positions.len())?;
        let mut flags = vec![false; self.num_steps()];
        for (j, ps) in positions.iter().enumerate() {
            let rows = self.trajectory_rows(j);
            for &p in ps.as_ref() {
                let row = *rows.get(p).ok_or(Error::MilestoneOutOfRange {
                    trajectory: j,
                    position: p,
                    len: rows.len(),
                })?;
                flags[row] = true;
            }
        }
        Ok(flags)
    }

    /// Checks a second source of episode rewards against the batch's: `scores[r]` (e.g. row
    /// r's `token_level_rewards` sum) must equal the terminal reward of row r's trajectory, to
    /// a relative 1e-6 (|a − b| ≤ 1e-6 · max(1, |a|, |b|), so that float32 token rewards of
    /// the same episode reward pass).
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] unless there is one score per row;
    /// [`Error::EpisodeRewardMismatch`] naming the first disagreeing row in caller order.
    ///
    /// ```
    /// use beacon_rl::{Error, RolloutBatch};
    /// let batch = RolloutBatch::from_row_keys(&[0; 4], &["a", "b", "a", "b"], &[1.0, 0.0, 1.0, 0.0])?;
    /// assert!(batch.check_row_scores(&[1.0, 0.0, 1.0, 0.0]).is_ok());
    /// assert!(batch.check_row_scores(&[1.0, 0.0, f64::from(1.0f32), 0.0]).is_ok());
    /// assert_eq!(
    ///     batch.check_row_scores(&[1.0, 0.0, 1.0, 0.5]),
    ///     Err(Error::EpisodeRewardMismatch { row: 3, batch: 0.0, tokens: 0.5 })
    /// );
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn check_row_scores(&self, scores: &[f64]) -> Result<()> {
        check_len("row scores", self.num_steps(), scores.len())?;
        self.check_scores_by(|r| scores[r])
    }

    /// [`check_row_scores`](Self::check_row_scores) for `token_level_rewards` (rows × L, each
    /// row's score its sum), when given; nothing to check otherwise. With `row_scores` (the
    /// caller's per-row scores, one per row, finite: checked by the caller) each row's sum is
    /// checked against its own entry instead of its trajectory's R(τ)
    /// ([`Error::RowScoreMismatch`]).
    pub(crate) fn check_token_scores(
        &self,
        rewards: Option<crate::tensor::FloatView<'_>>,
        row_scores: Option<&[f64]>,
    ) -> Result<()> {
        use crate::tensor::FloatView;
        let Some(m) = rewards else { return Ok(()) };
        check_len("token_level_rewards rows", self.num_steps(), m.dim().0)?;
        let first = match m {
            FloatView::F32(v) => {
                self.first_disagreement(row_scores, |r| v.row(r).iter().map(|&x| f64::from(x)).sum())
            }
            FloatView::F64(v) => self.first_disagreement(row_scores, |r| v.row(r).iter().sum()),
        };
        match (first, row_scores) {
            (None, _) => Ok(()),
            (Some((row, batch, tokens)), None) => Err(Error::EpisodeRewardMismatch { row, batch, tokens }),
            (Some((row, row_score, tokens)), Some(_)) => Err(Error::RowScoreMismatch {
                row,
                row_score,
                tokens,
            }),
        }
    }

    fn check_scores_by(&self, score: impl Fn(usize) -> f64) -> Result<()> {
        match self.first_disagreement(None, score) {
            Some((row, batch, tokens)) => Err(Error::EpisodeRewardMismatch { row, batch, tokens }),
            None => Ok(()),
        }
    }

    /// The first row (caller order) whose `score` disagrees with its expected score (its
    /// `row_scores` entry when given, else its trajectory's R(τ)): (row, expected, score).
    fn first_disagreement(
        &self,
        row_scores: Option<&[f64]>,
        score: impl Fn(usize) -> f64,
    ) -> Option<(usize, f64, f64)> {
        if let Some(expected) = row_scores {
            // One expected score per row: the first row in caller order is a plain scan.
            return first_row_mismatch(expected, score);
        }
        let mut first: Option<(usize, f64, f64)> = None;
        for (j, &expected) in self.terminal_rewards.iter().enumerate() {
            for &r in self.trajectory_rows(j) {
                let s = score(r);
                // Terminal rewards are finite (checked on construction).
                if !scores_agree(expected, s) && first.map_or(true, |(b, _, _)| r < b) {
                    first = Some((r, expected, s));
                }
            }
        }
        first
    }

    /// The row index ([`step_rows`](Self::step_rows)), built on first use like it, but with
    /// [`Error::CapacityExceeded`] where the allocator refuses it instead of an abort: for the
    /// paths no column of the batch's length backs (milestone flags are 1 byte a row, the
    /// index 8), whose row count may be only a [`from_offsets`](Self::from_offsets) claim.
    /// After it succeeds, [`trajectory_rows`](Self::trajectory_rows) allocates nothing.
    pub(crate) fn try_step_rows(&self) -> Result<&[usize]> {
        self.step_rows.try_built()
    }

    /// One `false` flag per row, or [`Error::CapacityExceeded`] where the allocator refuses
    /// them (the row count may be a claim, see [`try_step_rows`](Self::try_step_rows)).
    pub(crate) fn try_row_flags(&self) -> Result<Vec<bool>> {
        let n = self.num_steps();
        let mut flags = Vec::new();
        flags.try_reserve_exact(n).map_err(|_| Error::CapacityExceeded {
            what: "milestone flags (1 byte a row)",
            requested: n,
            limit: Self::MAX_STEPS,
        })?;
        flags.resize(n, false);
        Ok(flags)
    }

    /// Gathers a per-row column into internal step order (`out[s] = column[step_rows[s]]`).
    pub(crate) fn gather_into<T: Copy>(&self, column: &[T], out: &mut [T]) {
        if self.identity_rows {
            out.copy_from_slice(column);
        } else {
            for (o, &r) in out.iter_mut().zip(self.step_rows.iter()) {
                *o = column[r];
            }
        }
    }
}

/// Whether a row's score `s` (e.g. its token sum) agrees with the `expected` one: to a relative
/// 1e-6 (|s − e| ≤ 1e-6 · max(1, |s|, |e|)), so float32 token rewards of the same value pass.
/// An infinite `s` never agrees: its tolerance would be infinite too (`expected` is finite).
fn scores_agree(expected: f64, s: f64) -> bool {
    s.is_finite() && (s - expected).abs() <= 1e-6 * s.abs().max(expected.abs()).max(1.0)
}

/// The first row r (caller order) whose `score(r)` disagrees with `expected[r]` (finite, one
/// per row): (r, expected, score).
pub(crate) fn first_row_mismatch(
    expected: &[f64],
    score: impl Fn(usize) -> f64,
) -> Option<(usize, f64, f64)> {
    expected
        .iter()
        .enumerate()
        .map(|(r, &e)| (r, e, score(r)))
        .find(|&(_, e, s)| !scores_agree(e, s))
}

/// Reusable scratch for building [`RolloutBatch`]es from per-row keys, for a trainer that builds
/// one batch per iteration.
///
/// [`BatchBuilder::rebuild_from_row_keys`] rebuilds a batch in place: after the first batches
/// (once buffers reached the batch size) it allocates nothing. Keys are interned in
/// open-addressing tables of ids kept here (keys are compared through the first row that
/// carried them, so the tables hold no borrowed keys; a table is sized for the distinct keys,
/// not the rows), and a row whose key equals the previous row's is not hashed at all: for
/// trajectory-major rows (verl-agent's layout) only the first row of each trajectory and of
/// each group is hashed. Any `Hash + Eq` key works: `&str`, `String`, or the `u64` ids a
/// trainer holds.
///
/// Row keys and group keys ([`BatchBuilder::rebuild_from_group_keys`], where each row is its
/// own trajectory, numbered by its row, with no trajectory table) go through one builder.
/// While interning, it notes whether every row's group id and trajectory id is the previous
/// row's or a new one. When so (each trajectory's rows adjacent, each group's trajectories
/// adjacent: verl-agent's trajectory-major rows, verl's `uid` column with a prompt's responses
/// adjacent), the rows are already in step order and the batch is written in place, with no
/// sort; otherwise trajectories are ordered by group and rows scattered into step order
/// (counting sorts, stable). Both give the batch [`RolloutBatch::from_row_keys`] describes.
///
/// ```
/// use beacon_rl::BatchBuilder;
/// use beacon_rl::RolloutBatch;
///
/// let mut builder = BatchBuilder::new();
/// let mut batch = builder.from_row_keys(&[7u64, 7], &[1u64, 2], &[1.0, 0.0])?;
/// for iteration in 0..3u64 {
///     // New rollouts each iteration: integer uid / traj_uid columns, episode rewards.
///     let uid = [iteration, iteration, iteration, iteration];
///     let traj = [10, 10, 11, 11];
///     let reward = [1.0, 1.0, 0.0, 0.0];
///     builder.rebuild_from_row_keys(&mut batch, &uid, &traj, &reward)?;
///     assert_eq!(batch, RolloutBatch::from_row_keys(&uid, &traj, &reward)?);
///     assert!(batch.rows_in_step_order()); // trajectory-major rows: no sort
/// }
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct BatchBuilder {
    groups: KeyTable,
    /// Row-key builds only (group-key builds number trajectories by row).
    trajs: KeyTable,
    /// Each trajectory's group. Group-key builds fill it (each row's group) only when the rows
    /// need sorting.
    traj_group: Vec<usize>,
    /// Row-key builds: each trajectory's reward and step count, each row's trajectory.
    traj_reward: Vec<f64>,
    traj_len: Vec<usize>,
    row_traj: Vec<usize>,
    slot_of_traj: Vec<usize>,
    cursor: Vec<usize>,
    /// The batch being built; swapped with the caller's on success.
    spare: RolloutBatch,
}

impl Default for BatchBuilder {
    fn default() -> Self {
        Self {
            groups: KeyTable::default(),
            trajs: KeyTable::default(),
            traj_group: Vec::new(),
            traj_reward: Vec::new(),
            traj_len: Vec::new(),
            row_traj: Vec::new(),
            slot_of_traj: Vec::new(),
            cursor: Vec::new(),
            // Never seen by a caller before a successful build fills it.
            spare: RolloutBatch {
                group_offsets: Vec::new(),
                traj_offsets: Vec::new(),
                step_rows: StepRows::default(),
                identity_rows: true,
                terminal_rewards: Vec::new(),
            },
        }
    }
}

impl BatchBuilder {
    /// An empty builder.
    ///
    /// ```
    /// let _builder = beacon_rl::BatchBuilder::new();
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds a new batch, as [`RolloutBatch::from_row_keys`] (which calls this on a fresh
    /// builder), keeping the builder's scratch for later calls.
    ///
    /// # Errors
    /// As [`RolloutBatch::from_row_keys`].
    ///
    /// ```
    /// use beacon_rl::BatchBuilder;
    /// let batch = BatchBuilder::new().from_row_keys(&["q"; 2], &["a", "b"], &[1.0, 0.0])?;
    /// assert_eq!(batch.num_trajectories(), 2);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn from_row_keys<G, T>(
        &mut self,
        group_keys: &[G],
        traj_keys: &[T],
        row_rewards: &[f64],
    ) -> Result<RolloutBatch>
    where
        G: Hash + Eq,
        T: Hash + Eq,
    {
        self.build(group_keys, TrajKeys(traj_keys), row_rewards)?;
        Ok(self.spare.clone())
    }

    /// Rebuilds `batch` in place from new per-row keys, reusing its buffers and the builder's:
    /// no allocation once both have grown to the batch size. On error `batch` is unchanged.
    ///
    /// # Errors
    /// As [`RolloutBatch::from_row_keys`].
    ///
    /// ```
    /// use beacon_rl::BatchBuilder;
    /// use beacon_rl::Error;
    /// let mut builder = BatchBuilder::new();
    /// let mut batch = builder.from_row_keys(&["q"], &["a"], &[1.0])?;
    /// builder.rebuild_from_row_keys(&mut batch, &["p", "p", "q"], &["x", "y", "x"], &[0.0, 1.0, 0.0]).unwrap_err();
    /// assert_eq!(batch.num_steps(), 1); // the failed rebuild left it as it was
    /// builder.rebuild_from_row_keys(&mut batch, &["p", "p"], &["x", "y"], &[0.0, 1.0])?;
    /// assert_eq!(batch.terminal_rewards(), &[0.0, 1.0]);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn rebuild_from_row_keys<G, T>(
        &mut self,
        batch: &mut RolloutBatch,
        group_keys: &[G],
        traj_keys: &[T],
        row_rewards: &[f64],
    ) -> Result<()>
    where
        G: Hash + Eq,
        T: Hash + Eq,
    {
        self.build(group_keys, TrajKeys(traj_keys), row_rewards)?;
        std::mem::swap(&mut self.spare, batch);
        Ok(())
    }

    /// Rebuilds `batch` in place with every row its own one-step trajectory, as
    /// [`RolloutBatch::from_group_keys`]: no allocation once both have grown to the batch size.
    /// On error `batch` is unchanged.
    ///
    /// A row's trajectory is numbered by its row (nothing is hashed for it), and a group key is
    /// hashed only where it differs from the previous row's: one lookup per run of equal
    /// adjacent keys. When each group's rows form one contiguous run (no key recurs after a
    /// different one), the rows are already in step order and the batch is written without
    /// sorting them; otherwise rows are ordered by group (stably). Both give the batch
    /// [`RolloutBatch::from_group_keys`] describes.
    ///
    /// # Errors
    /// As [`RolloutBatch::from_row_keys`] (a trajectory cannot span groups here, nor disagree
    /// on its reward).
    ///
    /// ```
    /// use beacon_rl::BatchBuilder;
    /// let mut builder = BatchBuilder::new();
    /// let mut batch = builder.from_row_keys(&[0u64], &[0u64], &[0.0])?;
    /// // Group 3 recurs after group 4: its rows are gathered.
    /// builder.rebuild_from_group_keys(&mut batch, &[3u64, 4, 3], &[1.0, 0.0, 0.0])?;
    /// assert_eq!(batch.step_rows(), &[0, 2, 1]);
    /// assert!(!batch.rows_in_step_order());
    /// // verl's layout, a prompt's rows adjacent: group offsets at the runs, rows in order.
    /// builder.rebuild_from_group_keys(&mut batch, &["p", "p", "q", "r", "r"], &[1.0, 0.0, 1.0, 0.5, 0.0])?;
    /// assert_eq!(batch.group_offsets(), &[0, 2, 3, 5]);
    /// assert_eq!(batch.step_rows(), &[0, 1, 2, 3, 4]);
    /// assert!(batch.rows_in_step_order());
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn rebuild_from_group_keys<G: Hash + Eq>(
        &mut self,
        batch: &mut RolloutBatch,
        group_keys: &[G],
        rewards: &[f64],
    ) -> Result<()> {
        self.build(group_keys, RowPerTraj, rewards)?;
        std::mem::swap(&mut self.spare, batch);
        Ok(())
    }

    /// The checks every key constructor makes first, in this order (their errors are the
    /// same built or rebuilt, with or without trajectory keys; `traj_keys` is checked before).
    fn check_rows(rows: usize, row_rewards: &[f64]) -> Result<()> {
        check_len("row_rewards", rows, row_rewards.len())?;
        if rows == 0 {
            return Err(Error::EmptyBatch);
        }
        check_finite("row_rewards", row_rewards)
    }

    /// The one builder behind every key constructor, into `self.spare`.
    ///
    /// Groups and trajectories are numbered by first appearance, so along the rows an id is
    /// the previous row's, a new one (above every earlier id), or a recurring one (below the
    /// previous). `in_order` records that no id recurred. Then each trajectory's rows are
    /// adjacent and in row order, and trajectory t's group id never decreases with t: the
    /// layout is the identity (slot of trajectory t = t, step s = row s), written directly.
    /// Otherwise trajectories are ordered by group and rows scattered into step order.
    fn build<G: Hash + Eq, S: TrajSource>(
        &mut self,
        group_keys: &[G],
        trajs: S,
        row_rewards: &[f64],
    ) -> Result<()> {
        let rows = group_keys.len();
        trajs.check(rows)?;
        Self::check_rows(rows, row_rewards)?;

        self.groups.reset(rows);
        if !S::PER_ROW {
            self.trajs.reset(rows);
            self.traj_group.clear();
            self.traj_reward.clear();
            self.traj_len.clear();
            self.row_traj.clear();
        }
        let mut in_order = true;
        let (mut g, mut t) = (0, 0);
        for row in 0..rows {
            // A row with the previous row's key needs no lookup.
            if row == 0 || group_keys[row] != group_keys[row - 1] {
                if S::PER_ROW && !in_order {
                    // Rows since the last key change are group g's.
                    self.traj_group.resize(row, g);
                }
                let id = self.groups.id(row, |r| &group_keys[r]);
                if id < g {
                    if S::PER_ROW && in_order {
                        self.groups.runs_into(&mut self.traj_group, row);
                    }
                    in_order = false;
                }
                g = id;
            }
            if S::PER_ROW {
                // Trajectory = row: nothing to intern or check. Its group (`traj_group`, for
                // the sort) is recorded only once the rows are known to need one, and then a
                // run at a time.
                continue;
            }
            if row == 0 || trajs.key(row) != trajs.key(row - 1) {
                let id = self.trajs.id(row, |r| trajs.key(r));
                in_order &= id >= t;
                t = id;
            }
            if t == self.traj_group.len() {
                self.traj_group.push(g);
                self.traj_reward.push(row_rewards[row]);
                self.traj_len.push(0);
            } else if self.traj_group[t] != g {
                return Err(Error::TrajectoryAcrossGroups { row });
            } else if self.traj_reward[t] != row_rewards[row] {
                return Err(Error::InconsistentTerminalReward {
                    row,
                    expected: self.traj_reward[t],
                    value: row_rewards[row],
                });
            }
            self.traj_len[t] += 1;
            self.row_traj.push(t);
        }

        if S::PER_ROW && !in_order {
            self.traj_group.resize(rows, g);
        }
        let num_groups = self.groups.len();
        let num_traj = if S::PER_ROW { rows } else { self.traj_group.len() };
        let b = &mut self.spare;
        if in_order {
            // Group g starts at its first row's trajectory; trajectory t at its first row.
            b.group_offsets.clear();
            if S::PER_ROW {
                b.group_offsets.extend_from_slice(self.groups.first_rows());
            } else {
                let first = self.groups.first_rows().iter();
                b.group_offsets.extend(first.map(|&r| self.row_traj[r]));
            }
            b.group_offsets.push(num_traj);
            b.traj_offsets.clear();
            if S::PER_ROW {
                b.traj_offsets.extend(0..rows);
            } else {
                b.traj_offsets.extend_from_slice(self.trajs.first_rows());
            }
            b.traj_offsets.push(rows);
            b.terminal_rewards.clear();
            b.terminal_rewards.extend_from_slice(if S::PER_ROW {
                row_rewards
            } else {
                &self.traj_reward
            });
            // Written, not a lazy identity: that would drop the index's allocation, and the
            // next rebuild that sorts would allocate it again.
            b.step_rows.cleared().extend(0..rows);
            b.identity_rows = true;
            return Ok(());
        }

        // Order trajectories by group (stable: first appearance within the group).
        fill(&mut b.group_offsets, num_groups + 1, 0);
        for &g in &self.traj_group {
            b.group_offsets[g + 1] += 1;
        }
        prefix_sum(&mut b.group_offsets);
        self.cursor.clear();
        self.cursor.extend_from_slice(&b.group_offsets[..num_groups]);
        self.slot_of_traj.clear();
        for &g in &self.traj_group {
            self.slot_of_traj.push(self.cursor[g]);
            self.cursor[g] += 1;
        }
        fill(&mut b.traj_offsets, num_traj + 1, 0);
        fill(&mut b.terminal_rewards, num_traj, 0.0);
        for (t, &slot) in self.slot_of_traj.iter().enumerate() {
            let (len, reward) = if S::PER_ROW {
                (1, row_rewards[t])
            } else {
                (self.traj_len[t], self.traj_reward[t])
            };
            b.traj_offsets[slot + 1] = len;
            b.terminal_rewards[slot] = reward;
        }
        prefix_sum(&mut b.traj_offsets);

        // Scatter rows into trajectory-major step order (`cursor` = next step of each traj).
        self.cursor.clear();
        self.cursor
            .extend(self.slot_of_traj.iter().map(|&s| b.traj_offsets[s]));
        // Overwritten: a lazy identity index of an earlier batch is not built first.
        fill(b.step_rows.cleared(), rows, 0);
        for row in 0..rows {
            let t = if S::PER_ROW { row } else { self.row_traj[row] };
            b.step_rows[self.cursor[t]] = row;
            self.cursor[t] += 1;
        }
        // Never the identity here: were it, rows would run through the slots in order, each
        // trajectory's rows adjacent, so first-appearance ids would equal slot ranks (groups
        // in slot order too): no id would recur, and `in_order` would have held.
        debug_assert!(b.step_rows.iter().enumerate().any(|(s, &r)| s != r));
        b.identity_rows = false;
        Ok(())
    }
}

/// Where a build's trajectory ids come from. Monomorphised, so the group-key build's row
/// loop carries no test of the mode.
trait TrajSource {
    /// Every row is its own one-step trajectory, numbered by its row (group-key builds): no
    /// key is read, no table kept.
    const PER_ROW: bool;
    type Key: Hash + Eq;
    /// The trajectory-key column's length check (before the common checks: error order).
    fn check(&self, rows: usize) -> Result<()>;
    /// Row `row`'s trajectory key (row-key builds).
    fn key(&self, row: usize) -> Self::Key;
}

/// Row-key builds: the caller's `traj_keys`.
struct TrajKeys<'a, T>(&'a [T]);

impl<'a, T: Hash + Eq> TrajSource for TrajKeys<'a, T> {
    const PER_ROW: bool = false;
    type Key = &'a T;
    fn check(&self, rows: usize) -> Result<()> {
        check_len("traj_keys", rows, self.0.len())
    }
    fn key(&self, row: usize) -> &'a T {
        &self.0[row]
    }
}

/// Group-key builds.
struct RowPerTraj;

impl TrajSource for RowPerTraj {
    const PER_ROW: bool = true;
    type Key = ();
    fn check(&self, _rows: usize) -> Result<()> {
        Ok(())
    }
    fn key(&self, _row: usize) {}
}

/// Marks an empty table slot.
const NIL: usize = usize::MAX;

/// log2 of the table size for `n` keys: a power of two ≥ 4n, at least 8 slots. At load ≤ 1/4 a
/// lookup of a present key probes about 1.2 slots (1.5 at 1/2).
fn table_bits(n: usize) -> u32 {
    (4 * n).next_power_of_two().max(8).trailing_zeros()
}

fn fill<T: Copy>(v: &mut Vec<T>, len: usize, value: T) {
    v.clear();
    v.resize(len, value);
}

fn hash_of<K: Hash>(key: &K) -> u64 {
    let mut h = FxHasher::default();
    key.hash(&mut h);
    h.finish()
}

/// The distinct keys of a build's rows, numbered by first appearance, in an open-addressing
/// table of ids (`first_row[id]` is the row that introduced key `id`, through which keys are
/// compared: no borrowed key is kept). The table doubles when more than a quarter full, and a
/// build starts at the size the previous one needed (at most its own row count's): it costs
/// the distinct keys, not the rows (a group-key build of 3,840 rows in 16 groups clears 64
/// slots, not 2¹³), and rebuilds of one shape never grow it.
#[derive(Debug, Clone, Default)]
struct KeyTable {
    /// `NIL` or an id; a power of two ≥ 4 × ids.
    slots: Vec<usize>,
    first_row: Vec<usize>,
}

impl KeyTable {
    fn reset(&mut self, rows: usize) {
        let bits = table_bits(self.first_row.len().min(rows));
        self.first_row.clear();
        fill(&mut self.slots, 1 << bits, NIL);
    }

    fn len(&self) -> usize {
        self.first_row.len()
    }

    fn first_rows(&self) -> &[usize] {
        &self.first_row
    }

    /// Writes the id of each of the first `end` rows into `ids`, for rows whose ids never
    /// decreased so far: key `id`'s rows are then the run from its first row to the next key's.
    fn runs_into(&self, ids: &mut Vec<usize>, end: usize) {
        ids.clear();
        for (id, &next) in self.first_row.iter().enumerate().skip(1) {
            ids.resize(next, id - 1);
        }
        ids.resize(end, self.first_row.len() - 1);
    }

    /// The slot where a probe for `hash` starts (Fx mixes into the high bits: index by them).
    fn home(&self, hash: u64) -> usize {
        (hash >> (64 - self.slots.len().trailing_zeros())) as usize
    }

    /// The id of row `row`'s key `key(row)`, a new one if the key was not seen.
    fn id<K, F>(&mut self, row: usize, key: F) -> usize
    where
        K: Hash + Eq,
        F: Fn(usize) -> K,
    {
        let k = key(row);
        let mask = self.slots.len() - 1;
        let mut slot = self.home(hash_of(&k));
        loop {
            match self.slots[slot] {
                NIL => break,
                id if key(self.first_row[id]) == k => return id,
                _ => slot = (slot + 1) & mask,
            }
        }
        let id = self.first_row.len();
        self.first_row.push(row);
        if 4 * self.first_row.len() > self.slots.len() {
            self.grow(key);
        } else {
            self.slots[slot] = id;
        }
        id
    }

    /// Doubles the table and re-inserts every id (the new one included).
    fn grow<K, F>(&mut self, key: F)
    where
        K: Hash,
        F: Fn(usize) -> K,
    {
        let len = 2 * self.slots.len();
        fill(&mut self.slots, len, NIL);
        let mask = self.slots.len() - 1;
        for (id, &row) in self.first_row.iter().enumerate() {
            let mut slot = self.home(hash_of(&key(row)));
            while self.slots[slot] != NIL {
                slot = (slot + 1) & mask;
            }
            self.slots[slot] = id;
        }
    }
}

fn prefix_sum(v: &mut [usize]) {
    for i in 1..v.len() {
        v[i] += v[i - 1];
    }
}

fn validate_offsets(what: &'static str, offsets: &[usize], end: usize) -> Result<()> {
    if offsets.first() != Some(&0) {
        return Err(Error::InvalidOffsets {
            what,
            reason: "must start at 0",
        });
    }
    if offsets.windows(2).any(|w| w[1] < w[0]) {
        return Err(Error::InvalidOffsets {
            what,
            reason: "must not decrease",
        });
    }
    if offsets.last() != Some(&end) {
        return Err(Error::InvalidOffsets {
            what,
            reason: "must end at the length of the indexed column",
        });
    }
    Ok(())
}

/// A batch's row index (`RolloutBatch::step_rows`). Batches from offsets or blocks are
/// already in step order: their index is the identity `0..len`, built on first use (8 bytes a
/// step) instead of by the constructor, so that a constructor's memory is bounded by the
/// arrays the caller passed, whatever number of steps the offsets claim (issue 11).
#[derive(Clone, Default)]
struct StepRows {
    rows: std::sync::OnceLock<Vec<usize>>,
    /// The length while `rows` is not built (then the index is `0..len`).
    len: usize,
}

impl StepRows {
    /// `0..len`, not built yet.
    fn identity(len: usize) -> Self {
        Self {
            rows: std::sync::OnceLock::new(),
            len,
        }
    }

    /// Number of rows, without building the index.
    fn len(&self) -> usize {
        self.rows.get().map_or(self.len, Vec::len)
    }

    /// The index as an empty vector, to be filled (a lazy identity is dropped, not built).
    fn cleared(&mut self) -> &mut Vec<usize> {
        self.len = 0;
        match self.rows.get_mut() {
            // Keeps its allocation (a builder rebuilding in place allocates nothing).
            Some(rows) => rows.clear(),
            None => drop(self.rows.set(Vec::new())),
        }
        self.as_vec_mut()
    }

    /// The index, built here if it is not yet, fallibly (see `RolloutBatch::try_step_rows`).
    fn try_built(&self) -> Result<&[usize]> {
        if let Some(rows) = self.rows.get() {
            return Ok(rows);
        }
        let mut rows = Vec::new();
        rows.try_reserve_exact(self.len)
            .map_err(|_| Error::CapacityExceeded {
                what: "row index (8 bytes a row)",
                requested: self.len,
                limit: RolloutBatch::MAX_STEPS,
            })?;
        rows.extend(0..self.len);
        // Another thread may have built it meanwhile: then either copy is the same identity.
        Ok(self.rows.get_or_init(|| rows))
    }

    fn as_vec_mut(&mut self) -> &mut Vec<usize> {
        if self.rows.get().is_none() {
            let len = self.len;
            self.rows.get_or_init(|| (0..len).collect());
        }
        match self.rows.get_mut() {
            Some(rows) => rows,
            None => unreachable!("initialised above"),
        }
    }
}

impl std::ops::Deref for StepRows {
    type Target = Vec<usize>;
    fn deref(&self) -> &Vec<usize> {
        self.rows.get_or_init(|| (0..self.len).collect())
    }
}

impl std::ops::DerefMut for StepRows {
    fn deref_mut(&mut self) -> &mut Vec<usize> {
        self.as_vec_mut()
    }
}

impl PartialEq for StepRows {
    /// As the row lists: built or not, without building either.
    fn eq(&self, other: &Self) -> bool {
        match (self.rows.get(), other.rows.get()) {
            (Some(a), Some(b)) => a == b,
            (Some(v), None) | (None, Some(v)) => {
                let len = if self.rows.get().is_none() {
                    self.len
                } else {
                    other.len
                };
                v.len() == len && v.iter().copied().eq(0..len)
            }
            (None, None) => self.len == other.len,
        }
    }
}

/// A one-trajectory batch claiming `steps` rows, past [`RolloutBatch::MAX_STEPS`] too (which
/// `from_offsets` refuses): claims no machine can allocate for, so that the fallible paths'
/// tests fail the same way everywhere.
#[cfg(test)]
pub(crate) fn claiming(steps: usize) -> RolloutBatch {
    RolloutBatch {
        group_offsets: vec![0, 1],
        traj_offsets: vec![0, steps],
        step_rows: StepRows::identity(steps),
        identity_rows: true,
        terminal_rewards: vec![0.0],
    }
}

impl std::fmt::Debug for StepRows {
    /// As the row list (`[0, 1, 2]`), without building it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.rows.get() {
            Some(rows) => rows.fmt(f),
            None => f.debug_list().entries(0..self.len).finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_keys_groups_in_first_appearance_order_and_interleaving() {
        // rows: g1/a, g0/b, g1/a, g0/c, g0/b
        let g = ["g1", "g0", "g1", "g0", "g0"];
        let t = ["a", "b", "a", "c", "b"];
        let r = [1.0, 0.0, 1.0, 0.5, 0.0];
        let b = RolloutBatch::from_row_keys(&g, &t, &r).unwrap();
        assert_eq!(b.group_offsets(), &[0, 1, 3]);
        assert_eq!(b.trajectory_offsets(), &[0, 2, 4, 5]);
        assert_eq!(b.step_rows(), &[0, 2, 1, 4, 3]);
        assert_eq!(b.terminal_rewards(), &[1.0, 0.0, 0.5]);
        assert!(!b.rows_in_step_order());
    }

    #[test]
    fn claimed_rows_are_a_typed_error_where_they_cannot_be_allocated() {
        // 2^61 rows: an index of 2^64 bytes, past any address space.
        let b = claiming(1 << 61);
        assert_eq!(
            b.try_step_rows(),
            Err(Error::CapacityExceeded {
                what: "row index (8 bytes a row)",
                requested: 1 << 61,
                limit: RolloutBatch::MAX_STEPS,
            })
        );
        // 2^63 rows: 2^63 bytes of flags, past isize::MAX.
        assert_eq!(
            claiming(1 << 63).try_row_flags(),
            Err(Error::CapacityExceeded {
                what: "milestone flags (1 byte a row)",
                requested: 1 << 63,
                limit: RolloutBatch::MAX_STEPS,
            })
        );
        // Allocatable: the identity, built once and then shared with `trajectory_rows`.
        let b = claiming(3);
        assert_eq!(b.try_step_rows(), Ok(&[0, 1, 2][..]));
        assert!(std::ptr::eq(b.try_step_rows().unwrap(), b.trajectory_rows(0)));
        assert_eq!(b.try_row_flags(), Ok(vec![false; 3]));
    }

    #[test]
    fn row_keys_errors() {
        assert_eq!(
            RolloutBatch::from_row_keys::<&str, &str>(&[], &[], &[]),
            Err(Error::EmptyBatch)
        );
        assert!(matches!(
            RolloutBatch::from_row_keys(&["g"], &["t"], &[f64::NAN]),
            Err(Error::NonFinite { index: 0, .. })
        ));
        assert_eq!(
            RolloutBatch::from_row_keys(&["g", "g"], &["t", "t"], &[1.0, 0.0]),
            Err(Error::InconsistentTerminalReward {
                row: 1,
                expected: 1.0,
                value: 0.0
            })
        );
        assert!(matches!(
            RolloutBatch::from_row_keys(&["g"], &["t", "u"], &[1.0]),
            Err(Error::LengthMismatch {
                what: "traj_keys",
                ..
            })
        ));
    }

    #[test]
    fn group_keys_errors_are_the_same_built_or_rebuilt() {
        // 2 keys, 1 reward: the reward column is the short one, whether the batch is new or
        // rebuilt in place (the rebuild once named `traj_keys`, a column it is not given).
        let want = Err(Error::LengthMismatch {
            what: "row_rewards",
            expected: 2,
            actual: 1,
        });
        assert_eq!(RolloutBatch::from_group_keys(&[1u64, 2], &[0.0]), want);
        let mut builder = BatchBuilder::new();
        let mut batch = RolloutBatch::from_group_keys(&[1u64], &[0.0]).unwrap();
        assert_eq!(
            builder.rebuild_from_group_keys(&mut batch, &[1u64, 2], &[0.0]),
            want.map(|_: RolloutBatch| ())
        );
    }

    #[test]
    fn contiguous_group_keys_are_the_offsets_batch() {
        // Runs 7 7 7 | 2 2 | 9: three groups, each one run, rows already in step order.
        // Group offsets at the run starts 0, 3, 5 and the end 6; one step per trajectory.
        let r = [1.0, 0.0, 0.5, 1.0, 1.0, 0.25];
        let want = RolloutBatch::from_offsets(vec![0, 3, 5, 6], (0..=6).collect(), r.to_vec()).unwrap();
        let fresh = RolloutBatch::from_group_keys(&[7u64, 7, 7, 2, 2, 9], &r).unwrap();
        assert_eq!(fresh, want);
        assert_eq!(fresh.step_rows(), &[0, 1, 2, 3, 4, 5]);
        assert!(fresh.rows_in_step_order());
        // Rebuilt in place over a batch of another shape (more groups, rows out of order).
        let mut builder = BatchBuilder::new();
        let mut batch =
            RolloutBatch::from_group_keys(&["a", "b", "a", "c", "d", "e", "f"], &[0.0; 7]).unwrap();
        builder
            .rebuild_from_group_keys(&mut batch, &["x", "x", "x", "y", "y", "z"], &r)
            .unwrap();
        assert_eq!(batch, want);
        // One run; every row its own run.
        assert_eq!(
            RolloutBatch::from_group_keys(&[5; 3], &[0.0, 1.0, 0.0]).unwrap(),
            RolloutBatch::from_offsets(vec![0, 3], vec![0, 1, 2, 3], vec![0.0, 1.0, 0.0]).unwrap()
        );
        assert_eq!(
            RolloutBatch::from_group_keys(&[3, 1, 2], &[0.0, 1.0, 0.0]).unwrap(),
            RolloutBatch::from_offsets(vec![0, 1, 2, 3], vec![0, 1, 2, 3], vec![0.0, 1.0, 0.0]).unwrap()
        );
    }

    #[test]
    fn recurring_group_keys_are_gathered_by_group() {
        // rows:    0  1  2  3  4  5
        // keys:    a  a  b  a  c  b   (a recurs at row 3, b at row 5)
        // reward: .1 .2 .3 .4 .5 .6
        // Groups by first appearance: a = rows 0 1 3, b = rows 2 5, c = row 4.
        // group_offsets [0, 3, 5, 6]; steps in group order: rows 0 1 3 | 2 5 | 4, each its
        // own trajectory, so terminal rewards are the rows' rewards in that order.
        let r = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6];
        let keys = ["a", "a", "b", "a", "c", "b"];
        let fresh = RolloutBatch::from_group_keys(&keys, &r).unwrap();
        assert_eq!(fresh.group_offsets(), &[0, 3, 5, 6]);
        assert_eq!(fresh.trajectory_offsets(), &[0, 1, 2, 3, 4, 5, 6]);
        assert_eq!(fresh.step_rows(), &[0, 1, 3, 2, 5, 4]);
        assert_eq!(fresh.terminal_rewards(), &[0.1, 0.2, 0.4, 0.3, 0.6, 0.5]);
        assert!(!fresh.rows_in_step_order());
        // A builder that just took the contiguous path, and one that just built row keys.
        let mut builder = BatchBuilder::new();
        let mut batch = RolloutBatch::from_group_keys(&["p"; 9], &[1.0; 9]).unwrap();
        builder
            .rebuild_from_group_keys(&mut batch, &["q", "q", "r"], &[0.0; 3])
            .unwrap();
        builder.rebuild_from_group_keys(&mut batch, &keys, &r).unwrap();
        assert_eq!(batch, fresh);
        builder
            .rebuild_from_row_keys(&mut batch, &[0, 0], &[1, 2], &[0.0, 1.0])
            .unwrap();
        builder.rebuild_from_group_keys(&mut batch, &keys, &r).unwrap();
        assert_eq!(batch, fresh);
        // x y x: one recurrence, in the last run. Groups x = rows 0 2, y = row 1.
        let xyx = RolloutBatch::from_group_keys(&["x", "y", "x"], &[0.0, 0.5, 1.0]).unwrap();
        assert_eq!(xyx.group_offsets(), &[0, 2, 3]);
        assert_eq!(xyx.step_rows(), &[0, 2, 1]);
        assert_eq!(xyx.terminal_rewards(), &[0.0, 1.0, 0.5]);
        // a b a b: the last two runs both recur. Groups a = rows 0 2, b = rows 1 3.
        let ab = RolloutBatch::from_group_keys(&[1, 2, 1, 2], &[0.0; 4]).unwrap();
        assert_eq!(ab.group_offsets(), &[0, 2, 4]);
        assert_eq!(ab.step_rows(), &[0, 2, 1, 3]);
    }

    #[test]
    fn group_key_errors_in_order_on_either_path() {
        // Contiguous (a a b) or recurring (a b a) keys: the checks come before the layout,
        // in the order length, emptiness, finiteness; a failed rebuild changes nothing.
        let mut builder = BatchBuilder::new();
        let mut batch = RolloutBatch::from_group_keys(&[9, 9], &[0.5, 0.5]).unwrap();
        let before = batch.clone();
        for keys in [[1, 1, 2], [1, 2, 1]] {
            let short = Error::LengthMismatch {
                what: "row_rewards",
                expected: 3,
                actual: 2,
            };
            // Short and non-finite: the length is named.
            assert_eq!(
                RolloutBatch::from_group_keys(&keys, &[f64::NAN, 0.0]),
                Err(short.clone())
            );
            assert_eq!(
                builder.rebuild_from_group_keys(&mut batch, &keys, &[f64::NAN, 0.0]),
                Err(short)
            );
            let nan = builder.rebuild_from_group_keys(&mut batch, &keys, &[0.0, f64::INFINITY, f64::NAN]);
            assert!(matches!(nan, Err(Error::NonFinite { index: 1, .. })), "{nan:?}");
            assert_eq!(
                RolloutBatch::from_group_keys(&keys, &[0.0, f64::INFINITY, f64::NAN]),
                nan.map(|()| before.clone())
            );
            assert_eq!(batch, before);
        }
        assert_eq!(
            builder.rebuild_from_group_keys::<u64>(&mut batch, &[], &[]),
            Err(Error::EmptyBatch)
        );
        assert_eq!(
            builder.rebuild_from_group_keys::<u64>(&mut batch, &[], &[1.0]),
            Err(Error::LengthMismatch {
                what: "row_rewards",
                expected: 0,
                actual: 1
            })
        );
        assert_eq!(batch, before);
    }

    #[test]
    fn trajectory_major_row_keys_are_written_in_place() {
        // rows:   0  1  2  3  4  5
        // group:  u  u  u  v  v  w
        // traj:   a  a  b  c  c  d
        // Group ids 0 0 0 1 1 2 and trajectory ids 0 0 1 2 2 3 never decrease: identity.
        // Groups u = {a, b}, v = {c}, w = {d}: group_offsets [0, 2, 3, 4]. Trajectories start
        // at rows 0, 2, 3, 5: traj_offsets [0, 2, 3, 5, 6]. Rewards a 1, b 0, c 0.5, d 0.25.
        let g = ["u", "u", "u", "v", "v", "w"];
        let t = ["a", "a", "b", "c", "c", "d"];
        let r = [1.0, 1.0, 0.0, 0.5, 0.5, 0.25];
        let fresh = RolloutBatch::from_row_keys(&g, &t, &r).unwrap();
        assert_eq!(fresh.group_offsets(), &[0, 2, 3, 4]);
        assert_eq!(fresh.trajectory_offsets(), &[0, 2, 3, 5, 6]);
        assert_eq!(fresh.step_rows(), &[0, 1, 2, 3, 4, 5]);
        assert_eq!(fresh.terminal_rewards(), &[1.0, 0.0, 0.5, 0.25]);
        assert!(fresh.rows_in_step_order());
        let want =
            RolloutBatch::from_offsets(vec![0, 2, 3, 4], vec![0, 2, 3, 5, 6], vec![1.0, 0.0, 0.5, 0.25])
                .unwrap();
        assert_eq!(fresh, want);
        // Rebuilt in place after a batch that needed sorting, and the reverse.
        let mut builder = BatchBuilder::new();
        let mut batch = RolloutBatch::from_row_keys(&[1, 2, 1], &[5, 6, 7], &[0.0; 3]).unwrap();
        builder.rebuild_from_row_keys(&mut batch, &g, &t, &r).unwrap();
        assert_eq!(batch, want);
        assert!(batch.rows_in_step_order());
        builder
            .rebuild_from_row_keys(&mut batch, &[1, 2, 1], &[5, 6, 7], &[0.0; 3])
            .unwrap();
        assert_eq!(batch.step_rows(), &[0, 2, 1]);
        assert!(!batch.rows_in_step_order());
    }

    #[test]
    fn a_recurring_trajectory_within_in_order_groups_is_sorted() {
        // rows:   0  1  2  3
        // group:  u  u  u  v    ids 0 0 0 1 (never decrease)
        // traj:   a  b  a  c    ids 0 1 0 2 (a recurs at row 2: not the identity)
        // u = {a: rows 0 2, b: row 1}, v = {c: row 3}. Steps a0 a2 | b1 | c3.
        let fresh = RolloutBatch::from_row_keys(
            &["u", "u", "u", "v"],
            &["a", "b", "a", "c"],
            &[1.0, 0.0, 1.0, 0.5],
        )
        .unwrap();
        assert_eq!(fresh.group_offsets(), &[0, 2, 3]);
        assert_eq!(fresh.trajectory_offsets(), &[0, 2, 3, 4]);
        assert_eq!(fresh.step_rows(), &[0, 2, 1, 3]);
        assert_eq!(fresh.terminal_rewards(), &[1.0, 0.0, 0.5]);
        assert!(!fresh.rows_in_step_order());
    }

    #[test]
    fn a_recurring_group_with_in_order_trajectories_is_sorted() {
        // rows:   0  1  2  3
        // group:  p  p  q  p    ids 0 0 1 0 (p recurs at row 3: not the identity)
        // traj:   a  a  b  c    ids 0 0 1 2 (never decrease)
        // p = {a: rows 0 1, c: row 3}, q = {b: row 2}: slots a, c, b.
        // traj_offsets: lengths 2, 1, 1 -> [0, 2, 3, 4]; steps 0 1 | 3 | 2.
        let (g, t, r) = (["p", "p", "q", "p"], ["a", "a", "b", "c"], [1.0, 1.0, 0.0, 0.5]);
        let fresh = RolloutBatch::from_row_keys(&g, &t, &r).unwrap();
        assert_eq!(fresh.group_offsets(), &[0, 2, 3]);
        assert_eq!(fresh.trajectory_offsets(), &[0, 2, 3, 4]);
        assert_eq!(fresh.step_rows(), &[0, 1, 3, 2]);
        assert_eq!(fresh.terminal_rewards(), &[1.0, 0.5, 0.0]);
        assert!(!fresh.rows_in_step_order());
        // g0 g1 g0, one step each: p = {a, c}, q = {b}.
        let one = RolloutBatch::from_row_keys(&[0, 1, 0], &["a", "b", "c"], &[1.0, 0.0, 0.5]).unwrap();
        assert_eq!(one.group_offsets(), &[0, 2, 3]);
        assert_eq!(one.trajectory_offsets(), &[0, 1, 2, 3]);
        assert_eq!(one.step_rows(), &[0, 2, 1]);
        assert_eq!(one.terminal_rewards(), &[1.0, 0.5, 0.0]);
    }

    #[test]
    fn row_key_errors_at_the_same_row_in_either_layout() {
        let mut builder = BatchBuilder::new();
        let mut batch = RolloutBatch::from_row_keys(&[9], &[9], &[0.0]).unwrap();
        let before = batch.clone();
        let across = Err(Error::TrajectoryAcrossGroups { row: 3 });
        let reward = |row| {
            Err(Error::InconsistentTerminalReward {
                row,
                expected: 1.0,
                value: 0.5,
            })
        };
        // Group keys, trajectory keys, rewards, the error.
        type Case = (
            &'static [&'static str],
            &'static [&'static str],
            &'static [f64],
            Result<()>,
        );
        let cases: [Case; 5] = [
            // Rows 0..3 in order (ids 0 0 1 | 0 0 1), then trajectory a under group q.
            (
                &["p", "p", "q", "q"],
                &["a", "a", "b", "a"],
                &[0.0; 4],
                across.clone(),
            ),
            // Rows 0..3 out of order (groups 0 1 0), then the same.
            (&["p", "q", "p", "q"], &["a", "b", "a", "a"], &[0.0; 4], across),
            // Adjacent rows with one trajectory key and two group keys (no lookup of a).
            (
                &["p", "q"],
                &["a", "a"],
                &[0.0; 2],
                Err(Error::TrajectoryAcrossGroups { row: 1 }),
            ),
            // Trajectory a's second row, in order (a a b) and out of order (a b a).
            (&["p", "p", "p"], &["a", "a", "b"], &[1.0, 0.5, 0.0], reward(1)),
            (&["p", "p", "p"], &["a", "b", "a"], &[1.0, 0.0, 0.5], reward(2)),
        ];
        for (g, t, r, want) in cases {
            assert_eq!(
                RolloutBatch::from_row_keys(g, t, r).map(|_| ()),
                want,
                "{g:?} {t:?}"
            );
            assert_eq!(builder.rebuild_from_row_keys(&mut batch, g, t, r), want);
            assert_eq!(batch, before);
        }
    }

    #[test]
    fn key_tables_grow_past_their_first_size() {
        // 300 groups (a fresh table has 8 slots and doubles whenever a quarter full), each at
        // rows k and k + 300: group k = rows k, k + 300. Offsets step by 2; steps 0 300 1 301 ...
        let keys: Vec<u64> = (0..600).map(|row| (row % 300) * 1_000_003).collect();
        let r: Vec<f64> = (0..600).map(|row| row as f64).collect();
        let offsets: Vec<usize> = (0..=300).map(|k| 2 * k).collect();
        let steps: Vec<usize> = (0..300).flat_map(|k| [k, k + 300]).collect();
        let mut builder = BatchBuilder::new();
        let mut batch = RolloutBatch::from_group_keys(&[0], &[0.0]).unwrap();
        for _ in 0..2 {
            builder.rebuild_from_group_keys(&mut batch, &keys, &r).unwrap();
            assert_eq!(batch.group_offsets(), &offsets[..]);
            assert_eq!(batch.step_rows(), &steps[..]);
            // The same keys as trajectories (one per row pair) under one group each.
            builder
                .rebuild_from_row_keys(&mut batch, &keys, &keys, &r)
                .unwrap_err();
            let traj: Vec<u64> = (0..600).map(|row| row * 7).collect();
            builder
                .rebuild_from_row_keys(&mut batch, &keys, &traj, &r)
                .unwrap();
            assert_eq!(batch.group_offsets(), &offsets[..]);
            assert_eq!(batch.step_rows(), &steps[..]);
            // A small batch in between: the tables shrink back.
            builder
                .rebuild_from_group_keys(&mut batch, &[1, 1, 2], &[0.0; 3])
                .unwrap();
            assert_eq!(batch.group_offsets(), &[0, 2, 3]);
        }
    }

    #[test]
    fn offsets_errors() {
        let bad =
            |g: Vec<usize>, t: Vec<usize>, r: Vec<f64>| RolloutBatch::from_offsets(g, t, r).unwrap_err();
        assert!(matches!(
            bad(vec![1, 2], vec![0, 1, 2], vec![0.0; 2]),
            Error::InvalidOffsets { .. }
        ));
        assert!(matches!(
            bad(vec![0, 2], vec![0, 2, 1], vec![0.0; 2]),
            Error::InvalidOffsets { .. }
        ));
        assert!(matches!(
            bad(vec![0, 1], vec![0, 1, 2], vec![0.0; 2]),
            Error::InvalidOffsets { .. }
        ));
        assert_eq!(
            bad(vec![0, 0, 2], vec![0, 1, 2], vec![0.0; 2]),
            Error::EmptyGroup { group: 0 }
        );
        assert_eq!(
            bad(vec![0, 2], vec![0, 0, 2], vec![0.0; 2]),
            Error::EmptyTrajectory { trajectory: 0 }
        );
        assert_eq!(bad(vec![0], vec![0], vec![]), Error::EmptyBatch);
        assert!(matches!(
            bad(vec![0, 1], vec![0, 1], vec![f64::INFINITY]),
            Error::NonFinite { .. }
        ));
    }

    #[test]
    fn blocks_errors() {
        assert!(matches!(
            RolloutBatch::from_blocks(0, &[1], vec![0.0]),
            Err(Error::InvalidConfig { .. })
        ));
        assert!(matches!(
            RolloutBatch::from_blocks(2, &[1, 1, 1], vec![0.0; 3]),
            Err(Error::LengthMismatch { .. })
        ));
    }

    #[test]
    fn positions_out_of_range() {
        let b = RolloutBatch::from_blocks(1, &[2], vec![0.0]).unwrap();
        assert_eq!(
            b.milestone_flags_from_positions(&[[2]]),
            Err(Error::MilestoneOutOfRange {
                trajectory: 0,
                position: 2,
                len: 2
            })
        );
    }

    /// Issue 11 (C1): a claimed step count is not allocated by the constructors. Before, these
    /// claims allocated and wrote 8 bytes a step (34 GB for the first).
    #[test]
    fn claimed_steps_cost_nothing_until_the_row_index_is_used() {
        let max = RolloutBatch::MAX_STEPS;
        let a = RolloutBatch::from_offsets(vec![0, 1], vec![0, max], vec![0.0]).unwrap();
        assert_eq!((a.num_steps(), a.trajectory_steps(0)), (max, 0..max));
        assert!(a.rows_in_step_order());
        // Clone, equality and Debug do not build the index either.
        assert_eq!(a.clone(), a);
        let b = RolloutBatch::from_blocks(2, &[max - 1, 1], vec![0.0, 1.0]).unwrap();
        assert_eq!(b.num_steps(), max);
        assert_ne!(a, b);
        let c = RolloutBatch::from_blocks(1, &[max / 2, max / 2 + 1], vec![0.0; 2]).unwrap();
        assert_eq!(c.trajectory_offsets(), &[0, max / 2, max]);
        // One more step than the limit is an error, as before.
        assert!(RolloutBatch::from_blocks(1, &[max, 1], vec![0.0; 2]).is_err());
    }

    #[test]
    fn lazy_row_index_equals_the_built_one() {
        let lazy = RolloutBatch::from_offsets(vec![0, 2], vec![0, 3, 5], vec![1.0, 0.0]).unwrap();
        assert_eq!(format!("{lazy:?}"), format!("{:?}", lazy.clone()));
        let keyed =
            RolloutBatch::from_row_keys(&[0; 5], &[0, 0, 0, 1, 1], &[1.0, 1.0, 1.0, 0.0, 0.0]).unwrap();
        // Built (keyed) against not built (lazy), both orders; then both built.
        assert_eq!(keyed, lazy);
        assert_eq!(lazy, keyed);
        assert!(format!("{lazy:?}").contains("step_rows: [0, 1, 2, 3, 4]"));
        assert_eq!(lazy.step_rows(), &[0, 1, 2, 3, 4]);
        assert_eq!(lazy.trajectory_rows(1), &[3, 4]);
        assert_eq!(lazy, keyed);
        // Rebuilding a lazy batch in place gives the fresh batch.
        let mut rebuilt = RolloutBatch::from_offsets(vec![0, 1], vec![0, 1 << 20], vec![0.0]).unwrap();
        let mut builder = BatchBuilder::new();
        builder
            .rebuild_from_row_keys(&mut rebuilt, &[0, 0], &["x", "y"], &[1.0, 0.0])
            .unwrap();
        assert_eq!(
            rebuilt,
            RolloutBatch::from_row_keys(&[0, 0], &["x", "y"], &[1.0, 0.0]).unwrap()
        );
        assert_eq!(rebuilt.step_rows(), &[0, 1]);
    }

    #[test]
    fn infinite_token_scores_disagree_with_finite_episode_rewards() {
        // |±inf − 1| ≤ 1e-6·max(inf, 1, 1) = inf held before: an infinite score "agreed".
        let batch = RolloutBatch::from_group_keys(&[0, 0], &[1.0, 0.0]).unwrap();
        for bad in [f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(
                batch.check_row_scores(&[bad, 0.0]),
                Err(Error::EpisodeRewardMismatch {
                    row: 0,
                    batch: 1.0,
                    tokens: bad
                })
            );
        }
        assert!(batch.check_row_scores(&[1.0, 0.0]).is_ok());
    }
}
