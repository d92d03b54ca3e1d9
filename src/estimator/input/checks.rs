//! The checks every estimator runs on its [`EstimatorInput`] before reading it: presence,
//! shapes and finiteness of the columns, and where the step paths read each row's score.

use super::EstimatorInput;
use crate::batch::{first_row_mismatch, RolloutBatch};
use crate::error::{check_finite, check_len, Error, Result};
use crate::estimator::kernel::{all_finite, check_all_finite, check_matrix_shape, row_sums, Tokens};
use crate::estimator::workspace::InputBufs;
use crate::tensor::{FloatView, MaskView};

impl<'a> EstimatorInput<'a> {
    /// `token_level_rewards` as the caller's view, checked: present, one matrix row per batch
    /// row (the first checks of every token path).
    fn rewards_view(&self) -> Result<FloatView<'a>> {
        let rewards = self
            .token_level_rewards
            .ok_or(Error::MissingInput("token_level_rewards"))?;
        check_len(
            "token_level_rewards rows",
            self.batch.num_steps(),
            rewards.dim().0,
        )?;
        Ok(rewards)
    }

    /// `token_level_rewards`, checked: present, one matrix row per batch row, and (with
    /// [`FiniteCheck::Eager`]) finite.
    pub(crate) fn checked_rewards(&self, check: FiniteCheck, buf: &mut Vec<f64>) -> Result<Tokens<'a, f64>> {
        let rewards = Tokens::floats(self.rewards_view()?, buf);
        if check == FiniteCheck::Eager {
            check_all_finite("token_level_rewards", rewards.as_slice())?;
        }
        Ok(rewards)
    }

    /// The response mask, checked against `dim` (rows × L), and its lengths ≤ L. Not the
    /// entries of an integer mask: every reader tests them for 0/1 as it reads them (no pass
    /// of its own), see [`Tokens::mask`] and [`mask_row`].
    pub(crate) fn checked_mask(&self, dim: (usize, usize)) -> Result<MaskView<'a>> {
        let mask = self.response_mask.ok_or(Error::MissingInput("response_mask"))?;
        let (rows, cols) = mask.dim();
        check_len("response_mask rows", dim.0, rows)?;
        check_len("response_mask columns", dim.1, cols)?;
        mask.validate_lengths()?;
        Ok(mask)
    }

    /// `token_level_rewards` and `response_mask` as the caller's views, shapes checked against
    /// each other and the batch (not the rewards' finiteness nor the mask's entries: the
    /// kernels that read them check both, see [`FiniteCheck`] and [`mask_row`]).
    pub(crate) fn checked_views(&self) -> Result<(FloatView<'a>, MaskView<'a>)> {
        let rewards = self.rewards_view()?;
        Ok((rewards, self.checked_mask(rewards.dim())?))
    }

    /// `token_level_rewards` and `response_mask`, checked against each other and the batch,
    /// the mask's entries while it is converted. In this order: rewards present, their rows,
    /// (eager) their finiteness, then the mask's presence, shape, lengths and entries; so a
    /// non-finite reward is reported before a bad mask entry.
    pub(crate) fn checked_rewards_and_mask(
        &self,
        check: FiniteCheck,
        bufs: &mut InputBufs,
    ) -> Result<(Tokens<'a, f64>, Tokens<'a, bool>)> {
        let rewards = self.checked_rewards(check, &mut bufs.rewards)?;
        let mask = self.checked_mask(rewards.dim())?;
        Ok((rewards, Tokens::mask(mask, &mut bufs.mask)?))
    }

    /// Row scores (Σ_t token_level_rewards over all L positions, into `scores`) and the
    /// response mask, checked. One pass over the rewards, in the caller's dtype: the
    /// finiteness of every reward is implied by finite row sums, and only a non-finite sum
    /// triggers the search for the offending reward.
    ///
    /// The rewards are summed before the mask's presence and shape are checked: release 0.1's
    /// order (a non-finite reward is reported before a missing or misshapen mask), which
    /// `estimate_into`'s docs ("Order of the checks") state and
    /// `tests/it/fast_path_equivalence.rs` pins. The step path checks shapes first. Then
    /// `row_scores`, when given (length, finite, each equal to its row's sum).
    pub(crate) fn checked_scores_and_mask(&self, scores: &mut Vec<f64>) -> Result<MaskView<'a>> {
        let rewards = self.rewards_view()?;
        row_sums(rewards, scores);
        if !all_finite(scores) {
            if let Some((index, value)) = rewards.first_non_finite() {
                return Err(Error::NonFinite {
                    what: "token_level_rewards",
                    index,
                    value,
                });
            }
            check_finite("row scores (overflow)", scores)?;
        }
        // Shapes and lengths only: every caller ends in `Out::outcome`, whose write tests the
        // integer entries for 0/1 as it reads them (no pass of its own).
        let mask = self.checked_mask(rewards.dim())?;
        self.check_row_scores_against(scores)?;
        Ok(mask)
    }

    /// Where the step paths read each row's score: `row_scores` when given, else the batch's
    /// R(τ) of the row's trajectory.
    pub(crate) fn step_scores(&self) -> StepScores<'a> {
        StepScores {
            batch: self.batch,
            rows: self.row_scores,
        }
    }

    /// The step path's shapes shared by every step estimator, after its own columns': the
    /// length of `row_scores`, then the rows of `token_level_rewards`, when given.
    pub(crate) fn check_step_shapes(&self) -> Result<()> {
        let rows = self.batch.num_steps();
        if let Some(s) = self.row_scores {
            check_len("row_scores", rows, s.len())?;
        }
        if let Some(t) = self.token_level_rewards {
            check_len("token_level_rewards rows", rows, t.dim().0)?;
        }
        Ok(())
    }

    /// The step path's values shared by every step estimator, before its own: `row_scores`
    /// finite, then the token sums (when given) against each row's score, its `row_scores`
    /// entry or else its trajectory's R(τ) (two sources of a score must agree).
    pub(crate) fn check_step_values(&self) -> Result<()> {
        if let Some(s) = self.row_scores {
            check_finite("row_scores", s)?;
        }
        self.batch
            .check_token_scores(self.token_level_rewards, self.row_scores)
    }

    /// The token path's check of `row_scores` (a further column, after the rewards and the
    /// mask): one per row, finite, and equal to each row's token sum in `sums` (in caller
    /// order, so the first disagreeing row is the first in caller order).
    pub(crate) fn check_row_scores_against(&self, sums: &[f64]) -> Result<()> {
        let Some(s) = self.row_scores else { return Ok(()) };
        check_len("row_scores", self.batch.num_steps(), s.len())?;
        check_finite("row_scores", s)?;
        match first_row_mismatch(s, |r| sums[r]) {
            None => Ok(()),
            Some((row, row_score, tokens)) => Err(Error::RowScoreMismatch {
                row,
                row_score,
                tokens,
            }),
        }
    }

    /// A further rows × L float column, checked for presence, shape and (with
    /// [`FiniteCheck::Eager`]) finiteness.
    pub(crate) fn checked_matrix(
        &self,
        what: &'static str,
        column: Option<FloatView<'a>>,
        dim: (usize, usize),
        check: FiniteCheck,
        buf: &mut Vec<f64>,
    ) -> Result<Tokens<'a, f64>> {
        let m = column.ok_or(Error::MissingInput(what))?;
        check_matrix_shape(what, m.dim(), dim)?;
        let m = Tokens::floats(m, buf);
        if check == FiniteCheck::Eager {
            check_all_finite(what, m.as_slice())?;
        }
        Ok(m)
    }
}

