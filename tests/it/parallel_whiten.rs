//! The `rayon` feature's whitening token scans, GAE and REINFORCE++ (`cargo test --features
//! rayon --test it parallel_`): the scan, the per-row sums and the whitened writes run in
//! chunks of rows on the pool, and every value (advantages and returns, `f32` and `f64`) must
//! have the bits of the serial path, as must the error a bad row gives. A 1-thread pool takes
//! one chunk; 2-, 3- and 4-thread pools split the 3,000 rows × 64 tokens (above the split
//! threshold of 2 × 65,536 tokens) at boundaries that are not multiples of the scans' blocks
//! of rows.
#![cfg(feature = "rayon")]

use crate::common::SplitMix64;
use beacon_rl::estimator::{AdvantageEstimator, EstimatorConfig, EstimatorInput, Workspace};
use beacon_rl::tensor::MaskView;
use beacon_rl::{Error, RolloutBatch};
use ndarray::Array2;

use crate::common::pool;

const ROWS: usize = 3000;
const COLS: usize = 64;

type Bits = (Vec<u32>, Vec<u32>, Vec<u64>, Vec<u64>);

/// Advantages and returns of `name` in a pool of `threads`, as bits (`f32`, then `f64`), or
/// the error (the same for both output types).
fn run(threads: usize, name: &str, input: &EstimatorInput<'_>) -> Result<Bits, Error> {
    let est = name
        .parse::<EstimatorConfig>()
        .expect("name")
        .build()
        .expect("build");
    pool(threads).install(|| {
        let mut ws = Workspace::default();
        let (mut a32, mut r32) = (
            Array2::<f32>::from_elem((ROWS, COLS), f32::NAN),
            Array2::<f32>::from_elem((ROWS, COLS), f32::NAN),
        );
        let (mut a64, mut r64) = (
            Array2::<f64>::from_elem((ROWS, COLS), f64::NAN),
            Array2::<f64>::from_elem((ROWS, COLS), f64::NAN),
        );
        let e32 = est.estimate_into(input, (&mut a32).into(), Some((&mut r32).into()), &mut ws);
        let e64 = est.estimate_into(input, (&mut a64).into(), Some((&mut r64).into()), &mut ws);
        assert_eq!(e32, e64, "{name}: the error does not depend on the output type");
        e64?;
        let bits32 = |a: &Array2<f32>| a.iter().map(|x| x.to_bits()).collect();
        let bits64 = |a: &Array2<f64>| a.iter().map(|x| x.to_bits()).collect();
        Ok((bits32(&a32), bits32(&r32), bits64(&a64), bits64(&r64)))
    })
}

struct Data {
    lengths: Vec<usize>,
    mask: Array2<i64>,
    rewards: Array2<f32>,
    values: Array2<f32>,
    batch: RolloutBatch,
}

fn data(seed: u64) -> Data {
    let mut rng = SplitMix64::new(seed);
    let lengths: Vec<usize> = (0..ROWS)
        .map(|_| (rng.next_u64() as usize) % (COLS + 1))
        .collect();
    // Ragged prefix masks with one interior gap per row (a multi-turn row), rewards and
    // values anywhere: the sums vary from row to row, so any change in the order the row
    // sums are added changes the statistics' last bits.
    let mask = Array2::from_shape_fn((ROWS, COLS), |(r, t)| i64::from(t < lengths[r] && t != 3));
    let rewards = Array2::from_shape_fn((ROWS, COLS), |_| (rng.next_f64() * 3.0 - 1.0) as f32);
    let values = Array2::from_shape_fn((ROWS, COLS), |_| (rng.next_f64() - 0.5) as f32);
    let batch = RolloutBatch::from_group_keys(&vec![0; ROWS], &vec![0.0; ROWS]).expect("batch");
    Data {
        lengths,
        mask,
        rewards,
        values,
        batch,
    }
}

#[test]
fn whitening_scans_give_the_serial_bits_on_any_pool() {
    let d = data(11);
    let mask_u8 = d.mask.mapv(|m| m as u8);
    let mask_bool = d.mask.mapv(|m| m != 0);
    let masks = [
        MaskView::from(&d.mask),
        MaskView::from(&mask_u8),
        MaskView::from(&mask_bool),
        MaskView::Lengths {
            lengths: &d.lengths,
            cols: COLS,
        },
    ];
    for mask in masks {
        let input = EstimatorInput::new(&d.batch)
            .with_token_level_rewards(&d.rewards)
            .with_values(&d.values)
            .with_response_mask(mask);
        for name in ["gae", "reinforce_plus_plus"] {
            let serial = run(1, name, &input).expect("serial");
            assert!(
                serial.2.iter().any(|&b| f64::from_bits(b) != 0.0),
                "{name}: all zero"
            );
            for threads in [2, 3, 4] {
                assert!(
                    run(threads, name, &input).as_ref() == Ok(&serial),
                    "{name} {threads} threads {mask:?}"
                );
            }
        }
    }
}

#[test]
fn a_bad_row_in_a_later_chunk_gives_the_serial_error() {
    let d = data(12);
    // A non-finite value near the end (in the last chunk of any split), and, separately, an
    // integer mask entry of 2 there: the error names the same field and position as the
    // serial path's.
    let mut values = d.values.clone();
    values[[ROWS - 5, 7]] = f32::INFINITY;
    let mut mask = d.mask.clone();
    mask[[ROWS - 2, 1]] = 2;
    let with = |values: &Array2<f32>, mask: &Array2<i64>, name: &str, threads: usize| {
        let input = EstimatorInput::new(&d.batch)
            .with_token_level_rewards(&d.rewards)
            .with_values(values)
            .with_response_mask(mask);
        run(threads, name, &input).map(|_| ())
    };
    for name in ["gae", "reinforce_plus_plus"] {
        let bad_mask = with(&d.values, &mask, name, 1);
        assert!(
            matches!(bad_mask, Err(Error::MaskValue { .. })),
            "{name}: {bad_mask:?}"
        );
        for threads in [2, 4] {
            assert_eq!(
                with(&d.values, &mask, name, threads),
                bad_mask,
                "{name} {threads}"
            );
        }
    }
    // REINFORCE++ does not read values; GAE reports the non-finite value.
    let bad_value = with(&values, &d.mask, "gae", 1);
    assert!(
        matches!(bad_value, Err(Error::NonFinite { what: "values", .. })),
        "{bad_value:?}"
    );
    for threads in [2, 4] {
        assert_eq!(with(&values, &d.mask, "gae", threads), bad_value, "{threads}");
    }
}
