//! GiGPO's parameters: γ of the step returns R_t = r_t + γ·R_{t+1}, w in A = A_E + w·A_S,
//! the normalisation of both terms and ε, and the step grouping rule.

use crate::error::{Error, Range, Result};
use crate::stats::NormMode;

/// How rows of a task group are gathered into step groups (anchor states).
///
/// ```
/// use beacon_rl::estimator::StepGrouping;
/// let g = StepGrouping::Similarity { threshold: 0.95 };
/// assert_ne!(g, StepGrouping::Exact);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum StepGrouping {
    /// Identical anchors form a group (the peer's default, `enable_similarity=False`).
    #[default]
    Exact,
    /// Greedy clustering by difflib ratio against each cluster's first member
    /// (`enable_similarity=True`, `similarity_thresh`; the peer's default threshold is 0.95).
    /// Needs text anchors.
    Similarity {
        /// Minimum ratio to join a cluster, in (0, 1).
        threshold: f64,
    },
}

/// GiGPO parameters. Build with [`GigpoConfig::default()`](GigpoConfig::default) and the `with_*` setters, then
/// validate through [`Gigpo::new`](crate::estimator::Gigpo::new).
///
/// ```
/// use beacon_rl::estimator::{Gigpo, GigpoConfig, NormMode, StepGrouping};
/// let cfg = GigpoConfig::default()
///     .with_norm(NormMode::MeanStdNorm)
///     .with_grouping(StepGrouping::Similarity { threshold: 0.9 });
/// assert!(Gigpo::new(cfg).is_ok());
/// assert!(Gigpo::new(cfg.with_std_eps(0.0)).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct GigpoConfig {
    /// γ of the step returns `R_t = r_t + γ R_{t+1}`, in [0, 1] (verl's `algorithm.gamma`).
    pub step_decay: f64,
    /// w in `A = A_E + w · A_S`, finite and >= 0 (the peer's `step_advantage_w`).
    pub step_advantage_weight: f64,
    /// Normalization of both terms (the peer's `mode`).
    pub norm: NormMode,
    /// ε added to the std in [`NormMode::MeanStdNorm`], > 0 (the peer's `epsilon`).
    pub std_eps: f64,
    /// Step grouping rule.
    pub grouping: StepGrouping,
}

impl Default for GigpoConfig {
    /// verl-agent's GiGPO settings: γ = 0.95 (its GiGPO example scripts' `algorithm.gamma`),
    /// w = 1.0, `mean_norm`, ε = 1e-6, exact anchor grouping.
    ///
    /// ```
    /// use beacon_rl::estimator::{GigpoConfig, NormMode, StepGrouping};
    /// let cfg = GigpoConfig::default();
    /// assert_eq!(cfg.step_decay, 0.95);
    /// assert_eq!(cfg.step_advantage_weight, 1.0);
    /// assert_eq!(cfg.norm, NormMode::MeanNorm);
    /// assert_eq!(cfg.std_eps, 1e-6);
    /// assert_eq!(cfg.grouping, StepGrouping::Exact);
    /// ```
    fn default() -> Self {
        Self {
            step_decay: 0.95,
            step_advantage_weight: 1.0,
            norm: NormMode::MeanNorm,
            std_eps: 1e-6,
            grouping: StepGrouping::Exact,
        }
    }
}

impl GigpoConfig {
    /// Checks every parameter.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) naming the first bad parameter: `step_decay` outside [0, 1],
    /// `step_advantage_weight` negative or not finite, `std_eps` not > 0, or a similarity
    /// `threshold` outside (0, 1).
    pub(crate) fn validate(&self) -> Result<()> {
        Range::UNIT.check("step_decay", self.step_decay)?;
        Range::NON_NEGATIVE.check("step_advantage_weight", self.step_advantage_weight)?;
        Range::POSITIVE.check("std_eps", self.std_eps)?;
        if let StepGrouping::Similarity { threshold } = self.grouping {
            // The peer asserts 0 < similarity_thresh < 1.
            if !(threshold > 0.0 && threshold < 1.0) {
                return Err(Error::InvalidConfig {
                    name: "grouping.threshold",
                    value: threshold,
                    expected: "finite, in (0, 1)",
                });
            }
        }
        Ok(())
    }
}

crate::setters::with_setters! {
    GigpoConfig, "use beacon_rl::estimator::{GigpoConfig, StepGrouping}; use beacon_rl::estimator::NormMode;", GigpoConfig::default();
    /// Sets γ of the step returns (default 0.95; in [0, 1]).
    with_step_decay(step_decay: f64) = 1.0;
    /// Sets w, the weight of the step term (default 1.0; finite, ≥ 0).
    with_step_advantage_weight(step_advantage_weight: f64) = 0.5;
    /// Sets the normalization of both terms (default [`NormMode::MeanNorm`]).
    with_norm(norm: NormMode) = NormMode::MeanStdNorm;
    /// Sets ε added to σ (default 1e-6; > 0).
    with_std_eps(std_eps: f64) = 1e-8;
    /// Sets the step grouping (default [`StepGrouping::Exact`]).
    with_grouping(grouping: StepGrouping) = StepGrouping::Similarity { threshold: 0.9 };
}
