//! Plumbing shared by the estimators (crate-private), split by role: [`read`] (input columns
//! and rows), [`write`] (the output writer and row writers), [`sums`] (row sums, mask counts
//! and finiteness, with their SIMD); this file holds the glue: the `fill_estimator!` trait
//! implementation, the step-level estimators' entry points (`step_entry_points!`), group rows
//! and shape checks.

mod read;
mod sums;
mod write;

pub(crate) use read::{float_row, mask_row, prefetch_line, Prefetch, Tokens, LANES};
pub(crate) use sums::{
    all_finite, check_all_finite, masked_class_counts, masked_counts, row_sums, row_sums_to, SUM_LANES,
};
pub(crate) use write::{put_row_checked, put_row_from, put_row_masked, select, steps_into, Out};

use crate::batch::RolloutBatch;
use crate::error::{check_len, Result};
use crate::estimator::{Advantages, EstimatorInput, Scratch, Workspace};
use crate::tensor::{FloatViewMut, MaskView};

/// Implements [`AdvantageEstimator`](crate::estimator::AdvantageEstimator) for a verl estimator with an inherent
/// `fn fill(&self, &EstimatorInput, &mut Out, &mut Scratch) -> Result<()>`; `returns` says
/// whether its returns differ from its advantages, `steps` adds the step-row entry point
/// through an inherent `fn steps(&self, &EstimatorInput, &mut [f64], &mut Scratch)` (after
/// checking the output's length, `row_scores` and any `token_level_rewards` against the rows'
/// scores).
macro_rules! fill_estimator {
    ($ty:ty, $name:literal, returns = $returns:expr) => {
        $crate::estimator::fill_estimator!($ty, $name, returns = $returns, {});
    };
    ($ty:ty, $name:literal, returns = $returns:expr, steps) => {
        $crate::estimator::fill_estimator!($ty, $name, returns = $returns, {
            fn estimate_steps_into(
                &self,
                input: &$crate::estimator::EstimatorInput<'_>,
                advantages: &mut [f64],
                workspace: &mut $crate::estimator::Workspace,
            ) -> $crate::error::Result<()> {
                $crate::estimator::check_steps_out(input, advantages)?;
                // Shapes, then values: the scores are the row scores or the batch's R(τ);
                // token rewards, when given too, must agree (as BEACON and GiGPO check them).
                input.check_step_shapes()?;
                input.check_step_values()?;
                self.steps(input, advantages, &mut workspace.scratch)
            }
        });
    };
    ($ty:ty, $name:literal, returns = $returns:expr, { $($extra:tt)* }) => {
        impl $crate::estimator::AdvantageEstimator for $ty {
            fn name(&self) -> &'static str {
                $name
            }

            fn has_returns(&self) -> bool {
                $returns
            }

            fn estimate_into(
                &self,
                input: &$crate::estimator::EstimatorInput<'_>,
                advantages: $crate::tensor::FloatViewMut<'_>,
                returns: Option<$crate::tensor::FloatViewMut<'_>>,
                workspace: &mut $crate::estimator::Workspace,
            ) -> $crate::error::Result<()> {
                // The views are invariant in their lifetimes: reborrow both to a common one.
                let (mut advantages, mut returns) = (advantages, returns);
                let mut out = $crate::estimator::Out::new(
                    advantages.reborrow(),
                    returns.as_mut().map(|r| r.reborrow()),
                    &mut workspace.stage,
                );
                self.fill(input, &mut out, &mut workspace.scratch)?;
                out.finish()
            }

            fn estimate(
                &self,
                input: &$crate::estimator::EstimatorInput<'_>,
            ) -> $crate::error::Result<$crate::estimator::Advantages> {
                // As the trait's default, but the outcome estimators write each fresh element
                // once (no zero-fill pass; see `Out::fresh`).
                let dim = input.output_dim();
                let mut workspace = $crate::estimator::Workspace::default();
                let mut advantages = Vec::new();
                // Both outputs are allocated when the estimator asks for its buffers, after it
                // has checked its inputs (see `Out::fresh`): a refused input allocates neither,
                // and a `Lengths` mask's claimed L is allocated only once the rewards (data in
                // memory) were found to have that shape.
                let mut returns = None;
                let has_returns = $crate::estimator::AdvantageEstimator::has_returns(self);
                let mut out = $crate::estimator::Out::fresh(
                    &mut advantages,
                    has_returns.then_some(&mut returns),
                    &mut workspace.stage,
                );
                self.fill(input, &mut out, &mut workspace.scratch)?;
                out.finish()?;
                // The writers filled rows × L elements; a flat count that is not is reported as
                // (count, 1).
                let actual = (advantages.len(), 1);
                let advantages = ndarray::Array2::from_shape_vec(dim, advantages).map_err(|_| {
                    $crate::error::Error::OutputShape {
                        what: "advantages",
                        expected: dim,
                        actual,
                    }
                })?;
                // (Every writer asks for its buffers; should one not, the returns are zeros
                // of the output's shape, as the advantages are.)
                let returns = match (has_returns, returns) {
                    (true, None) => Some($crate::huge_pages::zeros(dim)?),
                    (_, returns) => returns,
                };
                Ok($crate::estimator::Advantages::new(advantages, returns))
            }

            $($extra)*
        }
    };
}
pub(crate) use fill_estimator;

