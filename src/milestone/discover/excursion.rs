//! Excursions: a flagged step the rollout went back on before it flagged anything else.
//!
//! Step t of a trajectory, flagged, with verb v (its action's first word), is dropped when the
//! rollout got one response twice to that verb around it, with no other step flagged between:
//!
//! ```text
//! ∃ s < t < u :  verb(s) = verb(u) = v,  gist(s) = gist(u) ∉ common,
//!                no step of (s, u) but t flagged
//! ```
//!
//! `go to hallway` ("You move to the hallway."), `go to bedroom`, `go to hallway` ("You move to
//! the hallway." again): the rollout came back to where it was and did nothing there that
//! counts, so the bedroom was a detour, not a subgoal, however many successes took it. A
//! detour in which something counted (`go to kitchen`, `pick up thermometer`, `go to hallway`)
//! keeps its steps. The verb must be t's: two steps of another verb with one response ("The
//! door is already open.") say nothing about a move made between them. And the response must
//! not be *common*: got by two different actions of one verb, in any task (module docs of
//! discovery). "You can't see any such thing." after `take pork chop` and `take red onion`
//! answers two failed attempts, not a place come back to, so the `take key` between them stays.

use super::text::KeySet;
use super::workspace::StepKeys;

/// Clears the flags that mark an excursion (module docs) in one trajectory: step t of
/// `steps` is flagged in `flags[rows[t]]`; `common` holds the common gists. Judged on
/// the flags as they come in: dropping one does not make its neighbour an excursion.
/// `flagged` and `gists` are reused buffers.
pub(super) fn drop_excursions(
    steps: &[StepKeys],
    rows: &[usize],
    common: &KeySet,
    flags: &mut [bool],
    flagged: &mut Vec<usize>,
    gists: &mut KeySet,
) {
    flagged.clear();
    flagged.extend((0..steps.len()).filter(|&t| flags[rows[t]]));
    let last = steps.len().saturating_sub(1);
    for (a, &t) in flagged.iter().enumerate() {
        // The loop's ends may be the neighbouring flagged steps themselves; its inside may
        // hold no other flag.
        let from = if a > 0 { flagged[a - 1] } else { 0 };
        let to = flagged.get(a + 1).copied().unwrap_or(last);
        let verb = steps[t].verb;
        gists.clear();
        gists.extend(
            steps[from..t]
                .iter()
                .filter(|s| s.verb == verb && !common.contains(&s.gist))
                .map(|s| s.gist),
        );
        if gists.is_empty() {
            continue;
        }
        let back = steps[t + 1..=to]
            .iter()
            .any(|s| s.verb == verb && gists.contains(&s.gist));
        if back {
            flags[rows[t]] = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Steps of (verb, gist), flagged where `flags` says, no gist common.
    fn run(steps: &[(u64, u64)], flags: &[bool]) -> Vec<bool> {
        run_common(steps, flags, &KeySet::default())
    }

    fn run_common(steps: &[(u64, u64)], flags: &[bool], common: &KeySet) -> Vec<bool> {
        let keys: Vec<StepKeys> = steps
            .iter()
            .map(|&(verb, gist)| StepKeys {
                verb,
                gist,
                ..StepKeys::default()
            })
            .collect();
        let rows: Vec<usize> = (0..steps.len()).collect();
        let mut out = flags.to_vec();
        drop_excursions(
            &keys,
            &rows,
            common,
            &mut out,
            &mut Vec::new(),
            &mut KeySet::default(),
        );
        out
    }

    const GO: u64 = 1;
    const OPEN: u64 = 2;
    const TAKE: u64 = 3;
    const HALL: u64 = 10;
    const BED: u64 = 11;
    const STUDIO: u64 = 12;
    const KITCHEN: u64 = 13;
    const OPENED: u64 = 20;
    const TAKEN: u64 = 21;
    const NOT_SEEN: u64 = 22;

    #[test]
    fn a_detour_back_to_where_the_rollout_was_is_dropped() {
        // hallway, bedroom, hallway, studio: the bedroom is a detour.
        let steps = [
            (GO, HALL),
            (OPEN, OPENED),
            (GO, BED),
            (OPEN, OPENED),
            (GO, HALL),
            (GO, STUDIO),
        ];
        let flags = [true, false, true, false, false, true];
        assert_eq!(run(&steps, &flags), [true, false, false, false, false, true]);
    }

    #[test]
    fn a_detour_in_which_something_counted_is_kept() {
        // hallway, kitchen, take thermometer (flagged), hallway: the kitchen was needed.
        let steps = [(GO, HALL), (GO, KITCHEN), (TAKE, TAKEN), (GO, HALL), (GO, STUDIO)];
        let flags = [true, true, true, false, true];
        assert_eq!(run(&steps, &flags), flags);
        // Without the flagged step in it, the same walk is a detour.
        let flags = [true, true, false, false, true];
        assert_eq!(run(&steps, &flags), [true, false, false, false, true]);
    }

    #[test]
    fn only_a_return_by_the_steps_own_verb_counts() {
        // "The door is now open." twice around `go to bedroom`: not a way back.
        let steps = [(OPEN, OPENED), (GO, BED), (OPEN, OPENED), (GO, STUDIO)];
        let flags = [false, true, false, true];
        assert_eq!(run(&steps, &flags), flags);
        // No return at all, or a return after the next flag: kept.
        let steps = [(GO, HALL), (GO, BED), (GO, STUDIO), (GO, HALL)];
        let flags = [true, true, true, false];
        assert_eq!(run(&steps, &flags), [true, true, true, false]);
        assert_eq!(run(&[], &[]), Vec::<bool>::new());
    }

    #[test]
    fn a_common_response_closes_no_loop() {
        // take (failed), take key, take (failed): "You can't see any such thing." twice around
        // the key. Shared by two actions, it answers failures, not a place: the key stays.
        let steps = [(TAKE, NOT_SEEN), (TAKE, TAKEN), (TAKE, NOT_SEEN)];
        let flags = [false, true, false];
        let common: KeySet = [NOT_SEEN].into_iter().collect();
        assert_eq!(run_common(&steps, &flags, &common), flags);
        // Particular to one action, the same response is a way back.
        assert_eq!(run(&steps, &flags), [false, false, false]);
    }
}
