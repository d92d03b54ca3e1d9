//! `mt_grpo`: multi-turn GRPO with turn-level advantages (Zeng et al., arXiv 2505.11821).

use super::turns::{turn_estimator, TurnWorkspace};
use super::{check_steps_out, EstimatorInput};
use crate::error::{Error, Range, Result};

/// Which baseline the turns get (see the module docs (`src/estimator/mt_grpo.rs`)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum TurnBaseline {
    /// The authors' MT-GRPO: rewards normalised per turn index (`"per_index"`, default).
    PerIndex,
    /// Reward-to-go minus the leave-one-out mean of the trajectories that reached the turn
    /// (`"reward_to_go"`): unbiased when the policy chooses when to stop.
    RewardToGo,
}

/// Parameters of `mt_grpo`, with the authors' defaults ([`Default`](Self::default)).
///
/// ```
/// use beacon_rl::estimator::{EstimatorConfig, MtGrpoConfig, TurnBaseline};
/// let c = MtGrpoConfig::default().with_turn_baseline(TurnBaseline::RewardToGo);
/// assert!(EstimatorConfig::MtGrpo(c).build().is_ok());
/// assert!(EstimatorConfig::MtGrpo(c.with_std_eps(0.0)).build().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct MtGrpoConfig {
    /// c, the weight of the turn advantage on intermediate turns (the authors'
    /// `turn_advantage_coef`, default 1.0); finite, ≥ 0.
    pub turn_advantage_coef: f64,
    /// ε added to σ (the authors' 1e-4); finite, > 0.
    pub std_eps: f64,
    /// The baseline (default [`TurnBaseline::PerIndex`], the authors').
    pub turn_baseline: TurnBaseline,
}

impl MtGrpoConfig {
    /// Checks the parameters.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] unless `turn_advantage_coef` is finite and ≥ 0 and `std_eps`
    /// finite and > 0.
    pub(crate) fn validate(&self) -> Result<()> {
        Range::NON_NEGATIVE.check("turn_advantage_coef", self.turn_advantage_coef)?;
        Range::POSITIVE.check("std_eps", self.std_eps)
    }
}

impl Default for MtGrpoConfig {
    /// The authors' settings: c = 1, ε = 1e-4, per-index normalisation.
    fn default() -> Self {
        Self {
            turn_advantage_coef: 1.0,
            std_eps: 1e-4,
            turn_baseline: TurnBaseline::PerIndex,
        }
    }
}

crate::setters::with_setters! {
    MtGrpoConfig, "use beacon_rl::estimator::*;", MtGrpoConfig::default();
    /// Sets c, the turn advantage's weight (default 1.0; finite, ≥ 0).
    with_turn_advantage_coef(turn_advantage_coef: f64) = 0.5;
    /// Sets ε added to σ (default 1e-4; > 0).
    with_std_eps(std_eps: f64) = 1e-6;
    /// Sets the baseline (default [`TurnBaseline::PerIndex`]).
    with_turn_baseline(turn_baseline: TurnBaseline) = TurnBaseline::RewardToGo;
}

