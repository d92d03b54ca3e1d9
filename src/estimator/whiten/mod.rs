//! verl's batch whitening over masked tokens (`verl.utils.torch_functional.masked_whiten`);
//! the public description is the [estimator module's](super#batch-whitening).
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
//! # Order of the sums
//! Σx and Σ(x − μ)² run over every masked token of the batch, and their order of additions
//! is part of the result's bits. Each row's masked values are summed in [`SUM_LANES`] = 8
//! partial sums, partial j taking the tokens t ≡ j (mod 8) left to right from +0.0, combined
//! as ((p0 + p4) + (p2 + p6)) + ((p1 + p5) + (p3 + p7)); the row sums are added in row order
//! from +0.0 ([`row_sum`], [`row_sq`]). Eight independent chains (0.1 had one, latency-bound)
//! let the additions overlap and vectorize. torch's reductions are not left to right either,
//! so parity with verl is a tolerance (1e-5); within the crate the order is fixed, so the
//! bits do not depend on the output dtype, the mask form or the `rayon` feature. Results
//! differ from 0.1 in the last bits. The overflow fallback ([`MaskedSum::rescaled`]) sums
//! left to right.
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
//! When finite inputs overflow Σx or Σ(x − μ)², verl silently returns zeros or NaN; we
//! recompute μ and σ in units of the masked values' max |x| (only then, so every finite result
//! keeps verl's bits), which gives the exact whitened values. When a whitened value itself
//! is ±inf (or the rescaled statistics are not representable) we return
//! [`Error::NonFinite`].

mod rows;
mod sum;

pub(crate) use rows::{rows_of, rows_of_mut, whiten_rows, Lanes, RowSlabs};
pub(crate) use sum::FiniteAcc;
use sum::{repeated_sum, MaskedSum};

#[cfg(test)]
use super::kernel::Tokens;
use super::kernel::{masked_class_counts, select, Out, SUM_LANES};
use crate::error::{check_finite, Error, Result};
use crate::tensor::MaskView;

#[cfg(test)]
use ndarray::{Array2, ArrayView2};

/// Whitens `values` in place with one masked mean/variance over the whole batch (see the
/// module docs (`src/estimator/whiten/mod.rs`) for the equation and verl's float32 quirks).
///
/// Every position is transformed, including those outside the mask.
///
/// # Errors
/// [`Error::LengthMismatch`] when the shapes differ; [`Error::Undefined`] when fewer than two
/// tokens are masked (verl raises); [`Error::NonFinite`] when the statistics or a whitened
/// value overflow (index = row-major position).
#[cfg(test)]
pub(crate) fn masked_whiten(values: &mut Array2<f64>, mask: ArrayView2<'_, bool>) -> Result<()> {
    super::check_matrix_shape("response_mask", mask.dim(), values.dim())?;
    let mask = Tokens::mask(MaskView::Bool(mask), &mut Vec::new())?;
    let cols = values.ncols();
    match values.as_slice_mut() {
        Some(v) => whiten_in_place(v, mask.as_slice(), cols),
        None => {
            // Not in standard layout: whiten a row-major copy, then write it back.
            let mut tmp: Vec<f64> = values.iter().copied().collect();
            whiten_in_place(&mut tmp, mask.as_slice(), cols)?;
            for (x, y) in values.iter_mut().zip(tmp) {
                *x = y;
            }
            Ok(())
        }
    }
}

/// [`masked_whiten`] over row-major slices of equal length (checked by the callers), rows of
/// `cols` tokens.
#[cfg(test)]
pub(crate) fn whiten_in_place(values: &mut [f64], mask: &[bool], cols: usize) -> Result<()> {
    let mask: Vec<u8> = mask.iter().map(|&m| u8::from(m)).collect();
    let mask = &mask[..];
    let mut acc = MaskedSum::default();
    if cols > 0 {
        for (v, m) in values.chunks_exact(cols).zip(mask.chunks_exact(cols)) {
            acc.add_row(v, m);
        }
    }
    let (mean, scale) = acc.stats(values, mask, cols)?;
    apply_in_place(values, mean, scale)
}

