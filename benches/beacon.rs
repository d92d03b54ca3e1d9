//! BEACON throughput: step level on the paper's batch (16 groups x 8 trajectories x 30 steps)
//! and token level at 512 tokens per step, beside a plain copy of the same output bytes.
//!
//! cargo bench --bench beacon

#[path = "../tests/support/splitmix64.rs"]
mod splitmix64;
use beacon_rl::estimator::{AdvantageEstimator, Beacon, BeaconConfig, EstimatorInput, Workspace};
use beacon_rl::tensor::broadcast_into;
use beacon_rl::RolloutBatch;
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ndarray::Array2;
use splitmix64::SplitMix64;

const GROUPS: usize = 16;
const G: usize = 8;
const STEPS: usize = 30;
const TOKENS: usize = 512;

fn batch() -> (RolloutBatch, Vec<bool>) {
    let mut rng = SplitMix64::new(0x9e37_79b9_7f4a_7c15);
    let rewards: Vec<f64> = (0..GROUPS * G)
        .map(|_| (rng.next_f64() < 0.4) as u8 as f64)
        .collect();
    let batch = RolloutBatch::from_blocks(G, &[STEPS; GROUPS * G], rewards).unwrap();
    let flags = (0..batch.num_steps()).map(|_| rng.next_f64() < 0.2).collect();
    (batch, flags)
}

fn step_level(c: &mut Criterion) {
    let (batch, flags) = batch();
    let mut group = c.benchmark_group("beacon_step");
    group.throughput(Throughput::Elements(batch.num_steps() as u64));
    for (name, cfg) in [
        ("paper", BeaconConfig::default()),
        ("official", BeaconConfig::official()),
    ] {
        let beacon = Beacon::new(cfg).unwrap();
        let mut ws = Workspace::default();
        let mut adv = vec![0.0; batch.num_steps()];
        group.bench_function(BenchmarkId::new("16x8x30", name), |b| {
            b.iter(|| {
                let input = EstimatorInput::new(black_box(&batch)).with_milestones(black_box(&flags));
                beacon.estimate_steps_into(&input, &mut adv, &mut ws).unwrap();
                black_box(&adv);
            })
        });
    }
    group.finish();
}

fn token_level(c: &mut Criterion) {
    let (batch, flags) = batch();
    let beacon = Beacon::new(BeaconConfig::default()).unwrap();
    let adv = beacon.compute(&batch, &flags).unwrap().advantages;
    let mut rng = SplitMix64::new(7);
    // Response lengths 64..=512: a realistic ragged prefix mask.
    let mask = Array2::from_shape_fn((batch.num_steps(), TOKENS), |(_, j)| {
        j < 64 + (rng.next_u64() % 449) as usize
    });
    let source = Array2::<f32>::from_elem((batch.num_steps(), TOKENS), 0.5);
    let mut out = Array2::<f32>::zeros((batch.num_steps(), TOKENS));
    let mut group = c.benchmark_group("beacon_token");
    group.throughput(Throughput::Bytes((out.len() * std::mem::size_of::<f32>()) as u64));
    group.bench_function("broadcast_f32_512", |b| {
        b.iter(|| broadcast_into(black_box(&adv), mask.view(), out.view_mut()).unwrap())
    });
    group.bench_function("copy_f32_512 (reference)", |b| {
        b.iter(|| out.assign(black_box(&source)))
    });
    let mut ws = Workspace::default();
    let mut step = vec![0.0; batch.num_steps()];
    group.bench_function("step_plus_broadcast_f32_512", |b| {
        b.iter(|| {
            let input = EstimatorInput::new(&batch).with_milestones(&flags);
            beacon.estimate_steps_into(&input, &mut step, &mut ws).unwrap();
            broadcast_into(&step, mask.view(), out.view_mut()).unwrap()
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(std::time::Duration::from_secs(3));
    targets = step_level, token_level
}
criterion_main!(benches);
