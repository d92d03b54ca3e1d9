//! GiGPO: group-in-group policy optimization (verl-agent `gigpo/core_gigpo.py`,
//! `compute_gigpo_outcome_advantage`; verl's `adv_estimator = "gigpo"`).
//!
//! Every step row `r` of trajectory `i` in task group `g` (verl's `uid`) gets
//!
//! ```text
//! A(r)   = A_E(r) + w · A_S(r)
//!
//! A_E(r) = s_r − μ_g                      mean_norm        s_r = R(τ_i), the episode score
//!        = (s_r − μ_g) / (σ_g + ε)        mean_std_norm    μ_g, σ_g over the *rows* of g
//!
//! R_t    = r_t + γ · R_{t+1}              per trajectory, rows in row order, R past the end = 0
//!
//! A_S(r) = R_r − μ_G                      mean_norm        G = the step group of r
//!        = (R_r − μ_G) / (σ_G + ε)        mean_std_norm
//! ```
//!
//! Through the trait, a caller's [`row_scores`](crate::estimator::EstimatorInput::with_row_scores)
//! replace R(τ_i) as s_r (row r's own score, as verl-agent's `episode_norm_reward` sums each
//! row's token rewards, which its invalid-action penalty makes differ within a trajectory).
//!
//! σ is the unbiased (n − 1) standard deviation. The episode statistics are over step rows, not
//! trajectories (the peer's `compute_mean_std_cross_steps=True`): a trajectory with more steps
//! weighs more in μ_g. A task group holding a single row uses μ = 0, σ = 1. A step group holding a
//! single row gets A_S = 0.
//!
//! Step groups (the "anchor states") partition the rows of each task group:
//! - [`StepGrouping::Exact`]: rows with identical anchor observations;
//! - [`StepGrouping::Similarity`]: the peer's greedy clustering. Rows are visited in caller
//!   order; a row joins the first existing cluster (in order of creation) whose *first member*
//!   `rep` satisfies Python's `SequenceMatcher(None, anchor, rep).ratio() >= threshold`
//!   ([`crate::difflib`], same argument order), otherwise it founds a new cluster.
//!
//! Step group labels are numbered in order of first appearance in the caller's rows.
//!
//! Differences from the peer: the peer computes step returns in float32
//! (`rewards.astype(np.float32)`), this crate in f64 (below the parity tolerance); means are
//! running sums clamped to the group's [min, max], so an all-equal group gives exactly 0 where
//! the peer's mean can be off by its last bit and `mean_std_norm` divides that by ε: about
//! ±1e-17 / 1e-6 in float64, but in float32 (a trainer's token rewards, or the step returns)
//! one ulp of a value such as 2.7 over ε = 1e-6 leaves ±0.1 to ±0.3 on every row of such a
//! group (measured against the release's own code, `python/tests/test_release_differential.py`).
//!
//! ```
//! use beacon_rl::estimator::gigpo::{Gigpo, GigpoConfig};
//! use beacon_rl::RolloutBatch;
//!
//! // One task, trajectories "a" (rows 0, 1; success) and "b" (rows 2, 3; failure).
//! let batch = RolloutBatch::from_row_keys(&["g"; 4], &["a", "a", "b", "b"], &[1.0, 1.0, 0.0, 0.0])?;
//! let step_rewards = [0.0, 1.0, 0.0, 0.0];
//! let anchors = ["s0", "s1", "s0", "s2"];
//! let gigpo = Gigpo::new(GigpoConfig::verl_agent().with_step_decay(0.5))?;
//! let out = gigpo.compute(&batch, &step_rewards, &anchors)?;
//!
//! // A_E: row mean (1 + 1 + 0 + 0) / 4 = 0.5.
//! assert_eq!(out.episode_advantages, [0.5, 0.5, -0.5, -0.5]);
//! // Returns of "a": R_1 = 1, R_0 = 0 + 0.5 · 1 = 0.5; "b": 0, 0.
//! assert_eq!(out.step_returns, [0.5, 1.0, 0.0, 0.0]);
//! // Step groups: {0, 2} share "s0"; "s1" and "s2" are singletons.
//! assert_eq!(out.step_groups, [0, 1, 0, 2]);
//! // A_S of group {0, 2}: mean 0.25, so +0.25 and −0.25; singletons 0.
//! assert_eq!(out.step_advantages, [0.25, 0.0, -0.25, 0.0]);
//! assert_eq!(out.advantages, [0.75, 0.5, -0.75, -0.5]);
//! # Ok::<(), beacon_rl::Error>(())
//! ```

use std::hash::Hash;

use crate::batch::RolloutBatch;
use crate::difflib::Matcher;
use crate::error::{check_finite, check_len, Error, Range, Result};
use crate::estimator::{group_rows, StepScores};
use crate::hash::KeyHasher;
use crate::stats::{group_means, group_spreads, GroupStats};

/// Normalization of both GiGPO terms (the peer's `mode`); shared with BEACON's official flavour.
use crate::stats::NormMode;

/// How rows of a task group are gathered into step groups (anchor states).
///
/// ```
/// use beacon_rl::estimator::gigpo::StepGrouping;
/// let g = StepGrouping::Similarity { threshold: 0.95 };
/// assert_ne!(g, StepGrouping::Exact);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum StepGrouping {
    /// Identical anchors form a group (the peer's default, `enable_similarity=False`).
    #[default]
    Exact,
    /// Greedy clustering by difflib ratio against each cluster's first member
    /// (`enable_similarity=True`, `similarity_thresh`; the peer's default threshold is 0.95).
    /// Needs text anchors.
    Similarity {
        /// Minimum ratio to join a cluster, in (0, 1).
        threshold: f64,
    },
}

