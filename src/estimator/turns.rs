//! Turns: the unit of the turn-level estimators ([`step_reinforce`](super::step_reinforce),
//! [`mt_grpo`](super::mt_grpo), [`turn_gae`](super::turn_gae)).
//!
//! A *turn* is one policy response inside a multi-turn episode. The turn-level estimators
//! compute one value per turn and write it over the turn's tokens. They read turns from two
//! layouts, told apart by whether `step_rewards` is given:
//!
//! - **Step rows** (`step_rewards` given): every row is one turn, as verl-agent and ROLL keep
//!   agent batches. Row r's reward is `step_rewards[r]`; its tokens are its generated tokens
//!   (`response_mask`). The rows of a trajectory are its turns in step order (the batch's
//!   [`trajectory_rows`](crate::RolloutBatch::trajectory_rows)). The batch's R(τ),
//!   `row_scores` and `token_level_rewards` do not enter the values here; when given they are
//!   checked as on every step path (token sums against each row's score:
//!   [`Error::TerminalRewardMismatch`], [`Error::RowScoreMismatch`]), so that a batch whose
//!   sources disagree is refused rather than trained on.
//! - **Multi-turn token rows** (no `step_rewards`): verl's layout, one dialogue per row. The
//!   turns of a row are its maximal runs of `response_mask == 1`. Turn k *owns* the tokens
//!   after turn k − 1's last token up to its own last token; the row's first turn also owns
//!   the tokens before it and its last turn the tokens after it. A turn's reward is the sum of
//!   `token_level_rewards` over the tokens it owns, so every reward of a row is counted, in
//!   exactly one turn, and the turn rewards of a row sum to the row's token sum (the score
//!   verl's outcome estimators read). A row with no generated token has no turn; a nonzero
//!   reward on such a row has nowhere to go and is refused ([`Error::Undefined`] naming the
//!   row). When a trajectory has several rows, its turns are those of its rows in step order.
//!
//! ```text
//! mask     0 0 1 1 0 0 1 1 1 0
//! reward   0 0 0 .5 0 0 0 0 1 .2      -> turn 0 = tokens 2..4, reward 0.5
//!                                        turn 1 = tokens 6..9, reward 1 + 0.2 (owns the tail)
//! ```
//!
//! Every token outside a turn gets 0 in the output.

use super::{float_row, row_groups_into, EstimatorInput};
use crate::error::{check_len, Error, Result};
use crate::tensor::{overflows_f32, Float, FloatView, FloatViewMut, MaskView};
use crate::RolloutBatch;

mod fused;
mod runs;
mod through;
mod write;

