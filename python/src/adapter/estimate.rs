//! `estimate`: one estimator over the caller's columns, written into the caller's outputs.

use beacon_rl::estimator::{EstimatorInput, Workspace};
use beacon_rl::tensor::{FloatView, FloatViewMut, MaskView};
use beacon_rl::RolloutBatch;
use ndarray::Zip;

use super::estimator::{verl_names, Estimator, TURN_NAMES};
use super::state::{rebuild, with_state, Columns, State};
use super::views::{Floats1, Mask1, Request};
use super::{unsupported, Failure, Res};

/// Writes each row's sum in `f64` into `out` (the crate's `tensor::row_sums_into`: every
/// sum has the bits of a plain left-to-right `iter().sum()`).
///
/// # Errors
/// `NonFinite` naming the first non-finite reward (row-major index `r · L + t`), or the
/// first row whose finite rewards overflow their sum.
fn row_sums_into(rewards: &FloatView<'_>, out: &mut Vec<f64>) -> Res<()> {
    out.clear();
    out.resize(rewards.dim().0, 0.0);
    beacon_rl::tensor::row_sums_into(rewards.reborrow(), out)?;
    let Some(row) = out.iter().position(|s| !s.is_finite()) else {
        return Ok(());
    };
    let cols = rewards.dim().1;
    let (what, index, value) = (0..cols)
        .map(|t| (t, rewards.get(row, t).unwrap_or(0.0)))
        .find(|(_, v)| !v.is_finite())
        .map_or(
            ("token_level_rewards row sums (overflow)", row, out[row]),
            |(t, v)| ("token_level_rewards", row * cols + t, v),
        );
    Err(beacon_rl::Error::NonFinite { what, index, value }.into())
}

/// The output shape `estimate` writes: the mask's (or rewards') shape, else one column per
/// key (`rows`).
pub fn output_dim(
    rewards: Option<(usize, usize)>,
    mask: Option<(usize, usize)>,
    rows: usize,
) -> (usize, usize) {
    mask.or(rewards).unwrap_or((rows, 1))
}

/// Checks every input's shape before anything is read: each rows × L matrix against
/// `token_level_rewards` (else `response_mask`), and each per-row column against the batch's
/// rows (the matrices' rows, else the keys'). A matrix's bogus L (a zero-stride view of
/// 2^34 columns) would otherwise be summed before the crate compares the shapes, and a length
/// error names the argument the caller passed (the crate's own checks name its fields:
/// `terminal_rewards`, `traj_keys`, `anchors`).
fn check_shapes(req: &Request<'_>) -> Res<()> {
    let reference = req
        .token_level_rewards
        .as_ref()
        .map(FloatView::dim)
        .or_else(|| req.response_mask.as_ref().map(MaskView::dim));
    if let Some(dim) = reference {
        check_matrices(req, dim)?;
    }
    check_lengths(req, reference.map_or(req.index.len(), |d| d.0))
}

/// `LengthMismatch` unless `actual` is `expected`.
fn mismatch(what: &'static str, expected: usize, actual: usize) -> Res<()> {
    if expected == actual {
        return Ok(());
    }
    Err(beacon_rl::Error::LengthMismatch {
        what,
        expected,
        actual,
    }
    .into())
}

/// Each rows × L matrix of `req` against the reference shape `(rows, cols)`.
fn check_matrices(req: &Request<'_>, (rows, cols): (usize, usize)) -> Res<()> {
    let matrices = [
        (
            "response_mask rows",
            "response_mask columns",
            req.response_mask.as_ref().map(MaskView::dim),
        ),
        (
            "values rows",
            "values columns",
            req.values.as_ref().map(FloatView::dim),
        ),
        (
            "old_log_probs rows",
            "old_log_probs columns",
            req.old_log_probs.as_ref().map(FloatView::dim),
        ),
        (
            "sum_pi_squared rows",
            "sum_pi_squared columns",
            req.sum_pi_squared.as_ref().map(FloatView::dim),
        ),
        (
            "rollout_is_weights rows",
            "rollout_is_weights columns",
            req.rollout_is_weights.as_ref().map(FloatView::dim),
        ),
    ];
    for (what_rows, what_cols, dim) in matrices {
        if let Some((r, c)) = dim {
            mismatch(what_rows, rows, r)?;
            mismatch(what_cols, cols, c)?;
        }
    }
    Ok(())
}

