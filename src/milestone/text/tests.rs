//! The built-in pattern lists: each example and each real feedback line matches exactly its
//! own pattern, the lists combine with custom rules, and the compiled set agrees with the
//! patterns one by one.

use proptest::prelude::*;
use regex::Regex;

use super::*;

fn response(obs: &str) -> Transition<'_> {
    Transition {
        next_observation: obs,
        ..Transition::default()
    }
}

/// Real ALFWorld feedback lines (ReAct prompts, verl-agent rollouts, the ALFWorld grammar
/// `alfred.twl2`), keyed by the pattern that must match them.
const ALFWORLD_POSITIVES: &[(&str, &str)] = &[
    ("pick_up", "You pick up the egg 2 from the countertop 3."),
    ("pick_up", "You pick up the vase 2 from the shelf 6."),
    ("pick_up", "You pick up the laptop 1 from the desk 1."),
    (
        "pick_up",
        "PickupObjectFromReceptacleObject: You pick up the pen 1.",
    ),
    ("put", "You put the lettuce 1 in/on the diningtable 1."),
    ("put", "You put the egg 2 in/on the diningtable 1."),
    (
        "put",
        "PutObjectInReceptacleObject: You put the pen 1 in the mug 1.",
    ),
    ("move", "You move the mug 2 to the coffeemachine 1."),
    ("heat", "You heat the egg 2 using the microwave 1."),
    ("heat", "You heat the potato 1 using the microwave 1."),
    ("cool", "You cool the pan 1 using the fridge 1."),
    ("cool", "You cool the lettuce 1 using the fridge 1."),
    ("clean", "You clean the lettuce 1 using the sinkbasin 1."),
    ("clean", "You clean the soapbar 2 using the sinkbasin 1."),
    ("slice", "You sliced the apple 1 with the knife 1."),
    ("slice", "You slice the bread 1 with the butterknife 1."),
    ("light", "You turn on the desklamp 1."),
    ("light", "You turn on the floorlamp 1."),
];

fn compiled(name: &str) -> Regex {
    let p = ALFWORLD_PATTERNS.iter().find(|p| p.name == name).unwrap();
    Regex::new(p.regex).unwrap()
}

#[test]
fn every_builtin_example_matches_its_own_pattern_only() {
    for p in ALFWORLD_PATTERNS {
        for other in ALFWORLD_PATTERNS {
            let hit = Regex::new(other.regex).unwrap().is_match(p.example);
            assert_eq!(
                hit,
                p.name == other.name,
                "example of {} vs pattern {}",
                p.name,
                other.name
            );
        }
    }
    assert!(Regex::new(TEXTWORLD_SCORE_PATTERN.regex)
        .unwrap()
        .is_match(TEXTWORLD_SCORE_PATTERN.example));
}

#[test]
fn alfworld_positives_match_exactly_their_pattern() {
    let mut d = TextPatterns::alfworld();
    for &(name, line) in ALFWORLD_POSITIVES {
        assert!(compiled(name).is_match(line), "{name}: {line}");
        for other in ALFWORLD_PATTERNS.iter().filter(|p| p.name != name) {
            assert!(
                !Regex::new(other.regex).unwrap().is_match(line),
                "{} also matches {line}",
                other.name
            );
        }
        assert!(d.detect(&response(line)), "preset misses {line}");
    }
}

#[test]
fn builtin_lists_combine_with_custom_rules() {
    let mut d = TextPatterns::builder()
        .builtin(ALFWORLD_PATTERNS)
        .builtin(std::slice::from_ref(&TEXTWORLD_SCORE_PATTERN))
        .build()
        .unwrap();
    assert_eq!(d.len(), ALFWORLD_PATTERNS.len() + 1);
    assert!(d.detect(&response("Your score has just gone up by one point.")));
    assert!(d.detect(&response("You cool the pan 1 using the fridge 1.")));
}

/// Text made of pattern fragments, feedback lines and arbitrary strings.
fn feedback_text() -> impl Strategy<Value = String> {
    let atom = prop_oneof![
        prop::sample::select(
            ALFWORLD_POSITIVES
                .iter()
                .map(|p| p.1.to_owned())
                .collect::<Vec<_>>()
        ),
        Just("You pick up the ".to_owned()),
        Just("You turn off the desklamp 1.".to_owned()),
        Just("in/on".to_owned()),
        Just("\n".to_owned()),
        any::<String>(),
        any::<char>().prop_map(String::from),
    ];
    prop::collection::vec(atom, 0..8).prop_map(|v| v.concat())
}

proptest! {
    #[test]
    fn text_patterns_agree_with_per_pattern_regexes(obs in feedback_text()) {
        static SINGLE: std::sync::OnceLock<Vec<Regex>> = std::sync::OnceLock::new();
        let single = SINGLE.get_or_init(|| ALFWORLD_PATTERNS.iter().map(|p| Regex::new(p.regex).unwrap()).collect());
        let any_single = single.iter().any(|re| re.is_match(&obs));
        static SET: std::sync::OnceLock<TextPatterns> = std::sync::OnceLock::new();
        prop_assert_eq!(SET.get_or_init(TextPatterns::alfworld).matches("", &obs), any_single);
    }
}
