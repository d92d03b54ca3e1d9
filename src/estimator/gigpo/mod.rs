//! GiGPO: group-in-group policy optimization (verl-agent `gigpo/core_gigpo.py`,
//! `compute_gigpo_outcome_advantage`; verl's `adv_estimator = "gigpo"`).

mod advantage;
mod anchors;
mod config;
mod estimator;

pub(crate) use advantage::GigpoScratch;
pub use config::{GigpoConfig, StepGrouping};
/// GiGPO: group-in-group policy optimization (verl-agent `gigpo/core_gigpo.py`,
/// `compute_gigpo_outcome_advantage`; verl's `adv_estimator = "gigpo"`).
///
/// Every step row `r` of trajectory `i` in task group `g` (verl's `uid`) gets
///
/// ```text
/// A(r)   = A_E(r) + w · A_S(r)
///
/// A_E(r) = s_r − μ_g                      mean_norm        s_r = R(τ_i), the terminal reward
///        = (s_r − μ_g) / (σ_g + ε)        mean_std_norm    μ_g, σ_g over the *rows* of g
///
/// R_t    = r_t + γ · R_{t+1}              per trajectory, rows in row order, R past the end = 0
///
/// A_S(r) = R_r − μ_G                      mean_norm        G = the step group of r
///        = (R_r − μ_G) / (σ_G + ε)        mean_std_norm
/// ```
///
/// Through the trait, a caller's [`row_scores`](crate::estimator::EstimatorInput::with_row_scores)
/// replace R(τ_i) as s_r (row r's own score, as verl-agent's `episode_norm_reward` sums each
/// row's token rewards, which its invalid-action penalty makes differ within a trajectory).
///
/// σ is the unbiased (n − 1) standard deviation. The episode statistics are over step rows, not
/// trajectories (the peer's `compute_mean_std_cross_steps=True`): a trajectory with more steps
/// weighs more in μ_g. A task group holding a single row uses μ = 0, σ = 1. A step group holding a
/// single row gets A_S = 0.
///
/// Step groups (the "anchor states", `anchors.rs`) partition the rows of each task group:
/// - [`StepGrouping::Exact`]: rows with identical anchor observations;
/// - [`StepGrouping::Similarity`]: the peer's greedy clustering. Rows are visited in caller
///   order; a row joins the first existing cluster (in order of creation) whose *first member*
///   `rep` satisfies Python's `SequenceMatcher(None, anchor, rep).ratio() >= threshold`
///   (a port of CPython's `difflib`, same argument order), otherwise it founds a new cluster.
///
/// Step group labels are numbered in order of first appearance in the caller's rows.
///
/// Differences from the peer: the peer computes step returns in float32
/// (`rewards.astype(np.float32)`), this crate in f64 (below the parity tolerance); means are
/// running sums clamped to the group's [min, max], so an all-equal group gives exactly 0 where
/// the peer's mean can be off by its last bit and `mean_std_norm` divides that by ε: about
/// ±1e-17 / 1e-6 in float64, but in float32 (a trainer's token rewards, or the step returns)
/// one ulp of a value such as 2.7 over ε = 1e-6 leaves ±0.1 to ±0.3 on every row of such a
/// group (measured against the release's own code, `python/tests/test_release_differential.py`).
///
/// ```
/// use beacon_rl::estimator::{Gigpo, GigpoConfig};
/// use beacon_rl::RolloutBatch;
///
/// // One task, trajectories "a" (rows 0, 1; success) and "b" (rows 2, 3; failure).
/// let batch = RolloutBatch::from_row_keys(&["g"; 4], &["a", "a", "b", "b"], &[1.0, 1.0, 0.0, 0.0])?;
/// let step_rewards = [0.0, 1.0, 0.0, 0.0];
/// let anchors = ["s0", "s1", "s0", "s2"];
/// let gigpo = Gigpo::new(GigpoConfig::verl_agent().with_step_decay(0.5))?;
/// let out = gigpo.compute(&batch, &step_rewards, &anchors)?;
///
/// // A_E: row mean (1 + 1 + 0 + 0) / 4 = 0.5.
/// assert_eq!(out.episode_advantages, [0.5, 0.5, -0.5, -0.5]);
/// // Returns of "a": R_1 = 1, R_0 = 0 + 0.5 · 1 = 0.5; "b": 0, 0.
/// assert_eq!(out.step_returns, [0.5, 1.0, 0.0, 0.0]);
/// // Step groups: {0, 2} share "s0"; "s1" and "s2" are singletons.
/// assert_eq!(out.step_groups, [0, 1, 0, 2]);
/// // A_S of group {0, 2}: mean 0.25, so +0.25 and −0.25; singletons 0.
/// assert_eq!(out.step_advantages, [0.25, 0.0, -0.25, 0.0]);
/// assert_eq!(out.advantages, [0.75, 0.5, -0.75, -0.5]);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
///
/// # Where each equation lives
///
/// | file | computes |
/// |---|---|
/// | `anchors.rs` | the step groups: exact interning or the peer's similarity clustering |
/// | `advantage.rs` | R_t, A_E, A_S and A = A_E + w·A_S, one task group at a time |
/// | `config.rs` | [`GigpoConfig`], [`StepGrouping`] |
/// | `estimator.rs` | [`Gigpo`]: the [`AdvantageEstimator`](crate::estimator::AdvantageEstimator) entry points and the parts API |
pub use estimator::Gigpo;
pub use estimator::GigpoOutput;
