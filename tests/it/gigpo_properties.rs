//! GiGPO: hand-computed cases (arithmetic in the comments), input/config validation, and
//! proptest properties.

use crate::difflib_reference::ratio;
use beacon_rl::estimator::{Gigpo, GigpoConfig, GigpoOutput, NormMode, StepGrouping};
use beacon_rl::{Error, RolloutBatch};
use proptest::prelude::*;

fn gigpo(cfg: GigpoConfig) -> Gigpo {
    Gigpo::new(cfg).unwrap()
}

fn sim(threshold: f64) -> GigpoConfig {
    GigpoConfig::default().with_grouping(StepGrouping::Similarity { threshold })
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1.0)
}

// ---------------------------------------------------------------- hand-computed cases

#[test]
fn episode_statistics_are_over_rows_not_trajectories() {
    // Trajectory "a": 3 rows, R = 1; "b": 1 row, R = 0. Row mean = (1 + 1 + 1 + 0) / 4 = 0.75
    // (a trajectory-level mean would be 0.5). A_E = 1 - 0.75 = 0.25 and 0 - 0.75 = -0.75.
    let batch = RolloutBatch::from_row_keys(&["g"; 4], &["a", "a", "a", "b"], &[1.0, 1.0, 1.0, 0.0]).unwrap();
    let out = gigpo(GigpoConfig::default())
        .compute(&batch, &[0.0; 4], &["s0", "s1", "s2", "s3"])
        .unwrap();
    assert_eq!(out.episode_advantages, [0.25, 0.25, 0.25, -0.75]);
    // All anchors distinct: singleton step groups, A_S = 0.
    assert_eq!(out.step_advantages, [0.0; 4]);
    assert_eq!(out.advantages, out.episode_advantages);
}

#[test]
fn mean_std_norm_uses_unbiased_row_std() {
    // Rows R = 1, 1, 1, 0 (as above): mean 0.75, squared deviations 3 · 0.0625 + 0.5625 = 0.75,
    // unbiased var = 0.75 / 3 = 0.25, std = 0.5. A_E = 0.25 / (0.5 + 1e-6), -0.75 / (0.5 + 1e-6).
    let batch = RolloutBatch::from_row_keys(&["g"; 4], &["a", "a", "a", "b"], &[1.0, 1.0, 1.0, 0.0]).unwrap();
    let cfg = GigpoConfig::default().with_norm(NormMode::MeanStdNorm);
    let out = gigpo(cfg).compute(&batch, &[0.0; 4], &["s"; 4]).unwrap();
    let d = 0.5 + 1e-6;
    assert_eq!(out.episode_advantages, [0.25 / d, 0.25 / d, 0.25 / d, -0.75 / d]);
    // One step group with all returns 0: mean 0, std 0 -> A_S = 0 / (0 + 1e-6) = 0.
    assert_eq!(out.step_advantages, [0.0; 4]);
}

#[test]
fn step_returns_follow_row_order_within_each_trajectory() {
    // Interleaved rows: a0 b0 a1 b1 a2. gamma = 0.5.
    // "a" rewards (rows 0, 2, 4) = 1, 0, 2: R_a2 = 2, R_a1 = 0 + 0.5·2 = 1, R_a0 = 1 + 0.5·1 = 1.5.
    // "b" rewards (rows 1, 3) = 4, 8: R_b1 = 8, R_b0 = 4 + 0.5·8 = 8.
    let batch = RolloutBatch::from_row_keys(&["g"; 5], &["a", "b", "a", "b", "a"], &[0.0; 5]).unwrap();
    let out = gigpo(GigpoConfig::default().with_step_decay(0.5))
        .compute(&batch, &[1.0, 4.0, 0.0, 8.0, 2.0], &["x", "y", "z", "w", "v"])
        .unwrap();
    assert_eq!(out.step_returns, [1.5, 8.0, 1.0, 8.0, 2.0]);
    // gamma = 0: returns are the rewards; gamma = 1: suffix sums (a: 3, 2, 2; b: 12, 8).
    let out0 = gigpo(GigpoConfig::default().with_step_decay(0.0))
        .compute(&batch, &[1.0, 4.0, 0.0, 8.0, 2.0], &["x"; 5])
        .unwrap();
    assert_eq!(out0.step_returns, [1.0, 4.0, 0.0, 8.0, 2.0]);
    let out1 = gigpo(GigpoConfig::default().with_step_decay(1.0))
        .compute(&batch, &[1.0, 4.0, 0.0, 8.0, 2.0], &["x"; 5])
        .unwrap();
    assert_eq!(out1.step_returns, [3.0, 12.0, 2.0, 8.0, 2.0]);
}

