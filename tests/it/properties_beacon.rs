//! DESIGN §3 properties of the BEACON estimator, checked with proptest.

use beacon_rl::estimator::{Beacon, BeaconConfig, BeaconFlavour, NormMode};
use beacon_rl::RolloutBatch;
use proptest::prelude::*;

/// One group: per trajectory (terminal reward, milestone flags).
type Group = Vec<(f64, Vec<bool>)>;

fn group_strategy() -> impl Strategy<Value = Group> {
    prop::collection::vec(
        (
            prop_oneof![Just(0.0), Just(1.0), -2.0..2.0f64],
            prop::collection::vec(prop::bool::weighted(0.3), 1..12),
        ),
        1..6,
    )
}

fn batch_strategy() -> impl Strategy<Value = Vec<Group>> {
    prop::collection::vec(group_strategy(), 1..4)
}

fn build(groups: &[Group]) -> (RolloutBatch, Vec<bool>) {
    let mut group_offsets = vec![0];
    let mut traj_offsets = vec![0];
    let mut rewards = Vec::new();
    let mut flags = Vec::new();
    for g in groups {
        for (r, f) in g {
            rewards.push(*r);
            flags.extend_from_slice(f);
            traj_offsets.push(flags.len());
        }
        group_offsets.push(rewards.len());
    }
    (
        RolloutBatch::from_offsets(group_offsets, traj_offsets, rewards).unwrap(),
        flags,
    )
}

/// Independent GRPO over trajectories: (R − μ)/(σ + ε), unbiased σ; singleton μ = 0, σ = 1.
fn grpo_per_step(groups: &[Group], eps: f64) -> Vec<f64> {
    let mut out = Vec::new();
    for g in groups {
        let n = g.len() as f64;
        let (mean, std) = if g.len() == 1 {
            (0.0, 1.0)
        } else {
            let mean = g.iter().map(|t| t.0).sum::<f64>() / n;
            let var = g.iter().map(|t| (t.0 - mean).powi(2)).sum::<f64>() / (n - 1.0);
            (mean, var.sqrt())
        };
        for (r, f) in g {
            out.extend(std::iter::repeat_n((r - mean) / (std + eps), f.len()));
        }
    }
    out
}

/// The paper's §3.2–3.4 equations transcribed literally, one trajectory and one segment at a
/// time, in 1-indexed time as the paper writes them (t = 1..T, t_0 = 0, t_{K+1} = T):
/// Seg_k = { t : t_{k−1} < t ≤ t_k }; r_t = R_ms·γ^(t_k − t) for k ≤ K, 0 for k = K + 1;
/// G_k = { i : K_i ≥ k }; b_k = (1/|G_k|) Σ_{j∈G_k} R_k^(j)/|Seg_k^(j)|; A_seg = r_t − b_k on
/// completed segments and 0 on the unfinished one (DESIGN §3); A_traj = (R − μ)/(σ + ε) with
/// the unbiased σ (μ = 0, σ = 1 for a group of one); Â = w·A_traj + λ·A_seg.
/// Returns Â per step, in batch order.
fn paper_reference(groups: &[Group], c: &BeaconConfig) -> Vec<f64> {
    let mut out = Vec::new();
    for g in groups {
        // Milestone times t_1 < … < t_K of each trajectory (1-indexed).
        let ms: Vec<Vec<usize>> = g
            .iter()
            .map(|(_, f)| (1..=f.len()).filter(|&t| f[t - 1]).collect())
            .collect();
        let r = |i: usize, k: usize, t: usize| -> f64 {
            // Shaped reward of step t in segment k (1-based) of trajectory i.
            if k <= ms[i].len() {
                c.milestone_reward * c.segment_decay.powi((ms[i][k - 1] - t) as i32)
            } else {
                0.0
            }
        };
        let seg_of = |i: usize, t: usize| -> usize {
            // The k with t_{k−1} < t ≤ t_k, or K + 1.
            let mut prev = 0;
            for (k, &tk) in ms[i].iter().enumerate() {
                if prev < t && t <= tk {
                    return k + 1;
                }
                prev = tk;
            }
            ms[i].len() + 1
        };
        let baseline = |k: usize| -> f64 {
            let members: Vec<usize> = (0..g.len()).filter(|&j| ms[j].len() >= k).collect();
            let per_step: f64 = members
                .iter()
                .map(|&j| {
                    let steps: Vec<usize> = (1..=g[j].1.len()).filter(|&t| seg_of(j, t) == k).collect();
                    steps.iter().map(|&t| r(j, k, t)).sum::<f64>() / steps.len() as f64
                })
                .sum();
            per_step / members.len() as f64
        };
        let n = g.len() as f64;
        let (mu, sigma) = if g.len() == 1 {
            (0.0, 1.0)
        } else {
            let mu = g.iter().map(|t| t.0).sum::<f64>() / n;
            (
                mu,
                (g.iter().map(|t| (t.0 - mu).powi(2)).sum::<f64>() / (n - 1.0)).sqrt(),
            )
        };
        for (i, (big_r, f)) in g.iter().enumerate() {
            let a_traj = (big_r - mu) / (sigma + c.std_eps);
            for t in 1..=f.len() {
                let k = seg_of(i, t);
                let a_seg = if k <= ms[i].len() {
                    r(i, k, t) - baseline(k)
                } else {
                    0.0
                };
                out.push(c.trajectory_weight * a_traj + c.segment_weight * a_seg);
            }
        }
    }
    out
}

