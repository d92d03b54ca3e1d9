//! Numeric edge cases: claimed sizes and the order of checks before
//! allocation (C1–C8), BEACON outputs (N1–N4), overflowing variances that used to give a
//! plausible 0 (W1–W3), diagnostics sums (D1), the decay table's look-ups (P1), `f32` outputs
//! that would round to ∞ (F1–F3) and non-finite step values of the token functions (S1).
//! Each test failed (panic, abort, `Ok` with ∞/NaN, a wrong 0 or another error) on the code
//! before the fix.
//!
//! Expected values are derived by hand in the comments. A group of two scores ±x has mean 0
//! and unbiased σ = √(2x²/1) = √2·x, so (±x − 0)/(√2·x + ε) = ±1/√2 = ±0.70710678 whatever x
//! is: the exact answer every overflow case below must give.

use crate::common;
use crate::diagnostics::credit_concentration;
use beacon_rl::diagnostics::{Diagnostics, DiagnosticsConfig};
use beacon_rl::estimator::{
    AdvantageEstimator, Beacon, BeaconConfig, BeaconFlavour, EstimatorConfig, EstimatorInput, Gigpo,
    GigpoConfig, GrpoConfig, NormMode, Workspace,
};
use beacon_rl::{Error, RolloutBatch};
use ndarray::Array2;

const HALF_SQRT2: f64 = std::f64::consts::FRAC_1_SQRT_2;

/// The error's variant name (the tests also compile against code that lacks a variant).
fn variant(e: &Error) -> String {
    format!("{e:?}")
        .split([' ', '(', '{'])
        .next()
        .unwrap_or("")
        .to_owned()
}

// ---------------------------------------------------------------- C1, C2: claimed sizes

#[test]
fn c1_from_offsets_rejects_a_huge_claimed_step_count_before_allocating() {
    // One trajectory claiming 2^40 steps with one reward value: 8 TiB of row index. The old
    // code aborted (allocation failure) or panicked with `capacity overflow`.
    let err = RolloutBatch::from_offsets(vec![0, 1], vec![0, 1 << 40], vec![0.0]).unwrap_err();
    assert_eq!(variant(&err), "CapacityExceeded", "{err:?}");
    // Just past the documented limit is rejected too, the limit itself is a claim we check.
    let err = RolloutBatch::from_offsets(vec![0, 1], vec![0, usize::MAX], vec![0.0]).unwrap_err();
    assert_eq!(variant(&err), "CapacityExceeded", "{err:?}");
}

#[test]
fn c2_from_blocks_sums_lengths_with_checked_arithmetic() {
    // usize::MAX + 2 overflows: the old `+=` panicked in overflow-checked builds.
    let err = RolloutBatch::from_blocks(1, &[usize::MAX, 2], vec![0.0, 0.0]).unwrap_err();
    assert_eq!(variant(&err), "CapacityExceeded", "{err:?}");
    let err = RolloutBatch::from_blocks(2, &[1 << 40, 1], vec![0.0, 0.0]).unwrap_err();
    assert_eq!(variant(&err), "CapacityExceeded", "{err:?}");
}

/// A `Lengths` mask's L is a claim, not data in memory. 2^50 columns of 4 rows is 2^55 bytes
/// of `f64`: below `isize::MAX`, above any address space, so allocating it aborts.
const CLAIMED_COLS: usize = 1 << 50;

#[test]
fn c3_estimate_checks_the_rewards_against_a_claimed_mask_before_allocating_returns() {
    // The estimators with returns allocated the returns at the mask's claimed shape before
    // their inputs were checked: a wrong L aborted instead of the `LengthMismatch` that
    // `estimate_into` gives.
    let every = common::EveryColumn::new();
    let lengths = [1, 2, 3, 0];
    let input = every.input(beacon_rl::tensor::MaskView::Lengths {
        lengths: &lengths,
        cols: CLAIMED_COLS,
    });
    for name in [
        "gae",
        "reinforce_plus_plus",
        "remax",
        "optimal_token_baseline",
        "tir_optimal_token_baseline",
    ] {
        let est = common::build(name);
        assert!(est.has_returns(), "{name}");
        let want = Error::LengthMismatch {
            what: "response_mask columns",
            expected: 3,
            actual: CLAIMED_COLS,
        };
        assert_eq!(est.estimate(&input).unwrap_err(), want, "{name}");
        // The same error as the caller-buffer path.
        let mut a = Array2::<f64>::zeros((4, 3));
        assert_eq!(
            est.estimate_into(&input, (&mut a).into(), None, &mut Workspace::default()),
            Err(want),
            "{name}"
        );
    }
}

