//! The multi-turn read in one pass: each row's mask and rewards are read side by side, chunk
//! by chunk, so that the turn boundaries and the rewards each turn owns come out of a single
//! stream over the row (where scanning the mask, then summing the rewards, reads the row
//! twice over).
//!
//! The sums are those of the parent module's `lane_sum` bit for bit: there, token `t` of a
//! turn owning `a..b` goes into partial `(t − a) mod 4`, here into partial `t mod 4`, a
//! rotation of the same four partials, each fed the same tokens in the same order; and the
//! combination `(p0 + p2) + (p1 + p3)` is the same under every rotation (IEEE addition
//! commutes). Chunks of eight zero rewards are passed over as there (adding ±0 leaves a
//! partial unchanged: a partial is never −0).

use super::runs::{Ahead, RunChunk, CHUNK};
use super::{Span, Turns};
use crate::tensor::{Float, FloatView, MaskView};

/// The four partial sums of a turn's rewards, by token column mod 4.
#[derive(Clone, Copy, Default)]
struct Partials([f64; 4]);

impl Partials {
    /// Adds a chunk of rewards that starts on a column ≡ 0 mod 4; nothing when all are zero.
    #[inline(always)]
    fn chunk<T: Float>(&mut self, r: &[T; CHUNK]) {
        // Not short-circuiting: one vector compare.
        if r.iter().fold(true, |zero, &v| zero & (v == T::ZERO)) {
            return;
        }
        for (j, &v) in r.iter().enumerate() {
            self.0[j % 4] += v.to_f64();
        }
    }

    #[inline(always)]
    fn add<T: Float>(&mut self, t: usize, v: T) {
        self.0[t % 4] += v.to_f64();
    }

    /// The sum, and the partials emptied for the next turn.
    #[inline(always)]
    fn take(&mut self) -> f64 {
        let p = std::mem::take(&mut self.0);
        (p[0] + p[2]) + (p[1] + p[3])
    }
}

/// Where a row's scan stands: inside a run or a gap since `start`, and the rewards since the
/// end of the previous run.
struct Scan<'o> {
    row: usize,
    inside: bool,
    start: usize,
    sum: Partials,
    spans: &'o mut Vec<Span>,
    reward: &'o mut Vec<f64>,
}

impl Scan<'_> {
    /// Entry `t` (mask `x`, reward `v`) on its own; false when `x` is neither 0 nor 1.
    #[inline(always)]
    fn entry<M: RunChunk, T: Float>(&mut self, t: usize, x: M, v: T) -> bool {
        if !x.is(self.inside) {
            if !x.is(!self.inside) {
                return false;
            }
            if self.inside {
                self.close(t);
            } else {
                self.start = t;
            }
            self.inside = !self.inside;
        }
        // The reward of the entry that ends a run is owned by the next turn (or the tail).
        self.sum.add(t, v);
        true
    }

    /// The run `start..end` ends: one span and its turn's reward.
    fn close(&mut self, end: usize) {
        self.spans.push(Span {
            row: self.row,
            start: self.start,
            end,
            turn: 0,
        });
        self.reward.push(self.sum.take());
    }
}

impl Turns {
    /// Row `r` of the multi-turn layout in one pass over its mask and rewards
    /// (`row_turns`); false (nothing read) without rewards (step rows) or when either row is
    /// not contiguous.
    pub(super) fn read_fused(
        &mut self,
        mask: &MaskView<'_>,
        rewards: Option<&FloatView<'_>>,
        r: usize,
        ahead: Ahead,
    ) -> crate::error::Result<bool> {
        let (from, first) = (self.spans.len(), self.reward.len());
        let Some(rw) = rewards else {
            return Ok(false);
        };
        let Some(tail) = row_turns(mask, rw, r, ahead, &mut self.spans, &mut self.reward) else {
            return Ok(false);
        };
        let tail = tail.map_err(|()| mask.value_error())?;
        self.row_turns.push(first);
        for (k, s) in (first..).zip(&mut self.spans[from..]) {
            s.turn = k;
            self.tokens.push(s.end - s.start);
            self.row_of.push(r);
            self.first.push(s.start);
        }
        self.close_row(rw, r, first, tail)?;
        Ok(true)
    }
}

/// Row `row`'s runs appended to `spans` (their `turn` set to 0) and each run's turn reward
/// (the rewards from the previous run's end to its own end) to `reward`, in one pass over the
/// row: `Some(Ok(tail))` with the sum of the rewards after the last run (of the whole row when
/// it has none), `Some(Err(()))` when a mask entry is neither 0 nor 1, `None` when the mask's or
/// the rewards' row is not contiguous (the caller reads it in two passes).
pub(super) fn row_turns(
    mask: &MaskView<'_>,
    rewards: &FloatView<'_>,
    row: usize,
    ahead: Ahead,
    spans: &mut Vec<Span>,
    reward: &mut Vec<f64>,
) -> Option<Result<f64, ()>> {
    fn with_mask<M: RunChunk>(
        m: &ndarray::ArrayView2<'_, M>,
        rewards: &FloatView<'_>,
        mut scan: Scan<'_>,
        ahead: Ahead,
    ) -> Option<Result<f64, ()>> {
        let m = m.row(scan.row).to_slice()?;
        Some(match rewards {
            FloatView::F32(w) => scan.run(m, w.row(scan.row).to_slice()?, ahead),
            FloatView::F64(w) => scan.run(m, w.row(scan.row).to_slice()?, ahead),
        })
    }
    let scan = Scan {
        row,
        inside: false,
        start: 0,
        sum: Partials::default(),
        spans,
        reward,
    };
    match mask {
        MaskView::Bool(m) => with_mask(m, rewards, scan, ahead),
        MaskView::U8(m) => with_mask(m, rewards, scan, ahead),
        MaskView::I64(m) => with_mask(m, rewards, scan, ahead),
        MaskView::Lengths { .. } => None,
    }
}

