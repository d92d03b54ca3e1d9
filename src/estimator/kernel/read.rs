//! Reading the token-level inputs: a column as row-major slices ([`Tokens`]), one row widened
//! to `f64` ([`float_row`]) or a mask row as 0/1 bytes with its 0/1 test ([`mask_row`]), and
//! the cache-line requests for the next block of rows ([`Prefetch`]).

use std::borrow::Cow;

use ndarray::ArrayView2;

use crate::error::Result;
use crate::tensor::{FloatView, MaskBits, MaskView};

/// A rows × L input column in row-major order for the token-level kernels: borrowed when the
/// caller's view is `f64`/`bool` in standard layout (the usual case for `f64` callers),
/// otherwise widened once into a workspace buffer, which [`recycle`](Self::recycle) hands
/// back so the next call reuses it. Hot loops then run over plain slices.
pub(crate) struct Tokens<'a, T: Clone> {
    data: Cow<'a, [T]>,
    rows: usize,
    cols: usize,
}

impl<'a> Tokens<'a, f64> {
    pub(crate) fn floats(m: FloatView<'a>, buf: &mut Vec<f64>) -> Self {
        let (rows, cols) = m.dim();
        let data = match m {
            FloatView::F64(v) => match v.to_slice() {
                Some(s) => Cow::Borrowed(s),
                None => Cow::Owned(refill(buf, v.iter().copied())),
            },
            FloatView::F32(v) => Cow::Owned(refill(buf, v.iter().map(|&x| f64::from(x)))),
        };
        Self { data, rows, cols }
    }
}

impl<'a> Tokens<'a, bool> {
    /// The mask as `bool`s (borrowed for a standard-layout `bool` mask). Integer entries are
    /// tested for 0/1 in the same pass that converts them (no pass of its own).
    ///
    /// # Errors
    /// [`Error::MaskValue`] for the first integer entry (row-major) other than 0 and 1.
    pub(crate) fn mask(m: MaskView<'a>, buf: &mut Vec<bool>) -> Result<Self> {
        /// Rows of `m` into `data` (`cols` > 0 each); false when an entry is neither 0 nor 1.
        fn convert<M: MaskBits>(m: &ArrayView2<'_, M>, data: &mut [bool], cols: usize) -> bool {
            let mut extra = M::Extra::default();
            for (row, out) in m.rows().into_iter().zip(data.chunks_exact_mut(cols)) {
                for (o, x) in out.iter_mut().zip(row) {
                    extra = extra | x.extra_bits();
                    *o = x.is_set();
                }
            }
            extra == M::Extra::default()
        }
        let (rows, cols) = m.dim();
        if let MaskView::Bool(v) = m {
            if let Some(s) = v.to_slice() {
                return Ok(Self {
                    data: Cow::Borrowed(s),
                    rows,
                    cols,
                });
            }
        }
        let mut data = std::mem::take(buf);
        data.clear();
        data.resize(rows * cols, false);
        let valid = cols == 0
            || match &m {
                MaskView::U8(v) => convert(v, &mut data, cols),
                MaskView::I64(v) => convert(v, &mut data, cols),
                _ => {
                    for (r, row) in data.chunks_exact_mut(cols).enumerate() {
                        m.row_into(r, row);
                    }
                    true
                }
            };
        if !valid {
            *buf = data;
            return Err(m.value_error());
        }
        Ok(Self {
            data: Cow::Owned(data),
            rows,
            cols,
        })
    }
}

/// `buf`'s allocation refilled with `values` (taken out of `buf`; see [`Tokens::recycle`]).
fn refill<T>(buf: &mut Vec<T>, values: impl Iterator<Item = T>) -> Vec<T> {
    let mut data = std::mem::take(buf);
    data.clear();
    data.extend(values);
    data
}

impl<'a, T: Clone> Tokens<'a, T> {
    /// Hands a converted column's buffer back to the workspace.
    pub(crate) fn recycle(self, buf: &mut Vec<T>) {
        if let Cow::Owned(v) = self.data {
            *buf = v;
        }
    }

    pub(crate) fn dim(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    pub(crate) fn cols(&self) -> usize {
        self.cols
    }

    /// All values, row-major (index = row · L + t).
    pub(crate) fn as_slice(&self) -> &[T] {
        &self.data
    }

    /// Row `r` (in range by construction: callers iterate `0..rows`).
    pub(crate) fn row(&self, r: usize) -> &[T] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }
}

/// Rows per block of the token scans (GAE, REINFORCE++): each lane is one row's backward
/// recurrence, and running several independent rows in lockstep hides the latency of each
/// row's chain of dependent operations without changing any row's order of operations.
pub(crate) const LANES: usize = 4;

