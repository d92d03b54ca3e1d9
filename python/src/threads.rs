//! Where the crate computes: on the caller's thread (the default), or on a pool of threads the
//! caller asked for with `set_num_threads`.
//!
//! The binding builds the crate with its `rayon` feature, whose parallel paths split groups and
//! row blocks into chunks, one per thread of the current rayon pool, and give the serial bits
//! whatever the pool size. Outside any pool the crate sees rayon's global pool, which this
//! module fixes at one thread on the first call (importing the package starts no thread; from
//! the first call on, one idle worker sleeps), so that the crate takes its serial path on the
//! caller's thread and more threads are only used on request: a trainer's process already runs
//! torch's threads, and two threads cost more CPU time than one (memory-bound passes over
//! rows × L do not halve).

use std::sync::{Arc, Mutex, Once, OnceLock};

use rayon::{ThreadPool, ThreadPoolBuilder};

use crate::adapter::Failure;

/// The caller's pool when it asked for more than one thread, and the process that built it: a
/// child forked afterwards has none of the pool's threads (only the forking thread survives a
/// fork), so it computes on its own thread instead of waiting for workers that do not exist.
static POOL: Mutex<Option<(u32, Arc<ThreadPool>)>> = Mutex::new(None);

/// A one-thread pool, used only if rayon's global pool could not be fixed at one thread.
static SERIAL: OnceLock<Option<ThreadPool>> = OnceLock::new();

/// Fixes rayon's global pool at one thread, once, before the crate first asks rayon for it
/// (every path into the crate's estimators calls this or [`run`]).
pub fn init() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        // Fails only if this library's global pool already exists; `run` then checks its size.
        let _ = ThreadPoolBuilder::new().num_threads(1).build_global();
    });
}

/// The pool of the last `set` with more than one thread, if any, when this process built it.
fn pool() -> Option<Arc<ThreadPool>> {
    let entry = match POOL.lock() {
        Ok(p) => p.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    };
    entry.and_then(|(pid, p)| (pid == std::process::id()).then_some(p))
}

/// Runs `f` where the caller asked (on its pool, else on this thread with the crate serial).
pub fn run<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    init();
    if let Some(p) = pool() {
        return p.install(f);
    }
    if rayon::current_num_threads() > 1 {
        // The global pool is not ours to size: run inside a pool of one.
        if let Some(p) = SERIAL.get_or_init(|| ThreadPoolBuilder::new().num_threads(1).build().ok()) {
            return p.install(f);
        }
    }
    f()
}

/// The most threads `set` builds a pool of: a pool's threads are all spawned at once, so a
/// mistyped count (10**6) would spawn until the system refuses, in a trainer's process.
pub const MAX_THREADS: usize = 1024;

/// Computes on `n` threads from the next call on (1: the caller's thread).
pub fn set(n: usize) -> Result<(), Failure> {
    let new = match n {
        0 => {
            return Err(Failure(
                "set_num_threads: expected at least 1 thread, got 0".into(),
            ))
        }
        n if n > MAX_THREADS => {
            return Err(Failure(format!(
                "set_num_threads: expected at most {MAX_THREADS} threads, got {n}"
            )))
        }
        1 => None,
        n => Some((
            std::process::id(),
            Arc::new(
                ThreadPoolBuilder::new()
                    .num_threads(n)
                    .thread_name(|i| format!("beacon-rl-{i}"))
                    .build()
                    .map_err(|e| Failure(format!("set_num_threads({n}): {e}")))?,
            ),
        )),
    };
    match POOL.lock() {
        Ok(mut p) => *p = new,
        Err(poisoned) => *poisoned.into_inner() = new,
    }
    Ok(())
}

/// The number of threads the next call computes on (1 in a child forked after `set`).
pub fn get() -> usize {
    pool().map_or(1, |p| p.current_num_threads())
}
