//! The masked writer that the token broadcast and the outcome estimators share
//! (`out[r, t] = value[r]` where the mask is 1, `+0.0` where it is 0), on rows wide enough
//! that its chunks of eight tokens and its tail both run: every position is tested for 0/1,
//! and the written bits are the plain select's (a value's sign and subnormals kept, `+0.0`
//! off the mask).

use crate::common::SplitMix64;
use beacon_rl::estimator::{AdvantageEstimator, EstimatorConfig, EstimatorInput, Workspace};
use beacon_rl::tensor::{broadcast_into, MaskView};
use beacon_rl::{Error, RolloutBatch};
use ndarray::Array2;

/// Two chunks of eight and a tail of five.
const COLS: usize = 21;

/// A bad entry at any token of a row (chunk or tail, at any lane) is reported at that very
/// (row, token), through the broadcast into both output dtypes and through an outcome
/// estimator, for `i64` and `u8` masks.
#[test]
fn every_position_of_a_wide_row_is_tested_for_0_and_1() {
    let rows = 3;
    let values = [0.5, -1.5, 2.0];
    let batch = RolloutBatch::from_group_keys(&[0, 0, 0], &[0.0; 3]).unwrap();
    let rewards = Array2::from_shape_fn((rows, COLS), |(r, t)| (r * COLS + t) as f64 * 0.25);
    let grpo = "grpo".parse::<EstimatorConfig>().unwrap().build().unwrap();
    for token in 0..COLS {
        for (bad_i64, bad_u8) in [(2i64, 2u8), (-1, 255), (i64::MIN + 1, 3)] {
            // A prefix mask with the bad entry in row 1.
            let mut mask = Array2::from_shape_fn((rows, COLS), |(r, t)| i64::from(t < 7 + 5 * r));
            mask[[1, token]] = bad_i64;
            let mask_u8 = mask.mapv(|m| if m == bad_i64 { bad_u8 } else { m as u8 });
            let cases = [
                (MaskView::from(&mask), bad_i64),
                (MaskView::from(&mask_u8), i64::from(bad_u8)),
            ];
            for (view, value) in cases {
                let want = Error::MaskValue { row: 1, token, value };
                let mut out32 = Array2::<f32>::zeros((rows, COLS));
                let mut out64 = Array2::<f64>::zeros((rows, COLS));
                assert_eq!(broadcast_into(&values, view, &mut out32), Err(want.clone()));
                assert_eq!(broadcast_into(&values, view, &mut out64), Err(want.clone()));
                let input = EstimatorInput::new(&batch)
                    .with_token_level_rewards(&rewards)
                    .with_response_mask(view);
                let got = grpo.estimate_into(&input, (&mut out32).into(), None, &mut Workspace::default());
                assert_eq!(got, Err(want), "grpo, token {token}, {view:?}");
            }
        }
    }
}

/// Random 0/1 masks in every form over wide rows: each output element has the bits of
/// `if m { v } else { +0.0 }`, computed here element by element, for values of either sign,
/// `-0.0` and subnormals, into `f32` and `f64`.
#[test]
fn wide_rows_get_the_value_or_positive_zero_bit_for_bit() {
    let mut rng = SplitMix64::new(7);
    let rows = 16;
    let specials = [-0.0, 0.0, f64::MIN_POSITIVE / 4.0, -1e-310, 1e-40, -3.25];
    let values: Vec<f64> = (0..rows)
        .map(|r| match specials.get(r) {
            Some(&v) => v,
            None => rng.next_f64() * 8.0 - 4.0,
        })
        .collect();
    let on = Array2::from_shape_fn((rows, COLS), |_| rng.next_u64() % 3 != 0);
    let as_u8 = on.mapv(u8::from);
    let as_i64 = on.mapv(i64::from);
    let want64 = Array2::from_shape_fn((rows, COLS), |(r, t)| if on[[r, t]] { values[r] } else { 0.0 });
    let want32 = want64.mapv(|v| v as f32);
    for view in [
        MaskView::from(&on),
        MaskView::from(&as_u8),
        MaskView::from(&as_i64),
    ] {
        let mut out32 = Array2::<f32>::from_elem((rows, COLS), f32::NAN);
        let mut out64 = Array2::<f64>::from_elem((rows, COLS), f64::NAN);
        broadcast_into(&values, view, &mut out32).unwrap();
        broadcast_into(&values, view, &mut out64).unwrap();
        let bits32 = |a: &Array2<f32>| a.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let bits64 = |a: &Array2<f64>| a.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits32(&out32), bits32(&want32), "{view:?}");
        assert_eq!(bits64(&out64), bits64(&want64), "{view:?}");
    }
}

