//! The one module of the binding that calls the `beacon-rl` crate.
//!
//! Everything else in the binding speaks in the types below: borrowed views of the caller's
//! arrays in the dtype the caller holds (`f32`/`f64` values, `bool`/`u8`/`i64` masks) and
//! mutable views of the outputs in the caller's dtype. They are handed to the crate's
//! dtype-generic interface (`FloatView`, `MaskView`, `FloatViewMut`) as they are: no input is
//! copied or converted and the advantages are written straight into the caller's array. The
//! only passes the binding adds over rows × L are the per-row reward sums (each row's score
//! when the caller gives neither terminal rewards nor row scores) and, for estimators whose
//! returns equal their advantages, the copy into the `returns` array the Python API promises.
//! Scratch space is a [`Workspace`] per thread, reused across calls.
//!
//! No Python type appears here: the functions run with the GIL released.

use std::cell::RefCell;
use std::hash::Hash;

use beacon_rl::estimator::{AdvantageEstimator, EstimatorConfig, EstimatorInput, Workspace};
use beacon_rl::tensor::{spans_into, TokenSpan};
use beacon_rl::tensor::{FloatView, FloatViewMut, MaskView};
use beacon_rl::BatchBuilder;
use beacon_rl::RolloutBatch;
use ndarray::{ArrayView1, ArrayView2, Zip};

/// A failure with the crate's message (raised as `ValueError`).
#[derive(Debug)]
pub struct Failure(pub String);

impl From<beacon_rl::Error> for Failure {
    fn from(e: beacon_rl::Error) -> Self {
        Failure(e.to_string())
    }
}

pub type Res<T> = std::result::Result<T, Failure>;

/// What the binding keeps between calls on one thread: the crate's scratch space, the batch
/// builder's key tables, the last batch (rebuilt in place by the next call) and the per-row
/// columns the binding derives. Once they have grown to the batch size, a call allocates
/// nothing in the crate nor in these columns. verl's layout (each group's rows one contiguous
/// run, as `np.repeat` of one uuid per prompt gives) is the builder's own cheap case: one key
/// hashed per run, no sort.
#[derive(Default)]
struct State {
    ws: Workspace,
    builder: BatchBuilder,
    batch: Option<RolloutBatch>,
    cols: Columns,
    turns: Turns,
}

/// Per-row columns the binding derives from the caller's: each row's reward (the caller's
/// `f32` terminal rewards widened, or zeros), each row's score (the caller's `row_scores`
/// widened, or the token rewards' row sums), `f64` copies of `f32` or strided baselines and
/// step rewards, and milestone flags checked to be 0 or 1.
#[derive(Default)]
struct Columns {
    episode: Vec<f64>,
    rows: Vec<f64>,
    baselines: Vec<f64>,
    step: Vec<f64>,
    turn_values: Vec<f64>,
    entropy: Vec<f64>,
    flags: Vec<bool>,
}

/// Rebuilds the kept batch in `slot` from this call's keys (a new batch on the thread's first
/// call) and returns it. On error the kept batch is left as it was and nothing of it is read.
fn rebuild<'s, G: Hash + Eq, T: Hash + Eq>(
    builder: &mut BatchBuilder,
    slot: &'s mut Option<RolloutBatch>,
    groups: &[G],
    trajs: Option<&[T]>,
    episode: &[f64],
) -> beacon_rl::Result<&'s RolloutBatch> {
    Ok(match (slot, trajs) {
        (Some(batch), Some(t)) => {
            builder.rebuild_from_row_keys(batch, groups, t, episode)?;
            batch
        }
        (Some(batch), None) => {
            builder.rebuild_from_group_keys(batch, groups, episode)?;
            batch
        }
        (s @ None, Some(t)) => s.insert(builder.from_row_keys(groups, t, episode)?),
        (s @ None, None) => s.insert(RolloutBatch::from_group_keys(groups, episode)?),
    })
}

thread_local! {
    /// Kept per thread: calls run on the caller's thread (the GIL is released, not handed to
    /// another thread), and nothing in a call re-enters the binding.
    static STATE: RefCell<State> = RefCell::new(State::default());
}

