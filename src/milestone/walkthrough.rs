//! Expert-walkthrough milestones: the BEACON release's ALFWorld detector
//! (`migpo/core_migpo.py`, `match_milestones`).
//!
//! Each task has an expert action list e_0, e_1, …, e_{K−1}. Walking the agent's actions
//! a_0, a_1, … in order with a pointer k (starting at 0):
//!
//! ```text
//! step t is a milestone  ⇔  k < K  and  ratio(a_t, e_k) ≥ threshold;   then k ← k + 1
//! ```
//!
//! where `ratio(a, b)` is Python's `difflib.SequenceMatcher(None, a, b).ratio()`
//! (a port of CPython's `difflib`). So the k-th expert action is matched by the first agent action after
//! the (k−1)-th match that is similar enough; an action matches at most one expert action; an
//! expert action that is never matched leaves no milestone and blocks all later ones (a later
//! expert action done "early" does not count). The default threshold is 0.85, the release's.
//!
//! **Argument order.** The release calls `are_similar(action, milestones[k])`, i.e.
//! `ratio(a = agent action, b = expert action)`. The ratio is not symmetric (see
//! the module docs of `difflib`), so this module uses the same order: for example
//! `ratio("ac", "bcccabbc") = 0.4` while `ratio("bcccabbc", "ac") = 0.2`.
//!
//! Fuzzy matching is what the release does, with its consequences: at 0.85,
//! `"go to fridge 2"` counts for the expert's `"go to fridge 1"` (2·13/28 ≈ 0.93).
//!
//! ```
//! use beacon_rl::milestone::ExpertWalkthrough;
//! use beacon_rl::milestone::{detect_milestones, Transition};
//! use beacon_rl::RolloutBatch;
//!
//! let expert = vec!["go to fridge 1".to_string(), "open fridge 1".to_string()];
//! let mut detector = ExpertWalkthrough::new(expert);
//! let actions = ["look", "go to fridge 1", "go to fridge 1", "open fridge 1"];
//! let batch = RolloutBatch::from_blocks(1, &[4], vec![1.0])?;
//! let flags = detect_milestones(&batch, &mut detector, |row, _| Transition {
//!     action: actions[row],
//!     ..Default::default()
//! })?;
//! // The repeated "go to fridge 1" is compared with "open fridge 1" (ratio 0.74): no match.
//! assert_eq!(flags, [false, true, false, true]);
//! # Ok::<(), beacon_rl::Error>(())
//! ```

use std::borrow::Cow;
use std::collections::HashMap;

use super::difflib::Matcher;
use crate::error::{Error, Result};
use crate::milestone::{MilestoneDetector, Transition};

fn check_threshold(threshold: f64) -> Result<()> {
    // A threshold <= 0 would match every action: reject it rather than detect nonsense.
    if threshold > 0.0 && threshold <= 1.0 {
        Ok(())
    } else {
        Err(Error::InvalidConfig {
            name: "threshold",
            value: threshold,
            expected: "finite, in (0, 1]",
        })
    }
}

/// Matches an agent's actions against an expert walkthrough, in order (see the module docs).
///
/// Holds the expert list (owned or borrowed), the threshold, the index of the next expert
/// action and a similarity matcher prepared for that action, so each step costs one ratio computation
/// without allocation. [`MilestoneDetector::reset`] restarts at expert action 0.
///
/// ```
/// use beacon_rl::milestone::ExpertWalkthrough;
/// use beacon_rl::milestone::{MilestoneDetector, Transition};
///
/// let expert = vec!["take apple 1 from fridge 1".to_string()];
/// let mut d = ExpertWalkthrough::new(&expert);
/// let step = |action| Transition { action, ..Default::default() };
/// assert!(!d.detect(&step("look")));
/// assert!(d.detect(&step("take apple 1 from fridge 1")));
/// assert!(!d.detect(&step("take apple 1 from fridge 1"))); // nothing left to match
/// d.reset();
/// assert!(d.detect(&step("take apple 1 from fridge 1"))); // expert action 0 again
/// ```
#[derive(Debug, Clone)]
pub struct ExpertWalkthrough<'a> {
    expert: Cow<'a, [String]>,
    threshold: f64,
    next: usize,
    /// Prepared with `b = expert[next]` whenever `next < expert.len()`.
    matcher: Matcher,
}

