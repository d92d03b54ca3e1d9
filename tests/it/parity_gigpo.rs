//! GiGPO against the reference vectors `tests/data/official_gigpo.json` (verl-agent
//! `gigpo/core_gigpo.py`, run by the paper's release; reduced to one scalar per row by
//! `tests/data/reduce_official.py`).
//!
//! Per row: the discounted step return (`step_rewards`), the step group label (exact), and the
//! advantage (`advantage_f64`; the token advantage is this times a prefix mask of `mask_len`
//! ones), all within |d| <= 1e-5 · max(1, |expected|). The peer's returns are float32, ours
//! f64: that difference (< 6e-6 here) is what the tolerance absorbs.

use beacon_rl::estimator::{Gigpo, GigpoConfig, NormMode, StepGrouping};
use beacon_rl::RolloutBatch;
use serde_json::Value;

use crate::common;
use common::{parity_err as rel_err, PARITY_TOL as TOL};

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_owned())
        .collect()
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn config(params: &Value) -> GigpoConfig {
    let mode = match params["mode"].as_str().unwrap() {
        "mean_norm" => NormMode::MeanNorm,
        "mean_std_norm" => NormMode::MeanStdNorm,
        other => panic!("unknown mode {other}"),
    };
    let grouping = if params["enable_similarity"].as_bool().unwrap() {
        StepGrouping::Similarity {
            threshold: params["similarity_thresh"].as_f64().unwrap(),
        }
    } else {
        StepGrouping::Exact
    };
    GigpoConfig::default()
        .with_step_decay(params["gamma"].as_f64().unwrap())
        .with_step_advantage_weight(params["step_advantage_w"].as_f64().unwrap())
        .with_std_eps(params["epsilon"].as_f64().unwrap())
        .with_norm(mode)
        .with_grouping(grouping)
}

#[test]
fn every_official_gigpo_case() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/official_gigpo.json"
    ))
    .expect("tests/data/official_gigpo.json");
    let doc: Value = serde_json::from_str(&text).unwrap();
    let cases = doc["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 64, "the vector file has 64 GiGPO cases");

    let (mut max_adv, mut max_ret) = (0.0f64, 0.0f64);
    let (mut rows_checked, mut similarity_cases, mut shuffled_cases) = (0usize, 0usize, 0usize);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let rows = &case["rows"];
        let uid = strings(&rows["uid"]);
        let traj = strings(&rows["traj_uid"]);
        let episode = floats(&rows["episode_reward"]);
        let step_reward = floats(&rows["step_reward"]);
        let anchors = strings(&rows["anchor_obs"]);
        let exp_ret = floats(&rows["step_rewards"]);
        let exp_adv = floats(&rows["advantage_f64"]);
        let exp_groups: Vec<usize> = rows["step_groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as usize)
            .collect();
        let mask_len: Vec<u64> = rows["mask_len"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        let cfg = config(&case["params"]);
        if matches!(cfg.grouping, StepGrouping::Similarity { .. }) {
            similarity_cases += 1;
        }
        if case["layout"].as_str() != Some("traj_major") {
            shuffled_cases += 1;
        }

        let batch = RolloutBatch::from_row_keys(&uid, &traj, &episode).unwrap();
        let gigpo = Gigpo::new(cfg).unwrap();
        let out = gigpo.compute(&batch, &step_reward, &anchors).unwrap();
        assert_eq!(out.step_groups, exp_groups, "{name}: step groups");
        assert_eq!(out.num_step_groups, exp_groups.iter().max().unwrap() + 1);
        for r in 0..uid.len() {
            let e = rel_err(out.step_returns[r], exp_ret[r]);
            assert!(
                e <= TOL,
                "{name} row {r}: return {} vs {}",
                out.step_returns[r],
                exp_ret[r]
            );
            max_ret = max_ret.max(e);
            let e = rel_err(out.advantages[r], exp_adv[r]);
            assert!(
                e <= TOL,
                "{name} row {r}: advantage {} vs {}",
                out.advantages[r],
                exp_adv[r]
            );
            max_adv = max_adv.max(e);
            // Every row has a response (the token advantage is the row value on mask_len tokens).
            assert!(mask_len[r] > 0);
            // The parts add up.
            let w = cfg.step_advantage_weight;
            assert_eq!(
                out.advantages[r],
                out.episode_advantages[r] + w * out.step_advantages[r]
            );
        }
        rows_checked += uid.len();

        // Exact mode through the generic-key entry point gives the same output.
        if cfg.grouping == StepGrouping::Exact {
            let by_key = gigpo.compute_by_key(&batch, &step_reward, &anchors).unwrap();
            assert_eq!(by_key, out, "{name}: compute_by_key");
        }
    }
    assert_eq!(similarity_cases, 32);
    assert!(shuffled_cases >= 8);
    println!(
        "official_gigpo: {} cases, {rows_checked} rows, max rel err advantage {max_adv:.3e}, return {max_ret:.3e}",
        cases.len()
    );
}
