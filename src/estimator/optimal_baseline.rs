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
//! - `tir_optimal_token_baseline` ([`TirOptimalTokenBaseline`], verl
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

use super::{group_rows, AdvantageEstimator, Advantages, EstimatorInput, TokenBuf, Tokens};
use crate::batch::RolloutBatch;
use crate::error::{Range, Result};

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
/// use beacon_rl::estimator::{OptimalTokenBaselineConfig, ZeroTail};
/// let c = OptimalTokenBaselineConfig::verl();
/// assert_eq!((c.zero_tail, c.denominator_eps), (ZeroTail::ZeroBaseline, 1e-8));
/// assert!(OptimalTokenBaselineConfig { denominator_eps: 0.0, ..c }.validate().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
pub struct OptimalTokenBaselineConfig {
    /// Tail handling of the unique longest row (default [`ZeroTail::ZeroBaseline`]).
    pub zero_tail: ZeroTail,
    /// ε added to the baseline's denominator Σ W (verl `epsilon`, default 1e-8); finite, > 0.
    pub denominator_eps: f64,
}

impl OptimalTokenBaselineConfig {
    /// verl's defaults: `handle_zero_tail = True`, `epsilon = 1e-8`.
    ///
    /// ```
    /// # use beacon_rl::estimator::OptimalTokenBaselineConfig;
    /// assert_eq!(OptimalTokenBaselineConfig::verl(), OptimalTokenBaselineConfig::default());
    /// ```
    pub const fn verl() -> Self {
        Self {
            zero_tail: ZeroTail::ZeroBaseline,
            denominator_eps: 1e-8,
        }
    }

    /// Checks the parameters.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) unless `denominator_eps` is finite
    /// and > 0.
    ///
    /// ```
    /// # use beacon_rl::estimator::OptimalTokenBaselineConfig;
    /// let c = OptimalTokenBaselineConfig { denominator_eps: f64::INFINITY, ..Default::default() };
    /// assert!(c.validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<()> {
        Range::POSITIVE.check("denominator_eps", self.denominator_eps)
    }
}

impl Default for OptimalTokenBaselineConfig {
    fn default() -> Self {
        Self::verl()
    }
}

macro_rules! otb_type {
    ($(#[$doc:meta])* $ty:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq)]
        pub struct $ty {
            config: OptimalTokenBaselineConfig,
        }

        impl $ty {
            /// Validates the parameters and builds the estimator.
            ///
            /// # Errors
            /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) when `config` is out of
            /// range.
            ///
            #[doc = concat!("```\nuse beacon_rl::estimator::{", stringify!($ty), ", OptimalTokenBaselineConfig};\nlet est = ", stringify!($ty), "::new(OptimalTokenBaselineConfig::verl())?;\nassert_eq!(est.config(), &OptimalTokenBaselineConfig::verl());\n# Ok::<(), beacon_rl::Error>(())\n```")]
            pub fn new(config: OptimalTokenBaselineConfig) -> Result<Self> {
                config.validate()?;
                Ok(Self { config })
            }

            /// The estimator's parameters.
            ///
            #[doc = concat!("```\nuse beacon_rl::estimator::{", stringify!($ty), ", OptimalTokenBaselineConfig};\nlet est = ", stringify!($ty), "::new(OptimalTokenBaselineConfig::default())?;\nassert_eq!(*est.config(), OptimalTokenBaselineConfig::verl());\n# Ok::<(), beacon_rl::Error>(())\n```")]
            pub fn config(&self) -> &OptimalTokenBaselineConfig {
                &self.config
            }
        }
    };
}

