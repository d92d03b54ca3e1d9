//! BEACON: milestone-anchored dual-scale advantages (paper §3, Algorithm 1).

mod advantage;
pub(super) mod config;
pub(super) mod estimator;
mod partition;
mod shaping;

pub(crate) use advantage::BeaconScratch;
