//! GiGPO's parameters: γ of the step returns R_t = r_t + γ·R_{t+1}, w in A = A_E + w·A_S,
//! the normalisation of both terms and ε, and the step grouping rule.

use crate::error::{Error, Range, Result};
use crate::stats::NormMode;

/// How rows of a task group are gathered into step groups (anchor states).
///
/// ```
/// use beacon_rl::estimator::gigpo::StepGrouping;
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

/// GiGPO parameters. Build with [`GigpoConfig::verl_agent`] and the `with_*` setters, then
/// validate through [`Gigpo::new`] (or [`GigpoConfig::validate`]).
///
/// ```
/// use beacon_rl::estimator::gigpo::{GigpoConfig, StepGrouping};
/// use beacon_rl::NormMode;
/// let cfg = GigpoConfig::verl_agent()
///     .with_mode(NormMode::MeanStdNorm)
///     .with_grouping(StepGrouping::Similarity { threshold: 0.9 });
/// assert!(cfg.validate().is_ok());
/// assert!(cfg.with_std_eps(0.0).validate().is_err());
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
    /// Normalization of both terms.
    pub mode: NormMode,
    /// ε added to the std in [`NormMode::MeanStdNorm`], > 0 (the peer's `epsilon`).
    pub std_eps: f64,
    /// Step grouping rule.
    pub grouping: StepGrouping,
}

impl Default for GigpoConfig {
    /// [`GigpoConfig::verl_agent`].
    fn default() -> Self {
        Self::verl_agent()
    }
}

impl GigpoConfig {
    /// verl-agent's GiGPO settings: γ = 0.95 (its GiGPO example scripts' `algorithm.gamma`),
    /// w = 1.0, `mean_norm`, ε = 1e-6, exact anchor grouping.
    ///
    /// ```
    /// use beacon_rl::estimator::gigpo::{GigpoConfig, StepGrouping};
    /// use beacon_rl::NormMode;
    /// let cfg = GigpoConfig::verl_agent();
    /// assert_eq!(cfg.step_decay, 0.95);
    /// assert_eq!(cfg.step_advantage_weight, 1.0);
    /// assert_eq!(cfg.mode, NormMode::MeanNorm);
    /// assert_eq!(cfg.std_eps, 1e-6);
    /// assert_eq!(cfg.grouping, StepGrouping::Exact);
    /// ```
    pub fn verl_agent() -> Self {
        Self {
            step_decay: 0.95,
            step_advantage_weight: 1.0,
            mode: NormMode::MeanNorm,
            std_eps: 1e-6,
            grouping: StepGrouping::Exact,
        }
    }

    /// Sets γ (default 0.95).
    ///
    /// ```
    /// # use beacon_rl::estimator::gigpo::GigpoConfig;
    /// assert_eq!(GigpoConfig::verl_agent().with_step_decay(1.0).step_decay, 1.0);
    /// ```
    #[must_use]
    pub fn with_step_decay(mut self, step_decay: f64) -> Self {
        self.step_decay = step_decay;
        self
    }

    /// Sets w (default 1.0).
    ///
    /// ```
    /// # use beacon_rl::estimator::gigpo::GigpoConfig;
    /// assert_eq!(GigpoConfig::verl_agent().with_step_advantage_weight(0.5).step_advantage_weight, 0.5);
    /// ```
    #[must_use]
    pub fn with_step_advantage_weight(mut self, weight: f64) -> Self {
        self.step_advantage_weight = weight;
        self
    }

    /// Sets the normalization (default [`NormMode::MeanNorm`]).
    ///
    /// ```
    /// # use beacon_rl::{estimator::gigpo::GigpoConfig, NormMode};
    /// let cfg = GigpoConfig::verl_agent().with_mode(NormMode::MeanStdNorm);
    /// assert_eq!(cfg.mode, NormMode::MeanStdNorm);
    /// ```
    #[must_use]
    pub fn with_mode(mut self, mode: NormMode) -> Self {
        self.mode = mode;
        self
    }

    /// Sets ε (default 1e-6).
    ///
    /// ```
    /// # use beacon_rl::estimator::gigpo::GigpoConfig;
    /// assert_eq!(GigpoConfig::verl_agent().with_std_eps(1e-8).std_eps, 1e-8);
    /// ```
    #[must_use]
    pub fn with_std_eps(mut self, std_eps: f64) -> Self {
        self.std_eps = std_eps;
        self
    }

    /// Sets the step grouping (default [`StepGrouping::Exact`]).
    ///
    /// ```
    /// # use beacon_rl::estimator::gigpo::{GigpoConfig, StepGrouping};
    /// let cfg = GigpoConfig::verl_agent().with_grouping(StepGrouping::Similarity { threshold: 0.95 });
    /// assert!(matches!(cfg.grouping, StepGrouping::Similarity { .. }));
    /// ```
    #[must_use]
    pub fn with_grouping(mut self, grouping: StepGrouping) -> Self {
        self.grouping = grouping;
        self
    }

    /// Checks every parameter.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the first bad parameter: `step_decay` outside [0, 1],
    /// `step_advantage_weight` negative or not finite, `std_eps` not > 0, or a similarity
    /// `threshold` outside (0, 1).
    ///
    /// ```
    /// use beacon_rl::estimator::gigpo::{GigpoConfig, StepGrouping};
    /// use beacon_rl::Error;
    /// let err = GigpoConfig::verl_agent().with_step_decay(1.5).validate().unwrap_err();
    /// assert!(matches!(err, Error::InvalidConfig { name: "step_decay", .. }));
    /// let err = GigpoConfig::verl_agent()
    ///     .with_grouping(StepGrouping::Similarity { threshold: 1.0 })
    ///     .validate()
    ///     .unwrap_err();
    /// assert!(matches!(err, Error::InvalidConfig { name: "grouping.threshold", .. }));
    /// ```
    pub fn validate(&self) -> Result<()> {
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