/// Runs `f` with this thread's kept state (a fresh one if it is somehow already in use).
fn with_state<T>(f: impl FnOnce(&mut State) -> T) -> T {
    STATE.with(|st| match st.try_borrow_mut() {
        Ok(mut st) => f(&mut st),
        Err(_) => f(&mut State::default()),
    })
}

/// Group or trajectory keys as `i64`: the caller's integers read in place, or ids the binding
/// interned from strings and other objects (equal keys, equal ids). The crate's batch builder
/// compares them; rows whose key equals the previous row's are not even hashed.
#[derive(Clone, Copy)]
pub struct Keys<'a> {
    ids: &'a [i64],
}

impl<'a> Keys<'a> {
    /// The caller's integer keys or the binding's interned ids (any values).
    pub fn ints(ids: &'a [i64]) -> Self {
        Self { ids }
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }
}

/// One value per row in the caller's float dtype.
pub enum Floats1<'a> {
    F32(ArrayView1<'a, f32>),
    F64(ArrayView1<'a, f64>),
}

/// One flag per row in the caller's dtype (numpy `bool` as the bytes it holds, as for masks: numpy's bool is not
/// guaranteed to be 0 or 1).
pub enum Mask1<'a> {
    U8(ArrayView1<'a, u8>),
    I64(ArrayView1<'a, i64>),
}

/// An array dtype the binding never builds: the crate's views are `#[non_exhaustive]`.
fn unsupported(what: &str) -> Failure {
    Failure(format!("internal: {what}: a dtype the binding does not build"))
}

/// Calls `f(t, value)` for every nonzero reward of row `r`, in token order, in `f64`
/// (NaN and ±inf are nonzero: `f` sees them). No copy; a contiguous row is tested in
/// blocks of 64 tokens with one branch-free pass each (rewards are mostly zero), and only a
/// block holding a nonzero value is visited token by token.
fn for_each_nonzero(rewards: &FloatView<'_>, r: usize, mut f: impl FnMut(usize, f64) -> Res<()>) -> Res<()> {
    fn scan<T: Copy + Default + PartialEq + Into<f64>>(
        row: ndarray::ArrayView1<'_, T>,
        f: &mut impl FnMut(usize, f64) -> Res<()>,
    ) -> Res<()> {
        const BLOCK: usize = 64;
        let zero = T::default();
        let mut visit = |(t, &v): (usize, &T)| {
            if v != zero {
                f(t, v.into())?;
            }
            Ok(())
        };
        let Some(s) = row.as_slice() else {
            return row.iter().enumerate().try_for_each(&mut visit);
        };
        for (b, block) in s.chunks(BLOCK).enumerate() {
            if block.iter().fold(false, |any, &v| any | (v != zero)) {
                let t0 = b * BLOCK;
                block
                    .iter()
                    .enumerate()
                    .try_for_each(|(i, v)| visit((t0 + i, v)))?;
            }
        }
        Ok(())
    }
    match rewards {
        FloatView::F32(a) => scan(a.row(r), &mut f),
        FloatView::F64(a) => scan(a.row(r), &mut f),
        _ => Err(unsupported("token_level_rewards")),
    }
}

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

impl Floats1<'_> {
    fn len(&self) -> usize {
        match self {
            Floats1::F32(a) => a.len(),
            Floats1::F64(a) => a.len(),
        }
    }

    /// `f64` values as the crate reads per-row columns: borrowed when the caller holds
    /// contiguous `f64`, else copied into `buf` (rows long, not rows × L; kept across calls).
    fn as_f64<'s>(&'s self, buf: &'s mut Vec<f64>) -> &'s [f64] {
        if let Floats1::F64(a) = self {
            if let Some(s) = a.as_slice() {
                return s;
            }
        }
        buf.clear();
        match self {
            Floats1::F64(a) => buf.extend(a.iter().copied()),
            Floats1::F32(a) => buf.extend(a.iter().map(|&x| f64::from(x))),
        }
        buf
    }
}

fn bad_mask(what: &str, index: usize, value: i64) -> Failure {
    Failure(format!(
        "{what}: value {value} at index {index} is not a mask value (0 or 1)"
    ))
}

/// Row `r` of the mask as flags into `out` (length L).
fn mask_row_into(mask: &MaskView<'_>, r: usize, out: &mut [bool]) -> Res<()> {
    fn copy<T: Copy + Into<i64>>(a: &ArrayView2<'_, T>, r: usize, out: &mut [bool]) {
        for (o, &v) in out.iter_mut().zip(a.row(r)) {
            *o = v.into() != 0;
        }
    }
    match mask {
        MaskView::U8(a) => copy(a, r, out),
        MaskView::I64(a) => copy(a, r, out),
        _ => return Err(unsupported("response_mask")),
    }
    Ok(())
}

impl Mask1<'_> {
    fn len(&self) -> usize {
        match self {
            Mask1::U8(a) => a.len(),
            Mask1::I64(a) => a.len(),
        }
    }

    /// Per-row flags as the crate reads them, every entry checked to be 0 or 1: the caller's
    /// bytes borrowed when they are contiguous, else converted into `buf` (kept across calls).
    fn as_flags<'s>(&'s self, what: &str, buf: &'s mut Vec<bool>) -> Res<&'s [bool]> {
        fn check<T: Copy + Into<i64>>(a: &ArrayView1<'_, T>, what: &str) -> Res<()> {
            match a.iter().position(|&v| !matches!(v.into(), 0 | 1)) {
                Some(i) => Err(bad_mask(what, i, a[i].into())),
                None => Ok(()),
            }
        }
        match self {
            Mask1::U8(a) => {
                check(a, what)?;
                if let Some(s) = a.as_slice() {
                    // SAFETY: every byte was just checked to be 0 or 1, a valid `bool`, and
                    // `bool` has the size and alignment of `u8`.
                    return Ok(unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<bool>(), s.len()) });
                }
                buf.clear();
                buf.extend(a.iter().map(|&v| v != 0));
            }
            Mask1::I64(a) => {
                check(a, what)?;
                buf.clear();
                buf.extend(a.iter().map(|&v| v != 0));
            }
        }
        Ok(buf)
    }
}

