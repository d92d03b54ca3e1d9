//! Fresh output buffers backed by transparent huge pages.
//!
//! An output the crate allocates itself ([`estimate`](crate::estimator::AdvantageEstimator::estimate)'s
//! arrays) is written in full right away, and on its first write every page of fresh memory
//! faults into the kernel, which maps and zeroes it: with 4 KiB pages, 30,720 faults for a
//! 30,720 × 512 `f64` output, and under a hypervisor each costs more than the bytes it maps.
//! Advising the kernel to back the buffer with 2 MiB pages (Linux `madvise(MADV_HUGEPAGE)`,
//! honoured when `/sys/kernel/mm/transparent_hugepage/enabled` is `always` or `madvise`) makes
//! that one fault per 2 MiB. Measured on 2026-11-23 on a 2-core Zen 1 VM: `grpo`'s `estimate` at that
//! size 84–91 ms without the advice, 52–58 ms with it (`cargo bench --bench trainer -- trainer_C/grpo`).
//!
//! The advice covers the 2 MiB-aligned part of a buffer of at least [`MIN_BYTES`], before its
//! first write. It never changes contents or validity; where it is unsupported (another OS,
//! THP disabled) nothing happens.

/// Buffers below this size are left alone: at most one huge page would fit, and small
/// buffers are often recycled heap memory already mapped.
pub(crate) const MIN_BYTES: usize = 4 << 20;

/// The size of a transparent huge page on x86-64 and aarch64 Linux.
const HUGE: usize = 2 << 20;

/// Advises the kernel to back `buf`'s allocation (its whole capacity) with huge pages (see the
/// [module docs](self)); call it on a fresh buffer before writing it.
pub(crate) fn advise_vec<T>(buf: &mut Vec<T>) {
    let bytes = buf.capacity().saturating_mul(std::mem::size_of::<T>());
    advise(buf.as_mut_ptr() as usize, bytes);
}

/// The most `f64` elements one array may hold: ndarray's limit, `isize::MAX` bytes.
pub(crate) const MAX_F64S: usize = isize::MAX as usize / std::mem::size_of::<f64>();

/// The number of `f64` elements of a rows × L output, checked: rows × L may be a caller's
/// claim (a `Lengths` mask's L), and ndarray panics on a shape past [`MAX_F64S`].
///
/// # Errors
/// [`Error::CapacityExceeded`](crate::Error::CapacityExceeded) when rows × L overflows or
/// exceeds [`MAX_F64S`] (`requested` saturates at `usize::MAX`).
fn elements(dim: (usize, usize)) -> crate::Result<usize> {
    let elements = dim.0.saturating_mul(dim.1);
    if elements > MAX_F64S {
        return Err(out_of_capacity(elements));
    }
    Ok(elements)
}

/// The one error for an output the crate will not or cannot allocate: above [`MAX_F64S`]
/// (`requested > limit`), or accepted but refused by the allocator (`requested ≤ limit`).
fn out_of_capacity(requested: usize) -> crate::Error {
    crate::Error::CapacityExceeded {
        what: "output (rows × L)",
        requested,
        limit: MAX_F64S,
    }
}

/// A fresh zeroed `f64` vector of rows × L elements, advised (see [`zeros`]).
///
/// # Errors
/// As [`zeros`].
pub(crate) fn zeroed_vec(dim: (usize, usize)) -> crate::Result<Vec<f64>> {
    let n = elements(dim)?;
    let mut v = alloc_zeroed_f64(n).ok_or_else(|| out_of_capacity(n))?;
    advise_vec(&mut v);
    Ok(v)
}

/// A fresh zeroed `f64` array of shape `dim`, advised (large zeroed allocations come from
/// the kernel untouched, so the advice lands before the first write).
///
/// # Errors
/// [`Error::CapacityExceeded`](crate::Error::CapacityExceeded) when rows × L overflows,
/// exceeds [`MAX_F64S`] or cannot be allocated: `dim` may come from a caller's claim (a
/// `Lengths` mask's L), on which `Array2::zeros` panics (past the limit) or aborts the
/// process (below it, e.g. 4 rows × 2⁴⁰: 32 TiB).
pub(crate) fn zeros(dim: (usize, usize)) -> crate::Result<ndarray::Array2<f64>> {
    let v = zeroed_vec(dim)?;
    let n = v.len();
    ndarray::Array2::from_shape_vec(dim, v).map_err(|_| out_of_capacity(n))
}

