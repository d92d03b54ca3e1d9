//! Detector throughput: the bundled recorded sample (parsed once, outside the timed loop) and
//! a synthetic batch of 1e5 ALFWorld-like steps with 600-character responses (generated once,
//! deterministically). Target: >= 1e6 steps/s for the ALFWorld preset on one core. And the
//! walkthrough's similarity (Python's `difflib` ratio) on 600-character strings.
//!
//! `cargo bench --bench detectors`

use std::hint::black_box;
use std::time::Duration;

#[path = "../tests/support/splitmix64.rs"]
mod splitmix64;
use beacon_rl::milestone::{
    AnyOf, DetectorPreset, ExpertWalkthrough, MilestoneDetector, ScoreIncrease, Transition,
};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use splitmix64::SplitMix64;

struct OwnedStep {
    action: String,
    observation: String,
    score: f64,
    next_score: f64,
    new_subgoals: Vec<String>,
}

impl OwnedStep {
    fn transition(&self) -> Transition<'_> {
        Transition {
            action: &self.action,
            next_observation: &self.observation,
            score: Some(self.score),
            next_score: Some(self.next_score),
            new_subgoals: &self.new_subgoals,
            ..Transition::default()
        }
    }
}

/// The bundled sample, one `Vec` per trajectory.
fn sample() -> Vec<Vec<OwnedStep>> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/data/sample_trajectories.jsonl");
    let text = std::fs::read_to_string(path).expect("bundled sample");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("JSON line");
            let mut before = v["initial_score"].as_f64().unwrap_or(0.0);
            v["steps"]
                .as_array()
                .map(|steps| {
                    steps
                        .iter()
                        .map(|s| {
                            let score = s["score"].as_f64().unwrap_or(0.0);
                            let step = OwnedStep {
                                action: s["action"].as_str().unwrap_or("").to_owned(),
                                observation: s["observation"].as_str().unwrap_or("").to_owned(),
                                score: before,
                                next_score: score,
                                new_subgoals: s["new_subgoals"]
                                    .as_array()
                                    .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect())
                                    .unwrap_or_default(),
                            };
                            before = score;
                            step
                        })
                        .collect()
                })
                .unwrap_or_default()
        })
        .collect()
}

/// 1e5 ALFWorld-like steps of exactly 600 characters: one in ten is subgoal feedback, the
/// rest navigation and examination text (SplitMix64, fixed seed).
fn synthetic(n: usize) -> Vec<OwnedStep> {
    const FEEDBACK: &[&str] = &[
        "You pick up the egg 2 from the countertop 3.",
        "You put the lettuce 1 in/on the diningtable 1.",
        "You heat the egg 2 using the microwave 1.",
        "You cool the pan 1 using the fridge 1.",
        "You clean the lettuce 1 using the sinkbasin 1.",
        "You turn on the desklamp 1.",
    ];
    const FILLER: &[&str] = &[
        "You arrive at loc 12. On the countertop 1, you see a apple 1, a bread 2, a butterknife 3, ",
        "The cabinet 4 is closed. ",
        "You open the fridge 1. The fridge 1 is open. In it, you see a egg 1, a lettuce 2, and a pot 1. ",
        "Nothing happens. ",
        "You are in the middle of a room. Looking quickly around you, you see a cabinet 13, a cabinet 12, ",
        "On the diningtable 1, you see a kettle 1, a knife 1, a mug 1, a papertowelroll 1, a peppershaker 2, ",
    ];
    let mut rng = SplitMix64::new(0x9E37_79B9_7F4A_7C15);
    let mut next = move || rng.next_u64();
    (0..n)
        .map(|i| {
            let mut obs = String::with_capacity(640);
            if next() % 10 == 0 {
                obs.push_str(FEEDBACK[(next() % FEEDBACK.len() as u64) as usize]);
                obs.push(' ');
            }
            while obs.len() < 600 {
                obs.push_str(FILLER[(next() % FILLER.len() as u64) as usize]);
            }
            obs.truncate(600); // all fillers are ASCII
            OwnedStep {
                action: format!("go to countertop {}", i % 7),
                observation: obs,
                score: 0.0,
                next_score: 0.0,
                new_subgoals: Vec::new(),
            }
        })
        .collect()
}

