//! # beacon-rl
//!
//! Advantage estimation for reinforcement-learning trainers of long-horizon LLM agents.
//!
//! The headline method is **BEACON**, milestone-anchored credit assignment: detect milestones
//! in each trajectory, partition it at them, shape rewards within segments with temporal
//! decay, and estimate advantages at two scales (trajectory and segment). Two flavours are
//! offered as presets: the paper's equations ([`BeaconConfig::paper`](estimator::beacon::BeaconConfig::paper)) and the behaviour of
//! the paper's public code release ([`BeaconConfig::official`](estimator::beacon::BeaconConfig::official)), reproduced to 1e-5 on the
//! release's own vectors.
//!
//! The crate is backend-free (plain slices and [`ndarray`]), pure, deterministic and checks
//! its inputs: NaN rewards, mismatched lengths, trajectories split across groups and invalid
//! configurations are typed [`Error`]s, never panics.
//!
//! ## From a rollout batch to token advantages
//!
//! ```
//! use beacon_rl::estimator::beacon::{Beacon, BeaconConfig};
//! use beacon_rl::milestone::{detect_milestones, ScoreIncrease, Transition};
//! use beacon_rl::token::broadcast;
//! use beacon_rl::RolloutBatch;
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
//! })?;
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
//! ## Map: one path per item
//!
//! Every public item has exactly one path; `tests/it/api_paths.rs` reads the module tree and
//! fails when a re-export gives an item a second one. Which path is decided by one rule:
//!
//! - **The crate root** holds only what nearly every program names: [`RolloutBatch`] (and
//!   [`BatchBuilder`], which rebuilds one in place), [`Error`] and [`Result`], and the group
//!   normalisation switches [`NormMode`] and [`SingletonRule`] that the estimators' and
//!   ablations' configs share. The files defining them are private.
//! - **One public module per area**, named after its concept. An area made of several
//!   concepts has one public submodule per concept, whose page states its equation:
//!   `estimator::beacon`, `estimator::grpo`, `milestone::text`, `milestone::webshop`, ... An
//!   area split only by role (config, report, reader, environment, trainer, ...) keeps those
//!   files private behind one flat module: `diagnostics::Diagnostics`,
//!   `record::read_trajectories`, `testbed::KeyChain`.
//!
//! The areas:
//!
//! - [`estimator`]: the one interface ([`AdvantageEstimator`](estimator::AdvantageEstimator),
//!   [`EstimatorConfig`](estimator::EstimatorConfig), [`EstimatorInput`](estimator::EstimatorInput),
//!   [`Advantages`](estimator::Advantages), [`Workspace`](estimator::Workspace)) and one module
//!   per estimator family: BEACON in [`estimator::beacon`], GiGPO in [`estimator::gigpo`], the
//!   verl baselines in [`estimator::grpo`], [`estimator::rloo`], [`estimator::gae`], ...
//! - [`milestone`]: the detector trait Φ(s, a, s′), [`detect_milestones`](milestone::detect_milestones),
//!   the two basic detectors, and one module per detector family ([`milestone::text`],
//!   [`milestone::walkthrough`], [`milestone::webshop`], [`milestone::discover`], ...).
//! - `record` (feature `serde`): recorded trajectories as JSON Lines.
//! - [`token`]: step advantages → token advantages under a response mask.
//! - [`tensor`]: the views of caller arrays in trainer dtypes (`f32`/`f64` values,
//!   `bool`/`u8`/`i64` masks, response lengths) that the estimators and [`token`] read and
//!   write; arrays and slices convert into them, so most callers never name them.
//! - [`diagnostics`]: CAR, EGR, ZAR, CCR and the sample split, for any estimator's advantages.
//! - [`ablation`]: the paper's Table 3 variants as named configurations.
//! - [`difflib`]: Python's `difflib.SequenceMatcher` ratio, as GiGPO's similarity grouping and the
//!   walkthrough detector use it.
//! - `testbed` (feature `testbed`): a tabular training loop that compares the estimators.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod ablation;
mod batch;
pub mod diagnostics;
pub mod difflib;
mod error;
pub mod estimator;
pub mod milestone;
mod partition;
#[cfg(feature = "serde")]
pub mod record;
mod shaping;
mod stats;
pub mod token;

mod hash;
// Fresh outputs backed by transparent huge pages (Linux).
mod huge_pages;
// Non-temporal stores for outputs larger than the cache (x86-64).
mod stream;

pub use batch::{BatchBuilder, RolloutBatch};
pub use error::{Error, Escaped, Result};
pub use stats::{NormMode, SingletonRule};
pub mod tensor;
#[cfg(feature = "testbed")]
pub mod testbed;

/// The `ndarray` version in this crate's signatures, so callers name the same one.
pub use ndarray;
mod setters;

// Parallel chunks of independent groups and rows (the `rayon` feature).
mod parallel;