/// The [`AdvantageEstimator`](super::AdvantageEstimator) impl of a turn-level estimator:
/// `estimate_steps_into` is the type's `steps(&self, input, &mut [f64], &mut TurnWorkspace)`;
/// `estimate_into` runs it first on step rows and writes each row as it reads the mask
/// (`through`). Else it, and `estimate`, run `prepare(&self, input, &mut TurnWorkspace)` (each
/// turn's advantage into `values`, its return into the named field when the estimator has
/// returns), then write them over the turns' tokens ([`TurnWorkspace::write_outputs`], or a
/// fresh output after every input was read).
///
/// `turn_estimator!(Type, "name")`, or `turn_estimator!(Type, "name", returns = field)` for
/// an estimator whose returns differ from its advantages.
macro_rules! turn_estimator {
    ($ty:ty, $name:literal) => {
        $crate::estimator::turns::turn_estimator!(@impl $ty, $name, false, values);
    };
    ($ty:ty, $name:literal, returns = $field:ident) => {
        $crate::estimator::turns::turn_estimator!(@impl $ty, $name, true, $field);
    };
    (@impl $ty:ty, $name:literal, $has_returns:literal, $returns:ident) => {
        impl $crate::estimator::AdvantageEstimator for $ty {
            fn name(&self) -> &'static str {
                $name
            }

            fn has_returns(&self) -> bool {
                $has_returns
            }

            fn estimate_into(
                &self,
                input: &$crate::estimator::EstimatorInput<'_>,
                mut advantages: $crate::tensor::FloatViewMut<'_>,
                mut returns: Option<$crate::tensor::FloatViewMut<'_>>,
                workspace: &mut $crate::estimator::Workspace,
            ) -> $crate::error::Result<()> {
                let ws = &mut workspace.turns;
                // Step rows in one pass over the mask (`through`); else the two passes.
                if ws.step_values(input, |input, out, ws| self.steps(input, out, ws))
                    && ws.turns.write_through(
                        input,
                        &ws.values,
                        &ws.$returns,
                        advantages.reborrow(),
                        returns.as_mut().map(|r| r.reborrow()),
                    )?
                {
                    return Ok(());
                }
                self.prepare(input, ws)?;
                // Without returns of their own, `returns` (if asked for) gets the advantages.
                ws.write_outputs(input.output_dim(), advantages, returns, &ws.$returns)
            }

            fn estimate(
                &self,
                input: &$crate::estimator::EstimatorInput<'_>,
            ) -> $crate::error::Result<$crate::estimator::Advantages> {
                // The inputs are read and checked before the outputs are allocated.
                let mut ws = $crate::estimator::turns::TurnWorkspace::default();
                self.prepare(input, &mut ws)?;
                let dim = input.output_dim();
                let advantages = ws.fresh_output(dim, &ws.values)?;
                let returns = match $has_returns {
                    true => Some(ws.fresh_output(dim, &ws.$returns)?),
                    false => None,
                };
                Ok($crate::estimator::Advantages { advantages, returns })
            }

            fn estimate_steps_into(
                &self,
                input: &$crate::estimator::EstimatorInput<'_>,
                advantages: &mut [f64],
                workspace: &mut $crate::estimator::Workspace,
            ) -> $crate::error::Result<()> {
                self.steps(input, advantages, &mut workspace.turns)
            }
        }
    };
}
pub(crate) use turn_estimator;

/// The turn-level estimators' part of a [`Workspace`](super::Workspace).
#[derive(Debug, Clone, Default)]
pub(crate) struct TurnWorkspace {
    pub(crate) turns: Turns,
    pub(crate) a: Vec<f64>,
    pub(crate) b: Vec<f64>,
    pub(crate) values: Vec<f64>,
    pub(crate) batch_stats: SetStats,
    pub(crate) set_stats: SetStats,
    pub(crate) traj_stats: SetStats,
    pub(crate) n: Vec<usize>,
    pub(crate) s1: Vec<f64>,
    pub(crate) s2: Vec<f64>,
    /// `tree_grpo`: each trajectory's tree, parent trajectory, each row's trajectory, and the
    /// prompt and tree statistics.
    pub(crate) tree: Vec<usize>,
    pub(crate) parent: Vec<usize>,
    pub(crate) row_traj: Vec<usize>,
    pub(crate) group_stats: Vec<crate::stats::GroupStats>,
    pub(crate) tree_stats: Vec<crate::stats::GroupStats>,
    /// The step path's output when step rows are written as they are read (`through`).
    step_out: Vec<f64>,
}

impl TurnWorkspace {
    /// The trait's `estimate_into` after an estimator's `prepare` filled `values` (one
    /// advantage per turn): both outputs' shapes are checked before either is written, then
    /// every generated token gets its turn's advantage, and `returns` (if asked for) its turn's
    /// entry of `return_values`.
    pub(crate) fn write_outputs(
        &self,
        dim: (usize, usize),
        mut advantages: FloatViewMut<'_>,
        returns: Option<FloatViewMut<'_>>,
        return_values: &[f64],
    ) -> Result<()> {
        advantages.check_dim("advantages", dim)?;
        if let Some(r) = &returns {
            r.check_dim("returns", dim)?;
        }
        self.turns.write(&self.values, &mut advantages)?;
        if let Some(mut r) = returns {
            self.turns.write(return_values, &mut r)?;
        }
        Ok(())
    }

