//! `tree_grpo` against the authors' own functions: `tests/data/tree_grpo.json`, made by
//! `tests/data/tree_grpo.py` from AMAP-ML/Tree-GRPO at the commit in its `meta` (the command
//! is there too). 36 generated batches, 12 for each of the authors' `tree`, `tree_inner` and
//! `tree_2norm`: 1–3 prompts, 1–3 trees per prompt, 1–4 rollouts per tree with random branch
//! points, rows shuffled, binary, three-level and Gaussian outcomes, extra rewards on random
//! tokens (masked ones too).
//!
//! Each case runs on verl's multi-turn rows (the authors' layout: one rollout per row) and
//! on step rows (one row per turn, the turn's reward summed here from the tokens it owns),
//! against the authors' float32 advantages, within |d| ≤ 1e-5 · max(1, |expected|).

use beacon_rl::estimator::{
    AdvantageEstimator, EstimatorConfig, EstimatorInput, TreeGrpoConfig, TreeGrpoVariant, Workspace,
};
use beacon_rl::RolloutBatch;
use ndarray::Array2;
use serde_json::Value;

use crate::common::{parity_err, PARITY_TOL};

fn matrix<T>(v: &Value, f: impl Fn(&Value) -> T) -> Vec<Vec<T>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|row| row.as_array().unwrap().iter().map(&f).collect())
        .collect()
}

/// Step rows of a case: one row per run of the mask; turn k's reward is the rewards from
/// the end of turn k − 1 to its own end (the first turn from token 0, the last to the end).
/// Returns (group keys, trajectory keys, step rewards, parents, (row, first token) per step).
#[allow(clippy::type_complexity)]
fn step_rows(
    uids: &[String],
    parents: &[i64],
    rewards: &[Vec<f32>],
    mask: &[Vec<i64>],
) -> (Vec<String>, Vec<usize>, Vec<f64>, Vec<i64>, Vec<(usize, usize)>) {
    let (mut g, mut tr, mut st, mut first) = (vec![], vec![], vec![], vec![]);
    let mut first_step = Vec::new();
    for (r, m) in mask.iter().enumerate() {
        first_step.push(st.len());
        let mut ends = vec![];
        let mut t = 0;
        while t < m.len() {
            if m[t] == 1 {
                let s = t;
                while t < m.len() && m[t] == 1 {
                    t += 1;
                }
                ends.push((s, t));
            } else {
                t += 1;
            }
        }
        let mut owned = 0;
        for (k, &(s, e)) in ends.iter().enumerate() {
            let end = if k + 1 == ends.len() { m.len() } else { e };
            st.push(rewards[r][owned..end].iter().map(|&x| f64::from(x)).sum());
            owned = end;
            g.push(uids[r].clone());
            tr.push(r);
            first.push((r, s));
        }
    }
    let p = first
        .iter()
        .map(|&(r, _)| match parents[r] {
            -1 => -1,
            q => first_step[q as usize] as i64,
        })
        .collect();
    (g, tr, st, p, first)
}

#[test]
fn every_authors_case_on_multi_turn_and_step_rows() {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/tree_grpo.json")).unwrap();
    let data: Value = serde_json::from_str(&text).unwrap();
    assert!(data["meta"]["source"]
        .as_str()
        .unwrap()
        .starts_with("AMAP-ML/Tree-GRPO@"));
    let (mut worst, mut checked, mut variants) = (0.0f64, 0usize, [0usize; 3]);
    let mut ws = Workspace::default();
    for (i, case) in data["cases"].as_array().unwrap().iter().enumerate() {
        let variant = match case["variant"].as_str().unwrap() {
            "tree" => TreeGrpoVariant::Sum,
            "tree_inner" => TreeGrpoVariant::Intra,
            "tree_2norm" => TreeGrpoVariant::Nested,
            v => panic!("{v}"),
        };
        variants[variant as usize] += 1;
        let est = EstimatorConfig::TreeGrpo(TreeGrpoConfig::default().with_variant(variant))
            .build()
            .unwrap();
        let uids: Vec<String> = case["uid"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| u.as_str().unwrap().to_owned())
            .collect();
        let parents: Vec<i64> = case["tree_parents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_i64().unwrap())
            .collect();
        let rewards = matrix(&case["token_level_rewards"], |x| x.as_f64().unwrap() as f32);
        let mask = matrix(&case["response_mask"], |x| x.as_i64().unwrap());
        let want = matrix(&case["advantages"], |x| x.as_f64().unwrap());
        let (n, cols) = (mask.len(), mask[0].len());
        // Multi-turn rows: the authors' float32 rewards and int64 mask as they are.
        let rw = Array2::from_shape_fn((n, cols), |(r, t)| rewards[r][t]);
        let mk = Array2::from_shape_fn((n, cols), |(r, t)| mask[r][t]);
        let batch = RolloutBatch::from_group_keys(&uids, &vec![0.0; n]).unwrap();
        let input = EstimatorInput::new(&batch)
            .with_token_level_rewards(&rw)
            .with_response_mask(&mk)
            .with_tree_parents(&parents);
        let mut got = Array2::<f32>::from_elem((n, cols), f32::NAN);
        est.estimate_into(&input, (&mut got).into(), None, &mut ws)
            .unwrap();
        for ((r, t), &x) in got.indexed_iter() {
            let e = parity_err(f64::from(x), want[r][t]);
            worst = worst.max(e);
            assert!(e <= PARITY_TOL, "case {i} ({r}, {t}): {x} vs {}", want[r][t]);
            checked += 1;
        }
        // Step rows.
        let (g, tr, st, p, first) = step_rows(&uids, &parents, &rewards, &mask);
        let batch = RolloutBatch::from_row_keys(&g, &tr, &vec![0.0; g.len()]).unwrap();
        let mut adv = vec![f64::NAN; st.len()];
        let input = EstimatorInput::new(&batch)
            .with_step_rewards(&st)
            .with_tree_parents(&p);
        est.estimate_steps_into(&input, &mut adv, &mut ws).unwrap();
        for (a, &(r, s)) in adv.iter().zip(&first) {
            let e = parity_err(*a, want[r][s]);
            worst = worst.max(e);
            assert!(e <= PARITY_TOL, "case {i} step row of {r}: {a} vs {}", want[r][s]);
        }
    }
    assert_eq!(variants, [12, 12, 12]);
    assert!(checked > 3000, "{checked}");
    eprintln!("tree_grpo: max parity error {worst:.2e} over {checked} tokens");
}
