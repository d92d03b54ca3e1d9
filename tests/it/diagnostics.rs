//! Diagnostics (CAR, EGR, ZAR, CCR, sample split, utilisation): hand-computed cases, edge
//! cases, errors and proptest properties.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::Hash;

use beacon_rl::diagnostics::{
    CcrReport, Comparison, Diagnostics, DiagnosticsConfig, DiagnosticsReport, SampleCategory, ZarReport,
};
use beacon_rl::estimator::{Beacon, BeaconConfig};
use beacon_rl::{Error, RolloutBatch};
use proptest::prelude::*;

/// One advantage vector's report, with the keys interned for this call only.
pub(crate) fn diagnose<S: Hash + Eq, A: Hash + Eq>(
    batch: &RolloutBatch,
    state: &[S],
    action: &[A],
    milestones: &[bool],
    advantages: &[f64],
    config: DiagnosticsConfig,
) -> Result<DiagnosticsReport, Error> {
    Diagnostics::new(batch, state, action, milestones, config)?.report(advantages)
}

/// Several named advantage vectors side by side, with the keys interned for this call only.
pub(crate) fn compare<S: Hash + Eq, A: Hash + Eq, N: AsRef<str>, V: AsRef<[f64]>>(
    batch: &RolloutBatch,
    state: &[S],
    action: &[A],
    milestones: &[bool],
    estimators: &[(N, V)],
    config: DiagnosticsConfig,
) -> Result<Comparison, Error> {
    Diagnostics::new(batch, state, action, milestones, config)?.compare(estimators)
}

/// The report of plain slices: each value its own one-step trajectory of one group, every
/// state–action pair distinct (so only ZAR, CCR and the split are informative).
fn slice_report(advantages: &[f64], milestones: &[bool], tau: f64) -> Result<DiagnosticsReport, Error> {
    let n = advantages.len();
    let batch = RolloutBatch::from_blocks(n, &vec![1; n], vec![0.0; n])?;
    let keys: Vec<usize> = (0..n).collect();
    let config = DiagnosticsConfig::default().with_zero_threshold(tau);
    diagnose(&batch, &keys, &keys, milestones, advantages, config)
}

/// ZAR over a plain slice of advantages.
pub(crate) fn zero_advantage_ratio(advantages: &[f64], tau: f64) -> Result<ZarReport, Error> {
    slice_report(advantages, &vec![false; advantages.len()], tau).map(|r| r.zar)
}

/// CCR over plain slices of advantages and milestone flags.
pub(crate) fn credit_concentration(
    advantages: &[f64],
    milestones: &[bool],
    tau: f64,
) -> Result<CcrReport, Error> {
    slice_report(advantages, milestones, tau).map(|r| r.ccr)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * (1.0 + a.abs().max(b.abs()))
}

fn close_opt(a: Option<f64>, b: Option<f64>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => close(a, b),
        (None, None) => true,
        _ => false,
    }
}

