//! `estimate_turns`: verl's multi-turn layout (one dialogue per row), read turn by turn.

use beacon_rl::estimator::EstimatorInput;
use beacon_rl::tensor::{spans_into, FloatView, FloatViewMut, MaskView, TokenSpan};
use ndarray::ArrayView2;

use super::estimate::copy_out;
use super::estimator::Estimator;
use super::state::{rebuild, with_state, State};
use super::views::Keys;
use super::{unsupported, Failure, Res};

/// Calls `f(t, value)` for every nonzero reward of row `r`, in token order, in `f64`
/// (NaN and ±inf are nonzero: `f` sees them). No copy; a contiguous row is tested in
/// blocks of 64 tokens with one branch-free pass each (rewards are mostly zero), and only a
/// block holding a nonzero value is visited token by token.
fn for_each_nonzero(rewards: &FloatView<'_>, r: usize, mut f: impl FnMut(usize, f64) -> Res<()>) -> Res<()> {
    fn scan<T: Copy + Default + PartialEq + Into<f64>>(
        row: ndarray::ArrayView1<'_, T>,
        f: &mut impl FnMut(usize, f64) -> Res<()>,
    ) -> Res<()> {
        const BLOCK: usize = 64;
        let zero = T::default();
        let mut visit = |(t, &v): (usize, &T)| {
            if v != zero {
                f(t, v.into())?;
            }
            Ok(())
        };
        let Some(s) = row.as_slice() else {
            return row.iter().enumerate().try_for_each(&mut visit);
        };
        for (b, block) in s.chunks(BLOCK).enumerate() {
            if block.iter().fold(false, |any, &v| any | (v != zero)) {
                let t0 = b * BLOCK;
                block
                    .iter()
                    .enumerate()
                    .try_for_each(|(i, v)| visit((t0 + i, v)))?;
            }
        }
        Ok(())
    }
    match rewards {
        FloatView::F32(a) => scan(a.row(r), &mut f),
        FloatView::F64(a) => scan(a.row(r), &mut f),
        _ => Err(unsupported("token_level_rewards")),
    }
}

/// Row `r` of the mask as flags into `out` (length L).
fn mask_row_into(mask: &MaskView<'_>, r: usize, out: &mut [bool]) -> Res<()> {
    fn copy<T: Copy + Into<i64>>(a: &ArrayView2<'_, T>, r: usize, out: &mut [bool]) {
        for (o, &v) in out.iter_mut().zip(a.row(r)) {
            *o = v.into() != 0;
        }
    }
    match mask {
        MaskView::U8(a) => copy(a, r, out),
        MaskView::I64(a) => copy(a, r, out),
        _ => return Err(unsupported("response_mask")),
    }
    Ok(())
}

/// What [`estimate_turns`] found in the batch (for logging and tests).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TurnStats {
    /// Turns (steps) over all rows.
    pub turns: usize,
    /// Turns flagged as milestones.
    pub milestones: usize,
    /// Rows with no valid token (no turn; their advantages are 0 and they join no group).
    pub empty_rows: usize,
}

