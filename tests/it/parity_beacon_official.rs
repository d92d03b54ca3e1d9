//! Parity with the paper's public code release (MiGPO, `migpo/core_migpo.py`): every `migpo`
//! case of `tests/data/official_migpo.json` (reduced from the release's vectors by
//! `tests/data/reduce_official.py`), compared at |Δ| ≤ 1e-5·max(1, |expected|) against the
//! release's float64 run, at step and token level.

use beacon_rl::estimator::{Beacon, BeaconConfig, BeaconFlavour, NormMode};
use beacon_rl::tensor::broadcast;
use beacon_rl::RolloutBatch;
use ndarray::Array2;
use serde_json::Value;

use crate::common;
use common::parity_ok as tol_ok;

fn f64s(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn every_migpo_case_matches_the_release() {
    let data: Value = serde_json::from_str(include_str!("../data/official_migpo.json")).unwrap();
    let cases = data["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 64, "all 64 migpo cases are present");
    let (mut worst, mut rows_checked) = (0.0f64, 0usize);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let p = &case["params"];
        let rows = &case["rows"];
        let mode = match p["mode"].as_str().unwrap() {
            "mean_norm" => NormMode::MeanNorm,
            "mean_std_norm" => NormMode::MeanStdNorm,
            m => panic!("{name}: unknown mode {m}"),
        };
        let mut cfg = BeaconConfig::official();
        cfg.flavour = BeaconFlavour::Official { norm: mode };
        cfg.segment_decay = p["gamma"].as_f64().unwrap();
        cfg.segment_weight = p["step_advantage_w"].as_f64().unwrap();
        cfg.std_eps = p["epsilon"].as_f64().unwrap();
        cfg.milestone_reward = p["milestone_reward"].as_f64().unwrap();
        let beacon = Beacon::new(cfg).unwrap();

        let uid = strs(&rows["uid"]);
        let traj = strs(&rows["traj_uid"]);
        let reward = f64s(&rows["episode_reward"]);
        let flags: Vec<bool> = rows["milestone"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_bool().unwrap())
            .collect();
        let batch = RolloutBatch::from_row_keys(&uid, &traj, &reward).unwrap();
        let out = beacon.compute(&batch, &flags).unwrap();

        let step_rewards = f64s(&rows["step_rewards"]);
        let expected = f64s(&rows["advantage_f64"]);
        for r in 0..uid.len() {
            // The release stores shaped rewards as float32: compare at the f32 tolerance.
            assert!(
                tol_ok(out.shaped_rewards[r], step_rewards[r]),
                "{name} row {r}: shaped reward {} vs {}",
                out.shaped_rewards[r],
                step_rewards[r]
            );
            let err = (out.advantages[r] - expected[r]).abs() / expected[r].abs().max(1.0);
            worst = worst.max(err);
            assert!(
                tol_ok(out.advantages[r], expected[r]),
                "{name} row {r}: advantage {} vs release {}",
                out.advantages[r],
                expected[r]
            );
        }
        rows_checked += uid.len();

        // Token level: the release's token advantages are the row value under a prefix mask.
        let width = case["tokens"].as_u64().unwrap() as usize;
        let mask_len: Vec<usize> = rows["mask_len"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as usize)
            .collect();
        let mask = Array2::from_shape_fn((uid.len(), width), |(r, j)| j < mask_len[r]);
        let tokens = broadcast(&out.advantages, mask.view()).unwrap();
        for ((r, j), &v) in tokens.indexed_iter() {
            let want = if j < mask_len[r] { expected[r] } else { 0.0 };
            assert!(tol_ok(v, want), "{name} token ({r},{j}): {v} vs {want}");
        }
    }
    eprintln!(
        "migpo parity: {} cases, {rows_checked} rows, max rel err {worst:.3e}",
        cases.len()
    );
}