/// Every column the estimators read, as the caller holds them. Keys are interned ids (the
/// binding maps strings and other objects to ids; equal keys, equal ids).
pub struct Request<'a> {
    pub token_level_rewards: Option<FloatView<'a>>,
    pub response_mask: Option<MaskView<'a>>,
    pub index: Keys<'a>,
    pub traj_index: Option<Keys<'a>>,
    pub terminal_rewards: Option<Floats1<'a>>,
    pub row_scores: Option<Floats1<'a>>,
    pub values: Option<FloatView<'a>>,
    pub old_log_probs: Option<FloatView<'a>>,
    pub sum_pi_squared: Option<FloatView<'a>>,
    pub rollout_is_weights: Option<FloatView<'a>>,
    pub reward_baselines: Option<Floats1<'a>>,
    pub milestones: Option<Mask1<'a>>,
    pub step_rewards: Option<Floats1<'a>>,
    pub turn_values: Option<Floats1<'a>>,
    pub step_entropy: Option<Floats1<'a>>,
    pub anchor_obs: Option<&'a [&'a str]>,
    pub tree_parents: Option<&'a [i64]>,
}

/// A validated estimator of the crate, by verl's `adv_estimator` name.
pub struct Estimator {
    pub(crate) inner: Box<dyn AdvantageEstimator>,
}

impl Estimator {
    /// Builds `name` (the crate's grammar, `NAME` or `NAME:KEY=VALUE,…`), its keys overridden
    /// by the entries of `config_json` (a JSON object of the same keys, the crate's serde
    /// format without `adv_estimator`). A key given in both is an error, as a key given twice
    /// in one string is.
    pub fn new(name: &str, config_json: Option<&str>) -> Res<Self> {
        let mut config: EstimatorConfig = name.parse()?;
        if let Some(json) = config_json {
            let overrides: serde_json::Value =
                serde_json::from_str(json).map_err(|e| Failure(format!("config: {e}")))?;
            let overrides = overrides
                .as_object()
                .ok_or_else(|| Failure("config: expected a mapping".into()))?;
            let mut value = serde_json::to_value(&config).map_err(|e| Failure(e.to_string()))?;
            let obj = value.as_object_mut().expect("a config serialises to a map");
            let in_name = name_keys(name);
            for (k, v) in overrides {
                if k == "adv_estimator" || in_name.contains(&k.as_str()) {
                    return Err(Failure(format!(
                        "config: key {k} is given in the name {name:?} already"
                    )));
                }
                obj.insert(k.clone(), v.clone());
            }
            config = serde_json::from_value(value).map_err(|e| Failure(e.to_string()))?;
        }
        Ok(Self {
            inner: config.build()?,
        })
    }

