//! Generalized advantage estimation: `gae` ([`Gae`], verl `compute_gae_advantage_return`).
//!
//! Per row, scanning backwards from the last position with V_next = 0 and Â = 0:
//!
//! ```text
//! δ_t  = r_t + γ·V_next − V_t
//! Â'_t = δ_t + γλ·Â
//! mask_t = 1:  V_next ← V_t,  Â ← Â'_t
//! mask_t = 0:  V_next, Â unchanged           (observation tokens and padding are skipped)
//! gae_t = Â
//! returns    = gae + V                        (every position)
//! advantages = masked_whiten(gae)             (NOT re-masked)
//! ```
//!
//! γ = `discount`, λ = `gae_lambda`. The whitening is one mean/variance over all masked tokens
//! of the batch ([batch whitening](super#batch-whitening)).
//!
//! # Peer behaviour reproduced
//! - Advantages are not multiplied by the mask after whitening: trailing padding (where Â is
//!   still 0) holds (0 − μ)·1/√(σ² + 1e-8), and an interior mask-0 token holds the whitened Â
//!   carried from the next generated token.
//! - Returns at padding are the values V_t (Â = 0 there).
//! - The whitening's token count and Bessel factor are float32, and verl raises when fewer than
//!   2 tokens are masked: [`Error::Undefined`].
//!
//! No deliberate difference from verl.

use super::whiten::{rows_of, rows_of_mut, whiten_rows, Lanes};
use super::{
    check_matrix_shape, fill_estimator, float_row, mask_row, report_non_finite_input, EstimatorInput,
    FiniteCheck, InputBufs, Out, Prefetch, Scratch, Tokens, LANES,
};
use crate::error::{Error, Range, Result};
use crate::tensor::{FloatView, MaskView};

/// Parameters of `gae`.
///
/// ```
/// use beacon_rl::estimator::{EstimatorConfig, GaeConfig};
/// let c = GaeConfig::default();
/// assert_eq!((c.discount, c.gae_lambda), (1.0, 1.0));
/// assert!(EstimatorConfig::Gae(c.with_gae_lambda(2.0)).build().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct GaeConfig {
    /// Per-token discount γ (verl `algorithm.gamma`, default 1.0), in [0, 1].
    pub discount: f64,
    /// GAE trace decay λ (verl `algorithm.lam`, default 1.0), in [0, 1].
    pub gae_lambda: f64,
}

impl GaeConfig {
    /// Checks the parameters.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) unless both are in [0, 1].
    pub(crate) fn validate(&self) -> Result<()> {
        Range::UNIT.check("discount", self.discount)?;
        Range::UNIT.check("gae_lambda", self.gae_lambda)
    }
}

impl Default for GaeConfig {
    /// verl's defaults: `gamma = 1.0`, `lam = 1.0`.
    fn default() -> Self {
        Self {
            discount: 1.0,
            gae_lambda: 1.0,
        }
    }
}

crate::setters::with_setters! {
    GaeConfig, "use beacon_rl::estimator::GaeConfig;", GaeConfig::default();
    /// Sets the per-token discount γ (default 1.0; in [0, 1]).
    with_discount(discount: f64) = 0.99;
    /// Sets the GAE trace decay λ (default 1.0; in [0, 1]).
    with_gae_lambda(gae_lambda: f64) = 0.95;
}

/// verl's `gae` (see the module docs (`src/estimator/gae.rs`)). Needs `token_level_rewards`, `response_mask`
/// and `values` (≥ 2 masked tokens in the batch).
///
/// ```
/// use beacon_rl::estimator::{EstimatorConfig, GaeConfig};
/// use beacon_rl::estimator::{AdvantageEstimator, EstimatorInput};
/// use beacon_rl::RolloutBatch;
/// let batch = RolloutBatch::from_group_keys(&[0], &[0.0])?;
/// let rewards = [[0.0, 1.0, 0.0]];
/// let values = [[0.5, 0.5, 0.3]];
/// let mask = [[true, true, false]];
/// let input = EstimatorInput::new(&batch)
///     .with_token_level_rewards(&rewards)
///     .with_response_mask(&mask)
///     .with_values(&values);
/// let out = EstimatorConfig::Gae(GaeConfig::default().with_discount(1.0).with_gae_lambda(1.0)).build()?.estimate(&input)?;
/// // t=1: δ = 1 − 0.5 = 0.5; t=0: δ = 0 + 0.5 − 0.5 = 0, Â = 0.5. Padding t=2: Â = 0.
/// assert_eq!(out.returns().row(0).to_vec(), vec![1.0, 1.0, 0.3]);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Gae {
    config: GaeConfig,
}

