//! Diagnostics of real estimators through the `AdvantageEstimator` trait
//! (`Diagnostics::compare_estimators` and its per-row advantage): a hand-computed GRPO case, the
//! first-masked-token rule, errors that name the estimator, and the bundled trajectories.

use crate::diagnostics::compare;
use beacon_rl::diagnostics::{Diagnostics, DiagnosticsConfig};
use beacon_rl::estimator::{AdvantageEstimator, Advantages, Beacon, BeaconConfig, EstimatorInput, Workspace};
use beacon_rl::tensor::FloatViewMut;
use beacon_rl::{Error, Result, RolloutBatch};
use ndarray::Array2;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * (1.0 + a.abs().max(b.abs()))
}

use crate::common::build;

/// Seven rows in interleaved caller order. Group "t": W (success, 2 steps) and L (failure,
/// 3 steps); group "u": X and Y (both successes, 1 step each).
///
/// | row | group | traj | R | state | action | milestone |
/// |---|---|---|---|---|---|---|
/// | 0 | t | W | 1 | s0 | go   | yes |
/// | 1 | t | L | 0 | s0 | go   | yes |
/// | 2 | u | X | 1 | u0 | go   | no  |
/// | 3 | t | W | 1 | s1 | take | yes |
/// | 4 | t | L | 0 | s1 | drop | no  |
/// | 5 | u | Y | 1 | u0 | go   | no  |
/// | 6 | t | L | 0 | s0 | go   | no  |
struct Case {
    batch: RolloutBatch,
    state: [&'static str; 7],
    action: [&'static str; 7],
    milestones: [bool; 7],
    reward: [f64; 7],
}

impl Case {
    /// The case's diagnostics, default configuration.
    fn diagnostics(&self) -> Diagnostics<'_> {
        Diagnostics::new(
            &self.batch,
            &self.state,
            &self.action,
            &self.milestones,
            DiagnosticsConfig::default(),
        )
        .unwrap()
    }
}

fn case() -> Case {
    let group = ["t", "t", "u", "t", "t", "u", "t"];
    let traj = ["W", "L", "X", "W", "L", "Y", "L"];
    let reward = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0];
    Case {
        batch: RolloutBatch::from_row_keys(&group, &traj, &reward).unwrap(),
        state: ["s0", "s0", "u0", "s1", "s1", "u0", "s0"],
        action: ["go", "go", "go", "take", "drop", "go", "go"],
        milestones: [true, true, false, true, false, false, false],
        reward,
    }
}

/// verl's GRPO on these rows, by hand. Group t rows score [1, 0, 1, 0, 0]: mean 0.4,
/// squared deviations 2·0.36 + 3·0.16 = 1.2, unbiased variance 1.2 / 4 = 0.3, so
/// A_W = 0.6 / (√0.3 + 1e-6) and A_L = −0.4 / (√0.3 + 1e-6). Group u scores [1, 1]: std 0,
/// A = 0 / (0 + 1e-6) = 0.
fn grpo_by_hand() -> (f64, f64) {
    let sigma = 0.3f64.sqrt() + 1e-6;
    (0.6 / sigma, -0.4 / sigma)
}