impl ExpertWalkthrough<'_> {
    /// The release's similarity threshold for matching an agent action to an expert action.
    const DEFAULT_THRESHOLD: f64 = 0.85;
}

impl<'a> ExpertWalkthrough<'a> {
    /// A detector for `expert` (a `Vec<String>`, `&Vec<String>` or `&[String]`) with the
    /// default threshold, the release's 0.85.
    ///
    /// ```
    /// use beacon_rl::milestone::ExpertWalkthrough;
    /// use beacon_rl::milestone::{MilestoneDetector, Transition};
    /// let mut d = ExpertWalkthrough::new(vec!["open drawer 1".to_string()]);
    /// assert!(d.detect(&Transition { action: "open drawer 1", ..Default::default() }));
    /// ```
    pub fn new(expert: impl Into<Cow<'a, [String]>>) -> Self {
        let expert = expert.into();
        let matcher = Matcher::new(expert.first().map_or("", String::as_str));
        Self {
            expert,
            threshold: Self::DEFAULT_THRESHOLD,
            next: 0,
            matcher,
        }
    }

    /// A detector with a custom threshold: an agent action matches when its ratio against the
    /// expert action is `>= threshold`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] (`name: "threshold"`) unless `0 < threshold <= 1`.
    ///
    /// ```
    /// use beacon_rl::milestone::ExpertWalkthrough;
    /// let expert = vec!["open drawer 1".to_string()];
    /// assert!(ExpertWalkthrough::with_threshold(&expert, 0.9).is_ok());
    /// assert!(ExpertWalkthrough::with_threshold(&expert, 0.0).is_err());
    /// ```
    pub fn with_threshold(expert: impl Into<Cow<'a, [String]>>, threshold: f64) -> Result<Self> {
        check_threshold(threshold)?;
        let mut d = Self::new(expert);
        d.threshold = threshold;
        Ok(d)
    }

    /// How many expert actions the current trajectory has matched so far (the index of the
    /// next expert action to match).
    #[cfg(test)]
    pub(crate) fn matched(&self) -> usize {
        self.next
    }

    pub(crate) fn is_complete(&self) -> bool {
        self.next >= self.expert.len()
    }
}

impl MilestoneDetector for ExpertWalkthrough<'_> {
    fn detect(&mut self, transition: &Transition<'_>) -> bool {
        if self.is_complete() {
            return false;
        }
        // The release's are_similar(action, milestones[k]): a = agent action, b = expert.
        if !self.matcher.ratio_at_least(transition.action, self.threshold) {
            return false;
        }
        self.next += 1;
        if let Some(next) = self.expert.get(self.next) {
            self.matcher.set_b(next);
        }
        true
    }

    fn reset(&mut self) {
        if self.next != 0 {
            self.next = 0;
            if let Some(first) = self.expert.first() {
                self.matcher.set_b(first);
            }
        }
    }
}

/// Expert walkthroughs keyed by task id (ALFWorld's trial id, a game file name…).
///
/// With the `serde` feature it (de)serializes as a plain JSON object mapping each task id to
/// its expert action list: `{"task-1": ["go to fridge 1", "open fridge 1"], …}`; see
/// its [`FromStr`](std::str::FromStr) impl. A task's detector is
/// [`ExpertWalkthrough::new`] (or [`with_threshold`](ExpertWalkthrough::with_threshold)) on
/// [`get`](Self::get)'s actions; a task without a walkthrough gets no milestone.
///
/// ```
/// use beacon_rl::milestone::{ExpertWalkthrough, WalkthroughMap};
/// use beacon_rl::milestone::{MilestoneDetector, Transition};
///
/// let map: WalkthroughMap =
///     [("trial-3".to_string(), vec!["go to sinkbasin 1".into(), "clean mug 1 with sinkbasin 1".into()])]
///         .into_iter()
///         .collect();
/// let mut d = ExpertWalkthrough::new(map.get("trial-3").expect("known task"));
/// assert!(d.detect(&Transition { action: "go to sinkbasin 1", ..Default::default() }));
/// assert!(map.get("unknown").is_none());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(transparent)
)]
pub struct WalkthroughMap {
    tasks: HashMap<String, Vec<String>>,
}

