//! Milestone discovery: hand-built cases for each rule, the memory across batches, and the
//! agreement with the environments' own milestones on the bundled recorded sample.
#![cfg(feature = "serde")]

use beacon_rl::milestone::{
    frequency_baseline, DiscoveryConfig, MilestoneAgreement, MilestoneDiscovery, Transition,
};
use beacon_rl::record::{read_trajectories, RecordBatch, TrajectoryRecord};
use beacon_rl::{Error, RolloutBatch};
use proptest::prelude::*;
use serde_json::Value;

/// One group per entry of `groups`; each rollout is (terminal reward, [(action, response)]).
type Rollout<'a> = (f64, Vec<(&'a str, &'a str)>);

fn run(d: &mut MilestoneDiscovery, tasks: &[&str], groups: &[Vec<Rollout<'_>>]) -> Vec<Vec<bool>> {
    let mut keys = Vec::new();
    let mut trajs = Vec::new();
    let mut rows = Vec::new();
    for (g, group) in groups.iter().enumerate() {
        for (j, (reward, steps)) in group.iter().enumerate() {
            for _ in steps {
                keys.push(g);
                trajs.push(format!("{g}/{j}"));
                rows.push(*reward);
            }
        }
    }
    let texts: Vec<(&str, &str)> = groups
        .iter()
        .flatten()
        .flat_map(|(_, s)| s.iter().copied())
        .collect();
    let batch = RolloutBatch::from_row_keys(&keys, &trajs, &rows).unwrap();
    let flags = d
        .discover(&batch, tasks, |row, _| Transition {
            action: texts[row].0,
            next_observation: texts[row].1,
            ..Transition::default()
        })
        .unwrap();
    // Back to one list per rollout.
    let mut out = Vec::new();
    let mut at = 0;
    for (_, steps) in groups.iter().flatten() {
        out.push(flags[at..at + steps.len()].to_vec());
        at += steps.len();
    }
    out
}

fn fresh() -> MilestoneDiscovery {
    MilestoneDiscovery::new(DiscoveryConfig::default()).unwrap()
}

/// With the feedback channel, which is off by default (it reads the environment's progress
/// messages).
fn reading_feedback() -> MilestoneDiscovery {
    MilestoneDiscovery::new(DiscoveryConfig::default().with_feedback(true)).unwrap()
}

/// Learning from successes only (no success-free signal).
fn success_only() -> MilestoneDiscovery {
    MilestoneDiscovery::new(DiscoveryConfig::default().with_novelty(false)).unwrap()
}

/// One group of one task whose rollouts all start in `start`; flags per rollout.
fn run_from(d: &mut MilestoneDiscovery, start: &str, group: &[Rollout<'_>]) -> Vec<Vec<bool>> {
    let lens: Vec<usize> = group.iter().map(|(_, s)| s.len()).collect();
    let rewards: Vec<f64> = group.iter().map(|(r, _)| *r).collect();
    let texts: Vec<(&str, &str)> = group.iter().flat_map(|(_, s)| s.iter().copied()).collect();
    let batch = RolloutBatch::from_blocks(group.len(), &lens, rewards).unwrap();
    let flags = d
        .discover(&batch, &["k"], |row, t| Transition {
            observation: if t == 0 {
                start
            } else {
                "ignored after the first step"
            },
            action: texts[row].0,
            next_observation: texts[row].1,
            ..Transition::default()
        })
        .unwrap();
    let mut at = 0;
    lens.iter()
        .map(|&n| {
            at += n;
            flags[at - n..at].to_vec()
        })
        .collect()
}

#[test]
fn events_common_to_all_successes_are_flagged_at_first_occurrence_in_every_rollout() {
    let win1 = vec![
        ("go north", "Hall."),
        ("take key", "Taken."),
        ("take key", "You already have it."),
        ("open door", "Open."),
    ];
    let win2 = vec![
        ("take key", "Taken."),
        ("dance", "You dance."),
        ("open door", "Open."),
    ];
    let fail = vec![("take key", "Taken."), ("open door", "It is locked.")];
    let f = run(
        &mut fresh(),
        &["t"],
        &[vec![(1.0, win1), (1.0, win2), (0.0, fail)]],
    );
    // Common to both successes: (take key, Taken.) and (open door, Open.). "go north" and
    // "dance" are in one success only; the second "take key" is a repeat; the failure's
    // "open door" got another response (another event).
    assert_eq!(f[0], [false, true, false, true]);
    assert_eq!(f[1], [true, false, true]);
    assert_eq!(f[2], [true, false]);
}

#[test]
fn min_support_below_one_admits_events_of_some_successes() {
    let cfg = DiscoveryConfig::default().with_min_support(0.5);
    let mut d = MilestoneDiscovery::new(cfg).unwrap();
    let a = vec![("a", "A."), ("b", "B.")];
    let b = vec![("a", "A."), ("c", "C.")];
    let c = vec![("a", "A."), ("d", "D.")];
    // 3 successes: need ⌈0.5 · 3⌉ = 2: only "a" (3 of 3); b, c, d have 1 each.
    let f = run(&mut d, &["t"], &[vec![(1.0, a.clone()), (1.0, b), (1.0, c)]]);
    assert_eq!(f, [[true, false], [true, false], [true, false]]);
    // One more success with "b": b now in 2 of 4 remembered = ⌈0.5 · 4⌉ = 2.
    let f = run(&mut d, &["t"], &[vec![(1.0, a)]]);
    assert_eq!(f, [[true, true]]);
}

#[test]
fn actions_repeated_with_an_unchanged_response_are_no_ops() {
    // "look" twice in a row gives the same text in the failure: a no-op, even though both
    // successes look once. "open box" twice gives two different texts: not a no-op.
    let win1 = vec![
        ("look", "A room."),
        ("open box", "Opened."),
        ("take gem", "Got it."),
    ];
    let win2 = vec![
        ("open box", "Opened."),
        ("look", "A room."),
        ("take gem", "Got it."),
    ];
    let fail = vec![
        ("look", "A room."),
        ("look", "A room."),
        ("open box", "Opened."),
        ("open box", "Already open."),
    ];
    let mut d = fresh();
    let f = run(&mut d, &["t"], &[vec![(1.0, win1), (1.0, win2), (0.0, fail)]]);
    assert_eq!(f[0], [false, true, true]);
    assert_eq!(f[1], [true, false, true]);
    assert_eq!(f[2], [false, false, true, false]);
    assert_eq!(d.num_learned(), (1, 0));
}

#[test]
fn an_action_repeated_within_the_window_with_the_same_response_is_a_no_op() {
    // win1 takes the knife, drops it, takes it again: "take knife" at steps 0 and 2 with
    // "Taken." both times, 2 steps apart <= noop_window 3: a no-op (undone right after).
    let win1 = vec![
        ("take knife", "Taken."),
        ("drop knife", "Dropped."),
        ("take knife", "Taken."),
        ("cut bread", "Sliced."),
    ];
    let win2 = vec![("take knife", "Taken."), ("cut bread", "Sliced.")];
    let mut d = fresh();
    let f = run(&mut d, &["t"], &[vec![(1.0, win1.clone()), (1.0, win2.clone())]]);
    // Only "cut bread" is left common to both successes.
    assert_eq!(f, [vec![false, false, false, true], vec![false, true]]);
    assert_eq!(d.num_learned(), (1, 0));
    // noop_window 1: only repeats in a row count; "take knife" is an event of both
    // successes at its first occurrence ("drop knife" is in one success only).
    let mut d = MilestoneDiscovery::new(DiscoveryConfig::default().with_noop_window(1)).unwrap();
    let f = run(&mut d, &["t"], &[vec![(1.0, win1), (1.0, win2.clone())]]);
    assert_eq!(f, [vec![true, false, false, true], vec![true, true]]);
    assert_eq!(d.num_learned(), (0, 0));
    // Beyond the window: the same response 4 steps apart (3 steps between) is no no-op.
    let win3 = vec![
        ("take knife", "Taken."),
        ("drop knife", "Dropped."),
        ("sing", "La."),
        ("dance", "Hop."),
        ("take knife", "Taken."),
        ("cut bread", "Sliced."),
    ];
    let mut d = fresh();
    let f = run(&mut d, &["t"], &[vec![(1.0, win3), (1.0, win2)]]);
    assert_eq!(
        f,
        [vec![true, false, false, false, false, true], vec![true, true]]
    );
    assert_eq!(d.num_learned(), (0, 0));
}

#[test]
fn a_repeat_with_the_same_first_sentence_is_a_no_op_whatever_follows() {
    // `look` twice, 2 steps apart: the room's listing changed (the key was taken), its first
    // sentence did not. Looking changed nothing: a no-op, though its whole response differs.
    let win1 = vec![
        ("look", "This is the hall. You see a key, a door."),
        ("take key", "Taken."),
        ("look", "This is the hall. You see a door."),
        ("open door", "Open."),
    ];
    let win2 = vec![
        ("look", "This is the hall. You see a key, a door."),
        ("take key", "Taken."),
        ("open door", "Open."),
    ];
    let mut d = fresh();
    let f = run(&mut d, &["t"], &[vec![(1.0, win1.clone()), (1.0, win2.clone())]]);
    assert_eq!(f, [vec![false, true, false, true], vec![false, true, true]]);
    assert_eq!(d.num_learned(), (1, 0));
    // Another first sentence ("It is dark."): no no-op, and `look` is common to both.
    let mut dark = win1;
    dark[2].1 = "It is dark. You see a door.";
    let f = run(&mut fresh(), &["t"], &[vec![(1.0, dark), (1.0, win2)]]);
    assert_eq!(f, [vec![true, true, false, true], vec![true, true, true]]);
}

#[test]
fn a_sentence_shown_by_a_no_op_is_not_feedback() {
    // "In the den." is the room line of every response in the den. Without "look" it passes
    // every feedback test: in both successes at 2 steps or more, after 3 verbs (take, fill,
    // drink), in 5 of 5 success steps and 0 of 3 failure steps, in 5 of 9 steps (<= 0.75).
    let win1 = vec![
        ("take cup", "Taken. In the den."),
        ("fill cup", "Filled. In the den."),
        ("drink", "Yum. In the den."),
    ];
    let win2 = vec![
        ("take cup", "Taken. In the den."),
        ("wave", "You wave."),
        ("fill cup", "Filled. In the den."),
    ];
    let fail = vec![("sit", "You sit."), ("sing", "La."), ("jump", "Hop.")];
    let mut d = reading_feedback();
    let f = run(
        &mut d,
        &["t"],
        &[vec![(1.0, win1.clone()), (1.0, win2), (0.0, fail.clone())]],
    );
    assert_eq!(d.num_learned(), (0, 1));
    // The feedback rule: the events whose response carries it.
    assert_eq!(
        f,
        [vec![true, true, true], vec![true, false, true], vec![false; 3]]
    );
    // win2 now looks twice in a row, "A den. In the den." both times: "look" is a no-op and
    // its response shows the line, so the line is a state, not feedback (steps: 7 of 10 in
    // the den, 0.7 <= 0.75, so only the no-op rule rejects it). The support rule applies:
    // take and fill are the events common to both successes.
    let win2 = vec![
        ("take cup", "Taken. In the den."),
        ("look", "A den. In the den."),
        ("look", "A den. In the den."),
        ("fill cup", "Filled. In the den."),
    ];
    let mut d = reading_feedback();
    let f = run(&mut d, &["t"], &[vec![(1.0, win1), (1.0, win2), (0.0, fail)]]);
    assert_eq!(d.num_learned(), (1, 0));
    assert_eq!(
        f,
        [
            vec![true, true, false],
            vec![true, false, false, true],
            vec![false; 3]
        ]
    );
}

#[test]
fn a_response_two_actions_of_one_verb_get_in_two_tasks_is_no_progress_in_either() {
    // Each task opens one door; the response says that some door opened, whichever task it
    // was: which responses only acknowledge is the environment's, remembered across tasks.
    let red = vec![
        ("open red door", "The door is now open."),
        ("go to hall", "You move to the hall."),
    ];
    let blue = vec![
        ("open blue door", "The door is now open."),
        ("go to attic", "You move to the attic."),
    ];
    let groups = [vec![(1.0, red.clone()); 2], vec![(1.0, blue.clone()); 2]];
    assert_eq!(run(&mut fresh(), &["a", "b"], &groups), [[false, true]; 4]);
    // Off: each task's door is its milestone.
    let off = DiscoveryConfig::default().with_shared_responses(false);
    let mut d = MilestoneDiscovery::new(off).unwrap();
    assert_eq!(run(&mut d, &["a", "b"], &groups), [[true, true]; 4]);
    // Across calls: the first task alone keeps its door, until the second task shows the
    // same response to another door; then the first task's door is refused too.
    let mut d = fresh();
    let a = [vec![(1.0, red.clone()); 2]];
    assert_eq!(run(&mut d, &["a"], &a), [[true, true]; 2]);
    assert_eq!(run(&mut d, &["b"], &[vec![(1.0, blue); 2]]), [[false, true]; 2]);
    assert_eq!(run(&mut d, &["a"], &a), [[false, true]; 2]);
    // `clear` forgets it.
    d.clear();
    assert_eq!(run(&mut d, &["a"], &a), [[true, true]; 2]);
    // The same door in two tasks is one action: nothing shared.
    let groups = [vec![(1.0, red.clone()); 2], vec![(1.0, red); 2]];
    assert_eq!(run(&mut fresh(), &["a", "b"], &groups), [[true, true]; 4]);
}

#[test]
fn within_one_task_a_response_two_actions_get_can_be_progress_each_time() {
    // One task's successes move the brick onto two planes and get the same response twice:
    // the task's own structure, which its rubric may score plane by plane, not an
    // acknowledgement. The first move is a milestone; the second repeats the response, no
    // novelty.
    let w = vec![
        ("move brick to plane a", "You move the brick to the plane."),
        ("time it", "12 ticks."),
        ("move brick to plane b", "You move the brick to the plane."),
    ];
    let both = [vec![(1.0, w.clone()), (1.0, w)]];
    assert_eq!(run(&mut fresh(), &["t"], &both), [[true, true, false]; 2]);
    // One plane a rollout: each is a milestone where the successes share it (2 of 3 for
    // plane a, the 60% support; plane b 1 of 3).
    let a = vec![("move brick to plane a", "You move the brick to the plane.")];
    let b = vec![("move brick to plane b", "You move the brick to the plane.")];
    let group = [vec![(1.0, a.clone()), (1.0, a), (1.0, b)]];
    assert_eq!(run(&mut fresh(), &["t"], &group), [[true], [true], [false]]);
    // Once another task gets the response for another action of the verb, it is an
    // acknowledgement in both: different actions, and different tasks.
    let c = vec![("move cup to shelf", "You move the brick to the plane.")];
    let mut d = fresh();
    run(&mut d, &["u"], &[vec![(1.0, c)]]);
    assert_eq!(run(&mut d, &["t"], &group), [[false], [false], [false]]);
}

#[test]
fn responses_beyond_max_responses_are_not_remembered() {
    // One response remembered ("You move to the hall.", the first): the door's response
    // never is, so the second task's door cannot make it shared, and both doors stay
    // milestones. With room for both, they are refused.
    let red = vec![
        ("go to hall", "You move to the hall."),
        ("open red door", "The door is now open."),
    ];
    let blue = vec![
        ("go to hall", "You move to the hall."),
        ("open blue door", "The door is now open."),
    ];
    let groups = [vec![(1.0, red.clone()); 2], vec![(1.0, blue); 2]];
    let one = DiscoveryConfig::default().with_max_responses(1);
    let mut d = MilestoneDiscovery::new(one).unwrap();
    assert_eq!(run(&mut d, &["a", "b"], &groups), [[true, true]; 4]);
    let two = DiscoveryConfig::default().with_max_responses(2);
    let mut d = MilestoneDiscovery::new(two).unwrap();
    assert_eq!(run(&mut d, &["a", "b"], &groups), [[true, false]; 4]);
}

#[test]
fn a_repeated_response_is_not_new_progress() {
    // Both successes get "Done." twice; the second is no novelty.
    let w = vec![("open red door", "Done."), ("pull lever", "Done.")];
    let f = run(&mut fresh(), &["t"], &[vec![(1.0, w.clone()), (1.0, w)]]);
    assert_eq!(f, [[true, false], [true, false]]);
}

#[test]
fn a_response_of_another_verb_is_not_shared() {
    // "pull lever" answered like a door, in another task, is a response of its own kind: the
    // door stays the first task's milestone (and the lever's repeat of the response within
    // one rollout is no novelty).
    let door = vec![("open red door", "The door is now open.")];
    let lever = vec![("pull lever", "The door is now open.")];
    let groups = [vec![(1.0, door.clone()); 2], vec![(1.0, lever); 2]];
    assert_eq!(run(&mut fresh(), &["a", "b"], &groups), [[true]; 4]);
    let w = vec![
        ("open red door", "The door is now open."),
        ("pull lever", "The door is now open."),
    ];
    let f = run(&mut fresh(), &["t"], &[vec![(1.0, w.clone()), (1.0, w)]]);
    assert_eq!(f, [[true, false], [true, false]]);
}

#[test]
fn a_step_the_rollout_went_back_on_with_nothing_flagged_on_the_way_is_an_excursion() {
    // Both successes step into the bedroom and back to the hall before the studio: every
    // success shows the bedroom, but the rollout came back to where it was ("You move to the
    // hall." before and after) and nothing counted there, so it was a detour.
    let two_successes = |w: Vec<(&str, &str)>| run(&mut fresh(), &["t"], &[vec![(1.0, w.clone()), (1.0, w)]]);
    let w = vec![
        ("go to hall", "You move to the hall."),
        ("go to bedroom", "You move to the bedroom."),
        ("look", "A bedroom."),
        ("look", "A bedroom."),
        ("go to hall", "You move to the hall."),
        ("go to studio", "You move to the studio."),
        ("mix paint", "You make violet paint."),
    ];
    // (`look` twice in a row is a no-op, and keeps the hall's two visits further apart than
    // the no-op window.)
    assert_eq!(
        two_successes(w),
        [[true, false, false, false, false, true, true]; 2]
    );
    // Something that counts done in the bedroom keeps the way there.
    let w = vec![
        ("go to hall", "You move to the hall."),
        ("go to bedroom", "You move to the bedroom."),
        ("take brush", "You take the brush."),
        ("look", "A bedroom."),
        ("look", "A bedroom."),
        ("go to hall", "You move to the hall."),
        ("go to studio", "You move to the studio."),
    ];
    assert_eq!(
        two_successes(w),
        [[true, true, true, false, false, false, true]; 2]
    );
    // A response of another verb repeated around the step is no way back: the lamp's
    // "Done." twice does not undo the move between.
    let w = vec![
        ("switch lamp", "Done."),
        ("go to bedroom", "You move to the bedroom."),
        ("look", "A bedroom."),
        ("look", "A bedroom."),
        ("switch lamp", "Done."),
        ("mix paint", "You make violet paint."),
    ];
    assert_eq!(two_successes(w), [[true, true, false, false, false, true]; 2]);
    // Nor is a response two actions of the step's verb got (in any task): "You can't see any
    // such thing." around the key answers two failed attempts, not a place come back to. In
    // one task it is not yet an acknowledgement, so the first failed `take` counts as the
    // rollouts' first such response; the key stays.
    let w = vec![
        ("take pork", "You can't see any such thing."),
        ("take key", "You take the key."),
        ("take onion", "You can't see any such thing."),
        ("open door", "You win."),
    ];
    assert_eq!(two_successes(w), [[true, true, false, true]; 2]);
}

#[test]
fn a_response_many_times_longer_than_the_groups_is_a_description_not_progress() {
    // Effects take one sentence; `look around` lists the room (10 sentences: at least 10
    // and 3 times the median of 1): the agent looked, which is no progress, though every
    // success did it.
    let room = "This room is called the kitchen. In it, you see:\n\ta table\n\ta fridge\n\ta stove\n\
                \ta sink\n\ta cup\n\ta chair\nYou also see:\n\tA door to the hallway";
    let w = vec![
        ("go to kitchen", "You move to the kitchen."),
        ("look around", room),
        ("take apple", "You take the apple."),
    ];
    let lose = vec![("sing", "You sing.")];
    let group = [vec![(1.0, w.clone()), (1.0, w), (0.0, lose)]];
    assert_eq!(
        run(&mut fresh(), &["t"], &group),
        [vec![true, false, true], vec![true, false, true], vec![false]]
    );
    // The length is judged against the group's own too: where every response takes four
    // sentences, one of eleven (below 3 x 4) is an effect like the others.
    let long = "You eat the meal. Not bad. It was tasty. The end. Well played. Bye. Again? \
                Restart. Restore. Quit. Undo.";
    let w = vec![
        ("go east", "You go east. It is dark. Mind the step. Go on."),
        ("take meal", "You take the meal. It is hot. Careful. Eat it."),
        ("eat meal", long),
    ];
    let f = run(&mut fresh(), &["t"], &[vec![(1.0, w.clone()), (1.0, w)]]);
    assert_eq!(f, [[true, true, true], [true, true, true]]);
    // Before any success too: the listing is a state not seen before, reached by a move
    // nobody undid, but no first visit worth flagging.
    let walk = vec![
        ("go to kitchen", "You move to the kitchen."),
        ("look around", room),
        ("take apple", "You take the apple."),
    ];
    let f = run_from(&mut fresh(), "You are in the hall.", &[(0.0, walk)]);
    assert_eq!(f, [[true, false, true]]);
}

#[test]
fn a_feedback_sentence_is_found_and_replaces_the_support_rule() {
    // "Well done." follows three verbs, twice or more in each success, less often in the
    // failure, and in 5 of 9 steps (<= 0.75).
    let win1 = vec![
        ("wave", "You wave."),
        ("take cup", "Taken. Well done."),
        ("fill cup", "Filled. Well done."),
        ("drink", "Yum. Well done."),
    ];
    let win2 = vec![
        ("take cup", "Taken. Well done."),
        ("fill cup", "Filled. Well done."),
        ("wave", "You wave."),
    ];
    let fail = vec![("sit", "You sit."), ("take cup", "Taken.")];
    let mut d = reading_feedback();
    let f = run(&mut d, &["t"], &[vec![(1.0, win1), (1.0, win2), (0.0, fail)]]);
    // "wave" is common to both successes but carries no feedback; the failure's take has
    // another response and no feedback.
    assert_eq!(f[0], [false, true, true, true]);
    assert_eq!(f[1], [true, true, false]);
    assert_eq!(f[2], [false, false]);
    assert_eq!(d.num_learned(), (0, 1));

    // Off: the support rule (wave, take, fill are common to both successes).
    let mut off = MilestoneDiscovery::new(DiscoveryConfig::default().with_feedback(false)).unwrap();
    let win1 = vec![
        ("wave", "You wave."),
        ("take cup", "Taken. Well done."),
        ("fill cup", "Filled. Well done."),
    ];
    let win2 = vec![
        ("take cup", "Taken. Well done."),
        ("fill cup", "Filled. Well done."),
        ("wave", "You wave."),
    ];
    let f = run(&mut off, &["t"], &[vec![(1.0, win1), (1.0, win2)]]);
    assert_eq!(f, [[true, true, true], [true, true, true]]);
}

#[test]
fn a_one_off_line_at_one_step_of_each_success_is_not_feedback() {
    // "Status." appears after three verbs, in every success, but once per success.
    let win1 = vec![("a", "A. Status."), ("x", "X.")];
    let win2 = vec![("b", "B. Status."), ("x", "X.")];
    let win3 = vec![("c", "C. Status."), ("x", "X.")];
    let mut d = reading_feedback();
    let f = run(&mut d, &["t"], &[vec![(1.0, win1), (1.0, win2), (1.0, win3)]]);
    assert_eq!(d.num_learned(), (0, 0));
    assert_eq!(f, [[false, true], [false, true], [false, true]]);
}

#[test]
fn groups_without_success_use_the_memory_of_their_task() {
    let mut d = success_only();
    let fail = vec![("take key", "Taken."), ("sing", "La.")];
    // Batch 1: no success anywhere: nothing to learn, no milestone.
    let f = run(&mut d, &["t"], &[vec![(0.0, fail.clone())]]);
    assert_eq!(f, [[false, false]]);
    assert_eq!(d.num_tasks(), 0);
    // Batch 2: a success of task t.
    run(
        &mut d,
        &["t"],
        &[vec![(1.0, vec![("take key", "Taken."), ("open door", "Open.")])]],
    );
    // Batch 3: failures of t (from memory) and of u (never succeeded).
    let f = run(
        &mut d,
        &["t", "u"],
        &[vec![(0.0, fail.clone())], vec![(0.0, fail)]],
    );
    assert_eq!(f, [[true, false], [false, false]]);
}

#[test]
fn memory_is_bounded_and_forgets_the_least_recently_updated_task() {
    let cfg = DiscoveryConfig::default()
        .with_max_tasks(2)
        .with_max_successes(1)
        .with_novelty(false);
    let mut d = MilestoneDiscovery::new(cfg).unwrap();
    let win = |a| (1.0, vec![(a, "Done.")]);
    run(&mut d, &["a"], &[vec![win("x")]]);
    run(&mut d, &["b"], &[vec![win("x")]]);
    run(&mut d, &["a"], &[vec![win("y")]]); // a is now more recent than b; a remembers only y
    run(&mut d, &["c"], &[vec![win("x")]]); // 3 tasks > 2: b goes
    assert_eq!(d.num_tasks(), 2);
    let probe = |d: &mut MilestoneDiscovery, task| {
        run(d, &[task], &[vec![(0.0, vec![("x", "Done."), ("y", "Done.")])]])
    };
    assert_eq!(probe(&mut d, "b"), [[false, false]]); // forgotten
    assert_eq!(probe(&mut d, "a"), [[false, false]]); // "Done." after x first: y's event is (y, Done.) but not novel
    assert_eq!(probe(&mut d, "c"), [[true, false]]);
}

#[test]
fn deterministic_and_in_the_callers_row_order() {
    // The same rollouts with rows interleaved: flags follow the rows.
    let acts = ["take key", "look", "open door", "sing"];
    let batch = RolloutBatch::from_blocks(2, &[2, 2], vec![1.0, 0.0]).unwrap();
    let a = fresh()
        .discover(&batch, &["t"], |row, _| Transition {
            action: acts[row],
            next_observation: acts[row],
            ..Transition::default()
        })
        .unwrap();
    let order = [0, 2, 1, 3]; // caller row r holds block row order[r]
    let inter = RolloutBatch::from_row_keys(&[0; 4], &["w", "f", "w", "f"], &[1.0, 0.0, 1.0, 0.0]).unwrap();
    let b = fresh()
        .discover(&inter, &["t"], |row, _| Transition {
            action: acts[order[row]],
            next_observation: acts[order[row]],
            ..Transition::default()
        })
        .unwrap();
    assert_eq!(a, [true, true, false, false]);
    assert_eq!(b, [true, false, true, false]);
}

#[test]
fn bad_input_is_a_typed_error_and_leaves_memory_unchanged() {
    let batch = RolloutBatch::from_blocks(1, &[1], vec![1.0]).unwrap();
    let mut d = fresh();
    let err = d
        .discover(&batch, &["a", "b"], |_, _| Transition::default())
        .unwrap_err();
    assert!(matches!(
        err,
        Error::LengthMismatch {
            what: "tasks",
            expected: 1,
            actual: 2
        }
    ));
    assert_eq!(d.num_tasks(), 0);
    for cfg in [
        DiscoveryConfig::default().with_success_threshold(f64::NAN),
        DiscoveryConfig::default().with_min_support(1.5),
        DiscoveryConfig::default().with_max_tasks(0),
        DiscoveryConfig::default().with_max_successes(0),
        DiscoveryConfig::default().with_max_events(0),
        DiscoveryConfig::default().with_max_noops(0),
        DiscoveryConfig::default().with_max_feedback(0),
        DiscoveryConfig::default().with_feedback_min_verbs(1),
        DiscoveryConfig::default().with_feedback_min_verbs(9),
        DiscoveryConfig::default().with_feedback_max_step_fraction(0.0),
        DiscoveryConfig::default().with_max_edges(0),
        DiscoveryConfig::default().with_max_responses(0),
        DiscoveryConfig::default().with_noop_window(0),
        DiscoveryConfig::default().with_noop_window(65),
    ] {
        assert!(
            matches!(MilestoneDiscovery::new(cfg), Err(Error::InvalidConfig { .. })),
            "{cfg:?}"
        );
    }
}

// ---- the bundled recorded sample ----

fn sample() -> Vec<TrajectoryRecord> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/data/sample_trajectories.jsonl");
    read_trajectories(std::io::BufReader::new(std::fs::File::open(path).unwrap()))
        .collect::<Result<Vec<_>, _>>()
        .unwrap()
}

/// (overall, scienceworld, textworld) agreement of `flags` with `labels` (row order).
fn agreement(records: &[TrajectoryRecord], flags: &[bool], labels: &[bool]) -> [MilestoneAgreement; 3] {
    let mut out = [MilestoneAgreement::default(); 3];
    let mut at = 0;
    for r in records {
        let n = r.steps.len();
        let one = RolloutBatch::from_blocks(1, &[n], vec![0.0]).unwrap();
        let a = MilestoneAgreement::compare(&one, &flags[at..at + n], &labels[at..at + n]).unwrap();
        out[0] += a;
        out[if protocol::env_of(r) == "scienceworld" {
            1
        } else {
            2
        }] += a;
        at += n;
    }
    out
}

/// The evaluation protocol of `examples/discover_eval`: signal removal and the split.
#[path = "../../examples/discover_eval/protocol.rs"]
mod protocol;

/// The labels of `records` (row order) and their flags from one discovery call.
fn discover_part(part: protocol::Part) -> (Vec<TrajectoryRecord>, Vec<bool>, Vec<bool>) {
    let (records, labels) = protocol::strip_all(&protocol::records_of(&sample(), part));
    let flags = fresh()
        .discover_records(&RecordBatch::new(&records).unwrap())
        .unwrap();
    (records, labels, flags)
}

#[test]
fn the_split_is_by_group_within_each_environment_and_documented() {
    let parts = protocol::part_of_groups(&sample());
    let expected = [
        ("sw/find-animal/v146", protocol::Part::Evaluation),
        ("sw/power-component/v6", protocol::Part::Development),
        ("tw/cook_r3_go1/s12", protocol::Part::Evaluation),
        ("tw/custom_q5/s31", protocol::Part::Development),
    ];
    let got: Vec<(&str, protocol::Part)> = parts.iter().map(|(g, p)| (g.as_str(), *p)).collect();
    assert_eq!(got, expected);
    // FNV-1a 64 of "a" (the published test vector), so the rule can be recomputed anywhere.
    assert_eq!(protocol::fnv1a("a"), 0xaf63_dc4c_8601_ec8c);
    // data/discovery_split.tsv lists the same assignment.
    let listed =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/data/discovery_split.tsv")).unwrap();
    let rows: Vec<(String, String)> = listed
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (g, p) = l.split_once('\t').unwrap();
            (g.to_string(), p.to_string())
        })
        .collect();
    let want: Vec<(String, String)> = expected
        .iter()
        .map(|(g, p)| (g.to_string(), p.name().to_string()))
        .collect();
    assert_eq!(rows, want);
}

