//! The metrics that need no shared-pair index (ZAR and CCR), and [`row_advantages`], an
//! estimator's token output reduced to one advantage per row.

use ndarray::ArrayView2;

use super::report::CcrReport;
use super::report::ZarReport;
use crate::error::Error;
use crate::error::Result;
use crate::tensor::MaskView;

/// One advantage per row from an estimator's rows × L output: the value on the row's first
/// masked token when `response_mask` is given (0 for a row with no masked token: it receives
/// no gradient), else column 0. See [`Diagnostics::compare_estimators`](super::Diagnostics::compare_estimators) for why the first
/// masked token is the row's advantage for step-level and outcome estimators.
///
/// # Errors
/// [`Error::OutputShape`](crate::Error::OutputShape) when the output's shape is not the mask's
/// or, without a mask, the output has no column; then
/// [`Error::MaskValue`](crate::Error::MaskValue) for an integer mask entry other than 0 and 1,
/// [`Error::InvalidMask`](crate::Error::InvalidMask) for a response length past L.
pub(crate) fn row_advantages(
    adv: ArrayView2<'_, f64>,
    response_mask: Option<MaskView<'_>>,
) -> Result<Vec<f64>> {
    // Exactly the mask's shape: a mask without columns marks no token, so every row is 0
    // (what an estimator returns for L = 0 is then accepted, and a column the mask does not
    // cover is not). Without a mask, column 0 is read, so there must be one.
    let expected = response_mask.map_or((adv.nrows(), adv.ncols().max(1)), |m| m.dim());
    if adv.dim() != expected {
        return Err(Error::OutputShape {
            what: "advantages",
            expected,
            actual: adv.dim(),
        });
    }
    let Some(mask) = response_mask else {
        return Ok(adv.column(0).to_vec());
    };
    // As every reader of a mask: entries other than 0 and 1, and lengths past L, are errors,
    // never read as "generated" (one pass over the mask; diagnostics are off the hot path).
    mask.validate()?;
    Ok(adv
        .outer_iter()
        .enumerate()
        .map(|(r, a)| {
            a.iter()
                .enumerate()
                .find(|&(t, _)| mask.is_set(r, t))
                .map_or(0.0, |(_, &a)| a)
        })
        .collect())
}

/// The advantage with the zero convention applied: |A| < τ becomes 0.
#[inline]
pub(super) fn effective(a: f64, tau: f64) -> f64 {
    if a.abs() < tau {
        0.0
    } else {
        a
    }
}

/// `num / den`, or `None` when `den` is 0.
#[inline]
pub(super) fn ratio(num: f64, den: f64) -> Option<f64> {
    (den > 0.0).then(|| num / den)
}

pub(super) fn zar_unchecked(advantages: &[f64], tau: f64) -> ZarReport {
    let zero_steps = advantages.iter().filter(|a| a.abs() < tau).count();
    ZarReport {
        zero_steps,
        steps: advantages.len(),
        threshold: tau,
        value: zero_steps as f64 / advantages.len() as f64,
    }
}

/// `Ok(v)` for a finite `v`, else [`Error::NonFinite`](crate::Error::NonFinite) naming `what` (a sum or ratio of the
/// report, index 0).
pub(super) fn finite(what: &'static str, v: f64) -> Result<f64> {
    if v.is_finite() {
        Ok(v)
    } else {
        Err(Error::NonFinite {
            what,
            index: 0,
            value: v,
        })
    }
}

