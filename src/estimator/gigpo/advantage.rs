//! GiGPO's two-level advantage, one task group at a time (verl-agent
//! `compute_gigpo_outcome_advantage`):
//!
//! ```text
//! R_t  = r_t + γ · R_{t+1}                 step returns, per trajectory
//! A_E  = s_r − μ_g   or (s_r − μ_g)/(σ_g + ε)  over the task group's rows
//! A_S  = R_r − μ_G   or (R_r − μ_G)/(σ_G + ε)  over the row's step group G (a singleton: 0)
//! A    = A_E + w · A_S
//! ```
//!
//! Groups are independent, so everything per row is done while the group's rows are hot and
//! the only batch-sized state is the output. Within a group the rows are visited in the
//! caller's order, so every sum adds the same values in the same order as a single pass over
//! the batch would: the outputs are bit-identical to the row-loop formulation
//! (`tests/it/gigpo_reference.rs`). Under the `rayon` feature chunks of whole groups run in
//! parallel (rows in step order only), with the same bits.

use std::hash::Hash;

use crate::batch::RolloutBatch;
use crate::error::{check_finite, check_len, Result};
use crate::estimator::{group_rows, StepScores};
use crate::hash::KeyHasher;
use crate::milestone::difflib::Matcher;
use crate::stats::{group_means, group_spreads, GroupStats, NormMode};

use super::anchors::{cluster_similar, intern_group};
use super::config::GigpoConfig;
use super::estimator::GigpoOutput;

/// GiGPO's part of the [`Workspace`](crate::estimator::Workspace).
///
/// Everything in it is sized by the largest task group seen, not by the batch: anchors are
/// interned one task group at a time in an open-addressing table kept here, so after the first
/// batch of a given shape a computation allocates nothing (in similarity mode, once enough
/// matchers exist).
#[derive(Debug, Clone, Default)]
pub(crate) struct GigpoScratch {
    /// The current task group's caller rows, ascending (= caller order).
    pub(super) rows: Vec<usize>,
    /// Per position in `rows`: a value to normalise (terminal reward or row score, then step return).
    values: Vec<f64>,
    /// Per position in `rows`: the local unit (distinct anchor), then the local step group.
    pub(super) labels: Vec<usize>,
    /// Per local unit: its first row.
    pub(super) unit_first_row: Vec<usize>,
    /// Per local unit: its local step group.
    pub(super) unit_cluster: Vec<usize>,
    /// Open-addressing table of local unit ids (NIL = empty), a power of two ≥ 2 × group rows.
    pub(super) table: Vec<usize>,
    /// The table's hash, randomly keyed: anchors chosen to collide under a known hash do not
    /// make interning quadratic.
    pub(super) hasher: KeyHasher,
    /// Similarity mode: one prepared matcher per local cluster (b = its first member).
    pub(super) matchers: Vec<Matcher>,
    stats: Vec<GroupStats>,
    /// Provisional (group-major) step group id -> first-appearance label.
    relabel: Vec<usize>,
    /// Under the `rayon` feature, one workspace per chunk of groups (kept across calls).
    pool: Vec<GigpoScratch>,
    /// A chunk's step groups (then the labels of the chunks before it) and finiteness probe.
    clusters: usize,
    probe: f64,
}

/// An empty slot of the interning table.
pub(super) const NIL: usize = usize::MAX;

/// Rows per chunk below which running GiGPO's groups in parallel does not pay.
const MIN_ROWS_PER_CHUNK: usize = 4096;

/// The anchors of one run: `key(r)` is row r's anchor for exact interning; `similar`, when
/// set, is the threshold and row r's text for the greedy clustering of the group's distinct
/// anchors.
pub(super) struct AnchorsOf<'a, F, T> {
    pub(super) key: &'a F,
    pub(super) similar: Option<(f64, &'a T)>,
}

impl<F, T> Clone for AnchorsOf<'_, F, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<F, T> Copy for AnchorsOf<'_, F, T> {}

