//! `EstimatorInput::with_row_scores`: each row's own score on the step paths, as verl-agent
//! reads it (the row's `token_level_rewards` sum, which its invalid-action penalty makes differ
//! within a trajectory). Hand-computed cases for every step estimator, the paper flavour's
//! error, the validation errors, and two properties: row scores equal to R(τ) change no bit,
//! and every step estimator reads the row scores rather than the batch's R(τ).

use beacon_rl::estimator::{
    AdvantageEstimator, EstimatorConfig, EstimatorInput, GrpoConfig, GrpoStatistics, Workspace,
};
use beacon_rl::{Error, RolloutBatch};
use ndarray::array;
use proptest::prelude::*;

use crate::common::{self, build};

/// One task, trajectory "a" (rows 0, 1; R = 1, its first step an invalid action penalised by
/// 0.1) and "b" (row 2; R = 0): row scores 0.9, 1.0, 0.0.
const SCORES: [f64; 3] = [0.9, 1.0, 0.0];

fn batch() -> RolloutBatch {
    RolloutBatch::from_row_keys(&["t"; 3], &["a", "a", "b"], &[1.0, 1.0, 0.0]).unwrap()
}

/// Row statistics of SCORES: μ = (0.9 + 1.0 + 0.0) / 3 = 0.63333; deviations 0.26667,
/// 0.36667, −0.63333, squares 0.071111 + 0.134444 + 0.401111 = 0.606667; unbiased
/// σ = √(0.606667 / 2) = 0.550757.
fn row_mean_std() -> (f64, f64) {
    let mean = (0.9 + 1.0 + 0.0) / 3.0;
    let ss = (0.9f64 - mean).powi(2) + (1.0f64 - mean).powi(2) + (0.0f64 - mean).powi(2);
    (mean, (ss / 2.0).sqrt())
}

fn steps(est: &dyn AdvantageEstimator, input: &EstimatorInput<'_>) -> Result<Vec<f64>, Error> {
    let mut out = vec![f64::NAN; input.batch.num_steps()];
    est.estimate_steps_into(input, &mut out, &mut Workspace::default())?;
    Ok(out)
}

fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (r, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol, "{what} row {r}: got {g}, want {w}");
    }
}

#[test]
fn row_statistics_hand_computed() {
    let batch = batch();
    let input = EstimatorInput::new(&batch).with_row_scores(&SCORES);
    let (mean, std) = row_mean_std();
    assert!((mean - 0.633333333).abs() < 1e-9 && (std - 0.550757055).abs() < 1e-9);

    // grpo: (s − μ) / (σ + 1e-6) = 0.484181, 0.665749, −1.149930.
    let grpo: Vec<f64> = SCORES.iter().map(|s| (s - mean) / (std + 1e-6)).collect();
    assert_close(&grpo, &[0.484181, 0.665749, -1.149930], 1e-6, "grpo arithmetic");
    assert_close(&steps(&*build("grpo"), &input).unwrap(), &grpo, 1e-12, "grpo");
    // grpo_vectorized: the same in float32 statistics.
    assert_close(
        &steps(&*build("grpo_vectorized"), &input).unwrap(),
        &grpo,
        1e-6,
        "grpo_vectorized",
    );

    // rloo: (n·s − Σs) / (n − 1) with n = 3, Σs = 1.9: 0.4, 0.55, −0.95.
    let rloo = [(2.7 - 1.9) / 2.0, (3.0 - 1.9) / 2.0, (0.0 - 1.9) / 2.0];
    assert_close(&rloo, &[0.4, 0.55, -0.95], 1e-12, "rloo arithmetic");
    for name in ["rloo", "rloo_vectorized"] {
        assert_close(&steps(&*build(name), &input).unwrap(), &rloo, 1e-12, name);
    }

    // gigpo (mean_norm), step rewards 0: every return is 0, so A_S = 0 and A = A_E = s − μ:
    // 0.26667, 0.36667, −0.63333.
    let episode: Vec<f64> = SCORES.iter().map(|s| s - mean).collect();
    let gigpo_input = input.with_step_rewards(&[0.0; 3]).with_anchor_ids(&[1, 2, 1]);
    assert_close(
        &steps(&*build("gigpo"), &gigpo_input).unwrap(),
        &episode,
        1e-12,
        "gigpo",
    );

    // beacon_official (mean_norm, R_ms = 10, γ = 0.95, λ = w = 1), milestone at a's row 1:
    // a's segment 0 is rows 0, 1 with shaped rewards 10·0.95 = 9.5 and 10; b's row 2 is
    // unfinished (r = 0) in the same segment group (uid, 0): mean 19.5 / 3 = 6.5, so
    // A^seg = 3.0, 3.5, −6.5. A^traj = s − μ (row statistics of the row scores). A = sum:
    // 3.26667, 3.86667, −7.13333.
    let official_input = input.with_milestones(&[false, true, false]);
    let seg = [9.5 - 6.5, 10.0 - 6.5, 0.0 - 6.5];
    let official: Vec<f64> = episode.iter().zip(seg).map(|(t, s)| t + s).collect();
    assert_close(
        &official,
        &[3.266667, 3.866667, -7.133333],
        1e-6,
        "official arithmetic",
    );
    assert_close(
        &steps(&*build("beacon_official"), &official_input).unwrap(),
        &official,
        1e-12,
        "beacon_official",
    );
    // The ablation in official flavour, without its segment term: A^traj alone.
    let ablation = build("beacon_official:ablation=no_segment_advantage");
    assert_close(
        &steps(&*ablation, &official_input).unwrap(),
        &episode,
        1e-12,
        "ablation",
    );
    // An ablation that redraws the flags (dropout p = 1 drops a's milestone: every row is
    // unfinished, r = 0, A^seg = 0 − 0) keeps the row scores: A^traj alone again.
    let dropout = build("beacon_official:ablation=milestone_dropout(p=1)");
    assert_close(
        &steps(&*dropout, &official_input).unwrap(),
        &episode,
        1e-12,
        "dropout",
    );
    // Without row scores the trajectory term reads R(τ) (row mean 2/3): A^traj = 1/3, 1/3,
    // −2/3, so the row scores are what moved it.
    let plain = EstimatorInput::new(&batch).with_milestones(&[false, true, false]);
    assert_close(
        &steps(&*ablation, &plain).unwrap(),
        &[1.0 / 3.0, 1.0 / 3.0, -2.0 / 3.0],
        1e-12,
        "ablation without row scores",
    );
}

