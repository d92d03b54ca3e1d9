//! The second pass of the two-pass path: every turn's value over its spans, 0 elsewhere.

use super::Span;
use crate::tensor::Float;

/// Writes `values[turn]` over every span of `spans` (in row order, as the read keeps them)
/// and 0 on every other element of `out`.
pub(super) fn write_rows<T: Float>(spans: &[Span], values: &[f64], out: &mut ndarray::ArrayViewMut2<'_, T>) {
    let mut s = spans.iter().peekable();
    for (r, mut row) in out.rows_mut().into_iter().enumerate() {
        match row.as_slice_mut() {
            Some(o) => {
                // Each element written once: the gap before a span, the span, the tail.
                let mut at = 0;
                while let Some(sp) = s.next_if(|sp| sp.row == r) {
                    o[at..sp.start].fill(T::ZERO);
                    o[sp.start..sp.end].fill(T::from_f64(values[sp.turn]));
                    at = sp.end;
                }
                o[at..].fill(T::ZERO);
            }
            None => {
                row.fill(T::ZERO);
                while let Some(sp) = s.next_if(|sp| sp.row == r) {
                    let v = T::from_f64(values[sp.turn]);
                    for t in sp.start..sp.end {
                        row[t] = v;
                    }
                }
            }
        }
    }
}
