//! Milestone detection: the indicator Φ(s, a, s′) → {0, 1}.
//!
//! A [`MilestoneDetector`] looks at one [`Transition`] (s_t, a_t, s_{t+1}) and says whether it
//! completes a subgoal. Detectors may keep per-trajectory state (an expert walkthrough matched
//! in order, a page-phase machine): [`MilestoneDetector::reset`] is called before the first
//! step of every trajectory. Any `FnMut(&Transition) -> bool` closure is a detector.
//!
//! [`detect_milestones`] runs a detector once over a whole [`RolloutBatch`] and yields one flag
//! per caller row. Callers that already have flags (the environment reports them) skip
//! detection and pass the flags to the estimator directly.
//!
//! Built-ins here: [`ScoreIncrease`] (ScienceWorld, TextWorld: the environment's score went up)
//! and [`EnvFlag`] (the environment already reports a milestone flag). The detector families,
//! all re-exported here: [`TextPatterns`] (regex patterns on the response: ALFWorld feedback,
//! TextWorld's score message), [`WebShopPhases`] (WebShop page phases), [`NewSubgoals`]
//! (ScienceWorld's newly completed subgoals), [`AnyOf`] / [`AllOf`] / [`Not`] (combinators),
//! [`DetectorPreset`] (per-environment presets by name), [`ExpertWalkthrough`] (an expert
//! walkthrough matched in order), [`MilestoneDiscovery`] (milestones found from rollouts alone) and
//! [`MilestoneAgreement`] (two detectors' flags compared).

mod agreement;
mod combinators;
pub(crate) mod difflib;
mod discover;
mod preset;
mod subgoal;
mod text;
mod walkthrough;
mod webshop;

pub use agreement::MilestoneAgreement;
pub use combinators::{AllOf, AnyOf, Not};
pub use discover::{baseline::frequency_baseline, config::DiscoveryConfig, discovery::MilestoneDiscovery};
pub use preset::DetectorPreset;
pub use subgoal::NewSubgoals;
pub use text::{TextPatterns, TextPatternsBuilder};
pub use walkthrough::{ExpertWalkthrough, WalkthroughMap};
pub use webshop::{WebShopGoal, WebShopItem, WebShopPhase, WebShopPhases, WebShopTarget};

use crate::batch::RolloutBatch;
use crate::error::{check_len, Result};
#[cfg(any(doc, test))]
use crate::Error;

/// One transition (s_t, a_t, s_{t+1}) as a detector sees it.
///
/// Text fields borrow from the caller's data; fields an environment does not provide stay at
/// their defaults (`""`, `None`, empty).
///
/// ```
/// use beacon_rl::milestone::Transition;
/// let t = Transition {
///     action: "take knife",
///     next_observation: "You pick up the knife from the counter.",
///     ..Transition::default()
/// };
/// assert_eq!(t.step, 0);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Transition<'a> {
    /// 0-based step index t within the trajectory.
    pub step: usize,
    /// s_t: what the agent saw before acting (may be empty when only responses are recorded).
    pub observation: &'a str,
    /// a_t: the agent's action.
    pub action: &'a str,
    /// s_{t+1}: the environment's response to the action.
    pub next_observation: &'a str,
    /// The environment's score before the step, if it reports one.
    pub score: Option<f64>,
    /// The environment's score after the step, if it reports one.
    pub next_score: Option<f64>,
    /// A milestone flag the environment itself reports for this step.
    pub env_flag: Option<bool>,
    /// Subgoals the environment reports as newly completed at this step.
    pub new_subgoals: &'a [String],
}

