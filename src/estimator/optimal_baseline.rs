//! Optimal token baseline (OTB): `optimal_token_baseline` and `tir_optimal_token_baseline`.
//!
//! Instead of one baseline per response, OTB gives every token position its own baseline,
//! weighted by a cumulative path-variance proxy:
//!
//! ```text
//! G_{i,t} = Σ_{t' ≥ t} r_{i,t'} · mask_{i,t'}                         (returns, reward-to-go)
//! w_{i,t} = (1 − 2·π_{i,t} + Σπ²_{i,t}) · ρ̄²_{i,t}                    (π = exp(old_log_probs);
//!                                                                       ρ̄ = rollout IS weight, 1 if absent)
//! W_{i,t} = Σ_{t' ≤ t} w_{i,t'} · mask_{i,t'}
//! B_t     = Σ_{i∈g} G_{i,t} W_{i,t} mask_{i,t} / (Σ_{i∈g} W_{i,t} mask_{i,t} + ε)
//! A_{i,t} = (G_{i,t} − B_t) · mask_{i,t}
//! ```
//!
//! ε = `denominator_eps` (1e-8). A group of one row has no baseline (A = G · mask).
//!
//! - `optimal_token_baseline` ([`OptimalTokenBaseline`], verl
//!   `compute_optimal_token_baseline_advantage`): positions t are **columns** of the padded
//!   matrix.
//! - `tir_optimal_token_baseline` (`EstimatorConfig::TirOptimalTokenBaseline`, verl
//!   `compute_multi_turn_optimal_token_baseline_advantage`): positions are the k-th
//!   **generated token** of each row (mask-0 tokens are squeezed out before the group
//!   statistics and the result is scattered back), so multi-turn rows with observation spans
//!   at different places still line up; rows with no generated token leave their group.
//!
//! With [`ZeroTail::ZeroBaseline`] (verl `handle_zero_tail = True`, the default), when exactly
//! one row of a group is the longest (length = number of masked tokens) and strictly longer
//! than the second longest ℓ₂, that row's baseline is 0 at positions ≥ ℓ₂ (no other row
//! estimates it there).
//!
//! # Peer behaviour reproduced
//! - `returns` are not re-masked: at a mask-0 position inside a response they hold the
//!   reward-to-go of the later masked tokens.
//! - In `optimal_token_baseline` the zero tail starts at **column** ℓ₂ even when the row has
//!   interior mask-0 gaps (ℓ₂ counts tokens, not columns).
//!
//! No deliberate difference from verl.

mod advantage;

use super::whiten::FiniteAcc;
use super::{report_non_finite_input, EstimatorInput, FiniteCheck, InputBufs, Tokens};
use crate::error::{check_finite, Error, Range, Result};

/// What to do with the tail of a group's unique longest row (verl's `handle_zero_tail`).
///
/// ```
/// use beacon_rl::estimator::ZeroTail;
/// assert_eq!(ZeroTail::default(), ZeroTail::ZeroBaseline);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum ZeroTail {
    /// Baseline 0 past the second-longest row's length (verl `handle_zero_tail = True`).
    #[default]
    ZeroBaseline,
    /// Keep the group baseline everywhere (verl `handle_zero_tail = False`).
    KeepBaseline,
}

/// Parameters of `optimal_token_baseline` and `tir_optimal_token_baseline`.
///
/// ```
/// use beacon_rl::estimator::{EstimatorConfig, OptimalTokenBaselineConfig, ZeroTail};
/// let c = OptimalTokenBaselineConfig::default();
/// assert_eq!((c.zero_tail, c.denominator_eps), (ZeroTail::ZeroBaseline, 1e-8));
/// assert!(EstimatorConfig::OptimalTokenBaseline(c.with_denominator_eps(0.0)).build().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct OptimalTokenBaselineConfig {
    /// Tail handling of the unique longest row (default [`ZeroTail::ZeroBaseline`]).
    pub zero_tail: ZeroTail,
    /// ε added to the baseline's denominator Σ W (verl `epsilon`, default 1e-8); finite, > 0.
    pub denominator_eps: f64,
}