#[test]
fn a_file_read_whole_is_every_group_in_file_order() {
    let all = sample();
    let whole = protocol::records_of(&all, protocol::Part::Whole);
    let ids = |rs: &[TrajectoryRecord]| rs.iter().map(|r| r.traj_id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&whole), ids(&all));
    let split = protocol::records_of(&all, protocol::Part::Development).len()
        + protocol::records_of(&all, protocol::Part::Evaluation).len();
    assert_eq!(split, whole.len());
}

#[test]
fn without_any_environment_signal_discovery_beats_the_baseline_on_the_evaluation_part() {
    let (records, labels, flags) = discover_part(protocol::Part::Evaluation);
    // Nothing of the environment's signal is left: no score text, no status counter, no
    // score, reward, milestone or subgoal field.
    for r in &records {
        assert!(r.initial_score.is_none());
        assert!(!protocol::shows_signal(
            r.initial_observation.as_deref().unwrap_or("")
        ));
        for s in &r.steps {
            assert!(!protocol::shows_signal(&s.observation), "{}", s.observation);
            assert!(s.score.is_none() && s.reward == 0.0 && s.milestone.is_none());
            assert!(s.new_subgoals.is_none());
        }
    }
    let [all, sw, tw] = agreement(&records, &flags, &labels);
    // Measured with examples/discover_eval (its `batch` protocol). Deterministic: pinned
    // exactly. ScienceWorld's group here is a find task, whose rubric scores the doors opened
    // on the way. Their "The door is now open." is a response two doors get, but in one task:
    // no acknowledgement yet (`shared_responses` needs two tasks, and this part holds one per
    // environment, which share no response), so the doors are found and the flags are those
    // with `shared_responses` off (below). `look around` and TextWorld's room on entering it
    // are descriptions, no event (ScienceWorld 2 and TextWorld 11 false positives fewer than
    // before that rule). The goal (F1 >= 0.7) holds in both environments here; the headline
    // is measured on the recorded evaluation part (docs/discovery.md).
    let counts = |a: &MilestoneAgreement| (a.true_positives, a.false_positives, a.false_negatives);
    assert_eq!([counts(&sw), counts(&tw)], [(34, 21, 0), (66, 7, 0)], "{all:?}");
    assert!(sw.f1() >= 0.7 && tw.f1() >= 0.7, "{sw:?} {tw:?}");
    let off = DiscoveryConfig::default().with_shared_responses(false);
    let kept = MilestoneDiscovery::new(off)
        .unwrap()
        .discover_records(&RecordBatch::new(&records).unwrap())
        .unwrap();
    assert_eq!(kept, flags);
    let rb = RecordBatch::new(&records).unwrap();
    let base = frequency_baseline(rb.batch(), 0.0, |row, _| rb.transition(row)).unwrap();
    let [base_all, base_sw, base_tw] = agreement(&records, &base, &labels);
    // Measured: overall F1 0.877 against the baseline's 0.660; in each environment
    // discovery is ahead.
    assert!(
        sw.f1() > base_sw.f1() && tw.f1() > base_tw.f1(),
        "{sw:?} {base_sw:?}"
    );
    assert!(
        all.f1() >= base_all.f1() + 0.1,
        "{} vs {}",
        all.f1(),
        base_all.f1()
    );
}