/// verl's multi-turn layout: one dialogue per row. Turns are maximal runs of
/// `response_mask == 1`; each is a step. A row's terminal reward R(τ) is the sum of all its token
/// rewards, masked tokens included (what verl's GRPO reads as the row's score); a turn other
/// than the last whose last token carries a reward > 0 is a milestone. The estimator
/// (`beacon`, `beacon_official` or `gigpo`) runs on the steps (grouped by
/// `index`, one trajectory per row) and each turn's advantage is written over its tokens
/// (`tensor::spans_into`); every other token gets 0. Returns equal the advantages.
///
/// GiGPO needs anchor states and step rewards, which verl does not pass: here a turn's anchor
/// is its position in the dialogue and its step reward the sum of the rewards that belong to it
/// (those in the turn or after it, up to the next turn; those before the first turn belong to
/// the first), which GiGPO discounts into step returns: with γ = 1 the first turn's return is
/// R(τ).
pub fn estimate_turns(
    est: &Estimator,
    rewards: &FloatView<'_>,
    mask: &MaskView<'_>,
    index: Keys<'_>,
    mut adv: FloatViewMut<'_>,
    ret: Option<FloatViewMut<'_>>,
) -> Res<TurnStats> {
    // The turns are read here, by the binding: the crate's check of the entries first.
    let mask_view = mask.reborrow();
    mask_view.validate()?;
    check_turn_shapes(rewards, mask, &index, adv.dim())?;
    with_state(|st| {
        let State {
            ws,
            builder,
            batch,
            turns: t,
            ..
        } = st;
        let stats = t.read(rewards, mask, index)?;
        if t.spans.is_empty() {
            let zero = |o: FloatViewMut<'_>| {
                match o {
                    FloatViewMut::F32(mut a) => a.fill(0.0),
                    FloatViewMut::F64(mut a) => a.fill(0.0),
                    _ => return Err(unsupported("out")),
                }
                Ok(())
            };
            zero(adv)?;
            if let Some(ret) = ret {
                zero(ret)?;
            }
            return Ok(stats);
        }
        // Only GiGPO reads anchors: the others skip the strings.
        let anchors: Vec<&str> = if est.name() == "gigpo" {
            t.grow_labels();
            t.pos.iter().map(|&k| t.labels[k].as_str()).collect()
        } else {
            Vec::new()
        };
        let batch = rebuild(builder, batch, &t.keys, Some(&t.trajs), &t.terminal_reward)?;
        let mut input = EstimatorInput::new(batch)
            .with_milestones(&t.flags)
            .with_step_rewards(&t.step_reward);
        if !anchors.is_empty() {
            input = input.with_anchor_obs(&anchors);
        }
        // Step estimators' returns equal their advantages: none are asked for.
        t.step_adv.clear();
        t.step_adv.resize(t.spans.len(), 0.0);
        let step_adv = ndarray::ArrayViewMut2::from_shape((t.spans.len(), 1), &mut t.step_adv)
            .map_err(|e| Failure(format!("internal: step advantages: {e}")))?;
        est.inner
            .estimate_into(&input, FloatViewMut::F64(step_adv), None, ws)?;
        spans_into(&t.step_adv, &t.spans, mask_view, adv.reborrow())?;
        if let Some(ret) = ret {
            copy_out(&adv, ret)?;
        }
        Ok(stats)
    })
}

/// The shapes [`estimate_turns`] needs: rewards and the advantages output like the mask, one
/// group key per row.
fn check_turn_shapes(
    rewards: &FloatView<'_>,
    mask: &MaskView<'_>,
    index: &Keys<'_>,
    out_dim: (usize, usize),
) -> Res<()> {
    let (rows, cols) = mask.dim();
    if rewards.dim() != (rows, cols) {
        return Err(Failure(format!(
            "token_level_rewards has shape {:?}, response_mask {:?}",
            rewards.dim(),
            (rows, cols)
        )));
    }
    if index.len() != rows {
        return Err(Failure(format!(
            "index has {} entries, response_mask {rows} rows",
            index.len()
        )));
    }
    if out_dim != (rows, cols) {
        return Err(Failure(format!(
            "out: advantages has shape {out_dim:?}, expected {:?}",
            (rows, cols)
        )));
    }
    Ok(())
}

/// The turns of one call of [`estimate_turns`], kept per thread so that a call of a size seen
/// before allocates none of them.
#[derive(Default)]
pub(super) struct Turns {
    /// Each turn's tokens, in row order.
    spans: Vec<TokenSpan>,
    /// One row of the mask as flags (L long), not a copy of the whole mask.
    row: Vec<bool>,
    /// Per turn: the row it came from (its trajectory), the row's group key, the terminal reward, the
    /// milestone flag, the turn's own rewards, the position in the dialogue.
    trajs: Vec<usize>,
    keys: Vec<i64>,
    terminal_reward: Vec<f64>,
    flags: Vec<bool>,
    step_reward: Vec<f64>,
    pos: Vec<usize>,
    /// GiGPO's anchor of position k, "turn k", grown to the longest dialogue seen.
    labels: Vec<String>,
    step_adv: Vec<f64>,
}