/// GiGPO parameters. Build with [`GigpoConfig::verl_agent`] and the `with_*` setters, then
/// validate through [`Gigpo::new`] (or [`GigpoConfig::validate`]).
///
/// ```
/// use beacon_rl::estimator::gigpo::{GigpoConfig, StepGrouping};
/// use beacon_rl::estimator::NormMode;
/// let cfg = GigpoConfig::verl_agent()
///     .with_mode(NormMode::MeanStdNorm)
///     .with_grouping(StepGrouping::Similarity { threshold: 0.9 });
/// assert!(cfg.validate().is_ok());
/// assert!(cfg.with_std_eps(0.0).validate().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct GigpoConfig {
    /// γ of the step returns `R_t = r_t + γ R_{t+1}`, in [0, 1] (verl's `algorithm.gamma`).
    pub step_decay: f64,
    /// w in `A = A_E + w · A_S`, finite and >= 0 (the peer's `step_advantage_w`).
    pub step_advantage_weight: f64,
    /// Normalization of both terms.
    pub mode: NormMode,
    /// ε added to the std in [`NormMode::MeanStdNorm`], > 0 (the peer's `epsilon`).
    pub std_eps: f64,
    /// Step grouping rule.
    pub grouping: StepGrouping,
}

impl Default for GigpoConfig {
    /// [`GigpoConfig::verl_agent`].
    fn default() -> Self {
        Self::verl_agent()
    }
}

impl GigpoConfig {
    /// verl-agent's GiGPO settings: γ = 0.95 (its GiGPO example scripts' `algorithm.gamma`),
    /// w = 1.0, `mean_norm`, ε = 1e-6, exact anchor grouping.
    ///
    /// ```
    /// use beacon_rl::estimator::gigpo::{GigpoConfig, StepGrouping};
    /// use beacon_rl::estimator::NormMode;
    /// let cfg = GigpoConfig::verl_agent();
    /// assert_eq!(cfg.step_decay, 0.95);
    /// assert_eq!(cfg.step_advantage_weight, 1.0);
    /// assert_eq!(cfg.mode, NormMode::MeanNorm);
    /// assert_eq!(cfg.std_eps, 1e-6);
    /// assert_eq!(cfg.grouping, StepGrouping::Exact);
    /// ```
    pub fn verl_agent() -> Self {
        Self {
            step_decay: 0.95,
            step_advantage_weight: 1.0,
            mode: NormMode::MeanNorm,
            std_eps: 1e-6,
            grouping: StepGrouping::Exact,
        }
    }

    /// Sets γ (default 0.95).
    ///
    /// ```
    /// # use beacon_rl::estimator::gigpo::GigpoConfig;
    /// assert_eq!(GigpoConfig::verl_agent().with_step_decay(1.0).step_decay, 1.0);
    /// ```
    #[must_use]
    pub fn with_step_decay(mut self, step_decay: f64) -> Self {
        self.step_decay = step_decay;
        self
    }

    /// Sets w (default 1.0).
    ///
    /// ```
    /// # use beacon_rl::estimator::gigpo::GigpoConfig;
    /// assert_eq!(GigpoConfig::verl_agent().with_step_advantage_weight(0.5).step_advantage_weight, 0.5);
    /// ```
    #[must_use]
    pub fn with_step_advantage_weight(mut self, weight: f64) -> Self {
        self.step_advantage_weight = weight;
        self
    }

    /// Sets the normalization (default [`NormMode::MeanNorm`]).
    ///
    /// ```
    /// # use beacon_rl::estimator::NormMode; use beacon_rl::estimator::gigpo::GigpoConfig;
    /// let cfg = GigpoConfig::verl_agent().with_mode(NormMode::MeanStdNorm);
    /// assert_eq!(cfg.mode, NormMode::MeanStdNorm);
    /// ```
    #[must_use]
    pub fn with_mode(mut self, mode: NormMode) -> Self {
        self.mode = mode;
        self
    }

    /// Sets ε (default 1e-6).
    ///
    /// ```
    /// # use beacon_rl::estimator::gigpo::GigpoConfig;
    /// assert_eq!(GigpoConfig::verl_agent().with_std_eps(1e-8).std_eps, 1e-8);
    /// ```
    #[must_use]
    pub fn with_std_eps(mut self, std_eps: f64) -> Self {
        self.std_eps = std_eps;
        self
    }

    /// Sets the step grouping (default [`StepGrouping::Exact`]).
    ///
    /// ```
    /// # use beacon_rl::estimator::gigpo::{GigpoConfig, StepGrouping};
    /// let cfg = GigpoConfig::verl_agent().with_grouping(StepGrouping::Similarity { threshold: 0.95 });
    /// assert!(matches!(cfg.grouping, StepGrouping::Similarity { .. }));
    /// ```
    #[must_use]
    pub fn with_grouping(mut self, grouping: StepGrouping) -> Self {
        self.grouping = grouping;
        self
    }

    /// Checks every parameter.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the first bad parameter: `step_decay` outside [0, 1],
    /// `step_advantage_weight` negative or not finite, `std_eps` not > 0, or a similarity
    /// `threshold` outside (0, 1).
    ///
    /// ```
    /// use beacon_rl::estimator::gigpo::{GigpoConfig, StepGrouping};
    /// use beacon_rl::Error;
    /// let err = GigpoConfig::verl_agent().with_step_decay(1.5).validate().unwrap_err();
    /// assert!(matches!(err, Error::InvalidConfig { name: "step_decay", .. }));
    /// let err = GigpoConfig::verl_agent()
    ///     .with_grouping(StepGrouping::Similarity { threshold: 1.0 })
    ///     .validate()
    ///     .unwrap_err();
    /// assert!(matches!(err, Error::InvalidConfig { name: "grouping.threshold", .. }));
    /// ```
    pub fn validate(&self) -> Result<()> {
        Range::UNIT.check("step_decay", self.step_decay)?;
        Range::NON_NEGATIVE.check("step_advantage_weight", self.step_advantage_weight)?;
        Range::POSITIVE.check("std_eps", self.std_eps)?;
        if let StepGrouping::Similarity { threshold } = self.grouping {
            // The peer asserts 0 < similarity_thresh < 1.
            if !(threshold > 0.0 && threshold < 1.0) {
                return Err(Error::InvalidConfig {
                    name: "grouping.threshold",
                    value: threshold,
                    expected: "finite, in (0, 1)",
                });
            }
        }
        Ok(())
    }
}

