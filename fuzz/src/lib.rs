//! Oracles of beacon-rl's fuzz targets (`fuzz_targets/*.rs`), one module per target.
//!
//! Each module's `run(data)` decodes the fuzz input with [`bytes::Bytes`] and panics when an
//! oracle is violated. The root crate's `tests/it/fuzz_regressions.rs` includes these same files
//! with `#[path]` and replays every input under `fuzz/regressions/<target>/` through them on
//! stable Rust, so a crash found here stays a test of `cargo test`.

pub mod bytes;
pub mod detectors;
/// The naive port of CPython's `difflib` the library's unit tests use (the detectors' oracle).
#[allow(dead_code)]
#[path = "../../src/milestone/difflib/py.rs"]
mod difflib_py;
pub mod discover;
pub mod estimators;
pub mod records;
pub mod token;
