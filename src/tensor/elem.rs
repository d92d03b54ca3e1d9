//! The element types of the views: `f32`/`f64` values ([`Float`]) and `bool`/`u8`/`i64` mask
//! entries ([`MaskElem`], with the bit tests [`MaskBits`] that check them for 0 and 1).

/// A floating-point element a trainer's tensors hold (`f32`, `f64`).
pub(crate) trait Float: Copy + PartialEq + std::fmt::Debug + Send + Sync + 'static {
    /// Zero.
    const ZERO: Self;
    /// Rounds an `f64` to this type (round to nearest even).
    fn from_f64(v: f64) -> Self;
    /// Widens to `f64` (exact).
    fn to_f64(self) -> f64;
}

impl Float for f32 {
    const ZERO: Self = 0.0;
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
}

impl Float for f64 {
    const ZERO: Self = 0.0;
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
}

/// A mask element (`bool`, `u8`, `i64`): 1 (true) marks a generated token, 0 (false) not.
/// Other integer values are invalid (see the [module docs](super#integer-masks-hold-0-and-1)).
pub(crate) trait MaskElem: Copy + Send + Sync + 'static {
    /// True for a generated token (for an invalid integer value: nonzero).
    fn is_set(self) -> bool;
}

/// A mask element's bits, for the 0/1 test (internal).
pub(crate) trait MaskBits: MaskElem {
    /// The element's bits other than bit 0, in its own width (zero iff the element is 0 or
    /// 1), so that an OR over a row vectorizes without widening.
    type Extra: Copy + Default + PartialEq + std::ops::BitOr<Output = Self::Extra>;
    fn extra_bits(self) -> Self::Extra;
    /// The two's complement bits, widened (for [`unit_prefix_len`]'s sum).
    fn bits(self) -> u64;
    /// The entry's low 32 bits: 1 or 0 for a valid entry (for [`write_row`]'s select).
    fn unit(self) -> u32;
}

impl MaskBits for bool {
    #[inline(always)]
    fn unit(self) -> u32 {
        u32::from(self)
    }
    // Always 0 or 1: the test compiles away.
    type Extra = u8;
    #[inline(always)]
    fn extra_bits(self) -> u8 {
        0
    }
    #[inline(always)]
    fn bits(self) -> u64 {
        u64::from(self)
    }
}

impl MaskBits for u8 {
    #[inline(always)]
    fn unit(self) -> u32 {
        u32::from(self)
    }
    type Extra = u8;
    #[inline(always)]
    fn extra_bits(self) -> u8 {
        self & !1
    }
    #[inline(always)]
    fn bits(self) -> u64 {
        u64::from(self)
    }
}

impl MaskBits for i64 {
    #[inline(always)]
    fn unit(self) -> u32 {
        // Truncation on purpose: 0 and 1 keep their value, and other entries are reported.
        self as u32
    }
    type Extra = u64;
    #[inline(always)]
    fn extra_bits(self) -> u64 {
        self as u64 & !1
    }
    #[inline(always)]
    fn bits(self) -> u64 {
        self as u64
    }
}

/// `Some(n)` when the row is exactly n ones followed by zeros (so every entry is 0 or 1),
/// else `None` (a row with a gap, or with an invalid value). One branch-free pass that
/// vectorizes with plain SSE2 adds, and-nots and ors: the row is such a prefix iff its first
/// entry is 0 or 1 and no later entry b has a bit its predecessor a lacks (`b & !a == 0`):
/// after a 1 only 0 or 1 may follow, after a 0 only 0, so by induction every entry is 0 or 1
/// and no 1 follows a 0. Then the wrapping sum of the entries is n.
#[inline]
// Index loops on purpose: lane j of the accumulators takes token j of each chunk.
#[allow(clippy::needless_range_loop)]
pub(crate) fn unit_prefix_len<M: MaskBits>(row: &[M]) -> Option<usize> {
    const LANES: usize = 8;
    let Some((first, rest)) = row.split_first() else {
        return Some(0);
    };
    let (mut sum, mut bad) = ([0u64; LANES], [0u64; LANES]);
    // Entry t + 1 (in `rest`) against entry t (in `row`), LANES tokens at a time.
    let mut next = rest.chunks_exact(LANES);
    let mut this = row.chunks_exact(LANES);
    for (b, a) in (&mut next).zip(&mut this) {
        for j in 0..LANES {
            let (a, b) = (a[j].bits(), b[j].bits());
            sum[j] = sum[j].wrapping_add(b);
            bad[j] |= b & !a;
        }
    }
    let done = rest.len() - next.remainder().len();
    let (mut sum, mut bad) = (
        sum.iter().fold(first.bits(), |x, &y| x.wrapping_add(y)),
        bad.iter().fold(first.bits() & !1, |x, &y| x | y),
    );
    for (b, a) in next.remainder().iter().zip(&row[done..]) {
        let (a, b) = (a.bits(), b.bits());
        sum = sum.wrapping_add(b);
        bad |= b & !a;
    }
    if bad != 0 {
        return None;
    }
    usize::try_from(sum).ok()
}

impl MaskElem for bool {
    #[inline(always)]
    fn is_set(self) -> bool {
        self
    }
}

impl MaskElem for u8 {
    #[inline(always)]
    fn is_set(self) -> bool {
        self != 0
    }
}

impl MaskElem for i64 {
    #[inline(always)]
    fn is_set(self) -> bool {
        self != 0
    }
}