/// Per-row GiGPO results, all in the caller's row order.
///
/// ```
/// use beacon_rl::estimator::gigpo::GigpoOutput;
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
    fn reset(&mut self, rows: usize) {
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

/// Reusable scratch buffers for [`Gigpo::compute_into`] and [`Gigpo::compute_by_key_into`].
///
/// Everything in it is sized by the largest task group seen, not by the batch: anchors are
/// interned one task group at a time in an open-addressing table kept here, so after the first
/// batch of a given shape a computation allocates nothing (in similarity mode, once enough
/// matchers exist).
///
/// ```
/// use beacon_rl::estimator::gigpo::GigpoWorkspace;
/// let ws = GigpoWorkspace::new();
/// # let _ = ws;
/// ```
#[derive(Debug, Clone, Default)]
pub struct GigpoWorkspace {
    /// The current task group's caller rows, ascending (= caller order).
    rows: Vec<usize>,
    /// Per position in `rows`: a value to normalise (episode score, then step return).
    values: Vec<f64>,
    /// Per position in `rows`: the local unit (distinct anchor), then the local step group.
    labels: Vec<usize>,
    /// Per local unit: its first row.
    unit_first_row: Vec<usize>,
    /// Per local unit: its local step group.
    unit_cluster: Vec<usize>,
    /// Open-addressing table of local unit ids (NIL = empty), a power of two ≥ 2 × group rows.
    table: Vec<usize>,
    /// The table's hash, randomly keyed: anchors chosen to collide under a known hash do not
    /// make interning quadratic.
    hasher: KeyHasher,
    /// Similarity mode: one prepared matcher per local cluster (b = its first member).
    matchers: Vec<Matcher>,
    stats: Vec<GroupStats>,
    /// Provisional (group-major) step group id -> first-appearance label.
    relabel: Vec<usize>,
    /// The full output behind [`Gigpo::advantages_into`].
    out: GigpoOutput,
    /// Under the `rayon` feature, one workspace per chunk of groups (kept across calls).
    pool: Vec<GigpoWorkspace>,
    /// A chunk's step groups (then the labels of the chunks before it) and finiteness probe.
    clusters: usize,
    probe: f64,
}

impl GigpoWorkspace {
    /// An empty workspace.
    ///
    /// ```
    /// use beacon_rl::estimator::gigpo::GigpoWorkspace;
    /// let _ws = GigpoWorkspace::new();
    /// ```
    pub fn new() -> Self {
        Self::default()
    }
}

const NIL: usize = usize::MAX;

/// The text accessor type of a run without similarity grouping (never called).
type NoText = fn(usize) -> &'static str;

/// The GiGPO estimator with a validated config.
///
/// ```
/// use beacon_rl::estimator::gigpo::{Gigpo, GigpoConfig};
/// use beacon_rl::RolloutBatch;
///
/// let gigpo = Gigpo::new(GigpoConfig::verl_agent())?;
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
    /// As [`GigpoConfig::validate`].
    ///
    /// ```
    /// use beacon_rl::estimator::gigpo::{Gigpo, GigpoConfig};
    /// assert!(Gigpo::new(GigpoConfig::verl_agent().with_step_advantage_weight(-1.0)).is_err());
    /// ```
    pub fn new(config: GigpoConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self { config })
    }

    /// The validated config.
    ///
    /// ```
    /// use beacon_rl::estimator::gigpo::{Gigpo, GigpoConfig};
    /// let g = Gigpo::new(GigpoConfig::verl_agent())?;
    /// assert_eq!(g.config().step_decay, 0.95);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn config(&self) -> &GigpoConfig {
        &self.config
    }

    /// Computes GiGPO advantages with text anchors (one per caller row; `&str` or `String`).
    ///
    /// `step_rewards[r]` is the environment reward of row `r`'s step; the batch carries each
    /// trajectory's episode score (built with [`RolloutBatch::from_row_keys`] from verl-agent's
    /// `uid`, `traj_uid` and episode reward columns).
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
    /// use beacon_rl::estimator::gigpo::{Gigpo, GigpoConfig, StepGrouping};
    /// use beacon_rl::RolloutBatch;
    ///
    /// let cfg = GigpoConfig::verl_agent().with_grouping(StepGrouping::Similarity { threshold: 0.9 });
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
        self.compute_into(batch, step_rewards, anchors, &mut GigpoWorkspace::new(), &mut out)?;
        Ok(out)
    }

    /// [`Gigpo::compute`] into a reusable output and workspace (vectors are resized to the
    /// batch; their capacity is kept).
    ///
    /// # Errors
    /// As [`Gigpo::compute`]. On error `out` holds unspecified values.
    ///
    /// ```
    /// use beacon_rl::estimator::gigpo::{Gigpo, GigpoConfig, GigpoOutput, GigpoWorkspace};
    /// use beacon_rl::RolloutBatch;
    ///
    /// let gigpo = Gigpo::new(GigpoConfig::verl_agent())?;
    /// let (mut ws, mut out) = (GigpoWorkspace::new(), GigpoOutput::default());
    /// for reward in [1.0, 0.0] {
    ///     let batch = RolloutBatch::from_row_keys(&["g", "g"], &["a", "b"], &[reward, 0.5])?;
    ///     gigpo.compute_into(&batch, &[0.0, 0.0], &["s", "s"], &mut ws, &mut out)?;
    ///     assert_eq!(out.advantages[0], -out.advantages[1]);
    /// }
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn compute_into<S: AsRef<str> + Sync>(
        &self,
        batch: &RolloutBatch,
        step_rewards: &[f64],
        anchors: &[S],
        workspace: &mut GigpoWorkspace,
        out: &mut GigpoOutput,
    ) -> Result<()> {
        self.compute_text_with(
            batch,
            StepScores::of_batch(batch),
            step_rewards,
            anchors,
            workspace,
            out,
        )
    }

    /// [`compute_into`](Self::compute_into) with each row's episode score from `scores`.
    fn compute_text_with<S: AsRef<str> + Sync>(
        &self,
        batch: &RolloutBatch,
        scores: StepScores<'_>,
        step_rewards: &[f64],
        anchors: &[S],
        workspace: &mut GigpoWorkspace,
        out: &mut GigpoOutput,
    ) -> Result<()> {
        check_len("anchors", batch.num_steps(), anchors.len())?;
        let text = |r: usize| anchors[r].as_ref();
        let similar = match self.config.grouping {
            StepGrouping::Exact => None,
            StepGrouping::Similarity { threshold } => Some((threshold, &text)),
        };
        self.run(batch, scores, step_rewards, &text, similar, workspace, out)
    }

    /// Writes only the combined per-row advantages of [`Gigpo::compute`] into `advantages`
    /// (length = rows). Allocation-free once `workspace` has seen a batch this large.
    ///
    /// # Errors
    /// As [`Gigpo::compute`]; [`Error::OutputShape`] when `advantages` does not have one
    /// entry per row.
    ///
    /// ```
    /// use beacon_rl::estimator::gigpo::{Gigpo, GigpoConfig, GigpoWorkspace};
    /// use beacon_rl::RolloutBatch;
    /// let batch = RolloutBatch::from_row_keys(&["g", "g"], &["a", "b"], &[1.0, 0.0])?;
    /// let mut adv = [0.0; 2];
    /// let gigpo = Gigpo::new(GigpoConfig::verl_agent())?;
    /// gigpo.advantages_into(&batch, &[0.0, 0.0], &["s", "s"], &mut GigpoWorkspace::new(), &mut adv)?;
    /// // Row mean 0.5: A_E = ±0.5; equal returns in the shared anchor group: A_S = 0.
    /// assert_eq!(adv, [0.5, -0.5]);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn advantages_into<S: AsRef<str> + Sync>(
        &self,
        batch: &RolloutBatch,
        step_rewards: &[f64],
        anchors: &[S],
        workspace: &mut GigpoWorkspace,
        advantages: &mut [f64],
    ) -> Result<()> {
        crate::error::check_out_len("advantages", batch.num_steps(), advantages.len())?;
        // The output lives in the workspace; taken out for the call (no allocation: a move).
        let mut out = std::mem::take(&mut workspace.out);
        let result = self.compute_into(batch, step_rewards, anchors, workspace, &mut out);
        if result.is_ok() {
            advantages.copy_from_slice(&out.advantages);
        }
        workspace.out = out;
        result
    }

    /// Computes GiGPO advantages with arbitrary anchor keys (`Hash + Eq`: token ids, state
    /// hashes, tuples…), grouping identical keys. Only [`StepGrouping::Exact`] applies.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] (`name: "grouping"`) when the config asks for similarity
    /// grouping, which needs text; otherwise as [`Gigpo::compute`].
    ///
    /// ```
    /// use beacon_rl::estimator::gigpo::{Gigpo, GigpoConfig};
    /// use beacon_rl::RolloutBatch;
    ///
    /// let batch = RolloutBatch::from_row_keys(&[0, 0, 0], &[0, 1, 1], &[1.0, 0.0, 0.0])?;
    /// let anchors = [(3u8, 7u8), (3, 7), (4, 1)];
    /// let out = Gigpo::new(GigpoConfig::verl_agent())?.compute_by_key(&batch, &[2.0, 0.0, 0.0], &anchors)?;
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
        self.compute_by_key_into(batch, step_rewards, anchors, &mut GigpoWorkspace::new(), &mut out)?;
        Ok(out)
    }

    /// [`Gigpo::compute_by_key`] into a reusable output and workspace.
    ///
    /// # Errors
    /// As [`Gigpo::compute_by_key`].
    ///
    /// ```
    /// use beacon_rl::estimator::gigpo::{Gigpo, GigpoConfig, GigpoOutput, GigpoWorkspace};
    /// use beacon_rl::RolloutBatch;
    ///
    /// let batch = RolloutBatch::from_row_keys(&[0, 0], &[0, 1], &[1.0, 0.0])?;
    /// let (mut ws, mut out) = (GigpoWorkspace::new(), GigpoOutput::default());
    /// Gigpo::new(GigpoConfig::verl_agent())?.compute_by_key_into(&batch, &[0.0, 0.0], &[9u64, 9], &mut ws, &mut out)?;
    /// assert_eq!(out.num_step_groups, 1);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn compute_by_key_into<K: Hash + Eq + Sync>(
        &self,
        batch: &RolloutBatch,
        step_rewards: &[f64],
        anchors: &[K],
        workspace: &mut GigpoWorkspace,
        out: &mut GigpoOutput,
    ) -> Result<()> {
        self.compute_by_key_with(
            batch,
            StepScores::of_batch(batch),
            step_rewards,
            anchors,
            workspace,
            out,
        )
    }

    /// [`compute_by_key_into`](Self::compute_by_key_into) with each row's episode score from
    /// `scores`.
    fn compute_by_key_with<K: Hash + Eq + Sync>(
        &self,
        batch: &RolloutBatch,
        scores: StepScores<'_>,
        step_rewards: &[f64],
        anchors: &[K],
        workspace: &mut GigpoWorkspace,
        out: &mut GigpoOutput,
    ) -> Result<()> {
        self.check_key_grouping()?;
        check_len("anchors", batch.num_steps(), anchors.len())?;
        let key = |r: usize| &anchors[r];
        self.run(
            batch,
            scores,
            step_rewards,
            &key,
            None::<(f64, &NoText)>,
            workspace,
            out,
        )
    }

    /// Non-text anchors group exactly: similarity needs text.
    fn check_key_grouping(&self) -> Result<()> {
        match self.config.grouping {
            StepGrouping::Similarity { threshold } => Err(Error::InvalidConfig {
                name: "grouping",
                value: threshold,
                expected: "StepGrouping::Exact for non-text anchors (similarity needs Gigpo::compute)",
            }),
            StepGrouping::Exact => Ok(()),
        }
    }

    /// The whole computation, one task group at a time.
    ///
    /// Groups are independent, so everything per row is done while the group's rows are hot
    /// and the only batch-sized state is the output. Within a group the rows are visited in
    /// the caller's order, so every sum (episode and step statistics) adds the same values in
    /// the same order as a single pass over the batch would: the outputs are bit-identical to
    /// the row-loop formulation (`tests/it/gigpo_reference.rs`).
    ///
    /// `key(r)` is row r's anchor for exact interning; `similar`, when set, is the threshold and
    /// row r's text for the greedy clustering of the group's distinct anchors. `scores` gives
    /// each row's episode score (R(τ), or the caller's row scores).
    #[allow(clippy::too_many_arguments)]
    fn run<'k, 't, K, F, T>(
        &self,
        batch: &RolloutBatch,
        scores: StepScores<'_>,
        step_rewards: &[f64],
        key: &F,
        similar: Option<(f64, &T)>,
        ws: &mut GigpoWorkspace,
        out: &mut GigpoOutput,
    ) -> Result<()>
    where
        K: Hash + Eq + ?Sized + 'k,
        F: Fn(usize) -> &'k K + Sync,
        T: Fn(usize) -> &'t str + Sync,
    {
        let rows = batch.num_steps();
        check_len("step_rewards", rows, step_rewards.len())?;
        check_finite("step_rewards", step_rewards)?;
        out.reset(rows);

        let in_order = batch.rows_in_step_order();
        let groups = 0..batch.num_groups();
        let whole = Outs {
            base: 0,
            advantages: &mut out.advantages,
            episode: &mut out.episode_advantages,
            step: &mut out.step_advantages,
            returns: &mut out.step_returns,
            labels: &mut out.step_groups,
        };
        // Groups own disjoint rows, but only rows in step order give each run of groups one
        // contiguous block of every output: otherwise the groups run in order on this thread.
        let chunks = if in_order {
            crate::parallel::chunk_count(rows, MIN_ROWS_PER_CHUNK)
        } else {
            1
        };
        let (base, probe) = if chunks <= 1 {
            self.groups(batch, groups, scores, step_rewards, key, similar, ws, whole)
        } else {
            // Chunks of whole groups, about rows / chunks rows each, one workspace per chunk;
            // labels are chunk-local (from 0), then shifted by the clusters of earlier chunks.
            if ws.pool.len() < chunks {
                ws.pool.resize_with(chunks, GigpoWorkspace::default);
            }
            let (offs, goffs) = (batch.trajectory_offsets(), batch.group_offsets());
            let row_of = |g: usize| offs[goffs[g]];
            let mut bounds = [0; crate::parallel::MAX_CHUNKS + 1];
            let bounds = crate::parallel::balance(groups.end, chunks, row_of, &mut bounds);
            let pool = &mut ws.pool[..chunks];
            let split = |state, g, left| split_chunks(state, row_of(g), left);
            crate::parallel::for_chunks(bounds, (whole, &mut *pool), &split, &|c, (o, pool)| {
                let w = &mut pool[0];
                let (clusters, probe) = self.groups(
                    batch,
                    bounds[c]..bounds[c + 1],
                    scores,
                    step_rewards,
                    key,
                    similar,
                    w,
                    o,
                );
                (w.clusters, w.probe) = (clusters, probe);
            });
            let mut total = 0;
            for w in pool.iter_mut() {
                (w.clusters, total) = (total, total + w.clusters);
            }
            let whole = Outs {
                base: 0,
                advantages: &mut [],
                episode: &mut [],
                step: &mut [],
                returns: &mut [],
                labels: &mut out.step_groups,
            };
            let split = |state, g, left| split_chunks(state, row_of(g), left);
            crate::parallel::for_chunks(bounds, (whole, pool), &split, &|_, (o, pool)| {
                let shift = pool[0].clusters;
                if shift > 0 {
                    o.labels.iter_mut().for_each(|l| *l += shift);
                }
            });
            // Each probe is ±0 or NaN: the sum is NaN iff one is, in any order.
            (total, ws.pool[..chunks].iter().map(|w| w.probe).sum::<f64>())
        };

        // Provisional ids are group-major; labels are numbered by first appearance in the
        // caller's rows (one pass, no hashing). Rows in step order are group-major already,
        // and ids within a group are by first appearance: the ids are the labels.
        if !in_order {
            ws.relabel.clear();
            ws.relabel.resize(base, NIL);
            let mut next = 0;
            for l in out.step_groups.iter_mut() {
                let m = &mut ws.relabel[*l];
                if *m == NIL {
                    *m = next;
                    next += 1;
                }
                *l = *m;
            }
        }
        out.num_step_groups = base;

        // Finite inputs can still overflow (huge rewards): report instead of returning inf/NaN,
        // naming the first output (in this order) and index that is not finite.
        if probe != 0.0 {
            check_finite("step_returns", &out.step_returns)?;
            check_finite("episode_advantages", &out.episode_advantages)?;
            check_finite("step_advantages", &out.step_advantages)?;
            check_finite("advantages", &out.advantages)?;
        }
        Ok(())
    }
}

