//! `step_reinforce`: discounted per-turn returns, normalised over turns, as ROLL runs them.

use super::turns::{turn_estimator, TurnWorkspace, Turns};
use super::{check_steps_out, EstimatorInput};
use crate::error::{Error, Range, Result};

/// Where a normalisation statistic is taken: ROLL's `norm_mean_type` / `norm_std_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum NormScope {
    /// Over every turn of the batch (`"batch"`).
    Batch,
    /// Over the turns of the [`grouping`](StepReinforceConfig::grouping) set (`"group"`).
    Group,
}

/// How turns are split into normalisation sets: ROLL's `reward_normalization.grouping`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum Grouping {
    /// One set: the whole batch (ROLL's `batch`, its default).
    Batch,
    /// One set per group of the batch (ROLL's `traj_group_id`; verl's `uid`).
    Group,
}

/// Parameters of `step_reinforce`, with ROLL's defaults ([`Default`](Self::default)).
///
/// ```
/// use beacon_rl::estimator::{EstimatorConfig, Grouping, NormScope, StepReinforceConfig};
/// let c = StepReinforceConfig::default()
///     .with_grouping(Grouping::Group)
///     .with_norm_mean(Some(NormScope::Group));
/// assert!(EstimatorConfig::StepReinforce(c).build().is_ok());
/// assert!(EstimatorConfig::StepReinforce(c.with_step_discount(1.5)).build().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct StepReinforceConfig {
    /// γ_s of the discounted turn returns (ROLL `step_reward_gamma`, default 0.95), in [0, 1].
    pub step_discount: f64,
    /// Normalisation sets (ROLL `reward_normalization.grouping`, default the batch).
    pub grouping: Grouping,
    /// Where μ is taken; `None` subtracts nothing (ROLL `norm_mean_type`, default `None`).
    pub norm_mean: Option<NormScope>,
    /// Where σ is taken; `None` divides by nothing (ROLL `norm_std_type`, default `None`).
    pub norm_std: Option<NormScope>,
    /// Clamp of the normalised turn values (ROLL `reward_clip`, default none), > 0.
    pub reward_clip: Option<f64>,
    /// Whiten the token advantages over the batch's generated tokens (ROLL
    /// `whiten_advantages`, default false). Token path only.
    pub whiten_advantages: bool,
    /// Clamp of the final advantages (ROLL `advantage_clip`, default none), > 0.
    pub advantage_clip: Option<f64>,
}

impl StepReinforceConfig {
    /// Checks the parameters.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] unless `step_discount` is in [0, 1] and each clip, when set,
    /// is finite and > 0.
    pub(crate) fn validate(&self) -> Result<()> {
        Range::UNIT.check("step_discount", self.step_discount)?;
        if let Some(c) = self.reward_clip {
            Range::POSITIVE.check("reward_clip", c)?;
        }
        if let Some(c) = self.advantage_clip {
            Range::POSITIVE.check("advantage_clip", c)?;
        }
        Ok(())
    }
}

impl Default for StepReinforceConfig {
    /// ROLL's defaults: γ_s = 0.95, batch grouping, no mean, no σ, no clips, no whitening.
    fn default() -> Self {
        Self {
            step_discount: 0.95,
            grouping: Grouping::Batch,
            norm_mean: None,
            norm_std: None,
            reward_clip: None,
            whiten_advantages: false,
            advantage_clip: None,
        }
    }
}

crate::setters::with_setters! {
    StepReinforceConfig, "use beacon_rl::estimator::*;", StepReinforceConfig::default();
    /// Sets γ_s, the discount of the turn returns (default 0.95; in [0, 1]).
    with_step_discount(step_discount: f64) = 1.0;
    /// Sets the normalisation sets (default [`Grouping::Batch`]).
    with_grouping(grouping: Grouping) = Grouping::Group;
    /// Sets where μ is taken (default `None`: no mean subtracted).
    with_norm_mean(norm_mean: Option<NormScope>) = Some(NormScope::Batch);
    /// Sets where σ is taken (default `None`: no division).
    with_norm_std(norm_std: Option<NormScope>) = Some(NormScope::Group);
    /// Sets the clamp of the normalised turn values (default none; > 0).
    with_reward_clip(reward_clip: Option<f64>) = Some(5.0);
    /// Sets the whitening of the token advantages (default false).
    with_whiten_advantages(whiten_advantages: bool) = true;
    /// Sets the clamp of the final advantages (default none; > 0).
    with_advantage_clip(advantage_clip: Option<f64>) = Some(0.2);
}

