//! The one module of the binding that calls the `beacon-rl` crate.
//!
//! Everything else in the binding speaks in the types of `views.rs`: borrowed views of the caller's
//! arrays in the dtype the caller holds (`f32`/`f64` values, `bool`/`u8`/`i64` masks) and
//! mutable views of the outputs in the caller's dtype. They are handed to the crate's
//! dtype-generic interface (`FloatView`, `MaskView`, `FloatViewMut`) as they are: no input is
//! copied or converted and the advantages are written straight into the caller's array. The
//! only passes the binding adds over rows × L are the per-row reward sums (each row's score
//! when the caller gives neither terminal rewards nor row scores) and, for estimators whose
//! returns equal their advantages, the copy into the `returns` array the Python API promises.
//! Scratch space is a [`Workspace`](beacon_rl::estimator::Workspace) per thread, reused across calls.
//!
//! No Python type appears here: the functions run with the GIL released.
//!
//! Files: `views.rs` (the caller's arrays as the adapter holds them, and the per-row columns
//! the crate reads), `estimator.rs` (estimators by name), `state.rs` (what a thread keeps
//! between calls), `estimate.rs` (`estimate`) and `turns.rs` (`estimate_turns`, verl's
//! multi-turn layout).

mod estimate;
mod estimator;
mod state;
mod turns;
mod views;

pub use estimate::{estimate, output_dim};
pub use estimator::{names, verl_names, Estimator};
pub use turns::estimate_turns;
pub use views::{Floats1, Keys, Mask1, Request};

/// A failure with the crate's message (raised as `ValueError`).
#[derive(Debug)]
pub struct Failure(pub String);

impl From<beacon_rl::Error> for Failure {
    fn from(e: beacon_rl::Error) -> Self {
        Failure(e.to_string())
    }
}

pub type Res<T> = std::result::Result<T, Failure>;

/// An array dtype the binding never builds: the crate's views are `#[non_exhaustive]`.
fn unsupported(what: &str) -> Failure {
    Failure(format!("internal: {what}: a dtype the binding does not build"))
}
