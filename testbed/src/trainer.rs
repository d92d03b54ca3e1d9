use beacon_rl::{Error, Result, RolloutBatch};
use rand_xoshiro::rand_core::RngCore;
use rand_xoshiro::SplitMix64;

use crate::milestones::label_group;
use crate::{
    Credit, CreditColumns, EpisodeText, KeyChain, Method, MilestoneLabeler, MilestoneSource, StepText,
    TabularPolicy,
};

/// How the trainer scales a batch's advantages before the update.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AdvantageScale {
    /// Divide by the batch's root mean square advantage (skipped when it is 0).
    #[default]
    BatchRms,
    /// Use the estimator's values as they are.
    None,
}

/// Trainer settings. [`TrainerConfig::default`]: G = 8, 4 tasks per iteration, 200
/// iterations, η = 1, batch-RMS scaling, seed 0, 200 held-out episodes per policy.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct TrainerConfig {
    /// G, episodes per task.
    pub group_size: usize,
    /// Tasks (groups) per iteration.
    pub tasks_per_iteration: usize,
    /// Policy updates.
    pub iterations: usize,
    /// η of the REINFORCE step.
    pub learning_rate: f64,
    /// Advantage scaling before the update.
    pub scale: AdvantageScale,
    /// Seed of every random draw.
    pub seed: u64,
    /// Episodes of the held-out evaluation after training, for each of the greedy and the
    /// sampling policy (0: no evaluation).
    pub eval_episodes: usize,
}

impl Default for TrainerConfig {
    fn default() -> Self {
        Self {
            group_size: 8,
            tasks_per_iteration: 4,
            iterations: 200,
            learning_rate: 1.0,
            scale: AdvantageScale::BatchRms,
            seed: 0,
            eval_episodes: 200,
        }
    }
}

crate::setters::with_setters! {
    TrainerConfig, "use beacon_rl_testbed::{AdvantageScale, TrainerConfig};", TrainerConfig::default();
    /// Sets G, episodes per task (default 8).
    with_group_size(group_size: usize) = 4;
    /// Sets the tasks (groups) per iteration (default 4).
    with_tasks_per_iteration(tasks_per_iteration: usize) = 2;
    /// Sets the policy updates (default 200).
    with_iterations(iterations: usize) = 10;
    /// Sets η of the REINFORCE step (default 1.0).
    with_learning_rate(learning_rate: f64) = 0.5;
    /// Sets the advantage scaling (default [`AdvantageScale::BatchRms`]).
    with_scale(scale: AdvantageScale) = AdvantageScale::None;
    /// Sets the seed of every random draw (default 0).
    with_seed(seed: u64) = 7;
    /// Sets the held-out episodes per policy (default 200; 0 = none).
    with_eval_episodes(eval_episodes: usize) = 0;
}

/// What one training run measured, per iteration (before that iteration's update).
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct TrainingRun {
    /// Fraction of the iteration's episodes that reached the goal.
    pub success: Vec<f64>,
    /// Mean fraction of the K milestones reached.
    pub progress: Vec<f64>,
    /// Success of the trained policy on held-out episodes, acting greedily (the most probable
    /// action; `None` when [`TrainerConfig::eval_episodes`] is 0).
    pub heldout_greedy: Option<f64>,
    /// Success of the trained policy on held-out episodes, sampling as in training.
    pub heldout_sampling: Option<f64>,
}

/// The batch of one iteration, flat in step order (group → episode → step).
#[derive(Debug, Default)]
struct Rollouts {
    obs: Vec<usize>,
    action: Vec<usize>,
    next_obs: Vec<usize>,
    env_milestone: Vec<bool>,
    env_door: Vec<bool>,
    env_reward: Vec<f64>,
    terminal_reward: Vec<f64>,
    progress: Vec<f64>,
    traj_offsets: Vec<usize>,
    success: Vec<f64>,
    reached: Vec<f64>,
}

impl Rollouts {
    fn clear(&mut self) {
        self.obs.clear();
        self.action.clear();
        self.next_obs.clear();
        self.env_milestone.clear();
        self.env_door.clear();
        self.env_reward.clear();
        self.terminal_reward.clear();
        self.progress.clear();
        self.traj_offsets.clear();
        self.traj_offsets.push(0);
        self.success.clear();
        self.reached.clear();
    }
}

