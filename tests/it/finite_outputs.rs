//! Finite inputs give finite outputs or a typed error: every estimator in the registry, behind
//! `Box<dyn AdvantageEstimator>`, on batches and configurations holding extreme finite
//! magnitudes (rewards, values and baselines up to ±f64::MAX, subnormals, R_ms and weights up
//! to f64::MAX, γ at the ends of [0, 1]), through the token path (`estimate`, which runs
//! `estimate_into` into `f64` buffers; `estimate_into` into `f32` buffers) and the step path
//! (`estimate_steps_into`), with and without token rewards. An `Ok` holding ∞ or NaN is a silently wrong number: the crate's
//! standard is an error instead (`Error::NonFinite` for an overflow).
//!
//! Each estimator reaches `Ok` in a fair share of the cases (token rewards carry each row's
//! score in one column, so the step paths' consistency checks pass unless `row_scores` differ
//! within a trajectory), and errs in the others: the property is about the `Ok`s.

use beacon_rl::estimator::{
    Ablation, AdvantageEstimator, BeaconFlavour, EstimatorConfig, EstimatorInput, GrpoStatistics, NormMode,
    StepGrouping, Workspace, ZeroTail,
};
use beacon_rl::RolloutBatch;
use ndarray::Array2;
use proptest::prelude::*;

/// A finite value, weighted towards the magnitudes that overflow: ±f64::MAX, ±1e308, ±1e154
/// (squares overflow), subnormals, zero, and ordinary values.
fn extreme() -> impl Strategy<Value = f64> {
    prop_oneof![
        3 => prop::sample::select(vec![
            0.0,
            -0.0,
            1.0,
            -1.0,
            f64::MAX,
            -f64::MAX,
            1e308,
            -1e308,
            1e307,
            -1e307,
            1e200,
            -1e155,
            1e154,
            f64::MIN_POSITIVE,
            -5e-324,
            5e-324,
        ]),
        1 => -10.0..10.0f64,
        1 => prop::num::f64::NORMAL | prop::num::f64::SUBNORMAL | prop::num::f64::ZERO,
    ]
}

/// A value for a parameter that must be finite and > 0.
fn positive() -> impl Strategy<Value = f64> {
    prop::sample::select(vec![
        5e-324,
        f64::MIN_POSITIVE,
        1e-8,
        1.0,
        10.0,
        1e154,
        1e307,
        f64::MAX,
    ])
}

/// A value for a parameter that must be finite and ≥ 0.
fn non_negative() -> impl Strategy<Value = f64> {
    prop::sample::select(vec![0.0, 5e-324, 1.0, 10.0, 1e154, 1e307, f64::MAX])
}

/// A value in [0, 1] (γ, λ_GAE).
fn unit() -> impl Strategy<Value = f64> {
    prop::sample::select(vec![0.0, 5e-324, 0.5, 0.95, 1.0 - f64::EPSILON, 1.0])
}

/// Parameters drawn for whichever estimator is built (each reads its own).
#[derive(Debug, Clone)]
struct Params {
    positive: [f64; 3],
    non_negative: [f64; 2],
    unit: [f64; 2],
    switches: [bool; 3],
    ablation: usize,
}

fn params() -> impl Strategy<Value = Params> {
    (
        [positive(), positive(), positive()],
        [non_negative(), non_negative()],
        [unit(), unit()],
        any::<[bool; 3]>(),
        0..7usize,
    )
        .prop_map(|(positive, non_negative, unit, switches, ablation)| Params {
            positive,
            non_negative,
            unit,
            switches,
            ablation,
        })
}

