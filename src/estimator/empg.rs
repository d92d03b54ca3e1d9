//! `empg`: Entropy-Modulated Policy Gradients (Wang et al., arXiv 2509.09265).

use super::grpo::{Grpo, GrpoConfig};
use super::kernel::{check_steps_out, estimate_via_steps, estimate_via_steps_fresh};
use super::{AdvantageEstimator, Advantages, EstimatorInput, Workspace};
use crate::error::{check_len, Error, Range, Result};
use crate::tensor::FloatViewMut;

/// ε of Eqs. 10 and 12 (the authors' 1e-8).
const EPS: f64 = 1e-8;

/// Parameters of `empg`, with the defaults of the authors' pseudocode ([`Default`](Self::default)).
///
/// ```
/// use beacon_rl::estimator::{EmpgConfig, EstimatorConfig};
/// let c = EmpgConfig::default().with_zeta(0.05);
/// assert!(EstimatorConfig::Empg(c).build().is_ok());
/// assert!(EstimatorConfig::Empg(c.with_k(-1.0)).build().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct EmpgConfig {
    /// k of the self-calibrating scaling g (Eq. 10), finite, ≥ 0 (authors: 1).
    pub k: f64,
    /// k_f (the paper's k′) of the future clarity bonus f (Eq. 11), finite, ≥ 0 (authors: 1).
    pub k_f: f64,
    /// ζ, the weight of the future clarity bonus, finite, ≥ 0 (authors' pseudocode: 0.1).
    pub zeta: f64,
    /// The outcome advantage A(i): `grpo` on step rows (default verl's).
    pub grpo: GrpoConfig,
}

impl EmpgConfig {
    /// Checks the parameters.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] unless k, k_f and ζ are finite and ≥ 0 and the GRPO
    /// parameters are valid.
    pub(crate) fn validate(&self) -> Result<()> {
        Range::NON_NEGATIVE.check("k", self.k)?;
        Range::NON_NEGATIVE.check("k_f", self.k_f)?;
        Range::NON_NEGATIVE.check("zeta", self.zeta)?;
        self.grpo.validate()
    }
}

impl Default for EmpgConfig {
    /// The authors' pseudocode defaults: k = 1, k_f = 1, ζ = 0.1, verl's GRPO.
    fn default() -> Self {
        Self {
            k: 1.0,
            k_f: 1.0,
            zeta: 0.1,
            grpo: GrpoConfig::default(),
        }
    }
}

crate::setters::with_setters! {
    EmpgConfig, "use beacon_rl::estimator::{EmpgConfig, GrpoConfig, NormMode};", EmpgConfig::default();
    /// Sets k of the self-calibrating scaling (default 1; finite, ≥ 0).
    with_k(k: f64) = 0.5;
    /// Sets k_f of the future clarity bonus (default 1; finite, ≥ 0).
    with_k_f(k_f: f64) = 2.0;
    /// Sets ζ, the weight of the future clarity bonus (default 0.1; finite, ≥ 0).
    with_zeta(zeta: f64) = 0.05;
    /// Sets the GRPO of the outcome advantage (default [`GrpoConfig::default()`](GrpoConfig::default)).
    with_grpo(grpo: GrpoConfig) = GrpoConfig::default().with_norm(NormMode::MeanNorm);
}