/// The next block's input rows, one cache line requested per step of the current block's scan.
///
/// The scans run on a block already in cache (its rows widened into `whiten::Lanes`), so the core
/// sits idle on memory only while the next block's rows are read; its lines, requested
/// during the current scan (one per token step: a block's `LANES` rows of 512 tokens are
/// 512 lines of f32 rewards and values and an i64 mask), arrive while the scan computes.
/// Measured at C (30,720 × 512, three alternating pairs): GAE 0.91× the time without from an
/// i64 mask, 0.95× from per-row lengths; REINFORCE++ 0.93× from i64, unchanged from lengths.
/// Requests only: no value is read, so the results are unchanged. Strided rows (no
/// contiguous slice) and per-row lengths are not requested.
#[derive(Debug, Default)]
pub(crate) struct Prefetch {
    /// (start address, bytes) of each contiguous input row.
    regions: [(usize, usize); 3 * LANES],
    count: usize,
    at: usize,
    offset: usize,
}

impl Prefetch {
    /// The rows `r ..` (up to [`LANES`] of them) of `a`, `b` (if any) and `mask`.
    pub(crate) fn rows(a: &FloatView<'_>, b: Option<&FloatView<'_>>, mask: &MaskView<'_>, r: usize) -> Self {
        // From the start of the first line the row touches, so that stepping by whole lines
        // reaches its last one.
        fn bytes<T>(s: Option<&[T]>) -> Option<(usize, usize)> {
            s.map(|s| {
                let start = s.as_ptr() as usize;
                (start - start % LINE, std::mem::size_of_val(s) + start % LINE)
            })
        }
        fn float_bytes(v: &FloatView<'_>, row: usize) -> Option<(usize, usize)> {
            match v {
                FloatView::F32(m) => bytes(m.row(row).to_slice()),
                FloatView::F64(m) => bytes(m.row(row).to_slice()),
            }
        }
        let mut p = Self::default();
        let rows = mask.dim().0;
        for row in r..r.saturating_add(LANES).min(rows) {
            let mut push = |region: Option<(usize, usize)>| {
                if let Some(region) = region.filter(|&(_, len)| len > 0) {
                    p.regions[p.count] = region;
                    p.count += 1;
                }
            };
            push(float_bytes(a, row));
            push(b.and_then(|b| float_bytes(b, row)));
            push(match mask {
                MaskView::Bool(m) => bytes(m.row(row).to_slice()),
                MaskView::U8(m) => bytes(m.row(row).to_slice()),
                MaskView::I64(m) => bytes(m.row(row).to_slice()),
                MaskView::Lengths { .. } => None,
            });
        }
        p
    }

    /// Requests the next line (nothing once every row is requested).
    #[inline(always)]
    pub(crate) fn step(&mut self) {
        if let Some(line) = self.next_line() {
            prefetch_line(line);
        }
    }

    /// The address of the next line to request, if any is left.
    #[inline(always)]
    fn next_line(&mut self) -> Option<usize> {
        let &(start, len) = self.regions[..self.count].get(self.at)?;
        let line = start + self.offset;
        self.offset += LINE;
        if self.offset >= len {
            (self.at, self.offset) = (self.at + 1, 0);
        }
        Some(line)
    }
}

/// Requests the cache line holding address `line` (a request only: nothing is read, and an
/// address outside the caller's data is harmless). Elsewhere than x86-64, nothing.
#[inline(always)]
pub(crate) fn prefetch_line(line: usize) {
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code, unused_unsafe)]
    // SAFETY: SSE is part of x86-64, and a prefetch reads nothing and never faults.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(line as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = line;
}

/// Bytes per cache line (x86-64 and most AArch64 cores).
const LINE: usize = 64;

/// Row `r` of `v` widened (exactly) to `f64` into `buf` (length L).
pub(crate) fn float_row(v: &FloatView<'_>, r: usize, buf: &mut [f64]) {
    fn put<T: crate::tensor::Float>(m: &ArrayView2<'_, T>, r: usize, buf: &mut [f64]) {
        let row = m.row(r);
        match row.as_slice() {
            Some(s) => buf.iter_mut().zip(s).for_each(|(o, &x)| *o = x.to_f64()),
            None => buf.iter_mut().zip(row).for_each(|(o, &x)| *o = x.to_f64()),
        }
    }
    match v {
        FloatView::F32(m) => put(m, r, buf),
        FloatView::F64(m) => put(m, r, buf),
    }
}

