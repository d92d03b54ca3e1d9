//! The one module of the binding that calls the `beacon-rl` crate.
//!
//! Everything else in the binding speaks in the types below: borrowed views of the caller's
//! arrays in the dtype the caller holds (`f32`/`f64` values, `bool`/`u8`/`i64` masks) and
//! mutable views of the outputs in the caller's dtype. They are handed to the crate's
//! dtype-generic interface (`FloatView`, `MaskView`, `FloatViewMut`) as they are: no input is
//! copied or converted and the advantages are written straight into the caller's array. The
//! only passes the binding adds over rows × L are the per-row reward sums (each row's score
//! when the caller gives neither episode rewards nor row scores) and, for estimators whose
//! returns equal their advantages, the copy into the `returns` array the Python API promises.
//! Scratch space is a [`Workspace`] per thread, reused across calls.
//!
//! No Python type appears here: the functions run with the GIL released.

use std::cell::RefCell;
use std::hash::Hash;
use std::time::Instant;

use beacon_rl::estimator::{AdvantageEstimator, EstimatorConfig, EstimatorInput, Workspace};
use beacon_rl::tensor::{FloatView, FloatViewMut, MaskView};
use beacon_rl::token::{spans_into, TokenSpan};
use beacon_rl::BatchBuilder;
use beacon_rl::RolloutBatch;
use ndarray::{ArrayView1, ArrayView2, ArrayViewMut2, Zip};

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
/// `f32` episode rewards widened, or zeros), each row's score (the caller's `row_scores`
/// widened, or the token rewards' row sums), `f64` copies of `f32` or strided baselines and
/// step rewards, and milestone flags checked to be 0 or 1.
#[derive(Default)]
struct Columns {
    episode: Vec<f64>,
    rows: Vec<f64>,
    baselines: Vec<f64>,
    step: Vec<f64>,
    turn_values: Vec<f64>,
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

/// A rows × L matrix of values in the caller's float dtype.
pub enum Floats2<'a> {
    F32(ArrayView2<'a, f32>),
    F64(ArrayView2<'a, f64>),
}

/// One value per row in the caller's float dtype.
pub enum Floats1<'a> {
    F32(ArrayView1<'a, f32>),
    F64(ArrayView1<'a, f64>),
}

/// A rows × L mask in the caller's dtype (only 0 and 1 are accepted). numpy `bool` masks
/// come as the bytes they hold (`U8`): numpy's bool is not guaranteed to be 0 or 1.
pub enum Mask2<'a> {
    U8(ArrayView2<'a, u8>),
    I64(ArrayView2<'a, i64>),
}

/// One flag per row in the caller's dtype (`bool` as bytes, as for [`Mask2`]).
pub enum Mask1<'a> {
    U8(ArrayView1<'a, u8>),
    I64(ArrayView1<'a, i64>),
}

/// An output matrix the caller owns, in its dtype.
pub enum Out2<'a> {
    F32(ArrayViewMut2<'a, f32>),
    F64(ArrayViewMut2<'a, f64>),
}

impl Out2<'_> {
    fn dim(&self) -> (usize, usize) {
        match self {
            Out2::F32(a) => a.dim(),
            Out2::F64(a) => a.dim(),
        }
    }

    /// The crate's view of this buffer (no copy).
    fn view(&mut self) -> FloatViewMut<'_> {
        match self {
            Out2::F32(a) => FloatViewMut::F32(a.view_mut()),
            Out2::F64(a) => FloatViewMut::F64(a.view_mut()),
        }
    }
}

impl Floats2<'_> {
    /// The crate's view of these values (no copy).
    fn view(&self) -> FloatView<'_> {
        match self {
            Floats2::F32(a) => FloatView::F32(a.view()),
            Floats2::F64(a) => FloatView::F64(a.view()),
        }
    }

    pub fn dim(&self) -> (usize, usize) {
        match self {
            Floats2::F32(a) => a.dim(),
            Floats2::F64(a) => a.dim(),
        }
    }

    fn get(&self, r: usize, j: usize) -> f64 {
        match self {
            Floats2::F32(a) => f64::from(a[[r, j]]),
            Floats2::F64(a) => a[[r, j]],
        }
    }

    /// Calls `f(t, value)` for every nonzero reward of row `r`, in token order, in `f64`
    /// (NaN and ±inf are nonzero: `f` sees them). No copy; a contiguous row is tested in
    /// blocks of 64 tokens with one branch-free pass each (rewards are mostly zero), and only a
    /// block holding a nonzero value is visited token by token.
    fn for_each_nonzero(&self, r: usize, mut f: impl FnMut(usize, f64) -> Res<()>) -> Res<()> {
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
        match self {
            Floats2::F32(a) => scan(a.row(r), &mut f),
            Floats2::F64(a) => scan(a.row(r), &mut f),
        }
    }

    /// Writes each row's sum in `f64` into `out` (the crate's `token::row_sums_into`: every
    /// sum has the bits of a plain left-to-right `iter().sum()`).
    ///
    /// # Errors
    /// `NonFinite` naming the first non-finite reward (row-major index `r · L + t`), or the
    /// first row whose finite rewards overflow their sum.
    fn row_sums_into(&self, out: &mut Vec<f64>) -> Res<()> {
        out.clear();
        out.resize(self.dim().0, 0.0);
        beacon_rl::token::row_sums_into(self.view(), out)?;
        let Some(row) = out.iter().position(|s| !s.is_finite()) else {
            return Ok(());
        };
        let cols = self.dim().1;
        let (what, index, value) = (0..cols)
            .map(|t| (t, self.get(row, t)))
            .find(|(_, v)| !v.is_finite())
            .map_or(
                ("token_level_rewards row sums (overflow)", row, out[row]),
                |(t, v)| ("token_level_rewards", row * cols + t, v),
            );
        Err(beacon_rl::Error::NonFinite { what, index, value }.into())
    }
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

impl Mask2<'_> {
    /// The crate's view of this mask (no copy). Integer entries other than 0 and 1 are the
    /// crate's [`MaskValue`](beacon_rl::Error::MaskValue) error: every estimator tests them
    /// as it reads the mask (the outcome estimators and the token broadcast while they write,
    /// so a verl `int64` mask is read once per call).
    fn view(&self) -> MaskView<'_> {
        match self {
            Mask2::U8(a) => MaskView::U8(a.view()),
            Mask2::I64(a) => MaskView::I64(a.view()),
        }
    }

    /// Row `r` as flags into `out` (length L).
    fn row_into(&self, r: usize, out: &mut [bool]) {
        fn copy<T: Copy + Into<i64>>(a: &ArrayView2<'_, T>, r: usize, out: &mut [bool]) {
            for (o, &v) in out.iter_mut().zip(a.row(r)) {
                *o = v.into() != 0;
            }
        }
        match self {
            Mask2::U8(a) => copy(a, r, out),
            Mask2::I64(a) => copy(a, r, out),
        }
    }

    fn dim(&self) -> (usize, usize) {
        match self {
            Mask2::U8(a) => a.dim(),
            Mask2::I64(a) => a.dim(),
        }
    }
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
    pub token_level_rewards: Option<Floats2<'a>>,
    pub response_mask: Option<Mask2<'a>>,
    pub index: Keys<'a>,
    pub traj_index: Option<Keys<'a>>,
    pub episode_rewards: Option<Floats1<'a>>,
    pub row_scores: Option<Floats1<'a>>,
    pub values: Option<Floats2<'a>>,
    pub old_log_probs: Option<Floats2<'a>>,
    pub sum_pi_squared: Option<Floats2<'a>>,
    pub rollout_is_weights: Option<Floats2<'a>>,
    pub reward_baselines: Option<Floats1<'a>>,
    pub milestones: Option<Mask1<'a>>,
    pub step_rewards: Option<Floats1<'a>>,
    pub turn_values: Option<Floats1<'a>>,
    pub anchor_obs: Option<&'a [&'a str]>,
    pub tree_parents: Option<&'a [i64]>,
}

