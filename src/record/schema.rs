//! The record format's field names, written once: the reader (serde visitors and the fast
//! scanner), the writer (serde's derive, checked against these tables by a unit test), the
//! validators, the converters and the error locator all take their names from here.
//!
//! Each table lists a record type's named fields in written order: their JSON names (the first
//! is canonical and written; the others are read as aliases), their JSON type, and whether a
//! record needs them. Every other key of a record goes to its `extra`.

use serde_json::Value;

/// The JSON names of the named fields.
pub(crate) mod name {
    // Trajectory records.
    pub(crate) const GROUP_ID: &str = "group_id";
    pub(crate) const TRAJ_ID: &str = "traj_id";
    pub(crate) const TERMINAL_REWARD: &str = "terminal_reward";
    pub(crate) const INITIAL_OBSERVATION: &str = "initial_observation";
    pub(crate) const INITIAL_SCORE: &str = "initial_score";
    pub(crate) const STEPS: &str = "steps";
    // Steps (and the step part of verl-agent rows).
    pub(crate) const ACTION: &str = "action";
    pub(crate) const OBSERVATION: &str = "observation";
    pub(crate) const SCORE: &str = "score";
    pub(crate) const REWARD: &str = "reward";
    pub(crate) const DONE: &str = "done";
    pub(crate) const MILESTONE: &str = "milestone";
    pub(crate) const NEW_SUBGOALS: &str = "new_subgoals";
    pub(crate) const INFO: &str = "info";
    // verl-agent rows: verl-agent's own names, and the singular spellings read as aliases.
    pub(crate) const UID: &str = "uid";
    pub(crate) const TRAJ_UID: &str = "traj_uid";
    pub(crate) const REWARDS: &str = "rewards";
    pub(crate) const EPISODE_REWARDS: &str = "episode_rewards";
    pub(crate) const EPISODE_REWARD: &str = "episode_reward";
    pub(crate) const ANCHOR_OBS: &str = "anchor_obs";
    /// verl-agent's padding flag (rows after an episode's end), read from a row's `extra`.
    pub(crate) const ACTIVE_MASKS: &str = "active_masks";
}

use name::*;

/// A field's expected JSON type.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    Str,
    Num,
    Bool,
    StrList,
    Any,
    /// The `steps` list of a trajectory record.
    Steps,
}

/// One named field of a record type: its names (first = canonical), type, requiredness.
pub(crate) struct Field {
    pub(crate) names: &'static [&'static str],
    pub(crate) kind: Kind,
    pub(crate) required: bool,
}

const fn f(names: &'static [&'static str], kind: Kind, required: bool) -> Field {
    Field {
        names,
        kind,
        required,
    }
}

/// A trajectory record ([`TrajectoryRecord`](super::TrajectoryRecord)).
pub(crate) const TRAJECTORY: &[Field] = &[
    f(&[GROUP_ID], Kind::Str, true),
    f(&[TRAJ_ID], Kind::Str, true),
    f(&[TERMINAL_REWARD], Kind::Num, true),
    f(&[INITIAL_OBSERVATION], Kind::Str, false),
    f(&[INITIAL_SCORE], Kind::Num, false),
    f(&[STEPS], Kind::Steps, true),
];

/// A step of a trajectory record ([`StepRecord`](super::StepRecord)).
pub(crate) const STEP: &[Field] = &[
    f(&[ACTION], Kind::Str, true),
    f(&[OBSERVATION], Kind::Str, true),
    f(&[SCORE], Kind::Num, false),
    f(&[REWARD], Kind::Num, true),
    f(&[DONE], Kind::Bool, true),
    f(&[MILESTONE], Kind::Bool, false),
    f(&[NEW_SUBGOALS], Kind::StrList, false),
    f(&[INFO], Kind::Any, false),
];

/// A verl-agent row ([`RowRecord`](super::RowRecord)).
pub(crate) const ROW: &[Field] = &[
    f(&[UID], Kind::Str, true),
    f(&[TRAJ_UID], Kind::Str, true),
    f(&[REWARDS, REWARD], Kind::Num, true),
    f(&[EPISODE_REWARDS, EPISODE_REWARD], Kind::Num, true),
    f(&[ANCHOR_OBS], Kind::Str, false),
    f(&[ACTION], Kind::Str, false),
    f(&[OBSERVATION], Kind::Str, false),
    f(&[SCORE], Kind::Num, false),
    f(&[DONE], Kind::Bool, false),
    f(&[MILESTONE], Kind::Bool, false),
    f(&[NEW_SUBGOALS], Kind::StrList, false),
    f(&[INFO], Kind::Any, false),
];

