//! What an estimator reads: [`EstimatorInput`], the batch plus per-row columns in the caller's
//! dtypes, and the checks every estimator runs on them (presence, shapes, finiteness).

use super::kernel::{all_finite, check_all_finite, check_matrix_shape, row_sums, Tokens};
use super::workspace::InputBufs;
use crate::batch::{first_row_mismatch, RolloutBatch};
use crate::error::{check_finite, check_len, Error, Result};
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
    /// [`Error::MaskValue`].
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
    /// padding and (multi-turn) observation tokens.
    ///
    /// ```
    /// # use beacon_rl::{estimator::EstimatorInput, RolloutBatch};
    /// # let batch = RolloutBatch::from_group_keys(&[0], &[1.0])?;
    /// let input = EstimatorInput::new(&batch).with_response_mask(&[[true, false]]);
    /// assert!(input.response_mask.is_some());
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
    ///   [`Error::InconsistentTerminalReward`] names the first row (caller order) that differs.
    ///
    /// The batch's terminal rewards are then not read by these estimators. The token-level
    /// `estimate_into` of the verl outcome estimators (which score each row by its
    /// `token_level_rewards` sum) checks that the two agree; there too `grpo`'s
    /// trajectory statistics then take each trajectory's first row.
    ///
    /// Checked with the other columns: one finite value per row ([`Error::LengthMismatch`],
    /// [`Error::NonFinite`]); when `token_level_rewards` are given too, each row's sum must
    /// equal its entry ([`Error::RowScoreMismatch`], to a relative 1e-6) instead of its
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
    /// grpo.estimate_steps_into(&input, &mut adv, &mut Workspace::new())?;
    /// // Row mean 1.9 / 3; unbiased std √(Σ (s − μ)² / 2) = 0.5508; row 0: (0.9 − μ) / (σ + ε).
    /// let (mean, std) = (1.9 / 3.0, 0.550757054728611);
    /// assert!((adv[0] - (0.9 - mean) / (std + 1e-6)).abs() < 1e-9);
    /// // Token rewards, when given too, must sum to each row's entry.
    /// let tokens = [[0.0, 0.9], [0.0, 1.0], [0.0, 0.5]];
    /// let bad = input.with_token_level_rewards(&tokens);
    /// assert!(grpo.estimate_steps_into(&bad, &mut adv, &mut Workspace::new()).is_err());
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

    /// Sets the response mask as per-row lengths: row r's first `lengths[r]` of `cols` tokens
    /// are generated (a prefix mask, [`MaskView::Lengths`]). Nothing rows × L is read.
    ///
    /// ```
    /// # use beacon_rl::{estimator::EstimatorInput, RolloutBatch};
    /// # let batch = RolloutBatch::from_group_keys(&[0], &[1.0])?;
    /// let input = EstimatorInput::new(&batch).with_response_lengths(&[1], 2);
    /// assert_eq!(input.response_mask.map(|m| m.dim()), Some((1, 2)));
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    #[must_use]
    pub fn with_response_lengths(mut self, lengths: &'a [usize], cols: usize) -> Self {
        self.response_mask = Some(MaskView::Lengths { lengths, cols });
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
    /// assert_eq!(EstimatorInput::new(&batch).with_response_lengths(&[1, 3], 4).output_dim(), (2, 4));
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn output_dim(&self) -> (usize, usize) {
        match self.response_mask {
            Some(m) => m.dim(),
            None => (self.batch.num_steps(), 1),
        }
    }

    /// `token_level_rewards`, checked: present, one matrix row per batch row, and (with
    /// [`FiniteCheck::Eager`]) finite.
    pub(crate) fn checked_rewards(&self, check: FiniteCheck, buf: &mut Vec<f64>) -> Result<Tokens<'a, f64>> {
        let rewards = self
            .token_level_rewards
            .ok_or(Error::MissingInput("token_level_rewards"))?;
        check_len(
            "token_level_rewards rows",
            self.batch.num_steps(),
            rewards.dim().0,
        )?;
        let rewards = Tokens::floats(rewards, buf);
        if check == FiniteCheck::Eager {
            check_all_finite("token_level_rewards", rewards.as_slice())?;
        }
        Ok(rewards)
    }

    /// The response mask, checked against `dim` (rows × L), and its lengths ≤ L. Not the
    /// entries of an integer mask: every reader tests them for 0/1 as it reads them (no pass
    /// of its own), see [`Tokens::mask`] and [`mask_row`].
    pub(crate) fn checked_mask(&self, dim: (usize, usize)) -> Result<MaskView<'a>> {
        let mask = self.response_mask.ok_or(Error::MissingInput("response_mask"))?;
        let (rows, cols) = mask.dim();
        check_len("response_mask rows", dim.0, rows)?;
        check_len("response_mask columns", dim.1, cols)?;
        mask.validate_lengths()?;
        Ok(mask)
    }

    /// `token_level_rewards` and `response_mask` as the caller's views, shapes checked against
    /// each other and the batch (not the rewards' finiteness nor the mask's entries: the
    /// kernels that read them check both, see [`FiniteCheck`] and [`mask_row`]).
    pub(crate) fn checked_views(&self) -> Result<(FloatView<'a>, MaskView<'a>)> {
        let rewards = self
            .token_level_rewards
            .ok_or(Error::MissingInput("token_level_rewards"))?;
        check_len(
            "token_level_rewards rows",
            self.batch.num_steps(),
            rewards.dim().0,
        )?;
        Ok((rewards, self.checked_mask(rewards.dim())?))
    }

    /// `token_level_rewards` and `response_mask`, checked against each other and the batch,
    /// the mask's entries while it is converted. In this order: rewards present, their rows,
    /// (eager) their finiteness, then the mask's presence, shape, lengths and entries; so a
    /// non-finite reward is reported before a bad mask entry.
    pub(crate) fn checked_rewards_and_mask(
        &self,
        check: FiniteCheck,
        bufs: &mut InputBufs,
    ) -> Result<(Tokens<'a, f64>, Tokens<'a, bool>)> {
        let rewards = self.checked_rewards(check, &mut bufs.rewards)?;
        let mask = self.checked_mask(rewards.dim())?;
        Ok((rewards, Tokens::mask(mask, &mut bufs.mask)?))
    }

    /// Row scores (Σ_t token_level_rewards over all L positions, into `scores`) and the
    /// response mask, checked. One pass over the rewards, in the caller's dtype: the
    /// finiteness of every reward is implied by finite row sums, and only a non-finite sum
    /// triggers the search for the offending reward.
    ///
    /// The rewards are summed before the mask's presence and shape are checked: release 0.1's
    /// order (a non-finite reward is reported before a missing or misshapen mask), which
    /// `estimate_into`'s docs ("Order of the checks") state and
    /// `tests/it/fast_path_equivalence.rs` pins. The step path checks shapes first. Then
    /// `row_scores`, when given (length, finite, each equal to its row's sum).
    pub(crate) fn checked_scores_and_mask(&self, scores: &mut Vec<f64>) -> Result<MaskView<'a>> {
        let rewards = self
            .token_level_rewards
            .ok_or(Error::MissingInput("token_level_rewards"))?;
        let dim = rewards.dim();
        check_len("token_level_rewards rows", self.batch.num_steps(), dim.0)?;
        row_sums(rewards, scores);
        if !all_finite(scores) {
            if let Some((index, value)) = rewards.first_non_finite() {
                return Err(Error::NonFinite {
                    what: "token_level_rewards",
                    index,
                    value,
                });
            }
            check_finite("row scores (overflow)", scores)?;
        }
        // Shapes and lengths only: every caller ends in `Out::outcome`, whose write tests the
        // integer entries for 0/1 as it reads them (no pass of its own).
        let mask = self.response_mask.ok_or(Error::MissingInput("response_mask"))?;
        check_len("response_mask rows", dim.0, mask.dim().0)?;
        check_len("response_mask columns", dim.1, mask.dim().1)?;
        mask.validate_lengths()?;
        self.check_row_scores_against(scores)?;
        Ok(mask)
    }

    /// Where the step paths read each row's score: `row_scores` when given, else the batch's
    /// R(τ) of the row's trajectory.
    pub(crate) fn step_scores(&self) -> StepScores<'a> {
        StepScores {
            batch: self.batch,
            rows: self.row_scores,
        }
    }

    /// The step path's shapes shared by every step estimator, after its own columns': the
    /// length of `row_scores`, then the rows of `token_level_rewards`, when given.
    pub(crate) fn check_step_shapes(&self) -> Result<()> {
        let rows = self.batch.num_steps();
        if let Some(s) = self.row_scores {
            check_len("row_scores", rows, s.len())?;
        }
        if let Some(t) = self.token_level_rewards {
            check_len("token_level_rewards rows", rows, t.dim().0)?;
        }
        Ok(())
    }

    /// The step path's values shared by every step estimator, before its own: `row_scores`
    /// finite, then the token sums (when given) against each row's score, its `row_scores`
    /// entry or else its trajectory's R(τ) (two sources of a score must agree).
    pub(crate) fn check_step_values(&self) -> Result<()> {
        if let Some(s) = self.row_scores {
            check_finite("row_scores", s)?;
        }
        self.batch
            .check_token_scores(self.token_level_rewards, self.row_scores)
    }

    /// The token path's check of `row_scores` (a further column, after the rewards and the
    /// mask): one per row, finite, and equal to each row's token sum in `sums` (in caller
    /// order, so the first disagreeing row is the first in caller order).
    pub(crate) fn check_row_scores_against(&self, sums: &[f64]) -> Result<()> {
        let Some(s) = self.row_scores else { return Ok(()) };
        check_len("row_scores", self.batch.num_steps(), s.len())?;
        check_finite("row_scores", s)?;
        match first_row_mismatch(s, |r| sums[r]) {
            None => Ok(()),
            Some((row, row_score, tokens)) => Err(Error::RowScoreMismatch {
                row,
                row_score,
                tokens,
            }),
        }
    }

    /// A further rows × L float column, checked for presence, shape and (with
    /// [`FiniteCheck::Eager`]) finiteness.
    pub(crate) fn checked_matrix(
        &self,
        what: &'static str,
        column: Option<FloatView<'a>>,
        dim: (usize, usize),
        check: FiniteCheck,
        buf: &mut Vec<f64>,
    ) -> Result<Tokens<'a, f64>> {
        let m = column.ok_or(Error::MissingInput(what))?;
        check_matrix_shape(what, m.dim(), dim)?;
        let m = Tokens::floats(m, buf);
        if check == FiniteCheck::Eager {
            check_all_finite(what, m.as_slice())?;
        }
        Ok(m)
    }
}

