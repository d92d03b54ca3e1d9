//! Heap allocations per call through `Box<dyn AdvantageEstimator>`, counted by a global
//! allocator (this test binary only): after one warm-up call with a kept [`Workspace`] and
//! kept output buffers, `estimate_into` and `estimate_steps_into` allocate nothing, for every
//! estimator in `EstimatorConfig::NAMES` and the random Table 3 rows, with `f64`/`bool` and
//! with `f32`/`i64` inputs.

use beacon_rl::estimator::{AdvantageEstimator, EstimatorConfig, EstimatorInput, Workspace};
use beacon_rl::RolloutBatch;
use ndarray::Array2;

// The shared counting allocator; this binary counts the measuring thread only (the test
// harness allocates on other threads meanwhile).
#[path = "support/counting.rs"]
mod counting;

#[test]
fn the_counter_counts() {
    assert_eq!(
        counting::this_thread(|| drop(std::hint::black_box(vec![1u8; 10]))),
        1
    );
    assert_eq!(counting::this_thread(|| ()), 0);
}

#[test]
fn zero_allocations_after_the_first_call() {
    // 40 rows: 4 groups, each 2 or 3 trajectories of several steps, interleaved.
    let rows = 40;
    let cols = 16;
    let groups: Vec<usize> = (0..rows).map(|r| r % 4).collect();
    let trajs: Vec<usize> = (0..rows)
        .map(|r| (r % 4) * 10 + (r / 4) % (2 + r % 4 % 2))
        .collect();
    let terminal: Vec<f64> = trajs.iter().map(|&j| (j % 3) as f64 * 0.5).collect();
    let batch = RolloutBatch::from_row_keys(&groups, &trajs, &terminal).unwrap();
    let rewards = Array2::from_shape_fn((rows, cols), |(r, t)| ((r * 7 + t * 3) % 11) as f64 / 11.0 - 0.3);
    let rewards32 = rewards.mapv(|x| x as f32);
    let values = rewards.mapv(|x| 0.5 - x);
    let log_probs = rewards.mapv(|x| -x.abs() - 0.1);
    let sum_pi_sq = rewards.mapv(|x| x.abs());
    let (values32, log_probs32, sum_pi_sq32) = (
        values.mapv(|x| x as f32),
        log_probs.mapv(|x| x as f32),
        sum_pi_sq.mapv(|x| x as f32),
    );
    let mask = Array2::from_shape_fn((rows, cols), |(r, t)| t < 2 + (r * 5) % (cols - 1));
    let mask64 = mask.mapv(i64::from);
    let baselines: Vec<f64> = (0..rows).map(|r| r as f64 * 0.01).collect();
    let milestones: Vec<bool> = (0..rows).map(|r| r % 3 == 0).collect();
    let step_rewards: Vec<f64> = (0..rows).map(|r| (r % 2) as f64).collect();
    let anchors: Vec<&str> = (0..rows).map(|r| ["kitchen", "hall", "garden"][r % 3]).collect();
    // tree_grpo: each group's later trajectories branch off its first (rows 0-3).
    let parents: Vec<i64> = (0..rows)
        .map(|r| if trajs[r] % 10 == 0 { -1 } else { (r % 4) as i64 })
        .collect();
    let entropy: Vec<f64> = (0..rows).map(|r| (r % 5) as f64 * 0.3).collect();
    let f64_input = EstimatorInput::new(&batch)
        .with_tree_parents(&parents)
        .with_step_entropy(&entropy)
        .with_reward_baselines(&baselines)
        .with_milestones(&milestones)
        .with_step_rewards(&step_rewards)
        .with_anchor_obs(&anchors)
        .with_token_level_rewards(&rewards)
        .with_values(&values)
        .with_old_log_probs(&log_probs)
        .with_sum_pi_squared(&sum_pi_sq)
        .with_response_mask(&mask);
    // The same input with the trainer's dtypes (setters replace a column).
    let f32_input = f64_input
        .with_token_level_rewards(&rewards32)
        .with_values(&values32)
        .with_old_log_probs(&log_probs32)
        .with_sum_pi_squared(&sum_pi_sq32)
        .with_response_mask(&mask64);

    let mut report = Vec::new();
    // Every estimator by name, and the Table 3 rows that draw new flags on every call.
    let random_rows = [
        "beacon:ablation=milestone_dropout",
        "beacon_official:ablation=random_partition",
    ];
    for name in EstimatorConfig::NAMES.iter().chain(&random_rows) {
        let est: Box<dyn AdvantageEstimator> = name.parse::<EstimatorConfig>().unwrap().build().unwrap();
        let mut ws = Workspace::default();
        let mut adv64 = Array2::<f64>::zeros((rows, cols));
        let mut ret64 = Array2::<f64>::zeros((rows, cols));
        let mut adv32 = Array2::<f32>::zeros((rows, cols));
        let mut step = vec![0.0; rows];
        // BEACON, GiGPO and the turn-level estimators check token rewards against the batch's
        // episode rewards on step rows: token rewards that disagree are an error, so they get
        // none.
        let (mut f64_input, mut f32_input) = (f64_input, f32_input);
        if name.starts_with("beacon")
            || [
                "gigpo",
                "step_reinforce",
                "mt_grpo",
                "turn_gae",
                "tree_grpo",
                "empg",
            ]
            .contains(name)
        {
            f64_input.token_level_rewards = None;
            f32_input.token_level_rewards = None;
        }
        let step_level = est.estimate_steps_into(&f64_input, &mut step, &mut ws).is_ok();
        let mut calls = |ws: &mut Workspace| {
            est.estimate_into(&f64_input, (&mut adv64).into(), Some((&mut ret64).into()), ws)
                .unwrap();
            est.estimate_into(&f32_input, (&mut adv32).into(), None, ws)
                .unwrap();
            if step_level {
                est.estimate_steps_into(&f32_input, &mut step, ws).unwrap();
            }
        };
        calls(&mut ws);
        let n = counting::this_thread(|| calls(&mut ws));
        report.push((*name, n));
    }
    let allocating: Vec<_> = report.iter().filter(|(_, n)| *n > 0).collect();
    assert!(
        allocating.is_empty(),
        "allocations on the second call: {allocating:?} (all: {report:?})"
    );
}

