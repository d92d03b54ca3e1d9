//! Replays every input the fuzzers ever failed on, on stable Rust, with plain `cargo test`.
//!
//! Each file under `fuzz/regressions/<target>/` is one (minimised) crash input of the fuzz
//! target `<target>`. It runs through the target's own oracle code: the modules below are
//! the files of the fuzz crate (`fuzz/src/`), included with `#[path]`, so the replay and the
//! fuzzer cannot drift apart and the root crate needs neither libFuzzer nor nightly. How to
//! run the fuzzers and add a regression: docs/reliability.md, section "Fuzzing".

use std::fs;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

#[path = "../../fuzz/src/bytes.rs"]
mod bytes;
#[path = "../../fuzz/src/detectors.rs"]
mod detectors;
#[path = "../../fuzz/src/discover.rs"]
mod discover;
#[path = "../../fuzz/src/estimators.rs"]
mod estimators;
#[cfg(feature = "serde")]
#[path = "../../fuzz/src/records.rs"]
mod records;
#[path = "../../fuzz/src/token.rs"]
mod token;

/// The detectors oracle's CPython port (`fuzz/src/lib.rs` includes the same file).
use crate::difflib_reference::py as difflib_py;

/// The regression inputs of `target`, sorted by name (none yet is fine).
fn inputs(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/regressions")
        .join(target);
    let mut files: Vec<PathBuf> = match fs::read_dir(&dir) {
        Ok(entries) => entries
            .map(|e| e.expect("readable regressions directory").path())
            .filter(|p| p.is_file())
            .collect(),
        Err(_) => Vec::new(),
    };
    files.sort();
    files
}

/// Runs every input of `target` through `oracle`; fails listing each input that panics.
fn replay(target: &str, oracle: fn(&[u8])) {
    let files = inputs(target);
    let failed: Vec<String> = files
        .iter()
        .filter(|path| {
            let data = fs::read(path).expect("readable regression input");
            catch_unwind(AssertUnwindSafe(|| oracle(&data))).is_err()
        })
        .map(|path| path.display().to_string())
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} `{target}` regression inputs fail (panic messages above):\n{}",
        failed.len(),
        files.len(),
        failed.join("\n")
    );
}

#[cfg(feature = "serde")]
#[test]
fn records() {
    replay("records", records::run);
}

#[test]
fn estimators() {
    replay("estimators", estimators::run);
}

#[test]
fn detectors() {
    replay("detectors", detectors::run);
}

#[test]
fn token() {
    replay("token", token::run);
}

#[test]
fn discover() {
    replay("discover", discover::run);
}

/// The replay is not vacuous: a well-formed input reaches the oracles and a small corpus
/// of hand-made inputs passes them.
#[test]
fn oracles_accept_well_formed_inputs() {
    #[cfg(feature = "serde")]
    records::run(include_bytes!("../../data/sample_trajectories.jsonl"));
    for seed in 0u8..=255 {
        let data: Vec<u8> = (0..64u8)
            .map(|i| i.wrapping_mul(seed).wrapping_add(seed))
            .collect();
        estimators::run(&data);
        detectors::run(&data);
        token::run(&data);
        discover::run(&data);
    }
}

/// The detectors oracle's CPython port is itself right: it reproduces every Python 3.11
/// value of `tests/data/difflib.json` (autojunk cases included) bit for bit.
#[test]
fn python_port_matches_python() {
    let text = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/difflib.json"))
        .expect("tests/data/difflib.json");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let cases = doc["difflib"].as_array().expect("difflib array");
    assert!(cases.len() >= 29);
    for c in cases {
        let (a, b) = (c["a"].as_str().unwrap(), c["b"].as_str().unwrap());
        let expected = c["ratio"].as_f64().unwrap();
        let got = difflib_py::SequenceMatcher::new(a, b).ratio();
        assert_eq!(got.to_bits(), expected.to_bits(), "ratio({a:?}, {b:?})");
    }
}
