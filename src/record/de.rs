//! Hand-written `Deserialize` for the record types: named fields by name, every other field
//! into [`Extra`] as raw JSON text, and a repeated key (named or not) refused.
//!
//! serde's `flatten` cannot hand raw text to a field (it buffers the line into its own value
//! tree first, which was also most of the reading time), hence these visitors.

use std::fmt;

use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::extra::{ExtraBuilder, Key};
use super::schema::name::*;
use super::sealed::Sealed;
use super::{RowRecord, StepRecord, TrajectoryRecord, Value};

/// Reads the next value into `slot`, refusing a second occurrence of `name`.
macro_rules! field {
    ($map:ident, $slot:ident, $name:expr) => {{
        if $slot.is_some() {
            return Err(de::Error::duplicate_field($name));
        }
        $slot = Some($map.next_value()?);
    }};
}

/// A required field's value, or serde's "missing field" error.
fn required<T, E: de::Error>(slot: Option<T>, name: &'static str) -> Result<T, E> {
    slot.ok_or_else(|| E::missing_field(name))
}

/// An unknown field: its raw text into `extra`. `borrow`: the deserializer reads from a
/// slice in memory, so the text can be borrowed instead of copied into a box first.
fn unknown<'de, A: MapAccess<'de>>(
    map: &mut A,
    key: &str,
    extra: &mut ExtraBuilder,
    borrow: bool,
) -> Result<(), A::Error> {
    if borrow {
        let value: &'de RawValue = map.next_value()?;
        extra.push(key, value.get()).map_err(de::Error::custom)
    } else {
        let value: Box<RawValue> = map.next_value()?;
        extra.push(key, value.get()).map_err(de::Error::custom)
    }
}

/// Reads a record from serde_json's in-memory reader, borrowing unknown fields' text (the
/// JSON Lines reader's path; the `Deserialize` impls work with any deserializer).
pub(crate) fn from_str_borrowing<T: Sealed>(text: &str) -> serde_json::Result<T> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = T::deserialize_borrowing(&mut de)?;
    de.end()?;
    Ok(value)
}

/// A trajectory record, borrowing unknown fields' text ([`Sealed::deserialize_borrowing`]).
pub(super) fn trajectory_borrowing<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<TrajectoryRecord, D::Error> {
    deserializer.deserialize_map(TrajectoryVisitor { borrow: true })
}

/// A verl-agent row record, borrowing unknown fields' text.
pub(super) fn row_borrowing<'de, D: Deserializer<'de>>(deserializer: D) -> Result<RowRecord, D::Error> {
    deserializer.deserialize_map(RowVisitor { borrow: true })
}

impl<'de> Deserialize<'de> for StepRecord {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(StepVisitor { borrow: false })
    }
}

#[derive(Clone, Copy)]
struct StepVisitor {
    borrow: bool,
}

impl<'de> DeserializeSeed<'de> for StepVisitor {
    type Value = StepRecord;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<StepRecord, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for StepVisitor {
    type Value = StepRecord;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a step object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<StepRecord, A::Error> {
        let mut action: Option<String> = None;
        let mut observation: Option<String> = None;
        let mut score: Option<Option<f64>> = None;
        let mut reward: Option<f64> = None;
        let mut done: Option<bool> = None;
        let mut milestone: Option<Option<bool>> = None;
        let mut new_subgoals: Option<Option<Vec<String>>> = None;
        let mut info: Option<Option<Value>> = None;
        let mut extra = ExtraBuilder::default();
        while let Some(Key(key)) = map.next_key()? {
            match &*key {
                ACTION => field!(map, action, ACTION),
                OBSERVATION => field!(map, observation, OBSERVATION),
                SCORE => field!(map, score, SCORE),
                REWARD => field!(map, reward, REWARD),
                DONE => field!(map, done, DONE),
                MILESTONE => field!(map, milestone, MILESTONE),
                NEW_SUBGOALS => field!(map, new_subgoals, NEW_SUBGOALS),
                INFO => field!(map, info, INFO),
                other => unknown(&mut map, other, &mut extra, self.borrow)?,
            }
        }
        Ok(StepRecord {
            action: required(action, ACTION)?,
            observation: required(observation, OBSERVATION)?,
            score: score.flatten(),
            reward: required(reward, REWARD)?,
            done: required(done, DONE)?,
            milestone: milestone.flatten(),
            new_subgoals: new_subgoals.flatten(),
            info: info.flatten(),
            extra: extra.finish(),
        })
    }
}

impl<'de> Deserialize<'de> for TrajectoryRecord {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(TrajectoryVisitor { borrow: false })
    }
}

struct TrajectoryVisitor {
    borrow: bool,
}

