//! The step-row entry point, `estimate_steps_into`: every estimator that has one keeps the
//! batch's promise of one episode reward (`RolloutBatch`, "One episode reward"). When
//! `token_level_rewards` are given as well, each row's token sum must equal its trajectory's
//! R(τ) in the batch; a disagreement is `TerminalRewardMismatch`, never a silent choice of one.

use crate::common;
use beacon_rl::estimator::{AdvantageEstimator, EstimatorConfig, EstimatorInput, Workspace};
use beacon_rl::{Error, RolloutBatch};
use ndarray::array;

#[test]
fn every_step_level_estimator_checks_token_rewards_against_the_batch() {
    // Trajectory a (rows 0, 2) has R = 1, b (rows 1, 3) R = 0; in `disagree`, row 3's tokens
    // sum to 0.25 + 0.25 = 0.5.
    let batch = RolloutBatch::from_row_keys(&[0; 4], &["a", "b", "a", "b"], &[1.0, 0.0, 1.0, 0.0]).unwrap();
    let agree = array![[0.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.0, 0.0]];
    let disagree = array![[0.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.25, 0.25]];
    let input = EstimatorInput::new(&batch)
        .with_milestones(&[true, false, false, true])
        .with_step_rewards(&[0.0; 4])
        .with_turn_values(&[0.0; 4])
        .with_anchor_ids(&[1, 2, 1, 3])
        .with_tree_parents(&[-1, 0, -1, 2])
        .with_step_entropy(&[0.5, 1.0, 1.5, 2.0]);
    let mut ws = Workspace::default();
    let mut step_level = Vec::new();
    for name in EstimatorConfig::NAMES {
        let est = name.parse::<EstimatorConfig>().unwrap().build().unwrap();
        let mut plain = [f64::NAN; 4];
        match est.estimate_steps_into(&input, &mut plain, &mut ws) {
            Err(Error::NotStepLevel { .. }) => continue,
            other => other.unwrap(),
        }
        step_level.push(*name);
        // Agreeing token rewards change nothing.
        let mut with_tokens = [f64::NAN; 4];
        est.estimate_steps_into(&input.with_token_level_rewards(&agree), &mut with_tokens, &mut ws)
            .unwrap();
        assert_eq!(with_tokens.map(f64::to_bits), plain.map(f64::to_bits), "{name}");
        // Disagreeing ones are named.
        assert_eq!(
            est.estimate_steps_into(
                &input.with_token_level_rewards(&disagree),
                &mut with_tokens,
                &mut ws
            ),
            Err(Error::TerminalRewardMismatch {
                row: 3,
                batch: 0.0,
                tokens: 0.5
            }),
            "{name}"
        );
        // As are token rewards with the wrong number of rows.
        assert_eq!(
            est.estimate_steps_into(
                &input.with_token_level_rewards(agree.slice(ndarray::s![..3, ..])),
                &mut with_tokens,
                &mut ws
            ),
            Err(Error::LengthMismatch {
                what: "token_level_rewards rows",
                expected: 4,
                actual: 3
            }),
            "{name}"
        );
    }
    // The documented step-level set.
    assert_eq!(step_level, common::STEP_ESTIMATORS);
}

