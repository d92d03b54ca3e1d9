//! `turn_gae` against token-level GAE where the two coincide, and across layouts.
//!
//! With one generated token per turn and the turns separated by observation tokens, verl's
//! token-level GAE (which skips mask-0 tokens, verl ≥ 0.9) runs exactly the turn recursion,
//! so `turn_gae` with whitening must equal the crate's `gae` (verl's parity-tested
//! `compute_gae_advantage_return`) on every generated token: advantages within 1e-6 relative
//! (verl's whitening takes the token count and Bessel factor in float32, `turn_gae` in
//! float64), returns within 1e-12.

use beacon_rl::estimator::{
    AdvantageEstimator, EstimatorInput, Gae, GaeConfig, TurnGae, TurnGaeConfig, Workspace,
};
use beacon_rl::RolloutBatch;
use ndarray::Array2;
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
        let token = Gae::new(GaeConfig::verl().with_discount(gamma).with_gae_lambda(lam)).unwrap().estimate(&input).unwrap();
        let turn = TurnGae::new(TurnGaeConfig::verl().with_discount(gamma).with_lam(lam).with_whiten(true))
            .unwrap()
            .estimate(&input)
            .unwrap();
        for ((r, t), &m) in mask.indexed_iter() {
            if !m {
                prop_assert_eq!(turn.advantages[[r, t]], 0.0);
                continue;
            }
            let (a, b) = (turn.advantages[[r, t]], token.advantages[[r, t]]);
            prop_assert!((a - b).abs() <= 1e-6 * b.abs().max(1.0), "adv ({}, {}): {} vs {}", r, t, a, b);
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
        let est = TurnGae::new(TurnGaeConfig::verl().with_discount(gamma).with_lam(lam)).unwrap();
        let mut adv = vec![f64::NAN; sr.len()];
        est.estimate_steps_into(&EstimatorInput::new(&steps).with_step_rewards(&sr).with_turn_values(&tv), &mut adv, &mut Workspace::new()).unwrap();
        let plain = est.estimate(&input).unwrap();
        for (a, &(r, t)) in adv.iter().zip(&at) {
            prop_assert!((a - plain.advantages[[r, t]]).abs() <= 1e-12 * a.abs().max(1.0));
        }
    }
}
