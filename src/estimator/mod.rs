//! Advantage estimators.
pub mod beacon;