impl OptimalTokenBaselineConfig {
    /// Checks the parameters.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) unless `denominator_eps` is finite
    /// and > 0.
    pub(crate) fn validate(&self) -> Result<()> {
        Range::POSITIVE.check("denominator_eps", self.denominator_eps)
    }
}

impl Default for OptimalTokenBaselineConfig {
    /// verl's defaults: `handle_zero_tail = True`, `epsilon = 1e-8`.
    fn default() -> Self {
        Self {
            zero_tail: ZeroTail::ZeroBaseline,
            denominator_eps: 1e-8,
        }
    }
}

crate::setters::with_setters! {
    OptimalTokenBaselineConfig, "use beacon_rl::estimator::{OptimalTokenBaselineConfig, ZeroTail};", OptimalTokenBaselineConfig::default();
    /// Sets the tail handling of the unique longest row (default [`ZeroTail::ZeroBaseline`]).
    with_zero_tail(zero_tail: ZeroTail) = ZeroTail::KeepBaseline;
    /// Sets ε added to the baseline's denominator (default 1e-8; finite, > 0).
    with_denominator_eps(denominator_eps: f64) = 1e-6;
}

/// verl's `optimal_token_baseline` (see the module docs (`src/estimator/optimal_baseline.rs`)). Needs
/// `token_level_rewards`, `response_mask`, `old_log_probs` and `sum_pi_squared`;
/// `rollout_is_weights` is optional.
///
/// ```
/// use beacon_rl::estimator::{EstimatorConfig, OptimalTokenBaselineConfig};
/// use beacon_rl::estimator::{AdvantageEstimator, EstimatorInput};
/// use beacon_rl::RolloutBatch;
/// let batch = RolloutBatch::from_group_keys(&[0, 0], &[0.0; 2])?;
/// let rewards = [[0.0, 1.0], [0.0, 0.0]];
/// let mask = [[true, true], [true, true]];
/// let log_probs = [[0.5f64.ln(); 2]; 2]; // π = 0.5
/// let sum_pi_sq = [[0.5; 2]; 2]; // w = 1 − 1 + 0.5 = 0.5 everywhere
/// let input = EstimatorInput::new(&batch)
///     .with_token_level_rewards(&rewards)
///     .with_response_mask(&mask)
///     .with_old_log_probs(&log_probs)
///     .with_sum_pi_squared(&sum_pi_sq);
/// let out = EstimatorConfig::OptimalTokenBaseline(OptimalTokenBaselineConfig::default()).build()?.estimate(&input)?;
/// // Equal weights: B_t = mean return = 0.5 (up to ε), so A = ±0.5.
/// assert!((out.advantages[[0, 0]] - 0.5).abs() < 1e-7);
/// assert!((out.advantages[[1, 1]] + 0.5).abs() < 1e-7);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
///
/// Built through [`EstimatorConfig`](crate::estimator::EstimatorConfig), as every estimator is;
/// `tir_optimal_token_baseline` takes the same [`OptimalTokenBaselineConfig`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct OptimalTokenBaseline {
    config: OptimalTokenBaselineConfig,
}

impl OptimalTokenBaseline {
    /// Validates the parameters and builds the estimator.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) when `config` is out of range.
    ///
    /// ```
    /// use beacon_rl::estimator::{EstimatorConfig, OptimalTokenBaselineConfig};
    /// assert!(EstimatorConfig::OptimalTokenBaseline(OptimalTokenBaselineConfig::default()).build().is_ok());
    /// ```
    pub(crate) fn new(config: OptimalTokenBaselineConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self { config })
    }
}

