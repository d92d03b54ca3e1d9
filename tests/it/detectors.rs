//! Milestone detectors on hand-written transitions: text patterns with real feedback lines,
//! the WebShop phase machine over scripted sessions, combinators, presets, score edge cases,
//! and no-panic properties on arbitrary Unicode.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use beacon_rl::milestone::{
    detect_milestones, AllOf, AnyOf, DetectorPreset, EnvFlag, MilestoneDetector, NewSubgoals, Not,
    ScoreIncrease, TextPatterns, Transition, WebShopGoal, WebShopItem, WebShopPhase, WebShopPhases,
    WebShopTarget,
};
use beacon_rl::{Error, RolloutBatch};
use proptest::prelude::*;

/// What presets build and combinators hold.
type BoxedDetector = Box<dyn MilestoneDetector + Send>;

fn response(obs: &str) -> Transition<'_> {
    Transition {
        next_observation: obs,
        ..Transition::default()
    }
}

fn step<'a>(action: &'a str, obs: &'a str) -> Transition<'a> {
    Transition {
        action,
        next_observation: obs,
        ..Transition::default()
    }
}

// ---------------------------------------------------------------------------------------------
// ALFWorld patterns
// ---------------------------------------------------------------------------------------------

/// Feedback that is no subgoal completion.
const ALFWORLD_NEGATIVES: &[&str] = &[
    "Nothing happens.",
    "You can't pick up that.",
    "You don't see that here",
    "You turn off the desklamp 1.",
    "You open the fridge 1. The fridge 1 is open. In it, you see a apple 1, and a tomato 2.",
    "You close the fridge 1.",
    "You arrive at loc 10. The microwave 1 is closed.",
    "You arrive at countertop 1. On the countertop 1, you see a knife 1, and a pan 1.",
    "You are carrying: a apple 1.",
    "This is a hot egg.",
    "You don't see any switch on the apple 1.",
    "You are in the middle of a room. Looking quickly around you, you see a desk 1, a desklamp 1, and a drawer 1.",
    "Your task is to: put a clean lettuce in diningtable.",
    "you pick up the egg 2 from the countertop 3.",
    "You pick up the",
    "You heat the egg 2.",
    "",
];

#[test]
fn alfworld_near_misses_do_not_fire() {
    let mut d = DetectorPreset::Alfworld.build().unwrap();
    for line in ALFWORLD_NEGATIVES {
        assert!(!d.detect(&response(line)), "fired on {line:?}");
    }
}

#[test]
fn alfworld_feedback_is_found_inside_a_wrapped_response() {
    let mut d = DetectorPreset::Alfworld.build().unwrap();
    let wrapped = "Your current observation is: You heat the apple 1 using the microwave 1. Admissible: ['go to countertop 1'].";
    assert!(d.detect(&response(wrapped)));
    // Only s' counts: the same sentence in the action or in s is ignored.
    let t = Transition {
        observation: "You heat the apple 1 using the microwave 1.",
        action: "You heat the apple 1 using the microwave 1.",
        next_observation: "Nothing happens.",
        ..Transition::default()
    };
    assert!(!d.detect(&t));
}

// ---------------------------------------------------------------------------------------------
// TextWorld score message
// ---------------------------------------------------------------------------------------------

