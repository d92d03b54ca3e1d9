//! Group statistics shared by the group-relative estimators.
//!
//! Every group-relative estimator normalises a value against the other members of its group:
//!
//! - `mean_norm`: A = x − μ
//! - `mean_std_norm`: A = (x − μ) / (σ + ε), σ the unbiased (n − 1) standard deviation
//!
//! which is [`NormMode`]. A group of one has no spread; the peers (verl, the paper's release,
//! GiGPO) then use μ = 0, σ = 1, so the lone value passes through ([`SingletonRule`]).

/// How a value is normalised against its group.
///
/// The serde names are the peers' `mode` strings.
///
/// ```
/// use beacon_rl::NormMode;
/// assert_eq!(NormMode::MeanStdNorm.normalize(3.0, 1.0, 2.0, 0.0), 1.0);
/// assert_eq!(NormMode::MeanNorm.normalize(3.0, 1.0, 2.0, 0.0), 2.0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum NormMode {
    /// A = x − μ (the release's and GiGPO's default).
    #[default]
    MeanNorm,
    /// A = (x − μ) / (σ + ε), σ unbiased.
    MeanStdNorm,
}

impl NormMode {
    /// Normalises `x` against mean `mean` and standard deviation `std` with epsilon `eps`.
    ///
    /// ```
    /// use beacon_rl::NormMode;
    /// // (1 - 0.5) / (0.5 + 0.5) = 0.5
    /// assert_eq!(NormMode::MeanStdNorm.normalize(1.0, 0.5, 0.5, 0.5), 0.5);
    /// ```
    #[inline]
    pub fn normalize(self, x: f64, mean: f64, std: f64, eps: f64) -> f64 {
        match self {
            NormMode::MeanNorm => x - mean,
            NormMode::MeanStdNorm => (x - mean) / (std + eps),
        }
    }
}

/// What a group with a single member gets.
///
/// ```
/// use beacon_rl::SingletonRule;
/// assert_eq!(SingletonRule::default(), SingletonRule::PassThrough);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum SingletonRule {
    /// μ = 0, σ = 1: the lone value passes through (divided by 1 + ε in `mean_std_norm`).
    /// verl's convention and the default.
    #[default]
    PassThrough,
    /// The lone member gets advantage 0 (no comparison, no signal).
    Zero,
}

/// Mean and unbiased standard deviation of `n` values given their sum and the values again
/// for the second (deviation) pass. Two passes keep the result exact for equal values
/// (σ = 0 exactly), which a one-pass sum of squares would not.
#[inline]
pub(crate) fn mean_std<I>(sum: f64, n: usize, values: I) -> (f64, f64)
where
    I: Iterator<Item = f64>,
{
    let mean = sum / n as f64;
    if n < 2 {
        return (mean, f64::NAN);
    }
    let ss: f64 = values.map(|v| (v - mean) * (v - mean)).sum();
    (mean, (ss / (n - 1) as f64).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_std_hand_case() {
        // values 1, 2, 3, 6: mean 3, deviations -2 -1 0 3 -> ss 14, var 14/3
        let v = [1.0, 2.0, 3.0, 6.0];
        let (m, s) = mean_std(12.0, 4, v.iter().copied());
        assert_eq!(m, 3.0);
        assert_eq!(s, (14.0f64 / 3.0).sqrt());
    }

    #[test]
    fn equal_values_have_zero_std() {
        let v = [0.1; 7];
        let sum: f64 = v.iter().sum();
        let (_, s) = mean_std(sum, 7, v.iter().copied());
        assert!(s < 1e-15);
    }
}
