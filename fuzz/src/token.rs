//! Oracle of the `token` fuzz target: `tensor::broadcast_into` and `tensor::spans_into` under
//! arbitrary masks, spans, shapes and memory layouts, in `f32` and `f64`.
//!
//! Masks are `bool`, `u8` or `i64` matrices in either memory layout; integer masks are mostly
//! 0/1 and sometimes hold any value.
//! Shapes are up to 12 × 12, and for one mode byte in 32 about 4 MiB of output (just under or
//! over the size from which the masked writer streams its stores), with a repeated mask pattern.
//!
//! Oracles: no panic; `Ok` exactly when the documented preconditions hold (checked here
//! independently: among them every step value finite, and into `f32` no written value past
//! `f32::MAX`, which would round to ∞); an integer entry other than 0 and 1 is
//! `Error::MaskValue` naming the first one in row-major order (when the shapes are valid and
//! the values finite); on `Ok` every output element equals the definition bit for bit
//! (`v as T` on a masked-in token of a covering span, `0` elsewhere).
//!
//! On the broadcast inputs also: `tensor::prefix_lengths_into` gives the first bad entry, else
//! `Error::NotPrefixMask` at the first row with a 1 after a 0 (at that 1), else each row's
//! count of ones, and the broadcast under those lengths (`MaskView::Lengths`, streamed when
//! large) writes the same bits as under the matrix; `tensor::row_sums_into` of fuzzed `f32` and
//! `f64` matrices (small shapes) equals each row's left-to-right `Iterator::sum` (or both NaN).

use beacon_rl::tensor::{
    broadcast_into, prefix_lengths_into, row_sums_into, spans_into, FloatViewMut, MaskView, TokenSpan,
};
use beacon_rl::Error;
use ndarray::{Array2, ShapeBuilder};

use super::bytes::Bytes;

/// Runs one fuzz input through the oracles; panics on a violation.
pub fn run(data: &[u8]) {
    let mut u = Bytes::new(data);
    let mode = u.u8();
    if mode & 2 == 0 {
        check::<f64>(&mut u, mode);
    } else {
        check::<f32>(&mut u, mode);
    }
}

trait Bits: Copy + PartialEq + std::fmt::Debug + 'static {
    const ZERO: Self;
    /// Rounds an `f64` to this type (round to nearest even), as the writers do.
    fn from_f64(v: f64) -> Self;
    fn bits(self) -> u64;
    /// The output view the token functions take (one `From` impl per element type).
    fn out(a: &mut Array2<Self>) -> FloatViewMut<'_>;
}
impl Bits for f32 {
    const ZERO: Self = 0.0;
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn bits(self) -> u64 {
        u64::from(self.to_bits())
    }
    fn out(a: &mut Array2<Self>) -> FloatViewMut<'_> {
        a.view_mut().into()
    }
}
impl Bits for f64 {
    const ZERO: Self = 0.0;
    fn from_f64(v: f64) -> Self {
        v
    }
    fn bits(self) -> u64 {
        self.to_bits()
    }
    fn out(a: &mut Array2<Self>) -> FloatViewMut<'_> {
        a.view_mut().into()
    }
}

/// Output bytes from which the masked writer streams its stores (`stream::MIN_BYTES`).
const STREAM_BYTES: usize = 4 << 20;