/// Checks a step-row output buffer: one entry per row.
pub(crate) fn check_steps_out(input: &EstimatorInput<'_>, advantages: &[f64]) -> Result<()> {
    crate::error::check_out_len("step advantages", input.batch.num_steps(), advantages.len())
}

/// Checks that a matrix column of shape `actual` has the shape `dim` (rows × L).
pub(crate) fn check_matrix_shape(
    what: &'static str,
    actual: (usize, usize),
    dim: (usize, usize),
) -> Result<()> {
    check_len(what, dim.0, actual.0)?;
    check_len(what, dim.1, actual.1)
}

/// `v` resized to `n` zeros (no allocation once it has held `n`).
pub(crate) fn sized(v: &mut Vec<f64>, n: usize) -> &mut [f64] {
    v.clear();
    v.resize(n, 0.0);
    v
}

/// The token path of an outcome estimator (one scalar per row, broadcast over its generated
/// tokens): the row scores and the mask checked
/// ([`checked_scores_and_mask`](EstimatorInput::checked_scores_and_mask)), then
/// `kernel(mask, scores, scalars, ws)` with the scalars sized to the rows (zeros), then the
/// scalars checked finite. Leaves the scores in `ws.scores` and the scalars in `ws.scalars`
/// (taken out of `ws` during the kernel); returns the mask.
pub(crate) fn outcome_scalars<'a>(
    input: &EstimatorInput<'a>,
    ws: &mut Scratch,
    kernel: impl FnOnce(&MaskView<'a>, &[f64], &mut [f64], &mut Scratch) -> Result<()>,
) -> Result<MaskView<'a>> {
    let mask = input.checked_scores_and_mask(&mut ws.scores)?;
    let (scores, mut scalars) = (std::mem::take(&mut ws.scores), std::mem::take(&mut ws.scalars));
    let result = kernel(&mask, &scores, sized(&mut scalars, scores.len()), ws)
        .and_then(|()| check_all_finite("advantages", &scalars));
    (ws.scores, ws.scalars) = (scores, scalars);
    result.map(|()| mask)
}

/// The step path of an outcome estimator (its inputs checked by `fill_estimator!`): each
/// row's score (its `row_scores` entry, else its trajectory's R(τ)) into `ws.scores`, then
/// `kernel(scores, advantages, ws)`, which writes every entry, then the advantages checked
/// finite.
pub(crate) fn step_scalars(
    input: &EstimatorInput<'_>,
    advantages: &mut [f64],
    ws: &mut Scratch,
    kernel: impl FnOnce(&[f64], &mut [f64], &mut Scratch) -> Result<()>,
) -> Result<()> {
    input.step_scores().write_rows(&mut ws.scores);
    let scores = std::mem::take(&mut ws.scores);
    let result = kernel(&scores, advantages, ws);
    ws.scores = scores;
    result?;
    check_all_finite("advantages", advantages)
}

/// The caller rows of group `g` (all steps of all its trajectories, trajectory-major).
pub(crate) fn group_rows(batch: &RolloutBatch, g: usize) -> &[usize] {
    let trajs = batch.group_trajectories(g);
    let offsets = batch.trajectory_offsets();
    &batch.step_rows()[offsets[trajs.start]..offsets[trajs.end]]
}

/// The group id of every caller row, into `out` (one pass over the batch, no hashing).
pub(crate) fn row_groups_into(batch: &RolloutBatch, out: &mut Vec<usize>) {
    out.clear();
    out.resize(batch.num_steps(), 0);
    for g in 0..batch.num_groups() {
        for &r in group_rows(batch, g) {
            out[r] = g;
        }
    }
}

/// The group id of every caller row.
#[cfg(test)]
pub(crate) fn row_groups(batch: &RolloutBatch) -> Vec<usize> {
    let mut out = Vec::new();
    row_groups_into(batch, &mut out);
    out
}

