//! A small, deterministic training testbed for beacon-rl: does an estimator's credit train a
//! policy better, and when?
//!
//! The paper's claims are about training: BEACON beats GRPO and GiGPO on long-horizon tasks, the
//! gap grows with the horizon, and its Table 3 ranks the ablations. This crate trains a tabular
//! softmax policy with each estimator on environments built to the paper's assumptions, fast
//! enough to run in its own tests (`testbed/tests/testbed.rs`) and in a sweep
//! (`cargo run -p beacon-rl-testbed --release --example testbed`).
//!
//! One flat crate (its files split it by role and are private), every item at
//! `beacon_rl_testbed::*`:
//!
//! - environments: [`KeyChain`], K locked rooms with ordered keys and doors, distractors, undo
//!   actions, a budget H = 4K, sparse reward, a milestone signal, repeated observations, and
//!   its decoy variant; every step's action and observation is also a short text
//!   ([`EpisodeState`], [`KeyChainStep`]).
//! - the policy: [`TabularPolicy`], π(a | o) = softmax(θ(o)), REINFORCE updates.
//! - milestones: [`MilestoneSource`]: the environment's signal, its real doors only (the decoy
//!   not flagged), none, or a caller's [`MilestoneLabeler`] over the episodes' text
//!   ([`EpisodeText`], [`StepText`]) and success.
//! - methods: [`Method`], the compared methods by name.
//! - credit: [`Credit`] (with [`CreditColumns`]), the *only* code that calls the estimators
//!   (port it when the estimator interface changes).
//! - the trainer: [`train`] ([`TrainerConfig`], [`AdvantageScale`], [`TrainingRun`]), the loop,
//!   then the held-out evaluation of the trained policy on fresh tasks and action draws,
//!   greedy and sampling ([`TrainingRun::heldout_greedy`], [`TrainingRun::heldout_sampling`]);
//!   [`random_policy_success`].
//! - metrics: [`final_success`] (mean success over the last tenth of the iterations),
//!   [`iterations_to_half`] (first iteration whose trailing 5-iteration mean reaches 0.5),
//!   [`auc`] (mean success over all iterations), [`mean`], [`std_dev`], Kendall's τ
//!   ([`kendall_tau`]) against the paper's Table 3 ([`PAPER_TABLE3_ALFWORLD`],
//!   [`PAPER_TABLE3_WEBSHOP`]).
//!
//! # Why a crate of its own
//!
//! The testbed is the library's reference training loop and its regression test of the claim
//! "BEACON's credit trains better", but it is a *user* of the library, not part of it: it
//! reaches the estimators through the public API only (exactly as a trainer would), so the
//! library's surface holds only what a trainer needs. It lives in the same workspace
//! (`testbed/`), is tested with the library (`cargo test -p beacon-rl-testbed`, run by CI) and
//! is not published.
//!
//! # One training iteration
//!
//! For each of `tasks_per_iteration` random tasks, G episodes run under the current policy; the
//! milestone source labels each step; [`Credit::assign`] builds a [`RolloutBatch`] (rows =
//! steps, verl-agent's layout) and calls the method's estimator; the advantages are scaled
//! ([`AdvantageScale`]) and each step (o, a, Â) adds Â·(e_a − π(·|o)) to θ(o), divided by the
//! batch's step count:
//!
//! θ(o) ← θ(o) + η/N · Σ_{steps (o, a, Â)} Â · (e_a − π(· | o)).
//!
//! ```
//! use beacon_rl_testbed::{auc, train, KeyChain, Method, MilestoneSource, TrainerConfig};
//! let env = KeyChain::new(3, 4)?;
//! let config = TrainerConfig::default().with_iterations(40);
//! let beacon = train(&env, Method::Beacon, &mut MilestoneSource::Env, &config)?;
//! let grpo = train(&env, Method::Grpo, &mut MilestoneSource::Env, &config)?;
//! println!("AUC beacon {:.2} grpo {:.2}", auc(&beacon.success), auc(&grpo.success));
//! # Ok::<(), beacon_rl::Error>(())
//! ```
//!
//! [`RolloutBatch`]: beacon_rl::RolloutBatch
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod credit;
mod env;
mod method;
mod metrics;
mod milestones;
mod policy;
mod rng;
mod setters;
mod trainer;

pub use credit::{Credit, CreditColumns};
pub use env::{EpisodeState, KeyChain, KeyChainStep};
pub use method::Method;
pub use metrics::{
    auc, final_success, iterations_to_half, kendall_tau, mean, std_dev, PAPER_TABLE3_ALFWORLD,
    PAPER_TABLE3_WEBSHOP,
};
pub use milestones::{EpisodeText, MilestoneLabeler, MilestoneSource, StepText};
pub use policy::TabularPolicy;
pub use trainer::{random_policy_success, train, AdvantageScale, TrainerConfig, TrainingRun};