/// The outputs of a run of whole groups whose rows are `base..base + len` (each indexed by
/// row − base); the serial path's part covers every row with base 0.
struct Outs<'a> {
    base: usize,
    advantages: &'a mut [f64],
    episode: &'a mut [f64],
    step: &'a mut [f64],
    returns: &'a mut [f64],
    labels: &'a mut [usize],
}

impl Outs<'_> {
    /// Rows before absolute row `at`, and the rest. Empty columns stay empty.
    fn split(self, at: usize) -> (Self, Self) {
        fn cut<T>(v: &mut [T], at: usize) -> (&mut [T], &mut [T]) {
            let at = at.min(v.len());
            v.split_at_mut(at)
        }
        let local = at - self.base;
        let (a0, a1) = cut(self.advantages, local);
        let (e0, e1) = cut(self.episode, local);
        let (s0, s1) = cut(self.step, local);
        let (r0, r1) = cut(self.returns, local);
        let (l0, l1) = cut(self.labels, local);
        (
            Outs {
                base: self.base,
                advantages: a0,
                episode: e0,
                step: s0,
                returns: r0,
                labels: l0,
            },
            Outs {
                base: at,
                advantages: a1,
                episode: e1,
                step: s1,
                returns: r1,
                labels: l1,
            },
        )
    }
}

