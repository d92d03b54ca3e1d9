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
/// The one normalisation setting of every estimator that has one: the `norm` key of `grpo`
/// (and its variants), `gigpo` and the official BEACON flavour. The serde names are the
/// strings of the peers' `mode` arguments (verl-agent's GiGPO, the paper's release); verl's
/// `norm_adv_by_std_in_grpo = true` is `MeanStdNorm` (GRPO's default) and `false` is
/// `MeanNorm` (Dr.GRPO).
///
/// ```
/// use beacon_rl::estimator::NormMode;
/// assert_eq!(NormMode::default(), NormMode::MeanNorm);
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
    #[inline]
    pub(crate) fn normalize(self, x: f64, mean: f64, std: f64, eps: f64) -> f64 {
        match self {
            NormMode::MeanNorm => x - mean,
            NormMode::MeanStdNorm => (x - mean) / (std + eps),
        }
    }
}

/// What a group with a single member gets.
///
/// ```
/// use beacon_rl::estimator::SingletonRule;
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

/// Count, mean and unbiased std of one group of values.
///
/// The mean is clamped to [min, max], so a group of equal values has exactly that mean and
/// σ = 0 (a plain `sum / n` can miss by an ulp, which `mean_std_norm` would then divide by ε
/// and turn into a spurious advantage). The sum itself is a plain running sum: this runs once
/// per row on the estimators' hot path.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GroupStats {
    pub(crate) count: usize,
    sum: f64,
    min: f64,
    max: f64,
    pub(crate) mean: f64,
    m2: f64,
    /// Unbiased standard deviation; 0 for fewer than two values. NaN when σ exceeds f64::MAX
    /// (not representable), so that a division by it shows up in the callers' output checks
    /// instead of giving a plausible 0.
    pub(crate) std: f64,
    /// Set when the plain sum (or sum of squares) overflowed and was recomputed in units of
    /// the group's max |x| (see [`GroupStats::scale`]).
    rescaled: bool,
}

impl Default for GroupStats {
    fn default() -> Self {
        Self {
            count: 0,
            sum: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            mean: 0.0,
            m2: 0.0,
            std: 0.0,
            rescaled: false,
        }
    }
}

impl GroupStats {
    /// Statistics of one slice (two passes).
    pub(crate) fn of(values: &[f64]) -> Self {
        let mut s = Self::default();
        values.iter().for_each(|&x| s.add(x));
        s.finish_mean();
        values.iter().for_each(|&x| s.add_deviation(x));
        s.finish_std();
        if !(s.sum.is_finite() && s.m2.is_finite()) {
            // Overflow: the labelled path holds the fallback (allocates, but only here).
            let mut stats = Vec::with_capacity(1);
            let labels = vec![0; values.len()];
            group_means(values, &labels, 1, &mut stats);
            group_spreads(values, &labels, &mut stats);
            return stats[0];
        }
        s
    }

    /// The group's max |x|: the unit of the overflow fallbacks. Dividing by it keeps every
    /// value in [−1, 1], so neither Σx nor Σ(x − μ)² can overflow.
    fn scale(&self) -> f64 {
        self.max.max(-self.min)
    }

    /// First pass: one value.
    #[inline]
    fn add(&mut self, x: f64) {
        self.count += 1;
        self.sum += x;
        // Inputs are finite (checked by the callers), so plain comparisons suffice; f64::min
        // and max also order NaNs, which costs several instructions per row here.
        if x < self.min {
            self.min = x;
        }
        if x > self.max {
            self.max = x;
        }
    }

    fn finish_mean(&mut self) {
        if self.count > 0 {
            let mean = self.sum / self.count as f64;
            self.mean = mean.clamp(self.min, self.max);
        }
    }

    /// Second pass: one value's squared deviation from the mean.
    #[inline]
    fn add_deviation(&mut self, x: f64) {
        let d = x - self.mean;
        self.m2 += d * d;
    }

    fn finish_std(&mut self) {
        if self.count > 1 {
            self.std = (self.m2 / (self.count - 1) as f64).sqrt();
        }
    }
}

/// Per-label count and mean of `values`: `stats[l]` describes the values whose
/// `labels[r] == l` (labels below `num_labels`). Reuses `stats`' allocation. Call
/// [`group_spreads`] afterwards when the standard deviations are needed (`mean_std_norm`).
pub(crate) fn group_means(values: &[f64], labels: &[usize], num_labels: usize, stats: &mut Vec<GroupStats>) {
    stats.clear();
    stats.resize(num_labels, GroupStats::default());
    for (&x, &l) in values.iter().zip(labels) {
        stats[l].add(x);
    }
    stats.iter_mut().for_each(GroupStats::finish_mean);
    // Overflow fallback (finite inputs whose plain sum overflowed): μ = s·Σ(x/s)/n. Only
    // groups whose sum is not finite take it, so every other result keeps its bits.
    if stats.iter().any(|s| !s.sum.is_finite()) {
        for s in stats.iter_mut().filter(|s| !s.sum.is_finite()) {
            s.rescaled = true;
            s.sum = 0.0;
        }
        for (&x, &l) in values.iter().zip(labels) {
            let s = &mut stats[l];
            if s.rescaled {
                s.sum += x / s.scale();
            }
        }
        for s in stats.iter_mut().filter(|s| s.rescaled) {
            s.mean = (s.sum / s.count as f64 * s.scale()).clamp(s.min, s.max);
        }
    }
}

