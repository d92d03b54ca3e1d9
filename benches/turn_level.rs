//! The turn-level estimators against their byte floor, and their step path's linearity.
//!
//! - `multi_turn/C`: verl's multi-turn layout at C = 30,720 rows × 512 tokens: each row a
//!   dialogue of 1–6 turns separated by observation tokens, `f32` token rewards (each turn's
//!   reward on its last token), an `i64` mask, `f32` advantages into a kept buffer with a kept
//!   `Workspace`. `floor_tokens/C`: one pass reading the `f32` rewards and the `i64` mask and
//!   writing the `f32` output (the bytes the estimator must touch).
//! - `step_rows/C`: the same shape as step rows (one turn per row, 8 trajectories of 4 steps
//!   per group, `step_rewards` per row, `i64` mask). `floor_mask/C`: read the mask, write the
//!   output.
//! - `empg` runs on step rows only (it reads one entropy per step and no token rewards): its
//!   floor is `floor_mask/C`.
//! - `NAME/N`: `estimate_steps_into` on 4-step trajectories, N = 10³ … 10⁶ trajectories
//!   (throughput per trajectory: a linear cost is a flat rate).
//!
//! Times are the bench thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`, criterion's
//! `iter_custom`), not wall time: on a machine shared with other jobs the wall time mostly
//! measures the wait for a core. Memory-bandwidth contention still shows.
//!
//! `cargo bench --bench turn_level -- --warm-up-time 1 --measurement-time 3`
//!
//! - `paired NAME/LAYOUT` (printed, not a criterion bench; only when the filter names it:
//!   `cargo bench --bench turn_level -- paired`): each estimator call alternated with a call
//!   of its floor, 31 pairs, and the median and range of the ratio of each call to the floor
//!   call beside it. Criterion measures the floor and each estimator seconds apart, so on a
//!   shared machine its ratios move with the load in between; a pair of calls milliseconds
//!   apart sees about the same load.

use std::hint::black_box;
use std::time::Duration;

#[path = "../tests/support/splitmix64.rs"]
mod splitmix64;
use beacon_rl::estimator::{AdvantageEstimator, EstimatorConfig, EstimatorInput, Workspace};
use beacon_rl::RolloutBatch;
use criterion::{criterion_group, criterion_main, Bencher, Criterion, Throughput};
use ndarray::Array2;
use splitmix64::SplitMix64;

const TOKENS: usize = 512;
const ROWS: usize = 30_720;
const GROUP_SIZE: usize = 8;
const STEPS: usize = 4;

/// The estimators benched, by name (group-normalised where they have the option).
const NAMES: &[&str] = &["step_reinforce", "mt_grpo", "turn_gae", "tree_grpo", "empg"];

fn build(name: &str) -> Box<dyn AdvantageEstimator> {
    let json = match name {
        "step_reinforce" => {
            r#"{"adv_estimator":"step_reinforce","grouping":"group","norm_mean":"group","norm_std":"group"}"#
        }
        "mt_grpo" => r#"{"adv_estimator":"mt_grpo"}"#,
        "turn_gae" => r#"{"adv_estimator":"turn_gae","discount":0.99,"lam":0.95}"#,
        "tree_grpo" => r#"{"adv_estimator":"tree_grpo"}"#,
        "empg" => r#"{"adv_estimator":"empg"}"#,
        _ => unreachable!(),
    };
    let c: EstimatorConfig = serde_json::from_str(json).expect("config");
    c.build().expect("valid")
}

struct MultiTurn {
    batch: RolloutBatch,
    rewards: Array2<f32>,
    values: Array2<f32>,
    mask: Array2<i64>,
}

fn multi_turn(rng: &mut SplitMix64) -> MultiTurn {
    let mut rewards = Array2::<f32>::zeros((ROWS, TOKENS));
    rewards.fill(black_box(0.0));
    let mut mask = Array2::<i64>::zeros((ROWS, TOKENS));
    for r in 0..ROWS {
        let turns = 1 + (rng.next_u64() as usize) % 6;
        let mut t = 16; // prompt
        for _ in 0..turns {
            let len = 8 + (rng.next_u64() as usize) % 64;
            if t + len + 8 > TOKENS {
                break;
            }
            for x in t..t + len {
                mask[[r, x]] = 1;
            }
            rewards[[r, t + len - 1]] = (rng.next_f64() < 0.5) as u8 as f32;
            t += len + 8 + (rng.next_u64() as usize) % 32; // observation
        }
    }
    let uids: Vec<usize> = (0..ROWS).map(|r| r / GROUP_SIZE).collect();
    let batch = RolloutBatch::from_group_keys(&uids, &vec![0.0; ROWS]).expect("batch");
    let values = Array2::from_shape_fn((ROWS, TOKENS), |(r, t)| ((r * 7 + t) % 13) as f32 / 13.0);
    MultiTurn {
        batch,
        rewards,
        values,
        mask,
    }
}