    /// A fresh `f64` output of shape `dim` holding `turn_values` on every generated token: the
    /// trait's `estimate`, allocated only after the inputs were read and checked.
    pub(crate) fn fresh_output(
        &self,
        dim: (usize, usize),
        turn_values: &[f64],
    ) -> Result<ndarray::Array2<f64>> {
        let mut out = crate::huge_pages::zeros(dim)?;
        self.turns
            .write(turn_values, &mut FloatViewMut::F64(out.view_mut()))?;
        Ok(out)
    }
}

/// A run of generated tokens `start..end` of caller row `row`, belonging to turn `turn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) row: usize,
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) turn: usize,
}

/// The turns of one batch, kept across calls so that a batch of a size seen before
/// allocates nothing. Turn ids follow the caller's row order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Turns {
    /// Token runs in row order (empty on the step path).
    pub(crate) spans: Vec<Span>,
    /// Reward of each turn.
    pub(crate) reward: Vec<f64>,
    /// Generated tokens of each turn.
    pub(crate) tokens: Vec<usize>,
    /// Caller row of each turn.
    pub(crate) row_of: Vec<usize>,
    /// Column of each turn's first generated token (`usize::MAX`: none).
    pub(crate) first: Vec<usize>,
    /// Group (the batch's uid group) of each turn.
    pub(crate) group: Vec<usize>,
    /// Turn ids trajectory-major, each trajectory's turns in step order.
    pub(crate) order: Vec<usize>,
    /// Offsets into `order`, one per trajectory plus one.
    pub(crate) traj_offsets: Vec<usize>,
    /// Number of groups of the batch.
    pub(crate) num_groups: usize,
    /// Group of each trajectory.
    pub(crate) traj_group: Vec<usize>,
    /// Each row's first turn id (length rows + 1).
    row_turns: Vec<usize>,
    row_group: Vec<usize>,
    rbuf: Vec<f64>,
    mbuf: Vec<u8>,
}

impl Turns {
    /// Number of turns.
    pub(crate) fn len(&self) -> usize {
        self.reward.len()
    }

    /// Number of trajectories.
    pub(crate) fn num_trajectories(&self) -> usize {
        self.traj_offsets.len() - 1
    }

    /// The turns of trajectory `j`, in step order.
    pub(crate) fn trajectory(&self, j: usize) -> &[usize] {
        &self.order[self.traj_offsets[j]..self.traj_offsets[j + 1]]
    }

    fn clear(&mut self) {
        self.spans.clear();
        self.reward.clear();
        self.tokens.clear();
        self.row_of.clear();
        self.first.clear();
        self.row_turns.clear();
    }

    /// Step rows without a mask (the step path): turn r = row r, reward `step_rewards[r]`,
    /// after the step path's checks in their documented order
    /// ([`step_columns`]).
    pub(crate) fn read_steps(&mut self, input: &EstimatorInput<'_>) -> Result<()> {
        let rewards = step_columns(input)?;
        let batch = input.batch;
        self.clear();
        self.reward.extend_from_slice(rewards);
        self.tokens.resize(rewards.len(), 1);
        self.row_of.extend(0..rewards.len());
        self.first.resize(rewards.len(), usize::MAX);
        self.row_turns.extend(0..=rewards.len());
        self.index(batch);
        Ok(())
    }

    /// Reads the turns of `input` for the token path (see the module docs (`src/estimator/turns.rs`)), with the
    /// mask checked against the batch and the output's shape `dim`.
    pub(crate) fn read_tokens(&mut self, input: &EstimatorInput<'_>, dim: (usize, usize)) -> Result<()> {
        let rows = input.batch.num_steps();
        match input.step_rewards {
            Some(_) => {
                let rewards = step_columns(input)?;
                let mask = input.checked_mask((rows, dim.1))?;
                self.clear();
                self.reward.extend_from_slice(rewards);
                self.tokens.resize(rows, 0);
                self.row_of.extend(0..rows);
                self.first.resize(rows, usize::MAX);
                self.read_runs(&mask, None)?;
            }
            None => {
                let rewards = input
                    .token_level_rewards
                    .ok_or(Error::MissingInput("token_level_rewards"))?;
                check_len("token_level_rewards rows", rows, rewards.dim().0)?;
                let mask = input.checked_mask(rewards.dim())?;
                self.clear();
                self.read_runs(&mask, Some(&rewards))?;
            }
        }
        self.index(input.batch);
        Ok(())
    }

