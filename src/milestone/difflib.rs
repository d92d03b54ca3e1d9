//! Python's `difflib.SequenceMatcher(None, a, b).ratio()`, bit for bit.
//!
//! GiGPO's similarity grouping (verl-agent `gigpo/core_gigpo.py`, `are_similar`) and the BEACON
//! release's ALFWorld walkthrough matcher (`migpo/core_migpo.py`, `match_milestones`) both
//! decide "similar enough" with
//!
//! ```text
//! ratio(a, b) = 2·M / (|a| + |b|)        (1.0 when both are empty)
//! ```
//!
//! where |·| counts Unicode code points and M is the number of code points covered by the
//! matching blocks that CPython's `SequenceMatcher.get_matching_blocks` finds (its
//! `find_longest_match` applied recursively left and right of each longest match). M is *not*
//! the longest common subsequence: it depends on the recursion, on `find_longest_match`'s
//! tie-breaking (the longest block that starts earliest in `a`, then earliest in `b`) and on the
//! autojunk rule. That rule only looks at `b`: when `|b| >= 200`, every code point occurring
//! more than `|b| / 100 + 1` times in `b` is *popular* and cannot seed a match (it can still
//! extend one). The result is therefore asymmetric in `(a, b)`: always pass the arguments in
//! the peer's order.
//!
//! This module is a faithful port of CPython 3.11 `Lib/difflib.py` for `isjunk=None`,
//! `autojunk=True` (the only configuration the peers use). The ratio is computed with the same
//! floating-point expression as Python, `2.0 * M / (|a| + |b|)`, so it compares equal to
//! Python's value, not merely close.
//!
//! [`Matcher`] keeps `b` prepared (its index `b2j` and popular set) and all scratch buffers, so
//! comparing many `a` against one `b` allocates nothing after warm-up. [`ratio`] is the one-shot
//! convenience.

use std::collections::HashMap;

/// Symbol id of a code point of `a` that does not occur in `b`.
const ABSENT: usize = usize::MAX;

/// `len(b)` from which the autojunk rule applies (CPython: `n >= 200`).
const AUTOJUNK_MIN_LEN: usize = 200;

/// One matching block: `a[a..a + size] == b[b..b + size]`, indices in code points.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Match {
    /// Start of the block in `a`.
    pub(crate) a: usize,
    /// Start of the block in `b`.
    pub(crate) b: usize,
    /// Length of the block in code points (0 only for the final sentinel).
    pub(crate) size: usize,
}

/// A reusable `SequenceMatcher(None, a, b)` with a fixed, prepared `b`.
///
/// [`Matcher::new`] (or [`Matcher::set_b`]) indexes `b` once: code points are mapped to dense
/// symbol ids, the positions of each symbol are stored contiguously (CPython's `b2j`), and
/// popular symbols (autojunk) get no positions. Each comparison then maps `a` onto those ids
/// and runs the port of `get_matching_blocks`. All buffers are kept between calls.
#[derive(Debug, Clone)]
pub(crate) struct Matcher {
    /// `b` as symbol ids (every code point of `b` has an id).
    b: Vec<usize>,
    /// Symbol id of each ASCII code point of `b` (`ABSENT` otherwise).
    ascii_ids: [usize; 128],
    /// Symbol ids of non-ASCII code points of `b`.
    other_ids: HashMap<char, usize>,
    /// The distinct ASCII code points of `b`, to reset `ascii_ids` cheaply.
    ascii_used: Vec<u8>,
    /// `fullbcount`: occurrences of each symbol in `b`.
    sym_count: Vec<usize>,
    /// CSR offsets (length symbols + 1) into `b2j`; popular symbols have an empty range.
    b2j_offsets: Vec<usize>,
    /// Positions in `b` of each non-popular symbol, ascending (CPython's `b2j[elt]`).
    b2j: Vec<usize>,
    /// `a` as symbol ids of `b` (`ABSENT` for code points not in `b`).
    a: Vec<usize>,
    /// `j2len` of the previous and current row of `find_longest_match`: `(stamp, length)`
    /// indexed by `j + 1`; an entry counts only when its stamp is the row's stamp, so the
    /// tables never need clearing.
    rows: [Vec<(usize, usize)>; 2],
    stamp: usize,
    /// Work stack of `get_matching_blocks`.
    queue: Vec<(usize, usize, usize, usize)>,
    /// `avail` of `quick_ratio`.
    avail: Vec<usize>,
}

impl Default for Matcher {
    fn default() -> Self {
        Self::new("")
    }
}