/// The response mask of row `r` into `buf` (length L) as 0/1 bytes; false when an integer
/// entry of the row is neither 0 nor 1. The test rides along the conversion (the OR of the
/// entries' [extra bits](MaskBits::extra_bits), in the entries' own width), so an integer
/// mask costs no pass of its own; for `bool` the OR is a constant 0 and compiles away.
///
/// Each byte is the entry's bit 0, which for the valid entries 0 and 1 is the entry itself:
/// a truncation, where `!= 0` on an `i64` is a 64-bit compare that SSE2 lacks (callgrind, GAE
/// at B: the conversion 10.3 M → 7.8 M instructions per call). The byte of an invalid entry
/// is never used for a result: the caller reports [`Error::MaskValue`].
pub(crate) fn mask_row(mask: &MaskView<'_>, r: usize, buf: &mut [u8]) -> bool {
    fn put<M: MaskBits>(m: &ArrayView2<'_, M>, r: usize, buf: &mut [u8]) -> bool {
        let row = m.row(r);
        match row.as_slice() {
            Some(s) => {
                // Chunks of 8: the conversion vectorizes 8 wide (a plain zip runs 4 at a
                // time); one OR accumulator per lane, reduced once per row.
                let mut extra = [M::Extra::default(); 8];
                let (mut o, mut x) = (buf.chunks_exact_mut(8), s.chunks_exact(8));
                for (o, x) in (&mut o).zip(&mut x) {
                    for j in 0..8 {
                        extra[j] = extra[j] | x[j].extra_bits();
                        o[j] = x[j].bits() as u8 & 1;
                    }
                }
                let mut tail = M::Extra::default();
                for (o, x) in o.into_remainder().iter_mut().zip(x.remainder()) {
                    tail = tail | x.extra_bits();
                    *o = x.bits() as u8 & 1;
                }
                extra.iter().fold(tail, |a, &e| a | e) == M::Extra::default()
            }
            None => {
                let mut extra = M::Extra::default();
                for (o, x) in buf.iter_mut().zip(row) {
                    extra = extra | x.extra_bits();
                    *o = x.bits() as u8 & 1;
                }
                extra == M::Extra::default()
            }
        }
    }
    match mask {
        MaskView::Bool(m) => put(m, r, buf),
        MaskView::U8(m) => put(m, r, buf),
        MaskView::I64(m) => put(m, r, buf),
        MaskView::Lengths { lengths, .. } => {
            let len = lengths[r].min(buf.len());
            let (on, off) = buf.split_at_mut(len);
            on.fill(1);
            off.fill(0);
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{s, Array2};
    use std::collections::BTreeSet;

    /// The lines (address / 64) that hold the bytes of `rows`.
    fn lines_of<T>(rows: &[&[T]]) -> BTreeSet<usize> {
        let bytes = |r: &&[T]| (r.as_ptr() as usize, std::mem::size_of_val(*r));
        rows.iter()
            .map(bytes)
            .flat_map(|(a, n)| a / LINE..(a + n).div_ceil(LINE))
            .collect()
    }

    fn requested(mut p: Prefetch) -> Vec<usize> {
        std::iter::from_fn(|| p.next_line()).map(|a| a / LINE).collect()
    }

    fn row<T>(a: &Array2<T>, i: usize) -> &[T] {
        a.row(i).to_slice().unwrap()
    }

    #[test]
    fn prefetch_requests_every_line_of_the_next_blocks_rows() {
        // 6 rows × 40 tokens (160-byte f32 rows, which share lines): the block from row 4 is
        // cut short by the batch's end (rows 4, 5).
        let (rows, cols) = (6, 40);
        let r = Array2::<f32>::from_shape_fn((rows, cols), |(i, j)| (i * cols + j) as f32);
        let v = r.clone();
        let m = Array2::<i64>::ones((rows, cols));
        let (rv, vv, mv) = (
            FloatView::F32(r.view()),
            FloatView::F32(v.view()),
            MaskView::I64(m.view()),
        );
        let check = |got: Vec<usize>, want: BTreeSet<usize>, regions: usize| {
            assert_eq!(got.iter().copied().collect::<BTreeSet<_>>(), want);
            // A line two rows share may be requested once for each.
            assert!(got.len() <= want.len() + regions, "{got:?}");
        };
        let got = requested(Prefetch::rows(&rv, Some(&vv), &mv, 4));
        let mut want = lines_of(&[row(&r, 4), row(&r, 5), row(&v, 4), row(&v, 5)]);
        want.extend(lines_of(&[row(&m, 4), row(&m, 5)]));
        check(got, want, 6);

        // Without `b`: `a` and the mask, a whole block.
        let got = requested(Prefetch::rows(&rv, None, &mv, 0));
        let mut want = lines_of(&(0..LANES).map(|i| row(&r, i)).collect::<Vec<_>>());
        want.extend(lines_of(&(0..LANES).map(|i| row(&m, i)).collect::<Vec<_>>()));
        check(got, want, 2 * LANES);
        // Nothing past the last row.
        assert!(requested(Prefetch::rows(&rv, Some(&vv), &mv, rows)).is_empty());
    }

    #[test]
    fn prefetch_skips_lengths_and_strided_rows() {
        let r = Array2::<f32>::zeros((8, 16));
        let lengths = [3usize; 8];
        let lens = MaskView::Lengths {
            lengths: &lengths,
            cols: 16,
        };
        let rv = FloatView::F32(r.view());
        // Rewards only (no mask bytes to read).
        let got: BTreeSet<usize> = requested(Prefetch::rows(&rv, None, &lens, 0))
            .into_iter()
            .collect();
        assert_eq!(got, lines_of(&(0..LANES).map(|i| row(&r, i)).collect::<Vec<_>>()));
        // Every other column: no row is a contiguous slice.
        let strided = FloatView::F32(r.slice(s![.., ..;2]));
        assert!(requested(Prefetch::rows(&strided, None, &lens, 0)).is_empty());
    }
}
