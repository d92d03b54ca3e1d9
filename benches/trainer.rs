//! The trainer's path against the physical limit, each group holding its
//! own references: a plain copy of the output bytes, and a copy of the bytes the estimator
//! must touch.
//!
//! Shapes B = 3,840 rows and C = 30,720 rows × 512 tokens (group size 8, ragged prefix
//! masks). Inputs are what verl hands over: `f32` token rewards (and values) and an `i64`
//! response mask, or the same mask as `u8`, `bool` or per-row lengths; outputs `f32`.
//!
//! - `copy_f32` / `copy_f32_x2`: `out.assign(src)` of one / two rows × 512 `f32` tensors.
//! - `touch_MASK`: the outcome estimators' floor: read the `f32` rewards and the mask, write
//!   `reward · mask` as `f32` (one pass; with lengths the floor is `copy_f32`).
//! - `touch2_MASK`: GAE's floor: read `f32` rewards, values and the mask, write two `f32`
//!   outputs.
//! - `NAME/into/MASK`: `estimate_into` into kept `f32` buffers with a kept `Workspace` (returns
//!   only for GAE and REINFORCE++, which define them).
//! - `NAME/into_f64` and `NAME/estimate`: `f64` advantages into a kept buffer vs the
//!   allocating `estimate` (fresh `f64` arrays per call), `i64` mask.
//! - `beacon*/end_to_end` (B only): u64 keys → `RolloutBatch::from_row_keys` with each row's
//!   score summed from the `f32` token rewards, then `estimate_into` → `f32` token advantages
//!   under the `i64` mask.
//!
//! `cargo bench --bench trainer -- --warm-up-time 1 --measurement-time 2`

use std::hint::black_box;
use std::time::Duration;

#[path = "../tests/support/splitmix64.rs"]
mod splitmix64;
use beacon_rl::estimator::{AdvantageEstimator, EstimatorConfig, EstimatorInput, Workspace};
use beacon_rl::RolloutBatch;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ndarray::Array2;
use splitmix64::SplitMix64;

const TOKENS: usize = 512;
const GROUP_SIZE: usize = 8;
const STEPS: usize = 30;

struct Data {
    /// Outcome rows: one response per row, uid = row % groups.
    batch: RolloutBatch,
    /// Agent rows: GROUP_SIZE trajectories × STEPS steps per uid.
    uids: Vec<u64>,
    trajs: Vec<u64>,
    milestones: Vec<bool>,
    rewards: Array2<f32>,
    values: Array2<f32>,
    mask: Array2<i64>,
    mask_u8: Array2<u8>,
    mask_bool: Array2<bool>,
    lens: Vec<usize>,
}

fn data(rows: usize) -> Data {
    let mut rng = SplitMix64::new(0x5EED + rows as u64);
    let groups = rows / GROUP_SIZE;
    let uids_outcome: Vec<usize> = (0..rows).map(|r| r % groups).collect();
    let lens: Vec<usize> = (0..rows)
        .map(|_| 1 + (rng.next_u64() as usize) % TOKENS)
        .collect();
    let mask = Array2::from_shape_fn((rows, TOKENS), |(r, t)| i64::from(t < lens[r]));
    // Written, not only allocated: a fresh zeroed allocation maps every page to the kernel's
    // one zero page until written, which no trainer's tensor does (it makes reading the
    // mostly zero rewards cheaper or dearer than it is: one physical page, 4 KiB TLB entries).
    let mut rewards = Array2::<f32>::zeros((rows, TOKENS));
    rewards.fill(black_box(0.0));
    for (r, &len) in lens.iter().enumerate() {
        rewards[[r, len - 1]] = if rng.next_f64() < 0.5 { 1.0 } else { 0.0 };
    }
    let values = Array2::from_shape_fn((rows, TOKENS), |_| (rng.next_f64() * 2.0 - 1.0) as f32);
    let batch = RolloutBatch::from_group_keys(&uids_outcome, &vec![0.0; rows]).expect("batch");
    // Agent layout: row r is step r % STEPS of trajectory r / STEPS; GROUP_SIZE trajectories
    // per task.
    let trajs: Vec<u64> = (0..rows).map(|r| (r / STEPS) as u64).collect();
    let uids: Vec<u64> = trajs.iter().map(|&j| j / GROUP_SIZE as u64).collect();
    let milestones = (0..rows).map(|_| rng.next_f64() < 0.2).collect();
    Data {
        batch,
        uids,
        trajs,
        milestones,
        rewards,
        values,
        mask_u8: mask.mapv(|m| m as u8),
        mask_bool: mask.mapv(|m| m != 0),
        mask,
        lens,
    }
}

