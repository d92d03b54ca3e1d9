//! The Table 3 ablations: configs, flag transforms (determinism, row-order independence,
//! p = 0 / p = 1, counts) against an independent transcription, names and errors.

use crate::common;
use beacon_rl::estimator::{
    Ablation, AdvantageEstimator, Beacon, BeaconAblationConfig, BeaconConfig, EstimatorConfig, EstimatorInput,
};
use beacon_rl::{Error, RolloutBatch};
use proptest::prelude::*;

#[test]
fn configs_override_exactly_one_parameter() {
    let base = BeaconConfig::default();
    let with = |a: Ablation| a.config(base);
    assert_eq!(with(Ablation::Full), base);
    assert_eq!(with(Ablation::MilestoneDropout { p: 0.5 }), base);
    assert_eq!(with(Ablation::RandomPartition { positions: 5 }), base);
    assert_eq!(with(Ablation::NoTemporalDecay), base.with_segment_decay(0.0));
    assert_eq!(with(Ablation::UniformShaping), base.with_segment_decay(1.0));
    assert_eq!(with(Ablation::NoSegmentAdvantage), base.with_segment_weight(0.0));
    assert_eq!(
        with(Ablation::NoTrajectoryAdvantage),
        base.with_trajectory_weight(0.0)
    );
    // The official preset keeps its own R_ms under every variant.
    for a in Ablation::paper_table3() {
        assert_eq!(a.config(BeaconConfig::official()).milestone_reward, 10.0);
        assert!(Beacon::new(a.config(base)).is_ok());
    }
}

#[test]
fn paper_table3_rows_and_labels() {
    let labels: Vec<String> = Ablation::paper_table3().iter().map(Ablation::label).collect();
    assert_eq!(
        labels,
        [
            "BEACON",
            "w/ 50% Milestone Dropout",
            "w/ Random Partition (5)",
            "w/o Temporal Decay (γ=0)",
            "w/ Uniform Shaping (γ=1)",
            "w/o Segment-level Adv",
            "w/o Trajectory-level Adv"
        ]
    );
    assert_eq!(
        Ablation::MilestoneDropout { p: 0.3 }.label(),
        "w/ 30% Milestone Dropout"
    );
    assert_eq!(
        Ablation::MilestoneDropout { p: 0.125 }.label(),
        "w/ 12.5% Milestone Dropout"
    );
}