#[test]
fn c4_an_output_shape_that_overflows_usize_is_an_error_not_a_panic() {
    // rows × L past `isize::MAX` bytes: `Array2::zeros` panicked ("shape too large" or
    // "capacity overflow"), and the `OutputShape` error's `rows * L` overflowed (it reports
    // shapes now, so there is no product to overflow).
    let every = common::EveryColumn::new();
    let lengths = [0; 4];
    let mask = beacon_rl::tensor::MaskView::Lengths {
        lengths: &lengths,
        cols: usize::MAX / 2,
    };
    // The step-level estimators take the output's shape from the mask alone.
    for name in ["beacon", "beacon_official", "beacon:ablation=full", "gigpo"] {
        let est = common::build(name);
        let err = est.estimate(&every.input(mask)).unwrap_err();
        assert!(
            matches!(
                err,
                Error::CapacityExceeded {
                    requested: usize::MAX,
                    ..
                }
            ),
            "{name}: {err:?}"
        );
        // Into a caller buffer: the wrong shape is named, with the claimed shape as claimed.
        let mut a = Array2::<f64>::zeros((4, 3));
        let err = est
            .estimate_into(
                &every.input(mask),
                (&mut a).into(),
                None,
                &mut Workspace::default(),
            )
            .unwrap_err();
        assert_eq!(
            err,
            Error::OutputShape {
                what: "advantages",
                expected: (4, usize::MAX / 2),
                actual: (4, 3)
            },
            "{name}"
        );
    }
    let step = [0.0; 4];
    let err = beacon_rl::tensor::broadcast(&step, mask).unwrap_err();
    assert!(
        matches!(
            err,
            Error::CapacityExceeded {
                requested: usize::MAX,
                ..
            }
        ),
        "{err:?}"
    );
    let mut out = Array2::<f32>::zeros((4, 3));
    assert_eq!(
        beacon_rl::tensor::broadcast_into(&step, mask, &mut out),
        Err(Error::OutputShape {
            what: "token advantages",
            expected: (4, usize::MAX / 2),
            actual: (4, 3)
        })
    );
}

#[test]
fn c5_broadcast_checks_its_inputs_before_allocating() {
    // Five step values for a 4-row mask claiming 2^50 columns: the allocating broadcast
    // allocated the claimed shape (an abort) before finding the row mismatch.
    let lengths = [0; 4];
    let mask = beacon_rl::tensor::MaskView::Lengths {
        lengths: &lengths,
        cols: CLAIMED_COLS,
    };
    assert_eq!(
        beacon_rl::tensor::broadcast(&[0.0; 5], mask),
        Err(Error::LengthMismatch {
            what: "response_mask rows",
            expected: 5,
            actual: 4
        })
    );
}

/// A claimed L whose output fits the limit but no memory: 4 rows × 2^56 columns is 2^58 `f64`
/// (≤ `isize::MAX` bytes / 8) and 2^61 bytes, beyond any 57-bit address space, so the
/// allocation fails whatever the host's overcommit policy.
const UNALLOCATABLE_COLS: usize = 1 << 56;

#[test]
fn c6_estimate_refuses_a_claimed_output_it_cannot_allocate() {
    // `Array2::zeros` of a valid shape that the allocator refuses aborted the process
    // (`handle_alloc_error`): BEACON, GiGPO and the ablation take the output's shape from the
    // mask alone, so a claimed L of 2^40 (32 TiB) killed the caller. Every estimator in the
    // registry, with and without token rewards (without them the step-level estimators have
    // nothing to check the claim against), must return an error.
    let every = common::EveryColumn::new();
    let lengths = [1, 2, 3, 0];
    let mask = beacon_rl::tensor::MaskView::Lengths {
        lengths: &lengths,
        cols: UNALLOCATABLE_COLS,
    };
    let with_tokens = every.input(mask);
    let mut step_inputs_only = with_tokens;
    step_inputs_only.token_level_rewards = None;
    let mut refused = Vec::new();
    // Every name, and the ablation (BEACON under a Table 3 row).
    for name in beacon_rl::estimator::EstimatorConfig::NAMES
        .iter()
        .chain(&["beacon:ablation=full"])
    {
        let est = common::build(name);
        for input in [with_tokens, step_inputs_only] {
            match est.estimate(&input).unwrap_err() {
                Error::CapacityExceeded {
                    what: "output (rows × L)",
                    requested,
                    limit,
                } => {
                    // Accepted by the limit, refused by the allocator.
                    assert_eq!(requested, 4 * UNALLOCATABLE_COLS, "{name}");
                    assert!(requested <= limit, "{name}");
                    let err = Error::CapacityExceeded {
                        what: "output (rows × L)",
                        requested,
                        limit,
                    };
                    assert!(err.to_string().contains("could not be allocated"), "{err}");
                    refused.push(*name);
                }
                // The token-level estimators reject the inputs before allocating anything.
                Error::LengthMismatch {
                    what: "response_mask columns",
                    ..
                }
                | Error::MissingInput("token_level_rewards") => {}
                // turn_gae reads the critic's values against the mask's claimed L.
                Error::LengthMismatch { what: "values", .. } if *name == "turn_gae" => {}
                err => panic!("{name}: {err:?}"),
            }
        }
    }
    refused.dedup();
    for name in ["gigpo", "beacon", "beacon_official", "beacon:ablation=full"] {
        assert!(refused.contains(&name), "{name} not refused: {refused:?}");
    }
    // The allocating broadcast, the same claim.
    assert!(matches!(
        beacon_rl::tensor::broadcast(&[0.0; 4], mask),
        Err(Error::CapacityExceeded { requested, .. }) if requested == 4 * UNALLOCATABLE_COLS
    ));
}

