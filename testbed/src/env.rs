use beacon_rl::{Error, Result};
use rand_xoshiro::rand_core::RngCore;
use rand_xoshiro::SplitMix64;

/// Actions of the key chain, in menu order (the policy's action index).
const ACTIONS: [&str; 7] = [
    "take red key",
    "take blue key",
    "open door",
    "drop key",
    "go back",
    "wander",
    "open trapdoor",
];
const TAKE_RED: usize = 0;
const TAKE_BLUE: usize = 1;
const OPEN_DOOR: usize = 2;
const DROP_KEY: usize = 3;
const GO_BACK: usize = 4;
const TRAPDOOR: usize = 6;

const COLOURS: [&str; 2] = ["red", "blue"];
const HELD: [&str; 3] = ["nothing", "a red key", "a blue key"];

/// The agent's situation inside one episode (what the environment tracks; the policy sees only
/// the observation id [`KeyChain::observe`] derives from it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpisodeState {
    /// Current room, 0..=K (K = the goal).
    pub room: usize,
    /// 0 = nothing, 1 = red key, 2 = blue key.
    pub held: usize,
    /// Rooms reached so far (high-water mark): the number of milestones completed.
    pub reached: usize,
    /// True after the trapdoor (decoy variants).
    pub in_cellar: bool,
}

/// What one step of the key chain did ([`KeyChain::step`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyChainStep {
    /// State after the step.
    pub next: EpisodeState,
    /// The environment's milestone signal: a door passed for the first time, or the decoy.
    pub milestone: bool,
    /// The episode ended (goal reached, or the cellar of the decoy variant).
    pub done: bool,
    /// The goal was reached (reward 1).
    pub success: bool,
}

/// A chain of K locked rooms, optionally with a decoy trapdoor in every room.
///
/// ```
/// use beacon_rl_testbed::KeyChain;
/// let env = KeyChain::new(2, 4)?;
/// assert_eq!(env.horizon(), 8);
/// let task = 0b01; // room 0's door is blue, room 1's red
/// let mut s = env.reset();
/// assert_eq!(env.observation_text(env.observe(task, &s)),
///            "room 0: a locked blue door, red and blue keys on the floor, you hold nothing");
/// let mut milestones = 0;
/// for action in [1, 2, 0, 2] { // take blue key 0, open door 0, take red key 1, open door 1
///     let t = env.step(task, &s, action);
///     milestones += usize::from(t.milestone);
///     s = t.next;
/// }
/// assert_eq!((milestones, s.room), (2, 2));
/// # Ok::<(), beacon_rl::Error>(())
/// ```
///
/// The environments: a chain of K locked rooms (the paper's task structure) and a variant with
/// a decoy milestone (the paper's assumption broken).
///
/// # Key chain ([`KeyChain::new`])
///
/// Rooms 0..K in a row. Room r has a door painted red or blue (the colours are the *task*: each
/// task draws one colour per room) and an endless supply of red and blue keys. To pass door r
/// the agent must hold the key of the door's colour: `take red key r` / `take blue key r`, then
/// `open door r` (the key is used up). Passing door r for the first time is milestone r + 1;
/// passing door K − 1 (reaching room K) ends the episode with reward 1.
///
/// The paper's assumptions, item by item:
/// - K ordered subgoals that must all be completed: the K doors, in order.
/// - distractors that waste steps: `wander`, taking a key while holding one, opening a locked
///   door, taking the wrong colour; actions that undo progress: `drop key` and `go back` (one
///   room back; its door stays open, so passing it again is not a new milestone).
/// - step budget H = `budget_per_room` · K (default 4 per room, twice the shortest path of
///   2K steps); the episode fails when it runs out.
/// - sparse terminal reward: 1 on success, 0 otherwise, no other reward.
/// - observable milestone signal: [`KeyChainStep::milestone`] when a door is passed for the
///   first time (the high-water mark of rooms reached went up).
/// - observations repeat across the rollouts of a group: an observation is a function of (room,
///   door colour, key held, door already open), so rollouts of one task meet the same ones.
///
/// # Decoy variant ([`KeyChain::with_decoy`])
///
/// Every room also has a trapdoor. `open trapdoor r` fires the milestone signal ("you found a
/// secret passage") and drops the agent into a cellar with no way out: the episode ends in
/// failure at once. The decoy milestone is the quickest "progress" available and it leads away
/// from success, which is what BEACON's trajectory term exists to correct (paper §5.4, "w/o
/// trajectory-level advantage" on ALFWorld).
///
/// # Slow decoy ([`KeyChain::with_slow_decoy`])
///
/// The same trapdoor, but the episode goes on in the cellar until the budget runs out: every
/// action there changes nothing. The failure comes later than the step after the trapdoor, so
/// the trapdoor is no dead end in which the environment stopped the episode.
///
/// # Busy decoy ([`KeyChain::with_busy_decoy`])
///
/// The slow decoy with red and blue keys on the cellar floor: taking and dropping one changes
/// what the agent holds, and so what it sees, but there is still no way out. The cellar is a
/// region that answers the agent, not a state where nothing changes.
///
/// # Text
///
/// Every state and action has a short text ([`KeyChain::observation_text`],
/// [`KeyChain::action_text`]), e.g. action `take red key 3`, observation `room 3: a locked red
/// door, red and blue keys on the floor, you hold nothing`. The texts are built once per
/// environment, so reading them allocates nothing.
#[derive(Debug, Clone)]
pub struct KeyChain {
    rooms: usize,
    horizon: usize,
    /// The trapdoor's cellar; `None` without a trapdoor.
    cellar: Option<Cellar>,
    observations: Vec<String>,
    actions: Vec<String>,
}

