//! The [`Gigpo`] estimator: the trait's entry points, and the parts API ([`Gigpo::compute`];
//! [`Gigpo::compute_by_key`] for non-text anchors) that returns A = A_E + w·A_S with its terms, step returns and step
//! groups for inspection.

use std::hash::Hash;

use crate::batch::RolloutBatch;
use crate::error::{check_len, Error, Result};
use crate::estimator::kernel::step_entry_points;
use crate::estimator::{check_steps_out, AdvantageEstimator, EstimatorInput, StepScores, Workspace};

use super::advantage::{self, AnchorsOf};
use super::config::{GigpoConfig, StepGrouping};

/// Per-row GiGPO results, all in the caller's row order.
///
/// ```
/// use beacon_rl::estimator::GigpoOutput;
/// let out = GigpoOutput::default();
/// assert!(out.advantages.is_empty());
/// assert_eq!(out.num_step_groups, 0);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct GigpoOutput {
    /// `A = A_E + w · A_S` (the token-level advantage is this times the response mask).
    pub advantages: Vec<f64>,
    /// The episode term A_E.
    pub episode_advantages: Vec<f64>,
    /// The step term A_S (unweighted).
    pub step_advantages: Vec<f64>,
    /// Discounted step returns R_t (the peer's `step_rewards`).
    pub step_returns: Vec<f64>,
    /// Step group label of each row, numbered by first appearance in the caller's rows.
    pub step_groups: Vec<usize>,
    /// Number of step groups (labels are `0..num_step_groups`).
    pub num_step_groups: usize,
}

impl GigpoOutput {
    /// Sizes every column to `rows`. Old values are not cleared: every row belongs to exactly
    /// one group and the computation writes each column at every row, so zeroing would only
    /// add a write pass over the outputs (40 bytes a row, the whole batch at 10⁶ trajectories).
    pub(super) fn reset(&mut self, rows: usize) {
        for v in [
            &mut self.advantages,
            &mut self.episode_advantages,
            &mut self.step_advantages,
            &mut self.step_returns,
        ] {
            v.resize(rows, 0.0);
        }
        self.step_groups.resize(rows, 0);
        self.num_step_groups = 0;
    }
}

/// The text accessor type of a run without similarity grouping (never called).
type NoText = fn(usize) -> &'static str;

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
/// let gigpo = Gigpo::new(GigpoConfig::default().with_step_decay(0.5))?;
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
///
/// The GiGPO estimator with a validated config.
///
/// ```
/// use beacon_rl::estimator::{Gigpo, GigpoConfig};
/// use beacon_rl::RolloutBatch;
///
/// let gigpo = Gigpo::new(GigpoConfig::default())?;
/// let batch = RolloutBatch::from_row_keys(&["g", "g"], &["a", "b"], &[1.0, 0.0])?;
/// let out = gigpo.compute(&batch, &[0.0, 0.0], &["start", "start"])?;
/// // Row mean 0.5: A_E = ±0.5; equal returns in the shared anchor group: A_S = 0.
/// assert_eq!(out.advantages, [0.5, -0.5]);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Gigpo {
    config: GigpoConfig,
}