/// `empg`: Entropy-Modulated Policy Gradients (Wang et al., arXiv 2509.09265).
///
/// EMPG re-weights an outcome advantage step by step with the policy's uncertainty at each
/// step. H_{i,t} is step t of trajectory i's mean token entropy (the caller's
/// `step_entropy` column, one value per step row, [`EstimatorInput::with_step_entropy`]);
/// A(i) is the trajectory's outcome advantage; over the N steps of the batch:
///
/// ```text
/// H̃_{i,t}  = (H_{i,t} − min H) / (max H − min H + ε)                  (Eq. 12, batch min/max)
/// g(H_{i,t}) = exp(−k·H̃_{i,t}) / ( (1/N) Σ_{j,t'} exp(−k·H̃_{j,t'}) + ε )  (Eq. 10)
/// f(H_{i,t}) = exp(−k_f·H̃_{i,t})                                       (Eq. 11)
/// A_mod(i,t) = g(H_{i,t})·A(i) + ζ·f(H_{i,t+1})                       (modulated advantage)
/// A_out(i,t) = A_mod(i,t) − (1/N) Σ_{j,t'} A_mod(j,t')                 (final zero-mean step)
/// ```
///
/// with ε = 1e-8. Sources: the paper's Eqs. 10–12 and the authors' pseudocode
/// `compute_empg_advantage` on the project page (<https://empgseed-seed.github.io>) give
/// H̃, g and f with these constants and the defaults k = k_f = 1, ζ = 0.1; the combining
/// equation A_mod = g·A + ζ·f(H_{t+1}) and the final batch-level zero-mean normalisation are
/// the paper's algorithm (restated as Eqs. S21–S23 in the appendix of the ARLArena paper,
/// which re-implements EMPG with ζ = 0.05). The later passes of the pseudocode (the bonus,
/// the final mean) were read in the copy of `compute_empg_advantage` that the ARLArena code
/// carries; its first lines match the project page's.
///
/// # What the paper leaves open, and what the crate chose
/// - **The outcome advantage A(i).** The paper applies EMPG on top of GRPO or DAPO. The crate
///   uses its own `grpo` on step rows ([`Grpo`], configured by [`EmpgConfig::grpo`], verl's
///   defaults: group mean and unbiased σ + 1e-6 over the group's rows), the outcome
///   advantage of the verl-based trainer the authors built on.
/// - **The last step's bonus.** f(H_{i,t+1}) does not exist for a trajectory's last step; the
///   authors' pseudocode adds the bonus only "if there is a next step" of the same
///   trajectory, so the last step gets ζ·0. The crate does the same.
/// - **Scope of min, max and the mean of g.** The batch's steps (Eq. 12 says batch-level;
///   the pseudocode takes them over every step of the batch), not a group's.
/// - **The final normalisation.** The paper says "zero-mean normalisation" of the modulated
///   advantages over the batch; the pseudocode subtracts the mean over steps (one value per
///   step) and divides by nothing. The crate does that: the output's mean over the batch's
///   steps is 0, its scale is not changed.
/// - **Equal entropies.** When every step has the same entropy, H̃ = 0 everywhere, g = 1/(1 +
///   ε) and f = 1 (the ε guards make this defined).
/// - **Parameters.** The paper asks k, k_f > 0 and ζ ≥ 0; the crate accepts k = 0 and
///   k_f = 0 too (then g or f is constant), so that k = 0, ζ = 0 reduces EMPG to the outcome
///   advantage (minus its batch mean, which GRPO's row statistics make 0) divided by 1 + ε.
///
/// # Differences from the authors' pseudocode
/// - The pseudocode as published scales the whole batch's advantage tensor by each step's g
///   in turn (`batch.batch['advantages'] *= g_H[i]`), which the paper's equation does not
///   say; the crate scales each step by its own g, as the equation does.
/// - The pseudocode subtracts the mean from every position of the advantage tensor, masked
///   ones included; the crate writes the step's value on its generated tokens and 0 elsewhere
///   (the masked positions do not enter the loss).
/// - The authors compute in float32; the crate in float64. No code of the authors is public,
///   so there are no parity vectors: the tests are derived by hand from the equations.
///
/// # Input
/// Step rows (one row per step, [`RolloutBatch`](crate::RolloutBatch) built from `uid` and
/// `traj_uid`); steps are ordered within a trajectory by the batch's step order. Refused:
/// a missing `step_entropy` ([`Error::MissingInput`]), one of the wrong length
/// ([`Error::LengthMismatch`]), a non-finite entry ([`Error::NonFinite`]) and a negative
/// one ([`Error::NegativeEntropy`]: a Shannon entropy is ≥ 0, so a negative value is another
/// column, e.g. log-probabilities). On the token path ([`estimate_into`](AdvantageEstimator::estimate_into))
/// each row's value is written on its generated tokens (`response_mask`), 0 elsewhere;
/// without a mask, in one column (rows × 1), as BEACON and GiGPO do. Returns equal the
/// advantages.
///
/// The `empg` estimator.
///
/// ```
/// use beacon_rl::estimator::{AdvantageEstimator, EmpgConfig, EstimatorConfig, EstimatorInput, Workspace};
/// use beacon_rl::RolloutBatch;
/// // One task, trajectories a (2 steps, reward 1) and b (2 steps, reward 0).
/// let batch = RolloutBatch::from_row_keys(&["t"; 4], &["a", "a", "b", "b"], &[1.0, 1.0, 0.0, 0.0])?;
/// let input = EstimatorInput::new(&batch).with_step_entropy(&[1.0, 3.0, 2.0, 1.0]);
/// let mut adv = [0.0; 4];
/// EstimatorConfig::Empg(EmpgConfig::default()).build()?.estimate_steps_into(&input, &mut adv, &mut Workspace::default())?;
/// assert!(adv.iter().sum::<f64>().abs() < 1e-12); // zero mean over the steps
/// assert!(adv[0] > adv[1]); // the confident step of the success gets more credit
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub(crate) struct Empg {
    config: EmpgConfig,
    grpo: Grpo,
}