/// The score of each row on the step paths: the caller's `row_scores` when given, else the
/// batch's R(τ) of the row's trajectory. The one place every step estimator reads it from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StepScores<'a> {
    batch: &'a RolloutBatch,
    rows: Option<&'a [f64]>,
}

impl<'a> StepScores<'a> {
    /// The batch's R(τ) only (the inherent `compute` methods, which take no row scores).
    pub(crate) fn of_batch(batch: &'a RolloutBatch) -> Self {
        Self { batch, rows: None }
    }

    /// The caller's per-row scores, when given (checked: one finite value per row).
    pub(crate) fn per_row(&self) -> Option<&'a [f64]> {
        self.rows
    }

    /// The score of caller row `r`, a row of trajectory `j`.
    #[inline]
    pub(crate) fn row(&self, j: usize, r: usize) -> f64 {
        match self.rows {
            Some(s) => s[r],
            None => self.batch.terminal_rewards()[j],
        }
    }

    /// Every row's score, into `scores` (caller order).
    pub(crate) fn write_rows(&self, scores: &mut Vec<f64>) {
        let batch = self.batch;
        scores.clear();
        match self.rows {
            Some(s) => scores.extend_from_slice(s),
            None => {
                scores.resize(batch.num_steps(), 0.0);
                for (j, &reward) in batch.terminal_rewards().iter().enumerate() {
                    for &r in batch.trajectory_rows(j) {
                        scores[r] = reward;
                    }
                }
            }
        }
    }

    /// For the estimators that count each trajectory once: every row of a trajectory must
    /// carry the same score (always so without `row_scores`).
    ///
    /// # Errors
    /// [`Error::InconsistentTerminalReward`] for the first row (caller order) whose score
    /// differs from its trajectory's first row's.
    pub(crate) fn check_trajectories_agree(&self) -> Result<()> {
        match self.rows {
            Some(s) => check_trajectories_agree(self.batch, s),
            None => Ok(()),
        }
    }

    /// Trajectory `j`'s score: its first row's (caller order), or R(τ).
    #[inline]
    pub(crate) fn trajectory(&self, j: usize) -> f64 {
        match self.rows {
            Some(s) => s[self.batch.trajectory_rows(j)[0]],
            None => self.batch.terminal_rewards()[j],
        }
    }
}