/// `records` with TextWorld's score sentence put back after the first sentence of every
/// labelled step's response (both environments).
fn with_score_sentence(records: &[TrajectoryRecord], labels: &[bool]) -> Vec<TrajectoryRecord> {
    let mut out = records.to_vec();
    let mut at = 0;
    for r in &mut out {
        for s in &mut r.steps {
            if labels[at] {
                let cut = s
                    .observation
                    .find(['.', '!', '?', '\n'])
                    .map_or(s.observation.len(), |i| i + 1);
                s.observation
                    .insert_str(cut, "\n\nYour score has just gone up by one point.\n");
            }
            at += 1;
        }
    }
    out
}

#[test]
fn the_score_sentence_changes_no_flag() {
    let mut read_by_feedback = 0;
    for part in [protocol::Part::Development, protocol::Part::Evaluation] {
        let (records, labels, flags) = discover_part(part);
        let scored = with_score_sentence(&records, &labels);
        let again = fresh()
            .discover_records(&RecordBatch::new(&scored).unwrap())
            .unwrap();
        assert_eq!(flags, again, "{part:?}");
        // The check has teeth: the feedback channel (off by default) reads the sentence
        // where successes show it at two steps or more (the cooking game), and flags change.
        let reader = |r: &[TrajectoryRecord]| {
            reading_feedback()
                .discover_records(&RecordBatch::new(r).unwrap())
                .unwrap()
        };
        read_by_feedback += usize::from(reader(&records) != reader(&scored));
    }
    assert_eq!(read_by_feedback, 1);
}