impl Matcher {
    /// A matcher with `b` prepared (CPython's `set_seq2`).
    pub(crate) fn new(b: &str) -> Self {
        let mut m = Self {
            b: Vec::new(),
            ascii_ids: [ABSENT; 128],
            other_ids: HashMap::new(),
            ascii_used: Vec::new(),
            sym_count: Vec::new(),
            b2j_offsets: Vec::new(),
            b2j: Vec::new(),
            a: Vec::new(),
            rows: [Vec::new(), Vec::new()],
            stamp: 0,
            queue: Vec::new(),
            avail: Vec::new(),
        };
        m.set_b(b);
        m
    }

    /// Replaces `b`, reusing every buffer (CPython's `set_seq2`, which rebuilds `b2j` and
    /// applies the autojunk rule).
    pub(crate) fn set_b(&mut self, b: &str) {
        for &c in &self.ascii_used {
            self.ascii_ids[usize::from(c)] = ABSENT;
        }
        self.ascii_used.clear();
        self.other_ids.clear();
        self.sym_count.clear();
        self.b.clear();

        // Dense symbol ids in order of first appearance, with counts (fullbcount).
        for c in b.chars() {
            let id = match u8::try_from(c).ok().filter(u8::is_ascii) {
                Some(byte) => {
                    let slot = &mut self.ascii_ids[usize::from(byte)];
                    if *slot == ABSENT {
                        *slot = self.sym_count.len();
                        self.ascii_used.push(byte);
                        self.sym_count.push(0);
                    }
                    *slot
                }
                None => {
                    let next = self.sym_count.len();
                    let id = *self.other_ids.entry(c).or_insert(next);
                    if id == next {
                        self.sym_count.push(0);
                    }
                    id
                }
            };
            self.sym_count[id] += 1;
            self.b.push(id);
        }

        // b2j as CSR. Autojunk: for len(b) >= 200, symbols occurring more than
        // len(b) // 100 + 1 times are popular and removed from b2j (CPython `__chain_b`).
        let n = self.b.len();
        let popular_above = if n >= AUTOJUNK_MIN_LEN {
            n / 100 + 1
        } else {
            usize::MAX
        };
        self.b2j_offsets.clear();
        self.b2j_offsets.push(0);
        let mut acc = 0usize;
        for &count in &self.sym_count {
            if count <= popular_above {
                acc += count;
            }
            self.b2j_offsets.push(acc);
        }
        self.b2j.clear();
        self.b2j.resize(acc, 0);
        // Fill cursors: reuse `avail` as scratch (it is rebuilt by every quick_ratio call).
        self.avail.clear();
        self.avail
            .extend_from_slice(&self.b2j_offsets[..self.sym_count.len()]);
        for (j, &id) in self.b.iter().enumerate() {
            let end = self.b2j_offsets[id + 1];
            let cursor = &mut self.avail[id];
            // A popular symbol has an empty range (cursor == end): it gets no positions.
            if *cursor < end {
                self.b2j[*cursor] = j;
                *cursor += 1;
            }
        }

        for row in &mut self.rows {
            row.clear();
            row.resize(n + 1, (0, 0));
        }
        self.stamp = 0;
    }

    /// Length of `b` in code points.
    #[cfg(test)]
    pub(crate) fn b_len(&self) -> usize {
        self.b.len()
    }

    /// `SequenceMatcher(None, a, b).ratio()` for the prepared `b`.
    #[cfg(test)]
    pub(crate) fn ratio(&mut self, a: &str) -> f64 {
        let matches = self.matches(a);
        calculate_ratio(matches, self.a.len() + self.b.len())
    }

    /// M: the number of code points covered by the matching blocks of `a` against `b`
    /// (the sum of `size` over [`Matcher::matching_blocks`]).
    #[cfg(test)]
    pub(crate) fn matches(&mut self, a: &str) -> usize {
        self.set_a(a);
        let mut total = 0;
        self.for_each_block(|_, _, k| total += k);
        total
    }

    /// `get_matching_blocks()`: the matching blocks sorted by position, adjacent blocks merged,
    /// ending with the sentinel `Match { a: |a|, b: |b|, size: 0 }`, exactly as CPython
    /// returns them.
    #[cfg(test)]
    pub(crate) fn matching_blocks(&mut self, a: &str) -> Vec<Match> {
        self.set_a(a);
        let mut blocks = Vec::new();
        self.for_each_block(|i, j, k| blocks.push(Match { a: i, b: j, size: k }));
        blocks.sort_by_key(|m| (m.a, m.b, m.size));
        // Merge adjacent blocks (CPython collapses them into one).
        let mut merged: Vec<Match> = Vec::with_capacity(blocks.len() + 1);
        for m in blocks {
            match merged.last_mut() {
                Some(last) if last.a + last.size == m.a && last.b + last.size == m.b => last.size += m.size,
                _ => merged.push(m),
            }
        }
        merged.push(Match {
            a: self.a.len(),
            b: self.b.len(),
            size: 0,
        });
        merged
    }

