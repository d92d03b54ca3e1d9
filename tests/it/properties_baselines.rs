//! Property tests of verl's baseline estimators.

use beacon_rl::estimator::{
    AdvantageEstimator, Advantages, EstimatorConfig, EstimatorInput, GaeConfig, GrpoConfig, NormMode,
    OptimalTokenBaselineConfig, ReinforcePlusPlusConfig,
};
use beacon_rl::{Error, RolloutBatch};
use ndarray::Array2;
use proptest::prelude::*;

/// One single-turn batch: rows in caller order with their group key and token columns.
#[derive(Debug, Clone)]
struct Case {
    uids: Vec<u32>,
    rewards: Array2<f64>,
    mask: Array2<bool>,
    values: Array2<f64>,
    log_probs: Array2<f64>,
    sum_pi_sq: Array2<f64>,
    baselines: Vec<f64>,
}

impl Case {
    fn rows(&self) -> usize {
        self.uids.len()
    }

    fn batch(&self) -> RolloutBatch {
        // verl's estimators read scores from token_level_rewards, not the batch's rewards.
        RolloutBatch::from_group_keys(&self.uids, &vec![0.0; self.rows()]).expect("valid batch")
    }

    fn run(&self, est: &dyn AdvantageEstimator) -> Result<Advantages, Error> {
        let batch = self.batch();
        let input = EstimatorInput::new(&batch)
            .with_token_level_rewards(&self.rewards)
            .with_response_mask(&self.mask)
            .with_values(&self.values)
            .with_old_log_probs(&self.log_probs)
            .with_sum_pi_squared(&self.sum_pi_sq)
            .with_reward_baselines(&self.baselines);
        est.estimate(&input)
    }

    /// The same rows in the order `perm` (new row i = old row perm[i]).
    fn permuted(&self, perm: &[usize]) -> Case {
        let take = |m: &Array2<f64>| m.select(ndarray::Axis(0), perm);
        Case {
            uids: perm.iter().map(|&i| self.uids[i]).collect(),
            rewards: take(&self.rewards),
            mask: self.mask.select(ndarray::Axis(0), perm),
            values: take(&self.values),
            log_probs: take(&self.log_probs),
            sum_pi_sq: take(&self.sum_pi_sq),
            baselines: perm.iter().map(|&i| self.baselines[i]).collect(),
        }
    }
}

/// Groups of `min_group..=5` rows, 1..=4 groups, L in 1..=6, rows interleaved across groups.
/// `prefix_masks`: masks are 1…1 0…0 with at least one generated token.
fn case_strategy(min_group: usize, prefix_masks: bool) -> impl Strategy<Value = Case> {
    (prop::collection::vec(min_group..=5usize, 1..=4), 1..=6usize).prop_flat_map(move |(sizes, cols)| {
        let rows: usize = sizes.iter().sum();
        let cells = rows * cols;
        (
            Just(sizes),
            Just(cols),
            prop::collection::vec(-5.0..5.0f64, cells),
            prop::collection::vec(any::<bool>(), cells),
            prop::collection::vec(1..=cols, rows),
            prop::collection::vec(-3.0..3.0f64, cells),
            prop::collection::vec(-6.0..0.0f64, cells),
            prop::collection::vec(0.0..1.0f64, cells),
            prop::collection::vec(-1.0..1.0f64, rows),
            prop::collection::vec(any::<u32>(), rows),
        )
            .prop_map(
                move |(sizes, cols, rewards, mask_bits, lens, values, log_probs, spsq, baselines, order)| {
                    let mut uids: Vec<u32> = sizes
                        .iter()
                        .enumerate()
                        .flat_map(|(g, &n)| std::iter::repeat_n(g as u32, n))
                        .collect();
                    // Interleave groups: sort rows by a random key.
                    let mut idx: Vec<usize> = (0..uids.len()).collect();
                    idx.sort_by_key(|&i| order[i]);
                    uids = idx.iter().map(|&i| uids[i]).collect();
                    let rows = uids.len();
                    let mask = if prefix_masks {
                        Array2::from_shape_fn((rows, cols), |(r, t)| t < lens[r])
                    } else {
                        Array2::from_shape_vec((rows, cols), mask_bits).unwrap()
                    };
                    Case {
                        uids,
                        rewards: Array2::from_shape_vec((rows, cols), rewards).unwrap(),
                        mask,
                        values: Array2::from_shape_vec((rows, cols), values).unwrap(),
                        log_probs: Array2::from_shape_vec((rows, cols), log_probs).unwrap(),
                        sum_pi_sq: Array2::from_shape_vec((rows, cols), spsq).unwrap(),
                        baselines,
                    }
                },
            )
    })
}