/// The whole computation into `out`, one task group at a time. `scores` gives each row's
/// trajectory term's value (R(τ), or the caller's row scores).
///
/// # Errors
/// [`Error::LengthMismatch`](crate::Error::LengthMismatch) and
/// [`Error::NonFinite`](crate::Error::NonFinite) for the step rewards; `NonFinite` naming
/// the first output that overflowed.
pub(super) fn run<'k, 't, K, F, T>(
    c: &GigpoConfig,
    batch: &RolloutBatch,
    scores: StepScores<'_>,
    step_rewards: &[f64],
    anchors: AnchorsOf<'_, F, T>,
    ws: &mut GigpoScratch,
    out: &mut GigpoOutput,
) -> Result<()>
where
    K: Hash + Eq + ?Sized + 'k,
    F: Fn(usize) -> &'k K + Sync,
    T: Fn(usize) -> &'t str + Sync,
{
    let rows = batch.num_steps();
    check_len("step_rewards", rows, step_rewards.len())?;
    check_finite("step_rewards", step_rewards)?;
    out.reset(rows);
    let in_order = batch.rows_in_step_order();
    let whole = Outs {
        base: 0,
        advantages: &mut out.advantages,
        episode: &mut out.episode_advantages,
        step: &mut out.step_advantages,
        returns: &mut out.step_returns,
        labels: &mut out.step_groups,
    };
    // Groups own disjoint rows, but only rows in step order give each run of groups one
    // contiguous block of every output: otherwise the groups run in order on this thread.
    let chunks = if in_order {
        crate::parallel::chunk_count(rows, MIN_ROWS_PER_CHUNK)
    } else {
        1
    };
    let run = Run {
        c,
        batch,
        scores,
        step_rewards,
        anchors,
    };
    let (base, probe) = if chunks <= 1 {
        run.groups(0..batch.num_groups(), ws, whole)
    } else {
        run.chunks(chunks, ws, whole)
    };
    // Provisional ids are group-major; labels are numbered by first appearance in the
    // caller's rows (one pass, no hashing). Rows in step order are group-major already,
    // and ids within a group are by first appearance: the ids are the labels.
    if !in_order {
        relabel(&mut out.step_groups, base, &mut ws.relabel);
    }
    out.num_step_groups = base;

    // Finite inputs can still overflow (huge rewards): report instead of returning inf/NaN,
    // naming the first output (in this order) and index that is not finite.
    if probe != 0.0 {
        check_finite("step_returns", &out.step_returns)?;
        check_finite("episode_advantages", &out.episode_advantages)?;
        check_finite("step_advantages", &out.step_advantages)?;
        check_finite("advantages", &out.advantages)?;
    }
    Ok(())
}

/// Numbers the labels by first appearance (`relabel` is scratch, `num` labels).
fn relabel(labels: &mut [usize], num: usize, relabel: &mut Vec<usize>) {
    relabel.clear();
    relabel.resize(num, NIL);
    let mut next = 0;
    for l in labels.iter_mut() {
        let m = &mut relabel[*l];
        if *m == NIL {
            *m = next;
            next += 1;
        }
        *l = *m;
    }
}

/// The inputs of one computation, shared by its chunks.
struct Run<'a, 'r, F, T> {
    c: &'a GigpoConfig,
    batch: &'a RolloutBatch,
    scores: StepScores<'r>,
    step_rewards: &'a [f64],
    anchors: AnchorsOf<'a, F, T>,
}

