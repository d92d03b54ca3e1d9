//! BEACON's trainer path end to end against the bytes it must touch, and the `rayon` feature's
//! speedup. Rows × 512 tokens, `f32` token rewards, prefix masks (ragged lengths),
//! `f32` token advantages out; agent rows: trajectories of 30 steps, u64 `uid`/`traj_uid` keys.
//!
//! Group `beacon_e2e_B` (B = 16 groups × 8 trajectories × 30 steps = 3,840 rows), each case
//! one trainer iteration with kept buffers (`BatchBuilder`, `Workspace`, outputs):
//! - `copy_f32`: `out.assign(src)`, a plain copy of the f32 output bytes (the unit);
//! - `floor_{i64,bool,lengths}`: one pass that reads what end to end must read (f32 rewards and
//!   the mask, or only the rewards for lengths) and writes the f32 output: the byte floor of
//!   each mask form (`out = reward · mask`);
//! - `NAME/{i64,bool,lengths,i64_to_lengths}`: `tensor::row_sums_into` (scores) → each
//!   trajectory's score = its last row's → `BatchBuilder::rebuild_from_row_keys` →
//!   `estimate_into` f32 under the mask (`i64_to_lengths`: `tensor::prefix_lengths_into` first,
//!   then the lengths mask, so the i64 mask is read once);
//! - `beacon/str_keys_i64`: the same with string keys;
//! - `part/*`: the stages of `beacon/i64` alone; `part/row_sums_dense` sums rewards with no
//!   zero (a KL penalty on every token), where `row_sums_into` skips nothing;
//! - `beacon/0.1_way_i64`: the way the 0.1 trainer bench did it (left-to-right row sums one row
//!   at a time, a fresh `RolloutBatch::from_row_keys`, the i64 mask).
//!
//! Group `parallel_C` (with `--features rayon`; C = 64 groups × 16 trajectories × 30 steps =
//! 30,720 rows): every case on a 1-thread pool (`serial`: one chunk, the serial path) and on a
//! 2-thread pool (`parallel`), in one run: the token broadcast (f32 under the i64 mask), BEACON
//! end to end (`i64_to_lengths`, both flavours) and GiGPO step level (u64 anchors).
//!
//! `cargo bench --bench parallel -- beacon_e2e_B` and
//! `cargo bench --features rayon --bench parallel -- parallel_C`.

use std::hint::black_box;
use std::time::Duration;

#[path = "../tests/support/splitmix64.rs"]
mod splitmix64;
use beacon_rl::estimator::{AdvantageEstimator, EstimatorConfig, EstimatorInput, Workspace};
use beacon_rl::tensor::{prefix_lengths_into, row_sums_into};
use beacon_rl::{BatchBuilder, RolloutBatch};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ndarray::{Array2, Zip};
use splitmix64::SplitMix64;

const TOKENS: usize = 512;
const STEPS: usize = 30;

// GiGPO's inputs are read by the `rayon` group only.
#[cfg_attr(not(feature = "rayon"), allow(dead_code))]
struct Data {
    uids: Vec<u64>,
    trajs: Vec<u64>,
    uid_text: Vec<String>,
    traj_text: Vec<String>,
    milestones: Vec<bool>,
    step_rewards: Vec<f64>,
    anchors: Vec<u64>,
    rewards: Array2<f32>,
    mask: Array2<i64>,
    mask_bool: Array2<bool>,
    lengths: Vec<usize>,
}