/// What the cellar under a decoy variant's trapdoor does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cellar {
    /// It ends the episode at once (the decoy).
    Ends,
    /// The episode goes on, nothing changes (the slow decoy).
    Idle,
    /// The episode goes on, keys can be taken and dropped (the busy decoy).
    Keys,
}

impl KeyChain {
    /// Rooms above this are rejected: a task's door colours are the bits of a `u64`.
    pub const MAX_ROOMS: usize = 64;

    /// The key chain with `rooms` = K doors and a budget of `budget_per_room` · K steps.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when K is 0 or above [`MAX_ROOMS`](Self::MAX_ROOMS), or the
    /// budget per room is below 2 (the shortest path needs 2 steps a room).
    ///
    /// ```
    /// use beacon_rl_testbed::KeyChain;
    /// assert!(KeyChain::new(0, 4).is_err());
    /// assert!(KeyChain::new(3, 1).is_err());
    /// assert_eq!(KeyChain::new(3, 3)?.num_actions(), 6);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn new(rooms: usize, budget_per_room: usize) -> Result<Self> {
        Self::build(rooms, budget_per_room, None)
    }

    /// The decoy variant: [`new`](Self::new) plus a trapdoor in every room whose opening fires
    /// the milestone signal and ends the episode in failure.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    ///
    /// ```
    /// use beacon_rl_testbed::KeyChain;
    /// let env = KeyChain::with_decoy(3, 4)?;
    /// assert_eq!(env.num_actions(), 7);
    /// let t = env.step(0, &env.reset(), 6); // open trapdoor 0
    /// assert!(t.milestone && t.done && !t.success);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn with_decoy(rooms: usize, budget_per_room: usize) -> Result<Self> {
        Self::build(rooms, budget_per_room, Some(Cellar::Ends))
    }

    /// The slow decoy: [`with_decoy`](Self::with_decoy), but the cellar does not end the
    /// episode; every action there changes nothing until the budget runs out.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    ///
    /// ```
    /// use beacon_rl_testbed::KeyChain;
    /// let env = KeyChain::with_slow_decoy(3, 4)?;
    /// let t = env.step(0, &env.reset(), 6); // open trapdoor 0
    /// assert!(t.milestone && !t.done);
    /// let u = env.step(0, &t.next, 0); // take red key: nothing happens in the cellar
    /// assert_eq!(u.next, t.next);
    /// assert!(!u.milestone && !u.done);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn with_slow_decoy(rooms: usize, budget_per_room: usize) -> Result<Self> {
        Self::build(rooms, budget_per_room, Some(Cellar::Idle))
    }

    /// The busy decoy: [`with_slow_decoy`](Self::with_slow_decoy), but keys can be taken and
    /// dropped in the cellar (what the agent holds changes what it sees); still no way out.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    ///
    /// ```
    /// use beacon_rl_testbed::KeyChain;
    /// let env = KeyChain::with_busy_decoy(3, 4)?;
    /// let t = env.step(0, &env.reset(), 6); // open trapdoor 0
    /// let u = env.step(0, &t.next, 0); // take red key
    /// assert_ne!(env.observe(0, &u.next), env.observe(0, &t.next));
    /// assert_eq!(env.observation_text(env.observe(0, &u.next)), "cellar: a dead end, you hold a red key");
    /// assert!(!u.done && u.next.in_cellar);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn with_busy_decoy(rooms: usize, budget_per_room: usize) -> Result<Self> {
        Self::build(rooms, budget_per_room, Some(Cellar::Keys))
    }

    fn build(rooms: usize, budget_per_room: usize, cellar: Option<Cellar>) -> Result<Self> {
        if rooms == 0 || rooms > Self::MAX_ROOMS {
            return Err(Error::InvalidConfig {
                name: "rooms",
                value: rooms as f64,
                expected: "1..=64",
            });
        }
        if budget_per_room < 2 {
            return Err(Error::InvalidConfig {
                name: "budget_per_room",
                value: budget_per_room as f64,
                expected: ">= 2 (the shortest path takes 2 steps a room)",
            });
        }
        let mut env = Self {
            rooms,
            horizon: budget_per_room * rooms,
            cellar,
            observations: Vec::new(),
            actions: Vec::new(),
        };
        let n = env.num_observations();
        env.observations = (0..n).map(|id| env.describe(id)).collect();
        env.actions = (0..n * env.num_actions())
            .map(|i| env.describe_action(i / env.num_actions(), i % env.num_actions()))
            .collect();
        Ok(env)
    }

    /// K, the number of doors (milestones) between the start and the goal.
    pub fn rooms(&self) -> usize {
        self.rooms
    }

    /// H, the step budget of an episode.
    pub fn horizon(&self) -> usize {
        self.horizon
    }

    /// Whether the decoy trapdoors are present.
    pub fn has_decoy(&self) -> bool {
        self.cellar.is_some()
    }

    /// Whether keys can be taken and dropped in the cellar (the busy decoy).
    fn keys_in_cellar(&self) -> bool {
        self.cellar == Some(Cellar::Keys)
    }

    /// Size of the action menu: 6, or 7 with the decoy.
    pub fn num_actions(&self) -> usize {
        if self.has_decoy() {
            7
        } else {
            6
        }
    }

    /// Number of distinct observations (the policy's table rows): 12 per room (colour ×
    /// key held × door open) plus the goal and the cellar (3 cellars, one per key held, in
    /// the busy decoy).
    pub fn num_observations(&self) -> usize {
        if self.keys_in_cellar() {
            self.rooms * 12 + 4
        } else {
            self.rooms * 12 + 2
        }
    }

    /// The start of every episode: room 0, holding nothing.
    pub fn reset(&self) -> EpisodeState {
        EpisodeState {
            room: 0,
            held: 0,
            reached: 0,
            in_cellar: false,
        }
    }

    /// A random task: one door colour per room (bit r of the result is room r's colour).
    pub fn sample_task(&self, rng: &mut SplitMix64) -> u64 {
        let bits = rng.next_u64();
        if self.rooms >= 64 {
            bits
        } else {
            bits & ((1u64 << self.rooms) - 1)
        }
    }

    /// The observation id of `state` under `task` (the index into the policy's table).
    pub fn observe(&self, task: u64, state: &EpisodeState) -> usize {
        if state.in_cellar {
            let held = if self.keys_in_cellar() { state.held } else { 0 };
            return self.rooms * 12 + 1 + held;
        }
        if state.room >= self.rooms {
            return self.rooms * 12;
        }
        let colour = ((task >> state.room) & 1) as usize;
        let open = usize::from(state.room < state.reached);
        ((state.room * 2 + colour) * 3 + state.held) * 2 + open
    }

    /// One step of `action` (an index into the menu; out-of-menu actions waste the step).
    pub fn step(&self, task: u64, state: &EpisodeState, action: usize) -> KeyChainStep {
        if state.in_cellar {
            // Only the slow and busy decoys step on from the cellar: there is no way out.
            let mut next = *state;
            if self.keys_in_cellar() {
                match action {
                    TAKE_RED | TAKE_BLUE if state.held == 0 => next.held = action + 1,
                    DROP_KEY => next.held = 0,
                    _ => {}
                }
            }
            return KeyChainStep {
                next,
                milestone: false,
                done: self.cellar == Some(Cellar::Ends),
                success: false,
            };
        }
        let mut next = *state;
        let mut milestone = false;
        let colour = ((task >> state.room.min(63)) & 1) as usize;
        match action {
            TAKE_RED | TAKE_BLUE if state.held == 0 => next.held = action + 1,
            OPEN_DOOR if state.room < state.reached => next.room += 1,
            OPEN_DOOR if state.held == colour + 1 => {
                next.room += 1;
                next.held = 0;
                next.reached = next.room;
                milestone = true;
            }
            DROP_KEY => next.held = 0,
            GO_BACK if state.room > 0 => {
                next.room -= 1;
                next.held = 0;
            }
            TRAPDOOR if self.has_decoy() => {
                next.in_cellar = true;
                milestone = true;
            }
            _ => {}
        }
        let success = next.room >= self.rooms;
        KeyChainStep {
            next,
            milestone,
            done: success || (next.in_cellar && self.cellar == Some(Cellar::Ends)),
            success,
        }
    }

    /// The text of observation `id` (see [`observe`](Self::observe)); empty for an unknown id.
    pub fn observation_text(&self, id: usize) -> &str {
        self.observations.get(id).map_or("", String::as_str)
    }

    /// The text of `action` taken at observation `id`; empty for an unknown pair.
    pub fn action_text(&self, id: usize, action: usize) -> &str {
        if action >= self.num_actions() {
            return "";
        }
        self.actions
            .get(id * self.num_actions() + action)
            .map_or("", String::as_str)
    }

    fn describe(&self, id: usize) -> String {
        if id == self.rooms * 12 {
            return "outside: the goal".to_owned();
        }
        if id > self.rooms * 12 {
            if self.keys_in_cellar() {
                return format!("cellar: a dead end, you hold {}", HELD[id - self.rooms * 12 - 1]);
            }
            return "cellar: a dead end".to_owned();
        }
        let (open, held, colour, room) = (id % 2, (id / 2) % 3, (id / 6) % 2, id / 12);
        let door = if open == 1 { "an open" } else { "a locked" };
        let trapdoor = if self.has_decoy() { ", a trapdoor" } else { "" };
        format!(
            "room {room}: {door} {} door{trapdoor}, red and blue keys on the floor, you hold {}",
            COLOURS[colour], HELD[held]
        )
    }

    fn describe_action(&self, id: usize, action: usize) -> String {
        let room = if id < self.rooms * 12 { id / 12 } else { self.rooms };
        match action {
            TAKE_RED | TAKE_BLUE | OPEN_DOOR | TRAPDOOR => format!("{} {room}", ACTIONS[action]),
            _ => ACTIONS[action].to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortest_path_succeeds_in_two_steps_a_room() {
        let env = KeyChain::new(3, 2).unwrap();
        let task = 0b101; // blue, red, blue
        let mut s = env.reset();
        let mut milestones = 0;
        for (i, a) in [1, 2, 0, 2, 1, 2].into_iter().enumerate() {
            let t = env.step(task, &s, a);
            milestones += usize::from(t.milestone);
            assert_eq!(t.done, i == 5);
            s = t.next;
        }
        assert_eq!((milestones, s.room, s.reached), (3, 3, 3));
    }

    #[test]
    fn wrong_key_and_undo_make_no_progress() {
        let env = KeyChain::new(2, 4).unwrap();
        let s = env.reset();
        // Task 0: room 0 red. Take blue, open: nothing happens.
        let t = env.step(0, &env.step(0, &s, TAKE_BLUE).next, OPEN_DOOR);
        assert!(!t.milestone && t.next.room == 0);
        // Pass door 0, go back, pass again: only the first passage is a milestone.
        let a = env.step(0, &env.step(0, &s, TAKE_RED).next, OPEN_DOOR);
        assert!(a.milestone);
        let back = env.step(0, &a.next, GO_BACK);
        assert_eq!(back.next.room, 0);
        assert_eq!(
            env.observation_text(env.observe(0, &back.next)),
            "room 0: an open red door, red and blue keys on the floor, you hold nothing"
        );
        let again = env.step(0, &back.next, OPEN_DOOR);
        assert!(!again.milestone && again.next.room == 1);
    }

    #[test]
    fn the_slow_decoy_keeps_the_agent_in_the_cellar_until_the_budget_ends() {
        let env = KeyChain::with_slow_decoy(2, 4).unwrap();
        let mut s = env.step(0, &env.reset(), TRAPDOOR).next;
        let cellar = env.observe(0, &s);
        for a in 0..env.num_actions() {
            let t = env.step(0, &s, a);
            assert!(!t.milestone && !t.done && !t.success);
            assert_eq!(env.observe(0, &t.next), cellar);
            s = t.next;
        }
        assert_eq!((s.room, s.reached), (0, 0));
        // The immediate decoy ends the episode at the trapdoor.
        let fast = KeyChain::with_decoy(2, 4).unwrap();
        assert!(fast.step(0, &fast.reset(), TRAPDOOR).done);
    }

    #[test]
    fn the_busy_decoy_answers_the_agent_but_never_lets_it_out() {
        let env = KeyChain::with_busy_decoy(2, 4).unwrap();
        let mut s = env.step(0, &env.reset(), TRAPDOOR).next;
        let mut seen = std::collections::BTreeSet::new();
        for a in [TAKE_BLUE, DROP_KEY, TAKE_RED, OPEN_DOOR, GO_BACK, TRAPDOOR, 5] {
            let t = env.step(0, &s, a);
            assert!(t.next.in_cellar && !t.milestone && !t.done && !t.success);
            seen.insert(env.observe(0, &t.next));
            s = t.next;
        }
        // Three cellars, one per key held, at the last three ids.
        let n = env.num_observations();
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), [n - 3, n - 2, n - 1]);
    }

    #[test]
    fn observation_ids_are_dense_and_texts_distinct() {
        for env in [
            KeyChain::with_decoy(3, 4).unwrap(),
            KeyChain::with_busy_decoy(3, 4).unwrap(),
        ] {
            let mut texts: Vec<&str> = (0..env.num_observations())
                .map(|i| env.observation_text(i))
                .collect();
            texts.sort_unstable();
            texts.dedup();
            assert_eq!(texts.len(), env.num_observations());
        }
        let env = KeyChain::with_decoy(3, 4).unwrap();
        assert_eq!(env.action_text(13, OPEN_DOOR), "open door 1");
        assert_eq!(env.action_text(13, 9), "");
    }
}
