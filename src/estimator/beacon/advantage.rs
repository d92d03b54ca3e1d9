//! The dual-scale advantage (paper §3.4, Algorithm 1): per step,
//!
//! Â_{i,t} = w_traj · A^traj_i + λ · A^seg_{i,t}
//!
//! - trajectory level, GRPO over the group's terminal rewards:
//!   A^traj_i = (R_i − μ) / (σ + ε), σ unbiased; a group of one trajectory follows
//!   [`SingletonRule`];
//! - segment level, for step t of completed segment k of trajectory i (r_t from
//!   [`shaping`](super::shaping)): G_k = { j : K_j ≥ k },
//!   b_k = (1/|G_k|) Σ_{j∈G_k} R_k^(j) / |Seg_k^(j)|,  A^seg_{i,t} = r_t − b_k; the unfinished
//!   segment gets A^seg = 0 (under [`SegmentBaseline::Entered`](super::SegmentBaseline::Entered),
//!   b_k runs over every rollout that entered segment k and its unfinished steps get 0 − b_k).
//!
//! The official flavour computes both levels over step rows instead (see the
//! [module docs](super)). Groups are independent: under the `rayon` feature chunks of whole
//! groups run in parallel, each with its own scratch, with the same bits as the serial run.

use crate::batch::RolloutBatch;
use crate::estimator::StepScores;
use crate::stats::{group_means, group_spreads, GroupStats, NormMode, SingletonRule};

use super::config::{BeaconConfig, BeaconFlavour, SegmentBaseline};
use super::partition;
use super::shaping::DecayTable;

/// BEACON's part of the [`Workspace`](crate::estimator::Workspace): buffers grow to the largest
/// batch seen and are then reused without allocating.
#[derive(Debug, Clone, Default)]
pub(crate) struct BeaconScratch {
    table: DecayTable,
    /// Per internal step: milestone flag, segment id, shaped reward, A^traj, A^seg.
    flags: Vec<bool>,
    pub(super) seg: Vec<usize>,
    pub(super) reward: Vec<f64>,
    pub(super) traj: Vec<f64>,
    pub(super) seg_adv: Vec<f64>,
    /// Per-group scratch, one per chunk of groups (one for the serial path; under the `rayon`
    /// feature one per pool thread, kept and reused across calls).
    scratch: Vec<GroupScratch>,
    /// With the caller's `row_scores`: each row's score in internal step order, and each
    /// trajectory's score (its first row's), in batch order.
    row_scores: Vec<f64>,
    traj_scores: Vec<f64>,
    /// The milestone flags a random Table 3 row draws (per caller row), kept across calls by
    /// [`BeaconAblation`](crate::ablation::BeaconAblation)'s workspace entry points.
    pub(crate) ablation_flags: Vec<bool>,
}

/// Scratch of one group at a time.
#[derive(Debug, Clone, Default)]
struct GroupScratch {
    /// Paper flavour, per segment id within the current group: Σ, count, min and max of
    /// R_k/|Seg_k|.
    sum: Vec<f64>,
    count: Vec<usize>,
    lo: Vec<f64>,
    hi: Vec<f64>,
    /// Official flavour: statistics of each (group, segment id).
    seg_stats: Vec<GroupStats>,
}

/// The internal steps `base..base + len` of a run of whole groups (every column indexed by
/// step − base), with the scratch of the chunk that runs them.
struct Part<'a> {
    base: usize,
    table: &'a DecayTable,
    /// Each trajectory's score (absolute trajectory index): R(τ), or its first row's score.
    traj_scores: &'a [f64],
    /// The caller's row scores in internal step order (absolute step index), when given.
    row_scores: Option<&'a [f64]>,
    flags: &'a [bool],
    seg: &'a mut [usize],
    reward: &'a mut [f64],
    traj: &'a mut [f64],
    seg_adv: &'a mut [f64],
    sum: &'a mut Vec<f64>,
    count: &'a mut Vec<usize>,
    lo: &'a mut Vec<f64>,
    hi: &'a mut Vec<f64>,
    seg_stats: &'a mut Vec<GroupStats>,
}

/// Internal steps per chunk below which running BEACON's groups in parallel does not pay.
const MIN_STEPS_PER_CHUNK: usize = 4096;

/// Â = w_traj·A^traj + λ·A^seg.
#[inline]
pub(super) fn combine(c: &BeaconConfig, traj: f64, seg: f64) -> f64 {
    c.trajectory_weight * traj + c.segment_weight * seg
}