impl Empg {
    /// Validates `config` and builds the estimator.
    ///
    /// # Errors
    /// As [`EmpgConfig::validate`].
    pub(crate) fn new(config: EmpgConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self {
            config,
            grpo: Grpo::new(config.grpo)?,
        })
    }

    /// The step values into `out` (one per row): GRPO's A, then the modulation in place.
    fn steps(&self, input: &EstimatorInput<'_>, out: &mut [f64], ws: &mut Workspace) -> Result<()> {
        check_steps_out(input, out)?;
        let entropy = entropy_column(input)?;
        self.grpo.estimate_steps_into(input, out, ws)?;
        check_entropy(entropy)?;
        modulate(&self.config, input.batch, entropy, out);
        crate::error::check_finite("advantages", out)
    }
}

/// The `step_entropy` column, present and one entry per step row.
fn entropy_column<'a>(input: &EstimatorInput<'a>) -> Result<&'a [f64]> {
    let entropy = input.step_entropy.ok_or(Error::MissingInput("step_entropy"))?;
    check_len("step_entropy", input.batch.num_steps(), entropy.len())?;
    Ok(entropy)
}

/// Entries finite and ≥ 0, the first offender named.
fn check_entropy(entropy: &[f64]) -> Result<()> {
    crate::error::check_finite("step_entropy", entropy)?;
    match entropy.iter().position(|&h| h < 0.0) {
        None => Ok(()),
        Some(index) => Err(Error::NegativeEntropy {
            index,
            value: entropy[index],
        }),
    }
}

/// `adv` holds A per row on entry and A_out per row on exit (module docs' equations).
fn modulate(c: &EmpgConfig, batch: &crate::RolloutBatch, entropy: &[f64], adv: &mut [f64]) {
    let n = entropy.len();
    if n == 0 {
        return;
    }
    let (lo, hi) = entropy
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &h| {
            (lo.min(h), hi.max(h))
        });
    let scale = hi - lo + EPS;
    let norm = |r: usize| (entropy[r] - lo) / scale;
    let mean_e = (0..n).map(|r| (-c.k * norm(r)).exp()).sum::<f64>() / n as f64;
    let g_den = mean_e + EPS;
    for j in 0..batch.num_trajectories() {
        let rows = batch.trajectory_rows(j);
        for (i, &r) in rows.iter().enumerate() {
            let g = (-c.k * norm(r)).exp() / g_den;
            // The bonus comes from the next step of the same trajectory; the last has none.
            let bonus = rows
                .get(i + 1)
                .map_or(0.0, |&next| c.zeta * (-c.k_f * norm(next)).exp());
            adv[r] = g * adv[r] + bonus;
        }
    }
    let mean = adv.iter().sum::<f64>() / n as f64;
    adv.iter_mut().for_each(|a| *a -= mean);
}