/// Each per-row column of `req` against the batch's `rows`.
fn check_lengths(req: &Request<'_>, rows: usize) -> Res<()> {
    let lens = [
        ("index", Some(req.index.len())),
        ("traj_index", req.traj_index.map(|t| t.len())),
        (
            "terminal_rewards",
            req.terminal_rewards.as_ref().map(Floats1::len),
        ),
        ("row_scores", req.row_scores.as_ref().map(Floats1::len)),
        (
            "reward_baselines",
            req.reward_baselines.as_ref().map(Floats1::len),
        ),
        ("milestones", req.milestones.as_ref().map(Mask1::len)),
        ("step_rewards", req.step_rewards.as_ref().map(Floats1::len)),
        ("turn_values", req.turn_values.as_ref().map(Floats1::len)),
        ("step_entropy", req.step_entropy.as_ref().map(Floats1::len)),
        ("anchor_obs", req.anchor_obs.map(<[&str]>::len)),
        ("tree_parents", req.tree_parents.map(<[i64]>::len)),
    ];
    for (what, len) in lens {
        if let Some(actual) = len {
            mismatch(what, rows, actual)?;
        }
    }
    Ok(())
}

/// What an estimator reads, decided from its name.
#[derive(Clone, Copy)]
struct Reads {
    /// A score per row (the batch's R(τ), or row scores in its place): the step estimators.
    batch_rewards: bool,
    /// The turn-level estimators, which read the token rewards turn by turn.
    turn_level: bool,
}

/// The checks of a request before anything is read: outputs, shapes, and the columns that
/// would be ignored or are missing for `est`.
fn check_request(est: &Estimator, req: &Request<'_>, has_ret: bool) -> Res<Reads> {
    if est.has_returns() && !has_ret {
        return Err(Failure(format!(
            "{}: computes returns of its own; pass a separate returns array",
            est.name()
        )));
    }
    check_shapes(req)?;
    // Columns only one estimator reads: any other estimator would ignore them.
    let own_columns = [
        // Per-turn critic values.
        ("turn_values", req.turn_values.is_some(), "turn_gae"),
        // The policy's step entropies.
        ("step_entropy", req.step_entropy.is_some(), "empg"),
        // The rollout trees.
        ("tree_parents", req.tree_parents.is_some(), "tree_grpo"),
    ];
    for (what, given, reader) in own_columns {
        if given && est.name() != reader {
            return Err(Failure(format!(
                "{what}: read only by {reader}, not by {}",
                est.name()
            )));
        }
    }
    if req.terminal_rewards.is_some() && req.row_scores.is_some() {
        // With row scores no estimator reads the batch's rewards: one would be ignored.
        return Err(beacon_rl::Error::ConflictingInputs {
            first: "terminal_rewards",
            second: "row_scores",
        }
        .into());
    }
    // The step estimators read a score per row: the caller's terminal rewards (the batch's
    // R(τ)) or row scores, else (verl-agent) the sum of the row's token rewards, passed as
    // row scores: verl-agent's invalid-action penalty makes the rows of one trajectory differ,
    // and each row is scored by its own sum, as verl-agent does. verl's own estimators read
    // token_level_rewards and never the batch's rewards through `estimate_into`, so they skip
    // the pass over rows × L, except on step rows (`traj_index`), where `grpo`'s trajectory
    // statistics need the rows' own scores too.
    // The turn-level estimators read the token rewards themselves, turn by turn (on step rows,
    // `step_rewards`), and never a score per row: they are passed through as verl's are.
    let turn_level = TURN_NAMES.contains(&est.name());
    let batch_rewards = !verl_names().contains(&est.name()) && !turn_level;
    if batch_rewards
        && req.terminal_rewards.is_none()
        && req.row_scores.is_none()
        && req.token_level_rewards.is_none()
    {
        // Zeros would be a silent R(τ) = 0 for every trajectory.
        return Err(
            beacon_rl::Error::MissingInput("terminal_rewards, row_scores or token_level_rewards").into(),
        );
    }
    Ok(Reads {
        batch_rewards,
        turn_level,
    })
}

