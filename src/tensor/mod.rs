//! Views of the tensors a trainer holds: values in `f32` or `f64`, response masks as `bool`,
//! `u8` or `i64` matrices or as per-row response lengths, and outputs in `f32` or `f64`.
//!
//! The estimators and the token broadcast read these views where they lie; nothing converts a
//! whole input first. The element type is dispatched once per call, and the kernels run over
//! the caller's element type:
//!
//! - [`FloatView`]: a rows × L matrix of `f32` or `f64` values (rewards, critic values, …).
//! - [`MaskView`]: verl's `response_mask` (1 = a generated token, 0 = not) as `bool`, `u8` or
//!   `i64`, or [`MaskView::Lengths`]: row r's first `lengths[r]` tokens are generated (a
//!   prefix mask, the common case for single-turn responses), stored as one number per row.
//! - [`FloatViewMut`]: where `f32` or `f64` results are written.
//!
//! # Integer masks hold 0 and 1
//! verl multiplies by `response_mask`, so an entry of 2 would double a token's advantage
//! there, while a reader that takes "nonzero" as generated would not: any value other than 0
//! and 1 in a `u8` or `i64` mask is [`Error::MaskValue`](crate::Error::MaskValue) (row, token, value), from every
//! estimator and every token function of this module. The check costs no extra pass
//! where it matters: the estimators and the token broadcast test each entry in the loop that
//! first reads it (writes its token, or converts or counts the mask), and the other token
//! functions check the mask once up front ([`MaskView::validate`]).
//!
//! # Precision contract
//! `f32` inputs are widened to `f64` exactly (every `f32` is an `f64`), the estimator computes
//! in `f64` with the same operations in the same order as for `f64` inputs, and each result
//! is rounded once to the output type. So an `f32` run gives **the `f64` path's result on the
//! same (widened) values, rounded to `f32`** — not verl's float32 path, which rounds every
//! intermediate and differs from it by up to a few float32 ulps (more after whitening).
//!
//! ```
//! use beacon_rl::tensor::{FloatView, MaskView};
//! use ndarray::array;
//!
//! let rewards = array![[0.0f32, 1.0], [0.5, 0.0]];
//! let view = FloatView::from(rewards.view());
//! assert_eq!(view.dim(), (2, 2));
//!
//! let mask = array![[1i64, 1], [1, 0]];
//! let mask = MaskView::from(mask.view());
//! assert_eq!(mask.dim(), (2, 2));
//! let prefix = MaskView::Lengths { lengths: &[2, 1], cols: 2 }; // the same mask, as lengths
//! assert_eq!(prefix.dim(), (2, 2));
//! ```

mod elem;
mod float;
mod mask;
mod token;
mod write;

