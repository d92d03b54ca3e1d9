//! `BatchBuilder`: in-place rebuilds equal fresh builds and a plain HashMap reference, report the
//! same errors, and allocate nothing after warm-up (counted by a global counting allocator);
//! one source of truth for the episode reward through the estimators. Group keys whose rows
//! form contiguous runs (no sort needed) give the batch that the row-key path and the reference
//! give, for random key sequences with and without recurring groups (proptest). Row keys in
//! trajectory-major order (written in place), with groups or trajectories recurring, or
//! shuffled, give a HashMap reference's batch (proptest), and rebuilds alternating the two
//! layouts allocate nothing.

use std::collections::HashMap;
use std::hash::Hash;

#[path = "support/splitmix64.rs"]
mod splitmix64;
#[path = "support/step_order.rs"]
mod step_order;
use beacon_rl::estimator::{AdvantageEstimator, EstimatorConfig, EstimatorInput, GigpoConfig, StepGrouping};
use beacon_rl::{BatchBuilder, Error, RolloutBatch};
use proptest::prelude::*;
use splitmix64::SplitMix64;
use step_order::in_step_order;

// The shared counting allocator; this binary counts the measuring thread only (the test
// harness runs other tests concurrently).
#[path = "support/counting.rs"]
mod counting;

/// Rows of `groups` groups of 1..=4 trajectories of 1..=6 steps, shuffled (step order kept).
fn keys(seed: u64, groups: u64) -> (Vec<u64>, Vec<u64>, Vec<f64>) {
    let mut rng = SplitMix64::new(seed);
    let mut below = |n: u64| rng.next_u64() % n;
    let mut trajs = Vec::new();
    for g in 0..groups {
        for t in 0..1 + below(4) {
            trajs.push((g * 31 + 5, g * 1000 + t * 7, below(3) as f64 * 0.5, 1 + below(6)));
        }
    }
    let total: u64 = trajs.iter().map(|t| t.3).sum();
    let (mut uid, mut traj, mut reward) = (vec![], vec![], vec![]);
    while (uid.len() as u64) < total {
        let j = below(trajs.len() as u64) as usize;
        if trajs[j].3 == 0 {
            continue;
        }
        trajs[j].3 -= 1;
        uid.push(trajs[j].0);
        traj.push(trajs[j].1);
        reward.push(trajs[j].2);
    }
    (uid, traj, reward)
}

#[test]
fn rebuilds_equal_fresh_builds_and_the_reference() {
    let mut builder = BatchBuilder::default();
    let mut batch = RolloutBatch::from_row_keys(&[0u64], &[0u64], &[0.0]).unwrap();
    for seed in 0..60 {
        let (uid, traj, reward) = keys(seed, 1 + seed % 13);
        builder
            .rebuild_from_row_keys(&mut batch, &uid, &traj, &reward)
            .unwrap();
        assert_eq!(batch, RolloutBatch::from_row_keys(&uid, &traj, &reward).unwrap());
        let (offsets, traj_offsets, steps, rewards) = reference(&uid, &traj, &reward);
        assert_eq!(&group_offsets(&batch)[..], &offsets[..]);
        assert_eq!(&trajectory_offsets(&batch)[..], &traj_offsets[..]);
        assert_eq!(batch.try_step_rows().unwrap(), &steps[..]);
        assert_eq!(batch.terminal_rewards(), &rewards[..]);
        // Rows of each trajectory in row order, trajectories as the reference orders them.
        for j in 0..batch.num_trajectories() {
            let rows = batch.trajectory_rows(j);
            assert!(rows.windows(2).all(|w| w[0] < w[1]));
            assert!(rows.iter().all(|&r| traj[r] == traj[rows[0]]));
        }
        // String keys give the same batch.
        let us: Vec<String> = uid.iter().map(|u| format!("uid-{u}")).collect();
        let ts: Vec<String> = traj.iter().map(|t| format!("traj-{t}")).collect();
        let mut other = RolloutBatch::from_row_keys(&["x"], &["y"], &[0.0]).unwrap();
        builder
            .rebuild_from_row_keys(&mut other, &us, &ts, &reward)
            .unwrap();
        assert_eq!(other, batch);
    }
}