/// `rows` agent rows, trajectories of 30 steps, `group` trajectories per uid; the episode
/// reward (0 or 1) on the last generated token of each trajectory's last step.
fn data(rows: usize, group: usize) -> Data {
    let mut rng = SplitMix64::new(0x5EED + rows as u64);
    let lengths: Vec<usize> = (0..rows)
        .map(|_| 1 + (rng.next_u64() as usize) % TOKENS)
        .collect();
    let mask = Array2::from_shape_fn((rows, TOKENS), |(r, t)| i64::from(t < lengths[r]));
    // Written, not only allocated: a fresh zeroed allocation maps every page to the kernel's
    // one zero page until written, which no trainer's tensor does (it makes reading the
    // mostly zero rewards cheaper or dearer than it is: one physical page, 4 KiB TLB entries).
    let mut rewards = Array2::<f32>::zeros((rows, TOKENS));
    rewards.fill(black_box(0.0));
    for r in (STEPS - 1..rows).step_by(STEPS) {
        rewards[[r, lengths[r] - 1]] = if rng.next_f64() < 0.5 { 1.0 } else { 0.0 };
    }
    let trajs: Vec<u64> = (0..rows).map(|r| (r / STEPS) as u64).collect();
    let uids: Vec<u64> = trajs.iter().map(|&j| j / group as u64).collect();
    let milestones = (0..rows).map(|_| rng.next_f64() < 0.2).collect();
    let step_rewards = (0..rows)
        .map(|_| if rng.next_f64() < 0.2 { 1.0 } else { 0.0 })
        .collect();
    let anchors = uids.iter().map(|&u| u * 64 + rng.next_u64() % 20).collect();
    Data {
        uid_text: uids.iter().map(|u| format!("uid-{u:08}")).collect(),
        traj_text: trajs.iter().map(|j| format!("traj-{j:08}")).collect(),
        mask_bool: mask.mapv(|m| m != 0),
        uids,
        trajs,
        milestones,
        step_rewards,
        anchors,
        rewards,
        mask,
        lengths,
    }
}

fn build(name: &str) -> Box<dyn AdvantageEstimator> {
    name.parse::<EstimatorConfig>()
        .expect("name")
        .build()
        .expect("config")
}

/// The response mask handed to the estimator.
#[derive(Clone, Copy)]
enum Mask {
    I64,
    Bool,
    Lengths,
    /// The i64 mask converted to lengths first (`prefix_lengths_into`).
    I64ToLengths,
}

/// A trainer's kept state across iterations.
struct Trainer {
    builder: BatchBuilder,
    batch: RolloutBatch,
    ws: Workspace,
    scores: Vec<f64>,
    lengths: Vec<usize>,
    out: Array2<f32>,
}

impl Trainer {
    fn new(rows: usize) -> Self {
        let batch = RolloutBatch::from_row_keys(&[0u64], &[0u64], &[0.0]).expect("batch");
        Self {
            builder: BatchBuilder::default(),
            batch,
            ws: Workspace::default(),
            scores: vec![0.0; rows],
            lengths: vec![0; rows],
            out: Array2::zeros((rows, TOKENS)),
        }
    }

    /// Scores from the token rewards, each trajectory's from its last row.
    fn scores(&mut self, d: &Data) {
        row_sums_into(&d.rewards, &mut self.scores).expect("sums");
        for chunk in self.scores.chunks_mut(STEPS) {
            let last = chunk[chunk.len() - 1];
            chunk.fill(last);
        }
    }

    /// One iteration: scores, batch, advantages under `mask`.
    fn beacon<G, T>(&mut self, est: &dyn AdvantageEstimator, d: &Data, g: &[G], t: &[T], mask: Mask)
    where
        G: std::hash::Hash + Eq,
        T: std::hash::Hash + Eq,
    {
        self.scores(d);
        self.builder
            .rebuild_from_row_keys(&mut self.batch, g, t, &self.scores)
            .expect("batch");
        let input = EstimatorInput::new(&self.batch).with_milestones(&d.milestones);
        let input = match mask {
            Mask::I64 => input.with_response_mask(&d.mask),
            Mask::Bool => input.with_response_mask(&d.mask_bool),
            Mask::Lengths => input.with_response_mask(beacon_rl::tensor::MaskView::Lengths {
                lengths: &d.lengths,
                cols: TOKENS,
            }),
            Mask::I64ToLengths => {
                prefix_lengths_into(&d.mask, &mut self.lengths).expect("prefix mask");
                input.with_response_mask(beacon_rl::tensor::MaskView::Lengths {
                    lengths: &self.lengths,
                    cols: TOKENS,
                })
            }
        };
        est.estimate_into(&input, (&mut self.out).into(), None, &mut self.ws)
            .expect("estimate_into");
    }
}