otb_type!(
    /// verl's `optimal_token_baseline` (see the [module docs](self)). Needs
    /// `token_level_rewards`, `response_mask`, `old_log_probs` and `sum_pi_squared`;
    /// `rollout_is_weights` is optional.
    ///
    /// ```
    /// use beacon_rl::estimator::{AdvantageEstimator, EstimatorInput, OptimalTokenBaseline, OptimalTokenBaselineConfig};
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
    /// let out = OptimalTokenBaseline::new(OptimalTokenBaselineConfig::verl())?.estimate(&input)?;
    /// // Equal weights: B_t = mean return = 0.5 (up to ε), so A = ±0.5.
    /// assert!((out.advantages[[0, 0]] - 0.5).abs() < 1e-7);
    /// assert!((out.advantages[[1, 1]] + 0.5).abs() < 1e-7);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    OptimalTokenBaseline
);

otb_type!(
    /// verl's `tir_optimal_token_baseline` (see the [module docs](self)). Needs
    /// `token_level_rewards`, `response_mask`, `old_log_probs` and `sum_pi_squared`;
    /// `rollout_is_weights` is optional.
    ///
    /// ```
    /// use beacon_rl::estimator::{AdvantageEstimator, EstimatorInput, OptimalTokenBaselineConfig, TirOptimalTokenBaseline};
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
    /// let out = TirOptimalTokenBaseline::new(OptimalTokenBaselineConfig::verl())?.estimate(&input)?;
    /// // Generated tokens line up by their index k: B_k = 0.5, A = ±0.5; observation stays 0.
    /// assert!((out.advantages[[0, 2]] - 0.5).abs() < 1e-7);
    /// assert_eq!(out.advantages[[0, 1]], 0.0);
    /// assert!((out.advantages[[1, 1]] + 0.5).abs() < 1e-7);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    TirOptimalTokenBaseline
);

/// Shared per-token inputs: returns G (the `returns` output), W, and row lengths.
struct OtbTokens<'a> {
    mask: Tokens<'a, bool>,
    returns: TokenBuf,
    w_cumulative: TokenBuf,
    lengths: Vec<usize>,
}

fn otb_tokens<'a>(input: &EstimatorInput<'a>) -> Result<OtbTokens<'a>> {
    let (rewards, mask) = input.checked_rewards_and_mask()?;
    let dim = rewards.dim();
    let log_probs = input.checked_matrix("old_log_probs", input.old_log_probs, dim)?;
    let sum_pi_sq = input.checked_matrix("sum_pi_squared", input.sum_pi_squared, dim)?;
    let is_weights = match input.rollout_is_weights {
        Some(w) => Some(input.checked_matrix("rollout_is_weights", Some(w), dim)?),
        None => None,
    };
    let mut returns = TokenBuf::zeros(dim);
    let mut w_cumulative = TokenBuf::zeros(dim);
    let mut lengths = Vec::with_capacity(dim.0);
    for r in 0..dim.0 {
        let rrow = rewards.row(r);
        let n = rrow.len();
        let (mrow, lprow, sprow) = (&mask.row(r)[..n], &log_probs.row(r)[..n], &sum_pi_sq.row(r)[..n]);
        let ret = &mut returns.row_mut(r)[..n];
        let mut acc = 0.0;
        for t in (0..n).rev() {
            if mrow[t] {
                acc += rrow[t];
            }
            ret[t] = acc;
        }
        let is_row = is_weights.as_ref().map(|w| &w.row(r)[..n]);
        let wc = &mut w_cumulative.row_mut(r)[..n];
        let mut w_acc = 0.0;
        let mut len = 0usize;
        for t in 0..n {
            if mrow[t] {
                let mut w = 1.0 - 2.0 * lprow[t].exp() + sprow[t];
                if let Some(is) = is_row {
                    w *= is[t] * is[t];
                }
                w_acc += w;
                len += 1;
            }
            wc[t] = w_acc;
        }
        lengths.push(len);
    }
    returns.check_finite("returns")?;
    w_cumulative.check_finite("w_cumulative (overflow of exp(old_log_probs))")?;
    Ok(OtbTokens {
        mask,
        returns,
        w_cumulative,
        lengths,
    })
}