fn paper(decay: f64, weight: f64) -> Beacon {
    let mut c = BeaconConfig::default();
    c.segment_decay = decay;
    c.segment_weight = weight;
    Beacon::new(c).unwrap()
}

proptest! {
    /// The paper flavour equals the literal transcription of the equations (`paper_reference`)
    /// for any R_ms, γ ∈ [0, 1], λ and trajectory weight.
    #[test]
    fn paper_flavour_matches_the_equations(
        groups in batch_strategy(),
        milestone_reward in prop_oneof![Just(1.0), Just(10.0), 0.01..20.0f64],
        decay in prop_oneof![Just(0.0), Just(1.0), Just(0.95), 0.0..=1.0f64],
        weight in prop_oneof![Just(1.0), 0.0..5.0f64],
        traj_weight in prop_oneof![Just(1.0), Just(0.0), 0.0..5.0f64],
    ) {
        let (batch, flags) = build(&groups);
        let c = BeaconConfig::default()
            .with_milestone_reward(milestone_reward)
            .with_segment_decay(decay)
            .with_segment_weight(weight)
            .with_trajectory_weight(traj_weight);
        let out = Beacon::new(c).unwrap().compute(&batch, &flags).unwrap();
        let want = paper_reference(&groups, &c);
        for (s, (a, b)) in out.advantages.iter().zip(&want).enumerate() {
            prop_assert!((a - b).abs() <= 1e-9 * b.abs().max(1.0), "step {s}: {a} vs {b}");
        }
    }

    #[test]
    fn zero_segment_weight_is_grpo(groups in batch_strategy(), decay in 0.0..=1.0f64) {
        let (batch, flags) = build(&groups);
        let out = paper(decay, 0.0).compute(&batch, &flags).unwrap();
        let grpo = grpo_per_step(&groups, 1e-6);
        for (a, b) in out.advantages.iter().zip(&grpo) {
            prop_assert!((a - b).abs() <= 1e-12 * b.abs().max(1.0), "{a} vs {b}");
        }
    }

    #[test]
    fn no_milestones_is_grpo(mut groups in batch_strategy(), weight in 0.0..5.0f64) {
        for g in &mut groups {
            for t in g.iter_mut() {
                t.1.iter_mut().for_each(|f| *f = false);
            }
        }
        let (batch, flags) = build(&groups);
        let out = paper(0.95, weight).compute(&batch, &flags).unwrap();
        let grpo = grpo_per_step(&groups, 1e-6);
        for (a, b) in out.advantages.iter().zip(&grpo) {
            prop_assert!((a - b).abs() <= 1e-12 * b.abs().max(1.0), "{a} vs {b}");
        }
        prop_assert!(out.segment_advantages.iter().all(|&s| s == 0.0));
    }

    /// A_seg in completed segment k depends only on the lengths of segment k in G_k: changing
    /// what comes after each trajectory's k-th milestone, and every terminal reward, leaves it
    /// unchanged.
    #[test]
    fn variance_isolation(
        group in group_strategy(),
        k in 1usize..4,
        tails in prop::collection::vec(prop::collection::vec(any::<bool>(), 0..8), 6),
        new_rewards in prop::collection::vec(-3.0..3.0f64, 6),
    ) {
        let (batch, flags) = build(std::slice::from_ref(&group));
        let b = paper(0.9, 1.0);
        let before = b.compute(&batch, &flags).unwrap();

        // k-th milestone position of each trajectory, if it has K >= k.
        let kth = |f: &[bool]| f.iter().enumerate().filter(|x| *x.1).nth(k - 1).map(|x| x.0);
        let mut changed = group.clone();
        for (i, t) in changed.iter_mut().enumerate() {
            t.0 = new_rewards[i];
            if let Some(p) = kth(&t.1) {
                t.1.truncate(p + 1);
                t.1.extend_from_slice(&tails[i]);
            }
        }
        let (batch2, flags2) = build(std::slice::from_ref(&changed));
        let after = b.compute(&batch2, &flags2).unwrap();

        let (mut s1, mut s2) = (0, 0);
        for (t_old, t_new) in group.iter().zip(&changed) {
            if let Some(p) = kth(&t_old.1) {
                // steps 0..=p lie in completed segments 1..=k
                for t in 0..=p {
                    prop_assert_eq!(before.segment_advantages[s1 + t], after.segment_advantages[s2 + t]);
                    prop_assert_eq!(before.segments[s1 + t], after.segments[s2 + t]);
                }
            }
            s1 += t_old.1.len();
            s2 += t_new.1.len();
        }
    }

    /// Shaped rewards strictly increase toward the milestone for 0 < γ < 1; γ = 1 is uniform;
    /// γ = 0 rewards only milestone steps; the unfinished segment gets 0.
    #[test]
    fn shaping_monotone(groups in batch_strategy(), decay in 0.01..0.99f64) {
        let (batch, flags) = build(&groups);
        for (d, check) in [(decay, 0u8), (1.0, 1), (0.0, 2)] {
            let out = paper(d, 1.0).compute(&batch, &flags).unwrap();
            for j in 0..batch.num_trajectories() {
                let steps = crate::common::trajectory_steps(&batch, j);
                let last_ms = steps.clone().rev().find(|&s| flags[s]);
                for s in steps.clone() {
                    let r = out.shaped_rewards[s];
                    match last_ms {
                        Some(m) if s <= m => match check {
                            0 => if !flags[s] {
                                prop_assert!(r < out.shaped_rewards[s + 1], "not increasing at {s}");
                            },
                            1 => prop_assert_eq!(r, 1.0),
                            _ => prop_assert_eq!(r, if flags[s] { 1.0 } else { 0.0 }),
                        },
                        _ => prop_assert_eq!(r, 0.0),
                    }
                }
            }
        }
    }

    /// Σ_{i∈G_k} mean_{t∈Seg_k^(i)} A_seg = 0 for every completed segment k.
    #[test]
    fn segment_baseline_is_zero_sum(groups in batch_strategy(), decay in 0.0..=1.0f64) {
        let (batch, flags) = build(&groups);
        let out = paper(decay, 1.0).compute(&batch, &flags).unwrap();
        for g in 0..batch.num_groups() {
            let mut sums: Vec<f64> = Vec::new();
            for j in batch.group_trajectories(g) {
                let steps = crate::common::trajectory_steps(&batch, j);
                let k_total = steps.clone().filter(|&s| flags[s]).count();
                for k in 0..k_total {
                    let seg: Vec<usize> = steps.clone().filter(|&s| out.segments[s] == k).collect();
                    let mean = seg.iter().map(|&s| out.segment_advantages[s]).sum::<f64>() / seg.len() as f64;
                    if sums.len() <= k { sums.push(0.0); }
                    sums[k] += mean;
                }
            }
            for s in sums {
                prop_assert!(s.abs() < 1e-9, "segment sum {s}");
            }
        }
    }

    /// The output mapped back to rows does not depend on how the caller interleaves
    /// trajectories (both flavours).
    #[test]
    fn row_order_invariance(groups in batch_strategy(), seed in any::<u64>(), std_norm in any::<bool>()) {
        let (batch, flags) = build(&groups);
        // keys per row in trajectory-major order
        let mut uid = Vec::new();
        let mut traj = Vec::new();
        let mut rew = Vec::new();
        for j in 0..batch.num_trajectories() {
            let g = (0..batch.num_groups()).find(|&g| batch.group_trajectories(g).contains(&j)).unwrap();
            for _ in crate::common::trajectory_steps(&batch, j) {
                uid.push(g);
                traj.push(j);
                rew.push(batch.terminal_rewards()[j]);
            }
        }
        // A random interleaving that keeps each trajectory's step order: sort rows by a
        // pseudo-random key per row, then restore step order within each trajectory.
        let n = uid.len();
        let mut perm: Vec<usize> = (0..n).collect();
        let mut x = seed | 1;
        let mut keys: Vec<u64> = (0..n).map(|_| { x ^= x << 13; x ^= x >> 7; x ^= x << 17; x }).collect();
        perm.sort_by_key(|&i| keys[i]);
        for j in 0..batch.num_trajectories() {
            let mut pos: Vec<usize> = (0..n).filter(|&p| traj[perm[p]] == j).collect();
            let mut orig: Vec<usize> = pos.iter().map(|&p| perm[p]).collect();
            orig.sort();
            for (p, o) in pos.iter_mut().zip(orig) { perm[*p] = o; }
        }
        keys.clear();
        let p_uid: Vec<_> = perm.iter().map(|&i| uid[i]).collect();
        let p_traj: Vec<_> = perm.iter().map(|&i| traj[i]).collect();
        let p_rew: Vec<_> = perm.iter().map(|&i| rew[i]).collect();
        let p_flags: Vec<_> = perm.iter().map(|&i| flags[i]).collect();
        let shuffled = RolloutBatch::from_row_keys(&p_uid, &p_traj, &p_rew).unwrap();
        let mode = if std_norm { NormMode::MeanStdNorm } else { NormMode::MeanNorm };
        for cfg in [BeaconConfig::default(), BeaconConfig::official().with_flavour(BeaconFlavour::Official { norm: mode })] {
            let b = Beacon::new(cfg).unwrap();
            let base = b.compute(&batch, &flags).unwrap();
            let out = b.compute(&shuffled, &p_flags).unwrap();
            for (p, &i) in perm.iter().enumerate() {
                prop_assert!((out.advantages[p] - base.advantages[i]).abs() < 1e-9);
                prop_assert_eq!(out.segments[p], base.segments[i]);
            }
        }
    }

    /// Arbitrary finite inputs never produce a non-finite advantage.
    #[test]
    fn finite_in_finite_out(groups in batch_strategy(), decay in 0.0..=1.0f64, std_norm in any::<bool>()) {
        let (batch, flags) = build(&groups);
        let mode = if std_norm { NormMode::MeanStdNorm } else { NormMode::MeanNorm };
        for cfg in [BeaconConfig::default(), BeaconConfig::official().with_flavour(BeaconFlavour::Official { norm: mode }).with_segment_decay(decay)] {
            let out = Beacon::new(cfg).unwrap().compute(&batch, &flags).unwrap();
            prop_assert!(out.advantages.iter().all(|a| a.is_finite()));
        }
    }
}