    /// verl's name of the estimator.
    pub fn name(&self) -> &'static str {
        self.inner.name()
    }

    /// True when the estimator computes returns of its own (else they equal the advantages).
    pub fn has_returns(&self) -> bool {
        self.inner.has_returns()
    }
}

/// The keys written in `NAME:KEY=VALUE,…` (the names before `=` outside parentheses).
fn name_keys(name: &str) -> Vec<&str> {
    let Some((_, pairs)) = name.split_once(':') else {
        return Vec::new();
    };
    let (mut depth, mut start, mut keys) = (0usize, 0, Vec::new());
    for (i, c) in pairs.char_indices().chain([(pairs.len(), ',')]) {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                keys.extend(pairs[start..i].split_once('=').map(|(k, _)| k.trim()));
                start = i + 1;
            }
            _ => {}
        }
    }
    keys
}

/// Every estimator name the crate knows.
pub fn names() -> &'static [&'static str] {
    EstimatorConfig::NAMES
}

/// The turn-level estimators: they read `token_level_rewards` turn by turn on verl's
/// multi-turn rows (the crate's turn layouts), not a score per row.
pub const TURN_NAMES: &[&str] = &["step_reinforce", "mt_grpo", "turn_gae", "tree_grpo"];

/// The names that are verl's own estimators (the rest are the crate's additions).
pub fn verl_names() -> &'static [&'static str] {
    EstimatorConfig::VERL_NAMES
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
    let mismatch = |what, expected, actual| -> Res<()> {
        if expected == actual {
            return Ok(());
        }
        Err(beacon_rl::Error::LengthMismatch {
            what,
            expected,
            actual,
        }
        .into())
    };
    let reference = req
        .token_level_rewards
        .as_ref()
        .map(FloatView::dim)
        .or_else(|| req.response_mask.as_ref().map(MaskView::dim));
    if let Some((rows, cols)) = reference {
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
    }
    let rows = reference.map_or(req.index.len(), |d| d.0);
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
    if req.turn_values.is_some() && est.name() != "turn_gae" {
        // Only turn_gae reads per-turn critic values: any other estimator would ignore them.
        return Err(Failure(format!(
            "turn_values: read only by turn_gae, not by {}",
            est.name()
        )));
    }
    if req.step_entropy.is_some() && est.name() != "empg" {
        // Only empg reads the policy's step entropies: any other estimator would ignore them.
        return Err(Failure(format!(
            "step_entropy: read only by empg, not by {}",
            est.name()
        )));
    }
    if req.tree_parents.is_some() && est.name() != "tree_grpo" {
        // Only tree_grpo reads the rollout trees: any other estimator would ignore them.
        return Err(Failure(format!(
            "tree_parents: read only by tree_grpo, not by {}",
            est.name()
        )));
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
        // Row scores derived from the token rewards are their own row sums: the crate's check
        // of one against the other cannot fail (the sums are finite, checked here), and
        // skipping it saves a pass over rows × L.
        let mut check_token_rewards = true;
        let row_scores: Option<&[f64]> = match (&req.row_scores, &req.token_level_rewards) {
            (Some(s), _) => Some(s.as_f64(&mut cols.rows)),
            // On step rows the turn-level estimators check the token rewards against each
            // row's score: their own sums agree, where the batch's zero R(τ) would not.
            (None, Some(r))
                if req.terminal_rewards.is_none()
                    && (reads.batch_rewards
                        || req.traj_index.is_some()
                        || (reads.turn_level && req.step_rewards.is_some())) =>
            {
                row_sums_into(r, &mut cols.rows)?;
                check_token_rewards = false;
                Some(&cols.rows)
            }
            _ => None,
        };
        // The batch's rewards: the caller's terminal rewards, else zeros. With row scores no
        // estimator reads them (every step path reads the row scores in their place,
        // `EstimatorInput::with_row_scores`), and zeros agree within every trajectory, where
        // the rows' own scores may not.
        let episode: &[f64] = match &req.terminal_rewards {
            Some(e) => e.as_f64(&mut cols.episode),
            None => {
                cols.episode.clear();
                cols.episode.resize(req.index.len(), 0.0);
                &cols.episode
            }
        };
        let baselines = req
            .reward_baselines
            .as_ref()
            .map(|b| b.as_f64(&mut cols.baselines));
        let milestones = req
            .milestones
            .as_ref()
            .map(|m| m.as_flags("milestones", &mut cols.flags))
            .transpose()?;
        let step_rewards = req.step_rewards.as_ref().map(|s| s.as_f64(&mut cols.step));
        let turn_values = req.turn_values.as_ref().map(|v| v.as_f64(&mut cols.turn_values));
        let step_entropy = req.step_entropy.as_ref().map(|v| v.as_f64(&mut cols.entropy));
        // Built here: MaskView is invariant in its lifetime, which must be the batch borrow's.
        let mask = req.response_mask.as_ref().map(MaskView::reborrow);
        let batch = rebuild(
            builder,
            batch,
            req.index.ids,
            req.traj_index.map(|t| t.ids),
            episode,
        )?;
        let tokens_read = !reads.batch_rewards || check_token_rewards;
        let rows = RowColumns {
            row_scores,
            baselines,
            milestones,
            step_rewards,
            turn_values,
            step_entropy,
        };
        let input = input_of(batch, req, mask, tokens_read, rows);
        run_into(est, &input, adv, ret, ws)
    })
}