/// Runs `est` on the request and writes advantages and returns into the caller's outputs.
///
/// Advantages are written in place by the crate in the caller's dtype. Returns are computed
/// only by the estimators that define them (`has_returns`), which need `ret`; for the others
/// they equal the advantages: copied into `ret` when the caller passes one, else not written
/// (the Python layer then hands back the advantages array twice, as verl's own functions do).
pub fn estimate(
    est: &Estimator,
    req: &Request<'_>,
    adv: FloatViewMut<'_>,
    ret: Option<FloatViewMut<'_>>,
) -> Res<()> {
    let reads = check_request(est, req, ret.is_some())?;
    with_state(|st| {
        let State {
            ws,
            builder,
            batch,
            cols,
            ..
        } = st;
        let rows = RowColumns::prepare(req, reads, cols)?;
        // Built here: MaskView is invariant in its lifetime, which must be the batch borrow's.
        let mask = req.response_mask.as_ref().map(MaskView::reborrow);
        let batch = rebuild(
            builder,
            batch,
            req.index.ids,
            req.traj_index.map(|t| t.ids),
            rows.episode,
        )?;
        let input = input_of(batch, req, mask, rows);
        run_into(est, &input, adv, ret, ws)
    })
}

/// The per-row columns of a request as the crate reads them (`f64`, flags), prepared from the
/// caller's arrays in the thread's kept buffers.
struct RowColumns<'b> {
    /// The batch's rewards: the caller's terminal rewards, else zeros.
    episode: &'b [f64],
    row_scores: Option<&'b [f64]>,
    baselines: Option<&'b [f64]>,
    milestones: Option<&'b [bool]>,
    step_rewards: Option<&'b [f64]>,
    turn_values: Option<&'b [f64]>,
    step_entropy: Option<&'b [f64]>,
    /// Whether `token_level_rewards` are handed on (verl's estimators read them; the step
    /// estimators only check them, which row scores derived from them make moot).
    tokens_read: bool,
}

impl<'b> RowColumns<'b> {
    /// The columns of `req` for an estimator that reads `reads`, in `cols`.
    fn prepare(req: &'b Request<'_>, reads: Reads, cols: &'b mut Columns) -> Res<Self> {
        let Columns {
            episode,
            rows,
            baselines,
            step,
            turn_values,
            entropy,
            flags,
        } = cols;
        // Row scores derived from the token rewards are their own row sums: the crate's check
        // of one against the other cannot fail (the sums are finite, checked here), and
        // skipping it saves a pass over rows × L.
        let mut check_token_rewards = true;
        let row_scores: Option<&[f64]> = match (&req.row_scores, &req.token_level_rewards) {
            (Some(s), _) => Some(s.as_f64(rows)),
            // On step rows the turn-level estimators check the token rewards against each
            // row's score: their own sums agree, where the batch's zero R(τ) would not.
            (None, Some(r))
                if req.terminal_rewards.is_none()
                    && (reads.batch_rewards
                        || req.traj_index.is_some()
                        || (reads.turn_level && req.step_rewards.is_some())) =>
            {
                row_sums_into(r, rows)?;
                check_token_rewards = false;
                Some(rows)
            }
            _ => None,
        };
        // The batch's rewards: the caller's terminal rewards, else zeros. With row scores no
        // estimator reads them (every step path reads the row scores in their place,
        // `EstimatorInput::with_row_scores`), and zeros agree within every trajectory, where
        // the rows' own scores may not.
        let episode: &[f64] = match &req.terminal_rewards {
            Some(e) => e.as_f64(episode),
            None => {
                episode.clear();
                episode.resize(req.index.len(), 0.0);
                episode
            }
        };
        Ok(Self {
            episode,
            row_scores,
            baselines: req.reward_baselines.as_ref().map(|b| b.as_f64(baselines)),
            milestones: req
                .milestones
                .as_ref()
                .map(|m| m.as_flags("milestones", flags))
                .transpose()?,
            step_rewards: req.step_rewards.as_ref().map(|s| s.as_f64(step)),
            turn_values: req.turn_values.as_ref().map(|v| v.as_f64(turn_values)),
            step_entropy: req.step_entropy.as_ref().map(|v| v.as_f64(entropy)),
            tokens_read: !reads.batch_rewards || check_token_rewards,
        })
    }
}

