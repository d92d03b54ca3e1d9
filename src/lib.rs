//! # beacon-rl
//!
//! Advantage estimation for reinforcement-learning trainers of long-horizon LLM agents.
//! (Crate docs are completed with the BEACON estimator.)
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod batch;
pub mod error;
pub mod estimator;
pub mod milestone;

pub use batch::RolloutBatch;
pub use error::{Error, Result};
pub use estimator::{AdvantageEstimator, Advantages, EstimatorConfig, EstimatorInput};
