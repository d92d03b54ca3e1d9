//! REINFORCE++: `reinforce_plus_plus` and `reinforce_plus_plus_baseline`.
//!
//! # `reinforce_plus_plus` ([`ReinforcePlusPlus`], verl `compute_reinforce_plus_plus_outcome_advantage`)
//! Discounted reward-to-go over the generated tokens of each row, scanning backwards:
//!
//! ```text
//! mask_t = 1:  G ← r_t + γ·G,  returns_t = G
//! mask_t = 0:  returns_t = 0,  G unchanged          (G starts at 0 past the row's end)
//! A = masked_whiten(returns) · mask
//! ```
//!
//! γ = `discount`. Interior mask-0 spans (multi-turn observation tokens) neither discount nor
//! reset the running return, so a reward after an observation reaches the earlier turns;
//! trailing padding gets 0 because the scan starts at 0. The whitening is one mean/variance
//! over all masked tokens of the batch ([batch whitening](super#batch-whitening)).
//!
//! # `reinforce_plus_plus_baseline` (`EstimatorConfig::ReinforcePlusPlusBaseline`, verl `compute_reinforce_plus_plus_baseline_outcome_advantage`)
//! ```text
//! s_i = Σ_t r_{i,t} (all L positions)     a_i = s_i − μ_g   (singleton: μ = 0)
//! A = masked_whiten(a_i broadcast · mask) · mask,   returns = A
//! ```
//!
//! # Peer behaviour reproduced
//! - Returns follow verl 0.9.1, which carries the running return through interior mask-0
//!   spans (verl PR #7300, "carry running_return through observation spans"); the earlier
//!   verl code reset it at every mask-0 token. No vector exercises a nonzero reward on a
//!   mask-0 token; we ignore such rewards (they are not the policy's tokens).
//! - The whitening's token count and Bessel factor are float32 (see [batch whitening](super#batch-whitening)),
//!   and verl raises when fewer than 2 tokens are masked: [`Error::Undefined`](crate::Error::Undefined).

use super::kernel::outcome_scalars;
use super::whiten::{rows_of, rows_of_mut, whiten_outcome, whiten_rows, Lanes};
use super::{
    fill_estimator, float_row, group_rows, mask_row, report_non_finite_input, select, EstimatorInput, Out,
    Prefetch, Scratch, LANES,
};
use crate::error::{Range, Result};
use crate::tensor::{FloatView, MaskView};

/// Parameters of `reinforce_plus_plus`.
///
/// ```
/// use beacon_rl::estimator::{EstimatorConfig, ReinforcePlusPlusConfig};
/// assert_eq!(ReinforcePlusPlusConfig::default().discount, 1.0);
/// assert!(EstimatorConfig::ReinforcePlusPlus(ReinforcePlusPlusConfig::default().with_discount(1.1)).build().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct ReinforcePlusPlusConfig {
    /// Per-token discount γ of the reward-to-go (verl `algorithm.gamma`, default 1.0), in [0, 1].
    pub discount: f64,
}

impl ReinforcePlusPlusConfig {
    /// Checks the parameters.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) unless `discount` is in [0, 1].
    pub(crate) fn validate(&self) -> Result<()> {
        Range::UNIT.check("discount", self.discount)
    }
}

impl Default for ReinforcePlusPlusConfig {
    /// verl's default: `gamma = 1.0`.
    fn default() -> Self {
        Self { discount: 1.0 }
    }
}

crate::setters::with_setters! {
    ReinforcePlusPlusConfig, "use beacon_rl::estimator::ReinforcePlusPlusConfig;", ReinforcePlusPlusConfig::default();
    /// Sets the per-token discount γ of the reward-to-go (default 1.0; in [0, 1]).
    with_discount(discount: f64) = 0.99;
}

/// verl's `reinforce_plus_plus` (see the module docs (`src/estimator/reinforce.rs`)). Needs `token_level_rewards`
/// and `response_mask` (≥ 2 masked tokens in the batch).
///
/// ```
/// use beacon_rl::estimator::{AdvantageEstimator, EstimatorConfig, EstimatorInput, ReinforcePlusPlusConfig};
/// use beacon_rl::RolloutBatch;
/// let batch = RolloutBatch::from_group_keys(&[0, 1], &[0.0; 2])?;
/// // Row 0: action, observation, action with reward 1 at the end; row 1: no reward.
/// let rewards = [[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]];
/// let mask = [[true, false, true], [true, true, false]];
/// let input = EstimatorInput::new(&batch).with_token_level_rewards(&rewards).with_response_mask(&mask);
/// let est = EstimatorConfig::ReinforcePlusPlus(ReinforcePlusPlusConfig::default().with_discount(0.5)).build()?;
/// let out = est.estimate(&input)?;
/// // The return crosses the observation token without decaying there: 0.5 · 1.
/// assert_eq!(out.returns().row(0).to_vec(), vec![0.5, 0.0, 1.0]);
/// assert_eq!(out.advantages[[0, 1]], 0.0);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ReinforcePlusPlus {
    config: ReinforcePlusPlusConfig,
}