/// Trains a fresh uniform policy on `env` with `method` and returns its success curve.
///
/// # Errors
/// [`Error::InvalidConfig`] as [`TrainerConfig::validate`] finds it; a
/// labeler's [`Error::LengthMismatch`]; the estimator's errors.
///
/// ```
/// use beacon_rl_testbed::{train, KeyChain, Method, MilestoneSource, TrainerConfig};
/// let env = KeyChain::new(2, 4)?;
/// let config = TrainerConfig::default().with_iterations(30);
/// let run = train(&env, Method::Beacon, &mut MilestoneSource::Env, &config)?;
/// assert_eq!(run.success.len(), 30);
/// // Deterministic: the same seed gives the same curve.
/// assert_eq!(run, train(&env, Method::Beacon, &mut MilestoneSource::Env, &config)?);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
///
/// The training loop: sample G episodes for each of several tasks, label milestones, ask the
/// library for per-step advantages ([`Credit`]), take one REINFORCE step on the tabular policy.
///
/// Deterministic: one SplitMix64 stream seeded by [`TrainerConfig::seed`] draws the tasks
/// and the actions, another the ablations' partitions, and nothing else is random; the loop is
/// single-threaded.
///
/// # Advantage scale
///
/// The methods' advantages differ in scale (the release's BEACON preset has R_ms = 10, so its
/// segment term is about 10× the paper preset's; GRPO's z-scores are O(1); GiGPO's `mean_norm`
/// terms are O(0.1–1)). With [`AdvantageScale::BatchRms`] (the default) the trainer divides a
/// batch's advantages by their root mean square before the update, so one learning rate means
/// the same step size for every method and the comparison is about the *direction* each method
/// gives, not its units. Dividing by a positive batch constant keeps every sign and every ratio
/// between steps. [`AdvantageScale::None`] uses the raw values (then compare methods at their
/// own tuned learning rates).
pub fn train(
    env: &KeyChain,
    method: Method,
    source: &mut MilestoneSource,
    config: &TrainerConfig,
) -> Result<TrainingRun> {
    config.validate()?;
    let mut policy = TabularPolicy::new(env.num_observations(), env.num_actions());
    let mut credit = Credit::new(method)?;
    let mut rng = crate::rng::stream(config.seed, 0);
    let mut ablation_rng = crate::rng::stream(config.seed, 1);
    let mut roll = Rollouts::default();
    let mut flags: Vec<bool> = Vec::new();
    let mut run = TrainingRun::default();
    let (groups, g) = (config.tasks_per_iteration, config.group_size);
    let group_offsets: Vec<usize> = (0..=groups).map(|k| k * g).collect();
    for _ in 0..config.iterations {
        roll.clear();
        for _ in 0..groups {
            let task = env.sample_task(&mut rng);
            for _ in 0..g {
                rollout(env, &policy, task, Act::Sample, &mut rng, &mut roll);
            }
        }
        let episodes = (groups * g) as f64;
        run.success.push(roll.success.iter().sum::<f64>() / episodes);
        run.progress.push(roll.reached.iter().sum::<f64>() / episodes);

        let rows = roll.obs.len();
        flags.clear();
        flags.resize(rows, false);
        if method.uses_milestones() {
            match source {
                MilestoneSource::Env => flags.copy_from_slice(&roll.env_milestone),
                MilestoneSource::EnvDoors => flags.copy_from_slice(&roll.env_door),
                MilestoneSource::None => {}
                MilestoneSource::Custom(labeler) => {
                    label_custom(env, &roll, &group_offsets, labeler.as_mut(), &mut flags)?;
                }
            }
        }
        let anchors: Vec<&str> = roll.obs.iter().map(|&o| env.observation_text(o)).collect();
        let batch = RolloutBatch::from_offsets(
            group_offsets.clone(),
            roll.traj_offsets.clone(),
            roll.success.clone(),
        )?;
        let cols = CreditColumns {
            terminal_reward: &roll.terminal_reward,
            progress: &roll.progress,
            env_reward: &roll.env_reward,
            milestones: &flags,
            anchors: &anchors,
        };
        let advantages = credit.assign(&batch, &cols, ablation_rng.next_u64())?;
        let scale = match config.scale {
            AdvantageScale::None => 1.0,
            AdvantageScale::BatchRms => {
                let ms = advantages.iter().map(|a| a * a).sum::<f64>() / rows as f64;
                if ms > 0.0 {
                    1.0 / ms.sqrt()
                } else {
                    1.0
                }
            }
        };
        for ((&o, &a), &adv) in roll.obs.iter().zip(&roll.action).zip(advantages) {
            policy.accumulate(o, a, adv * scale);
        }
        policy.apply(config.learning_rate, rows);
    }
    if config.eval_episodes > 0 {
        // Fresh streams: neither the tasks nor the action draws were seen in training.
        let n = config.eval_episodes;
        run.heldout_sampling = Some(success_rate(env, &policy, Act::Sample, n, config.seed, 3));
        run.heldout_greedy = Some(success_rate(env, &policy, Act::Greedy, n, config.seed, 4));
    }
    Ok(run)
}

/// How a rollout picks its actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Act {
    /// Draw from π(· | o), as in training.
    Sample,
    /// The most probable action ([`TabularPolicy::greedy`]).
    Greedy,
}

/// Success rate of `policy` over `episodes` episodes of random tasks, tasks and actions drawn
/// from stream `stream` of `seed`.
fn success_rate(
    env: &KeyChain,
    policy: &TabularPolicy,
    act: Act,
    episodes: usize,
    seed: u64,
    stream: u64,
) -> f64 {
    let mut rng = crate::rng::stream(seed, stream);
    let mut roll = Rollouts::default();
    roll.clear();
    for _ in 0..episodes {
        let task = env.sample_task(&mut rng);
        rollout(env, policy, task, act, &mut rng, &mut roll);
    }
    roll.success.iter().sum::<f64>() / episodes.max(1) as f64
}