#[test]
fn grpo_trajectory_statistics_take_each_trajectorys_first_row() {
    let batch = batch();
    let grpo = EstimatorConfig::Grpo(GrpoConfig::default().with_statistics(GrpoStatistics::Trajectories))
        .build()
        .unwrap();
    // First rows: a → row 0 (0.9), b → row 2 (0.0). μ = 0.45, σ = √((0.45² + 0.45²) / 1) =
    // 0.636396; each row normalised with its own score: 0.45 / (σ + ε) = 0.707106,
    // 0.55 / (σ + ε) = 0.864240, −0.707106 (to 7 digits: 0.7071057, 0.8642403).
    let (mean, std) = (0.45, (2.0 * 0.45f64 * 0.45).sqrt());
    let want: Vec<f64> = SCORES.iter().map(|s| (s - mean) / (std + 1e-6)).collect();
    assert_close(&want, &[0.7071057, 0.8642403, -0.7071057], 1e-6, "arithmetic");
    let input = EstimatorInput::new(&batch).with_row_scores(&SCORES);
    assert_close(&steps(&grpo, &input).unwrap(), &want, 1e-12, "trajectories");

    // The caller's row order decides "first": trajectory a's rows swapped in the caller's
    // order make 1.0 its first row. μ = 0.5, σ = √(0.5) = 0.707107: 0.9 → 0.4 / (σ + ε).
    let swapped = RolloutBatch::from_row_keys(&["t"; 3], &["a", "a", "b"], &[1.0, 1.0, 0.0]).unwrap();
    let scores = [1.0, 0.9, 0.0];
    let (mean, std) = (0.5, 0.5f64.sqrt());
    let want: Vec<f64> = scores.iter().map(|s| (s - mean) / (std + 1e-6)).collect();
    let input = EstimatorInput::new(&swapped).with_row_scores(&scores);
    assert_close(
        &steps(&grpo, &input).unwrap(),
        &want,
        1e-12,
        "first row in caller order",
    );

    // The token-level path agrees: token sums equal to the row scores.
    let tokens = array![[0.0, 1.0], [0.0, 0.9], [0.0, 0.0]];
    let mask = array![[true, true], [true, true], [true, false]];
    let tok_input = input.with_token_level_rewards(&tokens).with_response_mask(&mask);
    let out = grpo.estimate(&tok_input).unwrap();
    assert_close(&out.advantages.column(0).to_vec(), &want, 1e-12, "token path");
    // Without row scores, rows of a trajectory that differ stay an error there.
    let no_rows = EstimatorInput::new(&swapped)
        .with_token_level_rewards(&tokens)
        .with_response_mask(&mask);
    assert_eq!(
        grpo.estimate(&no_rows),
        Err(Error::InconsistentTerminalReward {
            row: 1,
            expected: 1.0,
            value: 0.9
        })
    );
}

