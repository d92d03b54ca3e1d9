//! Oracle of the `estimators` fuzz target: the batch constructors, then one estimator of
//! `EstimatorConfig::NAMES` (default or fuzzed parameters) on fuzzed columns.
//!
//! Columns may include per-row scores (`with_row_scores`).
//!
//! Oracles: nothing panics; every `Ok` output (advantages and returns) is finite;
//! `estimate_into` into NaN-filled buffers (standard or strided layout) gives the same result
//! as `estimate`, bit for bit, or the same error; a wrongly shaped buffer is an error. The
//! mask is `bool`, `u8` or `i64`; an integer mask holding an entry other than 0 and 1 is never
//! `Ok`.

use beacon_rl::estimator::{
    AdvantageEstimator, BeaconConfig, BeaconFlavour, EstimatorConfig, EstimatorInput, GaeConfig, GigpoConfig,
    GpgConfig, GrpoConfig, GrpoStatistics, NormMode, OptimalTokenBaselineConfig, ReinforcePlusPlusConfig,
    SingletonRule, StepGrouping, Workspace, ZeroTail,
};
use beacon_rl::tensor::MaskView;
use beacon_rl::{Error, RolloutBatch};
use ndarray::{Array2, ArrayView2, ShapeBuilder};

use super::bytes::Bytes;

/// Batches with more steps than this are built (the constructor is under test) but not
/// estimated: the column matrices would be as large.
const MAX_ROWS: usize = 256;

