//! Milestone discovery throughput: the bundled recorded sample (parsed once, outside the
//! timed loop) and a synthetic batch of ~1e5 steps (128 tasks × 8 rollouts × 64–128 steps,
//! 600-character responses, SplitMix64 with a fixed seed). Target: >= 1e6 steps/s for
//! discovery over a batch. The discovery keeps its memory across iterations (the online
//! steady state: every task has its 16 remembered successes). Within each group, the naive
//! frequency baseline and the per-transition ALFWorld text detector over the same steps give
//! ratios measured in the same run. A third group, `discover_online_64x30`, gives every call
//! new rollouts (64 failures × 30 steps, each step one of 20 actions and one of 200,000 short
//! responses, SplitMix64): the memory of states fills to its bound and keeps learning, as in
//! a long run before the first success, where a per-call pass over every state remembered
//! would show.
//!
//! `cargo bench --bench discover`

use std::hint::black_box;
use std::time::Duration;

#[path = "../tests/support/splitmix64.rs"]
mod splitmix64;
use beacon_rl::milestone::{
    detect_milestones, frequency_baseline, DetectorPreset, DiscoveryConfig, MilestoneDiscovery, Transition,
};
use beacon_rl::RolloutBatch;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use splitmix64::SplitMix64;

/// Rows (action, response), the batch over them, and one task name per group.
struct Data {
    rows: Vec<(String, String)>,
    batch: RolloutBatch,
    tasks: Vec<String>,
}

impl Data {
    fn transition(&self, row: usize) -> Transition<'_> {
        Transition {
            action: &self.rows[row].0,
            next_observation: &self.rows[row].1,
            ..Transition::default()
        }
    }
}

/// The bundled sample: rows in file order, one group per `group_id`.
fn sample() -> Data {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/data/sample_trajectories.jsonl");
    let text = std::fs::read_to_string(path).expect("bundled sample");
    let (mut rows, mut groups, mut trajs, mut rewards, mut tasks) = (vec![], vec![], vec![], vec![], vec![]);
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).expect("JSON line");
        let group = v["group_id"].as_str().unwrap_or("").to_owned();
        if !tasks.contains(&group) {
            tasks.push(group.clone());
        }
        for s in v["steps"].as_array().expect("steps") {
            rows.push((
                s["action"].as_str().unwrap_or("").to_owned(),
                s["observation"].as_str().unwrap_or("").to_owned(),
            ));
            groups.push(group.clone());
            trajs.push(v["traj_id"].as_str().unwrap_or("").to_owned());
            rewards.push(v["terminal_reward"].as_f64().unwrap_or(0.0));
        }
    }
    let batch = RolloutBatch::from_row_keys(&groups, &trajs, &rewards).expect("batch");
    Data { rows, batch, tasks }
}

/// Synthetic text-game rollouts: per task a plan of 12 milestone actions; successes do the
/// plan in order with distractor and look-around steps between, failures stop early.
fn synthetic() -> Data {
    const FILLER: &[&str] = &[
        "You arrive at loc 12. On the countertop 1, you see a apple 1, a bread 2, a butterknife 3. ",
        "The cabinet 4 is closed. ",
        "You open the fridge 1. The fridge 1 is open. In it, you see a egg 1, a lettuce 2, and a pot 1. ",
        "Nothing happens. ",
        "You are in the middle of a room. Looking quickly around you, you see a cabinet 13, a cabinet 12. ",
    ];
    let mut rng = SplitMix64::new(0x9E37_79B9_7F4A_7C15);
    let mut next = move |n: usize| (rng.next_u64() % n as u64) as usize;
    let (mut rows, mut lens, mut rewards, mut tasks) = (vec![], vec![], vec![], vec![]);
    for task in 0..128 {
        tasks.push(format!("task-{task}"));
        for k in 0..8 {
            let success = k % 2 == 0;
            let len = 64 + next(65);
            let reached = if success { 12 } else { next(12) };
            let mut done = 0;
            for t in 0..len {
                let (action, head) =
                    if done < reached && next(len / 12 + 1) == 0 || t + (reached - done) >= len {
                        done += 1;
                        (
                            format!("use tool {} on object {task}", done.min(12)),
                            format!("You use the tool {done}."),
                        )
                    } else if next(4) == 0 {
                        ("look".to_string(), "You look around.".to_string())
                    } else {
                        let x = next(40);
                        (format!("go to place {x}"), format!("You arrive at place {x}."))
                    };
                let mut obs = head;
                obs.push(' ');
                while obs.len() < 600 {
                    obs.push_str(FILLER[next(FILLER.len())]);
                }
                obs.truncate(600); // ASCII only
                rows.push((action, obs));
            }
            lens.push(len);
            rewards.push(if success { 1.0 } else { 0.0 });
        }
    }
    let batch = RolloutBatch::from_blocks(8, &lens, rewards).expect("batch");
    Data { rows, batch, tasks }
}

