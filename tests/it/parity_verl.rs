//! Parity against verl 0.9.1 (`tests/data/verl_public.json`, the float64 run `outputs_f64`).
//!
//! Tolerance: |ours − expected| ≤ 1e-5 · max(1, |expected|) for every element of advantages
//! and returns, masked or not. Where verl raises, the crate must return a typed error.
//!
//! Every case runs twice: with `f64` values and a `bool` mask, and with verl's own dtypes,
//! `f32` values and an `i64` mask (every input of these vectors is an `f32`, so both runs
//! read the same numbers), which drive the crate's `f32` and `i64` kernels (the SSE2 row sums
//! among them) against the same expected values.
//! Run with `--nocapture` to see the number of cases and the max relative error per family.

use beacon_rl::estimator::{
    EstimatorConfig, EstimatorInput, GaeConfig, GpgConfig, GrpoConfig, NormMode, OptimalTokenBaselineConfig,
    ReinforcePlusPlusConfig, ZeroTail,
};
use beacon_rl::tensor::FloatView;
use beacon_rl::{Error, RolloutBatch};
use ndarray::Array2;
use serde_json::Value;

use crate::common;
use common::{parity_err, PARITY_TOL as TOL};

fn cases() -> Vec<Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/verl_public.json");
    let text = std::fs::read_to_string(path).expect("read verl_public.json");
    let doc: Value = serde_json::from_str(&text).expect("parse verl_public.json");
    doc["cases"].as_array().expect("cases").clone()
}

fn matrix_f64(v: &Value) -> Array2<f64> {
    let rows: Vec<Vec<f64>> = v
        .as_array()
        .expect("matrix")
        .iter()
        .map(|r| {
            r.as_array()
                .expect("row")
                .iter()
                .map(|x| x.as_f64().expect("number"))
                .collect()
        })
        .collect();
    let cols = rows.first().map_or(0, Vec::len);
    Array2::from_shape_vec((rows.len(), cols), rows.concat()).expect("rectangular")
}

fn matrix_bool(v: &Value) -> Array2<bool> {
    matrix_f64(v).mapv(|x| x != 0.0)
}

fn param(case: &Value, name: &str) -> Option<f64> {
    case["params"][name].as_f64()
}

fn flag(case: &Value, name: &str, default: bool) -> bool {
    case["params"][name].as_bool().unwrap_or(default)
}

/// The crate's config for a case: verl's name plus the case's parameters.
fn config_for(case: &Value) -> EstimatorConfig {
    let name = case["verl_name"].as_str().expect("verl_name");
    let grpo = || {
        GrpoConfig::default()
            .with_std_eps(param(case, "epsilon").unwrap_or(1e-6))
            .with_norm(if flag(case, "norm_adv_by_std_in_grpo", true) {
                NormMode::MeanStdNorm
            } else {
                NormMode::MeanNorm
            })
    };
    let otb = || {
        OptimalTokenBaselineConfig::default()
            .with_zero_tail(if flag(case, "handle_zero_tail", true) {
                ZeroTail::ZeroBaseline
            } else {
                ZeroTail::KeepBaseline
            })
            .with_denominator_eps(param(case, "epsilon").unwrap_or(1e-8))
    };
    match name {
        "grpo" => EstimatorConfig::Grpo(grpo()),
        "grpo_vectorized" => EstimatorConfig::GrpoVectorized(grpo()),
        "grpo_passk" => EstimatorConfig::GrpoPassk(grpo()),
        "gdpo" => EstimatorConfig::Gdpo(grpo()),
        "gae" => EstimatorConfig::Gae(
            GaeConfig::default()
                .with_discount(param(case, "gamma").expect("gamma"))
                .with_gae_lambda(param(case, "lam").expect("lam")),
        ),
        "reinforce_plus_plus" => EstimatorConfig::ReinforcePlusPlus(
            ReinforcePlusPlusConfig::default().with_discount(param(case, "gamma").expect("gamma")),
        ),
        "gpg" => EstimatorConfig::Gpg(GpgConfig::default().with_f_norm(param(case, "f_norm").unwrap_or(1.0))),
        "optimal_token_baseline" => EstimatorConfig::OptimalTokenBaseline(otb()),
        "tir_optimal_token_baseline" => EstimatorConfig::TirOptimalTokenBaseline(otb()),
        other => other.parse().unwrap_or_else(|e| panic!("{}: {e}", case["id"])),
    }
}

/// Runs one case; returns the max relative error, or panics naming the case and index.
/// verl's dtypes: `f32` values (exact for these vectors, checked) and an `i64` mask.
fn as_f32(m: &Array2<f64>) -> Array2<f32> {
    m.mapv(|x| {
        let y = x as f32;
        assert_eq!(f64::from(y), x, "an input of the vectors is not an f32");
        y
    })
}

/// One optional input in the run's dtype.
fn pick<'a>(
    verl_dtypes: bool,
    wide: &'a Option<Array2<f64>>,
    narrow: &'a Option<Array2<f32>>,
) -> Option<FloatView<'a>> {
    if verl_dtypes {
        narrow.as_ref().map(FloatView::from)
    } else {
        wide.as_ref().map(FloatView::from)
    }
}