impl Gae {
    /// Validates the parameters and builds the estimator.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when `config` is out of range.
    ///
    /// ```
    /// # use beacon_rl::estimator::{EstimatorConfig, GaeConfig};
    /// assert!(EstimatorConfig::Gae(GaeConfig::default().with_discount(1.01).with_gae_lambda(1.0)).build().is_err());
    /// ```
    pub(crate) fn new(config: GaeConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self { config })
    }
}

/// The validated `token_level_rewards`, `response_mask` and `values`.
type GaeInputs<'a> = (Tokens<'a, f64>, Tokens<'a, bool>, Tokens<'a, f64>);

impl Gae {
    fn inputs<'a>(
        input: &EstimatorInput<'a>,
        check: FiniteCheck,
        bufs: &mut InputBufs,
    ) -> Result<GaeInputs<'a>> {
        let (rewards, mask) = input.checked_rewards_and_mask(check, bufs)?;
        let values = input.checked_matrix("values", input.values, rewards.dim(), check, &mut bufs.values)?;
        Ok((rewards, mask, values))
    }

    fn fill(&self, input: &EstimatorInput<'_>, out: &mut Out<'_>, ws: &mut Scratch) -> Result<()> {
        // Shapes only: input finiteness and the mask's entries are checked inside the scan
        // (see FiniteCheck, mask_row), and the eager checks run only to report an error.
        let checked = input.checked_views().and_then(|(rewards, mask)| {
            let values = input.values.ok_or(Error::MissingInput("values"))?;
            check_matrix_shape("values", values.dim(), rewards.dim())?;
            Ok((rewards, mask, values))
        });
        let (rewards, mask, values) = match checked {
            Ok(v) => v,
            Err(deferred) => {
                report_non_finite_input(|check, bufs| Self::inputs(input, check, bufs))?;
                return Err(deferred);
            }
        };
        let dim = rewards.dim();
        let (gamma, gamma_lambda) = (
            self.config.discount,
            self.config.discount * self.config.gae_lambda,
        );
        let (advantages, returns) = out.direct(dim)?;
        whiten_rows(
            &mask,
            false,
            &mut ws.rows,
            advantages,
            returns,
            |r0, lanes| gae_block(gamma, gamma_lambda, &rewards, &values, &mask, r0, lanes),
            || report_non_finite_input(|check, bufs| Self::inputs(input, check, bufs)),
        )
    }
}

/// The GAE scan of the block's rows `r0 ..` (k ≤ [`LANES`], see [`Lanes`]): the rows'
/// inputs widened into `lanes.a` (rewards), `lanes.b` (values) and their mask into
/// `lanes.mask`, then Â into `lanes.pre` and Â + V into `lanes.ret`, and the rewards and
/// returns folded into the finiteness check (a non-finite value is a non-finite return).
fn gae_block(
    gamma: f64,
    gamma_lambda: f64,
    rewards: &FloatView<'_>,
    values: &FloatView<'_>,
    mask: &MaskView<'_>,
    r0: usize,
    lanes: &mut Lanes<'_>,
) {
    let n = rewards.dim().1;
    if n == 0 {
        return;
    }
    let rows = lanes.a.chunks_exact_mut(n).zip(lanes.b.chunks_exact_mut(n));
    let mut mask_ok = true;
    for (l, ((a, b), m)) in rows.zip(lanes.mask.chunks_exact_mut(n)).enumerate() {
        float_row(rewards, r0 + l, a);
        float_row(values, r0 + l, b);
        mask_ok &= mask_row(mask, r0 + l, m);
    }
    lanes.mask_ok &= mask_ok;
    let (a, b, m) = (&*lanes.a, &*lanes.b, &*lanes.mask);
    let mut next = Prefetch::rows(rewards, Some(values), mask, r0 + LANES);
    if lanes.pre.len() == LANES * n {
        gae_scan::<LANES>(gamma, gamma_lambda, n, a, b, m, lanes.pre, lanes.ret, &mut next);
    } else {
        let rows = a.chunks_exact(n).zip(b.chunks_exact(n)).zip(m.chunks_exact(n));
        let out = lanes.pre.chunks_exact_mut(n).zip(lanes.ret.chunks_exact_mut(n));
        for (((a, b), m), (pre, ret)) in rows.zip(out) {
            gae_scan::<1>(gamma, gamma_lambda, n, a, b, m, pre, ret, &mut next);
        }
    }
    lanes.finite.extend(lanes.a);
    lanes.finite.extend(lanes.ret);
}

