use crate::estimator::SplitMix64;

/// Logits θ, one row per observation, all zero at the start (the uniform random policy).
///
/// ```
/// use beacon_rl::testbed::TabularPolicy;
/// let mut p = TabularPolicy::new(2, 3);
/// assert!((p.probability(0, 1) - 1.0 / 3.0).abs() < 1e-12);
/// // Credit +1 on action 1 at observation 0, one step in the batch, η = 1:
/// // θ(0) += (e_1 − (1/3, 1/3, 1/3)) = (−1/3, 2/3, −1/3).
/// p.accumulate(0, 1, 1.0);
/// p.apply(1.0, 1);
/// assert!(p.probability(0, 1) > 0.5);
/// ```
///
/// A tabular softmax policy π(a | o) = exp(θ(o, a)) / Σ_b exp(θ(o, b)) over observation ids,
/// updated by REINFORCE: θ(o, ·) += η · Â · (e_a − π(· | o)) for every step (o, a, Â) of the
/// batch, divided by the batch's number of steps (verl's `token-mean` loss aggregation, one
/// step = one response).
///
/// One gradient step per batch, on-policy: the PPO ratio is 1 at that point, so the clipped
/// surrogate's gradient equals REINFORCE's and clipping would never bind.
#[derive(Debug, Clone, PartialEq)]
pub struct TabularPolicy {
    actions: usize,
    logits: Vec<f64>,
    grad: Vec<f64>,
}

impl TabularPolicy {
    /// The uniform policy over `actions` actions at each of `observations` observations.
    pub fn new(observations: usize, actions: usize) -> Self {
        Self {
            actions,
            logits: vec![0.0; observations * actions],
            grad: vec![0.0; observations * actions],
        }
    }

    /// Number of actions.
    pub fn num_actions(&self) -> usize {
        self.actions
    }

    /// π(a | o). Observation ids past the table are treated as uniform.
    pub fn probability(&self, observation: usize, action: usize) -> f64 {
        let mut p = [0.0; 8];
        let n = self.probabilities(observation, &mut p);
        if action < n {
            p[action]
        } else {
            0.0
        }
    }

    /// Writes π(· | o) into `out` (at most 8 actions, the menu's size here); returns the count.
    fn probabilities(&self, observation: usize, out: &mut [f64; 8]) -> usize {
        let n = self.actions.min(8);
        let row = self
            .logits
            .get(observation * self.actions..(observation + 1) * self.actions);
        let Some(row) = row else {
            out[..n].iter_mut().for_each(|p| *p = 1.0 / n as f64);
            return n;
        };
        // Shift by the maximum: exp never overflows.
        let max = row.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x));
        let mut z = 0.0;
        for (p, &x) in out.iter_mut().zip(row) {
            *p = (x - max).exp();
            z += *p;
        }
        out[..n].iter_mut().for_each(|p| *p /= z);
        n
    }

    /// Draws an action from π(· | o) by inversion of one uniform draw.
    #[allow(private_interfaces)] // the library's generator; this module leaves the library
    pub fn sample(&self, observation: usize, rng: &mut SplitMix64) -> usize {
        let mut p = [0.0; 8];
        let n = self.probabilities(observation, &mut p);
        let mut u = rng.next_f64();
        for (a, &pa) in p[..n].iter().enumerate() {
            if u < pa {
                return a;
            }
            u -= pa;
        }
        n - 1
    }

    /// The most probable action at `o` (ties go to the lowest index, so an observation never
    /// trained on gives action 0): the greedy policy of the held-out evaluation.
    ///
    /// ```
    /// use beacon_rl::testbed::TabularPolicy;
    /// let mut p = TabularPolicy::new(1, 3);
    /// assert_eq!(p.greedy(0), 0);
    /// p.accumulate(0, 2, 1.0);
    /// p.apply(1.0, 1);
    /// assert_eq!(p.greedy(0), 2);
    /// ```
    pub fn greedy(&self, observation: usize) -> usize {
        let mut p = [0.0; 8];
        let n = self.probabilities(observation, &mut p);
        (0..n).fold(0, |best, a| if p[a] > p[best] { a } else { best })
    }

    /// Adds one step's gradient Â · (e_a − π(· | o)) to the pending update.
    pub fn accumulate(&mut self, observation: usize, action: usize, advantage: f64) {
        if advantage == 0.0 {
            return;
        }
        let mut p = [0.0; 8];
        let n = self.probabilities(observation, &mut p);
        if let Some(g) = self
            .grad
            .get_mut(observation * self.actions..(observation + 1) * self.actions)
        {
            for (b, (gb, pb)) in g.iter_mut().zip(&p[..n]).enumerate() {
                *gb += advantage * (f64::from(u8::from(b == action)) - pb);
            }
        }
    }

    /// θ += η · (pending gradient) / `steps`, then clears the pending gradient.
    pub fn apply(&mut self, learning_rate: f64, steps: usize) {
        let scale = learning_rate / steps.max(1) as f64;
        for (t, g) in self.logits.iter_mut().zip(self.grad.iter_mut()) {
            *t += scale * *g;
            *g = 0.0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reinforce_step_by_hand() {
        // Two actions, uniform: π = (1/2, 1/2). Steps (o = 0, a = 0, Â = 2) and (o = 0, a = 1,
        // Â = −1): gradient = 2·(1/2, −1/2) + (−1)·(−1/2, 1/2) = (1.5, −1.5). η = 0.5 over
        // 3 batch steps: θ(0) = (0.25, −0.25). π(0 | 0) = 1 / (1 + e^(−0.5)) = 0.622459.
        let mut p = TabularPolicy::new(2, 2);
        p.accumulate(0, 0, 2.0);
        p.accumulate(0, 1, -1.0);
        p.apply(0.5, 3);
        assert!((p.probability(0, 0) - 0.622_459_331).abs() < 1e-9);
        // Observation 1 untouched, and the pending gradient was cleared.
        assert_eq!(p.probability(1, 0), 0.5);
        p.apply(0.5, 3);
        assert!((p.probability(0, 0) - 0.622_459_331).abs() < 1e-9);
    }

    #[test]
    fn sampling_follows_the_probabilities() {
        // θ(0) = (ln 3, 0): π = (3/4, 1/4).
        let mut p = TabularPolicy::new(1, 2);
        p.logits[0] = 3f64.ln();
        let mut rng = SplitMix64::new(5);
        let n = 20_000;
        let zeros = (0..n).filter(|_| p.sample(0, &mut rng) == 0).count();
        // Binomial std √(n·3/16) ≈ 61: 5 std is ±306.
        assert!((zeros as f64 - 0.75 * n as f64).abs() < 306.0, "{zeros}");
    }
}
