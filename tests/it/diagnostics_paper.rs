//! The diagnostics on small cases derived by hand from the paper's definitions (appendix
//! "Diagnostic Metrics", §5.3 "Analysis") and DESIGN.md §7, independently of the crate's code.
//! Each case is built so that the plausible misreadings (normalising by distinct pairs or by
//! occurrences, netting per trajectory, counting unshared pairs, a ratio of sums for CCR,
//! utilisation over steps, a strict threshold) give a different number; the comments say
//! which.

use crate::diagnostics::{credit_concentration, zero_advantage_ratio};
use beacon_rl::diagnostics::{Diagnostics, DiagnosticsConfig, SampleCategory};
use beacon_rl::RolloutBatch;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * (1.0 + a.abs().max(b.abs()))
}

/// Two groups, five trajectories, twelve rows (trajectory-major). The state key carries the
/// group, as `Diagnostics::new` advises, so (g2, s0) is not (g1, s0).
///
/// | row | group | traj | R | state | action | A     | milestone |
/// |-----|-------|------|---|-------|--------|-------|-----------|
/// | 0   | g1    | P    | 1 | s0    | a      | +1    | yes       |
/// | 1   | g1    | P    | 1 | s1    | b      | +1    |           |
/// | 2   | g1    | P    | 1 | s2    | c      | +2    | yes       |
/// | 3   | g1    | Q    | 0 | s0    | a      | −0.5  | yes       |
/// | 4   | g1    | Q    | 0 | s1    | b      | +0.5  |           |
/// | 5   | g1    | Q    | 0 | s9    | z      | −4    |           |
/// | 6   | g1    | S    | 0 | s1    | b      | +0.5  |           |
/// | 7   | g1    | S    | 0 | s1    | b      | −0.5  |           |
/// | 8   | g1    | S    | 0 | s3    | d      | 0     |           |
/// | 9   | g2    | U    | 0 | s0    | a      | 0     |           |
/// | 10  | g2    | U    | 0 | s4    | e      | 0     |           |
/// | 11  | g2    | V    | 0 | s4    | e      | 0     |           |
#[test]
fn every_metric_on_a_two_group_case_follows_the_paper() {
    let group = [
        "g1", "g1", "g1", "g1", "g1", "g1", "g1", "g1", "g1", "g2", "g2", "g2",
    ];
    let traj = ["P", "P", "P", "Q", "Q", "Q", "S", "S", "S", "U", "U", "V"];
    let reward = [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
    let state: Vec<(&str, &str)> = group
        .iter()
        .zip([
            "s0", "s1", "s2", "s0", "s1", "s9", "s1", "s1", "s3", "s0", "s4", "s4",
        ])
        .map(|(&g, s)| (g, s))
        .collect();
    let action = ["a", "b", "c", "a", "b", "z", "b", "b", "d", "a", "e", "e"];
    let adv = [1.0, 1.0, 2.0, -0.5, 0.5, -4.0, 0.5, -0.5, 0.0, 0.0, 0.0, 0.0];
    let ms = [
        true, false, true, true, false, false, false, false, false, false, false, false,
    ];
    let batch = RolloutBatch::from_row_keys(&group, &traj, &reward).unwrap();
    let diag = Diagnostics::new(&batch, &state, &action, &ms, DiagnosticsConfig::default()).unwrap();
    let r = diag.report(&adv).unwrap();

    // S_shared = pairs in ≥ 2 trajectories: ((g1,s0),a) in P, Q; ((g1,s1),b) in P, Q, S;
    // ((g2,s4),e) in U, V. Not shared: ((g1,s2),c) P, ((g1,s9),z) Q, ((g1,s3),d) S and
    // ((g2,s0),a) U (another group's s0). |S_shared| = 3 of 7 distinct pairs.
    // CAR indicator: ((g1,s0),a) A⁺ = 1 (P), A⁻ = 1 (Q): 1. ((g1,s1),b) A⁺ = 3 (P, Q, S),
    // A⁻ = 1 (S): 1. ((g2,s4),e) A⁺ = A⁻ = 0: 0. CAR = 2/3 (over distinct pairs it would be
    // 2/7; weighting by occurrences, (2 + 4)/(2 + 4 + 2) = 3/4).
    assert_eq!((r.car.contradictory_pairs, r.car.shared_pairs), (2, 3));
    assert_eq!(r.car.distinct_pairs, 7);
    assert_eq!(r.car.shared_steps, 2 + 4 + 2);
    assert_eq!(r.car.value, Some(2.0 / 3.0));

    // EGR over the same pairs, g± summed over occurrences: ((g1,s0),a) g⁺ 1, g⁻ 0.5 → 0.5 of
    // 1.5; ((g1,s1),b) g⁺ 1 + 0.5 + 0.5 = 2, g⁻ 0.5 → 1.5 of 2.5; ((g2,s4),e) 0 of 0.
    // EGR = 2 / 4 = 0.5. (With the unshared pairs' 2 and 4: 8/10. Netting S's ±0.5 per
    // trajectory first: 2/3.)
    assert_eq!((r.egr.surviving, r.egr.total), (2.0, 4.0));
    assert_eq!(r.egr.value, Some(0.5));

    // ZAR over all 12 steps: rows 8, 9, 10, 11 are 0: 4/12.
    assert_eq!((r.zar.zero_steps, r.zar.steps), (4, 12));
    assert_eq!(r.zar.value, 1.0 / 3.0);

    // CCR = mean |A| on milestone rows (0, 2, 3: 1 + 2 + 0.5 = 3.5 over 3) / mean |A| on the
    // other nine (1 + 0.5 + 4 + 0.5 + 0.5 = 6.5 over 9) = (3.5/3)/(6.5/9) = 21/13. (A ratio of
    // sums would give 7/13.)
    assert_eq!((r.ccr.milestone_steps, r.ccr.non_milestone_steps), (3, 9));
    assert_eq!((r.ccr.milestone_abs_sum, r.ccr.non_milestone_abs_sum), (3.5, 6.5));
    assert!(close(r.ccr.value.unwrap(), 21.0 / 13.0), "{:?}", r.ccr.value);

    // Samples: P succeeds (R = 1 > 0); Q failed after a milestone (row 3): partial; S, U, V
    // failed without one: complete failures.
    assert_eq!(
        diag.categories(),
        [
            SampleCategory::FullSuccess,
            SampleCategory::PartialSuccess,
            SampleCategory::CompleteFailure,
            SampleCategory::CompleteFailure,
            SampleCategory::CompleteFailure
        ]
    );
    assert_eq!(
        (
            r.samples.full_success,
            r.samples.partial_success,
            r.samples.complete_failure
        ),
        (1, 1, 3)
    );

    // Utilisation over trajectories: P, Q, S have a non-zero step, U and V do not: 3/5 (over
    // steps it would be 8/12). By category: the success, the partial success and S.
    assert_eq!((r.utilisation.effective, r.utilisation.trajectories), (3, 5));
    assert_eq!(r.utilisation.value, 0.6);
    assert_eq!(
        (
            r.utilisation.effective_full_success,
            r.utilisation.effective_partial_success,
            r.utilisation.effective_complete_failure
        ),
        (1, 1, 1)
    );
}

/// |A| = τ is signal and |A| < τ is none, in every metric alike (module docs, "Zero
/// convention"). τ = 0.25 so that every value is exact.
///
/// Rows: X (R = 1) row 0 = (s, a) +0.25, milestone; Y (R = 0) row 1 = (s, a) −0.25, row 2 =
/// (t, b) +0.125.
///
/// Mutations this catches (both passed every other diagnostics test): ZAR counting
/// |A| ≤ τ as zero (`zar_unchecked`), and utilisation requiring |A| > τ (`utilisation`).
#[test]
fn advantages_exactly_at_the_threshold_count_as_signal_everywhere() {
    let tau = 0.25;
    let batch = RolloutBatch::from_row_keys(&[0; 3], &["X", "Y", "Y"], &[1.0, 0.0, 0.0]).unwrap();
    let adv = [0.25, -0.25, 0.125];
    let ms = [true, false, false];
    let cfg = DiagnosticsConfig::default().with_zero_threshold(tau);
    let diag = Diagnostics::new(&batch, &["s", "s", "t"], &["a", "a", "b"], &ms, cfg).unwrap();
    let r = diag.report(&adv).unwrap();

    // (s, a) is shared by X (+τ: positive) and Y (−τ: negative): contradictory, CAR = 1/1;
    // g⁺ = g⁻ = 0.25: EGR = 0 / 0.5 = 0.
    assert_eq!((r.car.contradictory_pairs, r.car.shared_pairs), (1, 1));
    assert_eq!((r.egr.surviving, r.egr.total, r.egr.value), (0.0, 0.5, Some(0.0)));
    // Only row 2 (0.125 < τ) is zero: ZAR = 1/3 (with ≤: 3/3).
    assert_eq!((r.zar.zero_steps, r.zar.steps), (1, 3));
    // X's only step is +τ and Y's only signed step −τ: both carry signal, 2/2 (with >: 0/2).
    assert_eq!((r.utilisation.effective, r.utilisation.trajectories), (2, 2));
    // CCR: milestone mean 0.25; others (0.25 + 0, row 2 zeroed) / 2 = 0.125: CCR = 2 (without
    // the zeroing, 0.25 / 0.1875 = 4/3).
    assert_eq!(r.ccr.value, Some(2.0));

    // The slice functions apply the same threshold.
    assert_eq!(zero_advantage_ratio(&adv, tau).unwrap().zero_steps, 1);
    assert_eq!(credit_concentration(&adv, &ms, tau).unwrap().value, Some(2.0));
}