fn bench_e2e(c: &mut Criterion) {
    let rows = 16 * 8 * STEPS;
    let d = data(rows, 8);
    let mut group = c.benchmark_group("beacon_e2e_B");
    group.throughput(Throughput::Elements((rows * TOKENS) as u64));
    let src = Array2::<f32>::from_elem((rows, TOKENS), 0.5);
    let mut out = Array2::<f32>::zeros((rows, TOKENS));
    group.bench_function("copy_f32", |b| b.iter(|| out.assign(black_box(&src))));
    group.bench_function("floor_i64", |b| {
        b.iter(|| {
            Zip::from(&mut out)
                .and(black_box(&d.rewards))
                .and(black_box(&d.mask))
                .for_each(|o, &r, &m| *o = if m != 0 { r } else { 0.0 })
        })
    });
    group.bench_function("floor_bool", |b| {
        b.iter(|| {
            Zip::from(&mut out)
                .and(black_box(&d.rewards))
                .and(black_box(&d.mask_bool))
                .for_each(|o, &r, &m| *o = if m { r } else { 0.0 })
        })
    });
    group.bench_function("floor_lengths", |b| {
        b.iter(|| {
            Zip::from(out.rows_mut())
                .and(black_box(&d.rewards).rows())
                .and(black_box(&d.lengths[..]))
                .for_each(|mut o, r, &n| {
                    let (o, r) = (o.as_slice_mut().expect("row"), r.to_slice().expect("row"));
                    o[..n].copy_from_slice(&r[..n]);
                    o[n..].fill(0.0);
                })
        })
    });
    let mut t = Trainer::new(rows);
    for name in ["beacon", "beacon_official"] {
        let est = build(name);
        let est = est.as_ref();
        group.bench_function(format!("{name}/i64"), |b| {
            b.iter(|| t.beacon(est, &d, &d.uids, &d.trajs, Mask::I64))
        });
        group.bench_function(format!("{name}/bool"), |b| {
            b.iter(|| t.beacon(est, &d, &d.uids, &d.trajs, Mask::Bool))
        });
        group.bench_function(format!("{name}/lengths"), |b| {
            b.iter(|| t.beacon(est, &d, &d.uids, &d.trajs, Mask::Lengths))
        });
        group.bench_function(format!("{name}/i64_to_lengths"), |b| {
            b.iter(|| t.beacon(est, &d, &d.uids, &d.trajs, Mask::I64ToLengths))
        });
    }
    // Where the time of `beacon/i64` goes: its stages alone.
    let est = build("beacon");
    group.bench_function("part/row_sums", |b| {
        b.iter(|| row_sums_into(black_box(&d.rewards), &mut t.scores).expect("sums"))
    });
    // Dense token rewards (verl's `use_kl_in_reward`: a KL penalty on every token), where the
    // row sums skip no zeros.
    let mut rng = SplitMix64::new(7);
    let dense = Array2::from_shape_fn(d.rewards.dim(), |_| (rng.next_f64() * 1e-3) as f32);
    group.bench_function("part/row_sums_dense", |b| {
        b.iter(|| row_sums_into(black_box(&dense), &mut t.scores).expect("sums"))
    });
    t.scores(&d);
    group.bench_function("part/rebuild_u64", |b| {
        b.iter(|| {
            t.builder
                .rebuild_from_row_keys(&mut t.batch, &d.uids, &d.trajs, black_box(&t.scores))
                .expect("batch")
        })
    });
    let mut steps = vec![0.0; rows];
    group.bench_function("part/beacon_steps", |b| {
        let input = EstimatorInput::new(&t.batch).with_milestones(&d.milestones);
        b.iter(|| {
            est.estimate_steps_into(black_box(&input), &mut steps, &mut t.ws)
                .expect("steps")
        })
    });
    group.bench_function("part/broadcast_i64", |b| {
        b.iter(|| {
            beacon_rl::tensor::broadcast_into(black_box(&steps), &d.mask, &mut t.out).expect("broadcast")
        })
    });
    group.bench_function("part/broadcast_bool", |b| {
        b.iter(|| {
            beacon_rl::tensor::broadcast_into(black_box(&steps), &d.mask_bool, &mut t.out).expect("broadcast")
        })
    });
    group.bench_function("part/prefix_lengths_i64", |b| {
        b.iter(|| prefix_lengths_into(black_box(&d.mask), &mut t.lengths).expect("lengths"))
    });
    group.bench_function("beacon/str_keys_i64", |b| {
        b.iter(|| t.beacon(est.as_ref(), &d, &d.uid_text, &d.traj_text, Mask::I64))
    });
    let mut scores = vec![0.0f64; rows];
    group.bench_function("beacon/0.1_way_i64", |b| {
        b.iter(|| {
            // verl-agent's episode score: the row sums of the token rewards (the crate's kernel).
            beacon_rl::tensor::row_sums_into(&d.rewards, &mut scores).expect("one sum per row");
            for chunk in scores.chunks_mut(STEPS) {
                let last = chunk[chunk.len() - 1];
                chunk.fill(last);
            }
            let batch = RolloutBatch::from_row_keys(&d.uids, &d.trajs, &scores).expect("batch");
            let input = EstimatorInput::new(&batch)
                .with_milestones(&d.milestones)
                .with_response_mask(&d.mask);
            est.estimate_into(&input, (&mut t.out).into(), None, &mut t.ws)
                .expect("estimate_into")
        })
    });
    group.finish();
}

