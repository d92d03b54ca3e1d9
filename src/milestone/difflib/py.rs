//! A naive port of CPython 3.11 `Lib/difflib.py`, `SequenceMatcher(None, a, b)` with
//! `autojunk=True`, over code points. Written from the Python source, statement by statement,
//! with Python's data structures (a dict of position lists for `b2j`, a dict for `j2len`),
//! to be obviously equal to it rather than fast. `isjunk` is `None`, so `bjunk` is empty and
//! the junk-extension loops of `find_longest_match` never run; they are kept as comments.
//!
//! The unit tests compare the crate's matcher with it, and `tests/it/difflib_reference.rs`
//! includes it (`#[path]`) as the reference ratio of the GiGPO and walkthrough tests.

use std::collections::HashMap;

/// `SequenceMatcher(None, a, b)`.
pub(crate) struct SequenceMatcher {
    a: Vec<char>,
    b: Vec<char>,
    b2j: HashMap<char, Vec<usize>>,
}

impl SequenceMatcher {
    /// `__init__` → `set_seqs(a, b)` → `set_seq2(b)` → `__chain_b()`.
    pub(crate) fn new(a: &str, b: &str) -> Self {
        let a: Vec<char> = a.chars().collect();
        let b: Vec<char> = b.chars().collect();
        // __chain_b
        let mut b2j: HashMap<char, Vec<usize>> = HashMap::new();
        for (i, &elt) in b.iter().enumerate() {
            b2j.entry(elt).or_default().push(i);
        }
        // Purge junk elements: isjunk is None, nothing to do.
        // Purge popular elements that are not junk (CPython keeps them in `bpopular`,
        // which nothing here reads).
        let n = b.len();
        if n >= 200 {
            let ntest = n / 100 + 1;
            let popular: Vec<char> = b2j
                .iter()
                .filter(|(_, idxs)| idxs.len() > ntest)
                .map(|(&elt, _)| elt)
                .collect();
            for elt in popular {
                b2j.remove(&elt);
            }
        }
        Self { a, b, b2j }
    }

    /// `find_longest_match(alo, ahi, blo, bhi)`.
    #[allow(clippy::needless_range_loop)] // Python's `for i in range(alo, ahi)`, as written
    pub(crate) fn find_longest_match(
        &self,
        alo: usize,
        ahi: usize,
        blo: usize,
        bhi: usize,
    ) -> (usize, usize, usize) {
        let (a, b) = (&self.a, &self.b);
        let (mut besti, mut bestj, mut bestsize) = (alo, blo, 0usize);
        // find longest junk-free match
        let mut j2len: HashMap<usize, usize> = HashMap::new();
        let nothing: Vec<usize> = Vec::new();
        for i in alo..ahi {
            let mut newj2len: HashMap<usize, usize> = HashMap::new();
            for &j in self.b2j.get(&a[i]).unwrap_or(&nothing) {
                // a[i] matches b[j]
                if j < blo {
                    continue;
                }
                if j >= bhi {
                    break;
                }
                // j2lenget(j-1, 0): j - 1 is -1 for j == 0, never a key.
                let prev = if j == 0 {
                    0
                } else {
                    j2len.get(&(j - 1)).copied().unwrap_or(0)
                };
                let k = prev + 1;
                newj2len.insert(j, k);
                if k > bestsize {
                    besti = i + 1 - k;
                    bestj = j + 1 - k;
                    bestsize = k;
                }
            }
            j2len = newj2len;
        }
        // Extend the best by non-junk elements on each end (popular elements are not
        // junk: isbjunk is bjunk.__contains__ and bjunk is empty).
        let isbjunk = |_c: char| false;
        while besti > alo && bestj > blo && !isbjunk(b[bestj - 1]) && a[besti - 1] == b[bestj - 1] {
            besti -= 1;
            bestj -= 1;
            bestsize += 1;
        }
        while besti + bestsize < ahi
            && bestj + bestsize < bhi
            && !isbjunk(b[bestj + bestsize])
            && a[besti + bestsize] == b[bestj + bestsize]
        {
            bestsize += 1;
        }
        // The two junk-extension loops (isbjunk(...) and ...) cannot run: bjunk is empty.
        (besti, bestj, bestsize)
    }