/// `step_reinforce`: discounted per-turn returns, normalised over turns, as ROLL runs them.
///
/// ROLL's agentic pipeline (alibaba/ROLL, `roll/pipeline/agentic/utils.py`) with
/// `adv_estimator: step_reinforce` keeps one row per turn and computes, in order
/// (`compute_discounted_returns`, `compute_response_level_rewards` → `agentic_reward_norm`,
/// `compute_token_reward`, `agentic_compute_advantage`):
///
/// ```text
/// G_k   = r_k + γ_s · G_{k+1}                      per trajectory, G past the last turn = 0
/// v_k   = (G_k − μ) / (σ + 1e-6)   if σ is used, the scope holds > 1 turn and |σ| > 1e-6
///       = 0                        if σ is used otherwise
///       = G_k − μ                  if σ is not used          (μ = 0 when the mean is not)
/// v_k   = clamp(v_k, ±reward_clip)                         (when set)
/// A_t   = v_k on every generated token t of turn k, 0 elsewhere
/// A     = masked_whiten(A) · mask                          (when whiten_advantages)
/// A     = clamp(A, ±advantage_clip)                        (when set)
/// ```
///
/// r_k is the turn's reward (ROLL's `step_scores`), γ_s = [`step_discount`](StepReinforceConfig::step_discount)
/// (ROLL's `step_reward_gamma`). μ and σ (unbiased) are taken over the turns of the
/// normalisation scope: the whole batch or each group ([`NormScope`]); the mean and the
/// standard deviation each choose theirs ([`norm_mean`](StepReinforceConfig::norm_mean),
/// [`norm_std`](StepReinforceConfig::norm_std)), and the turns are split into
/// [`grouping`](StepReinforceConfig::grouping) sets first (ROLL's `reward_normalization`). The
/// whitening is one mean and variance over all generated tokens,
/// μ = Σ x / (n + 1e-8), σ² = Σ (x − μ)² / (n + 1e-8) · n / (n − 1), x' = (x − μ) / √(σ² + 1e-8).
///
/// Turns come from step rows or from verl's multi-turn rows; on
/// step rows ([`estimate_steps_into`](super::AdvantageEstimator::estimate_steps_into)) each
/// row gets its v_k (clipped), with `step_rewards` required.
///
/// # Peer behaviour reproduced
/// - ROLL computes in float32; the crate in float64 (the parity vectors differ by float32
///   rounding only, `tests/it/parity_step_reinforce.rs`).
/// - A scope of one turn, or with |σ| ≤ 1e-6, normalises to 0 when σ is used (ROLL's guard),
///   also when σ is the batch's and the group has one turn.
/// - With fewer than 2 generated tokens in the batch ROLL skips the whitening (with a
///   warning) instead of failing; so does the crate.
///
/// # What is not reproduced
/// ROLL places v_k on the turn's last token and runs `compute_reinforce_return` with its
/// token-level `gamma` (default 1, which every ROLL `step_reinforce` example keeps): with
/// γ = 1 every generated token of the turn gets v_k, which is what the crate writes. A token
/// γ ≠ 1, `whiten_rewards` and ROLL's KL penalty in the token rewards are not offered; ROLL's
/// `returns` (read only by a critic, which `step_reinforce` has none of) are not produced:
/// the returns equal the advantages. ROLL groups by any column (`tags`, ...); the crate by
/// the batch's groups or the whole batch.
///
/// ROLL's `step_reinforce` (see the module docs (`src/estimator/step_reinforce.rs`)). Reads `step_rewards` (step rows)
/// or `token_level_rewards` (multi-turn rows), and `response_mask` on the token path.
///
/// ```
/// use beacon_rl::estimator::{EstimatorConfig, StepReinforceConfig};
/// use beacon_rl::estimator::{AdvantageEstimator, EstimatorInput, Workspace};
/// use beacon_rl::RolloutBatch;
///
/// // One trajectory of two turns (rows), turn rewards 0 and 1, γ_s = 0.5: returns 0.5, 1.
/// let batch = RolloutBatch::from_row_keys(&["t", "t"], &["a", "a"], &[1.0, 1.0])?;
/// let est = EstimatorConfig::StepReinforce(StepReinforceConfig::default().with_step_discount(0.5)).build()?;
/// let mut adv = [0.0; 2];
/// let input = EstimatorInput::new(&batch).with_step_rewards(&[0.0, 1.0]);
/// est.estimate_steps_into(&input, &mut adv, &mut Workspace::default())?;
/// assert_eq!(adv, [0.5, 1.0]);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct StepReinforce {
    config: StepReinforceConfig,
}

