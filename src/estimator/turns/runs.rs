//! The turn boundaries of a mask row: its maximal runs of 1, found in the mask's own dtype.
//!
//! A run of `response_mask == 1` over tokens `start..end` is a turn's generated tokens (see
//! the parent module). The scan reads each entry once and tests it for 0/1 as it goes, eight
//! entries at a time: a chunk of eight equal entries (inside a run or inside a gap, the
//! common case) is classified by one OR and one AND of its entries and costs no per-entry
//! branch; only a chunk that holds a boundary (or an invalid entry) is walked entry by
//! entry. Each entry is therefore either inside a chunk whose OR and AND show it is 0 or 1,
//! or tested on its own: an entry other than 0 and 1 is never passed over.

use super::Span;
use crate::estimator::{mask_row, prefetch_line};
use crate::tensor::{FloatView, MaskBits, MaskView};

/// Entries per chunk: 64 bytes of an `i64` mask, one cache line.
pub(super) const CHUNK: usize = 8;

/// A mask element whose chunks of eight are compared with 0 or 1 at once.
pub(super) trait RunChunk: MaskBits {
    /// True when the eight entries all equal `bit` (as integers: 0 or 1 exactly).
    fn all(c: &[Self; CHUNK], bit: bool) -> bool;
    /// True when the entry equals `bit` exactly.
    fn is(self, bit: bool) -> bool;
}

impl RunChunk for i64 {
    #[inline(always)]
    fn all(c: &[Self; CHUNK], bit: bool) -> bool {
        // One XOR and one OR an entry, which vectorize.
        let b = i64::from(bit);
        c.iter().fold(0, |acc, &x| acc | (x ^ b)) == 0
    }
    #[inline(always)]
    fn is(self, bit: bool) -> bool {
        self == i64::from(bit)
    }
}

/// The eight bytes as one word against 0 or 0x0101…01.
#[inline(always)]
fn all_bytes(c: [u8; CHUNK], bit: bool) -> bool {
    u64::from_ne_bytes(c) == u64::from(bit) * 0x0101_0101_0101_0101
}

impl RunChunk for u8 {
    #[inline(always)]
    fn all(c: &[Self; CHUNK], bit: bool) -> bool {
        all_bytes(*c, bit)
    }
    #[inline(always)]
    fn is(self, bit: bool) -> bool {
        self == u8::from(bit)
    }
}

impl RunChunk for bool {
    #[inline(always)]
    fn all(c: &[Self; CHUNK], bit: bool) -> bool {
        all_bytes(c.map(u8::from), bit)
    }
    #[inline(always)]
    fn is(self, bit: bool) -> bool {
        self == bit
    }
}

/// The rows read ahead of the scan: while a row is scanned, the same columns of the mask and
/// the rewards [`AHEAD`] rows below are requested, one request per chunk and column, so that
/// the next rows arrive while this one is worked on. Each row of an `i64` mask is one 4 KiB
/// page, where the hardware's own stream detection starts over.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Ahead {
    /// (address of the row's first entry, bytes per entry) of the mask's and the rewards'
    /// row, when contiguous; 0 bytes: not requested.
    cols: [(usize, usize); 2],
}

/// Rows between the one scanned and the one requested.
const AHEAD: usize = 1;

impl Ahead {
    /// The requests for row `row + AHEAD` of `mask` and `rewards` (none past the last row).
    pub(super) fn rows(mask: &MaskView<'_>, rewards: Option<&FloatView<'_>>, row: usize) -> Self {
        fn at<T>(m: &ndarray::ArrayView2<'_, T>, r: usize) -> (usize, usize) {
            match (r < m.nrows())
                .then(|| m.row(r))
                .and_then(|x| x.to_slice().map(<[T]>::as_ptr))
            {
                Some(p) => (p as usize, std::mem::size_of::<T>()),
                None => (0, 0),
            }
        }
        let r = row + AHEAD;
        Self {
            cols: [
                match mask {
                    MaskView::Bool(m) => at(m, r),
                    MaskView::U8(m) => at(m, r),
                    MaskView::I64(m) => at(m, r),
                    MaskView::Lengths { .. } => (0, 0),
                },
                match rewards {
                    Some(FloatView::F32(m)) => at(m, r),
                    Some(FloatView::F64(m)) => at(m, r),
                    None => (0, 0),
                },
            ],
        }
    }

    /// Requests the lines of column `t` of the rows ahead.
    #[inline(always)]
    pub(super) fn fetch(&self, t: usize) {
        for &(start, size) in &self.cols {
            if size != 0 {
                prefetch_line(start + t * size);
            }
        }
    }
}

/// Appends the runs of row `row` of `mask` to `spans` (their `turn` set to 0); false when an
/// integer entry of the row is neither 0 nor 1 (the caller reports it). A row without a
/// contiguous slice is first copied into `buf` (length L) as 0/1 bytes.
pub(super) fn row_runs(
    mask: &MaskView<'_>,
    row: usize,
    ahead: Ahead,
    buf: &mut [u8],
    spans: &mut Vec<Span>,
) -> bool {
    fn scan<M: RunChunk>(
        m: &ndarray::ArrayView2<'_, M>,
        mask: &MaskView<'_>,
        row: usize,
        ahead: Ahead,
        buf: &mut [u8],
        spans: &mut Vec<Span>,
    ) -> bool {
        match m.row(row).to_slice() {
            Some(s) => scan_runs(s, row, ahead, spans),
            None => mask_row(mask, row, buf) && scan_runs(buf, row, ahead, spans),
        }
    }
    match mask {
        MaskView::Bool(m) => scan(m, mask, row, ahead, buf, spans),
        MaskView::U8(m) => scan(m, mask, row, ahead, buf, spans),
        MaskView::I64(m) => scan(m, mask, row, ahead, buf, spans),
        MaskView::Lengths { lengths, .. } => {
            // Lengths are checked against L when the mask is taken (`checked_mask`).
            if lengths[row] > 0 {
                spans.push(Span {
                    row,
                    start: 0,
                    end: lengths[row],
                    turn: 0,
                });
            }
            true
        }
    }
}

