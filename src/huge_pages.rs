//! Fresh output buffers backed by transparent huge pages.
//!
//! An output the crate allocates itself ([`estimate`](crate::estimator::AdvantageEstimator::estimate)'s
//! arrays) is written in full right away, and on its first write every page of fresh memory
//! faults into the kernel, which maps and zeroes it: with 4 KiB pages, 30,720 faults for a
//! 30,720 × 512 `f64` output, and under a hypervisor each costs more than the bytes it maps.
//! Advising the kernel to back the buffer with 2 MiB pages (Linux `madvise(MADV_HUGEPAGE)`,
//! honoured when `/sys/kernel/mm/transparent_hugepage/enabled` is `always` or `madvise`) makes
//! that one fault per 2 MiB. Measured (docs/performance-log.md, "Fourth round"): `grpo`'s `estimate` at that
//! size 84–91 ms before, 52–58 ms after (`cargo bench --bench trainer -- trainer_C/grpo`).
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

/// [`advise_vec`] for a fresh slice (for example a new `Array2::zeros`, whose large
/// allocations come from the kernel untouched).
pub(crate) fn advise_slice<T>(buf: &mut [T]) {
    advise(buf.as_mut_ptr() as usize, std::mem::size_of_val(buf));
}

/// The most `f64` elements one array may hold: ndarray's limit, `isize::MAX` bytes.
pub(crate) const MAX_F64S: usize = isize::MAX as usize / std::mem::size_of::<f64>();

/// A fresh zeroed `f64` array of shape `dim`, advised (large zeroed allocations come from
/// the kernel untouched, so the advice lands before the first write).
///
/// # Errors
/// [`Error::CapacityExceeded`](crate::Error::CapacityExceeded) when rows × L overflows or
/// exceeds [`MAX_F64S`]: `dim` may come from a caller's claim (a `Lengths` mask's L), and
/// `Array2::zeros` panics on such a shape.
pub(crate) fn zeros(dim: (usize, usize)) -> crate::Result<ndarray::Array2<f64>> {
    let elements = dim.0.saturating_mul(dim.1);
    if elements > MAX_F64S {
        return Err(crate::Error::CapacityExceeded {
            what: "output (rows × L)",
            requested: elements,
            limit: MAX_F64S,
        });
    }
    let mut a = ndarray::Array2::zeros(dim);
    if let Some(s) = a.as_slice_mut() {
        advise_slice(s);
    }
    Ok(a)
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
        advise_slice(&mut v[..]);
        assert_eq!(v[n - 1], (n - 1) as f64);
        // Empty and small buffers: no call, no effect.
        advise_vec(&mut Vec::<u8>::new());
        let mut small = vec![1u8; 1024];
        advise_slice(&mut small);
        assert_eq!(small, vec![1u8; 1024]);
    }
}