/// `x ← (x − μ)·scale` at every position, then the overflow check (first non-finite
/// position).
pub(crate) fn apply_in_place(values: &mut [f64], mean: f64, scale: f64) -> Result<()> {
    let mut finite = FiniteAcc::default();
    for x in values.iter_mut() {
        *x = (*x - mean) * scale;
        finite.push(*x);
    }
    if finite.all() {
        Ok(())
    } else {
        check_finite("whitened values (overflow)", values)
    }
}

/// `dst = ((src − μ)·scale) · mask`: whitening `src` and re-masking it (verl's
/// `masked_whiten(x, mask) * mask`) in one pass that leaves `src` intact. Overflow is
/// reported at the first non-finite whitened value **before** re-masking, as whitening a
/// copy of `src` in place and then re-masking it does.
pub(crate) fn apply_remasked(src: &[f64], mask: &[u8], dst: &mut [f64], mean: f64, scale: f64) -> Result<()> {
    let n = src.len();
    let (mask, dst) = (&mask[..n], &mut dst[..n]);
    let mut finite = FiniteAcc::default();
    for t in 0..n {
        let y = (src[t] - mean) * scale;
        finite.push(y);
        dst[t] = select(mask[t] != 0, y);
    }
    if finite.all() {
        return Ok(());
    }
    match src.iter().position(|&x| !((x - mean) * scale).is_finite()) {
        Some(index) => Err(Error::NonFinite {
            what: "whitened values (overflow)",
            index,
            value: (src[index] - mean) * scale,
        }),
        None => Ok(()),
    }
}

