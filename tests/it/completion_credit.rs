//! Properties of BEACON's completion credit (`SegmentBaseline::Entered`), checked with
//! proptest against a literal transcription of its definition.

use beacon_rl::estimator::{Beacon, BeaconConfig, SegmentBaseline};
use beacon_rl::RolloutBatch;
use proptest::prelude::*;

/// One group: per trajectory (terminal reward, milestone flags).
type Group = Vec<(f64, Vec<bool>)>;

fn batch_strategy() -> impl Strategy<Value = Vec<Group>> {
    let traj = (
        prop_oneof![Just(0.0), Just(1.0), -2.0..2.0f64],
        prop::collection::vec(prop::bool::weighted(0.3), 1..12),
    );
    prop::collection::vec(prop::collection::vec(traj, 1..6), 1..4)
}

fn build(groups: &[Group]) -> (RolloutBatch, Vec<bool>) {
    let (mut group_offsets, mut traj_offsets) = (vec![0], vec![0]);
    let (mut rewards, mut flags) = (Vec::new(), Vec::new());
    for g in groups {
        for (r, f) in g {
            rewards.push(*r);
            flags.extend_from_slice(f);
            traj_offsets.push(flags.len());
        }
        group_offsets.push(rewards.len());
    }
    let batch = RolloutBatch::from_offsets(group_offsets, traj_offsets, rewards).unwrap();
    (batch, flags)
}

fn entered(milestone_reward: f64, decay: f64) -> BeaconConfig {
    BeaconConfig::default()
        .with_milestone_reward(milestone_reward)
        .with_segment_decay(decay)
        .with_segment_baseline(SegmentBaseline::Entered)
}

/// A^seg by the definition, one group and one segment at a time (0-indexed steps, segment ids
/// 0-based): segment k of trajectory j is the steps after its k-th milestone up to and
/// including its (k+1)-th; r_t = R_ms·γ^(t_k − t) when that milestone exists, else 0;
/// E_k = the trajectories with a step in segment k; v_k^(j) = mean of r over those steps;
/// b_k = mean of v_k over E_k; A^seg = r_t − b_k on every step.
fn entered_reference(groups: &[Group], c: &BeaconConfig) -> Vec<f64> {
    let mut out = Vec::new();
    for g in groups {
        // (segment id, shaped reward) per step of each trajectory.
        let steps: Vec<Vec<(usize, f64)>> = g
            .iter()
            .map(|(_, f)| {
                let mut v = Vec::new();
                let mut start = 0;
                let mut k = 0;
                for (t, &milestone) in f.iter().enumerate() {
                    if milestone {
                        for u in start..=t {
                            v.push((k, c.milestone_reward * c.segment_decay.powi((t - u) as i32)));
                        }
                        start = t + 1;
                        k += 1;
                    }
                }
                v.extend((start..f.len()).map(|_| (k, 0.0)));
                v
            })
            .collect();
        let max_k = steps.iter().flatten().map(|s| s.0 + 1).max().unwrap_or(0);
        let b: Vec<f64> = (0..max_k)
            .map(|k| {
                let v: Vec<f64> = steps
                    .iter()
                    .filter_map(|tr| {
                        let seg: Vec<f64> = tr.iter().filter(|s| s.0 == k).map(|s| s.1).collect();
                        (!seg.is_empty()).then(|| seg.iter().sum::<f64>() / seg.len() as f64)
                    })
                    .collect();
                v.iter().sum::<f64>() / v.len() as f64
            })
            .collect();
        out.extend(steps.iter().flatten().map(|&(k, r)| r - b[k]));
    }
    out
}

