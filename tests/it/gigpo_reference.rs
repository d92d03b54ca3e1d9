//! GiGPO against a plain row-loop reference, bit for bit.
//!
//! The reference below is the peer's algorithm written the obvious way: one pass over the rows
//! in the caller's order with a batch-wide map for the step groups, every sum accumulated in
//! caller row order. The estimator interns anchors group by group (linear time); these tests pin
//! that the reorganisation changes no bit of any output, on interleaved batches, for text and
//! integer anchors, both modes and both groupings.

use std::collections::HashMap;

use crate::common::SplitMix64;
use crate::difflib_reference::ratio;
use beacon_rl::estimator::{Gigpo, GigpoConfig, GigpoOutput, NormMode, StepGrouping};
use beacon_rl::RolloutBatch;

struct Case {
    uid: Vec<u64>,
    traj: Vec<u64>,
    episode: Vec<f64>,
    rewards: Vec<f64>,
    anchors: Vec<String>,
    anchor_ids: Vec<u64>,
}

/// `groups` tasks of 1..=5 trajectories of 1..=7 steps; rows of all trajectories shuffled
/// (step order within a trajectory kept). Anchors from a pool of near-duplicate texts.
fn case(seed: u64, groups: usize) -> Case {
    let mut rng = SplitMix64::new(seed);
    let mut below = |n: u64| (rng.next_u64() % n) as usize;
    let mut trajs: Vec<(u64, u64, f64, usize)> = Vec::new();
    let mut next_traj = 100;
    for g in 0..groups {
        for _ in 0..1 + below(5) {
            let score = [0.0, 1.0, 0.3, 0.7][below(4)];
            trajs.push((g as u64 * 7 + 3, next_traj, score, 1 + below(7)));
            next_traj += 13;
        }
    }
    // Interleave: repeatedly emit the next step of a random unfinished trajectory.
    let mut left: Vec<usize> = trajs.iter().map(|t| t.3).collect();
    let total: usize = left.iter().sum();
    let mut c = Case {
        uid: vec![],
        traj: vec![],
        episode: vec![],
        rewards: vec![],
        anchors: vec![],
        anchor_ids: vec![],
    };
    while c.uid.len() < total {
        let j = below(trajs.len() as u64);
        if left[j] == 0 {
            continue;
        }
        left[j] -= 1;
        let (g, t, score, _) = trajs[j];
        c.uid.push(g);
        c.traj.push(t);
        c.episode.push(score);
        c.rewards.push([0.0, 1.0, 0.1, -0.25, 0.3][below(5)]);
        let state = below(6);
        let digit = below(2);
        c.anchors.push(format!(
            "You are at cabinet {state}. You see a mug {digit} and a spoon."
        ));
        c.anchor_ids.push((state * 2 + digit) as u64 * 0x9e37_79b9);
    }
    c
}

#[derive(Default)]
struct Stats {
    n: usize,
    sum: f64,
    min: f64,
    max: f64,
    m2: f64,
}

/// Mean clamped to [min, max] and unbiased std, sums in the order of `values`.
fn stats(values: &[f64]) -> (usize, f64, f64) {
    let mut s = Stats {
        min: f64::INFINITY,
        max: f64::NEG_INFINITY,
        ..Stats::default()
    };
    for &x in values {
        s.n += 1;
        s.sum += x;
        s.min = s.min.min(x);
        s.max = s.max.max(x);
    }
    let mean = (s.sum / s.n as f64).clamp(s.min, s.max);
    for &x in values {
        s.m2 += (x - mean) * (x - mean);
    }
    let std = if s.n > 1 {
        (s.m2 / (s.n - 1) as f64).sqrt()
    } else {
        0.0
    };
    (s.n, mean, std)
}

fn norm(mode: NormMode, x: f64, mean: f64, std: f64, eps: f64) -> f64 {
    match mode {
        NormMode::MeanNorm => x - mean,
        NormMode::MeanStdNorm => (x - mean) / (std + eps),
    }
}

// The reference reads like the peer's Python: index loops over rows on purpose.
#[allow(clippy::needless_range_loop)]
fn reference(cfg: &GigpoConfig, c: &Case, by_id: bool) -> Reference {
    let rows = c.uid.len();
    // Step returns, backwards over each trajectory's rows.
    let mut ret = vec![0.0; rows];
    let mut running: HashMap<u64, f64> = HashMap::new();
    for r in (0..rows).rev() {
        let acc = running.entry(c.traj[r]).or_insert(0.0);
        *acc = c.rewards[r] + cfg.step_decay * *acc;
        ret[r] = *acc;
    }
    // Episode term over the rows of each uid, in row order.
    let mut by_uid: HashMap<u64, Vec<f64>> = HashMap::new();
    for r in 0..rows {
        by_uid.entry(c.uid[r]).or_default().push(c.episode[r]);
    }
    let ep: Vec<f64> = (0..rows)
        .map(|r| {
            let (n, mean, std) = stats(&by_uid[&c.uid[r]]);
            let (mean, std) = if n == 1 { (0.0, 1.0) } else { (mean, std) };
            norm(cfg.norm, c.episode[r], mean, std, cfg.std_eps)
        })
        .collect();
    // Step groups, labels by first appearance; similarity against each cluster's first member.
    let mut labels = vec![0usize; rows];
    let mut exact: HashMap<(u64, String), usize> = HashMap::new();
    let mut clusters: HashMap<u64, Vec<(usize, String)>> = HashMap::new();
    let mut next = 0;
    for r in 0..rows {
        let key = if by_id {
            c.anchor_ids[r].to_string()
        } else {
            c.anchors[r].clone()
        };
        labels[r] = match cfg.grouping {
            StepGrouping::Exact => *exact.entry((c.uid[r], key)).or_insert_with(|| {
                next += 1;
                next - 1
            }),
            StepGrouping::Similarity { threshold } => {
                let list = clusters.entry(c.uid[r]).or_default();
                match list.iter().find(|(_, rep)| ratio(&key, rep) >= threshold) {
                    Some(&(label, _)) => label,
                    None => {
                        list.push((next, key));
                        next += 1;
                        next - 1
                    }
                }
            }
        };
    }
    let mut members: Vec<Vec<f64>> = vec![Vec::new(); next];
    for r in 0..rows {
        members[labels[r]].push(ret[r]);
    }
    let step: Vec<f64> = (0..rows)
        .map(|r| {
            let (n, mean, std) = stats(&members[labels[r]]);
            if n == 1 {
                0.0
            } else {
                norm(cfg.norm, ret[r], mean, std, cfg.std_eps)
            }
        })
        .collect();
    Reference {
        advantages: (0..rows)
            .map(|r| ep[r] + cfg.step_advantage_weight * step[r])
            .collect(),
        episode_advantages: ep,
        step_advantages: step,
        step_returns: ret,
        step_groups: labels,
        num_step_groups: next,
    }
}