impl StepReinforce {
    /// Validates the parameters and builds the estimator.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when `config` is out of range.
    ///
    /// ```
    /// # use beacon_rl::estimator::{EstimatorConfig, StepReinforceConfig};
    /// assert!(EstimatorConfig::StepReinforce(StepReinforceConfig::default().with_step_discount(-1.0)).build().is_err());
    /// ```
    pub(crate) fn new(config: StepReinforceConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self { config })
    }

    /// Reads the turns of the token path and computes every turn's final value.
    fn prepare(&self, input: &EstimatorInput<'_>, ws: &mut TurnWorkspace) -> Result<()> {
        ws.turns.read_tokens(input, input.output_dim())?;
        self.turn_values(ws);
        self.finish_tokens(&ws.turns, &mut ws.values);
        Ok(())
    }

    /// The normalised, clipped value of every turn into `ws.values` (one per turn).
    fn turn_values(&self, ws: &mut TurnWorkspace) {
        let c = &self.config;
        let TurnWorkspace {
            turns: t,
            a: returns,
            values,
            batch_stats,
            set_stats,
            ..
        } = ws;
        returns.clear();
        returns.resize(t.len(), 0.0);
        for j in 0..t.traj_offsets.len() - 1 {
            let mut g = 0.0;
            for &k in t.trajectory(j).iter().rev() {
                g = t.reward[k] + c.step_discount * g;
                returns[k] = g;
            }
        }
        batch_stats.compute(returns, None, 1);
        let by_group = c.grouping == Grouping::Group;
        let set = by_group.then_some(&t.group[..]);
        let sets = match set {
            Some(_) => {
                set_stats.compute(returns, set, t.num_groups);
                &*set_stats
            }
            None => &*batch_stats,
        };
        values.clear();
        values.extend(returns.iter().enumerate().map(|(k, &g)| {
            let s = if by_group { t.group[k] } else { 0 };
            let mean = match c.norm_mean {
                Some(NormScope::Batch) => batch_stats.mean[0],
                Some(NormScope::Group) => sets.mean[s],
                None => 0.0,
            };
            let std = match c.norm_std {
                Some(NormScope::Batch) => Some(batch_stats.std[0]),
                Some(NormScope::Group) => Some(sets.std[s]),
                None => None,
            };
            // ROLL's guard: σ is used only for a set of more than one turn with |σ| > 1e-6.
            let v = match std {
                Some(sd) if sets.n[s] > 1 && sd.abs() > 1e-6 => (g - mean) / (sd + 1e-6),
                Some(_) => 0.0,
                None => g - mean,
            };
            match c.reward_clip {
                Some(clip) => v.clamp(-clip, clip),
                None => v,
            }
        }));
    }

    /// Batch whitening over the generated tokens (each turn's value counted once per token),
    /// then the advantage clip, in place.
    fn finish_tokens(&self, t: &Turns, values: &mut [f64]) {
        let c = &self.config;
        if c.whiten_advantages {
            let n: usize = t.tokens.iter().sum();
            if n > 1 {
                let nf = n as f64;
                let sum: f64 = values.iter().zip(&t.tokens).map(|(v, &m)| v * m as f64).sum();
                let mean = sum / (nf + 1e-8);
                let ss: f64 = values
                    .iter()
                    .zip(&t.tokens)
                    .map(|(v, &m)| (v - mean) * (v - mean) * m as f64)
                    .sum();
                let var = ss / (nf + 1e-8) * nf / (nf - 1.0);
                let scale = 1.0 / (var + 1e-8).sqrt();
                values.iter_mut().for_each(|v| *v = (*v - mean) * scale);
            }
        }
        if let Some(clip) = c.advantage_clip {
            values.iter_mut().for_each(|v| *v = v.clamp(-clip, clip));
        }
    }

    /// `estimate_steps_into`: one value per step row.
    fn steps(
        &self,
        input: &EstimatorInput<'_>,
        advantages: &mut [f64],
        ws: &mut TurnWorkspace,
    ) -> Result<()> {
        check_steps_out(input, advantages)?;
        if self.config.whiten_advantages {
            // Whitening weighs each turn by its generated tokens, which step rows lack.
            return Err(Error::InvalidConfig {
                name: "whiten_advantages",
                value: 1.0,
                expected: "false on step rows (the whitening needs the response mask)",
            });
        }
        ws.turns.read_steps(input)?;
        self.turn_values(ws);
        self.finish_tokens(&ws.turns, &mut ws.values);
        crate::error::check_finite("advantages", &ws.values)?;
        advantages.copy_from_slice(&ws.values);
        Ok(())
    }
}