impl Turns {
    /// Finds the turns of every row and their per-turn columns.
    ///
    /// Every reward of a row is read: their sum is the row's terminal reward (verl's GRPO score,
    /// masked tokens included), and each belongs to the turn it lies in or follows (one
    /// before the first turn to the first): GiGPO's step reward of that turn. Nothing is
    /// dropped: a nonzero reward on a row without a turn, and any non-finite reward, is an
    /// error naming its row and token.
    fn read(&mut self, rewards: &FloatView<'_>, mask: &MaskView<'_>, index: Keys<'_>) -> Res<TurnStats> {
        let (rows, cols) = mask.dim();
        for v in [&mut self.terminal_reward, &mut self.step_reward] {
            v.clear();
        }
        self.spans.clear();
        self.trajs.clear();
        self.keys.clear();
        self.flags.clear();
        self.pos.clear();
        self.row.clear();
        self.row.resize(cols, false);
        let mut stats = TurnStats::default();
        for r in 0..rows {
            let first = self.spans.len();
            mask_row_into(mask, r, &mut self.row)?;
            push_turns(&mut self.spans, r, &self.row);
            let turns = self.spans.len() - first;
            // The row's terminal reward, and each turn's own rewards (GiGPO's step rewards).
            self.step_reward.resize(first + turns, 0.0);
            let mut total = 0.0;
            let mut k = 0;
            let (spans, step_reward) = (&self.spans, &mut self.step_reward);
            for_each_nonzero(rewards, r, |t, v| {
                if !v.is_finite() {
                    return Err(Failure(format!(
                        "token_level_rewards[{r}, {t}] = {v}: rewards must be finite"
                    )));
                }
                if turns == 0 {
                    return Err(Failure(format!(
                        "token_level_rewards[{r}, {t}] = {v}: row {r} has no token in \
                         response_mask, so no turn could be credited with this reward"
                    )));
                }
                while k + 1 < turns && spans[first + k + 1].start <= t {
                    k += 1;
                }
                step_reward[first + k] += v;
                total += v;
                Ok(())
            })?;
            if !f64::is_finite(total) {
                return Err(Failure(format!(
                    "token_level_rewards: the rewards of row {r} overflow their sum"
                )));
            }
            if turns == 0 {
                stats.empty_rows += 1;
                continue;
            }
            for k in 0..turns {
                let end_reward = rewards.get(r, self.spans[first + k].end - 1).unwrap_or(0.0);
                let milestone = k + 1 < turns && end_reward > 0.0;
                stats.milestones += usize::from(milestone);
                self.trajs.push(r);
                // A turn's group key is its row's.
                self.keys.push(index.ids[r]);
                self.terminal_reward.push(total);
                self.flags.push(milestone);
                self.pos.push(k);
            }
        }
        stats.turns = self.spans.len();
        Ok(stats)
    }

    /// Makes "turn k", each turn's anchor state for its position k in the dialogue, exist
    /// for every position of this call.
    fn grow_labels(&mut self) {
        let longest = self.pos.iter().max().map_or(0, |&k| k + 1);
        while self.labels.len() < longest {
            let k = self.labels.len();
            self.labels.push(format!("turn {k}"));
        }
    }
}

/// Appends row `r`'s turns, the maximal runs of set flags in `row`, as spans numbered on from
/// the turns already found.
fn push_turns(spans: &mut Vec<TokenSpan>, r: usize, row: &[bool]) {
    let cols = row.len();
    let mut j = 0;
    while j < cols {
        if row[j] {
            let start = j;
            while j < cols && row[j] {
                j += 1;
            }
            spans.push(TokenSpan {
                seq: r,
                step: spans.len(),
                start,
                end: j,
            });
        } else {
            j += 1;
        }
    }
}