/// verl's `tir_optimal_token_baseline` (see the module docs (`src/estimator/optimal_baseline.rs`)). Needs
/// `token_level_rewards`, `response_mask`, `old_log_probs` and `sum_pi_squared`;
/// `rollout_is_weights` is optional.
///
/// ```
/// use beacon_rl::estimator::{EstimatorConfig, OptimalTokenBaselineConfig};
/// use beacon_rl::estimator::{AdvantageEstimator, EstimatorInput};
/// use beacon_rl::RolloutBatch;
/// let batch = RolloutBatch::from_group_keys(&[0, 0], &[0.0; 2])?;
/// // Row 0 has an observation token at column 1; both rows generate 2 tokens.
/// let rewards = [[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]];
/// let mask = [[true, false, true], [true, true, false]];
/// let log_probs = [[0.5f64.ln(); 3]; 2];
/// let sum_pi_sq = [[0.5; 3]; 2];
/// let input = EstimatorInput::new(&batch)
///     .with_token_level_rewards(&rewards)
///     .with_response_mask(&mask)
///     .with_old_log_probs(&log_probs)
///     .with_sum_pi_squared(&sum_pi_sq);
/// let out = EstimatorConfig::TirOptimalTokenBaseline(OptimalTokenBaselineConfig::default()).build()?.estimate(&input)?;
/// // Generated tokens line up by their index k: B_k = 0.5, A = ±0.5; observation stays 0.
/// assert!((out.advantages[[0, 2]] - 0.5).abs() < 1e-7);
/// assert_eq!(out.advantages[[0, 1]], 0.0);
/// assert!((out.advantages[[1, 1]] + 0.5).abs() < 1e-7);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
/// (Built through `EstimatorConfig`; it shares [`OptimalTokenBaseline`]'s parameters.)
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct TirOptimalTokenBaseline {
    config: OptimalTokenBaselineConfig,
}

impl TirOptimalTokenBaseline {
    /// Validates the parameters ([`Error::InvalidConfig`](crate::Error::InvalidConfig) when out
    /// of range) and builds the estimator.
    pub(crate) fn new(config: OptimalTokenBaselineConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self { config })
    }
}

/// Shared per-token inputs: returns G (the `returns` output), W, and row lengths.
/// The validated inputs of both OTB estimators.
struct OtbInputs<'a> {
    rewards: Tokens<'a, f64>,
    mask: Tokens<'a, bool>,
    log_probs: Tokens<'a, f64>,
    sum_pi_sq: Tokens<'a, f64>,
    is_weights: Option<Tokens<'a, f64>>,
}

impl<'a> OtbInputs<'a> {
    /// Checks presence and shapes, in verl's argument order, and finiteness when `check` is
    /// eager (see [`FiniteCheck`]).
    fn checked(input: &EstimatorInput<'a>, check: FiniteCheck, bufs: &mut InputBufs) -> Result<Self> {
        let (rewards, mask) = input.checked_rewards_and_mask(check, bufs)?;
        let dim = rewards.dim();
        let log_probs = input.checked_matrix(
            "old_log_probs",
            input.old_log_probs,
            dim,
            check,
            &mut bufs.log_probs,
        )?;
        let sum_pi_sq = input.checked_matrix(
            "sum_pi_squared",
            input.sum_pi_squared,
            dim,
            check,
            &mut bufs.sum_pi_sq,
        )?;
        let is_weights = match input.rollout_is_weights {
            Some(w) => {
                Some(input.checked_matrix("rollout_is_weights", Some(w), dim, check, &mut bufs.is_weights)?)
            }
            None => None,
        };
        Ok(Self {
            rewards,
            mask,
            log_probs,
            sum_pi_sq,
            is_weights,
        })
    }
}

impl OtbInputs<'_> {
    /// Hands converted columns' buffers back to the workspace.
    fn recycle(self, bufs: &mut InputBufs) {
        self.rewards.recycle(&mut bufs.rewards);
        self.mask.recycle(&mut bufs.mask);
        self.log_probs.recycle(&mut bufs.log_probs);
        self.sum_pi_sq.recycle(&mut bufs.sum_pi_sq);
        if let Some(w) = self.is_weights {
            w.recycle(&mut bufs.is_weights);
        }
    }
}

