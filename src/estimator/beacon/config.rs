//! BEACON's parameters, with the paper's and the release's presets: the flavour, which
//! rollouts form the segment baseline, and the constants of
//!
//! Â_{i,t} = w_traj · A^traj_i + λ · A^seg_{i,t},   r_t = R_ms · γ^(t_k − t),   A^traj = (R − μ)/(σ + ε)
//!
//! (R_ms [`milestone_reward`](BeaconConfig::milestone_reward), γ
//! [`segment_decay`](BeaconConfig::segment_decay), λ [`segment_weight`](BeaconConfig::segment_weight),
//! w_traj [`trajectory_weight`](BeaconConfig::trajectory_weight), ε [`std_eps`](BeaconConfig::std_eps)).

use crate::error::{Error, Range, Result};
use crate::stats::{NormMode, SingletonRule};

/// Which computation the estimator follows.
///
/// ```
/// use beacon_rl::estimator::{BeaconFlavour, NormMode};
/// let f = BeaconFlavour::Official { norm: NormMode::MeanStdNorm };
/// assert_ne!(f, BeaconFlavour::Paper);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum BeaconFlavour {
    /// The paper's equations: statistics over trajectories, segment baseline over G_k,
    /// unfinished segment A^seg = 0.
    Paper,
    /// The public code release: statistics over step rows, segment groups by (group, segment
    /// id) including unfinished rows, `norm` at both levels.
    Official {
        /// Normalisation at both levels (the release's `mode`).
        norm: NormMode,
    },
}

/// Which rollouts form the paper flavour's segment baseline b_k, and what the steps of an
/// unfinished segment get (see the module docs, "The completion blind spot").
///
/// ```
/// use beacon_rl::estimator::{BeaconConfig, SegmentBaseline};
/// assert_eq!(BeaconConfig::default().segment_baseline, SegmentBaseline::Completed);
/// let c = BeaconConfig::default().with_segment_baseline(SegmentBaseline::Entered);
/// assert_eq!(c.segment_baseline, SegmentBaseline::Entered);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum SegmentBaseline {
    /// The paper: b_k over G_k = { j : K_j ≥ k }, the rollouts that completed segment k; the
    /// steps of an unfinished segment get A^seg = 0.
    #[default]
    Completed,
    /// Completion credit: b_k over E_k, the rollouts with at least one step in segment k,
    /// where a rollout that entered segment k and did not finish it counts with shaped return
    /// 0; its unfinished steps get A^seg = 0 − b_k. Paper flavour only.
    Entered,
}

impl SegmentBaseline {
    /// True for the paper's [`Completed`](Self::Completed) (the default, which serde omits).
    #[cfg(feature = "serde")]
    pub(crate) fn is_completed(&self) -> bool {
        *self == Self::Completed
    }
}

/// BEACON parameters. Build from a preset and adjust fields; [`Beacon::new`](crate::estimator::Beacon::new) validates.
///
/// ```
/// use beacon_rl::estimator::{Beacon, BeaconConfig};
/// let mut cfg = BeaconConfig::default();
/// cfg.segment_decay = 0.9;
/// Beacon::new(cfg)?;
///
/// cfg.segment_decay = 1.5; // γ must be in [0, 1]
/// assert!(Beacon::new(cfg).is_err());
/// cfg.segment_decay = 0.9;
/// cfg.std_eps = 0.0;
/// assert!(matches!(Beacon::new(cfg), Err(beacon_rl::Error::InvalidConfig { name: "std_eps", .. })));
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
#[non_exhaustive]
pub struct BeaconConfig {
    /// Paper equations or the release's behaviour.
    pub flavour: BeaconFlavour,
    /// R_ms > 0: the shaped reward of a milestone step. The paper gives no value; the paper
    /// preset uses 1.0 (the scale of its R(τ) ∈ {0, 1}), the release 10.0.
    pub milestone_reward: f64,
    /// γ ∈ [0, 1]: temporal decay within a segment. Default 0.95.
    pub segment_decay: f64,
    /// λ ≥ 0: weight of the segment-level advantage. Default 1.0.
    pub segment_weight: f64,
    /// ≥ 0: weight of the trajectory-level advantage. Default 1.0 (0 = the paper's
    /// "w/o trajectory-level advantage" ablation).
    pub trajectory_weight: f64,
    /// ε > 0 added to σ. Default 1e-6.
    pub std_eps: f64,
    /// Trajectory term of a group with one trajectory (paper flavour; the release always
    /// passes the value through). Default [`SingletonRule::PassThrough`].
    pub singleton: SingletonRule,
    /// Paper flavour: which rollouts form b_k. Default [`SegmentBaseline::Completed`] (the
    /// paper); [`SegmentBaseline::Entered`] credits completing a segment against not
    /// completing it. Serde omits the default.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "SegmentBaseline::is_completed")
    )]
    pub segment_baseline: SegmentBaseline,
}

