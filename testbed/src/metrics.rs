//! Summaries of success curves and the rank agreement with the paper's Table 3.
//!
//! - final success: mean success over the last tenth of the iterations (at least one);
//! - iterations to 50%: the first iteration at which the mean success over the last 5
//!   iterations (fewer at the start) reaches 0.5, `None` when it never does;
//! - area under the curve (AUC): mean success over all iterations, in [0, 1].

/// Final success of one curve: the mean over its last ⌈n/10⌉ iterations (0 for an empty curve).
///
/// ```
/// use beacon_rl_testbed::final_success;
/// let curve: Vec<f64> = (0..20).map(|i| if i < 18 { 0.0 } else { 1.0 }).collect();
/// assert_eq!(final_success(&curve), 1.0); // last 2 of 20
/// ```
pub fn final_success(curve: &[f64]) -> f64 {
    let k = curve.len().div_ceil(10);
    mean(&curve[curve.len() - k..])
}

/// First iteration whose trailing 5-iteration mean success reaches 0.5.
///
/// ```
/// use beacon_rl_testbed::iterations_to_half;
/// // Trailing means: 0, 0, 1/3, 2/4 at iteration 3.
/// assert_eq!(iterations_to_half(&[0.0, 0.0, 1.0, 1.0]), Some(3));
/// assert_eq!(iterations_to_half(&[0.4; 9]), None);
/// ```
pub fn iterations_to_half(curve: &[f64]) -> Option<usize> {
    (0..curve.len()).find(|&i| mean(&curve[i.saturating_sub(4)..=i]) >= 0.5)
}

/// Area under the success curve: its mean (0 for an empty curve).
///
/// ```
/// use beacon_rl_testbed::auc;
/// assert_eq!(auc(&[0.0, 0.5, 1.0]), 0.5);
/// ```
pub fn auc(curve: &[f64]) -> f64 {
    mean(curve)
}

/// Mean of `x` (0 for an empty slice).
pub fn mean(x: &[f64]) -> f64 {
    if x.is_empty() {
        0.0
    } else {
        x.iter().sum::<f64>() / x.len() as f64
    }
}

/// Sample standard deviation of `x` (n − 1; 0 for fewer than two values).
///
/// ```
/// use beacon_rl_testbed::std_dev;
/// assert!((std_dev(&[1.0, 3.0]) - 2f64.sqrt()).abs() < 1e-12);
/// ```
pub fn std_dev(x: &[f64]) -> f64 {
    if x.len() < 2 {
        return 0.0;
    }
    let m = mean(x);
    (x.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / (x.len() - 1) as f64).sqrt()
}

/// Kendall's τ-b between two paired samples: (concordant − discordant) / √((n₀ − n₁)(n₀ − n₂)),
/// n₀ = n(n−1)/2 pairs, n₁ and n₂ the pairs tied in x and in y. `None` when either sample is
/// constant or the lengths differ.
///
/// ```
/// use beacon_rl_testbed::kendall_tau;
/// assert_eq!(kendall_tau(&[1.0, 2.0, 3.0], &[10.0, 20.0, 30.0]), Some(1.0));
/// assert_eq!(kendall_tau(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]), Some(-1.0));
/// // Pairs (1,2): +, (1,3): +, (2,3): −  → (2 − 1) / 3.
/// assert!((kendall_tau(&[1.0, 2.0, 3.0], &[1.0, 3.0, 2.0]).unwrap() - 1.0 / 3.0).abs() < 1e-12);
/// assert_eq!(kendall_tau(&[1.0, 1.0], &[1.0, 2.0]), None);
/// ```
pub fn kendall_tau(x: &[f64], y: &[f64]) -> Option<f64> {
    if x.len() != y.len() {
        return None;
    }
    let n = x.len();
    let (mut s, mut tx, mut ty, mut n0) = (0.0, 0.0, 0.0, 0.0);
    for i in 0..n {
        for j in i + 1..n {
            n0 += 1.0;
            let dx = (x[i] - x[j]).signum() * f64::from(u8::from(x[i] != x[j]));
            let dy = (y[i] - y[j]).signum() * f64::from(u8::from(y[i] != y[j]));
            s += dx * dy;
            tx += f64::from(u8::from(dx == 0.0));
            ty += f64::from(u8::from(dy == 0.0));
        }
    }
    let d = ((n0 - tx) * (n0 - ty)).sqrt();
    (d > 0.0).then(|| s / d)
}

/// The paper's Table 3 (Qwen2.5-1.5B-Instruct), rows in [`Method::table3`](super::Method::table3)
/// order: BEACON, 50% dropout, random partition, γ = 0, γ = 1, w/o segment, w/o trajectory.
pub const PAPER_TABLE3_ALFWORLD: [f64; 7] = [91.4, 82.8, 74.2, 81.2, 71.8, 72.8, 23.4];
/// The WebShop column of the same table.
pub const PAPER_TABLE3_WEBSHOP: [f64; 7] = [75.6, 68.3, 57.6, 62.1, 64.1, 56.8, 67.9];