#[test]
fn c7_estimate_into_checks_the_columns_before_sizing_by_a_claimed_row_count() {
    // `from_offsets` claims its step count (up to MAX_STEPS, 2^32 − 1) without allocating.
    // BEACON, GiGPO and the ablation sized their step buffer by it (34 GB of f64) before
    // checking the one-row columns: an abort. Every estimator must name a column instead.
    let batch = RolloutBatch::from_offsets(vec![0, 1], vec![0, RolloutBatch::MAX_STEPS], vec![0.0]).unwrap();
    let input = EstimatorInput::new(&batch)
        .with_milestones(&[false])
        .with_step_rewards(&[0.0])
        .with_anchor_obs(&["s"]);
    for name in beacon_rl::estimator::EstimatorConfig::NAMES
        .iter()
        .chain(&["beacon:ablation=full"])
    {
        let est = common::build(name);
        let mut a = Array2::<f64>::zeros((1, 1));
        let err = est
            .estimate_into(&input, (&mut a).into(), None, &mut Workspace::default())
            .unwrap_err();
        let want = match *name {
            n if n.starts_with("beacon") => Error::LengthMismatch {
                what: "milestone flags",
                expected: RolloutBatch::MAX_STEPS,
                actual: 1,
            },
            // turn_gae needs a critic value per turn before it reads anything.
            "turn_gae" => Error::MissingInput("values"),
            // tree_grpo needs its tree column before it reads anything.
            "tree_grpo" => Error::MissingInput("tree_parents"),
            // empg needs its entropy column before it reads anything.
            "empg" => Error::MissingInput("step_entropy"),
            "gigpo" | "step_reinforce" | "mt_grpo" => Error::LengthMismatch {
                what: "step_rewards",
                expected: RolloutBatch::MAX_STEPS,
                actual: 1,
            },
            _ => Error::MissingInput("token_level_rewards"),
        };
        assert_eq!(err, want, "{name}");
    }
}

#[test]
fn c8_estimate_checks_the_step_inputs_before_allocating_a_claimed_output() {
    // BEACON and GiGPO took `estimate` from the trait: it allocated the rows × L output
    // before `estimate_into` checked the input, so a bad column under a `Lengths` mask whose
    // claimed L no allocator grants was reported as that allocation's `CapacityExceeded`,
    // not as what is wrong with the input (and a smaller claim cost a full-size allocation).
    let every = common::EveryColumn::new();
    let lengths = [1, 2, 3, 0];
    let mask = beacon_rl::tensor::MaskView::Lengths {
        lengths: &lengths,
        cols: UNALLOCATABLE_COLS,
    };
    let mut input = every.input(mask);
    input.token_level_rewards = None;
    let nan = [0.0, f64::NAN, 0.0, 0.0];
    let long = [1, UNALLOCATABLE_COLS + 1, 0, 0];
    for name in ["gigpo", "beacon", "beacon_official", "beacon:ablation=full"] {
        let est = common::build(name);
        // A missing column (shapes are checked first).
        let mut missing = input;
        missing.milestones = None;
        missing.step_rewards = None;
        let want = if name == "gigpo" {
            "step_rewards"
        } else {
            "milestones"
        };
        assert_eq!(
            est.estimate(&missing).unwrap_err(),
            Error::MissingInput(want),
            "{name}"
        );
        // A value: GiGPO's NaN step reward, BEACON's NaN row score.
        let bad = if name == "gigpo" {
            input.with_step_rewards(&nan)
        } else {
            input.with_row_scores(&nan)
        };
        let err = est.estimate(&bad).unwrap_err();
        assert!(
            matches!(err, Error::NonFinite { index: 1, .. }),
            "{name}: {err:?}"
        );
        // The mask itself, checked after the values: 3 rows for 4, a length past L.
        let short = input.with_response_mask(beacon_rl::tensor::MaskView::Lengths {
            lengths: &lengths[..3],
            cols: UNALLOCATABLE_COLS,
        });
        assert_eq!(
            est.estimate(&short).unwrap_err(),
            Error::LengthMismatch {
                what: "response_mask rows",
                expected: 4,
                actual: 3
            },
            "{name}"
        );
        let err = est
            .estimate(&input.with_response_mask(beacon_rl::tensor::MaskView::Lengths {
                lengths: &long,
                cols: UNALLOCATABLE_COLS,
            }))
            .unwrap_err();
        assert!(
            matches!(err, Error::InvalidMask { row: 1, .. }),
            "{name}: {err:?}"
        );
    }
}

// ---------------------------------------------------------------- N1–N4: BEACON outputs

/// Every BEACON entry point on one batch: `compute`, the trait's `estimate` and `estimate_into`. Returns the per-row advantages of each (or
/// its error).
fn all_entry_points(cfg: BeaconConfig, batch: &RolloutBatch, flags: &[bool]) -> Vec<Result<Vec<f64>, Error>> {
    let b = Beacon::new(cfg).expect("valid config");
    let n = batch.num_steps();
    let mut out = Vec::new();
    out.push(b.compute(batch, flags).map(|o| o.advantages));
    let input = EstimatorInput::new(batch).with_milestones(flags);
    out.push(b.estimate(&input).map(|a| a.advantages.column(0).to_vec()));
    let (mut a, mut r) = (Array2::<f64>::zeros((n, 1)), Array2::<f64>::zeros((n, 1)));
    out.push(
        b.estimate_into(
            &input,
            (&mut a).into(),
            Some((&mut r).into()),
            &mut Workspace::default(),
        )
        .map(|()| a.column(0).to_vec()),
    );
    let mut step = vec![0.0; n];
    out.push(
        b.estimate_steps_into(&input, &mut step, &mut Workspace::default())
            .map(|()| step.clone()),
    );
    out
}

fn official(mode: NormMode) -> BeaconConfig {
    let mut c = BeaconConfig::official();
    c.flavour = BeaconFlavour::Official { norm: mode };
    c
}

