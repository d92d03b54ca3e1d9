//! The recorded-trajectory format: round trips of the bundled sample, located errors on
//! malformed lines, verl-agent row dumps, and the mapping to batches and transitions.
#![cfg(feature = "serde")]

use beacon_rl::milestone::{detect_milestones, EnvFlag, ScoreIncrease};
use beacon_rl::record::{
    group_rows, read_row_dump, read_trajectories, write_jsonl, Extra, JsonlReader, JsonlRecord, RecordBatch,
    RowRecord, StepRecord, TrajectoryGroups, TrajectoryRecord,
};
use beacon_rl::Error;
use proptest::prelude::*;
use serde_json::Value;

/// An unknown field's JSON text as a `Value`.
fn value(raw: &serde_json::value::RawValue) -> Value {
    serde_json::from_str(raw.get()).unwrap()
}

const SAMPLE: &str = include_str!("../../data/sample_trajectories.jsonl");

fn read_all(text: &str) -> Vec<TrajectoryRecord> {
    read_trajectories(text.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .expect("valid records")
}

fn write_all(records: &[TrajectoryRecord]) -> String {
    let mut out = Vec::new();
    write_jsonl(&mut out, records).expect("writable records");
    String::from_utf8(out).expect("utf-8")
}

/// (line, field) of a record error.
fn located(e: &Error) -> (usize, Option<&str>) {
    match e {
        Error::Record { line, field, .. } => (*line, field.as_deref()),
        other => panic!("expected a record error, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// The bundled sample

#[test]
fn sample_reads_with_every_field() {
    let records = read_all(SAMPLE);
    assert_eq!(records.len(), 32);
    let steps: usize = records.iter().map(|r| r.steps.len()).sum();
    let lines_steps: usize = SAMPLE
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["steps"]
                .as_array()
                .unwrap()
                .len()
        })
        .sum();
    assert_eq!(steps, lines_steps);

    let first = &records[0];
    assert_eq!(first.group_id, "sw/find-animal/v146");
    assert_eq!(first.traj_id, "sw/find-animal/v146/0_gold");
    assert_eq!(first.terminal_reward, 1.0);
    assert_eq!(first.initial_score, Some(0.0));
    assert_eq!(first.extra.get("env").map(value).unwrap(), "scienceworld");
    assert_eq!(first.extra.get("kind").map(value).unwrap(), "gold");
    assert_eq!(first.extra.get("task").map(value).unwrap(), "find-animal");
    let s0 = &first.steps[0];
    assert_eq!(s0.action, "open door to hallway");
    assert_eq!(
        (s0.score, s0.reward, s0.done, s0.milestone),
        (Some(8.0), 8.0, false, Some(true))
    );
    assert_eq!(
        s0.new_subgoals.as_deref(),
        Some(&["Be in a room with an open door".to_string()][..])
    );
    assert_eq!(s0.extra.get("t").map(value).unwrap(), 0);
    assert_eq!(s0.extra.get("isCompleted").map(value).unwrap(), false);
    // TextWorld steps carry no new_subgoals: absent, not empty.
    let tw = records
        .iter()
        .find(|r| r.extra.get("env").map(value).unwrap() == "textworld")
        .unwrap();
    assert!(tw.steps.iter().all(|s| s.new_subgoals.is_none()));
}

#[test]
fn sample_round_trips_exactly() {
    let records = read_all(SAMPLE);
    let written = write_all(&records);
    // read -> write -> read
    assert_eq!(read_all(&written), records);
    // write(read(line)) is JSON-equal to the line (integers stay integers, every field kept).
    let written_lines: Vec<&str> = written.lines().collect();
    let original_lines: Vec<&str> = SAMPLE.lines().collect();
    assert_eq!(written_lines.len(), original_lines.len());
    for (i, (w, o)) in written_lines.iter().zip(&original_lines).enumerate() {
        let w: Value = serde_json::from_str(w).unwrap();
        let o: Value = serde_json::from_str(o).unwrap();
        assert_eq!(w, o, "line {}", i + 1);
    }
    // Writing is idempotent byte for byte.
    assert_eq!(write_all(&read_all(&written)), written);
}

#[test]
fn sample_score_increase_reproduces_recorded_milestones() {
    let records = read_all(SAMPLE);
    let rb = RecordBatch::new(&records).unwrap();
    assert_eq!(rb.batch().num_groups(), 4);
    assert_eq!(rb.batch().num_trajectories(), 32);
    assert_eq!(
        rb.batch().num_steps(),
        records.iter().map(|r| r.steps.len()).sum::<usize>()
    );
    let rewards: Vec<f64> = records.iter().map(|r| r.terminal_reward).collect();
    // Records come grouped by group_id in the file, so batch order = file order.
    assert_eq!(rb.batch().terminal_rewards(), &rewards[..]);

    let detected = detect_milestones(rb.batch(), &mut ScoreIncrease, |row, _| rb.transition(row)).unwrap();
    let recorded = detect_milestones(rb.batch(), &mut EnvFlag, |row, _| rb.transition(row)).unwrap();
    // Independent of EnvFlag: the raw flags straight from the records, row order.
    let raw: Vec<bool> = records
        .iter()
        .flat_map(|r| r.steps.iter().map(|s| s.milestone.unwrap()))
        .collect();
    assert_eq!(recorded, raw);
    assert_eq!(detected, raw);

    // Both environments contribute milestones, including at t = 0 (from initial_score), so
    // the check is not vacuous.
    for env in ["scienceworld", "textworld"] {
        let count: usize = (0..rb.batch().num_steps())
            .filter(|&row| {
                records[rb.row_location(row).0]
                    .extra
                    .get("env")
                    .map(value)
                    .unwrap()
                    == env
                    && detected[row]
            })
            .count();
        assert!(count > 10, "{env}: {count} milestones");
    }
    assert!((0..rb.batch().num_steps()).any(|row| rb.row_location(row).1 == 0 && detected[row]));
    assert!(detected.iter().any(|&f| !f));
}

#[test]
fn transitions_follow_the_previous_step() {
    let records = read_all(SAMPLE);
    let rb = RecordBatch::new(&records).unwrap();
    let rec = &records[0];
    let t0 = rb.transition(0);
    assert_eq!(t0.observation, rec.initial_observation.as_deref().unwrap());
    assert_eq!((t0.score, t0.next_score), (Some(0.0), Some(8.0)));
    assert_eq!(
        t0.new_subgoals,
        &["Be in a room with an open door".to_string()][..]
    );
    let t1 = rb.transition(1);
    assert_eq!(t1.step, 1);
    assert_eq!(t1.observation, rec.steps[0].observation);
    assert_eq!(t1.action, rec.steps[1].action);
    assert_eq!(t1.next_observation, rec.steps[1].observation);
    assert_eq!((t1.score, t1.next_score), (Some(8.0), Some(17.0)));
    // Borrowed, not copied: the text points into the records.
    assert!(std::ptr::eq(t1.action.as_ptr(), rec.steps[1].action.as_ptr()));
    // The second record starts at row = steps of the first.
    let t = rb.transition(rec.steps.len());
    assert_eq!(t.step, 0);
    assert_eq!(t.action, records[1].steps[0].action);
}

// ---------------------------------------------------------------------------------------------
// Malformed lines

const GOOD: &str = r#"{"group_id": "g", "traj_id": "ID", "terminal_reward": 1, "steps": [{"action": "a", "observation": "o", "reward": 0, "done": false}, {"action": "b", "observation": "p", "score": 3, "reward": 1, "done": true}]}"#;

fn good(id: &str) -> String {
    GOOD.replace("ID", id)
}

#[test]
fn malformed_lines_name_their_line_and_field() {
    let cases: Vec<(String, Option<&str>)> = vec![
        // truncated JSON
        (good("x")[..40].to_string(), None),
        // not JSON at all
        ("hello".to_string(), None),
        // a JSON value that is not an object
        ("[1, 2]".to_string(), None),
        (good("x").replace(r#", "steps": [{"action": "a", "observation": "o", "reward": 0, "done": false}, {"action": "b", "observation": "p", "score": 3, "reward": 1, "done": true}]"#, ""), Some("steps")),
        (good("x").replace(r#""terminal_reward": 1, "#, ""), Some("terminal_reward")),
        (good("x").replace(r#""reward": 1,"#, r#""reward": "1","#), Some("steps[1].reward")),
        (good("x").replace(r#""terminal_reward": 1"#, r#""terminal_reward": NaN"#), Some("terminal_reward")),
        (good("x").replace(r#""score": 3"#, r#""score": -Infinity"#), Some("steps[1].score")),
        (good("x").replace(r#""reward": 0"#, r#""reward": Infinity"#), Some("steps[0].reward")),
        (good("x").replace(r#""terminal_reward": 1"#, r#""terminal_reward": 1e999"#), Some("terminal_reward")),
        (good("x").replace(r#""action": "b", "#, ""), Some("steps[1].action")),
        (good("x").replace(r#""terminal_reward": 1"#, r#""terminal_reward": null"#), Some("terminal_reward")),
        (good("x").replace(r#""done": true"#, r#""done": "yes""#), Some("steps[1].done")),
        (good("x").replace(r#""traj_id": "x""#, r#""traj_id": 7"#), Some("traj_id")),
        (good("x").replace(r#""group_id": "g", "#, r#""group_id": "g", "initial_score": "0", "#), Some("initial_score")),
        (good("x").replace(r#""done": true}"#, r#""done": true, "new_subgoals": [1]}"#), Some("steps[1].new_subgoals")),
        (good("x").replace(r#"[{"action": "a""#, r#"[3, {"action": "a""#), Some("steps[0]")),
        (good("x").replace(r#""reward": 0,"#, r#""reward": 0, "reward": 1,"#), Some("steps[0].reward")),
        (r#"{"group_id": "g", "traj_id": "x", "terminal_reward": 0, "steps": []}"#.to_string(), Some("steps")),
    ];
    // Interleave valid records and blank lines: errors must not stop reading, and blank
    // lines count towards line numbers.
    let mut text = String::new();
    let mut expected = Vec::new();
    let mut line = 0;
    for (i, (bad, field)) in cases.iter().enumerate() {
        text.push_str(&good(&format!("ok{i}")));
        text.push('\n');
        text.push_str("   \n");
        text.push_str(bad);
        text.push('\n');
        line += 3;
        expected.push((line, *field));
    }
    text.push_str(&good("last"));

    let mut errors = Vec::new();
    let mut ok = Vec::new();
    for item in read_trajectories(text.as_bytes()) {
        match item {
            Ok(rec) => ok.push(rec.traj_id),
            Err(e) => errors.push(e),
        }
    }
    assert_eq!(ok.len(), cases.len() + 1);
    assert_eq!(ok.last().map(String::as_str), Some("last"));
    assert_eq!(errors.len(), cases.len());
    for (e, (line, field)) in errors.iter().zip(&expected) {
        assert_eq!(located(e), (*line, *field), "{e}");
    }
}

#[test]
fn error_messages_are_readable() {
    let e = TrajectoryRecord::from_json_line(&good("x").replace(r#""reward": 1,"#, r#""reward": "1","#), 4)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        r#"record at line 4, field `steps[1].reward`: expected a number, found string "1""#
    );
    let e = TrajectoryRecord::from_json_line(&good("x").replace("1,", "NaN,"), 5).unwrap_err();
    assert_eq!(
        e.to_string(),
        "record at line 5, field `terminal_reward`: `NaN` is not a JSON number (JSON has no NaN or Infinity)"
    );
    let e = TrajectoryRecord::from_json_line("{", 6).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("record at line 6: invalid JSON at column 1"),
        "{e}"
    );
}

#[test]
fn blank_lines_crlf_and_byte_order_mark() {
    let text = format!(
        "\u{feff}{}\r\n\r\n \t \n{}\r\n\n{}",
        good("a"),
        good("b"),
        "{\"group_id\": 1}"
    );
    let mut reader = read_trajectories(text.as_bytes());
    assert_eq!(reader.next().unwrap().unwrap().traj_id, "a");
    assert_eq!(reader.line(), 1);
    let rec = reader.next().unwrap().unwrap();
    assert_eq!((reader.line(), rec.traj_id.as_str()), (4, "b"));
    let e = reader.next().unwrap().unwrap_err();
    assert_eq!(located(&e), (6, Some("group_id")));
    assert!(reader.next().is_none());
    // Only blank lines: no records, no errors.
    assert_eq!(read_trajectories("\n  \n\r\n".as_bytes()).count(), 0);
}

#[test]
fn io_errors_end_the_stream() {
    struct Failing;
    impl std::io::Read for Failing {
        fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
            Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "peer went away",
            ))
        }
    }
    let mut reader = read_trajectories(std::io::BufReader::new(Failing));
    let e = reader.next().unwrap().unwrap_err();
    assert!(
        matches!(e, Error::Io { kind: std::io::ErrorKind::ConnectionReset, ref message } if message.contains("line 1"))
    );
    assert!(reader.next().is_none());
}

#[test]
fn unknown_fields_at_both_levels_survive() {
    let line = r#"{"group_id": "g", "traj_id": "x", "terminal_reward": 0.25, "seed": 18446744073709551615, "meta": {"a": [1, 2.5, null, "s"], "b": {}}, "steps": [{"action": "a", "observation": "o\n\"q\"", "reward": -0.0, "done": true, "info": {"won": false}, "logprob": -1.5e-7, "tags": [], "nothing": null}]}"#;
    let rec = TrajectoryRecord::from_json_line(line, 1).unwrap();
    assert_eq!(rec.extra.iter().count(), 2);
    assert_eq!(rec.extra.get("seed").map(value).unwrap(), u64::MAX);
    // Kept as written: inner whitespace dropped, numbers and escapes as they were.
    assert_eq!(
        rec.extra.get("meta").unwrap().get(),
        r#"{"a":[1,2.5,null,"s"],"b":{}}"#
    );
    let step = &rec.steps[0];
    assert_eq!(step.info, Some(serde_json::json!({"won": false})));
    assert_eq!(step.extra.iter().count(), 3);
    assert_eq!(step.extra.get("nothing").map(value).unwrap(), Value::Null);
    assert_eq!(step.extra.get("logprob").unwrap().get(), "-1.5e-7");
    assert!(step.reward == 0.0 && step.reward.is_sign_negative());
    let back = rec.to_json_line().unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&back).unwrap(),
        serde_json::from_str::<Value>(line).unwrap()
    );
    assert_eq!(TrajectoryRecord::from_json_line(&back, 1).unwrap(), rec);
}

#[test]
fn writer_refuses_what_it_cannot_write_back() {
    let mut rec = read_all(&good("x")).remove(0);
    rec.steps[1].reward = f64::INFINITY;
    let mut out = Vec::new();
    let e = write_jsonl(&mut out, [&rec]).unwrap_err();
    assert_eq!(located(&e), (1, Some("steps[1].reward")));
    assert!(out.is_empty());

    let mut rec = read_all(&good("x")).remove(0);
    rec.steps[0].extra.insert("action", "shadow");
    let e = rec.to_json_line().unwrap_err();
    assert_eq!(located(&e), (1, Some("steps[0].action")));

    let mut rec = read_all(&good("x")).remove(0);
    rec.initial_score = Some(f64::NAN);
    let ok = read_all(&good("y")).remove(0);
    let mut out = Vec::new();
    let e = write_jsonl(&mut out, [&ok, &rec]).unwrap_err();
    assert_eq!(located(&e), (2, Some("initial_score")));
    // The valid record before it was written.
    assert_eq!(read_all(std::str::from_utf8(&out).unwrap()), vec![ok]);
}

#[test]
fn record_batch_rejects_bad_records() {
    let mut records = read_all(&format!("{}\n{}\n{}", good("a"), good("b"), good("a")));
    assert_eq!(
        located(&RecordBatch::new(&records).unwrap_err()),
        (3, Some("traj_id"))
    );
    records.truncate(2);
    records[1].steps.clear();
    assert_eq!(
        located(&RecordBatch::new(&records).unwrap_err()),
        (2, Some("steps"))
    );
    records[1] = read_all(&good("b")).remove(0);
    records[0].terminal_reward = f64::NAN;
    assert_eq!(
        located(&RecordBatch::new(&records).unwrap_err()),
        (1, Some("terminal_reward"))
    );
}

#[test]
fn record_batch_interleaved_groups() {
    // Groups alternate in the file: g1/a (2 steps), g2/b (2), g1/c (2).
    let text = [
        good("a"),
        good("b").replace(r#""g""#, r#""g2""#),
        good("c").replace(r#""terminal_reward": 1"#, r#""terminal_reward": 0.5"#),
    ]
    .join("\n");
    let records = read_all(&text);
    let rb = RecordBatch::new(&records).unwrap();
    let b = rb.batch();
    assert_eq!(b.num_groups(), 2);
    // group "g" holds records a and c (rows 0,1 and 4,5); group "g2" record b (rows 2,3).
    assert_eq!(b.group_trajectories(0), 0..2);
    assert_eq!(b.trajectory_rows(0), &[0, 1]);
    assert_eq!(b.trajectory_rows(1), &[4, 5]);
    assert_eq!(b.trajectory_rows(2), &[2, 3]);
    assert_eq!(b.terminal_rewards(), &[1.0, 0.5, 1.0]);
    assert_eq!(rb.row_location(5), (2, 1));
    // no initial_score: t = 0 has no score, t = 1 uses step 0's (absent) score
    assert_eq!(rb.transition(0).score, None);
    assert_eq!(
        detect_milestones(rb.batch(), &mut ScoreIncrease, |row, _| rb.transition(row)).unwrap(),
        vec![false; 6]
    );
}

// ---------------------------------------------------------------------------------------------
// verl-agent row dumps

#[test]
fn row_dump_maps_interleaved_rows() {
    // Two groups; trajectories a and b of q1 interleaved, c of q2 in between.
    let dump = [
        r#"{"uid": "q1", "traj_uid": "a", "rewards": 0, "episode_rewards": 1, "anchor_obs": "kitchen", "action": "take knife", "step_id": 0}"#,
        r#"{"uid": "q1", "traj_uid": "b", "rewards": 0, "episode_rewards": 0, "anchor_obs": "kitchen", "action": "look"}"#,
        "",
        r#"{"uid": "q2", "traj_uid": "c", "reward": 0.5, "episode_reward": 0.5, "anchor_obs": "garden", "action": "dig", "observation": "A hole.", "milestone": true}"#,
        r#"{"uid": "q1", "traj_uid": "a", "rewards": 1, "episode_rewards": 1, "anchor_obs": "You hold a knife.", "action": "slice", "score": 1, "done": true, "info": {"won": true}}"#,
        r#"{"uid": "q1", "traj_uid": "b", "rewards": 0, "episode_rewards": 0, "action": "wait"}"#,
    ]
    .join("\n");
    let trajs = read_row_dump(dump.as_bytes()).unwrap();

    let mut a = TrajectoryRecord::new("q1", "a", 1.0);
    a.initial_observation = Some("kitchen".into());
    let mut a0 = StepRecord::new("take knife", "You hold a knife.", 0.0, false);
    a0.extra.insert("step_id", 0);
    let mut a1 = StepRecord::new("slice", "", 1.0, true);
    a1.score = Some(1.0);
    a1.info = Some(serde_json::json!({"won": true}));
    a.steps = vec![a0, a1];

    let mut b = TrajectoryRecord::new("q1", "b", 0.0);
    b.initial_observation = Some("kitchen".into());
    // row 2 of b has no anchor_obs: step 0's observation stays empty; last row: done.
    b.steps = vec![
        StepRecord::new("look", "", 0.0, false),
        StepRecord::new("wait", "", 0.0, true),
    ];

    let mut c = TrajectoryRecord::new("q2", "c", 0.5);
    c.initial_observation = Some("garden".into());
    c.steps = vec![StepRecord {
        milestone: Some(true),
        ..StepRecord::new("dig", "A hole.", 0.5, true)
    }];

    assert_eq!(trajs, vec![a, b, c]);
    // The grouped records are valid trajectory records: they write and read back.
    assert_eq!(read_all(&write_all(&trajs)), trajs);
}

fn row(traj: &str, episode: f64) -> RowRecord {
    RowRecord {
        uid: "q".into(),
        traj_uid: traj.into(),
        terminal_reward: episode,
        ..RowRecord::default()
    }
}

#[test]
fn row_dump_errors_name_the_line() {
    // Inconsistent episode reward in trajectory a, on its third row (line 4 with a blank line).
    let dump = "{\"uid\": \"q\", \"traj_uid\": \"a\", \"rewards\": 0, \"episode_rewards\": 1}\n\
                {\"uid\": \"q\", \"traj_uid\": \"a\", \"rewards\": 0, \"episode_rewards\": 1}\n\n\
                {\"uid\": \"q\", \"traj_uid\": \"a\", \"rewards\": 0, \"episode_rewards\": 0}\n";
    let e = read_row_dump(dump.as_bytes()).unwrap_err();
    assert_eq!(located(&e), (4, Some("episode_rewards")));

    // A trajectory under two groups.
    let mut other = row("a", 1.0);
    other.uid = "q2".into();
    let e = group_rows([(1, row("a", 1.0)), (2, row("b", 0.0)), (3, other)]).unwrap_err();
    assert_eq!(located(&e), (3, Some("uid")));

    // An anchor that contradicts the previous row's explicit observation.
    let mut first = row("a", 1.0);
    first.observation = Some("s1".into());
    let mut second = row("a", 1.0);
    second.anchor_obs = Some("something else".into());
    let e = group_rows([(1, first.clone()), (2, second)]).unwrap_err();
    assert_eq!(located(&e), (2, Some("anchor_obs")));
    // ... while an agreeing anchor is fine.
    let mut second = row("a", 1.0);
    second.anchor_obs = Some("s1".into());
    assert_eq!(
        group_rows([(1, first), (2, second)]).unwrap()[0].steps[0].observation,
        "s1"
    );

    // Padding rows (verl-agent active_masks false) are refused.
    let mut padding = row("a", 1.0);
    padding.extra.insert("active_masks", false);
    assert_eq!(
        located(&group_rows([(7, padding)]).unwrap_err()),
        (7, Some("active_masks"))
    );

    // Row-level parse errors are located like trajectory ones.
    let e = JsonlReader::<_, RowRecord>::new(
        "{\"uid\": \"q\", \"traj_uid\": \"a\", \"rewards\": NaN, \"episode_rewards\": 1}".as_bytes(),
    )
    .next()
    .unwrap()
    .unwrap_err();
    assert_eq!(located(&e), (1, Some("rewards")));
    let e = read_row_dump("{\"uid\": \"q\", \"traj_uid\": \"a\", \"rewards\": 0}".as_bytes()).unwrap_err();
    assert_eq!(located(&e), (1, Some("episode_rewards")));
}

#[test]
fn row_records_round_trip() {
    let line = r#"{"uid":"q","traj_uid":"a","rewards":0.5,"episode_rewards":1,"anchor_obs":"s","active_masks":true}"#;
    let r = RowRecord::from_json_line(line, 1).unwrap();
    assert_eq!(r.to_json_line().unwrap(), line);
}

// ---------------------------------------------------------------------------------------------
// Property: generated records round-trip

fn finite() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<i32>().prop_map(f64::from),
        -1e6..1e6f64,
        any::<f64>().prop_filter("finite", |v| v.is_finite()),
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![any::<String>(), "[a-z \n\t\"\\\\]{0,12}"]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        finite().prop_map(Value::from),
        text().prop_map(Value::from),
    ];
    leaf.prop_recursive(2, 12, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map("[a-z]{1,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn extra(named: &'static [&'static str]) -> impl Strategy<Value = Extra> {
    prop::collection::btree_map("[a-zA-Z_]{1,10}", json_value(), 0..4).prop_map(move |m| {
        m.into_iter()
            .filter(|(k, _)| !named.contains(&k.as_str()))
            .collect()
    })
}

const STEP_NAMES: &[&str] = &[
    "action",
    "observation",
    "score",
    "reward",
    "done",
    "milestone",
    "new_subgoals",
    "info",
];
const TRAJ_NAMES: &[&str] = &[
    "group_id",
    "traj_id",
    "terminal_reward",
    "initial_observation",
    "initial_score",
    "steps",
];

fn step() -> impl Strategy<Value = StepRecord> {
    (
        (
            text(),
            text(),
            prop::option::of(finite()),
            finite(),
            any::<bool>(),
        ),
        (
            prop::option::of(any::<bool>()),
            prop::option::of(prop::collection::vec(text(), 0..3)),
            // Some(Null) is not representable (null reads as absent): generate non-null info.
            prop::option::of(json_value().prop_filter("non-null", |v| !v.is_null())),
            extra(STEP_NAMES),
        ),
    )
        .prop_map(
            |((action, observation, score, reward, done), (milestone, new_subgoals, info, extra))| {
                StepRecord {
                    action,
                    observation,
                    score,
                    reward,
                    done,
                    milestone,
                    new_subgoals,
                    info,
                    extra,
                }
            },
        )
}

fn trajectory() -> impl Strategy<Value = TrajectoryRecord> {
    (
        (text(), text(), finite()),
        (
            prop::option::of(text()),
            prop::option::of(finite()),
            extra(TRAJ_NAMES),
            prop::collection::vec(step(), 1..4),
        ),
    )
        .prop_map(
            |((group_id, traj_id, terminal_reward), (initial_observation, initial_score, extra, steps))| {
                TrajectoryRecord {
                    group_id,
                    traj_id,
                    terminal_reward,
                    initial_observation,
                    initial_score,
                    extra,
                    steps,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn generated_records_round_trip(records in prop::collection::vec(trajectory(), 0..5)) {
        let written = write_all(&records);
        prop_assert_eq!(written.lines().count(), records.len());
        let back = read_all(&written);
        prop_assert_eq!(&back, &records);
        // Bit-exact numbers (PartialEq treats -0.0 == 0.0).
        for (b, r) in back.iter().zip(&records) {
            prop_assert_eq!(b.terminal_reward.to_bits(), r.terminal_reward.to_bits());
            for (bs, rs) in b.steps.iter().zip(&r.steps) {
                prop_assert_eq!(bs.reward.to_bits(), rs.reward.to_bits());
                prop_assert_eq!(bs.score.map(f64::to_bits), rs.score.map(f64::to_bits));
            }
        }
        prop_assert_eq!(write_all(&back), written);
    }

    #[test]
    fn generated_rows_round_trip(
        uid in text(), traj in text(), reward in finite(), episode in finite(),
        anchor in prop::option::of(text()), score in prop::option::of(finite()),
        extra in extra(&["uid", "traj_uid", "rewards", "reward", "episode_rewards", "episode_reward",
                         "anchor_obs", "action", "observation", "score", "done", "milestone",
                         "new_subgoals", "info", "active_masks"]),
    ) {
        let r = RowRecord { uid, traj_uid: traj, reward, terminal_reward: episode, anchor_obs: anchor, score, extra, ..RowRecord::default() };
        let line = r.to_json_line().unwrap();
        prop_assert_eq!(RowRecord::from_json_line(&line, 1).unwrap(), r);
    }
}

// ---------------------------------------------------------------------------------------------
// Streaming group by group, line limits, repeated keys, errors naming the file

/// A one-step record line of group `g`, trajectory `t`.
fn line_of(g: &str, t: &str) -> String {
    format!(
        r#"{{"group_id": "{g}", "traj_id": "{t}", "terminal_reward": 1, "steps": [{{"action": "a", "observation": "o", "reward": 0, "done": true}}]}}"#
    )
}

/// (file, line, field) of a record error.
fn located_in(e: &Error) -> (Option<&str>, usize, Option<&str>) {
    match e {
        Error::Record {
            file, line, field, ..
        } => (file.as_deref(), *line, field.as_deref()),
        other => panic!("expected a record error, got {other:?}"),
    }
}

// R4: a repeated unknown key is refused like a repeated named key, at both levels, and
// located on its field.
#[test]
fn repeated_unknown_keys_are_refused() {
    let top = good("x").replace(
        r#""group_id": "g", "#,
        r#""group_id": "g", "env": "a", "env": "b", "#,
    );
    let e = TrajectoryRecord::from_json_line(&top, 3).unwrap_err();
    assert_eq!(located(&e), (3, Some("env")));
    assert!(e.to_string().contains("duplicate field `env`"), "{e}");
    let step = good("x").replace(r#""done": true}"#, r#""done": true, "t": 1, "t": 2}"#);
    let e = TrajectoryRecord::from_json_line(&step, 4).unwrap_err();
    assert_eq!(located(&e), (4, Some("steps[1].t")));
    // Many unknown keys (past the linear-scan limit) with one repeat far apart.
    let many: String = (0..40).map(|i| format!(r#""k{i}": {i}, "#)).collect();
    let line = good("x").replace(
        r#""group_id": "g", "#,
        &format!(r#""group_id": "g", {many}"k3": 0, "#),
    );
    let e = TrajectoryRecord::from_json_line(&line, 1).unwrap_err();
    assert_eq!(located(&e), (1, Some("k3")));
    // Named keys as before; rows too.
    let e = RowRecord::from_json_line(
        r#"{"uid": "q", "traj_uid": "a", "rewards": 0, "episode_rewards": 1, "x": 1, "x": 1}"#,
        2,
    )
    .unwrap_err();
    assert_eq!(located(&e), (2, Some("x")));
    // An alias shares its field: both spellings are a repeat (located on the second).
    let e = RowRecord::from_json_line(
        r#"{"uid": "q", "traj_uid": "a", "rewards": 0, "reward": 0, "episode_rewards": 1}"#,
        2,
    )
    .unwrap_err();
    assert_eq!(located(&e), (2, Some("reward")));
}

// R2: a line longer than the limit is a typed error after reading at most limit + 1 bytes.
#[test]
fn long_lines_stop_the_reader() {
    struct Endless(usize);
    impl std::io::Read for Endless {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            buf.fill(b'x');
            self.0 += buf.len();
            Ok(buf.len())
        }
    }
    let mut source = Endless(0);
    {
        let reader = std::io::BufReader::with_capacity(1024, &mut source);
        let mut records = read_trajectories(reader)
            .with_max_line_bytes(10_000)
            .with_source("zero");
        let e = records.next().unwrap().unwrap_err();
        assert_eq!(
            e,
            Error::LineTooLong {
                file: Some("zero".into()),
                line: 1,
                limit: 10_000
            }
        );
        assert!(
            e.to_string()
                .contains("line 1 of zero is longer than 10000 bytes"),
            "{e}"
        );
        assert!(records.next().is_none());
    }
    // Read in 1 kB blocks: at most one block past the limit.
    assert!(source.0 <= 10_000 + 1024, "{} bytes read", source.0);

    // The limit counts the line without its break; the next line is read as usual.
    let text = format!("{}\n{}\n", good("a"), good("b"));
    let limit = good("a").len();
    assert_eq!(
        read_trajectories(text.as_bytes())
            .with_max_line_bytes(limit)
            .count(),
        2
    );
    let e = read_trajectories(text.as_bytes())
        .with_max_line_bytes(limit - 1)
        .next()
        .unwrap()
        .unwrap_err();
    assert!(matches!(e, Error::LineTooLong { line: 1, .. }));
}

// L1: errors name the file and the line in that file, also for a repeated traj_id found in a
// second file.
#[test]
fn errors_name_the_file_and_its_line() {
    let a = [line_of("g1", "x"), line_of("g1", "y")].join("\n");
    let b = ["".to_string(), line_of("g2", "z"), line_of("g2", "x")].join("\n");
    let mut groups = TrajectoryGroups::new([
        read_trajectories(a.as_bytes()).with_source("a.jsonl"),
        read_trajectories(b.as_bytes()).with_source("b.jsonl"),
    ]);
    assert_eq!(groups.next().unwrap().unwrap().records.len(), 2);
    let e = groups.next().unwrap().unwrap_err();
    assert_eq!(located_in(&e), (Some("b.jsonl"), 3, Some("traj_id")));
    assert!(e.to_string().contains("first at line 1 of a.jsonl"), "{e}");
    assert!(groups.next().is_none());

    // A malformed record of the second file.
    let bad = format!("\n\n{}", good("q").replace(r#""reward": 0"#, r#""reward": NaN"#));
    let e = TrajectoryGroups::new([
        read_trajectories(a.as_bytes()).with_source("a.jsonl"),
        read_trajectories(bad.as_bytes()).with_source("b.jsonl"),
    ])
    .find_map(Result::err)
    .unwrap();
    assert_eq!(located_in(&e), (Some("b.jsonl"), 3, Some("steps[0].reward")));
    assert!(
        e.to_string()
            .starts_with("record at line 3 of b.jsonl, field `steps[0].reward`"),
        "{e}"
    );
}

// R3: the record API reads group by group (memory of one group), and refuses a group that
// reappears after it was closed, naming where.
#[test]
fn groups_stream_one_at_a_time_and_must_be_contiguous() {
    let groups = TrajectoryGroups::new([read_trajectories(SAMPLE.as_bytes())])
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let all = read_all(SAMPLE);
    assert_eq!(groups.len(), 4);
    let flat: Vec<TrajectoryRecord> = groups.iter().flat_map(|g| g.records.clone()).collect();
    assert_eq!(flat, all);
    let lines: Vec<usize> = groups.iter().flat_map(|g| g.lines.clone()).collect();
    assert_eq!(lines, (1..=32).collect::<Vec<_>>());
    // Per group batches give the rows of the whole-file batch, group by group.
    let whole = RecordBatch::new(&all).unwrap();
    let mut row = 0;
    for g in &groups {
        let rb = RecordBatch::new(&g.records).unwrap();
        assert_eq!(rb.batch().num_groups(), 1);
        for r in 0..rb.batch().num_steps() {
            assert_eq!(rb.transition(r), whole.transition(row));
            row += 1;
        }
    }
    assert_eq!(row, whole.batch().num_steps());

    let text = [
        line_of("g1", "a"),
        line_of("g2", "b"),
        String::new(),
        line_of("g1", "c"),
    ]
    .join("\n");
    let mut groups = TrajectoryGroups::new([read_trajectories(text.as_bytes())]);
    assert_eq!(groups.next().unwrap().unwrap().records[0].group_id, "g1");
    // g2 is complete when g1 comes back: it is yielded, then the error.
    assert_eq!(groups.next().unwrap().unwrap().records[0].group_id, "g2");
    let e = groups.next().unwrap().unwrap_err();
    assert_eq!(
        e,
        Error::GroupNotContiguous {
            group_id: "g1".into(),
            file: None,
            line: 4,
            closed_file: None,
            closed_line: 2,
        }
    );
    assert!(groups.next().is_none());
    // Without the rule, runs come as they are.
    let runs = TrajectoryGroups::new([read_trajectories(text.as_bytes())])
        .allow_interleaved()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    assert_eq!(
        runs.iter().map(|g| g.records.len()).collect::<Vec<_>>(),
        [1, 1, 1]
    );
}

// Ids are caller text: printed in an error message, their control characters are escaped, so
// an id holding ESC [2J cannot clear the terminal the message is shown on.
#[test]
fn ids_in_error_messages_cannot_drive_the_terminal() {
    let (id, json) = ("\u{1b}[2J", r"\u001b[2J");
    let text = [
        line_of(json, json),
        line_of("g2", "b"),
        line_of(json, "c"),
        line_of("g3", json),
    ]
    .join("\n");
    let e = TrajectoryGroups::new([read_trajectories(text.as_bytes())])
        .nth(2)
        .unwrap()
        .unwrap_err();
    assert!(matches!(&e, Error::GroupNotContiguous { group_id, .. } if group_id == id));
    let shown = e.to_string();
    assert!(
        shown.starts_with(r"group `\u{1b}[2J` reappears at line 3"),
        "{shown}"
    );
    let e = read_trajectories(text.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .and_then(|records| RecordBatch::new(&records).map(|_| ()))
        .unwrap_err();
    let shown = e.to_string();
    assert!(shown.contains(r"trajectory `\u{1b}[2J` appears twice"), "{shown}");
    assert!(!shown.contains('\u{1b}'), "{shown}");
}

// A field nested past the limit is an error naming it, not a field that reads as absent.
#[test]
fn deeply_nested_unknown_fields_are_refused() {
    let deep = "[".repeat(100_000) + &"]".repeat(100_000);
    let line = format!(
        r#"{{"group_id":"g","traj_id":"t","terminal_reward":1,"steps":[{{"action":"a","observation":"o","reward":0,"done":true,"m":{deep}}}]}}"#
    );
    let e = read_trajectories(line.as_bytes()).next().unwrap().unwrap_err();
    assert_eq!(located(&e).0, 1);
    assert!(
        e.to_string().contains("field `m` nests deeper than 100 levels"),
        "{e}"
    );
    let ok = "[".repeat(100) + &"]".repeat(100);
    let line = format!(
        r#"{{"group_id":"g","traj_id":"t","terminal_reward":1,"steps":[{{"action":"a","observation":"o","reward":0,"done":true,"m":{ok}}}]}}"#
    );
    let rec = read_all(&line).remove(0);
    assert!(matches!(
        rec.steps[0].extra.get("m").map(value),
        Some(Value::Array(_))
    ));
}

// Unknown fields are one string of JSON text, not a map of values.
#[test]
fn unknown_fields_are_compact_text() {
    let step = std::mem::size_of::<Extra>();
    assert_eq!(step, std::mem::size_of::<String>());
    let rec = read_all(SAMPLE).remove(0);
    assert_eq!(
        serde_json::to_string(&rec.steps[0].extra).unwrap(),
        r#"{"t":0,"isCompleted":false}"#
    );
}

// ---------------------------------------------------------------------------------------------
// The fast reader (src/record/scan.rs) and recycled records

/// The JSON Lines reader's hand-written fast path gives what the serde `Deserialize` impl
/// gives on the bundled sample (real ScienceWorld and TextWorld text: escapes, non-ASCII,
/// unknown fields at both levels), bit for bit (Debug shows every f64 exactly).
#[test]
fn fast_reader_equals_serde_on_the_sample() {
    let mut lines = 0;
    for (i, line) in SAMPLE.lines().enumerate() {
        let fast = TrajectoryRecord::from_json_line(line, i + 1).expect("valid line");
        let serde: TrajectoryRecord = serde_json::from_str(line).expect("valid line");
        assert_eq!(format!("{fast:?}"), format!("{serde:?}"), "line {}", i + 1);
        lines += 1;
    }
    assert_eq!(lines, 32);
}

/// Groups read into recycled records (their strings, step lists and extras left over from
/// other trajectories) equal groups read fresh.
#[test]
fn recycled_groups_equal_fresh_ones() {
    let fresh: Vec<_> = TrajectoryGroups::new([read_trajectories(SAMPLE.as_bytes())])
        .collect::<Result<Vec<_>, _>>()
        .expect("valid sample");
    // Largest trajectories first, so recycled records are read into with leftovers.
    let mut text: Vec<&str> = SAMPLE.lines().collect();
    text.reverse();
    let reversed = text.join("\n");
    let mut groups = TrajectoryGroups::new([read_trajectories(reversed.as_bytes())]);
    let mut recycled = Vec::new();
    while let Some(group) = groups.next() {
        let group = group.expect("valid sample");
        recycled.push(group.clone());
        groups.recycle(group);
    }
    recycled.reverse();
    for g in &mut recycled {
        g.records.reverse();
    }
    assert_eq!(recycled.len(), fresh.len());
    for (r, f) in recycled.iter().zip(&fresh) {
        assert_eq!(format!("{:?}", r.records), format!("{:?}", f.records));
    }
}
