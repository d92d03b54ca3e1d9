//! GiGPO's step groups (anchor states): the rows of one task group gathered by their anchor
//! observation, exactly ([`StepGrouping::Exact`](super::StepGrouping::Exact): equal anchors) or
//! by the peer's greedy clustering ([`StepGrouping::Similarity`](super::StepGrouping::Similarity):
//! a row joins the first cluster, in order of creation, whose first member `rep` has
//! `SequenceMatcher(None, anchor, rep).ratio() >= threshold`, else founds a new one).
//! Labels are numbered by first appearance within the group.

use std::hash::Hash;

use crate::milestone::difflib::Matcher;

use super::advantage::{GigpoScratch, NIL};

/// Interns the anchors of the current group's rows (`ws.rows`, caller order): `ws.labels[i]` is
/// the local unit id of `ws.rows[i]`, ids in order of first appearance, `ws.unit_first_row[u]`
/// the first row of unit u.
///
/// The table lives in the workspace and holds unit ids, not keys (keys are compared through
/// their unit's first row), so it has no lifetime and is reused across groups and batches. It is
/// sized by the group, not the batch: a batch-wide map grew with the batch and turned every
/// lookup into a cache miss (GiGPO went superlinear), where a group's table stays in cache.
pub(super) fn intern_group<'k, K, F>(ws: &mut GigpoScratch, key: &F)
where
    K: Hash + Eq + ?Sized + 'k,
    F: Fn(usize) -> &'k K,
{
    let n = ws.rows.len();
    // Load factor ≤ 1/2: short probe sequences.
    let bits = (2 * n).next_power_of_two().max(8).trailing_zeros();
    let size = 1usize << bits;
    if ws.table.len() < size {
        ws.table.resize(size, NIL);
    }
    let table = &mut ws.table[..size];
    table.fill(NIL);
    let mask = size - 1;
    ws.labels.clear();
    ws.unit_first_row.clear();
    for &r in &ws.rows {
        let k = key(r);
        let mut slot = (ws.hasher.hash(k) >> (64 - bits)) as usize;
        let unit = loop {
            match table[slot] {
                NIL => {
                    let u = ws.unit_first_row.len();
                    ws.unit_first_row.push(r);
                    table[slot] = u;
                    break u;
                }
                u if key(ws.unit_first_row[u]) == k => break u,
                _ => slot = (slot + 1) & mask,
            }
        };
        ws.labels.push(unit);
    }
}

/// The peer's greedy similarity clustering of the current group, over its units instead of its
/// rows; fills `ws.unit_cluster` and returns the number of clusters.
///
/// Equivalent to the peer's row loop: a row whose anchor was already seen in the group lands in
/// the same cluster as that earlier row, because it is compared against the same clusters in the
/// same order (clusters are only appended) and the one it founded, if any, has ratio 1. So only
/// the first row of each unit runs comparisons, in the order of first appearance. Clusters are
/// created in that order too, so their ids are the first-appearance labels within the group.
pub(super) fn cluster_similar<'t, T>(ws: &mut GigpoScratch, threshold: f64, text: &T) -> usize
where
    T: Fn(usize) -> &'t str,
{
    ws.unit_cluster.clear();
    let mut clusters = 0;
    for u in 0..ws.unit_first_row.len() {
        let anchor = text(ws.unit_first_row[u]);
        // The peer's are_similar(obs, cluster["rep"]): a = new anchor, b = first member.
        let found = (0..clusters).find(|&c| ws.matchers[c].ratio_at_least(anchor, threshold));
        let c = found.unwrap_or_else(|| {
            if clusters < ws.matchers.len() {
                ws.matchers[clusters].set_b(anchor);
            } else {
                ws.matchers.push(Matcher::new(anchor));
            }
            clusters += 1;
            clusters - 1
        });
        ws.unit_cluster.push(c);
    }
    clusters
}
