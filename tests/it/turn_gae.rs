//! `turn_gae` against token-level GAE where the two coincide, and across layouts.
//!
//! With one generated token per turn and the turns separated by observation tokens, verl's
//! token-level GAE (which skips mask-0 tokens, verl ≥ 0.9) runs exactly the turn recursion,
//! so `turn_gae` with whitening must equal the crate's `gae` (verl's parity-tested
//! `compute_gae_advantage_return`) on every generated token. Both whiten with verl's float32
//! token count and Bessel factor; they differ only in the order of their float64 sums, so
//! the advantages agree within [`whitening_tolerance`], the returns within 1e-12.

use beacon_rl::estimator::{
    AdvantageEstimator, EstimatorConfig, EstimatorInput, GaeConfig, TurnGaeConfig, Workspace,
};
use beacon_rl::RolloutBatch;
use ndarray::{array, Array2};
use proptest::prelude::*;

/// Trajectories of (reward, value) turns, each with a group id.
fn trajectories() -> impl Strategy<Value = Vec<(u8, Vec<(f64, f64)>)>> {
    let turn = (-2.0f64..2.0, -1.0f64..1.0);
    prop::collection::vec((0u8..3, prop::collection::vec(turn, 1..6)), 2..8)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn one_token_turns_are_token_level_gae(
        trajs in trajectories(),
        gamma in 0.0f64..=1.0,
        lam in 0.0f64..=1.0,
    ) {
        let n = trajs.len();
        let cols = 2 * trajs.iter().map(|t| t.1.len()).max().unwrap();
        let mut rewards = Array2::<f64>::zeros((n, cols));
        let mut values = Array2::<f64>::from_elem((n, cols), 7.0); // unread off the turns
        let mut mask = Array2::from_elem((n, cols), false);
        for (r, (_, turns)) in trajs.iter().enumerate() {
            for (k, &(rw, v)) in turns.iter().enumerate() {
                rewards[[r, 2 * k]] = rw;
                values[[r, 2 * k]] = v;
                mask[[r, 2 * k]] = true;
            }
        }
        let groups: Vec<u8> = trajs.iter().map(|t| t.0).collect();
        let batch = RolloutBatch::from_group_keys(&groups, &vec![0.0; n]).unwrap();
        let input = EstimatorInput::new(&batch)
            .with_token_level_rewards(&rewards)
            .with_values(&values)
            .with_response_mask(&mask);
        let total: usize = trajs.iter().map(|t| t.1.len()).sum();
        prop_assume!(total >= 2);
        let token = EstimatorConfig::Gae(GaeConfig::default().with_discount(gamma).with_gae_lambda(lam)).build().unwrap().estimate(&input).unwrap();
        let turn = EstimatorConfig::TurnGae(TurnGaeConfig::default().with_discount(gamma).with_lam(lam).with_whiten(true)).build()
            .unwrap()
            .estimate(&input)
            .unwrap();
        let tol = whitening_tolerance(token.returns(), &values, &mask);
        for ((r, t), &m) in mask.indexed_iter() {
            if !m {
                prop_assert_eq!(turn.advantages[[r, t]], 0.0);
                continue;
            }
            let (a, b) = (turn.advantages[[r, t]], token.advantages[[r, t]]);
            prop_assert!((a - b).abs() <= tol, "adv ({}, {}): {} vs {} (tol {})", r, t, a, b, tol);
            let (a, b) = (turn.returns()[[r, t]], token.returns()[[r, t]]);
            prop_assert!((a - b).abs() <= 1e-12 * b.abs().max(1.0), "ret ({}, {}): {} vs {}", r, t, a, b);
        }

        // The same turns as step rows (one row per turn, values per row): the same advantages
        // before whitening.
        let (mut g, mut j, mut sr, mut tv, mut at) = (vec![], vec![], vec![], vec![], vec![]);
        for (r, (gid, turns)) in trajs.iter().enumerate() {
            for (k, &(rw, v)) in turns.iter().enumerate() {
                g.push(*gid);
                j.push(r);
                sr.push(rw);
                tv.push(v);
                at.push((r, 2 * k));
            }
        }
        let steps = RolloutBatch::from_row_keys(&g, &j, &vec![0.0; g.len()]).unwrap();
        let est = EstimatorConfig::TurnGae(TurnGaeConfig::default().with_discount(gamma).with_lam(lam)).build().unwrap();
        let mut adv = vec![f64::NAN; sr.len()];
        est.estimate_steps_into(&EstimatorInput::new(&steps).with_step_rewards(&sr).with_turn_values(&tv), &mut adv, &mut Workspace::default()).unwrap();
        let plain = est.estimate(&input).unwrap();
        for (a, &(r, t)) in adv.iter().zip(&at) {
            prop_assert!((a - plain.advantages[[r, t]]).abs() <= 1e-12 * a.abs().max(1.0));
        }
    }
}

