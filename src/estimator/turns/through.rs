//! Step rows written as they are read: each row's output right after the row's mask.
//!
//! On step rows a turn's value depends on the step columns alone (`step_rewards`,
//! `turn_values`, the batch's groups and trajectories), never on the mask, so the values can
//! be computed first, by the estimator's step path, and the single pass over the mask then
//! writes each row's output right after finding its runs (where the two-pass order reads
//! every row's runs, then sweeps the whole output a second time). Options whose values do
//! depend on the mask (whitening over the generated tokens) are refused by the step path and
//! take the two passes.
//!
//! Only a call that would succeed takes this path: when the step path fails, a value is not
//! finite or does not fit an `f32` output, the mask's shape is wrong or an output's shape is
//! not the batch's, the two-pass path runs instead and reports its first error as before. The
//! one error found here is an invalid mask entry, which the two-pass path reports first too.
//! The elements written are those of the two-pass write, bit for bit.

use super::runs::{self, Ahead};
use super::{Span, TurnWorkspace, Turns};
use crate::error::Result;
use crate::estimator::EstimatorInput;
use crate::tensor::{overflows_f32, Float, FloatViewMut};

impl TurnWorkspace {
    /// The step path `steps` (an estimator's `estimate_steps_into`) run into a kept buffer:
    /// true when the input is step rows and it succeeded, `values` (and the returns' field)
    /// then holding every row's value.
    pub(crate) fn step_values(
        &mut self,
        input: &EstimatorInput<'_>,
        steps: impl FnOnce(&EstimatorInput<'_>, &mut [f64], &mut TurnWorkspace) -> Result<()>,
    ) -> bool {
        // The buffer is sized by the step column (memory the caller holds), never by a row
        // count the batch only claims: a mismatch goes to the two passes, which report it.
        let rows = input.batch.num_steps();
        if input.step_rewards.is_none_or(|s| s.len() != rows) {
            return false;
        }
        let mut out = std::mem::take(&mut self.step_out);
        out.clear();
        out.resize(rows, 0.0);
        let done = steps(input, &mut out, self).is_ok();
        self.step_out = out;
        done
    }
}

impl Turns {
    /// Step rows in one pass over the mask: row r's runs, then row r of `advantages` (and of
    /// `returns`) as the two-pass write gives it: `values[r]` (`return_values[r]`) over the
    /// runs, 0 elsewhere. `Ok(false)` (nothing written) when the call must take the two
    /// passes (see the module docs); [`Error::MaskValue`](crate::Error::MaskValue) for an
    /// entry other than 0 and 1.
    pub(crate) fn write_through(
        &mut self,
        input: &EstimatorInput<'_>,
        values: &[f64],
        return_values: &[f64],
        mut advantages: FloatViewMut<'_>,
        mut returns: Option<FloatViewMut<'_>>,
    ) -> Result<bool> {
        let dim = input.output_dim();
        let rows = input.batch.num_steps();
        if advantages.dim() != dim || returns.as_ref().is_some_and(|r| r.dim() != dim) {
            return Ok(false);
        }
        let f32_out =
            matches!(advantages, FloatViewMut::F32(_)) || matches!(returns, Some(FloatViewMut::F32(_)));
        let fits =
            |v: &[f64]| v.len() == rows && v.iter().all(|&x| x.is_finite() && !(f32_out && overflows_f32(x)));
        if !fits(values) || (returns.is_some() && !fits(return_values)) {
            return Ok(false);
        }
        let Ok(mask) = input.checked_mask((rows, dim.1)) else {
            return Ok(false);
        };
        self.mbuf.resize(dim.1, 0);
        for r in 0..rows {
            self.spans.clear();
            let ahead = Ahead::rows(&mask, None, r);
            if !runs::row_runs(&mask, r, ahead, &mut self.mbuf, &mut self.spans) {
                self.spans.clear();
                return Err(mask.value_error());
            }
            put_row(&mut advantages, r, &self.spans, values[r]);
            if let Some(out) = &mut returns {
                put_row(out, r, &self.spans, return_values[r]);
            }
        }
        // The runs of this call are not kept: its turns are the step path's.
        self.spans.clear();
        Ok(true)
    }
}

/// Row `r` of `out`: `v` over `spans`, 0 elsewhere.
fn put_row(out: &mut FloatViewMut<'_>, r: usize, spans: &[Span], v: f64) {
    match out {
        FloatViewMut::F32(o) => write_row(o.row_mut(r), spans, |_| f32::from_f64(v)),
        FloatViewMut::F64(o) => write_row(o.row_mut(r), spans, |_| v),
    }
}

/// One output row: `value(span)` over each of `spans` (sorted, disjoint, all of this row) and 0
/// elsewhere, each element written once where the row is contiguous.
#[inline]
fn write_row<T: Float>(mut row: ndarray::ArrayViewMut1<'_, T>, spans: &[Span], value: impl Fn(&Span) -> T) {
    match row.as_slice_mut() {
        Some(o) => {
            // The gap before a span, the span, the tail.
            let mut at = 0;
            for sp in spans {
                o[at..sp.start].fill(T::ZERO);
                o[sp.start..sp.end].fill(value(sp));
                at = sp.end;
            }
            o[at..].fill(T::ZERO);
        }
        None => {
            row.fill(T::ZERO);
            for sp in spans {
                let v = value(sp);
                for t in sp.start..sp.end {
                    row[t] = v;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::estimator::{AdvantageEstimator, EstimatorConfig, EstimatorInput, Workspace};
    use crate::tensor::MaskView;
    use crate::{Error, RolloutBatch};
    use ndarray::{s, Array2};

    const ROWS: usize = 24;
    const COLS: usize = 37;

    /// Step rows: 3 groups of 2 trajectories of 4 steps, interleaved; rows of 0 to 3 runs
    /// crossing chunk edges (row 5 has none).
    fn layout() -> (RolloutBatch, Vec<f64>, Vec<i64>, Array2<i64>) {
        let uids: Vec<usize> = (0..ROWS).map(|r| r / 8).collect();
        let trajs: Vec<usize> = (0..ROWS).map(|r| r / 8 * 2 + r % 2).collect();
        let batch = RolloutBatch::from_row_keys(&uids, &trajs, &[0.0; ROWS]).unwrap();
        let steps: Vec<f64> = (0..ROWS).map(|r| ((r * 5) % 7) as f64 - 2.5).collect();
        // Trajectory 2g + 1 branches off trajectory 2g's first row.
        let parents: Vec<i64> = (0..ROWS)
            .map(|r| if r % 2 == 1 { (r - r % 8) as i64 } else { -1 })
            .collect();
        let mask = Array2::from_shape_fn((ROWS, COLS), |(r, t)| {
            i64::from(r != 5 && (t + 3 * r) % 13 < 2 + r % 9)
        });
        (batch, steps, parents, mask)
    }

    fn configs() -> Vec<EstimatorConfig> {
        use crate::estimator::*;
        let roll = StepReinforceConfig::default();
        vec![
            EstimatorConfig::StepReinforce(roll),
            EstimatorConfig::StepReinforce(
                roll.with_grouping(Grouping::Group)
                    .with_norm_mean(Some(NormScope::Group))
                    .with_norm_std(Some(NormScope::Group))
                    .with_advantage_clip(Some(0.7)),
            ),
            EstimatorConfig::StepReinforce(
                roll.with_norm_mean(Some(NormScope::Batch))
                    .with_norm_std(Some(NormScope::Batch))
                    .with_whiten_advantages(true),
            ),
            EstimatorConfig::MtGrpo(MtGrpoConfig::default()),
            EstimatorConfig::MtGrpo(MtGrpoConfig::default().with_turn_baseline(TurnBaseline::RewardToGo)),
            EstimatorConfig::TurnGae(TurnGaeConfig::default().with_discount(0.9).with_lam(0.8)),
            EstimatorConfig::TurnGae(TurnGaeConfig::default().with_whiten(true)),
            EstimatorConfig::TreeGrpo(TreeGrpoConfig::default()),
        ]
    }

    fn bits(a: &Array2<f64>) -> Array2<u64> {
        a.mapv(f64::to_bits)
    }

    /// `estimate_into` over buffers full of NaN against `estimate` (the two passes into a
    /// fresh output), bit for bit: `f64` advantages and returns, `f32`, a strided buffer, and
    /// the mask as `i64`, `bool` and lengths. Each call follows one on other rewards in the
    /// same workspace, so that a value left from it would show.
    #[test]
    fn one_pass_writes_the_bits_of_two_passes() {
        let (batch, steps, parents, mask) = layout();
        let other: Vec<f64> = steps.iter().map(|x| 3.0 - 2.0 * x).collect();
        let lengths: Vec<usize> = (0..ROWS).map(|r| (r * 7) % (COLS + 1)).collect();
        let mb = mask.mapv(|x| x == 1);
        let masks = [
            MaskView::from(&mask),
            MaskView::from(&mb),
            MaskView::Lengths {
                lengths: &lengths,
                cols: COLS,
            },
        ];
        for config in configs() {
            let est = config.build().unwrap();
            for m in &masks {
                let input = EstimatorInput::new(&batch)
                    .with_step_rewards(&steps)
                    .with_turn_values(&steps)
                    .with_tree_parents(&parents)
                    .with_response_mask(*m);
                let want = est.estimate(&input).unwrap();
                let mut ws = Workspace::default();
                for _ in 0..2 {
                    let before = input.with_step_rewards(&other).with_turn_values(&other);
                    let mut adv = Array2::from_elem((ROWS, COLS), f64::NAN);
                    let mut ret = adv.clone();
                    let returns = est.has_returns().then_some((&mut ret).into());
                    est.estimate_into(&before, (&mut adv).into(), returns, &mut ws)
                        .unwrap();
                    let mut adv = Array2::from_elem((ROWS, COLS), f64::NAN);
                    let mut ret = Array2::from_elem((ROWS, COLS), f64::NAN);
                    let returns = est.has_returns().then_some((&mut ret).into());
                    est.estimate_into(&input, (&mut adv).into(), returns, &mut ws)
                        .unwrap();
                    assert_eq!(bits(&adv), bits(&want.advantages), "{config:?}");
                    if let Some(r) = &want.returns {
                        assert_eq!(bits(&ret), bits(r), "{config:?} returns");
                    }
                }
                let mut a32 = Array2::from_elem((ROWS, COLS), f32::NAN);
                est.estimate_into(&input, (&mut a32).into(), None, &mut ws)
                    .unwrap();
                assert_eq!(a32, want.advantages.mapv(|x| x as f32), "{config:?} f32");
                let mut wide = Array2::from_elem((ROWS, 2 * COLS), f64::NAN);
                est.estimate_into(&input, wide.slice_mut(s![.., ..;2]).into(), None, &mut ws)
                    .unwrap();
                assert_eq!(bits(&wide.slice(s![.., ..;2]).to_owned()), bits(&want.advantages));
                assert!(wide.iter().skip(1).step_by(2).all(|x| x.is_nan()));
            }
        }
    }

    /// The errors of the two passes, in their order: an invalid mask entry (before a value
    /// that overflows `f32`), the overflow, a wrong output shape; a non-finite value on a row
    /// without tokens is never written, so no error.
    #[test]
    fn errors_are_those_of_two_passes() {
        let (batch, steps, parents, mut mask) = layout();
        // Undiscounted: each row's value is its own reward.
        let c = crate::estimator::StepReinforceConfig::default().with_step_discount(0.0);
        let est = EstimatorConfig::StepReinforce(c).build().unwrap();
        let mut ws = Workspace::default();
        let run = |steps: &[f64], mask: &Array2<i64>, dim: (usize, usize), ws: &mut Workspace| {
            let input = EstimatorInput::new(&batch)
                .with_step_rewards(steps)
                .with_tree_parents(&parents)
                .with_response_mask(mask);
            let mut out = Array2::<f32>::zeros(dim);
            est.estimate_into(&input, (&mut out).into(), None, ws)
        };
        let mut huge = steps.clone();
        huge[7] = 1e300;
        assert!(matches!(
            run(&huge, &mask, (ROWS, COLS), &mut ws),
            Err(Error::NonFinite { index, .. }) if index / COLS == 7
        ));
        assert!(matches!(
            run(&steps, &mask, (ROWS, COLS + 1), &mut ws),
            Err(Error::OutputShape { .. })
        ));
        mask[[9, 30]] = 2;
        assert!(matches!(
            run(&huge, &mask, (ROWS, COLS), &mut ws),
            Err(Error::MaskValue {
                row: 9,
                token: 30,
                value: 2
            })
        ));
        mask[[9, 30]] = 0;
        // Row 5 has no token: its value overflows f32 but is not written.
        let mut quiet = steps.clone();
        quiet[5] = 1e300;
        quiet[13] = 1e300;
        assert!(run(&quiet, &mask, (ROWS, COLS), &mut ws).is_err());
        quiet[13] = steps[13];
        assert!(run(&quiet, &mask, (ROWS, COLS), &mut ws).is_ok());
    }
}