#[test]
fn rebuild_errors_match_and_leave_the_batch_unchanged() {
    let mut builder = BatchBuilder::default();
    let mut batch = RolloutBatch::from_row_keys(&[1u64, 1], &[1u64, 2], &[1.0, 0.0]).unwrap();
    let before = batch.clone();
    // Trajectory 5 appears under group 0 (row 0) then group 1 (row 2).
    let (g, t, r) = ([0u64, 0, 1], [5u64, 6, 5], [1.0, 0.0, 1.0]);
    let fresh = RolloutBatch::from_row_keys(&g, &t, &r).unwrap_err();
    assert_eq!(fresh, Error::TrajectoryAcrossGroups { row: 2 });
    assert_eq!(builder.rebuild_from_row_keys(&mut batch, &g, &t, &r), Err(fresh));
    // Rewards disagree within trajectory 6 at row 3.
    let (g, t, r) = ([0u64; 4], [5u64, 6, 5, 6], [1.0, 0.0, 1.0, 0.5]);
    assert_eq!(
        builder.rebuild_from_row_keys(&mut batch, &g, &t, &r),
        Err(Error::InconsistentTerminalReward {
            row: 3,
            expected: 0.0,
            value: 0.5
        })
    );
    assert_eq!(
        builder.rebuild_from_row_keys::<u64, u64>(&mut batch, &[], &[], &[]),
        Err(Error::EmptyBatch)
    );
    assert_eq!(batch, before);
}

#[test]
fn no_allocation_after_warm_up() {
    let sizes = [40u64, 7, 40, 25, 1];
    let data: Vec<_> = sizes
        .iter()
        .enumerate()
        .map(|(i, &g)| keys(100 + i as u64, g))
        .collect();
    let strings: Vec<(Vec<String>, Vec<String>)> = data
        .iter()
        .map(|(u, t, _)| {
            (
                u.iter().map(|x| format!("u{x}")).collect(),
                t.iter().map(|x| format!("t{x}")).collect(),
            )
        })
        .collect();
    // The same uids sorted: each group one contiguous run (verl's layout), which the builder
    // writes without a sort; as integers and as strings.
    let runs: Vec<(Vec<u64>, Vec<String>)> = data
        .iter()
        .map(|(u, _, _)| {
            let mut sorted = u.clone();
            sorted.sort_unstable();
            let text = sorted.iter().map(|x| format!("u{x}")).collect();
            (sorted, text)
        })
        .collect();
    let mut builder = BatchBuilder::default();
    let (u, t, r) = &data[0];
    let mut batch = RolloutBatch::from_row_keys(u, t, r).unwrap();
    // Warm-up: both the builder's spare and the batch (they swap) grow to the largest size.
    let rebuild_all = |builder: &mut BatchBuilder, batch: &mut RolloutBatch| {
        for (((u, t, r), (us, ts)), (sorted, text)) in data.iter().zip(&strings).zip(&runs) {
            builder.rebuild_from_row_keys(batch, u, t, r).unwrap();
            builder.rebuild_from_row_keys(batch, us, ts, r).unwrap();
            builder.rebuild_from_group_keys(batch, u, r).unwrap();
            builder.rebuild_from_group_keys(batch, sorted, r).unwrap();
            assert!(in_step_order(batch));
            builder.rebuild_from_group_keys(batch, text, r).unwrap();
            assert!(in_step_order(batch));
        }
    };
    for _ in 0..2 {
        rebuild_all(&mut builder, &mut batch);
    }
    let warm = counting::this_thread(|| {
        for _ in 0..3 {
            rebuild_all(&mut builder, &mut batch);
        }
    });
    assert_eq!(warm, 0);
    // Fresh builds do allocate (the counter works).
    let (u, t, r) = &data[0];
    assert!(counting::this_thread(|| drop(RolloutBatch::from_row_keys(u, t, r).unwrap())) > 0);
}