/// Runs one fuzz input through the oracles; panics on a violation.
pub fn run(data: &[u8]) {
    let mut u = Bytes::new(data);
    // The batch first: a constructor's input then means the same when estimators are added.
    let Some(batch) = build_batch(&mut u) else {
        return;
    };
    // A byte below the number of names picks that name (stable when names are appended).
    let pick = usize::from(u.u8());
    let names = EstimatorConfig::NAMES;
    let name = names.get(pick).unwrap_or(&names[pick % names.len()]);
    let config = if u.bool() {
        fuzzed_config(name, &mut u)
    } else {
        name.parse().expect("every name in NAMES parses")
    };
    let rows = batch.num_steps();
    if rows > MAX_ROWS {
        return;
    }
    // Either a valid estimator, or the typed error its parameters deserve.
    let Ok(estimator) = config.build() else {
        return;
    };
    // Usually columns with the batch's row count; sometimes one more or one fewer.
    let col_rows = match u.u8() {
        0..=249 => rows,
        250..=252 => rows + 1,
        _ => rows.saturating_sub(1),
    };
    // Usually 1..=6 tokens (as `u.range(1, 6)`); the top 16 byte values give 8..=38 tokens,
    // which reach the 8-token chunks of the row sums and the masked writer's whole chunks.
    let len = match u.u8() {
        b @ 0..=239 => 1 + usize::from(b) % 6,
        b => 8 + 2 * usize::from(b - 240),
    };
    let columns = Columns::new(&mut u, col_rows, len);
    let anchors: Vec<&str> = columns.anchors.iter().map(String::as_str).collect();
    // The mask's dtype; integer masks sometimes get one entry that is neither 0 nor 1.
    let kind = u.u8() % 3;
    let mut ints = columns.mask.mapv(i64::from);
    if kind != 0 && !ints.is_empty() && u.u8() < 32 {
        let at = (u.u64() % ints.len() as u64) as usize;
        let v = if kind == 1 {
            i64::from(u.u8())
        } else {
            u.u64() as i64
        };
        ints.as_slice_mut().expect("standard layout")[at] = v;
    }
    let bytes = ints.mapv(|v| v as u8);
    let (mask, bad_entry) = match kind {
        0 => (MaskView::from(columns.mask.view()), false),
        1 => (MaskView::from(bytes.view()), bytes.iter().any(|&v| v > 1)),
        _ => (
            MaskView::from(ints.view()),
            ints.iter().any(|&v| v != 0 && v != 1),
        ),
    };
    let present = u.u8() & u.u8(); // a set bit drops a column: mostly every column present
    let mut input = EstimatorInput::new(&batch);
    let fortran = u.bool();
    let rewards = columns.matrix(&columns.rewards, fortran);
    if present & 0b0000_0001 == 0 {
        input = input.with_token_level_rewards(rewards);
    }
    if present & 0b0000_0010 == 0 {
        input = input.with_response_mask(mask);
    }
    if present & 0b0000_0100 == 0 {
        input = input.with_values(columns.matrix(&columns.values, fortran));
    }
    if present & 0b0000_1000 == 0 {
        input = input.with_reward_baselines(&columns.baselines);
    }
    if present & 0b0001_0000 == 0 {
        input = input
            .with_old_log_probs(columns.matrix(&columns.log_probs, fortran))
            .with_sum_pi_squared(columns.matrix(&columns.sum_pi_sq, fortran));
    }
    if present & 0b0010_0000 == 0 {
        input = input.with_rollout_is_weights(columns.matrix(&columns.is_weights, fortran));
    }
    if present & 0b0100_0000 == 0 {
        input = input.with_milestones(&columns.milestones);
    }
    if present & 0b1000_0000 == 0 {
        input = input
            .with_step_rewards(&columns.step_rewards)
            .with_anchor_obs(&anchors);
    }
    // Sometimes per-row scores (`with_row_scores`): the rows' token sums (as verl-agent's
    // rows carry them), those with one row moved (a penalised step, or a mismatch when the
    // token rewards are given too), or arbitrary values; sometimes one too few or too many.
    let (given, row_scores): (bool, Vec<f64>) = match u.u8() {
        0..=191 => (false, Vec::new()),
        b => {
            let mut s: Vec<f64> = match b % 3 {
                0 | 1 => (0..col_rows)
                    .map(|r| columns.rewards[r * len..][..len].iter().sum())
                    .collect(),
                _ => (0..col_rows).map(|_| u.f64()).collect(),
            };
            if b % 3 == 1 && !s.is_empty() {
                let at = (u.u64() % s.len() as u64) as usize;
                s[at] -= u.f64();
            }
            match u.u8() {
                0..=249 => {}
                250..=252 => s.push(u.f64()),
                _ => drop(s.pop()),
            }
            (true, s)
        }
    };
    if given {
        input = input.with_row_scores(&row_scores);
    }
    check_estimator(&*estimator, &input, u.u8());
    if bad_entry && present & 0b0000_0010 == 0 {
        let got = estimator.estimate(&input);
        assert!(
            got.is_err(),
            "{name}: Ok on an integer mask entry other than 0 and 1"
        );
    }
}