impl BeaconScratch {
    /// Sizes the per-step columns for `batch`, gathers the flags (and row scores) into
    /// internal step order and prepares the decay table; returns the number of chunks.
    fn prepare(
        &mut self,
        c: &BeaconConfig,
        batch: &RolloutBatch,
        milestones: &[bool],
        scores: StepScores<'_>,
    ) -> usize {
        let n = batch.num_steps();
        self.flags.resize(n, false);
        batch.gather_into(milestones, &mut self.flags);
        if let Some(rows) = scores.per_row() {
            self.row_scores.resize(n, 0.0);
            batch.gather_into(rows, &mut self.row_scores);
            self.traj_scores.clear();
            self.traj_scores
                .extend((0..batch.num_trajectories()).map(|j| scores.trajectory(j)));
        }
        self.seg.resize(n, 0);
        self.reward.resize(n, 0.0);
        self.traj.resize(n, 0.0);
        self.seg_adv.resize(n, 0.0);
        let offs = batch.trajectory_offsets();
        let max_len = offs.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
        self.table.prepare(c.milestone_reward, c.segment_decay, max_len);
        let chunks = crate::parallel::chunk_count(n, MIN_STEPS_PER_CHUNK);
        if self.scratch.len() < chunks {
            self.scratch.resize_with(chunks, GroupScratch::default);
        }
        // Segment ids never exceed the trajectory length.
        for sc in &mut self.scratch[..chunks] {
            sc.sum.resize(max_len + 1, 0.0);
            sc.count.resize(max_len + 1, 0);
            sc.lo.resize(max_len + 1, 0.0);
            sc.hi.resize(max_len + 1, 0.0);
        }
        chunks
    }
}

/// Fills the scratch's per-internal-step columns: segment ids, shaped rewards, A^traj, A^seg.
pub(super) fn run(
    c: &BeaconConfig,
    batch: &RolloutBatch,
    milestones: &[bool],
    scores: StepScores<'_>,
    ws: &mut BeaconScratch,
) {
    let chunks = ws.prepare(c, batch, milestones, scores);
    let (table, flags) = (&ws.table, &ws.flags[..]);
    let (traj_scores, row_scores) = match scores.per_row() {
        Some(_) => (&ws.traj_scores[..], Some(&ws.row_scores[..])),
        None => (batch.terminal_rewards(), None),
    };
    let (first, rest) = ws.scratch.split_at_mut(1);
    let GroupScratch {
        sum,
        count,
        lo,
        hi,
        seg_stats,
    } = &mut first[0];
    let whole = Part {
        base: 0,
        table,
        traj_scores,
        row_scores,
        flags,
        seg: &mut ws.seg,
        reward: &mut ws.reward,
        traj: &mut ws.traj,
        seg_adv: &mut ws.seg_adv,
        sum,
        count,
        lo,
        hi,
        seg_stats,
    };
    let groups = 0..batch.num_groups();
    if chunks <= 1 {
        self::groups(c, batch, groups, whole);
        return;
    }
    // Chunks of whole groups with about n / chunks steps each; each chunk owns its groups'
    // steps (contiguous) and one scratch.
    let (offs, goffs) = (batch.trajectory_offsets(), batch.group_offsets());
    let mut bounds = [0; crate::parallel::MAX_CHUNKS + 1];
    let step_of = |g: usize| offs[goffs[g]];
    let bounds = crate::parallel::balance(groups.end, chunks, step_of, &mut bounds);
    // A part holds its first chunk's scratch; `pool` those of its other chunks.
    crate::parallel::for_chunks(
        bounds,
        (whole, rest),
        &|(p, pool): (Part<'_>, &mut [GroupScratch]), g, left| {
            let (pool_a, pool_b) = pool.split_at_mut(left - 1);
            let Some((first_b, pool_b)) = pool_b.split_first_mut() else {
                unreachable!("one scratch per chunk")
            };
            let (a, b) = p.split(step_of(g), first_b);
            ((a, pool_a), (b, pool_b))
        },
        &|k, (p, _)| self::groups(c, batch, bounds[k]..bounds[k + 1], p),
    );
}

/// Runs groups `groups` (whose steps `part` covers).
fn groups(c: &BeaconConfig, batch: &RolloutBatch, groups: std::ops::Range<usize>, mut part: Part<'_>) {
    for g in groups {
        let trajs = batch.group_trajectories(g);
        match c.flavour {
            BeaconFlavour::Paper => paper_group(c, batch, trajs, &mut part),
            BeaconFlavour::Official { norm } => official_group(c, batch, trajs, norm, &mut part),
        }
    }
}

/// Shapes rewards and assigns segment ids for one trajectory (internal steps `lo..hi`);
/// returns K, its number of milestones.
fn shape_trajectory(ws: &mut Part<'_>, lo: usize, hi: usize) -> usize {
    let (seg, reward, table) = (&mut ws.seg[lo..hi], &mut ws.reward[lo..hi], ws.table);
    partition::for_each_step_rev(&ws.flags[lo..hi], |t, k, distance| {
        seg[t] = k;
        reward[t] = match distance {
            // The table covers the longest trajectory; NaN (caught by the output check)
            // rather than a panic if that invariant ever broke.
            Some(d) => table.reward(d).unwrap_or(f64::NAN),
            None => 0.0,
        };
    })
}