#[test]
fn step_groups_are_per_task_group_and_weighted() {
    // Two task groups share the anchor text "start" but never a step group.
    // Group g1 (rows 0, 1, trajectories a, b), group g2 (rows 2, 3, trajectories c, d).
    // gamma irrelevant (one step each): returns = rewards = 2, 0, 5, 1.
    // Step groups: (g1, start) = {0, 1} -> label 0; (g2, start) = {2, 3} -> label 1.
    // A_S: g1 mean 1 -> +1, -1; g2 mean 3 -> +2, -2. Episode: g1 R = 1, 0 (mean 0.5) -> ±0.5;
    // g2 R = 0, 0 -> 0. w = 0.5: A = 0.5 + 0.5·1 = 1, -0.5 - 0.5 = -1, 0 + 1 = 1, -1.
    let batch = RolloutBatch::from_row_keys(
        &["g1", "g1", "g2", "g2"],
        &["a", "b", "c", "d"],
        &[1.0, 0.0, 0.0, 0.0],
    )
    .unwrap();
    let out = gigpo(GigpoConfig::default().with_step_advantage_weight(0.5))
        .compute(&batch, &[2.0, 0.0, 5.0, 1.0], &["start"; 4])
        .unwrap();
    assert_eq!(out.step_groups, [0, 0, 1, 1]);
    assert_eq!(out.num_step_groups, 2);
    assert_eq!(out.step_advantages, [1.0, -1.0, 2.0, -2.0]);
    assert_eq!(out.episode_advantages, [0.5, -0.5, 0.0, 0.0]);
    assert_eq!(out.advantages, [1.0, -1.0, 1.0, -1.0]);
}

#[test]
fn single_row_task_group_uses_mean_zero_std_one() {
    // One row: mean 0, std 1. mean_norm: A_E = R = 0.7; mean_std_norm: 0.7 / (1 + 1e-6).
    // The step group is a singleton: A_S = 0.
    let batch = RolloutBatch::from_row_keys(&["g"], &["a"], &[0.7]).unwrap();
    let out = gigpo(GigpoConfig::default())
        .compute(&batch, &[3.0], &["s"])
        .unwrap();
    assert_eq!(out.advantages, [0.7]);
    let cfg = GigpoConfig::default().with_norm(NormMode::MeanStdNorm);
    let out = gigpo(cfg).compute(&batch, &[3.0], &["s"]).unwrap();
    assert_eq!(out.advantages, [0.7 / (1.0 + 1e-6)]);
    // A single trajectory of two rows is not a single-row group: mean 0.7, A_E = 0.
    let batch = RolloutBatch::from_row_keys(&["g", "g"], &["a", "a"], &[0.7, 0.7]).unwrap();
    let out = gigpo(GigpoConfig::default())
        .compute(&batch, &[0.0, 0.0], &["s", "t"])
        .unwrap();
    assert_eq!(out.episode_advantages, [0.0, 0.0]);
}

#[test]
fn similarity_compares_against_the_first_member_only() {
    // ratio("aaaaaaaaab", "aaaaaaaaaa") = 2·9/20 = 0.9 -> joins cluster 0 (threshold 0.85).
    // ratio("aaaaaaaabb", "aaaaaaaaaa") = 2·8/20 = 0.8 -> no, although its ratio against the
    // second member "aaaaaaaaab" is 2·9/20 = 0.9: clustering is not transitive.
    let anchors = ["aaaaaaaaaa", "aaaaaaaaab", "aaaaaaaabb"];
    assert_eq!(ratio(anchors[2], anchors[1]), 0.9);
    let batch = RolloutBatch::from_row_keys(&["g"; 3], &["a", "b", "c"], &[0.0; 3]).unwrap();
    let out = gigpo(sim(0.85)).compute(&batch, &[0.0; 3], &anchors).unwrap();
    assert_eq!(out.step_groups, [0, 0, 1]);
}