impl BeaconConfig {
    /// The public code release's defaults: R_ms = 10, γ = 0.95, w = 1, `mean_norm`. Its ALFWorld
    /// script sets γ = 0.9, w = 10: `BeaconConfig { segment_decay: 0.9, segment_weight: 10.0,
    /// ..BeaconConfig::official() }`.
    ///
    /// ```
    /// use beacon_rl::estimator::{BeaconConfig, BeaconFlavour, NormMode};
    /// let c = BeaconConfig::official();
    /// assert_eq!(c.flavour, BeaconFlavour::Official { norm: NormMode::MeanNorm });
    /// assert_eq!(c.milestone_reward, 10.0);
    /// ```
    pub fn official() -> Self {
        Self {
            flavour: BeaconFlavour::Official {
                norm: NormMode::MeanNorm,
            },
            milestone_reward: 10.0,
            ..Self::default()
        }
    }

    /// Checks every parameter's range.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the first parameter out of range: γ ∉ [0, 1], R_ms ≤ 0,
    /// λ < 0, trajectory weight < 0, ε ≤ 0, or any non-finite value; `segment_baseline`
    /// (value 1, for `entered`) with the official flavour, whose segment groups hold the
    /// unfinished rows already.
    pub(crate) fn validate(&self) -> Result<()> {
        Range::POSITIVE.check("milestone_reward", self.milestone_reward)?;
        Range::UNIT.check("segment_decay", self.segment_decay)?;
        Range::NON_NEGATIVE.check("segment_weight", self.segment_weight)?;
        Range::NON_NEGATIVE.check("trajectory_weight", self.trajectory_weight)?;
        Range::POSITIVE.check("std_eps", self.std_eps)?;
        if self.segment_baseline == SegmentBaseline::Entered && self.flavour != BeaconFlavour::Paper {
            return Err(Error::InvalidConfig {
                name: "segment_baseline",
                value: 1.0,
                expected: "completed with the official flavour (its segment groups include unfinished rows)",
            });
        }
        Ok(())
    }
}

impl Default for BeaconConfig {
    /// The paper's equations and hyperparameters: γ = 0.95, λ = 1 (its Table of
    /// hyperparameters), and R_ms = 1, ε = 1e-6, which the paper leaves open.
    ///
    /// ```
    /// use beacon_rl::estimator::{BeaconConfig, BeaconFlavour};
    /// let c = BeaconConfig::default();
    /// assert_eq!((c.flavour, c.milestone_reward, c.segment_decay), (BeaconFlavour::Paper, 1.0, 0.95));
    /// ```
    fn default() -> Self {
        Self {
            flavour: BeaconFlavour::Paper,
            milestone_reward: 1.0,
            segment_decay: 0.95,
            segment_weight: 1.0,
            trajectory_weight: 1.0,
            std_eps: 1e-6,
            singleton: SingletonRule::PassThrough,
            segment_baseline: SegmentBaseline::Completed,
        }
    }
}

crate::setters::with_setters! {
    BeaconConfig, "use beacon_rl::estimator::{BeaconConfig, BeaconFlavour, SegmentBaseline}; use beacon_rl::estimator::{NormMode, SingletonRule};", BeaconConfig::default();
    /// Sets the flavour (default [`BeaconFlavour::Paper`]; the presets set it).
    with_flavour(flavour: BeaconFlavour) = BeaconFlavour::Official { norm: NormMode::MeanNorm };
    /// Sets R_ms, the shaped reward of a milestone step (default 1.0, release 10.0; > 0).
    with_milestone_reward(milestone_reward: f64) = 10.0;
    /// Sets γ, the temporal decay within a segment (default 0.95; in [0, 1]).
    with_segment_decay(segment_decay: f64) = 0.9;
    /// Sets λ, the weight of the segment-level advantage (default 1.0; ≥ 0).
    with_segment_weight(segment_weight: f64) = 10.0;
    /// Sets the weight of the trajectory-level advantage (default 1.0; ≥ 0).
    with_trajectory_weight(trajectory_weight: f64) = 0.0;
    /// Sets ε added to σ (default 1e-6; > 0).
    with_std_eps(std_eps: f64) = 1e-8;
    /// Sets the trajectory term of a single-trajectory group (default
    /// [`SingletonRule::PassThrough`]).
    with_singleton(singleton: SingletonRule) = SingletonRule::Zero;
    /// Sets which rollouts form the paper flavour's segment baseline (default
    /// [`SegmentBaseline::Completed`], the paper).
    with_segment_baseline(segment_baseline: SegmentBaseline) = SegmentBaseline::Entered;
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimator::Beacon;

    #[test]
    fn config_validation_names_each_parameter() {
        type Edit = fn(&mut BeaconConfig);
        let cases: [(Edit, &str); 6] = [
            (|c| c.segment_decay = -0.1, "segment_decay"),
            (|c| c.segment_decay = f64::NAN, "segment_decay"),
            (|c| c.milestone_reward = 0.0, "milestone_reward"),
            (|c| c.segment_weight = -1.0, "segment_weight"),
            (|c| c.trajectory_weight = f64::INFINITY, "trajectory_weight"),
            (|c| c.std_eps = -1e-6, "std_eps"),
        ];
        for (edit, name) in cases {
            let mut c = BeaconConfig::default();
            edit(&mut c);
            match Beacon::new(c) {
                Err(Error::InvalidConfig { name: n, .. }) => assert_eq!(n, name),
                other => panic!("{name}: {other:?}"),
            }
        }
    }
}
