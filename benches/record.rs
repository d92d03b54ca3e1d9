//! The record reader: the error path on one long line with 70 `NaN` literals (it must be
//! linear in the line length, so the 4 MB case should take about 4× the 1 MB
//! case, not 70×), and reading trajectory lines group by group (steps per second).
//!
//! `cargo bench --bench record` (short: sample size 10, 2 s measurement).

use std::hint::black_box;
use std::time::Duration;

use beacon_rl::record::{read_trajectories, JsonlRecord, TrajectoryGroups, TrajectoryRecord};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

/// One trajectory line of about `bytes` bytes whose steps carry 70 `NaN` rewards, spread
/// over the line (as `examples/gen_trajectories.rs --nan-line` writes it).
fn nan_line(bytes: usize) -> String {
    let filler = "x".repeat(1000);
    let step = format!(r#"{{"action": "a", "observation": "{filler}", "reward": 0, "done": false}}"#);
    let steps = (bytes / step.len()).max(70);
    let every = steps / 70;
    let body: Vec<String> = (0..steps)
        .map(|t| {
            if t % every == 0 && t / every < 70 {
                step.replace(r#""reward": 0"#, r#""reward": NaN"#)
            } else {
                step.clone()
            }
        })
        .collect();
    format!(
        r#"{{"group_id": "g", "traj_id": "g/0", "terminal_reward": 1, "steps": [{}]}}"#,
        body.join(", ")
    )
}

fn error_path(c: &mut Criterion) {
    let mut group = c.benchmark_group("record_error_path");
    for mb in [1, 4] {
        let line = nan_line(mb << 20);
        group.throughput(Throughput::Bytes(line.len() as u64));
        group.bench_with_input(BenchmarkId::new("nan70", format!("{mb}MB")), &line, |b, line| {
            b.iter(|| TrajectoryRecord::from_json_line(black_box(line), 1).unwrap_err())
        });
    }
    group.finish();
}

/// `groups` groups of 8 trajectories × 30 steps, lines like the bundled ScienceWorld sample.
fn trajectories(groups: usize) -> String {
    let mut text = String::new();
    for g in 0..groups {
        for j in 0..8 {
            let steps: Vec<String> = (0..30)
                .map(|t| {
                    format!(
                        r#"{{"t": {t}, "action": "open door to kitchen", "observation": "You move to the kitchen. In it, you see: a table.", "score": {t}, "reward": 1, "done": {}, "isCompleted": false, "milestone": true, "new_subgoals": []}}"#,
                        t == 29
                    )
                })
                .collect();
            text.push_str(&format!(
                r#"{{"env": "synthetic", "group_id": "g{g}", "traj_id": "g{g}/{j}", "kind": "sample", "terminal_reward": {}, "initial_score": 0, "steps": [{}]}}"#,
                j % 2,
                steps.join(", ")
            ));
            text.push('\n');
        }
    }
    text
}

fn read(c: &mut Criterion) {
    let mut group = c.benchmark_group("record_read");
    let text = trajectories(16);
    group.throughput(Throughput::Elements(16 * 8 * 30));
    group.bench_function("groups_16x8x30_steps", |b| {
        b.iter(|| {
            let mut steps = 0;
            for g in TrajectoryGroups::new([read_trajectories(black_box(text.as_bytes()))]) {
                steps += g.unwrap().records.iter().map(|r| r.steps.len()).sum::<usize>();
            }
            steps
        })
    });
    group.finish();
}

/// One trajectory line (30 steps): the hand-written reader the JSON Lines reader uses
/// (`from_json_line`) against the serde `Deserialize` impl it falls back to.
fn parse(c: &mut Criterion) {
    let mut group = c.benchmark_group("record_parse");
    let text = trajectories(1);
    let line = text.lines().next().unwrap_or_default();
    group.throughput(Throughput::Elements(30));
    group.bench_function("from_json_line_30_steps", |b| {
        b.iter(|| TrajectoryRecord::from_json_line(black_box(line), 1).unwrap())
    });
    group.bench_function("serde_30_steps", |b| {
        b.iter(|| serde_json::from_str::<TrajectoryRecord>(black_box(line)).unwrap())
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).measurement_time(Duration::from_secs(2));
    targets = error_path, read, parse
}
criterion_main!(benches);