impl ReinforcePlusPlus {
    /// Validates the parameters and builds the estimator.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) when `config` is out of range.
    ///
    /// ```
    /// # use beacon_rl::estimator::{EstimatorConfig, ReinforcePlusPlusConfig};
    /// assert!(EstimatorConfig::ReinforcePlusPlus(ReinforcePlusPlusConfig::default().with_discount(-0.1)).build().is_err());
    /// ```
    pub(crate) fn new(config: ReinforcePlusPlusConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self { config })
    }
}

impl ReinforcePlusPlus {
    fn fill(&self, input: &EstimatorInput<'_>, out: &mut Out<'_>, ws: &mut Scratch) -> Result<()> {
        // Shapes only: reward finiteness and the mask's entries are checked inside the scan
        // (see FiniteCheck, mask_row), and the eager checks run only to report an error.
        let eager = || report_non_finite_input(|check, bufs| input.checked_rewards_and_mask(check, bufs));
        let (rewards, mask) = match input.checked_views() {
            Ok(v) => v,
            Err(deferred) => {
                eager()?;
                return Err(deferred);
            }
        };
        let dim = rewards.dim();
        let discount = self.config.discount;
        let (advantages, returns) = out.direct(dim)?;
        whiten_rows(
            &mask,
            true,
            &mut ws.rows,
            advantages,
            returns,
            |r0, lanes| returns_block(discount, &rewards, &mask, r0, lanes),
            eager,
        )
    }
}

/// The discounted reward-to-go of the block's rows `r0 ..` (k ≤ [`LANES`], see [`Lanes`]):
/// the rows' rewards widened into `lanes.a` and their mask into `lanes.mask`, then the
/// returns into `lanes.ret` and `lanes.pre`, and the rewards and returns folded into the
/// finiteness check (a non-finite generated reward is a non-finite return).
fn returns_block(
    discount: f64,
    rewards: &FloatView<'_>,
    mask: &MaskView<'_>,
    r0: usize,
    lanes: &mut Lanes<'_>,
) {
    let n = rewards.dim().1;
    if n == 0 {
        return;
    }
    let mut mask_ok = true;
    for (l, (a, m)) in lanes
        .a
        .chunks_exact_mut(n)
        .zip(lanes.mask.chunks_exact_mut(n))
        .enumerate()
    {
        float_row(rewards, r0 + l, a);
        mask_ok &= mask_row(mask, r0 + l, m);
    }
    lanes.mask_ok &= mask_ok;
    let (a, m) = (&*lanes.a, &*lanes.mask);
    let mut next = Prefetch::rows(rewards, None, mask, r0 + LANES);
    if lanes.pre.len() == LANES * n {
        returns_scan::<LANES>(discount, n, a, m, lanes.ret, &mut next);
    } else {
        let rows = a.chunks_exact(n).zip(m.chunks_exact(n));
        for ((a, m), ret) in rows.zip(lanes.ret.chunks_exact_mut(n)) {
            returns_scan::<1>(discount, n, a, m, ret, &mut next);
        }
    }
    let k = lanes.pre.len();
    lanes.pre.copy_from_slice(&lanes.ret[..k]);
    lanes.finite.extend(lanes.a);
    lanes.finite.extend(lanes.ret);
}

/// The reward-to-go recurrence over `K` rows of `n` tokens in lockstep (each row's
/// operations in the order of the one-row recurrence), requesting a line of the next block
/// per token.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
fn returns_scan<const K: usize>(
    discount: f64,
    n: usize,
    rewards: &[f64],
    mask: &[u8],
    ret: &mut [f64],
    next: &mut Prefetch,
) {
    let (r, m) = (rows_of::<_, K>(rewards, n), rows_of::<_, K>(mask, n));
    let ret = rows_of_mut::<_, K>(ret, n);
    let mut running = [0.0f64; K];
    for t in (0..n).rev() {
        next.step();
        for l in 0..K {
            let (r, m) = (r[l][t], m[l][t] != 0);
            let cand = r + discount * running[l];
            // Generated tokens advance the running return; the others get 0 and keep it.
            running[l] = if m { cand } else { running[l] };
            ret[l][t] = select(m, running[l]);
        }
    }
}

fill_estimator!(ReinforcePlusPlus, "reinforce_plus_plus", returns = true);

