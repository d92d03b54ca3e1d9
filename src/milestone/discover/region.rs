//! Dead regions: states in which every action has been tried and none led out.
//!
//! Each state s remembers the different actions tried in it, A(s), and the states a step
//! from it led to, N(s) (at most [`CAP`] of each). With m the most different actions tried in
//! any one state (the environment's menu, once some state has seen all of it), the dead
//! region is the largest set D of states such that every s ∈ D has
//!
//! ```text
//! |A(s)| ≥ m ≥ 2,   no successful rollout visited s,   N(s) ⊆ D
//! ```
//!
//! Every action was tried in every state of D, and every step from D stayed in D: in a
//! deterministic environment no way out is left to find. A cellar whose keys can be taken and
//! dropped is such a set (three states, each answering every action with one of the three);
//! a room whose way out is one action nobody has taken yet in the one state it works in is
//! not (that state has fewer than m actions). A step into D is no milestone. A state with
//! more than [`CAP`] successors is never in D (too many ways out to follow), and neither is a
//! state first seen once [`Regions::learn`]'s bound is reached. D is computed again after
//! every call in which a state learned something, so a way out found later reopens the
//! region.

use super::text::{KeyMap, KeySet};
use super::workspace::StepKeys;

/// Actions and successors remembered per state.
const CAP: usize = 16;

/// What one state has seen.
#[derive(Debug, Clone, Copy, Default)]
struct Visited {
    /// Different actions tried in it (the low half of their keys: a collision can only
    /// undercount, which keeps the state out of D).
    actions: [u32; CAP],
    /// Different states a step from it led to.
    next: [u64; CAP],
    n_actions: u8,
    /// `CAP + 1` once more than `CAP` successors were seen.
    n_next: u8,
    /// A successful rollout visited it.
    success: bool,
}

impl Visited {
    /// Records a step of `action` from this state (`from`) to `next`; returns whether the
    /// state learned anything.
    fn record(&mut self, action: u32, next: u64, from: u64) -> bool {
        let mut learned = false;
        let n = usize::from(self.n_actions);
        if n < CAP && !self.actions[..n].contains(&action) {
            self.actions[n] = action;
            self.n_actions += 1;
            learned = true;
        }
        let n = usize::from(self.n_next);
        if next != from && n <= CAP && !self.next[..n.min(CAP)].contains(&next) {
            if n < CAP {
                self.next[n] = next;
            }
            self.n_next += 1;
            learned = true;
        }
        learned
    }

    /// Records whether a successful rollout visited this state; returns whether that is new.
    fn succeed(&mut self, success: bool) -> bool {
        let found = success && !self.success;
        self.success |= success;
        found
    }

    fn successors(&self) -> Option<&[u64]> {
        let n = usize::from(self.n_next);
        (n <= CAP).then(|| &self.next[..n])
    }

    /// Whether the state can be in D under a menu of `menu` actions (module docs).
    fn is_candidate(&self, menu: u8) -> bool {
        !self.success && self.n_actions >= menu && self.successors().is_some()
    }
}

/// The states remembered over all tasks, and the dead region D they give (module docs).
#[derive(Debug, Clone, Default)]
pub(super) struct Regions {
    states: KeyMap<Visited>,
    /// The most different actions tried in one state (the menu, m).
    menu: u8,
    /// The states that can be in D under the menu, kept as the states learn, so computing D
    /// reads them and not every state remembered.
    candidates: KeySet,
    /// The menu grew since `candidates` was built: build it again from every state.
    rebuild: bool,
    dead: KeySet,
    /// Something was learned since D was last computed.
    changed: bool,
    /// States leaving D in one round of [`settle`](Self::settle) (reused).
    leaving: Vec<u64>,
}

impl Regions {
    /// Remembers the steps of one trajectory, `success` when it succeeded; at most
    /// `max_states` states are remembered (later ones are ignored: never dead).
    pub(super) fn learn(&mut self, steps: &[StepKeys], success: bool, max_states: usize) {
        for s in steps {
            self.visit(s.from, max_states, |v| {
                v.record(s.action as u32, s.whole, s.from) | v.succeed(success)
            });
        }
        // A step's state after is the next step's state before; only a success's last state,
        // which no step leaves, needs a visit of its own.
        if let (true, Some(last)) = (success, steps.last()) {
            self.visit(last.whole, max_states, |v| v.succeed(true));
        }
    }

