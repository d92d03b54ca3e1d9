//! Milestone discovery from rollouts alone: no score, no per-step reward, no subgoal list.

pub(super) mod baseline;
pub(super) mod config;
pub(super) mod discovery;
mod excursion;
mod feedback;
mod novelty;
mod region;
mod support;
mod text;
mod workspace;

use config::DiscoveryConfig;

use self::workspace::StepKeys;