#[test]
fn paper_flavour_needs_the_rows_of_a_trajectory_to_agree() {
    let batch = batch();
    let input = EstimatorInput::new(&batch)
        .with_row_scores(&SCORES)
        .with_milestones(&[false, true, false]);
    // Row 1 (1.0) differs from its trajectory's first row, row 0 (0.9).
    let want = Err(Error::InconsistentTerminalReward {
        row: 1,
        expected: 0.9,
        value: 1.0,
    });
    for name in [
        "beacon",
        "beacon:ablation=full",
        "beacon:ablation=no_segment_advantage",
    ] {
        assert_eq!(steps(&*build(name), &input), want, "{name}");
    }
    // Agreeing rows are read: row scores 0.5, 0.5, 0 (batch R(τ) 1, 1, 0). Trajectory term
    // over trajectories: μ = 0.25, σ = √(2 · 0.25²) = 0.353553, A^traj(a) = 0.25 / (σ + ε)
    // = 0.707105, A^traj(b) = −0.707105. Segment term (R_ms = 1, γ = 0.95): a's segment 0
    // (rows 0, 1) has r = 0.95, 1.0 and is alone in G_0, b_0 = 1.95 / 2 = 0.975, so
    // A^seg = −0.025, 0.025; b has no completed segment: 0.
    let agree = [0.5, 0.5, 0.0];
    let input = input.with_row_scores(&agree);
    let a = 0.25 / ((2.0 * 0.25f64 * 0.25).sqrt() + 1e-6);
    assert!((a - 0.707105).abs() < 1e-6);
    let want = [a - 0.025, a + 0.025, -a];
    assert_close(&steps(&*build("beacon"), &input).unwrap(), &want, 1e-12, "beacon");
}

#[test]
fn row_scores_are_validated() {
    let batch = batch();
    let tokens = array![[0.0, 0.9], [0.0, 1.0], [0.0, 0.0]];
    for name in ["grpo", "rloo", "gigpo", "beacon_official"] {
        let est = build(name);
        let input = EstimatorInput::new(&batch)
            .with_milestones(&[false; 3])
            .with_step_rewards(&[0.0; 3])
            .with_anchor_ids(&[1, 1, 1]);
        assert_eq!(
            steps(&*est, &input.with_row_scores(&SCORES[..2])),
            Err(Error::LengthMismatch {
                what: "row_scores",
                expected: 3,
                actual: 2
            }),
            "{name}"
        );
        let inf = [0.9, f64::INFINITY, 0.0];
        assert_eq!(
            steps(&*est, &input.with_row_scores(&inf)),
            Err(Error::NonFinite {
                what: "row_scores",
                index: 1,
                value: f64::INFINITY
            }),
            "{name}"
        );
        // Token sums equal to the row scores pass (they differ from R(τ) = 1 on row 0) ...
        let with_tokens = input.with_row_scores(&SCORES).with_token_level_rewards(&tokens);
        assert!(steps(&*est, &with_tokens).is_ok(), "{name}");
        // ... and a row whose sum is not its row score is named.
        let other = [0.9, 1.0, 0.25];
        assert_eq!(
            steps(&*est, &with_tokens.with_row_scores(&other)),
            Err(Error::RowScoreMismatch {
                row: 2,
                row_score: 0.25,
                tokens: 0.0
            }),
            "{name}"
        );
        // Without row scores the same tokens disagree with the batch's R(τ) on row 0.
        let mut no_rows = with_tokens;
        no_rows.row_scores = None;
        assert_eq!(
            steps(&*est, &no_rows),
            Err(Error::TerminalRewardMismatch {
                row: 0,
                batch: 1.0,
                tokens: 0.9
            }),
            "{name}"
        );
    }
    // The outcome estimators' token path checks them after the mask: length, finite, sums.
    let mask = array![[true, true], [true, true], [true, true]];
    let input = EstimatorInput::new(&batch)
        .with_token_level_rewards(&tokens)
        .with_response_mask(&mask);
    for name in [
        "grpo",
        "rloo",
        "opo",
        "gpg",
        "reinforce_plus_plus_baseline",
        "grpo_passk",
    ] {
        let est = build(name);
        assert!(est.estimate(&input.with_row_scores(&SCORES)).is_ok(), "{name}");
        assert_eq!(
            est.estimate(&input.with_row_scores(&[0.9, 1.0, 0.5])),
            Err(Error::RowScoreMismatch {
                row: 2,
                row_score: 0.5,
                tokens: 0.0
            }),
            "{name}"
        );
        assert!(
            matches!(
                est.estimate(&input.with_row_scores(&SCORES[..1])),
                Err(Error::LengthMismatch {
                    what: "row_scores",
                    ..
                })
            ),
            "{name}"
        );
    }
}