    /// One pass over the mask (and the rewards): the runs, and in the multi-turn layout one
    /// turn per run with the rewards it owns.
    fn read_runs(&mut self, mask: &MaskView<'_>, rewards: Option<&FloatView<'_>>) -> Result<()> {
        let (rows, cols) = mask.dim();
        if let (MaskView::Lengths { lengths, .. }, None) = (mask, rewards) {
            self.read_lengths(lengths);
            return Ok(());
        }
        self.mbuf.resize(cols, 0);
        self.rbuf.resize(cols, 0.0);
        for r in 0..rows {
            let from = self.spans.len();
            let ahead = runs::Ahead::rows(mask, rewards, r);
            if self.read_fused(mask, rewards, r, ahead)? {
                continue;
            }
            if !runs::row_runs(mask, r, ahead, &mut self.mbuf, &mut self.spans) {
                return Err(mask.value_error());
            }
            self.row_turns.push(self.reward.len());
            let first = self.reward.len();
            // The row's rewards in place when contiguous, else widened into `rbuf`.
            let src = rewards.map(|rw| RowRef::of(rw, r, &mut self.rbuf));
            // `owned`: where the tokens the next turn owns begin.
            let mut owned = 0;
            for s in &mut self.spans[from..] {
                s.turn = match &src {
                    Some(row) => {
                        self.reward.push(row.sum(owned, s.end));
                        self.tokens.push(s.end - s.start);
                        self.row_of.push(r);
                        self.first.push(s.start);
                        owned = s.end;
                        self.reward.len() - 1
                    }
                    None => {
                        self.tokens[r] += s.end - s.start;
                        self.first[r] = self.first[r].min(s.start);
                        r
                    }
                };
            }
            if let (Some(rw), Some(row)) = (rewards, src) {
                let tail = row.sum(owned, cols);
                self.close_row(rw, r, first, tail)?;
            }
        }
        self.row_turns.push(self.reward.len());
        if rewards.is_none() {
            // One turn per row: row r's turns are r..r + 1 whether or not it has tokens.
            self.row_turns.clear();
            self.row_turns.extend(0..=rows);
        }
        Ok(())
    }

    /// Step rows under per-row lengths: one run per row, no column buffer (a claimed L is
    /// not data in memory).
    fn read_lengths(&mut self, lengths: &[usize]) {
        for (r, &n) in lengths.iter().enumerate() {
            self.tokens[r] = n;
            if n > 0 {
                self.first[r] = 0;
                self.spans.push(Span {
                    row: r,
                    start: 0,
                    end: n,
                    turn: r,
                });
            }
        }
        self.row_turns.extend(0..=lengths.len());
    }

    /// The end of row `r` in the multi-turn layout: the tail's rewards `acc` go to the row's
    /// last turn; non-finite rewards and rewards on a row without turns are refused.
    fn close_row(&mut self, rewards: &FloatView<'_>, r: usize, first: usize, acc: f64) -> Result<()> {
        let cols = rewards.dim().1;
        let last = self.reward.len();
        if last > first {
            self.reward[last - 1] += acc;
        }
        let bad = self.reward[first..last]
            .iter()
            .copied()
            .chain([acc])
            .find(|x| !x.is_finite());
        // The error paths read the row again (the sums read it in place).
        if bad.is_some() || last == first {
            float_row(rewards, r, &mut self.rbuf);
        }
        if let Some(sum) = bad {
            if let Some(t) = self.rbuf.iter().position(|x| !x.is_finite()) {
                return Err(Error::NonFinite {
                    what: "token_level_rewards",
                    index: r * cols + t,
                    value: self.rbuf[t],
                });
            }
            return Err(Error::NonFinite {
                what: "turn rewards (overflow)",
                index: r,
                value: sum,
            });
        }
        if last == first {
            if let Some(t) = self.rbuf.iter().position(|&x| x != 0.0) {
                return Err(Error::Undefined(format!(
                    "row {r} has no generated token but a reward {} on token {t}: no turn to credit it to",
                    self.rbuf[t]
                )));
            }
        }
        Ok(())
    }