/// `estimate` against `estimate_into` (NaN-filled buffers; column-major when `layout & 1`;
/// also a wrongly shaped buffer when `layout & 2`), and finiteness of every `Ok` value.
pub fn check_estimator(est: &dyn AdvantageEstimator, input: &EstimatorInput<'_>, layout: u8) {
    let name = est.name();
    let fresh = est.estimate(input);
    if let Ok(out) = &fresh {
        assert_eq!(
            out.returns.is_some(),
            est.has_returns(),
            "{name}: returns without has_returns"
        );
        if let Some(r) = &out.returns {
            assert_eq!(out.advantages.dim(), r.dim(), "{name}: shapes differ");
        }
        for (what, m) in [
            ("advantages", Some(&out.advantages)),
            ("returns", out.returns.as_ref()),
        ] {
            if let Some((at, v)) = m.and_then(|m| m.indexed_iter().find(|(_, v)| !v.is_finite())) {
                panic!("{name}: Ok with non-finite {what}{at:?} = {v}");
            }
        }
    }
    // The shape `estimate` gives: the mask's, or rows × 1.
    let dim = input.output_dim();

    // Into NaN-filled buffers: standard layout, or column-major (strided rows); the same
    // workspace twice, so stale scratch from the first call cannot leak into the second.
    let mut ws = Workspace::default();
    for _ in 0..2 {
        let (mut adv, mut ret) = if layout & 1 == 0 {
            (Array2::from_elem(dim, f64::NAN), Array2::from_elem(dim, f64::NAN))
        } else {
            (
                Array2::from_elem(dim.f(), f64::NAN),
                Array2::from_elem(dim.f(), f64::NAN),
            )
        };
        let returns = est.has_returns().then(|| ret.view_mut().into());
        let into = est.estimate_into(input, adv.view_mut().into(), returns, &mut ws);
        match (&fresh, into) {
            (Ok(out), Ok(())) => {
                assert!(
                    bits_equal(&out.advantages, &adv),
                    "{name}: estimate_into advantages differ from estimate"
                );
                if let Some(r) = &out.returns {
                    assert!(
                        bits_equal(r, &ret),
                        "{name}: estimate_into returns differ from estimate"
                    );
                }
            }
            // Compared as text: an error may carry a NaN value, which is never `==`.
            (Err(a), Err(b)) => assert_eq!(
                format!("{a:?}"),
                format!("{b:?}"),
                "{name}: estimate and estimate_into disagree"
            ),
            (a, b) => panic!("{name}: estimate gave {a:?}, estimate_into gave {b:?}"),
        }
    }

    // Into a NaN-filled `f32` buffer: `estimate`'s values rounded, bit for bit, or, when one
    // of them rounds to ∞, `NonFinite` naming the "(overflows f32)" output; the same error
    // where `estimate` failed.
    let (mut adv32, mut ret32) = (Array2::from_elem(dim, f32::NAN), Array2::from_elem(dim, f32::NAN));
    let returns = est.has_returns().then(|| ret32.view_mut().into());
    let into = est.estimate_into(input, adv32.view_mut().into(), returns, &mut ws);
    match (&fresh, into) {
        (Ok(out), into) => {
            let parts = [(&out.advantages, &adv32)]
                .into_iter()
                .chain(out.returns.as_ref().zip(Some(&ret32)));
            let overflows = parts
                .clone()
                .any(|(f, _)| f.iter().any(|&x| (x as f32).is_infinite()));
            match into {
                Ok(()) => {
                    assert!(!overflows, "{name}: Ok into f32 with a value past f32::MAX");
                    for (f, o) in parts {
                        assert!(
                            f.iter()
                                .zip(o.iter())
                                .all(|(&x, &y)| (x as f32).to_bits() == y.to_bits()),
                            "{name}: f32 output is not estimate's rounded"
                        );
                    }
                }
                Err(Error::NonFinite { what, .. }) if overflows && what.ends_with("(overflows f32)") => {}
                Err(e) => panic!("{name}: estimate Ok, into f32 {e:?} (overflow expected: {overflows})"),
            }
        }
        (Err(a), Err(b)) => assert_eq!(
            format!("{a:?}"),
            format!("{b:?}"),
            "{name}: estimate and estimate_into (f32) disagree"
        ),
        (Err(a), Ok(())) => panic!("{name}: estimate gave {a:?}, estimate_into (f32) Ok"),
    }

    // A buffer one column too wide is a typed error.
    if layout & 2 == 2 {
        let mut wide = Array2::<f64>::zeros((dim.0, dim.1 + 1));
        assert!(
            est.estimate_into(input, wide.view_mut().into(), None, &mut ws)
                .is_err(),
            "{name}: estimate_into accepted a wrongly shaped buffer"
        );
    }
}