/// The registered estimator `name`, its parameters set from `p` (all within their valid
/// ranges: building must succeed).
fn configured(name: &str, p: &Params) -> EstimatorConfig {
    let mut c: EstimatorConfig = name.parse().unwrap();
    let [pos0, pos1, pos2] = p.positive;
    let [nn0, nn1] = p.non_negative;
    let [u0, u1] = p.unit;
    let [s0, s1, s2] = p.switches;
    let mode = if s1 {
        NormMode::MeanStdNorm
    } else {
        NormMode::MeanNorm
    };
    match &mut c {
        EstimatorConfig::Gae(g) => {
            g.discount = u0;
            g.gae_lambda = u1;
        }
        EstimatorConfig::Grpo(g)
        | EstimatorConfig::GrpoVectorized(g)
        | EstimatorConfig::GrpoPassk(g)
        | EstimatorConfig::Gdpo(g) => {
            g.std_eps = pos0;
            g.norm = if s0 {
                NormMode::MeanNorm
            } else {
                NormMode::MeanStdNorm
            };
            if s1 && name == "grpo" {
                g.statistics = GrpoStatistics::Trajectories;
            }
        }
        EstimatorConfig::Gpg(g) => g.f_norm = pos0,
        EstimatorConfig::ReinforcePlusPlus(r) => r.discount = u0,
        EstimatorConfig::OptimalTokenBaseline(o) | EstimatorConfig::TirOptimalTokenBaseline(o) => {
            o.denominator_eps = pos0;
            o.zero_tail = if s0 {
                ZeroTail::KeepBaseline
            } else {
                ZeroTail::ZeroBaseline
            };
        }
        EstimatorConfig::Gigpo(g) => {
            g.step_decay = u0;
            g.step_advantage_weight = nn0;
            g.norm = mode;
            g.std_eps = pos0;
            if s2 {
                g.grouping = StepGrouping::Similarity { threshold: 0.5 };
            }
        }
        EstimatorConfig::Beacon(b) => {
            b.milestone_reward = pos1;
            b.segment_decay = u0;
            b.segment_weight = nn0;
            b.trajectory_weight = nn1;
            b.std_eps = pos2;
            if name == "beacon_official" {
                b.flavour = BeaconFlavour::Official { norm: mode };
            }
        }
        EstimatorConfig::BeaconAblation(a) => {
            let b = &mut a.base;
            b.milestone_reward = pos1;
            b.segment_decay = u0;
            b.segment_weight = nn0;
            b.trajectory_weight = nn1;
            b.std_eps = pos2;
            if s0 {
                b.flavour = BeaconFlavour::Official { norm: mode };
            }
            a.ablation = [
                Ablation::Full,
                Ablation::MilestoneDropout { p: u1 },
                Ablation::RandomPartition { positions: 2 },
                Ablation::NoTemporalDecay,
                Ablation::UniformShaping,
                Ablation::NoSegmentAdvantage,
                Ablation::NoTrajectoryAdvantage,
            ][p.ablation];
        }
        _ => {}
    }
    c
}

/// One batch with every column some estimator reads.
#[derive(Debug, Clone)]
struct Case {
    /// (group, trajectory) of each row, trajectory-major.
    keys: Vec<(u8, u8)>,
    /// R(τ) of each trajectory, in the order trajectories first appear.
    episode: Vec<f64>,
    cols: usize,
    /// Each row's own score (verl-agent's penalised rows), when given.
    row_scores: Option<Vec<f64>>,
    /// Column carrying each row's score in `token_level_rewards` (0 elsewhere), so that the
    /// token sums equal the row's score exactly; `None`: free token rewards (`free`), which the
    /// step paths refuse as disagreeing with R(τ).
    score_col: Option<Vec<usize>>,
    free: Vec<f64>,
    mask: Vec<bool>,
    values: Vec<f64>,
    log_probs: Vec<f64>,
    pi2: Vec<f64>,
    is_weights: Option<Vec<f64>>,
    baselines: Vec<f64>,
    milestones: Vec<bool>,
    step_rewards: Vec<f64>,
    anchors: Vec<usize>,
}

fn case() -> impl Strategy<Value = Case> {
    // Groups of 1–3 trajectories of 1–3 steps, 1–3 groups; rows × L ≤ 27 × 3.
    let shape = prop::collection::vec(prop::collection::vec(1..=3usize, 1..=3), 1..=3);
    (shape, 1..=3usize).prop_flat_map(|(groups, cols)| {
        let mut keys = Vec::new();
        let mut t = 0u8;
        for (g, trajs) in groups.iter().enumerate() {
            for &len in trajs {
                keys.extend(std::iter::repeat_n((g as u8, t), len));
                t += 1;
            }
        }
        let (rows, trajs) = (keys.len(), t as usize);
        let cells = rows * cols;
        let floats = move |n| prop::collection::vec(extreme(), n);
        // The optimal token baselines' columns are extreme in half the cases only, else they
        // would nearly always overflow and the `Ok` paths go untested.
        let or_ordinary = move |n, lo: f64, hi: f64| prop_oneof![floats(n), prop::collection::vec(lo..hi, n)];
        (
            Just(keys),
            floats(trajs),
            Just(cols),
            prop::option::of(floats(rows)),
            prop::option::weighted(0.8, prop::collection::vec(0..cols, rows)),
            floats(cells),
            prop_oneof![
                Just(vec![true; cells]),
                prop::collection::vec(any::<bool>(), cells)
            ],
            (
                or_ordinary(cells, -10.0, 10.0),
                or_ordinary(cells, -10.0, 0.0),
                or_ordinary(cells, 0.0, 1.0),
            ),
            prop::option::of(or_ordinary(cells, 0.0, 2.0)),
            (
                floats(rows),
                prop::collection::vec(any::<bool>(), rows),
                floats(rows),
            ),
            prop::collection::vec(0..2usize, rows),
        )
            .prop_map(
                |(
                    keys,
                    episode,
                    cols,
                    row_scores,
                    score_col,
                    free,
                    mask,
                    (values, log_probs, pi2),
                    is_weights,
                    (baselines, milestones, step_rewards),
                    anchors,
                )| Case {
                    keys,
                    episode,
                    cols,
                    row_scores,
                    score_col,
                    free,
                    mask,
                    values,
                    log_probs,
                    pi2,
                    is_weights,
                    baselines,
                    milestones,
                    step_rewards,
                    anchors,
                },
            )
    })
}