fn run_sample(d: &mut dyn MilestoneDetector, trajs: &[Vec<OwnedStep>]) -> usize {
    let mut fired = 0;
    for traj in trajs {
        d.reset();
        for s in traj {
            fired += usize::from(d.detect(&s.transition()));
        }
    }
    fired
}

fn run_flat(d: &mut dyn MilestoneDetector, steps: &[OwnedStep]) -> usize {
    steps.iter().map(|s| usize::from(d.detect(&s.transition()))).sum()
}

fn benches(c: &mut Criterion) {
    let trajs = sample();
    let sample_steps: usize = trajs.iter().map(Vec::len).sum();
    let mut g = c.benchmark_group("sample");
    g.throughput(Throughput::Elements(sample_steps as u64));
    for preset in [
        DetectorPreset::Score,
        DetectorPreset::Subgoals,
        DetectorPreset::TextWorldScore,
        DetectorPreset::Alfworld,
    ] {
        let mut d = preset.build().expect("preset");
        g.bench_function(preset.to_string(), |b| {
            b.iter(|| black_box(run_sample(&mut d, black_box(&trajs))))
        });
    }
    g.finish();

    let steps = synthetic(100_000);
    let mut g = c.benchmark_group("synthetic_1e5x600");
    g.throughput(Throughput::Elements(steps.len() as u64));
    let mut alfworld = DetectorPreset::Alfworld.build().unwrap();
    assert!(
        run_flat(&mut alfworld, &steps) > 5_000,
        "the generator should plant ~10% feedback lines"
    );
    g.bench_function("alfworld", |b| {
        b.iter(|| black_box(run_flat(&mut alfworld, black_box(&steps))))
    });
    let mut textworld = DetectorPreset::TextWorldScore.build().unwrap();
    g.bench_function("textworld-score", |b| {
        b.iter(|| black_box(run_flat(&mut textworld, black_box(&steps))))
    });
    let children: Vec<Box<dyn MilestoneDetector + Send>> =
        vec![Box::new(ScoreIncrease), DetectorPreset::Alfworld.build().unwrap()];
    let mut any = AnyOf::new(children).expect("non-empty");
    g.bench_function("any_of(score, alfworld)", |b| {
        b.iter(|| black_box(run_flat(&mut any, black_box(&steps))))
    });
    g.finish();
}

/// One walkthrough comparison of two 600-character actions (~5% of the characters differ):
/// `reset` re-indexes the matched expert action, so each iteration is one full
/// `SequenceMatcher(None, a, b).ratio()` with `b` prepared from scratch.
fn bench_walkthrough(c: &mut Criterion) {
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
        a.push_str(words[(rng.next_u64() % words.len() as u64) as usize]);
        a.push(' ');
    }
    let a: String = a.chars().take(600).collect();
    let b: String = a
        .chars()
        .map(|ch| if rng.next_u64() % 20 == 0 { 'x' } else { ch })
        .collect();
    let mut d = ExpertWalkthrough::with_threshold(vec![b], 0.85).expect("valid threshold");
    let t = Transition {
        action: &a,
        ..Default::default()
    };
    assert!(d.detect(&t), "the two actions are similar");
    let mut g = c.benchmark_group("walkthrough_600");
    g.bench_function("ratio", |bch| {
        bch.iter(|| {
            d.reset();
            black_box(d.detect(black_box(&t)))
        })
    });
    g.finish();
}

criterion_group! {
    name = detectors;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2));
    targets = benches, bench_walkthrough
}
criterion_main!(detectors);