/// The largest difference two float64 evaluations of verl's `masked_whiten` (float32 count
/// and Bessel factor in both) may show when they add the same n values x (|x| ≤ m) in
/// different orders. Each Σx is off by at most (n − 1)·ε·Σ|x| ≤ n²·ε·m, so each μ by n·ε·m;
/// x − μ adds 2ε·m; with the two Â's themselves a few roundings apart, |Δ(x − μ)| ≤
/// 4(n + 2)·ε·m, multiplied by the scale s = 1/√(σ² + 1e-8) (up to 1e4 when the advantages
/// nearly agree: relative tolerances fail there). σ² depends on μ only to second order
/// (Σ(x − μ) = 0) and is rounded (n + 3)·ε relative, which moves x' (|x'| ≤ √n) by at most
/// √n·(n + 3)·ε. Â = returns − values on the generated tokens.
fn whitening_tolerance(returns: &Array2<f64>, values: &Array2<f64>, mask: &Array2<bool>) -> f64 {
    let pre: Vec<f64> = mask
        .indexed_iter()
        .filter(|&(_, &m)| m)
        .map(|(i, _)| returns[i] - values[i])
        .collect();
    let n = pre.len() as f64;
    let mean = pre.iter().sum::<f64>() / n;
    let var = pre.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0);
    let scale = 1.0 / (var + 1e-8).sqrt();
    let m = pre.iter().fold(1.0f64, |m, x| m.max(x.abs()));
    let eps = f64::EPSILON;
    scale * 4.0 * (n + 2.0) * eps * m + n.sqrt() * (n + 3.0) * eps
}

/// Found by the property above when `turn_gae` took `n + 1e-8` in float64: γ = λ = 0, two
/// one-turn trajectories whose advantages 2.9 and 2.8935 nearly agree. The scale
/// 1/√(σ² + 1e-8) ≈ 217 multiplied the float64 count's shift of μ (|μ|·1e-8/n ≈ 1.4e-8) into
/// 3e-6 on x' ≈ 0.70694 (seen: 0.706940034 vs 0.706941494), past the old 1e-6 relative bound.
#[test]
fn nearly_equal_turns_whiten_as_token_level_gae() {
    let rewards = array![[1.9, 0.0], [1.9, 0.0]];
    let values = array![[-1.0, 7.0], [-0.9935, 7.0]];
    let mask = array![[true, false], [true, false]];
    let batch = RolloutBatch::from_group_keys(&[0u8, 1], &[0.0; 2]).unwrap();
    let input = EstimatorInput::new(&batch)
        .with_token_level_rewards(&rewards)
        .with_values(&values)
        .with_response_mask(&mask);
    let token = EstimatorConfig::Gae(GaeConfig::default().with_discount(0.0).with_gae_lambda(0.0))
        .build()
        .unwrap()
        .estimate(&input)
        .unwrap();
    let turn = EstimatorConfig::TurnGae(
        TurnGaeConfig::default()
            .with_discount(0.0)
            .with_lam(0.0)
            .with_whiten(true),
    )
    .build()
    .unwrap()
    .estimate(&input)
    .unwrap();
    let tol = whitening_tolerance(token.returns(), &values, &mask);
    for r in 0..2 {
        let (a, b) = (turn.advantages[[r, 0]], token.advantages[[r, 0]]);
        assert!((a - b).abs() <= tol, "row {r}: {a} vs {b} (tol {tol})");
        assert!((a.abs() - 0.70694).abs() < 1e-5, "row {r}: {a}");
    }
}