impl Gigpo {
    /// Validates `config`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) naming the first bad parameter:
    /// `step_decay` outside [0, 1], `step_advantage_weight` negative or not finite, `std_eps`
    /// not > 0, or a similarity `threshold` outside (0, 1).
    ///
    /// ```
    /// use beacon_rl::estimator::{Gigpo, GigpoConfig};
    /// assert!(Gigpo::new(GigpoConfig::default().with_step_advantage_weight(-1.0)).is_err());
    /// ```
    pub fn new(config: GigpoConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self { config })
    }

    /// Computes GiGPO advantages with text anchors (one per caller row; `&str` or `String`).
    ///
    /// `step_rewards[r]` is the environment reward of row `r`'s step; the batch carries each
    /// trajectory's terminal reward (built with [`RolloutBatch::from_row_keys`] from verl-agent's
    /// `uid`, `traj_uid` and `episode_rewards` columns).
    ///
    /// The episode term reads that score, one per trajectory. Rows that carry scores of their
    /// own (verl-agent's invalid-action penalty) go through the trait instead:
    /// [`estimate_steps_into`](crate::estimator::AdvantageEstimator::estimate_steps_into) with
    /// [`EstimatorInput::with_row_scores`](crate::estimator::EstimatorInput::with_row_scores).
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] when `step_rewards` or `anchors` do not have one entry per row;
    /// [`Error::NonFinite`] for a NaN or infinite step reward, or when a result overflows to
    /// infinity (`what` names the output).
    ///
    /// ```
    /// use beacon_rl::estimator::{Gigpo, GigpoConfig, StepGrouping};
    /// use beacon_rl::RolloutBatch;
    ///
    /// let cfg = GigpoConfig::default().with_grouping(StepGrouping::Similarity { threshold: 0.9 });
    /// let batch = RolloutBatch::from_row_keys(&["g"; 3], &["a", "b", "c"], &[1.0, 0.0, 0.0])?;
    /// let anchors = ["You see a mug 1.", "You see a mug 2.", "Nothing happens."];
    /// let out = Gigpo::new(cfg)?.compute(&batch, &[1.0, 0.0, 0.0], &anchors)?;
    /// // ratio("You see a mug 2.", "You see a mug 1.") = 2·15/32 = 0.9375 >= 0.9: same group.
    /// assert_eq!(out.step_groups, [0, 0, 1]);
    /// assert_eq!(out.step_advantages, [0.5, -0.5, 0.0]);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn compute<S: AsRef<str> + Sync>(
        &self,
        batch: &RolloutBatch,
        step_rewards: &[f64],
        anchors: &[S],
    ) -> Result<GigpoOutput> {
        let mut out = GigpoOutput::default();
        self.compute_into(batch, step_rewards, anchors, &mut Workspace::default(), &mut out)?;
        Ok(out)
    }

    /// [`Gigpo::compute`] into `out`, reusing its and `workspace`'s buffers.
    pub(crate) fn compute_into<S: AsRef<str> + Sync>(
        &self,
        batch: &RolloutBatch,
        step_rewards: &[f64],
        anchors: &[S],
        workspace: &mut Workspace,
        out: &mut GigpoOutput,
    ) -> Result<()> {
        let anchors = Anchors::<S, ()>::Text(anchors);
        let scores = StepScores::of_batch(batch);
        self.run(batch, scores, step_rewards, anchors, workspace, out)
    }

    /// Computes GiGPO advantages with arbitrary anchor keys (`Hash + Eq`: token ids, state
    /// hashes, tuples…), grouping identical keys. Only [`StepGrouping::Exact`] applies.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] (`name: "grouping"`) when the config asks for similarity
    /// grouping, which needs text; otherwise as [`Gigpo::compute`].
    ///
    /// ```
    /// use beacon_rl::estimator::{Gigpo, GigpoConfig};
    /// use beacon_rl::RolloutBatch;
    ///
    /// let batch = RolloutBatch::from_row_keys(&[0, 0, 0], &[0, 1, 1], &[1.0, 0.0, 0.0])?;
    /// let anchors = [(3u8, 7u8), (3, 7), (4, 1)];
    /// let out = Gigpo::new(GigpoConfig::default())?.compute_by_key(&batch, &[2.0, 0.0, 0.0], &anchors)?;
    /// assert_eq!(out.step_groups, [0, 0, 1]);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn compute_by_key<K: Hash + Eq + Sync>(
        &self,
        batch: &RolloutBatch,
        step_rewards: &[f64],
        anchors: &[K],
    ) -> Result<GigpoOutput> {
        let mut out = GigpoOutput::default();
        self.compute_by_key_into(batch, step_rewards, anchors, &mut Workspace::default(), &mut out)?;
        Ok(out)
    }

    /// [`Gigpo::compute_by_key`] into `out`, reusing its and `workspace`'s buffers.
    pub(crate) fn compute_by_key_into<K: Hash + Eq + Sync>(
        &self,
        batch: &RolloutBatch,
        step_rewards: &[f64],
        anchors: &[K],
        workspace: &mut Workspace,
        out: &mut GigpoOutput,
    ) -> Result<()> {
        let anchors = Anchors::<&str, K>::Keys(anchors);
        let scores = StepScores::of_batch(batch);
        self.run(batch, scores, step_rewards, anchors, workspace, out)
    }

    /// The computation behind every entry point: `anchors` checked, then grouped (text by
    /// the configured grouping, keys exactly), with each row's score (R(τ) or the caller's row score) from `scores`.
    fn run<S: AsRef<str> + Sync, K: Hash + Eq + Sync>(
        &self,
        batch: &RolloutBatch,
        scores: StepScores<'_>,
        step_rewards: &[f64],
        anchors: Anchors<'_, S, K>,
        workspace: &mut Workspace,
        out: &mut GigpoOutput,
    ) -> Result<()> {
        self.check_anchors(batch.num_steps(), &anchors)?;
        let (c, ws) = (&self.config, &mut workspace.gigpo);
        match anchors {
            Anchors::Text(text) => {
                let text = |r: usize| text[r].as_ref();
                let similar = match c.grouping {
                    StepGrouping::Exact => None,
                    StepGrouping::Similarity { threshold } => Some((threshold, &text)),
                };
                let anchors = AnchorsOf { key: &text, similar };
                advantage::run(c, batch, scores, step_rewards, anchors, ws, out)
            }
            Anchors::Keys(keys) => {
                let key = |r: usize| &keys[r];
                let similar = None::<(f64, &NoText)>;
                let anchors = AnchorsOf { key: &key, similar };
                advantage::run(c, batch, scores, step_rewards, anchors, ws, out)
            }
        }
    }

    /// One anchor per row; keys need exact grouping (similarity needs text).
    fn check_anchors<S, K>(&self, rows: usize, anchors: &Anchors<'_, S, K>) -> Result<()> {
        let len = match (anchors, self.config.grouping) {
            (Anchors::Text(text), _) => text.len(),
            (Anchors::Keys(_), StepGrouping::Similarity { threshold }) => {
                return Err(Error::InvalidConfig {
                    name: "grouping",
                    value: threshold,
                    expected: "StepGrouping::Exact for non-text anchors (similarity needs Gigpo::compute)",
                })
            }
            (Anchors::Keys(keys), StepGrouping::Exact) => keys.len(),
        };
        check_len("anchors", rows, len)
    }

    /// Per-row advantages for the trait's entry points (`step_rewards` and one of
    /// `anchor_obs` / `anchor_ids` required; `token_level_rewards`, when given, must agree with
    /// the batch's terminal rewards), with the workspace's GiGPO scratch and output.
    ///
    /// Shapes before values, in the step path's order (`estimate_steps_into`'s docs): the
    /// output, `step_rewards` and the anchors (present, lengths), `row_scores`' length,
    /// `token_level_rewards`' rows; then `row_scores`' values, the token sums against the rows'
    /// scores, then the step rewards' values (in `run`).
    fn steps_with(
        &self,
        input: &EstimatorInput<'_>,
        advantages: &mut [f64],
        ws: &mut Workspace,
    ) -> Result<()> {
        check_steps_out(input, advantages)?;
        let (step_rewards, anchors) = self.step_columns(input)?;
        input.check_step_values()?;
        let (batch, scores) = (input.batch, input.step_scores());
        // The output lives in the workspace; taken out for the call (no allocation: a move).
        let mut out = std::mem::take(&mut ws.gigpo_out);
        let result = self.run(batch, scores, step_rewards, anchors, ws, &mut out);
        if result.is_ok() {
            advantages.copy_from_slice(&out.advantages);
        }
        ws.gigpo_out = out;
        result
    }

    /// The step path's input shapes: `step_rewards` present and one per row, then one of
    /// `anchor_obs` / `anchor_ids` (ids need exact grouping), one per row, then the length of
    /// `row_scores` and the rows of `token_level_rewards`, when given.
    fn step_columns<'a>(&self, input: &EstimatorInput<'a>) -> Result<(&'a [f64], StepAnchors<'a>)> {
        let rows = input.batch.num_steps();
        let step_rewards = input.step_rewards.ok_or(Error::MissingInput("step_rewards"))?;
        check_len("step_rewards", rows, step_rewards.len())?;
        let anchors = match (input.anchor_obs, input.anchor_ids) {
            (Some(_), Some(_)) => {
                return Err(Error::ConflictingInputs {
                    first: "anchor_obs",
                    second: "anchor_ids",
                })
            }
            (Some(text), None) => Anchors::Text(text),
            (None, Some(ids)) => Anchors::Keys(ids),
            (None, None) => return Err(Error::MissingInput("anchor_obs")),
        };
        self.check_anchors(rows, &anchors)?;
        input.check_step_shapes()?;
        Ok((step_rewards, anchors))
    }
}

