//! `BatchBuilder` rebuilding one batch in place from u64 keys, the call a trainer (and the
//! Python binding) makes every step. Group `batch_builder`:
//! - `group_keys/runs_3840`: 3,840 rows, 16 groups of 240 adjacent rows (verl's `uid` column,
//!   `np.repeat` of one id per prompt): written in place;
//! - `group_keys/round_robin_3840`: the same groups with row r in group r mod 16: sorted;
//! - `row_keys/traj_major_16x8x30`: 16 groups × 8 trajectories × 30 steps, each trajectory's
//!   rows adjacent, each group's trajectories adjacent (verl-agent's rows): written in place;
//! - `row_keys/step_major_16x8x30`: the same trajectories, rows ordered by step: sorted.
//!
//! Group `batch_builder_distinct_keys`: 80,000 rows, each its own group (80,000 distinct u64
//! keys), built by a fresh builder each time ([`RolloutBatch::from_group_keys`]):
//! - `random_80000`: keys from a SplitMix64 stream;
//! - `crafted_80000`: keys chosen so that an unkeyed multiplicative hash (the rustc "Fx" hash,
//!   `h(k) = k · 0x517cc1b727220a95 mod 2⁶⁴`) gives every key the same table slot. Against an
//!   unkeyed hash this is the quadratic case (seconds); against a keyed one it costs what
//!   random keys cost.
//!
//! `cargo bench --bench batch_builder -- --warm-up-time 1 --measurement-time 3`

#[path = "../tests/support/step_order.rs"]
mod step_order;
use std::hint::black_box;
use step_order::in_step_order;

use beacon_rl::{BatchBuilder, RolloutBatch};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const GROUPS: u64 = 16;
const TRAJS: u64 = 8;
const STEPS: u64 = 30;
const ROWS: u64 = GROUPS * TRAJS * STEPS;

fn bench_builder(c: &mut Criterion) {
    let mut group = c.benchmark_group("batch_builder");
    group.throughput(Throughput::Elements(ROWS));
    let rewards: Vec<f64> = (0..ROWS).map(|r| (r % 3) as f64 * 0.5).collect();
    let mut builder = BatchBuilder::default();
    let mut batch = RolloutBatch::from_group_keys(&[0u64], &[0.0]).expect("batch");

    // Group keys: large ids, as hashed uuids would be.
    let id = |g: u64| g.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let runs: Vec<u64> = (0..ROWS).map(|r| id(r / (ROWS / GROUPS))).collect();
    let round_robin: Vec<u64> = (0..ROWS).map(|r| id(r % GROUPS)).collect();
    for (name, keys, in_place) in [
        ("runs_3840", &runs, true),
        ("round_robin_3840", &round_robin, false),
    ] {
        builder
            .rebuild_from_group_keys(&mut batch, keys, &rewards)
            .expect("batch");
        assert_eq!(in_step_order(&batch), in_place);
        group.bench_function(format!("group_keys/{name}"), |b| {
            b.iter(|| {
                builder
                    .rebuild_from_group_keys(&mut batch, black_box(keys), &rewards)
                    .expect("batch");
                black_box(batch.num_groups())
            })
        });
    }

    // Row keys: trajectory j = (g, t), one reward per trajectory.
    let rows = |order: &dyn Fn(u64) -> (u64, u64)| {
        let (mut uid, mut traj, mut reward) = (vec![], vec![], vec![]);
        for r in 0..ROWS {
            let (g, t) = order(r);
            uid.push(id(g));
            traj.push(id(g * TRAJS + t + 1000));
            reward.push(((g + t) % 2) as f64);
        }
        (uid, traj, reward)
    };
    // Row r: trajectory r / STEPS (trajectory-major), or trajectory r mod (GROUPS × TRAJS).
    let major = rows(&|r| (r / (TRAJS * STEPS), r / STEPS % TRAJS));
    let by_step = rows(&|r| (r % (GROUPS * TRAJS) / TRAJS, r % TRAJS));
    let cases = [
        ("traj_major_16x8x30", &major, true),
        ("step_major_16x8x30", &by_step, false),
    ];
    for (name, (uid, traj, reward), in_place) in cases {
        builder
            .rebuild_from_row_keys(&mut batch, uid, traj, reward)
            .expect("batch");
        assert_eq!((batch.num_groups(), batch.num_trajectories()), (16, 128));
        assert_eq!(in_step_order(&batch), in_place);
        group.bench_function(format!("row_keys/{name}"), |b| {
            b.iter(|| {
                builder
                    .rebuild_from_row_keys(&mut batch, black_box(uid), traj, reward)
                    .expect("batch");
                black_box(batch.num_trajectories())
            })
        });
    }
    group.finish();
}

/// The modular inverse of an odd `a` mod 2⁶⁴ (Newton's iteration doubles the correct bits).
const fn inverse_mod_2_64(a: u64) -> u64 {
    let mut x = a; // correct to 3 bits for odd a
    let mut i = 0;
    while i < 6 {
        x = x.wrapping_mul(2u64.wrapping_sub(a.wrapping_mul(x)));
        i += 1;
    }
    x
}

fn bench_distinct_keys(c: &mut Criterion) {
    const KEYS: u64 = 80_000;
    let mut group = c.benchmark_group("batch_builder_distinct_keys");
    group.throughput(Throughput::Elements(KEYS));
    group.sample_size(10);
    let rewards = vec![0.5; KEYS as usize];
    // SplitMix64's output function over a counter: keys with no structure.
    let random: Vec<u64> = (1..=KEYS)
        .map(|i| {
            let mut z = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        })
        .collect();
    // Fx hashes a u64 key to k · SEED: key i · SEED⁻¹ hashes to i, whose high bits (the
    // table index) are all zero for i < 2⁴⁴.
    let inverse = inverse_mod_2_64(0x51_7c_c1_b7_27_22_0a_95);
    assert_eq!(inverse.wrapping_mul(0x51_7c_c1_b7_27_22_0a_95), 1);
    let crafted: Vec<u64> = (1..=KEYS).map(|i| i.wrapping_mul(inverse)).collect();
    for (name, keys) in [("random_80000", &random), ("crafted_80000", &crafted)] {
        group.bench_function(name, |b| {
            b.iter(|| {
                let batch = RolloutBatch::from_group_keys(black_box(keys), &rewards).expect("batch");
                black_box(batch.num_groups())
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_builder, bench_distinct_keys);
criterion_main!(benches);
