//! ReMax: `remax` (`EstimatorConfig::Remax`, verl `compute_remax_outcome_advantage`).
//!
//! Undiscounted reward-to-go of the masked rewards minus a per-row baseline b_i (the reward of
//! the greedy response, supplied by the caller):
//!
//! ```text
//! returns_{i,t}    = Σ_{t' ≥ t} r_{i,t'} · mask_{i,t'}
//! advantages_{i,t} = returns_{i,t} − b_i · mask_{i,t}
//! ```
//!
//! # Peer behaviour reproduced
//! Neither output is re-masked: at a mask-0 position inside a response (a multi-turn
//! observation token) both `returns` and `advantages` hold the reward-to-go of the later
//! masked tokens. No deliberate difference from verl.

use super::whiten::FiniteAcc;
use super::{
    check_all_finite, fill_estimator, report_non_finite_input, validate_deferred, EstimatorInput,
    FiniteCheck, InputBufs, Out, Scratch, Tokens,
};
use crate::error::{check_finite, check_len, Error, Result};

/// verl's `remax` (see the module docs (`src/estimator/remax.rs`)). Needs `token_level_rewards`,
/// `response_mask` and `reward_baselines` (one per row).
///
/// ```
/// use beacon_rl::estimator::EstimatorConfig;
/// use beacon_rl::estimator::{AdvantageEstimator, EstimatorInput};
/// use beacon_rl::RolloutBatch;
/// let batch = RolloutBatch::from_group_keys(&[0], &[0.0])?;
/// let rewards = [[0.5, 0.0, 1.0]];
/// let mask = [[true, false, true]];
/// let input = EstimatorInput::new(&batch)
///     .with_token_level_rewards(&rewards)
///     .with_response_mask(&mask)
///     .with_reward_baselines(&[1.0]);
/// let out = EstimatorConfig::Remax.build()?.estimate(&input)?;
/// assert_eq!(out.returns().row(0).to_vec(), vec![1.5, 1.0, 1.0]);
/// assert_eq!(out.advantages.row(0).to_vec(), vec![0.5, 1.0, 0.0]);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Remax;

/// The validated `token_level_rewards`, `response_mask` and `reward_baselines`.
type RemaxInputs<'a> = (Tokens<'a, f64>, Tokens<'a, bool>, &'a [f64]);

impl Remax {
    fn inputs<'a>(
        input: &EstimatorInput<'a>,
        check: FiniteCheck,
        bufs: &mut InputBufs,
    ) -> Result<RemaxInputs<'a>> {
        let (rewards, mask) = input.checked_rewards_and_mask(check, bufs)?;
        let baselines = input
            .reward_baselines
            .ok_or(Error::MissingInput("reward_baselines"))?;
        check_len("reward_baselines", rewards.rows(), baselines.len())?;
        check_all_finite("reward_baselines", baselines)?;
        Ok((rewards, mask, baselines))
    }

    fn fill(&self, input: &EstimatorInput<'_>, out: &mut Out<'_>, ws: &mut Scratch) -> Result<()> {
        // Reward finiteness is checked inside the scan (see FiniteCheck).
        let (rewards, mask, baselines) =
            validate_deferred(&mut ws.inputs, |check, bufs| Self::inputs(input, check, bufs))?;
        let result = Self::scan(input, &rewards, &mask, baselines, out);
        rewards.recycle(&mut ws.inputs.rewards);
        mask.recycle(&mut ws.inputs.mask);
        result
    }

    fn scan(
        input: &EstimatorInput<'_>,
        rewards: &Tokens<'_, f64>,
        mask: &Tokens<'_, bool>,
        baselines: &[f64],
        out: &mut Out<'_>,
    ) -> Result<()> {
        let (advantages, returns) = out.buffers(rewards.dim())?;
        // A non-finite reward at a masked token makes its return non-finite: the returns flag
        // also covers those rewards, the unread (unmasked) ones are folded in separately.
        // Any hit re-runs the eager input checks first.
        let (mut ret_finite, mut adv_finite) = (FiniteAcc::default(), FiniteAcc::default());
        for (r, &b) in baselines.iter().enumerate() {
            let rrow = rewards.row(r);
            let n = rrow.len();
            let mrow = &mask.row(r)[..n];
            let (ret, adv) = (
                &mut returns[r * n..(r + 1) * n],
                &mut advantages[r * n..(r + 1) * n],
            );
            let mut acc = 0.0f64;
            for t in (0..n).rev() {
                let a = if mrow[t] {
                    acc += rrow[t];
                    acc - b
                } else {
                    ret_finite.push(rrow[t]);
                    acc
                };
                adv[t] = a;
                ret[t] = acc;
                adv_finite.push(a);
                ret_finite.push(acc);
            }
        }
        if !ret_finite.all() {
            report_non_finite_input(|check, bufs| Self::inputs(input, check, bufs))?;
            check_finite("returns", returns)?;
        }
        if !adv_finite.all() {
            check_finite("advantages", advantages)?;
        }
        Ok(())
    }
}

fill_estimator!(Remax, "remax", returns = true);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimator::AdvantageEstimator;
    use crate::RolloutBatch;
    use ndarray::array;

    #[test]
    fn missing_or_short_baselines() {
        let batch = RolloutBatch::from_group_keys(&[0, 1], &[0.0; 2]).unwrap();
        let rewards = array![[1.0], [0.0]];
        let mask = array![[true], [true]];
        let input = EstimatorInput::new(&batch)
            .with_token_level_rewards(&rewards)
            .with_response_mask(&mask);
        assert_eq!(
            Remax.estimate(&input),
            Err(Error::MissingInput("reward_baselines"))
        );
        assert!(matches!(
            Remax.estimate(&input.with_reward_baselines(&[0.0])),
            Err(Error::LengthMismatch {
                what: "reward_baselines",
                ..
            })
        ));
        assert!(matches!(
            Remax.estimate(&input.with_reward_baselines(&[0.0, f64::NAN])),
            Err(Error::NonFinite {
                what: "reward_baselines",
                index: 1,
                ..
            })
        ));
    }

    #[test]
    fn trailing_padding_and_unmasked_rewards() {
        // Rewards on mask-0 tokens do not count: row [1 (mask 0), 2, 3 (mask 0 padding)]:
        // returns t=2: 0, t=1: 2, t=0: 2 (its own reward is unmasked); baseline 0.5.
        let batch = RolloutBatch::from_group_keys(&[0], &[0.0]).unwrap();
        let rewards = array![[1.0, 2.0, 3.0]];
        let mask = array![[false, true, false]];
        let input = EstimatorInput::new(&batch)
            .with_token_level_rewards(&rewards)
            .with_response_mask(&mask)
            .with_reward_baselines(&[0.5]);
        let out = Remax.estimate(&input).unwrap();
        assert_eq!(out.returns().row(0).to_vec(), vec![2.0, 2.0, 0.0]);
        assert_eq!(out.advantages.row(0).to_vec(), vec![2.0, 1.5, 0.0]);
    }
}
