//! GiGPO: group-in-group policy optimization (verl-agent `gigpo/core_gigpo.py`,
//! `compute_gigpo_outcome_advantage`; verl's `adv_estimator = "gigpo"`).

mod advantage;
mod anchors;
pub(super) mod config;
pub(super) mod estimator;

pub(crate) use advantage::GigpoScratch;