/// The per-row columns of a request as the crate reads them (`f64`, flags), prepared from the
/// caller's arrays in the thread's kept buffers.
struct RowColumns<'b> {
    row_scores: Option<&'b [f64]>,
    baselines: Option<&'b [f64]>,
    milestones: Option<&'b [bool]>,
    step_rewards: Option<&'b [f64]>,
    turn_values: Option<&'b [f64]>,
    step_entropy: Option<&'b [f64]>,
}

/// The crate's input: the batch and every column the caller passed. `tokens_read`: whether
/// `token_level_rewards` are handed on (verl's estimators read them; the step estimators only
/// check them, which row scores derived from them make moot).
fn input_of<'b>(
    batch: &'b RolloutBatch,
    req: &'b Request<'_>,
    mask: Option<MaskView<'b>>,
    tokens_read: bool,
    rows: RowColumns<'b>,
) -> EstimatorInput<'b> {
    let mut input = EstimatorInput::new(batch);
    if let Some(r) = req.token_level_rewards.as_ref().filter(|_| tokens_read) {
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

/// What [`estimate_turns`] found in the batch (for logging and tests).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TurnStats {
    /// Turns (steps) over all rows.
    pub turns: usize,
    /// Turns flagged as milestones.
    pub milestones: usize,
    /// Rows with no valid token (no turn; their advantages are 0 and they join no group).
    pub empty_rows: usize,
}