pub(crate) use elem::{unit_prefix_len, Float, MaskBits};
pub use float::{FloatView, FloatViewMut};
pub use mask::MaskView;
pub(crate) use token::check_broadcast_mask;
pub use token::{broadcast, broadcast_into, prefix_lengths_into, row_sums_into, spans_into, TokenSpan};
pub(crate) use write::{extend_masked, overflows_f32, write_masked};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use ndarray::array;
    use ndarray::Array2;
    use proptest::prelude::*;

    /// `overflows_f32` is its definition, "finite and rounds to an infinite f32", at the
    /// rounding threshold, around it, and on arbitrary bit patterns.
    #[test]
    fn overflows_f32_is_a_finite_value_rounding_to_infinity() {
        let definition = |v: f64| (v as f32).is_infinite() & v.is_finite();
        let t = 2f64.powi(128) - 2f64.powi(103);
        let edges = [
            t,
            t.next_down(),
            t.next_up(),
            f64::from(f32::MAX),
            2f64.powi(128),
            f64::MAX,
        ];
        for v in edges
            .into_iter()
            .flat_map(|v| [v, -v])
            .chain([0.0, f64::INFINITY, f64::NAN])
        {
            assert_eq!(overflows_f32(v), definition(v), "{v:e}");
        }
        assert!(overflows_f32(t) && !overflows_f32(t.next_down()));
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = f64::from_bits(x);
            assert_eq!(overflows_f32(v), definition(v), "{v:e}");
        }
    }

    /// The definition, token by token: every entry 0 or 1, and no 1 after a 0.
    fn naive_prefix_len(row: &[i64]) -> Option<usize> {
        let mut seen_zero = false;
        for &m in row {
            match m {
                0 => seen_zero = true,
                1 if !seen_zero => {}
                _ => return None,
            }
        }
        Some(row.iter().filter(|&&m| m == 1).count())
    }

    /// A prefix row of `len` tokens with `n` ones, and maybe one entry replaced: (position,
    /// value) with the position inside the row.
    fn prefix_rows() -> impl Strategy<Value = (usize, usize, Option<(usize, i64)>)> {
        (1usize..41).prop_flat_map(|len| {
            let values = prop::sample::select(vec![0i64, 1, 0, 1, 2, 255, -1, 1 << 40, i64::MIN]);
            (Just(len), 0..=len, prop::option::of((0..len, values)))
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]
        /// Prefix rows of every length up to 40 (chunks of eight and tails of every length),
        /// some with one entry replaced (a gap, a late 1, or a value that is not a mask
        /// value), in every dtype that can hold the replacement.
        #[test]
        fn unit_prefix_len_is_the_definition((len, n, hit) in prefix_rows()) {
            let mut row: Vec<i64> = (0..len).map(|t| i64::from(t < n)).collect();
            if let Some((at, value)) = hit {
                row[at] = value;
            }
            let want = naive_prefix_len(&row);
            prop_assert_eq!(unit_prefix_len(&row), want);
            if row.iter().all(|&m| (0..=255).contains(&m)) {
                let bytes: Vec<u8> = row.iter().map(|&m| m as u8).collect();
                prop_assert_eq!(unit_prefix_len(&bytes), want);
            }
            if row.iter().all(|&m| m == 0 || m == 1) {
                let flags: Vec<bool> = row.iter().map(|&m| m == 1).collect();
                prop_assert_eq!(unit_prefix_len(&flags), want);
            }
        }
    }

    #[test]
    fn every_mask_dtype_writes_the_same_tokens() {
        // Row 0 generated tokens 0 and 1, row 1 token 0 only (a prefix mask each).
        let want = array![[1.5f32, 1.5, 0.0], [-2.0, 0.0, 0.0]];
        let b = array![[true, true, false], [true, false, false]];
        let u = b.mapv(u8::from);
        let i = b.mapv(i64::from);
        let lengths = [2usize, 1];
        // Column-major storage: a strided view of the same mask.
        let col_major = b.t().as_standard_layout().into_owned();
        let masks = [
            MaskView::from(&b),
            MaskView::from(&u),
            MaskView::from(&i),
            MaskView::Lengths {
                lengths: &lengths,
                cols: 3,
            },
            MaskView::from(col_major.t()),
        ];
        for m in masks {
            let mut out = Array2::<f32>::from_elem((2, 3), f32::NAN);
            write_masked("out", &[1.5, -2.0], &m, &mut FloatViewMut::from(&mut out)).unwrap();
            assert_eq!(out, want, "{m:?}");
            assert_eq!((m.row_count(0), m.row_count(1)), (2, 1));
            let mut row = [true; 3];
            m.row_into(1, &mut row);
            assert_eq!(row, [true, false, false]);
        }
    }

    #[test]
    fn lengths_past_the_row_are_an_error() {
        let m = MaskView::Lengths {
            lengths: &[1, 4, 9],
            cols: 3,
        };
        assert_eq!(
            m.validate(),
            Err(Error::InvalidMask {
                row: 1,
                length: 4,
                cols: 3
            })
        );
    }

    #[test]
    fn value_error_names_the_first_invalid_entry() {
        // Row-major order: (0, 2) comes before (1, 0).
        let m = array![[1i64, 0, -3], [7, 1, 1]];
        assert_eq!(
            MaskView::from(&m).value_error(),
            Error::MaskValue {
                row: 0,
                token: 2,
                value: -3
            }
        );
    }

    /// A reader that claims a bad entry in a valid mask is a crate bug: debug builds stop,
    /// release builds return an error rather than panic.
    #[test]
    #[cfg_attr(debug_assertions, should_panic(expected = "does not hold"))]
    fn value_error_on_a_valid_mask_is_a_bug() {
        let m = array![[1u8, 0]];
        assert!(matches!(MaskView::from(&m).value_error(), Error::Undefined(_)));
    }

    #[test]
    fn f32_output_rounds_once() {
        // 0.1 is not an f32: the output is the nearest f32, 0.100000001490116…
        let m = array![[true]];
        let mut out = Array2::<f32>::zeros((1, 1));
        write_masked(
            "out",
            &[0.1],
            &MaskView::from(&m),
            &mut FloatViewMut::from(&mut out),
        )
        .unwrap();
        assert_eq!(out[[0, 0]], 0.1f32);
        assert_eq!(FloatView::from(&out).first_non_finite(), None);
        let bad = array![[0.0f32, f32::INFINITY]];
        assert_eq!(FloatView::from(&bad).first_non_finite(), Some((1, f64::INFINITY)));
    }
}