/// Step rows: GROUP_SIZE trajectories × STEPS steps per uid, steps interleaved; each row's
/// reward and value (the entropy column reuses the values: any nonnegative numbers).
fn step_batch(trajectories: usize) -> (RolloutBatch, Vec<f64>, Vec<f64>) {
    let rows = trajectories * STEPS;
    let per_group = GROUP_SIZE * STEPS;
    let uids: Vec<usize> = (0..rows).map(|r| r / per_group).collect();
    let trajs: Vec<usize> = (0..rows)
        .map(|r| (r / per_group) * GROUP_SIZE + r % GROUP_SIZE)
        .collect();
    let mut rng = SplitMix64::new(7 + rows as u64);
    let rewards = (0..rows).map(|_| rng.next_f64()).collect();
    let values = (0..rows).map(|_| rng.next_f64()).collect();
    (
        RolloutBatch::from_row_keys(&uids, &trajs, &vec![0.0; rows]).expect("batch"),
        rewards,
        values,
    )
}

/// `tree_grpo`'s trees: in each group, two trees of four trajectories, each branching off the
/// previous one. `first_row(j)` is a row of trajectory j, `traj_of(r)` row r's trajectory
/// index within its group.
fn tree_parents(
    rows: usize,
    traj_of: impl Fn(usize) -> usize,
    first_row: impl Fn(usize, usize) -> usize,
) -> Vec<i64> {
    (0..rows)
        .map(|r| match traj_of(r) {
            k if k % 4 == 0 => -1,
            k => first_row(r, k - 1) as i64,
        })
        .collect()
}

/// This thread's CPU time.
#[cfg(target_os = "linux")]
fn cpu_now() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[cfg(not(target_os = "linux"))]
fn cpu_now() -> Duration {
    use std::sync::OnceLock;
    static START: OnceLock<std::time::Instant> = OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed()
}

/// `f` timed by this thread's CPU time.
fn cpu_iter(b: &mut Bencher<'_>, mut f: impl FnMut()) {
    b.iter_custom(|iters| {
        let t0 = cpu_now();
        for _ in 0..iters {
            f();
        }
        cpu_now() - t0
    })
}

fn bench(c: &mut Criterion) {
    let mut rng = SplitMix64::new(0x7E57);
    let d = multi_turn(&mut rng);
    let mut group = c.benchmark_group("turn_level");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(3));
    group.warm_up_time(Duration::from_secs(1));
    group.throughput(Throughput::Elements((ROWS * TOKENS) as u64));
    let mut adv = Array2::<f32>::zeros((ROWS, TOKENS));
    group.bench_function("floor_tokens/C", |b| {
        cpu_iter(b, || {
            ndarray::Zip::from(&mut adv)
                .and(black_box(&d.rewards))
                .and(black_box(&d.mask))
                .for_each(|o, &r, &m| *o = if m != 0 { r } else { 0.0 });
        })
    });
    group.bench_function("floor_mask/C", |b| {
        cpu_iter(b, || {
            ndarray::Zip::from(&mut adv)
                .and(black_box(&d.mask))
                .for_each(|o, &m| *o = if m != 0 { 0.5 } else { 0.0 });
        })
    });
    let (steps, step_rewards, turn_values) = step_batch(ROWS / STEPS);
    let step_mask = &d.mask;
    let multi_parents = tree_parents(ROWS, |r| r % GROUP_SIZE, |r, k| r - r % GROUP_SIZE + k);
    let per_group = GROUP_SIZE * STEPS;
    let step_parents = |rows: usize| tree_parents(rows, |r| r % GROUP_SIZE, |r, k| r - r % per_group + k);
    let c_step_parents = step_parents(ROWS);
    for name in NAMES {
        let est = build(name);
        let mut ws = Workspace::default();
        let input = EstimatorInput::new(&d.batch)
            .with_token_level_rewards(&d.rewards)
            .with_values(&d.values)
            .with_response_mask(&d.mask)
            .with_tree_parents(&multi_parents);
        if *name != "empg" {
            group.bench_function(format!("{name}/multi_turn/C"), |b| {
                cpu_iter(b, || {
                    est.estimate_into(black_box(&input), (&mut adv).into(), None, &mut ws)
                        .unwrap()
                })
            });
        }
        let input = EstimatorInput::new(&steps)
            .with_step_rewards(&step_rewards)
            .with_turn_values(&turn_values)
            .with_step_entropy(&turn_values)
            .with_response_mask(step_mask)
            .with_tree_parents(&c_step_parents);
        group.bench_function(format!("{name}/step_rows/C"), |b| {
            cpu_iter(b, || {
                est.estimate_into(black_box(&input), (&mut adv).into(), None, &mut ws)
                    .unwrap()
            })
        });
    }
    group.finish();
    paired_ratios(
        &d,
        &steps,
        &step_rewards,
        &turn_values,
        &multi_parents,
        &c_step_parents,
    );

    let mut group = c.benchmark_group("turn_level_steps");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(3));
    group.warm_up_time(Duration::from_secs(1));
    for n in [1_000usize, 10_000, 100_000, 1_000_000] {
        let (batch, rewards, values) = step_batch(n);
        let parents = step_parents(rewards.len());
        let mut out = vec![0.0; rewards.len()];
        group.throughput(Throughput::Elements(n as u64));
        for name in NAMES {
            let est = build(name);
            let mut ws = Workspace::default();
            let input = EstimatorInput::new(&batch)
                .with_step_rewards(&rewards)
                .with_turn_values(&values)
                .with_step_entropy(&values)
                .with_tree_parents(&parents);
            group.bench_function(format!("{name}/{n}"), |b| {
                cpu_iter(b, || {
                    est.estimate_steps_into(black_box(&input), &mut out, &mut ws)
                        .unwrap()
                })
            });
        }
    }
    group.finish();
}

