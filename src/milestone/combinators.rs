//! Combinators: Φ = Φ₁ ∨ … ∨ Φₙ ([`AnyOf`]), Φ = Φ₁ ∧ … ∧ Φₙ ([`AllOf`]), Φ = ¬Φ₁ ([`Not`]),
//! over boxed detectors (`Box<dyn MilestoneDetector + Send>`).
//!
//! Every child sees every step: `detect` is called on all children, in order, with no
//! short-circuit, so that stateful children (a WebShop phase machine, a walkthrough matcher)
//! stay in step with the trajectory even on steps where an earlier child already decided the
//! result. [`reset`](MilestoneDetector::reset) is forwarded to every child.

use std::fmt;

use super::{MilestoneDetector, Transition};
use crate::error::{Error, Result};

/// A detector behind a box, sendable to another thread (rollout workers build one per
/// trajectory batch): what presets build and combinators hold. A box is itself a detector, so
/// boxes nest and can be passed to [`detect_milestones`](super::detect_milestones) directly.
pub(crate) type BoxedDetector = Box<dyn MilestoneDetector + Send>;

impl MilestoneDetector for BoxedDetector {
    fn detect(&mut self, transition: &Transition<'_>) -> bool {
        (**self).detect(transition)
    }

    fn reset(&mut self) {
        (**self).reset();
    }
}

/// The same for boxes that need not be sent across threads.
///
/// ```
/// use beacon_rl::milestone::{EnvFlag, MilestoneDetector, Transition};
/// let mut d: Box<dyn MilestoneDetector> = Box::new(EnvFlag);
/// assert!(d.detect(&Transition { env_flag: Some(true), ..Default::default() }));
/// ```
impl MilestoneDetector for Box<dyn MilestoneDetector> {
    fn detect(&mut self, transition: &Transition<'_>) -> bool {
        (**self).detect(transition)
    }

    fn reset(&mut self) {
        (**self).reset();
    }
}

fn non_empty(children: Vec<BoxedDetector>, what: &'static str) -> Result<Vec<BoxedDetector>> {
    if children.is_empty() {
        Err(Error::MissingInput(what))
    } else {
        Ok(children)
    }
}

/// Milestone when at least one child fires (logical or). All children are run on every step.
///
/// ```
/// use beacon_rl::milestone::AnyOf;
/// use beacon_rl::milestone::{NewSubgoals, MilestoneDetector, ScoreIncrease, Transition};
///
/// let mut d = AnyOf::new(vec![Box::new(ScoreIncrease), Box::new(NewSubgoals)])?;
/// let up = Transition { score: Some(8.0), next_score: Some(17.0), ..Default::default() };
/// assert!(d.detect(&up));
/// assert!(!d.detect(&Transition::default()));
/// # Ok::<(), beacon_rl::Error>(())
/// ```
pub struct AnyOf {
    children: Vec<BoxedDetector>,
}

impl AnyOf {
    /// Combines `children` (at least one).
    ///
    /// # Errors
    /// [`Error::MissingInput`] when `children` is empty (the result would be constant).
    ///
    /// ```
    /// use beacon_rl::milestone::AnyOf;
    /// assert!(AnyOf::new(vec![]).is_err());
    /// ```
    pub fn new(children: Vec<Box<dyn MilestoneDetector + Send>>) -> Result<Self> {
        Ok(Self {
            children: non_empty(children, "AnyOf needs at least one detector")?,
        })
    }
}

impl MilestoneDetector for AnyOf {
    fn detect(&mut self, t: &Transition<'_>) -> bool {
        let mut fired = false;
        for child in &mut self.children {
            // `|=` on bools evaluates both sides: every child sees the step.
            fired |= child.detect(t);
        }
        fired
    }

    fn reset(&mut self) {
        for child in &mut self.children {
            child.reset();
        }
    }
}

impl fmt::Debug for AnyOf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnyOf")
            .field("children", &self.children.len())
            .finish()
    }
}

/// Milestone when every child fires (logical and). All children are run on every step.
///
/// ```
/// use beacon_rl::milestone::AllOf;
/// use beacon_rl::milestone::{DetectorPreset, MilestoneDetector, ScoreIncrease, Transition};
///
/// // A score increase that TextWorld also announced in the response.
/// let mut d = AllOf::new(vec![Box::new(ScoreIncrease), DetectorPreset::TextWorldScore.build()?])?;
/// let t = Transition {
///     next_observation: "You dice the tomato.\n\nYour score has just gone up by one point.",
///     score: Some(3.0),
///     next_score: Some(4.0),
///     ..Default::default()
/// };
/// assert!(d.detect(&t));
/// assert!(!d.detect(&Transition { next_score: Some(3.0), ..t }));
/// # Ok::<(), beacon_rl::Error>(())
/// ```
pub struct AllOf {
    children: Vec<BoxedDetector>,
}

impl AllOf {
    /// Combines `children` (at least one).
    ///
    /// # Errors
    /// [`Error::MissingInput`] when `children` is empty (the result would be constant).
    ///
    /// ```
    /// use beacon_rl::milestone::AllOf;
    /// assert!(AllOf::new(vec![]).is_err());
    /// ```
    pub fn new(children: Vec<Box<dyn MilestoneDetector + Send>>) -> Result<Self> {
        Ok(Self {
            children: non_empty(children, "AllOf needs at least one detector")?,
        })
    }
}

impl MilestoneDetector for AllOf {
    fn detect(&mut self, t: &Transition<'_>) -> bool {
        let mut all = true;
        for child in &mut self.children {
            // `&=` on bools evaluates both sides: every child sees the step.
            all &= child.detect(t);
        }
        all
    }

    fn reset(&mut self) {
        for child in &mut self.children {
            child.reset();
        }
    }
}

impl fmt::Debug for AllOf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AllOf")
            .field("children", &self.children.len())
            .finish()
    }
}

/// Milestone when the child does not fire (logical not). Mostly useful inside [`AllOf`]:
/// "a score increase that is not the final `eat meal`".
///
/// ```
/// use beacon_rl::milestone::Not;
/// use beacon_rl::milestone::{EnvFlag, MilestoneDetector, Transition};
/// let mut d = Not::new(Box::new(EnvFlag));
/// assert!(d.detect(&Transition::default()));
/// assert!(!d.detect(&Transition { env_flag: Some(true), ..Default::default() }));
/// ```
pub struct Not {
    child: BoxedDetector,
}

impl Not {
    /// Negates `child`.
    ///
    /// ```
    /// use beacon_rl::milestone::{Not, ScoreIncrease};
    /// let _d = Not::new(Box::new(ScoreIncrease));
    /// ```
    pub fn new(child: BoxedDetector) -> Self {
        Self { child }
    }
}

impl MilestoneDetector for Not {
    fn detect(&mut self, t: &Transition<'_>) -> bool {
        !self.child.detect(t)
    }

    fn reset(&mut self) {
        self.child.reset();
    }
}

impl fmt::Debug for Not {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Not").finish_non_exhaustive()
    }
}
