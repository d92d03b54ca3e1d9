//! [`DiagnosticsConfig`]: the thresholds every metric shares, validated once.

use crate::error::Range;
use crate::error::Result;

/// Thresholds of the diagnostics. Build with [`Default`] and the `with_*` setters;
/// [`Diagnostics::new`](super::Diagnostics::new) validates.
///
/// ```
/// use beacon_rl::diagnostics::{Diagnostics, DiagnosticsConfig};
/// use beacon_rl::RolloutBatch;
/// let mut cfg = DiagnosticsConfig::default();
/// assert_eq!((cfg.zero_threshold, cfg.success_threshold), (1e-6, 0.0));
/// cfg.zero_threshold = 0.0; // must be > 0
/// let batch = RolloutBatch::from_blocks(1, &[1], vec![1.0])?;
/// assert!(Diagnostics::new(&batch, &[0], &[0], &[false], cfg).is_err());
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct DiagnosticsConfig {
    /// τ > 0: a step with |A| < τ counts as zero advantage in every metric. Default 1e-6.
    pub zero_threshold: f64,
    /// A trajectory is a full success when its terminal reward is strictly greater than this
    /// (finite). Default 0.0. Ignored after [`Diagnostics::with_success_flags`](super::Diagnostics::with_success_flags).
    pub success_threshold: f64,
}

impl Default for DiagnosticsConfig {
    /// τ = 1e-6, success when R > 0.
    fn default() -> Self {
        Self {
            zero_threshold: 1e-6,
            success_threshold: 0.0,
        }
    }
}

crate::setters::with_setters! {
    DiagnosticsConfig, "use beacon_rl::diagnostics::DiagnosticsConfig;", DiagnosticsConfig::default();
    /// Sets τ: |A| < τ counts as zero advantage (default 1e-6; finite, > 0).
    with_zero_threshold(zero_threshold: f64) = 1e-3;
    /// Sets the success threshold on the terminal reward (default 0.0; finite).
    with_success_threshold(success_threshold: f64) = 0.5;
}

const FINITE: Range = Range {
    expected: "finite",
    ok: f64::is_finite,
};

impl DiagnosticsConfig {
    /// Checks both thresholds.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) when `zero_threshold` is not finite and > 0, or
    /// `success_threshold` is not finite.
    pub(crate) fn validate(&self) -> Result<()> {
        Range::POSITIVE.check("zero_threshold", self.zero_threshold)?;
        FINITE.check("success_threshold", self.success_threshold)?;
        Ok(())
    }
}