/// The milestone indicator Φ(s, a, s′).
///
/// `detect` takes `&mut self` so that detectors can keep state across the steps of one
/// trajectory; [`reset`](MilestoneDetector::reset) is called before each trajectory.
///
/// ```
/// use beacon_rl::milestone::{MilestoneDetector, Transition};
///
/// // A closure is a detector.
/// let mut picked_up = |t: &Transition<'_>| t.next_observation.starts_with("You pick up");
/// let step = Transition { next_observation: "You pick up the apple.", ..Default::default() };
/// assert!(picked_up.detect(&step));
/// ```
pub trait MilestoneDetector {
    /// Returns true when the transition completes a milestone.
    fn detect(&mut self, transition: &Transition<'_>) -> bool;

    /// Clears per-trajectory state; called before the first step of every trajectory.
    /// The default does nothing (stateless detectors).
    fn reset(&mut self) {}
}

impl<F> MilestoneDetector for F
where
    F: FnMut(&Transition<'_>) -> bool,
{
    fn detect(&mut self, transition: &Transition<'_>) -> bool {
        self(transition)
    }
}

/// A milestone wherever the environment's score went up: `next_score > score`.
///
/// A missing score on either side, or a NaN, is no milestone. A score that drops (ScienceWorld
/// sets −100 on a failed `focus on`) is no milestone, and neither is a start above zero: only
/// the change across the step counts. For the first step pass the environment's initial score
/// as `score` (ScienceWorld's `initial_score`), not 0: a task that starts at 17 would otherwise
/// show a false milestone at step 0. On the bundled ScienceWorld and TextWorld sample this
/// reproduces the recorded milestone flags on every step (`tests/it/detectors_real_data.rs`).
///
/// ```
/// use beacon_rl::milestone::{MilestoneDetector, ScoreIncrease, Transition};
/// let mut d = ScoreIncrease;
/// let up = Transition { score: Some(17.0), next_score: Some(25.0), ..Default::default() };
/// let down = Transition { score: Some(25.0), next_score: Some(-100.0), ..Default::default() };
/// assert!(d.detect(&up));
/// assert!(!d.detect(&down));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ScoreIncrease;

impl MilestoneDetector for ScoreIncrease {
    fn detect(&mut self, t: &Transition<'_>) -> bool {
        matches!((t.score, t.next_score), (Some(a), Some(b)) if b > a)
    }
}

/// Uses the milestone flag the environment reports ([`Transition::env_flag`]); a missing flag
/// is no milestone.
///
/// ```
/// use beacon_rl::milestone::{EnvFlag, MilestoneDetector, Transition};
/// let t = Transition { env_flag: Some(true), ..Default::default() };
/// assert!(EnvFlag.detect(&t));
/// assert!(!EnvFlag.detect(&Transition::default()));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct EnvFlag;

impl MilestoneDetector for EnvFlag {
    fn detect(&mut self, t: &Transition<'_>) -> bool {
        t.env_flag == Some(true)
    }
}

/// Runs `detector` over every trajectory of `batch` and returns one milestone flag per caller
/// row.
///
/// `transition(row, step)` builds the transition of a caller row (`step` is its 0-based index
/// within its trajectory). Trajectories are visited one at a time, their steps in order, and
/// the detector is reset before each. Pass `&mut *boxed` for a `Box<dyn MilestoneDetector>`.
///
/// # Errors
/// [`Error::CapacityExceeded`] when the flags or the batch's row index cannot be allocated
/// (a [`RolloutBatch::from_offsets`] batch's row count is a claim no column backs here).
///
/// ```
/// use beacon_rl::milestone::{detect_milestones, ScoreIncrease, Transition};
/// use beacon_rl::RolloutBatch;
///
/// let batch = RolloutBatch::from_blocks(1, &[3], vec![1.0])?;
/// let scores = [0.0, 10.0, 10.0, 25.0]; // initial score, then after each step
/// let flags = detect_milestones(&batch, &mut ScoreIncrease, |row, _step| Transition {
///     score: Some(scores[row]),
///     next_score: Some(scores[row + 1]),
///     ..Default::default()
/// })?;
/// assert_eq!(flags, vec![true, false, true]);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
pub fn detect_milestones<'a, D, F>(batch: &RolloutBatch, detector: &mut D, transition: F) -> Result<Vec<bool>>
where
    D: MilestoneDetector + ?Sized,
    F: FnMut(usize, usize) -> Transition<'a>,
{
    batch.try_step_rows()?;
    let mut flags = batch.try_row_flags()?;
    detect_milestones_unchecked(batch, detector, transition, &mut flags);
    Ok(flags)
}

fn detect_milestones_unchecked<'a, D, F>(
    batch: &RolloutBatch,
    detector: &mut D,
    mut transition: F,
    flags: &mut [bool],
) where
    D: MilestoneDetector + ?Sized,
    F: FnMut(usize, usize) -> Transition<'a>,
{
    for j in 0..batch.num_trajectories() {
        detector.reset();
        for (step, &row) in batch.trajectory_rows(j).iter().enumerate() {
            let mut t = transition(row, step);
            t.step = step;
            flags[row] = detector.detect(&t);
        }
    }
}

/// Checks a per-row milestone flag column against the batch.
pub(crate) fn check_flags(batch: &RolloutBatch, flags: &[bool]) -> Result<()> {
    check_len("milestone flags", batch.num_steps(), flags.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_counts_claimed_beyond_memory_are_errors_not_aborts() {
        use super::{frequency_baseline, DiscoveryConfig, MilestoneDiscovery};
        // 2^61 rows: the row index alone would be 2^64 bytes (the flags 2^61). Built before
        // the flags, it is the error named; no transition is asked for.
        let batch = crate::batch::claiming(1 << 61);
        let want = Err(Error::CapacityExceeded {
            what: "row index (8 bytes a row)",
            requested: 1 << 61,
            limit: RolloutBatch::MAX_STEPS,
        });
        let never = |_: usize, _: usize| -> Transition<'static> { unreachable!("no row exists") };
        assert_eq!(detect_milestones(&batch, &mut EnvFlag, never), want);
        assert_eq!(frequency_baseline(&batch, 0.0, never), want);
        let mut d = MilestoneDiscovery::new(DiscoveryConfig::default()).unwrap();
        assert_eq!(d.discover(&batch, &["task"], never), want);
    }

    #[derive(Default)]
    struct CountResets(usize);
    impl MilestoneDetector for CountResets {
        fn detect(&mut self, t: &Transition<'_>) -> bool {
            // fires on the first step after each reset only
            t.step == 0 && self.0 > 0
        }
        fn reset(&mut self) {
            self.0 += 1;
        }
    }

    #[test]
    fn resets_before_each_trajectory_and_visits_in_step_order() {
        let batch = RolloutBatch::from_row_keys(&[0, 0, 0, 0], &["a", "b", "b", "a"], &[0.0; 4]).unwrap();
        let mut seen = Vec::new();
        let flags = detect_milestones(&batch, &mut CountResets::default(), |row, step| {
            seen.push((row, step));
            Transition::default()
        })
        .unwrap();
        assert_eq!(seen, vec![(0, 0), (3, 1), (1, 0), (2, 1)]);
        assert_eq!(flags, vec![true, true, false, false]);
    }

    #[test]
    fn score_increase_ignores_missing_and_nan() {
        let mut d = ScoreIncrease;
        let t = |a, b| Transition {
            score: a,
            next_score: b,
            ..Default::default()
        };
        assert!(!d.detect(&t(None, Some(1.0))));
        assert!(!d.detect(&t(Some(f64::NAN), Some(1.0))));
        assert!(!d.detect(&t(Some(5.0), Some(5.0))));
        assert!(d.detect(&t(Some(-100.0), Some(-99.0))));
    }
}