/// A validated estimator of the crate, by verl's `adv_estimator` name.
pub struct Estimator {
    inner: Box<dyn AdvantageEstimator>,
}

impl Estimator {
    /// Builds `name` with the crate's defaults, overridden by the fields of `config_json` (a
    /// JSON object in the crate's serde format, without `adv_estimator`).
    pub fn new(name: &str, config_json: Option<&str>) -> Res<Self> {
        let config: EstimatorConfig = match config_json {
            None => name.parse()?,
            Some(json) => {
                let mut value: serde_json::Value =
                    serde_json::from_str(json).map_err(|e| Failure(format!("config: {e}")))?;
                let obj = value
                    .as_object_mut()
                    .ok_or_else(|| Failure("config: expected a mapping".into()))?;
                // Unknown names get the crate's own error.
                name.parse::<EstimatorConfig>()?;
                obj.insert("adv_estimator".into(), serde_json::Value::from(name));
                serde_json::from_value(value).map_err(|e| Failure(format!("config for {name}: {e}")))?
            }
        };
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

/// Every estimator name the crate knows.
pub fn names() -> &'static [&'static str] {
    EstimatorConfig::NAMES
}

/// The turn-level estimators: they read `token_level_rewards` turn by turn on verl's
/// multi-turn rows (the crate's `estimator::turns`), not a score per row.
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
/// `row_rewards`, `traj_keys`, `anchors`).
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
        .map(Floats2::dim)
        .or_else(|| req.response_mask.as_ref().map(Mask2::dim));
    if let Some((rows, cols)) = reference {
        let matrices = [
            (
                "response_mask rows",
                "response_mask columns",
                req.response_mask.as_ref().map(Mask2::dim),
            ),
            (
                "values rows",
                "values columns",
                req.values.as_ref().map(Floats2::dim),
            ),
            (
                "old_log_probs rows",
                "old_log_probs columns",
                req.old_log_probs.as_ref().map(Floats2::dim),
            ),
            (
                "sum_pi_squared rows",
                "sum_pi_squared columns",
                req.sum_pi_squared.as_ref().map(Floats2::dim),
            ),
            (
                "rollout_is_weights rows",
                "rollout_is_weights columns",
                req.rollout_is_weights.as_ref().map(Floats2::dim),
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
        ("episode_rewards", req.episode_rewards.as_ref().map(Floats1::len)),
        ("row_scores", req.row_scores.as_ref().map(Floats1::len)),
        (
            "reward_baselines",
            req.reward_baselines.as_ref().map(Floats1::len),
        ),
        ("milestones", req.milestones.as_ref().map(Mask1::len)),
        ("step_rewards", req.step_rewards.as_ref().map(Floats1::len)),
        ("turn_values", req.turn_values.as_ref().map(Floats1::len)),
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

/// Runs `est` on the request and writes advantages and returns into the caller's outputs.
///
/// Advantages are written in place by the crate in the caller's dtype. Returns are computed
/// only by the estimators that define them (`has_returns`), which need `ret`; for the others
/// they equal the advantages: copied into `ret` when the caller passes one, else not written
/// (the Python layer then hands back the advantages array twice, as verl's own functions do).
pub fn estimate(est: &Estimator, req: &Request<'_>, mut adv: Out2<'_>, ret: Option<Out2<'_>>) -> Res<()> {
    if est.has_returns() && ret.is_none() {
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
    if req.tree_parents.is_some() && est.name() != "tree_grpo" {
        // Only tree_grpo reads the rollout trees: any other estimator would ignore them.
        return Err(Failure(format!(
            "tree_parents: read only by tree_grpo, not by {}",
            est.name()
        )));
    }
    if req.episode_rewards.is_some() && req.row_scores.is_some() {
        // With row scores no estimator reads the batch's rewards: one would be ignored.
        return Err(beacon_rl::Error::ConflictingInputs {
            first: "episode_rewards",
            second: "row_scores",
        }
        .into());
    }
    // The step estimators read a score per row: the caller's episode rewards (the batch's
    // R(τ)) or row scores, else (verl-agent) the sum of the row's token rewards, passed as
    // row scores: verl-agent's invalid-action penalty makes the rows of one trajectory differ,
    // and each row is scored by its own sum, as verl-agent does. verl's own estimators read
    // token_level_rewards and never the batch's rewards through `estimate_into`, so they skip
    // the pass over rows × L, except on step rows (`traj_index`), where `grpo`'s trajectory
    // statistics need the rows' own scores too.
    // The turn-level estimators read the token rewards themselves, turn by turn (on step rows,
    // `step_rewards`), and never a score per row: they are passed through as verl's are.
    let turn_level = TURN_NAMES.contains(&est.name());
    let reads_batch_rewards = !verl_names().contains(&est.name()) && !turn_level;
    if reads_batch_rewards
        && req.episode_rewards.is_none()
        && req.row_scores.is_none()
        && req.token_level_rewards.is_none()
    {
        // Zeros would be a silent R(τ) = 0 for every trajectory.
        return Err(
            beacon_rl::Error::MissingInput("episode_rewards, row_scores or token_level_rewards").into(),
        );
    }

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
                if req.episode_rewards.is_none()
                    && (reads_batch_rewards
                        || req.traj_index.is_some()
                        || (turn_level && req.step_rewards.is_some())) =>
            {
                r.row_sums_into(&mut cols.rows)?;
                check_token_rewards = false;
                Some(&cols.rows)
            }
            _ => None,
        };
        // The batch's rewards: the caller's episode rewards, else zeros. With row scores no
        // estimator reads them (every step path reads the row scores in their place,
        // `EstimatorInput::with_row_scores`), and zeros agree within every trajectory, where
        // the rows' own scores may not.
        let episode: &[f64] = match &req.episode_rewards {
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
        // Built here: MaskView is invariant in its lifetime, which must be the batch borrow's.
        let mask = req.response_mask.as_ref().map(Mask2::view);
        let batch = rebuild(
            builder,
            batch,
            req.index.ids,
            req.traj_index.map(|t| t.ids),
            episode,
        )
        .map_err(caller_names)?;
        let mut input = EstimatorInput::new(batch);
        // verl's estimators read the rewards themselves; the step estimators only check them.
        let tokens_read = !reads_batch_rewards || check_token_rewards;
        if let Some(r) = req.token_level_rewards.as_ref().filter(|_| tokens_read) {
            input = input.with_token_level_rewards(r.view());
        }
        if let Some(s) = row_scores {
            input = input.with_row_scores(s);
        }
        if let Some(m) = mask {
            input = input.with_response_mask(m);
        }
        if let Some(v) = &req.values {
            input = input.with_values(v.view());
        }
        if let Some(v) = &req.old_log_probs {
            input = input.with_old_log_probs(v.view());
        }
        if let Some(v) = &req.sum_pi_squared {
            input = input.with_sum_pi_squared(v.view());
        }
        if let Some(v) = &req.rollout_is_weights {
            input = input.with_rollout_is_weights(v.view());
        }
        if let Some(b) = baselines {
            input = input.with_reward_baselines(b);
        }
        if let Some(m) = milestones {
            input = input.with_milestones(m);
        }
        if let Some(s) = step_rewards {
            input = input.with_step_rewards(s);
        }
        if let Some(v) = turn_values {
            input = input.with_turn_values(v);
        }
        if let Some(a) = req.anchor_obs {
            input = input.with_anchor_obs(a);
        }
        if let Some(p) = req.tree_parents {
            input = input.with_tree_parents(p);
        }
        match ret {
            Some(mut ret) if est.has_returns() => {
                est.inner
                    .estimate_into(&input, adv.view(), Some(ret.view()), ws)?;
            }
            ret => {
                est.inner.estimate_into(&input, adv.view(), None, ws)?;
                if let Some(ret) = ret {
                    copy_out(&adv, ret)?;
                }
            }
        }
        Ok(())
    })
}

/// The batch builder's error in the caller's words: the crate checks the rows' rewards as
/// `row_rewards`, which reach it non-finite only from the caller's `episode_rewards` (the
/// binding's row sums are made finite; their check is the estimator's).
fn caller_names(e: beacon_rl::Error) -> beacon_rl::Error {
    match e {
        beacon_rl::Error::NonFinite {
            what: "row_rewards",
            index,
            value,
        } => beacon_rl::Error::NonFinite {
            what: "episode_rewards",
            index,
            value,
        },
        e => e,
    }
}

/// Times the crate's own call, with no binding around it, for the benchmark of the binding's
/// overhead: `reps` runs of what a Rust trainer holding the same arrays does (integer group ids,
/// the mask as its `i64`/`u8`/`bool` matrix or, with `lengths`, as [`MaskView::Lengths`]):
/// rebuild a kept batch with a kept [`BatchBuilder`], then `estimate_into` the advantages with a
/// kept [`Workspace`]. Returns each run's wall-clock seconds and, read from `cpu_clock` (the
/// process's CPU time in seconds), its CPU seconds, after one untimed warm-up run.
#[allow(clippy::too_many_arguments)]
pub fn time_crate_call(
    est: &Estimator,
    rewards: &Floats2<'_>,
    mask: &Mask2<'_>,
    ids: &[i64],
    mut adv: Out2<'_>,
    reps: usize,
    lengths: Option<&[usize]>,
    mut cpu_clock: impl FnMut() -> Res<f64>,
) -> Res<(Vec<f64>, Vec<f64>)> {
    let mut builder = BatchBuilder::new();
    let zeros = vec![0.0; ids.len()];
    let mut batch = RolloutBatch::from_group_keys(ids, &zeros)?;
    let mut ws = Workspace::new();
    let cols = mask.dim().1;
    let (mut wall, mut cpu) = (Vec::with_capacity(reps), Vec::with_capacity(reps));
    for rep in 0..=reps {
        let c0 = cpu_clock()?;
        let t0 = Instant::now();
        builder.rebuild_from_group_keys(&mut batch, ids, &zeros)?;
        let m = match lengths {
            Some(lengths) => MaskView::Lengths { lengths, cols },
            None => mask.view(),
        };
        let input = EstimatorInput::new(&batch)
            .with_token_level_rewards(rewards.view())
            .with_response_mask(m);
        est.inner.estimate_into(&input, adv.view(), None, &mut ws)?;
        let t = t0.elapsed().as_secs_f64();
        let c = cpu_clock()? - c0;
        if rep > 0 {
            wall.push(t);
            cpu.push(c);
        }
    }
    Ok((wall, cpu))
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
/// `response_mask == 1`; each is a step. A row's outcome R(τ) is the sum of all its token
/// rewards, masked tokens included (what verl's GRPO reads as the row's score); a turn other
/// than the last whose last token carries a reward > 0 is a milestone. The estimator
/// (`beacon`, `beacon_official`, `beacon_ablation` or `gigpo`) runs on the steps (grouped by
/// `index`, one trajectory per row) and each turn's advantage is written over its tokens
/// (`token::spans_into`); every other token gets 0. Returns equal the advantages.
///
/// GiGPO needs anchor states and step rewards, which verl does not pass: here a turn's anchor
/// is its position in the dialogue and its step reward the sum of the rewards that belong to it
/// (those in the turn or after it, up to the next turn; those before the first turn belong to
/// the first), which GiGPO discounts into step returns: with γ = 1 the first turn's return is
/// R(τ).
pub fn estimate_turns(
    est: &Estimator,
    rewards: &Floats2<'_>,
    mask: &Mask2<'_>,
    index: Keys<'_>,
    mut adv: Out2<'_>,
    ret: Option<Out2<'_>>,
) -> Res<TurnStats> {
    // The turns are read here, by the binding: the crate's check of the entries first.
    let mask_view = mask.view();
    mask_view.validate()?;
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
    let out_dim = adv.dim();
    if out_dim != (rows, cols) {
        return Err(Failure(format!(
            "out: advantages has shape {out_dim:?}, expected {:?}",
            (rows, cols)
        )));
    }
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
            let zero = |o: Out2<'_>| match o {
                Out2::F32(mut a) => a.fill(0.0),
                Out2::F64(mut a) => a.fill(0.0),
            };
            zero(adv);
            if let Some(ret) = ret {
                zero(ret);
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
        let batch = rebuild(builder, batch, &t.keys, Some(&t.trajs), &t.outcome)?;
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
        spans_into(&t.step_adv, &t.spans, mask_view, adv.view())?;
        if let Some(ret) = ret {
            copy_out(&adv, ret)?;
        }
        Ok(stats)
    })
}

/// The turns of one call of [`estimate_turns`], kept per thread so that a call of a size seen
/// before allocates none of them.
#[derive(Default)]
struct Turns {
    /// Each turn's tokens, in row order.
    spans: Vec<TokenSpan>,
    /// One row of the mask as flags (L long), not a copy of the whole mask.
    row: Vec<bool>,
    /// Per turn: the row it came from (its trajectory), the row's group key, the outcome, the
    /// milestone flag, the turn's own rewards, the position in the dialogue.
    trajs: Vec<usize>,
    keys: Vec<i64>,
    outcome: Vec<f64>,
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
    /// Every reward of a row is read: their sum is the row's outcome (verl's GRPO score,
    /// masked tokens included), and each belongs to the turn it lies in or follows (one
    /// before the first turn to the first): GiGPO's step reward of that turn. Nothing is
    /// dropped: a nonzero reward on a row without a turn, and any non-finite reward, is an
    /// error naming its row and token.
    fn read(&mut self, rewards: &Floats2<'_>, mask: &Mask2<'_>, index: Keys<'_>) -> Res<TurnStats> {
        let (rows, cols) = mask.dim();
        for v in [&mut self.outcome, &mut self.step_reward] {
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
            mask.row_into(r, &mut self.row);
            let m = &self.row;
            let mut j = 0;
            while j < cols {
                if m[j] {
                    let start = j;
                    while j < cols && m[j] {
                        j += 1;
                    }
                    self.spans.push(TokenSpan {
                        seq: r,
                        step: self.spans.len(),
                        start,
                        end: j,
                    });
                } else {
                    j += 1;
                }
            }
            let turns = self.spans.len() - first;
            // The row's outcome, and each turn's own rewards (GiGPO's step rewards).
            self.step_reward.resize(first + turns, 0.0);
            let mut total = 0.0;
            let mut k = 0;
            let (spans, step_reward) = (&self.spans, &mut self.step_reward);
            rewards.for_each_nonzero(r, |t, v| {
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
                let end_reward = rewards.get(r, self.spans[first + k].end - 1);
                let milestone = k + 1 < turns && end_reward > 0.0;
                stats.milestones += usize::from(milestone);
                self.trajs.push(r);
                // A turn's group key is its row's.
                self.keys.push(index.ids[r]);
                self.outcome.push(total);
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

fn copy_out(src: &Out2<'_>, dst: Out2<'_>) -> Res<()> {
    if src.dim() != dst.dim() {
        return Err(Failure(format!(
            "out: returns has shape {:?}, expected {:?}",
            dst.dim(),
            src.dim()
        )));
    }
    match (src, dst) {
        (Out2::F32(s), Out2::F32(mut d)) => d.assign(s),
        (Out2::F64(s), Out2::F64(mut d)) => d.assign(s),
        (Out2::F32(s), Out2::F64(mut d)) => Zip::from(&mut d).and(s).for_each(|d, &s| *d = f64::from(s)),
        (Out2::F64(s), Out2::F32(mut d)) => Zip::from(&mut d).and(s).for_each(|d, &s| *d = s as f32),
    }
    Ok(())
}
