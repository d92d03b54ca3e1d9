//! `BatchBuilder` rebuilding one batch in place from u64 keys, the call a trainer (and the
//! Python binding) makes every step. Group `batch_builder`:
//! - `group_keys/runs_3840`: 3,840 rows, 16 groups of 240 adjacent rows (verl's `uid` column,
//!   `np.repeat` of one id per prompt): written in place;
//! - `group_keys/round_robin_3840`: the same groups with row r in group r mod 16: sorted;
//! - `row_keys/traj_major_16x8x30`: 16 groups × 8 trajectories × 30 steps, each trajectory's
//!   rows adjacent, each group's trajectories adjacent (verl-agent's rows): written in place;
//! - `row_keys/step_major_16x8x30`: the same trajectories, rows ordered by step: sorted.
//!
//! `cargo bench --bench batch_builder -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use beacon_rl::BatchBuilder;
use beacon_rl::RolloutBatch;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const GROUPS: u64 = 16;
const TRAJS: u64 = 8;
const STEPS: u64 = 30;
const ROWS: u64 = GROUPS * TRAJS * STEPS;

fn bench_builder(c: &mut Criterion) {
    let mut group = c.benchmark_group("batch_builder");
    group.throughput(Throughput::Elements(ROWS));
    let rewards: Vec<f64> = (0..ROWS).map(|r| (r % 3) as f64 * 0.5).collect();
    let mut builder = BatchBuilder::new();
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
        assert_eq!(batch.rows_in_step_order(), in_place);
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
        assert_eq!(batch.rows_in_step_order(), in_place);
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

criterion_group!(benches, bench_builder);
criterion_main!(benches);