#[test]
fn n1_paper_rewards_near_max_give_the_exact_advantages() {
    // R = [1e308, 1e308, −1e308], one step each, no milestone. Σ R overflows, but
    // μ = 1e308/3, deviations (2/3, 2/3, −4/3)·1e308, unbiased σ² = (4/9 + 4/9 + 16/9)/2 ·
    // 1e616 = (4/3)·1e616, σ = (2/√3)·1e308. A = (2/3)/(2/√3) = 1/√3 for the first two and
    // −(4/3)/(2/√3) = −2/√3 for the third. The old code gave Ok([0, 0, NaN]).
    let batch = RolloutBatch::from_blocks(3, &[1, 1, 1], vec![1e308, 1e308, -1e308]).unwrap();
    let want = [1.0 / 3f64.sqrt(), 1.0 / 3f64.sqrt(), -2.0 / 3f64.sqrt()];
    for (i, got) in all_entry_points(BeaconConfig::default(), &batch, &[false; 3])
        .into_iter()
        .enumerate()
    {
        let got = got.unwrap_or_else(|e| panic!("entry point {i}: {e}"));
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-12, "entry point {i}: {got:?} vs {want:?}");
        }
    }
}

#[test]
fn n2_official_huge_trajectory_weight_is_a_typed_error() {
    // One row, R = −2: μ = 0, σ = 1, A^traj = −2 (mean_norm); w = 1e308 makes −2e308 = −∞,
    // which the old code returned as Ok([-inf]). Not representable: NonFinite naming it.
    let batch = RolloutBatch::from_blocks(1, &[1], vec![-2.0]).unwrap();
    let mut cfg = BeaconConfig::official();
    cfg.trajectory_weight = 1e308;
    for (i, got) in all_entry_points(cfg, &batch, &[false]).into_iter().enumerate() {
        match got {
            Err(Error::NonFinite { value, .. }) => assert_eq!(value, f64::NEG_INFINITY, "entry point {i}"),
            other => panic!("entry point {i}: {other:?}"),
        }
    }
}

#[test]
fn n3_paper_huge_milestone_reward_is_a_typed_error() {
    // R_ms = 1e308, γ = 1: trajectory a = [·, ms] completes a 2-step segment whose return
    // 1e308 + 1e308 overflows, so b_1 = ∞ and A^seg = 1e308 − ∞ = −∞ (the old code: Ok with
    // −∞). The mean return 1e308 is representable only by reassociating the release's sum,
    // which would change its bits: a typed error instead.
    let batch = RolloutBatch::from_blocks(2, &[2, 2], vec![1.0, 0.0]).unwrap();
    let mut cfg = BeaconConfig::default();
    cfg.milestone_reward = 1e308;
    cfg.segment_decay = 1.0;
    for (i, got) in all_entry_points(cfg, &batch, &[false, true, false, false])
        .into_iter()
        .enumerate()
    {
        assert!(
            matches!(got, Err(Error::NonFinite { .. })),
            "entry point {i}: {got:?}"
        );
    }
}

#[test]
fn n4_official_overflowing_group_statistics_are_rescaled() {
    // Official flavour, mean_std_norm. Trajectory level over rows, one step each:
    // R = [1e308, 1e308, −1e308] is N1's case over rows: A^traj = (1/√3, 1/√3, −2/√3).
    // Segment level: a = [ms] (r = R_ms = 1e308), b = [ms] (1e308), c = [·] (unfinished, 0)
    // form segment 0 together: values (1e308, 1e308, 0), mean (2/3)·1e308 (Σ overflows),
    // deviations (1/3, 1/3, −2/3)·1e308, σ² = (1/9 + 1/9 + 4/9)/2 = 1/3 (·1e616),
    // σ = 1e308/√3: A^seg = (1/3)/(1/√3) = 1/√3, and −2/√3 for c. w = λ = 1.
    // The old code gave NaN (Σ overflowed to ∞ before the clamp hid it).
    let batch = RolloutBatch::from_blocks(3, &[1, 1, 1], vec![1e308, 1e308, -1e308]).unwrap();
    let mut cfg = official(NormMode::MeanStdNorm);
    cfg.milestone_reward = 1e308;
    let t = [1.0 / 3f64.sqrt(), 1.0 / 3f64.sqrt(), -2.0 / 3f64.sqrt()];
    let want: Vec<f64> = t.iter().map(|x| 2.0 * x).collect();
    for (i, got) in all_entry_points(cfg, &batch, &[true, true, false])
        .into_iter()
        .enumerate()
    {
        let got = got.unwrap_or_else(|e| panic!("entry point {i}: {e}"));
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-12, "entry point {i}: {got:?} vs {want:?}");
        }
    }
}

// ---------------------------------------------------------------- W1–W3: plausible zeros

fn one_token_input(keys: &[u32], scores: &[f64]) -> (RolloutBatch, Array2<f64>, Array2<bool>) {
    let batch = RolloutBatch::from_group_keys(keys, scores).unwrap();
    let rewards = Array2::from_shape_vec((scores.len(), 1), scores.to_vec()).unwrap();
    let mask = Array2::from_elem((scores.len(), 1), true);
    (batch, rewards, mask)
}

fn estimate(est: &dyn AdvantageEstimator, keys: &[u32], scores: &[f64]) -> Vec<f64> {
    let (batch, rewards, mask) = one_token_input(keys, scores);
    let input = EstimatorInput::new(&batch)
        .with_token_level_rewards(&rewards)
        .with_response_mask(&mask);
    let out = est
        .estimate(&input)
        .unwrap_or_else(|e| panic!("{}: {e}", est.name()));
    out.advantages.column(0).to_vec()
}