#[test]
fn similarity_takes_the_first_matching_cluster_not_the_best() {
    // X = "abcdefgh", Y = "abcdxyzw", Z = "abcdefxyzw"; threshold 0.6.
    // ratio(Y, X) = 2·4/16 = 0.5 < 0.6: Y founds cluster 1.
    // ratio(Z, X): block "abcdef", 2·6/18 = 0.667 >= 0.6: Z joins cluster 0, even though
    // ratio(Z, Y) = 2·8/18 = 0.889 is larger.
    let batch = RolloutBatch::from_row_keys(&["g"; 3], &["a", "b", "c"], &[0.0; 3]).unwrap();
    let out = gigpo(sim(0.6))
        .compute(&batch, &[0.0; 3], &["abcdefgh", "abcdxyzw", "abcdefxyzw"])
        .unwrap();
    assert_eq!(out.step_groups, [0, 1, 0]);
}

#[test]
fn similarity_argument_order_is_new_anchor_then_first_member() {
    // ratio("ac", "bcccabbc") = 0.4 but ratio("bcccabbc", "ac") = 0.2 (tie-breaking).
    // The peer calls are_similar(obs, rep) = ratio(new, first member). With threshold 0.3:
    // rows ["bcccabbc", "ac"]: ratio("ac", "bcccabbc") = 0.4 >= 0.3 -> one group;
    // rows ["ac", "bcccabbc"]: ratio("bcccabbc", "ac") = 0.2 < 0.3 -> two groups.
    let batch = RolloutBatch::from_row_keys(&["g"; 2], &["a", "b"], &[0.0; 2]).unwrap();
    let g = gigpo(sim(0.3));
    assert_eq!(
        g.compute(&batch, &[0.0; 2], &["bcccabbc", "ac"])
            .unwrap()
            .step_groups,
        [0, 0]
    );
    assert_eq!(
        g.compute(&batch, &[0.0; 2], &["ac", "bcccabbc"])
            .unwrap()
            .step_groups,
        [0, 1]
    );
}

#[test]
fn similarity_threshold_edge_is_inclusive() {
    // "abcdefghij" vs "abcdefghiX": 2·9/20 = 0.9 exactly (same f64 as the literal 0.9).
    assert_eq!(ratio("abcdefghiX", "abcdefghij"), 0.9);
    let batch = RolloutBatch::from_row_keys(&["g"; 2], &["a", "b"], &[0.0; 2]).unwrap();
    let anchors = ["abcdefghij", "abcdefghiX"];
    assert_eq!(
        gigpo(sim(0.9))
            .compute(&batch, &[0.0; 2], &anchors)
            .unwrap()
            .step_groups,
        [0, 0]
    );
    let above = f64::from_bits(0.9f64.to_bits() + 1);
    assert_eq!(
        gigpo(sim(above))
            .compute(&batch, &[0.0; 2], &anchors)
            .unwrap()
            .step_groups,
        [0, 1]
    );
}

#[test]
fn generic_keys_group_like_text() {
    // Anchors as (room, object) ids: rows 0 and 2 share (1, 2). Returns 4 and 0 -> ±2.
    let batch = RolloutBatch::from_row_keys(&[7u32; 3], &[0u32, 1, 2], &[0.0; 3]).unwrap();
    let out = gigpo(GigpoConfig::default())
        .compute_by_key(&batch, &[4.0, 9.0, 0.0], &[(1u8, 2u8), (3, 3), (1, 2)])
        .unwrap();
    assert_eq!(out.step_groups, [0, 1, 0]);
    assert_eq!(out.step_advantages, [2.0, 0.0, -2.0]);
}

// ---------------------------------------------------------------- validation

