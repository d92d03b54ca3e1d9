//! # beacon-rl
//!
//! Advantage estimation for reinforcement-learning trainers of long-horizon LLM agents.
//!
//! The headline method is **BEACON**, milestone-anchored credit assignment: detect milestones
//! in each trajectory, partition it at them, shape rewards within segments with temporal
//! decay, and estimate advantages at two scales (trajectory and segment). Two flavours are
//! offered as presets: the paper's equations ([`BeaconConfig::paper`]) and the behaviour of
//! the paper's public code release ([`BeaconConfig::official`]), reproduced to 1e-5 on the
//! release's own vectors.
//!
//! The crate is backend-free (plain slices and [`ndarray`]), pure, deterministic and checks
//! its inputs: NaN rewards, mismatched lengths, trajectories split across groups and invalid
//! configurations are typed [`Error`]s, never panics.
//!
//! ## From a rollout batch to token advantages
//!
//! ```
//! use beacon_rl::milestone::{detect_milestones, ScoreIncrease, Transition};
//! use beacon_rl::token::broadcast;
//! use beacon_rl::{Beacon, BeaconConfig, RolloutBatch};
//! use ndarray::Array2;
//!
//! // A verl-agent style batch: one row per step, with group (uid) and trajectory keys.
//! // Task "t" was tried twice: "a" succeeded in 3 steps, "b" failed after 2.
//! let uid = ["t", "t", "t", "t", "t"];
//! let traj = ["a", "b", "a", "b", "a"]; // rows of the two trajectories interleave
//! let episode_reward = [1.0, 0.0, 1.0, 0.0, 1.0];
//! let batch = RolloutBatch::from_row_keys(&uid, &traj, &episode_reward)?;
//!
//! // The environment's score after each row (before the first step it was 0).
//! let score_after = [10.0, 10.0, 10.0, 10.0, 30.0];
//! let score_before = [0.0, 0.0, 10.0, 10.0, 10.0];
//! let flags = detect_milestones(&batch, &mut ScoreIncrease, |row, _step| Transition {
//!     score: Some(score_before[row]),
//!     next_score: Some(score_after[row]),
//!     ..Transition::default()
//! });
//! assert_eq!(flags, [true, true, false, false, true]);
//!
//! let out = Beacon::new(BeaconConfig::paper())?.compute(&batch, &flags)?;
//! assert_eq!(out.segments, [0, 0, 1, 1, 1]); // per row, in the caller's order
//! // Both reached milestone 1 in one step: equal segment credit there.
//! assert_eq!(out.segment_advantages[0], out.segment_advantages[1]);
//!
//! // Token level under each row's response mask (here 4 tokens, 2 to 4 of them valid).
//! let mask = Array2::from_shape_fn((5, 4), |(r, j)| j < 2 + r % 3);
//! let tokens = broadcast(&out.advantages, mask.view())?;
//! assert_eq!(tokens[[0, 1]], out.advantages[0]);
//! assert_eq!(tokens[[0, 3]], 0.0);
//! # Ok::<(), beacon_rl::Error>(())
//! ```
//!
//! ## Map
//!
//! - [`batch`]: [`RolloutBatch`], groups → trajectories → steps in contiguous columns.
//! - [`milestone`]: the detector trait Φ(s, a, s′) and built-in detectors.
//! - [`estimator`]: BEACON ([`Beacon`]) and the baselines.
//! - `record` (feature `serde`): recorded trajectories as JSON Lines.
//! - [`token`]: step advantages → token advantages under a response mask.
//! - [`diagnostics`]: CAR, EGR, ZAR, CCR and the sample split, for any estimator's advantages.
//! - [`ablation`]: the paper's Table 3 variants as named configurations.
//! - [`NormMode`], [`SingletonRule`]: the group normalisation shared by the estimators.
//! - [`error`]: the one error type.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod ablation;
pub mod batch;
pub mod diagnostics;
pub mod difflib;
pub mod error;
pub mod estimator;
pub mod milestone;
mod partition;
#[cfg(feature = "serde")]
pub mod record;
mod shaping;
mod stats;
pub mod token;

mod hash;

pub use ablation::Ablation;
pub use batch::RolloutBatch;
pub use diagnostics::{Diagnostics, DiagnosticsConfig, DiagnosticsReport};
pub use error::{Error, Result};
pub use estimator::beacon::{Beacon, BeaconConfig, BeaconFlavour, BeaconOutput, BeaconWorkspace};
pub use estimator::gigpo::{Gigpo, GigpoConfig, GigpoOutput};
pub use estimator::{AdvantageEstimator, Advantages, EstimatorConfig, EstimatorInput};
pub use stats::{NormMode, SingletonRule};
pub mod tensor;
#[cfg(feature = "testbed")]
pub mod testbed;

pub use estimator::Workspace;
/// The `ndarray` version in this crate's signatures, so callers name the same one.
pub use ndarray;
pub use tensor::{FloatView, FloatViewMut, MaskView};
mod setters;
