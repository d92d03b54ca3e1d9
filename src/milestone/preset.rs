//! Per-environment detector presets, selectable by name from a command line or a config file.
//!
//! | name | preset | detector | environments |
//! |---|---|---|---|
//! | `score` | [`DetectorPreset::Score`] | [`ScoreIncrease`] | ScienceWorld, TextWorld (score fields) |
//! | `flag` | [`DetectorPreset::Flag`] | [`EnvFlag`] | any environment that reports a milestone flag |
//! | `subgoals` | [`DetectorPreset::Subgoals`] | [`NewSubgoals`] | ScienceWorld (newly completed subgoals) |
//! | `textworld-score` | [`DetectorPreset::TextWorldScore`] | [`TextPatterns`] (one rule) | TextWorld from the response text alone |
//! | `alfworld` | [`DetectorPreset::Alfworld`] | [`TextPatterns`] (the rules listed on the variant) | ALFWorld |
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
    /// TextWorld's "Your score has just gone up by … point(s)." message: a [`TextPatterns`]
    /// set with that one rule.
    #[cfg_attr(feature = "serde", serde(rename = "textworld-score"))]
    TextWorldScore,
    /// ALFWorld subgoal feedback: a [`TextPatterns`] set with one rule per subgoal kind of
    /// ALFWorld's feedback, case-sensitive.
    ///
    /// Wording is the ALFWorld TextWorld grammar (`alfworld/data/alfred.twl2`, actions
    /// `PickupObject`, `PutObject`, `HeatObject`, `CoolObject`, `CleanObject`, `SliceObject`,
    /// `ToggleObject`); every pattern starts at an ASCII word boundary and is matched anywhere in
    /// the response, because the receptacle-object variants of the grammar prefix the sentence
    /// (`"PutObjectInReceptacleObject: You put the …"`).
    ///
    /// | name | matches | real feedback line |
    /// |---|---|---|
    /// | `pick_up` | `You pick up the …` | `You pick up the egg 2 from the countertop 3.` |
    /// | `put` | `You put the … in/on the …` (game files 2.1.1, the ReAct/verl-agent setting) | `You put the lettuce 1 in/on the diningtable 1.` |
    /// | `move` | `You move the … to the …` (game files patched to 2.1.2, `move {o} to {r}`) | `You move the mug 2 to the coffeemachine 1.` |
    /// | `heat` | `You heat the … using the …` | `You heat the egg 2 using the microwave 1.` |
    /// | `cool` | `You cool the … using the …` | `You cool the pan 1 using the fridge 1.` |
    /// | `clean` | `You clean the … using the …` | `You clean the lettuce 1 using the sinkbasin 1.` |
    /// | `slice` | `You slice(d) the … with the …` | `You sliced the apple 1 with the knife 1.` (grammar template `You sliced the {co.name} with the {ko.name}.`) |
    /// | `light` | `You turn on the desklamp/floorlamp` | `You turn on the desklamp 1.` |
    ///
    /// TextWorld's own games answer `take` with the same pick-up sentence (bundled sample:
    /// `You pick up the knife from the ground.`), a check of that wording on a real run.
    ///
    /// Near misses that do not match: `Nothing happens.` (inadmissible command),
    /// `You turn off the desklamp 1.`, `You open the fridge 1. …`, `You arrive at loc 10. …`,
    /// `You don't see any switch on the apple 1.`, `This is a hot egg.` (examining a state is no
    /// progress).
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