/// The runs of 1 in `m` (row `row`) appended to `spans`; false at the first entry that is
/// neither 0 nor 1.
fn scan_runs<M: RunChunk>(m: &[M], row: usize, ahead: Ahead, spans: &mut Vec<Span>) -> bool {
    let mut t = 0;
    loop {
        // A gap, then a run; `run_end` leaves `t` on an entry it found to be the other bit.
        let Some(start) = run_end(m, t, false, ahead) else {
            return false;
        };
        if start == m.len() {
            return true;
        }
        let Some(end) = run_end(m, start, true, ahead) else {
            return false;
        };
        spans.push(span(row, start, end));
        t = end;
    }
}

/// The first position at or after `t` whose entry is not `bit`: whole chunks equal to `bit`
/// first, then entry by entry. `None` when the entry found there is neither 0 nor 1 (every
/// entry passed over equals `bit`, so is valid).
#[inline(always)]
fn run_end<M: RunChunk>(m: &[M], mut t: usize, bit: bool, ahead: Ahead) -> Option<usize> {
    // `get` yields exactly CHUNK entries, so the conversion to an array reference never fails.
    while let Some(c) = m.get(t..t + CHUNK).and_then(|c| <&[M; CHUNK]>::try_from(c).ok()) {
        if !M::all(c, bit) {
            break;
        }
        ahead.fetch(t);
        t += CHUNK;
    }
    while t < m.len() && m[t].is(bit) {
        t += 1;
    }
    match m.get(t) {
        Some(&x) if !x.is(!bit) => None,
        _ => Some(t),
    }
}

fn span(row: usize, start: usize, end: usize) -> Span {
    Span {
        row,
        start,
        end,
        turn: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{s, Array2};

    /// The runs by the definition: entry by entry.
    fn reference(row: &[i64]) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let mut t = 0;
        while t < row.len() {
            if row[t] == 1 {
                let start = t;
                while t < row.len() && row[t] == 1 {
                    t += 1;
                }
                out.push((start, t));
            } else {
                t += 1;
            }
        }
        out
    }

    fn runs(mask: &MaskView<'_>, row: usize) -> Option<Vec<(usize, usize)>> {
        let mut spans = Vec::new();
        let mut buf = vec![0u8; mask.dim().1];
        row_runs(mask, row, Ahead::default(), &mut buf, &mut spans).then(|| {
            assert!(spans.iter().all(|s| s.row == row && s.turn == 0));
            spans.iter().map(|s| (s.start, s.end)).collect()
        })
    }

    #[test]
    fn every_dtype_and_layout_finds_the_runs_of_the_definition() {
        // Rows of 0..40 tokens with runs of every length crossing chunk edges.
        let mut state = 0x5EEDu64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            state >> 33
        };
        for cols in [0usize, 1, 7, 8, 9, 16, 17, 40] {
            let rows = 60;
            let m64 = Array2::from_shape_fn((rows, cols), |(r, t)| {
                // Long runs in half the rows, noise in the rest.
                let p = if r % 2 == 0 { 8 } else { 2 };
                ((next() % p == 0) as i64 + (t as i64 / 9 + r as i64)) % 2
            });
            let m8 = m64.mapv(|x| x as u8);
            let mb = m64.mapv(|x| x == 1);
            // Strided views: every other column of a wider matrix.
            let wide = Array2::from_shape_fn(
                (rows, 2 * cols),
                |(r, t)| if t % 2 == 0 { m64[[r, t / 2]] } else { 7 },
            );
            let strided = wide.slice(s![.., ..;2]);
            for r in 0..rows {
                let want = reference(m64.row(r).as_slice().unwrap());
                for view in [
                    MaskView::I64(m64.view()),
                    MaskView::U8(m8.view()),
                    MaskView::Bool(mb.view()),
                    MaskView::I64(strided),
                ] {
                    assert_eq!(runs(&view, r).as_ref(), Some(&want), "cols {cols}, row {r}");
                }
            }
        }
    }

    #[test]
    fn an_invalid_entry_anywhere_is_refused() {
        // A 2 inside a chunk of ones, of zeros, at a boundary, and in the tail; a −1 (all
        // bits set, so the chunk's AND has bit 0) inside ones.
        for (at, v) in [(3, 2), (12, 2), (8, 2), (17, 2), (2, -1), (5, 3)] {
            let mut row = vec![0i64; 19];
            row[..8].fill(1);
            row[at] = v;
            let m = Array2::from_shape_vec((1, 19), row.clone()).unwrap();
            assert_eq!(runs(&MaskView::I64(m.view()), 0), None, "{row:?}");
            let m8 = m.mapv(|x| x as u8);
            assert_eq!(runs(&MaskView::U8(m8.view()), 0), None, "{row:?}");
        }
    }

    #[test]
    fn lengths_give_one_run_or_none() {
        let lengths = [0, 3, 5];
        let m = MaskView::Lengths {
            lengths: &lengths,
            cols: 5,
        };
        assert_eq!(runs(&m, 0), Some(vec![]));
        assert_eq!(runs(&m, 1), Some(vec![(0, 3)]));
        assert_eq!(runs(&m, 2), Some(vec![(0, 5)]));
    }
}
