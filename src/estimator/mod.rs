//! Advantage estimators: BEACON and the baselines it is compared against.
pub mod beacon;
pub mod gigpo;
