//! What [`AdvantageEstimator::estimate`] returns: [`Advantages`].

use ndarray::Array2;

#[cfg(doc)]
use super::AdvantageEstimator;

/// Advantages (and returns, where they differ) for every row, rows × L in the caller's row
/// order: the output of [`estimate`](AdvantageEstimator::estimate).
///
/// `returns` is `Some` only for estimators whose returns differ from their advantages (GAE,
/// REINFORCE++, ReMax, OTB; see [`AdvantageEstimator::has_returns`]); for the others verl
/// returns the advantages twice, and [`returns`](Self::returns) gives the advantages.
///
/// ```
/// use beacon_rl::estimator::{AdvantageEstimator, EstimatorConfig, EstimatorInput};
/// use beacon_rl::RolloutBatch;
/// let batch = RolloutBatch::from_group_keys(&[0], &[1.0])?;
/// let input = EstimatorInput::new(&batch)
///     .with_token_level_rewards(&[[0.0, 1.0]])
///     .with_response_mask(&[[true, true]])
///     .with_reward_baselines(&[0.25]);
/// let out = EstimatorConfig::Remax.build()?.estimate(&input)?;
/// assert_eq!(out.returns().row(0).to_vec(), vec![1.0, 1.0]); // reward-to-go
/// assert_eq!(out.advantages.row(0).to_vec(), vec![0.75, 0.75]); // minus the greedy baseline
/// let rloo = EstimatorConfig::Rloo.build()?.estimate(&input)?;
/// assert!(rloo.returns.is_none());
/// assert_eq!(rloo.returns(), &rloo.advantages);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Advantages {
    /// Advantage per token, rows × L.
    pub advantages: Array2<f64>,
    /// Return (value target) per token, rows × L, when it differs from the advantage.
    pub returns: Option<Array2<f64>>,
}

impl Advantages {
    /// Advantages, and returns where they differ from them (for implementors of
    /// [`AdvantageEstimator::estimate`]).
    ///
    /// ```
    /// use beacon_rl::estimator::Advantages;
    /// let out = Advantages::new(ndarray::array![[1.0]], None);
    /// assert_eq!(out.returns()[[0, 0]], 1.0);
    /// ```
    pub fn new(advantages: Array2<f64>, returns: Option<Array2<f64>>) -> Self {
        Self { advantages, returns }
    }

    /// The returns: [`returns`](Self::returns) when the estimator defines them, else the
    /// advantages (verl's outcome estimators return the same tensor twice).
    ///
    /// ```
    /// use beacon_rl::estimator::Advantages;
    /// use ndarray::array;
    /// let defined = Advantages::new(array![[0.5]], Some(array![[2.0]]));
    /// assert_eq!(defined.returns(), &array![[2.0]]);
    /// let same = Advantages::new(array![[0.5]], None);
    /// assert_eq!(same.returns(), &same.advantages);
    /// ```
    pub fn returns(&self) -> &Array2<f64> {
        self.returns.as_ref().unwrap_or(&self.advantages)
    }
}
