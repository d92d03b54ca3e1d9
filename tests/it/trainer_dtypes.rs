//! The trainer's dtypes through every estimator: `f32` or `f64` inputs, `bool`/`u8`/`i64`
//! masks or per-row response lengths, `f32` or `f64` outputs, returns asked for or skipped.
//!
//! The contract (`beacon_rl::tensor`): an `f64` output is bit-identical to the `f64` path on
//! the same values (`f32` inputs widened exactly), and an `f32` output is that `f64` result
//! rounded once. Also: the step-row API against the token path it replaces.

use crate::common::SplitMix64;
use beacon_rl::estimator::{
    AdvantageEstimator, Beacon, BeaconConfig, EstimatorConfig, EstimatorInput, Gigpo, GigpoConfig, Workspace,
};
use beacon_rl::tensor::{broadcast, MaskView};
use beacon_rl::{Error, RolloutBatch};
use ndarray::Array2;

use crate::common;

struct Case {
    batch: RolloutBatch,
    rewards: Array2<f32>,
    values: Array2<f32>,
    log_probs: Array2<f32>,
    sum_pi_sq: Array2<f32>,
    lengths: Vec<usize>,
    baselines: Vec<f64>,
    milestones: Vec<bool>,
    step_rewards: Vec<f64>,
    anchors: Vec<&'static str>,
}

/// An agent batch of 3 groups (rows of trajectories interleaved), L = 9, prefix masks.
fn case(seed: u64) -> Case {
    let mut rng = SplitMix64::new(seed);
    let mut groups = Vec::new();
    let mut trajs = Vec::new();
    for r in 0..30usize {
        let g = r % 3;
        groups.push(g);
        // Two or three trajectories per group, several rows each.
        trajs.push(g * 10 + (rng.next_u64() % 3) as usize);
    }
    let terminal: Vec<f64> = trajs.iter().map(|&j| f64::from((j % 4) as u8) * 0.5).collect();
    let batch = RolloutBatch::from_row_keys(&groups, &trajs, &terminal).expect("batch");
    let rows = groups.len();
    let cols = 9;
    let mut unit = |scale: f64| (rng.next_f64() * 2.0 - 1.0) * scale;
    // f32 values that are not round numbers: the rounding of the outputs matters.
    let rewards = Array2::from_shape_fn((rows, cols), |_| unit(1.3) as f32);
    let values = Array2::from_shape_fn((rows, cols), |_| unit(0.7) as f32);
    let log_probs = Array2::from_shape_fn((rows, cols), |_| (unit(1.0).abs() * -3.0) as f32);
    let sum_pi_sq = Array2::from_shape_fn((rows, cols), |_| unit(1.0).abs() as f32);
    let lengths = (0..rows).map(|r| (r * 7 + seed as usize) % (cols + 1)).collect();
    let baselines = (0..rows).map(|_| unit(1.0)).collect();
    let milestones = (0..rows).map(|r| (r + seed as usize) % 4 == 0).collect();
    let step_rewards = (0..rows).map(|_| unit(1.0)).collect();
    let anchors = (0..rows)
        .map(|r| ["a", "b", "c"][(r * 5 + seed as usize) % 3])
        .collect();
    Case {
        batch,
        rewards,
        values,
        log_probs,
        sum_pi_sq,
        lengths,
        baselines,
        milestones,
        step_rewards,
        anchors,
    }
}

fn bits64(a: &Array2<f64>) -> Vec<u64> {
    a.iter().map(|x| x.to_bits()).collect()
}