    /// Lets the state `key` (added if fewer than `max_states` are remembered) learn, and when
    /// it learned something, keeps the menu and the candidates up to date.
    fn visit(&mut self, key: u64, max_states: usize, learn: impl FnOnce(&mut Visited) -> bool) {
        let state = if self.states.len() < max_states {
            self.states.entry(key).or_default()
        } else if let Some(state) = self.states.get_mut(&key) {
            state
        } else {
            return;
        };
        if !learn(state) {
            return;
        }
        self.changed = true;
        if state.n_actions > self.menu {
            self.menu = state.n_actions;
            self.rebuild = true;
        } else if state.is_candidate(self.menu) {
            self.candidates.insert(key);
        } else {
            self.candidates.remove(&key);
        }
    }

    /// Computes D from what the states remember: the candidates, then the largest subset
    /// closed under N (states with a successor outside are removed until none is).
    pub(super) fn settle(&mut self) {
        if !std::mem::take(&mut self.changed) {
            return;
        }
        if std::mem::take(&mut self.rebuild) {
            let menu = self.menu;
            self.candidates.clear();
            let candidates = self.states.iter().filter(|(_, v)| v.is_candidate(menu));
            self.candidates.extend(candidates.map(|(&key, _)| key));
        }
        self.dead.clear();
        if self.menu < 2 {
            return;
        }
        self.dead.extend(self.candidates.iter().copied());
        loop {
            self.leaving.clear();
            for key in &self.dead {
                let next = self.states.get(key).and_then(Visited::successors);
                if !next.is_some_and(|n| n.iter().all(|k| self.dead.contains(k))) {
                    self.leaving.push(*key);
                }
            }
            if self.leaving.is_empty() {
                return;
            }
            for key in &self.leaving {
                self.dead.remove(key);
            }
        }
    }

    /// Whether `state` is in D (as of the last [`settle`](Self::settle)).
    pub(super) fn is_dead(&self, state: u64) -> bool {
        self.dead.contains(&state)
    }