/// The columns of a [`Case`], owned, that an [`EstimatorInput`] borrows.
struct Columns {
    batch: RolloutBatch,
    rewards: Array2<f64>,
    mask: Array2<bool>,
    values: Array2<f64>,
    log_probs: Array2<f64>,
    pi2: Array2<f64>,
    is_weights: Option<Array2<f64>>,
    anchors: Vec<&'static str>,
}

impl Columns {
    fn new(c: &Case) -> Self {
        let rows = c.keys.len();
        let (groups, trajs): (Vec<u8>, Vec<u8>) = c.keys.iter().copied().unzip();
        let reward: Vec<f64> = trajs.iter().map(|&t| c.episode[t as usize]).collect();
        let batch = RolloutBatch::from_row_keys(&groups, &trajs, &reward).unwrap();
        let m = |v: &[f64]| Array2::from_shape_vec((rows, c.cols), v.to_vec()).unwrap();
        let rewards = match &c.score_col {
            Some(col) => Array2::from_shape_fn((rows, c.cols), |(r, t)| {
                let score = c.row_scores.as_ref().map_or(reward[r], |s| s[r]);
                if t == col[r] {
                    score
                } else {
                    0.0
                }
            }),
            None => m(&c.free),
        };
        Self {
            batch,
            rewards,
            mask: Array2::from_shape_vec((rows, c.cols), c.mask.clone()).unwrap(),
            values: m(&c.values),
            log_probs: m(&c.log_probs),
            pi2: m(&c.pi2),
            is_weights: c.is_weights.as_deref().map(m),
            anchors: c.anchors.iter().map(|&a| ["kitchen", "hall"][a]).collect(),
        }
    }

    fn input<'a>(&'a self, c: &'a Case) -> EstimatorInput<'a> {
        let mut input = EstimatorInput::new(&self.batch)
            .with_token_level_rewards(&self.rewards)
            .with_response_mask(&self.mask)
            .with_values(&self.values)
            .with_old_log_probs(&self.log_probs)
            .with_sum_pi_squared(&self.pi2)
            .with_reward_baselines(&c.baselines)
            .with_milestones(&c.milestones)
            .with_step_rewards(&c.step_rewards)
            .with_anchor_obs(&self.anchors);
        if let Some(w) = &self.is_weights {
            input = input.with_rollout_is_weights(w);
        }
        if let Some(s) = &c.row_scores {
            input = input.with_row_scores(s);
        }
        input
    }
}

/// The first non-finite value, as (index, value), for the failure message.
fn first_non_finite<'a>(values: impl IntoIterator<Item = &'a f64>) -> Option<(usize, f64)> {
    values
        .into_iter()
        .copied()
        .enumerate()
        .find(|(_, v)| !v.is_finite())
}

/// Runs `est` on every path; `Err` names the path and the first non-finite output of an `Ok`.
fn check(est: &dyn AdvantageEstimator, input: &EstimatorInput<'_>) -> Result<(), String> {
    let name = est.name();
    if let Ok(out) = est.estimate(input) {
        if let Some(bad) = first_non_finite(&out.advantages) {
            return Err(format!("{name} estimate: advantage {bad:?}"));
        }
        if let Some(bad) = out.returns.as_ref().and_then(first_non_finite) {
            return Err(format!("{name} estimate: return {bad:?}"));
        }
    }
    let mut step = vec![0.0; input.batch.num_steps()];
    if est
        .estimate_steps_into(input, &mut step, &mut Workspace::default())
        .is_ok()
    {
        if let Some(bad) = first_non_finite(&step) {
            return Err(format!("{name} estimate_steps_into: advantage {bad:?}"));
        }
    }
    // The trainer's dtype: each `f32` element is the `f64` value rounded once, and a finite
    // value past f32::MAX rounds to ∞.
    let dim = input.output_dim();
    let (mut a, mut r) = (Array2::<f32>::zeros(dim), Array2::<f32>::zeros(dim));
    let returns = est.has_returns().then_some((&mut r).into());
    if est
        .estimate_into(input, (&mut a).into(), returns, &mut Workspace::default())
        .is_ok()
    {
        let widened: Vec<f64> = a.iter().chain(&r).map(|&x| f64::from(x)).collect();
        if let Some(bad) = first_non_finite(&widened) {
            return Err(format!("{name} estimate_into (f32): output {bad:?}"));
        }
    }
    Ok(())
}

proptest! {
    #[test]
    fn every_estimator_gives_finite_outputs_or_an_error(c in case(), p in params()) {
        let cols = Columns::new(&c);
        let full = cols.input(&c);
        // The step paths without token rewards: nothing to disagree with R(τ); and without
        // a mask (one column per row).
        let mut steps_only = full;
        steps_only.token_level_rewards = None;
        let mut no_mask = steps_only;
        no_mask.response_mask = None;
        for name in EstimatorConfig::NAMES {
            let est = configured(name, &p).build().unwrap();
            for input in [&full, &steps_only, &no_mask] {
                if let Err(e) = check(&*est, input) {
                    prop_assert!(false, "{}", e);
                }
            }
        }
    }
}
