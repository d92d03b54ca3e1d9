//! Plumbing shared by the kernels (crate-private): input columns as row-major slices
//! ([`Tokens`]), the output writer ([`Out`]) that targets the caller's `f32`/`f64` buffers, the
//! `fill_estimator!` trait implementation, row sums, finiteness checks and the step-row
//! broadcast.

use super::*;
use std::borrow::Cow;

use ndarray::ArrayView2;

use super::whiten::SUM_LANES;
use crate::batch::RolloutBatch;
use crate::error::{check_finite, check_len, Error, Result};
use crate::tensor::{FloatView, FloatViewMut, MaskBits, MaskView};

/// A rows × L input column in row-major order for the token-level kernels: borrowed when the
/// caller's view is `f64`/`bool` in standard layout (the usual case for `f64` callers),
/// otherwise widened once into a workspace buffer, which [`recycle`](Self::recycle) hands
/// back so the next call reuses it. Hot loops then run over plain slices.
pub(crate) struct Tokens<'a, T: Clone> {
    data: Cow<'a, [T]>,
    rows: usize,
    cols: usize,
}

impl<'a> Tokens<'a, f64> {
    pub(crate) fn floats(m: FloatView<'a>, buf: &mut Vec<f64>) -> Self {
        let (rows, cols) = m.dim();
        let data = match m {
            FloatView::F64(v) => match v.to_slice() {
                Some(s) => Cow::Borrowed(s),
                None => Cow::Owned(refill(buf, v.iter().copied())),
            },
            FloatView::F32(v) => Cow::Owned(refill(buf, v.iter().map(|&x| f64::from(x)))),
        };
        Self { data, rows, cols }
    }
}

impl<'a> Tokens<'a, bool> {
    /// The mask as `bool`s (borrowed for a standard-layout `bool` mask). Integer entries are
    /// tested for 0/1 in the same pass that converts them (no pass of its own).
    ///
    /// # Errors
    /// [`Error::MaskValue`] for the first integer entry (row-major) other than 0 and 1.
    pub(crate) fn mask(m: MaskView<'a>, buf: &mut Vec<bool>) -> Result<Self> {
        /// Rows of `m` into `data` (`cols` > 0 each); false when an entry is neither 0 nor 1.
        fn convert<M: MaskBits>(m: &ArrayView2<'_, M>, data: &mut [bool], cols: usize) -> bool {
            let mut extra = M::Extra::default();
            for (row, out) in m.rows().into_iter().zip(data.chunks_exact_mut(cols)) {
                for (o, x) in out.iter_mut().zip(row) {
                    extra = extra | x.extra_bits();
                    *o = x.is_set();
                }
            }
            extra == M::Extra::default()
        }
        let (rows, cols) = m.dim();
        if let MaskView::Bool(v) = m {
            if let Some(s) = v.to_slice() {
                return Ok(Self {
                    data: Cow::Borrowed(s),
                    rows,
                    cols,
                });
            }
        }
        let mut data = std::mem::take(buf);
        data.clear();
        data.resize(rows * cols, false);
        let valid = cols == 0
            || match &m {
                MaskView::U8(v) => convert(v, &mut data, cols),
                MaskView::I64(v) => convert(v, &mut data, cols),
                _ => {
                    for (r, row) in data.chunks_exact_mut(cols).enumerate() {
                        m.row_into(r, row);
                    }
                    true
                }
            };
        if !valid {
            *buf = data;
            return Err(m.value_error());
        }
        Ok(Self {
            data: Cow::Owned(data),
            rows,
            cols,
        })
    }
}

/// `buf`'s allocation refilled with `values` (taken out of `buf`; see [`Tokens::recycle`]).
fn refill<T>(buf: &mut Vec<T>, values: impl Iterator<Item = T>) -> Vec<T> {
    let mut data = std::mem::take(buf);
    data.clear();
    data.extend(values);
    data
}

impl<'a, T: Clone> Tokens<'a, T> {
    /// Hands a converted column's buffer back to the workspace.
    pub(crate) fn recycle(self, buf: &mut Vec<T>) {
        if let Cow::Owned(v) = self.data {
            *buf = v;
        }
    }

    pub(crate) fn dim(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    pub(crate) fn cols(&self) -> usize {
        self.cols
    }

    /// All values, row-major (index = row · L + t).
    pub(crate) fn as_slice(&self) -> &[T] {
        &self.data
    }

    /// Row `r` (in range by construction: callers iterate `0..rows`).
    pub(crate) fn row(&self, r: usize) -> &[T] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }
}

/// Where an estimator writes its outputs: the caller's buffers (`f32` or `f64`, any layout),
/// advantages always, returns when asked for.
///
/// Outcome estimators write straight into the buffers in their dtype ([`outcome`](Self::outcome)).
/// Token-level kernels get `f64` row-major slices from [`buffers`](Self::buffers): the caller's
/// own memory when it is `f64` in standard layout, else a workspace stand-in that
/// [`finish`](Self::finish) rounds into the caller's buffer. Kernels must write **every**
/// element: caller buffers hold stale values.
pub(crate) struct Out<'o> {
    advantages: FloatViewMut<'o>,
    returns: Option<FloatViewMut<'o>>,
    stage: &'o mut Stage,
    dim: (usize, usize),
    /// [`estimate`](AdvantageEstimator::estimate)'s fresh advantages, filled on first use:
    /// by [`outcome`](Self::outcome) element by element (no zero-fill pass first), else
    /// zeroed and then viewed as the advantages buffer.
    fresh: Option<&'o mut Vec<f64>>,
    /// [`estimate`](AdvantageEstimator::estimate)'s fresh returns (estimators with returns),
    /// allocated zeroed where the advantages are: once the inputs are validated.
    fresh_returns: Option<&'o mut Option<ndarray::Array2<f64>>>,
}

/// The caller's buffer as a row-major `f64` slice when it is one.
fn direct<'b>(v: &'b mut FloatViewMut<'_>) -> Option<&'b mut [f64]> {
    match v {
        FloatViewMut::F64(v) => v.as_slice_mut(),
        FloatViewMut::F32(_) => None,
    }
}