/// Every verl estimator with default parameters plus a few non-default ones.
fn all_estimators() -> Vec<Box<dyn AdvantageEstimator>> {
    let mut v: Vec<Box<dyn AdvantageEstimator>> = EstimatorConfig::VERL_NAMES
        .iter()
        .map(|n| n.parse::<EstimatorConfig>().unwrap().build().unwrap())
        .collect();
    v.push(
        EstimatorConfig::Gae(GaeConfig::default().with_discount(0.99).with_gae_lambda(0.95))
            .build()
            .unwrap(),
    );
    v.push(
        EstimatorConfig::ReinforcePlusPlus(ReinforcePlusPlusConfig::default().with_discount(0.9))
            .build()
            .unwrap(),
    );
    v.push(
        EstimatorConfig::Grpo(GrpoConfig::default().with_norm(NormMode::MeanNorm))
            .build()
            .unwrap(),
    );
    v
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * a.abs().max(b.abs()).max(1.0)
}

/// Group ids of the rows, and the per-row scalar of an outcome estimator (value at its first
/// masked token, or None when the row has none).
fn scalars(case: &Case, out: &Advantages) -> Vec<Option<f64>> {
    (0..case.rows())
        .map(|r| {
            (0..case.mask.ncols())
                .find(|&t| case.mask[[r, t]])
                .map(|t| out.advantages[[r, t]])
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// No estimator panics on finite input; it returns finite outputs of the right shape or a
    /// typed error (e.g. Undefined for < 2 masked tokens, a passk singleton).
    #[test]
    fn no_panic_and_finite_or_typed_error(case in case_strategy(1, false)) {
        for est in all_estimators() {
            match case.run(est.as_ref()) {
                Ok(out) => {
                    prop_assert_eq!(out.advantages.dim(), case.rewards.dim());
                    prop_assert_eq!(out.returns().dim(), case.rewards.dim());
                    prop_assert!(out.advantages.iter().chain(out.returns().iter()).all(|x| x.is_finite()), "{}", est.name());
                }
                Err(Error::Undefined(_)) => {}
                Err(e) => prop_assert!(false, "{}: unexpected error {e}", est.name()),
            }
        }
    }

    /// Huge finite inputs never yield NaN/inf silently: either finite outputs or an error.
    #[test]
    fn huge_inputs_never_yield_silent_non_finite(case in case_strategy(1, false), scale in prop::sample::select(vec![1e150, 1e300, f64::MAX])) {
        let mut big = case.clone();
        big.rewards.mapv_inplace(|x| x / 5.0 * scale);
        big.values.mapv_inplace(|x| x / 3.0 * scale);
        for est in all_estimators() {
            if let Ok(out) = big.run(est.as_ref()) {
                prop_assert!(out.advantages.iter().chain(out.returns().iter()).all(|x| x.is_finite()), "{}", est.name());
            }
        }
    }

    /// Output mapped back to rows is invariant to permuting the rows (group estimators, the
    /// batch-whitened ones and the token-level ones alike).
    #[test]
    fn permuting_rows_permutes_outputs(case in case_strategy(1, false), keys in prop::collection::vec(any::<u32>(), 25)) {
        let mut perm: Vec<usize> = (0..case.rows()).collect();
        perm.sort_by_key(|&i| keys[i % keys.len()].wrapping_add(i as u32));
        let shuffled = case.permuted(&perm);
        for est in all_estimators() {
            // float32 group statistics depend on accumulation order (by design, like verl).
            let tol = if est.name() == "grpo_vectorized" { 1e-2 } else { 1e-9 };
            match (case.run(est.as_ref()), shuffled.run(est.as_ref())) {
                (Ok(a), Ok(b)) => {
                    for (i, &old) in perm.iter().enumerate() {
                        for t in 0..case.rewards.ncols() {
                            for (x, y) in [(a.advantages[[old, t]], b.advantages[[i, t]]), (a.returns()[[old, t]], b.returns()[[i, t]])] {
                                prop_assert!(close(x, y, tol), "{}: row {old} token {t}: {x} vs {y}", est.name());
                            }
                        }
                    }
                }
                (Err(_), Err(_)) => {}
                (a, b) => prop_assert!(false, "{}: {:?} vs {:?}", est.name(), a.err(), b.err()),
            }
        }
    }

    /// GRPO advantages of a group sum to ~0 when the group's scores are not all equal.
    #[test]
    fn grpo_group_advantages_sum_to_zero(case in case_strategy(2, true)) {
        let out = case.run(&EstimatorConfig::Grpo(GrpoConfig::default()).build().unwrap()).unwrap();
        let s = scalars(&case, &out);
        let scores: Vec<f64> = case.rewards.rows().into_iter().map(|r| r.sum()).collect();
        for g in 0..5u32 {
            let rows: Vec<usize> = (0..case.rows()).filter(|&r| case.uids[r] == g).collect();
            if rows.is_empty() {
                continue;
            }
            let spread = rows.iter().map(|&r| scores[r]).fold(f64::NEG_INFINITY, f64::max)
                - rows.iter().map(|&r| scores[r]).fold(f64::INFINITY, f64::min);
            if spread > 1e-6 {
                let total: f64 = rows.iter().map(|&r| s[r].unwrap()).sum();
                prop_assert!(total.abs() < 1e-9, "group {g}: sum {total}");
            }
        }
    }

    /// Adding a constant to every reward of a group leaves GRPO, Dr.GRPO, RLOO and
    /// rloo_vectorized unchanged for groups of ≥ 2 rows.
    #[test]
    fn shift_invariance_within_groups(case in case_strategy(2, true), shifts in prop::collection::vec(-3.0..3.0f64, 5)) {
        let mut shifted = case.clone();
        for r in 0..case.rows() {
            // Put the shift on the last token: outcome scores sum all positions.
            let last = case.rewards.ncols() - 1;
            shifted.rewards[[r, last]] += shifts[case.uids[r] as usize];
        }
        let ests: Vec<Box<dyn AdvantageEstimator>> = vec![
            EstimatorConfig::Grpo(GrpoConfig::default()).build().unwrap(),
            EstimatorConfig::Grpo(GrpoConfig::default().with_norm(NormMode::MeanNorm)).build().unwrap(),
            EstimatorConfig::Rloo.build().unwrap(),
            EstimatorConfig::RlooVectorized.build().unwrap(),
        ];
        for est in ests {
            let a = case.run(est.as_ref()).unwrap();
            let b = shifted.run(est.as_ref()).unwrap();
            for (x, y) in a.advantages.iter().zip(b.advantages.iter()) {
                // GRPO divides rounding noise by σ + 1e-6; tolerate it for near-equal groups.
                prop_assert!((x - y).abs() < 1e-6, "{}: {x} vs {y}", est.name());
            }
        }
    }

    /// RLOO and rloo_vectorized agree on groups of ≥ 2 rows: n/(n−1)·(s − μ) both ways.
    #[test]
    fn rloo_variants_agree_without_singletons(case in case_strategy(2, false)) {
        let a = case.run(&*EstimatorConfig::Rloo.build().unwrap()).unwrap();
        let b = case.run(&*EstimatorConfig::RlooVectorized.build().unwrap()).unwrap();
        for (x, y) in a.advantages.iter().zip(b.advantages.iter()) {
            prop_assert!(close(*x, *y, 1e-12), "{x} vs {y}");
        }
    }

    /// passk: at most one nonzero row per group, and it holds the group's maximum score.
    #[test]
    fn passk_rewards_only_the_best_row(case in case_strategy(2, true)) {
        let out = case.run(&*EstimatorConfig::GrpoPassk(GrpoConfig::default()).build().unwrap()).unwrap();
        let s = scalars(&case, &out);
        let scores: Vec<f64> = case.rewards.rows().into_iter().map(|r| r.sum()).collect();
        for g in 0..5u32 {
            let rows: Vec<usize> = (0..case.rows()).filter(|&r| case.uids[r] == g).collect();
            let nonzero: Vec<usize> = rows.iter().copied().filter(|&r| s[r].unwrap() != 0.0).collect();
            prop_assert!(nonzero.len() <= 1);
            if let Some(&r) = nonzero.first() {
                let best = rows.iter().map(|&i| scores[i]).fold(f64::NEG_INFINITY, f64::max);
                prop_assert_eq!(scores[r], best);
                prop_assert!(s[r].unwrap() > 0.0);
            }
        }
    }

    /// With γ = λ = 1 and prefix masks, GAE's δ telescope: returns = reward-to-go on every
    /// generated token, whatever the values; it equals REINFORCE++(γ = 1) and ReMax returns.
    #[test]
    fn gae_returns_telescope_to_reward_to_go(case in case_strategy(1, true)) {
        let gae = case.run(&EstimatorConfig::Gae(GaeConfig::default()).build().unwrap());
        let rfpp = case.run(&EstimatorConfig::ReinforcePlusPlus(ReinforcePlusPlusConfig::default()).build().unwrap());
        let remax = case.run(&*EstimatorConfig::Remax.build().unwrap()).unwrap();
        if let (Ok(gae), Ok(rfpp)) = (gae, rfpp) {
            for ((r, t), &m) in case.mask.indexed_iter() {
                if m {
                    prop_assert!(close(gae.returns()[[r, t]], remax.returns()[[r, t]], 1e-9));
                    prop_assert!(close(rfpp.returns()[[r, t]], remax.returns()[[r, t]], 1e-9));
                }
            }
        }
    }

    /// Batch whitening (GAE, REINFORCE++, REINFORCE++-baseline, GDPO): masked advantages have
    /// mean ~0 and unbiased variance at most 1. How close to 1 depends on the raw variance,
    /// which these outputs do not expose; a unit test of `whiten` checks that law.
    #[test]
    fn whitened_outputs_are_standardized(case in case_strategy(1, false)) {
        for name in ["gae", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "gdpo"] {
            let est = name.parse::<EstimatorConfig>().unwrap().build().unwrap();
            let Ok(out) = case.run(est.as_ref()) else { continue };
            let vals: Vec<f64> = out.advantages.iter().zip(case.mask.iter()).filter(|&(_, &m)| m).map(|(&x, _)| x).collect();
            let n = vals.len() as f64;
            let mean = vals.iter().sum::<f64>() / n;
            let var = vals.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0);
            prop_assert!(mean.abs() < 1e-6, "{name}: mean {mean}");
            // var = σ²/(σ² + 1e-8) (times the f32 Bessel rounding): 1, unless σ² is tiny.
            prop_assert!(var < 1.0 + 1e-6, "{name}: var {var}");
        }
    }

    /// Prefix masks (no interior gaps): the TIR variant lines tokens up exactly like the
    /// column-wise optimal token baseline.
    #[test]
    fn tir_equals_otb_without_gaps(case in case_strategy(1, true)) {
        let cfg = OptimalTokenBaselineConfig::default();
        let a = case.run(&EstimatorConfig::OptimalTokenBaseline(cfg).build().unwrap()).unwrap();
        let b = case.run(&*EstimatorConfig::TirOptimalTokenBaseline(cfg).build().unwrap()).unwrap();
        for (x, y) in a.advantages.iter().zip(b.advantages.iter()) {
            prop_assert!(close(*x, *y, 1e-12), "{x} vs {y}");
        }
        prop_assert_eq!(a.returns, b.returns);
    }

    /// Outcome estimators put exactly 0 on tokens outside the response mask.
    #[test]
    fn outcome_estimators_are_zero_off_mask(case in case_strategy(1, false)) {
        for name in ["grpo", "grpo_vectorized", "rloo", "rloo_vectorized", "opo", "gpg", "gdpo", "reinforce_plus_plus_baseline", "optimal_token_baseline", "tir_optimal_token_baseline"] {
            let est = name.parse::<EstimatorConfig>().unwrap().build().unwrap();
            let Ok(out) = case.run(est.as_ref()) else { continue };
            for ((r, t), &m) in case.mask.indexed_iter() {
                if !m {
                    prop_assert_eq!(out.advantages[[r, t]], 0.0, "{} row {} token {}", name, r, t);
                }
            }
        }
    }
}