#[test]
fn w1_grpo_and_gdpo_overflowing_variance_give_the_exact_answer() {
    // Scores ±1e155: (±1e155)² = 1e310 overflows, so σ was ∞ and A = ±1e155/∞ = ±0 (a
    // plausible 0). Exact: ±1/√2 (module docs). GDPO whitens ±1/√2 over the two tokens:
    // mean 0, var = (1/2 + 1/2)/(2 + 1e-8)·f32(2/1) ≈ 1, so the output is ±1/√2 to 1e-8.
    for est in [
        &EstimatorConfig::Grpo(GrpoConfig::default()).build().unwrap() as &dyn AdvantageEstimator,
        &*EstimatorConfig::Gdpo(GrpoConfig::default()).build().unwrap(),
    ] {
        let a = estimate(est, &[0, 0], &[1e155, -1e155]);
        assert!((a[0] - HALF_SQRT2).abs() < 1e-7, "{}: {a:?}", est.name());
        assert!((a[1] + HALF_SQRT2).abs() < 1e-7, "{}: {a:?}", est.name());
    }
    // Means that overflow too: [1.5e308, 1.5e308, −1e308] sums to ∞. μ = (2/3)·1e308,
    // deviations (5/6, 5/6, −5/3)·1e308, σ² = (25/36 + 25/36 + 100/36)/2 = 150/72 = 25/12,
    // σ = (5/√12)·1e308 = 1.4434e308: A = (5/6)/(5/√12) = √12/6 = 1/√3, and −2/√3.
    let a = estimate(
        &EstimatorConfig::Grpo(GrpoConfig::default()).build().unwrap(),
        &[0; 3],
        &[1.5e308, 1.5e308, -1e308],
    );
    let w = 1.0 / 3f64.sqrt();
    assert!(
        (a[0] - w).abs() < 1e-12 && (a[2] + 2.0 * w).abs() < 1e-12,
        "{a:?}"
    );
}

#[test]
fn w2_grpo_vectorized_overflowing_f32_variance_gives_the_exact_answer() {
    // ±1e30 in float32: 1e60 overflows f32 (max 3.4e38). Exact: ±1/√2 (σ in f32 is
    // 1.4142135e30, so A = 1e30/1.4142135e30 agrees with 1/√2 to f32 precision).
    let a = estimate(
        &*EstimatorConfig::GrpoVectorized(GrpoConfig::default())
            .build()
            .unwrap(),
        &[0, 0],
        &[1e30, -1e30],
    );
    assert!(
        (a[0] - HALF_SQRT2).abs() < 1e-6 && (a[1] + HALF_SQRT2).abs() < 1e-6,
        "{a:?}"
    );
}

#[test]
fn w3_beacon_paper_overflowing_variance_gives_the_exact_answer() {
    // Terminal rewards ±1e155, one step each, no milestone: A = A^traj = ±1/√2 (was ±0).
    let batch = RolloutBatch::from_blocks(2, &[1, 1], vec![1e155, -1e155]).unwrap();
    for cfg in [BeaconConfig::default(), official(NormMode::MeanStdNorm)] {
        let a = Beacon::new(cfg)
            .unwrap()
            .compute(&batch, &[false, false])
            .unwrap()
            .advantages;
        assert!(
            (a[0] - HALF_SQRT2).abs() < 1e-12 && (a[1] + HALF_SQRT2).abs() < 1e-12,
            "{cfg:?}: {a:?}"
        );
    }
}

#[test]
fn w_gigpo_overflowing_episode_variance_gives_the_exact_answer() {
    // GiGPO's episode term uses the shared group statistics: episode rewards ±1e155 in one
    // task group, mean_std_norm, distinct anchors (singleton step groups: A^S = 0), so
    // A = A^E = ±1/√2 (was ±0).
    let batch = RolloutBatch::from_blocks(2, &[1, 1], vec![1e155, -1e155]).unwrap();
    let cfg = GigpoConfig::default().with_norm(NormMode::MeanStdNorm);
    let est = Gigpo::new(cfg).unwrap();
    let input = EstimatorInput::new(&batch)
        .with_step_rewards(&[0.0, 0.0])
        .with_anchor_obs(&["a", "b"]);
    let a = est.estimate(&input).unwrap().advantages.column(0).to_vec();
    assert!(
        (a[0] - HALF_SQRT2).abs() < 1e-12 && (a[1] + HALF_SQRT2).abs() < 1e-12,
        "{a:?}"
    );
}

// ---------------------------------------------------------------- D1: diagnostics sums

#[test]
fn d1_ccr_ratio_beyond_max_is_a_typed_error() {
    // mean |A| 1e308 over milestone steps / 1e-6 over the others = 1e314: not representable.
    // The old code returned Ok with value == Some(inf).
    let r = credit_concentration(&[1e308, 1e-6], &[true, false], 1e-6);
    assert!(matches!(r, Err(Error::NonFinite { .. })), "{r:?}");
    // Overflowing Σ|A| over milestone steps: 1e308 + 1e308.
    let r = credit_concentration(&[1e308, 1e308, 1.0], &[true, true, false], 1e-6);
    assert!(matches!(r, Err(Error::NonFinite { .. })), "{r:?}");
    // Finite cases are untouched: (2 + 4)/2 over 1.
    let r = credit_concentration(&[2.0, 4.0, -1.0], &[true, true, false], 1e-6).unwrap();
    assert_eq!(r.value, Some(3.0));
}

#[test]
fn d1_egr_overflowing_sums_are_a_typed_error() {
    // Two trajectories share the pair (s, a) with A = 1e308 and −1e308: g⁺ + g⁻ = 2e308
    // overflows the EGR total (the old report held total = inf and EGR = NaN).
    let batch = RolloutBatch::from_blocks(2, &[1, 1], vec![1.0, 0.0]).unwrap();
    let diag = Diagnostics::new(
        &batch,
        &["s", "s"],
        &["a", "a"],
        &[false, false],
        DiagnosticsConfig::default(),
    )
    .unwrap();
    let r = diag.report(&[1e308, -1e308]);
    assert!(matches!(r, Err(Error::NonFinite { .. })), "{r:?}");
    let r = diag.report(&[1.0, -1.0]).unwrap();
    assert_eq!((r.egr.surviving, r.egr.total, r.egr.value), (0.0, 2.0, Some(0.0)));
}