fn check<T: Bits>(u: &mut Bytes<'_>, mode: u8) {
    // Mode bytes 0xf8..=0xff: an output of about `STREAM_BYTES`, just under or over, so that
    // the streaming stores (and their unaligned-row fallback) run; the mask is then a fuzzed
    // pattern repeated, as the input cannot hold a million entries.
    let large = mode >= 0xf8;
    let (rows, cols) = if large {
        let rows = u.range(1, 8);
        let elems = STREAM_BYTES / std::mem::size_of::<T>();
        (rows, elems.div_ceil(rows) - 1 + u.range(0, 15))
    } else {
        (u.range(0, 12), u.range(0, 12))
    };
    let values: Vec<f64> = if large && u.u8() < 224 {
        (0..rows).map(|_| u.f64()).collect()
    } else {
        (0..u.range(0, 12)).map(|_| u.f64()).collect()
    };
    // The mask's entries as i64; `kind` picks the dtype the functions see (bool: 0/1 only).
    let kind = u.u8() % 3;
    let wild = kind != 0 && u.u8() < 64;
    let fortran = u.bool();
    let entry = |u: &mut Bytes<'_>| -> i64 {
        match (kind, wild && u.u8() < 32) {
            (_, false) => i64::from(u.bool()),
            (1, true) => i64::from(u.u8()),
            (_, true) => u.u64() as i64,
        }
    };
    let vals = if large {
        let pattern: Vec<i64> = (0..u.range(1, 64)).map(|_| entry(u)).collect();
        let at = |(r, j): (usize, usize)| pattern[(r * cols + j) % pattern.len()];
        if fortran {
            Array2::from_shape_fn((rows, cols).f(), at)
        } else {
            Array2::from_shape_fn((rows, cols), at)
        }
    } else if fortran {
        Array2::from_shape_fn((rows, cols).f(), |_| entry(u))
    } else {
        Array2::from_shape_fn((rows, cols), |_| entry(u))
    };
    let as_bool = vals.mapv(|v| v == 1);
    let as_u8 = vals.mapv(|v| v as u8);
    let view = match kind {
        0 => MaskView::from(as_bool.view()),
        1 => MaskView::from(as_u8.view()),
        _ => MaskView::from(vals.view()),
    };
    // The first entry (row-major) other than 0 and 1, as the crate must name it.
    let first_bad = vals
        .indexed_iter()
        .find(|&(_, &v)| v != 0 && v != 1)
        .map(|((row, token), &v)| Error::MaskValue {
            row,
            token,
            value: if kind == 1 { i64::from(v as u8) } else { v },
        });
    let mask = &as_bool;
    // Output: usually the mask's shape, in either layout, pre-filled with garbage.
    let out_dim = if u.u8() < 240 {
        (rows, cols)
    } else {
        (u.range(0, 12), u.range(0, 12))
    };
    let garbage = T::from_f64(f64::NAN);
    let mut out = if mode & 4 == 0 {
        Array2::from_elem(out_dim, garbage)
    } else {
        Array2::from_elem(out_dim.f(), garbage)
    };

    if mode & 1 == 0 {
        let shapes = mask.nrows() == values.len() && out_dim == (rows, cols);
        check_prefix_lengths::<T>(
            view,
            mask,
            first_bad.as_ref(),
            &values,
            shapes,
            out.is_standard_layout(),
        );
        if !large {
            check_row_sums(u, rows, cols);
        }
        let got = broadcast_into(&values, view, T::out(&mut out));
        if let (true, Some(bad)) = (shapes, &first_bad) {
            // Step values are checked before the mask's entries, which are read as written.
            match first_non_finite(&values) {
                Some(index) => assert_non_finite(&got, "step_values", index, "broadcast_into"),
                None => assert_eq!(got.as_ref().err(), Some(bad), "broadcast_into"),
            }
            return;
        }
        let written = |r: usize| mask.row(r).iter().any(|&m| m);
        let valid = shapes && values_ok::<T>(&values, written);
        assert_eq!(got.is_ok(), valid, "broadcast_into: {got:?}");
        if valid {
            assert_broadcast(&out, mask, &values, "broadcast_into");
        }
        return;
    }

    // Spans: mostly increasing (seq, start) and in range, sometimes anything.
    let mut spans = Vec::new();
    let (mut seq, mut pos) = (0usize, 0usize);
    for _ in 0..u.range(0, 10) {
        let span = if u.u8() < 230 {
            if u.u8() < 64 {
                seq += 1;
                pos = 0;
            }
            let start = pos + u.range(0, 3);
            let end = start + u.range(0, 4);
            pos = end;
            TokenSpan {
                seq,
                step: u.range(0, values.len()),
                start,
                end,
            }
        } else {
            TokenSpan {
                seq: u.size(),
                step: u.size(),
                start: u.size(),
                end: u.size(),
            }
        };
        spans.push(span);
    }
    let got = spans_into(&values, &spans, view, T::out(&mut out));
    if let Some(bad) = &first_bad {
        // The mask is checked before the output and the spans.
        assert_eq!(got.as_ref().err(), Some(bad), "spans_into");
        return;
    }
    let valid = out_dim == (rows, cols)
        && spans_valid(&spans, values.len(), rows, cols)
        && values_ok::<T>(&values, |step| {
            spans
                .iter()
                .any(|s| s.step == step && (s.start..s.end).any(|j| mask[[s.seq, j]]))
        });
    assert_eq!(got.is_ok(), valid, "spans_into {spans:?}: {got:?}");
    if valid {
        let mut want = Array2::from_elem((rows, cols), T::ZERO);
        for s in &spans {
            for j in s.start..s.end {
                if mask[[s.seq, j]] {
                    want[[s.seq, j]] = T::from_f64(values[s.step]);
                }
            }
        }
        for ((r, j), &o) in out.indexed_iter() {
            assert_eq!(
                o.bits(),
                want[[r, j]].bits(),
                "spans_into out[{r}, {j}] for {spans:?}"
            );
        }
    }
}

/// The value preconditions of the token functions: every step value finite, and into `f32`
/// no value that is written (`written(r)`: value r lands on some token) past `f32::MAX`.
fn values_ok<T: Bits>(values: &[f64], written: impl Fn(usize) -> bool) -> bool {
    let narrow = std::mem::size_of::<T>() == 4;
    first_non_finite(values).is_none()
        && !(narrow
            && values
                .iter()
                .enumerate()
                .any(|(r, &v)| (v as f32).is_infinite() && written(r)))
}