/// Calls of each estimator alternated with calls of its floor, [`PAIRS`] of each after one
/// pair of warm-up, every call timed alone: the median and range of the ratio of each
/// estimator call to the floor call before it, printed as `paired NAME/LAYOUT: median [min,
/// max]` (see the module docs). Runs only when an argument names `paired`.
fn paired_ratios(
    d: &MultiTurn,
    steps: &RolloutBatch,
    step_rewards: &[f64],
    turn_values: &[f64],
    multi_parents: &[i64],
    step_parents: &[i64],
) {
    if !std::env::args().skip(1).any(|a| a.contains("paired")) {
        return;
    }
    let mut adv = Array2::<f32>::zeros((ROWS, TOKENS));
    let floor = |tokens: bool, adv: &mut Array2<f32>| {
        let t0 = cpu_now();
        if tokens {
            ndarray::Zip::from(&mut *adv)
                .and(black_box(&d.rewards))
                .and(black_box(&d.mask))
                .for_each(|o, &r, &m| *o = if m != 0 { r } else { 0.0 });
        } else {
            ndarray::Zip::from(&mut *adv)
                .and(black_box(&d.mask))
                .for_each(|o, &m| *o = if m != 0 { 0.5 } else { 0.0 });
        }
        cpu_now() - t0
    };
    for name in NAMES {
        let est = build(name);
        let mut ws = Workspace::default();
        let multi = EstimatorInput::new(&d.batch)
            .with_token_level_rewards(&d.rewards)
            .with_values(&d.values)
            .with_response_mask(&d.mask)
            .with_tree_parents(multi_parents);
        let step = EstimatorInput::new(steps)
            .with_step_rewards(step_rewards)
            .with_turn_values(turn_values)
            .with_step_entropy(turn_values)
            .with_response_mask(&d.mask)
            .with_tree_parents(step_parents);
        for (layout, input, tokens) in [("multi_turn", &multi, true), ("step_rows", &step, false)] {
            if *name == "empg" && tokens {
                continue;
            }
            let mut ratios = Vec::with_capacity(PAIRS);
            for k in 0..=PAIRS {
                let f = floor(tokens, &mut adv);
                let t0 = cpu_now();
                est.estimate_into(black_box(input), (&mut adv).into(), None, &mut ws)
                    .unwrap();
                let e = cpu_now() - t0;
                // The first pair warms the workspace and the caches.
                if k > 0 {
                    ratios.push(e.as_secs_f64() / f.as_secs_f64());
                }
            }
            ratios.sort_by(f64::total_cmp);
            println!(
                "paired {name}/{layout}: {:.2} [{:.2}, {:.2}]",
                ratios[PAIRS / 2],
                ratios[0],
                ratios[PAIRS - 1]
            );
        }
    }
}

/// Pairs of calls per estimator and layout in [`paired_ratios`].
const PAIRS: usize = 31;

criterion_group!(benches, bench);
criterion_main!(benches);