    /// The trajectory order of the turns and each turn's group.
    fn index(&mut self, batch: &RolloutBatch) {
        row_groups_into(batch, &mut self.row_group);
        self.num_groups = batch.num_groups();
        self.group.clear();
        self.group.resize(self.reward.len(), 0);
        for r in 0..batch.num_steps() {
            for k in self.row_turns[r]..self.row_turns[r + 1] {
                self.group[k] = self.row_group[r];
            }
        }
        self.traj_group.clear();
        for g in 0..batch.num_groups() {
            self.traj_group.extend(batch.group_trajectories(g).map(|_| g));
        }
        self.order.clear();
        self.traj_offsets.clear();
        self.traj_offsets.push(0);
        for j in 0..batch.num_trajectories() {
            for &r in batch.trajectory_rows(j) {
                self.order.extend(self.row_turns[r]..self.row_turns[r + 1]);
            }
            self.traj_offsets.push(self.order.len());
        }
    }

    /// Writes `values[turn]` over every span of the turn and 0 on every other token.
    ///
    /// # Errors
    /// [`Error::OutputShape`] when `out` is not rows × L of the mask read;
    /// [`Error::NonFinite`] for a non-finite value, or one past `f32::MAX` into an `f32`
    /// buffer (naming the turn's first token).
    pub(crate) fn write(&self, values: &[f64], out: &mut FloatViewMut<'_>) -> Result<()> {
        for s in &self.spans {
            let v = values[s.turn];
            let f32_out = matches!(out, FloatViewMut::F32(_));
            if !v.is_finite() || (f32_out && overflows_f32(v)) {
                return Err(Error::NonFinite {
                    what: if v.is_finite() {
                        "advantages (overflows f32)"
                    } else {
                        "advantages"
                    },
                    index: s.row * out.dim().1 + s.start,
                    value: v,
                });
            }
        }
        match out {
            FloatViewMut::F32(o) => write::write_rows(&self.spans, values, o),
            FloatViewMut::F64(o) => write::write_rows(&self.spans, values, o),
        }
        Ok(())
    }
}