fn run_case(case: &Value, verl_dtypes: bool) -> f64 {
    let id = case["id"].as_str().expect("id");
    let inputs = &case["inputs"];
    assert!(
        case["params"]["rollout_is_weights"].is_null(),
        "{id}: vectors with rollout_is_weights are not wired into this test"
    );
    let rewards = matrix_f64(&inputs["token_level_rewards"]);
    let mask = matrix_bool(&inputs["response_mask"]);
    let rows = rewards.nrows();
    let scores: Vec<f64> = rewards.rows().into_iter().map(|r| r.sum()).collect();
    let uids: Vec<String> = match inputs["index"].as_array() {
        Some(index) => index
            .iter()
            .map(|u| u.as_str().expect("uid").to_string())
            .collect(),
        None => (0..rows).map(|r| format!("row{r}")).collect(),
    };
    let batch = RolloutBatch::from_group_keys(&uids, &scores).expect("batch");

    let values = inputs.get("values").map(matrix_f64);
    let old_log_probs = inputs.get("old_log_probs").map(matrix_f64);
    let sum_pi_squared = inputs.get("sum_pi_squared").map(matrix_f64);
    let reward_baselines: Option<Vec<f64>> = inputs.get("reward_baselines").map(|v| {
        v.as_array()
            .expect("baselines")
            .iter()
            .map(|x| x.as_f64().expect("number"))
            .collect()
    });

    let narrow = |m: &Option<Array2<f64>>| m.as_ref().map(as_f32);
    let (rewards32, values32, old_log_probs32, sum_pi_squared32) = (
        as_f32(&rewards),
        narrow(&values),
        narrow(&old_log_probs),
        narrow(&sum_pi_squared),
    );
    let mask64 = mask.mapv(i64::from);
    let mut input = if verl_dtypes {
        EstimatorInput::new(&batch)
            .with_token_level_rewards(&rewards32)
            .with_response_mask(&mask64)
    } else {
        EstimatorInput::new(&batch)
            .with_token_level_rewards(&rewards)
            .with_response_mask(&mask)
    };
    if let Some(v) = pick(verl_dtypes, &values, &values32) {
        input = input.with_values(v);
    }
    if let Some(v) = pick(verl_dtypes, &old_log_probs, &old_log_probs32) {
        input = input.with_old_log_probs(v);
    }
    if let Some(v) = pick(verl_dtypes, &sum_pi_squared, &sum_pi_squared32) {
        input = input.with_sum_pi_squared(v);
    }
    if let Some(b) = &reward_baselines {
        input = input.with_reward_baselines(b);
    }

    let estimator = config_for(case).build().expect("valid config");
    assert_eq!(estimator.name(), case["verl_name"].as_str().unwrap(), "{id}");
    let expected = &case["outputs_f64"];
    let result = estimator.estimate(&input);
    if let Some(err) = expected.get("error") {
        match result {
            Err(Error::Undefined(_)) => return 0.0,
            other => panic!("{id}: verl raises {err}, the crate returned {other:?}"),
        }
    }
    let out = result.unwrap_or_else(|e| panic!("{id}: unexpected error {e}"));
    let mut max_rel = 0.0f64;
    for (what, ours) in [("advantages", &out.advantages), ("returns", out.returns())] {
        let want = matrix_f64(&expected[what]);
        assert_eq!(ours.dim(), want.dim(), "{id}: {what} shape");
        for ((r, t), &e) in want.indexed_iter() {
            let o = ours[[r, t]];
            let rel = parity_err(o, e);
            assert!(
                rel <= TOL,
                "{id}: {what}[{r}][{t}] = {o}, verl {e} (relative error {rel:.3e})"
            );
            max_rel = max_rel.max(rel);
        }
    }
    max_rel
}

/// Runs every case whose `verl_name` is in `names`; returns (cases, max relative error).
fn run_family(names: &[&str]) -> (usize, f64) {
    let mut n = 0;
    let mut max_rel = 0.0f64;
    for case in cases() {
        if names.contains(&case["verl_name"].as_str().expect("verl_name")) {
            for verl_dtypes in [false, true] {
                max_rel = max_rel.max(run_case(&case, verl_dtypes));
            }
            n += 1;
        }
    }
    println!("{names:?}: {n} cases, max relative error {max_rel:.3e}");
    assert!(n > 0, "no case for {names:?}");
    (n, max_rel)
}

#[test]
fn parity_grpo_family() {
    run_family(&["grpo", "grpo_vectorized", "grpo_passk", "gdpo"]);
}

#[test]
fn parity_rloo_family() {
    run_family(&["rloo", "rloo_vectorized"]);
}

#[test]
fn parity_opo() {
    run_family(&["opo"]);
}

#[test]
fn parity_gpg() {
    run_family(&["gpg"]);
}

#[test]
fn parity_reinforce_family() {
    run_family(&["reinforce_plus_plus", "reinforce_plus_plus_baseline"]);
}

#[test]
fn parity_remax() {
    run_family(&["remax"]);
}

#[test]
fn parity_gae() {
    run_family(&["gae"]);
}

#[test]
fn parity_optimal_token_baseline_family() {
    run_family(&["optimal_token_baseline", "tir_optimal_token_baseline"]);
}

#[test]
fn every_case_is_covered() {
    let all = cases();
    let names: Vec<&str> = EstimatorConfig::VERL_NAMES.to_vec();
    let (n, max_rel) = run_family(&names);
    assert_eq!(
        n,
        all.len(),
        "every case in the file has a verl_name the crate knows"
    );
    let errors = all
        .iter()
        .filter(|c| c["outputs_f64"].get("error").is_some())
        .count();
    println!("verl parity: {n} cases ({errors} expected errors), max relative error {max_rel:.3e}");
}

/// Per-case report (`cargo test --test parity_verl -- --ignored --nocapture`).
#[test]
#[ignore]
fn per_case_report() {
    for case in cases() {
        println!(
            "{} {:.3e}",
            case["id"],
            run_case(&case, false).max(run_case(&case, true))
        );
    }
}