fn bench_data(c: &mut Criterion, name: &str, data: &Data) {
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Elements(data.batch.num_steps() as u64));
    let mut discovery = MilestoneDiscovery::new(DiscoveryConfig::default()).expect("config");
    g.bench_function("discover", |b| {
        b.iter(|| {
            let flags = discovery
                .discover(black_box(&data.batch), &data.tasks, |row, _| data.transition(row))
                .expect("discover");
            black_box(flags)
        })
    });
    g.bench_function("frequency_baseline", |b| {
        b.iter(|| {
            black_box(frequency_baseline(black_box(&data.batch), 0.0, |row, _| {
                data.transition(row)
            }))
        })
    });
    let mut alfworld = DetectorPreset::Alfworld.build().unwrap();
    g.bench_function("alfworld_text_detector", |b| {
        b.iter(|| {
            black_box(detect_milestones(
                black_box(&data.batch),
                &mut alfworld,
                |row, _| data.transition(row),
            ))
        })
    });
    g.finish();
}

/// New rollouts on every call, over a memory that has filled up (module docs).
fn bench_online(c: &mut Criterion) {
    let (trajs, len) = (64, 30);
    let responses: Vec<String> = (0..200_000).map(|k| format!("You are in room {k}.")).collect();
    let actions: Vec<String> = (0..20).map(|k| format!("do thing {k}")).collect();
    let batch = RolloutBatch::from_blocks(8, &vec![len; trajs], vec![0.0; trajs]).expect("batch");
    let tasks: Vec<String> = (0..trajs / 8).map(|g| format!("task {g}")).collect();
    let mut discovery = MilestoneDiscovery::new(DiscoveryConfig::default()).expect("config");
    let (mut rng, mut rows) = (SplitMix64::new(7), vec![(0, 0); trajs * len]);
    // Draws new rows (8 µs, under 1% of a call's time) and discovers over them.
    let mut run = |discovery: &mut MilestoneDiscovery| {
        for row in rows.iter_mut() {
            *row = (
                (rng.next_u64() % 20) as usize,
                (rng.next_u64() % 200_000) as usize,
            );
        }
        discovery
            .discover(&batch, &tasks, |row, _| Transition {
                observation: "You are at the start.",
                action: &actions[rows[row].0],
                next_observation: &responses[rows[row].1],
                ..Transition::default()
            })
            .expect("discover")
    };
    // Fill the memory first: 60 calls draw 87,438 different responses, above the 65,536
    // states remembered.
    for _ in 0..60 {
        run(&mut discovery);
    }
    let mut g = c.benchmark_group("discover_online_64x30");
    g.throughput(Throughput::Elements(batch.num_steps() as u64));
    g.bench_function("discover", |b| b.iter(|| black_box(run(&mut discovery))));
    g.finish();
}

fn benches(c: &mut Criterion) {
    bench_data(c, "discover_sample", &sample());
    let data = synthetic();
    assert!(data.batch.num_steps() > 90_000, "about 1e5 steps");
    bench_data(c, "discover_synthetic_1e5x600", &data);
    bench_online(c);
}

criterion_group! {
    name = discover;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2));
    targets = benches
}
criterion_main!(discover);