/// The outputs and workspaces of the chunks before absolute row `at` (the first `left`
/// chunks), and the rest.
#[allow(clippy::type_complexity)]
fn split_chunks<'a>(
    (o, pool): (Outs<'a>, &'a mut [GigpoWorkspace]),
    at: usize,
    left: usize,
) -> (
    (Outs<'a>, &'a mut [GigpoWorkspace]),
    (Outs<'a>, &'a mut [GigpoWorkspace]),
) {
    let (a, b) = o.split(at);
    let (pa, pb) = pool.split_at_mut(left);
    ((a, pa), (b, pb))
}

/// Rows per chunk below which running GiGPO's groups in parallel does not pay.
const MIN_ROWS_PER_CHUNK: usize = 4096;

impl Gigpo {
    /// Groups `groups` in order into `o` (which covers their rows), step group labels from 0
    /// in order of the groups; returns the number of step groups and the finiteness probe
    /// (0 when every value written is finite).
    #[allow(clippy::too_many_arguments)]
    fn groups<'k, 't, K, F, T>(
        &self,
        batch: &RolloutBatch,
        groups: std::ops::Range<usize>,
        scores: StepScores<'_>,
        step_rewards: &[f64],
        key: &F,
        similar: Option<(f64, &T)>,
        ws: &mut GigpoWorkspace,
        o: Outs<'_>,
    ) -> (usize, f64)
    where
        K: Hash + Eq + ?Sized + 'k,
        F: Fn(usize) -> &'k K,
        T: Fn(usize) -> &'t str,
    {
        let (mode, eps, w) = (
            self.config.mode,
            self.config.std_eps,
            self.config.step_advantage_weight,
        );
        let gamma = self.config.step_decay;
        let in_order = batch.rows_in_step_order();
        let b = o.base;
        let mut base = 0usize;
        // x · 0 is 0 for finite x and NaN otherwise: one add per row tracks finiteness while
        // the values are hot, instead of four more passes over the outputs.
        let mut probe = 0.0f64;
        for g in groups {
            // The group's rows in caller order (already ascending when rows are step-ordered).
            ws.rows.clear();
            ws.rows.extend_from_slice(group_rows(batch, g));
            if !in_order {
                ws.rows.sort_unstable();
            }

            // Step returns per trajectory, backwards; the episode score parked in the output.
            for j in batch.group_trajectories(g) {
                let mut ret = 0.0;
                for &row in batch.trajectory_rows(j).iter().rev() {
                    ret = step_rewards[row] + gamma * ret;
                    o.returns[row - b] = ret;
                    o.episode[row - b] = scores.row(j, row);
                }
            }

            // Episode term: statistics over the group's rows. A single-row group: μ = 0, σ = 1
            // (the peer's convention).
            ws.values.clear();
            ws.values.extend(ws.rows.iter().map(|&r| o.episode[r - b]));
            let s = GroupStats::of(&ws.values);
            let (mean, std) = if s.count == 1 { (0.0, 1.0) } else { (s.mean, s.std) };
            for &r in &ws.rows {
                let a = &mut o.episode[r - b];
                *a = mode.normalize(*a, mean, std, eps);
            }

            // Step groups: distinct anchors of this group, then (similarity) their clusters.
            intern_group(ws, key);
            let clusters = match similar {
                None => {
                    ws.unit_cluster.clear();
                    ws.unit_cluster.extend(0..ws.unit_first_row.len());
                    ws.unit_first_row.len()
                }
                Some((threshold, text)) => cluster_similar(ws, threshold, text),
            };
            for l in ws.labels.iter_mut() {
                *l = ws.unit_cluster[*l];
            }

            // Step term: statistics per step group over its rows, in caller order.
            ws.values.clear();
            ws.values.extend(ws.rows.iter().map(|&r| o.returns[r - b]));
            self.stats(&ws.values, &ws.labels, clusters, &mut ws.stats);
            for (&r, &l) in ws.rows.iter().zip(&ws.labels) {
                let s = &ws.stats[l];
                let r = r - b;
                // A singleton step group compares the row with itself: 0.
                let a_s = if s.count == 1 {
                    0.0
                } else {
                    mode.normalize(o.returns[r], s.mean, s.std, eps)
                };
                let a = o.episode[r] + w * a_s;
                o.step[r] = a_s;
                o.advantages[r] = a;
                o.labels[r] = base + l;
                probe += (o.returns[r] + o.episode[r] + a_s + a) * 0.0;
            }
            base += clusters;
        }
        (base, probe)
    }
}