/// `mt_grpo`: multi-turn GRPO with turn-level advantages (Zeng et al., arXiv 2505.11821).
///
/// The authors' trainer (SiliangZeng/Multi-Turn-RL-Agent,
/// `verifiers/trainers/mt_grpo_env_trainer.py`: `_assign_advantages`, with
/// `GRPOEnvTrainer._compute_normalized_advantages`) scores each rollout with a turn reward
/// r^T (the tool-calling turn) and an outcome reward r^O, normalises each over the rollouts of
/// a prompt, and credits the first turn with both and the rest with the outcome only.
///
/// The crate reads turns as every turn-level estimator does (the turn layouts of the guide's turn-level chapter): in
/// trajectory τ with turns 1 … K, the last turn's reward is the outcome O_τ and each earlier
/// turn's reward r_{τ,k} is that turn's reward. Over the trajectories of a group (verl's uid),
/// with σ unbiased and ε = [`std_eps`](MtGrpoConfig::std_eps) (the authors' 1e-4):
///
/// ```text
/// Â(x)_τ   = (x_τ − mean_g x) / (std_g x + ε)
/// A^O_τ    = Â(O)_τ
/// A^T_τ,k  = Â(r_{·,k})_τ        per turn index k < K; a trajectory without an intermediate
///                                turn k counts r = 0 there (the authors score every rollout)
/// A^C_τ    = Â(C)_τ,  C_τ = Σ_k r_{τ,k} + O_τ              (the authors' combined reward)
///
/// K_τ = 1:          A = A^C_τ on the turn
/// K_τ ≥ 2, k < K:   A = A^O_τ + c · A^T_τ,k      c = turn_advantage_coef (default 1)
///          k = K:   A = A^O_τ
/// ```
///
/// # The unbiased option
/// Normalising per turn index makes each turn's baseline depend on which trajectories of the
/// group still had that turn, i.e. on when each trajectory chose to stop. When the policy
/// controls its episode length that baseline is action-dependent and the gradient is biased
/// (the discussion of verl issue #7244; `docs/turn-level.md` shows a constructed case).
/// [`TurnBaseline::RewardToGo`] instead credits turn k with its reward-to-go minus a
/// baseline that depends only on having reached turn k:
///
/// ```text
/// G_τ,k = Σ_{k' ≥ k} r_{τ,k'}         (the outcome included)
/// A_τ,k = G_τ,k − mean of G_{σ,k} over the other trajectories σ of the group that reached
///         turn k                       (0 when there is none; no σ scaling)
/// ```
///
/// The leave-one-out mean keeps each trajectory's own return out of its baseline, so the
/// estimate is unbiased for any stopping policy.
///
/// # Peer behaviour reproduced, and differences
/// - The authors' rewards are float32; the crate computes in float64 (parity within 1e-5).
/// - The authors split a completion at its first tool result: one turn reward per rollout. The
///   crate gives every intermediate turn its own A^T (per index); for K ≤ 2, the authors'
///   setting, the two agree, which the parity vectors check.
/// - The authors write advantages on every token of the completion, environment tokens and
///   padding included (their loss masks them); the crate writes 0 outside the turns.
/// - A group of one trajectory: the authors' σ is NaN and so are their advantages; the
///   crate gives 0 (each statistic of a one-trajectory group is undefined).
/// - A trajectory with no turn (its rows have no generated token) counts with O = C = 0 in
///   its group's statistics, as a rollout scored 0.
///
/// MT-GRPO (see the module docs (`src/estimator/mt_grpo.rs`)). Reads `step_rewards` (step rows) or
/// `token_level_rewards` (multi-turn rows), and `response_mask` on the token path.
///
/// ```
/// use beacon_rl::estimator::{AdvantageEstimator, EstimatorConfig, EstimatorInput, MtGrpoConfig};
/// use beacon_rl::RolloutBatch;
///
/// // Two dialogues of one prompt: a tool turn (reward 1 on its last token), an observation,
/// // an answer (outcome 1); and a single answer turn with outcome 0.
/// let batch = RolloutBatch::from_group_keys(&["q", "q"], &[0.0, 0.0])?;
/// let rewards = [[0.0, 1.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]];
/// let mask = [[true, true, false, true], [true, true, false, false]];
/// let input = EstimatorInput::new(&batch).with_token_level_rewards(&rewards).with_response_mask(&mask);
/// let out = EstimatorConfig::MtGrpo(MtGrpoConfig::default()).build()?.estimate(&input)?;
/// // O = 1, 0 and r^T = 1, 0 (the second has no tool turn): μ = ½, σ = √½, so
/// // A^O = A^T = ±½/(√½ + ε); C = 2, 0: A^C = ±1/(√2 + ε).
/// let a = 0.5 / (0.5f64.sqrt() + 1e-4);
/// assert!((out.advantages[[0, 0]] - 2.0 * a).abs() < 1e-12); // A^O + A^T
/// assert!((out.advantages[[0, 3]] - a).abs() < 1e-12); // A^O
/// assert!((out.advantages[[1, 0]] + 1.0 / (2f64.sqrt() + 1e-4)).abs() < 1e-12); // A^C
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct MtGrpo {
    config: MtGrpoConfig,
}

impl MtGrpo {
    /// Validates the parameters and builds the estimator.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when `config` is out of range.
    ///
    /// ```
    /// # use beacon_rl::estimator::{EstimatorConfig, MtGrpoConfig};
    /// assert!(EstimatorConfig::MtGrpo(MtGrpoConfig::default().with_std_eps(f64::NAN)).build().is_err());
    /// ```
    pub(crate) fn new(config: MtGrpoConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self { config })
    }

    /// Every turn's advantage into `ws.values`.
    fn turn_values(&self, ws: &mut TurnWorkspace) -> Result<()> {
        let t = &ws.turns;
        // Per (group, turn index) accumulators: index g · width + k.
        let width = (0..t.num_trajectories())
            .map(|j| t.trajectory(j).len())
            .max()
            .unwrap_or(0);
        let cells = t
            .num_groups
            .checked_mul(width)
            .ok_or_else(|| Error::Undefined("turn index table overflows".into()))?;
        ws.values.clear();
        ws.values.resize(t.len(), 0.0);
        match self.config.turn_baseline {
            TurnBaseline::PerIndex => per_index(ws, width, cells, &self.config),
            TurnBaseline::RewardToGo => reward_to_go(ws, width, cells),
        }
        crate::error::check_finite("turn advantages", &ws.values)
    }

    fn prepare(&self, input: &EstimatorInput<'_>, ws: &mut TurnWorkspace) -> Result<()> {
        ws.turns.read_tokens(input, input.output_dim())?;
        self.turn_values(ws)
    }

    fn steps(
        &self,
        input: &EstimatorInput<'_>,
        advantages: &mut [f64],
        ws: &mut TurnWorkspace,
    ) -> Result<()> {
        check_steps_out(input, advantages)?;
        ws.turns.read_steps(input)?;
        self.turn_values(ws)?;
        advantages.copy_from_slice(&ws.values);
        Ok(())
    }
}