fn bits_equal(a: &Array2<f64>, b: &Array2<f64>) -> bool {
    a.dim() == b.dim() && a.iter().zip(b.iter()).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// One of the four constructors on fuzzed arguments; `None` when it returns an error.
fn build_batch(u: &mut Bytes<'_>) -> Option<RolloutBatch> {
    match u.u8() % 4 {
        0 => {
            let rows = u.range(0, 40);
            let (mut groups, mut trajs, mut rewards) = (Vec::new(), Vec::new(), Vec::new());
            let table: Vec<f64> = (0..8).map(|_| u.f64()).collect();
            for _ in 0..rows {
                let t = u.u8();
                // Usually a trajectory stays in one group with one reward.
                let g = if t & 0x80 == 0 { (t & 7) / 3 } else { u.u8() % 4 };
                groups.push(g);
                trajs.push(t & 7);
                rewards.push(if t & 0x40 == 0 {
                    table[usize::from(t & 7)]
                } else {
                    u.f64()
                });
            }
            RolloutBatch::from_row_keys(&groups, &trajs, &rewards).ok()
        }
        1 => {
            let rows = u.range(0, 40);
            let groups: Vec<u8> = (0..rows).map(|_| u.u8() % 6).collect();
            let rewards: Vec<f64> = (0..rows).map(|_| u.f64()).collect();
            RolloutBatch::from_group_keys(&groups, &rewards).ok()
        }
        2 => {
            // Offsets: usually a running sum of small gaps, sometimes any claimed size (the
            // constructors allocate nothing per claimed step: no claim is skipped).
            let group_offsets = offsets(u, 6);
            let traj_offsets = offsets(u, 12);
            let n = if u.bool() {
                traj_offsets.len().saturating_sub(1)
            } else {
                u.range(0, 12)
            };
            let rewards: Vec<f64> = (0..n).map(|_| u.f64()).collect();
            RolloutBatch::from_offsets(group_offsets, traj_offsets, rewards).ok()
        }
        _ => {
            let group_size = u.size();
            let n = u.range(0, 24);
            let lens: Vec<usize> = (0..n).map(|_| u.size()).collect();
            let m = if u.bool() { n } else { u.range(0, 24) };
            let rewards: Vec<f64> = (0..m).map(|_| u.f64()).collect();
            RolloutBatch::from_blocks(group_size, &lens, rewards).ok()
        }
    }
}

fn offsets(u: &mut Bytes<'_>, max: usize) -> Vec<usize> {
    let n = u.range(0, max);
    let mut out = Vec::with_capacity(n);
    let mut acc = 0usize;
    for i in 0..n {
        if i == 0 && u.u8() < 240 {
            out.push(0);
            continue;
        }
        let step = u.size();
        acc = if u.u8() < 8 {
            step
        } else {
            acc.saturating_add(step)
        };
        out.push(acc);
    }
    out
}

/// Every column an estimator may read, rows × `len` where it is a matrix.
struct Columns {
    rows: usize,
    len: usize,
    rewards: Vec<f64>,
    mask: Array2<bool>,
    values: Vec<f64>,
    baselines: Vec<f64>,
    log_probs: Vec<f64>,
    sum_pi_sq: Vec<f64>,
    is_weights: Vec<f64>,
    milestones: Vec<bool>,
    step_rewards: Vec<f64>,
    anchors: Vec<String>,
}

impl Columns {
    fn new(u: &mut Bytes<'_>, rows: usize, len: usize) -> Self {
        let n = rows * len;
        let floats = |u: &mut Bytes<'_>, k: usize| (0..k).map(|_| u.f64()).collect::<Vec<f64>>();
        let rewards = floats(u, n);
        // A response prefix per row (verl's usual mask), or arbitrary bits.
        let mask = if u.bool() {
            let lens: Vec<usize> = (0..rows).map(|_| u.range(0, len)).collect();
            Array2::from_shape_fn((rows, len), |(r, j)| j < lens[r])
        } else {
            Array2::from_shape_fn((rows, len), |_| u.bool())
        };
        let values = floats(u, n);
        let baselines = floats(u, rows);
        let log_probs = floats(u, n);
        let sum_pi_sq = floats(u, n);
        let is_weights = floats(u, n);
        let milestones = (0..rows).map(|_| u.bool()).collect();
        let step_rewards = floats(u, rows);
        let anchors = (0..rows).map(|_| u.text(6)).collect();
        Self {
            rows,
            len,
            rewards,
            mask,
            values,
            baselines,
            log_probs,
            sum_pi_sq,
            is_weights,
            milestones,
            step_rewards,
            anchors,
        }
    }

    /// A rows × len view of `data`: row-major, or column-major (a strided view).
    fn matrix<'a>(&self, data: &'a [f64], fortran: bool) -> ArrayView2<'a, f64> {
        let shape = (self.rows, self.len);
        if fortran {
            ArrayView2::from_shape(shape.f(), data).expect("rows * len values")
        } else {
            ArrayView2::from_shape(shape, data).expect("rows * len values")
        }
    }
}