#[test]
fn textworld_score_message() {
    let mut d = DetectorPreset::TextWorldScore.build().unwrap();
    for line in [
        "You take the lettuce from the fridge.\n\n\n\nYour score has just gone up by one point.\n\n>",
        "Your score has just gone up by two points.",
        "Your score has just gone up by twenty-one points.",
        "[Your score has just gone up by 1 point.]",
        "[Your score has just gone up by 12 points.]",
    ] {
        assert!(d.detect(&response(line)), "{line:?}");
    }
    for line in [
        "You scored 8 out of a possible 11, in 16 turns.",
        "Your score changed by minus one point.",
        "Your score has just gone up by",
        "Your score has just gone up by one point",
        "your score has just gone up by one point.",
        "You take the lettuce from the fridge.",
        "",
    ] {
        assert!(!d.detect(&response(line)), "{line:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Builder
// ---------------------------------------------------------------------------------------------

#[test]
fn builder_rejects_bad_patterns_with_typed_errors() {
    assert!(matches!(
        TextPatterns::builder().build(),
        Err(Error::MissingInput(_))
    ));
    match TextPatterns::builder()
        .response(r"You heat")
        .response(r"([a-z]")
        .build()
    {
        Err(Error::InvalidPattern { pattern, message }) => {
            assert_eq!(pattern, "([a-z]");
            assert!(!message.is_empty());
        }
        other => panic!("expected InvalidPattern, got {other:?}"),
    }
    // An invalid action regex is named too.
    match TextPatterns::builder()
        .response_after_action("ok", "heat (")
        .build()
    {
        Err(Error::InvalidPattern { pattern, .. }) => assert_eq!(pattern, "heat ("),
        other => panic!("expected InvalidPattern, got {other:?}"),
    }
    for empty_matching in ["", "a*", "(?:You heat)?", "^"] {
        assert!(
            matches!(
                TextPatterns::builder().response(empty_matching).build(),
                Err(Error::InvalidPattern { .. })
            ),
            "{empty_matching:?} accepted"
        );
    }
}

#[test]
fn action_restricted_rules_need_both_matches() {
    let mut d = TextPatterns::builder()
        .response(r"You heat the \S")
        .response_after_action(r"^The door is now open\.$", r"^open door to (?:kitchen|outside)$")
        .build()
        .unwrap();
    assert!(d.detect(&step("open door to kitchen", "The door is now open.")));
    assert!(d.detect(&step("open door to outside", "The door is now open.")));
    assert!(!d.detect(&step("open door to hallway", "The door is now open.")));
    assert!(!d.detect(&step("open door to kitchen", "The door is already open.")));
    // The unrestricted rule ignores the action.
    assert!(d.detect(&step("anything", "You heat the egg 2 using the microwave 1.")));
}

#[test]
fn case_insensitive_applies_to_responses_and_actions() {
    let mut d = TextPatterns::builder()
        .response_after_action("you win", "^eat meal$")
        .case_insensitive(true)
        .build()
        .unwrap();
    assert!(d.detect(&step("EAT MEAL", "*** You Win ***")));
    let mut strict = TextPatterns::builder()
        .response_after_action("you win", "^eat meal$")
        .build()
        .unwrap();
    assert!(!strict.detect(&step("EAT MEAL", "*** You Win ***")));
    assert!(strict.detect(&step("eat meal", "you win")));
}

// ---------------------------------------------------------------------------------------------
// Score and subgoals
// ---------------------------------------------------------------------------------------------

#[test]
fn score_increase_from_a_start_above_zero_and_through_a_failure() {
    // ScienceWorld-like: the task starts at 17 (initial_score), the agent gains 8, stalls,
    // then a wrong `focus on` sets the score to -100.
    let scores = [17.0, 17.0, 25.0, 25.0, -100.0];
    // Steps: 17->17 no, 17->25 yes, 25->25 no, 25->-100 no (a drop), so [F, T, F, F].
    let mut d = ScoreIncrease;
    let flags: Vec<bool> = scores
        .windows(2)
        .map(|w| {
            d.detect(&Transition {
                score: Some(w[0]),
                next_score: Some(w[1]),
                ..Transition::default()
            })
        })
        .collect();
    assert_eq!(flags, [false, true, false, false]);
    // The first step compares with the initial score, not with 0: starting at 50 and staying
    // there is no milestone.
    assert!(!d.detect(&Transition {
        score: Some(50.0),
        next_score: Some(50.0),
        ..Transition::default()
    }));
    // Recovering from a drop is an increase.
    assert!(d.detect(&Transition {
        score: Some(-100.0),
        next_score: Some(-99.5),
        ..Transition::default()
    }));
}

#[test]
fn new_subgoals_fires_on_any_reported_subgoal() {
    let two = vec![
        "Move to a new location".to_owned(),
        "Be in a room with an open door".to_owned(),
    ];
    let none: Vec<String> = Vec::new();
    let mut d = NewSubgoals;
    assert!(d.detect(&Transition {
        new_subgoals: &two,
        ..Transition::default()
    }));
    assert!(!d.detect(&Transition {
        new_subgoals: &none,
        score: Some(0.0),
        next_score: Some(10.0),
        ..Transition::default()
    }));
}

// ---------------------------------------------------------------------------------------------
// WebShop
// ---------------------------------------------------------------------------------------------

const PREFIX: &str = "WebShop [SEP] Instruction: [SEP] i would like a 3 ounce bottle of bright citrus deodorant for sensitive skin, and price lower than 50.00 dollars [SEP] ";
const GOAL_TITLE: &str = "Bright Citrus Deodorant by Earth Mama | Natural and Safe for Sensitive Skin, Pregnancy and Breastfeeding, Contains Organic Calendula 3-Ounce";
const OTHER_TITLE: &str = "Ginger Fresh Deodorant by Earth Mama | Natural and Safe for Sensitive Skin, Pregnancy and Breastfeeding, Contains Organic Calendula 3-Ounce";

/// Observations of one WebShop session in the text environment's `text` mode.
struct Pages {
    search: String,
    results: String,
    results_without_goal: String,
    goal_item: String,
    other_item: String,
    description: String,
    done: String,
}

fn item_page(title: &str) -> String {
    format!(
        "{PREFIX}Back to Search [SEP] < Prev [SEP] scent [SEP] assorted scents [SEP] bright citrus [SEP] calming lavender [SEP] ginger fresh [SEP] simply non-scents [SEP] size [SEP] travel set (4-pack) [SEP] 3 ounce (pack of 1) [SEP] 3-ounce (2-pack) [SEP] {title} [SEP] Price: $10.99 [SEP] Rating: N.A. [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now"
    )
}

fn pages() -> Pages {
    let other_listing = "B08KBVJ4XN [SEP] Barrel and Oak - Aluminum-Free Deodorant, Deodorant for Men, Essential Oil-Based Scent, 24-Hour Odor Protection, Cedar & Patchouli Blend, Gentle on Sensitive Skin (Mountain Sage, 2.7 oz, 2-Pack) [SEP] $15.95";
    Pages {
        search: format!("{PREFIX}Search"),
        results: format!(
            "{PREFIX}Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > [SEP] B078GWRC1J [SEP] {GOAL_TITLE} [SEP] $10.99 [SEP] B078GTKVXY [SEP] {OTHER_TITLE} [SEP] $10.99 [SEP] {other_listing}"
        ),
        results_without_goal: format!(
            "{PREFIX}Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > [SEP] B078GTKVXY [SEP] {OTHER_TITLE} [SEP] $10.99 [SEP] {other_listing}"
        ),
        goal_item: item_page(GOAL_TITLE),
        other_item: item_page(OTHER_TITLE),
        description: format!("{PREFIX}Back to Search [SEP] < Prev [SEP] Earth Mama's deodorant is free of aluminum, parabens and phthalates."),
        done: "Thank you for shopping with us! [SEP] Your code: [SEP] None [SEP] (Paste it in your MTurk interface.) [SEP] Purchased [SEP] asin [SEP] B078GWRC1J [SEP] options [SEP] {\"scent\": \"bright citrus\", \"size\": \"3 ounce (pack of 1)\"} [SEP] Your score (min 0.0, max 1.0) [SEP] 1.0".to_owned(),
    }
}

fn goal() -> WebShopTarget {
    WebShopTarget::new("B078GWRC1J", ["bright citrus", "3 ounce (pack of 1)"]).unwrap()
}

fn run<G: WebShopGoal>(d: &mut WebShopPhases<G>, session: &[(&str, &str)]) -> Vec<bool> {
    session.iter().map(|&(a, o)| d.detect(&step(a, o))).collect()
}

#[test]
fn webshop_gold_session_fires_each_phase_once() {
    let p = pages();
    let mut d = WebShopPhases::new(goal()).unwrap();
    let session = [
        (
            "search[3 ounce bright citrus deodorant sensitive skin]",
            p.results.as_str(),
        ),
        ("click[b078gwrc1j]", &p.goal_item),
        ("click[bright citrus]", &p.goal_item), // 1 of 2 options
        ("click[3 ounce (pack of 1)]", &p.goal_item),
        ("click[buy now]", &p.done),
    ];
    assert_eq!(run(&mut d, &session), [true, true, false, true, true]);
    assert_eq!(d.phase(), WebShopPhase::Purchased);
}

#[test]
fn webshop_back_to_search_wrong_item_and_detail_pages() {
    let p = pages();
    let mut d = WebShopPhases::new(goal()).unwrap();
    let session = [
        ("search[deodorant]", p.results_without_goal.as_str()), // goal not listed
        ("click[next >]", &p.results),                          // Found
        ("click[b078gtkvxy]", &p.other_item),                   // wrong item
        ("click[bright citrus]", &p.other_item),                // options of a wrong item
        ("click[< prev]", &p.results),                          // Found already passed
        ("click[b078gwrc1j]", &p.goal_item),                    // ItemPage
        ("click[description]", &p.description),
        ("click[< prev]", &p.goal_item), // back on the same item: nothing new
        ("click[bright citrus]", &p.goal_item),
        ("click[3 ounce (pack of 1)]", &p.goal_item), // OptionsChosen
        ("click[buy now]", &p.done),                  // Purchased
    ];
    assert_eq!(
        run(&mut d, &session),
        [false, true, false, false, false, true, false, false, false, true, true]
    );
}

#[test]
fn webshop_buying_without_options_is_no_purchase_milestone() {
    let p = pages();
    let mut d = WebShopPhases::new(goal()).unwrap();
    let session = [
        ("search[bright citrus deodorant]", p.results.as_str()),
        ("click[b078gwrc1j]", &p.goal_item),
        ("click[bright citrus]", &p.goal_item),
        ("click[buy now]", &p.done),
    ];
    assert_eq!(run(&mut d, &session), [true, true, false, false]);
    assert_eq!(d.phase(), WebShopPhase::ItemPage);
}

#[test]
fn webshop_options_belong_to_the_current_visit_and_phases_never_go_back() {
    let p = pages();
    let mut d = WebShopPhases::new(goal()).unwrap();
    let session = [
        ("search[bright citrus deodorant]", p.results.as_str()),
        ("click[b078gwrc1j]", &p.goal_item),
        ("click[3 ounce (pack of 1)]", &p.goal_item),
        ("click[bright citrus]", &p.goal_item), // OptionsChosen
        ("click[back to search]", &p.search),
        ("search[bright citrus deodorant]", &p.results), // no second Found
        ("click[b078gwrc1j]", &p.goal_item),             // no second ItemPage
        ("click[buy now]", &p.done),                     // options were not clicked again
    ];
    assert_eq!(
        run(&mut d, &session),
        [true, true, false, true, false, false, false, false]
    );
    assert_eq!(d.phase(), WebShopPhase::OptionsChosen);
}

#[test]
fn webshop_buying_another_item_with_the_options_does_not_count() {
    let p = pages();
    let mut d = WebShopPhases::new(goal()).unwrap();
    let session = [
        ("search[bright citrus deodorant]", p.results.as_str()),
        ("click[b078gwrc1j]", &p.goal_item),
        ("click[bright citrus]", &p.goal_item),
        ("click[3 ounce (pack of 1)]", &p.goal_item),
        ("click[< prev]", &p.results),
        ("click[b078gtkvxy]", &p.other_item),
        ("click[bright citrus]", &p.other_item),
        ("click[3 ounce (pack of 1)]", &p.other_item),
        ("click[buy now]", &p.done),
    ];
    assert_eq!(
        run(&mut d, &session),
        [true, true, false, true, false, false, false, false, false]
    );
}

#[test]
fn webshop_is_strictly_ordered() {
    let p = pages();
    let mut d = WebShopPhases::new(goal()).unwrap();
    // The goal item's page without a results page that listed it: no phase fires.
    let session = [
        ("search[deodorant]", p.results_without_goal.as_str()),
        ("click[b078gwrc1j]", &p.goal_item),
        ("click[bright citrus]", &p.goal_item),
        ("click[3 ounce (pack of 1)]", &p.goal_item),
        ("click[buy now]", &p.done),
    ];
    assert_eq!(run(&mut d, &session), [false; 5]);
    assert_eq!(d.phase(), WebShopPhase::Start);
}

#[test]
fn webshop_rejected_and_malformed_actions_change_nothing() {
    let p = pages();
    let mut d = WebShopPhases::new(goal()).unwrap();
    let session = [
        ("search[bright citrus deodorant]", p.results.as_str()),
        // WebShop ignores these and shows the same page again.
        ("click[buy now]", &p.results),
        ("think[which one?]", &p.results),
        ("click[b078gwrc1j", &p.results),
        ("", &p.results),
        ("click[b078gwrc1j]", &p.goal_item),
        ("click[lavender]", &p.goal_item),       // not an option of this page
        ("click[]", &p.goal_item),               // empty argument: no action
        ("click[3 ounce]", &p.goal_item),        // a prefix of an option is not that option
        ("search[deodorant]", &p.goal_item),     // no search bar on item pages: same page
        ("click[Bright  Citrus]", &p.goal_item), // case and spacing are normalised
        ("Click[3 Ounce (Pack of 1)]", &p.goal_item),
        ("click[Buy Now]", &p.done),
    ];
    assert_eq!(
        run(&mut d, &session),
        [true, false, false, false, false, true, false, false, false, false, false, true, true]
    );
}

#[test]
fn webshop_option_absent_from_the_page_is_not_chosen() {
    let p = pages();
    let goal = WebShopTarget::new("B078GWRC1J", ["unscented"]).unwrap();
    let mut d = WebShopPhases::new(goal).unwrap();
    let session = [
        ("search[deodorant]", p.results.as_str()),
        ("click[b078gwrc1j]", &p.goal_item),
        ("click[unscented]", &p.goal_item), // the page offers no such option
        ("click[buy now]", &p.done),
    ];
    assert_eq!(run(&mut d, &session), [true, true, false, false]);
}

#[test]
fn webshop_without_required_options_passes_options_on_the_item_step() {
    let p = pages();
    let mut d = WebShopPhases::new(WebShopTarget::new("B078GWRC1J", Vec::<String>::new()).unwrap()).unwrap();
    let session = [
        ("search[deodorant]", p.results.as_str()),
        ("click[b078gwrc1j]", &p.goal_item), // ItemPage and OptionsChosen, one flag
        ("click[buy now]", &p.done),
    ];
    assert_eq!(run(&mut d, &session), [true, true, true]);
    assert_eq!(d.phase(), WebShopPhase::Purchased);
}

/// verl-agent's format: prefix up to the instruction stripped, segments in single quotes.
fn verl_agent_format(obs: &str) -> String {
    let body = obs.strip_prefix(PREFIX).unwrap_or(obs);
    body.split(" [SEP] ")
        .map(|s| format!("'{s}'"))
        .collect::<Vec<_>>()
        .join(" [SEP] ")
}

/// `text_rich` mode: one string a line, clickables in `[button] … [button_]`.
fn text_rich_format(obs: &str) -> String {
    let body = obs.strip_prefix(PREFIX).unwrap_or(obs);
    body.split(" [SEP] ")
        .map(|s| {
            let clickable = s == "Back to Search"
                || s == "< Prev"
                || s == "Next >"
                || s == "Buy Now"
                || s.len() == 10 && s.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit());
            if clickable {
                format!("[button] {s} [button_]")
            } else {
                s.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn webshop_observation_formats_give_the_same_flags() {
    let p = pages();
    let session = [
        ("search[deodorant]", p.results_without_goal.clone()),
        ("click[next >]", p.results.clone()),
        ("click[b078gtkvxy]", p.other_item.clone()),
        ("click[< prev]", p.results.clone()),
        ("click[b078gwrc1j]", p.goal_item.clone()),
        ("click[description]", p.description.clone()),
        ("click[< prev]", p.goal_item.clone()),
        ("click[bright citrus]", p.goal_item.clone()),
        ("click[3 ounce (pack of 1)]", p.goal_item.clone()),
        ("click[buy now]", p.done.clone()),
    ];
    let expected = [false, true, false, false, true, false, false, false, true, true];
    for format in [|s: &str| s.to_owned(), verl_agent_format, text_rich_format] {
        let mut d = WebShopPhases::new(goal()).unwrap();
        let formatted: Vec<(&str, String)> = session.iter().map(|(a, o)| (*a, format(o))).collect();
        let flags: Vec<bool> = formatted.iter().map(|(a, o)| d.detect(&step(a, o))).collect();
        assert_eq!(flags, expected, "format of {:?}", formatted[1].1);
    }
}

#[test]
fn webshop_unknown_pages_keep_the_context() {
    let p = pages();
    let mut d = WebShopPhases::new(goal()).unwrap();
    let session = [
        ("search[deodorant]", p.results.as_str()),
        ("click[b078gwrc1j]", &p.goal_item),
        ("click[bright citrus]", &p.goal_item),
        ("noop", "Invalid action!"), // not a page: ignored, the item context stays
        ("click[3 ounce (pack of 1)]", &p.goal_item),
        ("click[buy now]", &p.done),
    ];
    assert_eq!(run(&mut d, &session), [true, true, false, false, true, true]);
}

#[test]
fn webshop_goal_by_title_sees_listing_and_page_fields() {
    struct ByTitle(Vec<String>, Arc<AtomicUsize>);
    impl WebShopGoal for ByTitle {
        fn item_matches(&self, item: &WebShopItem<'_>) -> bool {
            self.1.fetch_add(1, Ordering::Relaxed);
            // The price is read on both pages: "$10.99" from the listing, "$10.99" from
            // "Price: $10.99".
            assert!(item.price.is_empty() || item.price == "$10.99" || item.price == "$15.95");
            item.title.starts_with("Bright Citrus Deodorant")
        }
        fn required_options(&self) -> &[String] {
            &self.0
        }
    }
    let p = pages();
    let calls = Arc::new(AtomicUsize::new(0));
    let mut d = WebShopPhases::new(ByTitle(vec!["bright citrus".into()], calls.clone())).unwrap();
    let session = [
        ("search[deodorant]", p.results.as_str()),
        ("click[b078gwrc1j]", &p.goal_item),
        ("click[bright citrus]", &p.goal_item),
        ("click[buy now]", &p.done),
    ];
    assert_eq!(run(&mut d, &session), [true, true, true, true]);
    // Listing: stops at the first match (1 call); item page entry: 1 call.
    assert_eq!(calls.load(Ordering::Relaxed), 2);
}

#[test]
fn webshop_goal_validation() {
    assert!(WebShopPhases::new(WebShopTarget::new("B078GWRC1J", ["ok"]).unwrap()).is_ok());
    assert!(matches!(
        WebShopTarget::new("B078GWRC1J", ["black", " \t"]),
        Err(Error::InvalidPattern { .. })
    ));
    assert!(matches!(
        WebShopTarget::new("  ", ["black"]),
        Err(Error::InvalidPattern { .. })
    ));
    struct Blank(Vec<String>);
    impl WebShopGoal for Blank {
        fn item_matches(&self, _: &WebShopItem<'_>) -> bool {
            true
        }
        fn required_options(&self) -> &[String] {
            &self.0
        }
    }
    assert!(matches!(
        WebShopPhases::new(Blank(vec![String::new()])),
        Err(Error::InvalidPattern { .. })
    ));
}

#[test]
fn webshop_resets_between_trajectories_of_a_batch() {
    let p = pages();
    // Two gold trajectories of five steps in one group: without the reset the second would
    // fire nothing.
    let session = [
        ("search[deodorant]", p.results.as_str()),
        ("click[b078gwrc1j]", &p.goal_item),
        ("click[bright citrus]", &p.goal_item),
        ("click[3 ounce (pack of 1)]", &p.goal_item),
        ("click[buy now]", &p.done),
    ];
    let batch = RolloutBatch::from_blocks(2, &[5, 5], vec![1.0, 1.0]).unwrap();
    let mut d = WebShopPhases::new(goal()).unwrap();
    let flags = detect_milestones(&batch, &mut d, |row, _| {
        let (a, o) = session[row % 5];
        step(a, o)
    })
    .unwrap();
    let one = [true, true, false, true, true];
    assert_eq!(flags, [one, one].concat());
}

// ---------------------------------------------------------------------------------------------
// Combinators
// ---------------------------------------------------------------------------------------------

/// Counts calls and resets; fires where `fire(step)`.
fn counter(fire: fn(usize) -> bool, calls: &Arc<AtomicUsize>, resets: &Arc<AtomicUsize>) -> BoxedDetector {
    struct Counter {
        fire: fn(usize) -> bool,
        calls: Arc<AtomicUsize>,
        resets: Arc<AtomicUsize>,
    }
    impl MilestoneDetector for Counter {
        fn detect(&mut self, t: &Transition<'_>) -> bool {
            self.calls.fetch_add(1, Ordering::Relaxed);
            (self.fire)(t.step)
        }
        fn reset(&mut self) {
            self.resets.fetch_add(1, Ordering::Relaxed);
        }
    }
    Box::new(Counter {
        fire,
        calls: calls.clone(),
        resets: resets.clone(),
    })
}

#[test]
fn combinators_run_every_child_on_every_step_and_forward_resets() {
    let c: Vec<Arc<AtomicUsize>> = (0..6).map(|_| Arc::new(AtomicUsize::new(0))).collect();
    let r: Vec<Arc<AtomicUsize>> = (0..6).map(|_| Arc::new(AtomicUsize::new(0))).collect();
    let even: fn(usize) -> bool = |s| s % 2 == 0;
    let small: fn(usize) -> bool = |s| s < 2;
    let always: fn(usize) -> bool = |_| true;
    let never: fn(usize) -> bool = |_| false;
    let mut any = AnyOf::new(vec![counter(always, &c[0], &r[0]), counter(even, &c[1], &r[1])]).unwrap();
    let mut all = AllOf::new(vec![counter(never, &c[2], &r[2]), counter(small, &c[3], &r[3])]).unwrap();
    let mut not = Not::new(counter(even, &c[4], &r[4]));
    // Steps 0..4 of two trajectories (3 and 2 steps), reset before each.
    let batch = RolloutBatch::from_blocks(2, &[3, 2], vec![0.0, 1.0]).unwrap();
    let f_any = detect_milestones(&batch, &mut any, |_, _| Transition::default()).unwrap();
    let f_all = detect_milestones(&batch, &mut all, |_, _| Transition::default()).unwrap();
    let f_not = detect_milestones(&batch, &mut not, |_, _| Transition::default()).unwrap();
    // Steps per row: 0,1,2,0,1. any = always -> all true; all = never -> all false;
    // not(even) = [F, T, F, F, T].
    assert_eq!(f_any, [true; 5]);
    assert_eq!(f_all, [false; 5]);
    assert_eq!(f_not, [false, true, false, false, true]);
    for i in 0..5 {
        // Five steps each, no short-circuit even after `always` fired or `never` failed.
        assert_eq!(c[i].load(Ordering::Relaxed), 5, "child {i} calls");
        assert_eq!(r[i].load(Ordering::Relaxed), 2, "child {i} resets");
    }
}

#[test]
fn stateful_children_stay_in_sync_inside_any_of() {
    // A score detector that fires first on some steps must not starve the WebShop phase
    // machine: AnyOf's flags equal the OR of the two run separately.
    let p = pages();
    let session: [(&str, &str, f64, f64); 5] = [
        ("search[deodorant]", &p.results, 0.0, 0.0),
        ("click[b078gwrc1j]", &p.goal_item, 0.0, 0.5), // both fire
        ("click[bright citrus]", &p.goal_item, 0.5, 0.7), // score only
        ("click[3 ounce (pack of 1)]", &p.goal_item, 0.7, 0.7),
        ("click[buy now]", &p.done, 0.7, 1.0),
    ];
    let mut any = AnyOf::new(vec![
        Box::new(ScoreIncrease),
        Box::new(WebShopPhases::new(goal()).unwrap()),
    ])
    .unwrap();
    let mut alone = WebShopPhases::new(goal()).unwrap();
    for &(action, next_observation, s, n) in &session {
        let t = Transition {
            action,
            next_observation,
            score: Some(s),
            next_score: Some(n),
            ..Transition::default()
        };
        // `|` (not `||`): the reference runs both detectors on every step too.
        let expected = ScoreIncrease.detect(&t) | alone.detect(&t);
        assert_eq!(any.detect(&t), expected);
    }
    assert_eq!(alone.phase(), WebShopPhase::Purchased);
}

#[test]
fn combinators_reject_empty_lists_and_nest() {
    assert!(matches!(AnyOf::new(Vec::new()), Err(Error::MissingInput(_))));
    assert!(matches!(AllOf::new(Vec::new()), Err(Error::MissingInput(_))));
    let inner = AnyOf::new(vec![Box::new(EnvFlag), Box::new(NewSubgoals)]).unwrap();
    let mut d = AllOf::new(vec![Box::new(inner), Box::new(Not::new(Box::new(ScoreIncrease)))]).unwrap();
    assert!(d.detect(&Transition {
        env_flag: Some(true),
        ..Transition::default()
    }));
    assert!(!d.detect(&Transition {
        env_flag: Some(true),
        score: Some(0.0),
        next_score: Some(1.0),
        ..Transition::default()
    }));
    assert!(!d.detect(&Transition::default()));
}

// ---------------------------------------------------------------------------------------------
// Presets
// ---------------------------------------------------------------------------------------------

#[cfg(feature = "serde")]
#[test]
fn preset_names_round_trip_through_from_str_display_and_serde() {
    let expected = [
        "score",
        "flag",
        "subgoals",
        "textworld-score",
        "alfworld",
        "webshop",
        "walkthrough",
    ];
    assert_eq!(DetectorPreset::ALL.len(), expected.len());
    for (p, name) in DetectorPreset::ALL.iter().zip(expected) {
        assert_eq!(p.to_string(), name);
        assert_eq!(name.parse::<DetectorPreset>().unwrap(), *p);
        assert_eq!(name.to_uppercase().parse::<DetectorPreset>().unwrap(), *p);
        assert_eq!(serde_json::to_string(p).unwrap(), format!("\"{name}\""));
        assert_eq!(
            serde_json::from_str::<DetectorPreset>(&format!("\"{name}\"")).unwrap(),
            *p
        );
    }
    match "text-world".parse::<DetectorPreset>() {
        Err(Error::UnknownName { what, name, expected }) => {
            assert_eq!(what, "detector preset");
            assert_eq!(name, "text-world");
            assert!(expected.contains("textworld-score"));
        }
        other => panic!("expected UnknownName, got {other:?}"),
    }
}

#[test]
fn presets_build_the_documented_detectors() {
    let up = Transition {
        score: Some(1.0),
        next_score: Some(2.0),
        ..Transition::default()
    };
    let subgoal = vec!["Pick up object".to_owned()];
    let cases: [(DetectorPreset, Transition<'_>); 5] = [
        (DetectorPreset::Score, up),
        (
            DetectorPreset::Flag,
            Transition {
                env_flag: Some(true),
                ..Transition::default()
            },
        ),
        (
            DetectorPreset::Subgoals,
            Transition {
                new_subgoals: &subgoal,
                ..Transition::default()
            },
        ),
        (
            DetectorPreset::TextWorldScore,
            response("Your score has just gone up by one point."),
        ),
        (
            DetectorPreset::Alfworld,
            response("You pick up the egg 2 from the countertop 3."),
        ),
    ];
    for (preset, fires) in cases {
        let mut d = preset.build().unwrap();
        assert!(d.detect(&fires), "{preset}");
        assert!(
            !d.detect(&Transition::default()),
            "{preset} fired on an empty step"
        );
    }
    assert!(matches!(
        DetectorPreset::WebShop.build(),
        Err(Error::MissingInput(_))
    ));
}

#[test]
fn boxed_detectors_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    for d in DetectorPreset::ALL.iter().filter_map(|p| p.build().ok()) {
        assert_send(&d);
        std::thread::spawn(move || drop(d)).join().unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------

/// Text that hits the parsers' delimiters often: brackets, [SEP], newlines, quotes, the
/// WebShop and ALFWorld vocabulary, and arbitrary Unicode.
fn tricky_text() -> impl Strategy<Value = String> {
    let atom = prop_oneof![
        Just("[".to_owned()),
        Just("]".to_owned()),
        Just("[SEP]".to_owned()),
        Just(" [SEP] ".to_owned()),
        Just("\n".to_owned()),
        Just("'".to_owned()),
        Just("search".to_owned()),
        Just("click".to_owned()),
        Just("Buy Now".to_owned()),
        Just("< Prev".to_owned()),
        Just("Page 1 (Total results: 50)".to_owned()),
        Just("B078GWRC1J".to_owned()),
        Just("Price: $10.99".to_owned()),
        Just("bright citrus".to_owned()),
        Just("Thank you for shopping with us!".to_owned()),
        Just("[button] ".to_owned()),
        Just(" [button_]".to_owned()),
        Just("You pick up the ".to_owned()),
        Just("Your score has just gone up by ".to_owned()),
        any::<String>(),
        any::<char>().prop_map(String::from),
    ];
    prop::collection::vec(atom, 0..16).prop_map(|v| v.concat())
}

fn all_detectors() -> Vec<BoxedDetector> {
    let mut v: Vec<BoxedDetector> = DetectorPreset::ALL
        .iter()
        .filter_map(|p| p.build().ok())
        .collect();
    v.push(Box::new(WebShopPhases::new(goal()).unwrap()));
    v.push(Box::new(
        WebShopPhases::new(WebShopTarget::new("é", ["ß", "Ǆ"]).unwrap()).unwrap(),
    ));
    v.push(Box::new(
        TextPatterns::builder()
            .response_after_action(r"\w+", r"(?i)^click\[")
            .build()
            .unwrap(),
    ));
    v.push(Box::new(Not::new(Box::new(
        AnyOf::new(vec![Box::new(NewSubgoals)]).unwrap(),
    ))));
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn no_detector_panics_on_arbitrary_text(
        steps in prop::collection::vec((tricky_text(), tricky_text(), tricky_text(), any::<Option<f64>>(), any::<Option<f64>>()), 1..12),
        subgoals in prop::collection::vec(any::<String>(), 0..3),
    ) {
        // Regex compilation is slow in debug builds: one set of detectors per test thread,
        // reset before each case.
        thread_local!(static DETECTORS: std::cell::RefCell<Vec<BoxedDetector>> = std::cell::RefCell::new(all_detectors()));
        DETECTORS.with_borrow_mut(|detectors| for d in detectors.iter_mut() {
            d.reset();
            for (obs, action, next, s, n) in &steps {
                let t = Transition {
                    observation: obs,
                    action,
                    next_observation: next,
                    score: *s,
                    next_score: *n,
                    new_subgoals: &subgoals,
                    ..Transition::default()
                };
                let _ = d.detect(&t);
            }
        });
    }

    #[test]
    fn webshop_phases_fire_at_most_four_times_in_order(
        steps in prop::collection::vec((tricky_text(), tricky_text()), 0..24),
    ) {
        let mut d = WebShopPhases::new(goal()).unwrap();
        let mut last = d.phase();
        let mut fired = 0;
        for (a, o) in &steps {
            let hit = d.detect(&step(a, o));
            let now = d.phase();
            prop_assert!(now >= last, "phase went back from {:?} to {:?}", last, now);
            prop_assert_eq!(hit, now != last);
            fired += usize::from(hit);
            last = now;
        }
        prop_assert!(fired <= 4);
    }

    #[test]
    fn webshop_phases_are_monotone_over_random_sessions(picks in prop::collection::vec(0usize..12, 0..30)) {
        // Random walks over realistic (action, page) pairs, including wrong items, detours,
        // detail pages and purchases.
        let p = pages();
        let pool: [(&str, &str); 12] = [
            ("search[deodorant]", &p.results),
            ("search[deodorant]", &p.results_without_goal),
            ("click[b078gwrc1j]", &p.goal_item),
            ("click[b078gtkvxy]", &p.other_item),
            ("click[bright citrus]", &p.goal_item),
            ("click[3 ounce (pack of 1)]", &p.goal_item),
            ("click[bright citrus]", &p.other_item),
            ("click[description]", &p.description),
            ("click[< prev]", &p.goal_item),
            ("click[< prev]", &p.results),
            ("click[back to search]", &p.search),
            ("click[buy now]", &p.done),
        ];
        let mut d = WebShopPhases::new(goal()).unwrap();
        let mut last = d.phase();
        let mut fired = 0;
        for &i in &picks {
            let (a, o) = pool[i];
            let hit = d.detect(&step(a, o));
            let now = d.phase();
            prop_assert!(now >= last);
            prop_assert_eq!(hit, now != last);
            if now == WebShopPhase::Purchased && hit {
                // Bought from the goal item's page: the step's action was the purchase.
                prop_assert_eq!(i, 11);
            }
            fired += usize::from(hit);
            last = now;
        }
        prop_assert!(fired <= 4);
    }
}