/// Interns the anchors of the current group's rows (`ws.rows`, caller order): `ws.labels[i]` is
/// the local unit id of `ws.rows[i]`, ids in order of first appearance, `ws.unit_first_row[u]`
/// the first row of unit u.
///
/// The table lives in the workspace and holds unit ids, not keys (keys are compared through
/// their unit's first row), so it has no lifetime and is reused across groups and batches. It is
/// sized by the group, not the batch: a batch-wide map grew with the batch and turned every
/// lookup into a cache miss (GiGPO went superlinear), where a group's table stays in cache.
fn intern_group<'k, K, F>(ws: &mut GigpoWorkspace, key: &F)
where
    K: Hash + Eq + ?Sized + 'k,
    F: Fn(usize) -> &'k K,
{
    let n = ws.rows.len();
    // Load factor ≤ 1/2: short probe sequences.
    let bits = (2 * n).next_power_of_two().max(8).trailing_zeros();
    let size = 1usize << bits;
    if ws.table.len() < size {
        ws.table.resize(size, NIL);
    }
    let table = &mut ws.table[..size];
    table.fill(NIL);
    let mask = size - 1;
    ws.labels.clear();
    ws.unit_first_row.clear();
    for &r in &ws.rows {
        let k = key(r);
        let mut slot = (ws.hasher.hash(k) >> (64 - bits)) as usize;
        let unit = loop {
            match table[slot] {
                NIL => {
                    let u = ws.unit_first_row.len();
                    ws.unit_first_row.push(r);
                    table[slot] = u;
                    break u;
                }
                u if key(ws.unit_first_row[u]) == k => break u,
                _ => slot = (slot + 1) & mask,
            }
        };
        ws.labels.push(unit);
    }
}