/// The per-row passes of both OTB estimators. They run group by group, so a group's rows
/// stay in cache from the returns scan to the advantages, and every input value is read
/// once. Finiteness is tracked on the way and reported afterwards in the eager order:
/// inputs, returns, W, advantages.
struct RowPasses<'i, 'a> {
    inputs: &'i OtbInputs<'a>,
    cols: usize,
    /// w_t of the current row at its masked tokens (scratch, one row).
    w: Vec<f64>,
    inputs_finite: FiniteAcc,
    returns_finite: FiniteAcc,
    w_finite: FiniteAcc,
}

impl<'i, 'a> RowPasses<'i, 'a> {
    fn new(inputs: &'i OtbInputs<'a>, mut w: Vec<f64>) -> Self {
        let cols = inputs.mask.cols();
        w.clear();
        w.resize(cols, 0.0);
        Self {
            inputs,
            cols,
            w,
            inputs_finite: FiniteAcc::default(),
            returns_finite: FiniteAcc::default(),
            w_finite: FiniteAcc::default(),
        }
    }

    /// Writes row `r` of the returns G (reward-to-go of the masked rewards, at every
    /// position) and returns the row's length (number of masked tokens).
    fn returns(&mut self, r: usize, ret: &mut [f64]) -> usize {
        let cols = self.cols;
        let (rrow, mrow) = (
            &self.inputs.rewards.row(r)[..cols],
            &self.inputs.mask.row(r)[..cols],
        );
        let ret = &mut ret[..cols];
        let mut acc = 0.0;
        let mut len = 0usize;
        let mut finite = FiniteAcc::default();
        for t in (0..cols).rev() {
            finite.push(rrow[t]);
            if mrow[t] {
                acc += rrow[t];
                len += 1;
            }
            ret[t] = acc;
        }
        self.inputs_finite.merge(finite);
        // A non-finite partial sum stays non-finite down to t = 0: checking the last one
        // covers the row.
        self.returns_finite.push(acc);
        len
    }

    /// Runs `f(t, W_t)` at every masked token of row `r`: W_t = Σ_{t' ≤ t} w_{t'} over
    /// masked t', w = (1 − 2·exp(log π) + Σπ²) · ρ̄² (verl's order of operations). W at an
    /// unmasked position repeats the previous W (or 0), so checking the masked ones covers
    /// the row.
    #[inline(always)]
    fn cumulative_w(&mut self, r: usize, mut f: impl FnMut(usize, f64)) {
        let cols = self.cols;
        let inputs = self.inputs;
        let mrow = &inputs.mask.row(r)[..cols];
        let (lprow, sprow) = (&inputs.log_probs.row(r)[..cols], &inputs.sum_pi_sq.row(r)[..cols]);
        let w = &mut self.w[..cols];
        // First the w_t, independent of each other: the exp calls (which clobber every
        // float register) stay out of the dependent W chain below.
        let mut finite = FiniteAcc::default();
        for t in 0..cols {
            finite.push(lprow[t]);
            finite.push(sprow[t]);
            if mrow[t] {
                w[t] = 1.0 - 2.0 * lprow[t].exp() + sprow[t];
            }
        }
        if let Some(is) = &inputs.is_weights {
            let isrow = &is.row(r)[..cols];
            for t in 0..cols {
                finite.push(isrow[t]);
                if mrow[t] {
                    w[t] *= isrow[t] * isrow[t];
                }
            }
        }
        self.inputs_finite.merge(finite);
        let mut w_acc = 0.0f64;
        let mut w_finite = FiniteAcc::default();
        for t in 0..cols {
            if mrow[t] {
                w_acc += w[t];
                w_finite.push(w_acc);
                f(t, w_acc);
            }
        }
        self.w_finite.merge(w_finite);
    }