    /// Number of states remembered.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.states.len()
    }

    pub(super) fn clear(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::Regions;
    use crate::milestone::discover::workspace::StepKeys;
    use proptest::prelude::*;

    fn step(from: u64, action: u64, whole: u64) -> StepKeys {
        StepKeys {
            from,
            action,
            whole,
            ..StepKeys::default()
        }
    }

    /// A three-state cellar (10, 11, 12) where two actions (1, 2) move between states and a
    /// third (3) stays, entered from a room (0) with a way out (state 5).
    fn cellar_walk() -> Vec<StepKeys> {
        let mut steps = vec![step(0, 9, 10)];
        for from in [10, 11, 12] {
            for (action, to) in [(1, 11), (2, 12), (3, from)] {
                steps.push(step(from, action, to));
            }
            steps.push(step(from, 4, 10));
        }
        steps
    }

    #[test]
    fn a_region_every_action_was_tried_in_and_none_left_is_dead() {
        let mut r = Regions::default();
        r.learn(&cellar_walk(), false, 100);
        r.learn(&[step(0, 1, 0), step(0, 2, 0), step(0, 3, 5)], false, 100);
        r.settle();
        assert!([10, 11, 12].iter().all(|&s| r.is_dead(s)));
        // The room had a way out to a state nobody tried anything in.
        assert!(!r.is_dead(0) && !r.is_dead(5));
    }

    #[test]
    fn an_untried_action_a_way_out_or_a_success_keeps_it_open() {
        // One state has three actions where the others have four.
        let mut walk = cellar_walk();
        walk.retain(|s| !(s.from == 12 && s.action == 3));
        let mut r = Regions::default();
        r.learn(&walk, false, 100);
        r.settle();
        assert!(![10, 11, 12].iter().any(|&s| r.is_dead(s)), "untried action");

        let mut r = Regions::default();
        r.learn(&cellar_walk(), false, 100);
        r.learn(&[step(11, 5, 20)], false, 100);
        r.settle();
        assert!(![10, 11, 12].iter().any(|&s| r.is_dead(s)), "a way out");

        let mut r = Regions::default();
        r.learn(&cellar_walk(), false, 100);
        r.learn(&[step(30, 1, 12)], true, 100);
        r.settle();
        assert!(![10, 11, 12].iter().any(|&s| r.is_dead(s)), "a success was there");

        // One action tried anywhere is no menu: a state that answered it alike is not dead.
        let mut r = Regions::default();
        r.learn(&[step(0, 1, 0), step(0, 1, 0)], false, 100);
        r.settle();
        assert!(!r.is_dead(0), "a menu of one");
    }

    #[test]
    fn a_state_joins_and_leaves_the_candidates_as_it_learns() {
        // The menu (4) is set by the first call; the second only completes state 12.
        let mut walk = cellar_walk();
        let missing = walk.iter().position(|s| s.from == 12 && s.action == 3).unwrap();
        let last = walk.remove(missing);
        let mut r = Regions::default();
        r.learn(&walk, false, 100);
        r.settle();
        assert!(!r.is_dead(10));
        r.learn(&[last], false, 100);
        r.settle();
        assert!([10, 11, 12].iter().all(|&s| r.is_dead(s)), "12 joined");
        // A success through 11 takes it out, and the region with it.
        r.learn(&[step(30, 1, 11)], true, 100);
        r.settle();
        assert!(![10, 11, 12].iter().any(|&s| r.is_dead(s)), "11 left");
    }

    #[test]
    fn a_way_out_found_later_reopens_the_region_and_the_bound_holds() {
        let mut r = Regions::default();
        r.learn(&cellar_walk(), false, 100);
        r.settle();
        assert!(r.is_dead(10));
        r.learn(&[step(12, 7, 40)], false, 100);
        r.settle();
        assert!(!r.is_dead(10));

        let mut r = Regions::default();
        r.learn(&cellar_walk(), false, 2);
        assert_eq!(r.len(), 2);
        r.settle();
        assert!(![10, 11, 12].iter().any(|&s| r.is_dead(s)));
    }

    #[test]
    fn a_state_takes_200_bytes_as_the_memory_bound_says() {
        // Module docs of `discovery`: 208 bytes a state with its 8-byte key.
        assert_eq!(std::mem::size_of::<super::Visited>(), 200);
    }

    #[test]
    fn a_state_with_more_successors_than_remembered_is_never_dead() {
        // State 1 leads to 17 states, each of which tries 16 actions that all lead back.
        let mut steps: Vec<_> = (0..17).map(|a| step(1, a, 100 + a)).collect();
        steps.extend((0..17).flat_map(|s| (0..16).map(move |a| step(100 + s, a, 1))));
        let mut r = Regions::default();
        r.learn(&steps, false, 100);
        r.settle();
        assert!(!r.is_dead(1) && !r.is_dead(116));
        // With 16 of them it is.
        steps.retain(|s| s.from != 116 && s.whole != 116);
        let mut r = Regions::default();
        r.learn(&steps, false, 100);
        r.settle();
        assert!(r.is_dead(1) && r.is_dead(115));
    }

    /// States of a deterministic environment of 6 states and 3 actions (`table[3 s + a]` is
    /// where action a leads from state s) from which state 5, the goal, can be reached.
    fn reaching_goal(table: &[u64]) -> [bool; 6] {
        let mut reach = [false, false, false, false, false, true];
        for _ in 0..6 {
            for s in 0..5 {
                reach[s] |= (0..3).any(|a| reach[table[3 * s + a] as usize]);
            }
        }
        reach
    }

    proptest! {
        #[test]
        fn once_a_state_saw_every_action_no_dead_state_can_reach_the_goal(
            table in prop::collection::vec(0u64..6, 18),
            walks in prop::collection::vec(prop::collection::vec(0u64..3, 1..24), 1..16),
        ) {
            // Rollouts from state 0, each ending in success at the goal or failing at its length.
            let mut r = Regions::default();
            let mut tried = [[false; 3]; 6];
            for walk in &walks {
                let (mut s, mut steps) = (0, Vec::new());
                for &a in walk {
                    if s == 5 {
                        break;
                    }
                    tried[s as usize][a as usize] = true;
                    let t = table[(3 * s + a) as usize];
                    steps.push(step(s, a, t));
                    s = t;
                }
                r.learn(&steps, s == 5, 100);
            }
            r.settle();
            let reach = reaching_goal(&table);
            if tried.iter().any(|t| t.iter().all(|&x| x)) {
                for (s, &reaches) in reach.iter().enumerate() {
                    prop_assert!(!(r.is_dead(s as u64) && reaches), "state {s} is dead but leads to the goal");
                }
            }
        }
    }
}