fn paper_group(c: &BeaconConfig, batch: &RolloutBatch, trajs: std::ops::Range<usize>, ws: &mut Part<'_>) {
    let offs = batch.trajectory_offsets();
    // Steps are indexed within the part.
    let b = ws.base;
    // R(τ), or each trajectory's row score (its rows agree: checked by the caller).
    let traj_scores = ws.traj_scores;
    let rewards = &traj_scores[trajs.clone()];
    // Trajectory level: GRPO over the group's terminal rewards.
    let (mean, std) = if rewards.len() == 1 {
        (0.0, 1.0)
    } else {
        let s = GroupStats::of(rewards);
        (s.mean, s.std)
    };
    let singleton_zero = rewards.len() == 1 && c.singleton == SingletonRule::Zero;

    // Segment level, pass 1: per-step mean return R_k/|Seg_k| summed over G_k (E_k under
    // `Entered`: an unfinished segment with steps counts with return 0).
    let entered = c.segment_baseline == SegmentBaseline::Entered;
    let mut max_k = 0;
    for j in trajs.clone() {
        let (lo, hi) = (offs[j] - b, offs[j + 1] - b);
        shape_trajectory(ws, lo, hi);
        let completed = partition::completed_lengths(&ws.flags[lo..hi])
            .map(|len| ws.table.mean_return(len).unwrap_or(f64::NAN));
        // Steps after the last milestone: a segment entered and not finished.
        let unfinished = (entered && !ws.flags[hi - 1]).then_some(0.0);
        for (k, m) in completed.chain(unfinished).enumerate() {
            if k >= max_k {
                ws.sum[k] = 0.0;
                ws.count[k] = 0;
                ws.lo[k] = f64::INFINITY;
                ws.hi[k] = f64::NEG_INFINITY;
                max_k = k + 1;
            }
            ws.sum[k] += m;
            ws.count[k] += 1;
            ws.lo[k] = ws.lo[k].min(m);
            ws.hi[k] = ws.hi[k].max(m);
        }
    }
    // Pass 2: b_k and the advantages. b_k is a mean of per-step returns, each in
    // [R_ms·γ^(L−1), R_ms] ⊆ [0, R_ms]: kept in [min, max] of them, so that equal returns
    // (γ = 1, or equal lengths) give exactly that return, as the official flavour's means.
    for k in 0..max_k {
        let mean = ws.sum[k] / ws.count[k] as f64;
        ws.sum[k] = if mean.is_finite() {
            mean.clamp(ws.lo[k], ws.hi[k])
        } else {
            mean
        };
    }
    for (j, &r) in trajs.zip(rewards) {
        let a_traj = if singleton_zero {
            0.0
        } else {
            (r - mean) / (std + c.std_eps)
        };
        let (lo, hi) = (offs[j] - b, offs[j + 1] - b);
        let completed = ws.seg[hi - 1] + usize::from(ws.flags[hi - 1]);
        for s in lo..hi {
            ws.traj[s] = a_traj;
            let k = ws.seg[s];
            ws.seg_adv[s] = if k < completed || entered {
                // Unfinished steps (k = completed) have r = 0: 0 − b_k under `Entered`.
                ws.reward[s] - ws.sum[k]
            } else {
                0.0
            };
        }
    }
}