impl TrainerConfig {
    /// Checks every parameter ([`train`] calls it first).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the first bad parameter: `group_size` or
    /// `tasks_per_iteration` 0, their product (episodes per iteration, each of at least one
    /// step) above [`RolloutBatch::MAX_STEPS`], or `learning_rate` negative or not finite.
    ///
    /// ```
    /// use beacon_rl_testbed::TrainerConfig;
    /// use beacon_rl::Error;
    /// assert!(TrainerConfig::default().validate().is_ok());
    /// let err = TrainerConfig::default().with_group_size(0).validate().unwrap_err();
    /// assert!(matches!(err, Error::InvalidConfig { name: "group_size", .. }));
    /// let huge = TrainerConfig::default().with_group_size(usize::MAX).with_tasks_per_iteration(2);
    /// assert!(matches!(huge.validate(), Err(Error::InvalidConfig { name: "tasks_per_iteration", .. })));
    /// ```
    pub fn validate(&self) -> Result<()> {
        let bad = |name, value: f64, expected| {
            Err(Error::InvalidConfig {
                name,
                value,
                expected,
            })
        };
        if self.group_size == 0 {
            return bad("group_size", 0.0, ">= 1");
        }
        if self.tasks_per_iteration == 0 {
            return bad("tasks_per_iteration", 0.0, ">= 1");
        }
        // Checked: the product sizes the batch (the group offsets are k · G).
        let episodes = self.group_size.checked_mul(self.tasks_per_iteration);
        if episodes.is_none_or(|n| n > RolloutBatch::MAX_STEPS) {
            return bad(
                "tasks_per_iteration",
                self.tasks_per_iteration as f64,
                "group_size × tasks_per_iteration <= RolloutBatch::MAX_STEPS",
            );
        }
        if !(self.learning_rate.is_finite() && self.learning_rate >= 0.0) {
            return bad("learning_rate", self.learning_rate, "finite, >= 0");
        }
        Ok(())
    }
}

/// One episode under `policy`, appended to `roll`.
fn rollout(
    env: &KeyChain,
    policy: &TabularPolicy,
    task: u64,
    act: Act,
    rng: &mut SplitMix64,
    roll: &mut Rollouts,
) {
    let start = roll.obs.len();
    let mut state = env.reset();
    let mut success = false;
    for _ in 0..env.horizon() {
        let o = env.observe(task, &state);
        let a = match act {
            Act::Sample => policy.sample(o, rng),
            Act::Greedy => policy.greedy(o),
        };
        let t = env.step(task, &state, a);
        roll.obs.push(o);
        roll.action.push(a);
        roll.next_obs.push(env.observe(task, &t.next));
        roll.env_milestone.push(t.milestone);
        roll.env_door.push(t.milestone && !t.next.in_cellar);
        roll.env_reward.push(f64::from(u8::from(t.success)));
        state = t.next;
        if t.done {
            success = t.success;
            break;
        }
    }
    let terminal_reward = f64::from(u8::from(success));
    let progress = state.reached as f64 / env.rooms() as f64;
    let len = roll.obs.len() - start;
    roll.terminal_reward
        .extend(std::iter::repeat_n(terminal_reward, len));
    roll.progress.extend(std::iter::repeat_n(progress, len));
    roll.traj_offsets.push(roll.obs.len());
    roll.success.push(terminal_reward);
    roll.reached.push(progress);
}

/// Runs a caller's labeler on each group's episodes as text.
fn label_custom(
    env: &KeyChain,
    roll: &Rollouts,
    group_offsets: &[usize],
    labeler: &mut dyn MilestoneLabeler,
    flags: &mut [bool],
) -> Result<()> {
    for w in group_offsets.windows(2) {
        let (lo, hi) = (roll.traj_offsets[w[0]], roll.traj_offsets[w[1]]);
        let group: Vec<EpisodeText<'_>> = (w[0]..w[1])
            .map(|j| EpisodeText {
                steps: (roll.traj_offsets[j]..roll.traj_offsets[j + 1])
                    .map(|r| StepText {
                        observation: env.observation_text(roll.obs[r]),
                        action: env.action_text(roll.obs[r], roll.action[r]),
                        next_observation: env.observation_text(roll.next_obs[r]),
                    })
                    .collect(),
                success: roll.success[j] > 0.0,
            })
            .collect();
        label_group(labeler, &group, &mut flags[lo..hi])?;
    }
    Ok(())
}

/// The uniform random policy's success rate on `env` over `episodes` episodes of random tasks.
///
/// ```
/// use beacon_rl_testbed::{random_policy_success, KeyChain};
/// let p = random_policy_success(&KeyChain::new(1, 4)?, 2000, 7);
/// assert!(p > 0.05 && p < 0.5);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
pub fn random_policy_success(env: &KeyChain, episodes: usize, seed: u64) -> f64 {
    let policy = TabularPolicy::new(env.num_observations(), env.num_actions());
    success_rate(env, &policy, Act::Sample, episodes, seed, 2)
}
