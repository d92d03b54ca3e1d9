//! The two estimators' passes over a group: a baseline per token **column**
//! (`optimal_token_baseline`) and per k-th **generated token** (`tir_optimal_token_baseline`),
//! each with the zero tail of the module docs of `optimal_baseline`.

use super::{
    zero_tail, OptimalTokenBaseline, OptimalTokenBaselineConfig, OtbInputs, RowPasses,
    TirOptimalTokenBaseline, ZeroTail,
};
use crate::error::Result;
use crate::estimator::kernel::sized;
use crate::estimator::whiten::FiniteAcc;
use crate::estimator::{
    fill_estimator, group_rows, select, validate_deferred, EstimatorInput, Out, Scratch, Tokens,
};

impl OptimalTokenBaseline {
    fn fill(&self, input: &EstimatorInput<'_>, out: &mut Out<'_>, ws: &mut Scratch) -> Result<()> {
        fill_groups(input, &self.config, out, ws, column_group)
    }
}

fill_estimator!(OptimalTokenBaseline, "optimal_token_baseline", returns = true);

impl TirOptimalTokenBaseline {
    fn fill(&self, input: &EstimatorInput<'_>, out: &mut Out<'_>, ws: &mut Scratch) -> Result<()> {
        fill_groups(input, &self.config, out, ws, compact_group)
    }
}

fill_estimator!(
    TirOptimalTokenBaseline,
    "tir_optimal_token_baseline",
    returns = true
);

/// What both estimators' group steps share: the validated inputs, the outputs and the
/// workspace's per-group scratch.
struct Groups<'s, 'i, 'a> {
    config: &'s OptimalTokenBaselineConfig,
    mask: &'i Tokens<'a, bool>,
    cols: usize,
    pass: RowPasses<'i, 'a>,
    /// Per position (column, or k-th generated token): the baseline's numerator (then the
    /// baseline B) and denominator; reused by every group.
    numer: &'s mut [f64],
    denom: &'s mut [f64],
    /// Rows of the current group (the compact pass keeps those with a generated token).
    members: &'s mut Vec<usize>,
    /// Their lengths (number of masked tokens).
    lengths: &'s mut Vec<usize>,
    adv: &'s mut [f64],
    ret: &'s mut [f64],
}