/// The official flavour for one group: row statistics at both levels (see the module docs).
fn official_group(
    c: &BeaconConfig,
    batch: &RolloutBatch,
    trajs: std::ops::Range<usize>,
    mode: NormMode,
    ws: &mut Part<'_>,
) {
    let eps = c.std_eps;
    let offs = batch.trajectory_offsets();
    let (traj_scores, row_scores) = (ws.traj_scores, ws.row_scores);
    let rewards = &traj_scores[trajs.clone()];
    let (lo_g, hi_g) = (offs[trajs.start], offs[trajs.end]);
    // Steps are indexed within the part.
    let b = ws.base;
    let rows = hi_g - lo_g;
    // Row scores that differ within a trajectory of the group (verl-agent's invalid-action
    // penalty): the release's statistics over the rows' own scores. Otherwise every row
    // carries its trajectory's score and the closed form below gives the same statistics
    // (and, for R(τ), the same bits as without row scores).
    let own = row_scores.filter(|s| {
        trajs
            .clone()
            .any(|j| s[offs[j]..offs[j + 1]].iter().any(|&x| x != traj_scores[j]))
    });

    let (mean, std) = match own {
        _ if rows == 1 => (0.0, 1.0),
        Some(s) => {
            let st = GroupStats::of(&s[lo_g..hi_g]);
            (st.mean, st.std)
        }
        None => row_stats(
            trajs.clone().map(|j| (offs[j + 1] - offs[j]) as f64),
            rewards,
            rows,
        ),
    };

    // Segment level: the group's rows (contiguous steps lo_g..hi_g) grouped by segment id.
    let mut num_ids = 0;
    for j in trajs.clone() {
        shape_trajectory(ws, offs[j] - b, offs[j + 1] - b);
        num_ids = num_ids.max(ws.seg[offs[j + 1] - b - 1] + 1);
    }
    let (values, labels) = (&ws.reward[lo_g - b..hi_g - b], &ws.seg[lo_g - b..hi_g - b]);
    group_means(values, labels, num_ids, ws.seg_stats);
    if mode == NormMode::MeanStdNorm {
        group_spreads(values, labels, ws.seg_stats);
    }
    for (j, &r) in trajs.zip(rewards) {
        let a_traj = mode.normalize(r, mean, std, eps);
        for s in offs[j] - b..offs[j + 1] - b {
            ws.traj[s] = match own {
                Some(x) => mode.normalize(x[s + b], mean, std, eps),
                None => a_traj,
            };
            let k = &ws.seg_stats[ws.seg[s]];
            // A singleton segment group has nothing to compare with: 0, as in the release.
            ws.seg_adv[s] = if k.count == 1 {
                0.0
            } else {
                mode.normalize(ws.reward[s], k.mean, k.std, eps)
            };
        }
    }
}

/// The official flavour's trajectory level over rows: trajectory j contributes its reward
/// once per step, so the row sums are Σ n_j·R_j and Σ n_j·(R_j − μ)² (one term per
/// trajectory, `lens` = n_j). The mean is clamped to the rewards' range, as in
/// [`GroupStats`], so equal rewards give 0.
fn row_stats(lens: impl Iterator<Item = f64> + Clone, rewards: &[f64], rows: usize) -> (f64, f64) {
    let (lo, hi) = rewards
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &r| {
            (l.min(r), h.max(r))
        });
    let raw_mean = lens.clone().zip(rewards).map(|(n, &r)| n * r).sum::<f64>() / rows as f64;
    let mean = raw_mean.clamp(lo, hi);
    let ss: f64 = lens
        .clone()
        .zip(rewards)
        .map(|(n, &r)| n * (r - mean) * (r - mean))
        .sum();
    let std = (ss / (rows - 1) as f64).sqrt();
    if raw_mean.is_finite() && std.is_finite() {
        (mean, std)
    } else {
        // A sum overflowed (finite rewards near f64::MAX; the clamp would hide it in the
        // mean): redo both in units of the group's max |R| (only here, so every finite
        // result keeps its bits).
        scaled_row_stats(lens, rewards, rows, lo, hi)
    }
}

/// Row-weighted mean and unbiased std of the trajectory rewards (trajectory j counted once per
/// step), computed in units of s = max |R|: μ = s·Σ n_j (R_j/s) / N,
/// σ = s·√(Σ n_j (R_j/s − μ/s)² / (N − 1)). σ is NaN when it exceeds f64::MAX, so that the
/// output check reports it instead of a division by ∞ giving a plausible 0.
fn scaled_row_stats(
    lens: impl Iterator<Item = f64> + Clone,
    rewards: &[f64],
    rows: usize,
    lo: f64,
    hi: f64,
) -> (f64, f64) {
    let scale = hi.max(-lo);
    let mean_s = lens
        .clone()
        .zip(rewards)
        .map(|(n, &r)| n * (r / scale))
        .sum::<f64>()
        / rows as f64;
    let mean = (mean_s * scale).clamp(lo, hi);
    let ss: f64 = lens
        .zip(rewards)
        .map(|(n, &r)| {
            let d = r / scale - mean / scale;
            n * d * d
        })
        .sum();
    let std = scale * (ss / (rows - 1) as f64).sqrt();
    (mean, if std.is_finite() { std } else { f64::NAN })
}

