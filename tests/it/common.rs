//! Helpers shared by the integration tests (`use crate::common;` in each test module).
//!
//! The parity tolerance against the peers' vectors (verl, verl-agent, the BEACON release) is
//! written here once: `|ours − expected| ≤ 1e-5 · max(1, |expected|)`, relative above 1 and
//! absolute below (peer values near 0 carry float32 noise of their own).

/// The parity tolerance (see the module docs).
pub const PARITY_TOL: f64 = 1e-5;

/// `|ours − expected| / max(1, |expected|)`: the error the tolerance bounds.
pub fn parity_err(ours: f64, expected: f64) -> f64 {
    (ours - expected).abs() / expected.abs().max(1.0)
}

/// True when `ours` matches the peer's `expected` within [`PARITY_TOL`].
pub fn parity_ok(ours: f64, expected: f64) -> bool {
    parity_err(ours, expected) <= PARITY_TOL
}
