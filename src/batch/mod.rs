//! Rollout batches: the group → trajectory → step layout of a trainer's rows, as two CSR
//! offset arrays, with each trajectory's terminal reward R(τ) and the map from internal steps
//! back to the caller's rows ([`RolloutBatch`]). Building one from per-row keys, in place and
//! reusably, is [`builder`]'s.

pub(crate) mod builder;
mod rewards;
mod step_rows;

use builder::BatchBuilder;
pub(crate) use rewards::first_row_mismatch;
use step_rows::StepRows;

use std::hash::Hash;

use crate::error::{check_finite, check_len, Error, Result};

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
/// let reward = [1.0, 0.0, 1.0, 0.0, 1.0]; // terminal reward repeated on every row
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
/// # One terminal reward
/// A batch carries each trajectory's terminal reward R(τ), given once per row by the key
/// constructors (rows of one trajectory must agree: [`Error::InconsistentTerminalReward`]).
/// The step-level estimators (BEACON, GiGPO, the ablations) read R(τ) from the batch; the
/// outcome estimators (verl's GRPO family, RLOO, ...) read each row's score as the sum of its
/// `token_level_rewards`, as verl does, and do not read the batch's rewards, except on step
/// rows ([`estimate_steps_into`](crate::estimator::AdvantageEstimator::estimate_steps_into),
/// where R(τ) is the score). When a step-level estimator or entry point is given
/// `token_level_rewards` too, both sources are present: it then checks every
/// row's token sum against its trajectory's R(τ) and returns
/// [`Error::TerminalRewardMismatch`] for the first row (in caller order) where they differ, so a
/// trainer never silently trains on one reward while logging another (to a relative 1e-6).
/// Where the rows of one trajectory carry different
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
    /// first call of [`try_step_rows`](Self::try_step_rows) or
    /// [`trajectory_rows`](Self::trajectory_rows), 8 bytes a step; estimators call them after
    /// checking that the caller's per-step columns have that many rows.
    ///
    /// ```
    /// use beacon_rl::{Error, RolloutBatch};
    /// let err = RolloutBatch::from_offsets(vec![0, 1], vec![0, 1 << 40], vec![0.0]).unwrap_err();
    /// assert!(matches!(err, Error::CapacityExceeded { requested, .. } if requested == 1 << 40));
    /// // A claim under the limit costs the arrays passed, not 8 bytes a step; its row index
    /// // is built on first use (fallibly through `try_step_rows`).
    /// let max = RolloutBatch::from_offsets(vec![0, 1], vec![0, RolloutBatch::MAX_STEPS], vec![0.0])?;
    /// assert_eq!(max.num_steps(), RolloutBatch::MAX_STEPS);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub const MAX_STEPS: usize = u32::MAX as usize;

    /// Builds a batch from verl-agent style per-row keys.
    ///
    /// `group_keys[r]` and `traj_keys[r]` name the group (`uid`) and trajectory (`traj_uid`)
    /// of row `r`; `terminal_rewards[r]` is the terminal reward of that row's trajectory (verl-agent
    /// repeats the terminal reward on every row). Rows of one trajectory are its steps in row
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
    pub fn from_row_keys<G, T>(group_keys: &[G], traj_keys: &[T], terminal_rewards: &[f64]) -> Result<Self>
    where
        G: Hash + Eq,
        T: Hash + Eq,
    {
        BatchBuilder::default().into_row_key_batch(group_keys, traj_keys, terminal_rewards)
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
    /// assert_eq!(batch.try_step_rows()?, &[0, 2, 1]);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn from_group_keys<G: Hash + Eq>(group_keys: &[G], rewards: &[f64]) -> Result<Self> {
        BatchBuilder::default().into_group_key_batch(group_keys, rewards)
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
    /// [`MAX_STEPS`](Self::MAX_STEPS) steps. The row index is built on first use: see
    /// [`try_step_rows`](Self::try_step_rows) for a claim the allocator may refuse.
    ///
    /// ```
    /// use beacon_rl::RolloutBatch;
    /// // One group of two trajectories with 3 and 2 steps.
    /// let batch = RolloutBatch::from_offsets(vec![0, 2], vec![0, 3, 5], vec![1.0, 0.0])?;
    /// assert_eq!(batch.num_steps(), 5);
    /// assert_eq!(batch.trajectory_rows(1), &[3, 4]);
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

    /// Internal step range of trajectory `j` (panics if `j >= num_trajectories()`).
    pub(crate) fn trajectory_steps(&self, j: usize) -> std::ops::Range<usize> {
        self.traj_offsets[j]..self.traj_offsets[j + 1]
    }

    /// The caller rows of trajectory `j`, in step order.
    ///
    /// # Panics
    /// If `j >= num_trajectories()`, like slice indexing.
    ///
    /// # Aborts
    /// As any allocation does, when the row index it reads cannot be allocated (a claim of
    /// [`MAX_STEPS`](Self::MAX_STEPS) steps needs 34 GB): call
    /// [`try_step_rows`](Self::try_step_rows) first for a batch of untrusted offsets.
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
    pub(crate) fn group_offsets(&self) -> &[usize] {
        &self.group_offsets
    }

    /// Trajectory offsets (length `num_trajectories() + 1`) into internal steps.
    pub(crate) fn trajectory_offsets(&self) -> &[usize] {
        &self.traj_offsets
    }

    /// [`try_step_rows`](Self::try_step_rows), built (every batch but one from offsets or
    /// blocks builds it at construction; the crate's entry points call `try_step_rows` first).
    pub(crate) fn step_rows(&self) -> &[usize] {
        &self.step_rows
    }

    /// For each internal step (trajectory-major order), the caller's row.
    ///
    /// The index of a batch from [`from_offsets`](Self::from_offsets) or
    /// [`from_blocks`](Self::from_blocks) (the identity, 8 bytes a step) is built on first use,
    /// and its size is whatever step count the offsets claim: where the allocator refuses it,
    /// this is an error, not an abort. After it succeeds,
    /// [`trajectory_rows`](Self::trajectory_rows) allocates nothing.
    ///
    /// # Errors
    /// [`Error::CapacityExceeded`] (`requested` = the step count, `≤ limit`) when the row index
    /// cannot be allocated.
    ///
    /// ```
    /// use beacon_rl::RolloutBatch;
    /// let batch = RolloutBatch::from_offsets(vec![0, 1], vec![0, 3], vec![1.0])?;
    /// assert_eq!(batch.try_step_rows()?, &[0, 1, 2]);
    /// let b = RolloutBatch::from_row_keys(&[0, 1, 0], &[0, 1, 0], &[1.0, 0.0, 1.0])?;
    /// assert_eq!(b.try_step_rows()?, &[0, 2, 1]);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn try_step_rows(&self) -> Result<&[usize]> {
        self.step_rows.try_built()
    }

    /// True when caller rows are already in internal (trajectory-major) order, so no gather
    /// is needed.
    pub(crate) fn rows_in_step_order(&self) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut builder = BatchBuilder::default();
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
    fn infinite_token_scores_disagree_with_finite_terminal_rewards() {
        // |±inf − 1| ≤ 1e-6·max(inf, 1, 1) = inf held before: an infinite score "agreed".
        let batch = RolloutBatch::from_group_keys(&[0, 0], &[1.0, 0.0]).unwrap();
        for bad in [f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(
                batch.check_row_scores(&[bad, 0.0]),
                Err(Error::TerminalRewardMismatch {
                    row: 0,
                    batch: 1.0,
                    tokens: bad
                })
            );
        }
        assert!(batch.check_row_scores(&[1.0, 0.0]).is_ok());
    }
}