/// verl's `reinforce_plus_plus_baseline` (see the module docs (`src/estimator/reinforce.rs`)). Needs
/// `token_level_rewards` and `response_mask` (≥ 2 masked tokens in the batch).
///
/// ```
/// use beacon_rl::estimator::{AdvantageEstimator, EstimatorConfig, EstimatorInput};
/// use beacon_rl::RolloutBatch;
/// let batch = RolloutBatch::from_group_keys(&[0, 0], &[0.0; 2])?;
/// let rewards = [[0.0, 1.0], [0.0, 0.0]];
/// let mask = [[true, true], [true, true]];
/// let input = EstimatorInput::new(&batch).with_token_level_rewards(&rewards).with_response_mask(&mask);
/// let out = EstimatorConfig::ReinforcePlusPlusBaseline.build()?.estimate(&input)?;
/// // ±0.5 on 4 tokens: mean 0, unbiased variance 1/3 -> ±0.5·√3.
/// assert!((out.advantages[[0, 0]] - 0.5 * 3f64.sqrt()).abs() < 1e-6);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct ReinforcePlusPlusBaseline;

impl ReinforcePlusPlusBaseline {
    fn fill(&self, input: &EstimatorInput<'_>, out: &mut Out<'_>, ws: &mut Scratch) -> Result<()> {
        let batch = input.batch;
        let mask = outcome_scalars(input, ws, |_, scores, scalars, _| {
            scalars.copy_from_slice(scores); // singletons: mean 0
            for g in 0..batch.num_groups() {
                let rows = group_rows(batch, g);
                if rows.len() < 2 {
                    continue;
                }
                let mean = rows.iter().map(|&r| scores[r]).sum::<f64>() / rows.len() as f64;
                for &r in rows {
                    scalars[r] = scores[r] - mean;
                }
            }
            Ok(())
        })?;
        whiten_outcome(out, &ws.scalars, &mask, &mut ws.counts, &mut ws.acc_a)
    }
}

fill_estimator!(
    ReinforcePlusPlusBaseline,
    "reinforce_plus_plus_baseline",
    returns = false
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimator::AdvantageEstimator;
    use crate::{Error, RolloutBatch};
    use ndarray::array;

    #[test]
    fn returns_hand_computed_with_interior_gap_and_padding() {
        // γ = 0.9; row: mask 1 1 0 1 0, rewards 0 0.5 0 1 0.
        // t=4 padding -> 0; t=3: G = 1; t=2 observation -> 0, G stays 1;
        // t=1: G = 0.5 + 0.9·1 = 1.4; t=0: G = 0 + 0.9·1.4 = 1.26.
        let batch = RolloutBatch::from_group_keys(&[0, 1], &[0.0; 2]).unwrap();
        let rewards = array![[0.0, 0.5, 0.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0, 0.0]];
        let mask = array![
            [true, true, false, true, false],
            [true, false, false, false, false]
        ];
        let input = EstimatorInput::new(&batch)
            .with_token_level_rewards(&rewards)
            .with_response_mask(&mask);
        let est = ReinforcePlusPlus::new(ReinforcePlusPlusConfig { discount: 0.9 }).unwrap();
        let out = est.estimate(&input).unwrap();
        let expect = [1.26, 1.4, 0.0, 1.0, 0.0];
        for (x, e) in out.returns().row(0).iter().zip(expect) {
            assert!((x - e).abs() < 1e-12, "{:?}", out.returns);
        }
        assert_eq!(out.returns().row(1).to_vec(), vec![1.0, 0.0, 0.0, 0.0, 0.0]);
        // Whitened over the 4 masked returns 1.26, 1.4, 1, 1: mean 1.165.
        let mean = (1.26 + 1.4 + 1.0 + 1.0) / 4.0;
        let sq: f64 = [1.26f64, 1.4, 1.0, 1.0]
            .iter()
            .map(|x| (x - mean) * (x - mean))
            .sum();
        let var = sq / 4.0 * f64::from(4.0f32 / 3.0f32);
        let s = 1.0 / (var + 1e-8).sqrt();
        assert!((out.advantages[[0, 0]] - (1.26 - mean) * s).abs() < 1e-12);
        assert_eq!(out.advantages[[0, 2]], 0.0);
        assert_eq!(out.advantages[[1, 4]], 0.0);
    }

    #[test]
    fn single_masked_token_is_undefined() {
        let batch = RolloutBatch::from_group_keys(&[0], &[0.0]).unwrap();
        let rewards = array![[1.0, 0.0]];
        let mask = array![[true, false]];
        let input = EstimatorInput::new(&batch)
            .with_token_level_rewards(&rewards)
            .with_response_mask(&mask);
        let est = ReinforcePlusPlus::new(ReinforcePlusPlusConfig::default()).unwrap();
        assert!(matches!(est.estimate(&input), Err(Error::Undefined(_))));
        assert!(matches!(
            ReinforcePlusPlusBaseline.estimate(&input),
            Err(Error::Undefined(_))
        ));
    }
}
