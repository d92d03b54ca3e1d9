//! Oracle of the `detectors` fuzz target.
//!
//! 1. The walkthrough detector's similarity (Python's `difflib` ratio) against [`difflib_py`],
//!    a naive line-by-line port of CPython 3.11's `difflib.SequenceMatcher` (dicts of lists, no
//!    symbol ids, no early exits; the file is the crate's own unit-test oracle): an expert
//!    action `b` is matched by `a` at threshold `t` exactly when the reference ratio is `>= t`,
//!    so thresholds at the reference ratio and the next float above it pin the ratio bit for
//!    bit, also after the matcher moves on to the next expert action.
//! 2. Every detector preset (and `WalkthroughMap`'s `FromStr`) on arbitrary text: no panic,
//!    and the same flags after `reset` as on a fresh detector.

use beacon_rl::milestone::{
    DetectorPreset, ExpertWalkthrough, MilestoneDetector, Transition, WebShopPhases, WebShopTarget,
};

use super::bytes::Bytes;
use super::difflib_py;

/// A boxed detector, as the presets build them.
type BoxedDetector = Box<dyn MilestoneDetector + Send>;

/// Runs one fuzz input through the oracles; panics on a violation.
pub fn run(data: &[u8]) {
    let mut u = Bytes::new(data);
    if u.u8() & 1 == 0 {
        difflib(&mut u);
    } else {
        presets(&mut u);
    }
}

fn difflib(u: &mut Bytes<'_>) {
    let b = u.text(255);
    for _ in 0..u.range(1, 3) {
        let a = u.text(255);
        let expected = difflib_py::SequenceMatcher::new(&a, &b).ratio();
        // Thresholds: the exact ratio and the next float above it (together: the matcher's
        // ratio is bit-exact), a fuzzed value; thresholds outside (0, 1] are rejected.
        let above = f64::from_bits(expected.to_bits() + 1);
        for t in [expected, above, u.f64()] {
            if let Ok(mut d) = ExpertWalkthrough::with_threshold(vec![b.clone()], t) {
                assert_eq!(
                    d.detect(&action(&a)),
                    expected >= t,
                    "ratio({a:?}, {b:?}) = {expected} against threshold {t}"
                );
            }
        }
    }
    // The matcher reused for a second expert action (buffers kept from a different `b`): the
    // first step matches `b` itself (ratio 1), the second is `a` against `b2` at its exact ratio.
    if u.bool() {
        let b2 = u.text(255);
        let a = u.text(255);
        let expected = difflib_py::SequenceMatcher::new(&a, &b2).ratio();
        if let Ok(mut d) = ExpertWalkthrough::with_threshold(vec![b.clone(), b2.clone()], expected) {
            assert!(d.detect(&action(&b)));
            assert!(
                d.detect(&action(&a)),
                "after set_b({b2:?}): ratio({a:?}) = {expected}"
            );
        }
    }
}

fn action(a: &str) -> Transition<'_> {
    Transition {
        action: a,
        ..Default::default()
    }
}

fn presets(u: &mut Bytes<'_>) {
    // Detector inputs: a few trajectories of fuzzed transitions.
    let trajectories: Vec<Vec<Step>> = (0..u.range(1, 3))
        .map(|_| (0..u.range(1, 6)).map(|_| Step::new(u)).collect())
        .collect();
    let expert: Vec<String> = (0..u.range(0, 4)).map(|_| u.text(40)).collect();
    let threshold = if u.bool() { 0.85 } else { u.f64() };
    let asin = u.text(12);
    let options: Vec<String> = (0..u.range(0, 2)).map(|_| u.text(12)).collect();
    // The JSON loader needs beacon-rl's `serde` feature (the fuzz crate's `serde` feature,
    // on by default, turns it on; the replay test follows the root crate's). Nothing is
    // decoded after this text, so inputs mean the same with or without it.
    #[cfg(feature = "serde")]
    drop(u.text(64).parse::<beacon_rl::milestone::WalkthroughMap>());

    // Presets built from the task's input, on every run.
    let mut detectors: Vec<Box<dyn MilestoneDetector + Send>> = Vec::new();
    if let Ok(d) = ExpertWalkthrough::with_threshold(expert, threshold) {
        detectors.push(Box::new(d));
    }
    if let Ok(goal) = WebShopTarget::new(asin.as_str(), options) {
        detectors.push(Box::new(WebShopPhases::new(goal).expect("a valid goal builds")));
    }
    for detector in &mut detectors {
        check_reset(detector, &trajectories);
    }
    // The others once per process: compiling the text presets' regexes on every run would
    // cost more than the rest of the target.
    PRESETS.with_borrow_mut(|presets| {
        let presets = presets.get_or_insert_with(|| {
            DetectorPreset::ALL
                .iter()
                .filter_map(|p| p.build().ok())
                .collect()
        });
        for detector in presets {
            check_reset(detector, &trajectories);
        }
    });
}

thread_local! {
    static PRESETS: std::cell::RefCell<Option<Vec<BoxedDetector>>> = const { std::cell::RefCell::new(None) };
}

/// Runs the detector twice over the trajectories: `reset` must restore the fresh state.
fn check_reset(detector: &mut BoxedDetector, trajectories: &[Vec<Step>]) {
    let first = flags(detector, trajectories);
    assert_eq!(
        flags(detector, trajectories),
        first,
        "reset did not restore the fresh state"
    );
}

/// The detector's flags over every trajectory, `reset` before each.
fn flags(detector: &mut BoxedDetector, trajectories: &[Vec<Step>]) -> Vec<bool> {
    let mut out = Vec::new();
    for steps in trajectories {
        detector.reset();
        for (i, s) in steps.iter().enumerate() {
            out.push(detector.detect(&s.transition(i)));
        }
    }
    out
}

/// One fuzzed transition, owning its text.
struct Step {
    observation: String,
    action: String,
    next_observation: String,
    score: Option<f64>,
    next_score: Option<f64>,
    env_flag: Option<bool>,
    subgoals: Vec<String>,
}

impl Step {
    fn new(u: &mut Bytes<'_>) -> Self {
        let opt = |u: &mut Bytes<'_>| if u.bool() { Some(u.f64()) } else { None };
        Self {
            observation: u.text(40),
            action: u.text(40),
            next_observation: u.text(80),
            score: opt(u),
            next_score: opt(u),
            env_flag: if u.bool() { Some(u.bool()) } else { None },
            subgoals: (0..u.range(0, 2)).map(|_| u.text(12)).collect(),
        }
    }

    fn transition(&self, step: usize) -> Transition<'_> {
        Transition {
            step,
            observation: &self.observation,
            action: &self.action,
            next_observation: &self.next_observation,
            score: self.score,
            next_score: self.next_score,
            env_flag: self.env_flag,
            new_subgoals: &self.subgoals,
        }
    }
}