impl WalkthroughMap {
    /// The expert actions of `task`, if known.
    ///
    /// ```
    /// # use beacon_rl::milestone::WalkthroughMap;
    /// let map: WalkthroughMap = [("t".to_string(), vec!["look".to_string()])].into_iter().collect();
    /// assert_eq!(map.get("t").map(<[String]>::len), Some(1));
    /// assert!(map.get("u").is_none());
    /// ```
    pub fn get(&self, task: &str) -> Option<&[String]> {
        self.tasks.get(task).map(Vec::as_slice)
    }
}

impl FromIterator<(String, Vec<String>)> for WalkthroughMap {
    fn from_iter<I: IntoIterator<Item = (String, Vec<String>)>>(iter: I) -> Self {
        Self {
            tasks: iter.into_iter().collect(),
        }
    }
}

/// Adds walkthroughs, each replacing an earlier one of the same task.
///
/// ```
/// # use beacon_rl::milestone::WalkthroughMap;
/// let mut map = WalkthroughMap::default();
/// map.extend([("t".to_string(), vec!["look".to_string()])]);
/// map.extend([("t".to_string(), vec![])]);
/// assert_eq!(map.get("t"), Some(&[][..]));
/// ```
impl Extend<(String, Vec<String>)> for WalkthroughMap {
    fn extend<I: IntoIterator<Item = (String, Vec<String>)>>(&mut self, iter: I) {
        self.tasks.extend(iter);
    }
}

/// Parses a JSON object `{task id: [expert action, …], …}`.
///
/// # Errors
/// [`Error::Parse`] (`what: "walkthrough JSON"`) for invalid JSON or another shape (the
/// message gives line and column).
///
/// ```
/// use beacon_rl::milestone::WalkthroughMap;
/// let map: WalkthroughMap = r#"{"t1": ["look", "open drawer 1"], "t2": []}"#.parse()?;
/// assert!(map.get("t2").is_some_and(<[String]>::is_empty));
/// assert_eq!(map.get("t1").unwrap()[1], "open drawer 1");
/// assert!(r#"{"t1": "look"}"#.parse::<WalkthroughMap>().is_err());
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[cfg(feature = "serde")]
impl std::str::FromStr for WalkthroughMap {
    type Err = Error;

