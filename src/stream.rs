//! Streaming (non-temporal) stores for outputs larger than the cache.
//!
//! A plain store into memory that is not in the cache first reads the line it lands in
//! (write-allocate), so writing an output of B bytes moves 2·B bytes. The masked writer
//! ([`tensor`](crate::tensor)'s, behind the token broadcast and every outcome estimator) writes
//! whole rows it never reads back; for outputs of at least [`MIN_BYTES`] it stores them with
//! x86-64's non-temporal stores (SSE2, present on every x86-64 CPU), which write full lines
//! without reading them and without evicting the inputs from the cache. Then the writer issues
//! a store fence ([`fence`]) before it returns, so the stores are ordered before anything
//! that follows (another thread's read after a join included). Elsewhere, and for a chunk
//! that is not 16-byte aligned, the stores are plain.
//!
//! Values and results are the same bits either way: only the path to memory differs.

/// Outputs of this size or more are streamed: half the last-level cache of the machines the
/// benches ran on (8 MiB), where a written output would not stay cached for its reader anyway.
pub(crate) const MIN_BYTES: usize = 4 << 20;

/// Whether an output of `bytes` bytes is written with streaming stores (at least
/// [`MIN_BYTES`]).
pub(crate) fn pays(bytes: usize) -> bool {
    bytes >= MIN_BYTES
}

/// A chunk of output elements whose size is a multiple of 16 bytes.
pub(crate) trait Chunk: Copy {}
impl Chunk for [f32; 8] {}
impl Chunk for [f32; 16] {}
impl Chunk for [f64; 8] {}
impl Chunk for [f64; 16] {}

/// Stores `src` into `dst`, streaming when `dst` is 16-byte aligned (see the
/// [module docs](self)).
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
#[inline(always)]
pub(crate) fn store<E: Chunk>(dst: &mut E, src: E) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
    // `Chunk` is implemented for 32- to 128-byte arrays only (see the test below).
    let d = (dst as *mut E).cast::<u8>();
    if d as usize % 16 != 0 {
        *dst = src;
        return;
    }
    let s = (&src as *const E).cast::<u8>();
    for k in (0..std::mem::size_of::<E>()).step_by(16) {
        // SAFETY: `k + 16 <= size_of::<E>()` (a multiple of 16), so both 16-byte ranges lie
        // inside `src` and `*dst`, which is exclusively borrowed; the load is unaligned, and
        // the streaming store's 16-byte alignment was checked above. SSE2 is part of x86-64.
        unsafe {
            _mm_stream_si128(
                d.add(k).cast::<__m128i>(),
                _mm_loadu_si128(s.add(k).cast::<__m128i>()),
            )
        };
    }
}

/// Plain stores where there are no streaming ones.
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
pub(crate) fn store<E: Chunk>(dst: &mut E, src: E) {
    *dst = src;
}

/// Orders the streaming stores before every later store (`sfence`); a writer calls it after
/// its last streaming store.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code, unused_unsafe)]
pub(crate) fn fence() {
    // SAFETY: a store fence has no memory operands and no precondition; SSE is part of
    // x86-64.
    unsafe { std::arch::x86_64::_mm_sfence() };
}

/// Nothing to order where there are no streaming stores.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn fence() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streamed_chunks_hold_what_was_stored_aligned_or_not() {
        assert_eq!(std::mem::size_of::<[f32; 8]>() % 16, 0);
        assert_eq!(std::mem::size_of::<[f32; 16]>() % 16, 0);
        assert_eq!(std::mem::size_of::<[f64; 8]>() % 16, 0);
        assert_eq!(std::mem::size_of::<[f64; 16]>() % 16, 0);
        // Chunks at every 4-byte offset of a buffer: aligned ones stream, the others do not.
        let mut buf = vec![0.0f32; 64];
        for start in 0..8 {
            buf.fill(0.0);
            let src = std::array::from_fn(|j| (start * 10 + j) as f32 - 3.5);
            let dst: &mut [f32; 16] = (&mut buf[start..start + 16]).try_into().unwrap();
            store(dst, src);
            fence();
            assert_eq!(&buf[start..start + 16], &src[..]);
            assert!(buf[..start].iter().chain(&buf[start + 16..]).all(|&x| x == 0.0));
        }
        let mut wide = [[0.0f64; 16]; 2];
        let src = std::array::from_fn(|j| -(j as f64) * 0.25);
        store(&mut wide[1], src);
        fence();
        assert_eq!((wide[0], wide[1]), ([0.0; 16], src));
    }
}
