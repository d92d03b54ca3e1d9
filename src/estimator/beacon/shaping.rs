//! Temporal reward shaping within segments (paper §3.3).
//!
//! For step t of completed segment k (closed by milestone step t_k):
//!
//! r_t = R_ms · γ^(t_k − t),
//!
//! and r_t = 0 in the unfinished segment. Steps nearer the milestone get more credit; γ = 1 is
//! uniform shaping, γ = 0 rewards only the milestone step (0⁰ = 1).
//!
//! [`DecayTable`] precomputes R_ms·γ^d and the per-step mean return of a segment of length L,
//! (1/L)·Σ_{d<L} R_ms·γ^d, so that the estimator's hot loop does table look-ups instead of
//! `pow` calls. Each entry is computed as `R_ms * γ.powf(d)`, the same expression (and libm
//! `pow`) as the paper's release (`10 * gamma ** d` in Python).

/// Shaped reward R_ms·γ^d for one step at distance `d` from its segment's milestone.
#[inline]
pub(crate) fn shaped_reward(milestone_reward: f64, segment_decay: f64, distance: usize) -> f64 {
    milestone_reward * segment_decay.powf(distance as f64)
}

/// Look-up tables of shaped rewards and per-step segment returns for one (R_ms, γ).
#[derive(Debug, Clone, Default)]
pub(crate) struct DecayTable {
    reward: Vec<f64>,
    mean_return: Vec<f64>,
    key: Option<(u64, u64)>,
}

impl DecayTable {
    /// Makes the table cover distances `0..max_len` and segment lengths `1..=max_len`.
    /// Reuses its buffers (no allocation once large enough) and recomputes only what changed.
    pub(crate) fn prepare(&mut self, milestone_reward: f64, segment_decay: f64, max_len: usize) {
        let key = (milestone_reward.to_bits(), segment_decay.to_bits());
        if self.key != Some(key) {
            self.reward.clear();
            self.mean_return.clear();
            self.mean_return.push(0.0); // length 0: unused
            self.key = Some(key);
        }
        let mut sum = self.reward.iter().sum::<f64>();
        for d in self.reward.len()..max_len {
            let r = shaped_reward(milestone_reward, segment_decay, d);
            self.reward.push(r);
            sum += r;
            // A mean lies between the smallest (γ ≤ 1: the farthest step's, r) and the largest
            // (R_ms) value averaged; a plain Σ/n can miss that range by an ulp (γ = 1,
            // R_ms = 0.1, L = 3: 0.30000000000000004/3 > 0.1), which left uniform shaping's
            // A^seg = R_ms − b_k at ±1e-17 instead of 0. Non-finite (an overflowed sum) is
            // kept, for the output check to report.
            let mean = sum / (d + 1) as f64;
            self.mean_return.push(if mean.is_finite() {
                mean.clamp(r, self.reward[0])
            } else {
                mean
            });
        }
    }

    /// R_ms·γ^d, or `None` when `d` is not below the prepared length (like `slice::get`;
    /// [`shaped_reward`] computes any distance).
    #[inline]
    pub(crate) fn reward(&self, d: usize) -> Option<f64> {
        self.reward.get(d).copied()
    }

    /// R_k / |Seg_k| for a completed segment of `len` steps: (1/len)·Σ_{d<len} R_ms·γ^d, kept
    /// within [R_ms·γ^(len−1), R_ms] (exactly R_ms for γ = 1), or `None` when `len` exceeds
    /// the prepared length (like `slice::get`). `len = 0` gives 0.
    #[inline]
    pub(crate) fn mean_return(&self, len: usize) -> Option<f64> {
        self.mean_return.get(len).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_grows_and_resets_on_new_parameters() {
        let mut t = DecayTable::default();
        t.prepare(1.0, 0.5, 2);
        t.prepare(1.0, 0.5, 4); // grow: sums continue
        assert_eq!(t.mean_return(4), Some((1.0 + 0.5 + 0.25 + 0.125) / 4.0));
        t.prepare(2.0, 0.5, 2); // new R_ms: rebuilt
        assert_eq!(t.reward(0), Some(2.0));
        assert_eq!(t.mean_return(2), Some(1.5));
    }

    #[test]
    fn lookups_past_the_prepared_length_are_none_not_a_panic() {
        // `DecayTable::default().reward(3)` used to index out of bounds.
        let mut t = DecayTable::default();
        assert_eq!((t.reward(3), t.mean_return(3)), (None, None));
        t.prepare(1.0, 0.5, 2);
        assert_eq!((t.reward(1), t.reward(2)), (Some(0.5), None));
        assert_eq!((t.mean_return(2), t.mean_return(3)), (Some(0.75), None));
    }

    #[test]
    fn hand_computed_values() {
        assert_eq!(shaped_reward(1.0, 0.5, 2), 0.25); // 1 · 0.5²
        assert_eq!(shaped_reward(10.0, 0.0, 0), 10.0); // 0^0 = 1: the milestone step itself
        assert_eq!(shaped_reward(10.0, 0.0, 1), 0.0);
        let mut t = DecayTable::default();
        t.prepare(1.0, 0.5, 3);
        assert_eq!(t.reward(2), Some(0.25));
        assert_eq!(t.mean_return(3), Some(1.75 / 3.0)); // (0.25 + 0.5 + 1) / 3
        t.prepare(10.0, 0.9, 2);
        assert_eq!(t.reward(1), Some(9.0));
        t.prepare(1.0, 0.0, 4);
        assert_eq!(t.mean_return(4), Some(0.25)); // only the milestone step is rewarded
        assert_eq!(t.mean_return(5), None);
    }

    #[test]
    fn uniform_mean_returns_are_exactly_the_milestone_reward() {
        // γ = 1: every averaged value is R_ms, so the mean is R_ms. Plain Σ/n gives
        // (0.1 + 0.1 + 0.1)/3 = 0.10000000000000002 and 0.6·… = 0.09999999999999999 for L = 6.
        let mut t = DecayTable::default();
        t.prepare(0.1, 1.0, 9);
        for len in 1..=9 {
            assert_eq!(t.mean_return(len), Some(0.1), "L = {len}");
        }
        // An overflowed sum stays non-finite (reported by the estimator), not clamped to R_ms.
        t.prepare(1e308, 1.0, 2);
        assert_eq!(t.mean_return(2), Some(f64::INFINITY));
    }

    #[test]
    fn matches_python_pow_expression() {
        // The release computes 10 * 0.95 ** 4 = 8.145062500000001 in float64.
        assert_eq!(shaped_reward(10.0, 0.95, 4), 10.0 * 0.95f64.powf(4.0));
        assert!((shaped_reward(10.0, 0.95, 4) - 8.1450625).abs() < 1e-12);
    }
}
