//! GiGPO (exact and similarity grouping) on 16 groups × 8 trajectories × 30 steps with
//! ~100-character anchors, GiGPO's scaling from 10³ to 10⁶ trajectories × 30 steps (the similarity
//! ratio alone: `cargo bench --bench detectors -- walkthrough_600`).
//!
//! `cargo bench --bench gigpo` (short: sample size 10, 2 s measurement). The scaling group
//! (`gigpo_scaling/{u64,str}/N`, N trajectories in groups of 8, throughput in steps) holds
//! 3·10⁷ rows at N = 10⁶; `GIGPO_SCALING_MAX=100000` caps it on small machines.
//!
//! Both run the trainer's path, `estimate_steps_into` (one value per row, buffers and
//! workspace reused across iterations).

use std::hint::black_box;
use std::time::Duration;

#[path = "../tests/support/splitmix64.rs"]
mod splitmix64;
use beacon_rl::estimator::{AdvantageEstimator, EstimatorInput, Gigpo, GigpoConfig, StepGrouping, Workspace};
use beacon_rl::RolloutBatch;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use splitmix64::SplitMix64;

const GROUPS: usize = 16;
const TRAJS: usize = 8;
const STEPS: usize = 30;

/// An ALFWorld-like observation of about 100 characters.
/// A draw from 0..n (the tiny modulo bias is irrelevant for bench inputs).
fn below(rng: &mut SplitMix64, n: usize) -> usize {
    (rng.next_u64() % n as u64) as usize
}

fn observation(place: usize, item: usize, count: usize) -> String {
    let mut s = format!(
        "You arrive at cabinet {place}. On the cabinet {place}, you see a mug {item}, a spoon {count}, and a dishsponge {}.",
        item + count
    );
    s.truncate(100);
    s
}

struct Batch {
    uid: Vec<String>,
    traj: Vec<String>,
    episode: Vec<f64>,
    rewards: Vec<f64>,
    anchors: Vec<String>,
}

fn batch() -> Batch {
    let mut rng = SplitMix64::new(0x9e37_79b9_7f4a_7c15);
    let mut b = Batch {
        uid: vec![],
        traj: vec![],
        episode: vec![],
        rewards: vec![],
        anchors: vec![],
    };
    for g in 0..GROUPS {
        for t in 0..TRAJS {
            let success = below(&mut rng, 2) as f64;
            for _ in 0..STEPS {
                b.uid.push(format!("g{g}"));
                b.traj.push(format!("g{g}-t{t}"));
                b.episode.push(success);
                b.rewards.push(if below(&mut rng, 5) == 0 { 1.0 } else { 0.0 });
                // Trajectories of a task revisit a pool of ~20 states; some differ by one digit
                // (near-duplicates that similarity grouping merges).
                b.anchors.push(observation(
                    below(&mut rng, 10),
                    below(&mut rng, 2),
                    1 + below(&mut rng, 2),
                ));
            }
        }
    }
    b
}

fn bench_gigpo(c: &mut Criterion) {
    let data = batch();
    let rb = RolloutBatch::from_row_keys(&data.uid, &data.traj, &data.episode).unwrap();
    let mut group = c.benchmark_group("gigpo_16x8x30");
    for (name, grouping) in [
        ("exact", StepGrouping::Exact),
        ("similarity_0.95", StepGrouping::Similarity { threshold: 0.95 }),
    ] {
        let gigpo = Gigpo::new(GigpoConfig::default().with_grouping(grouping)).unwrap();
        let anchors: Vec<&str> = data.anchors.iter().map(String::as_str).collect();
        let input = EstimatorInput::new(&rb)
            .with_step_rewards(&data.rewards)
            .with_anchor_obs(&anchors);
        let (mut ws, mut out) = (Workspace::default(), vec![0.0; rb.num_steps()]);
        group.bench_function(name, |bch| {
            bch.iter(|| {
                gigpo
                    .estimate_steps_into(black_box(&input), &mut out, &mut ws)
                    .unwrap();
                black_box(out[0])
            })
        });
    }
    group.finish();
}

/// N trajectories × 30 steps in groups of 8, rows trajectory-major (as verl-agent gathers
/// them); each task group's trajectories revisit a pool of 20 states. Returns the batch, step
/// rewards and each row's state id.
fn scaling_batch(trajectories: usize) -> (RolloutBatch, Vec<f64>, Vec<u64>) {
    const G: usize = 8;
    let mut rng = SplitMix64::new(trajectories as u64);
    let rows = trajectories * STEPS;
    let mut rewards = Vec::with_capacity(rows);
    let mut states = Vec::with_capacity(rows);
    let mut episode = Vec::with_capacity(trajectories);
    for j in 0..trajectories {
        let group = (j / G) as u64;
        episode.push(below(&mut rng, 2) as f64);
        for _ in 0..STEPS {
            rewards.push(if below(&mut rng, 5) == 0 { 1.0 } else { 0.0 });
            states.push(group * 64 + below(&mut rng, 20) as u64);
        }
    }
    let batch = RolloutBatch::from_blocks(G, &vec![STEPS; trajectories], episode).unwrap();
    (batch, rewards, states)
}

fn bench_scaling(c: &mut Criterion) {
    let max: usize = std::env::var("GIGPO_SCALING_MAX")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    // Text anchors: the 20 states of a group as ~100-character observations, shared by all
    // groups (interning is per task group, so sharing the text changes nothing but memory).
    let texts: Vec<String> = (0..20).map(|s| observation(s / 2, s % 2, 1 + s % 3)).collect();
    let gigpo = Gigpo::new(GigpoConfig::default()).unwrap();
    let mut group = c.benchmark_group("gigpo_scaling");
    for n in [1_000, 10_000, 100_000, 1_000_000] {
        if n > max {
            continue;
        }
        let (batch, rewards, states) = scaling_batch(n);
        group.throughput(Throughput::Elements(batch.num_steps() as u64));
        let (mut ws, mut out) = (Workspace::default(), vec![0.0; batch.num_steps()]);
        let input = EstimatorInput::new(&batch)
            .with_step_rewards(&rewards)
            .with_anchor_ids(&states);
        group.bench_with_input(BenchmarkId::new("u64", n), &n, |bch, _| {
            bch.iter(|| {
                gigpo
                    .estimate_steps_into(black_box(&input), &mut out, &mut ws)
                    .unwrap();
                black_box(out[0])
            })
        });
        let anchors: Vec<&str> = states
            .iter()
            .map(|&s| texts[(s % 64) as usize].as_str())
            .collect();
        let input = EstimatorInput::new(&batch)
            .with_step_rewards(&rewards)
            .with_anchor_obs(&anchors);
        group.bench_with_input(BenchmarkId::new("str", n), &n, |bch, _| {
            bch.iter(|| {
                gigpo
                    .estimate_steps_into(black_box(&input), &mut out, &mut ws)
                    .unwrap();
                black_box(out[0])
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2));
    targets = bench_gigpo, bench_scaling
}
criterion_main!(benches);