/// verl's multi-turn layout: one dialogue per row. Turns are maximal runs of
/// `response_mask == 1`; each is a step. A row's terminal reward R(τ) is the sum of all its token
/// rewards, masked tokens included (what verl's GRPO reads as the row's score); a turn other
/// than the last whose last token carries a reward > 0 is a milestone. The estimator
/// (`beacon`, `beacon_official` or `gigpo`) runs on the steps (grouped by
/// `index`, one trajectory per row) and each turn's advantage is written over its tokens
/// (`tensor::spans_into`); every other token gets 0. Returns equal the advantages.
///
/// GiGPO needs anchor states and step rewards, which verl does not pass: here a turn's anchor
/// is its position in the dialogue and its step reward the sum of the rewards that belong to it
/// (those in the turn or after it, up to the next turn; those before the first turn belong to
/// the first), which GiGPO discounts into step returns: with γ = 1 the first turn's return is
/// R(τ).
pub fn estimate_turns(
    est: &Estimator,
    rewards: &FloatView<'_>,
    mask: &MaskView<'_>,
    index: Keys<'_>,
    mut adv: FloatViewMut<'_>,
    ret: Option<FloatViewMut<'_>>,
) -> Res<TurnStats> {
    // The turns are read here, by the binding: the crate's check of the entries first.
    let mask_view = mask.reborrow();
    mask_view.validate()?;
    check_turn_shapes(rewards, mask, &index, adv.dim())?;
    with_state(|st| {
        let State {
            ws,
            builder,
            batch,
            turns: t,
            ..
        } = st;
        let stats = t.read(rewards, mask, index)?;
        if t.spans.is_empty() {
            let zero = |o: FloatViewMut<'_>| {
                match o {
                    FloatViewMut::F32(mut a) => a.fill(0.0),
                    FloatViewMut::F64(mut a) => a.fill(0.0),
                    _ => return Err(unsupported("out")),
                }
                Ok(())
            };
            zero(adv)?;
            if let Some(ret) = ret {
                zero(ret)?;
            }
            return Ok(stats);
        }
        // Only GiGPO reads anchors: the others skip the strings.
        let anchors: Vec<&str> = if est.name() == "gigpo" {
            t.grow_labels();
            t.pos.iter().map(|&k| t.labels[k].as_str()).collect()
        } else {
            Vec::new()
        };
        let batch = rebuild(builder, batch, &t.keys, Some(&t.trajs), &t.terminal_reward)?;
        let mut input = EstimatorInput::new(batch)
            .with_milestones(&t.flags)
            .with_step_rewards(&t.step_reward);
        if !anchors.is_empty() {
            input = input.with_anchor_obs(&anchors);
        }
        // Step estimators' returns equal their advantages: none are asked for.
        t.step_adv.clear();
        t.step_adv.resize(t.spans.len(), 0.0);
        let step_adv = ndarray::ArrayViewMut2::from_shape((t.spans.len(), 1), &mut t.step_adv)
            .map_err(|e| Failure(format!("internal: step advantages: {e}")))?;
        est.inner
            .estimate_into(&input, FloatViewMut::F64(step_adv), None, ws)?;
        spans_into(&t.step_adv, &t.spans, mask_view, adv.reborrow())?;
        if let Some(ret) = ret {
            copy_out(&adv, ret)?;
        }
        Ok(stats)
    })
}

/// The shapes [`estimate_turns`] needs: rewards and the advantages output like the mask, one
/// group key per row.
fn check_turn_shapes(
    rewards: &FloatView<'_>,
    mask: &MaskView<'_>,
    index: &Keys<'_>,
    out_dim: (usize, usize),
) -> Res<()> {
    let (rows, cols) = mask.dim();
    if rewards.dim() != (rows, cols) {
        return Err(Failure(format!(
            "token_level_rewards has shape {:?}, response_mask {:?}",
            rewards.dim(),
            (rows, cols)
        )));
    }
    if index.len() != rows {
        return Err(Failure(format!(
            "index has {} entries, response_mask {rows} rows",
            index.len()
        )));
    }
    if out_dim != (rows, cols) {
        return Err(Failure(format!(
            "out: advantages has shape {out_dim:?}, expected {:?}",
            (rows, cols)
        )));
    }
    Ok(())
}

/// The turns of one call of [`estimate_turns`], kept per thread so that a call of a size seen
/// before allocates none of them.
#[derive(Default)]
struct Turns {
    /// Each turn's tokens, in row order.
    spans: Vec<TokenSpan>,
    /// One row of the mask as flags (L long), not a copy of the whole mask.
    row: Vec<bool>,
    /// Per turn: the row it came from (its trajectory), the row's group key, the terminal reward, the
    /// milestone flag, the turn's own rewards, the position in the dialogue.
    trajs: Vec<usize>,
    keys: Vec<i64>,
    terminal_reward: Vec<f64>,
    flags: Vec<bool>,
    step_reward: Vec<f64>,
    pos: Vec<usize>,
    /// GiGPO's anchor of position k, "turn k", grown to the longest dialogue seen.
    labels: Vec<String>,
    step_adv: Vec<f64>,
}

