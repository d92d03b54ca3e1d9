//! `token::row_sums_into`, the episode score of verl-agent rows and of every outcome
//! estimator: each row's sum is the plain left-to-right `Iterator::sum` over the values
//! widened to `f64`, bit for bit, whatever the kernel (the `f32` path adds two rows per SSE2
//! instruction, the `f64` path eight scalar chains), the shape (blocks of eight rows and a
//! remainder; chunks of four or eight tokens and a tail) or the layout (a strided view).

use beacon_rl::tensor::row_sums_into;
use ndarray::Array2;
use proptest::prelude::*;

/// Values whose sums change bits under any other order of additions: magnitudes from 1e-8
/// to 1e16 with both signs, and now and then -0.0, a subnormal, ±inf or NaN.
fn value() -> impl Strategy<Value = f32> {
    prop_oneof![
        8 => (-8i32..17, -1.0f32..1.0).prop_map(|(e, m)| m * 10f32.powi(e)),
        1 => prop::sample::select(vec![
            -0.0f32,
            f32::MIN_POSITIVE / 4.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::MAX,
        ]),
    ]
}

fn matrix() -> impl Strategy<Value = Array2<f32>> {
    (0usize..21, 0usize..38).prop_flat_map(|(rows, cols)| {
        prop::collection::vec(value(), rows * cols)
            .prop_map(move |v| Array2::from_shape_vec((rows, cols), v).expect("shape"))
    })
}

/// verl's layout, where a row is mostly +0.0 (its reward on one token): entries are ±0.0
/// but now and then a [`value`], and a row may open with a run of -0.0 (a sum that is -0.0
/// becomes +0.0 on adding +0.0: the one case where a zero changes a sum; one row in eight,
/// so that most blocks of eight rows have none).
fn sparse_matrix() -> impl Strategy<Value = Array2<f32>> {
    let entry = prop_oneof![60 => Just(0.0f32), 6 => Just(-0.0f32), 1 => value()];
    (0usize..21, 0usize..38).prop_flat_map(move |(rows, cols)| {
        (
            prop::collection::vec(entry.clone(), rows * cols),
            prop::collection::vec(prop_oneof![7 => Just(0usize), 1 => 0usize..=cols], rows),
        )
            .prop_map(move |(mut v, lead)| {
                for (r, &k) in lead.iter().enumerate() {
                    v[r * cols..r * cols + k].fill(-0.0);
                }
                Array2::from_shape_vec((rows, cols), v).expect("shape")
            })
    })
}

/// Same bits, or both NaN (which NaN an addition of two NaNs keeps is the hardware's choice
/// of operand, not an order of additions).
fn same(got: f64, want: f64) -> bool {
    got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan())
}

proptest! {
    #[test]
    fn row_sums_are_each_rows_left_to_right_sum(m in prop_oneof![matrix(), sparse_matrix()]) {
        let rows = m.nrows();
        let want: Vec<f64> = m.rows().into_iter().map(|r| r.iter().map(|&x| f64::from(x)).sum()).collect();
        let wide = m.mapv(f64::from);
        let column_major = m.t().as_standard_layout().into_owned();
        for (form, got) in [
            ("f32", { let mut s = vec![1.5; rows]; row_sums_into(&m, &mut s).unwrap(); s }),
            ("f64", { let mut s = vec![1.5; rows]; row_sums_into(&wide, &mut s).unwrap(); s }),
            ("strided f32", { let mut s = vec![1.5; rows]; row_sums_into(column_major.t(), &mut s).unwrap(); s }),
        ] {
            for (r, (&g, &w)) in got.iter().zip(&want).enumerate() {
                prop_assert!(same(g, w), "{form} row {r}: {g:e} ({:#x}), want {w:e} ({:#x})", g.to_bits(), w.to_bits());
            }
        }
    }
}