proptest! {
    /// The estimator equals the definition for any R_ms and γ ∈ [0, 1].
    #[test]
    fn entered_matches_its_definition(
        groups in batch_strategy(),
        milestone_reward in prop_oneof![Just(1.0), Just(10.0), 0.01..20.0f64],
        decay in prop_oneof![Just(0.0), Just(1.0), Just(0.95), 0.0..=1.0f64],
    ) {
        let (batch, flags) = build(&groups);
        let c = entered(milestone_reward, decay);
        let out = Beacon::new(c).unwrap().compute(&batch, &flags).unwrap();
        let want = entered_reference(&groups, &c);
        for (s, (a, b)) in out.segment_advantages.iter().zip(&want).enumerate() {
            prop_assert!((a - b).abs() <= 1e-9 * b.abs().max(1.0), "step {s}: {a} vs {b}");
        }
    }

    /// Σ_{j∈E_k} mean_{t∈Seg_k^(j)} A^seg = 0 for every segment k, finished or not: completion
    /// credit is a comparison among the rollouts that entered the segment.
    #[test]
    fn entered_baseline_is_zero_sum(groups in batch_strategy(), decay in 0.0..=1.0f64) {
        let (batch, flags) = build(&groups);
        let out = Beacon::new(entered(1.0, decay)).unwrap().compute(&batch, &flags).unwrap();
        for g in 0..batch.num_groups() {
            let mut sums: Vec<f64> = Vec::new();
            for j in batch.group_trajectories(g) {
                let steps = crate::common::trajectory_steps(&batch, j);
                let last = out.segments[steps.end - 1];
                for k in 0..=last {
                    let seg: Vec<usize> = steps.clone().filter(|&s| out.segments[s] == k).collect();
                    let mean = seg.iter().map(|&s| out.segment_advantages[s]).sum::<f64>() / seg.len() as f64;
                    if sums.len() <= k { sums.resize(k + 1, 0.0); }
                    sums[k] += mean;
                }
            }
            for s in sums {
                prop_assert!(s.abs() < 1e-9, "segment sum {s}");
            }
        }
    }

    /// Completing a segment always ranks above not completing it: in every group and segment,
    /// each finished rollout's mean A^seg exceeds each unfinished one's (which is −b_k ≤ 0).
    #[test]
    fn completion_ranks_above_non_completion(groups in batch_strategy(), decay in 0.0..=1.0f64) {
        let (batch, flags) = build(&groups);
        let out = Beacon::new(entered(1.0, decay)).unwrap().compute(&batch, &flags).unwrap();
        for g in 0..batch.num_groups() {
            // (segment id, finished, mean A^seg) of every segment in the group.
            let mut segs = Vec::new();
            for j in batch.group_trajectories(g) {
                let steps = crate::common::trajectory_steps(&batch, j);
                let last = out.segments[steps.end - 1];
                for k in 0..=last {
                    let seg: Vec<usize> = steps.clone().filter(|&s| out.segments[s] == k).collect();
                    let finished = seg.iter().any(|&s| flags[s]);
                    let mean = seg.iter().map(|&s| out.segment_advantages[s]).sum::<f64>() / seg.len() as f64;
                    if !finished {
                        prop_assert!(seg.iter().all(|&s| out.segment_advantages[s] <= 0.0));
                    }
                    segs.push((k, finished, mean));
                }
            }
            for &(k, _, done) in segs.iter().filter(|s| s.1) {
                for &(_, _, quit) in segs.iter().filter(|s| s.0 == k && !s.1) {
                    prop_assert!(done > quit, "segment {k}: finished {done} <= unfinished {quit}");
                }
            }
        }
    }

    /// With no unfinished segment anywhere (every rollout ends on a milestone) E_k = G_k:
    /// the paper's numbers, bit for bit. And the trajectory term never changes.
    #[test]
    fn entered_is_the_paper_without_unfinished_segments(mut groups in batch_strategy(), decay in 0.0..=1.0f64) {
        let (batch, flags) = build(&groups);
        let paper = BeaconConfig::default().with_segment_decay(decay);
        let a = Beacon::new(paper).unwrap().compute(&batch, &flags).unwrap();
        let b = Beacon::new(entered(1.0, decay)).unwrap().compute(&batch, &flags).unwrap();
        prop_assert_eq!(a.trajectory_advantages, b.trajectory_advantages);
        for g in &mut groups {
            for (_, f) in g.iter_mut() {
                *f.last_mut().unwrap() = true;
            }
        }
        let (batch, flags) = build(&groups);
        let a = Beacon::new(paper).unwrap().compute(&batch, &flags).unwrap();
        let b = Beacon::new(entered(1.0, decay)).unwrap().compute(&batch, &flags).unwrap();
        prop_assert_eq!(a, b);
    }
}

#[cfg(feature = "serde")]
#[test]
fn selected_by_name_and_by_serde_and_refused_with_the_official_flavour() {
    use beacon_rl::estimator::EstimatorConfig;
    use beacon_rl::Error;
    let want = EstimatorConfig::Beacon(entered(1.0, 0.95));
    assert_eq!(
        "beacon:segment_baseline=entered"
            .parse::<EstimatorConfig>()
            .unwrap(),
        want
    );
    assert_eq!(want.to_string(), "beacon:segment_baseline=entered");
    let json: EstimatorConfig =
        serde_json::from_str(r#"{"adv_estimator":"beacon","segment_baseline":"entered"}"#).unwrap();
    assert_eq!(json, want);
    // Serialised, the option round-trips; the paper's default is written as every key is, and
    // the string form leaves it out.
    let text = serde_json::to_string(&want).unwrap();
    assert!(text.contains(r#""segment_baseline":"entered""#), "{text}");
    assert_eq!(serde_json::from_str::<EstimatorConfig>(&text).unwrap(), want);
    let paper = EstimatorConfig::Beacon(BeaconConfig::default());
    assert!(serde_json::to_string(&paper)
        .unwrap()
        .contains(r#""segment_baseline":"completed""#));
    assert_eq!(paper.to_string(), "beacon");
    // An unknown value is a parse error, the official flavour a typed config error.
    assert!(serde_json::from_str::<EstimatorConfig>(
        r#"{"adv_estimator":"beacon","segment_baseline":"all"}"#
    )
    .is_err());
    let official: EstimatorConfig =
        serde_json::from_str(r#"{"adv_estimator":"beacon_official","segment_baseline":"entered"}"#).unwrap();
    assert!(matches!(
        official.build().err(),
        Some(Error::InvalidConfig {
            name: "segment_baseline",
            ..
        })
    ));
}