impl<'a> Part<'a> {
    /// The steps before absolute step `at` (keeping this part's scratch) and the rest (with
    /// `scratch`).
    fn split(self, at: usize, scratch: &'a mut GroupScratch) -> (Self, Self) {
        let local = at - self.base;
        let (flags_a, flags_b) = self.flags.split_at(local);
        let (seg_a, seg_b) = self.seg.split_at_mut(local);
        let (reward_a, reward_b) = self.reward.split_at_mut(local);
        let (traj_a, traj_b) = self.traj.split_at_mut(local);
        let (adv_a, adv_b) = self.seg_adv.split_at_mut(local);
        let b = Part {
            base: at,
            table: self.table,
            traj_scores: self.traj_scores,
            row_scores: self.row_scores,
            flags: flags_b,
            seg: seg_b,
            reward: reward_b,
            traj: traj_b,
            seg_adv: adv_b,
            sum: &mut scratch.sum,
            count: &mut scratch.count,
            lo: &mut scratch.lo,
            hi: &mut scratch.hi,
            seg_stats: &mut scratch.seg_stats,
        };
        let a = Part {
            flags: flags_a,
            seg: seg_a,
            reward: reward_a,
            traj: traj_a,
            seg_adv: adv_a,
            ..self
        };
        (a, b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::estimator::Beacon;
    use crate::estimator::{AdvantageEstimator, EstimatorInput, Workspace};
    use approx::assert_abs_diff_eq;

    fn beacon(c: BeaconConfig) -> Beacon {
        Beacon::new(c).unwrap()
    }

    #[test]
    fn paper_hand_case_three_trajectories() {
        // Group of 3, R_ms = 1, γ = 0.5, λ = 1, ε = 1e-6.
        // a: [m, ., m, .]  R=1   segments: {0} len 1, {1,2} len 2, unfinished {3}
        // b: [., m, .]     R=0   segments: {0,1} len 2, unfinished {2}
        // c: [., .]        R=0   no milestone
        // A_traj: mean 1/3, std = sqrt(((2/3)^2 + 2(1/3)^2)/2) = sqrt(1/3)
        // G_1 = {a, b}: a's seg 1 mean return 1/1 = 1; b's seg 1 (len 2): (0.5 + 1)/2 = 0.75
        //   b_1 = (1 + 0.75)/2 = 0.875
        // G_2 = {a}: a's seg 2 (len 2) mean return 0.75, b_2 = 0.75
        // a: r = [1, 0.5, 1, 0] -> A_seg = [1-0.875, 0.5-0.75, 1-0.75, 0] = [0.125, -0.25, 0.25, 0]
        // b: r = [0.5, 1, 0]    -> A_seg = [0.5-0.875, 1-0.875, 0] = [-0.375, 0.125, 0]
        // c: A_seg = [0, 0]
        let c = BeaconConfig {
            segment_decay: 0.5,
            ..BeaconConfig::default()
        };
        let batch = RolloutBatch::from_blocks(3, &[4, 3, 2], vec![1.0, 0.0, 0.0]).unwrap();
        let flags = [true, false, true, false, false, true, false, false, false];
        let out = beacon(c).compute(&batch, &flags).unwrap();
        let std = (1.0f64 / 3.0).sqrt();
        let ta = (2.0 / 3.0) / (std + 1e-6);
        let tb = (-1.0 / 3.0) / (std + 1e-6);
        let seg = [0.125, -0.25, 0.25, 0.0, -0.375, 0.125, 0.0, 0.0, 0.0];
        let traj = [ta, ta, ta, ta, tb, tb, tb, tb, tb];
        assert_eq!(
            out.shaped_rewards,
            vec![1.0, 0.5, 1.0, 0.0, 0.5, 1.0, 0.0, 0.0, 0.0]
        );
        assert_eq!(out.segments, vec![0, 1, 1, 2, 0, 0, 1, 0, 0]);
        for i in 0..9 {
            assert_abs_diff_eq!(out.segment_advantages[i], seg[i], epsilon = 1e-12);
            assert_abs_diff_eq!(out.trajectory_advantages[i], traj[i], epsilon = 1e-12);
            assert_abs_diff_eq!(out.advantages[i], traj[i] + seg[i], epsilon = 1e-12);
        }
    }

    #[test]
    fn paper_hand_case_partition_edges() {
        // One group of four, R_ms = 1, γ = 0.5, λ = 2, w_traj = 0.5, ε = 1e-6 (paper §3.2–3.4,
        // 0-indexed steps, t_0 = −1):
        // a: [m]        R=1  single step on a milestone: Seg_1 = {0}, K = 1, Seg_2 empty
        // b: [.]        R=0  single step, no milestone: K = 0, everything unfinished
        // c: [m, m, .]  R=0  consecutive milestones: Seg_1 = {0}, Seg_2 = {1}, unfinished {2}
        // d: [., ., m]  R=1  milestone on the last step: Seg_1 = {0, 1, 2}, K = 1, Seg_2 empty
        // r_t = γ^(t_k − t): a [1]; b [0]; c [1, 1, 0]; d [0.25, 0.5, 1] (rising toward t_k).
        // A_traj: R = (1, 0, 0, 1), μ = 1/2, σ = √((4 · 1/4)/3) = √(1/3), A = ±(1/2)/(σ + ε).
        // G_1 = {a, c, d}: R_1/|Seg_1| = 1, 1, 1.75/3 = 7/12, so b_1 = (2 + 7/12)/3 = 31/36.
        // G_2 = {c}: b_2 = 1/1 = 1.
        // A_seg: a [1 − 31/36 = 5/36]; b [0]; c [5/36, 1 − 1 = 0, 0 (unfinished)];
        //        d [9/36 − 31/36 = −22/36, 18/36 − 31/36 = −13/36, 5/36].
        // Zero sum over G_1 of the per-segment means: 5/36 + 5/36 + (−30/36)/3 = 0.
        let c = BeaconConfig {
            segment_decay: 0.5,
            segment_weight: 2.0,
            trajectory_weight: 0.5,
            ..BeaconConfig::default()
        };
        let batch = RolloutBatch::from_blocks(4, &[1, 1, 3, 3], vec![1.0, 0.0, 0.0, 1.0]).unwrap();
        let flags = [true, false, true, true, false, false, false, true];
        let out = beacon(c).compute(&batch, &flags).unwrap();
        assert_eq!(out.segments, vec![0, 0, 0, 1, 2, 0, 0, 0]);
        assert_eq!(out.shaped_rewards, vec![1.0, 0.0, 1.0, 1.0, 0.0, 0.25, 0.5, 1.0]);
        let t = 0.5 / ((1.0f64 / 3.0).sqrt() + 1e-6);
        let traj = [t, -t, -t, -t, -t, t, t, t];
        let seg = [5.0, 0.0, 5.0, 0.0, 0.0, -22.0, -13.0, 5.0].map(|x| x / 36.0);
        for i in 0..8 {
            assert_abs_diff_eq!(out.trajectory_advantages[i], traj[i], epsilon = 1e-12);
            assert_abs_diff_eq!(out.segment_advantages[i], seg[i], epsilon = 1e-12);
            assert_abs_diff_eq!(out.advantages[i], 0.5 * traj[i] + 2.0 * seg[i], epsilon = 1e-12);
        }
    }

    #[test]
    fn paper_singleton_group_compares_its_segments_with_themselves() {
        // One trajectory [., m, .], R = 0.7, R_ms = 1, γ = 0.5: μ = 0, σ = 1, so
        // A_traj = 0.7/(1 + 1e-6). G_1 = {itself}: r = [0.5, 1, 0], b_1 = 1.5/2 = 0.75,
        // A_seg = [−0.25, 0.25, 0 (unfinished)]. Under SingletonRule::Zero only A_traj is 0.
        let batch = RolloutBatch::from_blocks(1, &[3], vec![0.7]).unwrap();
        let flags = [false, true, false];
        let mut c = BeaconConfig {
            segment_decay: 0.5,
            ..BeaconConfig::default()
        };
        let out = beacon(c).compute(&batch, &flags).unwrap();
        assert_eq!(out.segment_advantages, vec![-0.25, 0.25, 0.0]);
        assert_eq!(out.trajectory_advantages, vec![0.7 / (1.0 + 1e-6); 3]);
        c.singleton = SingletonRule::Zero;
        let out = beacon(c).compute(&batch, &flags).unwrap();
        assert_eq!(out.advantages, vec![-0.25, 0.25, 0.0]);
    }

    #[test]
    fn documented_paper_vs_official_difference() {
        // The worked example of the module docs.
        let batch = RolloutBatch::from_blocks(2, &[2, 3], vec![1.0, 0.0]).unwrap();
        let flags = [true, false, false, false, false];
        let mut c = BeaconConfig::official();
        c.segment_decay = 0.5;
        let out = beacon(c).compute(&batch, &flags).unwrap();
        // row mean of R = (1 + 1 + 0 + 0 + 0)/5 = 0.4
        let traj = [0.6, 0.6, -0.4, -0.4, -0.4];
        // segment 0: a0 (10), b0..b2 (0): mean 2.5; segment 1: a1 alone -> 0
        let seg = [7.5, 0.0, -2.5, -2.5, -2.5];
        for i in 0..5 {
            assert_abs_diff_eq!(out.trajectory_advantages[i], traj[i], epsilon = 1e-12);
            assert_abs_diff_eq!(out.segment_advantages[i], seg[i], epsilon = 1e-12);
        }
        let p = BeaconConfig {
            milestone_reward: 10.0,
            segment_decay: 0.5,
            ..BeaconConfig::default()
        };
        let out = beacon(p).compute(&batch, &flags).unwrap();
        // std of (1, 0) = 0.7071..; a's segment 1 is alone in G_1 -> A_seg = 10 - 10 = 0
        let t = 0.5 / (0.5f64.sqrt() + 1e-6);
        assert_abs_diff_eq!(out.trajectory_advantages[0], t, epsilon = 1e-12);
        assert_abs_diff_eq!(out.trajectory_advantages[2], -t, epsilon = 1e-12);
        assert_eq!(out.segment_advantages, vec![0.0; 5]);
    }

    fn entered(decay: f64) -> Beacon {
        let c = BeaconConfig::default()
            .with_segment_decay(decay)
            .with_segment_baseline(SegmentBaseline::Entered);
        beacon(c)
    }

    #[test]
    fn blind_spot_example_completed_vs_entered() {
        // The module docs' example. One group, no success (R = 0 everywhere, so A^traj = 0),
        // R_ms = 1, γ = 0.5, doors-only flags:
        // a: [., m, .]  the door in two steps, then one step (segment 2, unfinished)
        // b: [m, .]     the door in one step, then one step (segment 2, unfinished)
        // c: [.]        the trapdoor: the episode ends at once, no milestone
        // Completed (paper): G_1 = {a, b}; a's per-step mean (0.5 + 1)/2 = 0.75, b's 1,
        //   b_1 = 0.875. A^seg a = [−0.375, 0.125, 0], b = [0.125, 0], c = [0]: reaching the
        //   door slowly sums to −0.25, quitting to 0.
        // Entered: E_1 = {a, b, c}, c counting 0: b_1 = 1.75/3 = 7/12; E_2 = {a, b}, both 0:
        //   b_2 = 0. A^seg a = [0.5 − 7/12, 1 − 7/12, 0] = [−1/12, 5/12, 0], b = [5/12, 0],
        //   c = [−7/12]: quitting is now the worst.
        let batch = RolloutBatch::from_blocks(3, &[3, 2, 1], vec![0.0; 3]).unwrap();
        let flags = [false, true, false, true, false, false];
        let p = BeaconConfig {
            segment_decay: 0.5,
            ..BeaconConfig::default()
        };
        let out = beacon(p).compute(&batch, &flags).unwrap();
        let want = [-0.375, 0.125, 0.0, 0.125, 0.0, 0.0];
        for (got, want) in out.segment_advantages.iter().zip(want) {
            assert_abs_diff_eq!(*got, want, epsilon = 1e-12);
        }
        let out = entered(0.5).compute(&batch, &flags).unwrap();
        let want = [-1.0, 5.0, 0.0, 5.0, 0.0, -7.0].map(|x| x / 12.0);
        for (got, want) in out.segment_advantages.iter().zip(want) {
            assert_abs_diff_eq!(*got, want, epsilon = 1e-12);
        }
        assert_eq!(out.trajectory_advantages, vec![0.0; 6]);
        assert_eq!(out.shaped_rewards, vec![0.5, 1.0, 0.0, 1.0, 0.0, 0.0]);
    }

    #[test]
    fn entered_hand_case_three_trajectories() {
        // The group of `paper_hand_case_three_trajectories` under `Entered` (R_ms = 1, γ = 0.5):
        // a: [m, ., m, .] R=1: seg 1 {0} (mean 1), seg 2 {1, 2} (mean 0.75), unfinished {3}
        // b: [., m, .]    R=0: seg 1 {0, 1} (mean 0.75), unfinished {2} (segment 2)
        // c: [., .]       R=0: unfinished {0, 1} (segment 1)
        // E_1 = {a, b, c}: b_1 = (1 + 0.75 + 0)/3 = 7/12; E_2 = {a, b}: (0.75 + 0)/2 = 0.375;
        // E_3 = {a}: 0.
        // a: r = [1, .5, 1, 0] → [5/12, 0.125, 0.625, 0]; b: r = [.5, 1, 0] → [−1/12, 5/12,
        // −0.375]; c → [−7/12, −7/12]. The trajectory term is the paper's.
        let batch = RolloutBatch::from_blocks(3, &[4, 3, 2], vec![1.0, 0.0, 0.0]).unwrap();
        let flags = [true, false, true, false, false, true, false, false, false];
        let out = entered(0.5).compute(&batch, &flags).unwrap();
        let seg = [
            5.0 / 12.0,
            0.125,
            0.625,
            0.0,
            -1.0 / 12.0,
            5.0 / 12.0,
            -0.375,
            -7.0 / 12.0,
            -7.0 / 12.0,
        ];
        let std = (1.0f64 / 3.0).sqrt();
        let (ta, tb) = ((2.0 / 3.0) / (std + 1e-6), (-1.0 / 3.0) / (std + 1e-6));
        let traj = [ta, ta, ta, ta, tb, tb, tb, tb, tb];
        for i in 0..9 {
            assert_abs_diff_eq!(out.segment_advantages[i], seg[i], epsilon = 1e-12);
            assert_abs_diff_eq!(out.advantages[i], traj[i] + seg[i], epsilon = 1e-12);
        }
        // The trait path agrees with `compute`.
        let input = EstimatorInput::new(&batch).with_milestones(&flags);
        let mut adv = vec![0.0; 9];
        entered(0.5)
            .estimate_steps_into(&input, &mut adv, &mut Workspace::default())
            .unwrap();
        assert_eq!(adv, out.advantages);
    }

    #[test]
    fn entered_equals_completed_when_every_rollout_ends_on_a_milestone() {
        // No unfinished segment anywhere: E_k = G_k, the same numbers bit for bit.
        let batch = RolloutBatch::from_blocks(3, &[2, 3, 1], vec![1.0, 0.0, 1.0]).unwrap();
        let flags = [false, true, true, false, true, true];
        let p = BeaconConfig {
            segment_decay: 0.5,
            ..BeaconConfig::default()
        };
        let a = beacon(p).compute(&batch, &flags).unwrap();
        let b = entered(0.5).compute(&batch, &flags).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn entered_is_paper_flavour_only() {
        let c = BeaconConfig::official().with_segment_baseline(SegmentBaseline::Entered);
        assert!(matches!(
            Beacon::new(c),
            Err(Error::InvalidConfig {
                name: "segment_baseline",
                ..
            })
        ));
        let c = BeaconConfig::default().with_segment_baseline(SegmentBaseline::Entered);
        assert_eq!(Beacon::new(c).unwrap().name(), "beacon");
    }

    #[test]
    fn official_mean_std_norm_hand_case() {
        // One group: a = [m, .] R=1, b = [m, .] R=0; R_ms=10, γ=0.5.
        // Rows R: 1,1,0,0 -> mean 0.5, std = sqrt(4*0.25/3) = sqrt(1/3)
        // Segment 0: a0 = 10, b0 = 10 -> mean 10, std 0 -> A_seg = 0/(0+eps) = 0
        // Segment 1: a1 = 0, b1 = 0 (unfinished) -> 0
        let mut c = BeaconConfig::official();
        c.flavour = BeaconFlavour::Official {
            norm: NormMode::MeanStdNorm,
        };
        c.segment_decay = 0.5;
        let batch = RolloutBatch::from_blocks(2, &[2, 2], vec![1.0, 0.0]).unwrap();
        let out = beacon(c).compute(&batch, &[true, false, true, false]).unwrap();
        let t = 0.5 / ((1.0f64 / 3.0).sqrt() + 1e-6);
        assert_abs_diff_eq!(out.trajectory_advantages[0], t, epsilon = 1e-12);
        assert_abs_diff_eq!(out.trajectory_advantages[3], -t, epsilon = 1e-12);
        assert_eq!(out.segment_advantages, vec![0.0; 4]);
    }

    #[test]
    fn official_equal_values_normalise_to_exact_zero() {
        // Three trajectories, each a milestone at step 0 then one step; R_ms = 0.1, γ = 1, all
        // terminal rewards 0.1. Segment 0 holds three rows of 0.1, whose plain f64 mean is
        // 0.30000000000000004 / 3 != 0.1: without the exact mean, mean_std_norm would divide
        // that ulp by ε and give ~1e-11 instead of 0. The trajectory term is likewise 0.
        let mut c = BeaconConfig::official();
        c.flavour = BeaconFlavour::Official {
            norm: NormMode::MeanStdNorm,
        };
        c.milestone_reward = 0.1;
        c.segment_decay = 1.0;
        let batch = RolloutBatch::from_blocks(3, &[2, 2, 2], vec![0.1; 3]).unwrap();
        let flags = [true, false, true, false, true, false];
        let out = beacon(c).compute(&batch, &flags).unwrap();
        assert_eq!(out.segment_advantages, vec![0.0; 6]);
        assert_eq!(out.trajectory_advantages, vec![0.0; 6]);
    }

    #[test]
    fn singleton_rules() {
        let batch = RolloutBatch::from_blocks(1, &[2], vec![0.7]).unwrap();
        let out = beacon(BeaconConfig::default())
            .compute(&batch, &[false, false])
            .unwrap();
        // μ = 0, σ = 1: 0.7 / (1 + 1e-6)
        assert_eq!(out.trajectory_advantages[0], 0.7 / (1.0 + 1e-6));
        let c = BeaconConfig {
            singleton: SingletonRule::Zero,
            ..BeaconConfig::default()
        };
        let out = beacon(c).compute(&batch, &[false, false]).unwrap();
        assert_eq!(out.advantages, vec![0.0, 0.0]);
        // Official, a single row: mean 0 -> A = R in mean_norm
        let batch = RolloutBatch::from_blocks(1, &[1], vec![0.7]).unwrap();
        let out = beacon(BeaconConfig::official()).compute(&batch, &[true]).unwrap();
        assert_eq!(out.trajectory_advantages, vec![0.7]);
        assert_eq!(out.segment_advantages, vec![0.0]);
    }
}
