//! How far a part's F1 could move with other groups: a percentile bootstrap over groups.
//!
//! The groups of one environment are drawn with replacement, as many as there are, and the
//! F1 of their summed true positives, false positives and misses is taken; 2,000 draws, the
//! 2.5th and 97.5th percentiles. Groups, not steps, are drawn because a group's steps share
//! its task and variation. The draws come from a fixed SplitMix64 stream, so the interval is
//! the same on every run.

use std::collections::BTreeMap;

use beacon_rl::milestone::MilestoneAgreement;
use beacon_rl::record::TrajectoryRecord;
use beacon_rl::{Result, RolloutBatch};

use crate::protocol::env_of;

const DRAWS: usize = 2000;

/// SplitMix64: a fixed stream of draws anyone can recompute.
struct SplitMix(u64);

impl SplitMix {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) % n as u64) as usize
    }
}

/// Per environment, the 95% interval of the F1 of `flags` against `labels` (both in row order
/// of `records`) over groups.
pub fn f1_intervals(
    records: &[TrajectoryRecord],
    flags: &[bool],
    labels: &[bool],
) -> Result<BTreeMap<String, (f64, f64)>> {
    let mut groups: BTreeMap<String, BTreeMap<String, MilestoneAgreement>> = BTreeMap::new();
    let mut at = 0;
    for r in records {
        let n = r.steps.len();
        let one = RolloutBatch::from_blocks(1, &[n], vec![0.0])?;
        let a = MilestoneAgreement::compare(&one, &flags[at..at + n], &labels[at..at + n])?;
        *groups
            .entry(env_of(r))
            .or_default()
            .entry(r.group_id.clone())
            .or_default() += a;
        at += n;
    }
    let mut rng = SplitMix(2026);
    Ok(groups
        .into_iter()
        .map(|(env, by_group)| {
            let g: Vec<MilestoneAgreement> = by_group.into_values().collect();
            let mut f1: Vec<f64> = (0..DRAWS)
                .map(|_| {
                    let mut sum = MilestoneAgreement::default();
                    for _ in 0..g.len() {
                        sum += g[rng.below(g.len())];
                    }
                    sum.f1()
                })
                .collect();
            f1.sort_by(f64::total_cmp);
            (env, (f1[DRAWS * 25 / 1000], f1[DRAWS * 975 / 1000 - 1]))
        })
        .collect())
}