/// Every name (aliases included) of a table's fields: the keys an `extra` may not hold.
pub(crate) fn all_names(schema: &'static [Field]) -> impl Iterator<Item = &'static str> + Clone {
    schema.iter().flat_map(|f| f.names.iter().copied())
}

/// The first field of `value` that does not match `schema`, as (path, message).
pub(super) fn locate(value: &Value, schema: &[Field], prefix: &str) -> Option<(Option<String>, String)> {
    let Some(obj) = value.as_object() else {
        let path = prefix.strip_suffix('.').map(str::to_string);
        return Some((path, format!("expected a JSON object, found {}", describe(value))));
    };
    for field in schema {
        let path = format!("{prefix}{}", field.names[0]);
        let found = field.names.iter().find_map(|n| obj.get(*n));
        let v = match found {
            None | Some(Value::Null) if !field.required => continue,
            None => return Some((Some(path), format!("missing field `{}`", field.names[0]))),
            Some(v) => v,
        };
        let ok = match field.kind {
            Kind::Str => v.is_string(),
            Kind::Num => v.is_number(),
            Kind::Bool => v.is_boolean(),
            Kind::Any => true,
            Kind::StrList => v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
            Kind::Steps => match v.as_array() {
                None => false,
                Some(steps) => {
                    for (t, step) in steps.iter().enumerate() {
                        let step_prefix = format!("{path}[{t}].");
                        if let Some(found) = locate(step, STEP, &step_prefix) {
                            return Some(found);
                        }
                    }
                    true
                }
            },
        };
        if !ok {
            let expected = match field.kind {
                Kind::Str => "a string",
                Kind::Num => "a number",
                Kind::Bool => "true or false",
                Kind::StrList => "a list of strings",
                Kind::Steps => "a list of steps",
                Kind::Any => "any value",
            };
            return Some((Some(path), format!("expected {expected}, found {}", describe(v))));
        }
    }
    None
}

fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("boolean {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) if s.chars().count() <= 40 => format!("string {s:?}"),
        Value::String(_) => "a string".into(),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "an object".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{RowRecord, StepRecord, TrajectoryRecord};

    /// The keys serde's derive writes for a record with every optional field set.
    fn written_keys(value: &impl serde::Serialize) -> Vec<String> {
        match serde_json::to_value(value).unwrap() {
            Value::Object(map) => map.keys().cloned().collect(),
            other => panic!("not an object: {other}"),
        }
    }

    fn canonical(schema: &[Field]) -> Vec<String> {
        let mut names: Vec<String> = schema.iter().map(|f| f.names[0].to_string()).collect();
        names.sort(); // serde_json's map is ordered by key
        names
    }

    /// The writer (serde's derive, whose names are the struct fields and their `rename`s)
    /// writes exactly the canonical names of the tables the reader uses.
    #[test]
    fn the_writer_uses_the_tables_names() {
        let step = StepRecord {
            score: Some(1.0),
            milestone: Some(true),
            new_subgoals: Some(vec!["s".into()]),
            info: Some(Value::Bool(true)),
            ..StepRecord::new("a", "o", 1.0, true)
        };
        assert_eq!(written_keys(&step), canonical(STEP));
        let traj = TrajectoryRecord {
            initial_observation: Some("s0".into()),
            initial_score: Some(0.0),
            steps: vec![step.clone()],
            ..TrajectoryRecord::new("g", "t", 1.0)
        };
        assert_eq!(written_keys(&traj), canonical(TRAJECTORY));
        let row = RowRecord {
            uid: "g".into(),
            traj_uid: "t".into(),
            anchor_obs: Some("s0".into()),
            action: Some("a".into()),
            observation: Some("o".into()),
            score: Some(1.0),
            done: Some(true),
            milestone: Some(true),
            new_subgoals: Some(vec!["s".into()]),
            info: Some(Value::Bool(true)),
            ..RowRecord::default()
        };
        assert_eq!(written_keys(&row), canonical(ROW));
    }
}
