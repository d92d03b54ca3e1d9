//! Constructed cases for the stopping bias of turn-level baselines (`docs/turn-level.md`):
//! a group that is the exact distribution of a policy that stops after one turn or takes a
//! second, with the returns of stopping and of continuing equal, so the true policy gradient
//! of the stop decision is 0. The estimators' advantages on the first turn, summed over the
//! continuing rollouts minus over the stopping ones, estimate that gradient (up to the
//! factor p(1 − p) of the score function).

use beacon_rl::estimator::{
    AdvantageEstimator, EstimatorConfig, EstimatorInput, MtGrpoConfig, TurnBaseline, Workspace,
};
use beacon_rl::RolloutBatch;

/// Step rows of one group (trajectories of turn rewards), and the first-turn advantage of
/// each trajectory.
fn first_turns(est: &dyn AdvantageEstimator, trajs: &[&[f64]]) -> Vec<f64> {
    let (mut keys, mut rewards, mut first) = (vec![], vec![], vec![]);
    for (j, t) in trajs.iter().enumerate() {
        first.push(keys.len());
        for &r in *t {
            keys.push(j);
            rewards.push(r);
        }
    }
    let batch = RolloutBatch::from_row_keys(&vec![0; keys.len()], &keys, &vec![0.0; keys.len()]).unwrap();
    let mut adv = vec![f64::NAN; keys.len()];
    est.estimate_steps_into(
        &EstimatorInput::new(&batch).with_step_rewards(&rewards),
        &mut adv,
        &mut Workspace::default(),
    )
    .unwrap();
    first.iter().map(|&r| adv[r]).collect()
}

#[test]
fn per_turn_index_normalisation_is_biased_and_reward_to_go_is_not() {
    // Stop: outcome 1 or 0. Continue: a tool turn scored 1, then outcome 0 or −1. Returns
    // 1, 0 either way: continuing is worth exactly as much as stopping.
    let group: [&[f64]; 4] = [&[1.0], &[0.0], &[1.0, 0.0], &[1.0, -1.0]];
    let decision = |a: &[f64]| (a[2] + a[3]) - (a[0] + a[1]);

    let authors = EstimatorConfig::MtGrpo(MtGrpoConfig::default()).build().unwrap();
    let biased = decision(&first_turns(&authors, &group));
    // By hand (ε = 1e-4): stoppers get A^C = ±0.5/(√(1/3) + ε), which cancel; continuers
    // A^O + A^T = 0 + 0.5/(√(1/3) + ε) and −1/(√(2/3) + ε) + 0.5/(√(1/3) + ε).
    let eps = 1e-4;
    let want = 2.0 * 0.5 / ((1.0f64 / 3.0).sqrt() + eps) - 1.0 / ((2.0f64 / 3.0).sqrt() + eps);
    assert!((biased - want).abs() < 1e-12, "{biased} vs {want}");
    assert!(biased > 0.25, "a hidden bonus for taking another turn: {biased}");

    let unbiased =
        EstimatorConfig::MtGrpo(MtGrpoConfig::default().with_turn_baseline(TurnBaseline::RewardToGo))
            .build()
            .unwrap();
    let a = first_turns(&unbiased, &group);
    // Reward-to-go 1, 0, 1, 0 against leave-one-out means: ±2/3, summing to 0 per action.
    assert_eq!(decision(&a), 0.0);

    // Make continuing truly better by 0.5 per rollout (outcomes 0.5 and −0.5): the unbiased
    // option sees exactly that difference, scaled by the leave-one-out factor n/(n − 1).
    let better: [&[f64]; 4] = [&[1.0], &[0.0], &[1.0, 0.5], &[1.0, -0.5]];
    let d = decision(&first_turns(&unbiased, &better));
    assert!((d - 2.0 * 0.5 * 4.0 / 3.0).abs() < 1e-12, "{d}");
}

#[test]
fn beacon_segment_term_is_blind_to_quitting() {
    // Four rollouts of two steps with the same outcome (R = 0, so the trajectory term is 0):
    // two reach a milestone on their second step, two quit without it. Under the paper's
    // equations the completers' segment baseline is their own mean shaped reward and the
    // quitters' steps get A_seg = 0: every advantage is 0, although completing earned the
    // shaped reward R_ms (γ = 1: 1 per step) and quitting none.
    let batch = RolloutBatch::from_row_keys(&[0; 8], &[0, 0, 1, 1, 2, 2, 3, 3], &[0.0; 8]).unwrap();
    let milestones = [false, true, false, true, false, false, false, false];
    let est = EstimatorConfig::Beacon(
        beacon_rl::estimator::BeaconConfig::default()
            .with_segment_decay(1.0)
            .with_milestone_reward(1.0),
    )
    .build()
    .unwrap();
    let mut adv = [f64::NAN; 8];
    est.estimate_steps_into(
        &EstimatorInput::new(&batch).with_milestones(&milestones),
        &mut adv,
        &mut Workspace::default(),
    )
    .unwrap();
    assert_eq!(adv, [0.0; 8]);
}
