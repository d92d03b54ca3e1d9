//! `mt_grpo` against the authors' own functions: `tests/data/mt_grpo.json`, made by
//! `tests/data/mt_grpo.py` from SiliangZeng/Multi-Turn-RL-Agent at the commit in its `meta`
//! (the command is there too). 24 cases of one- and two-turn rollouts (random, binary,
//! all two-turn, all one-turn rewards; c = 1 and 0.5; 2, 4 and 5 rollouts per prompt).
//!
//! Each case runs on verl's multi-turn rows (each rollout one row, the turn reward on its
//! first turn's last token, the outcome on its last turn's) and on step rows (one row per
//! turn, `step_rewards`), both against the authors' float32 advantages under the completion
//! mask, within |d| ≤ 1e-5 · max(1, |expected|).

use beacon_rl::estimator::{AdvantageEstimator, EstimatorConfig, EstimatorInput, MtGrpoConfig, Workspace};
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

/// The runs of 1s of a mask row, as (start, end).
fn runs(mask: &[f64]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut t = 0;
    while t < mask.len() {
        if mask[t] != 0.0 {
            let s = t;
            while t < mask.len() && mask[t] != 0.0 {
                t += 1;
            }
            out.push((s, t));
        } else {
            t += 1;
        }
    }
    out
}

#[test]
fn every_authors_case_on_multi_turn_and_step_rows() {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/mt_grpo.json")).unwrap();
    let data: Value = serde_json::from_str(&text).unwrap();
    assert!(data["meta"]["source"]
        .as_str()
        .unwrap()
        .starts_with("SiliangZeng/Multi-Turn-RL-Agent@"));
    let (mut worst, mut checked) = (0.0f64, 0usize);
    let mut ws = Workspace::default();
    for (i, case) in data["cases"].as_array().unwrap().iter().enumerate() {
        let g = case["num_generations"].as_u64().unwrap() as usize;
        let (rt, ro) = (floats(&case["turn_reward"]), floats(&case["outcome_reward"]));
        let masks: Vec<Vec<f64>> = case["completion_mask"]
            .as_array()
            .unwrap()
            .iter()
            .map(floats)
            .collect();
        let want: Vec<Vec<f64>> = case["advantages"]
            .as_array()
            .unwrap()
            .iter()
            .map(floats)
            .collect();
        let (n, cols) = (masks.len(), masks[0].len());
        let est = EstimatorConfig::MtGrpo(
            MtGrpoConfig::default().with_turn_advantage_coef(case["turn_advantage_coef"].as_f64().unwrap()),
        )
        .build()
        .unwrap();
        // Multi-turn rows.
        let mask = Array2::from_shape_fn((n, cols), |(r, t)| masks[r][t] != 0.0);
        let mut rewards = Array2::<f64>::zeros((n, cols));
        let mut spans = Vec::new();
        for r in 0..n {
            let turns = runs(&masks[r]);
            assert!(turns.len() == 1 || turns.len() == 2, "case {i} row {r}");
            if turns.len() == 2 {
                rewards[[r, turns[0].1 - 1]] = rt[r];
            }
            rewards[[r, turns.last().unwrap().1 - 1]] = ro[r];
            spans.push(turns);
        }
        let uids: Vec<usize> = (0..n).map(|r| r / g).collect();
        let batch = RolloutBatch::from_group_keys(&uids, &vec![0.0; n]).unwrap();
        let input = EstimatorInput::new(&batch)
            .with_token_level_rewards(&rewards)
            .with_response_mask(&mask);
        let mut got = Array2::<f32>::from_elem((n, cols), f32::NAN);
        est.estimate_into(&input, (&mut got).into(), None, &mut ws)
            .unwrap();
        for ((r, t), &m) in mask.indexed_iter() {
            let x = f64::from(got[[r, t]]);
            if m {
                let e = parity_err(x, want[r][t]);
                worst = worst.max(e);
                assert!(e <= PARITY_TOL, "case {i} ({r}, {t}): {x} vs {}", want[r][t]);
                checked += 1;
            } else {
                assert_eq!(x, 0.0);
            }
        }
        // Step rows: one row per turn.
        let (mut groups, mut trajs, mut steps, mut first) = (vec![], vec![], vec![], vec![]);
        for r in 0..n {
            let k = spans[r].len();
            for (j, &(s, _)) in spans[r].iter().enumerate() {
                groups.push(r / g);
                trajs.push(r);
                steps.push(if j + 1 == k { ro[r] } else { rt[r] });
                first.push((r, s));
            }
        }
        let batch = RolloutBatch::from_row_keys(&groups, &trajs, &vec![0.0; groups.len()]).unwrap();
        let mut adv = vec![f64::NAN; steps.len()];
        est.estimate_steps_into(
            &EstimatorInput::new(&batch).with_step_rewards(&steps),
            &mut adv,
            &mut ws,
        )
        .unwrap();
        for (a, &(r, s)) in adv.iter().zip(&first) {
            assert!(
                parity_err(*a, want[r][s]) <= PARITY_TOL,
                "case {i} step row of {r}: {a} vs {}",
                want[r][s]
            );
        }
    }
    assert!(checked > 500, "{checked}");
    eprintln!("mt_grpo: max parity error {worst:.2e} over {checked} tokens");
}