impl<'k, 't, K, F, T> Run<'_, '_, F, T>
where
    K: Hash + Eq + ?Sized + 'k,
    F: Fn(usize) -> &'k K + Sync,
    T: Fn(usize) -> &'t str + Sync,
{
    /// Chunks of whole groups, about rows / chunks rows each, one workspace per chunk; labels
    /// are chunk-local (from 0), then shifted by the clusters of earlier chunks. Returns the
    /// number of step groups and the finiteness probe, as [`groups`](Self::groups).
    fn chunks(&self, chunks: usize, ws: &mut GigpoScratch, whole: Outs<'_>) -> (usize, f64) {
        let batch = self.batch;
        if ws.pool.len() < chunks {
            ws.pool.resize_with(chunks, GigpoScratch::default);
        }
        let (offs, goffs) = (batch.trajectory_offsets(), batch.group_offsets());
        let row_of = |g: usize| offs[goffs[g]];
        let mut bounds = [0; crate::parallel::MAX_CHUNKS + 1];
        let bounds = crate::parallel::balance(batch.num_groups(), chunks, row_of, &mut bounds);
        let pool = &mut ws.pool[..chunks];
        let split = |state, g, left| split_chunks(state, row_of(g), left);
        let Outs {
            advantages,
            episode,
            step,
            returns,
            labels,
            ..
        } = whole;
        let whole = Outs {
            base: 0,
            advantages,
            episode,
            step,
            returns,
            labels: &mut *labels,
        };
        crate::parallel::for_chunks(bounds, (whole, &mut *pool), &split, &|k, (o, pool)| {
            let w = &mut pool[0];
            (w.clusters, w.probe) = self.groups(bounds[k]..bounds[k + 1], w, o);
        });
        let mut total = 0;
        for w in pool.iter_mut() {
            (w.clusters, total) = (total, total + w.clusters);
        }
        let whole = Outs {
            base: 0,
            advantages: &mut [],
            episode: &mut [],
            step: &mut [],
            returns: &mut [],
            labels,
        };
        let split = |state, g, left| split_chunks(state, row_of(g), left);
        crate::parallel::for_chunks(bounds, (whole, pool), &split, &|_, (o, pool)| {
            let shift = pool[0].clusters;
            if shift > 0 {
                o.labels.iter_mut().for_each(|l| *l += shift);
            }
        });
        // Each probe is ±0 or NaN: the sum is NaN iff one is, in any order.
        (total, ws.pool[..chunks].iter().map(|w| w.probe).sum::<f64>())
    }

    /// Groups `groups` in order into `o` (which covers their rows), step group labels from 0
    /// in order of the groups; returns the number of step groups and the finiteness probe
    /// (0 when every value written is finite).
    fn groups(&self, groups: std::ops::Range<usize>, ws: &mut GigpoScratch, mut o: Outs<'_>) -> (usize, f64) {
        let (batch, c) = (self.batch, self.c);
        let (mode, eps, w) = (c.norm, c.std_eps, c.step_advantage_weight);
        let in_order = batch.rows_in_step_order();
        let b = o.base;
        let mut base = 0usize;
        // x · 0 is 0 for finite x and NaN otherwise: one add per row tracks finiteness while
        // the values are hot, instead of four more passes over the outputs.
        let mut probe = 0.0f64;
        for g in groups {
            // The group's rows in caller order (already ascending when rows are step-ordered).
            ws.rows.clear();
            ws.rows.extend_from_slice(group_rows(batch, g));
            if !in_order {
                ws.rows.sort_unstable();
            }
            self.episode_term(g, ws, &mut o);

            // Step groups: distinct anchors of this group, then (similarity) their clusters.
            intern_group(ws, self.anchors.key);
            let clusters = match self.anchors.similar {
                None => {
                    ws.unit_cluster.clear();
                    ws.unit_cluster.extend(0..ws.unit_first_row.len());
                    ws.unit_first_row.len()
                }
                Some((threshold, text)) => cluster_similar(ws, threshold, text),
            };
            for l in ws.labels.iter_mut() {
                *l = ws.unit_cluster[*l];
            }

            // Step term: statistics per step group over its rows, in caller order.
            ws.values.clear();
            ws.values.extend(ws.rows.iter().map(|&r| o.returns[r - b]));
            stats(mode, &ws.values, &ws.labels, clusters, &mut ws.stats);
            for (&r, &l) in ws.rows.iter().zip(&ws.labels) {
                let s = &ws.stats[l];
                let r = r - b;
                // A singleton step group compares the row with itself: 0.
                let a_s = if s.count == 1 {
                    0.0
                } else {
                    mode.normalize(o.returns[r], s.mean, s.std, eps)
                };
                let a = o.episode[r] + w * a_s;
                o.step[r] = a_s;
                o.advantages[r] = a;
                o.labels[r] = base + l;
                probe += (o.returns[r] + o.episode[r] + a_s + a) * 0.0;
            }
            base += clusters;
        }
        (base, probe)
    }

    /// Group `g`'s step returns R_t (per trajectory, backwards) and episode term A_E, over
    /// its rows `ws.rows`.
    fn episode_term(&self, g: usize, ws: &mut GigpoScratch, o: &mut Outs<'_>) {
        let (batch, c, b) = (self.batch, self.c, o.base);
        // The terminal reward (or row score) is parked in the output.
        for j in batch.group_trajectories(g) {
            let mut ret = 0.0;
            for &row in batch.trajectory_rows(j).iter().rev() {
                ret = self.step_rewards[row] + c.step_decay * ret;
                o.returns[row - b] = ret;
                o.episode[row - b] = self.scores.row(j, row);
            }
        }
        // Statistics over the group's rows. A single-row group: μ = 0, σ = 1 (the peer's
        // convention).
        ws.values.clear();
        ws.values.extend(ws.rows.iter().map(|&r| o.episode[r - b]));
        let s = GroupStats::of(&ws.values);
        let (mean, std) = if s.count == 1 { (0.0, 1.0) } else { (s.mean, s.std) };
        for &r in &ws.rows {
            let a = &mut o.episode[r - b];
            *a = c.norm.normalize(*a, mean, std, c.std_eps);
        }
    }
}

