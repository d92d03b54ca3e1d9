//! Regression tests of the training testbed. Each pins a measured claim
//! that a specific break of BEACON's computation turns false:
//!
//! | test | fails when (each checked by editing the code and running this file) |
//! |---|---|
//! | BEACON beats GRPO at K = 4 | the shaping is zeroed or its sign flipped |
//! | the trajectory term is needed at K = 2 | the trajectory term is dropped; the milestone flags arrive one step late; the shaping is zeroed or flipped |
//! | the paper's b_k ignores quitting, completion credit does not | b_k is not subtracted (the paper preset then learns the decoy with doors-only flags); the shaping is zeroed or flipped |
//! | a text detector trains identically | the environment's milestone flags arrive one step late |
use beacon_rl_testbed::{auc, train, EpisodeText, KeyChain, Method, MilestoneSource, TrainerConfig};

/// Small and fast: 60 iterations, the sweep's shared rate, no held-out evaluation.
fn config(seed: u64) -> TrainerConfig {
    TrainerConfig::default()
        .with_iterations(60)
        .with_learning_rate(100.0)
        .with_eval_episodes(0)
        .with_seed(seed)
}

/// AUC of `method` on `env` for seeds 0..8.
fn aucs(env: &KeyChain, method: Method, source: fn() -> MilestoneSource) -> Vec<f64> {
    (0..8)
        .map(|seed| auc(&train(env, method, &mut source(), &config(seed)).unwrap().success))
        .collect()
}

fn count(xs: &[f64], pred: impl Fn(f64) -> bool) -> usize {
    xs.iter().filter(|&&x| pred(x)).count()
}

#[test]
fn beacon_trains_faster_than_grpo_at_the_longest_horizon() {
    // K = 4 rooms (H = 16): the sweep measures BEACON above GRPO on 10/10 seeds here.
    let env = KeyChain::new(4, 4).unwrap();
    let b = aucs(&env, Method::Beacon, || MilestoneSource::Env);
    let g = aucs(&env, Method::Grpo, || MilestoneSource::Env);
    let wins = b.iter().zip(&g).filter(|(b, g)| b > g).count();
    assert!(
        wins >= 7,
        "BEACON beat GRPO on only {wins}/8 seeds: {b:?} vs {g:?}"
    );
}

#[test]
fn the_trajectory_term_is_needed_at_two_rooms() {
    // K = 2: BEACON's AUC is 0.93 ± 0.02 over these seeds, its "w/o trajectory-level
    // advantage" ablation 0.26 ± 0.20 (the second door's segment ends in success, so the
    // segment term alone cannot tell a fast success from a fast failure of the budget).
    let env = KeyChain::new(2, 4).unwrap();
    let b = aucs(&env, Method::Beacon, || MilestoneSource::Env);
    assert!(count(&b, |x| x > 0.8) >= 7, "BEACON at K = 2: {b:?}");
}

#[test]
fn the_paper_baseline_ignores_quitting_and_completion_credit_does_not() {
    // The decoy variant with only the real doors flagged, K = 4: the trapdoor ends the
    // episode without a milestone. The paper's b_k averages over the rollouts that completed
    // the segment, so reaching a door slowly earns negative segment credit and quitting earns
    // 0: the policy learns to quit (AUC 0 on every seed). Counting the rollouts that entered
    // the segment and quit with return 0 (`beacon_completion`) learns it (0.87 ± 0.01).
    let env = KeyChain::with_decoy(4, 4).unwrap();
    let paper = aucs(&env, Method::Beacon, || MilestoneSource::EnvDoors);
    let fixed = aucs(&env, Method::BeaconCompletion, || MilestoneSource::EnvDoors);
    assert!(count(&paper, |x| x < 0.05) >= 7, "paper BEACON: {paper:?}");
    assert!(count(&fixed, |x| x > 0.6) >= 7, "completion credit: {fixed:?}");
}

/// A text-only detector: a step is a milestone when its next observation names a room beyond
/// every room seen so far in the episode (or the goal). It sees what an LLM trainer would.
fn first_entry(group: &[EpisodeText<'_>]) -> Vec<Vec<bool>> {
    let room = |o: &str| -> Option<usize> { o.strip_prefix("room ")?.split(':').next()?.parse().ok() };
    group
        .iter()
        .map(|ep| {
            let mut best = 0;
            ep.steps
                .iter()
                .map(|s| {
                    let next = if s.next_observation.starts_with("outside") {
                        Some(usize::MAX)
                    } else {
                        room(s.next_observation)
                    };
                    let new = next.is_some_and(|r| r > best);
                    best = best.max(next.unwrap_or(0));
                    new
                })
                .collect()
        })
        .collect()
}

#[test]
fn a_text_detector_that_finds_the_true_milestones_trains_identically() {
    let env = KeyChain::new(3, 4).unwrap();
    let c = config(3).with_iterations(15);
    let by_env = train(&env, Method::Beacon, &mut MilestoneSource::Env, &c).unwrap();
    let by_text = train(
        &env,
        Method::Beacon,
        &mut MilestoneSource::custom(first_entry),
        &c,
    )
    .unwrap();
    assert_eq!(by_env, by_text);
    // And the milestones matter: without them BEACON is trajectory-level GRPO.
    let none = train(&env, Method::Beacon, &mut MilestoneSource::None, &c).unwrap();
    let traj = train(&env, Method::GrpoTrajectory, &mut MilestoneSource::Env, &c).unwrap();
    assert_eq!(none, traj);
    assert_ne!(none, by_env);
}

#[test]
fn a_labeler_with_the_wrong_shape_is_an_error() {
    let env = KeyChain::new(2, 4).unwrap();
    let c = config(0).with_iterations(1);
    let mut short = MilestoneSource::custom(|_: &[EpisodeText<'_>]| vec![vec![true]]);
    assert!(train(&env, Method::Beacon, &mut short, &c).is_err());
    let bad_lr = c.with_learning_rate(f64::NAN);
    assert!(train(&env, Method::Grpo, &mut MilestoneSource::Env, &bad_lr).is_err());
}

#[test]
fn a_batch_size_past_the_limit_is_an_invalid_config() {
    // G × tasks overflows usize: the group offsets k · G overflowed (a panic) before the
    // config check covered the product.
    let env = KeyChain::new(2, 4).unwrap();
    let huge = TrainerConfig::default()
        .with_group_size(usize::MAX)
        .with_tasks_per_iteration(2)
        .with_iterations(1);
    let err = train(&env, Method::Grpo, &mut MilestoneSource::Env, &huge).unwrap_err();
    assert!(
        matches!(
            err,
            beacon_rl::Error::InvalidConfig {
                name: "tasks_per_iteration",
                ..
            }
        ),
        "{err:?}"
    );
}