#[test]
fn config_rejects_each_bad_parameter() {
    let bad = |cfg: GigpoConfig| match Gigpo::new(cfg) {
        Err(Error::InvalidConfig { name, .. }) => name,
        other => panic!("expected InvalidConfig, got {other:?}"),
    };
    let base = GigpoConfig::default();
    for v in [-0.1, 1.1, f64::NAN] {
        assert_eq!(bad(base.with_step_decay(v)), "step_decay");
    }
    for v in [-1e-9, f64::INFINITY, f64::NAN] {
        assert_eq!(bad(base.with_step_advantage_weight(v)), "step_advantage_weight");
    }
    for v in [0.0, -1e-6, f64::NAN, f64::INFINITY] {
        assert_eq!(bad(base.with_std_eps(v)), "std_eps");
    }
    for v in [0.0, 1.0, -0.5, 1.5, f64::NAN] {
        assert_eq!(
            bad(base.with_grouping(StepGrouping::Similarity { threshold: v })),
            "grouping.threshold"
        );
    }
    // Boundaries that are valid.
    assert!(Gigpo::new(base.with_step_decay(0.0)).is_ok());
    assert!(Gigpo::new(base.with_step_decay(1.0)).is_ok());
    assert!(Gigpo::new(base.with_step_advantage_weight(0.0)).is_ok());
    assert!(Gigpo::new(base.with_grouping(StepGrouping::Similarity { threshold: 0.999 })).is_ok());
}

#[test]
fn inputs_are_checked() {
    let batch = RolloutBatch::from_row_keys(&["g"; 2], &["a", "b"], &[1.0, 0.0]).unwrap();
    let g = gigpo(GigpoConfig::default());
    assert!(matches!(
        g.compute(&batch, &[0.0], &["s", "s"]),
        Err(Error::LengthMismatch {
            what: "step_rewards",
            expected: 2,
            actual: 1
        })
    ));
    assert!(matches!(
        g.compute(&batch, &[0.0, 0.0], &["s"]),
        Err(Error::LengthMismatch {
            what: "anchors",
            expected: 2,
            actual: 1
        })
    ));
    assert!(matches!(
        g.compute(&batch, &[0.0, f64::NAN], &["s", "s"]),
        Err(Error::NonFinite {
            what: "step_rewards",
            index: 1,
            ..
        })
    ));
    assert!(matches!(
        g.compute(&batch, &[f64::NEG_INFINITY, 0.0], &["s", "s"]),
        Err(Error::NonFinite {
            what: "step_rewards",
            index: 0,
            ..
        })
    ));
    // Similarity needs text: the generic-key entry point refuses it.
    assert!(matches!(
        gigpo(sim(0.9)).compute_by_key(&batch, &[0.0, 0.0], &[1, 1]),
        Err(Error::InvalidConfig { name: "grouping", .. })
    ));
}

#[test]
fn overflow_is_reported_not_returned() {
    // Finite rewards whose discounted sum overflows: 1e308 + 1·1e308 = inf.
    let batch = RolloutBatch::from_row_keys(&["g"; 2], &["a", "a"], &[0.0; 2]).unwrap();
    let err = gigpo(GigpoConfig::default().with_step_decay(1.0))
        .compute(&batch, &[1e308, 1e308], &["s", "t"])
        .unwrap_err();
    assert!(matches!(
        err,
        Error::NonFinite {
            what: "step_returns",
            index: 0,
            ..
        }
    ));
}

// ---------------------------------------------------------------- properties

/// One trajectory: (group, episode reward, [(step reward, anchor)]).
type Traj = (usize, f64, Vec<(f64, String)>);

/// A batch described trajectory by trajectory.
#[derive(Debug, Clone)]
struct Scenario {
    trajs: Vec<Traj>,
}

impl Scenario {
    /// Rows in the order given by `order`: a sequence of trajectory indices, each repeated once
    /// per step (the k-th occurrence of j is step k of j). Returns the columns and, per row,
    /// its (trajectory, step).
    #[allow(clippy::type_complexity)]
    fn rows(
        &self,
        order: &[usize],
    ) -> (
        Vec<String>,
        Vec<String>,
        Vec<f64>,
        Vec<f64>,
        Vec<String>,
        Vec<(usize, usize)>,
    ) {
        let mut next = vec![0usize; self.trajs.len()];
        let (mut uid, mut traj, mut ep, mut r, mut anchors, mut at) =
            (vec![], vec![], vec![], vec![], vec![], vec![]);
        for &j in order {
            let (g, reward, steps) = &self.trajs[j];
            let k = next[j];
            next[j] += 1;
            uid.push(format!("g{g}"));
            traj.push(format!("t{j}"));
            ep.push(*reward);
            r.push(steps[k].0);
            anchors.push(steps[k].1.clone());
            at.push((j, k));
        }
        (uid, traj, ep, r, anchors, at)
    }