/// verl's `masked_whiten(s.unsqueeze(-1) * mask, mask) * mask` for one scalar `s_r` per row
/// (GDPO, REINFORCE++-baseline), written as both advantages and returns.
///
/// The broadcast matrix is never materialized: the masked values of row r are `s_r` at every
/// generated token, so each partial sum of [`row_sum`] (and of [`row_sq`]) over that row is
/// `s_r` (or `(s_r − μ)²`) added once per generated token of its class t mod [`SUM_LANES`]:
/// exactly the additions over the broadcast matrix, in the same order. Unmasked positions
/// held +0.0 before whitening: their whitened value `(0 − μ)·scale` only matters for the
/// overflow check, which reports the first non-finite position in row-major order.
pub(crate) fn whiten_outcome(
    out: &mut Out<'_>,
    scalars: &[f64],
    mask: &MaskView<'_>,
    counts: &mut Vec<usize>,
    whitened: &mut Vec<f64>,
) -> Result<()> {
    masked_class_counts(mask, counts)?;
    let classes = || counts.chunks_exact(SUM_LANES);
    let mut acc = MaskedSum::default();
    for (&s, c) in scalars.iter().zip(classes()) {
        acc.add_repeated(s, c);
    }
    let (mean, denom) = acc.mean()?;
    let mut sq = 0.0f64;
    for (&s, c) in scalars.iter().zip(classes()) {
        let d = s - mean;
        sq += repeated_sum(d * d, c);
    }
    let row_count = |c: &[usize]| c.iter().sum::<usize>();
    let (mean, scale) = match acc.scale(mean, denom, sq) {
        Ok(scale) => (mean, scale),
        Err(_) => acc.rescaled(scalars.iter().copied().zip(classes().map(row_count)), denom)?,
    };
    whitened.clear();
    whitened.extend(scalars.iter().map(|&s| (s - mean) * scale));
    let cols = mask.dim().1;
    let unmasked_overflow = !((0.0 - mean) * scale).is_finite() && classes().any(|c| row_count(c) < cols);
    let masked_overflow = whitened
        .iter()
        .zip(classes())
        .any(|(y, c)| row_count(c) > 0 && !y.is_finite());
    if unmasked_overflow || masked_overflow {
        for (r, &s) in scalars.iter().enumerate() {
            for t in 0..cols {
                let x = select(mask.is_set(r, t), s);
                let y = (x - mean) * scale;
                if !y.is_finite() {
                    return Err(Error::NonFinite {
                        what: "whitened values (overflow)",
                        index: r * cols + t,
                        value: y,
                    });
                }
            }
        }
    }
    out.outcome(whitened, mask)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    #[test]
    fn hand_computed_example() {
        let mut x = array![[1.0, 2.0, 3.0, 100.0]];
        let mask = array![[true, true, true, false]];
        masked_whiten(&mut x, mask.view()).unwrap();
        // mean 2, unbiased variance 1 over the three masked tokens.
        let s = 1.0 / (1.0f64 + 1e-8).sqrt();
        assert!((x[[0, 0]] + s).abs() < 1e-12);
        assert!(x[[0, 1]].abs() < 1e-12);
        assert!((x[[0, 3]] - 98.0 * s).abs() < 1e-9); // unmasked: shifted and scaled too
    }

    proptest::proptest! {
        /// masked_whiten on values whose raw unbiased variance s² is computed here: the
        /// whitened masked values have variance s²/(s² + 1e-8), up to verl's float32 token
        /// count and Bessel factor (relative 1e-6). (Moved from tests/it/properties_baselines.rs
        /// when `whiten` became crate-private.)
        #[test]
        fn masked_whiten_follows_its_variance_law(
            x in proptest::collection::vec(-1.0..1.0f64, 2..40),
            scale in proptest::prop_oneof![
                proptest::strategy::Just(1e-5),
                proptest::strategy::Just(1e-3),
                proptest::strategy::Just(1.0),
                proptest::strategy::Just(1e3)
            ],
        ) {
            let n = x.len();
            let raw: Vec<f64> = x.iter().map(|v| v * scale).collect();
            let mean = raw.iter().sum::<f64>() / n as f64;
            let s2 = raw.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (n - 1) as f64;
            let mut m = Array2::from_shape_vec((1, n), raw).unwrap();
            let mask = Array2::from_elem((1, n), true);
            masked_whiten(&mut m, mask.view()).unwrap();
            let w_mean = m.iter().sum::<f64>() / n as f64;
            let w_var = m.iter().map(|v| (v - w_mean) * (v - w_mean)).sum::<f64>() / (n - 1) as f64;
            let expected = s2 / (s2 + 1e-8);
            proptest::prop_assert!((w_var - expected).abs() <= 1e-6 * expected.max(1e-12) + 1e-12,
                "n {}: var {} vs s2/(s2+1e-8) = {}", n, w_var, expected);
        }
    }

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
    fn overflowing_variance_is_rescaled_not_zeroed() {
        // ±1e200: Σ(x − μ)² = 2e400 overflows, and verl would scale everything to 0. In units
        // of s = 1e200: μ_s = 0, Σd² = 2, σ²_s = 2/f32(2 + 1e-8) · f32(2/1) = 2, so the
        // whitened values are ±1/√2 (to the 1e-8/s² term, which underflows to 0).
        let mut x = array![[1e200, -1e200]];
        masked_whiten(&mut x, array![[true, true]].view()).unwrap();
        let h = std::f64::consts::FRAC_1_SQRT_2;
        assert!(
            (x[[0, 0]] - h).abs() < 1e-15 && (x[[0, 1]] + h).abs() < 1e-15,
            "{x}"
        );
        // A whitened value that is itself beyond f64::MAX is still an error: μ = 1.7e308/3,
        // and −1.7e308 − μ overflows before scaling.
        let mut x = array![[1.7e308, 1.7e308, -1.7e308]];
        assert!(matches!(
            masked_whiten(&mut x, array![[true, true, true]].view()),
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