/// A run's anchors, one per caller row: text (`compute`; the trait's `anchor_obs`) or keys
/// (`compute_by_key`; the trait's integer `anchor_ids`).
enum Anchors<'a, S, K> {
    Text(&'a [S]),
    Keys(&'a [K]),
}

/// The anchors of the trait's entry points.
type StepAnchors<'a> = Anchors<'a, &'a str, u64>;

impl AdvantageEstimator for Gigpo {
    /// `gigpo`.
    fn name(&self) -> &'static str {
        "gigpo"
    }

    step_entry_points! {
        /// Reads the batch's terminal rewards, or the caller's `row_scores`
        /// in their place (each row's own score), `step_rewards` and `anchor_obs` or
        /// `anchor_ids` (required; integer ids need [`StepGrouping::Exact`]). When
        /// `token_level_rewards` are given as well, every row's sum must equal its score: its
        /// `row_scores` entry, else its trajectory's terminal reward
        /// (to a relative 1e-6: [`Error::TerminalRewardMismatch`]). Broadcasts the per-row advantages under
        /// `response_mask` when given (else one column). Returns equal advantages, as in
        /// verl-agent.
        ///
        /// ```
        /// use beacon_rl::estimator::{AdvantageEstimator, EstimatorInput};
        /// use beacon_rl::estimator::{Gigpo, GigpoConfig};
        /// use beacon_rl::RolloutBatch;
        /// let batch = RolloutBatch::from_row_keys(&["u"; 2], &["a", "b"], &[1.0, 0.0])?;
        /// let gigpo = Gigpo::new(GigpoConfig::default())?;
        /// let anchors = ["start", "start"];
        /// let input = EstimatorInput::new(&batch).with_step_rewards(&[0.0, 0.0]).with_anchor_obs(&anchors);
        /// let out = gigpo.estimate(&input)?;
        /// assert_eq!(out.advantages[[0, 0]], 0.5); // episode term 1 - 0.5; equal step returns
        /// # Ok::<(), beacon_rl::Error>(())
        /// ```
        columns = step_columns,
        steps = steps_with,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_step_path_is_compute_s_advantages() {
        // Two trajectories of one task, three steps each; rows interleave.
        let batch = RolloutBatch::from_row_keys(
            &["g"; 6],
            &["a", "b", "a", "b", "a", "b"],
            &[1.0, 0.0, 1.0, 0.0, 1.0, 0.0],
        )
        .unwrap();
        let rewards = [0.0, 0.5, 1.0, 0.0, 0.0, 2.0];
        let anchors = ["s0", "s0", "s1", "s2", "s1", "s1"];
        let g = Gigpo::new(GigpoConfig::default()).unwrap();
        let full = g.compute(&batch, &rewards, &anchors).unwrap();
        let mut ws = Workspace::default();
        let mut adv = [f64::NAN; 6];
        let input = EstimatorInput::new(&batch)
            .with_step_rewards(&rewards)
            .with_anchor_obs(&anchors);
        g.estimate_steps_into(&input, &mut adv, &mut ws).unwrap();
        assert_eq!(
            adv.map(f64::to_bits),
            <[f64; 6]>::try_from(full.advantages.as_slice())
                .unwrap()
                .map(f64::to_bits)
        );
        assert!(matches!(
            g.estimate_steps_into(&input, &mut [0.0; 5], &mut ws),
            Err(Error::OutputShape {
                expected: (6, 1),
                actual: (5, 1),
                ..
            })
        ));
    }

    #[test]
    fn one_workspace_across_batches_gives_fresh_outputs_bit_for_bit() {
        // Batches of different sizes and groupings through one workspace and one output:
        // what a batch leaves in them must not reach the next one.
        let (mut ws, mut out) = (Workspace::default(), GigpoOutput::default());
        let mut x = 7u64;
        let mut draw = |n: u64| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (x >> 33) % n
        };
        for grouping in [StepGrouping::Exact, StepGrouping::Similarity { threshold: 0.6 }] {
            let g = Gigpo::new(GigpoConfig::default().with_grouping(grouping)).unwrap();
            for rows in [1usize, 9, 40, 3, 64] {
                let groups: Vec<u64> = (0..rows).map(|_| draw(3)).collect();
                let trajs: Vec<u64> = groups.iter().map(|g| g * 10 + draw(4)).collect();
                let rewards: Vec<f64> = (0..rows).map(|_| draw(3) as f64).collect();
                let keys: Vec<u64> = (0..rows).map(|_| draw(5)).collect();
                let text: Vec<String> = keys.iter().map(|k| format!("room {k} abc")).collect();
                let episode: Vec<f64> = trajs.iter().map(|t| (t % 2) as f64).collect();
                let batch = RolloutBatch::from_row_keys(&groups, &trajs, &episode).unwrap();
                g.compute_into(&batch, &rewards, &text, &mut ws, &mut out)
                    .unwrap();
                assert_eq!(
                    out,
                    g.compute(&batch, &rewards, &text).unwrap(),
                    "text, {rows} rows"
                );
                if grouping == StepGrouping::Exact {
                    g.compute_by_key_into(&batch, &rewards, &keys, &mut ws, &mut out)
                        .unwrap();
                    assert_eq!(
                        out,
                        g.compute_by_key(&batch, &rewards, &keys).unwrap(),
                        "keys, {rows} rows"
                    );
                }
            }
        }
    }
}