/// The first NaN or infinite value's index.
fn first_non_finite(values: &[f64]) -> Option<usize> {
    values.iter().position(|v| !v.is_finite())
}

/// `got` is `Error::NonFinite` for `what` at `index` (its value may be NaN, which `==` on the
/// error would never match).
fn assert_non_finite(got: &Result<(), Error>, what: &str, index: usize, call: &str) {
    assert!(
        matches!(got, Err(Error::NonFinite { what: w, index: i, .. }) if *w == what && *i == index),
        "{call}: {got:?}, expected NonFinite in {what} at {index}"
    );
}

/// The documented preconditions of `spans_into`: each span names an existing row and step,
/// `start <= end <= cols`, and spans come in increasing `(seq, start)` order without overlap.
fn spans_valid(spans: &[TokenSpan], steps: usize, rows: usize, cols: usize) -> bool {
    let in_range = spans
        .iter()
        .all(|s| s.seq < rows && s.step < steps && s.start <= s.end && s.end <= cols);
    let ordered = spans
        .windows(2)
        .all(|w| w[1].seq > w[0].seq || (w[1].seq == w[0].seq && w[1].start >= w[0].end));
    in_range && ordered
}

/// `prefix_lengths_into` against the definition, and the lengths mask's broadcast against the
/// matrix's (`want` is the matrix's output by definition: `v` on a set token, `0` elsewhere).
fn check_prefix_lengths<T: Bits>(
    view: MaskView<'_>,
    mask: &Array2<bool>,
    first_bad: Option<&Error>,
    values: &[f64],
    shapes: bool,
    standard: bool,
) {
    let (rows, cols) = mask.dim();
    let mut lengths = vec![usize::MAX; rows];
    let got = prefix_lengths_into(view, &mut lengths);
    if let Some(bad) = first_bad {
        assert_eq!(got.as_ref().err(), Some(bad), "prefix_lengths_into");
        return;
    }
    let gap = (0..rows).find_map(|r| {
        let row = mask.row(r);
        let zero = row.iter().position(|&m| !m)?;
        let token = (zero..cols).find(|&t| row[t])?;
        Some(Error::NotPrefixMask { row: r, token })
    });
    if let Some(gap) = gap {
        assert_eq!(got.err(), Some(gap), "prefix_lengths_into");
        return;
    }
    assert!(got.is_ok(), "prefix_lengths_into: {got:?}");
    for (r, &n) in lengths.iter().enumerate() {
        assert_eq!(
            n,
            mask.row(r).iter().filter(|&&m| m).count(),
            "prefix length of row {r}"
        );
    }
    if !shapes {
        return;
    }
    let garbage = T::from_f64(f64::NAN);
    let mut out = if standard {
        Array2::from_elem((rows, cols), garbage)
    } else {
        Array2::from_elem((rows, cols).f(), garbage)
    };
    let prefix = MaskView::Lengths {
        lengths: &lengths,
        cols,
    };
    let got = broadcast_into(values, prefix, T::out(&mut out));
    // The rows written are the matrix's: those with a set token.
    if !values_ok::<T>(values, |r| lengths[r] > 0) {
        assert!(got.is_err(), "lengths broadcast of invalid values: {got:?}");
        return;
    }
    got.expect("a valid lengths mask broadcasts");
    assert_broadcast(&out, mask, values, "lengths broadcast");
}

/// The broadcast's definition, bit for bit: `v as T` on a set token of row r, `0` elsewhere.
fn assert_broadcast<T: Bits>(out: &Array2<T>, mask: &Array2<bool>, values: &[f64], what: &str) {
    for ((r, j), &o) in out.indexed_iter() {
        let want = if mask[[r, j]] {
            T::from_f64(values[r])
        } else {
            T::ZERO
        };
        assert_eq!(o.bits(), want.bits(), "{what} out[{r}, {j}]");
    }
}

/// `row_sums_into` of fuzzed matrices against each row's `Iterator::sum`.
fn check_row_sums(u: &mut Bytes<'_>, rows: usize, cols: usize) {
    let wide = Array2::from_shape_fn((rows, cols), |_| u.f64());
    let narrow = wide.mapv(|x| x as f32);
    let same = |got: f64, want: f64| got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan());
    let mut sums = vec![0.5; rows];
    row_sums_into(&narrow, &mut sums).expect("one sum per row");
    for (r, row) in narrow.rows().into_iter().enumerate() {
        let want: f64 = row.iter().map(|&x| f64::from(x)).sum();
        assert!(same(sums[r], want), "f32 row sum {r}: {} vs {want}", sums[r]);
    }
    row_sums_into(&wide, &mut sums).expect("one sum per row");
    for (r, row) in wide.rows().into_iter().enumerate() {
        let want: f64 = row.iter().sum();
        assert!(same(sums[r], want), "f64 row sum {r}: {} vs {want}", sums[r]);
    }
}