#[test]
fn scores_rewards_flags_and_subgoals_are_never_read() {
    let records = sample();
    let mut scrambled = records.clone();
    for (i, r) in scrambled.iter_mut().enumerate() {
        r.initial_score = Some(-7.0 * i as f64);
        for (t, s) in r.steps.iter_mut().enumerate() {
            let x = ((i * 31 + t * 17) % 13) as f64;
            s.score = Some(x - 6.0);
            s.reward = 5.0 - x;
            s.milestone = Some((i + t) % 3 == 0);
            s.new_subgoals = Some(vec![format!("subgoal {x}")]);
            s.extra.insert(&("score".to_string() + "_text"), Value::from(x));
        }
    }
    let a = fresh()
        .discover_records(&RecordBatch::new(&records).unwrap())
        .unwrap();
    let b = fresh()
        .discover_records(&RecordBatch::new(&scrambled).unwrap())
        .unwrap();
    assert_eq!(a, b);
    assert!(a.iter().any(|&f| f));
}

// ---- the command line: `--detector discover` ----

/// Runs the `beacon` program, which cargo builds for the tests with the `cli` feature.
#[cfg(feature = "cli")]
#[test]
fn cli_discover_ignores_scores_rewards_flags_and_subgoals() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/data/sample_trajectories.jsonl");
    let text = std::fs::read_to_string(path).unwrap();
    let mut scrambled = String::new();
    for (i, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        let mut v: Value = serde_json::from_str(line).unwrap();
        v["initial_score"] = Value::from(3.0 * i as f64 - 40.0);
        v["final_score"] = Value::from(-1);
        for (t, s) in v["steps"].as_array_mut().unwrap().iter_mut().enumerate() {
            let x = ((i * 7 + t * 5) % 11) as f64;
            s["score"] = Value::from(x * 10.0 - 50.0);
            s["reward"] = Value::from(x - 5.0);
            s["milestone"] = Value::from((i + t) % 2 == 0);
            s["new_subgoals"] = Value::from(vec![format!("scrambled {x}")]);
        }
        scrambled.push_str(&serde_json::to_string(&v).unwrap());
        scrambled.push('\n');
    }
    let dir = std::env::temp_dir().join(format!("beacon-discover-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join("scrambled.jsonl");
    std::fs::write(&copy, scrambled).unwrap();
    let run = |file: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_beacon"))
            .args([
                "--detector",
                "discover",
                "--format",
                "jsonl",
                "--diagnostics",
                file,
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    };
    let a = run(path);
    let b = run(copy.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        String::from_utf8(a.clone()).unwrap(),
        String::from_utf8(b).unwrap()
    );
    // Milestones were found, and they are the library's.
    let text = String::from_utf8(a).unwrap();
    let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let records = sample();
    let flags = fresh()
        .discover_records(&RecordBatch::new(&records).unwrap())
        .unwrap();
    let n = records[0].steps.len();
    let expected: Vec<Value> = flags[..n].iter().map(|&f| Value::from(f)).collect();
    assert_eq!(first["milestones"].as_array().unwrap(), &expected);
    assert!(flags[..n].iter().any(|&f| f));
}

#[test]
fn before_any_success_irreversible_first_visits_are_flagged() {
    let (e0, k0, e1, o0) = (
        "Room 0, empty hands.",
        "Room 0, holding key.",
        "Room 1, empty hands.",
        "Room 0, door open.",
    );
    // r1 walks e0 k0 e0 k0 e1: (e0 -> k0) and (k0 -> e0) are undone (the earlier state
    // comes back later); (k0 -> e1) is not. r2 walks e0 e0 k0 e1 o0.
    let r1 = vec![
        ("take key", k0),
        ("drop key", e0),
        ("take key", k0),
        ("open door", e1),
    ];
    let r2 = vec![
        ("wander", e0),
        ("take key", k0),
        ("open door", e1),
        ("go back", o0),
    ];
    let mut d = fresh();
    let f = run_from(&mut d, e0, &[(0.0, r1.clone()), (0.0, r2.clone())]);
    // r1: k0 first visited by an undone move; e0 and k0 again are not first visits; e1 is.
    // r2: e0 again (no move); k0 by the undone move; e1 and o0 first visits never undone.
    assert_eq!(
        f,
        [vec![false, false, false, true], vec![false, false, true, true]]
    );
    assert_eq!(d.num_tasks(), 0);
    // r3 goes back and through the door again: (e1 -> o0) is now seen undone, everywhere.
    let r3 = vec![
        ("take key", k0),
        ("open door", e1),
        ("go back", o0),
        ("open door", e1),
    ];
    let f = run_from(&mut d, e0, &[(0.0, r2.clone()), (0.0, r3.clone())]);
    assert_eq!(
        f,
        [vec![false, false, true, false], vec![false, true, false, false]]
    );
    // Without the signal, nothing is flagged before a success.
    let f = run_from(&mut success_only(), e0, &[(0.0, r2.clone())]);
    assert_eq!(f, [vec![false; 4]]);
    // Once the task has succeeded, its milestones come from the successes only. On `d`, r1
    // did "take key" at steps 0 and 2 with the same response k0 (undone by "drop key"
    // between) and r3 "open door" at steps 1 and 3 with the same e1: 2 steps apart <=
    // noop_window 3, both are no-ops, and the success has no event left.
    let win = vec![("take key", k0), ("open door", e1)];
    let f = run_from(&mut d, e0, &[(1.0, win.clone()), (0.0, r2.clone())]);
    assert_eq!(f, [vec![false, false], vec![false; 4]]);
    // A discovery that never saw them undone: the success's events are (take key, k0) and
    // (open door, e1), flagged wherever they occur.
    let f = run_from(&mut fresh(), e0, &[(1.0, win.clone()), (0.0, r2.clone())]);
    assert_eq!(f, [vec![true, true], vec![false, true, true, false]]);
    // With noop_window 1 (only repeats in a row) r1 and r3 make no no-op.
    let mut d = MilestoneDiscovery::new(DiscoveryConfig::default().with_noop_window(1)).unwrap();
    run_from(&mut d, e0, &[(0.0, r1), (0.0, r3), (0.0, r2.clone())]);
    let f = run_from(&mut d, e0, &[(1.0, win), (0.0, r2)]);
    assert_eq!(f, [vec![true, true], vec![false, true, true, false]]);
}

// ---- a wider no-op window only removes flags ----

/// Small random groups over a tiny vocabulary, so repeats (and no-ops) are frequent.
fn small_group() -> impl Strategy<Value = Vec<(bool, Vec<(usize, usize)>)>> {
    prop::collection::vec(
        (any::<bool>(), prop::collection::vec((0usize..4, 0usize..3), 1..8)),
        1..5,
    )
}

proptest! {
    #[test]
    fn a_wider_noop_window_never_adds_a_flag(group in small_group(), a in 1usize..5, extra in 0usize..5) {
        // More no-ops remove events (and their keys from the milestone set) and nothing
        // else, as long as no feedback channel can switch the rule (feedback off).
        const ACTIONS: [&str; 4] = ["take", "drop", "look", "go"];
        const RESPONSES: [&str; 3] = ["Done.", "Nothing.", "A room."];
        let group: Vec<Rollout<'static>> = group
            .iter()
            .map(|(win, steps)| {
                let steps = steps.iter().map(|&(x, y)| (ACTIONS[x], RESPONSES[y])).collect();
                (f64::from(u8::from(*win)), steps)
            })
            .collect();
        let flags = |window: usize| {
            let cfg = DiscoveryConfig::default().with_feedback(false).with_noop_window(window);
            run(&mut MilestoneDiscovery::new(cfg).unwrap(), &["t"], std::slice::from_ref(&group))
        };
        let (narrow, wide) = (flags(a), flags(a + extra));
        for (n, w) in narrow.iter().flatten().zip(wide.iter().flatten()) {
            prop_assert!(!*w || *n);
        }
    }
}

// ---- the decoy: a step that precedes failure, never success ----

#[test]
fn a_decoy_that_ends_rollouts_in_failure_is_never_kept() {
    // Room 0 has a key, a door and a trapdoor. The trapdoor ends the rollout in failure at
    // once; the others run out of their 4-step budget. Opening the trapdoor reaches a state
    // never seen before by a move nobody undoes: without the dead-end rule it would be an
    // irreversible first visit, a milestone that precedes failure every time.
    let (e0, k0, e1, cellar) = ("Room 0.", "Room 0, key held.", "Room 1.", "A cellar, a dead end.");
    let trap = vec![("take key", k0), ("open trapdoor", cellar)];
    let trap_first = vec![("open trapdoor", cellar)];
    let slow = vec![
        ("wander", e0),
        ("take key", k0),
        ("open door", e1),
        ("wander", e1),
    ];
    let lost = vec![("wander", e0), ("wander", e0), ("take key", k0), ("wander", k0)];
    let group = [
        (0.0, trap.clone()),
        (0.0, slow.clone()),
        (0.0, trap_first.clone()),
        (0.0, lost),
    ];
    let mut d = fresh();
    let f = run_from(&mut d, e0, &group);
    // Before any success: the door (k0 -> e1) and the key are irreversible first visits;
    // the trapdoor is a dead end, flagged nowhere.
    assert_eq!(
        f,
        [
            vec![true, false],
            vec![false, true, true, false],
            vec![false],
            vec![false, false, true, false],
        ]
    );
    // Without the rule (a discovery that never saw a rollout end there) it would be kept.
    let mut naive = fresh();
    let f = run_from(&mut naive, e0, &[(0.0, trap.clone())]);
    assert_eq!(f, [vec![true, true]]);
    // The dead end is remembered: a later group where every rollout opens it still gets
    // no flag there.
    let f = run_from(&mut d, e0, &[(0.0, trap_first.clone()), (0.0, trap.clone())]);
    assert_eq!(f, [vec![false], vec![true, false]]);
    // Once the task succeeds, milestones come from successes, which never show the trapdoor.
    let win = vec![
        ("take key", k0),
        ("open door", e1),
        ("take key", "Room 1, key held."),
        ("open door", "Outside."),
    ];
    let f = run_from(&mut d, e0, &[(1.0, win), (0.0, trap), (0.0, slow.clone())]);
    assert_eq!(f[1], [true, false]);
    assert_eq!(f[2], [false, true, true, false]);
    // A state some rollout goes on from is no dead end: a truncated rollout that stops at
    // the door (e1) does not make the door a decoy.
    let mut d = fresh();
    let cut = vec![("take key", k0), ("open door", e1)];
    let f = run_from(&mut d, e0, &[(0.0, cut), (0.0, slow)]);
    assert_eq!(f, [vec![true, true], vec![false, true, true, false]]);
}

#[test]
fn a_decoy_the_budget_ends_is_never_kept_either() {
    // The trapdoor leads to a cellar where the rollout goes on until its budget runs out,
    // every action changing nothing: the environment did not stop it, but no rollout leaves
    // the cellar, and this one tried two different actions there.
    let (e0, k0, e1, cellar) = ("Room 0.", "Room 0, key held.", "Room 1.", "A cellar.");
    let trap = vec![
        ("open trapdoor", cellar),
        ("take key", cellar),
        ("wander", cellar),
        ("open door", cellar),
    ];
    let slow = vec![
        ("wander", e0),
        ("take key", k0),
        ("open door", e1),
        ("wander", e1),
    ];
    let mut d = fresh();
    let f = run_from(&mut d, e0, &[(0.0, trap.clone()), (0.0, slow.clone())]);
    assert_eq!(f, [vec![false; 4], vec![false, true, true, false]]);
    // Remembered, and not forgotten when a later rollout idles there once: it did not leave.
    let late = vec![
        ("wander", e0),
        ("take key", k0),
        ("open trapdoor", cellar),
        ("wander", cellar),
    ];
    let f = run_from(&mut d, e0, &[(0.0, late.clone()), (0.0, slow.clone())]);
    assert_eq!(f[0], [false, true, false, false]);
    // One action repeated is not two: the state may be a new room the budget cut short.
    let idle = vec![
        ("open trapdoor", cellar),
        ("wander", cellar),
        ("wander", cellar),
        ("wander", cellar),
    ];
    let f = run_from(&mut fresh(), e0, &[(0.0, idle), (0.0, slow.clone())]);
    assert_eq!(f[0], [true, false, false, false]);
    // A state some rollout leaves is no dead end, however long another stayed in it.
    let out = vec![("open trapdoor", cellar), ("open hatch", "Room 1, from below.")];
    let f = run_from(&mut fresh(), e0, &[(0.0, trap), (0.0, out), (0.0, slow)]);
    assert!(f[0][0] && f[1][0]);
}

#[test]
fn a_cellar_that_answers_is_no_milestone_once_every_action_was_tried_in_it() {
    // The trapdoor leads to a cellar of two states (a key held or not) that the rollout moves
    // between until its budget runs out, ending on a move: no state it idled in, no early end.
    // Every action ever tried in one state (3: the menu) was tried in both, none led out.
    let (e0, k0, e1) = ("Room 0.", "Room 0, key held.", "Room 1.");
    let (c0, c1) = ("A cellar.", "A cellar, key held.");
    let trap = vec![
        ("open trapdoor", c0),
        ("wander", c0),
        ("take key", c1),
        ("take key", c1),
        ("wander", c1),
        ("drop key", c0),
        ("drop key", c0),
        ("take key", c1),
    ];
    let mut walk = vec![("wander", e0), ("take key", k0), ("open door", e1)];
    walk.resize(8, ("wander", e1));
    let f = run_from(&mut fresh(), e0, &[(0.0, trap.clone()), (0.0, walk.clone())]);
    let mut door = vec![false; 8];
    door[1..3].fill(true);
    assert_eq!(f, [vec![false; 8], door.clone()]);
    // One action fewer in one cellar state: not every way was tried, the trapdoor is a first
    // visit like the door.
    let mut fewer = trap.clone();
    fewer[4] = ("take key", c1);
    let f = run_from(&mut fresh(), e0, &[(0.0, fewer), (0.0, walk.clone())]);
    assert!(f[0][0]);
    // A way out, found by another rollout, reopens it.
    let mut out = vec![
        ("open trapdoor", c0),
        ("take key", c1),
        ("open hatch", "Room 1, from below."),
    ];
    out.resize(8, ("wander", "Room 1, from below."));
    let f = run_from(&mut fresh(), e0, &[(0.0, trap), (0.0, out), (0.0, walk)]);
    assert!(f[0][0] && f[1][0]);
}

#[test]
fn an_answer_to_a_prompt_is_the_prompted_action_resolved() {
    let ask = "Ambiguous request: which one? 0: the egg. 1: the egg.";
    let win = vec![
        ("focus on egg", ask),
        ("0", "You focus on the egg."),
        ("move egg to box", ask),
        ("0", "You move the egg to the box."),
    ];
    let f = run(&mut fresh(), &["t"], &[vec![(1.0, win.clone()), (1.0, win)]]);
    // Both answers are events of their own (focus, 0) and (move, 0); the prompts did nothing
    // yet (next test).
    assert_eq!(f, [[false, true, false, true], [false, true, false, true]]);
    // The same "0" after the same question is one event: the second is a repeat (4 steps
    // apart, beyond the no-op window).
    let twice = vec![
        ("focus on egg", ask),
        ("0", "You focus on the egg."),
        ("wave", "You wave."),
        ("jump", "You jump."),
        ("focus on egg", ask),
        ("0", "You focus on the egg."),
    ];
    let f = run(&mut fresh(), &["t"], &[vec![(1.0, twice)]]);
    assert_eq!(f, [[false, true, true, true, false, false]]);
}

#[test]
fn a_prompt_answered_by_a_number_is_no_progress_its_answer_is() {
    // "focus on egg" asks which egg; "0" answers. The question changed nothing, so only the
    // answer is a milestone, though both successes show both with a new response.
    let ask = "Ambiguous request: which one? 0: the egg. 1: the egg.";
    let win = vec![("focus on egg", ask), ("0", "You focus on the egg.")];
    let f = run(&mut fresh(), &["t"], &[vec![(1.0, win.clone()), (1.0, win)]]);
    assert_eq!(f, [[false, true], [false, true]]);
    // Not answered by a number: the same step is an event like any other.
    let win = vec![("focus on egg", ask), ("focus on egg 0", "You focus on the egg.")];
    let f = run(&mut fresh(), &["t"], &[vec![(1.0, win.clone()), (1.0, win)]]);
    assert_eq!(f, [[true, true], [true, true]]);
}

#[test]
fn a_reading_is_one_event_whatever_value_it_reads() {
    // Both successes measure, reading other temperatures; the failure never measures.
    let win = |reading| {
        vec![
            ("take thermometer", "Taken."),
            ("use thermometer on water", reading),
            ("put water in box", "Done."),
        ]
    };
    let hot = win("the thermometer measures a temperature of 29 degrees celsius");
    let cold = win("the thermometer measures a temperature of 23 degrees celsius");
    let f = run(&mut fresh(), &["t"], &[vec![(1.0, hot), (1.0, cold)]]);
    // The reading is a milestone in both: its key reads every number as one mark.
    assert_eq!(f, [[true, true, true], [true, true, true]]);
    // Another response (no reading) is another event, numbers or not.
    let odd = win("the thermometer is broken after 2 uses");
    let f = run(
        &mut fresh(),
        &["t"],
        &[vec![(1.0, odd), (1.0, win("a temperature of 9"))]],
    );
    assert_eq!(f, [[true, false, true], [true, false, true]]);
}
