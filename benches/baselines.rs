//! Criterion benches of verl's baseline estimators at 128, 3840 and 30720 rows × 512 tokens
//! (group size 8, random lengths, an outcome reward on each row's last generated token,
//! inputs generated once per size from a fixed seed). `NAME/SIZE` measures `estimate` (fresh
//! output arrays every call), `NAME/into/SIZE` measures `estimate_into` into two buffers
//! reused across calls, as a trainer's loop would.
//!
//! `cargo bench --bench baselines -- --warm-up-time 1 --measurement-time 2`

use std::hint::black_box;
use std::time::Duration;

#[path = "../tests/support/splitmix64.rs"]
mod splitmix64;
use beacon_rl::estimator::{EstimatorConfig, EstimatorInput, Workspace};
use beacon_rl::RolloutBatch;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ndarray::Array2;
use splitmix64::SplitMix64;

const TOKENS: usize = 512;
const GROUP_SIZE: usize = 8;
const ROWS: [usize; 3] = [128, 3840, 30720];

struct Inputs {
    batch: RolloutBatch,
    rewards: Array2<f64>,
    mask: Array2<bool>,
    values: Array2<f64>,
    log_probs: Array2<f64>,
    sum_pi_sq: Array2<f64>,
    baselines: Vec<f64>,
}

fn inputs(rows: usize, seed: u64) -> Inputs {
    let mut rng = SplitMix64::new(seed);
    // Rows of a group are interleaved with other groups, as a trainer's shuffled batch.
    let groups = rows / GROUP_SIZE;
    let uids: Vec<usize> = (0..rows).map(|r| r % groups).collect();
    let lens: Vec<usize> = (0..rows)
        .map(|_| 1 + (rng.next_u64() as usize) % TOKENS)
        .collect();
    let mask = Array2::from_shape_fn((rows, TOKENS), |(r, t)| t < lens[r]);
    // Written, not only allocated: a fresh zeroed allocation maps every page to the kernel's
    // one zero page until written, which no trainer's tensor does (it makes reading the
    // mostly zero rewards cheaper or dearer than it is: one physical page, 4 KiB TLB entries).
    let mut rewards = Array2::<f64>::zeros((rows, TOKENS));
    rewards.fill(black_box(0.0));
    for (r, &len) in lens.iter().enumerate() {
        rewards[[r, len - 1]] = if rng.next_f64() < 0.5 { 1.0 } else { 0.0 };
    }
    let values = Array2::from_shape_fn((rows, TOKENS), |_| rng.next_f64() * 2.0 - 1.0);
    let log_probs = Array2::from_shape_fn((rows, TOKENS), |_| -5.0 * rng.next_f64());
    let sum_pi_sq = Array2::from_shape_fn((rows, TOKENS), |_| rng.next_f64());
    let baselines = (0..rows).map(|_| rng.next_f64()).collect();
    let batch = RolloutBatch::from_group_keys(&uids, &vec![0.0; rows]).expect("batch");
    Inputs {
        batch,
        rewards,
        mask,
        values,
        log_probs,
        sum_pi_sq,
        baselines,
    }
}

fn bench_baselines(c: &mut Criterion) {
    let estimators: Vec<_> = EstimatorConfig::VERL_NAMES
        .iter()
        .map(|name| {
            let config: EstimatorConfig = name.parse().expect("name");
            (*name, config.build().expect("valid config"))
        })
        .collect();
    let mut group = c.benchmark_group("baselines");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(2));
    group.warm_up_time(Duration::from_secs(1));
    for rows in ROWS {
        let data = inputs(rows, 0x5EED + rows as u64);
        let input = EstimatorInput::new(&data.batch)
            .with_token_level_rewards(&data.rewards)
            .with_response_mask(&data.mask)
            .with_values(&data.values)
            .with_old_log_probs(&data.log_probs)
            .with_sum_pi_squared(&data.sum_pi_sq)
            .with_reward_baselines(&data.baselines);
        group.throughput(Throughput::Elements((rows * TOKENS) as u64));
        for (name, est) in &estimators {
            group.bench_with_input(
                BenchmarkId::new(*name, format!("{rows}x{TOKENS}")),
                &input,
                |b, input| b.iter(|| black_box(est.estimate(black_box(input)).expect("estimate"))),
            );
        }
        // A trainer's loop: the same two output buffers reused for every batch.
        let mut advantages = Array2::<f64>::zeros((rows, TOKENS));
        let mut returns = Array2::<f64>::zeros((rows, TOKENS));
        for (name, est) in &estimators {
            group.bench_with_input(
                BenchmarkId::new(format!("{name}/into"), format!("{rows}x{TOKENS}")),
                &input,
                |b, input| {
                    let mut ws = Workspace::default();
                    b.iter(|| {
                        est.estimate_into(
                            black_box(input),
                            (&mut advantages).into(),
                            Some((&mut returns).into()),
                            &mut ws,
                        )
                        .expect("estimate_into")
                    })
                },
            );
        }
    }
    group.finish();
}

criterion_group!(benches, bench_baselines);
criterion_main!(benches);
