//! What an estimator reads: [`EstimatorInput`], the batch plus per-row columns in the caller's
//! dtypes, and the checks every estimator runs on them (presence, shapes, finiteness).

mod checks;

pub(crate) use checks::{
    check_trajectories_agree, report_non_finite_input, validate_deferred, FiniteCheck, StepScores,
};

use crate::batch::RolloutBatch;
use crate::tensor::{FloatView, MaskView};

/// Everything an estimator may read about one batch. All per-row columns are in the caller's
/// row order and have one entry (or one matrix row of L tokens) per row of
/// [`batch`](Self::batch).
///
/// Build it with [`EstimatorInput::new`] and the `with_*` setters; every column defaults to
/// `None` and each estimator documents the columns it needs.
///
/// ```
/// use beacon_rl::estimator::EstimatorInput;
/// use beacon_rl::RolloutBatch;
/// let batch = RolloutBatch::from_group_keys(&["q"], &[1.0])?;
/// let rewards = [[0.0, 1.0]];
/// let input = EstimatorInput::new(&batch).with_token_level_rewards(&rewards);
/// assert!(input.response_mask.is_none());
/// assert_eq!(input.token_level_rewards.unwrap().dim(), (1, 2));
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct EstimatorInput<'a> {
    /// Group structure: which rows share a uid (verl's `index`), and for agent data which rows
    /// form a trajectory.
    pub batch: &'a RolloutBatch,
    /// verl's `token_level_rewards`, rows × L.
    pub token_level_rewards: Option<FloatView<'a>>,
    /// verl's `response_mask` (1 = a token the policy generated, 0 = not), rows × L, as a
    /// `bool`/`u8`/`i64` matrix or per-row lengths. Integer entries other than 0 and 1 are
    /// [`Error::MaskValue`](crate::Error::MaskValue).
    pub response_mask: Option<MaskView<'a>>,
    /// Critic values per token (GAE), rows × L.
    pub values: Option<FloatView<'a>>,
    /// One baseline reward per row (ReMax: the reward of the greedy response).
    pub reward_baselines: Option<&'a [f64]>,
    /// Log-probabilities of the sampled tokens under the rollout policy, rows × L (OTB).
    pub old_log_probs: Option<FloatView<'a>>,
    /// Σ_v π(v)² over the vocabulary at each token, rows × L (OTB).
    pub sum_pi_squared: Option<FloatView<'a>>,
    /// Truncated importance-sampling weights per token, rows × L (OTB, optional).
    pub rollout_is_weights: Option<FloatView<'a>>,
    /// One milestone flag per row (BEACON).
    pub milestones: Option<&'a [bool]>,
    /// One environment reward per row / step (GiGPO).
    pub step_rewards: Option<&'a [f64]>,
    /// One anchor observation per row / step (GiGPO step grouping).
    pub anchor_obs: Option<&'a [&'a str]>,
    /// One integer anchor id per row / step (GiGPO exact step grouping: a state id or a hash
    /// of the observation); an alternative to `anchor_obs`.
    pub anchor_ids: Option<&'a [u64]>,
    /// One score per row, the row's own (e.g. verl-agent's reward sum after the invalid-action
    /// penalty), read by the step paths in place of its trajectory's R(τ); see
    /// [`with_row_scores`](Self::with_row_scores).
    pub row_scores: Option<&'a [f64]>,
    /// One critic value per row, the value of the state before the row's turn (`turn_gae` on
    /// step rows); see [`with_turn_values`](Self::with_turn_values).
    pub turn_values: Option<&'a [f64]>,
    /// One parent row per row, −1 for a tree's first rollout (`tree_grpo`); see
    /// [`with_tree_parents`](Self::with_tree_parents).
    pub tree_parents: Option<&'a [i64]>,
    /// One mean token entropy per row, the policy's uncertainty at the row's step (`empg`);
    /// see [`with_step_entropy`](Self::with_step_entropy).
    pub step_entropy: Option<&'a [f64]>,
}

