//! The caller's arrays as the adapter holds them (borrowed, in the caller's dtype) and the
//! per-row columns the crate reads from them: `f64` values and 0/1 flags, borrowed when the
//! caller's layout allows, else copied into a kept buffer.

use beacon_rl::tensor::{FloatView, MaskView};
use ndarray::ArrayView1;

use super::{Failure, Res};

/// Group or trajectory keys as `i64`: the caller's integers read in place, or ids the binding
/// interned from strings and other objects (equal keys, equal ids). The crate's batch builder
/// compares them; rows whose key equals the previous row's are not even hashed.
#[derive(Clone, Copy)]
pub struct Keys<'a> {
    pub(super) ids: &'a [i64],
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

impl Floats1<'_> {
    pub(super) fn len(&self) -> usize {
        match self {
            Floats1::F32(a) => a.len(),
            Floats1::F64(a) => a.len(),
        }
    }

    /// `f64` values as the crate reads per-row columns: borrowed when the caller holds
    /// contiguous `f64`, else copied into `buf` (rows long, not rows × L; kept across calls).
    pub(super) fn as_f64<'s>(&'s self, buf: &'s mut Vec<f64>) -> &'s [f64] {
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

impl Mask1<'_> {
    pub(super) fn len(&self) -> usize {
        match self {
            Mask1::U8(a) => a.len(),
            Mask1::I64(a) => a.len(),
        }
    }

    /// Per-row flags as the crate reads them, every entry checked to be 0 or 1: the caller's
    /// bytes borrowed when they are contiguous, else converted into `buf` (kept across calls).
    pub(super) fn as_flags<'s>(&'s self, what: &str, buf: &'s mut Vec<bool>) -> Res<&'s [bool]> {
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
