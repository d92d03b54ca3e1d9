//! Independent work (groups of a batch, token rows) split into contiguous chunks, run on rayon's
//! pool under the `rayon` feature and one after another without it.
//!
//! Each chunk runs exactly the serial loop over its items (same functions, same order of every
//! floating-point operation within an item), and no reduction crosses an item, so the results
//! are bit-identical to the serial path however the work is split and whatever the pool size.
//! Without the feature [`chunk_count`] is 1 and the callers take their serial path unchanged.

/// At most this many chunks per call: chunk boundaries live in a stack array (no allocation).
pub(crate) const MAX_CHUNKS: usize = 64;

/// How many chunks `work` units (rows, tokens…) are worth splitting into: one per pool thread,
/// at least `min_per_chunk` units each; 1 without the `rayon` feature.
pub(crate) fn chunk_count(work: usize, min_per_chunk: usize) -> usize {
    #[cfg(feature = "rayon")]
    {
        let threads = rayon::current_num_threads().min(MAX_CHUNKS);
        (work / min_per_chunk.max(1)).clamp(1, threads)
    }
    #[cfg(not(feature = "rayon"))]
    {
        let _ = (work, min_per_chunk);
        1
    }
}

/// Chunk boundaries over items `0..n` whose cumulative weight is `start(i)` (non-decreasing,
/// `start(n)` the total): `bounds[..=k]` gets `0 = b_0 ≤ b_1 ≤ … ≤ b_k = n`, each chunk about
/// `total / k` of the weight (an item is never split). Returns the bounds slice.
pub(crate) fn balance(
    n: usize,
    k: usize,
    start: impl Fn(usize) -> usize,
    bounds: &mut [usize; MAX_CHUNKS + 1],
) -> &[usize] {
    let k = k.clamp(1, MAX_CHUNKS);
    let total = start(n);
    bounds[0] = 0;
    for c in 1..k {
        let target = total / k * c + total % k * c / k;
        // First item starting at or after the target (binary search on the prefix weights).
        let (mut lo, mut hi) = (bounds[c - 1], n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if start(mid) < target {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        bounds[c] = lo;
    }
    bounds[k] = n;
    &bounds[..=k]
}

/// Runs `f(c, part)` for every chunk `c` of `bounds` (chunk c holds items
/// `bounds[c]..bounds[c + 1]`), in parallel under `rayon`. `state` covers all items and is cut
/// by `split(state, item, chunks_left)` into the part before absolute item `item` and the rest
/// (`chunks_left` is the number of chunks of the first part, for per-chunk scratch pools).
pub(crate) fn for_chunks<S, P, F>(bounds: &[usize], state: S, split: &P, f: &F)
where
    S: Send,
    P: Fn(S, usize, usize) -> (S, S) + Sync,
    F: Fn(usize, S) + Sync,
{
    chunks_from(0, bounds, state, split, f);
}

fn chunks_from<S, P, F>(c0: usize, bounds: &[usize], state: S, split: &P, f: &F)
where
    S: Send,
    P: Fn(S, usize, usize) -> (S, S) + Sync,
    F: Fn(usize, S) + Sync,
{
    let k = bounds.len().saturating_sub(1);
    if k <= 1 {
        f(c0, state);
        return;
    }
    let mid = k / 2;
    let (left, right) = split(state, bounds[mid], mid);
    join(
        || chunks_from(c0, &bounds[..=mid], left, split, f),
        || chunks_from(c0 + mid, &bounds[mid..], right, split, f),
    );
}

/// `rayon::join` (no heap allocation: both closures live on this stack), or the two calls in
/// order without the feature.
fn join<A: FnOnce() + Send, B: FnOnce() + Send>(a: A, b: B) {
    #[cfg(feature = "rayon")]
    rayon::join(a, b);
    #[cfg(not(feature = "rayon"))]
    {
        a();
        b();
    }
}

/// Tokens per chunk below which splitting a row-parallel loop costs more than it saves.
pub(crate) const PAR_TOKENS: usize = 1 << 16;

/// Runs `f(first_row, rows)` over `out` (`per_row` elements per row, `tokens_per_row` tokens
/// of work per row), on [`for_chunks`]: with the
/// `rayon` feature and enough tokens, contiguous chunks of whole rows, one per pool thread;
/// otherwise `f(0, out)` once. Callers do per-row work only (no value depends on another row),
/// so every result has the same bits however the rows are split.
pub(crate) fn for_row_chunks<T: Send>(
    out: &mut [T],
    per_row: usize,
    tokens_per_row: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    let rows = out.len().checked_div(per_row).unwrap_or(0);
    let k = chunk_count(rows.saturating_mul(tokens_per_row), PAR_TOKENS);
    if k <= 1 {
        f(0, out);
        return;
    }
    let mut bounds = [0; MAX_CHUNKS + 1];
    let bounds = balance(rows, k, |r| r, &mut bounds);
    for_chunks(
        bounds,
        (0usize, out),
        &|(base, o): (usize, &mut [T]), at, _| {
            let (first, rest) = o.split_at_mut((at - base) * per_row);
            ((base, first), (at, rest))
        },
        &|_, (first_row, o)| f(first_row, o),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn balance_splits_by_weight_without_splitting_items() {
        // Items of weight 1, 1, 1, 5, 1, 1 (prefix 0, 1, 2, 3, 8, 9, 10); 2 chunks: target 5,
        // the first item starting at ≥ 5 is item 4 (starts at 8).
        let prefix = [0, 1, 2, 3, 8, 9, 10];
        let mut b = [0; MAX_CHUNKS + 1];
        assert_eq!(balance(6, 2, |i| prefix[i], &mut b), &[0, 4, 6]);
        // 3 chunks of 10: targets 3 and 6 -> items 3 (starts at 3) and 4 (starts at 8).
        assert_eq!(balance(6, 3, |i| prefix[i], &mut b), &[0, 3, 4, 6]);
        // More chunks than items: total weight 1, targets 1/3 and 2/3 round down to 0, so the
        // first two chunks are empty; bounds stay ordered.
        assert_eq!(balance(1, 3, |i| i, &mut b), &[0, 0, 0, 1]);
    }

    #[test]
    fn every_chunk_runs_once_with_its_own_part() {
        let b = [0, 2, 5, 5, 9];
        let data: Vec<usize> = (0..9).collect();
        let seen = Mutex::new(Vec::new());
        // State: (first item, the items' slice).
        for_chunks(
            &b,
            (0usize, &data[..]),
            &|(base, s): (usize, &[usize]), at, _| {
                let (l, r) = s.split_at(at - base);
                ((base, l), (at, r))
            },
            &|c, (base, s)| seen.lock().unwrap().push((c, base, s.to_vec())),
        );
        let mut seen = seen.into_inner().unwrap();
        seen.sort();
        assert_eq!(
            seen,
            vec![
                (0, 0, vec![0, 1]),
                (1, 2, vec![2, 3, 4]),
                (2, 5, vec![]),
                (3, 5, vec![5, 6, 7, 8])
            ]
        );
    }
}
