//! The registry of estimators by verl's `adv_estimator` name: [`EstimatorConfig`] parses,
//! lists, (de)serialises, validates and builds every estimator.

use super::gae::{Gae, GaeConfig};
use super::gpg::{Gpg, GpgConfig};
use super::grpo::{Gdpo, Grpo, GrpoConfig, GrpoPassk, GrpoVectorized};
use super::opo::Opo;
use super::optimal_baseline::{OptimalTokenBaseline, OptimalTokenBaselineConfig, TirOptimalTokenBaseline};
use super::reinforce::{ReinforcePlusPlus, ReinforcePlusPlusBaseline, ReinforcePlusPlusConfig};
use super::remax::Remax;
use super::rloo::{Rloo, RlooVectorized};
use super::*;
use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// The one table of estimator names. Each entry lists a variant, its parameters with the
/// default [`FromStr`] gives them, and its name; the enum (with its serde tags), `NAMES`,
/// `VERL_NAMES`, [`EstimatorConfig::name`] and [`FromStr`] are all generated from it, so they
/// cannot disagree.
macro_rules! registry {
    (
        $(#[$enum_attr:meta])*
        verl { $( $(#[$va:meta])* $v:ident $(($vt:ty = $vd:expr))? => $vn:literal; )* }
        crate_only { $( $(#[$ca:meta])* $c:ident $(($ct:ty = $cd:expr))? => $cn:literal; )* }
    ) => {
        $(#[$enum_attr])*
        #[derive(Debug, Clone, PartialEq)]
        #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
        #[cfg_attr(feature = "serde", serde(tag = "adv_estimator"))]
        #[non_exhaustive]
        pub enum EstimatorConfig {
            $( $(#[$va])* #[cfg_attr(feature = "serde", serde(rename = $vn))] $v $(($vt))?, )*
            $( $(#[$ca])* #[cfg_attr(feature = "serde", serde(rename = $cn))] $c $(($ct))?, )*
        }

        impl EstimatorConfig {
            /// verl's `adv_estimator` strings of every variant verl has, in declaration order.
            ///
            /// ```
            /// use beacon_rl::estimator::EstimatorConfig;
            /// for name in EstimatorConfig::VERL_NAMES {
            ///     assert_eq!(name.parse::<EstimatorConfig>()?.name(), *name);
            /// }
            /// # Ok::<(), beacon_rl::Error>(())
            /// ```
            pub const VERL_NAMES: &'static [&'static str] = &[$($vn),*];

            /// Every bare name [`FromStr`] accepts, in declaration order:
            /// [`VERL_NAMES`](Self::VERL_NAMES) plus `gigpo`, `beacon`, `beacon_official`,
            /// `step_reinforce`, `mt_grpo`, `turn_gae` and `beacon_ablation` (which also parses with an ablation,
            /// `beacon:milestone_dropout=0.5`).
            ///
            /// ```
            /// use beacon_rl::estimator::EstimatorConfig;
            /// for name in EstimatorConfig::NAMES {
            ///     assert_eq!(name.parse::<EstimatorConfig>()?.build()?.name(), *name);
            /// }
            /// # Ok::<(), beacon_rl::Error>(())
            /// ```
            pub const NAMES: &'static [&'static str] = &[$($vn,)* $($cn),*];

            /// verl's `adv_estimator` string (the serde tag, and what [`FromStr`] parses).
            ///
            /// ```
            /// use beacon_rl::estimator::reinforce::ReinforcePlusPlusConfig;
            /// use beacon_rl::estimator::EstimatorConfig;
            /// let c = EstimatorConfig::ReinforcePlusPlus(ReinforcePlusPlusConfig::verl());
            /// assert_eq!(c.name(), "reinforce_plus_plus");
            /// ```
            pub fn name(&self) -> &'static str {
                match self {
                    $( Self::$v { .. } => $vn, )*
                    $( Self::$c { .. } => $cn, )*
                }
            }

            /// The bare name's variant with its default parameters.
            fn from_name(name: &str) -> Option<Self> {
                Some(match name {
                    $( $vn => Self::$v $(({ let d: $vt = $vd; d }))?, )*
                    $( $cn => Self::$c $(({ let d: $ct = $cd; d }))?, )*
                    _ => return None,
                })
            }
        }
    };
}

registry! {
    /// An estimator by verl's `adv_estimator` name, with its parameters.
    ///
    /// Each variant's name (serde tag `adv_estimator`, [`name`](Self::name), [`FromStr`]) is
    /// verl's string; parameter structs default to verl's values. [`build`](Self::build)
    /// validates the parameters and returns a boxed estimator. Besides verl's estimators it
    /// holds the crate's own (`gigpo`, `beacon`, `beacon_official`, `beacon_ablation`) and the
    /// turn-level estimators (`step_reinforce`, `mt_grpo`, `turn_gae`). The
    /// enum is `#[non_exhaustive]`: more estimators may join it.
    ///
    /// ```
    /// use beacon_rl::estimator::gae::GaeConfig;
    /// use beacon_rl::estimator::grpo::{GrpoConfig, GrpoNorm};
    /// use beacon_rl::estimator::EstimatorConfig;
    ///
    /// let dr_grpo = EstimatorConfig::Grpo(GrpoConfig::verl().with_norm(GrpoNorm::MeanOnly));
    /// assert_eq!(dr_grpo.name(), "grpo");
    /// let est = dr_grpo.build()?;
    /// assert_eq!(est.name(), "grpo");
    ///
    /// let gae: EstimatorConfig = "gae".parse()?;
    /// assert_eq!(gae, EstimatorConfig::Gae(GaeConfig::verl()));
    ///
    /// // Invalid parameters are rejected when building.
    /// let bad = EstimatorConfig::Gae(GaeConfig::verl().with_discount(1.5));
    /// assert!(bad.build().is_err());
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    verl {
        /// `gae`: generalized advantage estimation with a critic ([`Gae`]).
        Gae(GaeConfig = GaeConfig::verl()) => "gae";
        /// `grpo`: group-normalized outcome reward ([`Grpo`]).
        Grpo(GrpoConfig = GrpoConfig::verl()) => "grpo";
        /// `grpo_vectorized`: verl's vectorized GRPO with float32 group statistics
        /// ([`GrpoVectorized`]).
        GrpoVectorized(GrpoConfig = GrpoConfig::verl()) => "grpo_vectorized";
        /// `grpo_passk`: only the best response of a group gets r_max − r_second
        /// ([`GrpoPassk`]).
        GrpoPassk(GrpoConfig = GrpoConfig::verl()) => "grpo_passk";
        /// `gdpo`: GRPO then batch whitening (single reward) ([`Gdpo`]).
        Gdpo(GrpoConfig = GrpoConfig::verl()) => "gdpo";
        /// `rloo`: leave-one-out baseline ([`Rloo`]).
        Rloo => "rloo";
        /// `rloo_vectorized`: verl's vectorized RLOO (singletons get 0) ([`RlooVectorized`]).
        RlooVectorized => "rloo_vectorized";
        /// `opo`: length-weighted group baseline ([`Opo`]).
        Opo => "opo";
        /// `gpg`: group mean baseline scaled by the batch's nonzero-score ratio ([`Gpg`]).
        Gpg(GpgConfig = GpgConfig::verl()) => "gpg";
        /// `reinforce_plus_plus`: discounted token returns, batch-whitened
        /// ([`ReinforcePlusPlus`]).
        ReinforcePlusPlus(ReinforcePlusPlusConfig = ReinforcePlusPlusConfig::verl()) => "reinforce_plus_plus";
        /// `reinforce_plus_plus_baseline`: group mean baseline, batch-whitened
        /// ([`ReinforcePlusPlusBaseline`]).
        ReinforcePlusPlusBaseline => "reinforce_plus_plus_baseline";
        /// `remax`: reward-to-go minus a per-row (greedy) baseline ([`Remax`]).
        Remax => "remax";
        /// `optimal_token_baseline`: per-position variance-weighted group baseline
        /// ([`OptimalTokenBaseline`]).
        OptimalTokenBaseline(OptimalTokenBaselineConfig = OptimalTokenBaselineConfig::verl()) => "optimal_token_baseline";
        /// `tir_optimal_token_baseline`: the same over each row's generated tokens only
        /// ([`TirOptimalTokenBaseline`]).
        TirOptimalTokenBaseline(OptimalTokenBaselineConfig = OptimalTokenBaselineConfig::verl()) => "tir_optimal_token_baseline";
    }
    crate_only {
        /// `gigpo`: episode plus anchor-state step advantages, verl-agent's GiGPO
        /// ([`Gigpo`](gigpo::Gigpo)). Omitted fields take [`GigpoConfig::verl_agent`](gigpo::GigpoConfig::verl_agent).
        Gigpo(gigpo::GigpoConfig = gigpo::GigpoConfig::verl_agent()) => "gigpo";
        /// `beacon`: BEACON, the paper's equations ([`Beacon`](beacon::Beacon)). Omitted fields take
        /// [`BeaconConfig::paper`](beacon::BeaconConfig::paper); the flavour must be `paper`.
        #[cfg_attr(feature = "serde", serde(deserialize_with = "deserialize_beacon_paper"))]
        Beacon(beacon::BeaconConfig = beacon::BeaconConfig::paper()) => "beacon";
        /// `beacon_official`: BEACON as the paper's code release computes it. Omitted fields take
        /// [`BeaconConfig::official`](beacon::BeaconConfig::official); the flavour must be
        /// `official`.
        #[cfg_attr(feature = "serde", serde(deserialize_with = "deserialize_beacon_official"))]
        BeaconOfficial(beacon::BeaconConfig = beacon::BeaconConfig::official()) => "beacon_official";
        /// `beacon_ablation`: a row of the paper's Table 3 (BEACON under an
        /// [`Ablation`](crate::ablation::Ablation)), built as
        /// [`BeaconAblation`](crate::ablation::BeaconAblation). Parses from
        /// `beacon:ABLATION[,seed=N]` or `beacon_official:ABLATION[,seed=N]` (e.g.
        /// `beacon:milestone_dropout=0.5`); bare `beacon_ablation` is the paper's BEACON unablated.
        BeaconAblation(crate::ablation::BeaconAblationConfig = crate::ablation::BeaconAblationConfig::default()) => "beacon_ablation";
        /// `step_reinforce`: discounted per-turn returns normalised over turns, as ROLL runs
        /// them ([`StepReinforce`](step_reinforce::StepReinforce)). Omitted fields take
        /// [`StepReinforceConfig::roll`](step_reinforce::StepReinforceConfig::roll).
        StepReinforce(step_reinforce::StepReinforceConfig = step_reinforce::StepReinforceConfig::roll()) => "step_reinforce";
        /// `mt_grpo`: multi-turn GRPO with turn-level advantages ([`MtGrpo`](mt_grpo::MtGrpo)).
        /// Omitted fields take [`MtGrpoConfig::authors`](mt_grpo::MtGrpoConfig::authors).
        MtGrpo(mt_grpo::MtGrpoConfig = mt_grpo::MtGrpoConfig::authors()) => "mt_grpo";
        /// `turn_gae`: GAE over one critic value per turn ([`TurnGae`](turn_gae::TurnGae)).
        /// Omitted fields take [`TurnGaeConfig::verl`](turn_gae::TurnGaeConfig::verl).
        TurnGae(turn_gae::TurnGaeConfig = turn_gae::TurnGaeConfig::verl()) => "turn_gae";
        /// `tree_grpo`: Tree-GRPO's prompt and tree groups ([`TreeGrpo`](TreeGrpo)).
        /// Omitted fields take [`TreeGrpoConfig::authors`](TreeGrpoConfig::authors).
        TreeGrpo(TreeGrpoConfig = TreeGrpoConfig::authors()) => "tree_grpo";
    }
}

#[cfg(feature = "serde")]
fn deserialize_beacon_paper<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<beacon::BeaconConfig, D::Error> {
    beacon::deserialize_over_preset(beacon::BeaconConfig::paper(), d)
}

#[cfg(feature = "serde")]
fn deserialize_beacon_official<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<beacon::BeaconConfig, D::Error> {
    beacon::deserialize_over_preset(beacon::BeaconConfig::official(), d)
}

impl EstimatorConfig {
    /// Checks the parameters without building.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the first parameter out of range;
    /// [`Error::FlavourMismatch`] when `Beacon` holds an official-flavour config or
    /// `BeaconOfficial` a paper-flavour one.
    ///
    /// ```
    /// use beacon_rl::estimator::gpg::GpgConfig;
    /// use beacon_rl::estimator::EstimatorConfig;
    /// assert!(EstimatorConfig::Gpg(GpgConfig::verl().with_f_norm(0.0)).validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<()> {
        match self {
            Self::Gae(c) => c.validate(),
            Self::Grpo(c) | Self::GrpoVectorized(c) | Self::GrpoPassk(c) | Self::Gdpo(c) => c.validate(),
            Self::Gpg(c) => c.validate(),
            Self::ReinforcePlusPlus(c) => c.validate(),
            Self::OptimalTokenBaseline(c) | Self::TirOptimalTokenBaseline(c) => c.validate(),
            Self::Gigpo(c) => c.validate(),
            Self::Beacon(c) | Self::BeaconOfficial(c) => {
                let official = matches!(c.flavour, beacon::BeaconFlavour::Official { .. });
                if official != matches!(self, Self::BeaconOfficial(_)) {
                    return Err(Error::FlavourMismatch {
                        estimator: self.name(),
                    });
                }
                c.validate()
            }
            Self::Rloo | Self::RlooVectorized | Self::Opo | Self::ReinforcePlusPlusBaseline | Self::Remax => {
                Ok(())
            }
            Self::BeaconAblation(c) => c.validate(),
            Self::StepReinforce(c) => c.validate(),
            Self::MtGrpo(c) => c.validate(),
            Self::TurnGae(c) => c.validate(),
            Self::TreeGrpo(c) => c.validate(),
        }
    }

    /// Validates the parameters and builds the estimator.
    ///
    /// # Errors
    /// As [`validate`](Self::validate).
    ///
    /// ```
    /// use beacon_rl::estimator::EstimatorConfig;
    /// let est = "rloo".parse::<EstimatorConfig>()?.build()?;
    /// assert_eq!(est.name(), "rloo");
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn build(&self) -> Result<Box<dyn AdvantageEstimator>> {
        Ok(match self {
            Self::Gae(c) => Box::new(Gae::new(*c)?),
            Self::Grpo(c) => Box::new(Grpo::new(*c)?),
            Self::GrpoVectorized(c) => Box::new(GrpoVectorized::new(*c)?),
            Self::GrpoPassk(c) => Box::new(GrpoPassk::new(*c)?),
            Self::Gdpo(c) => Box::new(Gdpo::new(*c)?),
            Self::Rloo => Box::new(Rloo),
            Self::RlooVectorized => Box::new(RlooVectorized),
            Self::Opo => Box::new(Opo),
            Self::Gpg(c) => Box::new(Gpg::new(*c)?),
            Self::ReinforcePlusPlus(c) => Box::new(ReinforcePlusPlus::new(*c)?),
            Self::ReinforcePlusPlusBaseline => Box::new(ReinforcePlusPlusBaseline),
            Self::Remax => Box::new(Remax),
            Self::OptimalTokenBaseline(c) => Box::new(OptimalTokenBaseline::new(*c)?),
            Self::TirOptimalTokenBaseline(c) => Box::new(TirOptimalTokenBaseline::new(*c)?),
            Self::Gigpo(c) => Box::new(gigpo::Gigpo::new(*c)?),
            Self::Beacon(c) | Self::BeaconOfficial(c) => {
                self.validate()?;
                Box::new(beacon::Beacon::new(*c)?)
            }
            Self::BeaconAblation(c) => Box::new(crate::ablation::BeaconAblation::new(*c)?),
            Self::StepReinforce(c) => Box::new(step_reinforce::StepReinforce::new(*c)?),
            Self::MtGrpo(c) => Box::new(mt_grpo::MtGrpo::new(*c)?),
            Self::TurnGae(c) => Box::new(turn_gae::TurnGae::new(*c)?),
            Self::TreeGrpo(c) => Box::new(TreeGrpo::new(*c)?),
        })
    }
}

impl FromStr for EstimatorConfig {
    type Err = Error;

    /// Parses a bare verl `adv_estimator` name into the estimator with verl's default
    /// parameters, a Table 3 row (`beacon:ABLATION[,seed=N]`), or the preset
    /// `beacon_completion`: `beacon` with
    /// [`SegmentBaseline::Entered`](beacon::SegmentBaseline::Entered) (its name and serde tag
    /// stay `beacon`).
    ///
    /// # Errors
    /// [`Error::UnknownEstimator`] for a name that is not in [`EstimatorConfig::NAMES`].
    ///
    /// ```
    /// use beacon_rl::estimator::beacon::{BeaconConfig, SegmentBaseline};
    /// use beacon_rl::estimator::EstimatorConfig;
    /// let c: EstimatorConfig = "beacon_completion".parse()?;
    /// let want = BeaconConfig::paper().with_segment_baseline(SegmentBaseline::Entered);
    /// assert_eq!(c, EstimatorConfig::Beacon(want));
    /// assert_eq!(c.build()?.name(), "beacon");
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    fn from_str(s: &str) -> Result<Self> {
        if let Some(c) = Self::from_name(s) {
            return Ok(c);
        }
        if s == "beacon_completion" {
            let c = beacon::BeaconConfig::paper().with_segment_baseline(beacon::SegmentBaseline::Entered);
            return Ok(Self::Beacon(c));
        }
        if s.starts_with("beacon:") || s.starts_with("beacon_official:") {
            return Ok(Self::BeaconAblation(s.parse()?));
        }
        Err(Error::UnknownEstimator(s.to_string()))
    }
}

impl fmt::Display for EstimatorConfig {
    /// Writes verl's `adv_estimator` string.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_is_typed() {
        for name in EstimatorConfig::VERL_NAMES {
            let c: EstimatorConfig = name.parse().unwrap();
            assert_eq!(c.name(), *name);
            assert_eq!(c.to_string(), *name);
            assert_eq!(c.build().unwrap().name(), *name);
        }
        assert_eq!(
            "ppo".parse::<EstimatorConfig>(),
            Err(Error::UnknownEstimator("ppo".into()))
        );
    }

    #[test]
    fn the_registry_tables_agree() {
        // NAMES = VERL_NAMES followed by the crate's own, no duplicates.
        assert_eq!(
            &EstimatorConfig::NAMES[..EstimatorConfig::VERL_NAMES.len()],
            EstimatorConfig::VERL_NAMES
        );
        assert_eq!(EstimatorConfig::NAMES.len(), 22);
        let unique: std::collections::BTreeSet<_> = EstimatorConfig::NAMES.iter().collect();
        assert_eq!(unique.len(), EstimatorConfig::NAMES.len());
        // Every name parses to the variant whose name(), Display and built estimator say it.
        for name in EstimatorConfig::NAMES {
            let c: EstimatorConfig = name.parse().unwrap();
            assert_eq!((c.name(), c.to_string().as_str()), (*name, *name));
            assert_eq!(c.build().unwrap().name(), *name);
        }
        // verl's names are verl's (spot checks written out, not read from the table).
        for name in [
            "gae",
            "grpo",
            "rloo_vectorized",
            "reinforce_plus_plus_baseline",
            "tir_optimal_token_baseline",
        ] {
            assert!(EstimatorConfig::VERL_NAMES.contains(&name), "{name}");
        }
        for name in ["gigpo", "beacon", "beacon_official", "beacon_ablation"] {
            assert!(!EstimatorConfig::VERL_NAMES.contains(&name), "{name}");
        }
    }

    #[test]
    fn beacon_names_need_their_flavour() {
        let mismatch = EstimatorConfig::BeaconOfficial(beacon::BeaconConfig::paper());
        assert_eq!(
            mismatch.build().err(),
            Some(Error::FlavourMismatch {
                estimator: "beacon_official"
            })
        );
        let mismatch = EstimatorConfig::Beacon(beacon::BeaconConfig::official());
        assert!(matches!(mismatch.validate(), Err(Error::FlavourMismatch { .. })));
    }

    #[cfg(feature = "serde")]
    #[test]
    fn serde_beacon_official_defaults_to_the_release() {
        let c: EstimatorConfig =
            serde_json::from_str(r#"{"adv_estimator":"beacon_official","segment_weight":10.0}"#).unwrap();
        let mut want = beacon::BeaconConfig::official();
        want.segment_weight = 10.0;
        assert_eq!(c, EstimatorConfig::BeaconOfficial(want));
        let c: EstimatorConfig =
            serde_json::from_str(r#"{"adv_estimator":"gigpo","grouping":{"similarity":{"threshold":0.9}}}"#)
                .unwrap();
        assert_eq!(c.build().unwrap().name(), "gigpo");
        assert!(
            serde_json::from_str::<EstimatorConfig>(r#"{"adv_estimator":"beacon","gamma":0.9}"#).is_err()
        );
    }

    #[cfg(feature = "serde")]
    #[test]
    fn serde_uses_verl_names_and_defaults() {
        use crate::estimator::grpo::GrpoNorm;
        for name in EstimatorConfig::NAMES {
            let c: EstimatorConfig = name.parse().unwrap();
            let json = serde_json::to_string(&c).unwrap();
            assert!(json.contains(&format!("\"adv_estimator\":\"{name}\"")), "{json}");
            let back: EstimatorConfig = serde_json::from_str(&json).unwrap();
            assert_eq!(back, c);
            // Parameters omitted from the JSON take verl's defaults.
            let bare: EstimatorConfig =
                serde_json::from_str(&format!("{{\"adv_estimator\":\"{name}\"}}")).unwrap();
            assert_eq!(bare, c);
        }
        let dr: EstimatorConfig =
            serde_json::from_str(r#"{"adv_estimator":"grpo","norm":"mean_only","std_eps":1e-5}"#).unwrap();
        assert_eq!(
            dr,
            EstimatorConfig::Grpo(GrpoConfig {
                std_eps: 1e-5,
                norm: GrpoNorm::MeanOnly,
                ..GrpoConfig::verl()
            })
        );
    }
}