/// Outputs of 4 MiB or more are written with streaming stores (`src/stream.rs`): the same
/// bits as the element-by-element select. Rows of 517 tokens (2,068 bytes in `f32`) start at
/// every 4-byte offset modulo 16, so aligned chunks stream and the others take plain stores.
/// A bad entry deep in the output is still reported.
#[test]
fn large_outputs_are_streamed_with_the_same_bits() {
    let (rows, cols) = (2_100, 517);
    assert!(rows * cols * 4 >= 4 << 20, "large enough to stream");
    let mut rng = SplitMix64::new(11);
    let values: Vec<f64> = (0..rows).map(|_| rng.next_f64() * 2.0 - 1.0).collect();
    let mask = Array2::from_shape_fn((rows, cols), |_| i64::from(rng.next_u64() % 4 != 0));
    let mut out32 = Array2::<f32>::from_elem((rows, cols), f32::NAN);
    let mut out64 = Array2::<f64>::from_elem((rows, cols), f64::NAN);
    broadcast_into(&values, &mask, &mut out32).unwrap();
    broadcast_into(&values, &mask, &mut out64).unwrap();
    for ((r, t), &m) in mask.indexed_iter() {
        let want = if m == 1 { values[r] } else { 0.0 };
        assert_eq!(out64[[r, t]].to_bits(), want.to_bits(), "f64 ({r}, {t})");
        assert_eq!(out32[[r, t]].to_bits(), (want as f32).to_bits(), "f32 ({r}, {t})");
    }
    let mut bad = mask;
    bad[[1_999, 300]] = 2;
    assert_eq!(
        broadcast_into(&values, &bad, &mut out32),
        Err(Error::MaskValue {
            row: 1_999,
            token: 300,
            value: 2
        })
    );
}

/// The same for a prefix mask given as per-row lengths: each row is `value` on its first n
/// tokens and `+0.0` after, streamed in chunks of 16 (the chunk that holds the boundary mixes
/// both), with rows starting at every 4-byte offset modulo 16 and lengths at 0, L, chunk
/// boundaries and anywhere between. A value of -0.0 keeps its sign on the prefix.
#[test]
fn large_prefix_outputs_are_streamed_with_the_same_bits() {
    let (rows, cols) = (2_100, 517);
    assert!(rows * cols * 4 >= 4 << 20, "large enough to stream");
    let mut rng = SplitMix64::new(12);
    let values: Vec<f64> = (0..rows)
        .map(|r| {
            if r % 7 == 0 {
                -0.0
            } else {
                rng.next_f64() * 2.0 - 1.0
            }
        })
        .collect();
    let lengths: Vec<usize> = (0..rows)
        .map(|r| match r % 5 {
            0 => 0,
            1 => cols,
            2 => 16 * (rng.next_u64() as usize % 32),
            _ => rng.next_u64() as usize % (cols + 1),
        })
        .collect();
    let mask = MaskView::Lengths {
        lengths: &lengths,
        cols,
    };
    let mut out32 = Array2::<f32>::from_elem((rows, cols), f32::NAN);
    let mut out64 = Array2::<f64>::from_elem((rows, cols), f64::NAN);
    broadcast_into(&values, mask, &mut out32).unwrap();
    broadcast_into(&values, mask, &mut out64).unwrap();
    for r in 0..rows {
        for t in 0..cols {
            let want = if t < lengths[r] { values[r] } else { 0.0 };
            assert_eq!(out64[[r, t]].to_bits(), want.to_bits(), "f64 ({r}, {t})");
            assert_eq!(out32[[r, t]].to_bits(), (want as f32).to_bits(), "f32 ({r}, {t})");
        }
    }
}