/// `name`'s configuration with fuzzed parameters (valid or not: `build` must decide).
fn fuzzed_config(name: &str, u: &mut Bytes<'_>) -> EstimatorConfig {
    let grpo = |u: &mut Bytes<'_>| {
        GrpoConfig::default()
            .with_std_eps(u.f64())
            .with_norm(if u.bool() {
                NormMode::MeanStdNorm
            } else {
                NormMode::MeanNorm
            })
            .with_statistics(if u.bool() {
                GrpoStatistics::Rows
            } else {
                GrpoStatistics::Trajectories
            })
    };
    let mode = |u: &mut Bytes<'_>| {
        if u.bool() {
            NormMode::MeanNorm
        } else {
            NormMode::MeanStdNorm
        }
    };
    let otb = |u: &mut Bytes<'_>| {
        OptimalTokenBaselineConfig::default()
            .with_zero_tail(if u.bool() {
                ZeroTail::ZeroBaseline
            } else {
                ZeroTail::KeepBaseline
            })
            .with_denominator_eps(u.f64())
    };
    let beacon = |u: &mut Bytes<'_>, flavour: BeaconFlavour| {
        BeaconConfig::default()
            .with_flavour(flavour)
            .with_milestone_reward(u.f64())
            .with_segment_decay(u.f64())
            .with_segment_weight(u.f64())
            .with_trajectory_weight(u.f64())
            .with_std_eps(u.f64())
            .with_singleton(if u.bool() {
                SingletonRule::PassThrough
            } else {
                SingletonRule::Zero
            })
    };
    match name {
        "gae" => EstimatorConfig::Gae(
            GaeConfig::default()
                .with_discount(u.f64())
                .with_gae_lambda(u.f64()),
        ),
        "grpo" => EstimatorConfig::Grpo(grpo(u)),
        "grpo_vectorized" => EstimatorConfig::GrpoVectorized(grpo(u)),
        "grpo_passk" => EstimatorConfig::GrpoPassk(grpo(u)),
        "gdpo" => EstimatorConfig::Gdpo(grpo(u)),
        "gpg" => EstimatorConfig::Gpg(GpgConfig::default().with_f_norm(u.f64())),
        "reinforce_plus_plus" => {
            EstimatorConfig::ReinforcePlusPlus(ReinforcePlusPlusConfig::default().with_discount(u.f64()))
        }
        "optimal_token_baseline" => EstimatorConfig::OptimalTokenBaseline(otb(u)),
        "tir_optimal_token_baseline" => EstimatorConfig::TirOptimalTokenBaseline(otb(u)),
        "gigpo" => EstimatorConfig::Gigpo(
            GigpoConfig::default()
                .with_step_decay(u.f64())
                .with_step_advantage_weight(u.f64())
                .with_norm(mode(u))
                .with_std_eps(u.f64())
                .with_grouping(if u.bool() {
                    StepGrouping::Exact
                } else {
                    StepGrouping::Similarity { threshold: u.f64() }
                }),
        ),
        "beacon" => EstimatorConfig::Beacon(beacon(u, BeaconFlavour::Paper)),
        "beacon_official" => {
            let mode = mode(u);
            EstimatorConfig::Beacon(beacon(u, BeaconFlavour::Official { norm: mode }))
        }
        // No parameters (rloo, rloo_vectorized, opo, reinforce_plus_plus_baseline, remax), or
        // default parameters only (names added later).
        other => other.parse().expect("every name in NAMES parses"),
    }
}