#[test]
fn grpo_through_the_trait_gives_the_hand_computed_diagnostics() {
    let c = case();
    let diag = c.diagnostics();
    let rewards = Array2::from_shape_fn((7, 1), |(r, _)| c.reward[r]);
    let mask = Array2::from_elem((7, 1), true);
    let input = EstimatorInput::new(&c.batch)
        .with_token_level_rewards(&rewards)
        .with_response_mask(&mask)
        .with_milestones(&c.milestones);
    let grpo = build("grpo");
    let cmp = diag.compare_estimators(&[("GRPO", &*grpo)], &input).unwrap();
    assert_eq!(cmp.entries.len(), 1);
    assert_eq!(cmp.entries[0].0, "GRPO");
    let r = &cmp.entries[0].1;
    let (w, l) = grpo_by_hand();

    // CAR: (s0, go) is taken in W (+) and L (−, twice): contradictory. (u0, go) is taken in X
    // and Y, both with 0: shared but not contradictory. (s1, take), (s1, drop): one
    // trajectory each, not shared. CAR = 1/2.
    assert_eq!((r.car.contradictory_pairs, r.car.shared_pairs), (1, 2));
    assert_eq!((r.car.pairs_with_positive, r.car.pairs_with_negative), (1, 1));
    assert_eq!(r.car.value, Some(0.5));
    // EGR: (s0, go) g⁺ = 0.6/σ, g⁻ = 2 · 0.4/σ = 0.8/σ, surviving 0.2/σ of 1.4/σ; (u0, go)
    // adds nothing. EGR = 1/7.
    assert!(close(r.egr.surviving, (w + 2.0 * l).abs()));
    assert!(close(r.egr.total, w - 2.0 * l));
    assert!(close(r.egr.value.unwrap(), 1.0 / 7.0));
    // ZAR: rows 2 and 5 (group u) are zero. 2/7.
    assert_eq!((r.zar.zero_steps, r.zar.steps), (2, 7));
    // CCR: milestone rows 0, 3, 1 carry 0.6, 0.6, 0.4 (/σ), mean 1.6/(3σ); other rows 2, 4,
    // 5, 6 carry 0, 0.4, 0, 0.4 (/σ), mean 0.2/σ. CCR = (1.6/3) / 0.2 = 8/3.
    assert!(close(r.ccr.value.unwrap(), 8.0 / 3.0));
    // Samples: W, X, Y succeed; L failed after a milestone. Only W and L carry signal.
    assert_eq!(
        (
            r.samples.full_success,
            r.samples.partial_success,
            r.samples.complete_failure
        ),
        (3, 1, 0)
    );
    assert_eq!((r.utilisation.effective, r.utilisation.trajectories), (2, 4));
    assert_eq!(r.utilisation.effective_full_success, 1);
    assert_eq!(r.utilisation.effective_partial_success, 1);

    // The same numbers as measuring the hand-computed per-row vector directly.
    let by_hand = [w, l, 0.0, w, l, 0.0, l];
    let direct = diag.report(&by_hand).unwrap();
    assert_eq!(direct.car, r.car);
    assert_eq!(direct.zar, r.zar);
    assert_eq!(direct.utilisation, r.utilisation);
    assert!(close(direct.egr.value.unwrap(), r.egr.value.unwrap()));
    assert!(close(direct.ccr.value.unwrap(), r.ccr.value.unwrap()));
}

#[test]
fn the_row_advantage_is_the_first_masked_token() {
    // The case again with L = 2 and every row's first token masked out (a prompt token): the
    // outcome reward sits on token 1. GRPO writes 0 on token 0 and A on token 1; taking
    // column 0 would report ZAR = 1. With the first masked token, the report equals L = 1.
    let c = case();
    let diag = c.diagnostics();
    let one_col = Array2::from_shape_fn((7, 1), |(r, _)| c.reward[r]);
    let one_mask = Array2::from_elem((7, 1), true);
    let two_col = Array2::from_shape_fn((7, 2), |(r, t)| if t == 1 { c.reward[r] } else { 0.0 });
    let two_mask = Array2::from_shape_fn((7, 2), |(_, t)| t == 1);
    let grpo = build("grpo");
    let one = EstimatorInput::new(&c.batch)
        .with_token_level_rewards(&one_col)
        .with_response_mask(&one_mask);
    let two = EstimatorInput::new(&c.batch)
        .with_token_level_rewards(&two_col)
        .with_response_mask(&two_mask);
    let a = diag.compare_estimators(&[("grpo", &*grpo)], &one).unwrap();
    let b = diag.compare_estimators(&[("grpo", &*grpo)], &two).unwrap();
    assert_eq!(a, b);
    assert_eq!(b.entries[0].1.zar.zero_steps, 2);
}

#[test]
fn an_input_without_response_tokens_is_measured_not_refused() {
    // L = 0: nothing was generated. GRPO accepts it and returns rows × 0; every row then has
    // no masked token, so its advantage is 0 (row_advantages' rule): ZAR 7/7, no trajectory
    // carries signal, the shared pairs (s0, go) and (u0, go) are not contradictory (CAR 0/2)
    // and EGR is 0/0. The old code refused GRPO's output with OutputShape (expected (7, 1)).
    let c = case();
    let diag = c.diagnostics();
    let rewards = Array2::<f64>::zeros((7, 0));
    let mask = Array2::from_elem((7, 0), true);
    let input = EstimatorInput::new(&c.batch)
        .with_token_level_rewards(&rewards)
        .with_response_mask(&mask);
    let grpo = build("grpo");
    let cmp = diag.compare_estimators(&[("grpo", &*grpo)], &input).unwrap();
    let r = &cmp.entries[0].1;
    assert_eq!((r.zar.zero_steps, r.zar.steps), (7, 7));
    assert_eq!(r.utilisation.effective, 0);
    assert_eq!((r.car.contradictory_pairs, r.car.shared_pairs), (0, 2));
    assert_eq!(r.egr.value, None);
}

/// An estimator that returns a fixed matrix, to provoke output errors.
struct Fixed(Array2<f64>);