impl<'o> Out<'o> {
    pub(crate) fn new(
        advantages: FloatViewMut<'o>,
        returns: Option<FloatViewMut<'o>>,
        stage: &'o mut Stage,
    ) -> Self {
        Self {
            advantages,
            returns,
            stage,
            dim: (0, 0),
            fresh: None,
            fresh_returns: None,
        }
    }

    /// Outputs for [`estimate`](AdvantageEstimator::estimate): advantages into `fresh` (`f64`,
    /// row-major, the output's shape), returns (when `returns` is given) into a fresh `f64`
    /// array put in `returns`. Both are allocated when a writer first asks for its buffers,
    /// after the estimator has checked its inputs: a refused input allocates no output.
    pub(crate) fn fresh(
        fresh: &'o mut Vec<f64>,
        returns: Option<&'o mut Option<ndarray::Array2<f64>>>,
        stage: &'o mut Stage,
    ) -> Self {
        let empty: &'o mut [[f64; 0]] = &mut [];
        let mut out = Self::new(
            FloatViewMut::F64(ndarray::ArrayViewMut2::from(empty)),
            None,
            stage,
        );
        out.fresh = Some(fresh);
        out.fresh_returns = returns;
        out
    }

    /// In [`fresh`](Self::fresh) mode, the fresh returns zeroed to `dim` and used as the
    /// returns buffer.
    fn materialize_returns(&mut self, dim: (usize, usize)) -> Result<()> {
        if let Some(slot) = self.fresh_returns.take() {
            let r = slot.insert(crate::huge_pages::zeros(dim)?);
            self.returns = Some(FloatViewMut::F64(r.view_mut()));
        }
        Ok(())
    }

    /// In [`fresh`](Self::fresh) mode, the fresh buffers zeroed to `dim` and used as the
    /// advantages (and returns) buffers.
    fn materialize(&mut self, dim: (usize, usize)) -> Result<()> {
        self.materialize_returns(dim)?;
        if let Some(v) = self.fresh.take() {
            *v = crate::huge_pages::zeroed_vec(dim)?;
            // Cannot fail: `v` holds rows × L elements.
            let actual = (v.len(), 1);
            let view =
                ndarray::ArrayViewMut2::from_shape(dim, &mut v[..]).map_err(|_| Error::OutputShape {
                    what: "advantages",
                    expected: dim,
                    actual,
                })?;
            self.advantages = FloatViewMut::F64(view);
        }
        Ok(())
    }

    fn check_dims(&mut self, dim: (usize, usize)) -> Result<()> {
        self.advantages.check_dim("advantages", dim)?;
        if let Some(r) = &self.returns {
            r.check_dim("returns", dim)?;
        }
        self.dim = dim;
        Ok(())
    }

    /// The (advantages, returns) `f64` slices for an output of shape `dim`, row-major. The
    /// returns slice is a stand-in when the caller asked for no returns (kernels that need
    /// returns as an intermediate still write them). Call once, then [`finish`](Self::finish).
    ///
    /// # Errors
    /// [`Error::OutputShape`] when a caller buffer's shape is not `dim`.
    pub(crate) fn buffers(&mut self, dim: (usize, usize)) -> Result<(&mut [f64], &mut [f64])> {
        self.materialize(dim)?;
        self.check_dims(dim)?;
        let n = dim.0 * dim.1;
        let Stage {
            advantages: stage_a,
            returns: stage_r,
        } = &mut *self.stage;
        let a = match direct(&mut self.advantages) {
            Some(s) => s,
            None => {
                stage_a.resize(n, 0.0);
                &mut stage_a[..n]
            }
        };
        let r = match self.returns.as_mut().and_then(direct) {
            Some(s) => s,
            None => {
                stage_r.resize(n, 0.0);
                &mut stage_r[..n]
            }
        };
        Ok((a, r))
    }

    /// The caller's buffers as they are (any dtype and layout), for kernels that write rows
    /// in the caller's dtype themselves; [`finish`](Self::finish) then copies nothing.
    ///
    /// # Errors
    /// [`Error::OutputShape`] when a caller buffer's shape is not `dim`.
    pub(crate) fn direct(
        &mut self,
        dim: (usize, usize),
    ) -> Result<(&mut FloatViewMut<'o>, Option<&mut FloatViewMut<'o>>)> {
        self.materialize(dim)?;
        self.check_dims(dim)?;
        self.dim = (0, 0);
        Ok((&mut self.advantages, self.returns.as_mut()))
    }

    /// Rounds or copies the stand-ins of `f32` / strided caller buffers into them (no-op for
    /// buffers written in place, and after [`outcome`](Self::outcome)).
    pub(crate) fn finish(mut self) -> Result<()> {
        let n = self.dim.0 * self.dim.1;
        if direct(&mut self.advantages).is_none() && self.stage.advantages.len() >= n {
            self.advantages
                .assign_f64("advantages (overflows f32)", &self.stage.advantages[..n])?;
        }
        if let Some(ret) = &mut self.returns {
            if direct(ret).is_none() && self.stage.returns.len() >= n {
                ret.assign_f64("returns (overflows f32)", &self.stage.returns[..n])?;
            }
        }
        Ok(())
    }

    /// Outcome estimators: advantages (and returns, when asked for) = `scalars[r]` on the
    /// generated tokens of row r and +0.0 elsewhere (verl's `scores.unsqueeze(-1) *
    /// response_mask`, returned twice), written in the caller's dtype in one pass.
    pub(crate) fn outcome(&mut self, scalars: &[f64], mask: &MaskView<'_>) -> Result<()> {
        self.materialize_returns(mask.dim())?;
        if let Some(v) = self.fresh.take() {
            // Each element written once, in order: no zero-fill pass over fresh memory.
            if let Some(r) = &mut self.returns {
                r.check_dim("returns", mask.dim())?;
                crate::tensor::write_masked("returns (overflows f32)", scalars, mask, r)?;
            }
            return crate::tensor::extend_masked(scalars, mask, v);
        }
        self.check_dims(mask.dim())?;
        crate::tensor::write_masked("advantages (overflows f32)", scalars, mask, &mut self.advantages)?;
        if let Some(r) = &mut self.returns {
            crate::tensor::write_masked("returns (overflows f32)", scalars, mask, r)?;
        }
        // Nothing staged: `finish` must not copy stale stand-ins.
        self.dim = (0, 0);
        Ok(())
    }
}