#[test]
fn names_parse_and_print() {
    for a in Ablation::paper_table3() {
        assert_eq!(a.to_string().parse::<Ablation>().unwrap(), a);
    }
    // Bare names give the paper's values.
    assert_eq!(
        "milestone_dropout".parse::<Ablation>().unwrap(),
        Ablation::MilestoneDropout { p: 0.5 }
    );
    assert_eq!(
        "milestone_dropout(p=0.25)".parse::<Ablation>().unwrap(),
        Ablation::MilestoneDropout { p: 0.25 }
    );
    assert_eq!(
        " random_partition( positions = 3 ) ".parse::<Ablation>().unwrap(),
        Ablation::RandomPartition { positions: 3 }
    );
    assert_eq!(Ablation::UniformShaping.to_string(), "uniform_shaping");
    for bad in [
        "",
        "dropout",
        "Full",
        "full(x=1)",
        "milestone_dropout=0.5",
        "milestone_dropout(p=abc)",
        "milestone_dropout(q=0.5)",
        "milestone_dropout(p=0.5,p=0.6)",
        "random_partition(positions=-1)",
        "random_partition(positions=2.5)",
    ] {
        match bad.parse::<Ablation>() {
            Err(Error::InvalidValue { key: "ablation", .. } | Error::Parse { .. }) => {}
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    // Out-of-range p parses; every use validates it.
    assert!("milestone_dropout(p=1.5)".parse::<Ablation>().is_ok());
}

#[cfg(feature = "serde")]
#[test]
fn serde_names() {
    assert_eq!(serde_json::to_string(&Ablation::Full).unwrap(), "\"full\"");
    assert_eq!(
        serde_json::to_string(&Ablation::NoTrajectoryAdvantage).unwrap(),
        "\"no_trajectory_advantage\""
    );
    assert_eq!(
        serde_json::to_string(&Ablation::MilestoneDropout { p: 0.5 }).unwrap(),
        r#"{"milestone_dropout":{"p":0.5}}"#
    );
    for a in Ablation::paper_table3() {
        let back: Ablation = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
        assert_eq!(back, a);
    }
    // Deserialisation does not validate p; every use does.
    let bad: Ablation = serde_json::from_str(r#"{"milestone_dropout":{"p":2.0}}"#).unwrap();
    let batch = RolloutBatch::from_blocks(1, &[1], vec![0.0]).unwrap();
    assert!(bad.milestones(&batch, &[true], 0).is_err());
}

#[test]
fn invalid_inputs_are_errors() {
    let batch = RolloutBatch::from_blocks(2, &[2, 1], vec![1.0, 0.0]).unwrap();
    for p in [f64::NAN, -0.1, 1.0000001, f64::INFINITY] {
        let a = Ablation::MilestoneDropout { p };
        assert!(matches!(
            a.milestones(&batch, &[true; 3], 0),
            Err(Error::InvalidConfig { name: "p", .. })
        ));
        assert!(common::ablation_output(a, BeaconConfig::default(), &batch, &[true; 3], 0).is_err());
    }
    for a in Ablation::paper_table3() {
        assert!(matches!(
            a.milestones(&batch, &[true; 2], 0),
            Err(Error::LengthMismatch { .. })
        ));
    }
}

#[test]
fn dropout_keeps_about_one_minus_p() {
    // 20 000 milestones; a fixed seed makes this deterministic. Binomial sd = sqrt(n p (1-p))
    // ≈ 71 for p = 0.5 and 57 for p = 0.2, so ±1% (200) is a > 2.8 sd band.
    let batch = RolloutBatch::from_blocks(100, &[200; 100], vec![0.0; 100]).unwrap();
    let flags = vec![true; 20_000];
    for p in [0.5, 0.2] {
        let kept = Ablation::MilestoneDropout { p }
            .milestones(&batch, &flags, 12345)
            .unwrap()
            .iter()
            .filter(|&&f| f)
            .count() as f64;
        let expected = 20_000.0 * (1.0 - p);
        assert!((kept - expected).abs() < 200.0, "p = {p}: kept {kept}");
    }
}

#[test]
fn random_partition_positions_are_uniform() {
    // 3000 trajectories of 10 steps, 3 positions each: every step is chosen with probability
    // 3/10, 900 times expected (sd ≈ 25); ±100 is 4 sd.
    let batch = RolloutBatch::from_blocks(3000, &[10; 3000], vec![0.0; 3000]).unwrap();
    let out = Ablation::RandomPartition { positions: 3 }
        .milestones(&batch, &vec![false; 30_000], 99)
        .unwrap();
    let mut counts = [0usize; 10];
    for (i, &f) in out.iter().enumerate() {
        counts[i % 10] += usize::from(f);
    }
    assert!(counts.iter().all(|&c| (800..1000).contains(&c)), "{counts:?}");
}

#[test]
fn estimator_level_ablations_change_the_output_as_named() {
    let batch = RolloutBatch::from_blocks(2, &[4, 4], vec![1.0, 0.0]).unwrap();
    let flags = [false, true, false, true, false, false, true, false];
    let base = BeaconConfig::default();
    let run = |a: Ablation| common::ablation_output(a, base, &batch, &flags, 3).unwrap();
    let grpo = run(Ablation::NoSegmentAdvantage);
    assert_eq!(grpo.advantages, grpo.trajectory_advantages);
    let seg = run(Ablation::NoTrajectoryAdvantage);
    assert_eq!(seg.advantages, seg.segment_advantages);
    // γ = 0: only milestone steps are rewarded (R_ms = 1); 0^0 = 1 at the milestone.
    let nodecay = run(Ablation::NoTemporalDecay);
    assert_eq!(nodecay.shaped_rewards, [0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0]);
    // γ = 1: every step of a completed segment gets R_ms; unfinished steps 0. Trajectory 0
    // (milestones at steps 1, 3) is all completed segments; trajectory 1 (milestone at step 2)
    // has segment {0, 1, 2} and the unfinished step 3.
    let uniform = run(Ablation::UniformShaping);
    assert_eq!(uniform.shaped_rewards, [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0]);
    // The paper's γ = 0.95 decays toward the milestone: step 4 is two steps before trajectory
    // 1's milestone (step 6), so 0.95².
    let full = run(Ablation::Full);
    assert_eq!(full.shaped_rewards[4], 0.95 * 0.95);
    // Paper flavour, γ = 1: each segment's per-step mean return is R_ms = b_k, so A^seg = 0
    // and the variant is GRPO.
    assert!(uniform.segment_advantages.iter().all(|a| a.abs() < 1e-12));
    assert_eq!(uniform.advantages, grpo.advantages);
    let random = run(Ablation::RandomPartition { positions: 2 });
    let expected = Ablation::RandomPartition { positions: 2 }
        .milestones(&batch, &flags, 3)
        .unwrap();
    assert_eq!(random.milestones, expected);
}

/// One group: a = [m] R=1, b = [.] R=0, c = [m, m, .] R=0, d = [., ., m] R=1 (the edge cases of
/// `beacon::tests::paper_hand_case_partition_edges`).
fn edge_batch() -> (RolloutBatch, [bool; 8]) {
    let batch = RolloutBatch::from_blocks(4, &[1, 1, 3, 3], vec![1.0, 0.0, 0.0, 1.0]).unwrap();
    (batch, [true, false, true, true, false, false, false, true])
}

#[test]
fn no_temporal_decay_hand_case() {
    // γ = 0 (0⁰ = 1), R_ms = 1: r = a [1]; b [0]; c [1, 1, 0]; d [0, 0, 1].
    // G_1 = {a, c, d}, per-step means 1, 1, 1/3: b_1 = (7/3)/3 = 7/9. G_2 = {c}: b_2 = 1.
    // A_seg = a [2/9]; b [0]; c [2/9, 0, 0 (unfinished)]; d [−7/9, −7/9, 2/9].
    // A_traj = ±(1/2)/(√(1/3) + 1e-6), + for a and d (R = 1).
    let (batch, flags) = edge_batch();
    let out = common::ablation_output(
        Ablation::NoTemporalDecay,
        BeaconConfig::default(),
        &batch,
        &flags,
        0,
    )
    .unwrap();
    assert_eq!(out.shaped_rewards, [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0]);
    let seg = [2.0, 0.0, 2.0, 0.0, 0.0, -7.0, -7.0, 2.0].map(|x| x / 9.0);
    let t = 0.5 / ((1.0f64 / 3.0).sqrt() + 1e-6);
    let traj = [t, -t, -t, -t, -t, t, t, t];
    for i in 0..8 {
        assert!((out.segment_advantages[i] - seg[i]).abs() < 1e-12, "{i}: {out:?}");
        assert!(
            (out.advantages[i] - (traj[i] + seg[i])).abs() < 1e-12,
            "{i}: {out:?}"
        );
    }
}

#[test]
fn uniform_shaping_is_grpo_exactly_for_any_milestone_reward() {
    // γ = 1: every completed step gets R_ms, so every R_k/|Seg_k| is R_ms, b_k = R_ms and
    // A_seg = 0 exactly; the variant is then bit-for-bit the λ = 0 row. R_ms = 0.1 over d's
    // 3-step segment is the case a plain Σ/n misses: (0.1 + 0.1 + 0.1)/3 =
    // 0.30000000000000004/3 = 0.10000000000000002, which left A_seg = −1.4e-17, not 0.
    let (batch, flags) = edge_batch();
    for r_ms in [0.1, 0.7, 1.0, 3.3] {
        let base = BeaconConfig::default().with_milestone_reward(r_ms);
        let uniform = common::ablation_output(Ablation::UniformShaping, base, &batch, &flags, 0).unwrap();
        assert_eq!(uniform.segment_advantages, [0.0; 8], "R_ms = {r_ms}");
        let grpo = common::ablation_output(Ablation::NoSegmentAdvantage, base, &batch, &flags, 0).unwrap();
        assert_eq!(uniform.advantages, grpo.advantages, "R_ms = {r_ms}");
    }
}

#[test]
fn seeded_transforms_match_an_independent_splitmix64() {
    // Golden flags from an independent Python transcription of the module docs (Vigna's
    // splitmix64.c; stream j seeded with the j-th output of SplitMix64(seed); dropout keeps a
    // milestone when u = (x >> 11)·2⁻⁵³ ≥ p, one draw per step; random partition by Floyd's
    // algorithm with Lemire's multiply-and-reject), so a change of the documented streams
    // shows here. Trajectories of 5, 3, 4 and 6 steps, every step a detected milestone, seed 7.
    let batch = RolloutBatch::from_blocks(2, &[5, 3, 4, 6], vec![0.0; 4]).unwrap();
    let flags = [true; 18];
    let bits = |v: Vec<bool>| v.into_iter().map(u8::from).collect::<Vec<_>>();
    let drop = Ablation::MilestoneDropout { p: 0.5 }
        .milestones(&batch, &flags, 7)
        .unwrap();
    // Trajectory 0 draws u = 0.7215, 0.6497, 0.5494, 0.6042, 0.3481: only its last is dropped.
    assert_eq!(bits(drop), [1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 0, 0, 1, 0, 0, 1, 0, 1]);
    let two = Ablation::RandomPartition { positions: 2 }
        .milestones(&batch, &flags, 7)
        .unwrap();
    assert_eq!(bits(two), [0, 0, 1, 1, 0, 0, 1, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 0]);
    let five = Ablation::RandomPartition { positions: 5 }
        .milestones(&batch, &flags, 7)
        .unwrap();
    assert_eq!(bits(five), [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1]);
    // The estimator's call k runs the transform with seed SplitMix64::stream(seed, k)'s first
    // output (same Python): seed 3 gives these for calls 0 and 1.
    let mut row = BeaconAblationConfig::new(BeaconConfig::default(), Ablation::MilestoneDropout { p: 0.5 });
    row.seed = 3;
    let est = EstimatorConfig::BeaconAblation(row).build().unwrap();
    let batch = RolloutBatch::from_blocks(2, &[5, 3, 4, 6], vec![1.0, 0.0, 0.0, 1.0]).unwrap();
    let input = EstimatorInput::new(&batch).with_milestones(&flags);
    let mut outs = vec![];
    for call_seed in [13604808898340030615, 6742120064803419621] {
        let want = common::ablation_output(row.ablation, row.base, &batch, &flags, call_seed).unwrap();
        let got = est.estimate(&input).unwrap().advantages.column(0).to_vec();
        assert_eq!(got, want.advantages);
        outs.push(got);
    }
    assert_ne!(outs[0], outs[1]);
}

// ---------------------------------------------------------------------------------------------
// Properties

/// Per trajectory (in batch order): its milestone flags. Groups of up to 3 trajectories.
fn trajectories() -> impl Strategy<Value = Vec<Vec<bool>>> {
    prop::collection::vec(prop::collection::vec(prop::bool::weighted(0.4), 1..15), 1..9)
}

fn ablations() -> impl Strategy<Value = Ablation> {
    prop_oneof![
        (0.0..=1.0f64).prop_map(|p| Ablation::MilestoneDropout { p }),
        (0usize..20).prop_map(|positions| Ablation::RandomPartition { positions }),
        Just(Ablation::Full),
        Just(Ablation::NoTemporalDecay),
    ]
}

/// Trajectory-major batch: trajectory j in group j / 3.
fn reference(trajs: &[Vec<bool>]) -> (RolloutBatch, Vec<bool>) {
    let (mut g, mut t, mut flags) = (vec![], vec![], vec![]);
    for (j, f) in trajs.iter().enumerate() {
        for &x in f {
            g.push(j / 3);
            t.push(j);
            flags.push(x);
        }
    }
    let batch = RolloutBatch::from_row_keys(&g, &t, &vec![0.0; t.len()]).unwrap();
    (batch, flags)
}

/// The same trajectories with rows interleaved by `choices`, starting trajectories in batch
/// order (so batch order, which is first appearance, is unchanged). Returns the batch, flags
/// and, for each new row, (trajectory, step).
fn interleaved(trajs: &[Vec<bool>], choices: &[usize]) -> (RolloutBatch, Vec<bool>, Vec<(usize, usize)>) {
    let total: usize = trajs.iter().map(Vec::len).sum();
    let mut cursor = vec![0usize; trajs.len()];
    let mut started = 0usize;
    let mut origin = Vec::with_capacity(total);
    for k in 0..total {
        let mut options: Vec<usize> = (0..started).filter(|&j| cursor[j] < trajs[j].len()).collect();
        if started < trajs.len() {
            options.push(started);
        }
        let j = options[choices.get(k).copied().unwrap_or(0) % options.len()];
        if j == started {
            started += 1;
        }
        origin.push((j, cursor[j]));
        cursor[j] += 1;
    }
    let g: Vec<usize> = origin.iter().map(|&(j, _)| j / 3).collect();
    let t: Vec<usize> = origin.iter().map(|&(j, _)| j).collect();
    let flags: Vec<bool> = origin.iter().map(|&(j, s)| trajs[j][s]).collect();
    let batch = RolloutBatch::from_row_keys(&g, &t, &vec![0.0; total]).unwrap();
    (batch, flags, origin)
}

/// Per trajectory (batch order), its output flags in step order.
fn per_trajectory(batch: &RolloutBatch, out: &[bool]) -> Vec<Vec<bool>> {
    (0..batch.num_trajectories())
        .map(|j| batch.trajectory_rows(j).iter().map(|&r| out[r]).collect())
        .collect()
}

proptest! {
    #[test]
    fn transforms_are_deterministic_and_row_order_independent(
        trajs in trajectories(),
        ablation in ablations(),
        seed in any::<u64>(),
        choices in prop::collection::vec(0usize..16, 150),
    ) {
        let (a, fa) = reference(&trajs);
        let (b, fb, _) = interleaved(&trajs, &choices);
        let out_a = ablation.milestones(&a, &fa, seed).unwrap();
        prop_assert_eq!(&out_a, &ablation.milestones(&a, &fa, seed).unwrap());
        let out_b = ablation.milestones(&b, &fb, seed).unwrap();
        prop_assert_eq!(per_trajectory(&a, &out_a), per_trajectory(&b, &out_b));
    }

    #[test]
    fn dropout_only_removes_and_its_extremes_are_exact(
        trajs in trajectories(),
        p in 0.0..=1.0f64,
        seed in any::<u64>(),
    ) {
        let (batch, flags) = reference(&trajs);
        let out = Ablation::MilestoneDropout { p }.milestones(&batch, &flags, seed).unwrap();
        prop_assert!(out.iter().zip(&flags).all(|(&o, &f)| !o || f)); // subset of the input
        prop_assert_eq!(Ablation::MilestoneDropout { p: 0.0 }.milestones(&batch, &flags, seed).unwrap(), flags.clone());
        let all_dropped = Ablation::MilestoneDropout { p: 1.0 }.milestones(&batch, &flags, seed).unwrap();
        prop_assert!(all_dropped.iter().all(|&f| !f));
        // The non-partition ablations leave the flags alone.
        for a in [Ablation::Full, Ablation::NoTemporalDecay, Ablation::UniformShaping,
                  Ablation::NoSegmentAdvantage, Ablation::NoTrajectoryAdvantage] {
            prop_assert_eq!(a.milestones(&batch, &flags, seed).unwrap(), flags.clone());
        }
    }

    #[test]
    fn random_partition_marks_min_n_t_steps_whatever_was_detected(
        trajs in trajectories(),
        positions in 0usize..20,
        seed in any::<u64>(),
    ) {
        let (batch, flags) = reference(&trajs);
        let a = Ablation::RandomPartition { positions };
        let out = a.milestones(&batch, &flags, seed).unwrap();
        for (j, f) in per_trajectory(&batch, &out).iter().enumerate() {
            prop_assert_eq!(f.iter().filter(|&&x| x).count(), positions.min(trajs[j].len()));
        }
        let inverted: Vec<bool> = flags.iter().map(|f| !f).collect();
        prop_assert_eq!(a.milestones(&batch, &inverted, seed).unwrap(), out);
    }

    #[test]
    fn display_parse_round_trip(p in 0.0..=1.0f64, positions in 0usize..1000) {
        for a in [Ablation::MilestoneDropout { p }, Ablation::RandomPartition { positions }] {
            prop_assert_eq!(a.to_string().parse::<Ablation>().unwrap(), a);
        }
    }
}