impl AdvantageEstimator for Empg {
    fn name(&self) -> &'static str {
        "empg"
    }

    fn estimate_into(
        &self,
        input: &EstimatorInput<'_>,
        advantages: FloatViewMut<'_>,
        returns: Option<FloatViewMut<'_>>,
        workspace: &mut Workspace,
    ) -> Result<()> {
        // The step buffer is sized by the batch's step count, which a batch may claim without
        // holding it: the entropy column (real memory) must match it first. The values go on
        // each row's generated tokens (one column without a mask); returns equal them.
        estimate_via_steps(
            input,
            advantages,
            returns,
            workspace,
            || entropy_column(input).map(drop),
            |out, ws| self.steps(input, out, ws),
        )
    }

    fn estimate(&self, input: &EstimatorInput<'_>) -> Result<Advantages> {
        // Every input check before the output is allocated (the trait's default sizes its
        // outputs first).
        estimate_via_steps_fresh(
            input,
            || entropy_column(input).map(drop),
            |out, ws| self.steps(input, out, ws),
        )
    }

    fn estimate_steps_into(
        &self,
        input: &EstimatorInput<'_>,
        advantages: &mut [f64],
        workspace: &mut Workspace,
    ) -> Result<()> {
        self.steps(input, advantages, workspace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RolloutBatch;
    use proptest::prelude::*;

    fn run(c: EmpgConfig, batch: &RolloutBatch, entropy: &[f64]) -> Result<Vec<f64>> {
        let input = EstimatorInput::new(batch).with_step_entropy(entropy);
        let mut out = vec![f64::NAN; batch.num_steps()];
        Empg::new(c)?.estimate_steps_into(&input, &mut out, &mut Workspace::default())?;
        Ok(out)
    }

    /// Trajectories a (rows 0, 1; reward 1) and b (rows 2, 3; reward 0) of one task.
    fn two_by_two() -> RolloutBatch {
        RolloutBatch::from_row_keys(&["t"; 4], &["a", "a", "b", "b"], &[1.0, 1.0, 0.0, 0.0]).unwrap()
    }

    #[test]
    fn hand_computed_two_trajectories() {
        // GRPO over the group's rows: scores 1, 1, 0, 0; μ = 0.5, σ = √(4·0.25/3) = √(1/3)
        // = 0.5773503; A = ±0.5 / (0.5773503 + 1e-6) = ±0.8660239.
        // H = 1, 3, 2, 1: min 1, max 3, H̃ = (H − 1)/(2 + 1e-8) = 0, 1, 0.5, 0 (to 5e-9).
        // k = 1: exp(−H̃) = 1, 0.3678794, 0.6065307, 1; mean 0.7436025;
        // g = 1.3448045, 0.4947259, 0.8156651, 1.3448045.
        // k_f = 2: f = exp(−2H̃) = 1, 0.1353353, 0.3678794, 1. ζ = 0.1.
        // A_mod: row 0 = 1.3448045·0.8660239 + 0.1·f(row 1) = 1.1646328 + 0.0135335 = 1.1781663
        //        row 1 = 0.4947259·0.8660239 + 0 (last step)            = 0.4284445
        //        row 2 = 0.8156651·(−0.8660239) + 0.1·f(row 3) = −0.7063855 + 0.1 = −0.6063855
        //        row 3 = 1.3448045·(−0.8660239) + 0                      = −1.1646328
        // mean = −0.0411019; A_out = A_mod + 0.0411019.
        let c = EmpgConfig::default().with_k_f(2.0);
        let out = run(c, &two_by_two(), &[1.0, 3.0, 2.0, 1.0]).unwrap();
        let want = [1.2192682, 0.4695463, -0.5652836, -1.1235309];
        for (o, w) in out.iter().zip(want) {
            assert!((o - w).abs() < 1e-6, "{out:?}");
        }
    }

    #[test]
    fn the_bonus_follows_the_step_order_not_the_row_order() {
        // Rows in caller order: 0 (trajectory b, one step), 1 (a, step 0), 2 (a, step 1).
        // k = 0 makes g = 1/(1 + 1e-8) ≈ 1. A = GRPO of scores 0, 1, 1: μ = 2/3,
        // σ = √((4/9 + 1/9 + 1/9)/2) = √(1/3); A = (−2/3, 1/3, 1/3)/(√(1/3) + 1e-6)
        // = −1.1546985, 0.5773493, 0.5773493.
        // H = 0, 0, 2: H̃ = 0, 0, 1; k_f = 1: f = 1, 1, e^−1 = 0.3678794. ζ = 1.
        // A_mod = −1.1546985 + 0 (b's only step is its last), 0.5773493 + f(row 2),
        // 0.5773493 + 0 (last step); mean = 0.3678794/3 = 0.1226265;
        // A_out = −1.2773250, 0.8226022, 0.4547228.
        let batch = RolloutBatch::from_row_keys(&["t"; 3], &["b", "a", "a"], &[0.0, 1.0, 1.0]).unwrap();
        let c = EmpgConfig::default().with_k(0.0).with_zeta(1.0);
        let out = run(c, &batch, &[0.0, 0.0, 2.0]).unwrap();
        let want = [-1.2773250, 0.8226022, 0.4547228];
        for (o, w) in out.iter().zip(want) {
            assert!((o - w).abs() < 1e-5, "{out:?}");
        }
    }

    #[test]
    fn equal_entropies_leave_grpo_scaled_by_one_over_one_plus_eps() {
        // H̃ = 0 everywhere: g = 1/(1 + 1e-8), f = 1; ζ = 0: A_out = A/(1 + 1e-8) − mean = A.
        let c = EmpgConfig::default().with_zeta(0.0);
        let out = run(c, &two_by_two(), &[0.7; 4]).unwrap();
        let a = 0.5 / ((1.0f64 / 3.0).sqrt() + 1e-6) / (1.0 + 1e-8);
        for (o, w) in out.iter().zip([a, a, -a, -a]) {
            assert!((o - w).abs() < 1e-12, "{out:?}");
        }
    }

    #[test]
    fn bad_entropy_is_a_typed_error() {
        let b = two_by_two();
        let c = EmpgConfig::default();
        let input = EstimatorInput::new(&b);
        let mut out = [0.0; 4];
        let err = Empg::new(c)
            .unwrap()
            .estimate_steps_into(&input, &mut out, &mut Workspace::default());
        assert_eq!(err, Err(Error::MissingInput("step_entropy")));
        assert!(matches!(
            run(c, &b, &[1.0; 3]),
            Err(Error::LengthMismatch {
                what: "step_entropy",
                expected: 4,
                actual: 3
            })
        ));
        assert!(matches!(
            run(c, &b, &[1.0, f64::NAN, 1.0, 1.0]),
            Err(Error::NonFinite {
                what: "step_entropy",
                index: 1,
                ..
            })
        ));
        assert!(matches!(
            run(c, &b, &[1.0, 1.0, f64::INFINITY, 1.0]),
            Err(Error::NonFinite {
                what: "step_entropy",
                index: 2,
                ..
            })
        ));
        assert_eq!(
            run(c, &b, &[1.0, 1.0, 1.0, -0.5]),
            Err(Error::NegativeEntropy {
                index: 3,
                value: -0.5
            })
        );
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            assert!(Empg::new(c.with_k(bad)).is_err());
            assert!(Empg::new(c.with_k_f(bad)).is_err());
            assert!(Empg::new(c.with_zeta(bad)).is_err());
        }
    }

    #[test]
    fn token_path_writes_each_step_on_its_generated_tokens() {
        let b = two_by_two();
        let h = [1.0, 3.0, 2.0, 1.0];
        let steps = run(EmpgConfig::default(), &b, &h).unwrap();
        let input = EstimatorInput::new(&b).with_step_entropy(&h).with_response_mask(
            crate::tensor::MaskView::Lengths {
                lengths: &[2, 1, 0, 3],
                cols: 3,
            },
        );
        let out = Empg::new(EmpgConfig::default())
            .unwrap()
            .estimate(&input)
            .unwrap();
        assert_eq!(out.advantages.row(0).to_vec(), vec![steps[0], steps[0], 0.0]);
        assert_eq!(out.advantages.row(1).to_vec(), vec![steps[1], 0.0, 0.0]);
        assert_eq!(out.advantages.row(2).to_vec(), vec![0.0; 3]);
        assert_eq!(out.advantages.row(3).to_vec(), vec![steps[3]; 3]);
        // Without a mask: one column, each row's value; a wider buffer is refused.
        let no_mask = EstimatorInput::new(&b).with_step_entropy(&h);
        let est = Empg::new(EmpgConfig::default()).unwrap();
        let mut col = ndarray::Array2::<f64>::zeros((4, 1));
        est.estimate_into(&no_mask, (&mut col).into(), None, &mut Workspace::default())
            .unwrap();
        assert_eq!(col.column(0).to_vec(), steps);
        let mut adv = ndarray::Array2::<f64>::zeros((4, 3));
        let err = est.estimate_into(&no_mask, (&mut adv).into(), None, &mut Workspace::default());
        assert_eq!(
            err,
            Err(Error::OutputShape {
                what: "advantages",
                expected: (4, 1),
                actual: (4, 3)
            })
        );
    }

    /// A batch of `lens.len()` trajectories in one or two groups, with rewards and entropies.
    fn batch_strategy() -> impl Strategy<Value = (RolloutBatch, Vec<f64>)> {
        prop::collection::vec((1usize..4, 0u8..2, prop::bool::ANY), 2..6).prop_flat_map(|trajs| {
            let rows: usize = trajs.iter().map(|t| t.0).sum();
            let (mut g, mut tk, mut rw) = (vec![], vec![], vec![]);
            for (j, &(len, group, win)) in trajs.iter().enumerate() {
                for _ in 0..len {
                    g.push(group);
                    tk.push(j);
                    rw.push(f64::from(u8::from(win)));
                }
            }
            let batch = RolloutBatch::from_row_keys(&g, &tk, &rw).unwrap();
            (Just(batch), prop::collection::vec(0.0f64..5.0, rows))
        })
    }

    proptest! {
        #[test]
        fn k_and_zeta_zero_reduce_to_grpo((batch, h) in batch_strategy()) {
            // g = 1/(1 + ε) on every step, no bonus; GRPO's row statistics give mean 0.
            let c = EmpgConfig::default().with_k(0.0).with_zeta(0.0);
            let out = run(c, &batch, &h).unwrap();
            let mut grpo = vec![0.0; batch.num_steps()];
            Grpo::new(GrpoConfig::default()).unwrap()
                .estimate_steps_into(&EstimatorInput::new(&batch), &mut grpo, &mut Workspace::default()).unwrap();
            let mean = grpo.iter().sum::<f64>() / grpo.len() as f64;
            for (o, a) in out.iter().zip(&grpo) {
                prop_assert!((o - (a - mean) / (1.0 + EPS)).abs() < 1e-9, "{out:?} {grpo:?}");
            }
        }

        #[test]
        fn output_has_zero_mean_and_ignores_an_entropy_shift(
            (batch, h) in batch_strategy(), shift in 0.0f64..3.0, k in 0.0f64..3.0, zeta in 0.0f64..1.0,
        ) {
            // Eq. 12 subtracts the batch minimum, so adding a constant to every H changes
            // nothing (up to rounding); the final step makes the mean over steps 0.
            let c = EmpgConfig::default().with_k(k).with_zeta(zeta);
            let out = run(c, &batch, &h).unwrap();
            let shifted: Vec<f64> = h.iter().map(|x| x + shift).collect();
            let out2 = run(c, &batch, &shifted).unwrap();
            prop_assert!(out.iter().sum::<f64>().abs() < 1e-9);
            for (a, b) in out.iter().zip(&out2) {
                prop_assert!((a - b).abs() < 1e-6, "{out:?} {out2:?}");
            }
        }
    }
}