/// The crate's input: the batch and every column the caller passed.
fn input_of<'b>(
    batch: &'b RolloutBatch,
    req: &'b Request<'_>,
    mask: Option<MaskView<'b>>,
    rows: RowColumns<'b>,
) -> EstimatorInput<'b> {
    let mut input = EstimatorInput::new(batch);
    if let Some(r) = req.token_level_rewards.as_ref().filter(|_| rows.tokens_read) {
        input = input.with_token_level_rewards(r.reborrow());
    }
    if let Some(s) = rows.row_scores {
        input = input.with_row_scores(s);
    }
    if let Some(m) = mask {
        input = input.with_response_mask(m);
    }
    if let Some(v) = &req.values {
        input = input.with_values(v.reborrow());
    }
    if let Some(v) = &req.old_log_probs {
        input = input.with_old_log_probs(v.reborrow());
    }
    if let Some(v) = &req.sum_pi_squared {
        input = input.with_sum_pi_squared(v.reborrow());
    }
    if let Some(v) = &req.rollout_is_weights {
        input = input.with_rollout_is_weights(v.reborrow());
    }
    if let Some(b) = rows.baselines {
        input = input.with_reward_baselines(b);
    }
    if let Some(m) = rows.milestones {
        input = input.with_milestones(m);
    }
    if let Some(s) = rows.step_rewards {
        input = input.with_step_rewards(s);
    }
    if let Some(v) = rows.turn_values {
        input = input.with_turn_values(v);
    }
    if let Some(h) = rows.step_entropy {
        input = input.with_step_entropy(h);
    }
    if let Some(p) = req.tree_parents {
        input = input.with_tree_parents(p);
    }
    if let Some(a) = req.anchor_obs {
        input = input.with_anchor_obs(a);
    }
    input
}

/// Runs `est` into the caller's outputs: returns from the estimators that compute them, else a
/// copy of the advantages when the caller passed a returns array.
fn run_into(
    est: &Estimator,
    input: &EstimatorInput<'_>,
    mut adv: FloatViewMut<'_>,
    ret: Option<FloatViewMut<'_>>,
    ws: &mut Workspace,
) -> Res<()> {
    match ret {
        Some(mut ret) if est.has_returns() => {
            est.inner
                .estimate_into(input, adv.reborrow(), Some(ret.reborrow()), ws)?;
        }
        ret => {
            est.inner.estimate_into(input, adv.reborrow(), None, ws)?;
            if let Some(ret) = ret {
                copy_out(&adv, ret)?;
            }
        }
    }
    Ok(())
}

pub(super) fn copy_out(src: &FloatViewMut<'_>, dst: FloatViewMut<'_>) -> Res<()> {
    if src.dim() != dst.dim() {
        return Err(Failure(format!(
            "out: returns has shape {:?}, expected {:?}",
            dst.dim(),
            src.dim()
        )));
    }
    match (src, dst) {
        (FloatViewMut::F32(s), FloatViewMut::F32(mut d)) => d.assign(s),
        (FloatViewMut::F64(s), FloatViewMut::F64(mut d)) => d.assign(s),
        (FloatViewMut::F32(s), FloatViewMut::F64(mut d)) => {
            Zip::from(&mut d).and(s).for_each(|d, &s| *d = f64::from(s))
        }
        (FloatViewMut::F64(s), FloatViewMut::F32(mut d)) => {
            Zip::from(&mut d).and(s).for_each(|d, &s| *d = s as f32)
        }
        _ => return Err(unsupported("out")),
    }
    Ok(())
}