/// The score of each row on the step paths: the caller's `row_scores` when given, else the
/// batch's R(τ) of the row's trajectory. The one place every step estimator reads it from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StepScores<'a> {
    batch: &'a RolloutBatch,
    rows: Option<&'a [f64]>,
}

impl<'a> StepScores<'a> {
    /// The batch's R(τ) only (the inherent `compute` methods, which take no row scores).
    pub(crate) fn of_batch(batch: &'a RolloutBatch) -> Self {
        Self { batch, rows: None }
    }

    /// The caller's per-row scores, when given (checked: one finite value per row).
    pub(crate) fn per_row(&self) -> Option<&'a [f64]> {
        self.rows
    }

    /// The score of caller row `r`, a row of trajectory `j`.
    #[inline]
    pub(crate) fn row(&self, j: usize, r: usize) -> f64 {
        match self.rows {
            Some(s) => s[r],
            None => self.batch.terminal_rewards()[j],
        }
    }

    /// Every row's score, into `scores` (caller order).
    pub(crate) fn write_rows(&self, scores: &mut Vec<f64>) {
        let batch = self.batch;
        scores.clear();
        match self.rows {
            Some(s) => scores.extend_from_slice(s),
            None => {
                scores.resize(batch.num_steps(), 0.0);
                for (j, &reward) in batch.terminal_rewards().iter().enumerate() {
                    for &r in batch.trajectory_rows(j) {
                        scores[r] = reward;
                    }
                }
            }
        }
    }

    /// For the estimators that count each trajectory once: every row of a trajectory must
    /// carry the same score (always so without `row_scores`).
    ///
    /// # Errors
    /// [`Error::InconsistentTerminalReward`] for the first row (caller order) whose score
    /// differs from its trajectory's first row's.
    pub(crate) fn check_trajectories_agree(&self) -> Result<()> {
        match self.rows {
            Some(s) => check_trajectories_agree(self.batch, s),
            None => Ok(()),
        }
    }

    /// Trajectory `j`'s score: its first row's (caller order), or R(τ).
    #[inline]
    pub(crate) fn trajectory(&self, j: usize) -> f64 {
        match self.rows {
            Some(s) => s[self.batch.trajectory_rows(j)[0]],
            None => self.batch.terminal_rewards()[j],
        }
    }
}