/// The peer's greedy similarity clustering of the current group, over its units instead of its
/// rows; fills `ws.unit_cluster` and returns the number of clusters.
///
/// Equivalent to the peer's row loop: a row whose anchor was already seen in the group lands in
/// the same cluster as that earlier row, because it is compared against the same clusters in the
/// same order (clusters are only appended) and the one it founded, if any, has ratio 1. So only
/// the first row of each unit runs comparisons, in the order of first appearance. Clusters are
/// created in that order too, so their ids are the first-appearance labels within the group.
fn cluster_similar<'t, T>(ws: &mut GigpoWorkspace, threshold: f64, text: &T) -> usize
where
    T: Fn(usize) -> &'t str,
{
    ws.unit_cluster.clear();
    let mut clusters = 0;
    for u in 0..ws.unit_first_row.len() {
        let anchor = text(ws.unit_first_row[u]);
        // The peer's are_similar(obs, cluster["rep"]): a = new anchor, b = first member.
        let found = (0..clusters).find(|&c| ws.matchers[c].ratio_at_least(anchor, threshold));
        let c = found.unwrap_or_else(|| {
            if clusters < ws.matchers.len() {
                ws.matchers[clusters].set_b(anchor);
            } else {
                ws.matchers.push(Matcher::new(anchor));
            }
            clusters += 1;
            clusters - 1
        });
        ws.unit_cluster.push(c);
    }
    clusters
}

impl Gigpo {
    /// Per-label statistics; the spread pass only where the mode divides by it.
    fn stats(&self, values: &[f64], labels: &[usize], num_labels: usize, stats: &mut Vec<GroupStats>) {
        group_means(values, labels, num_labels, stats);
        if self.config.mode == NormMode::MeanStdNorm {
            group_spreads(values, labels, stats);
        }
    }

    /// Per-row advantages for the trait's entry points (`step_rewards` and one of
    /// `anchor_obs` / `anchor_ids` required; `token_level_rewards`, when given, must agree with
    /// the batch's episode rewards), with the workspace's GiGPO scratch and output.
    ///
    /// Shapes before values, in the step path's order (`estimate_steps_into`'s docs): the
    /// output, `step_rewards` and the anchors (present, lengths), `row_scores`' length,
    /// `token_level_rewards`' rows; then `row_scores`' values, the token sums against the rows'
    /// scores, then the step rewards' values (in `run`).
    fn steps_with(
        &self,
        input: &crate::estimator::EstimatorInput<'_>,
        advantages: &mut [f64],
        ws: &mut crate::estimator::Workspace,
    ) -> Result<()> {
        crate::estimator::check_steps_out(input, advantages)?;
        let (step_rewards, anchors) = self.step_columns(input)?;
        input.check_step_values()?;
        let (batch, scores, out) = (input.batch, input.step_scores(), &mut ws.gigpo_out);
        match anchors {
            Anchors::Text(text) => {
                self.compute_text_with(batch, scores, step_rewards, text, &mut ws.gigpo, out)?
            }
            Anchors::Ids(ids) => {
                self.compute_by_key_with(batch, scores, step_rewards, ids, &mut ws.gigpo, out)?
            }
        }
        advantages.copy_from_slice(&out.advantages);
        Ok(())
    }

    /// The step path's input shapes: `step_rewards` present and one per row, then one of
    /// `anchor_obs` / `anchor_ids` (ids need exact grouping), one per row, then the length of
    /// `row_scores` and the rows of `token_level_rewards`, when given.
    fn step_columns<'a>(
        &self,
        input: &crate::estimator::EstimatorInput<'a>,
    ) -> Result<(&'a [f64], Anchors<'a>)> {
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
            (Some(text), None) => {
                check_len("anchors", rows, text.len())?;
                Anchors::Text(text)
            }
            (None, Some(ids)) => {
                self.check_key_grouping()?;
                check_len("anchors", rows, ids.len())?;
                Anchors::Ids(ids)
            }
            (None, None) => return Err(Error::MissingInput("anchor_obs")),
        };
        input.check_step_shapes()?;
        Ok((step_rewards, anchors))
    }
}

/// The anchors of the trait's entry points: text (`anchor_obs`) or integer ids (`anchor_ids`).
enum Anchors<'a> {
    Text(&'a [&'a str]),
    Ids(&'a [u64]),
}