/// Every row of a trajectory carries the score of the trajectory's first row (`scores` one
/// per row, caller order): where each trajectory is counted once.
///
/// # Errors
/// [`Error::InconsistentTerminalReward`] for the first row (caller order) whose score differs
/// from its trajectory's first row's.
pub(crate) fn check_trajectories_agree(batch: &RolloutBatch, scores: &[f64]) -> Result<()> {
    let mut first: Option<(usize, f64, f64)> = None;
    for j in 0..batch.num_trajectories() {
        let rows = batch.trajectory_rows(j);
        let expected = scores[rows[0]];
        if let Some(&r) = rows.iter().find(|&&r| scores[r] != expected) {
            if first.is_none_or(|(b, _, _)| r < b) {
                first = Some((r, expected, scores[r]));
            }
        }
    }
    match first {
        Some((row, expected, value)) => Err(Error::InconsistentTerminalReward { row, expected, value }),
        None => Ok(()),
    }
}

/// When the finiteness of the float matrix inputs is checked.
///
/// A separate pass per input matrix costs as much as the estimator's own pass (the kernels
/// are memory-bound), so the token-level estimators validate with `Deferred` (presence and
/// shapes only), fold every input value into a [`FiniteAcc`](whiten::FiniteAcc) as their
/// kernel reads it, and only when that saw a non-finite value run the `Eager` validation
/// again, which returns exactly the error the eager checks would have returned up front.
/// See [`validate_deferred`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FiniteCheck {
    /// Presence, shapes and finiteness, in the documented order.
    Eager,
    /// Presence and shapes only; the kernel checks finiteness.
    Deferred,
}

/// Runs the validation `build` with [`FiniteCheck::Deferred`] and the workspace's buffers. If
/// that fails, returns the error of the eager validation instead (an earlier input may be
/// non-finite, and the eager order reports that first).
pub(crate) fn validate_deferred<T>(
    bufs: &mut InputBufs,
    build: impl Fn(FiniteCheck, &mut InputBufs) -> Result<T>,
) -> Result<T> {
    build(FiniteCheck::Deferred, bufs).map_err(|deferred| {
        match build(FiniteCheck::Eager, &mut InputBufs::default()) {
            Err(eager) => eager,
            Ok(_) => deferred,
        }
    })
}

/// Called when a kernel saw a non-finite input value or an integer mask entry other than 0
/// and 1: the eager validation's error (error path only, so it may allocate).
pub(crate) fn report_non_finite_input<T>(
    build: impl Fn(FiniteCheck, &mut InputBufs) -> Result<T>,
) -> Result<()> {
    build(FiniteCheck::Eager, &mut InputBufs::default()).map(|_| ())
}