/// Â of `x` under (μ, σ) of a set of `n` trajectories: 0 when σ is undefined (n < 2).
fn normalised(x: f64, mean: f64, std: f64, n: usize, eps: f64) -> f64 {
    if n < 2 {
        0.0
    } else {
        (x - mean) / (std + eps)
    }
}

/// The authors' per-index normalisation (see the module docs).
fn per_index(ws: &mut TurnWorkspace, width: usize, cells: usize, c: &MtGrpoConfig) {
    let TurnWorkspace {
        turns: t,
        a: outcome,
        values,
        traj_stats,
        set_stats: combined_stats,
        n,
        s1: sum,
        s2: ss,
        b: combined,
        ..
    } = ws;
    let trajs = t.num_trajectories();
    // Per trajectory: O into `outcome`, C into `combined`.
    outcome.clear();
    combined.clear();
    for j in 0..trajs {
        let turns = t.trajectory(j);
        outcome.push(turns.last().map_or(0.0, |&k| t.reward[k]));
        combined.push(turns.iter().map(|&k| t.reward[k]).sum());
    }
    traj_stats.compute(outcome, Some(&t.traj_group), t.num_groups);
    combined_stats.compute(combined, Some(&t.traj_group), t.num_groups);
    // Turn-index statistics, absent intermediate turns counting 0: Σ r and Σ r² per cell
    // give the mean; the squared deviations take a second pass plus (n − present) · μ².
    n.clear();
    n.resize(cells, 0);
    sum.clear();
    sum.resize(cells, 0.0);
    ss.clear();
    ss.resize(cells, 0.0);
    for j in 0..trajs {
        let turns = t.trajectory(j);
        let base = t.traj_group[j] * width;
        for (k, &turn) in turns.iter().enumerate().take(turns.len().saturating_sub(1)) {
            n[base + k] += 1;
            sum[base + k] += t.reward[turn];
        }
    }
    let size = |g: usize| traj_stats.n[g];
    let mean = |sum: &[f64], g: usize, k: usize| sum[g * width + k] / size(g) as f64;
    for j in 0..trajs {
        let turns = t.trajectory(j);
        let g = t.traj_group[j];
        for (k, &turn) in turns.iter().enumerate().take(turns.len().saturating_sub(1)) {
            let d = t.reward[turn] - mean(sum, g, k);
            ss[g * width + k] += d * d;
        }
    }
    for j in 0..trajs {
        let turns = t.trajectory(j);
        let g = t.traj_group[j];
        let ng = size(g);
        let a_o = normalised(outcome[j], traj_stats.mean[g], traj_stats.std[g], ng, c.std_eps);
        if turns.len() == 1 {
            values[turns[0]] = normalised(
                combined[j],
                combined_stats.mean[g],
                combined_stats.std[g],
                ng,
                c.std_eps,
            );
            continue;
        }
        for (k, &turn) in turns.iter().enumerate() {
            values[turn] = if k + 1 == turns.len() {
                a_o
            } else {
                let cell = g * width + k;
                let mu = mean(sum, g, k);
                let absent = (ng - n[cell]) as f64;
                let var = (ss[cell] + absent * mu * mu) / (ng.max(2) - 1) as f64;
                a_o + c.turn_advantage_coef * normalised(t.reward[turn], mu, var.sqrt(), ng, c.std_eps)
            };
        }
    }
}

/// Reward-to-go minus the leave-one-out mean over the trajectories that reached the turn.
fn reward_to_go(ws: &mut TurnWorkspace, width: usize, cells: usize) {
    let TurnWorkspace {
        turns: t,
        a: to_go,
        values,
        n,
        s1: sum,
        ..
    } = ws;
    to_go.clear();
    to_go.resize(t.len(), 0.0);
    n.clear();
    n.resize(cells, 0);
    sum.clear();
    sum.resize(cells, 0.0);
    for j in 0..t.num_trajectories() {
        let base = t.traj_group[j] * width;
        let mut g = 0.0;
        for (k, &turn) in t.trajectory(j).iter().enumerate().rev() {
            g += t.reward[turn];
            to_go[turn] = g;
            n[base + k] += 1;
            sum[base + k] += g;
        }
    }
    for j in 0..t.num_trajectories() {
        let base = t.traj_group[j] * width;
        for (k, &turn) in t.trajectory(j).iter().enumerate() {
            let (m, s) = (n[base + k], sum[base + k]);
            let baseline = if m > 1 {
                (s - to_go[turn]) / (m - 1) as f64
            } else {
                0.0
            };
            values[turn] = to_go[turn] - baseline;
        }
    }
}