    /// `real_quick_ratio()`: the upper bound `2·min(|a|, |b|) / (|a| + |b|)` on
    /// [`Matcher::ratio`].
    #[cfg(test)]
    pub(crate) fn real_quick_ratio(&self, a: &str) -> f64 {
        let la = a.chars().count();
        let lb = self.b.len();
        calculate_ratio(la.min(lb), la + lb)
    }

    /// `quick_ratio()`: the upper bound on [`Matcher::ratio`] from the multiset intersection
    /// of the code points of `a` and `b`.
    #[cfg(test)]
    pub(crate) fn quick_ratio(&mut self, a: &str) -> f64 {
        self.set_a(a);
        let matches = self.quick_matches();
        calculate_ratio(matches, self.a.len() + self.b.len())
    }

    /// Whether `ratio(a) >= threshold`, skipping work once the answer is known: when one of
    /// the upper bounds ([`Matcher::real_quick_ratio`], [`Matcher::quick_ratio`]) is already
    /// below the threshold, and during the block search as soon as the blocks found reach the
    /// threshold or the blocks still possible cannot. The answer is always the same as
    /// `self.ratio(a) >= threshold` (every bound uses the ratio's floating-point expression,
    /// which is monotone in M). A NaN threshold gives `false`, as in Python.
    pub(crate) fn ratio_at_least(&mut self, a: &str, threshold: f64) -> bool {
        self.set_a(a);
        let total = self.a.len() + self.b.len();
        if calculate_ratio(self.a.len().min(self.b.len()), total) < threshold {
            return false;
        }
        if calculate_ratio(self.quick_matches(), total) < threshold {
            return false;
        }
        // get_matching_blocks, stopped as soon as the answer is known: M only grows, and
        // M <= found + Σ over pending ranges of min(range lengths). Both bounds go through the
        // same monotone expression as the ratio, so the answer is exactly
        // `ratio(a) >= threshold`.
        let mut queue = std::mem::take(&mut self.queue);
        queue.clear();
        queue.push((0, self.a.len(), 0, self.b.len()));
        let mut found = 0;
        let mut pending = self.a.len().min(self.b.len());
        let answer = loop {
            if calculate_ratio(found, total) >= threshold {
                break true;
            }
            if calculate_ratio(found + pending, total) < threshold {
                break false;
            }
            // Only a NaN threshold gets here with an empty queue.
            let Some((alo, ahi, blo, bhi)) = queue.pop() else {
                break false;
            };
            pending -= (ahi - alo).min(bhi - blo);
            let (i, j, k) = self.find_longest_match(alo, ahi, blo, bhi);
            if k > 0 {
                found += k;
                if alo < i && blo < j {
                    queue.push((alo, i, blo, j));
                    pending += (i - alo).min(j - blo);
                }
                if i + k < ahi && j + k < bhi {
                    queue.push((i + k, ahi, j + k, bhi));
                    pending += (ahi - i - k).min(bhi - j - k);
                }
            }
        };
        self.queue = queue;
        answer
    }

    /// Maps `a` onto `b`'s symbol ids (code points absent from `b` get `ABSENT`).
    fn set_a(&mut self, a: &str) {
        self.a.clear();
        for c in a.chars() {
            let id = match u8::try_from(c).ok().filter(u8::is_ascii) {
                Some(byte) => self.ascii_ids[usize::from(byte)],
                None => self.other_ids.get(&c).copied().unwrap_or(ABSENT),
            };
            self.a.push(id);
        }
    }

    /// Σ_c min(count_a(c), count_b(c)), CPython's `quick_ratio` loop.
    fn quick_matches(&mut self) -> usize {
        self.avail.clear();
        self.avail.extend_from_slice(&self.sym_count);
        let mut matches = 0;
        for &id in &self.a {
            if let Some(left) = self.avail.get_mut(id) {
                if *left > 0 {
                    *left -= 1;
                    matches += 1;
                }
            }
        }
        matches
    }