#[test]
fn w_whitening_overflowing_variance_gives_the_exact_answer() {
    // REINFORCE++ whitens the returns over the batch's masked tokens: two one-token rows with
    // rewards ±1e200 have returns ±1e200, Σ(x − μ)² = 2e400 overflows. In units of 1e200:
    // μ = 0, σ² = 2/f32(2 + 1e-8) · f32(2/1) = 2, so the advantages are ±1/√2 (the old code
    // returned Error::NonFinite, verl zeros).
    let est = beacon_rl::estimator::EstimatorConfig::ReinforcePlusPlus(
        beacon_rl::estimator::ReinforcePlusPlusConfig::default().with_discount(1.0),
    )
    .build()
    .unwrap();
    let a = estimate(est.as_ref(), &[0, 1], &[1e200, -1e200]);
    assert!(
        (a[0] - HALF_SQRT2).abs() < 1e-15 && (a[1] + HALF_SQRT2).abs() < 1e-15,
        "{a:?}"
    );
}

#[test]
fn w_whitened_overflow_after_the_last_generated_token_is_reported_there() {
    // The overflow check sees the positions after a row's last generated token too (a
    // whitening pass that kept rows only up to that token, as one experiment did, must not
    // lose them). One row, mask 1 1 0 0, rewards
    // 0 2e305 0 0, values 0, γ = λ = 1.
    // GAE, backwards: t=3, 2 padding: Â = 0. t=1: δ = 2e305 + 0 − 0, Â = 2e305. t=0: δ = 0 +
    // V_next (0) − 0 = 0, Â = 0 + 2e305. REINFORCE++'s returns are the same: 2e305, 2e305, 0, 0.
    // Masked values 2e305, 2e305: μ = 2·2e305 / f32(2) = 2e305, Σ(x − μ)² = 0, scale =
    // 1/√(0 + 1e-8) = 1e4. Whitening every position (verl; REINFORCE++ re-masks after), the
    // masked ones give 0 but t=2 gives (0 − 2e305)·1e4 = −inf: the first non-finite value,
    // row-major index 2, for both estimators.
    let batch = RolloutBatch::from_group_keys(&[0], &[0.0]).unwrap();
    let rewards = ndarray::array![[0.0, 2e305, 0.0, 0.0]];
    let mask = ndarray::array![[true, true, false, false]];
    let values = Array2::<f64>::zeros((1, 4));
    let input = EstimatorInput::new(&batch)
        .with_token_level_rewards(&rewards)
        .with_response_mask(&mask)
        .with_values(&values);
    // A kept workspace that last whitened a batch generated to the end, rewards 0 0 2e305 0:
    // its values (GAE's Â and REINFORCE++'s returns alike) were 2e305 2e305 2e305 0. Had t=2
    // and t=3 come from that call, t=2 would whiten to 0 and the error would name t=3 (a
    // mutation of the experiment that skipped rebuilding them failed here).
    let full = ndarray::array![[0.0, 0.0, 2e305, 0.0]];
    let all = ndarray::array![[true, true, true, true]];
    let before = EstimatorInput::new(&batch)
        .with_token_level_rewards(&full)
        .with_response_mask(&all)
        .with_values(&values);
    for name in ["gae", "reinforce_plus_plus"] {
        let est = common::build(name);
        let mut ws = Workspace::default();
        let mut adv = Array2::<f64>::zeros((1, 4));
        est.estimate_into(&before, (&mut adv).into(), None, &mut ws)
            .unwrap();
        match est.estimate_into(&input, (&mut adv).into(), None, &mut ws) {
            Err(Error::NonFinite { index, value, .. }) => {
                assert_eq!((index, value), (2, f64::NEG_INFINITY), "{name}");
            }
            other => panic!("{name}: {other:?}"),
        }
    }
}

#[test]
fn w_whitening_overflow_fallback_reads_only_this_calls_values() {
    // As W above, with a tail: two rows × 2 tokens, mask 1 0 / 1 0, REINFORCE++ (γ = 1) on
    // rewards 1e200 0 / −1e200 0: returns ±1e200 then 0; Σ(x − μ)² = 2e400 overflows, and
    // the fallback in units of 1e200 gives ±1/√2 at t=0 and the re-masked 0 at t=1. The
    // fallback reads every masked value of this call only: the kept workspace last held a
    // call with rewards 0 1e200 on both rows under a full mask (returns 1e200 1e200). Were
    // its values or mask read at t=1, μ would be (1 + 1 − 1 + 1)/2 = 1 (in units of 1e200)
    // and row 0's advantage 0.
    let batch = RolloutBatch::from_group_keys(&[0, 0], &[0.0, 0.0]).unwrap();
    let before_rewards = ndarray::array![[0.0, 1e200], [0.0, 1e200]];
    let all = ndarray::array![[true, true], [true, true]];
    let rewards = ndarray::array![[1e200, 0.0], [-1e200, 0.0]];
    let mask = ndarray::array![[true, false], [true, false]];
    let est = common::build("reinforce_plus_plus");
    let mut ws = Workspace::default();
    let mut adv = Array2::<f64>::zeros((2, 2));
    let before = EstimatorInput::new(&batch)
        .with_token_level_rewards(&before_rewards)
        .with_response_mask(&all);
    est.estimate_into(&before, (&mut adv).into(), None, &mut ws)
        .unwrap();
    let input = EstimatorInput::new(&batch)
        .with_token_level_rewards(&rewards)
        .with_response_mask(&mask);
    est.estimate_into(&input, (&mut adv).into(), None, &mut ws)
        .unwrap();
    assert!((adv[[0, 0]] - HALF_SQRT2).abs() < 1e-15, "{adv:?}");
    assert!((adv[[1, 0]] + HALF_SQRT2).abs() < 1e-15, "{adv:?}");
    assert_eq!((adv[[0, 1]], adv[[1, 1]]), (0.0, 0.0));
}

