//! # beacon-rl
//!
//! Advantage estimation for reinforcement-learning trainers of long-horizon LLM agents.
//!
//! The headline method is **BEACON**, milestone-anchored credit assignment: detect milestones
//! in each trajectory, partition it at them, shape rewards within segments with temporal
//! decay, and estimate advantages at two scales (trajectory and segment). Two flavours are
//! offered as presets: the paper's equations ([`BeaconConfig::default`](estimator::BeaconConfig::default)) and the behaviour of
//! the paper's public code release ([`BeaconConfig::official`](estimator::BeaconConfig::official)), reproduced to 1e-5 on the
//! release's own vectors.
//!
//! The crate is backend-free (plain slices and [`ndarray`]), pure, deterministic and checks
//! its inputs: NaN rewards, mismatched lengths, trajectories split across groups and invalid
//! configurations are typed [`Error`]s, never panics.
//!
//! ## From a rollout batch to token advantages
//!
//! ```
//! use beacon_rl::estimator::{Beacon, BeaconConfig};
//! use beacon_rl::milestone::{detect_milestones, ScoreIncrease, Transition};
//! use beacon_rl::tensor::broadcast;
//! use beacon_rl::RolloutBatch;
//! use ndarray::Array2;
//!
//! // A verl-agent style batch: one row per step, with group (uid) and trajectory keys.
//! // Task "t" was tried twice: "a" succeeded in 3 steps, "b" failed after 2.
//! let uid = ["t", "t", "t", "t", "t"];
//! let traj = ["a", "b", "a", "b", "a"]; // rows of the two trajectories interleave
//! let terminal_reward = [1.0, 0.0, 1.0, 0.0, 1.0];
//! let batch = RolloutBatch::from_row_keys(&uid, &traj, &terminal_reward)?;
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
//! let out = Beacon::new(BeaconConfig::default())?.compute(&batch, &flags)?;
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
//!   [`BatchBuilder`], which rebuilds one in place), [`Error`], [`Result`] and [`Escaped`]
//!   (how errors quote caller text), and [`ndarray`]. The files defining them are private.
//! - **One flat public module per area**, named after its concept. The area's files are
//!   private, each named after the concept it computes, with its equation in its doc:
//!   `estimator::Beacon`, `milestone::ExpertWalkthrough`, `diagnostics::Diagnostics`,
//!   `record::read_trajectories`.
//!
//! The areas:
//!
//! - [`estimator`]: the one interface ([`AdvantageEstimator`](estimator::AdvantageEstimator),
//!   [`EstimatorConfig`](estimator::EstimatorConfig), [`EstimatorInput`](estimator::EstimatorInput),
//!   [`Advantages`](estimator::Advantages), [`Workspace`](estimator::Workspace)) and every
//!   estimator's config, flat: BEACON ([`estimator::BeaconConfig`], with the type
//!   [`estimator::Beacon`] for its parts), GiGPO ([`estimator::GigpoConfig`],
//!   [`estimator::Gigpo`]), the verl baselines ([`estimator::GrpoConfig`],
//!   [`estimator::GaeConfig`], ...), all built by name through `EstimatorConfig`.
//! - [`milestone`]: the detector trait Φ(s, a, s′), [`detect_milestones`](milestone::detect_milestones),
//!   the two basic detectors, and the detector families
//!   (text patterns, walkthroughs, WebShop phases, combinators, presets, discovery ([`milestone::MilestoneDiscovery`]), ...).
//! - `record` (feature `serde`): recorded trajectories as JSON Lines.
//! - [`tensor`]: the views of caller arrays in trainer dtypes (`f32`/`f64` values,
//!   `bool`/`u8`/`i64` masks, response lengths) that the estimators read and write (arrays and
//!   slices convert into them, so most callers never name them), and step advantages → token
//!   advantages under a response mask ([`tensor::broadcast_into`], [`tensor::spans_into`]).
//! - [`diagnostics`]: CAR, EGR, ZAR, CCR and the sample split, for any estimator's advantages.
//!
//! # Crate features
//!
//! - **`serde`** (default): serde derives on configs, outputs and reports, and the `record`
//!   module (recorded trajectories as JSON Lines, through `serde_json`).
//! - **`rayon`**: independent groups (BEACON, GiGPO, the outcome estimators) and token rows
//!   (the token broadcast, GAE, REINFORCE++) run in parallel on rayon's global pool. The
//!   results are bit-identical to the serial path.
//! - **`cli`**: the `beacon` program, which computes credit on recorded trajectories from the
//!   command line (`cargo install beacon-rl --features cli`; from a clone,
//!   `cargo run --features cli`). It adds `clap` and turns on `serde`; the library
//!   does not use it.
//!
//! With `default-features = false` the crate depends on `ndarray`, `regex`, `memchr`,
//! `thiserror` and, on Linux, `libc` only.
//!
//! # Performance
//!
//! The estimators are bound by memory, not arithmetic: a trainer's batch of 30,720 rows × 512
//! tokens is read and written in about the time of copying the output once or twice. What a
//! caller controls:
//!
//! - **Keep buffers.** Call [`AdvantageEstimator::estimate_into`](estimator::AdvantageEstimator::estimate_into)
//!   with a kept [`Workspace`](estimator::Workspace) and output, and rebuild batches with
//!   [`BatchBuilder`]: after the first call nothing is allocated. [`estimate`](estimator::AdvantageEstimator::estimate)
//!   allocates fresh `f64` outputs, which costs up to 1.8× on large batches.
//! - **Pass lengths, not masks**, when the response mask is a prefix mask
//!   ([`tensor::prefix_lengths_into`]): reading verl's `i64` mask alone costs about twice a
//!   copy of the output; from lengths, the outcome estimators run at 1.2× the copy.
//! - **Use the `rayon` feature** where a core is free: groups and token rows run in parallel on
//!   the current rayon pool, bit-identical to the serial path (1.6–1.9× on 2 cores).
//! - GiGPO's cost per step does not grow with the batch (anchors are interned per group).
//!
//! Every figure, with its command, date and machine, is in the guide's performance chapter
//! (`docs/performance.md` in the source repository).
//!
//! # Panics
//!
//! Bad data is an [`Error`], never a panic: NaN or infinite values, mismatched lengths, empty
//! groups, out-of-range milestone positions, mask entries other than 0 and 1, invalid
//! configurations, results that overflow and sizes that cannot be allocated are all typed
//! errors. The crate panics only where the caller's code does or where an index is out of
//! range:
//!
//! - The accessors that take an index ([`RolloutBatch::group_trajectories`],
//!   [`RolloutBatch::trajectory_rows`], and `RecordBatch`'s
//!   `row_location` and `transition`) panic on an index past the end, like slice indexing;
//!   their docs say so.
//! - A panic in code the caller passes in (a milestone detector, the closure that builds each
//!   [`Transition`](milestone::Transition), a key's `Hash` or `Eq`) propagates to the caller,
//!   from a rayon worker too.
//! - As everywhere in Rust, running out of memory in an allocation the crate cannot size in
//!   advance aborts the process; outputs and row indices sized from the caller's claims are
//!   allocated fallibly and fail with an `Error`.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod batch;
pub mod diagnostics;
mod error;
pub mod estimator;
pub mod milestone;
#[cfg(feature = "serde")]
pub mod record;
mod stats;

mod hash;
// Fresh outputs backed by transparent huge pages (Linux).
mod huge_pages;
// Non-temporal stores for outputs larger than the cache (x86-64).
mod stream;

pub mod tensor;

pub use batch::{builder::BatchBuilder, RolloutBatch};
pub use error::{escape::Escaped, Error, Result};

/// The `ndarray` version in this crate's signatures, so callers name the same one.
pub use ndarray;
mod setters;

// Parallel chunks of independent groups and rows (the `rayon` feature).
mod parallel;

// The README's Rust example runs as a doctest, so the front page cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExample;