    /// CPython's `get_matching_blocks` loop without the final sort/merge: calls `f(i, j, k)`
    /// for every block found. Sub-ranges are independent, so the visiting order does not
    /// change the blocks; the stack mirrors CPython's anyway.
    #[cfg(test)]
    fn for_each_block(&mut self, mut f: impl FnMut(usize, usize, usize)) {
        let mut queue = std::mem::take(&mut self.queue);
        queue.clear();
        queue.push((0, self.a.len(), 0, self.b.len()));
        while let Some((alo, ahi, blo, bhi)) = queue.pop() {
            let (i, j, k) = self.find_longest_match(alo, ahi, blo, bhi);
            if k > 0 {
                f(i, j, k);
                if alo < i && blo < j {
                    queue.push((alo, i, blo, j));
                }
                if i + k < ahi && j + k < bhi {
                    queue.push((i + k, ahi, j + k, bhi));
                }
            }
        }
        self.queue = queue;
    }

    fn next_stamp(&mut self) -> usize {
        if self.stamp == usize::MAX {
            // Never reached in practice; restart stamps on clean tables.
            for row in &mut self.rows {
                row.fill((0, 0));
            }
            self.stamp = 0;
        }
        self.stamp += 1;
        self.stamp
    }

    /// CPython's `find_longest_match(alo, ahi, blo, bhi)` with `isjunk=None`.
    ///
    /// Finds the longest block `a[i..i+k] == b[j..j+k]` inside the ranges whose seed positions
    /// are in `b2j` (not popular); among the longest, the one with the smallest `i`, then the
    /// smallest `j` (the first found with `k > bestsize`, scanning `i` then `j` upwards). Then
    /// extends it on both sides with equal elements, popular ones included (CPython's
    /// non-junk extension loops; the junk loops are no-ops without `isjunk`). When nothing is
    /// found it still tries to extend the empty block at `(alo, blo)`, as CPython does.
    fn find_longest_match(
        &mut self,
        alo: usize,
        ahi: usize,
        blo: usize,
        bhi: usize,
    ) -> (usize, usize, usize) {
        let (mut besti, mut bestj, mut bestsize) = (alo, blo, 0usize);
        // Stamp of the (empty) row before alo: no entry carries it.
        let mut prev_stamp = self.next_stamp();
        let mut prev_row = 0usize;
        for i in alo..ahi {
            let cur_stamp = self.next_stamp();
            let sym = self.a[i];
            if sym != ABSENT {
                let positions = &self.b2j[self.b2j_offsets[sym]..self.b2j_offsets[sym + 1]];
                // CPython skips j < blo one by one; the positions are sorted.
                let from = positions.partition_point(|&j| j < blo);
                let [row0, row1] = &mut self.rows;
                let (prev, cur) = if prev_row == 0 {
                    (&*row0, row1)
                } else {
                    (&*row1, row0)
                };
                for &j in &positions[from..] {
                    if j >= bhi {
                        break;
                    }
                    // j2len[j - 1] of the previous row lives at index j.
                    let (s, len) = prev[j];
                    let k = if s == prev_stamp { len + 1 } else { 1 };
                    cur[j + 1] = (cur_stamp, k);
                    if k > bestsize {
                        besti = i + 1 - k;
                        bestj = j + 1 - k;
                        bestsize = k;
                    }
                }
            }
            prev_row ^= 1;
            prev_stamp = cur_stamp;
        }
        let (a, b) = (&self.a, &self.b);
        while besti > alo && bestj > blo && a[besti - 1] == b[bestj - 1] {
            besti -= 1;
            bestj -= 1;
            bestsize += 1;
        }
        while besti + bestsize < ahi && bestj + bestsize < bhi && a[besti + bestsize] == b[bestj + bestsize] {
            bestsize += 1;
        }
        (besti, bestj, bestsize)
    }
}

/// CPython's `_calculate_ratio`: `2.0 * matches / length`, or 1.0 for two empty sequences.
fn calculate_ratio(matches: usize, length: usize) -> f64 {
    if length > 0 {
        2.0 * matches as f64 / length as f64
    } else {
        1.0
    }
}

/// `difflib.SequenceMatcher(None, a, b).ratio()`.
///
/// Lengths are in Unicode code points; two empty strings give 1.0. Asymmetric in `(a, b)` (see
/// the module docs): `b` is the side the autojunk rule applies to. For many comparisons against
/// one `b`, use a [`Matcher`].
#[cfg(test)]
pub(crate) fn ratio(a: &str, b: &str) -> f64 {
    Matcher::new(b).ratio(a)
}

#[cfg(test)]
pub(crate) mod py;
#[cfg(test)]
mod tests;
