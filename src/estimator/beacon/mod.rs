//! BEACON: milestone-anchored dual-scale advantages (paper §3, Algorithm 1).

mod advantage;
mod config;
mod estimator;
mod partition;
mod shaping;

pub(crate) use advantage::BeaconScratch;
pub use config::{BeaconConfig, BeaconFlavour, SegmentBaseline};
/// BEACON: milestone-anchored dual-scale advantages (paper §3, Algorithm 1).
///
/// Given milestone flags, each trajectory is partitioned into segments (a milestone step
/// closes its segment; the steps after the last milestone form the unfinished segment; see
/// [`BeaconOutput::segments`]), rewards are shaped within completed segments (temporal decay
/// from each segment's milestone), and two advantages are combined per step:
///
/// Â_{i,t} = w_traj · A^traj_i + λ · A^seg_{i,t}
///
/// (w_traj = 1 in the paper; 0 is the "w/o trajectory-level advantage" ablation).
///
/// # Paper flavour ([`BeaconConfig::paper`])
///
/// - A^traj_i = (R_i − μ) / (σ + ε) over the G trajectories of the group, σ unbiased; a group of
///   one trajectory follows [`SingletonRule`](crate::estimator::SingletonRule) (μ = 0, σ = 1 by default).
/// - For completed segment k of trajectory i: r_t = R_ms·γ^(t_k − t),
///   G_k = { j : K_j ≥ k },  b_k = (1/|G_k|) Σ_{j∈G_k} R_k^(j) / |Seg_k^(j)|,
///   A^seg_{i,t} = r_t − b_k.
/// - Steps of the unfinished segment get r_t = 0 and A^seg = 0: the paper defines no
///   comparison for them, so they carry the trajectory term only.
/// - Defaults: γ = 0.95 and λ = 1 (the paper's Hyperparameters table); R_ms = 1 and ε = 1e-6,
///   which the paper does not give (its terminal reward R(τ) is in {0, 1}).
///
/// # The completion blind spot, and [`SegmentBaseline::Entered`]
///
/// In the paper flavour, b_k averages over G_k, the rollouts that *completed* segment k, and
/// the steps of an unfinished segment get A^seg = 0. Over G_k the per-step means of A^seg sum
/// to zero, so completing a segment slower than the others earns negative segment credit,
/// while not completing it at all (running out of budget, or an action that ends the episode)
/// earns 0. While no rollout of a group succeeds, A^traj is 0 for all of them and this is the
/// only signal: quitting is never penalised. Constructed example (R_ms = 1, γ = 0.5, no
/// success, only real doors flagged):
///
/// | rollout | flags | paper A^seg | `Entered` A^seg |
/// |---|---|---|---|
/// | a: door in 2 steps, 1 more step | `[·, m, ·]` | `[−0.375, 0.125, 0]` (sum −0.25) | `[−1/12, 5/12, 0]` |
/// | b: door in 1 step, 1 more step | `[m, ·]` | `[0.125, 0]` | `[5/12, 0]` |
/// | c: trapdoor (episode ends) | `[·]` | `[0]` | `[−7/12]` |
///
/// Paper: b_1 = (0.75 + 1)/2 = 0.875 over {a, b}; c is in no G_k. `Entered`: c entered
/// segment 1 and did not finish it, so it counts with return 0: b_1 = (0.75 + 1 + 0)/3 = 7/12,
/// and its step gets 0 − b_1 (a unit test in `advantage.rs`).
///
/// Why: r_t = R_ms·γ^(t_k − t) is the discounted return-to-go of a reward R_ms paid at the
/// milestone (0 if it is never reached), so Σ_{t∈Seg_k} ∇log π(a_t|s_t)(r_t − b) is the usual
/// reward-to-go policy-gradient term with baseline b. Averaged over every rollout that enters
/// segment k, the baseline part vanishes when b does not depend on the rollout, because
/// whether step t lies in segment k is decided before a_t. The paper keeps the completers
/// only: its expectation is the reward-to-go term minus b_k·∇P(complete segment k | entered
/// it), a push *away* from completing of size b_k ∈ (0, R_ms]. [`SegmentBaseline::Entered`]
/// keeps every rollout with a step in segment k (E_k ⊇ G_k; unfinished ones with return 0,
/// their steps getting 0 − b_k), so the baseline part is zero in expectation up to b_k's
/// 1/|E_k| share of the rollout's own return (the self-inclusion GRPO's group mean and the
/// paper's b_k also have). It fixes quitting, not misleading milestones: a flagged decoy that
/// completes a segment in one step still earns the most. `docs/completion-credit.md` has the
/// derivation and the testbed's measurements.
///
/// # Official flavour ([`BeaconConfig::official`]): the paper's public code release (MiGPO)
///
/// The release computes something different from the equations, and this flavour reproduces it
/// (parity with the release's own outputs is tested to 1e-5):
///
/// - Statistics are over step *rows*, not trajectories. Every row of trajectory i carries
///   score R_i, and the trajectory term normalises it against all rows of the group:
///   `mean_norm` A = R_i − mean_rows, `mean_std_norm` (R_i − mean_rows)/(std_rows + ε).
///   A trajectory with more steps therefore weighs more in μ. A group with a single row: μ = 0,
///   σ = 1. Through the trait, the caller's
///   [`row_scores`](crate::estimator::EstimatorInput::with_row_scores) replace R_i as each
///   row's score (the release's `episode_norm_reward` sums each row's token rewards, which
///   verl-agent's invalid-action penalty makes differ within a trajectory).
/// - Segment groups are all rows with the same (group, segment id) — completed *and*
///   unfinished. Unfinished rows have r = 0 and get A^seg = 0 − mean ≤ 0, where the paper gives
///   them 0. A singleton segment group gives 0. Same [`NormMode`](crate::estimator::NormMode) at both levels.
/// - Defaults: R_ms = 10, γ = 0.95, w = 1, ε = 1e-6, `mean_norm` (the release's ALFWorld
///   scripts use γ = 0.9, w = 10).
///
/// A worked difference: one group, trajectory a = [ms, ·] (R = 1), b = [·, ·, ·] (R = 0),
/// R_ms = 10, γ = 0.5.
/// Paper: A^traj = ±0.7071 (σ = 0.7071), a's segment 1 is alone in G_1 so b_1 = 10 and
/// A^seg(a, 0) = 0; every other step gets A^seg = 0.
/// Official (`mean_norm`): row mean = (2·1 + 3·0)/5 = 0.4, so A^traj = 0.6 for a, −0.4 for b;
/// segment 0 rows are a0 (r = 10) and b0, b1, b2 (unfinished, r = 0), mean 2.5, so
/// A^seg(a0) = 7.5, A^seg(b·) = −2.5; a's step 1 is alone in segment 1: A^seg = 0.
/// (This case is a unit test in `advantage.rs`.)
///
/// # Where each equation lives
///
/// | file | computes |
/// |---|---|
/// | `partition.rs` | Seg_k = { t : t_{k−1} < t ≤ t_k }, the segments milestones close |
/// | `shaping.rs` | r_t = R_ms·γ^(t_k − t), temporal shaping within a segment |
/// | `advantage.rs` | A^traj, b_k, A^seg and Â = w_traj·A^traj + λ·A^seg, both flavours |
/// | `config.rs` | [`BeaconConfig`]: the constants, flavours and presets |
/// | `estimator.rs` | [`Beacon`]: the [`AdvantageEstimator`](crate::estimator::AdvantageEstimator) entry points and the parts API |
///
/// Milestone flags come from a detector Φ (`crate::milestone`).
pub use estimator::Beacon;
pub use estimator::BeaconOutput;