/// Paper-flavour consistency comes after the token sums (a value check of the estimator's own,
/// like GiGPO's step rewards), and after every shape.
#[test]
fn paper_consistency_is_checked_after_the_token_sums_and_shapes() {
    let batch = batch();
    let beacon = build("beacon");
    let input = EstimatorInput::new(&batch)
        .with_milestones(&[false; 3])
        .with_row_scores(&SCORES);
    let bad_sums = array![[0.0, 0.9], [0.0, 1.0], [0.0, 0.5]];
    assert!(matches!(
        steps(&*beacon, &input.with_token_level_rewards(&bad_sums)),
        Err(Error::RowScoreMismatch { row: 2, .. })
    ));
    assert!(matches!(
        steps(&*beacon, &input.with_milestones(&[false; 2])),
        Err(Error::LengthMismatch { .. })
    ));
}

/// Every step-level estimator, plus configurations whose step paths differ (trajectory
/// statistics, `mean_std_norm`).
fn step_estimators() -> Vec<Box<dyn AdvantageEstimator>> {
    let mut v: Vec<Box<dyn AdvantageEstimator>> = common::STEP_ESTIMATORS
        .iter()
        .chain(&["beacon_official:ablation=no_temporal_decay"])
        .map(|n| build(n))
        .collect();
    v.push(
        EstimatorConfig::Grpo(GrpoConfig::default().with_statistics(GrpoStatistics::Trajectories))
            .build()
            .unwrap(),
    );
    let mut official = beacon_rl::estimator::BeaconConfig::official();
    official.flavour = beacon_rl::estimator::BeaconFlavour::Official {
        norm: beacon_rl::estimator::NormMode::MeanStdNorm,
    };
    v.push(EstimatorConfig::Beacon(official).build().unwrap());
    let mut gigpo = beacon_rl::estimator::GigpoConfig::default();
    gigpo.norm = beacon_rl::estimator::NormMode::MeanStdNorm;
    v.push(EstimatorConfig::Gigpo(gigpo).build().unwrap());
    v
}

/// A random step batch: `(uid, traj)` keys per row (trajectories interleaved), one reward per
/// trajectory, milestones, step rewards and anchors.
/// uid, traj, row rewards, milestones, step rewards, anchor ids.
type StepBatch = (Vec<u8>, Vec<u8>, Vec<f64>, Vec<bool>, Vec<f64>, Vec<u64>);

fn step_batch() -> impl Strategy<Value = StepBatch> {
    (1usize..14).prop_flat_map(|rows| {
        (
            proptest::collection::vec(0u8..6, rows),
            proptest::collection::vec(prop_oneof![Just(0.0), Just(1.0), -2.0..2.0f64], 6),
            proptest::collection::vec(any::<bool>(), rows),
            proptest::collection::vec(0.0..1.0f64, rows),
            proptest::collection::vec(0u64..3, rows),
        )
            .prop_map(|(traj, rewards, flags, step, anchors)| {
                // Trajectories 0–2 in group 0, 3–5 in group 1.
                let uid: Vec<u8> = traj.iter().map(|t| t / 3).collect();
                let row_rewards: Vec<f64> = traj.iter().map(|&t| rewards[t as usize]).collect();
                (uid, traj, row_rewards, flags, step, anchors)
            })
    })
}

