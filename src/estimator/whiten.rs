//! verl's batch whitening over masked tokens (`verl.utils.torch_functional.masked_whiten`).
//!
//! One mean and one variance over **all** masked tokens of the batch (not per row, not per
//! group), then every position (masked or not) is shifted and scaled:
//!
//! ```text
//! n    = Σ mask
//! μ    = Σ_{mask} x / (n + 1e-8)
//! σ²   = Σ_{mask} (x − μ)² / (n + 1e-8) · n / (n − 1)        (unbiased)
//! x'   = (x − μ) · 1 / √(σ² + 1e-8)
//! ```
//!
//! Used by GAE, REINFORCE++, REINFORCE++-baseline and GDPO.
//!
//! # Peer behaviour reproduced
//! - verl's masks are int64 tensors, so `n + 1e-8` and the Bessel factor `n / (n − 1)` are
//!   computed in **float32** even when the values are float64: `n + 1e-8` rounds to `f32(n)`
//!   (exactly `n` below 2²⁴) and the factor is `f32(n) / f32(n − 1)` rounded to float32
//!   (e.g. 5/4 = 1.25 exactly, 4/3 = 1.3333334326744 instead of 1.3333333333333).
//! - verl raises `ValueError` when the mask holds 0 or 1 valid tokens; we return
//!   [`Error::Undefined`].
//! - Positions outside the mask are transformed too (GAE keeps them; other callers re-mask).
//!
//! # Deliberate difference
//! When finite inputs overflow (σ² = inf, or a whitened value = ±inf), verl silently returns
//! zeros or infinities; we return [`Error::NonFinite`].

use ndarray::{Array2, ArrayView2};

use super::Tokens;
use crate::error::{Error, Result};

/// Whitens `values` in place with one masked mean/variance over the whole batch (see the
/// [module docs](self) for the equation and verl's float32 quirks).
///
/// Every position is transformed, including those outside the mask.
///
/// # Errors
/// [`Error::LengthMismatch`] when the shapes differ; [`Error::Undefined`] when fewer than two
/// tokens are masked (verl raises); [`Error::NonFinite`] when the statistics or a whitened
/// value overflow (index = row-major position).
///
/// ```
/// use beacon_rl::estimator::whiten::masked_whiten;
/// use ndarray::array;
///
/// let mut x = array![[1.0, 2.0, 3.0, 100.0]];
/// let mask = array![[true, true, true, false]];
/// masked_whiten(&mut x, mask.view())?;
/// // mean 2, unbiased variance 1 over the three masked tokens.
/// let s = 1.0 / (1.0f64 + 1e-8).sqrt();
/// assert!((x[[0, 0]] + s).abs() < 1e-12);
/// assert!(x[[0, 1]].abs() < 1e-12);
/// assert!((x[[0, 3]] - 98.0 * s).abs() < 1e-9); // unmasked: shifted and scaled too
/// # Ok::<(), beacon_rl::Error>(())
/// ```
pub fn masked_whiten(values: &mut Array2<f64>, mask: ArrayView2<'_, bool>) -> Result<()> {
    super::check_matrix_shape("response_mask", mask, values.dim())?;
    let mask = Tokens::new(mask);
    match values.as_slice_mut() {
        Some(v) => whiten_in_place(v, mask.as_slice()),
        None => {
            // Not in standard layout: whiten a row-major copy, then write it back.
            let mut tmp: Vec<f64> = values.iter().copied().collect();
            whiten_in_place(&mut tmp, mask.as_slice())?;
            for (x, y) in values.iter_mut().zip(tmp) {
                *x = y;
            }
            Ok(())
        }
    }
}