#[test]
fn step_estimators_check_token_rewards_against_the_batch() {
    // Trajectory a (rows 0, 2) has R = 1, b (rows 1, 3) R = 0; row 3's tokens sum to 0.5.
    let batch = RolloutBatch::from_row_keys(&[0; 4], &["a", "b", "a", "b"], &[1.0, 0.0, 1.0, 0.0]).unwrap();
    let agree = ndarray::array![[0.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.0, 0.0]];
    let disagree = ndarray::array![[0.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.25, 0.25]];
    let flags = [true, false, false, true];
    let steps = [0.0; 4];
    let ids = [1u64, 2, 1, 3];
    for name in [
        "beacon",
        "beacon_official",
        "gigpo",
        "beacon:ablation=milestone_dropout",
    ] {
        let est = name.parse::<EstimatorConfig>().unwrap().build().unwrap();
        let input = EstimatorInput::new(&batch)
            .with_milestones(&flags)
            .with_step_rewards(&steps)
            .with_anchor_ids(&ids);
        let plain = est.estimate(&input).unwrap();
        if name != "beacon:ablation=milestone_dropout" {
            assert_eq!(
                est.estimate(&input.with_token_level_rewards(&agree)).unwrap(),
                plain,
                "{name}"
            );
        }
        assert_eq!(
            est.estimate(&input.with_token_level_rewards(&disagree)),
            Err(Error::TerminalRewardMismatch {
                row: 3,
                batch: 0.0,
                tokens: 0.5
            }),
            "{name}"
        );
    }
}

#[test]
fn gigpo_takes_integer_or_text_anchors_through_the_trait() {
    let batch = RolloutBatch::from_row_keys(&[0; 4], &["a", "b", "a", "b"], &[1.0, 0.0, 1.0, 0.0]).unwrap();
    let steps = [0.0, 1.0, 0.5, 0.0];
    let est = "gigpo".parse::<EstimatorConfig>().unwrap().build().unwrap();
    let ids = [7u64, 7, 9, 8];
    let text = ["s7", "s7", "s9", "s8"];
    let base = EstimatorInput::new(&batch).with_step_rewards(&steps);
    let by_id = est.estimate(&base.with_anchor_ids(&ids)).unwrap();
    let by_text = est.estimate(&base.with_anchor_obs(&text)).unwrap();
    assert_eq!(by_id, by_text);
    assert_eq!(
        est.estimate(&base.with_anchor_ids(&ids).with_anchor_obs(&text)),
        Err(Error::ConflictingInputs {
            first: "anchor_obs",
            second: "anchor_ids"
        })
    );
    assert_eq!(est.estimate(&base), Err(Error::MissingInput("anchor_obs")));
    let sim = EstimatorConfig::Gigpo(
        GigpoConfig::default().with_grouping(StepGrouping::Similarity { threshold: 0.9 }),
    );
    assert!(matches!(
        sim.build().unwrap().estimate(&base.with_anchor_ids(&ids)),
        Err(Error::InvalidConfig { name: "grouping", .. })
    ));
}

/// Group-key batch by plain hash maps: groups by first appearance, each group's rows in row
/// order, every row its own trajectory. Returns (group offsets, step rows, terminal rewards).
fn group_reference<G: Hash + Eq>(g: &[G], r: &[f64]) -> (Vec<usize>, Vec<usize>, Vec<f64>) {
    let mut gid = HashMap::new();
    let mut members: Vec<Vec<usize>> = Vec::new();
    for (row, key) in g.iter().enumerate() {
        let n = gid.len();
        let id = *gid.entry(key).or_insert(n);
        if id == members.len() {
            members.push(Vec::new());
        }
        members[id].push(row);
    }
    let mut offsets = vec![0];
    for m in &members {
        offsets.push(offsets.last().unwrap() + m.len());
    }
    let steps: Vec<usize> = members.concat();
    let rewards = steps.iter().map(|&row| r[row]).collect();
    (offsets, steps, rewards)
}

/// True when no key's rows are split into two runs (each group one contiguous block).
/// The batch's group offsets into trajectories (`num_groups + 1` entries), read through
/// its public per-group ranges.
fn group_offsets(b: &RolloutBatch) -> Vec<usize> {
    let n = b.num_groups();
    let end = if n == 0 {
        0
    } else {
        b.group_trajectories(n - 1).end
    };
    (0..n)
        .map(|g| b.group_trajectories(g).start)
        .chain([end])
        .collect()
}