fn bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The reference's result, field for field [`GigpoOutput`]'s (which callers cannot build:
/// it is `#[non_exhaustive]`).
struct Reference {
    advantages: Vec<f64>,
    episode_advantages: Vec<f64>,
    step_advantages: Vec<f64>,
    step_returns: Vec<f64>,
    step_groups: Vec<usize>,
    num_step_groups: usize,
}

fn assert_same(got: &GigpoOutput, want: &Reference, what: &str) {
    assert_eq!(
        bits(&got.step_returns),
        bits(&want.step_returns),
        "{what}: returns"
    );
    assert_eq!(
        bits(&got.episode_advantages),
        bits(&want.episode_advantages),
        "{what}: episode"
    );
    assert_eq!(got.step_groups, want.step_groups, "{what}: step groups");
    assert_eq!(got.num_step_groups, want.num_step_groups, "{what}: count");
    assert_eq!(
        bits(&got.step_advantages),
        bits(&want.step_advantages),
        "{what}: step"
    );
    assert_eq!(
        bits(&got.advantages),
        bits(&want.advantages),
        "{what}: advantages"
    );
}

fn configs() -> Vec<GigpoConfig> {
    let mut out = Vec::new();
    for mode in [NormMode::MeanNorm, NormMode::MeanStdNorm] {
        for grouping in [StepGrouping::Exact, StepGrouping::Similarity { threshold: 0.95 }] {
            out.push(
                GigpoConfig::default()
                    .with_norm(mode)
                    .with_grouping(grouping)
                    .with_step_decay(0.9)
                    .with_step_advantage_weight(0.7),
            );
        }
    }
    out
}

#[test]
fn text_anchors_match_the_row_loop_reference_bit_for_bit() {
    for seed in 0..40 {
        let c = case(seed, 1 + (seed as usize % 9));
        let batch = RolloutBatch::from_row_keys(&c.uid, &c.traj, &c.episode).unwrap();
        for cfg in configs() {
            let g = Gigpo::new(cfg).unwrap();
            let out = g.compute(&batch, &c.rewards, &c.anchors).unwrap();
            assert_same(&out, &reference(&cfg, &c, false), &format!("seed {seed} {cfg:?}"));
        }
    }
}

#[test]
fn integer_anchors_match_the_row_loop_reference_bit_for_bit() {
    for seed in 100..140 {
        let c = case(seed, 1 + (seed as usize % 11));
        let batch = RolloutBatch::from_row_keys(&c.uid, &c.traj, &c.episode).unwrap();
        for cfg in configs()
            .into_iter()
            .filter(|c| c.grouping == StepGrouping::Exact)
        {
            let g = Gigpo::new(cfg).unwrap();
            let out = g.compute_by_key(&batch, &c.rewards, &c.anchor_ids).unwrap();
            assert_same(&out, &reference(&cfg, &c, true), &format!("seed {seed} {cfg:?}"));
        }
    }
}

/// The same rows reordered trajectory-major, groups in order (verl-agent's layout): the batch's
/// rows are then in step order, the path that skips the relabelling pass.
fn trajectory_major(c: &Case) -> Case {
    let first = |keys: &[u64], r: usize| keys.iter().position(|&k| k == keys[r]).unwrap();
    let mut order: Vec<usize> = (0..c.uid.len()).collect();
    order.sort_by_key(|&r| (first(&c.uid, r), first(&c.traj, r), r));
    let pick = |v: &[u64]| order.iter().map(|&r| v[r]).collect::<Vec<_>>();
    Case {
        uid: pick(&c.uid),
        traj: pick(&c.traj),
        episode: order.iter().map(|&r| c.episode[r]).collect(),
        rewards: order.iter().map(|&r| c.rewards[r]).collect(),
        anchors: order.iter().map(|&r| c.anchors[r].clone()).collect(),
        anchor_ids: pick(&c.anchor_ids),
    }
}

#[test]
fn rows_in_step_order_match_the_reference_bit_for_bit() {
    for seed in 200..230 {
        let c = trajectory_major(&case(seed, 1 + (seed as usize % 7)));
        let batch = RolloutBatch::from_row_keys(&c.uid, &c.traj, &c.episode).unwrap();
        assert!(crate::common::in_step_order(&batch));
        for cfg in configs() {
            let g = Gigpo::new(cfg).unwrap();
            let out = g.compute(&batch, &c.rewards, &c.anchors).unwrap();
            assert_same(&out, &reference(&cfg, &c, false), &format!("seed {seed} {cfg:?}"));
        }
    }
}