/// One row of a float column, in its own dtype.
#[derive(Clone, Copy)]
enum RowRef<'b> {
    F32(&'b [f32]),
    F64(&'b [f64]),
}

impl<'b> RowRef<'b> {
    /// Row `r` of `rewards`: in place when contiguous, else widened into `buf`.
    fn of(rewards: &'b FloatView<'_>, r: usize, buf: &'b mut [f64]) -> Self {
        match rewards {
            FloatView::F32(m) => match m.row(r).to_slice() {
                Some(s) => RowRef::F32(s),
                None => {
                    float_row(rewards, r, buf);
                    RowRef::F64(buf)
                }
            },
            FloatView::F64(m) => match m.row(r).to_slice() {
                Some(s) => RowRef::F64(s),
                None => {
                    float_row(rewards, r, buf);
                    RowRef::F64(buf)
                }
            },
        }
    }

    /// Σ over tokens `a..b`, widened to `f64` ([`lane_sum`]).
    fn sum(&self, a: usize, b: usize) -> f64 {
        match self {
            Self::F32(s) => lane_sum(&s[a..b]),
            Self::F64(s) => lane_sum(&s[a..b]),
        }
    }
}

/// Σ x in four interleaved partial sums (x[i] into partial i mod 4, combined as
/// (p0 + p2) + (p1 + p3)): a fixed order that vectorizes, where one chain does not.
///
/// Eight entries that are all ±0 are passed over, which leaves every partial exactly as
/// adding them would: a partial starts at +0 and a sum is −0 only when both terms are, so no
/// partial is ever −0, and p + (±0) = p for every other p (NaN and ±∞ included). Token
/// rewards are mostly 0 (one reward per turn), so most chunks cost one compare and no add,
/// where every add waits on the previous one of its partial.
#[inline]
fn lane_sum<T: Float>(x: &[T]) -> f64 {
    let mut p = [0.0f64; 4];
    let mut c = x.chunks_exact(8);
    for q in &mut c {
        // Not short-circuiting: one vector compare.
        if q.iter().fold(true, |zero, &v| zero & (v == T::ZERO)) {
            continue;
        }
        for (j, &v) in q.iter().enumerate() {
            p[j % 4] += v.to_f64();
        }
    }
    for (j, &v) in c.remainder().iter().enumerate() {
        p[j % 4] += v.to_f64();
    }
    (p[0] + p[2]) + (p[1] + p[3])
}

/// The step rows' columns, checked in the step path's order (`estimate_steps_into`'s docs):
/// `step_rewards` present and one per row; the length of `row_scores` and the rows of
/// `token_level_rewards` when given; `row_scores` finite and the token sums against each
/// row's score (the batch's promise of one terminal reward: these estimators read neither,
/// but a disagreement is never passed over); then `step_rewards` finite.
pub(crate) fn step_columns<'a>(input: &EstimatorInput<'a>) -> Result<&'a [f64]> {
    let rewards = input.step_rewards.ok_or(Error::MissingInput("step_rewards"))?;
    check_len("step_rewards", input.batch.num_steps(), rewards.len())?;
    input.check_step_shapes()?;
    input.check_step_values()?;
    crate::error::check_finite("step_rewards", rewards)?;
    Ok(rewards)
}

/// Per-set count, mean and unbiased standard deviation of per-turn values, in two passes
/// over the turns (no pass per set): σ is NaN for a set of fewer than 2 turns, as
/// `torch.std`, and μ NaN for an empty set.
#[derive(Debug, Clone, Default)]
pub(crate) struct SetStats {
    pub(crate) n: Vec<usize>,
    pub(crate) mean: Vec<f64>,
    pub(crate) std: Vec<f64>,
}