/// The batch's trajectory offsets into steps (`num_trajectories + 1` entries).
fn trajectory_offsets(b: &RolloutBatch) -> Vec<usize> {
    let mut offsets = vec![0];
    for j in 0..b.num_trajectories() {
        offsets.push(offsets[j] + b.trajectory_rows(j).len());
    }
    offsets
}

fn contiguous<G: Eq>(g: &[G]) -> bool {
    let starts: Vec<&G> = (0..g.len())
        .filter(|&row| row == 0 || g[row] != g[row - 1])
        .map(|row| &g[row])
        .collect();
    (0..starts.len()).all(|i| (i + 1..starts.len()).all(|j| starts[i] != starts[j]))
}

/// Group keys: any sequence over a small alphabet (recurring groups are common), runs of
/// distinct keys (contiguous), or such runs followed by one earlier run's key (one recurrence
/// at the end, the case a run-by-run check must not miss).
fn group_keys() -> impl Strategy<Value = Vec<u8>> {
    let runs = prop::collection::vec(1usize..5, 1..12).prop_map(|lens| {
        lens.iter()
            .enumerate()
            .flat_map(|(k, &n)| std::iter::repeat_n((k * 7 % 12) as u8, n))
            .collect::<Vec<u8>>()
    });
    prop_oneof![
        prop::collection::vec(0u8..5, 1..40),
        runs.clone(),
        (runs, any::<prop::sample::Index>()).prop_map(|(mut keys, pick)| {
            let again = keys[pick.index(keys.len())];
            keys.push(again);
            keys
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The group-key batch, built fresh or rebuilt in place after any earlier batch, is the
    /// reference's and the row-key path's (trajectory key = row), for integer and string
    /// keys; its rows are in step order exactly when the groups are contiguous.
    #[test]
    fn group_keys_give_the_row_key_batch(
        keys in group_keys(),
        before in group_keys(),
        seed in 0usize..5,
    ) {
        let rows = keys.len();
        let rewards: Vec<f64> = (0..rows).map(|row| ((row * 7 + seed) % 5) as f64 * 0.25).collect();
        let fresh = RolloutBatch::from_group_keys(&keys, &rewards).unwrap();
        let row_ids: Vec<usize> = (0..rows).collect();
        prop_assert_eq!(&fresh, &RolloutBatch::from_row_keys(&keys, &row_ids, &rewards).unwrap());
        let (offsets, steps, terminal) = group_reference(&keys, &rewards);
        prop_assert_eq!(&group_offsets(&fresh)[..], &offsets[..]);
        prop_assert_eq!(&trajectory_offsets(&fresh)[..], &row_ids.iter().copied().chain([rows]).collect::<Vec<_>>()[..]);
        prop_assert_eq!(fresh.try_step_rows().unwrap(), &steps[..]);
        prop_assert_eq!(fresh.terminal_rewards(), &terminal[..]);
        prop_assert_eq!(in_step_order(&fresh), contiguous(&keys));

        // In place, after a group-key batch and after a row-key batch of other keys.
        let mut builder = BatchBuilder::default();
        let mut batch = RolloutBatch::from_group_keys(&before, &vec![1.0; before.len()]).unwrap();
        builder.rebuild_from_group_keys(&mut batch, &before, &vec![0.5; before.len()]).unwrap();
        builder.rebuild_from_group_keys(&mut batch, &keys, &rewards).unwrap();
        prop_assert_eq!(&batch, &fresh);
        builder.rebuild_from_row_keys(&mut batch, &before, &before, &vec![0.0; before.len()]).unwrap();
        let text: Vec<String> = keys.iter().map(|k| format!("uid-{k}")).collect();
        builder.rebuild_from_group_keys(&mut batch, &text, &rewards).unwrap();
        prop_assert_eq!(&batch, &fresh);
    }
}

/// Group offsets, trajectory offsets, step rows, terminal rewards.
type Layout4 = (Vec<usize>, Vec<usize>, Vec<usize>, Vec<f64>);

/// Row-key batch by plain hash maps, written independently of the builder: groups and
/// trajectories by first appearance, trajectories ordered stably by group, each trajectory's
/// rows in row order. Returns (group offsets, trajectory offsets, step rows, terminal rewards).
fn reference<G: Hash + Eq, T: Hash + Eq>(g: &[G], t: &[T], r: &[f64]) -> Layout4 {
    let (mut gid, mut tid) = (HashMap::new(), HashMap::new());
    // Per trajectory: (group id, reward, rows).
    let mut trajs: Vec<(usize, f64, Vec<usize>)> = Vec::new();
    for row in 0..g.len() {
        let n = gid.len();
        let gi = *gid.entry(&g[row]).or_insert(n);
        let n = tid.len();
        let ti = *tid.entry(&t[row]).or_insert(n);
        if ti == trajs.len() {
            trajs.push((gi, r[row], Vec::new()));
        }
        trajs[ti].2.push(row);
    }
    let mut group_offsets = vec![0];
    let (mut traj_offsets, mut steps, mut rewards) = (vec![0], Vec::new(), Vec::new());
    for group in 0..gid.len() {
        for (_, reward, rows) in trajs.iter().filter(|j| j.0 == group) {
            steps.extend_from_slice(rows);
            traj_offsets.push(steps.len());
            rewards.push(*reward);
        }
        group_offsets.push(rewards.len());
    }
    (group_offsets, traj_offsets, steps, rewards)
}

/// Rows of trajectories `(group key, trajectory key, reward, steps)`, interleaved at random
/// (each trajectory's steps in order) by picking a trajectory with steps left per row.
fn interleave(trajs: &[(u64, u64, f64, usize)], rng: &mut SplitMix64) -> Vec<(u64, u64, f64)> {
    let mut left: Vec<usize> = trajs.iter().map(|j| j.3).collect();
    let mut open: Vec<usize> = (0..trajs.len()).collect();
    let mut rows = Vec::new();
    while !open.is_empty() {
        let k = (rng.next_u64() % open.len() as u64) as usize;
        let j = open[k];
        rows.push((trajs[j].0, trajs[j].1, trajs[j].2));
        left[j] -= 1;
        if left[j] == 0 {
            open.remove(k);
        }
    }
    rows
}

/// The four layouts of one set of groups: trajectory-major (the identity); trajectories
/// contiguous but in shuffled order (groups recur, trajectory ids never do); groups
/// contiguous but their trajectories interleaved (trajectories recur, groups never do);
/// everything interleaved.
fn layouts(spec: &[Vec<usize>], seed: u64) -> Vec<Vec<(u64, u64, f64)>> {
    let mut rng = SplitMix64::new(seed);
    let trajs: Vec<Vec<(u64, u64, f64, usize)>> = spec
        .iter()
        .enumerate()
        .map(|(g, lens)| {
            let g = g as u64;
            let each = lens.iter().enumerate();
            each.map(|(t, &n)| (g * 13 + 1, g * 100 + t as u64, (g + t as u64) as f64 * 0.5, n))
                .collect()
        })
        .collect();
    let steps = |j: &(u64, u64, f64, usize)| std::iter::repeat_n((j.0, j.1, j.2), j.3);
    let major: Vec<_> = trajs.iter().flatten().flat_map(steps).collect();
    let mut blocks: Vec<_> = trajs.iter().flatten().collect();
    for i in (1..blocks.len()).rev() {
        blocks.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
    let blocks: Vec<_> = blocks.into_iter().flat_map(steps).collect();
    let within: Vec<_> = trajs
        .iter()
        .flat_map(|group| interleave(group, &mut rng))
        .collect();
    let all: Vec<_> = trajs.iter().flatten().copied().collect();
    let shuffled = interleave(&all, &mut rng);
    vec![major, blocks, within, shuffled]
}

/// Group keys, trajectory keys, rewards.
type Columns = (Vec<u64>, Vec<u64>, Vec<f64>);

fn columns(rows: &[(u64, u64, f64)]) -> Columns {
    (
        rows.iter().map(|r| r.0).collect(),
        rows.iter().map(|r| r.1).collect(),
        rows.iter().map(|r| r.2).collect(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Row-key batches in each layout, fresh and rebuilt in place by one builder that goes
    /// through all of them in turn (and a group-key batch), are the reference's; the rows
    /// are in step order exactly when the reference's step rows are `0..rows`, which the
    /// trajectory-major layout always is.
    #[test]
    fn row_keys_in_any_layout_give_the_reference_batch(
        spec in prop::collection::vec(prop::collection::vec(1usize..5, 1..4), 1..7),
        seed in any::<u64>(),
    ) {
        let mut builder = BatchBuilder::default();
        let mut batch = RolloutBatch::from_group_keys(&[3u64, 4, 3], &[0.0; 3]).unwrap();
        for (k, rows) in layouts(&spec, seed).iter().enumerate() {
            let (g, t, r) = columns(rows);
            let (offsets, traj_offsets, steps, rewards) = reference(&g, &t, &r);
            let identity = steps.iter().enumerate().all(|(s, &row)| s == row);
            prop_assert!(k != 0 || identity);
            let fresh = RolloutBatch::from_row_keys(&g, &t, &r).unwrap();
            prop_assert_eq!(&group_offsets(&fresh)[..], &offsets[..]);
            prop_assert_eq!(&trajectory_offsets(&fresh)[..], &traj_offsets[..]);
            prop_assert_eq!(fresh.try_step_rows().unwrap(), &steps[..]);
            prop_assert_eq!(fresh.terminal_rewards(), &rewards[..]);
            prop_assert_eq!(in_step_order(&fresh), identity);
            builder.rebuild_from_row_keys(&mut batch, &g, &t, &r).unwrap();
            prop_assert_eq!(&batch, &fresh);
            let text: Vec<String> = t.iter().map(|x| format!("traj-{x}")).collect();
            builder.rebuild_from_row_keys(&mut batch, &g, &text, &r).unwrap();
            prop_assert_eq!(&batch, &fresh);
            builder.rebuild_from_group_keys(&mut batch, &g, &r).unwrap();
        }
    }
}

/// Rebuilds that alternate the in-place (identity) layout and the sorted one, for row keys
/// and for group keys, at varying sizes (the key tables grow and shrink), allocate nothing
/// once warm.
#[test]
fn no_allocation_alternating_identity_and_sorted_layouts() {
    let specs: Vec<Vec<Vec<usize>>> = [(40usize, 3usize), (3, 2), (60, 4), (1, 1)]
        .iter()
        .map(|&(groups, trajs)| {
            (0..groups)
                .map(|g| (0..trajs).map(|t| 1 + (g + t) % 5).collect())
                .collect()
        })
        .collect();
    let cases: Vec<Vec<Columns>> = specs
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            layouts(spec, 7 + i as u64)
                .iter()
                .map(|rows| columns(rows))
                .collect()
        })
        .collect();
    let mut builder = BatchBuilder::default();
    let mut batch = RolloutBatch::from_group_keys(&[0u64], &[0.0]).unwrap();
    let mut in_order = Vec::new();
    let rebuild_all = |builder: &mut BatchBuilder, batch: &mut RolloutBatch, in_order: &mut Vec<bool>| {
        for layouts in &cases {
            for (g, t, r) in layouts {
                builder.rebuild_from_row_keys(batch, g, t, r).unwrap();
                in_order.push(in_step_order(batch));
                builder.rebuild_from_group_keys(batch, g, r).unwrap();
                in_order.push(in_step_order(batch));
            }
        }
    };
    for _ in 0..2 {
        rebuild_all(&mut builder, &mut batch, &mut in_order);
    }
    // Both paths ran, for both key kinds (row keys: layout 0 in order, layout 3 not; group
    // keys: layout 0 in order, layout 1 (groups recur) not, for the larger specs).
    assert!(in_order[0] && !in_order[6] && in_order[1] && !in_order[3]);
    in_order.reserve(1000);
    let warm = counting::this_thread(|| {
        for _ in 0..3 {
            rebuild_all(&mut builder, &mut batch, &mut in_order);
        }
    });
    assert_eq!(warm, 0);
}