// ---------------------------------------------------------------- F1–F3: f32 outputs

/// The smallest `f64` that rounds to an infinite `f32`: f32::MAX = 2^128 − 2^104 has an odd
/// significand, so the midpoint 2^128 − 2^103 between it and 2^128 rounds to the even
/// neighbour 2^128, which is ∞ in `f32`. The `f64` just below rounds to f32::MAX.
fn f32_overflow_threshold() -> f64 {
    2f64.powi(128) - 2f64.powi(103)
}

/// The next smaller `f64` (`f64::next_down` needs Rust 1.86; the crate's MSRV is 1.75).
fn below(x: f64) -> f64 {
    f64::from_bits(x.to_bits() - 1)
}

#[test]
fn f1_the_threshold_is_where_f32_rounding_overflows() {
    let t = f32_overflow_threshold();
    assert_eq!(t as f32, f32::INFINITY);
    assert_eq!(below(t) as f32, f32::MAX);
}

#[test]
fn f1_broadcast_and_spans_into_f32_refuse_a_value_that_rounds_to_infinity() {
    // The old code wrote ∞ into the f32 buffer and returned Ok. Row 0 carries the overflowing
    // value, written at its tokens 1 and 2 (token 0 not generated): index 0·3 + 1 = 1.
    let t = f32_overflow_threshold();
    let mask = ndarray::array![[false, true, true], [true, false, false]];
    let mut out = Array2::<f32>::zeros((2, 3));
    let want = Err(Error::NonFinite {
        what: "token advantages (overflows f32)",
        index: 1,
        value: f64::INFINITY,
    });
    assert_eq!(
        beacon_rl::tensor::broadcast_into(&[t, 1.0], &mask, &mut out),
        want
    );
    // Row 1's value negated, on its token 0 (index 3); row 0 not generated at all: nothing
    // infinite is written, so the value past f32::MAX is not an error.
    let mask1 = ndarray::array![[false, false, false], [true, false, false]];
    assert_eq!(
        beacon_rl::tensor::broadcast_into(&[t, -t], &mask1, &mut out),
        Err(Error::NonFinite {
            what: "token advantages (overflows f32)",
            index: 3,
            value: f64::NEG_INFINITY,
        })
    );
    beacon_rl::tensor::broadcast_into(&[t, 1.0], &mask1, &mut out).unwrap();
    assert_eq!(out, ndarray::array![[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]);
    // Just below the threshold: f32::MAX, finite.
    beacon_rl::tensor::broadcast_into(&[below(t), 1.0], &mask, &mut out).unwrap();
    assert_eq!(out[[0, 1]], f32::MAX);
    // The same value into f64 is representable.
    let mut out64 = Array2::<f64>::zeros((2, 3));
    beacon_rl::tensor::broadcast_into(&[t, 1.0], &mask, &mut out64).unwrap();
    assert_eq!(out64[[0, 2]], t);

    // Spans: step 1's span covers tokens 1..3 of sequence row 0 (index 1).
    use beacon_rl::tensor::{spans_into, TokenSpan};
    let spans = [
        TokenSpan {
            seq: 0,
            step: 1,
            start: 1,
            end: 3,
        },
        TokenSpan {
            seq: 1,
            step: 0,
            start: 0,
            end: 1,
        },
    ];
    assert_eq!(spans_into(&[1.0, t], &spans, &mask, &mut out), want);
    spans_into(&[1.0, below(t)], &spans, &mask, &mut out).unwrap();
}

#[test]
fn f2_estimators_into_f32_refuse_outputs_that_round_to_infinity() {
    // Two rows of one group scoring ±s with s = 2^128 − 2^103 (F1): the f64 outputs are
    // finite, the f32 ones were ∞ in an Ok. Mean 0, so
    // - RLOO: A = s − (−s) = 2s on row 0 (one token: index 0), −2s on row 1;
    // - ReMax (baseline 0): advantages = returns = ±s; the advantages are written first;
    // - REINFORCE++ (γ = 1): returns ±s (the whitened advantages, ±1/√2, fit);
    // - GAE (values 0, γ = λ = 1): returns = advantages before whitening = ±s.
    let s = f32_overflow_threshold();
    let batch = RolloutBatch::from_group_keys(&[0, 0], &[s, -s]).unwrap();
    let rewards = ndarray::array![[s], [-s]];
    let mask = ndarray::array![[true], [true]];
    let zeros = ndarray::array![[0.0], [0.0]];
    let input = EstimatorInput::new(&batch)
        .with_token_level_rewards(&rewards)
        .with_response_mask(&mask)
        .with_values(&zeros)
        .with_reward_baselines(&[0.0, 0.0]);
    for (name, what, value) in [
        ("rloo", "advantages (overflows f32)", f64::INFINITY),
        ("remax", "advantages (overflows f32)", f64::INFINITY),
        ("reinforce_plus_plus", "returns (overflows f32)", f64::INFINITY),
        ("gae", "returns (overflows f32)", f64::INFINITY),
    ] {
        let est = common::build(name);
        // f64: finite, Ok.
        let out = est.estimate(&input).unwrap();
        assert!(out.advantages.iter().all(|x| x.is_finite()), "{name}");
        let (mut a, mut r) = (Array2::<f32>::zeros((2, 1)), Array2::<f32>::zeros((2, 1)));
        let returns = est.has_returns().then_some((&mut r).into());
        let err = est
            .estimate_into(&input, (&mut a).into(), returns, &mut Workspace::default())
            .unwrap_err();
        assert_eq!(
            err,
            Error::NonFinite {
                what,
                index: 0,
                value
            },
            "{name}"
        );
    }
}

#[test]
fn f4_gae_into_f32_refuses_whitened_uncounted_tokens_past_f32_max() {
    // GAE writes the whitened value of every token, also of those the statistics did not count
    // (verl does not re-mask). One row, mask [1, 1, 0, 0], rewards [0, r, 0, 0], values 0,
    // γ = λ = 1: Â = [r, r, 0, 0] (the masked tail carries the initial 0), μ = r, σ² = 0, so
    // scale = 1/√(0 + 1e-8) ≈ 1e4; counted tokens whiten to 0, the tail to −r·1e4. For
    // r = 1e36 that is about −1e40: finite in f64, past f32::MAX (≈ 3.4e38), so into f32 it is
    // an error at index 2 (it was an Ok holding −∞; found by fuzzing). For r = 1e33 the tail's
    // −1e37 fits and the f32 output is the f64 one rounded.
    let mask = ndarray::array![[true, true, false, false]];
    let values = Array2::<f64>::zeros((1, 4));
    let est = common::build("gae");
    for (r, fits) in [(1e36, false), (1e33, true)] {
        let batch = RolloutBatch::from_group_keys(&[0], &[r]).unwrap();
        let rewards = ndarray::array![[0.0, r, 0.0, 0.0]];
        let input = EstimatorInput::new(&batch)
            .with_token_level_rewards(&rewards)
            .with_response_mask(&mask)
            .with_values(&values);
        let out = est.estimate(&input).unwrap();
        let tail = out.advantages[[0, 2]];
        assert_eq!(out.advantages[[0, 0]], 0.0);
        assert!(
            tail.is_finite() && (tail / (-r * 1e4) - 1.0).abs() < 1e-6,
            "{tail:e}"
        );
        let (mut a, mut ret) = (Array2::<f32>::zeros((1, 4)), Array2::<f32>::zeros((1, 4)));
        let got = est.estimate_into(
            &input,
            (&mut a).into(),
            Some((&mut ret).into()),
            &mut Workspace::default(),
        );
        if fits {
            got.unwrap();
            assert_eq!(a, out.advantages.mapv(|x| x as f32));
        } else {
            assert_eq!(
                got,
                Err(Error::NonFinite {
                    what: "advantages (overflows f32)",
                    index: 2,
                    value: f64::NEG_INFINITY
                })
            );
        }
    }
}

#[test]
fn f3_step_estimators_into_f32_refuse_outputs_that_round_to_infinity() {
    // BEACON, official flavour (mean_norm: A = R − μ), no milestones: two trajectories of one
    // step scoring ±s give A = ±s. Into f32, with a mask (broadcast) and without (one column).
    let s = f32_overflow_threshold();
    let batch = RolloutBatch::from_blocks(2, &[1, 1], vec![s, -s]).unwrap();
    let flags = [false, false];
    let mask = ndarray::array![[false, true], [true, true]];
    let est = common::build("beacon_official");
    let base = EstimatorInput::new(&batch).with_milestones(&flags);
    assert_eq!(est.estimate(&base).unwrap().advantages[[0, 0]], s);
    for (input, dim, index) in [(base.with_response_mask(&mask), (2, 2), 1), (base, (2, 1), 0)] {
        let mut a = Array2::<f32>::zeros(dim);
        let err = est
            .estimate_into(&input, (&mut a).into(), None, &mut Workspace::default())
            .unwrap_err();
        assert_eq!(
            err,
            Error::NonFinite {
                what: "token advantages (overflows f32)",
                index,
                value: f64::INFINITY
            }
        );
    }
}

#[test]
fn s1_the_token_functions_refuse_non_finite_step_values() {
    // `broadcast_into`, `broadcast` and `spans_into` wrote a NaN or ∞ step value onto the
    // generated tokens and returned Ok (the estimators pass finite values; a caller's own
    // step values were not checked).
    use beacon_rl::tensor::{broadcast, broadcast_into, spans_into, TokenSpan};
    let mask = ndarray::array![[true, false], [true, true]];
    let mut out = Array2::<f64>::zeros((2, 2));
    for bad in [f64::NAN, f64::INFINITY] {
        let want: Result<(), Error> = Err(Error::NonFinite {
            what: "step_values",
            index: 1,
            value: bad,
        });
        // (NaN ≠ NaN: compare the Debug text.)
        let same = |got: Result<(), Error>| format!("{got:?}") == format!("{want:?}");
        assert!(same(broadcast_into(&[0.5, bad], &mask, &mut out)), "{bad}");
        assert!(same(broadcast(&[0.5, bad], &mask).map(drop)), "{bad}");
        let spans = [TokenSpan {
            seq: 1,
            step: 1,
            start: 0,
            end: 2,
        }];
        assert!(same(spans_into(&[0.5, bad], &spans, &mask, &mut out)), "{bad}");
    }
}
