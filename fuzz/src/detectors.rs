//! Oracle of the `detectors` fuzz target.
//!
//! 1. `beacon_rl::difflib` against [`py`], a naive line-by-line port of CPython 3.11's
//!    `difflib.SequenceMatcher` (dicts of lists, no symbol ids, no early exits): `ratio`,
//!    `get_matching_blocks`, `quick_ratio` and `real_quick_ratio` must agree exactly (the
//!    ratios bit for bit), and `ratio_at_least(a, t)` must equal `ratio(a) >= t`.
//! 2. Every detector preset (and `WalkthroughMap::from_json_str`) on arbitrary text: no panic,
//!    and the same flags after `reset` as on a fresh detector.

use beacon_rl::difflib::{ratio, Match, Matcher};
use beacon_rl::milestone::combinators::BoxedDetector;
use beacon_rl::milestone::preset::DetectorPreset;
use beacon_rl::milestone::webshop::WebShopTarget;
use beacon_rl::milestone::{MilestoneDetector, Transition};

use super::bytes::Bytes;

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
    let mut m = Matcher::new(&b);
    // Several `a` against one prepared `b`: buffers are reused between calls.
    for _ in 0..u.range(1, 3) {
        let a = u.text(255);
        let want = py::SequenceMatcher::new(&a, &b);
        let blocks = want.get_matching_blocks();
        let expected = py::ratio_of(&blocks, &a, &b);
        assert_eq!(
            ratio(&a, &b).to_bits(),
            expected.to_bits(),
            "ratio({a:?}, {b:?}): expected {expected}"
        );
        assert_eq!(
            m.ratio(&a).to_bits(),
            expected.to_bits(),
            "Matcher::ratio({a:?}) vs {b:?}"
        );
        let got: Vec<(usize, usize, usize)> = m
            .matching_blocks(&a)
            .into_iter()
            .map(|Match { a, b, size }| (a, b, size))
            .collect();
        assert_eq!(got, blocks, "matching_blocks({a:?}, {b:?})");
        assert_eq!(
            m.quick_ratio(&a).to_bits(),
            want.quick_ratio().to_bits(),
            "quick_ratio"
        );
        assert_eq!(
            m.real_quick_ratio(&a).to_bits(),
            want.real_quick_ratio().to_bits(),
            "real_quick_ratio"
        );
        // Thresholds: the exact ratio (the boundary), a fuzzed value, NaN.
        for t in [expected, u.f64(), f64::NAN] {
            assert_eq!(
                m.ratio_at_least(&a, t),
                expected >= t,
                "ratio_at_least({a:?}, {t}) vs {b:?} (ratio {expected})"
            );
        }
    }
    // The same matcher after `set_b` (buffers reused from a different `b`).
    if u.bool() {
        let b2 = u.text(255);
        m.set_b(&b2);
        let a = u.text(255);
        let expected = py::SequenceMatcher::new(&a, &b2).ratio();
        assert_eq!(
            m.ratio(&a).to_bits(),
            expected.to_bits(),
            "after set_b({b2:?}): ratio({a:?})"
        );
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
    drop(beacon_rl::milestone::walkthrough::WalkthroughMap::from_json_str(
        &u.text(64),
    ));

    // Presets built from the task's input, on every run.
    let mut detectors = Vec::new();
    detectors.extend(DetectorPreset::build_walkthrough(expert, threshold).ok());
    if let Ok(goal) = WebShopTarget::new(asin.as_str(), options) {
        detectors.push(DetectorPreset::build_webshop(goal).expect("a valid goal builds"));
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
                .filter(|p| !p.needs_task_input())
                .map(|p| p.build().expect("presets without task input build"))
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

/// A naive port of CPython 3.11 `Lib/difflib.py`, `SequenceMatcher(None, a, b)` with
/// `autojunk=True`, over code points. Written from the Python source, statement by statement,
/// with Python's data structures (a dict of position lists for `b2j`, a dict for `j2len`),
/// to be obviously equal to it rather than fast. `isjunk` is `None`, so `bjunk` is empty and
/// the junk-extension loops of `find_longest_match` never run; they are kept as comments.
pub mod py {
    use std::collections::HashMap;

    /// `SequenceMatcher(None, a, b)`.
    pub struct SequenceMatcher {
        a: Vec<char>,
        b: Vec<char>,
        b2j: HashMap<char, Vec<usize>>,
    }

    impl SequenceMatcher {
        /// `__init__` → `set_seqs(a, b)` → `set_seq2(b)` → `__chain_b()`.
        pub fn new(a: &str, b: &str) -> Self {
            let a: Vec<char> = a.chars().collect();
            let b: Vec<char> = b.chars().collect();
            // __chain_b
            let mut b2j: HashMap<char, Vec<usize>> = HashMap::new();
            for (i, &elt) in b.iter().enumerate() {
                b2j.entry(elt).or_default().push(i);
            }
            // Purge junk elements: isjunk is None, nothing to do.
            // Purge popular elements that are not junk (CPython keeps them in `bpopular`,
            // which nothing here reads).
            let n = b.len();
            if n >= 200 {
                let ntest = n / 100 + 1;
                let popular: Vec<char> = b2j
                    .iter()
                    .filter(|(_, idxs)| idxs.len() > ntest)
                    .map(|(&elt, _)| elt)
                    .collect();
                for elt in popular {
                    b2j.remove(&elt);
                }
            }
            Self { a, b, b2j }
        }

        /// `find_longest_match(alo, ahi, blo, bhi)`.
        #[allow(clippy::needless_range_loop)] // Python's `for i in range(alo, ahi)`, as written
        pub fn find_longest_match(
            &self,
            alo: usize,
            ahi: usize,
            blo: usize,
            bhi: usize,
        ) -> (usize, usize, usize) {
            let (a, b) = (&self.a, &self.b);
            let (mut besti, mut bestj, mut bestsize) = (alo, blo, 0usize);
            // find longest junk-free match
            let mut j2len: HashMap<usize, usize> = HashMap::new();
            let nothing: Vec<usize> = Vec::new();
            for i in alo..ahi {
                let mut newj2len: HashMap<usize, usize> = HashMap::new();
                for &j in self.b2j.get(&a[i]).unwrap_or(&nothing) {
                    // a[i] matches b[j]
                    if j < blo {
                        continue;
                    }
                    if j >= bhi {
                        break;
                    }
                    // j2lenget(j-1, 0): j - 1 is -1 for j == 0, never a key.
                    let prev = if j == 0 {
                        0
                    } else {
                        j2len.get(&(j - 1)).copied().unwrap_or(0)
                    };
                    let k = prev + 1;
                    newj2len.insert(j, k);
                    if k > bestsize {
                        besti = i + 1 - k;
                        bestj = j + 1 - k;
                        bestsize = k;
                    }
                }
                j2len = newj2len;
            }
            // Extend the best by non-junk elements on each end (popular elements are not
            // junk: isbjunk is bjunk.__contains__ and bjunk is empty).
            let isbjunk = |_c: char| false;
            while besti > alo && bestj > blo && !isbjunk(b[bestj - 1]) && a[besti - 1] == b[bestj - 1] {
                besti -= 1;
                bestj -= 1;
                bestsize += 1;
            }
            while besti + bestsize < ahi
                && bestj + bestsize < bhi
                && !isbjunk(b[bestj + bestsize])
                && a[besti + bestsize] == b[bestj + bestsize]
            {
                bestsize += 1;
            }
            // The two junk-extension loops (isbjunk(...) and ...) cannot run: bjunk is empty.
            (besti, bestj, bestsize)
        }

        /// `get_matching_blocks()`, as `(i, j, n)` triples ending with `(len(a), len(b), 0)`.
        pub fn get_matching_blocks(&self) -> Vec<(usize, usize, usize)> {
            let (la, lb) = (self.a.len(), self.b.len());
            let mut queue = vec![(0, la, 0, lb)];
            let mut matching_blocks = Vec::new();
            while let Some((alo, ahi, blo, bhi)) = queue.pop() {
                let (i, j, k) = self.find_longest_match(alo, ahi, blo, bhi);
                // a[alo:i] vs b[blo:j] unknown
                // a[i:i+k] same as b[j:j+k]
                // a[i+k:ahi] vs b[j+k:bhi] unknown
                if k > 0 {
                    matching_blocks.push((i, j, k));
                    if alo < i && blo < j {
                        queue.push((alo, i, blo, j));
                    }
                    if i + k < ahi && j + k < bhi {
                        queue.push((i + k, ahi, j + k, bhi));
                    }
                }
            }
            matching_blocks.sort();
            // Collapse adjacent blocks.
            let (mut i1, mut j1, mut k1) = (0, 0, 0);
            let mut non_adjacent = Vec::new();
            for (i2, j2, k2) in matching_blocks {
                if i1 + k1 == i2 && j1 + k1 == j2 {
                    k1 += k2;
                } else {
                    if k1 > 0 {
                        non_adjacent.push((i1, j1, k1));
                    }
                    (i1, j1, k1) = (i2, j2, k2);
                }
            }
            if k1 > 0 {
                non_adjacent.push((i1, j1, k1));
            }
            non_adjacent.push((la, lb, 0));
            non_adjacent
        }

        /// `ratio()`.
        pub fn ratio(&self) -> f64 {
            let matches: usize = self.get_matching_blocks().iter().map(|t| t.2).sum();
            calculate_ratio(matches, self.a.len() + self.b.len())
        }

        /// `quick_ratio()`.
        pub fn quick_ratio(&self) -> f64 {
            let mut fullbcount: HashMap<char, i64> = HashMap::new();
            for &elt in &self.b {
                *fullbcount.entry(elt).or_insert(0) += 1;
            }
            let mut avail: HashMap<char, i64> = HashMap::new();
            let mut matches = 0;
            for &elt in &self.a {
                let numb = match avail.get(&elt) {
                    Some(&n) => n,
                    None => fullbcount.get(&elt).copied().unwrap_or(0),
                };
                avail.insert(elt, numb - 1);
                if numb > 0 {
                    matches += 1;
                }
            }
            calculate_ratio(matches, self.a.len() + self.b.len())
        }

        /// `real_quick_ratio()`.
        pub fn real_quick_ratio(&self) -> f64 {
            let (la, lb) = (self.a.len(), self.b.len());
            calculate_ratio(la.min(lb), la + lb)
        }
    }

    /// `ratio()` from already computed `get_matching_blocks()` of `a` against `b`.
    pub fn ratio_of(blocks: &[(usize, usize, usize)], a: &str, b: &str) -> f64 {
        let matches: usize = blocks.iter().map(|t| t.2).sum();
        calculate_ratio(matches, a.chars().count() + b.chars().count())
    }

    /// `_calculate_ratio(matches, length)`: `2.0 * matches / length`, 1.0 for length 0.
    #[allow(clippy::cast_precision_loss)]
    fn calculate_ratio(matches: usize, length: usize) -> f64 {
        if length > 0 {
            2.0 * matches as f64 / length as f64
        } else {
            1.0
        }
    }
}