    fn traj_major(&self) -> Vec<usize> {
        self.trajs
            .iter()
            .enumerate()
            .flat_map(|(j, t)| std::iter::repeat_n(j, t.2.len()))
            .collect()
    }

    fn run(&self, cfg: GigpoConfig, order: &[usize]) -> (GigpoOutput, Vec<(usize, usize)>, Vec<String>) {
        let (uid, traj, ep, r, anchors, at) = self.rows(order);
        let batch = RolloutBatch::from_row_keys(&uid, &traj, &ep).unwrap();
        let out = Gigpo::new(cfg).unwrap().compute(&batch, &r, &anchors).unwrap();
        (out, at, anchors)
    }
}

fn scenario(anchor: impl Strategy<Value = String> + Clone) -> impl Strategy<Value = Scenario> {
    let step = (-10.0f64..10.0, anchor);
    let traj = (
        0usize..3,
        prop::sample::select(vec![0.0, 0.5, 1.0, -1.0]),
        prop::collection::vec(step, 1..6),
    );
    prop::collection::vec(traj, 1..8).prop_map(|trajs| Scenario { trajs })
}

fn short_anchor() -> impl Strategy<Value = String> + Clone {
    prop::sample::select(vec!["s0", "s1", "s2", "s3"]).prop_map(str::to_owned)
}

fn text_anchor() -> impl Strategy<Value = String> + Clone {
    prop::sample::select(vec![
        "You see a mug 1.",
        "You see a mug 2.",
        "You see a cup 1.",
        "Nothing happens.",
        "Nothing happens!",
        "You open the fridge 1.",
        "You open the fridge 2.",
    ])
    .prop_map(str::to_owned)
}