/// The row whose baseline gets a zero tail and where the tail starts: the unique longest row
/// of `rows` if it is strictly longer than the second longest.
fn zero_tail_row(rows: &[usize], lengths: &[usize]) -> Option<(usize, usize)> {
    let mut longest = 0usize;
    let mut count_longest = 0usize;
    let mut row_longest = 0usize;
    let mut second = 0usize;
    for &r in rows {
        let len = lengths[r];
        if len > longest || count_longest == 0 {
            if count_longest > 0 {
                second = longest;
            }
            longest = len;
            count_longest = 1;
            row_longest = r;
        } else if len == longest {
            count_longest += 1;
        } else if len > second {
            second = len;
        }
    }
    (count_longest == 1 && longest > second).then_some((row_longest, second))
}

impl AdvantageEstimator for OptimalTokenBaseline {
    fn name(&self) -> &'static str {
        "optimal_token_baseline"
    }

    fn estimate(&self, input: &EstimatorInput<'_>) -> Result<Advantages> {
        let tokens = otb_tokens(input)?;
        let advantages = column_baseline_advantages(input.batch, &tokens, &self.config);
        advantages.check_finite("advantages")?;
        Advantages::pair(advantages, tokens.returns)
    }
}

fn column_baseline_advantages(
    batch: &RolloutBatch,
    tokens: &OtbTokens<'_>,
    config: &OptimalTokenBaselineConfig,
) -> TokenBuf {
    let (mask, ret, wc) = (&tokens.mask, &tokens.returns, &tokens.w_cumulative);
    let cols = mask.cols();
    let mut adv = TokenBuf::zeros(mask.dim());
    // Scratch reused by every group: numerator (then the baseline B_t) and denominator.
    let mut numer = vec![0.0f64; cols];
    let mut denom = vec![0.0f64; cols];
    for g in 0..batch.num_groups() {
        let rows = group_rows(batch, g);
        if rows.len() == 1 {
            let r = rows[0];
            for ((a, &m), &g_t) in adv.row_mut(r).iter_mut().zip(mask.row(r)).zip(ret.row(r)) {
                if m {
                    *a = g_t;
                }
            }
            continue;
        }
        numer.fill(0.0);
        denom.fill(0.0);
        for &r in rows {
            let (mrow, grow, wrow) = (&mask.row(r)[..cols], &ret.row(r)[..cols], &wc.row(r)[..cols]);
            for t in 0..cols {
                if mrow[t] {
                    numer[t] += grow[t] * wrow[t];
                    denom[t] += wrow[t];
                }
            }
        }
        for (n, d) in numer.iter_mut().zip(&denom) {
            *n /= d + config.denominator_eps;
        }
        let tail = match config.zero_tail {
            ZeroTail::ZeroBaseline => zero_tail_row(rows, &tokens.lengths),
            ZeroTail::KeepBaseline => None,
        };
        for &r in rows {
            let tail_start = match tail {
                Some((row, start)) if row == r => start,
                _ => cols,
            };
            let (mrow, grow) = (&mask.row(r)[..cols], &ret.row(r)[..cols]);
            let arow = &mut adv.row_mut(r)[..cols];
            for t in 0..cols {
                if mrow[t] {
                    arow[t] = if t >= tail_start {
                        grow[t]
                    } else {
                        grow[t] - numer[t]
                    };
                }
            }
        }
    }
    adv
}

impl AdvantageEstimator for TirOptimalTokenBaseline {
    fn name(&self) -> &'static str {
        "tir_optimal_token_baseline"
    }

    fn estimate(&self, input: &EstimatorInput<'_>) -> Result<Advantages> {
        let tokens = otb_tokens(input)?;
        let advantages = compact_baseline_advantages(input.batch, &tokens, &self.config);
        advantages.check_finite("advantages")?;
        Advantages::pair(advantages, tokens.returns)
    }
}

