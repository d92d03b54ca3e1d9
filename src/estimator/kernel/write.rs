//! Writing the outputs: [`Out`] targets the caller's `f32`/`f64` buffers (or fresh arrays),
//! the row writers round once to the buffer's type (with streaming stores for large outputs),
//! and [`steps_into`] broadcasts per-row advantages under the response mask.

use crate::error::{Error, Result};
use crate::estimator::Stage;
use crate::tensor::{FloatViewMut, MaskView};

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
    /// [`estimate`](crate::estimator::AdvantageEstimator::estimate)'s fresh advantages, filled on first use:
    /// by [`outcome`](Self::outcome) element by element (no zero-fill pass first), else
    /// zeroed and then viewed as the advantages buffer.
    fresh: Option<&'o mut Vec<f64>>,
    /// [`estimate`](crate::estimator::AdvantageEstimator::estimate)'s fresh returns (estimators with returns),
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

    /// Outputs for [`estimate`](crate::estimator::AdvantageEstimator::estimate): advantages into `fresh` (`f64`,
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

/// `if m { v } else { +0.0 }` as a bit mask (exactly the select, but integer ops that
/// vectorize without branches).
#[inline(always)]
pub(crate) fn select(m: bool, v: f64) -> f64 {
    f64::from_bits(v.to_bits() & 0u64.wrapping_sub(u64::from(m)))
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