/// Second pass after [`group_means`] over the same values and labels: the unbiased standard
/// deviations.
pub(crate) fn group_spreads(values: &[f64], labels: &[usize], stats: &mut [GroupStats]) {
    for (&x, &l) in values.iter().zip(labels) {
        stats[l].add_deviation(x);
    }
    stats.iter_mut().for_each(GroupStats::finish_std);
    // Overflow fallback: σ = s·√(Σ((x − μ)/s)² / (n − 1)), only for groups whose plain sum of
    // squares overflowed (so every other result keeps its bits).
    if stats.iter().any(|s| !s.m2.is_finite()) {
        let pending: Vec<bool> = stats.iter().map(|s| !s.m2.is_finite()).collect();
        for (s, _) in stats.iter_mut().zip(&pending).filter(|&(_, &p)| p) {
            s.rescaled = true;
            s.m2 = 0.0;
        }
        for (&x, &l) in values.iter().zip(labels) {
            if pending[l] {
                let s = &mut stats[l];
                let d = x / s.scale() - s.mean / s.scale();
                s.m2 += d * d;
            }
        }
        for (s, _) in stats.iter_mut().zip(&pending).filter(|&(_, &p)| p) {
            let std = s.scale() * (s.m2 / (s.count - 1) as f64).sqrt();
            s.std = if std.is_finite() { std } else { f64::NAN };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unbiased_std_hand_case() {
        // values 1, 2, 3, 6: mean 3, squared deviations 4 + 1 + 0 + 9 = 14, var = 14 / 3.
        let s = GroupStats::of(&[1.0, 2.0, 3.0, 6.0]);
        assert_eq!((s.count, s.mean), (4, 3.0));
        assert_eq!(s.std, (14.0f64 / 3.0).sqrt());
    }

    #[test]
    fn all_equal_is_exact() {
        // 0.1 + 0.1 + 0.1 = 0.30000000000000004 in f64; divided by 3 it is not 0.1, but the
        // clamp to [min, max] restores it, so deviations and std are exactly 0.
        let s = GroupStats::of(&[0.1, 0.1, 0.1]);
        assert_eq!((s.mean, s.std), (0.1, 0.0));
    }

    #[test]
    fn overflowing_sums_fall_back_to_scaled_statistics() {
        // [1e308, 1e308, -1e308]: Σx overflows (the clamp would have hidden it: mean 1e308).
        // μ = 1e308/3; deviations (2/3, 2/3, -4/3)·1e308, Σd² = (24/9)·1e616 overflows too;
        // σ² = (4/3)·1e616, σ = (2/√3)·1e308.
        let s = GroupStats::of(&[1e308, 1e308, -1e308]);
        assert!((s.mean / 1e308 - 1.0 / 3.0).abs() < 1e-15, "{}", s.mean);
        assert!((s.std / 1e308 - 2.0 / 3f64.sqrt()).abs() < 1e-15, "{}", s.std);
        // Only the overflowing label takes the fallback; the other keeps its exact bits.
        let (values, labels) = ([1e155, 0.1, -1e155, 0.2], [0, 1, 0, 1]);
        let mut stats = Vec::new();
        group_means(&values, &labels, 2, &mut stats);
        group_spreads(&values, &labels, &mut stats);
        assert_eq!(stats[0].mean, 0.0);
        assert!(
            (stats[0].std / 1e155 - 2f64.sqrt()).abs() < 1e-15,
            "{}",
            stats[0].std
        );
        assert_eq!(stats[1].std, GroupStats::of(&[0.1, 0.2]).std);
        assert_eq!(stats[1].std, ((0.05f64 * 0.05 + 0.05 * 0.05) / 1.0).sqrt());
    }

    #[test]
    fn spread_beyond_f64_max_is_nan_not_infinite() {
        // ±1.7e308: σ = √2·1.7e308 > f64::MAX. An ∞ σ would turn (x − μ)/(σ + ε) into a
        // plausible 0; NaN makes the callers' output checks report it.
        let s = GroupStats::of(&[1.7e308, -1.7e308]);
        assert_eq!(s.mean, 0.0);
        assert!(s.std.is_nan());
    }

    #[test]
    fn labelled_groups() {
        // label 0: {1, 3} mean 2, std sqrt(2); label 1: {5} alone; label 2: empty.
        let mut stats = Vec::new();
        let (values, labels) = ([1.0, 5.0, 3.0], [0, 1, 0]);
        group_means(&values, &labels, 3, &mut stats);
        assert_eq!((stats[0].mean, stats[0].std), (2.0, 0.0)); // no spread pass yet
        group_spreads(&values, &labels, &mut stats);
        assert_eq!(
            (stats[0].count, stats[0].mean, stats[0].std),
            (2, 2.0, 2f64.sqrt())
        );
        assert_eq!((stats[1].count, stats[1].mean, stats[1].std), (1, 5.0, 0.0));
        assert_eq!(stats[2].count, 0);
    }
}
