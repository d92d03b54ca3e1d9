//! # beacon-rl
//!
//! Advantage estimation for reinforcement-learning trainers of long-horizon LLM agents.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod batch;
pub mod error;
pub mod estimator;
pub mod milestone;
pub mod partition;
pub mod shaping;
pub mod stats;
pub mod token;

pub use batch::RolloutBatch;
pub use error::{Error, Result};
pub use estimator::beacon::{Beacon, BeaconConfig, BeaconFlavour, BeaconOutput, BeaconWorkspace};
pub use stats::{NormMode, SingletonRule};