/// Every row of a trajectory carries the score of the trajectory's first row (`scores` one
/// per row, caller order): where each trajectory is counted once.
///
/// # Errors
/// [`Error::InconsistentTerminalReward`] for the first row (caller order) whose score differs
/// from its trajectory's first row's.
pub(crate) fn check_trajectories_agree(batch: &RolloutBatch, scores: &[f64]) -> Result<()> {
    let mut first: Option<(usize, f64, f64)> = None;
    for j in 0..batch.num_trajectories() {
        let rows = batch.trajectory_rows(j);
        let expected = scores[rows[0]];
        if let Some(&r) = rows.iter().find(|&&r| scores[r] != expected) {
            if first.is_none_or(|(b, _, _)| r < b) {
                first = Some((r, expected, scores[r]));
            }
        }
    }
    match first {
        Some((row, expected, value)) => Err(Error::InconsistentTerminalReward { row, expected, value }),
        None => Ok(()),
    }
}

/// When the finiteness of the float matrix inputs is checked.
///
/// A separate pass per input matrix costs as much as the estimator's own pass (the kernels
/// are memory-bound), so the token-level estimators validate with `Deferred` (presence and
/// shapes only), fold every input value into a [`FiniteAcc`](whiten::FiniteAcc) as their
/// kernel reads it, and only when that saw a non-finite value run the `Eager` validation
/// again, which returns exactly the error the eager checks would have returned up front.
/// See [`validate_deferred`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FiniteCheck {
    /// Presence, shapes and finiteness, in the documented order.
    Eager,
    /// Presence and shapes only; the kernel checks finiteness.
    Deferred,
}

/// Runs the validation `build` with [`FiniteCheck::Deferred`] and the workspace's buffers. If
/// that fails, returns the error of the eager validation instead (an earlier input may be
/// non-finite, and the eager order reports that first).
pub(crate) fn validate_deferred<T>(
    bufs: &mut InputBufs,
    build: impl Fn(FiniteCheck, &mut InputBufs) -> Result<T>,
) -> Result<T> {
    build(FiniteCheck::Deferred, bufs).map_err(|deferred| {
        match build(FiniteCheck::Eager, &mut InputBufs::default()) {
            Err(eager) => eager,
            Ok(_) => deferred,
        }
    })
}

/// Called when a kernel saw a non-finite input value or an integer mask entry other than 0
/// and 1: the eager validation's error (error path only, so it may allocate).
pub(crate) fn report_non_finite_input<T>(
    build: impl Fn(FiniteCheck, &mut InputBufs) -> Result<T>,
) -> Result<()> {
    build(FiniteCheck::Eager, &mut InputBufs::default()).map(|_| ())
}