/// True when labels `a` and `b` (same rows) induce the same partition.
fn same_partition(a: &[usize], b: &[usize]) -> bool {
    (0..a.len()).all(|p| (0..a.len()).all(|q| (a[p] == a[q]) == (b[p] == b[q])))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn mean_norm_step_advantages_sum_to_zero_per_group(s in scenario(short_anchor())) {
        let (out, _, _) = s.run(GigpoConfig::default(), &s.traj_major());
        for label in 0..out.num_step_groups {
            let (mut sum, mut scale) = (0.0, 1.0f64);
            for r in 0..out.step_groups.len() {
                if out.step_groups[r] == label {
                    sum += out.step_advantages[r];
                    scale = scale.max(out.step_returns[r].abs());
                }
            }
            prop_assert!(sum.abs() <= 1e-12 * scale * out.step_groups.len() as f64, "group {label}: {sum}");
        }
    }

    #[test]
    fn mean_norm_episode_advantages_sum_to_zero_per_task_group(s in scenario(short_anchor())) {
        let order = s.traj_major();
        let (out, at, _) = s.run(GigpoConfig::default(), &order);
        for g in 0..3 {
            let rows: Vec<usize> = (0..at.len()).filter(|&r| s.trajs[at[r].0].0 == g).collect();
            if rows.len() > 1 {
                let sum: f64 = rows.iter().map(|&r| out.episode_advantages[r]).sum();
                prop_assert!(sum.abs() <= 1e-12 * rows.len() as f64);
            }
        }
    }

    #[test]
    fn interleaving_trajectories_does_not_change_rows(
        s in scenario(short_anchor()),
        seed in any::<u64>(),
        std_norm in any::<bool>(),
    ) {
        let cfg = GigpoConfig::default()
            .with_norm(if std_norm { NormMode::MeanStdNorm } else { NormMode::MeanNorm });
        let base_order = s.traj_major();
        // A seeded shuffle of the trajectory-major sequence keeps each trajectory's steps in
        // order (the k-th occurrence of j is step k) while interleaving trajectories.
        let mut order = base_order.clone();
        let mut x = seed | 1;
        for i in (1..order.len()).rev() {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            order.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let (a, at_a, _) = s.run(cfg, &base_order);
        let (b, at_b, _) = s.run(cfg, &order);
        let pos_b: std::collections::HashMap<(usize, usize), usize> =
            at_b.iter().enumerate().map(|(r, &k)| (k, r)).collect();
        let perm: Vec<usize> = at_a.iter().map(|k| pos_b[k]).collect();
        for (ra, &rb) in perm.iter().enumerate() {
            prop_assert!(close(a.advantages[ra], b.advantages[rb]), "{} vs {}", a.advantages[ra], b.advantages[rb]);
            prop_assert!(close(a.step_returns[ra], b.step_returns[rb]));
        }
        let relabeled: Vec<usize> = perm.iter().map(|&rb| b.step_groups[rb]).collect();
        prop_assert!(same_partition(&a.step_groups, &relabeled));
        // Labels are in first-appearance order.
        let mut seen = 0;
        for &l in &b.step_groups {
            prop_assert!(l <= seen);
            if l == seen { seen += 1; }
        }
        prop_assert_eq!(seen, b.num_step_groups);
    }

    #[test]
    fn zero_weight_gives_the_episode_term(s in scenario(short_anchor())) {
        let (out, _, _) = s.run(GigpoConfig::default().with_step_advantage_weight(0.0), &s.traj_major());
        prop_assert_eq!(&out.advantages, &out.episode_advantages);
    }

    #[test]
    fn similarity_clusters_satisfy_the_greedy_rule(s in scenario(text_anchor()), t in 0.5f64..0.99) {
        let (out, at, anchors) = s.run(sim(t), &s.traj_major());
        let (exact, _, _) = s.run(GigpoConfig::default(), &s.traj_major());
        let group = |r: usize| s.trajs[at[r].0].0;
        // First member of each cluster.
        let mut first = vec![usize::MAX; out.num_step_groups];
        for (r, &l) in out.step_groups.iter().enumerate() {
            if first[l] == usize::MAX { first[l] = r; }
        }
        for r in 0..anchors.len() {
            let l = out.step_groups[r];
            prop_assert_eq!(group(first[l]), group(r));
            // Every earlier cluster of the same task group that was already open when r came
            // rejected it; its own cluster accepts it (ratio against the first member).
            for &f in first.iter().take(l) {
                if group(f) == group(r) && f < r {
                    prop_assert!(ratio(&anchors[r], &anchors[f]) < t);
                }
            }
            prop_assert!(ratio(&anchors[r], &anchors[first[l]]) >= t);
        }
        // Identical anchors always share a cluster: exact grouping refines similarity grouping.
        for p in 0..anchors.len() {
            for q in 0..anchors.len() {
                if exact.step_groups[p] == exact.step_groups[q] {
                    prop_assert_eq!(out.step_groups[p], out.step_groups[q]);
                }
            }
        }
    }

    #[test]
    fn no_panic_on_arbitrary_finite_input(
        rewards in prop::collection::vec(prop::num::f64::NORMAL | prop::num::f64::ZERO | prop::num::f64::SUBNORMAL, 1..40),
        episode in prop::num::f64::NORMAL,
        split in 1usize..4,
        decay in 0.0f64..=1.0,
        eps in 1e-300f64..1e300,
        std_norm in any::<bool>(),
    ) {
        let n = rewards.len();
        let uid: Vec<usize> = (0..n).map(|r| r % split).collect();
        let traj: Vec<usize> = (0..n).map(|r| r % (split * 2)).collect();
        let ep: Vec<f64> = traj.iter().map(|&t| if t % 2 == 0 { episode } else { -episode / 3.0 }).collect();
        let anchors: Vec<String> = (0..n).map(|r| format!("s{}", r % 3)).collect();
        let batch = RolloutBatch::from_row_keys(&uid, &traj, &ep).unwrap();
        let cfg = GigpoConfig::default()
            .with_step_decay(decay)
            .with_std_eps(eps)
            .with_norm(if std_norm { NormMode::MeanStdNorm } else { NormMode::MeanNorm });
        match Gigpo::new(cfg).unwrap().compute(&batch, &rewards, &anchors) {
            Ok(out) => prop_assert!(out.advantages.iter().all(|a| a.is_finite())),
            Err(e) => prop_assert!(matches!(e, Error::NonFinite { .. }), "{e:?}"),
        }
    }
}