/// The [`AdvantageEstimator`](crate::estimator::AdvantageEstimator) entry points of a
/// step-level estimator (one advantage per row, broadcast over the row's tokens), inside its
/// `impl` block: `estimate_into` (documented by the leading doc comment: what the estimator
/// reads), `estimate` and `estimate_steps_into`, from two inherent methods:
/// `$columns(&self, &EstimatorInput) -> Result<_>` checks the step columns' shapes (before
/// the per-row buffer is sized, see [`estimate_via_steps`]) and
/// `$steps(&self, &EstimatorInput, &mut [f64], &mut Workspace) -> Result<()>` computes the
/// per-row advantages with every check of the step path.
macro_rules! step_entry_points {
    ($(#[$doc:meta])* columns = $columns:ident, steps = $steps:ident $(,)?) => {
        $(#[$doc])*
        fn estimate_into(
            &self,
            input: &$crate::estimator::EstimatorInput<'_>,
            advantages: $crate::tensor::FloatViewMut<'_>,
            returns: Option<$crate::tensor::FloatViewMut<'_>>,
            ws: &mut $crate::estimator::Workspace,
        ) -> $crate::error::Result<()> {
            $crate::estimator::estimate_via_steps(
                input,
                advantages,
                returns,
                ws,
                || self.$columns(input).map(drop),
                |steps, ws| self.$steps(input, steps, ws),
            )
        }

        /// As the trait's `estimate`, but every input check runs before the output is
        /// allocated: a refused input allocates nothing, and a `Lengths` mask's claimed L is
        /// asked of the allocator only for an otherwise valid input.
        fn estimate(
            &self,
            input: &$crate::estimator::EstimatorInput<'_>,
        ) -> $crate::error::Result<$crate::estimator::Advantages> {
            $crate::estimator::estimate_via_steps_fresh(
                input,
                || self.$columns(input).map(drop),
                |steps, ws| self.$steps(input, steps, ws),
            )
        }

        /// One advantage per row (the per-row `advantages` of the estimator's parts API).
        fn estimate_steps_into(
            &self,
            input: &$crate::estimator::EstimatorInput<'_>,
            advantages: &mut [f64],
            ws: &mut $crate::estimator::Workspace,
        ) -> $crate::error::Result<()> {
            self.$steps(input, advantages, ws)
        }
    };
}
pub(crate) use step_entry_points;

/// The step-level estimators' `estimate_into` (BEACON, GiGPO): `check` first (the step
/// columns: the per-row buffer is sized by the batch's row count, which `from_offsets` only
/// claims, so a column that does not back it must be an error before anything is
/// allocated), then `steps` into the workspace's per-row buffer, then [`steps_into`].
pub(crate) fn estimate_via_steps(
    input: &EstimatorInput<'_>,
    advantages: FloatViewMut<'_>,
    returns: Option<FloatViewMut<'_>>,
    ws: &mut Workspace,
    check: impl FnOnce() -> Result<()>,
    steps: impl FnOnce(&mut [f64], &mut Workspace) -> Result<()>,
) -> Result<()> {
    with_steps(input, ws, check, steps, |step| {
        steps_into(step, input.response_mask, advantages, returns)
    })
}

/// The step-level estimators' `estimate` (BEACON, GiGPO; the ablation runs BEACON's): as
/// [`estimate_via_steps`] into a fresh `f64` output, with every input check first. The
/// per-row advantages are computed (all of `estimate_into`'s checks but the mask's), then the
/// mask's rows and lengths are checked, and only then is the rows × L output allocated: a
/// refused input allocates no output, and a `Lengths` mask's claimed L is asked of the
/// allocator only for an otherwise valid input. The errors are `estimate_into`'s, in its order.
pub(crate) fn estimate_via_steps_fresh(
    input: &EstimatorInput<'_>,
    check: impl FnOnce() -> Result<()>,
    steps: impl FnOnce(&mut [f64], &mut Workspace) -> Result<()>,
) -> Result<Advantages> {
    with_steps(input, &mut Workspace::default(), check, steps, |step| {
        if let Some(mask) = &input.response_mask {
            crate::tensor::check_broadcast_mask(step, mask)?;
        }
        let mut advantages = crate::huge_pages::zeros(input.output_dim())?;
        steps_into(
            step,
            input.response_mask,
            FloatViewMut::F64(advantages.view_mut()),
            None,
        )?;
        Ok(Advantages::new(advantages, None))
    })
}

/// `check()`, the per-row advantages by `steps` into the workspace's step buffer, then
/// `write` of them: the part [`estimate_via_steps`] and [`estimate_via_steps_fresh`] share.
fn with_steps<T>(
    input: &EstimatorInput<'_>,
    ws: &mut Workspace,
    check: impl FnOnce() -> Result<()>,
    steps: impl FnOnce(&mut [f64], &mut Workspace) -> Result<()>,
    write: impl FnOnce(&[f64]) -> Result<T>,
) -> Result<T> {
    check()?;
    let mut buf = std::mem::take(&mut ws.steps);
    buf.clear();
    buf.resize(input.batch.num_steps(), 0.0);
    let result = steps(&mut buf, ws).and_then(|()| write(&buf));
    ws.steps = buf;
    result
}