turn_estimator!(MtGrpo, "mt_grpo");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimator::{AdvantageEstimator, Workspace};
    use crate::RolloutBatch;

    /// Step rows of one group: trajectories as lists of turn rewards, rows trajectory-major.
    fn run(cfg: MtGrpoConfig, trajs: &[&[f64]]) -> Vec<Vec<f64>> {
        let mut keys = Vec::new();
        let mut rewards = Vec::new();
        for (j, t) in trajs.iter().enumerate() {
            for &r in *t {
                keys.push(j);
                rewards.push(r);
            }
        }
        let batch = RolloutBatch::from_row_keys(&vec![0; keys.len()], &keys, &vec![0.0; keys.len()]).unwrap();
        let mut out = vec![f64::NAN; keys.len()];
        MtGrpo::new(cfg)
            .unwrap()
            .estimate_steps_into(
                &EstimatorInput::new(&batch).with_step_rewards(&rewards),
                &mut out,
                &mut Workspace::default(),
            )
            .unwrap();
        let mut it = out.into_iter();
        trajs
            .iter()
            .map(|t| it.by_ref().take(t.len()).collect())
            .collect()
    }

    #[test]
    fn per_index_hand_computed() {
        // Four rollouts: stop with O = 1, stop with O = 0, tool turn 1 then O = 0, tool turn 1
        // then O = −1. σ's below are unbiased over the 4 rollouts, ε = 1e-4.
        let got = run(
            MtGrpoConfig::default(),
            &[&[1.0], &[0.0], &[1.0, 0.0], &[1.0, -1.0]],
        );
        let eps = 1e-4;
        // O = 1, 0, 0, −1: μ 0, σ √(2/3). r^T = 0, 0, 1, 1: μ ½, σ √(1/3). C = 1, 0, 1, 0.
        let (so, st) = ((2.0f64 / 3.0).sqrt(), (1.0f64 / 3.0).sqrt());
        let at = 0.5 / (st + eps);
        let ac = 0.5 / (st + eps);
        let ao = |o: f64| o / (so + eps);
        let want = [
            vec![ac],
            vec![-ac],
            vec![ao(0.0) + at, ao(0.0)],
            vec![ao(-1.0) + at, ao(-1.0)],
        ];
        for (g, w) in got.iter().zip(&want) {
            for (a, b) in g.iter().zip(w) {
                assert!((a - b).abs() < 1e-12, "{got:?} vs {want:?}");
            }
        }
    }

    #[test]
    fn reward_to_go_hand_computed() {
        // Same rollouts. G at turn 0: 1, 0, 1, 0 (all four reached turn 0): leave-one-out
        // baselines (2 − G)/3 = 1/3, 2/3, 1/3, 2/3. Turn 1, reached by the last two: G = 0,
        // −1; baselines −1 and 0.
        let got = run(
            MtGrpoConfig::default().with_turn_baseline(TurnBaseline::RewardToGo),
            &[&[1.0], &[0.0], &[1.0, 0.0], &[1.0, -1.0]],
        );
        let (p, m) = (2.0 / 3.0, -2.0 / 3.0);
        let want = [vec![p], vec![m], vec![p, 1.0], vec![m, -1.0]];
        for (g, w) in got.iter().zip(&want) {
            for (a, b) in g.iter().zip(w) {
                assert!((a - b).abs() < 1e-12, "{got:?} vs {want:?}");
            }
        }
    }

    #[test]
    fn one_trajectory_groups_get_zero_and_missing_rewards_are_typed() {
        let got = run(MtGrpoConfig::default(), &[&[0.5, 2.0]]);
        assert_eq!(got, vec![vec![0.0, 0.0]]);
        let got = run(
            MtGrpoConfig::default().with_turn_baseline(TurnBaseline::RewardToGo),
            &[&[0.5, 2.0]],
        );
        assert_eq!(got, vec![vec![2.5, 2.0]]);
        let batch = RolloutBatch::from_group_keys(&[0], &[0.0]).unwrap();
        let est = MtGrpo::new(MtGrpoConfig::default()).unwrap();
        assert_eq!(
            est.estimate_steps_into(
                &EstimatorInput::new(&batch),
                &mut [0.0],
                &mut Workspace::default()
            ),
            Err(Error::MissingInput("step_rewards"))
        );
    }
}
