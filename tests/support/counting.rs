//! The counting `#[global_allocator]` of the test binaries that count heap allocations
//! (`tests/allocations.rs`, `tests/batch_builder.rs`, `tests/parallel.rs`), written once. Each
//! includes it as `#[path = "support/counting.rs"] mod counting;`, which installs it as that
//! binary's global allocator (a binary has one, hence one binary per including test file).
//!
//! Every allocation and reallocation (`alloc`, `alloc_zeroed`, `realloc`) counts as one;
//! deallocations do not. Each measurement names its scope:
//!
//! - [`this_thread`]: the allocations `f` makes on the calling thread. Other threads (the test
//!   harness runs tests concurrently) are not seen, so tests need no serialising; work `f`
//!   hands to other threads is not seen either.
//! - [`all_threads`]: the allocations made on every thread while `f` runs (rayon's workers
//!   included). Whatever else the process does meanwhile counts too, so the binary's tests
//!   must not run concurrently with such a measurement.
#![allow(dead_code)] // each binary uses the scope it measures

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

thread_local! {
    static THREAD_ON: Cell<bool> = const { Cell::new(false) };
    static THREAD_COUNT: Cell<usize> = const { Cell::new(0) };
}
static ALL_ON: AtomicBool = AtomicBool::new(false);
static ALL_COUNT: AtomicUsize = AtomicUsize::new(0);

fn note() {
    // `try_with`: a thread's locals may be gone while it shuts down.
    let _ = THREAD_ON.try_with(|on| {
        if on.get() {
            let _ = THREAD_COUNT.try_with(|c| c.set(c.get() + 1));
        }
    });
    if ALL_ON.load(Ordering::Relaxed) {
        ALL_COUNT.fetch_add(1, Ordering::Relaxed);
    }
}

struct Counting;

// SAFETY: every method forwards to the system allocator unchanged; counting touches only
// const-initialised thread-locals (which never allocate) and two atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Heap allocations `f` makes on the calling thread (other threads are not counted).
pub fn this_thread(f: impl FnOnce()) -> usize {
    THREAD_COUNT.with(|c| c.set(0));
    THREAD_ON.with(|on| on.set(true));
    f();
    THREAD_ON.with(|on| on.set(false));
    THREAD_COUNT.with(Cell::get)
}

/// Heap allocations on every thread while `f` runs. The counter is process-wide: callers
/// serialise the tests that measure with it.
pub fn all_threads(f: impl FnOnce()) -> usize {
    ALL_COUNT.store(0, Ordering::SeqCst);
    ALL_ON.store(true, Ordering::SeqCst);
    f();
    ALL_ON.store(false, Ordering::SeqCst);
    ALL_COUNT.load(Ordering::SeqCst)
}