    /// The errors, in the eager order, for whatever was not finite.
    fn report(
        &mut self,
        input: &EstimatorInput<'_>,
        ret: &[f64],
        adv: &[f64],
        adv_finite: FiniteAcc,
    ) -> Result<()> {
        if !self.inputs_finite.all() {
            report_non_finite_input(|check, bufs| OtbInputs::checked(input, check, bufs))?;
        }
        if !self.returns_finite.all() {
            check_finite("returns", ret)?;
        }
        if !self.w_finite.all() {
            // The first non-finite W in row-major order (error path only).
            let cols = self.cols;
            for r in 0..self.inputs.mask.rows() {
                let mut first = None;
                self.cumulative_w(r, |t, w| {
                    if first.is_none() && !w.is_finite() {
                        first = Some((t, w));
                    }
                });
                if let Some((t, value)) = first {
                    return Err(Error::NonFinite {
                        what: "w_cumulative (overflow of exp(old_log_probs))",
                        index: r * cols + t,
                        value,
                    });
                }
            }
        }
        if !adv_finite.all() {
            check_finite("advantages", adv)?;
        }
        Ok(())
    }
}

/// verl's `handle_zero_tail`: when exactly one of the rows is the longest and strictly
/// longer than the second longest ℓ₂, `Some((its index in lengths, ℓ₂))`.
fn zero_tail(lengths: &[usize]) -> Option<(usize, usize)> {
    let mut longest = 0usize;
    let mut count_longest = 0usize;
    let mut row_longest = 0usize;
    let mut second = 0usize;
    for (i, &len) in lengths.iter().enumerate() {
        if len > longest || count_longest == 0 {
            if count_longest > 0 {
                second = longest;
            }
            longest = len;
            count_longest = 1;
            row_longest = i;
        } else if len == longest {
            count_longest += 1;
        } else if len > second {
            second = len;
        }
    }
    (count_longest == 1 && longest > second).then_some((row_longest, second))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimator::AdvantageEstimator;
    use crate::Error;
    use crate::RolloutBatch;
    use ndarray::{array, Array2};

    #[test]
    fn zero_tail_rules() {
        // (index of the unique longest row, second longest length)
        assert_eq!(zero_tail(&[3, 5, 2]), Some((1, 3)));
        assert_eq!(zero_tail(&[3, 5, 5]), None); // two longest rows
        assert_eq!(zero_tail(&[2, 3]), Some((1, 2)));
        assert_eq!(zero_tail(&[5, 3, 2]), Some((0, 3)));
        assert_eq!(zero_tail(&[4]), Some((0, 0)));
    }

    #[test]
    fn weighted_baseline_and_zero_tail_hand_computed() {
        // Group of two rows, π = 0.5 so w = 1 − 1 + s with s = Σπ².
        // Row 0: length 3, rewards 0 0 1, s = 1 -> w = 1, W = 1, 2, 3; G = 1, 1, 1.
        // Row 1: length 1, rewards 2 0 0, s = 3 -> w = 3, W = 3 (then padding); G = 2.
        // t=0: B = (1·1 + 2·3) / (1 + 3 + ε) = 7/4; A_0 = 1 − 7/4 = −0.75, A_1 = 2 − 7/4 = 0.25.
        // t=1, 2: only row 0, and it is the unique longest with second length 1 -> zero tail
        // from t=1: A = G = 1. Without the zero tail: B = (1·W)/W ≈ 1 -> A ≈ 0.
        let batch = RolloutBatch::from_group_keys(&[0, 0], &[0.0; 2]).unwrap();
        let rewards = array![[0.0, 0.0, 1.0], [2.0, 0.0, 0.0]];
        let mask = array![[true, true, true], [true, false, false]];
        let lp = Array2::from_elem((2, 3), 0.5f64.ln());
        let spsq = array![[1.0, 1.0, 1.0], [3.0, 3.0, 3.0]];
        let input = EstimatorInput::new(&batch)
            .with_token_level_rewards(&rewards)
            .with_response_mask(&mask)
            .with_old_log_probs(&lp)
            .with_sum_pi_squared(&spsq);
        for out in [
            OptimalTokenBaseline::new(OptimalTokenBaselineConfig::default())
                .unwrap()
                .estimate(&input)
                .unwrap(),
            TirOptimalTokenBaseline::new(OptimalTokenBaselineConfig::default())
                .unwrap()
                .estimate(&input)
                .unwrap(),
        ] {
            let a = &out.advantages;
            assert!((a[[0, 0]] + 0.75).abs() < 1e-8, "{a:?}");
            assert!((a[[1, 0]] - 0.25).abs() < 1e-8);
            assert_eq!(a[[0, 1]], 1.0);
            assert_eq!(a[[0, 2]], 1.0);
            assert_eq!(a[[1, 1]], 0.0);
            assert_eq!(out.returns().row(0).to_vec(), vec![1.0, 1.0, 1.0]);
        }
        let keep = OptimalTokenBaselineConfig {
            zero_tail: ZeroTail::KeepBaseline,
            ..OptimalTokenBaselineConfig::default()
        };
        let out = OptimalTokenBaseline::new(keep).unwrap().estimate(&input).unwrap();
        // t=1: B = 1·2/(2 + 1e-8) -> A = 1 − 2/(2 + 1e-8) ≈ 5e-9.
        assert!((out.advantages[[0, 1]] - (1.0 - 2.0 / (2.0 + 1e-8))).abs() < 1e-15);
    }

    #[test]
    fn is_weights_scale_w_and_are_checked() {
        // Same group as above but ρ̄ = 2 on row 1 token 0: w = 3·4 = 12.
        // t=0: B = (1·1 + 2·12)/(13 + ε) = 25/13.
        let batch = RolloutBatch::from_group_keys(&[0, 0], &[0.0; 2]).unwrap();
        let rewards = array![[0.0, 0.0, 1.0], [2.0, 0.0, 0.0]];
        let mask = array![[true, true, true], [true, false, false]];
        let lp = Array2::from_elem((2, 3), 0.5f64.ln());
        let spsq = array![[1.0, 1.0, 1.0], [3.0, 3.0, 3.0]];
        let is = array![[1.0, 1.0, 1.0], [2.0, 1.0, 1.0]];
        let input = EstimatorInput::new(&batch)
            .with_token_level_rewards(&rewards)
            .with_response_mask(&mask)
            .with_old_log_probs(&lp)
            .with_sum_pi_squared(&spsq)
            .with_rollout_is_weights(&is);
        let est = OptimalTokenBaseline::new(OptimalTokenBaselineConfig::default()).unwrap();
        let a = est.estimate(&input).unwrap().advantages;
        assert!((a[[0, 0]] - (1.0 - 25.0 / 13.0)).abs() < 1e-8);
        let bad = array![[1.0, 1.0], [1.0, 1.0]];
        assert!(matches!(
            est.estimate(&input.with_rollout_is_weights(&bad)),
            Err(Error::LengthMismatch {
                what: "rollout_is_weights",
                ..
            })
        ));
        assert_eq!(
            est.estimate(
                &EstimatorInput::new(&batch)
                    .with_token_level_rewards(&rewards)
                    .with_response_mask(&mask)
            ),
            Err(Error::MissingInput("old_log_probs"))
        );
    }

    #[test]
    fn tir_drops_empty_rows_from_groups() {
        // Rows 0 and 1 in one group, row 1 has no generated token: row 0 is then a singleton
        // (A = G), and row 1 stays 0 everywhere.
        let batch = RolloutBatch::from_group_keys(&[0, 0], &[0.0; 2]).unwrap();
        let rewards = array![[0.5, 1.0], [3.0, 0.0]];
        let mask = array![[true, true], [false, false]];
        let lp = Array2::from_elem((2, 2), -1.0);
        let spsq = Array2::from_elem((2, 2), 0.3);
        let input = EstimatorInput::new(&batch)
            .with_token_level_rewards(&rewards)
            .with_response_mask(&mask)
            .with_old_log_probs(&lp)
            .with_sum_pi_squared(&spsq);
        let out = TirOptimalTokenBaseline::new(OptimalTokenBaselineConfig::default())
            .unwrap()
            .estimate(&input)
            .unwrap();
        assert_eq!(out.advantages.row(0).to_vec(), vec![1.5, 1.0]);
        assert_eq!(out.advantages.row(1).to_vec(), vec![0.0, 0.0]);
    }
}
