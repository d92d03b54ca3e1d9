//! `step_reinforce` against ROLL's own functions: `tests/data/step_reinforce.json`, made by
//! `tests/data/step_reinforce.py` from alibaba/ROLL at the commit in its `meta` (the command
//! is there too). 162 cases: random, outcome-only and all-equal turn rewards; γ_s 1, 0.95,
//! 0.5; six normalisation settings; clips and whitening.
//!
//! Each case runs three ways, all against ROLL's float32 output within |d| ≤ 1e-5 ·
//! max(1, |expected|):
//! - the token path on step rows (`step_rewards` + mask) against ROLL's `advantages`;
//! - without whitening, the step path against ROLL's advantage on each row's tokens;
//! - the same turns as verl's multi-turn rows (each trajectory one row, its turns separated
//!   by an observation token, each turn's reward on its last token) against ROLL's
//!   advantages of the corresponding step rows.

use beacon_rl::estimator::{
    AdvantageEstimator, EstimatorConfig, EstimatorInput, Grouping, NormScope, StepReinforceConfig, Workspace,
};
use beacon_rl::RolloutBatch;
use ndarray::Array2;
use serde_json::Value;

use crate::common::{parity_err, PARITY_TOL};

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_owned())
        .collect()
}

fn matrix(v: &Value) -> Array2<f64> {
    let rows: Vec<Vec<f64>> = v.as_array().unwrap().iter().map(floats).collect();
    let cols = rows.first().map_or(0, Vec::len);
    Array2::from_shape_fn((rows.len(), cols), |(r, t)| rows[r][t])
}

fn scope(v: &Value) -> Option<NormScope> {
    match v.as_str() {
        None => None,
        Some("batch") => Some(NormScope::Batch),
        Some("group") => Some(NormScope::Group),
        Some(other) => panic!("norm type {other}"),
    }
}

fn config(p: &Value) -> StepReinforceConfig {
    StepReinforceConfig::default()
        .with_step_discount(p["step_discount"].as_f64().unwrap())
        .with_grouping(match p["grouping"].as_str().unwrap() {
            "batch" => Grouping::Batch,
            "traj_group_id" => Grouping::Group,
            other => panic!("grouping {other}"),
        })
        .with_norm_mean(scope(&p["norm_mean"]))
        .with_norm_std(scope(&p["norm_std"]))
        .with_reward_clip(p["reward_clip"].as_f64())
        .with_whiten_advantages(p["whiten_advantages"].as_bool().unwrap())
        .with_advantage_clip(p["advantage_clip"].as_f64())
}

fn cases() -> Vec<Value> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/step_reinforce.json"
    ))
    .unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    assert!(v["meta"]["source"].as_str().unwrap().starts_with("alibaba/ROLL@"));
    v["cases"].as_array().unwrap().clone()
}

/// A batch, its token rewards and mask, and where each step row's turn begins.
type MultiTurn = (RolloutBatch, Array2<f64>, Array2<bool>, Vec<(usize, usize)>);

/// The verl multi-turn form of a step batch: one row per trajectory (order of first
/// appearance), its turns in step order, each turn's tokens then one observation token, the
/// turn's reward on its last token. Returns the batch, rewards, mask and, per step row, its
/// (row, first column) in the multi-turn matrix.
fn multi_turn(groups: &[String], trajs: &[String], scores: &[f64], mask: &Array2<f64>) -> MultiTurn {
    let mut names: Vec<&String> = Vec::new();
    let mut row_groups = Vec::new();
    let mut at = Vec::new();
    let mut lens: Vec<usize> = Vec::new();
    for (r, t) in trajs.iter().enumerate() {
        let j = names.iter().position(|n| *n == t).unwrap_or_else(|| {
            names.push(t);
            row_groups.push(groups[r].clone());
            lens.push(0);
            names.len() - 1
        });
        let n = mask.row(r).iter().filter(|&&m| m != 0.0).count();
        at.push((j, lens[j]));
        lens[j] += n + 1;
    }
    let cols = lens.iter().copied().max().unwrap();
    let mut rewards = Array2::zeros((names.len(), cols));
    let mut m = Array2::from_elem((names.len(), cols), false);
    for (r, &(j, start)) in at.iter().enumerate() {
        let n = mask.row(r).iter().filter(|&&x| x != 0.0).count();
        for t in start..start + n {
            m[[j, t]] = true;
        }
        rewards[[j, start + n - 1]] = scores[r];
    }
    let batch = RolloutBatch::from_group_keys(&row_groups, &vec![0.0; names.len()]).unwrap();
    (batch, rewards, m, at)
}

#[test]
fn every_roll_case_on_step_rows_steps_and_multi_turn_rows() {
    let (mut worst, mut checked) = (0.0f64, 0usize);
    let mut ws = Workspace::default();
    for (i, case) in cases().iter().enumerate() {
        let inp = &case["inputs"];
        let (groups, trajs) = (strings(&inp["group"]), strings(&inp["traj"]));
        let scores = floats(&inp["step_scores"]);
        let mask = matrix(&inp["response_mask"]);
        let want = matrix(&case["outputs"]["advantages"]);
        let cfg = config(&case["params"]);
        let est = EstimatorConfig::StepReinforce(cfg).build().unwrap();
        let batch = RolloutBatch::from_row_keys(&groups, &trajs, &vec![0.0; groups.len()]).unwrap();
        let mask_b = mask.mapv(|x| x != 0.0);
        let input = EstimatorInput::new(&batch)
            .with_step_rewards(&scores)
            .with_response_mask(&mask_b);
        let mut got = Array2::<f64>::zeros(mask.dim());
        est.estimate_into(&input, (&mut got).into(), None, &mut ws)
            .unwrap();
        for ((r, t), &w) in want.indexed_iter() {
            let e = parity_err(got[[r, t]], w);
            worst = worst.max(e);
            assert!(
                e <= PARITY_TOL,
                "case {i} token ({r}, {t}): {} vs {w}",
                got[[r, t]]
            );
            checked += 1;
        }
        if !cfg.whiten_advantages {
            let mut steps = vec![f64::NAN; scores.len()];
            est.estimate_steps_into(&input, &mut steps, &mut ws).unwrap();
            for (r, s) in steps.iter().enumerate() {
                if let Some(t) = mask.row(r).iter().position(|&m| m != 0.0) {
                    assert!(parity_err(*s, want[[r, t]]) <= PARITY_TOL, "case {i} step {r}");
                }
            }
        }
        let (mt_batch, mt_rewards, mt_mask, at) = multi_turn(&groups, &trajs, &scores, &mask);
        let mt_input = EstimatorInput::new(&mt_batch)
            .with_token_level_rewards(&mt_rewards)
            .with_response_mask(&mt_mask);
        let mut mt = Array2::<f32>::zeros(mt_mask.dim());
        est.estimate_into(&mt_input, (&mut mt).into(), None, &mut ws)
            .unwrap();
        for (r, &(j, start)) in at.iter().enumerate() {
            let n = mask.row(r).iter().filter(|&&m| m != 0.0).count();
            let first = mask.row(r).iter().position(|&m| m != 0.0).unwrap();
            for k in 0..n {
                let (g, w) = (f64::from(mt[[j, start + k]]), want[[r, first + k]]);
                assert!(
                    parity_err(g, w) <= PARITY_TOL,
                    "case {i} multi-turn row {r}: {g} vs {w}"
                );
            }
        }
    }
    assert!(checked > 10_000, "{checked}");
    eprintln!("step_reinforce: max parity error {worst:.2e} over {checked} tokens");
}