fn build(name: &str) -> Box<dyn AdvantageEstimator> {
    name.parse::<EstimatorConfig>()
        .expect("name")
        .build()
        .expect("config")
}

fn bench_size(c: &mut Criterion, label: &str, rows: usize) {
    let d = data(rows);
    let input = EstimatorInput::new(&d.batch)
        .with_token_level_rewards(&d.rewards)
        .with_values(&d.values)
        .with_response_mask(&d.mask);
    let mut group = c.benchmark_group(format!("trainer_{label}"));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(2));
    group.warm_up_time(Duration::from_secs(1));
    group.throughput(Throughput::Elements((rows * TOKENS) as u64));

    let src = Array2::<f32>::from_elem((rows, TOKENS), 0.5);
    let mut adv = Array2::<f32>::zeros((rows, TOKENS));
    let mut ret = Array2::<f32>::zeros((rows, TOKENS));
    group.bench_function("copy_f32", |b| b.iter(|| adv.assign(black_box(&src))));
    group.bench_function("copy_f32_x2", |b| {
        b.iter(|| {
            adv.assign(black_box(&src));
            ret.assign(black_box(&src));
        })
    });
    // The floors: the bytes each estimator must read and write, in one plain pass.
    fn touch<M: Copy + Default + PartialEq>(src: &Array2<f32>, mask: &Array2<M>, out: &mut Array2<f32>) {
        ndarray::Zip::from(out)
            .and(src)
            .and(mask)
            .for_each(|o, &r, &m| *o = if m != M::default() { r } else { 0.0 });
    }
    group.bench_function("touch_i64", |b| {
        b.iter(|| touch(black_box(&d.rewards), black_box(&d.mask), &mut adv))
    });
    group.bench_function("touch_u8", |b| {
        b.iter(|| touch(black_box(&d.rewards), black_box(&d.mask_u8), &mut adv))
    });
    fn touch2<M: Copy + Default + PartialEq>(
        d: &Data,
        mask: &Array2<M>,
        a: &mut Array2<f32>,
        g: &mut Array2<f32>,
    ) {
        ndarray::Zip::from(a)
            .and(g)
            .and(&d.rewards)
            .and(&d.values)
            .and(mask)
            .for_each(|a, g, &r, &v, &m| {
                let on = m != M::default();
                *a = if on { r - v } else { 0.0 };
                *g = if on { r + v } else { v };
            });
    }
    group.bench_function("touch2_i64", |b| {
        b.iter(|| touch2(black_box(&d), &d.mask, &mut adv, &mut ret))
    });
    group.bench_function("touch2_lengths", |b| {
        b.iter(|| {
            for (r, &n) in d.lens.iter().enumerate() {
                let (rr, vv) = (d.rewards.row(r), d.values.row(r));
                let (mut a, mut g) = (adv.row_mut(r), ret.row_mut(r));
                for t in 0..TOKENS {
                    let on = t < n;
                    a[t] = if on { rr[t] - vv[t] } else { 0.0 };
                    g[t] = if on { rr[t] + vv[t] } else { vv[t] };
                }
            }
            black_box(&adv);
        })
    });
    let with_mask = |m: &str| -> EstimatorInput<'_> {
        let i = EstimatorInput::new(&d.batch)
            .with_token_level_rewards(&d.rewards)
            .with_values(&d.values);
        match m {
            "i64" => i.with_response_mask(&d.mask),
            "u8" => i.with_response_mask(&d.mask_u8),
            "bool" => i.with_response_mask(&d.mask_bool),
            _ => i.with_response_mask(beacon_rl::tensor::MaskView::Lengths {
                lengths: &d.lens,
                cols: TOKENS,
            }),
        }
    };
    let mut ws = Workspace::default();
    for (name, masks) in [
        ("grpo", &["i64", "u8", "bool", "lengths"][..]),
        ("rloo", &["i64", "u8", "bool", "lengths"][..]),
        ("grpo_vectorized", &["i64", "lengths"][..]),
        ("rloo_vectorized", &["i64", "lengths"][..]),
    ] {
        let est = build(name);
        for &m in masks {
            let input = with_mask(m);
            group.bench_function(format!("{name}/into/{m}"), |b| {
                b.iter(|| {
                    est.estimate_into(black_box(&input), (&mut adv).into(), None, &mut ws)
                        .expect("estimate_into")
                })
            });
        }
    }
    for name in ["gae", "reinforce_plus_plus"] {
        let est = build(name);
        for m in ["i64", "lengths"] {
            let input = with_mask(m);
            group.bench_function(format!("{name}/into/{m}"), |b| {
                b.iter(|| {
                    est.estimate_into(
                        black_box(&input),
                        (&mut adv).into(),
                        Some((&mut ret).into()),
                        &mut ws,
                    )
                    .expect("estimate_into")
                })
            });
        }
    }
    // f64 advantages: kept buffer vs the allocating path.
    let mut adv64 = Array2::<f64>::zeros((rows, TOKENS));
    for name in ["grpo", "rloo"] {
        let est = build(name);
        group.bench_function(format!("{name}/into_f64"), |b| {
            b.iter(|| {
                est.estimate_into(black_box(&input), (&mut adv64).into(), None, &mut ws)
                    .expect("estimate_into")
            })
        });
        group.bench_function(format!("{name}/estimate"), |b| {
            b.iter(|| black_box(est.estimate(black_box(&input)).expect("estimate")))
        });
    }

    if rows <= 3840 {
        for name in ["beacon", "beacon_official"] {
            let est = build(name);
            let mut scores = vec![0.0f64; rows];
            group.bench_function(format!("{name}/end_to_end"), |b| {
                b.iter(|| {
                    // verl-agent's episode score: the row sums of the token rewards (the crate's kernel).
                    beacon_rl::tensor::row_sums_into(&d.rewards, &mut scores).expect("one sum per row");
                    // The episode score of each trajectory: its last row's.
                    for chunk in scores.chunks_mut(STEPS) {
                        let last = chunk[chunk.len() - 1];
                        chunk.fill(last);
                    }
                    let batch = RolloutBatch::from_row_keys(&d.uids, &d.trajs, &scores).expect("batch");
                    let input = EstimatorInput::new(&batch)
                        .with_milestones(&d.milestones)
                        .with_response_mask(&d.mask);
                    est.estimate_into(&input, (&mut adv).into(), None, &mut ws)
                        .expect("estimate_into")
                })
            });
        }
    }
    group.finish();
}

