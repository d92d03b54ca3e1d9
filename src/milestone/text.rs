//! Text patterns on the environment's response: Φ(s, a, s′) = 1 when s′ matches one of the
//! patterns (optionally only after an action that matches the rule's action pattern).
//!
//! This is the paper's ALFWorld detector ("pattern matching on environment responses",
//! Preliminaries and Limitations): the TextWorld engine behind ALFWorld answers a successful
//! subgoal action with a fixed sentence ("You heat the egg 2 using the microwave 1."), so a
//! regular expression on the response is an exact, model-free Φ. The same mechanism covers
//! TextWorld's score notification ("Your score has just gone up by one point.").
//!
//! [`TextPatterns`] compiles every unrestricted rule into one [`regex::RegexSet`] and runs it
//! once per step (`is_match` only: no capture, no allocation). Rules restricted to an action
//! are checked only when the set did not already fire, action first (actions are short).
//!
//! Built-in rule lists, built through their presets: [`DetectorPreset::Alfworld`](super::DetectorPreset::Alfworld)
//! (subgoal feedback of the ALFWorld TextWorld grammar `alfworld/data/alfred.twl2`, listed in
//! its docs) and [`DetectorPreset::TextWorldScore`](super::DetectorPreset::TextWorldScore) (the
//! Inform 7 "notify score changes" rule of TextWorld games). To combine one with rules of your
//! own, put both detectors in an [`AnyOf`](super::AnyOf).

use regex::{Regex, RegexBuilder, RegexSet, RegexSetBuilder};

use super::{MilestoneDetector, Transition};
use crate::error::{Error, Result};

/// A built-in response pattern with a real line of environment feedback that it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BuiltinPattern {
    /// Short name of the subgoal the pattern marks.
    pub(crate) name: &'static str,
    /// The regular expression (Rust `regex` syntax), matched anywhere in the response.
    pub(crate) regex: &'static str,
    /// A feedback line the environment really produces for this subgoal.
    pub(crate) example: &'static str,
}

/// ALFWorld subgoal feedback, one rule per subgoal kind.
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
pub(crate) const ALFWORLD_PATTERNS: &[BuiltinPattern] = &[
    BuiltinPattern {
        name: "pick_up",
        regex: r"(?-u:\b)You pick up the \S",
        example: "You pick up the egg 2 from the countertop 3.",
    },
    BuiltinPattern {
        name: "put",
        regex: r"(?-u:\b)You put the \S[^\n]* (?:in/on|in|on) the \S",
        example: "You put the lettuce 1 in/on the diningtable 1.",
    },
    BuiltinPattern {
        name: "move",
        regex: r"(?-u:\b)You move the \S[^\n]* to the \S",
        example: "You move the mug 2 to the coffeemachine 1.",
    },
    BuiltinPattern {
        name: "heat",
        regex: r"(?-u:\b)You heat the \S[^\n]* using the \S",
        example: "You heat the egg 2 using the microwave 1.",
    },
    BuiltinPattern {
        name: "cool",
        regex: r"(?-u:\b)You cool the \S[^\n]* using the \S",
        example: "You cool the pan 1 using the fridge 1.",
    },
    BuiltinPattern {
        name: "clean",
        regex: r"(?-u:\b)You clean the \S[^\n]* using the \S",
        example: "You clean the lettuce 1 using the sinkbasin 1.",
    },
    BuiltinPattern {
        name: "slice",
        regex: r"(?-u:\b)You slice(?:d)? the \S[^\n]* with the \S",
        example: "You sliced the apple 1 with the knife 1.",
    },
    BuiltinPattern {
        name: "light",
        regex: r"(?-u:\b)You turn on the (?:desk|floor)lamp(?-u:\b)",
        example: "You turn on the desklamp 1.",
    },
];

/// TextWorld's score notification, printed in the response of every step that raises the
/// score.
///
/// TextWorld compiles each game to Inform 7 with the rule `say "Your score has just gone up
/// by [V in words] "; … "point." / "points."`, so V is spelled out ("one", "two",
/// "twenty-one"); digits are accepted too (other Inform/TADS libraries print them). A drop
/// prints `Your score changed by …` and the end-of-game summary `You scored 8 out of a
/// possible 11, in 16 turns.`: neither matches.
///
/// Real line (bundled TextWorld cooking game, `take lettuce from fridge`):
/// `You take the lettuce from the fridge.\n\n\n\nYour score has just gone up by one point.`
pub(crate) const TEXTWORLD_SCORE_PATTERN: BuiltinPattern = BuiltinPattern {
    name: "score_up",
    regex: r"(?-u:\b)Your score has just gone up by (?:[0-9]+|[a-z]+(?:[ -][a-z]+)*) points?\.",
    example: "Your score has just gone up by one point.",
};

