//! GiGPO (exact and similarity grouping) on 16 groups × 8 trajectories × 30 steps with
//! ~100-character anchors, and difflib ratio on 600-character strings.
//!
//! `cargo bench --bench gigpo` (short: sample size 10, 2 s measurement).

use std::hint::black_box;
use std::time::Duration;

use beacon_rl::ablation::SplitMix64;
use beacon_rl::difflib::{ratio, Matcher};
use beacon_rl::estimator::gigpo::{Gigpo, GigpoConfig, GigpoOutput, GigpoWorkspace, StepGrouping};
use beacon_rl::RolloutBatch;
use criterion::{criterion_group, criterion_main, Criterion};

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
        let gigpo = Gigpo::new(GigpoConfig::verl_agent().with_grouping(grouping)).unwrap();
        let mut ws = GigpoWorkspace::new();
        let mut out = GigpoOutput::default();
        group.bench_function(name, |bch| {
            bch.iter(|| {
                gigpo
                    .compute_into(
                        &rb,
                        black_box(&data.rewards),
                        black_box(&data.anchors),
                        &mut ws,
                        &mut out,
                    )
                    .unwrap();
                black_box(out.advantages[0])
            })
        });
    }
    group.finish();
}

fn bench_ratio(c: &mut Criterion) {
    let mut rng = SplitMix64::new(42);
    let words = [
        "cabinet",
        "drawer",
        "mug",
        "spoon",
        "countertop",
        "fridge",
        "1",
        "2",
        "3",
        "the",
        "a",
        ",",
    ];
    let mut a = String::new();
    while a.chars().count() < 600 {
        a.push_str(words[below(&mut rng, words.len())]);
        a.push(' ');
    }
    let a: String = a.chars().take(600).collect();
    // b: a with ~5% of its characters substituted.
    let b: String = a
        .chars()
        .map(|ch| if below(&mut rng, 20) == 0 { 'x' } else { ch })
        .collect();
    let mut group = c.benchmark_group("difflib_600");
    group.bench_function("ratio", |bch| bch.iter(|| ratio(black_box(&a), black_box(&b))));
    let mut m = Matcher::new(&b);
    group.bench_function("matcher_ratio_prepared_b", |bch| {
        bch.iter(|| m.ratio(black_box(&a)))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2));
    targets = bench_gigpo, bench_ratio
}
criterion_main!(benches);