/// Validates the inputs, asks `out` for its buffers, then runs `group` over every group's
/// caller rows (it returns the finiteness of the advantages it wrote) and reports the first
/// non-finite value, if any (in the eager order).
fn fill_groups(
    input: &EstimatorInput<'_>,
    config: &OptimalTokenBaselineConfig,
    out: &mut Out<'_>,
    ws: &mut Scratch,
    group: impl Fn(&mut Groups<'_, '_, '_>, &[usize]) -> FiniteAcc,
) -> Result<()> {
    let inputs = validate_deferred(&mut ws.inputs, |check, bufs| {
        OtbInputs::checked(input, check, bufs)
    })?;
    let result = out.buffers(inputs.mask.dim()).and_then(|(adv, ret)| {
        let batch = input.batch;
        let cols = inputs.mask.cols();
        let mut s = Groups {
            config,
            mask: &inputs.mask,
            cols,
            pass: RowPasses::new(&inputs, std::mem::take(&mut ws.acc_c)),
            numer: sized(&mut ws.acc_a, cols),
            denom: sized(&mut ws.acc_b, cols),
            members: &mut ws.members,
            lengths: &mut ws.lengths,
            adv,
            ret,
        };
        let mut finite = FiniteAcc::default();
        for g in 0..batch.num_groups() {
            finite.merge(group(&mut s, group_rows(batch, g)));
        }
        let result = s.pass.report(input, s.ret, s.adv, finite);
        ws.acc_c = s.pass.w;
        result
    });
    inputs.recycle(&mut ws.inputs);
    result
}

/// One group of `optimal_token_baseline`: a baseline per token column.
fn column_group(s: &mut Groups<'_, '_, '_>, rows: &[usize]) -> FiniteAcc {
    let Groups {
        config,
        mask,
        cols,
        ref mut pass,
        ref mut numer,
        ref mut denom,
        ref mut lengths,
        ref mut adv,
        ref mut ret,
        ..
    } = *s;
    let mut finite = FiniteAcc::default();
    lengths.clear();
    for &r in rows {
        let len = pass.returns(r, &mut ret[r * cols..(r + 1) * cols]);
        lengths.push(len);
    }
    if rows.len() == 1 {
        let r = rows[0];
        // No baseline, but W is still checked, as verl computes it for every row.
        pass.cumulative_w(r, |_, _| {});
        let (mrow, grow) = (&mask.row(r)[..cols], &ret[r * cols..(r + 1) * cols]);
        let arow = &mut adv[r * cols..(r + 1) * cols];
        for t in 0..cols {
            arow[t] = select(mrow[t], grow[t]);
            finite.push(arow[t]);
        }
        return finite;
    }
    numer.fill(0.0);
    denom.fill(0.0);
    for &r in rows {
        let grow = &ret[r * cols..(r + 1) * cols];
        let (numer, denom) = (&mut numer[..cols], &mut denom[..cols]);
        pass.cumulative_w(r, |t, w| {
            numer[t] += grow[t] * w;
            denom[t] += w;
        });
    }
    for (n, d) in numer.iter_mut().zip(denom.iter()) {
        *n /= d + config.denominator_eps;
    }
    let tail = match config.zero_tail {
        ZeroTail::ZeroBaseline => zero_tail(lengths),
        ZeroTail::KeepBaseline => None,
    };
    for (i, &r) in rows.iter().enumerate() {
        let tail_start = match tail {
            Some((row, start)) if row == i => start.min(cols),
            _ => cols,
        };
        let (mrow, grow) = (&mask.row(r)[..cols], &ret[r * cols..(r + 1) * cols]);
        let arow = &mut adv[r * cols..(r + 1) * cols];
        let numer = &numer[..cols];
        for t in 0..tail_start {
            arow[t] = select(mrow[t], grow[t] - numer[t]);
            finite.push(arow[t]);
        }
        for t in tail_start..cols {
            arow[t] = select(mrow[t], grow[t]);
            finite.push(arow[t]);
        }
    }
    finite
}

/// One group of `tir_optimal_token_baseline`: a baseline per k-th generated token, over the
/// rows with at least one (verl drops empty rows).
fn compact_group(s: &mut Groups<'_, '_, '_>, rows: &[usize]) -> FiniteAcc {
    let Groups {
        config,
        mask,
        cols,
        ref mut pass,
        ref mut numer,
        ref mut denom,
        ref mut members,
        ref mut lengths,
        ref mut adv,
        ref mut ret,
    } = *s;
    members.clear();
    lengths.clear();
    for &r in rows {
        let len = pass.returns(r, &mut ret[r * cols..(r + 1) * cols]);
        if len > 0 {
            members.push(r);
            lengths.push(len);
        } else {
            // No generated token: all-zero advantages; W is 0 but the inputs are read.
            pass.cumulative_w(r, |_, _| {});
            adv[r * cols..(r + 1) * cols].fill(0.0);
        }
    }
    if members.is_empty() {
        return FiniteAcc::default();
    }
    let max_len = lengths.iter().copied().max().unwrap_or(0);
    numer[..max_len].fill(0.0);
    denom[..max_len].fill(0.0);
    let single = members.len() == 1;
    if single {
        // No baseline, but W is still checked, as verl computes it for every row.
        pass.cumulative_w(members[0], |_, _| {});
    } else {
        for &r in members.iter() {
            let grow = &ret[r * cols..(r + 1) * cols];
            let (numer, denom) = (&mut numer[..cols], &mut denom[..cols]);
            let mut k = 0usize;
            pass.cumulative_w(r, |t, w| {
                // k < length of the row <= cols: the k-th generated token of the row.
                numer[k] += grow[t] * w;
                denom[k] += w;
                k += 1;
            });
        }
        for (n, d) in numer[..max_len].iter_mut().zip(&denom[..max_len]) {
            *n /= d + config.denominator_eps;
        }
    }
    // A singleton keeps numer = 0: no baseline.
    let tail = match config.zero_tail {
        ZeroTail::ZeroBaseline if !single => zero_tail(lengths),
        _ => None,
    };
    let group = CompactGroup {
        members,
        tail,
        numer: &numer[..cols],
    };
    let mut finite = FiniteAcc::default();
    group.write(mask, ret, adv, &mut finite);
    finite
}

/// One group's rows with at least one generated token, their baseline per k-th generated
/// token (`numer`, 0 for a singleton) and the zero tail (member index, first k without a
/// baseline), if any.
struct CompactGroup<'a> {
    members: &'a [usize],
    tail: Option<(usize, usize)>,
    numer: &'a [f64],
}

impl CompactGroup<'_> {
    /// Advantages of the members' rows: return minus the baseline of the row's k-th
    /// generated token (the return alone in the zero tail), 0 off the mask.
    fn write(&self, mask: &Tokens<'_, bool>, ret: &[f64], adv: &mut [f64], finite: &mut FiniteAcc) {
        let (cols, numer) = (mask.cols(), self.numer);
        for (i, &r) in self.members.iter().enumerate() {
            let tail_start = match self.tail {
                Some((row, start)) if row == i => start,
                _ => cols,
            };
            let (mrow, grow) = (&mask.row(r)[..cols], &ret[r * cols..(r + 1) * cols]);
            let arow = &mut adv[r * cols..(r + 1) * cols];
            let mut k = 0usize;
            for t in 0..cols {
                arow[t] = if mrow[t] {
                    let a = if k >= tail_start {
                        grow[t]
                    } else {
                        grow[t] - numer[k]
                    };
                    k += 1;
                    a
                } else {
                    0.0
                };
                finite.push(arow[t]);
            }
        }
    }
}