#[cfg(feature = "rayon")]
fn bench_parallel(c: &mut Criterion) {
    let rows = 64 * 16 * STEPS;
    let d = data(rows, 16);
    let mut group = c.benchmark_group("parallel_C");
    group.throughput(Throughput::Elements(rows as u64));
    let pools = [("serial", 1), ("parallel", 2)].map(|(label, n)| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .expect("pool");
        (label, pool)
    });
    let values: Vec<f64> = (0..rows).map(|r| r as f64 * 0.25 - 100.0).collect();
    let mut out = Array2::<f32>::zeros((rows, TOKENS));
    for (label, pool) in &pools {
        group.bench_function(format!("broadcast_i64/{label}"), |b| {
            b.iter(|| {
                pool.install(|| beacon_rl::tensor::broadcast_into(black_box(&values), &d.mask, &mut out))
                    .expect("broadcast")
            })
        });
    }
    for name in ["beacon", "beacon_official"] {
        let est = build(name);
        for (label, pool) in &pools {
            let mut t = Trainer::new(rows);
            group.bench_function(format!("{name}_e2e/{label}"), |b| {
                b.iter(|| pool.install(|| t.beacon(est.as_ref(), &d, &d.uids, &d.trajs, Mask::I64ToLengths)))
            });
        }
    }
    let batch = RolloutBatch::from_row_keys(&d.uids, &d.trajs, &vec![0.0; rows]).expect("batch");
    let input = EstimatorInput::new(&batch)
        .with_step_rewards(&d.step_rewards)
        .with_anchor_ids(&d.anchors);
    let est = build("gigpo");
    for (label, pool) in &pools {
        let (mut ws, mut steps) = (Workspace::default(), vec![0.0; rows]);
        group.bench_function(format!("gigpo_steps/{label}"), |b| {
            b.iter(|| {
                pool.install(|| est.estimate_steps_into(black_box(&input), &mut steps, &mut ws))
                    .expect("gigpo")
            })
        });
    }
    group.finish();
}

#[cfg(not(feature = "rayon"))]
fn bench_parallel(_: &mut Criterion) {}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = bench_e2e, bench_parallel
}
criterion_main!(benches);
