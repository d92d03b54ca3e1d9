//! The `beacon` program on the bundled data: exit codes, output shape, determinism, stdin
//! input and errors. Needs the `cli` feature (`cargo test --features cli`), which builds the
//! program for these tests.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

const SAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/sample_trajectories.jsonl");

fn run(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_beacon"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(bytes) = stdin {
        input.write_all(bytes).unwrap();
    }
    drop(input);
    child.wait_with_output().unwrap()
}

fn jsonl(out: &Output) -> Vec<Value> {
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn sample_records() -> Vec<Value> {
    std::fs::read_to_string(SAMPLE)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn default_run_is_beacon_over_the_bundled_sample_one_object_per_trajectory() {
    let lines = jsonl(&run(&["--format", "jsonl"], None));
    let records = sample_records();
    assert_eq!(lines.len(), records.len());
    for (line, rec) in lines.iter().zip(&records) {
        assert_eq!(line["group_id"], rec["group_id"]);
        assert_eq!(line["traj_id"], rec["traj_id"]);
        let steps = rec["steps"].as_array().unwrap().len();
        for key in [
            "advantages",
            "segment_advantages",
            "shaped_rewards",
            "milestones",
            "segments",
        ] {
            assert_eq!(line[key].as_array().unwrap().len(), steps, "{key}");
        }
        assert!(line["trajectory_advantage"].is_f64());
        // The default detector is score increase, which reproduces the recorded flags.
        let recorded: Vec<bool> = rec["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["milestone"].as_bool().unwrap())
            .collect();
        let flags: Vec<bool> = line["milestones"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_bool().unwrap())
            .collect();
        assert_eq!(flags, recorded);
    }
}

#[test]
fn output_is_deterministic_and_stdin_equals_the_file() {
    let a = run(&["--format", "jsonl"], None);
    let b = run(&["--format", "jsonl", SAMPLE], None);
    let sample = std::fs::read(SAMPLE).unwrap();
    let c = run(&["--format", "jsonl", "-"], Some(&sample));
    assert!(a.status.success() && b.status.success() && c.status.success());
    assert_eq!(a.stdout, b.stdout);
    assert_eq!(a.stdout, c.stdout);
}

#[test]
fn grpo_gives_one_value_per_trajectory_and_gigpo_its_parts() {
    for line in jsonl(&run(&["--estimator", "grpo", "--format", "jsonl"], None)) {
        let adv = line["advantages"].as_array().unwrap();
        assert!(adv.iter().all(|a| a == &adv[0]), "{}", line["traj_id"]);
    }
    let args = ["-e", "gigpo:norm=mean_std_norm", "--format", "jsonl"];
    for line in jsonl(&run(&args, None)) {
        assert!(line["step_groups"].is_array() && line["episode_advantage"].is_f64());
    }
}

#[test]
fn text_detector_on_textworld_matches_the_score_flags() {
    let lines = jsonl(&run(
        &[
            "--format",
            "jsonl",
            "--detector",
            "text",
            "--pattern",
            r"Your score has just gone up by \w+ points?",
        ],
        None,
    ));
    let records = sample_records();
    for (line, rec) in lines.iter().zip(&records) {
        if rec["env"] != "textworld" {
            continue;
        }
        for (flag, step) in line["milestones"]
            .as_array()
            .unwrap()
            .iter()
            .zip(rec["steps"].as_array().unwrap())
        {
            assert_eq!(flag, &step["milestone"]);
        }
    }
}

#[test]
fn table_and_diagnostics() {
    let out = run(&["--diagnostics"], None);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("beacon: 4 groups, 32 trajectories, 437 steps"));
    // GRPO beside BEACON by default
    assert!(text.contains("   beacon      min      max     grpo\n"), "{text}");
    assert_eq!(text.matches("\ngroup ").count(), 4);
    assert!(text.contains("CAR ") && text.contains("ZAR ") && text.contains("utilisation"));
}

// The table is the default, piped or not, and fits 100 columns, per-step values included;
// every column of its header is explained above it.
#[test]
fn table_fits_100_columns_and_explains_its_columns() {
    for args in [
        &[][..],
        &["--steps"],
        &["--steps", "-e", "gigpo", "--beside", "reinforce_plus_plus"],
    ] {
        let out = run(args, None);
        assert!(out.status.success(), "{args:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        for line in text.lines().take_while(|l| !l.starts_with("diagnostics")) {
            assert!(
                line.chars().count() <= 100,
                "{args:?}: {} columns: {line}",
                line.chars().count()
            );
        }
        let header = text
            .lines()
            .find(|l| l.trim_start().starts_with("trajectory"))
            .unwrap();
        let legend: String = text.lines().take_while(|l| !l.is_empty()).collect();
        for column in header.split_whitespace().skip(1) {
            let column = column.trim_end_matches(',');
            assert!(
                legend.contains(&format!("{column}:")) || legend.contains(&format!("{column},")),
                "{args:?}: column `{column}` is not explained:\n{legend}"
            );
        }
    }
    let steps = String::from_utf8(run(&["--steps"], None).stdout).unwrap();
    let totals = steps.lines().next().unwrap();
    let milestones = totals
        .split(", ")
        .find_map(|p| p.strip_suffix(" milestones (detector: score)"));
    let stars = steps.matches('*').count().to_string();
    assert_eq!(
        milestones,
        Some(stars.as_str()),
        "one star per milestone: {totals}"
    );
}

#[test]
fn estimator_keys_change_the_credit_and_ablations_are_keys() {
    let mean = |args: &[&str]| -> Vec<f64> {
        jsonl(&run(args, None))
            .iter()
            .map(|l| {
                l["advantages"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|a| a.as_f64().unwrap())
                    .sum()
            })
            .collect()
    };
    let paper = mean(&["--format", "jsonl"]);
    assert_eq!(mean(&["-e", "beacon", "--format", "jsonl"]), paper);
    // Defaults written out are the defaults.
    assert_eq!(
        mean(&[
            "-e",
            "beacon:segment_decay=0.95,segment_weight=1",
            "--format",
            "jsonl"
        ]),
        paper
    );
    let decayed = mean(&["--estimator", "beacon:segment_decay=0.5", "--format", "jsonl"]);
    assert_ne!(decayed, paper);
    // Without the segment term BEACON is its trajectory term: one value per trajectory.
    let args = ["-e", "beacon:ablation=no_segment_advantage", "--format", "jsonl"];
    for line in jsonl(&run(&args, None)) {
        let adv = line["advantages"].as_array().unwrap();
        assert!(adv.iter().all(|a| a == &adv[0]), "{}", line["traj_id"]);
    }
    let out = run(
        &[
            "-e",
            "beacon_official:segment_weight=10",
            "--beside",
            "grpo:norm=mean_norm",
        ],
        None,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("beacon_official: 4 groups"));
}

#[test]
fn bad_input_fails_with_a_clear_message() {
    // (arguments, stdin, a phrase the error must contain)
    type Case<'a> = (&'a [&'a str], Option<&'a [u8]>, &'a str);
    let cases: [Case; 9] = [
        (
            &["--estimator", "ppo2"],
            None,
            "unknown estimator ppo2; known: gae, grpo, grpo_vectorized,",
        ),
        (&["-e", "beacon:segment_decay=1.5"], None, "segment_decay = 1.5"),
        (
            &["--estimator", "grpo:gamma=0.9"],
            None,
            "estimator grpo has no key gamma; its keys: std_eps, norm, statistics",
        ),
        (
            &["-e", "beacon:segment_decay=high"],
            None,
            "key segment_decay = high: expected a number",
        ),
        (&["-e", "beacon:segment_decay"], None, "is not KEY=VALUE"),
        // One way to give parameters: in the estimator's string.
        (&["-p", "segment_decay=0.9"], None, "unexpected argument '-p'"),
        (&["--detector", "text"], None, "needs at least one --pattern"),
        (&["-"], Some(b"{\"group_id\":\"g\"}\n"), "line 1"),
        (&["/no/such/file.jsonl"], None, "/no/such/file.jsonl"),
    ];
    for (args, stdin, needle) in cases {
        let out = run(args, stdin);
        assert!(!out.status.success(), "{args:?} should fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn walkthrough_detector_matches_each_tasks_expert_actions_in_order() {
    // Expert actions for one task: the gold trajectory's actions; the other tasks have none.
    let records = sample_records();
    let gold = records
        .iter()
        .find(|r| r["traj_id"] == "tw/custom_q5/s31/0_gold")
        .unwrap();
    let actions: Vec<&str> = gold["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["action"].as_str().unwrap())
        .collect();
    let path = std::env::temp_dir().join(format!("beacon-cli-walkthrough-{}.json", std::process::id()));
    std::fs::write(
        &path,
        serde_json::json!({ "tw/custom_q5/s31": actions }).to_string(),
    )
    .unwrap();
    let out = run(
        &[
            "--format",
            "jsonl",
            "--detector",
            "walkthrough",
            "--walkthrough",
            path.to_str().unwrap(),
        ],
        None,
    );
    std::fs::remove_file(&path).ok();
    for line in jsonl(&out) {
        let flags: Vec<bool> = line["milestones"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_bool().unwrap())
            .collect();
        if line["traj_id"] == "tw/custom_q5/s31/0_gold" {
            // Every gold action matches its own expert action: every step is a milestone.
            assert_eq!(flags, vec![true; actions.len()]);
        } else if line["group_id"] != "tw/custom_q5/s31" {
            assert!(flags.iter().all(|f| !f), "{}", line["traj_id"]);
        }
    }
    let missing = run(&["--detector", "walkthrough"], None);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("--walkthrough FILE"));
}

/// A temporary file holding `text`, removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, text: &str) -> Self {
        let path = std::env::temp_dir().join(format!("beacon-cli-{}-{name}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        Self(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        std::fs::remove_file(&self.0).ok();
    }
}

fn failure(out: &Output) -> String {
    assert!(!out.status.success(), "should fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

// L1: a repeated traj_id in a second file is reported on that file's line, naming the file.
#[test]
fn errors_name_the_file_and_its_line() {
    let sample = std::fs::read_to_string(SAMPLE).unwrap();
    let first_line = sample.lines().next().unwrap();
    let a = TempFile::new("l1-a.jsonl", &sample);
    // Line 2 of the second file repeats the first trajectory of the first file.
    let b = TempFile::new("l1-b.jsonl", &format!("\n{first_line}\n"));
    let err = failure(&run(&[a.path(), b.path()], None));
    let expected = format!("record at line 2 of {}, field `traj_id`", b.path());
    assert!(err.contains(&expected), "{err}");
    assert!(err.contains(&format!("first at line 1 of {}", a.path())), "{err}");
}

// R2: a stream without line breaks fails fast with the line limit, not by filling memory.
#[cfg(unix)]
#[test]
fn endless_line_is_refused() {
    let err = failure(&run(&["/dev/zero"], None));
    assert!(
        err.contains("line 1 of /dev/zero is longer than 67108864 bytes"),
        "{err}"
    );
    let err = failure(&run(&["--max-line-bytes", "1000", "-"], Some(&[b' '; 5000])));
    assert!(err.contains("line 1 of - is longer than 1000 bytes"), "{err}");
}

// R4: a repeated unknown key is an error, like a repeated named key.
#[test]
fn repeated_unknown_key_is_refused() {
    let sample = std::fs::read_to_string(SAMPLE).unwrap();
    let line = sample
        .lines()
        .next()
        .unwrap()
        .replacen(r#""t": 0, "#, r#""t": 0, "t": 1, "#, 1);
    let err = failure(&run(&["-"], Some(line.as_bytes())));
    assert!(
        err.contains("record at line 1 of -, field `steps[0].t`: duplicate field `t`"),
        "{err}"
    );
}

// R3: the input is processed group by group: a group split over two files (contiguous over
// the files in order) gives the same bytes as one file, and a group that comes back after
// another group is refused, naming the file and line.
#[test]
fn groups_stream_and_must_be_contiguous() {
    let sample = std::fs::read_to_string(SAMPLE).unwrap();
    let lines: Vec<&str> = sample.lines().collect();
    // Split inside the second group (lines 9-16).
    let a = TempFile::new("r3-a.jsonl", &(lines[..12].join("\n") + "\n"));
    let b = TempFile::new("r3-b.jsonl", &(lines[12..].join("\n") + "\n"));
    for args in [
        &["--format", "jsonl"][..],
        &["-e", "gigpo", "--format", "jsonl"],
        &["--format", "table"],
    ] {
        let whole = run(args, None);
        let split = run(&[args, &[a.path(), b.path()]].concat(), None);
        assert!(whole.status.success() && split.status.success());
        assert_eq!(whole.stdout, split.stdout, "{args:?}");
    }

    // Group by group gives the bytes of one batch over the whole input (which --diagnostics
    // forces; it adds one last line): GiGPO's step-group labels run on over the groups.
    for est in ["beacon", "gigpo", "grpo"] {
        let streamed = run(&["-e", est, "--format", "jsonl"], None);
        let whole = run(&["-e", est, "--format", "jsonl", "--diagnostics"], None);
        let whole = String::from_utf8(whole.stdout).unwrap();
        let (lines, last) = whole.trim_end().rsplit_once('\n').unwrap();
        assert!(last.starts_with(r#"{"diagnostics":"#), "{last}");
        let streamed = String::from_utf8(streamed.stdout).unwrap();
        assert!(
            streamed == format!("{lines}\n"),
            "{est}: group by group differs from one batch"
        );
    }

    // Group 1 again after group 2: line 10 of the file.
    let mut moved = lines.clone();
    let line = moved.remove(1);
    moved.insert(9, line);
    let interleaved = TempFile::new("r3-c.jsonl", &moved.join("\n"));
    let err = failure(&run(&[interleaved.path()], None));
    let expected = format!(
        "group `sw/find-animal/v146` reappears at line 10 of {}",
        interleaved.path()
    );
    assert!(err.contains(&expected), "{err}");
    // An estimator that whitens over the batch reads the whole input: interleaving is fine.
    let out = run(
        &["-e", "reinforce_plus_plus", "-f", "jsonl", interleaved.path()],
        None,
    );
    assert_eq!(jsonl(&out).len(), 32);
}

/// A one-step trajectory line.
fn record(group: &str, traj: &str, reward: f64) -> String {
    serde_json::json!({
        "group_id": group, "traj_id": traj, "terminal_reward": reward,
        "steps": [{"action": "go", "observation": "ok", "reward": 0, "done": true}],
    })
    .to_string()
        + "\n"
}

fn lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

// A group that reappears after another group: its lines already written were computed on
// part of the group. The last output line marks them; the table writes nothing; read whole,
// the same input gives the group's true advantages.
#[test]
fn lines_of_a_group_that_reappears_are_marked_invalid() {
    let input = [
        record("g1", "a", 1.0),
        record("g2", "b", 1.0),
        record("g1", "c", 0.0),
    ]
    .concat();
    let out = run(&["--format", "jsonl", "-"], Some(input.as_bytes()));
    let err = failure(&out);
    assert!(err.contains("group `g1` reappears at line 3 of -"), "{err}");
    assert!(
        err.contains("(output line 1)") && err.contains("--whole-input"),
        "{err}"
    );
    let written = lines(&out);
    assert_eq!(written.len(), 3, "two trajectories, then the mark");
    assert_eq!(
        (&written[0]["traj_id"], &written[1]["traj_id"]),
        (&"a".into(), &"b".into())
    );
    let mark = &written[2];
    assert!(mark["error"].as_str().unwrap().contains("reappears"), "{mark}");
    assert_eq!(
        mark["invalid_lines"],
        serde_json::json!({"group_id": "g1", "first": 1, "count": 1})
    );

    let table = run(&["-"], Some(input.as_bytes()));
    assert!(failure(&table).contains("--whole-input"));
    assert!(
        table.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&table.stdout)
    );

    let whole = jsonl(&run(
        &["--format", "jsonl", "--whole-input", "-"],
        Some(input.as_bytes()),
    ));
    let a = whole.iter().find(|l| l["traj_id"] == "a").unwrap();
    let adv = a["advantages"][0].as_f64().unwrap();
    assert!((adv - std::f64::consts::FRAC_1_SQRT_2).abs() < 1e-5, "{adv}");
}

// No trajectory at all is an error saying so, whatever the format, not an empty success.
#[test]
fn empty_input_is_an_empty_batch_error() {
    let blank = TempFile::new("empty.jsonl", "\n\n");
    for (args, stdin) in [
        (&["--format", "jsonl", "-"][..], Some(&b""[..])),
        (&["-"], Some(b"")),
        (&["--format", "jsonl", blank.path()], None),
        (&["--format", "jsonl", "--whole-input", "-"], Some(b"")),
    ] {
        let out = run(args, stdin);
        let err = failure(&out);
        assert!(err.contains("empty batch: no trajectory in"), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

// Ids come from files: in the table, control and bidirectional characters are escaped, so an
// id cannot clear the terminal or reorder the line. JSON output escapes them as JSON does.
#[test]
fn table_escapes_control_characters_in_ids() {
    let input = [
        record("g\u{202e}1", "clear\u{1b}[2J", 1.0),
        record("g\u{202e}1", "bell\u{7}\\x", 0.0),
    ]
    .concat();
    let out = run(&["-"], Some(input.as_bytes()));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!text.contains(['\u{1b}', '\u{7}', '\u{202e}']), "{text:?}");
    assert!(text.contains("group g\\u{202e}1\n"), "{text}");
    assert!(text.contains("clear\\u{1b}[2J "), "{text}");
    assert!(text.contains("bell\\u{7}\\x "), "{text}");
    let json = jsonl(&run(&["--format", "jsonl", "-"], Some(input.as_bytes())));
    assert_eq!(json[0]["traj_id"], "clear\u{1b}[2J");
}