/// One rule as written by the caller: a response pattern and an optional action pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    response: String,
    action: Option<String>,
}

/// Builder for [`TextPatterns`]; every setter states its default, [`build`](Self::build)
/// validates.
///
/// ```
/// use beacon_rl::milestone::{MilestoneDetector, TextPatterns, Transition};
/// let mut d = TextPatterns::builder()
///     .response(r"You pick up the \S")
///     .response_after_action(r"You open the fridge", r"^open fridge")
///     .build()?;
/// let step = |action, next_observation| Transition { action, next_observation, ..Default::default() };
/// assert!(d.detect(&step("open fridge 1", "You open the fridge 1.")));
/// assert!(!d.detect(&step("go to fridge 1", "You open the fridge 1.")));
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextPatternsBuilder {
    rules: Vec<Rule>,
    case_insensitive: bool,
}

impl TextPatternsBuilder {
    /// Adds a rule that fires whenever the response (s′) matches `regex`, whatever the action.
    ///
    /// ```
    /// use beacon_rl::milestone::{MilestoneDetector, TextPatterns, Transition};
    /// let mut d = TextPatterns::builder().response(r"You heat the \S").build()?;
    /// let t = Transition { next_observation: "You heat the egg 2 using the microwave 1.", ..Default::default() };
    /// assert!(d.detect(&t));
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn response(mut self, regex: impl Into<String>) -> Self {
        self.rules.push(Rule {
            response: regex.into(),
            action: None,
        });
        self
    }

    /// Adds a rule that fires when the action (a) matches `action_regex` and the response (s′)
    /// matches `response_regex`: Φ sees the whole transition, so a response can count only
    /// after the action that is supposed to produce it.
    ///
    /// ```
    /// use beacon_rl::milestone::{MilestoneDetector, TextPatterns, Transition};
    /// let mut d = TextPatterns::builder()
    ///     .response_after_action(r"^The door is now open\.", r"^open door to kitchen$")
    ///     .build()?;
    /// let t = |a| Transition { action: a, next_observation: "The door is now open.", ..Default::default() };
    /// assert!(d.detect(&t("open door to kitchen")));
    /// assert!(!d.detect(&t("open door to hallway")));
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn response_after_action(
        mut self,
        response_regex: impl Into<String>,
        action_regex: impl Into<String>,
    ) -> Self {
        self.rules.push(Rule {
            response: response_regex.into(),
            action: Some(action_regex.into()),
        });
        self
    }

    /// Adds every pattern of a built-in list as an unrestricted rule.
    fn builtin(mut self, patterns: &[BuiltinPattern]) -> Self {
        for p in patterns {
            self = self.response(p.regex);
        }
        self
    }

    /// Matches responses and actions ignoring case (Unicode simple case folding). Default:
    /// `false`.
    ///
    /// ```
    /// use beacon_rl::milestone::{MilestoneDetector, TextPatterns, Transition};
    /// let mut d = TextPatterns::builder().response("you win").case_insensitive(true).build()?;
    /// assert!(d.detect(&Transition { next_observation: "*** You Win ***", ..Default::default() }));
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn case_insensitive(mut self, yes: bool) -> Self {
        self.case_insensitive = yes;
        self
    }