impl AdvantageEstimator for Fixed {
    fn name(&self) -> &'static str {
        "fixed"
    }
    fn estimate_into(
        &self,
        _: &EstimatorInput<'_>,
        advantages: FloatViewMut<'_>,
        _: Option<FloatViewMut<'_>>,
        _: &mut Workspace,
    ) -> Result<()> {
        match advantages {
            FloatViewMut::F64(mut a) if a.dim() == self.0.dim() => a.assign(&self.0),
            other => {
                return Err(Error::OutputShape {
                    what: "advantages",
                    expected: self.0.dim(),
                    actual: other.dim(),
                })
            }
        }
        Ok(())
    }
    /// Returns the fixed matrix whatever the input's shape.
    fn estimate(&self, _: &EstimatorInput<'_>) -> Result<Advantages> {
        Ok(Advantages::new(self.0.clone(), None))
    }
}

fn name_and_source(err: Error) -> (String, Error) {
    match err {
        Error::Estimator { name, source } => (name, *source),
        other => panic!("expected Error::Estimator, got {other:?}"),
    }
}

#[test]
fn failures_name_the_estimator() {
    let c = case();
    let diag = c.diagnostics();
    let rewards = Array2::from_shape_fn((7, 1), |(r, _)| c.reward[r]);
    let mask = Array2::from_elem((7, 1), true);
    let input = EstimatorInput::new(&c.batch)
        .with_token_level_rewards(&rewards)
        .with_response_mask(&mask)
        .with_milestones(&c.milestones);
    let grpo = build("grpo");
    let beacon = Beacon::new(BeaconConfig::default()).unwrap();

    // The estimator's own error: GiGPO needs step rewards and anchors.
    let gigpo = build("gigpo");
    let err = diag
        .compare_estimators(
            &[
                ("grpo", &*grpo),
                ("beacon", &beacon),
                ("GiGPO (verl-agent)", &*gigpo),
            ],
            &input,
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "estimator GiGPO (verl-agent): missing input: step_rewards"
    );
    assert_eq!(
        name_and_source(err),
        (
            "GiGPO (verl-agent)".to_owned(),
            Error::MissingInput("step_rewards")
        )
    );

    // Invalid advantages it produced: NaN on row 3.
    let mut nan = Array2::zeros((7, 1));
    nan[[3, 0]] = f64::NAN;
    let err = diag
        .compare_estimators(&[("grpo", &*grpo), ("nan", &Fixed(nan))], &input)
        .unwrap_err();
    let (name, source) = name_and_source(err);
    assert_eq!(name, "nan");
    assert!(matches!(source, Error::NonFinite { index: 3, .. }), "{source:?}");

    // An output of the wrong shape.
    let err = diag
        .compare_estimators(&[("short", &Fixed(Array2::zeros((6, 1))))], &input)
        .unwrap_err();
    let (name, source) = name_and_source(err);
    assert_eq!(name, "short");
    assert!(
        matches!(
            source,
            Error::OutputShape {
                what: "advantages",
                actual: (6, 1),
                ..
            }
        ),
        "{source:?}"
    );

    // The first failing estimator in list order is reported.
    let err = diag
        .compare_estimators(
            &[("first", &*gigpo), ("second", &Fixed(Array2::zeros((6, 1))))],
            &input,
        )
        .unwrap_err();
    assert_eq!(name_and_source(err).0, "first");

    // `compare` over precomputed vectors names the entry too.
    let err = compare(
        &c.batch,
        &c.state,
        &c.action,
        &c.milestones,
        &[("ok", vec![0.0; 7]), ("short", vec![0.0; 6])],
        DiagnosticsConfig::default(),
    )
    .unwrap_err();
    let (name, source) = name_and_source(err);
    assert_eq!(name, "short");
    assert!(matches!(source, Error::LengthMismatch { actual: 6, .. }));
}

#[test]
fn the_input_must_describe_the_diagnosed_batch() {
    let c = case();
    let diag = c.diagnostics();
    let grpo = build("grpo");
    let rewards = Array2::from_shape_fn((7, 1), |(r, _)| c.reward[r]);
    let mask = Array2::from_elem((7, 1), true);

    // An equal batch built separately is accepted (same rows, same structure).
    let twin = case().batch;
    let input = EstimatorInput::new(&twin)
        .with_token_level_rewards(&rewards)
        .with_response_mask(&mask);
    assert!(diag.compare_estimators(&[("grpo", &*grpo)], &input).is_ok());

    // Same number of rows, different trajectories: the rows would be misattributed.
    let other = RolloutBatch::from_row_keys(&["t"; 7], &["W"; 7], &[1.0; 7]).unwrap();
    let input = EstimatorInput::new(&other)
        .with_token_level_rewards(&rewards)
        .with_response_mask(&mask);
    assert!(matches!(
        diag.compare_estimators(&[("grpo", &*grpo)], &input),
        Err(Error::BatchMismatch(_))
    ));
}

