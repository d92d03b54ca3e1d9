//! The step-row entry point, `estimate_steps_into`: every estimator that has one keeps the
//! batch's promise of one episode reward (`RolloutBatch`, "One episode reward"). When
//! `token_level_rewards` are given as well, each row's token sum must equal its trajectory's
//! R(τ) in the batch; a disagreement is `EpisodeRewardMismatch`, never a silent choice of one.

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
        .with_anchor_ids(&[1, 2, 1, 3]);
    let mut ws = Workspace::new();
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
            Err(Error::EpisodeRewardMismatch {
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
    // The documented step-level set (estimate_steps_into's docs): BEACON, GiGPO, the ablation
    // and the outcome estimators on step rows.
    assert_eq!(
        step_level,
        [
            "grpo",
            "grpo_vectorized",
            "rloo",
            "rloo_vectorized",
            "gigpo",
            "beacon",
            "beacon_official",
            "beacon_ablation"
        ]
    );
}
