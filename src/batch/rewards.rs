//! The batch's terminal rewards against a second source of them (token sums, row scores):
//! equal to a relative 1e-6, or an error naming the first row that differs.

use super::RolloutBatch;
use crate::error::{check_len, Error, Result};

impl RolloutBatch {
    /// Checks a second source of terminal rewards against the batch's: `scores[r]` (e.g. row
    /// r's `token_level_rewards` sum) must equal the terminal reward of row r's trajectory, to
    /// a relative 1e-6 (|a − b| ≤ 1e-6 · max(1, |a|, |b|), so that float32 token rewards of
    /// the same terminal reward pass).
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] unless there is one score per row;
    /// [`Error::TerminalRewardMismatch`] naming the first disagreeing row in caller order.
    #[cfg(test)]
    pub(crate) fn check_row_scores(&self, scores: &[f64]) -> Result<()> {
        check_len("row scores", self.num_steps(), scores.len())?;
        self.check_scores_by(|r| scores[r])
    }

    /// The same check for `token_level_rewards` (rows × L, each
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
            (Some((row, batch, tokens)), None) => Err(Error::TerminalRewardMismatch { row, batch, tokens }),
            (Some((row, row_score, tokens)), Some(_)) => Err(Error::RowScoreMismatch {
                row,
                row_score,
                tokens,
            }),
        }
    }

    #[cfg(test)]
    fn check_scores_by(&self, score: impl Fn(usize) -> f64) -> Result<()> {
        match self.first_disagreement(None, score) {
            Some((row, batch, tokens)) => Err(Error::TerminalRewardMismatch { row, batch, tokens }),
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
                if !scores_agree(expected, s) && first.is_none_or(|(b, _, _)| r < b) {
                    first = Some((r, expected, s));
                }
            }
        }
        first
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