/// BEACON reads the input's milestone flags, the CCR the diagnostics'. Flags that differ
/// would put two milestone sets in one report: an error naming the first differing row.
#[test]
fn the_input_milestones_must_be_the_diagnosed_ones() {
    let c = case();
    let diag = c.diagnostics();
    let rewards = Array2::from_shape_fn((7, 1), |(r, _)| c.reward[r]);
    let mask = Array2::from_elem((7, 1), true);
    let beacon = Beacon::new(BeaconConfig::default()).unwrap();
    let base = EstimatorInput::new(&c.batch)
        .with_token_level_rewards(&rewards)
        .with_response_mask(&mask);

    // Equal flags in another slice are accepted.
    let copy = c.milestones;
    let input = base.with_milestones(&copy);
    assert!(diag.compare_estimators(&[("beacon", &beacon)], &input).is_ok());

    // Rows 3 and 6 flipped (caller order): row 3 is reported, whatever the estimators.
    let mut other = c.milestones;
    other[6] = !other[6];
    other[3] = !other[3];
    let input = base.with_milestones(&other);
    let grpo = build("grpo");
    for list in [
        vec![("beacon", &beacon as &dyn AdvantageEstimator)],
        vec![("grpo", &*grpo)],
        vec![],
    ] {
        let err = diag.compare_estimators(&list, &input).unwrap_err();
        assert_eq!(
            err,
            Error::MilestoneMismatch {
                row: 3,
                input: false,
                diagnosed: true
            }
        );
    }

    // A length other than the batch's is the same mismatch, not the estimator's error.
    let short = &c.milestones[..6];
    let input = base.with_milestones(short);
    assert!(matches!(
        diag.compare_estimators(&[("grpo", &*grpo)], &input),
        Err(Error::LengthMismatch {
            what: "milestone flags",
            expected: 7,
            actual: 6
        })
    ));

    // Without flags in the input, an estimator that needs them says so.
    let err = diag
        .compare_estimators(&[("beacon", &beacon)], &base)
        .unwrap_err();
    assert_eq!(name_and_source(err).1, Error::MissingInput("milestones"));
}

#[cfg(feature = "serde")]
mod bundled {
    use super::*;
    use beacon_rl::milestone::{detect_milestones, ScoreIncrease};
    use beacon_rl::record::{read_trajectories, RecordBatch, TrajectoryRecord};

    const SAMPLE: &str = include_str!("../../data/sample_trajectories.jsonl");

    fn records(failures_only: bool) -> Vec<TrajectoryRecord> {
        read_trajectories(SAMPLE.as_bytes())
            .map(|r| r.unwrap())
            .filter(|r| !failures_only || r.terminal_reward <= 0.0)
            .collect()
    }

    fn run(records: &[TrajectoryRecord]) -> beacon_rl::diagnostics::Comparison {
        let rb = RecordBatch::new(records).unwrap();
        let flags = detect_milestones(rb.batch(), &mut ScoreIncrease, |row, _| rb.transition(row)).unwrap();
        let (state, action): (Vec<_>, Vec<_>) = (0..rb.batch().num_steps())
            .map(|row| {
                let t = rb.transition(row);
                let group = rb.records()[rb.row_location(row).0].group_id.as_str();
                ((group, t.observation), t.action)
            })
            .unzip();
        let diag =
            Diagnostics::new(rb.batch(), &state, &action, &flags, DiagnosticsConfig::default()).unwrap();
        let input = rb.input(&flags);
        let names = ["grpo", "gigpo", "beacon", "beacon_official"];
        let built: Vec<_> = names.iter().map(|n| build(n)).collect();
        let list: Vec<(&str, &dyn AdvantageEstimator)> =
            names.iter().zip(&built).map(|(n, e)| (*n, &**e)).collect();
        diag.compare_estimators(&list, &input).unwrap()
    }

    #[test]
    fn every_group_mixes_outcomes_so_grpo_signs_every_step() {
        // data/README.md: every group mixes successes and failures, so each group's row
        // scores have std > 0 and every row gets (R − μ)/σ ≠ 0.
        let cmp = run(&records(false));
        let grpo = &cmp.entries[0].1;
        assert_eq!(cmp.entries[0].0, "grpo");
        assert_eq!((grpo.zar.zero_steps, grpo.zar.steps), (0, 437));
        assert_eq!(grpo.utilisation.effective, 32);
        assert_eq!(cmp.samples.trajectories, 32);
    }

    #[test]
    fn failures_only_grpo_has_no_signal() {
        // Without successes every group's rewards are all 0: GRPO gives 0 / (0 + ε) = 0 on
        // every row, so ZAR = 1 and no trajectory is used.
        let recs = records(true);
        assert_eq!(recs.len(), 18); // 32 minus the 14 successes
        let cmp = run(&recs);
        let grpo = &cmp.entries[0].1;
        assert_eq!(grpo.zar.value, 1.0);
        assert_eq!(grpo.utilisation.effective, 0);
        assert_eq!(grpo.car.contradictory_pairs, 0);
        assert_eq!(cmp.samples.full_success, 0);
    }
}