/// Reserves room for exactly rows × L more `f64`s in `buf`, advised: for a writer that fills
/// a fresh output element by element (no zero-fill pass).
///
/// # Errors
/// As [`zeros`].
pub(crate) fn reserve(buf: &mut Vec<f64>, dim: (usize, usize)) -> crate::Result<()> {
    let n = elements(dim)?;
    buf.try_reserve_exact(n).map_err(|_| out_of_capacity(n))?;
    advise_vec(buf);
    Ok(())
}

/// `vec![0.0; n]` (which allocates with `alloc_zeroed`: large buffers come from the kernel as
/// untouched zero pages, not written by a fill pass), but `None` where the allocator refuses
/// instead of aborting the process. Stable Rust has no fallible zeroed `Vec` (`try_reserve`
/// gives uninitialised memory, which would need a fill pass over every page).
#[allow(unsafe_code)]
fn alloc_zeroed_f64(n: usize) -> Option<Vec<f64>> {
    if n == 0 {
        return Some(Vec::new());
    }
    let layout = std::alloc::Layout::array::<f64>(n).ok()?;
    // SAFETY: `layout` has a non-zero size (n ≥ 1 elements of 8 bytes).
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<f64>();
    if ptr.is_null() {
        return None;
    }
    // SAFETY: `ptr` comes from the global allocator with the layout of n `f64`s (what a `Vec`
    // of capacity n uses: same alignment, size n · 8 ≤ isize::MAX, checked by
    // `Layout::array`), and its n · 8 zero bytes are n valid `f64` values (+0.0).
    Some(unsafe { Vec::from_raw_parts(ptr, n, n) })
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn advise(start: usize, bytes: usize) {
    if bytes < MIN_BYTES {
        return;
    }
    let Some(end) = start.checked_add(bytes) else {
        return;
    };
    let lo = start.div_ceil(HUGE).saturating_mul(HUGE);
    let hi = end / HUGE * HUGE;
    if hi > lo {
        // SAFETY: [lo, hi) lies inside one live allocation that the caller holds mutably.
        // MADV_HUGEPAGE only tells the kernel how to back those pages; it changes neither
        // their contents nor the mapping's validity, so no Rust invariant depends on it. Its
        // result is ignored: the advice is an optimisation (EINVAL where THP is compiled out).
        unsafe {
            libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_HUGEPAGE);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn advise(_start: usize, _bytes: usize) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advised_buffers_keep_their_contents_and_small_ones_are_left_alone() {
        // A large fresh buffer, advised and then written: reads back as written.
        let n = (MIN_BYTES * 2) / 8 + 123;
        let mut v: Vec<f64> = Vec::with_capacity(n);
        advise_vec(&mut v);
        v.extend((0..n).map(|i| i as f64));
        assert!(v.iter().enumerate().all(|(i, &x)| x == i as f64));
        // Advice on a buffer already holding data leaves the data as it is.
        advise_vec(&mut v);
        assert_eq!(v[n - 1], (n - 1) as f64);
        // Empty and small buffers: no call, no effect.
        advise_vec(&mut Vec::<u8>::new());
        let mut small = vec![1u8; 1024];
        advise_vec(&mut small);
        assert_eq!(small, vec![1u8; 1024]);
    }

    #[test]
    fn fresh_outputs_are_zeros_or_a_typed_error() {
        assert_eq!(zeros((0, 7)).unwrap().dim(), (0, 7));
        let z = zeros((3, MIN_BYTES / 8)).unwrap();
        assert!(z.iter().all(|&x| x.to_bits() == 0), "+0.0 everywhere");
        let mut v = vec![1.0];
        reserve(&mut v, (2, 3)).unwrap();
        assert!(v.capacity() >= 7);
        // Past the limit, and within it but beyond any address space (2^61 bytes).
        for (dim, requested) in [((4, usize::MAX), usize::MAX), ((4, 1 << 56), 1 << 58)] {
            let want = crate::Error::CapacityExceeded {
                what: "output (rows × L)",
                requested,
                limit: MAX_F64S,
            };
            assert_eq!(zeros(dim), Err(want.clone()));
            assert_eq!(reserve(&mut Vec::new(), dim), Err(want));
        }
    }
}