proptest! {
    /// Row scores equal to each row's R(τ) change no bit, and a batch whose R(τ) are all 0
    /// given those row scores gives the same bits too: every step estimator reads the row
    /// scores, none the batch's R(τ), when they are given.
    #[test]
    fn row_scores_equal_to_r_change_no_bit((uid, traj, rewards, flags, step, anchors) in step_batch()) {
        let batch = RolloutBatch::from_row_keys(&uid, &traj, &rewards).unwrap();
        let zeros = RolloutBatch::from_row_keys(&uid, &traj, &vec![0.0; rewards.len()]).unwrap();
        let parents = vec![-1i64; flags.len()];
        let columns = |b| {
            EstimatorInput::new(b).with_milestones(&flags).with_step_rewards(&step).with_turn_values(&step).with_anchor_ids(&anchors).with_tree_parents(&parents).with_step_entropy(&step)
        };
        for est in step_estimators() {
            let plain = steps(&*est, &columns(&batch)).unwrap();
            let same = steps(&*est, &columns(&batch).with_row_scores(&rewards)).unwrap();
            let read = steps(&*est, &columns(&zeros).with_row_scores(&rewards)).unwrap();
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            prop_assert_eq!(bits(&same), bits(&plain), "{}", est.name());
            prop_assert_eq!(bits(&read), bits(&plain), "{}", est.name());
        }
    }

    /// Differing row scores against a transcription of verl-agent's / the BEACON release's
    /// `episode_norm_reward` (see [`episode_norm_reward`]): gigpo's episode term and
    /// beacon_official's trajectory term (no milestones, zero step rewards: the other terms
    /// are 0), grpo with row and with trajectory statistics.
    #[test]
    fn differing_row_scores_match_the_release_row_loop(
        (uid, traj, rewards, _, _, anchors) in step_batch(),
        penalties in proptest::collection::vec(prop_oneof![Just(0.0), Just(0.1)], 14),
    ) {
        let batch = RolloutBatch::from_row_keys(&uid, &traj, &rewards).unwrap();
        let scores: Vec<f64> = rewards.iter().zip(&penalties).map(|(r, p)| r - p).collect();
        let (flags, step) = (vec![false; scores.len()], vec![0.0; scores.len()]);
        let input = EstimatorInput::new(&batch)
            .with_row_scores(&scores)
            .with_milestones(&flags)
            .with_step_rewards(&step)
            .with_anchor_ids(&anchors);
        let close = |got: &[f64], want: &[f64]| {
            got.iter().zip(want).all(|(g, w)| (g - w).abs() <= 1e-9 * w.abs().max(1.0))
        };
        let mean_only = episode_norm_reward(&scores, &uid, &traj, true, true);
        for name in ["gigpo", "beacon_official"] {
            let got = steps(&*build(name), &input).unwrap();
            prop_assert!(close(&got, &mean_only), "{}: {:?} vs {:?}", name, got, mean_only);
        }
        // grpo's singleton divides by float32(1 + ε) (verl's), the release by 1 + ε: 5e-8
        // relative apart, inside 1e-9·max(1, |A|) only for |A| < 0.02, so compare groups of
        // two rows or more exactly and singletons loosely.
        for (cross, est) in [
            (true, EstimatorConfig::Grpo(GrpoConfig::default()).build().unwrap()),
            (false, EstimatorConfig::Grpo(GrpoConfig::default().with_statistics(GrpoStatistics::Trajectories)).build().unwrap()),
        ] {
            let got = steps(&est, &input).unwrap();
            let want = episode_norm_reward(&scores, &uid, &traj, false, cross);
            prop_assert!(
                got.iter().zip(&want).all(|(g, w)| (g - w).abs() <= 1e-6 * w.abs().max(1.0)),
                "grpo cross={}: {:?} vs {:?}", cross, got, want
            );
        }
    }
}

/// A transcription of `episode_norm_reward` from the BEACON release
/// (`migpo/core_migpo.py`, lines 124–183; its docstring: "Identical to GiGPO's
/// episode_norm_reward", verl-agent's `gigpo/core_gigpo.py`), in f64, written from the Python and not
/// from this crate: `scores` are the rows' `token_level_rewards` sums; with
/// `compute_mean_std_cross_steps` every row enters its uid's list, else only the first row
/// (row order) of each `(uid, traj)` pair (`seen_pairs`); a list of one gives μ = 0, σ = 1,
/// else `torch.mean` and `torch.std` (unbiased); every row's own score is normalised.
fn episode_norm_reward(
    scores: &[f64],
    index: &[u8],
    traj: &[u8],
    remove_std: bool,
    cross_steps: bool,
) -> Vec<f64> {
    use std::collections::{HashMap, HashSet};
    let eps = 1e-6;
    let mut id2score: HashMap<u8, Vec<f64>> = HashMap::new();
    let mut seen = HashSet::new();
    for i in 0..scores.len() {
        if seen.contains(&(index[i], traj[i])) {
            continue;
        }
        id2score.entry(index[i]).or_default().push(scores[i]);
        if !cross_steps {
            seen.insert((index[i], traj[i]));
        }
    }
    let stats: HashMap<u8, (f64, f64)> = id2score
        .iter()
        .map(|(&k, v)| {
            if v.len() == 1 {
                (k, (0.0, 1.0))
            } else {
                let n = v.len() as f64;
                let mean = v.iter().sum::<f64>() / n;
                let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0);
                (k, (mean, var.sqrt()))
            }
        })
        .collect();
    (0..scores.len())
        .map(|i| {
            let (mean, std) = stats[&index[i]];
            if remove_std {
                scores[i] - mean
            } else {
                (scores[i] - mean) / (std + eps)
            }
        })
        .collect()
}