/// Implements [`AdvantageEstimator`] for a verl estimator with an inherent
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
                let mut workspace = $crate::estimator::Workspace::new();
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

/// The number of generated tokens of every row, into `counts`. Integer entries are tested for
/// 0/1 as they are counted ([`lane_counts`]), so that a bad entry is reported before any
/// error the counts lead to.
///
/// # Errors
/// [`Error::MaskValue`] for the first integer entry (row-major) other than 0 and 1.
pub(crate) fn masked_counts(mask: &MaskView<'_>, counts: &mut Vec<usize>) -> Result<()> {
    fn count<M: MaskBits>(m: &ArrayView2<'_, M>, counts: &mut Vec<usize>) -> bool {
        let mut seen = 0u64;
        let cols = m.ncols();
        // Wrapping: an invalid entry's bits may overflow (its sum is never used).
        let total = |c: [u64; SUM_LANES]| c.iter().fold(0u64, |a, &x| a.wrapping_add(x)) as usize;
        match m.as_slice() {
            Some(s) if cols > 0 => {
                counts.extend(s.chunks_exact(cols).map(|row| total(lane_counts(row, &mut seen))))
            }
            _ => counts.extend(m.rows().into_iter().map(|row| match row.as_slice() {
                Some(s) => total(lane_counts(s, &mut seen)),
                None => total(lane_counts_strided(row.iter(), &mut seen)),
            })),
        }
        seen & !1 == 0
    }
    counts.clear();
    // `bool` through the same counting: its bits are 0 or 1, so it always passes the test.
    let valid = match mask {
        MaskView::Bool(m) => count(m, counts),
        MaskView::U8(m) => count(m, counts),
        MaskView::I64(m) => count(m, counts),
        MaskView::Lengths { lengths, cols } => {
            counts.extend(lengths.iter().map(|&n| n.min(*cols)));
            true
        }
    };
    if valid {
        Ok(())
    } else {
        Err(mask.value_error())
    }
}

/// Per class t mod [`SUM_LANES`], the sum of one contiguous integer mask row's entries (their
/// bits, wrapping), with the OR of those bits folded into `seen`: the row holds only 0 and 1
/// iff `seen` has no bit but bit 0, and then the sums are the counts of generated tokens.
/// One add and one OR per entry, in lanes of [`SUM_LANES`] (branch-free and vectorizable;
/// no 64-bit compare `!= 0`, which SSE2 lacks for an `i64`). A row with an invalid entry
/// gives sums that are never used (the caller reports [`Error::MaskValue`]).
#[inline(always)]
fn lane_counts<M: MaskBits>(row: &[M], seen: &mut u64) -> [u64; SUM_LANES] {
    let mut c = [0u64; SUM_LANES];
    let mut e = [0u64; SUM_LANES];
    let mut chunks = row.chunks_exact(SUM_LANES);
    for ch in &mut chunks {
        for j in 0..SUM_LANES {
            let b = ch[j].bits();
            c[j] = c[j].wrapping_add(b);
            e[j] |= b;
        }
    }
    for (j, x) in chunks.remainder().iter().enumerate() {
        let b = x.bits();
        c[j] = c[j].wrapping_add(b);
        e[j] |= b;
    }
    *seen |= e.iter().fold(0, |a, &x| a | x);
    c
}

/// [`lane_counts`] of a row that is not contiguous.
fn lane_counts_strided<'x, M: MaskBits + 'x>(
    row: impl Iterator<Item = &'x M>,
    seen: &mut u64,
) -> [u64; SUM_LANES] {
    let mut c = [0u64; SUM_LANES];
    for (t, x) in row.enumerate() {
        let b = x.bits();
        c[t % SUM_LANES] = c[t % SUM_LANES].wrapping_add(b);
        *seen |= b;
    }
    c
}