/// `--features rayon`: the outcome estimators at C (f32 rewards → f32 advantages) and the
/// whitening scans (GAE, REINFORCE++: f32 advantages + returns, i64 mask) on a 1-thread pool
/// (the serial path) and a 2-thread pool, in one group.
#[cfg(feature = "rayon")]
fn bench_parallel(c: &mut Criterion) {
    let rows = 30720;
    let d = data(rows);
    let mut group = c.benchmark_group("trainer_C_rayon");
    group.sample_size(10);
    group.throughput(Throughput::Elements((rows * TOKENS) as u64));
    let mut adv = Array2::<f32>::zeros((rows, TOKENS));
    let mut ws = Workspace::default();
    for threads in [1, 2] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("pool");
        for (name, m) in [
            ("grpo", "i64"),
            ("grpo", "lengths"),
            ("rloo", "i64"),
            ("rloo", "lengths"),
        ] {
            let est = build(name);
            let input = EstimatorInput::new(&d.batch).with_token_level_rewards(&d.rewards);
            let input = match m {
                "i64" => input.with_response_mask(&d.mask),
                _ => input.with_response_mask(beacon_rl::tensor::MaskView::Lengths {
                    lengths: &d.lens,
                    cols: TOKENS,
                }),
            };
            group.bench_function(format!("{name}/{m}/threads_{threads}"), |b| {
                pool.install(|| {
                    b.iter(|| {
                        est.estimate_into(black_box(&input), (&mut adv).into(), None, &mut ws)
                            .expect("estimate_into")
                    })
                })
            });
        }
        // The whitening scans: f32 advantages and returns.
        let mut ret = Array2::<f32>::zeros((rows, TOKENS));
        for name in ["gae", "reinforce_plus_plus"] {
            let est = build(name);
            let input = EstimatorInput::new(&d.batch)
                .with_token_level_rewards(&d.rewards)
                .with_values(&d.values)
                .with_response_mask(&d.mask);
            group.bench_function(format!("{name}/i64/threads_{threads}"), |b| {
                pool.install(|| {
                    b.iter(|| {
                        est.estimate_into(
                            black_box(&input),
                            (&mut adv).into(),
                            Some((&mut ret).into()),
                            &mut ws,
                        )
                        .expect("estimate_into")
                    })
                })
            });
        }
    }
    group.finish();
}

fn bench_trainer(c: &mut Criterion) {
    bench_size(c, "B", 3840);
    bench_size(c, "C", 30720);
    #[cfg(feature = "rayon")]
    bench_parallel(c);
}

criterion_group!(benches, bench_trainer);
criterion_main!(benches);