impl<'de> Visitor<'de> for TrajectoryVisitor {
    type Value = TrajectoryRecord;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a trajectory object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TrajectoryRecord, A::Error> {
        let mut group_id: Option<String> = None;
        let mut traj_id: Option<String> = None;
        let mut terminal_reward: Option<f64> = None;
        let mut initial_observation: Option<Option<String>> = None;
        let mut initial_score: Option<Option<f64>> = None;
        let mut steps: Option<Vec<StepRecord>> = None;
        let mut extra = ExtraBuilder::default();
        while let Some(Key(key)) = map.next_key()? {
            match &*key {
                GROUP_ID => field!(map, group_id, GROUP_ID),
                TRAJ_ID => field!(map, traj_id, TRAJ_ID),
                TERMINAL_REWARD => field!(map, terminal_reward, TERMINAL_REWARD),
                INITIAL_OBSERVATION => field!(map, initial_observation, INITIAL_OBSERVATION),
                INITIAL_SCORE => field!(map, initial_score, INITIAL_SCORE),
                STEPS => {
                    if steps.is_some() {
                        return Err(de::Error::duplicate_field(STEPS));
                    }
                    let seed = StepsSeed(StepVisitor { borrow: self.borrow });
                    steps = Some(map.next_value_seed(seed)?);
                }
                other => unknown(&mut map, other, &mut extra, self.borrow)?,
            }
        }
        Ok(TrajectoryRecord {
            group_id: required(group_id, GROUP_ID)?,
            traj_id: required(traj_id, TRAJ_ID)?,
            terminal_reward: required(terminal_reward, TERMINAL_REWARD)?,
            initial_observation: initial_observation.flatten(),
            initial_score: initial_score.flatten(),
            extra: extra.finish(),
            steps: required(steps, STEPS)?,
        })
    }
}

/// The step list.
struct StepsSeed(StepVisitor);

impl<'de> DeserializeSeed<'de> for StepsSeed {
    type Value = Vec<StepRecord>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Vec<StepRecord>, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for StepsSeed {
    type Value = Vec<StepRecord>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of steps")
    }
    fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<Vec<StepRecord>, S::Error> {
        // Agent trajectories have tens of steps: skip the first few doublings (and copies).
        let mut steps = Vec::with_capacity(16);
        while let Some(step) = seq.next_element_seed(self.0)? {
            steps.push(step);
        }
        Ok(steps)
    }
}

impl<'de> Deserialize<'de> for RowRecord {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(RowVisitor { borrow: false })
    }
}

struct RowVisitor {
    borrow: bool,
}

impl<'de> Visitor<'de> for RowVisitor {
    type Value = RowRecord;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a row object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RowRecord, A::Error> {
        let mut uid: Option<String> = None;
        let mut traj_uid: Option<String> = None;
        let mut reward: Option<f64> = None;
        let mut terminal_reward: Option<f64> = None;
        let mut anchor_obs: Option<Option<String>> = None;
        let mut action: Option<Option<String>> = None;
        let mut observation: Option<Option<String>> = None;
        let mut score: Option<Option<f64>> = None;
        let mut done: Option<Option<bool>> = None;
        let mut milestone: Option<Option<bool>> = None;
        let mut new_subgoals: Option<Option<Vec<String>>> = None;
        let mut info: Option<Option<Value>> = None;
        let mut extra = ExtraBuilder::default();
        while let Some(Key(key)) = map.next_key()? {
            match &*key {
                UID => field!(map, uid, UID),
                TRAJ_UID => field!(map, traj_uid, TRAJ_UID),
                // An alias shares its field: both spellings on one row is a repeated field.
                REWARDS | REWARD => field!(map, reward, REWARDS),
                EPISODE_REWARDS | EPISODE_REWARD => field!(map, terminal_reward, EPISODE_REWARDS),
                ANCHOR_OBS => field!(map, anchor_obs, ANCHOR_OBS),
                ACTION => field!(map, action, ACTION),
                OBSERVATION => field!(map, observation, OBSERVATION),
                SCORE => field!(map, score, SCORE),
                DONE => field!(map, done, DONE),
                MILESTONE => field!(map, milestone, MILESTONE),
                NEW_SUBGOALS => field!(map, new_subgoals, NEW_SUBGOALS),
                INFO => field!(map, info, INFO),
                other => unknown(&mut map, other, &mut extra, self.borrow)?,
            }
        }
        Ok(RowRecord {
            uid: required(uid, UID)?,
            traj_uid: required(traj_uid, TRAJ_UID)?,
            reward: required(reward, REWARDS)?,
            terminal_reward: required(terminal_reward, EPISODE_REWARDS)?,
            anchor_obs: anchor_obs.flatten(),
            action: action.flatten(),
            observation: observation.flatten(),
            score: score.flatten(),
            done: done.flatten(),
            milestone: milestone.flatten(),
            new_subgoals: new_subgoals.flatten(),
            info: info.flatten(),
            extra: extra.finish(),
        })
    }
}