impl Scan<'_> {
    /// The pass over one row (`m` and `w` of equal length).
    #[inline(always)]
    fn run<M: RunChunk, T: Float>(&mut self, m: &[M], w: &[T], ahead: Ahead) -> Result<f64, ()> {
        let n = m.len().min(w.len());
        let (m, w) = (&m[..n], &w[..n]);
        let mut mc = m.chunks_exact(CHUNK);
        let mut wc = w.chunks_exact(CHUNK);
        let mut t = 0;
        for (x, v) in (&mut mc).zip(&mut wc) {
            // `chunks_exact` yields exactly CHUNK entries: the conversions never fail.
            let (Ok(x), Ok(v)) = (<&[M; CHUNK]>::try_from(x), <&[T; CHUNK]>::try_from(v)) else {
                return Err(());
            };
            ahead.fetch(t);
            if M::all(x, self.inside) {
                self.sum.chunk(v);
            } else {
                for j in 0..CHUNK {
                    if !self.entry(t + j, x[j], v[j]) {
                        return Err(());
                    }
                }
            }
            t += CHUNK;
        }
        for (j, (&x, &v)) in mc.remainder().iter().zip(wc.remainder()).enumerate() {
            if !self.entry(t + j, x, v) {
                return Err(());
            }
        }
        if self.inside {
            self.close(n);
        }
        Ok(self.sum.take())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{lane_sum, runs};
    use super::*;
    use ndarray::{s, Array2};

    /// The two-pass read: the runs, then each turn's rewards summed over the tokens it owns.
    /// The runs, the bits of each turn's sum and of the tail's.
    type Read = (Vec<Span>, Vec<u64>, u64);

    fn two_pass(m: &MaskView<'_>, w: &[f32], row: usize) -> Read {
        let mut spans = Vec::new();
        let mut buf = vec![0u8; w.len()];
        assert!(runs::row_runs(m, row, Ahead::default(), &mut buf, &mut spans));
        let mut owned = 0;
        let mut sums = Vec::new();
        for sp in &spans {
            sums.push(lane_sum(&w[owned..sp.end]).to_bits());
            owned = sp.end;
        }
        (spans, sums, lane_sum(&w[owned..]).to_bits())
    }

    fn fused(m: &MaskView<'_>, w: &FloatView<'_>, row: usize) -> Option<Result<Read, ()>> {
        let (mut spans, mut sums) = (Vec::new(), Vec::new());
        let tail = row_turns(m, w, row, Ahead::default(), &mut spans, &mut sums)?;
        Some(tail.map(|t| (spans, sums.iter().map(|x| x.to_bits()).collect(), t.to_bits())))
    }

    #[test]
    fn one_pass_gives_the_runs_and_the_sums_of_two_passes_bit_for_bit() {
        let mut state = 0xF05Eu64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            state >> 33
        };
        for cols in [0usize, 1, 5, 8, 9, 16, 23, 40, 67] {
            let rows = 80;
            let m64 = Array2::from_shape_fn((rows, cols), |(r, t)| {
                let p = if r % 2 == 0 { 9 } else { 2 };
                ((next() % p == 0) as i64 + (t as i64 / 7 + r as i64)) % 2
            });
            // Mostly zeros; the others of magnitudes whose sum depends on the order (and −0).
            let w = Array2::from_shape_fn((rows, cols), |_| match next() % 8 {
                0 => 3e30,
                1 => -3e30,
                2 => 0.3,
                3 => -0.0,
                4 => 1.0,
                _ => 0.0,
            });
            let m8 = m64.mapv(|x| x as u8);
            for r in 0..rows {
                let want = two_pass(&MaskView::I64(m64.view()), w.row(r).as_slice().unwrap(), r);
                for view in [MaskView::I64(m64.view()), MaskView::U8(m8.view())] {
                    let got = fused(&view, &FloatView::F32(w.view()), r);
                    assert_eq!(got, Some(Ok(want.clone())), "cols {cols}, row {r}");
                }
            }
        }
    }

    #[test]
    fn an_invalid_entry_is_refused_and_a_strided_row_is_left_to_two_passes() {
        let mut m = Array2::<i64>::zeros((1, 19));
        m.slice_mut(s![0, 3..12]).fill(1);
        let w = Array2::<f32>::zeros((1, 19));
        for at in [0, 5, 11, 12, 17] {
            let mut bad = m.clone();
            bad[[0, at]] = 2;
            assert_eq!(
                fused(&MaskView::I64(bad.view()), &FloatView::F32(w.view()), 0),
                Some(Err(()))
            );
        }
        let wide = Array2::<f32>::zeros((1, 38));
        let strided = FloatView::F32(wide.slice(s![.., ..;2]));
        assert_eq!(fused(&MaskView::I64(m.view()), &strided, 0), None);
    }
}