impl crate::estimator::AdvantageEstimator for Gigpo {
    /// `gigpo`.
    fn name(&self) -> &'static str {
        "gigpo"
    }

    /// Reads the batch's terminal rewards (episode rewards), or the caller's `row_scores` in
    /// their place (each row's own score), `step_rewards` and `anchor_obs` or `anchor_ids`
    /// (required; integer ids need [`StepGrouping::Exact`]). When `token_level_rewards` are
    /// given as well, every row's sum must equal its score: its `row_scores` entry, else its
    /// trajectory's episode reward ([`RolloutBatch::check_row_scores`]). Broadcasts the per-row
    /// advantages under `response_mask` when given (else one column). Returns equal advantages,
    /// as in verl-agent.
    ///
    /// ```
    /// use beacon_rl::estimator::{AdvantageEstimator, EstimatorInput};
    /// use beacon_rl::estimator::gigpo::{Gigpo, GigpoConfig};
    /// use beacon_rl::RolloutBatch;
    /// let batch = RolloutBatch::from_row_keys(&["u"; 2], &["a", "b"], &[1.0, 0.0])?;
    /// let gigpo = Gigpo::new(GigpoConfig::verl_agent())?;
    /// let anchors = ["start", "start"];
    /// let input = EstimatorInput::new(&batch).with_step_rewards(&[0.0, 0.0]).with_anchor_obs(&anchors);
    /// let out = gigpo.estimate(&input)?;
    /// assert_eq!(out.advantages[[0, 0]], 0.5); // episode term 1 - 0.5; equal step returns
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    fn estimate_into(
        &self,
        input: &crate::estimator::EstimatorInput<'_>,
        advantages: crate::tensor::FloatViewMut<'_>,
        returns: Option<crate::tensor::FloatViewMut<'_>>,
        ws: &mut crate::estimator::Workspace,
    ) -> Result<()> {
        crate::estimator::estimate_via_steps(
            input,
            advantages,
            returns,
            ws,
            || self.step_columns(input).map(drop),
            |steps, ws| self.steps_with(input, steps, ws),
        )
    }

    /// As the trait's `estimate`, but every input check runs before the output is allocated:
    /// a refused input allocates nothing, and a `Lengths` mask's claimed L is asked of the
    /// allocator only for an otherwise valid input.
    fn estimate(&self, input: &crate::estimator::EstimatorInput<'_>) -> Result<crate::estimator::Advantages> {
        crate::estimator::estimate_via_steps_fresh(
            input,
            || self.step_columns(input).map(drop),
            |steps, ws| self.steps_with(input, steps, ws),
        )
    }

    /// One advantage per row (the per-row `advantages` of [`Gigpo::compute`]).
    fn estimate_steps_into(
        &self,
        input: &crate::estimator::EstimatorInput<'_>,
        advantages: &mut [f64],
        ws: &mut crate::estimator::Workspace,
    ) -> Result<()> {
        self.steps_with(input, advantages, ws)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_of_the_combination_alone_is_reported() {
        // Returns 0 and 4 in one step group: A_S = ∓2 (mean 2), finite; A_E = ±0.5, finite;
        // but w · A_S = 1e308 · 2 overflows, so A = ±inf: the error names `advantages`, row 0.
        let batch = RolloutBatch::from_row_keys(&["g"; 2], &["a", "b"], &[1.0, 0.0]).unwrap();
        let g = Gigpo::new(
            GigpoConfig::verl_agent()
                .with_step_advantage_weight(1e308)
                .with_step_decay(0.0),
        )
        .unwrap();
        let err = g.compute(&batch, &[0.0, 4.0], &["s", "s"]).unwrap_err();
        assert!(
            matches!(
                err,
                Error::NonFinite {
                    what: "advantages",
                    index: 0,
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn workspace_reuse_across_modes_and_sizes() {
        let batch = RolloutBatch::from_row_keys(&["g"; 3], &["a", "b", "c"], &[1.0, 0.0, 0.0]).unwrap();
        let sim =
            Gigpo::new(GigpoConfig::verl_agent().with_grouping(StepGrouping::Similarity { threshold: 0.5 }))
                .unwrap();
        let exact = Gigpo::new(GigpoConfig::verl_agent()).unwrap();
        let mut ws = GigpoWorkspace::new();
        let mut out = GigpoOutput::default();
        let anchors = ["abcd", "abce", "zzzz"];
        sim.compute_into(&batch, &[1.0, 2.0, 3.0], &anchors, &mut ws, &mut out)
            .unwrap();
        // ratio("abce", "abcd") = 2·3/8 = 0.75 >= 0.5: rows 0 and 1 share a group.
        assert_eq!(out.step_groups, [0, 0, 1]);
        let fresh = sim.compute(&batch, &[1.0, 2.0, 3.0], &anchors).unwrap();
        assert_eq!(out, fresh);
        exact
            .compute_into(&batch, &[1.0, 2.0, 3.0], &anchors, &mut ws, &mut out)
            .unwrap();
        assert_eq!(out.step_groups, [0, 1, 2]);
        let small = RolloutBatch::from_row_keys(&["g"], &["a"], &[1.0]).unwrap();
        sim.compute_into(&small, &[1.0], &["x"], &mut ws, &mut out)
            .unwrap();
        assert_eq!(out.advantages, [1.0]);
    }

    #[test]
    fn advantages_into_is_compute_s_advantages() {
        // Two trajectories of one task, three steps each; rows interleave.
        let batch = RolloutBatch::from_row_keys(
            &["g"; 6],
            &["a", "b", "a", "b", "a", "b"],
            &[1.0, 0.0, 1.0, 0.0, 1.0, 0.0],
        )
        .unwrap();
        let rewards = [0.0, 0.5, 1.0, 0.0, 0.0, 2.0];
        let anchors = ["s0", "s0", "s1", "s2", "s1", "s1"];
        let g = Gigpo::new(GigpoConfig::verl_agent()).unwrap();
        let full = g.compute(&batch, &rewards, &anchors).unwrap();
        let mut ws = GigpoWorkspace::new();
        let mut adv = [f64::NAN; 6];
        g.advantages_into(&batch, &rewards, &anchors, &mut ws, &mut adv)
            .unwrap();
        assert_eq!(
            adv.map(f64::to_bits),
            <[f64; 6]>::try_from(full.advantages.as_slice())
                .unwrap()
                .map(f64::to_bits)
        );
        assert!(matches!(
            g.advantages_into(&batch, &rewards, &anchors, &mut ws, &mut [0.0; 5]),
            Err(Error::OutputShape {
                expected: (6, 1),
                actual: (5, 1),
                ..
            })
        ));
    }
}