/// Ten rows in interleaved caller order; one group, trajectories A (success) and B, C, D, E
/// (failures). Columns: trajectory, state, action, advantage, milestone.
struct Case {
    traj: [&'static str; 10],
    reward: [f64; 10],
    state: [&'static str; 10],
    action: [&'static str; 10],
    adv: [f64; 10],
    ms: [bool; 10],
}

fn case() -> Case {
    Case {
        //        r0    r1    r2    r3    r4    r5    r6    r7    r8    r9
        traj: ["A", "B", "C", "A", "D", "B", "C", "A", "D", "E"],
        reward: [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0],
        state: ["s0", "s0", "s2", "s1", "s3", "s2", "s1", "s0", "s1", "s4"],
        action: ["x", "x", "z", "y", "w", "z", "y", "x", "y", "v"],
        adv: [2.0, 1.0, 3.0, 1.0, 1e-9, 0.0, 0.5, -0.5, -3.0, 0.0],
        ms: [true, false, false, false, false, true, true, false, false, false],
    }
}

fn case_batch(c: &Case) -> RolloutBatch {
    RolloutBatch::from_row_keys(&["g"; 10], &c.traj, &c.reward).unwrap()
}

#[test]
fn hand_computed_case_default_threshold() {
    let c = case();
    let batch = case_batch(&c);
    let d = Diagnostics::new(&batch, &c.state, &c.action, &c.ms, DiagnosticsConfig::default()).unwrap();
    let r = d.report(&c.adv).unwrap();

    // Pairs: (s0,x) in A (r0 +2, r7 −0.5) and B (r1 +1): shared. A counts in both A⁺ and A⁻
    // (mixed signs within one trajectory), B in A⁺: A⁺ = 2, A⁻ = 1 -> contradictory.
    // (s1,y) in A (r3 +1), C (r6 +0.5), D (r8 −3): shared, A⁺ = 2, A⁻ = 1 -> contradictory.
    // (s2,z) in C (r2 +3), B (r5 0): shared, A⁺ = 1, A⁻ = 0 -> consistent.
    // (s3,w) only D, (s4,v) only E: not shared. CAR = 2/3.
    assert_eq!(r.car.contradictory_pairs, 2);
    assert_eq!(r.car.shared_pairs, 3);
    assert_eq!(r.car.pairs_with_positive, 3);
    assert_eq!(r.car.pairs_with_negative, 2);
    assert_eq!(r.car.shared_steps, 3 + 3 + 2);
    assert_eq!(r.car.distinct_pairs, 5);
    assert!(close_opt(r.car.value, Some(2.0 / 3.0)));

    // EGR over occurrences: (s0,x) g⁺ = 2 + 1 = 3, g⁻ = 0.5 -> |2.5| of 3.5;
    // (s1,y) g⁺ = 1.5, g⁻ = 3 -> 1.5 of 4.5; (s2,z) g⁺ = 3 -> 3 of 3.
    // EGR = (2.5 + 1.5 + 3) / (3.5 + 4.5 + 3) = 7 / 11.
    assert!(close(r.egr.surviving, 7.0));
    assert!(close(r.egr.total, 11.0));
    assert!(close_opt(r.egr.value, Some(7.0 / 11.0)));

    // ZAR: r4 (1e-9 < 1e-6), r5 (0), r9 (0) -> 3 / 10.
    assert_eq!((r.zar.zero_steps, r.zar.steps), (3, 10));
    assert!(close(r.zar.value, 0.3));

    // CCR: milestones r0 |2|, r5 0, r6 0.5 -> mean 2.5/3; others r1 1, r2 3, r3 1, r4 0,
    // r7 0.5, r8 3, r9 0 -> mean 8.5/7. CCR = (2.5/3)/(8.5/7) = 17.5/25.5 = 35/51.
    assert_eq!((r.ccr.milestone_steps, r.ccr.non_milestone_steps), (3, 7));
    assert!(close(r.ccr.milestone_abs_sum, 2.5));
    assert!(close(r.ccr.non_milestone_abs_sum, 8.5));
    assert!(close_opt(r.ccr.value, Some(35.0 / 51.0)));

    // Samples: A success; B (milestone r5) and C (r6) partial; D and E no milestone.
    assert_eq!(
        (
            r.samples.full_success,
            r.samples.partial_success,
            r.samples.complete_failure,
            r.samples.trajectories
        ),
        (1, 2, 2, 5)
    );
    assert_eq!(
        d.categories(),
        [
            SampleCategory::FullSuccess,
            SampleCategory::PartialSuccess,
            SampleCategory::PartialSuccess,
            SampleCategory::CompleteFailure,
            SampleCategory::CompleteFailure
        ]
    );

    // Utilisation: A, B (r1), C, D (r8) carry signal, E (only 0) does not -> 4/5;
    // by category: full 1, partial 2, failure 1 (D).
    assert_eq!((r.utilisation.effective, r.utilisation.trajectories), (4, 5));
    assert_eq!(
        (
            r.utilisation.effective_full_success,
            r.utilisation.effective_partial_success,
            r.utilisation.effective_complete_failure
        ),
        (1, 2, 1)
    );
    assert!(close(r.utilisation.value, 0.8));
}

#[test]
fn hand_computed_case_larger_threshold() {
    let c = case();
    let batch = case_batch(&c);
    let cfg = DiagnosticsConfig::default().with_zero_threshold(0.6);
    let r = diagnose(&batch, &c.state, &c.action, &c.ms, &c.adv, cfg).unwrap();
    // With τ = 0.6, r6 (+0.5) and r7 (−0.5) become zero as well.
    // (s0,x): +2, 0, +1 -> consistent, 3 of 3. (s1,y): +1, 0, −3 -> contradictory, 2 of 4.
    // (s2,z): +3, 0 -> 3 of 3. CAR = 1/3, EGR = 8/10.
    assert_eq!(r.car.contradictory_pairs, 1);
    assert!(close_opt(r.car.value, Some(1.0 / 3.0)));
    assert!(close_opt(r.egr.value, Some(0.8)));
    // ZAR: r4, r5, r6, r7, r9 -> 5/10.
    assert_eq!(r.zar.zero_steps, 5);
    assert_eq!(r.zar.threshold, 0.6);
    // CCR: milestones 2, 0, 0 -> 2/3; others 1 + 3 + 1 + 0 + 0 + 3 + 0 = 8 over 7.
    // (2/3)/(8/7) = 14/24 = 7/12.
    assert!(close_opt(r.ccr.value, Some(7.0 / 12.0)));
    assert_eq!(r.utilisation.effective, 4);
}

#[test]
fn grpo_on_a_group_contradicts_every_shared_pair() {
    // Two trajectories take the same two first steps; one wins, one loses.
    // GRPO: R = [1, 0], μ = 0.5, σ = 0.7071, A = ±0.5/0.7071 = ±0.70711 on every step.
    let batch = RolloutBatch::from_blocks(2, &[3, 3], vec![1.0, 0.0]).unwrap();
    let flags = [true, false, true, true, false, false];
    let grpo = Beacon::new(BeaconConfig::default().with_segment_weight(0.0))
        .unwrap()
        .compute(&batch, &flags)
        .unwrap();
    let state = ["s0", "s1", "s2", "s0", "s1", "s9"];
    let action = ["a", "b", "c", "a", "b", "d"];
    let r = diagnose(
        &batch,
        &state,
        &action,
        &flags,
        &grpo.advantages,
        DiagnosticsConfig::default(),
    )
    .unwrap();
    // Shared: (s0,a), (s1,b); both get +0.707 and −0.707 -> CAR = 1, EGR = 0/4·0.707 = 0.
    assert_eq!((r.car.contradictory_pairs, r.car.shared_pairs), (2, 2));
    assert_eq!(r.egr.value, Some(0.0));
    // Every step carries |A| = 0.707: ZAR = 0, utilisation = 1, CCR = 1 (uniform).
    assert_eq!(r.zar.value, 0.0);
    assert_eq!(r.utilisation.value, 1.0);
    assert!(close_opt(r.ccr.value, Some(1.0)));
}

#[test]
fn a_pair_repeated_in_one_trajectory_only_is_not_shared() {
    // Trajectory 0 repeats (s, a) with opposite signs; trajectory 1 never takes it.
    let batch = RolloutBatch::from_blocks(2, &[2, 1], vec![1.0, 0.0]).unwrap();
    let r = diagnose(
        &batch,
        &["s", "s", "t"],
        &["a", "a", "a"],
        &[false; 3],
        &[1.0, -1.0, 1.0],
        DiagnosticsConfig::default(),
    )
    .unwrap();
    assert_eq!(r.car.shared_pairs, 0);
    assert_eq!(r.car.value, None);
    assert_eq!(r.egr.value, None);
    assert_eq!((r.egr.surviving, r.egr.total), (0.0, 0.0));
}

#[test]
fn shared_pairs_without_signal_give_car_zero_and_egr_none() {
    let batch = RolloutBatch::from_blocks(2, &[1, 1], vec![0.0, 0.0]).unwrap();
    let r = diagnose(
        &batch,
        &[0, 0],
        &[0, 0],
        &[false, false],
        &[0.0, 1e-8],
        DiagnosticsConfig::default(),
    )
    .unwrap();
    assert_eq!(r.car.shared_pairs, 1);
    assert_eq!(r.car.value, Some(0.0));
    assert_eq!(r.egr.value, None); // 0 / 0
    assert_eq!(r.zar.value, 1.0);
    assert_eq!(r.utilisation.value, 0.0);
}

#[test]
fn ccr_undefined_cases() {
    // No milestone step.
    assert_eq!(
        credit_concentration(&[1.0, 2.0], &[false, false], 1e-6)
            .unwrap()
            .value,
        None
    );
    // No non-milestone step.
    let all = credit_concentration(&[1.0, 2.0], &[true, true], 1e-6).unwrap();
    assert_eq!((all.value, all.milestone_mean), (None, Some(1.5)));
    // Non-milestone steps carry no credit: the denominator is 0.
    let zero = credit_concentration(&[1.0, 1e-9], &[true, false], 1e-6).unwrap();
    assert_eq!(zero.non_milestone_mean, Some(0.0));
    assert_eq!(zero.value, None);
    // Milestone steps with no credit: CCR = 0 is defined.
    assert_eq!(
        credit_concentration(&[0.0, 2.0], &[true, false], 1e-6)
            .unwrap()
            .value,
        Some(0.0)
    );
}

#[test]
fn empty_inputs_are_errors() {
    // A batch is never empty, so the diagnostics never measure an empty advantage vector.
    let empty: [u8; 0] = [];
    assert_eq!(
        RolloutBatch::from_row_keys(&empty, &empty, &[]),
        Err(Error::EmptyBatch)
    );
}

#[test]
fn length_mismatches_are_named() {
    let batch = RolloutBatch::from_blocks(2, &[1, 1], vec![1.0, 0.0]).unwrap();
    let cfg = DiagnosticsConfig::default();
    let what = |e: Error| match e {
        Error::LengthMismatch { what, .. } => what,
        other => panic!("unexpected {other:?}"),
    };
    assert_eq!(
        what(Diagnostics::new(&batch, &[0], &[0, 0], &[false; 2], cfg).unwrap_err()),
        "state_keys"
    );
    assert_eq!(
        what(Diagnostics::new(&batch, &[0, 0], &[0, 0, 0], &[false; 2], cfg).unwrap_err()),
        "action_keys"
    );
    assert_eq!(
        what(Diagnostics::new(&batch, &[0, 0], &[0, 0], &[false; 3], cfg).unwrap_err()),
        "milestone flags"
    );
    let d = Diagnostics::new(&batch, &[0, 0], &[0, 0], &[false; 2], cfg).unwrap();
    assert_eq!(what(d.report(&[1.0]).unwrap_err()), "advantages");
    assert_eq!(
        what(d.clone().with_success_flags(&[true]).unwrap_err()),
        "success flags"
    );
    assert_eq!(
        what(credit_concentration(&[1.0], &[true, false], 1e-6).unwrap_err()),
        "milestone flags"
    );
}

#[test]
fn non_finite_advantages_are_rejected() {
    let batch = RolloutBatch::from_blocks(1, &[3], vec![1.0]).unwrap();
    let d = Diagnostics::new(
        &batch,
        &[0; 3],
        &[0; 3],
        &[false; 3],
        DiagnosticsConfig::default(),
    )
    .unwrap();
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        assert!(matches!(
            d.report(&[0.0, 1.0, bad]),
            Err(Error::NonFinite {
                what: "advantages",
                index: 2,
                ..
            })
        ));
        assert!(matches!(
            zero_advantage_ratio(&[bad], 1e-6),
            Err(Error::NonFinite { index: 0, .. })
        ));
    }
}

#[test]
fn invalid_thresholds_are_rejected() {
    let batch = RolloutBatch::from_blocks(1, &[1], vec![1.0]).unwrap();
    for tau in [0.0, -1e-6, f64::NAN, f64::INFINITY] {
        let cfg = DiagnosticsConfig::default().with_zero_threshold(tau);
        assert!(matches!(
            Diagnostics::new(&batch, &[0], &[0], &[false], cfg),
            Err(Error::InvalidConfig {
                name: "zero_threshold",
                ..
            })
        ));
        assert!(zero_advantage_ratio(&[1.0], tau).is_err());
    }
    for s in [f64::NAN, f64::NEG_INFINITY] {
        let cfg = DiagnosticsConfig::default().with_success_threshold(s);
        assert!(matches!(
            Diagnostics::new(&batch, &[0], &[0], &[false], cfg),
            Err(Error::InvalidConfig {
                name: "success_threshold",
                ..
            })
        ));
    }
}

#[test]
fn success_is_strictly_above_the_threshold_or_given_by_flags() {
    // Rewards 0.5, 1.0, −100 (a ScienceWorld failure), 0.0; no milestones.
    let batch = RolloutBatch::from_blocks(4, &[1, 1, 1, 1], vec![0.5, 1.0, -100.0, 0.0]).unwrap();
    let split = |threshold: f64| {
        let cfg = DiagnosticsConfig::default().with_success_threshold(threshold);
        Diagnostics::new(&batch, &[0; 4], &[0; 4], &[false; 4], cfg)
            .unwrap()
            .report(&[0.0; 4])
            .unwrap()
            .samples
    };
    assert_eq!(split(0.0).full_success, 2); // 0.5 and 1.0
    assert_eq!(split(0.5).full_success, 1); // 0.5 is not > 0.5
    assert_eq!(split(-200.0).full_success, 4);
    let d = Diagnostics::new(
        &batch,
        &[0; 4],
        &[0; 4],
        &[false; 4],
        DiagnosticsConfig::default(),
    )
    .unwrap()
    .with_success_flags(&[false, false, true, false])
    .unwrap();
    assert_eq!(
        d.categories(),
        [
            SampleCategory::CompleteFailure,
            SampleCategory::CompleteFailure,
            SampleCategory::FullSuccess,
            SampleCategory::CompleteFailure
        ]
    );
}

#[test]
fn comparison_keeps_order_and_prints_a_table() {
    let c = case();
    let batch = case_batch(&c);
    let flat: Vec<f64> = c.adv.iter().map(|a| a.abs() + 1.0).collect();
    let cmp = compare(
        &batch,
        &c.state,
        &c.action,
        &c.ms,
        &[("hand", &c.adv[..]), ("all positive", &flat[..])],
        DiagnosticsConfig::default(),
    )
    .unwrap();
    assert_eq!(cmp.entries.len(), 2);
    assert_eq!(cmp.entries[0].0, "hand");
    assert_eq!(cmp.entries[1].1.car.value, Some(0.0));
    assert_eq!(cmp.entries[1].1.egr.value, Some(1.0));
    assert_eq!(cmp.distinct_pairs, 5);
    assert_eq!(cmp.samples.partial_success, 2);

    let text = cmp.to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(lines[0].starts_with("estimator"));
    assert!(lines[0].contains("CAR") && lines[0].contains("utilisation"));
    // hand: CAR 2/3, EGR 7/11 = 0.636, ZAR 3/10, CCR 35/51 = 0.686, utilisation 4/5.
    assert!(lines[1].starts_with("hand"));
    for cell in ["0.667 (2/3)", "0.636", "0.300 (3/10)", "0.686", "0.800 (4/5)"] {
        assert!(lines[1].contains(cell), "{cell} missing in {}", lines[1]);
    }
    assert!(lines[2].starts_with("all positive"));
    assert!(lines[3].contains("5 = 1 full success + 2 partial success + 2 complete failure"));
    assert!(lines[3].contains("3 of 5 distinct"));

    // An undefined metric prints as n/a.
    let none = compare(
        &batch,
        &c.traj,
        &c.action,
        &[false; 10],
        &[("x", c.adv)],
        DiagnosticsConfig::default(),
    )
    .unwrap();
    assert!(none.to_string().lines().nth(1).unwrap().contains("n/a"));
}

#[test]
fn a_comparison_without_estimators_still_counts_the_shared_pairs() {
    // The hand case has 3 shared pairs of 5 distinct (see hand_computed_case_default_threshold).
    // The old footer read |S_shared| from the first entry's CAR, so with no entry it printed
    // "0 of 5 distinct".
    let c = case();
    let batch = case_batch(&c);
    let d = Diagnostics::new(&batch, &c.state, &c.action, &c.ms, DiagnosticsConfig::default()).unwrap();
    let empty = d.compare::<&str, &[f64]>(&[]).unwrap();
    assert!(empty.entries.is_empty());
    assert_eq!((empty.shared_pairs, empty.distinct_pairs), (3, 5));
    assert!(
        empty.to_string().contains("shared (s, a) pairs: 3 of 5 distinct"),
        "{empty}"
    );
    let one = d.compare(&[("hand", c.adv)]).unwrap();
    assert_eq!(one.shared_pairs, one.entries[0].1.car.shared_pairs);
}

#[test]
fn comparison_reports_the_first_bad_estimator() {
    let batch = RolloutBatch::from_blocks(2, &[1, 1], vec![1.0, 0.0]).unwrap();
    let err = compare(
        &batch,
        &[0, 0],
        &[0, 0],
        &[false; 2],
        &[("ok", vec![1.0, 1.0]), ("short", vec![1.0])],
        DiagnosticsConfig::default(),
    )
    .unwrap_err();
    // The error names the estimator and carries the underlying one.
    assert_eq!(
        err.to_string(),
        "estimator short: length mismatch: advantages has 1 entries, expected 2"
    );
    assert!(matches!(err, Error::Estimator { ref name, ref source }
        if name == "short" && matches!(**source, Error::LengthMismatch { actual: 1, .. })));
}

#[cfg(feature = "serde")]
#[test]
fn reports_round_trip_through_json() {
    let c = case();
    let batch = case_batch(&c);
    let cmp = compare(
        &batch,
        &c.state,
        &c.action,
        &c.ms,
        &[("hand", c.adv)],
        DiagnosticsConfig::default(),
    )
    .unwrap();
    let json = serde_json::to_string(&cmp).unwrap();
    assert!(json.contains("\"contradictory_pairs\":2"));
    assert!(json.contains("\"shared_pairs\":3"));
    let back: beacon_rl::diagnostics::Comparison = serde_json::from_str(&json).unwrap();
    assert_eq!(back, cmp);
    // None serialises as null, not NaN. With the trajectory as state key no pair is shared.
    let none = diagnose(
        &batch,
        &c.traj,
        &c.action,
        &c.ms,
        &c.adv,
        DiagnosticsConfig::default(),
    )
    .unwrap();
    let v: serde_json::Value = serde_json::to_value(none).unwrap();
    assert_eq!(v["car"]["shared_pairs"], 0);
    assert!(v["car"]["value"].is_null());
    assert!(v["egr"]["value"].is_null());
    let cfg: DiagnosticsConfig = serde_json::from_str(r#"{"zero_threshold": 0.001}"#).unwrap();
    assert_eq!(cfg.success_threshold, 0.0);
    assert!(serde_json::from_str::<DiagnosticsConfig>(r#"{"zero": 1}"#).is_err());
}

// ---------------------------------------------------------------------------------------------
// Properties

/// One step: state, action, advantage, milestone.
type Step = (u8, u8, f64, bool);
/// One trajectory: terminal reward and steps.
type Traj = (f64, Vec<Step>);

fn adv_strategy() -> impl Strategy<Value = f64> {
    prop_oneof![Just(0.0), Just(1e-9), Just(-1e-9), -3.0..3.0f64]
}

fn step_strategy() -> impl Strategy<Value = Step> {
    (0u8..4, 0u8..2, adv_strategy(), prop::bool::weighted(0.3))
}

fn batch_strategy() -> impl Strategy<Value = Vec<Vec<Traj>>> {
    prop::collection::vec(
        prop::collection::vec(
            (
                prop_oneof![Just(0.0), Just(1.0)],
                prop::collection::vec(step_strategy(), 1..8),
            ),
            1..5,
        ),
        1..3,
    )
}

/// Flattened rows: (group, trajectory id, reward, state key, action, advantage, milestone).
type Row = (usize, usize, f64, (usize, u8), u8, f64, bool);

fn flatten(groups: &[Vec<Traj>]) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut id = 0;
    for (g, trajs) in groups.iter().enumerate() {
        for (reward, steps) in trajs {
            for &(s, a, adv, ms) in steps {
                rows.push((g, id, *reward, (g, s), a, adv, ms));
            }
            id += 1;
        }
    }
    rows
}

struct Columns {
    batch: RolloutBatch,
    state: Vec<(usize, u8)>,
    action: Vec<u8>,
    adv: Vec<f64>,
    ms: Vec<bool>,
}

fn columns(rows: &[Row]) -> Columns {
    let g: Vec<usize> = rows.iter().map(|r| r.0).collect();
    let t: Vec<usize> = rows.iter().map(|r| r.1).collect();
    let rew: Vec<f64> = rows.iter().map(|r| r.2).collect();
    Columns {
        batch: RolloutBatch::from_row_keys(&g, &t, &rew).unwrap(),
        state: rows.iter().map(|r| r.3).collect(),
        action: rows.iter().map(|r| r.4).collect(),
        adv: rows.iter().map(|r| r.5).collect(),
        ms: rows.iter().map(|r| r.6).collect(),
    }
}

/// Brute-force CAR and EGR straight from the appendix's definitions: for each pair, the set of
/// trajectories, the sets of trajectories with a positive / negative occurrence, and the
/// summed magnitudes.
fn oracle_car_egr(rows: &[Row], tau: f64) -> (usize, usize, f64, f64) {
    #[derive(Default)]
    struct P {
        trajs: BTreeSet<usize>,
        plus: BTreeSet<usize>,
        minus: BTreeSet<usize>,
        g_plus: f64,
        g_minus: f64,
    }
    let mut pairs: BTreeMap<((usize, u8), u8), P> = BTreeMap::new();
    for &(_, t, _, s, a, adv, _) in rows {
        let p = pairs.entry((s, a)).or_default();
        p.trajs.insert(t);
        if adv >= tau {
            p.plus.insert(t);
            p.g_plus += adv;
        } else if adv <= -tau {
            p.minus.insert(t);
            p.g_minus += -adv;
        }
    }
    let (mut contradictory, mut shared, mut num, mut den) = (0, 0, 0.0, 0.0);
    for p in pairs.values().filter(|p| p.trajs.len() >= 2) {
        shared += 1;
        if !p.plus.is_empty() && !p.minus.is_empty() {
            contradictory += 1;
        }
        num += (p.g_plus - p.g_minus).abs();
        den += p.g_plus + p.g_minus;
    }
    (contradictory, shared, num, den)
}

/// Brute-force CCR sums, sample split and utilisation from the rows alone (no batch):
/// (Σ|A| milestone, milestone steps, Σ|A| other, other steps), [full, partial, failure] and
/// [effective, effective full, effective partial, effective failure].
fn oracle_ccr_split_utilisation(
    rows: &[Row],
    tau: f64,
) -> ((f64, usize, f64, usize), [usize; 3], [usize; 4]) {
    let mag = |a: f64| if a.abs() < tau { 0.0 } else { a.abs() };
    let mut ccr = (0.0, 0, 0.0, 0);
    // trajectory id -> (success, has milestone, has signal)
    let mut trajs: BTreeMap<usize, (bool, bool, bool)> = BTreeMap::new();
    for &(_, t, reward, _, _, adv, ms) in rows {
        if ms {
            ccr.0 += mag(adv);
            ccr.1 += 1;
        } else {
            ccr.2 += mag(adv);
            ccr.3 += 1;
        }
        let e = trajs.entry(t).or_insert((reward > 0.0, false, false));
        e.1 |= ms;
        e.2 |= adv.abs() >= tau;
    }
    let (mut split, mut util) = ([0; 3], [0; 4]);
    for &(success, milestone, signal) in trajs.values() {
        let k = if success {
            0
        } else if milestone {
            1
        } else {
            2
        };
        split[k] += 1;
        if signal {
            util[0] += 1;
            util[k + 1] += 1;
        }
    }
    (ccr, split, util)
}

proptest! {
    #[test]
    fn ccr_split_and_utilisation_match_brute_force_on_shuffled_rows(
        (groups, perm) in batch_strategy().prop_flat_map(|g| {
            let n = flatten(&g).len();
            (Just(g), Just((0..n).collect::<Vec<usize>>()).prop_shuffle())
        })
    ) {
        // Shuffled caller rows, so internal steps and caller rows differ: a metric that read
        // advantages or flags by internal step index would attribute them to the wrong
        // trajectory (reading `trajectory_steps(j)` instead of `trajectory_rows(j)` in
        // `utilisation` fails here).
        let rows: Vec<Row> = perm.iter().map(|&i| flatten(&groups)[i]).collect();
        let c = columns(&rows);
        let cfg = DiagnosticsConfig::default();
        let r = diagnose(&c.batch, &c.state, &c.action, &c.ms, &c.adv, cfg).unwrap();
        let ((ms_sum, ms_n, other_sum, other_n), split, util) =
            oracle_ccr_split_utilisation(&rows, cfg.zero_threshold);
        prop_assert_eq!((r.ccr.milestone_steps, r.ccr.non_milestone_steps), (ms_n, other_n));
        prop_assert!((r.ccr.milestone_abs_sum - ms_sum).abs() < 1e-9);
        prop_assert!((r.ccr.non_milestone_abs_sum - other_sum).abs() < 1e-9);
        prop_assert_eq!(
            [r.samples.full_success, r.samples.partial_success, r.samples.complete_failure],
            split
        );
        prop_assert_eq!(
            [
                r.utilisation.effective,
                r.utilisation.effective_full_success,
                r.utilisation.effective_partial_success,
                r.utilisation.effective_complete_failure
            ],
            util
        );
    }

    #[test]
    fn metrics_match_the_definitions_and_stay_in_range(groups in batch_strategy()) {
        let rows = flatten(&groups);
        let c = columns(&rows);
        let cfg = DiagnosticsConfig::default();
        let r = diagnose(&c.batch, &c.state, &c.action, &c.ms, &c.adv, cfg).unwrap();

        let (contradictory, shared, num, den) = oracle_car_egr(&rows, cfg.zero_threshold);
        prop_assert_eq!(r.car.contradictory_pairs, contradictory);
        prop_assert_eq!(r.car.shared_pairs, shared);
        prop_assert!((r.egr.surviving - num).abs() < 1e-9 && (r.egr.total - den).abs() < 1e-9);
        if let Some(car) = r.car.value {
            prop_assert!((0.0..=1.0).contains(&car));
        } else {
            prop_assert_eq!(shared, 0);
        }
        if let Some(egr) = r.egr.value {
            prop_assert!((0.0..=1.0 + 1e-12).contains(&egr));
        }

        // ZAR + fraction of non-zero steps = 1.
        let nonzero = c.adv.iter().filter(|a| a.abs() >= cfg.zero_threshold).count();
        prop_assert_eq!(r.zar.zero_steps + nonzero, r.zar.steps);
        prop_assert!((r.zar.value + nonzero as f64 / rows.len() as f64 - 1.0).abs() < 1e-12);
        prop_assert!((0.0..=1.0).contains(&r.utilisation.value));
        prop_assert_eq!(
            r.samples.full_success + r.samples.partial_success + r.samples.complete_failure,
            r.samples.trajectories
        );
    }

    #[test]
    fn grpo_style_advantages_contradict_pairs_shared_by_success_and_failure(
        wins in 1usize..4,
        losses in 1usize..4,
        pool in prop::collection::vec((0u8..8, 0u8..3), 1..6),
        extra in prop::collection::vec(0usize..3, 7),
        order_seed in any::<u64>(),
    ) {
        // Every trajectory takes every pool pair (in a rotated order), plus some steps whose
        // pair is unique to it, so every shared pair appears in a success and a failure.
        let n = wins + losses;
        let rewards: Vec<f64> = (0..n).map(|i| if i < wins { 1.0 } else { 0.0 }).collect();
        let mean = wins as f64 / n as f64;
        let sd = (rewards.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / (n as f64 - 1.0)).sqrt();
        let (mut traj, mut state, mut action, mut adv, mut rew) = (vec![], vec![], vec![], vec![], vec![]);
        for (i, &r) in rewards.iter().enumerate() {
            let a = (r - mean) / (sd + 1e-6); // GRPO: > 0 for wins, < 0 for losses
            let rot = (order_seed as usize).wrapping_add(i) % pool.len();
            let mut keys: Vec<(i64, u8)> = pool.iter().cycle().skip(rot).take(pool.len())
                .map(|&(s, a)| (i64::from(s), a)).collect();
            for u in 0..extra[i % extra.len()] {
                keys.push((-1 - (i * 10 + u) as i64, 0)); // unique to this trajectory
            }
            for (s, act) in keys {
                traj.push(i);
                state.push(s);
                action.push(act);
                adv.push(a);
                rew.push(r);
            }
        }
        let batch = RolloutBatch::from_row_keys(&vec![0; traj.len()], &traj, &rew).unwrap();
        let ms = vec![false; traj.len()];
        let r = diagnose(&batch, &state, &action, &ms, &adv, DiagnosticsConfig::default()).unwrap();
        prop_assert!(r.car.shared_pairs >= 1);
        prop_assert_eq!(r.car.value, Some(1.0));
        prop_assert_eq!(r.utilisation.value, 1.0);
    }

    #[test]
    fn same_sign_everywhere_gives_car_zero_and_egr_one(
        groups in batch_strategy(),
        sign in prop_oneof![Just(1.0), Just(-1.0)],
        mags in prop::collection::vec(1e-3..5.0f64, 64),
    ) {
        let mut rows = flatten(&groups);
        // Force a pair shared by the first two trajectories (adding one if there is only one).
        if rows.iter().all(|r| r.1 == 0) {
            rows.push((0, 1, 0.0, (0, 0), 0, 0.0, false));
        }
        for r in rows.iter_mut() {
            if r.1 <= 1 {
                r.3 = (0, 99);
                r.4 = 99;
            }
        }
        for (i, r) in rows.iter_mut().enumerate() {
            r.5 = sign * mags[i % mags.len()];
        }
        let c = columns(&rows);
        let r = diagnose(&c.batch, &c.state, &c.action, &c.ms, &c.adv, DiagnosticsConfig::default()).unwrap();
        prop_assert!(r.car.shared_pairs >= 1);
        prop_assert_eq!(r.car.value, Some(0.0));
        prop_assert!((r.egr.value.unwrap() - 1.0).abs() < 1e-12);
        prop_assert_eq!(r.zar.value, 0.0);
    }

    #[test]
    fn reports_do_not_depend_on_row_order(
        (groups, perm) in batch_strategy().prop_flat_map(|g| {
            let n = flatten(&g).len();
            (Just(g), Just((0..n).collect::<Vec<usize>>()).prop_shuffle())
        })
    ) {
        let rows = flatten(&groups);
        let shuffled: Vec<Row> = perm.iter().map(|&i| rows[i]).collect();
        // Row order within a trajectory is step order, which the shuffle may change; the
        // metrics do not depend on step order.
        let a = columns(&rows);
        let b = columns(&shuffled);
        let cfg = DiagnosticsConfig::default();
        let ra = diagnose(&a.batch, &a.state, &a.action, &a.ms, &a.adv, cfg).unwrap();
        let rb = diagnose(&b.batch, &b.state, &b.action, &b.ms, &b.adv, cfg).unwrap();
        prop_assert_eq!(ra.car, rb.car);
        prop_assert!(close_opt(ra.egr.value, rb.egr.value));
        prop_assert_eq!(ra.zar, rb.zar);
        prop_assert!((ra.ccr.milestone_abs_sum - rb.ccr.milestone_abs_sum).abs() < 1e-9);
        prop_assert_eq!(ra.samples, rb.samples);
        prop_assert_eq!(ra.utilisation, rb.utilisation);
    }
}