/// Per-label statistics; the spread pass only where the mode divides by it.
fn stats(mode: NormMode, values: &[f64], labels: &[usize], num_labels: usize, stats: &mut Vec<GroupStats>) {
    group_means(values, labels, num_labels, stats);
    if mode == NormMode::MeanStdNorm {
        group_spreads(values, labels, stats);
    }
}

/// The outputs of a run of whole groups whose rows are `base..base + len` (each indexed by
/// row − base); the serial path's part covers every row with base 0.
struct Outs<'a> {
    base: usize,
    advantages: &'a mut [f64],
    episode: &'a mut [f64],
    step: &'a mut [f64],
    returns: &'a mut [f64],
    labels: &'a mut [usize],
}

impl Outs<'_> {
    /// Rows before absolute row `at`, and the rest. Empty columns stay empty.
    fn split(self, at: usize) -> (Self, Self) {
        fn cut<T>(v: &mut [T], at: usize) -> (&mut [T], &mut [T]) {
            let at = at.min(v.len());
            v.split_at_mut(at)
        }
        let local = at - self.base;
        let (a0, a1) = cut(self.advantages, local);
        let (e0, e1) = cut(self.episode, local);
        let (s0, s1) = cut(self.step, local);
        let (r0, r1) = cut(self.returns, local);
        let (l0, l1) = cut(self.labels, local);
        (
            Outs {
                base: self.base,
                advantages: a0,
                episode: e0,
                step: s0,
                returns: r0,
                labels: l0,
            },
            Outs {
                base: at,
                advantages: a1,
                episode: e1,
                step: s1,
                returns: r1,
                labels: l1,
            },
        )
    }
}

/// The outputs and workspaces of the chunks before absolute row `at` (the first `left`
/// chunks), and the rest.
#[allow(clippy::type_complexity)]
fn split_chunks<'a>(
    (o, pool): (Outs<'a>, &'a mut [GigpoScratch]),
    at: usize,
    left: usize,
) -> (
    (Outs<'a>, &'a mut [GigpoScratch]),
    (Outs<'a>, &'a mut [GigpoScratch]),
) {
    let (a, b) = o.split(at);
    let (pa, pb) = pool.split_at_mut(left);
    ((a, pa), (b, pb))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::estimator::Workspace;
    use crate::estimator::{Gigpo, StepGrouping};

    #[test]
    fn overflow_of_the_combination_alone_is_reported() {
        // Returns 0 and 4 in one step group: A_S = ∓2 (mean 2), finite; A_E = ±0.5, finite;
        // but w · A_S = 1e308 · 2 overflows, so A = ±inf: the error names `advantages`, row 0.
        let batch = RolloutBatch::from_row_keys(&["g"; 2], &["a", "b"], &[1.0, 0.0]).unwrap();
        let g = Gigpo::new(
            GigpoConfig::default()
                .with_step_advantage_weight(1e308)
                .with_step_decay(0.0),
        )
        .unwrap();
        let err = g.compute(&batch, &[0.0, 4.0], &["s", "s"]).unwrap_err();
        assert!(
            matches!(
                err,
                Error::NonFinite {
                    what: "advantages",
                    index: 0,
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn workspace_reuse_across_modes_and_sizes() {
        let batch = RolloutBatch::from_row_keys(&["g"; 3], &["a", "b", "c"], &[1.0, 0.0, 0.0]).unwrap();
        let sim =
            Gigpo::new(GigpoConfig::default().with_grouping(StepGrouping::Similarity { threshold: 0.5 }))
                .unwrap();
        let exact = Gigpo::new(GigpoConfig::default()).unwrap();
        let mut ws = Workspace::default();
        let mut out = GigpoOutput::default();
        let anchors = ["abcd", "abce", "zzzz"];
        sim.compute_into(&batch, &[1.0, 2.0, 3.0], &anchors, &mut ws, &mut out)
            .unwrap();
        // ratio("abce", "abcd") = 2·3/8 = 0.75 >= 0.5: rows 0 and 1 share a group.
        assert_eq!(out.step_groups, [0, 0, 1]);
        let fresh = sim.compute(&batch, &[1.0, 2.0, 3.0], &anchors).unwrap();
        assert_eq!(out, fresh);
        exact
            .compute_into(&batch, &[1.0, 2.0, 3.0], &anchors, &mut ws, &mut out)
            .unwrap();
        assert_eq!(out.step_groups, [0, 1, 2]);
        let small = RolloutBatch::from_row_keys(&["g"], &["a"], &[1.0]).unwrap();
        sim.compute_into(&small, &[1.0], &["x"], &mut ws, &mut out)
            .unwrap();
        assert_eq!(out.advantages, [1.0]);
    }
}