    /// `get_matching_blocks()`, as `(i, j, n)` triples ending with `(len(a), len(b), 0)`.
    pub(crate) fn get_matching_blocks(&self) -> Vec<(usize, usize, usize)> {
        let (la, lb) = (self.a.len(), self.b.len());
        let mut queue = vec![(0, la, 0, lb)];
        let mut matching_blocks = Vec::new();
        while let Some((alo, ahi, blo, bhi)) = queue.pop() {
            let (i, j, k) = self.find_longest_match(alo, ahi, blo, bhi);
            // a[alo:i] vs b[blo:j] unknown
            // a[i:i+k] same as b[j:j+k]
            // a[i+k:ahi] vs b[j+k:bhi] unknown
            if k > 0 {
                matching_blocks.push((i, j, k));
                if alo < i && blo < j {
                    queue.push((alo, i, blo, j));
                }
                if i + k < ahi && j + k < bhi {
                    queue.push((i + k, ahi, j + k, bhi));
                }
            }
        }
        matching_blocks.sort();
        // Collapse adjacent blocks.
        let (mut i1, mut j1, mut k1) = (0, 0, 0);
        let mut non_adjacent = Vec::new();
        for (i2, j2, k2) in matching_blocks {
            if i1 + k1 == i2 && j1 + k1 == j2 {
                k1 += k2;
            } else {
                if k1 > 0 {
                    non_adjacent.push((i1, j1, k1));
                }
                (i1, j1, k1) = (i2, j2, k2);
            }
        }
        if k1 > 0 {
            non_adjacent.push((i1, j1, k1));
        }
        non_adjacent.push((la, lb, 0));
        non_adjacent
    }

    /// `ratio()`.
    pub(crate) fn ratio(&self) -> f64 {
        let matches: usize = self.get_matching_blocks().iter().map(|t| t.2).sum();
        calculate_ratio(matches, self.a.len() + self.b.len())
    }

    /// `quick_ratio()`.
    pub(crate) fn quick_ratio(&self) -> f64 {
        let mut fullbcount: HashMap<char, i64> = HashMap::new();
        for &elt in &self.b {
            *fullbcount.entry(elt).or_insert(0) += 1;
        }
        let mut avail: HashMap<char, i64> = HashMap::new();
        let mut matches = 0;
        for &elt in &self.a {
            let numb = match avail.get(&elt) {
                Some(&n) => n,
                None => fullbcount.get(&elt).copied().unwrap_or(0),
            };
            avail.insert(elt, numb - 1);
            if numb > 0 {
                matches += 1;
            }
        }
        calculate_ratio(matches, self.a.len() + self.b.len())
    }

    /// `real_quick_ratio()`.
    pub(crate) fn real_quick_ratio(&self) -> f64 {
        let (la, lb) = (self.a.len(), self.b.len());
        calculate_ratio(la.min(lb), la + lb)
    }
}

/// `ratio()` from already computed `get_matching_blocks()` of `a` against `b`.
pub(crate) fn ratio_of(blocks: &[(usize, usize, usize)], a: &str, b: &str) -> f64 {
    let matches: usize = blocks.iter().map(|t| t.2).sum();
    calculate_ratio(matches, a.chars().count() + b.chars().count())
}

/// `_calculate_ratio(matches, length)`: `2.0 * matches / length`, 1.0 for length 0.
#[allow(clippy::cast_precision_loss)]
fn calculate_ratio(matches: usize, length: usize) -> f64 {
    if length > 0 {
        2.0 * matches as f64 / length as f64
    } else {
        1.0
    }
}
