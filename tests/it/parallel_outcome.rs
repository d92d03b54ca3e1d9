//! The `rayon` feature's outcome estimators (`cargo test --features rayon --test it
//! parallel_outcome`): the row sums and the masked writes run in chunks of rows on the pool,
//! and every value must have the bits of the serial path. A 1-thread pool takes the serial
//! path (one chunk); 2- and 4-thread pools split the rows (the batch holds 3,000 rows × 64
//! tokens, above the split threshold of 2 × 65,536 tokens).
#![cfg(feature = "rayon")]

use crate::common::SplitMix64;
use beacon_rl::estimator::{AdvantageEstimator, EstimatorConfig, EstimatorInput, Workspace};
use beacon_rl::tensor::MaskView;
use beacon_rl::RolloutBatch;
use ndarray::Array2;

use crate::common::pool;

const ROWS: usize = 3000;
const COLS: usize = 64;

const OUTCOME: [&str; 9] = [
    "grpo",
    "grpo_vectorized",
    "grpo_passk",
    "gdpo",
    "rloo",
    "rloo_vectorized",
    "opo",
    "gpg",
    "reinforce_plus_plus_baseline",
];

/// Advantages of `name` under `mask` in a pool of `threads`, as bits (`f32` and `f64` outputs).
fn run(threads: usize, name: &str, input: &EstimatorInput<'_>) -> (Vec<u32>, Vec<u64>) {
    let est = name
        .parse::<EstimatorConfig>()
        .expect("name")
        .build()
        .expect("build");
    pool(threads).install(|| {
        let mut ws = Workspace::default();
        let mut a32 = Array2::<f32>::from_elem((ROWS, COLS), f32::NAN);
        let mut a64 = Array2::<f64>::from_elem((ROWS, COLS), f64::NAN);
        est.estimate_into(input, (&mut a32).into(), None, &mut ws)
            .expect("f32");
        est.estimate_into(input, (&mut a64).into(), None, &mut ws)
            .expect("f64");
        (
            a32.iter().map(|x| x.to_bits()).collect(),
            a64.iter().map(|x| x.to_bits()).collect(),
        )
    })
}

#[test]
fn outcome_estimators_give_the_serial_bits_on_any_pool() {
    let mut rng = SplitMix64::new(9);
    let lengths: Vec<usize> = (0..ROWS)
        .map(|_| (rng.next_u64() as usize) % (COLS + 1))
        .collect();
    // Ragged prefix masks, one interior gap per row, and rewards anywhere (verl sums all L).
    let mask = Array2::from_shape_fn((ROWS, COLS), |(r, t)| i64::from(t < lengths[r] && t != 3));
    let rewards = Array2::from_shape_fn((ROWS, COLS), |_| (rng.next_f64() - 0.3) as f32);
    let keys: Vec<usize> = (0..ROWS).map(|r| r / 6).collect();
    let batch = RolloutBatch::from_group_keys(&keys, &vec![0.0; ROWS]).expect("batch");
    let mask_u8 = mask.mapv(|m| m as u8);
    let mask_bool = mask.mapv(|m| m != 0);
    let masks = [
        MaskView::from(&mask),
        MaskView::from(&mask_u8),
        MaskView::from(&mask_bool),
        MaskView::Lengths {
            lengths: &lengths,
            cols: COLS,
        },
    ];
    for mask in masks {
        let input = EstimatorInput::new(&batch)
            .with_token_level_rewards(&rewards)
            .with_response_mask(mask);
        for name in OUTCOME {
            let serial = run(1, name, &input);
            assert!(
                serial.1.iter().any(|&b| f64::from_bits(b) != 0.0),
                "{name}: all zero"
            );
            for threads in [2, 4] {
                assert!(
                    run(threads, name, &input) == serial,
                    "{name} {threads} threads {mask:?}"
                );
            }
        }
    }
}