turn_estimator!(StepReinforce, "step_reinforce");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimator::{AdvantageEstimator, Workspace};
    use crate::RolloutBatch;
    use ndarray::array;

    fn steps(est: &StepReinforce, batch: &RolloutBatch, rewards: &[f64]) -> Vec<f64> {
        let mut out = vec![f64::NAN; rewards.len()];
        est.estimate_steps_into(
            &EstimatorInput::new(batch).with_step_rewards(rewards),
            &mut out,
            &mut Workspace::default(),
        )
        .unwrap();
        out
    }

    #[test]
    fn discounted_returns_hand_computed() {
        // Trajectory a: rows 0, 2, 3 (rewards 1, 0, 2); b: row 1 (reward 3). γ_s = 0.5:
        // a: G = 1 + 0.5·(0 + 0.5·2) = 1.5, 0 + 0.5·2 = 1, 2; b: 3. No normalisation.
        let batch = RolloutBatch::from_row_keys(&["u"; 4], &["a", "b", "a", "a"], &[0.0; 4]).unwrap();
        let est = StepReinforce::new(StepReinforceConfig::default().with_step_discount(0.5)).unwrap();
        assert_eq!(
            steps(&est, &batch, &[1.0, 3.0, 0.0, 2.0]),
            vec![1.5, 3.0, 1.0, 2.0]
        );
    }

    #[test]
    fn batch_mean_std_hand_computed() {
        // γ_s = 1, one-turn trajectories: G = r = 1, 2, 3, 6. μ = 3, σ = √((4 + 1 + 0 + 9)/3).
        let batch = RolloutBatch::from_group_keys(&[0, 0, 1, 1], &[0.0; 4]).unwrap();
        let c = StepReinforceConfig::default()
            .with_step_discount(1.0)
            .with_norm_mean(Some(NormScope::Batch))
            .with_norm_std(Some(NormScope::Batch));
        let got = steps(&StepReinforce::new(c).unwrap(), &batch, &[1.0, 2.0, 3.0, 6.0]);
        let s = (14.0f64 / 3.0).sqrt() + 1e-6;
        for (g, want) in got.iter().zip([-2.0 / s, -1.0 / s, 0.0, 3.0 / s]) {
            assert!((g - want).abs() < 1e-15, "{got:?}");
        }
    }

    #[test]
    fn group_statistics_and_the_single_turn_guard() {
        // Groups {1, 3} and {5}: group mean/σ: (1 − 2)/(√2 + 1e-6), +…; the singleton → 0.
        let batch = RolloutBatch::from_group_keys(&[0, 0, 1], &[0.0; 3]).unwrap();
        let c = StepReinforceConfig::default()
            .with_grouping(Grouping::Group)
            .with_norm_mean(Some(NormScope::Group))
            .with_norm_std(Some(NormScope::Group));
        let got = steps(&StepReinforce::new(c).unwrap(), &batch, &[1.0, 3.0, 5.0]);
        let a = 1.0 / (2f64.sqrt() + 1e-6);
        assert_eq!(got.len(), 3);
        assert!((got[0] + a).abs() < 1e-15 && (got[1] - a).abs() < 1e-15);
        assert_eq!(got[2], 0.0);
        // Mean only: G − μ_group, the singleton keeps G − G = 0.
        let c = c.with_norm_std(None);
        assert_eq!(
            steps(&StepReinforce::new(c).unwrap(), &batch, &[1.0, 3.0, 5.0]),
            vec![-1.0, 1.0, 0.0]
        );
        // Batch mean inside group sets: μ = 3 for every set.
        let c = c.with_norm_mean(Some(NormScope::Batch));
        assert_eq!(
            steps(&StepReinforce::new(c).unwrap(), &batch, &[1.0, 3.0, 5.0]),
            vec![-2.0, 0.0, 2.0]
        );
    }

    #[test]
    fn clips_apply_in_order() {
        let batch = RolloutBatch::from_group_keys(&[0, 0], &[0.0; 2]).unwrap();
        let c = StepReinforceConfig::default()
            .with_reward_clip(Some(2.0))
            .with_advantage_clip(Some(1.5));
        assert_eq!(
            steps(&StepReinforce::new(c).unwrap(), &batch, &[-4.0, 1.0]),
            vec![-1.5, 1.0]
        );
    }

    #[test]
    fn token_path_whitens_over_tokens() {
        // Two one-turn rows: values 1 (2 tokens) and 3 (1 token); n = 3, μ = 5/3,
        // σ² = (2·(4/9) + 16/9)/3 · 3/2 = 4/3: x' = (x − μ)/√(4/3 + 1e-8).
        let batch = RolloutBatch::from_group_keys(&[0, 1], &[0.0; 2]).unwrap();
        let rewards = array![[0.0, 1.0, 0.0], [3.0, 0.0, 0.0]];
        let mask = array![[true, true, false], [true, false, false]];
        let input = EstimatorInput::new(&batch)
            .with_token_level_rewards(&rewards)
            .with_response_mask(&mask);
        let est = StepReinforce::new(StepReinforceConfig::default().with_whiten_advantages(true)).unwrap();
        let out = est.estimate(&input).unwrap().advantages;
        // The 1e-8 of n + 1e-8 moves μ by 5e-9: compared to 1e-7.
        let mu = 5.0 / 3.0;
        let scale = 1.0 / (4.0f64 / 3.0 + 1e-8).sqrt();
        let want = array![
            [(1.0 - mu) * scale, (1.0 - mu) * scale, 0.0],
            [(3.0 - mu) * scale, 0.0, 0.0]
        ];
        assert!(out.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-7), "{out}");
        // No whitening on step rows.
        let mut adv = [0.0; 2];
        let steps = EstimatorInput::new(&batch).with_step_rewards(&[1.0, 3.0]);
        assert!(matches!(
            est.estimate_steps_into(&steps, &mut adv, &mut Workspace::default()),
            Err(Error::InvalidConfig {
                name: "whiten_advantages",
                ..
            })
        ));
    }

    #[test]
    fn multi_turn_rows_discount_across_turns() {
        // One dialogue row: turn 0 (tokens 0..2, reward 0.5 on its last token), observation,
        // turn 1 (tokens 3..4, outcome 1). γ_s = 0.5: G = 0.5 + 0.5·1 = 1, 1.
        let batch = RolloutBatch::from_group_keys(&[0], &[0.0]).unwrap();
        let rewards = array![[0.0, 0.5, 0.0, 1.0]];
        let mask = array![[1i64, 1, 0, 1]];
        let est = StepReinforce::new(StepReinforceConfig::default().with_step_discount(0.5)).unwrap();
        let input = EstimatorInput::new(&batch)
            .with_token_level_rewards(&rewards)
            .with_response_mask(&mask);
        let mut out = ndarray::Array2::<f32>::from_elem((1, 4), f32::NAN);
        est.estimate_into(&input, (&mut out).into(), None, &mut Workspace::default())
            .unwrap();
        assert_eq!(out, array![[1.0f32, 1.0, 0.0, 1.0]]);
    }
}