/// [`masked_whiten`] over row-major slices of equal length (checked by the callers).
pub(crate) fn whiten_in_place(values: &mut [f64], mask: &[bool]) -> Result<()> {
    let mut n: u64 = 0;
    let mut sum = 0.0f64;
    for (&x, &m) in values.iter().zip(mask) {
        if m {
            n += 1;
            sum += x;
        }
    }
    if n < 2 {
        return Err(Error::Undefined(format!(
            "masked_whiten needs at least 2 valid tokens in the batch, found {n} (verl raises ValueError)"
        )));
    }
    // int64 mask sum + 1e-8 is a float32 tensor in torch (peer behaviour reproduced).
    let denom = f64::from(n as f32 + 1e-8f32);
    let mean = sum / denom;
    let mut sq = 0.0f64;
    for (&x, &m) in values.iter().zip(mask) {
        if m {
            let d = x - mean;
            sq += d * d;
        }
    }
    // int64 / int64 true division is float32 in torch (peer behaviour reproduced).
    let bessel = f64::from(n as f32 / (n - 1) as f32);
    let var = sq / denom * bessel;
    if !mean.is_finite() || !var.is_finite() {
        return Err(Error::NonFinite {
            what: "masked_whiten statistics (overflow)",
            index: 0,
            value: if mean.is_finite() { var } else { mean },
        });
    }
    let scale = 1.0 / (var + 1e-8).sqrt();
    let mut all_finite = true;
    for x in values.iter_mut() {
        *x = (*x - mean) * scale;
        all_finite &= x.is_finite();
    }
    if all_finite {
        return Ok(());
    }
    match values.iter().position(|x| !x.is_finite()) {
        Some(index) => Err(Error::NonFinite {
            what: "whitened values (overflow)",
            index,
            value: values[index],
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    #[test]
    fn bessel_factor_is_float32() {
        // Three masked tokens 0, 0, 3: mean 1, Σ(x−μ)² = 1 + 1 + 4 = 6, biased var 2,
        // Bessel f32(3/2) = 1.5 exactly -> var 3.
        let mut x = array![[0.0, 0.0, 3.0]];
        let mask = array![[true, true, true]];
        masked_whiten(&mut x, mask.view()).unwrap();
        let s = 1.0 / (3.0f64 + 1e-8).sqrt();
        assert!((x[[0, 2]] - 2.0 * s).abs() < 1e-15);

        // Four tokens 0, 0, 0, 4: mean 1, Σ(x−μ)² = 3 + 9 = 12, biased var 3,
        // Bessel f32(4/3) = 1.33333337306976... (not 1.3333333333), var = 4.0000001192...
        let mut y = array![[0.0, 0.0, 0.0, 4.0]];
        let mask4 = array![[true, true, true, true]];
        masked_whiten(&mut y, mask4.view()).unwrap();
        let var = 3.0 * f64::from(4.0f32 / 3.0f32);
        assert!((var - 4.000_000_119_209_29).abs() < 1e-12);
        let expect = 3.0 / (var + 1e-8).sqrt();
        assert_eq!(y[[0, 3]], expect);
    }

    #[test]
    fn fewer_than_two_tokens_is_undefined() {
        let mut x = array![[1.0, 2.0]];
        assert!(matches!(
            masked_whiten(&mut x, array![[false, true]].view()),
            Err(Error::Undefined(_))
        ));
        assert!(matches!(
            masked_whiten(&mut x, array![[false, false]].view()),
            Err(Error::Undefined(_))
        ));
        assert!(matches!(
            masked_whiten(&mut x, array![[true]].view()),
            Err(Error::LengthMismatch { .. })
        ));
    }

    #[test]
    fn overflow_is_reported_not_zeroed() {
        // Variance of ±1e200 overflows to inf: verl would scale everything to 0.
        let mut x = array![[1e200, -1e200]];
        assert!(matches!(
            masked_whiten(&mut x, array![[true, true]].view()),
            Err(Error::NonFinite { .. })
        ));
    }

    #[test]
    fn column_major_values_match_row_major() {
        let x = array![[1.0, 2.0, 7.0], [4.0, -1.0, 0.5]];
        let mask = array![[true, false, true], [true, true, false]];
        let mut row_major = x.clone();
        masked_whiten(&mut row_major, mask.view()).unwrap();
        let mut col_major = x.t().as_standard_layout().into_owned().reversed_axes();
        assert!(col_major.as_slice().is_none());
        masked_whiten(&mut col_major, mask.t().as_standard_layout().t()).unwrap();
        assert_eq!(row_major, col_major);
    }

    #[test]
    fn statistics_span_rows() {
        // One token per row: mean over rows, not per row. Values 1 and 3: mean 2, var 2.
        let mut x = array![[1.0, 9.0], [3.0, 9.0]];
        let mask = array![[true, false], [true, false]];
        masked_whiten(&mut x, mask.view()).unwrap();
        let s = 1.0 / (2.0f64 + 1e-8).sqrt();
        assert!((x[[0, 0]] + s).abs() < 1e-15);
        assert!((x[[1, 0]] - s).abs() < 1e-15);
        assert!((x[[0, 1]] - 7.0 * s).abs() < 1e-12);
    }
}