fn bits32(a: &Array2<f32>) -> Vec<u32> {
    a.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn every_dtype_gives_the_f64_path_rounded_once() {
    let mut compared = 0;
    for seed in 0..12u64 {
        let c = case(seed);
        let (rows, cols) = c.rewards.dim();
        let wide = |m: &Array2<f32>| m.mapv(f64::from);
        let (rewards64, values64, lp64, sp64) = (
            wide(&c.rewards),
            wide(&c.values),
            wide(&c.log_probs),
            wide(&c.sum_pi_sq),
        );
        let mask_bool = Array2::from_shape_fn((rows, cols), |(r, t)| t < c.lengths[r]);
        let mask_u8 = mask_bool.mapv(u8::from);
        let mask_i64 = mask_bool.mapv(i64::from);
        let reference = EstimatorInput::new(&c.batch)
            .with_reward_baselines(&c.baselines)
            .with_milestones(&c.milestones)
            .with_step_rewards(&c.step_rewards)
            .with_anchor_obs(&c.anchors)
            .with_token_level_rewards(&rewards64)
            .with_values(&values64)
            .with_old_log_probs(&lp64)
            .with_sum_pi_squared(&sp64)
            .with_response_mask(&mask_bool);
        let f32_in = reference
            .with_token_level_rewards(&c.rewards)
            .with_values(&c.values)
            .with_old_log_probs(&c.log_probs)
            .with_sum_pi_squared(&c.sum_pi_sq);
        let masks = [
            MaskView::from(&mask_bool),
            MaskView::from(&mask_u8),
            MaskView::from(&mask_i64),
            MaskView::Lengths {
                lengths: &c.lengths,
                cols,
            },
        ];
        for name in EstimatorConfig::NAMES {
            let est = name.parse::<EstimatorConfig>().unwrap().build().unwrap();
            // BEACON and GiGPO read the batch's episode rewards: token rewards that disagree
            // with them are an error, so they get none.
            let (mut reference, mut f32_in) = (reference, f32_in);
            if ["beacon", "beacon_official", "gigpo"].contains(name) {
                reference.token_level_rewards = None;
                f32_in.token_level_rewards = None;
            }
            let want = est.estimate(&reference);
            let mut ws = Workspace::default();
            for (inputs, label) in [(reference, "f64"), (f32_in, "f32")] {
                for mask in masks {
                    let input = inputs.with_response_mask(mask);
                    // f64 out, returns asked for.
                    let mut a64 = Array2::from_elem((rows, cols), f64::NAN);
                    let mut r64 = Array2::from_elem((rows, cols), f64::NAN);
                    let got = est.estimate_into(&input, (&mut a64).into(), Some((&mut r64).into()), &mut ws);
                    // f32 out, returns skipped.
                    let mut a32 = Array2::from_elem((rows, cols), f32::NAN);
                    let got32 = est.estimate_into(&input, (&mut a32).into(), None, &mut ws);
                    match &want {
                        Ok(w) => {
                            got.unwrap_or_else(|e| panic!("{name} {label} {mask:?}: {e}"));
                            got32.unwrap_or_else(|e| panic!("{name} {label} {mask:?}: {e}"));
                            assert_eq!(bits64(&a64), bits64(&w.advantages), "{name} {label} {mask:?}");
                            assert_eq!(bits64(&r64), bits64(w.returns()), "{name} {label} returns");
                            let rounded = w.advantages.mapv(|x| x as f32);
                            assert_eq!(bits32(&a32), bits32(&rounded), "{name} {label} f32 {mask:?}");
                            compared += 1;
                        }
                        Err(e) => {
                            assert_eq!(got.as_ref().err(), Some(e), "{name} {label}");
                            assert_eq!(got32.as_ref().err(), Some(e), "{name} {label}");
                        }
                    }
                }
            }
        }
    }
    // Every estimator succeeded on most seeds (passk needs ≥ 2 rows per group: always here).
    assert!(compared >= 12 * 17 * 8 / 2, "{compared}");
}

#[test]
fn f32_rewards_are_not_f32_arithmetic() {
    // GRPO on two rows with f32 scores 0.1f32 and 0.2f32: the f64 path on the widened values
    // gives ±(0.05 ...)/(std + ε) computed in f64, then rounded; verl's float32 path would
    // round μ, σ and the quotient separately. The contract picks the former.
    let batch = RolloutBatch::from_group_keys(&[0, 0], &[0.0; 2]).unwrap();
    let rewards = ndarray::array![[0.1f32], [0.2f32]];
    let mask = ndarray::array![[1i64], [1]];
    let input = EstimatorInput::new(&batch)
        .with_token_level_rewards(&rewards)
        .with_response_mask(&mask);
    let grpo = "grpo".parse::<EstimatorConfig>().unwrap().build().unwrap();
    let mut out = Array2::<f32>::zeros((2, 1));
    grpo.estimate_into(&input, (&mut out).into(), None, &mut Workspace::default())
        .unwrap();
    let (s0, s1) = (f64::from(0.1f32), f64::from(0.2f32));
    let mean = (s0 + s1) / 2.0;
    let std = (((s0 - mean).powi(2) + (s1 - mean).powi(2)) / 1.0).sqrt();
    assert_eq!(out[[0, 0]], ((s0 - mean) / (std + 1e-6)) as f32);
    assert_eq!(out[[1, 0]], ((s1 - mean) / (std + 1e-6)) as f32);
}

#[test]
fn lengths_past_the_row_are_a_typed_error() {
    let batch = RolloutBatch::from_group_keys(&[0, 0], &[0.0; 2]).unwrap();
    let rewards = ndarray::array![[1.0f32, 0.0], [0.0, 0.0]];
    let input = EstimatorInput::new(&batch)
        .with_token_level_rewards(&rewards)
        .with_response_mask(MaskView::Lengths {
            lengths: &[2, 3],
            cols: 2,
        });
    for name in ["grpo", "gae", "reinforce_plus_plus", "opo"] {
        let est = name.parse::<EstimatorConfig>().unwrap().build().unwrap();
        let err = est.estimate(&input.with_values(&rewards)).unwrap_err();
        assert_eq!(
            err,
            Error::InvalidMask {
                row: 1,
                length: 3,
                cols: 2
            },
            "{name}"
        );
    }
}

#[test]
fn step_rows_match_the_token_path() {
    for seed in 0..6u64 {
        let c = case(seed);
        let rows = c.batch.num_steps();
        // The token path with the episode reward on each row's only token.
        let mut terminal = vec![0.0; rows];
        for (j, &reward) in c.batch.terminal_rewards().iter().enumerate() {
            for &r in c.batch.trajectory_rows(j) {
                terminal[r] = reward;
            }
        }
        let rewards = Array2::from_shape_vec((rows, 1), terminal).unwrap();
        let ones = vec![1usize; rows];
        let token_input = EstimatorInput::new(&c.batch)
            .with_token_level_rewards(&rewards)
            .with_response_mask(MaskView::Lengths {
                lengths: &ones,
                cols: 1,
            });
        for name in ["grpo", "grpo_vectorized", "rloo", "rloo_vectorized"] {
            let est = name.parse::<EstimatorConfig>().unwrap().build().unwrap();
            let mut step = vec![f64::NAN; rows];
            est.estimate_steps_into(
                &EstimatorInput::new(&c.batch),
                &mut step,
                &mut Workspace::default(),
            )
            .unwrap();
            let tokens = est.estimate(&token_input).unwrap().advantages;
            assert_eq!(
                step.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                tokens.column(0).iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                "{name}"
            );
        }
        // BEACON and GiGPO: the step rows are their per-row outputs, and the broadcast of
        // them is what `estimate_into` writes.
        let input = EstimatorInput::new(&c.batch)
            .with_milestones(&c.milestones)
            .with_step_rewards(&c.step_rewards)
            .with_anchor_obs(&c.anchors)
            .with_response_mask(MaskView::Lengths {
                lengths: &c.lengths,
                cols: 9,
            });
        let beacon = Beacon::new(BeaconConfig::official()).unwrap();
        let gigpo = Gigpo::new(GigpoConfig::default()).unwrap();
        let direct = [
            beacon.compute(&c.batch, &c.milestones).unwrap().advantages,
            gigpo
                .compute(&c.batch, &c.step_rewards, &c.anchors)
                .unwrap()
                .advantages,
        ];
        let ests: [&dyn AdvantageEstimator; 2] = [&beacon, &gigpo];
        for (est, want) in ests.iter().zip(direct) {
            let mut step = vec![f64::NAN; rows];
            est.estimate_steps_into(&input, &mut step, &mut Workspace::default())
                .unwrap();
            assert_eq!(step, want, "{}", est.name());
            let tokens = broadcast(
                &step,
                MaskView::Lengths {
                    lengths: &c.lengths,
                    cols: 9,
                },
            )
            .unwrap();
            assert_eq!(est.estimate(&input).unwrap().advantages, tokens, "{}", est.name());
        }
    }
    // Token-level estimators have no step form; a short output is a typed error.
    let c = case(0);
    let gae = "gae".parse::<EstimatorConfig>().unwrap().build().unwrap();
    let input = EstimatorInput::new(&c.batch);
    assert_eq!(
        gae.estimate_steps_into(&input, &mut [0.0; 30], &mut Workspace::default()),
        Err(Error::NotStepLevel { estimator: "gae" })
    );
    let grpo = "grpo".parse::<EstimatorConfig>().unwrap().build().unwrap();
    assert!(matches!(
        grpo.estimate_steps_into(&input, &mut [0.0; 3], &mut Workspace::default()),
        Err(Error::OutputShape { .. })
    ));
}

/// An integer mask entry other than 0 and 1 is `Error::MaskValue` naming its (row, token) and
/// value, from every estimator in the registry, through `estimate` and `estimate_into` (f32
/// and f64 outputs), for `i64` and `u8` masks, whether the entry sits in a row that would
/// otherwise be a prefix row, after a gap, or is negative: verl multiplies by its mask, so a
/// reader taking "nonzero" as generated would give another number, silently.
#[test]
fn integer_mask_entries_other_than_0_and_1_are_a_typed_error() {
    let every = common::EveryColumn::new();
    let ones = Array2::<i64>::ones((4, 3));
    // (row, token, value): a 2 that keeps the row's sum a plausible prefix length (row 1 =
    // [1, 2, 0] sums to 3), a 2 after a gap, a negative entry, the extremes of i64.
    let cases: [(usize, usize, i64); 5] = [
        (1, 1, 2),
        (2, 2, 2),
        (3, 0, -1),
        (0, 2, i64::MIN),
        (3, 2, i64::MAX),
    ];
    for (row, token, value) in cases {
        let mut mask = ones.clone();
        if (row, token) == (1, 1) {
            mask[[1, 2]] = 0;
        }
        if (row, token) == (2, 2) {
            mask[[2, 1]] = 0;
        }
        mask[[row, token]] = value;
        let want = Error::MaskValue { row, token, value };
        let mask_u8 = mask.mapv(|v| v as u8);
        let u8_value = value as u8;
        let want_u8 = Error::MaskValue {
            row,
            token,
            value: i64::from(u8_value),
        };
        for (mask, want) in [
            (MaskView::from(&mask), &want),
            (MaskView::from(&mask_u8), &want_u8),
        ] {
            if u8_value <= 1 && matches!(mask, MaskView::U8(_)) {
                continue; // The value wraps to a valid u8 (e.g. i64::MIN as u8 = 0).
            }
            let input = every.input(mask);
            for name in EstimatorConfig::NAMES {
                let est = name.parse::<EstimatorConfig>().unwrap().build().unwrap();
                assert_eq!(
                    est.estimate(&input).unwrap_err(),
                    *want,
                    "{name} estimate {mask:?}"
                );
                let mut a = Array2::<f32>::zeros((4, 3));
                let mut b = Array2::<f64>::zeros((4, 3));
                let err = est
                    .estimate_into(
                        &input,
                        (&mut a).into(),
                        Some((&mut b).into()),
                        &mut Workspace::default(),
                    )
                    .unwrap_err();
                assert_eq!(err, *want, "{name} estimate_into {mask:?}");
            }
        }
    }
}

/// The same rule on rows longer than one chunk of the readers' 8-wide loops (L = 19: two
/// chunks and a tail of 3), contiguous and strided: a bad entry in the first chunk, the
/// second, or the tail, in the last row, is found wherever the pass that reads the mask
/// tests it. In a mask of ones, and alone in a mask of zeros (read as "nonzero = generated",
/// one token: whitening and OPO would fail on that before writing anything).
#[test]
fn bad_mask_entries_in_long_rows_are_a_typed_error() {
    let every = common::EveryColumn::with_cols(19);
    let placements = [(0, 5, 2i64), (2, 12, -1), (3, 17, 3), (3, 7, 255)];
    let bases = [Array2::<i64>::ones((4, 19)), Array2::<i64>::zeros((4, 19))];
    for (base, (row, token, value)) in bases.iter().flat_map(|b| placements.map(|p| (b, p))) {
        let mut mask = base.clone();
        mask[[row, token]] = value;
        let mask_u8 = mask.mapv(|v| v as u8);
        let strided = mask.t().as_standard_layout().into_owned();
        let strided_u8 = mask_u8.t().as_standard_layout().into_owned();
        let masks = [
            MaskView::from(&mask),
            MaskView::from(&mask_u8),
            MaskView::from(strided.t()),
            MaskView::from(strided_u8.t()),
        ];
        for mask in masks {
            let want = match mask {
                MaskView::U8(_) => Error::MaskValue {
                    row,
                    token,
                    value: i64::from(value as u8),
                },
                _ => Error::MaskValue { row, token, value },
            };
            for name in EstimatorConfig::NAMES {
                let est = name.parse::<EstimatorConfig>().unwrap().build().unwrap();
                let input = every.input(mask);
                assert_eq!(est.estimate(&input).unwrap_err(), want, "{name} {mask:?}");
                let mut a = Array2::<f32>::zeros((4, 19));
                let err = est
                    .estimate_into(&input, (&mut a).into(), None, &mut Workspace::default())
                    .unwrap_err();
                assert_eq!(err, want, "{name} estimate_into {mask:?}");
            }
        }
    }
}

/// The same rule in the token functions: the broadcast tests entries as it writes them (a
/// row of a strided mask too), the prefix lengths and the span writer check first.
#[test]
fn token_functions_reject_integer_entries_other_than_0_and_1() {
    use beacon_rl::tensor::{broadcast_into, prefix_lengths_into, spans_into, TokenSpan};
    let mask = ndarray::array![[1i64, 1, 0], [1, 3, 0]];
    let want = Error::MaskValue {
        row: 1,
        token: 1,
        value: 3,
    };
    let mut out = Array2::<f32>::zeros((2, 3));
    assert_eq!(broadcast_into(&[1.0, 2.0], &mask, &mut out), Err(want.clone()));
    // Column-major storage: the strided path.
    let fortran = mask.t().as_standard_layout().into_owned();
    assert_eq!(
        broadcast_into(&[1.0, 2.0], fortran.t(), &mut out),
        Err(want.clone())
    );
    assert_eq!(prefix_lengths_into(&mask, &mut [0; 2]), Err(want.clone()));
    let spans = [TokenSpan {
        seq: 0,
        step: 0,
        start: 0,
        end: 2,
    }];
    assert_eq!(spans_into(&[1.0], &spans, &mask, &mut out), Err(want));
    // 0/1 rows, prefix or not, pass.
    let fine = ndarray::array![[1u8, 1, 0], [1, 0, 1]];
    broadcast_into(&[1.0, 2.0], &fine, &mut out).unwrap();
    assert_eq!(out, ndarray::array![[1.0, 1.0, 0.0], [2.0, 0.0, 2.0]]);
}

/// Which error a bad mask entry gives when the input has another fault too: the same for
/// every estimator, whether its mask is tested up front or in the pass that reads it. A
/// non-finite token reward is reported first (the rewards are checked before the mask, in
/// verl's argument order); the mask entry before a non-finite value of a later column (GAE's
/// values) and before any error a mask read as "nonzero = generated" would lead to (a lone
/// 2 in an empty mask is one generated token: whitening's "fewer than two tokens", OPO's
/// "empty group").
#[test]
fn a_bad_mask_entry_is_reported_in_a_fixed_order() {
    let every = common::EveryColumn::new();
    let mut lone = Array2::<i64>::zeros((4, 3));
    lone[[1, 1]] = 2;
    let mut bad = Array2::<i64>::ones((4, 3));
    bad[[1, 2]] = 5;
    let ones = Array2::<i64>::ones((4, 3));
    let mut nan_rewards = every.rewards.clone();
    nan_rewards[[2, 1]] = f64::NAN;
    let mut inf_values = every.rewards.clone();
    inf_values[[0, 0]] = f64::INFINITY;
    let (lone_u8, bad_u8) = (lone.mapv(|v| v as u8), bad.mapv(|v| v as u8));
    let run = |est: &dyn AdvantageEstimator, input: &EstimatorInput<'_>| {
        let fresh = match est.estimate(input) {
            Ok(_) => panic!("{}: no error", est.name()),
            Err(e) => e,
        };
        let mut a = Array2::<f32>::zeros((4, 3));
        let mut b = Array2::<f32>::zeros((4, 3));
        let into = est
            .estimate_into(
                input,
                (&mut a).into(),
                Some((&mut b).into()),
                &mut Workspace::default(),
            )
            .unwrap_err();
        assert_eq!(format!("{fresh:?}"), format!("{into:?}"), "{}", est.name());
        fresh
    };
    for name in EstimatorConfig::NAMES {
        let est = name.parse::<EstimatorConfig>().unwrap().build().unwrap();
        for (lone, bad) in [
            (MaskView::from(&lone), MaskView::from(&bad)),
            (MaskView::from(&lone_u8), MaskView::from(&bad_u8)),
        ] {
            let lone_err = run(est.as_ref(), &every.input(lone));
            assert_eq!(
                lone_err,
                Error::MaskValue {
                    row: 1,
                    token: 1,
                    value: 2
                },
                "{name} {lone:?}"
            );
            let want_bad = Error::MaskValue {
                row: 1,
                token: 2,
                value: 5,
            };
            let values_err = run(est.as_ref(), &every.input(bad).with_values(&inf_values));
            assert_eq!(values_err, want_bad, "{name} {bad:?}");
            // With a NaN reward (errors compared as text: NaN ≠ NaN): the error the same input gives under a valid mask.
            let with_nan = |mask| every.input(mask).with_token_level_rewards(&nan_rewards);
            let want = run(est.as_ref(), &with_nan(MaskView::from(&ones)));
            assert!(!matches!(want, Error::MaskValue { .. }), "{name}: {want:?}");
            let got = run(est.as_ref(), &with_nan(bad));
            assert_eq!(format!("{got:?}"), format!("{want:?}"), "{name} {bad:?}");
        }
    }
}