impl<'a> EstimatorInput<'a> {
    /// An input with the batch's group structure and no columns.
    ///
    /// ```
    /// # use beacon_rl::{estimator::EstimatorInput, RolloutBatch};
    /// let batch = RolloutBatch::from_group_keys(&[7], &[0.0])?;
    /// let input = EstimatorInput::new(&batch);
    /// assert_eq!(input.batch.num_steps(), 1);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn new(batch: &'a RolloutBatch) -> Self {
        Self {
            batch,
            token_level_rewards: None,
            response_mask: None,
            values: None,
            reward_baselines: None,
            old_log_probs: None,
            sum_pi_squared: None,
            rollout_is_weights: None,
            milestones: None,
            step_rewards: None,
            anchor_obs: None,
            anchor_ids: None,
            row_scores: None,
            turn_values: None,
            tree_parents: None,
            step_entropy: None,
        }
    }

    /// Sets verl's `token_level_rewards` (rows × L): the reward credited to each token.
    /// Outcome estimators sum it over all L positions (masked or not) to get a row's score.
    ///
    /// ```
    /// # use beacon_rl::{estimator::EstimatorInput, RolloutBatch};
    /// # let batch = RolloutBatch::from_group_keys(&[0], &[1.0])?;
    /// let input = EstimatorInput::new(&batch).with_token_level_rewards(&[[0.0, 1.0]]);
    /// assert!(input.token_level_rewards.is_some());
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    #[must_use]
    pub fn with_token_level_rewards(mut self, rewards: impl Into<FloatView<'a>>) -> Self {
        self.token_level_rewards = Some(rewards.into());
        self
    }

    /// Sets verl's `response_mask` (rows × L): true for tokens the policy generated, false for
    /// padding and (multi-turn) observation tokens. Per-row lengths
    /// ([`MaskView::Lengths`]: row r's first `lengths[r]` of L tokens) are the cheapest form:
    /// nothing rows × L is read.
    ///
    /// ```
    /// # use beacon_rl::{estimator::EstimatorInput, RolloutBatch};
    /// use beacon_rl::tensor::MaskView;
    /// # let batch = RolloutBatch::from_group_keys(&[0], &[1.0])?;
    /// let input = EstimatorInput::new(&batch).with_response_mask(&[[true, false]]);
    /// assert!(input.response_mask.is_some());
    /// let lengths = EstimatorInput::new(&batch).with_response_mask(MaskView::Lengths { lengths: &[1], cols: 2 });
    /// assert_eq!(lengths.response_mask.map(|m| m.dim()), Some((1, 2)));
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    #[must_use]
    pub fn with_response_mask(mut self, mask: impl Into<MaskView<'a>>) -> Self {
        self.response_mask = Some(mask.into());
        self
    }

    /// Sets the critic's value estimate V(s_t) per token (rows × L), used by GAE.
    ///
    /// ```
    /// # use beacon_rl::{estimator::EstimatorInput, RolloutBatch};
    /// # let batch = RolloutBatch::from_group_keys(&[0], &[1.0])?;
    /// let input = EstimatorInput::new(&batch).with_values(&[[0.5, 0.25]]);
    /// assert!(input.values.is_some());
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    #[must_use]
    pub fn with_values(mut self, values: impl Into<FloatView<'a>>) -> Self {
        self.values = Some(values.into());
        self
    }

    /// Sets one baseline reward per row (ReMax: the reward of the greedy rollout).
    ///
    /// ```
    /// # use beacon_rl::{estimator::EstimatorInput, RolloutBatch};
    /// # let batch = RolloutBatch::from_group_keys(&[0], &[1.0])?;
    /// let input = EstimatorInput::new(&batch).with_reward_baselines(&[0.5]);
    /// assert_eq!(input.reward_baselines, Some(&[0.5][..]));
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    #[must_use]
    pub fn with_reward_baselines(mut self, baselines: &'a [f64]) -> Self {
        self.reward_baselines = Some(baselines);
        self
    }

    /// Sets log π_old(a_t | s_t) of each sampled token (rows × L), used by the optimal token
    /// baseline.
    ///
    /// ```
    /// # use beacon_rl::{estimator::EstimatorInput, RolloutBatch};
    /// # let batch = RolloutBatch::from_group_keys(&[0], &[1.0])?;
    /// let input = EstimatorInput::new(&batch).with_old_log_probs(&[[-0.1, -2.0]]);
    /// assert!(input.old_log_probs.is_some());
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    #[must_use]
    pub fn with_old_log_probs(mut self, log_probs: impl Into<FloatView<'a>>) -> Self {
        self.old_log_probs = Some(log_probs.into());
        self
    }

    /// Sets Σ_v π(v | s_t)² over the vocabulary at each token (rows × L), used by the optimal
    /// token baseline.
    ///
    /// ```
    /// # use beacon_rl::{estimator::EstimatorInput, RolloutBatch};
    /// # let batch = RolloutBatch::from_group_keys(&[0], &[1.0])?;
    /// let input = EstimatorInput::new(&batch).with_sum_pi_squared(&[[0.8, 0.3]]);
    /// assert!(input.sum_pi_squared.is_some());
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    #[must_use]
    pub fn with_sum_pi_squared(mut self, sum_pi_squared: impl Into<FloatView<'a>>) -> Self {
        self.sum_pi_squared = Some(sum_pi_squared.into());
        self
    }

    /// Sets truncated importance-sampling weights ρ̄_t per token (rows × L); the optimal token
    /// baseline scales its variance proxy by ρ̄_t² when present.
    ///
    /// ```
    /// # use beacon_rl::{estimator::EstimatorInput, RolloutBatch};
    /// # let batch = RolloutBatch::from_group_keys(&[0], &[1.0])?;
    /// let input = EstimatorInput::new(&batch).with_rollout_is_weights(&[[1.0, 0.9]]);
    /// assert!(input.rollout_is_weights.is_some());
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    #[must_use]
    pub fn with_rollout_is_weights(mut self, weights: impl Into<FloatView<'a>>) -> Self {
        self.rollout_is_weights = Some(weights.into());
        self
    }

    /// Sets one milestone flag per row (true = the step completes a milestone), read by
    /// BEACON estimators.
    ///
    /// ```
    /// # use beacon_rl::{estimator::EstimatorInput, RolloutBatch};
    /// # let batch = RolloutBatch::from_group_keys(&[0], &[1.0])?;
    /// let input = EstimatorInput::new(&batch).with_milestones(&[true]);
    /// assert_eq!(input.milestones, Some(&[true][..]));
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    #[must_use]
    pub fn with_milestones(mut self, milestones: &'a [bool]) -> Self {
        self.milestones = Some(milestones);
        self
    }

    /// Sets the environment's reward for each row's step, read by GiGPO.
    ///
    /// ```
    /// # use beacon_rl::{estimator::EstimatorInput, RolloutBatch};
    /// # let batch = RolloutBatch::from_group_keys(&[0], &[1.0])?;
    /// let input = EstimatorInput::new(&batch).with_step_rewards(&[0.0]);
    /// assert_eq!(input.step_rewards, Some(&[0.0][..]));
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    #[must_use]
    pub fn with_step_rewards(mut self, step_rewards: &'a [f64]) -> Self {
        self.step_rewards = Some(step_rewards);
        self
    }

    /// Sets the anchor observation of each row's step (GiGPO groups steps of a uid whose
    /// anchors match).
    ///
    /// ```
    /// # use beacon_rl::{estimator::EstimatorInput, RolloutBatch};
    /// # let batch = RolloutBatch::from_group_keys(&[0], &[1.0])?;
    /// let obs = ["You are in the kitchen."];
    /// let input = EstimatorInput::new(&batch).with_anchor_obs(&obs);
    /// assert_eq!(input.anchor_obs.map(|o| o.len()), Some(1));
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    #[must_use]
    pub fn with_anchor_obs(mut self, anchor_obs: &'a [&'a str]) -> Self {
        self.anchor_obs = Some(anchor_obs);
        self
    }

    /// Sets an integer anchor id for each row's step (GiGPO groups steps of a uid whose ids
    /// are equal; exact grouping only). Give either this or
    /// [`with_anchor_obs`](Self::with_anchor_obs).
    ///
    /// ```
    /// # use beacon_rl::{estimator::EstimatorInput, RolloutBatch};
    /// # let batch = RolloutBatch::from_group_keys(&[0], &[1.0])?;
    /// let input = EstimatorInput::new(&batch).with_anchor_ids(&[42]);
    /// assert_eq!(input.anchor_ids, Some(&[42u64][..]));
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    #[must_use]
    pub fn with_anchor_ids(mut self, anchor_ids: &'a [u64]) -> Self {
        self.anchor_ids = Some(anchor_ids);
        self
    }

    /// Sets one score per row: the row's own score, which the step-level estimators read in
    /// place of the batch's R(τ) of the row's trajectory, as verl-agent does (it sums each
    /// step row's `token_level_rewards` and normalises every row's own sum).
    ///
    /// A verl-agent step batch needs it when the rows of one trajectory carry different
    /// scores: with `use_invalid_action_penalty` (coefficient 0.1 in verl-agent's ALFWorld,
    /// WebShop and GiGPO scripts) the trainer subtracts `coef · (1 − is_action_valid)` from
    /// each step row's last-token reward, so a row's sum is R(τ) minus its step's penalty.
    ///
    /// Read by the step paths ([`estimate_steps_into`](crate::estimator::AdvantageEstimator::estimate_steps_into),
    /// and the `estimate_into` of BEACON, GiGPO and the ablation, which run it):
    /// - row statistics (`beacon_official`'s trajectory term, `gigpo`'s episode term, `grpo`,
    ///   `grpo_vectorized`, `rloo`, `rloo_vectorized`): row r's score is `row_scores[r]`;
    /// - `grpo` with [`GrpoStatistics::Trajectories`](crate::estimator::GrpoStatistics::Trajectories): the
    ///   statistics count each trajectory's first row (caller order, as verl-agent's
    ///   `seen_pairs`), and every row is normalised with its own score;
    /// - the paper flavour of BEACON counts each trajectory once: its rows must agree, else
    ///   [`Error::InconsistentTerminalReward`](crate::Error::InconsistentTerminalReward) names the first row (caller order) that differs.
    ///
    /// The batch's terminal rewards are then not read by these estimators. The token-level
    /// `estimate_into` of the verl outcome estimators (which score each row by its
    /// `token_level_rewards` sum) checks that the two agree; there too `grpo`'s
    /// trajectory statistics then take each trajectory's first row.
    ///
    /// Checked with the other columns: one finite value per row ([`Error::LengthMismatch`](crate::Error::LengthMismatch),
    /// [`Error::NonFinite`](crate::Error::NonFinite)); when `token_level_rewards` are given too, each row's sum must
    /// equal its entry ([`Error::RowScoreMismatch`](crate::Error::RowScoreMismatch), to a relative 1e-6) instead of its
    /// trajectory's R(τ).
    ///
    /// ```
    /// use beacon_rl::estimator::{AdvantageEstimator, EstimatorConfig, EstimatorInput, Workspace};
    /// use beacon_rl::RolloutBatch;
    ///
    /// // One task, trajectory "a" (2 steps, R = 1, its first step an invalid action penalised
    /// // by 0.1) and "b" (1 step, R = 0): row scores 0.9, 1.0, 0.0.
    /// let batch = RolloutBatch::from_row_keys(&["t"; 3], &["a", "a", "b"], &[1.0, 1.0, 0.0])?;
    /// let input = EstimatorInput::new(&batch).with_row_scores(&[0.9, 1.0, 0.0]);
    /// let grpo = "grpo".parse::<EstimatorConfig>()?.build()?;
    /// let mut adv = [0.0; 3];
    /// grpo.estimate_steps_into(&input, &mut adv, &mut Workspace::default())?;
    /// // Row mean 1.9 / 3; unbiased std √(Σ (s − μ)² / 2) = 0.5508; row 0: (0.9 − μ) / (σ + ε).
    /// let (mean, std) = (1.9 / 3.0, 0.550757054728611);
    /// assert!((adv[0] - (0.9 - mean) / (std + 1e-6)).abs() < 1e-9);
    /// // Token rewards, when given too, must sum to each row's entry.
    /// let tokens = [[0.0, 0.9], [0.0, 1.0], [0.0, 0.5]];
    /// let bad = input.with_token_level_rewards(&tokens);
    /// assert!(grpo.estimate_steps_into(&bad, &mut adv, &mut Workspace::default()).is_err());
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    #[must_use]
    pub fn with_row_scores(mut self, row_scores: &'a [f64]) -> Self {
        self.row_scores = Some(row_scores);
        self
    }

    /// Sets one critic value per row for the step-rows layout of the turn-level estimators:
    /// V of the state in which the row's turn begins (`turn_gae`). Without it, `turn_gae`
    /// reads each turn's value from [`values`](Self::with_values) at the turn's first
    /// generated token.
    ///
    /// ```
    /// # use beacon_rl::{estimator::EstimatorInput, RolloutBatch};
    /// # let batch = RolloutBatch::from_group_keys(&[0], &[1.0])?;
    /// let input = EstimatorInput::new(&batch).with_turn_values(&[0.4]);
    /// assert_eq!(input.turn_values, Some(&[0.4][..]));
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    #[must_use]
    pub fn with_turn_values(mut self, turn_values: &'a [f64]) -> Self {
        self.turn_values = Some(turn_values);
        self
    }

    /// Sets the rollout tree of `tree_grpo`: `tree_parents[r]` is the row whose rollout row
    /// r's rollout branched from (shares a prefix with), or −1 when row r's rollout is the
    /// first of its tree. The rollouts that lead to the same first rollout form one tree.
    ///
    /// ```
    /// # use beacon_rl::{estimator::EstimatorInput, RolloutBatch};
    /// # let batch = RolloutBatch::from_group_keys(&[0, 0], &[1.0, 0.0])?;
    /// let input = EstimatorInput::new(&batch).with_tree_parents(&[-1, 0]);
    /// assert_eq!(input.tree_parents, Some(&[-1, 0][..]));
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    #[must_use]
    pub fn with_tree_parents(mut self, tree_parents: &'a [i64]) -> Self {
        self.tree_parents = Some(tree_parents);
        self
    }

    /// Sets the step entropies of `empg`: `step_entropy[r]` is the mean token entropy of
    /// row r's generated tokens (the row's step), under the policy that sampled them.
    ///
    /// ```
    /// # use beacon_rl::{estimator::EstimatorInput, RolloutBatch};
    /// # let batch = RolloutBatch::from_group_keys(&[0, 0], &[1.0, 0.0])?;
    /// let input = EstimatorInput::new(&batch).with_step_entropy(&[0.4, 1.2]);
    /// assert_eq!(input.step_entropy, Some(&[0.4, 1.2][..]));
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    #[must_use]
    pub fn with_step_entropy(mut self, step_entropy: &'a [f64]) -> Self {
        self.step_entropy = Some(step_entropy);
        self
    }

    /// The shape of the outputs [`estimate`](crate::estimator::AdvantageEstimator::estimate) allocates: the
    /// response mask's, else one column per row (step-level estimators without a mask; every
    /// token-level estimator requires the mask).
    ///
    /// ```
    /// # use beacon_rl::{estimator::EstimatorInput, RolloutBatch};
    /// # let batch = RolloutBatch::from_group_keys(&[0, 1], &[1.0, 0.0])?;
    /// assert_eq!(EstimatorInput::new(&batch).output_dim(), (2, 1));
    /// assert_eq!(EstimatorInput::new(&batch).with_response_mask(beacon_rl::tensor::MaskView::Lengths { lengths: &[1, 3], cols: 4 }).output_dim(), (2, 4));
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn output_dim(&self) -> (usize, usize) {
        match self.response_mask {
            Some(m) => m.dim(),
            None => (self.batch.num_steps(), 1),
        }
    }
}