#[test]
fn an_input_refused_by_estimate_allocates_nothing() {
    // `estimate` allocates its rows × L outputs: a call whose input is refused must not pay
    // for them (nor, for a `Lengths` mask's claimed L, ask the allocator for them). First
    // every column missing: every estimator needs one. Then token rewards and a mask of their
    // shape: the estimators with returns need a further column (values, baselines, log
    // probabilities) and allocated their returns before finding it missing.
    let batch = RolloutBatch::from_group_keys(&[0, 0, 1], &[1.0, 0.0, 0.5]).unwrap();
    let lengths = [1, 2, 0];
    let bare = EstimatorInput::new(&batch).with_response_mask(beacon_rl::tensor::MaskView::Lengths {
        lengths: &lengths,
        cols: 4,
    });
    let rewards = Array2::from_shape_fn((3, 4), |(r, t)| (r + t) as f64);
    let mask = Array2::from_elem((3, 4), true);
    let tokens = EstimatorInput::new(&batch)
        .with_token_level_rewards(&rewards)
        .with_response_mask(&mask);
    let mut allocating = Vec::new();
    let mut refused_with_tokens = Vec::new();
    for name in EstimatorConfig::NAMES {
        let est: Box<dyn AdvantageEstimator> = name.parse::<EstimatorConfig>().unwrap().build().unwrap();
        for (i, input) in [bare, tokens].iter().enumerate() {
            let mut result = None;
            let n = counting::this_thread(|| result = Some(est.estimate(input).map(drop)));
            match result {
                Some(Err(beacon_rl::Error::MissingInput(_))) => {
                    if i == 1 {
                        refused_with_tokens.push(*name);
                    }
                    if n > 0 {
                        allocating.push((*name, i, n));
                    }
                }
                other => assert!(i == 1, "{name}: {other:?}"),
            }
        }
    }
    assert!(
        allocating.is_empty(),
        "allocations before refusing: {allocating:?}"
    );
    for name in [
        "gae",
        "remax",
        "optimal_token_baseline",
        "tir_optimal_token_baseline",
    ] {
        assert!(
            refused_with_tokens.contains(&name),
            "{name}: {refused_with_tokens:?}"
        );
    }
}

#[test]
fn turn_level_multi_turn_rows_allocate_nothing_after_the_first_call() {
    // verl's multi-turn layout (one dialogue per row, no `step_rewards`): the turns are read
    // from the mask's runs, which the batch above (step rows) does not exercise. 24 rows of 40
    // tokens, 1–3 turns each, in groups of 4; both dtype sets.
    let (rows, cols) = (24, 40);
    let groups: Vec<usize> = (0..rows).map(|r| r / 4).collect();
    let batch = RolloutBatch::from_group_keys(&groups, &vec![0.0; rows]).unwrap();
    let mask = Array2::from_shape_fn((rows, cols), |(r, t)| {
        let turns = 1 + r % 3;
        (0..turns).any(|k| t >= 2 + 12 * k && t < 2 + 12 * k + 5 + (r + k) % 6)
    });
    let rewards = Array2::from_shape_fn((rows, cols), |(r, t)| if (r + t) % 7 == 0 { 0.5 } else { 0.0 });
    let values = rewards.mapv(|x| 0.25 - x);
    // tree_grpo: in each group, rows 1-3 branch off the group's first row.
    let parents: Vec<i64> = (0..rows)
        .map(|r| if r % 4 == 0 { -1 } else { (r - r % 4) as i64 })
        .collect();
    let (mask64, rewards32, values32) = (
        mask.mapv(i64::from),
        rewards.mapv(|x| x as f32),
        values.mapv(|x| x as f32),
    );
    let f64_input = EstimatorInput::new(&batch)
        .with_token_level_rewards(&rewards)
        .with_values(&values)
        .with_response_mask(&mask)
        .with_tree_parents(&parents);
    let f32_input = f64_input
        .with_token_level_rewards(&rewards32)
        .with_values(&values32)
        .with_response_mask(&mask64);
    let mut report = Vec::new();
    for name in ["step_reinforce", "mt_grpo", "turn_gae", "tree_grpo"] {
        let est: Box<dyn AdvantageEstimator> = name.parse::<EstimatorConfig>().unwrap().build().unwrap();
        let mut ws = Workspace::default();
        let mut adv64 = Array2::<f64>::zeros((rows, cols));
        let mut ret64 = Array2::<f64>::zeros((rows, cols));
        let mut adv32 = Array2::<f32>::zeros((rows, cols));
        let mut calls = |ws: &mut Workspace| {
            est.estimate_into(&f64_input, (&mut adv64).into(), Some((&mut ret64).into()), ws)
                .unwrap();
            est.estimate_into(&f32_input, (&mut adv32).into(), None, ws)
                .unwrap();
        };
        calls(&mut ws);
        report.push((name, counting::this_thread(|| calls(&mut ws))));
    }
    assert!(
        report.iter().all(|&(_, n)| n == 0),
        "allocations on the second call: {report:?}"
    );
}