/// `if m { v } else { +0.0 }` as a bit mask (exactly the select, but integer ops that
/// vectorize without branches).
#[inline(always)]
pub(crate) fn select(m: bool, v: f64) -> f64 {
    f64::from_bits(v.to_bits() & 0u64.wrapping_sub(u64::from(m)))
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

/// Reports the first non-finite per-row scalar (finite inputs that overflowed).
pub(crate) fn check_scalars(what: &'static str, s: &[f64]) -> Result<()> {
    check_all_finite(what, s)
}

/// True when every value is finite. Branch-free and vectorizable: a value is NaN or ±inf
/// iff its exponent bits are all ones, and adding one to an all-ones exponent carries into
/// the sign bit, so OR-ing `(bits & EXP) + ONE` over the values sets bit 63 iff some value
/// is not finite.
pub(crate) fn all_finite(values: &[f64]) -> bool {
    const EXP: u64 = 0x7ff0_0000_0000_0000;
    const ONE: u64 = 0x0010_0000_0000_0000;
    let mut acc = [0u64; 8];
    let mut chunks = values.chunks_exact(8);
    for c in &mut chunks {
        for (a, x) in acc.iter_mut().zip(c) {
            *a |= (x.to_bits() & EXP) + ONE;
        }
    }
    let tail = chunks
        .remainder()
        .iter()
        .fold(0u64, |a, x| a | ((x.to_bits() & EXP) + ONE));
    (acc.iter().fold(tail, |a, &x| a | x) >> 63) == 0
}

/// [`check_finite`] with a fast all-finite pass first: the first offender is only searched
/// for on the error path.
pub(crate) fn check_all_finite(what: &'static str, values: &[f64]) -> Result<()> {
    if all_finite(values) {
        Ok(())
    } else {
        check_finite(what, values)
    }
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

/// verl's row score: the sum of `token_level_rewards` over all L positions (not masked),
/// each row summed left to right exactly as `row.iter().sum::<f64>()` does over the values
/// widened to `f64` (exact for `f32`), into `out`.
///
/// A row's sum is a chain of dependent additions (latency-bound); summing 8 rows at once
/// keeps 8 independent chains in flight without changing any row's order of additions.
pub(crate) fn row_sums(rewards: FloatView<'_>, out: &mut Vec<f64>) {
    out.clear();
    out.resize(rewards.dim().0, 0.0);
    row_sums_to(rewards, out);
}

/// [`row_sums`] into a slice of one entry per row (the public `tensor::row_sums_into` and the
/// estimators share this one implementation).
pub(crate) fn row_sums_to(rewards: FloatView<'_>, out: &mut [f64]) {
    match rewards {
        FloatView::F32(r) => row_sums_typed(r, out, lead_f32),
        FloatView::F64(r) => row_sums_typed(r, out, lead_chunks::<f64>),
    }
}

/// Rows summed at once: independent chains of additions in flight.
const SUM_ROWS: usize = 8;

/// Advances the sums of [`SUM_ROWS`] rows over their first tokens, each row's additions in
/// its own order, and returns how many tokens it added (the rest are added one by one).
type Lead<R> = fn(&[&[R]; SUM_ROWS], &mut [f64; SUM_ROWS]) -> usize;

/// [`row_sums_to`] for one element type: blocks of [`SUM_ROWS`] rows through `lead`, then
/// their remaining tokens, then the rows after the last whole block, each left to right.
fn row_sums_typed<R: crate::tensor::Float>(rewards: ArrayView2<'_, R>, out: &mut [f64], lead: Lead<R>) {
    let cols = rewards.ncols();
    // The start value of `Iterator::sum` for f64 (-0.0 in current std), so that every row
    // (including an empty one) gets the very bits `iter().sum()` gives.
    let start: f64 = std::iter::empty::<f64>().sum();
    if cols == 0 {
        out.fill(start);
        return;
    }
    let Some(data) = rewards.as_slice() else {
        for (s, row) in out.iter_mut().zip(rewards.rows()) {
            *s = row.iter().map(|x| x.to_f64()).sum();
        }
        return;
    };
    for_row_chunks(out, 1, cols, |r0, out| {
        let data = &data[r0 * cols..(r0 + out.len()) * cols];
        let mut blocks = data.chunks_exact(SUM_ROWS * cols);
        let mut sums = out.chunks_exact_mut(SUM_ROWS);
        for (block, sums) in (&mut blocks).zip(&mut sums) {
            let lane: [&[R]; SUM_ROWS] = std::array::from_fn(|k| &block[k * cols..(k + 1) * cols]);
            let mut acc = [start; SUM_ROWS];
            for t in lead(&lane, &mut acc)..cols {
                for (acc, lane) in acc.iter_mut().zip(&lane) {
                    *acc += lane[t].to_f64();
                }
            }
            sums.copy_from_slice(&acc);
        }
        for (row, s) in blocks.remainder().chunks_exact(cols).zip(sums.into_remainder()) {
            *s = row.iter().fold(start, |a, x| a + x.to_f64());
        }
    });
}

/// The scalar [`Lead`]: eight tokens of each row loaded as one chunk, then added token by
/// token (one token of eight rows at a time was eight scalar loads per step; this reaches
/// the speed of a plain read of the rewards at C).
// Index loops on purpose: j walks 8 rows in lockstep (one column at a time).
#[allow(clippy::needless_range_loop)]
fn lead_chunks<R: crate::tensor::Float>(lane: &[&[R]; SUM_ROWS], acc: &mut [f64; SUM_ROWS]) -> usize {
    const CHUNK: usize = 8;
    let cols = lane[0].len();
    let whole = cols - cols % CHUNK;
    for t in (0..whole).step_by(CHUNK) {
        let x: [&[R]; SUM_ROWS] = std::array::from_fn(|k| &lane[k][t..t + CHUNK]);
        for j in 0..CHUNK {
            for k in 0..SUM_ROWS {
                acc[k] += x[k][j].to_f64();
            }
        }
    }
    whole
}

/// The [`Lead`] for `f32` rewards (verl's dtype) with SSE2's two-lane `f64` additions: lane
/// 0 of a register carries one row's chain, lane 1 the next row's, so each addition
/// instruction advances two rows by one token, in each row's own order (the same bits as the
/// scalar chains; SSE2 is part of x86-64 and has no fused or reassociated additions). Four
/// tokens of a row pair are loaded at once, interleaved (`unpack`) and widened two at a time
/// (`cvtps2pd`): half the additions and conversions of the scalar loop, which at B is bound
/// by them rather than by reading the rewards.
///
/// Four tokens of all eight rows that are all ±0.0 are skipped: verl places a response's
/// reward on its last token, so most of a row is zeros. Adding ±0.0 leaves a sum unchanged
/// unless the sum is -0.0 (then +0.0 makes it +0.0), and a sum of `f64`s is -0.0 only while
/// every value added so far was -0.0 (an exact zero from nonzero values is +0.0, and an
/// addition near zero is exact). So the first four tokens are always added, and the skip
/// runs only when none of the eight sums is -0.0 after them. After [`DENSE_RUN`] chunks in
/// a row that hold a nonzero, the rest of the block is added without the test.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code, unused_unsafe)]
fn lead_f32(lane: &[&[f32]; SUM_ROWS], acc: &mut [f64; SUM_ROWS]) -> usize {
    use std::arch::x86_64::{
        __m128, __m128d, _mm_add_pd, _mm_castps_si128, _mm_cmpeq_epi32, _mm_cvtps_pd, _mm_loadu_pd,
        _mm_loadu_ps, _mm_movehl_ps, _mm_movemask_epi8, _mm_or_ps, _mm_setzero_si128, _mm_slli_epi32,
        _mm_storeu_pd, _mm_unpackhi_ps, _mm_unpacklo_ps,
    };
    let cols = lane[0].len();
    let whole = cols - cols % 4;
    if whole == 0 {
        return 0;
    }
    // SAFETY (every `unsafe` below): SSE2 is part of x86-64, and the loads and stores touch
    // 16 bytes inside the slices named (4 f32 of a row, 2 f64 of `acc`).
    let load = |t: usize| -> [__m128; SUM_ROWS] {
        std::array::from_fn(|k| unsafe { _mm_loadu_ps(lane[k][t..t + 4].as_ptr()) })
    };
    // Token-major, so that the four pairs' chains are in flight together.
    let add = |sums: &mut [__m128d; SUM_ROWS / 2], x: &[__m128; SUM_ROWS]| {
        for (p, sum) in sums.iter_mut().enumerate() {
            unsafe {
                let lo = _mm_unpacklo_ps(x[2 * p], x[2 * p + 1]); // a0 b0 a1 b1
                let hi = _mm_unpackhi_ps(x[2 * p], x[2 * p + 1]); // a2 b2 a3 b3
                *sum = _mm_add_pd(*sum, _mm_cvtps_pd(lo));
                *sum = _mm_add_pd(*sum, _mm_cvtps_pd(_mm_movehl_ps(lo, lo)));
                *sum = _mm_add_pd(*sum, _mm_cvtps_pd(hi));
                *sum = _mm_add_pd(*sum, _mm_cvtps_pd(_mm_movehl_ps(hi, hi)));
            }
        }
    };
    // Every one of the 32 values is ±0.0: no bit set but the sign bits.
    let all_zero = |x: &[__m128; SUM_ROWS]| unsafe {
        let any = x[1..].iter().fold(x[0], |a, &v| _mm_or_ps(a, v));
        let magnitude = _mm_slli_epi32::<1>(_mm_castps_si128(any));
        _mm_movemask_epi8(_mm_cmpeq_epi32(magnitude, _mm_setzero_si128())) == 0xffff
    };
    let mut sums: [_; SUM_ROWS / 2] = std::array::from_fn(|p| unsafe { _mm_loadu_pd(acc[2 * p..].as_ptr()) });
    add(&mut sums, &load(0));
    let store = |sums: &[__m128d; SUM_ROWS / 2], acc: &mut [f64; SUM_ROWS]| {
        for (pair, sum) in acc.chunks_exact_mut(2).zip(sums) {
            unsafe { _mm_storeu_pd(pair.as_mut_ptr(), *sum) };
        }
    };
    store(&sums, acc);
    // Chunks left to test for zeros: none while a sum is -0.0 (see above); dense rows (a KL
    // penalty on every token) run out after a few chunks in a row that hold a nonzero, so that
    // they pay for the test only a few times per block.
    let mut tests = if acc.iter().all(|s| s.to_bits() != (-0.0f64).to_bits()) {
        DENSE_RUN
    } else {
        0
    };
    for t in (4..whole).step_by(4) {
        let x = load(t);
        if tests > 0 && all_zero(&x) {
            tests = DENSE_RUN;
        } else {
            tests = tests.saturating_sub(1);
            add(&mut sums, &x);
        }
    }
    store(&sums, acc);
    whole
}

/// Chunks in a row holding a nonzero after which [`lead_f32`] stops looking for zeros.
#[cfg(target_arch = "x86_64")]
const DENSE_RUN: u32 = 4;

/// The scalar chains where there is no SSE2.
#[cfg(not(target_arch = "x86_64"))]
fn lead_f32(lane: &[&[f32]; SUM_ROWS], acc: &mut [f64; SUM_ROWS]) -> usize {
    lead_chunks(lane, acc)
}

/// Tokens per chunk below which splitting a row-parallel loop costs more than it saves.
pub(crate) const PAR_TOKENS: usize = 1 << 16;

/// Runs `f(first_row, rows)` over `out` (`per_row` elements per row, `tokens_per_row` tokens
/// of work per row), on the crate's one chunking mechanism ([`crate::parallel`]): with the
/// `rayon` feature and enough tokens, contiguous chunks of whole rows, one per pool thread;
/// otherwise `f(0, out)` once. Callers do per-row work only (no value depends on another row),
/// so every result has the same bits however the rows are split.
pub(crate) fn for_row_chunks<T: Send>(
    out: &mut [T],
    per_row: usize,
    tokens_per_row: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    let rows = out.len().checked_div(per_row).unwrap_or(0);
    let k = crate::parallel::chunk_count(rows.saturating_mul(tokens_per_row), PAR_TOKENS);
    if k <= 1 {
        f(0, out);
        return;
    }
    let mut bounds = [0; crate::parallel::MAX_CHUNKS + 1];
    let bounds = crate::parallel::balance(rows, k, |r| r, &mut bounds);
    crate::parallel::for_chunks(
        bounds,
        (0usize, out),
        &|(base, o): (usize, &mut [T]), at, _| {
            let (first, rest) = o.split_at_mut((at - base) * per_row);
            ((base, first), (at, rest))
        },
        &|_, (first_row, o)| f(first_row, o),
    );
}

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
    with_steps(input, &mut Workspace::new(), check, steps, |step| {
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

/// The per-row advantages in
/// `step` broadcast under the input's response mask when there is one (rows × L), else into
/// one column (rows × 1); returns, when asked for, equal the advantages.
pub(crate) fn steps_into(
    step: &[f64],
    mask: Option<MaskView<'_>>,
    advantages: FloatViewMut<'_>,
    returns: Option<FloatViewMut<'_>>,
) -> Result<()> {
    let dim = mask.map_or((step.len(), 1), |m| m.dim());
    advantages.check_dim("advantages", dim)?;
    if let Some(r) = &returns {
        r.check_dim("returns", dim)?;
    }
    steps_one(step, mask, advantages)?;
    match returns {
        Some(r) => steps_one(step, mask, r),
        None => Ok(()),
    }
}

fn steps_one(step: &[f64], mask: Option<MaskView<'_>>, mut out: FloatViewMut<'_>) -> Result<()> {
    match (mask, &mut out) {
        (Some(mask), _) => crate::tensor::broadcast_into(step, mask, out),
        (None, FloatViewMut::F32(o)) => {
            o.column_mut(0)
                .iter_mut()
                .zip(step)
                .for_each(|(a, &s)| *a = s as f32);
            out.f32_overflow("token advantages (overflows f32)", step)
        }
        (None, FloatViewMut::F64(o)) => {
            o.column_mut(0).iter_mut().zip(step).for_each(|(a, &s)| *a = s);
            Ok(())
        }
    }
}

/// Rows per block of the token scans (GAE, REINFORCE++): each lane is one row's backward
/// recurrence, and running several independent rows in lockstep hides the latency of each
/// row's chain of dependent operations without changing any row's order of operations.
pub(crate) const LANES: usize = 4;

/// The next block's input rows, one cache line requested per step of the current block's scan.
///
/// The scans run on a block already in cache (its rows widened into [`Lanes`]), so the core
/// sits idle on memory only while the next block's rows are read; its lines, requested
/// during the current scan (one per token step: a block's `LANES` rows of 512 tokens are
/// 512 lines of f32 rewards and values and an i64 mask), arrive while the scan computes.
/// Measured at C (30,720 × 512, three alternating pairs): GAE 0.91× the time without from an
/// i64 mask, 0.95× from per-row lengths; REINFORCE++ 0.93× from i64, unchanged from lengths.
/// Requests only: no value is read, so the results are unchanged. Strided rows (no
/// contiguous slice) and per-row lengths are not requested.
#[derive(Debug, Default)]
pub(crate) struct Prefetch {
    /// (start address, bytes) of each contiguous input row.
    regions: [(usize, usize); 3 * LANES],
    count: usize,
    at: usize,
    offset: usize,
}

impl Prefetch {
    /// The rows `r ..` (up to [`LANES`] of them) of `a`, `b` (if any) and `mask`.
    pub(crate) fn rows(a: &FloatView<'_>, b: Option<&FloatView<'_>>, mask: &MaskView<'_>, r: usize) -> Self {
        // From the start of the first line the row touches, so that stepping by whole lines
        // reaches its last one.
        fn bytes<T>(s: Option<&[T]>) -> Option<(usize, usize)> {
            s.map(|s| {
                let start = s.as_ptr() as usize;
                (start - start % LINE, std::mem::size_of_val(s) + start % LINE)
            })
        }
        fn float_bytes(v: &FloatView<'_>, row: usize) -> Option<(usize, usize)> {
            match v {
                FloatView::F32(m) => bytes(m.row(row).to_slice()),
                FloatView::F64(m) => bytes(m.row(row).to_slice()),
            }
        }
        let mut p = Self::default();
        let rows = mask.dim().0;
        for row in r..r.saturating_add(LANES).min(rows) {
            let mut push = |region: Option<(usize, usize)>| {
                if let Some(region) = region.filter(|&(_, len)| len > 0) {
                    p.regions[p.count] = region;
                    p.count += 1;
                }
            };
            push(float_bytes(a, row));
            push(b.and_then(|b| float_bytes(b, row)));
            push(match mask {
                MaskView::Bool(m) => bytes(m.row(row).to_slice()),
                MaskView::U8(m) => bytes(m.row(row).to_slice()),
                MaskView::I64(m) => bytes(m.row(row).to_slice()),
                MaskView::Lengths { .. } => None,
            });
        }
        p
    }

    /// Requests the next line (nothing once every row is requested).
    #[inline(always)]
    pub(crate) fn step(&mut self) {
        let Some(line) = self.next_line() else { return };
        #[cfg(target_arch = "x86_64")]
        #[allow(unsafe_code, unused_unsafe)]
        // SAFETY: SSE is part of x86-64, and a prefetch reads nothing and never faults (the
        // address is in a line that holds part of a row of the caller's input anyway).
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(line as *const i8);
        }
        // Elsewhere the walk only advances.
        #[cfg(not(target_arch = "x86_64"))]
        let _ = line;
    }

    /// The address of the next line to request, if any is left.
    #[inline(always)]
    fn next_line(&mut self) -> Option<usize> {
        let &(start, len) = self.regions[..self.count].get(self.at)?;
        let line = start + self.offset;
        self.offset += LINE;
        if self.offset >= len {
            (self.at, self.offset) = (self.at + 1, 0);
        }
        Some(line)
    }
}

/// Bytes per cache line (x86-64 and most AArch64 cores).
const LINE: usize = 64;

/// Row `r` of `v` widened (exactly) to `f64` into `buf` (length L).
pub(crate) fn float_row(v: &FloatView<'_>, r: usize, buf: &mut [f64]) {
    fn put<T: crate::tensor::Float>(m: &ArrayView2<'_, T>, r: usize, buf: &mut [f64]) {
        let row = m.row(r);
        match row.as_slice() {
            Some(s) => buf.iter_mut().zip(s).for_each(|(o, &x)| *o = x.to_f64()),
            None => buf.iter_mut().zip(row).for_each(|(o, &x)| *o = x.to_f64()),
        }
    }
    match v {
        FloatView::F32(m) => put(m, r, buf),
        FloatView::F64(m) => put(m, r, buf),
    }
}

/// The response mask of row `r` into `buf` (length L) as 0/1 bytes; false when an integer
/// entry of the row is neither 0 nor 1. The test rides along the conversion (the OR of the
/// entries' [extra bits](MaskBits::extra_bits), in the entries' own width), so an integer
/// mask costs no pass of its own; for `bool` the OR is a constant 0 and compiles away.
///
/// Each byte is the entry's bit 0, which for the valid entries 0 and 1 is the entry itself:
/// a truncation, where `!= 0` on an `i64` is a 64-bit compare that SSE2 lacks (callgrind, GAE
/// at B: the conversion 10.3 M → 7.8 M instructions per call). The byte of an invalid entry
/// is never used for a result: the caller reports [`Error::MaskValue`].
pub(crate) fn mask_row(mask: &MaskView<'_>, r: usize, buf: &mut [u8]) -> bool {
    fn put<M: MaskBits>(m: &ArrayView2<'_, M>, r: usize, buf: &mut [u8]) -> bool {
        let row = m.row(r);
        match row.as_slice() {
            Some(s) => {
                // Chunks of 8: the conversion vectorizes 8 wide (a plain zip runs 4 at a
                // time); one OR accumulator per lane, reduced once per row.
                let mut extra = [M::Extra::default(); 8];
                let (mut o, mut x) = (buf.chunks_exact_mut(8), s.chunks_exact(8));
                for (o, x) in (&mut o).zip(&mut x) {
                    for j in 0..8 {
                        extra[j] = extra[j] | x[j].extra_bits();
                        o[j] = x[j].bits() as u8 & 1;
                    }
                }
                let mut tail = M::Extra::default();
                for (o, x) in o.into_remainder().iter_mut().zip(x.remainder()) {
                    tail = tail | x.extra_bits();
                    *o = x.bits() as u8 & 1;
                }
                extra.iter().fold(tail, |a, &e| a | e) == M::Extra::default()
            }
            None => {
                let mut extra = M::Extra::default();
                for (o, x) in buf.iter_mut().zip(row) {
                    extra = extra | x.extra_bits();
                    *o = x.bits() as u8 & 1;
                }
                extra == M::Extra::default()
            }
        }
    }
    match mask {
        MaskView::Bool(m) => put(m, r, buf),
        MaskView::U8(m) => put(m, r, buf),
        MaskView::I64(m) => put(m, r, buf),
        MaskView::Lengths { lengths, .. } => {
            let len = lengths[r].min(buf.len());
            let (on, off) = buf.split_at_mut(len);
            on.fill(1);
            off.fill(0);
            true
        }
    }
}

/// Per row, how many generated tokens fall in each class t mod [`SUM_LANES`] (the partial
/// sums of [`row_sum`](super::whiten::row_sum)): `counts[r · SUM_LANES + j]`. Integer
/// entries are tested for 0/1 as they are counted ([`lane_counts`]), so that a bad entry is
/// reported before any error the counts lead to (e.g. whitening's "fewer than two tokens").
///
/// # Errors
/// [`Error::MaskValue`] for the first integer entry (row-major) other than 0 and 1.
pub(crate) fn masked_class_counts(mask: &MaskView<'_>, counts: &mut Vec<usize>) -> Result<()> {
    fn count<M: MaskBits>(m: &ArrayView2<'_, M>, counts: &mut [usize]) -> bool {
        let mut seen = 0u64;
        for (row, out) in m.rows().into_iter().zip(counts.chunks_exact_mut(SUM_LANES)) {
            let lanes = match row.as_slice() {
                Some(s) => lane_counts(s, &mut seen),
                None => lane_counts_strided(row.iter(), &mut seen),
            };
            for (o, c) in out.iter_mut().zip(lanes) {
                *o = c as usize;
            }
        }
        seen & !1 == 0
    }
    let rows = mask.dim().0;
    counts.clear();
    counts.resize(rows * SUM_LANES, 0);
    // `bool` through the same counting: its bits are 0 or 1, so it always passes the test.
    let valid = match mask {
        MaskView::Bool(m) => count(m, counts),
        MaskView::U8(m) => count(m, counts),
        MaskView::I64(m) => count(m, counts),
        MaskView::Lengths { lengths, cols } => {
            for (&n, out) in lengths.iter().zip(counts.chunks_exact_mut(SUM_LANES)) {
                let n = n.min(*cols);
                for (j, c) in out.iter_mut().enumerate() {
                    *c = n / SUM_LANES + usize::from(j < n % SUM_LANES);
                }
            }
            true
        }
    };
    if valid {
        Ok(())
    } else {
        Err(mask.value_error())
    }
}

/// Writes `src` (length L), rounded once to the buffer's type, into row `r` of `out`. With
/// `stream` a contiguous row is written with streaming stores ([`crate::stream`]: no read of
/// each output line first); the writer calls [`crate::stream::fence`] after its last row.
pub(crate) fn put_row_from(
    out: &mut FloatViewMut<'_>,
    r: usize,
    src: &[f64],
    stream: bool,
    f: impl Fn(f64) -> f64,
) {
    match out {
        FloatViewMut::F32(o) => put_row(o.row_mut(r), src, stream, no_check, |_, x| {
            <f32 as crate::tensor::Float>::from_f64(f(x))
        }),
        FloatViewMut::F64(o) => put_row(o.row_mut(r), src, stream, no_check, |_, x| f(x)),
    };
}

/// [`put_row_from`] of `src` itself, for values that may lie past `f32::MAX` (a whitening
/// scan's returns): whether a value written into an `f32` row rounded to ∞, tested on the
/// rounded values as they are stored rather than by a second pass over `src` (which cost GAE
/// about 10% at C). Always `false` for an `f64` row. A NaN or infinite `src` value also
/// counts; callers report those first.
pub(crate) fn put_row_checked(out: &mut FloatViewMut<'_>, r: usize, src: &[f64], stream: bool) -> bool {
    match out {
        FloatViewMut::F32(o) => put_row(
            o.row_mut(r),
            src,
            stream,
            |y: f32| y.is_infinite(),
            |_, x| x as f32,
        ),
        FloatViewMut::F64(o) => put_row(o.row_mut(r), src, stream, no_check, |_, x| x),
    }
}

/// The check of a row whose values cannot overflow its type (see [`put_row`]).
#[inline(always)]
fn no_check<O>(_: O) -> bool {
    false
}

/// [`put_row_from`] of `f(x)` where the mask (0/1 bytes) is set and +0.0 elsewhere (a
/// re-masked row).
pub(crate) fn put_row_masked(
    out: &mut FloatViewMut<'_>,
    r: usize,
    src: &[f64],
    mask: &[u8],
    stream: bool,
    f: impl Fn(f64) -> f64,
) {
    let masked = |t: usize, x: f64| select(mask[t] != 0, f(x));
    match out {
        FloatViewMut::F32(o) => put_row(o.row_mut(r), src, stream, no_check, |t, x| {
            <f32 as crate::tensor::Float>::from_f64(masked(t, x))
        }),
        FloatViewMut::F64(o) => put_row(o.row_mut(r), src, stream, no_check, masked),
    };
}

/// One output row: `value(t, src[t])` at every token t (see [`put_row_from`]), in chunks of 8
/// when `stream`; returns whether `check` held for a written value. `value` and `check` are
/// closures per caller, so each writer compiles to its own loop (with [`no_check`], to the
/// loop without a test).
#[inline]
fn put_row<O: crate::tensor::Float>(
    mut row: ndarray::ArrayViewMut1<'_, O>,
    src: &[f64],
    stream: bool,
    check: impl Fn(O) -> bool,
    value: impl Fn(usize, f64) -> O,
) -> bool
where
    [O; 8]: crate::stream::Chunk,
{
    // Or-ed without an early exit, so that the test vectorizes with the conversion.
    let mut hit = false;
    let put = |hit: &mut bool, o: &mut O, t: usize, x: f64| {
        let y = value(t, x);
        *hit |= check(y);
        *o = y;
    };
    match row.as_slice_mut() {
        Some(s) if stream => {
            let (mut oc, mut xc) = (s.chunks_exact_mut(8), src.chunks_exact(8));
            for (c, (o, x)) in (&mut oc).zip(&mut xc).enumerate() {
                let w: [O; 8] = std::array::from_fn(|j| value(8 * c + j, x[j]));
                hit |= w.iter().fold(false, |any, &y| any | check(y));
                // (A chunk always converts: `chunks_exact_mut(8)` gives 8 elements.)
                if let Ok(o) = <&mut [O; 8]>::try_from(o) {
                    crate::stream::store(o, w);
                }
            }
            let t0 = src.len() - xc.remainder().len();
            for (t, (o, &x)) in oc.into_remainder().iter_mut().zip(xc.remainder()).enumerate() {
                put(&mut hit, o, t0 + t, x);
            }
        }
        Some(s) => s
            .iter_mut()
            .zip(src)
            .enumerate()
            .for_each(|(t, (o, &x))| put(&mut hit, o, t, x)),
        None => row
            .iter_mut()
            .zip(src)
            .enumerate()
            .for_each(|(t, (o, &x))| put(&mut hit, o, t, x)),
    }
    hit
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{s, Array2};
    use std::collections::BTreeSet;

    /// The lines (address / 64) that hold the bytes of `rows`.
    fn lines_of<T>(rows: &[&[T]]) -> BTreeSet<usize> {
        let bytes = |r: &&[T]| (r.as_ptr() as usize, std::mem::size_of_val(*r));
        rows.iter()
            .map(bytes)
            .flat_map(|(a, n)| a / LINE..(a + n).div_ceil(LINE))
            .collect()
    }

    fn requested(mut p: Prefetch) -> Vec<usize> {
        std::iter::from_fn(|| p.next_line()).map(|a| a / LINE).collect()
    }

    fn row<T>(a: &Array2<T>, i: usize) -> &[T] {
        a.row(i).to_slice().unwrap()
    }

    #[test]
    fn prefetch_requests_every_line_of_the_next_blocks_rows() {
        // 6 rows × 40 tokens (160-byte f32 rows, which share lines): the block from row 4 is
        // cut short by the batch's end (rows 4, 5).
        let (rows, cols) = (6, 40);
        let r = Array2::<f32>::from_shape_fn((rows, cols), |(i, j)| (i * cols + j) as f32);
        let v = r.clone();
        let m = Array2::<i64>::ones((rows, cols));
        let (rv, vv, mv) = (
            FloatView::F32(r.view()),
            FloatView::F32(v.view()),
            MaskView::I64(m.view()),
        );
        let check = |got: Vec<usize>, want: BTreeSet<usize>, regions: usize| {
            assert_eq!(got.iter().copied().collect::<BTreeSet<_>>(), want);
            // A line two rows share may be requested once for each.
            assert!(got.len() <= want.len() + regions, "{got:?}");
        };
        let got = requested(Prefetch::rows(&rv, Some(&vv), &mv, 4));
        let mut want = lines_of(&[row(&r, 4), row(&r, 5), row(&v, 4), row(&v, 5)]);
        want.extend(lines_of(&[row(&m, 4), row(&m, 5)]));
        check(got, want, 6);

        // Without `b`: `a` and the mask, a whole block.
        let got = requested(Prefetch::rows(&rv, None, &mv, 0));
        let mut want = lines_of(&(0..LANES).map(|i| row(&r, i)).collect::<Vec<_>>());
        want.extend(lines_of(&(0..LANES).map(|i| row(&m, i)).collect::<Vec<_>>()));
        check(got, want, 2 * LANES);
        // Nothing past the last row.
        assert!(requested(Prefetch::rows(&rv, Some(&vv), &mv, rows)).is_empty());
    }

    #[test]
    fn prefetch_skips_lengths_and_strided_rows() {
        let r = Array2::<f32>::zeros((8, 16));
        let lengths = [3usize; 8];
        let lens = MaskView::Lengths {
            lengths: &lengths,
            cols: 16,
        };
        let rv = FloatView::F32(r.view());
        // Rewards only (no mask bytes to read).
        let got: BTreeSet<usize> = requested(Prefetch::rows(&rv, None, &lens, 0))
            .into_iter()
            .collect();
        assert_eq!(got, lines_of(&(0..LANES).map(|i| row(&r, i)).collect::<Vec<_>>()));
        // Every other column: no row is a contiguous slice.
        let strided = FloatView::F32(r.slice(s![.., ..;2]));
        assert!(requested(Prefetch::rows(&strided, None, &lens, 0)).is_empty());
    }
}