impl Turns {
    /// Finds the turns of every row and their per-turn columns.
    ///
    /// Every reward of a row is read: their sum is the row's terminal reward (verl's GRPO score,
    /// masked tokens included), and each belongs to the turn it lies in or follows (one
    /// before the first turn to the first): GiGPO's step reward of that turn. Nothing is
    /// dropped: a nonzero reward on a row without a turn, and any non-finite reward, is an
    /// error naming its row and token.
    fn read(&mut self, rewards: &FloatView<'_>, mask: &MaskView<'_>, index: Keys<'_>) -> Res<TurnStats> {
        let (rows, cols) = mask.dim();
        for v in [&mut self.terminal_reward, &mut self.step_reward] {
            v.clear();
        }
        self.spans.clear();
        self.trajs.clear();
        self.keys.clear();
        self.flags.clear();
        self.pos.clear();
        self.row.clear();
        self.row.resize(cols, false);
        let mut stats = TurnStats::default();
        for r in 0..rows {
            let first = self.spans.len();
            mask_row_into(mask, r, &mut self.row)?;
            push_turns(&mut self.spans, r, &self.row);
            let turns = self.spans.len() - first;
            // The row's terminal reward, and each turn's own rewards (GiGPO's step rewards).
            self.step_reward.resize(first + turns, 0.0);
            let mut total = 0.0;
            let mut k = 0;
            let (spans, step_reward) = (&self.spans, &mut self.step_reward);
            for_each_nonzero(rewards, r, |t, v| {
                if !v.is_finite() {
                    return Err(Failure(format!(
                        "token_level_rewards[{r}, {t}] = {v}: rewards must be finite"
                    )));
                }
                if turns == 0 {
                    return Err(Failure(format!(
                        "token_level_rewards[{r}, {t}] = {v}: row {r} has no token in \
                         response_mask, so no turn could be credited with this reward"
                    )));
                }
                while k + 1 < turns && spans[first + k + 1].start <= t {
                    k += 1;
                }
                step_reward[first + k] += v;
                total += v;
                Ok(())
            })?;
            if !f64::is_finite(total) {
                return Err(Failure(format!(
                    "token_level_rewards: the rewards of row {r} overflow their sum"
                )));
            }
            if turns == 0 {
                stats.empty_rows += 1;
                continue;
            }
            for k in 0..turns {
                let end_reward = rewards.get(r, self.spans[first + k].end - 1).unwrap_or(0.0);
                let milestone = k + 1 < turns && end_reward > 0.0;
                stats.milestones += usize::from(milestone);
                self.trajs.push(r);
                // A turn's group key is its row's.
                self.keys.push(index.ids[r]);
                self.terminal_reward.push(total);
                self.flags.push(milestone);
                self.pos.push(k);
            }
        }
        stats.turns = self.spans.len();
        Ok(stats)
    }

    /// Makes "turn k", each turn's anchor state for its position k in the dialogue, exist
    /// for every position of this call.
    fn grow_labels(&mut self) {
        let longest = self.pos.iter().max().map_or(0, |&k| k + 1);
        while self.labels.len() < longest {
            let k = self.labels.len();
            self.labels.push(format!("turn {k}"));
        }
    }
}

/// Appends row `r`'s turns, the maximal runs of set flags in `row`, as spans numbered on from
/// the turns already found.
fn push_turns(spans: &mut Vec<TokenSpan>, r: usize, row: &[bool]) {
    let cols = row.len();
    let mut j = 0;
    while j < cols {
        if row[j] {
            let start = j;
            while j < cols && row[j] {
                j += 1;
            }
            spans.push(TokenSpan {
                seq: r,
                step: spans.len(),
                start,
                end: j,
            });
        } else {
            j += 1;
        }
    }
}

fn copy_out(src: &FloatViewMut<'_>, dst: FloatViewMut<'_>) -> Res<()> {
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