impl SetStats {
    /// Statistics of `values[k]` over the sets `set[k]` (`sets` of them), or over one set
    /// holding every turn when `set` is `None`.
    pub(crate) fn compute(&mut self, values: &[f64], set: Option<&[usize]>, sets: usize) {
        let sets = if set.is_some() { sets } else { 1 };
        let of = |k: usize| set.map_or(0, |s| s[k]);
        self.n.clear();
        self.n.resize(sets, 0);
        self.mean.clear();
        self.mean.resize(sets, 0.0);
        self.std.clear();
        self.std.resize(sets, 0.0);
        for (k, &v) in values.iter().enumerate() {
            self.n[of(k)] += 1;
            self.mean[of(k)] += v;
        }
        for (m, &n) in self.mean.iter_mut().zip(&self.n) {
            *m = if n == 0 { f64::NAN } else { *m / n as f64 };
        }
        for (k, &v) in values.iter().enumerate() {
            let d = v - self.mean[of(k)];
            self.std[of(k)] += d * d;
        }
        for (s, &n) in self.std.iter_mut().zip(&self.n) {
            *s = if n < 2 {
                f64::NAN
            } else {
                (*s / (n - 1) as f64).sqrt()
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    #[test]
    fn turns_own_the_rewards_between_them() {
        // The module's example: rewards 0.5 (turn 0's last token), 1 and 0.2 after turn 1.
        let batch = RolloutBatch::from_group_keys(&[0], &[0.0]).unwrap();
        let mask = array![[0u8, 0, 1, 1, 0, 0, 1, 1, 1, 0]];
        let rewards = array![[0.0, 0.0, 0.0, 0.5, 0.0, 0.0, 0.0, 0.0, 1.0, 0.2]];
        let input = EstimatorInput::new(&batch)
            .with_token_level_rewards(&rewards)
            .with_response_mask(&mask);
        let mut t = Turns::default();
        t.read_tokens(&input, (1, 10)).unwrap();
        assert_eq!(t.reward, vec![0.5, 1.2]);
        assert_eq!(t.tokens, vec![2, 3]);
        assert_eq!(t.order, vec![0, 1]);
        assert_eq!(
            t.spans,
            vec![
                Span {
                    row: 0,
                    start: 2,
                    end: 4,
                    turn: 0
                },
                Span {
                    row: 0,
                    start: 6,
                    end: 9,
                    turn: 1
                }
            ]
        );
        let mut out = ndarray::Array2::<f32>::from_elem((1, 10), f32::NAN);
        t.write(&[2.0, -1.0], &mut (&mut out).into()).unwrap();
        assert_eq!(out, array![[0.0, 0.0, 2.0, 2.0, 0.0, 0.0, -1.0, -1.0, -1.0, 0.0]]);
    }

    #[test]
    fn a_reward_without_a_turn_is_refused() {
        let batch = RolloutBatch::from_group_keys(&[0, 0], &[0.0; 2]).unwrap();
        let mask = array![[true, false], [false, false]];
        let rewards = array![[1.0, 0.0], [0.0, 0.3]];
        let input = EstimatorInput::new(&batch)
            .with_token_level_rewards(&rewards)
            .with_response_mask(&mask);
        let err = Turns::default().read_tokens(&input, (2, 2)).unwrap_err();
        assert!(
            matches!(err, Error::Undefined(ref m) if m.starts_with("row 1 ")),
            "{err}"
        );
        let nan = array![[1.0, f64::NAN], [0.0, 0.0]];
        let input = input.with_token_level_rewards(&nan);
        assert!(matches!(
            Turns::default().read_tokens(&input, (2, 2)),
            Err(Error::NonFinite { index: 1, .. })
        ));
    }

    #[test]
    fn step_rows_are_one_turn_each_in_step_order() {
        // Trajectory a = rows 0, 2; b = row 1.
        let batch = RolloutBatch::from_row_keys(&["u"; 3], &["a", "b", "a"], &[0.0; 3]).unwrap();
        let mask = array![[1i64, 0, 1], [0, 0, 0], [1, 1, 0]];
        let steps = [0.1, 0.2, 0.3];
        let input = EstimatorInput::new(&batch)
            .with_step_rewards(&steps)
            .with_response_mask(&mask);
        let mut t = Turns::default();
        t.read_tokens(&input, (3, 3)).unwrap();
        assert_eq!(t.trajectory(0), &[0, 2]);
        assert_eq!(t.trajectory(1), &[1]);
        assert_eq!(t.tokens, vec![2, 0, 2]);
        let bad = array![[1i64, 0, 2], [0, 0, 0], [1, 1, 0]];
        assert!(matches!(
            t.read_tokens(&input.with_response_mask(&bad), (3, 3)),
            Err(Error::MaskValue {
                row: 0,
                token: 2,
                value: 2
            })
        ));
    }

    #[test]
    fn set_stats_are_torch_mean_and_std() {
        let v = [1.0, 2.0, 4.0, 7.0];
        let mut st = SetStats::default();
        st.compute(&v[..3], None, 5);
        assert!((st.mean[0] - 7.0 / 3.0).abs() < 1e-15);
        // Σ (v − μ)² = 16/9 + 1/9 + 25/9 = 42/9; / 2 = 7/3.
        assert!((st.std[0] - (7.0f64 / 3.0).sqrt()).abs() < 1e-15);
        st.compute(&v, Some(&[1, 0, 1, 2]), 4);
        assert_eq!(st.n, vec![1, 2, 1, 0]);
        assert_eq!(st.mean[..3], [2.0, 2.5, 7.0]);
        assert!(st.std[0].is_nan() && st.mean[3].is_nan());
        assert!((st.std[1] - 4.5f64.sqrt()).abs() < 1e-15);
    }
}