    /// Compiles the rules.
    ///
    /// # Errors
    /// - [`Error::MissingInput`] when no rule was added (the detector would never fire);
    /// - [`Error::InvalidPattern`] for a regex that does not compile (the compiler's message),
    ///   or one that matches the empty string (it would fire on every step).
    ///
    /// ```
    /// use beacon_rl::{milestone::TextPatterns, Error};
    /// let err = TextPatterns::builder().response("You pick up (the").build().unwrap_err();
    /// assert!(matches!(err, Error::InvalidPattern { ref pattern, .. } if pattern == "You pick up (the"));
    /// let err = TextPatterns::builder().response("(heat)?").build().unwrap_err();
    /// assert!(matches!(err, Error::InvalidPattern { .. }));
    /// ```
    pub fn build(self) -> Result<TextPatterns> {
        if self.rules.is_empty() {
            return Err(Error::MissingInput(
                "text patterns: at least one response pattern is required",
            ));
        }
        let compile = |pattern: &str| -> Result<Regex> {
            let re = RegexBuilder::new(pattern)
                .case_insensitive(self.case_insensitive)
                .build()
                .map_err(|e| Error::InvalidPattern {
                    pattern: pattern.to_owned(),
                    message: e.to_string(),
                })?;
            if re.is_match("") {
                return Err(Error::InvalidPattern {
                    pattern: pattern.to_owned(),
                    message: "matches the empty string, so it would flag every step".to_owned(),
                });
            }
            Ok(re)
        };
        let mut unrestricted = Vec::new();
        let mut restricted = Vec::new();
        for rule in &self.rules {
            // Compiling each pattern alone names the offender; the set's error would not.
            let response = compile(&rule.response)?;
            match &rule.action {
                None => unrestricted.push(rule.response.as_str()),
                Some(action) => restricted.push(RestrictedRule {
                    action: compile(action)?,
                    response,
                }),
            }
        }
        let set = if unrestricted.is_empty() {
            None
        } else {
            Some(
                RegexSetBuilder::new(&unrestricted)
                    .case_insensitive(self.case_insensitive)
                    .build()
                    .map_err(|e| Error::InvalidPattern {
                        pattern: unrestricted.join(" | "),
                        message: e.to_string(),
                    })?,
            )
        };
        Ok(TextPatterns { set, restricted })
    }
}

#[derive(Debug, Clone)]
struct RestrictedRule {
    action: Regex,
    response: Regex,
}

/// Milestone when the environment's response matches a pattern: the regex-set detector.
///
/// Stateless: every step is judged on its own transition; the same feedback twice is two
/// milestones (ALFWorld answers a repeated `heat` again with "You heat the …"). Only
/// [`Transition::next_observation`] (s′) and, for restricted rules, [`Transition::action`] (a)
/// are read.
///
/// ```
/// use beacon_rl::milestone::{DetectorPreset, MilestoneDetector, Transition};
///
/// let mut d = DetectorPreset::Alfworld.build()?; // a boxed `TextPatterns`
/// let step = |obs| Transition { next_observation: obs, ..Default::default() };
/// assert!(d.detect(&step("You cool the pan 1 using the fridge 1.")));
/// assert!(!d.detect(&step("Nothing happens.")));
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct TextPatterns {
    /// All unrestricted rules, matched in one pass.
    set: Option<RegexSet>,
    /// Rules that also need the action to match.
    restricted: Vec<RestrictedRule>,
}

impl TextPatterns {
    /// Starts a [`TextPatternsBuilder`].
    ///
    /// ```
    /// use beacon_rl::milestone::{MilestoneDetector, TextPatterns, Transition};
    /// let mut d = TextPatterns::builder().response("You win").build()?;
    /// assert!(d.detect(&Transition { next_observation: "You win!", ..Default::default() }));
    /// assert!(TextPatterns::builder().build().is_err()); // at least one rule is required
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn builder() -> TextPatternsBuilder {
        TextPatternsBuilder {
            rules: Vec::new(),
            case_insensitive: false,
        }
    }

    /// [`DetectorPreset::Alfworld`](super::DetectorPreset::Alfworld)'s patterns (listed there).
    pub(crate) fn alfworld() -> Self {
        Self::from_builtin(ALFWORLD_PATTERNS)
    }

    /// [`DetectorPreset::TextWorldScore`](super::DetectorPreset::TextWorldScore)'s pattern.
    pub(crate) fn textworld_score() -> Self {
        Self::from_builtin(std::slice::from_ref(&TEXTWORLD_SCORE_PATTERN))
    }

    fn from_builtin(patterns: &[BuiltinPattern]) -> Self {
        // The built-in lists are constants covered by unit tests; no caller data reaches this.
        TextPatterns::builder()
            .builtin(patterns)
            .build()
            .expect("built-in patterns compile and do not match the empty string")
    }

    /// Number of rules (restricted and unrestricted).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.set.as_ref().map_or(0, RegexSet::len) + self.restricted.len()
    }

    /// Whether the (action, response) pair fires a rule: what [`MilestoneDetector::detect`]
    /// computes (the detector keeps no state).
    fn matches(&self, action: &str, response: &str) -> bool {
        if let Some(set) = &self.set {
            if set.is_match(response) {
                return true;
            }
        }
        self.restricted
            .iter()
            .any(|r| r.action.is_match(action) && r.response.is_match(response))
    }
}

impl MilestoneDetector for TextPatterns {
    fn detect(&mut self, t: &Transition<'_>) -> bool {
        self.matches(t.action, t.next_observation)
    }
}

#[cfg(test)]
mod tests;