    fn from_str(json: &str) -> Result<Self> {
        serde_json::from_str(json).map_err(|e| Error::Parse {
            what: "walkthrough JSON",
            reason: e.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::milestone::difflib::ratio;

    fn owned(actions: &[&str]) -> Vec<String> {
        actions.iter().map(|s| s.to_string()).collect()
    }

    /// Runs `detector` over one trajectory of agent actions (after a reset).
    fn run(detector: &mut ExpertWalkthrough<'_>, actions: &[&str]) -> Vec<bool> {
        detector.reset();
        actions
            .iter()
            .map(|&action| {
                detector.detect(&Transition {
                    action,
                    ..Default::default()
                })
            })
            .collect()
    }

    #[test]
    fn matches_in_order() {
        let expert = owned(&["go to fridge 1", "open fridge 1", "take apple 1 from fridge 1"]);
        let mut d = ExpertWalkthrough::new(&expert);
        let flags = run(
            &mut d,
            &[
                "look",
                "go to fridge 1",
                "open fridge 1",
                "take apple 1 from fridge 1",
            ],
        );
        assert_eq!(flags, [false, true, true, true]);
        assert!(d.is_complete());
    }

    #[test]
    fn repeated_agent_actions_match_once() {
        // After "go to fridge 1" matched e_0, the pointer is at e_1 = "open fridge 1";
        // ratio("go to fridge 1", "open fridge 1") = 2·10/27 = 0.74 < 0.85: no second match.
        assert_eq!(ratio("go to fridge 1", "open fridge 1"), 20.0 / 27.0);
        let expert = owned(&["go to fridge 1", "open fridge 1"]);
        let mut d = ExpertWalkthrough::new(&expert);
        assert_eq!(
            run(&mut d, &["go to fridge 1", "go to fridge 1", "open fridge 1"]),
            [true, false, true]
        );
    }

    #[test]
    fn repeated_expert_actions_need_repeated_agent_actions() {
        // e_0 = e_1: each agent occurrence matches one of them, one per step. The
        // "open cabinet 1" in between is compared with e_1 = "go to cabinet 1":
        // 2·11/29 = 0.76 < 0.85, no match.
        let expert = owned(&["go to cabinet 1", "go to cabinet 1", "open cabinet 1"]);
        let mut d = ExpertWalkthrough::new(&expert);
        assert_eq!(
            run(
                &mut d,
                &[
                    "go to cabinet 1",
                    "open cabinet 1",
                    "go to cabinet 1",
                    "open cabinet 1"
                ]
            ),
            [true, false, true, true]
        );
    }

    #[test]
    fn out_of_order_actions_do_not_count() {
        // "open fridge 1" before "go to fridge 1": the pointer is still at e_0, and
        // ratio("open fridge 1", "go to fridge 1") = 0.74 < 0.85, so it is no milestone.
        let expert = owned(&["go to fridge 1", "open fridge 1"]);
        let mut d = ExpertWalkthrough::new(&expert);
        assert_eq!(
            run(&mut d, &["open fridge 1", "go to fridge 1", "open fridge 1"]),
            [false, true, true]
        );
    }

    #[test]
    fn an_unmatched_expert_action_blocks_the_rest() {
        // e_1 = "open fridge 1" never happens: e_2 done afterwards leaves no milestone.
        // ratio("take apple 1 from fridge 1", "open fridge 1") = 2·10/39 = 0.51.
        let expert = owned(&["go to fridge 1", "open fridge 1", "take apple 1 from fridge 1"]);
        let mut d = ExpertWalkthrough::new(&expert);
        assert_eq!(
            run(&mut d, &["go to fridge 1", "take apple 1 from fridge 1"]),
            [true, false]
        );
        assert_eq!(d.matched(), 1);
        assert!(!d.is_complete());
    }

    #[test]
    fn threshold_is_inclusive_at_the_edge() {
        // 20 code points each; common prefix of 17 and no other match:
        // ratio = 2·17/40 = 0.85, the same f64 as the literal 0.85 (both are 17/20 correctly rounded).
        let expert = owned(&["abcdefghijklmnopqrst"]);
        assert_eq!(ratio("abcdefghijklmnopqXYZ", &expert[0]), 0.85);
        let mut d = ExpertWalkthrough::new(&expert);
        assert_eq!(run(&mut d, &["abcdefghijklmnopqXYZ"]), [true]);
        // One code point less in common: 2·16/40 = 0.8 < 0.85.
        assert_eq!(run(&mut d, &["abcdefghijklmnopXYZW"]), [false]);
        // The next f64 above 0.85 rejects the 0.85 pair.
        let above = f64::from_bits(0.85f64.to_bits() + 1);
        let mut strict = ExpertWalkthrough::with_threshold(&expert, above).unwrap();
        assert_eq!(run(&mut strict, &["abcdefghijklmnopqXYZ"]), [false]);
        // Threshold 1.0: only the identical action.
        let mut exact = ExpertWalkthrough::with_threshold(&expert, 1.0).unwrap();
        assert_eq!(
            run(&mut exact, &["abcdefghijklmnopqrsX", "abcdefghijklmnopqrst"]),
            [false, true]
        );
    }

    #[test]
    fn argument_order_is_agent_then_expert() {
        // ratio(a = "ac", b = "bcccabbc") = 0.4, ratio(a = "bcccabbc", b = "ac") = 0.2.
        // Expert "bcccabbc", agent "ac", threshold 0.3: the release's order gives 0.4 -> match.
        let expert = owned(&["bcccabbc"]);
        let mut d = ExpertWalkthrough::with_threshold(&expert, 0.3).unwrap();
        assert_eq!(run(&mut d, &["ac"]), [true]);
        // Roles swapped: ratio("bcccabbc", "ac") = 0.2 -> no match.
        let expert = owned(&["ac"]);
        let mut d = ExpertWalkthrough::with_threshold(&expert, 0.3).unwrap();
        assert_eq!(run(&mut d, &["bcccabbc"]), [false]);
    }

    #[test]
    fn near_miss_objects_match_as_in_the_release() {
        // ratio("go to fridge 2", "go to fridge 1") = 2·13/28 = 0.93 >= 0.85.
        let expert = owned(&["go to fridge 1"]);
        let mut d = ExpertWalkthrough::new(&expert);
        assert_eq!(run(&mut d, &["go to fridge 2"]), [true]);
    }

    #[test]
    fn reset_restarts_at_the_first_expert_action() {
        let expert = owned(&["look", "inventory"]);
        let mut d = ExpertWalkthrough::new(expert);
        assert_eq!(run(&mut d, &["look", "inventory"]), [true, true]);
        // Without reset nothing is left; after reset "look" matches e_0 again.
        assert!(!d.detect(&Transition {
            action: "look",
            ..Default::default()
        }));
        assert_eq!(run(&mut d, &["inventory", "look"]), [false, true]);
        assert_eq!(d.matched(), 1);
    }

    #[test]
    fn empty_walkthrough_never_fires() {
        let mut d = ExpertWalkthrough::new(Vec::new());
        assert_eq!(run(&mut d, &["look", ""]), [false, false]);
    }

    #[test]
    fn threshold_validation() {
        for t in [0.0, -0.1, 1.0 + 1e-12, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                ExpertWalkthrough::with_threshold(Vec::new(), t),
                Err(Error::InvalidConfig {
                    name: "threshold",
                    ..
                })
            ));
        }
        assert!(ExpertWalkthrough::with_threshold(Vec::new(), 1.0).is_ok());
    }

    #[test]
    fn detect_milestones_resets_per_trajectory() {
        use crate::milestone::detect_milestones;
        use crate::RolloutBatch;
        // Two interleaved trajectories of one task; each is matched from e_0.
        let actions = ["go to fridge 1", "look", "open fridge 1", "go to fridge 1"];
        let batch = RolloutBatch::from_row_keys(&["g"; 4], &["a", "b", "a", "b"], &[0.0; 4]).unwrap();
        let expert = owned(&["go to fridge 1", "open fridge 1"]);
        let mut d = ExpertWalkthrough::new(&expert);
        let flags = detect_milestones(&batch, &mut d, |row, _| Transition {
            action: actions[row],
            ..Default::default()
        })
        .unwrap();
        assert_eq!(flags, [true, false, true, true]);
    }

    #[cfg(feature = "serde")]
    #[test]
    fn json_loading() {
        let map = str::parse::<WalkthroughMap>(
            r#"{"pick_and_place-1": ["go to countertop 1", "take mug 1 from countertop 1"],
                "look_at-2": []}"#,
        )
        .unwrap();
        assert_eq!(map.tasks.len(), 2);
        assert_eq!(map.get("look_at-2"), Some(&[][..]));
        let mut d = ExpertWalkthrough::new(map.get("pick_and_place-1").unwrap());
        assert_eq!(
            run(&mut d, &["go to countertop 1", "take mug 1 from countertop 1"]),
            [true, true]
        );
        // Round trip through serde.
        let back = str::parse::<WalkthroughMap>(&serde_json::to_string(&map).unwrap()).unwrap();
        assert_eq!(back, map);
        for bad in ["", "[]", r#"{"t": [1]}"#, r#"{"t": "look"}"#, "{"] {
            assert!(
                matches!(
                    str::parse::<WalkthroughMap>(bad),
                    Err(Error::Parse {
                        what: "walkthrough JSON",
                        ..
                    })
                ),
                "{bad:?}"
            );
        }
    }
}