/// The GAE recurrence over `K` rows of `n` tokens in lockstep (each row's operations in the
/// order of the one-row recurrence; the rows are independent chains, so running them side by
/// side hides each chain's latency), requesting a line of the next block per token.
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
#[inline(always)]
fn gae_scan<const K: usize>(
    gamma: f64,
    gamma_lambda: f64,
    n: usize,
    rewards: &[f64],
    values: &[f64],
    mask: &[u8],
    pre: &mut [f64],
    ret: &mut [f64],
    next: &mut Prefetch,
) {
    let (r, v, m) = (
        rows_of::<_, K>(rewards, n),
        rows_of::<_, K>(values, n),
        rows_of::<_, K>(mask, n),
    );
    let (pre, ret) = (rows_of_mut::<_, K>(pre, n), rows_of_mut::<_, K>(ret, n));
    let mut next_value = [0.0f64; K];
    let mut last = [0.0f64; K];
    for t in (0..n).rev() {
        next.step();
        for l in 0..K {
            let (r, v, m) = (r[l][t], v[l][t], m[l][t] != 0);
            let delta = r + gamma * next_value[l] - v;
            let cand = delta + gamma_lambda * last[l];
            // Generated tokens advance the trace; the others keep it.
            last[l] = if m { cand } else { last[l] };
            next_value[l] = if m { v } else { next_value[l] };
            pre[l][t] = last[l];
            ret[l][t] = last[l] + v;
        }
    }
}

fill_estimator!(Gae, "gae", returns = true);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimator::AdvantageEstimator;
    use crate::{Error, RolloutBatch};
    use ndarray::array;

    #[test]
    fn interior_gap_carries_next_value_and_trace() {
        // γ = 0.5, λ = 0.5 (γλ = 0.25). Row: mask 1 0 1 0, r = 0 0 1 0, V = 1 9 2 7.
        // t=3 padding: Â = 0, returns 0 + 7.
        // t=2: δ = 1 + 0.5·0 − 2 = −1, Â = −1; V_next = 2.
        // t=1 observation: Â stays −1, V_next stays 2; returns −1 + 9 = 8.
        // t=0: δ = 0 + 0.5·2 − 1 = 0, Â = 0 + 0.25·(−1) = −0.25; returns 0.75.
        let batch = RolloutBatch::from_group_keys(&[0], &[0.0]).unwrap();
        let rewards = array![[0.0, 0.0, 1.0, 0.0]];
        let values = array![[1.0, 9.0, 2.0, 7.0]];
        let mask = array![[true, false, true, false]];
        let input = EstimatorInput::new(&batch)
            .with_token_level_rewards(&rewards)
            .with_response_mask(&mask)
            .with_values(&values);
        let out = Gae::new(GaeConfig {
            discount: 0.5,
            gae_lambda: 0.5,
        })
        .unwrap()
        .estimate(&input)
        .unwrap();
        assert_eq!(out.returns().row(0).to_vec(), vec![0.75, 8.0, 1.0, 7.0]);
        // Whitening over the masked Â = −0.25, −1: mean −0.625, Σd² = 2·0.375², var ×2 (f32 2/1)
        // = 0.28125; padding Â = 0 -> (0 + 0.625)/√(0.28125 + 1e-8), not re-masked.
        let s = 1.0 / (0.281_25f64 + 1e-8).sqrt();
        assert!((out.advantages[[0, 0]] - 0.375 * s).abs() < 1e-12);
        assert!((out.advantages[[0, 1]] + 0.375 * s).abs() < 1e-12);
        assert!((out.advantages[[0, 3]] - 0.625 * s).abs() < 1e-12);
    }

    #[test]
    fn values_are_required_and_checked() {
        let batch = RolloutBatch::from_group_keys(&[0], &[0.0]).unwrap();
        let rewards = array![[0.0, 1.0]];
        let mask = array![[true, true]];
        let input = EstimatorInput::new(&batch)
            .with_token_level_rewards(&rewards)
            .with_response_mask(&mask);
        let est = Gae::new(GaeConfig::default()).unwrap();
        assert_eq!(est.estimate(&input), Err(Error::MissingInput("values")));
        let short = array![[0.0]];
        assert!(matches!(
            est.estimate(&input.with_values(&short)),
            Err(Error::LengthMismatch { what: "values", .. })
        ));
        let inf = array![[0.0, f64::INFINITY]];
        assert!(matches!(
            est.estimate(&input.with_values(&inf)),
            Err(Error::NonFinite {
                what: "values",
                index: 1,
                ..
            })
        ));
    }
}