/// The step path checks shapes before it reads a value, in one order for every estimator
/// (`estimate_steps_into`'s docs): `NotStepLevel` for the token-level ones; then the output's
/// length; the estimator's own columns (present, then their lengths); the length of
/// `row_scores`; the rows of `token_level_rewards`; and only then values (`row_scores` finite,
/// token sums against the rows' scores, then the estimator's own value checks). Every pair of
/// faults is tried: the earlier one must win.
#[test]
fn step_path_checks_shapes_before_values_in_one_order() {
    let batch = RolloutBatch::from_row_keys(&[0; 4], &["a", "b", "a", "b"], &[1.0, 0.0, 1.0, 0.0]).unwrap();
    let agree = array![[0.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.0, 0.0]];
    // Row 3's tokens sum to 0.5; its trajectory's R(τ) is 0.
    let disagree = array![[0.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.25, 0.25]];
    let nan_step = [0.0, f64::NAN, 0.0, 0.0];
    let entropy = [0.5, 1.0, 1.5, 2.0];
    // Row scores equal to R(τ), so the base input is valid for every estimator.
    let (row_scores, nan_scores) = ([1.0, 0.0, 1.0, 0.0], [1.0, f64::NAN, 1.0, 0.0]);
    let base = EstimatorInput::new(&batch)
        .with_milestones(&[true, false, false, true])
        .with_step_rewards(&[0.0; 4])
        .with_turn_values(&[0.0; 4])
        .with_anchor_ids(&[1, 2, 1, 3])
        .with_tree_parents(&[-1, 0, -1, 2])
        .with_step_entropy(&entropy)
        .with_row_scores(&row_scores)
        .with_token_level_rewards(&agree);

    type Fault<'a> = Box<dyn Fn(&mut EstimatorInput<'a>, &mut usize) + 'a>;
    // In the documented order. Each fault only edits what it names, so any two compose.
    let faults: Vec<(&str, Fault<'_>)> = vec![
        ("output short", Box::new(|_, out_len| *out_len = 3)),
        (
            "own column missing",
            Box::new(|i, _| {
                i.milestones = None;
                i.step_rewards = None;
                i.step_entropy = None;
            }),
        ),
        (
            "own column short",
            Box::new(|i, _| {
                i.milestones = i.milestones.map(|m| &m[..3]);
                i.anchor_ids = i.anchor_ids.map(|a| &a[..3]);
                i.step_entropy = i.step_entropy.map(|e| &e[..3]);
            }),
        ),
        (
            "row_scores short",
            Box::new(|i, _| i.row_scores = i.row_scores.map(|s| &s[..3])),
        ),
        (
            "token rows",
            Box::new(|i, _| i.token_level_rewards = Some(agree.slice(ndarray::s![..3, ..]).into())),
        ),
        (
            "row_scores non-finite",
            Box::new(|i, _| {
                let len = i.row_scores.map_or(4, <[f64]>::len);
                i.row_scores = Some(&nan_scores[..len]);
            }),
        ),
        (
            "token sums disagree",
            Box::new(|i, _| {
                let rows = i.token_level_rewards.map_or(4, |t| t.dim().0);
                i.token_level_rewards = Some(disagree.slice(ndarray::s![..rows, ..]).into());
            }),
        ),
        (
            "own values",
            Box::new(|i, _| {
                i.step_rewards = i.step_rewards.map(|_| &nan_step[..]);
                i.step_entropy = i.step_entropy.map(|e| &nan_step[..e.len()]);
            }),
        ),
    ];
    // The error each fault gives alone, for estimator `name` (None: it does not read that).
    let alone = |name: &str, fault: usize| -> Option<Error> {
        let beacon = name.starts_with("beacon");
        let own = beacon || name == "gigpo";
        // The turn-level estimators' own column is `step_rewards` alone.
        let turn_level = ["step_reinforce", "mt_grpo", "turn_gae", "tree_grpo"].contains(&name);
        match fault {
            0 => Some(Error::OutputShape {
                what: "step advantages",
                expected: (4, 1),
                actual: (3, 1),
            }),
            1 if beacon => Some(Error::MissingInput("milestones")),
            // `empg`'s own column is `step_entropy`; its values are checked after GRPO's.
            1 if name == "empg" => Some(Error::MissingInput("step_entropy")),
            2 if name == "empg" => Some(Error::LengthMismatch {
                what: "step_entropy",
                expected: 4,
                actual: 3,
            }),
            1 if own || turn_level => Some(Error::MissingInput("step_rewards")),
            2 if own => Some(Error::LengthMismatch {
                what: if beacon { "milestone flags" } else { "anchors" },
                expected: 4,
                actual: 3,
            }),
            3 => Some(Error::LengthMismatch {
                what: "row_scores",
                expected: 4,
                actual: 3,
            }),
            4 => Some(Error::LengthMismatch {
                what: "token_level_rewards rows",
                expected: 4,
                actual: 3,
            }),
            5 => Some(Error::NonFinite {
                what: "row_scores",
                index: 1,
                value: f64::NAN,
            }),
            6 => Some(Error::RowScoreMismatch {
                row: 3,
                row_score: 0.0,
                tokens: 0.5,
            }),
            7 if name == "gigpo" || turn_level => Some(Error::NonFinite {
                what: "step_rewards",
                index: 1,
                value: f64::NAN,
            }),
            7 if name == "empg" => Some(Error::NonFinite {
                what: "step_entropy",
                index: 1,
                value: f64::NAN,
            }),
            _ => None,
        }
    };
    let mut ws = Workspace::default();
    let mut checked = 0;
    for name in EstimatorConfig::NAMES {
        let est = name.parse::<EstimatorConfig>().unwrap().build().unwrap();
        let step_level = !matches!(
            est.estimate_steps_into(&base, &mut [0.0; 4], &mut ws),
            Err(Error::NotStepLevel { .. })
        );
        for a in 0..faults.len() {
            for b in a..faults.len() {
                let (mut input, mut out_len) = (base, 4);
                (faults[a].1)(&mut input, &mut out_len);
                (faults[b].1)(&mut input, &mut out_len);
                let mut out = vec![0.0; out_len];
                let got = est.estimate_steps_into(&input, &mut out, &mut ws);
                let want = match step_level {
                    false => Some(Error::NotStepLevel {
                        estimator: est.name(),
                    }),
                    true => alone(name, a).or_else(|| alone(name, b)),
                };
                // Debug strings: NaN values compare unequal as numbers.
                assert_eq!(
                    format!("{:?}", got.err()),
                    format!("{want:?}"),
                    "{name}: {} + {}",
                    faults[a].0,
                    faults[b].0
                );
                checked += 1;
            }
        }
    }
    assert_eq!(checked, EstimatorConfig::NAMES.len() * 36);
}