fn compact_baseline_advantages(
    batch: &RolloutBatch,
    tokens: &OtbTokens<'_>,
    config: &OptimalTokenBaselineConfig,
) -> TokenBuf {
    let (mask, ret, wc) = (&tokens.mask, &tokens.returns, &tokens.w_cumulative);
    let cols = mask.cols();
    let mut adv = TokenBuf::zeros(mask.dim());
    // Scratch reused by every group, indexed by k = the k-th generated token of a row.
    let mut numer = vec![0.0f64; cols];
    let mut denom = vec![0.0f64; cols];
    // Rows of the current group with at least one generated token (verl drops empty rows).
    let mut members: Vec<usize> = Vec::new();
    for g in 0..batch.num_groups() {
        members.clear();
        members.extend(
            group_rows(batch, g)
                .iter()
                .copied()
                .filter(|&r| tokens.lengths[r] > 0),
        );
        if members.is_empty() {
            continue;
        }
        let max_len = members.iter().map(|&r| tokens.lengths[r]).max().unwrap_or(0);
        numer[..max_len].fill(0.0);
        denom[..max_len].fill(0.0);
        let single = members.len() == 1;
        if !single {
            for &r in &members {
                let mut k = 0usize;
                let (mrow, grow, wrow) = (&mask.row(r)[..cols], &ret.row(r)[..cols], &wc.row(r)[..cols]);
                for t in 0..cols {
                    if mrow[t] {
                        // k < lengths[r] <= cols: the k-th generated token of the row.
                        numer[k] += grow[t] * wrow[t];
                        denom[k] += wrow[t];
                        k += 1;
                    }
                }
            }
            for (n, d) in numer[..max_len].iter_mut().zip(&denom[..max_len]) {
                *n /= d + config.denominator_eps;
            }
        }
        // A singleton keeps numer = 0: no baseline.
        let tail = match config.zero_tail {
            ZeroTail::ZeroBaseline if !single => zero_tail_row(&members, &tokens.lengths),
            _ => None,
        };
        for &r in &members {
            let tail_start = match tail {
                Some((row, start)) if row == r => start,
                _ => cols,
            };
            let (mrow, grow) = (&mask.row(r)[..cols], &ret.row(r)[..cols]);
            let arow = &mut adv.row_mut(r)[..cols];
            let mut k = 0usize;
            for t in 0..cols {
                if mrow[t] {
                    arow[t] = if k >= tail_start {
                        grow[t]
                    } else {
                        grow[t] - numer[k]
                    };
                    k += 1;
                }
            }
        }
    }
    adv
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;
    use ndarray::{array, Array2};

    #[test]
    fn zero_tail_row_rules() {
        let lengths = [3, 5, 2, 5];
        assert_eq!(zero_tail_row(&[0, 1, 2], &lengths), Some((1, 3)));
        assert_eq!(zero_tail_row(&[0, 1, 3], &lengths), None); // two longest rows
        assert_eq!(zero_tail_row(&[2, 0], &lengths), Some((0, 2)));
        assert_eq!(zero_tail_row(&[1, 0, 2], &lengths), Some((1, 3)));
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
            OptimalTokenBaseline::new(OptimalTokenBaselineConfig::verl())
                .unwrap()
                .estimate(&input)
                .unwrap(),
            TirOptimalTokenBaseline::new(OptimalTokenBaselineConfig::verl())
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
            assert_eq!(out.returns.row(0).to_vec(), vec![1.0, 1.0, 1.0]);
        }
        let keep = OptimalTokenBaselineConfig {
            zero_tail: ZeroTail::KeepBaseline,
            ..OptimalTokenBaselineConfig::verl()
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
        let est = OptimalTokenBaseline::new(OptimalTokenBaselineConfig::verl()).unwrap();
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
        let out = TirOptimalTokenBaseline::new(OptimalTokenBaselineConfig::verl())
            .unwrap()
            .estimate(&input)
            .unwrap();
        assert_eq!(out.advantages.row(0).to_vec(), vec![1.5, 1.0]);
        assert_eq!(out.advantages.row(1).to_vec(), vec![0.0, 0.0]);
    }
}
