//! Per-environment detector presets, selectable by name from a command line or a config file.
//!
//! | name | preset | detector | environments |
//! |---|---|---|---|
//! | `score` | [`DetectorPreset::Score`] | [`ScoreIncrease`] | ScienceWorld, TextWorld (score fields) |
//! | `flag` | [`DetectorPreset::Flag`] | [`EnvFlag`] | any environment that reports a milestone flag |
//! | `subgoals` | [`DetectorPreset::Subgoals`] | [`NewSubgoals`] | ScienceWorld (newly completed subgoals) |
//! | `textworld-score` | [`DetectorPreset::TextWorldScore`] | [`TextPatterns::textworld_score`] | TextWorld from the response text alone |
//! | `alfworld` | [`DetectorPreset::Alfworld`] | [`TextPatterns::alfworld`] | ALFWorld |
//! | `webshop` | [`DetectorPreset::WebShop`] | [`WebShopPhases`](super::WebShopPhases) (needs a goal: [`WebShopPhases::new`](super::WebShopPhases::new)) | WebShop |
//!
//! The names are the same for [`FromStr`], [`Display`](fmt::Display) and serde.

use std::fmt;
use std::str::FromStr;

use super::subgoal::NewSubgoals;
use super::text::TextPatterns;
use super::MilestoneDetector;
use super::{EnvFlag, ScoreIncrease};
use crate::error::{Error, Result};

/// A named, per-environment milestone detector.
///
/// ```
/// use beacon_rl::milestone::DetectorPreset;
/// use beacon_rl::milestone::{MilestoneDetector, Transition};
///
/// let preset: DetectorPreset = "alfworld".parse()?;
/// let mut d = preset.build()?;
/// let t = Transition { next_observation: "You clean the mug 1 using the sinkbasin 1.", ..Default::default() };
/// assert!(d.detect(&t));
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum DetectorPreset {
    /// The environment's score went up ([`ScoreIncrease`]).
    #[cfg_attr(feature = "serde", serde(rename = "score"))]
    Score,
    /// The environment's own milestone flag ([`EnvFlag`]).
    #[cfg_attr(feature = "serde", serde(rename = "flag"))]
    Flag,
    /// Newly completed subgoals reported by the environment ([`NewSubgoals`]).
    #[cfg_attr(feature = "serde", serde(rename = "subgoals"))]
    Subgoals,
    /// TextWorld's "Your score has just gone up" message ([`TextPatterns::textworld_score`]).
    #[cfg_attr(feature = "serde", serde(rename = "textworld-score"))]
    TextWorldScore,
    /// ALFWorld subgoal feedback ([`TextPatterns::alfworld`]).
    #[cfg_attr(feature = "serde", serde(rename = "alfworld"))]
    Alfworld,
    /// WebShop page phases ([`WebShopPhases`](super::WebShopPhases)); needs the task's goal, so it is built with
    /// [`WebShopPhases::new`](super::WebShopPhases::new).
    #[cfg_attr(feature = "serde", serde(rename = "webshop"))]
    WebShop,
    /// The release's ALFWorld path: the task's expert actions matched in order
    /// ([`ExpertWalkthrough`](super::ExpertWalkthrough)); needs the task's walkthrough, so it is built with
    /// [`ExpertWalkthrough::with_threshold`](super::ExpertWalkthrough::with_threshold).
    #[cfg_attr(feature = "serde", serde(rename = "walkthrough"))]
    Walkthrough,
}

/// Accepted names, in [`DetectorPreset::ALL`] order (for error messages).
const NAMES: &str = "score, flag, subgoals, textworld-score, alfworld, webshop, walkthrough";

impl DetectorPreset {
    /// Every preset, in table order.
    ///
    /// ```
    /// use beacon_rl::milestone::DetectorPreset;
    /// for p in DetectorPreset::ALL {
    ///     assert_eq!(p.to_string().parse::<DetectorPreset>()?, *p);
    /// }
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub const ALL: &'static [DetectorPreset] = &[
        Self::Score,
        Self::Flag,
        Self::Subgoals,
        Self::TextWorldScore,
        Self::Alfworld,
        Self::WebShop,
        Self::Walkthrough,
    ];

    /// The preset's name (for `FromStr`, `Display` and serde).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Score => "score",
            Self::Flag => "flag",
            Self::Subgoals => "subgoals",
            Self::TextWorldScore => "textworld-score",
            Self::Alfworld => "alfworld",
            Self::WebShop => "webshop",
            Self::Walkthrough => "walkthrough",
        }
    }

    /// Whether [`build`](Self::build) needs per-task input it does not have (WebShop's goal,
    /// an expert walkthrough).
    ///
    /// ```
    /// use beacon_rl::milestone::DetectorPreset;
    /// assert!(DetectorPreset::WebShop.needs_task_input());
    /// assert!(!DetectorPreset::Score.needs_task_input());
    /// ```
    pub fn needs_task_input(self) -> bool {
        matches!(self, Self::WebShop | Self::Walkthrough)
    }

    /// A fresh detector for this preset.
    ///
    /// # Errors
    /// [`Error::MissingInput`] for [`DetectorPreset::WebShop`], which needs the task's goal
    /// (build a [`WebShopPhases`](super::WebShopPhases) for it), and for [`DetectorPreset::Walkthrough`], which
    /// needs the task's expert actions (build an [`ExpertWalkthrough`](super::ExpertWalkthrough) for it).
    ///
    /// ```
    /// use beacon_rl::milestone::DetectorPreset;
    /// use beacon_rl::milestone::{MilestoneDetector, Transition};
    /// let mut d = DetectorPreset::Score.build()?;
    /// assert!(d.detect(&Transition { score: Some(17.0), next_score: Some(25.0), ..Default::default() }));
    /// assert!(DetectorPreset::WebShop.build().is_err());
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn build(self) -> Result<Box<dyn MilestoneDetector + Send>> {
        Ok(match self {
            Self::Score => Box::new(ScoreIncrease),
            Self::Flag => Box::new(EnvFlag),
            Self::Subgoals => Box::new(NewSubgoals),
            Self::TextWorldScore => Box::new(TextPatterns::textworld_score()),
            Self::Alfworld => Box::new(TextPatterns::alfworld()),
            Self::WebShop => {
                return Err(Error::MissingInput(
                    "the webshop preset needs the task's goal: use WebShopPhases::new",
                ))
            }
            Self::Walkthrough => {
                return Err(Error::MissingInput(
                    "the walkthrough preset needs the task's expert actions: use ExpertWalkthrough::with_threshold",
                ))
            }
        })
    }
}

impl FromStr for DetectorPreset {
    type Err = Error;

    /// Parses a preset name, ignoring ASCII case and surrounding whitespace.
    ///
    /// ```
    /// use beacon_rl::milestone::DetectorPreset;
    /// assert_eq!(" WebShop ".parse::<DetectorPreset>()?, DetectorPreset::WebShop);
    /// assert!("alfred".parse::<DetectorPreset>().is_err());
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    fn from_str(s: &str) -> Result<Self> {
        let wanted = s.trim();
        Self::ALL
            .iter()
            .copied()
            .find(|p| p.name().eq_ignore_ascii_case(wanted))
            .ok_or_else(|| Error::UnknownName {
                what: "detector preset",
                name: s.to_owned(),
                expected: NAMES,
            })
    }
}

impl fmt::Display for DetectorPreset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_list_matches_all() {
        let joined: Vec<&str> = DetectorPreset::ALL.iter().map(|p| p.name()).collect();
        assert_eq!(joined.join(", "), NAMES);
    }
}