pub(super) fn ccr_unchecked(advantages: &[f64], milestones: &[bool], tau: f64) -> Result<CcrReport> {
    let mut r = CcrReport::default();
    for (&a, &m) in advantages.iter().zip(milestones) {
        let mag = effective(a, tau).abs();
        if m {
            r.milestone_steps += 1;
            r.milestone_abs_sum += mag;
        } else {
            r.non_milestone_steps += 1;
            r.non_milestone_abs_sum += mag;
        }
    }
    r.milestone_mean = ratio(r.milestone_abs_sum, r.milestone_steps as f64);
    r.non_milestone_mean = ratio(r.non_milestone_abs_sum, r.non_milestone_steps as f64);
    r.value = match (r.milestone_mean, r.non_milestone_mean) {
        (Some(num), Some(den)) => ratio(num, den),
        _ => None,
    };
    // As for EGR: overflowing sums, or a ratio beyond f64::MAX (a huge milestone mean over a
    // tiny other mean), are errors rather than ∞ in the report.
    finite("CCR milestone Σ|A| (overflows)", r.milestone_abs_sum)?;
    finite("CCR non-milestone Σ|A| (overflows)", r.non_milestone_abs_sum)?;
    finite("CCR ratio (overflows)", r.value.unwrap_or(0.0))?;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{array, Array2};

    #[test]
    fn effective_and_ratio_helpers() {
        assert_eq!(effective(5e-7, 1e-6), 0.0);
        assert_eq!(effective(-1e-6, 1e-6), -1e-6); // |A| = τ is not below τ
        assert_eq!(ratio(1.0, 0.0), None);
        assert_eq!(ratio(1.0, 4.0), Some(0.25));
    }

    #[test]
    fn row_advantages_rules() {
        let adv = array![[0.0, 2.0, 3.0], [5.0, 0.0, 0.0]];
        let out = adv.view();
        // Row 0: first masked token is column 2 (3.0). Row 1: no masked token -> 0.
        let mask = array![[false, false, true], [false, false, false]];
        assert_eq!(row_advantages(out, Some((&mask).into())).unwrap(), [3.0, 0.0]);
        assert_eq!(row_advantages(out, None).unwrap(), [0.0, 5.0]);
        // Shapes must agree with the mask, and there must be a column.
        let narrow = array![[true, true], [true, true]];
        assert_eq!(
            row_advantages(out, Some((&narrow).into())),
            Err(Error::OutputShape {
                what: "advantages",
                expected: (2, 2),
                actual: (2, 3)
            })
        );
        let tall = Array2::from_elem((3, 3), true);
        assert_eq!(
            row_advantages(out, Some((&tall).into())),
            Err(Error::OutputShape {
                what: "advantages",
                expected: (3, 3),
                actual: (2, 3)
            })
        );
        let empty = Array2::<f64>::zeros((2, 0));
        assert_eq!(
            row_advantages(empty.view(), None),
            Err(Error::OutputShape {
                what: "advantages",
                expected: (2, 1),
                actual: (2, 0)
            })
        );
        // A mask without columns marks no token: an output of its shape (rows × 0) is every row
        // 0, an output with a column it does not cover is misshapen. (The old code took the
        // mask's width as at least 1, so it refused the first and read zeros from the second.)
        let no_tokens = Array2::from_elem((2, 0), false);
        assert_eq!(
            row_advantages(empty.view(), Some((&no_tokens).into())),
            Ok(vec![0.0, 0.0])
        );
        let one = Array2::<f64>::zeros((2, 1));
        assert_eq!(
            row_advantages(one.view(), Some((&no_tokens).into())),
            Err(Error::OutputShape {
                what: "advantages",
                expected: (2, 0),
                actual: (2, 1)
            })
        );
        // The mask is checked as the estimators check it: an integer entry other than 0 and 1,
        // or a length past L, is an error (it was read as "generated", and a length clipped).
        let two = array![[0i64, 0, 2], [0, 0, 0]];
        assert_eq!(
            row_advantages(out, Some((&two).into())),
            Err(Error::MaskValue {
                row: 0,
                token: 2,
                value: 2
            })
        );
        let long = MaskView::Lengths {
            lengths: &[0, 4],
            cols: 3,
        };
        assert_eq!(
            row_advantages(out, Some(long)),
            Err(Error::InvalidMask {
                row: 1,
                length: 4,
                cols: 3
            })
        );
    }
}
