//! The two estimators' passes over a group: a baseline per token **column**
//! (`optimal_token_baseline`) and per k-th **generated token** (`tir_optimal_token_baseline`),
//! each with the zero tail of the module docs of `optimal_baseline`.

use super::{
    zero_tail, OptimalTokenBaseline, OptimalTokenBaselineConfig, OtbInputs, RowPasses,
    TirOptimalTokenBaseline, ZeroTail,
};
use crate::error::Result;
use crate::estimator::grpo::sized;
use crate::estimator::whiten::FiniteAcc;
use crate::estimator::{
    fill_estimator, group_rows, select, validate_deferred, EstimatorInput, Out, Scratch, Tokens,
};

impl OptimalTokenBaseline {
    fn fill(&self, input: &EstimatorInput<'_>, out: &mut Out<'_>, ws: &mut Scratch) -> Result<()> {
        let inputs = validate_deferred(&mut ws.inputs, |check, bufs| {
            OtbInputs::checked(input, check, bufs)
        })?;
        let result = out.buffers(inputs.mask.dim()).and_then(|(advantages, returns)| {
            column_baseline_advantages(input, &inputs, &self.config, advantages, returns, ws)
        });
        inputs.recycle(&mut ws.inputs);
        result
    }
}

fill_estimator!(OptimalTokenBaseline, "optimal_token_baseline", returns = true);

fn column_baseline_advantages(
    input: &EstimatorInput<'_>,
    inputs: &OtbInputs<'_>,
    config: &OptimalTokenBaselineConfig,
    adv: &mut [f64],
    ret: &mut [f64],
    ws: &mut Scratch,
) -> Result<()> {
    let batch = input.batch;
    let mask = &inputs.mask;
    let cols = mask.cols();
    let mut pass = RowPasses::new(inputs, std::mem::take(&mut ws.acc_c));
    // Scratch reused by every group: numerator (then the baseline B_t) and denominator.
    let numer = sized(&mut ws.acc_a, cols);
    let denom = sized(&mut ws.acc_b, cols);
    let lengths = &mut ws.lengths;
    let mut finite = FiniteAcc::default();
    for g in 0..batch.num_groups() {
        let rows = group_rows(batch, g);
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
            continue;
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
    }
    let result = pass.report(input, ret, adv, finite);
    ws.acc_c = pass.w;
    result
}

impl TirOptimalTokenBaseline {
    fn fill(&self, input: &EstimatorInput<'_>, out: &mut Out<'_>, ws: &mut Scratch) -> Result<()> {
        let inputs = validate_deferred(&mut ws.inputs, |check, bufs| {
            OtbInputs::checked(input, check, bufs)
        })?;
        let result = out.buffers(inputs.mask.dim()).and_then(|(advantages, returns)| {
            compact_baseline_advantages(input, &inputs, &self.config, advantages, returns, ws)
        });
        inputs.recycle(&mut ws.inputs);
        result
    }
}

fill_estimator!(
    TirOptimalTokenBaseline,
    "tir_optimal_token_baseline",
    returns = true
);

fn compact_baseline_advantages(
    input: &EstimatorInput<'_>,
    inputs: &OtbInputs<'_>,
    config: &OptimalTokenBaselineConfig,
    adv: &mut [f64],
    ret: &mut [f64],
    ws: &mut Scratch,
) -> Result<()> {
    let batch = input.batch;
    let mask = &inputs.mask;
    let cols = mask.cols();
    let mut pass = RowPasses::new(inputs, std::mem::take(&mut ws.acc_c));
    // Scratch reused by every group, indexed by k = the k-th generated token of a row.
    let numer = sized(&mut ws.acc_a, cols);
    let denom = sized(&mut ws.acc_b, cols);
    // Rows of the current group with at least one generated token (verl drops empty rows),
    // and their lengths.
    let members = &mut ws.members;
    let lengths = &mut ws.lengths;
    let mut finite = FiniteAcc::default();
    for g in 0..batch.num_groups() {
        members.clear();
        lengths.clear();
        for &r in group_rows(batch, g) {
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
            continue;
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
        group.write(mask, ret, adv, &mut finite);
    }
    let result = pass.report(input, ret, adv, finite);
    ws.acc_c = pass.w;
    result
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
