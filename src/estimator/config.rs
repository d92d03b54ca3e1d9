//! The registry of estimators by verl's `adv_estimator` name: [`EstimatorConfig`] parses,
//! lists, (de)serialises, validates and builds every estimator, in one grammar (see
//! [`EstimatorConfig`]'s docs; the key tables are in `keys.rs`).

use super::empg::{Empg, EmpgConfig};
use super::gae::{Gae, GaeConfig};
use super::gpg::{Gpg, GpgConfig};
use super::grpo::{Gdpo, Grpo, GrpoConfig, GrpoPassk, GrpoVectorized};
use super::keys::{self, NoKeys, Out, Raw};
use super::opo::Opo;
use super::optimal_baseline::{OptimalTokenBaseline, OptimalTokenBaselineConfig, TirOptimalTokenBaseline};
use super::reinforce::{ReinforcePlusPlus, ReinforcePlusPlusBaseline, ReinforcePlusPlusConfig};
use super::remax::Remax;
use super::rloo::{Rloo, RlooVectorized};
use super::tree_grpo::{TreeGrpo, TreeGrpoConfig};
use super::{ablation, mt_grpo, step_reinforce, turn_gae};
use super::{Ablation, AdvantageEstimator, BeaconAblationConfig};
use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// The one table of estimator names. Each entry lists a variant, its parameters with the
/// default a bare name gives them, and its name; the enum, `NAMES`, `VERL_NAMES`,
/// [`EstimatorConfig::name`] and the key handling of every variant but BEACON's are generated
/// from it, so they cannot disagree. BEACON's two variants are written out below the table.
macro_rules! registry {
    (
        $(#[$enum_attr:meta])*
        verl { $( $(#[$va:meta])* $v:ident $(($vt:ty = $vd:expr))? => $vn:literal; )* }
        crate_only { $( $(#[$ca:meta])* $c:ident $(($ct:ty = $cd:expr))? => $cn:literal; )* }
    ) => {
        $(#[$enum_attr])*
        #[derive(Debug, Clone, PartialEq)]
        #[non_exhaustive]
        pub enum EstimatorConfig {
            $( $(#[$va])* $v $(($vt))?, )*
            /// `beacon` (paper flavour) or `beacon_official` (the release's), after the config's
            /// [`flavour`](super::BeaconConfig::flavour) ([`Beacon`](super::Beacon)). The bare
            /// names give [`BeaconConfig::default`](super::BeaconConfig::default) (the paper) and
            /// [`BeaconConfig::official`](super::BeaconConfig::official).
            Beacon(super::BeaconConfig),
            /// BEACON under a row of the paper's Table 3: `beacon` or `beacon_official` with the
            /// keys `ablation` and `seed` ([`BeaconAblationConfig`]).
            BeaconAblation(BeaconAblationConfig),
            $( $(#[$ca])* $c $(($ct))?, )*
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

            /// Every name the grammar accepts, in declaration order:
            /// [`VERL_NAMES`](Self::VERL_NAMES), `beacon`, `beacon_official`, then the crate's
            /// other estimators.
            ///
            /// ```
            /// use beacon_rl::estimator::EstimatorConfig;
            /// for name in EstimatorConfig::NAMES {
            ///     assert_eq!(name.parse::<EstimatorConfig>()?.build()?.name(), *name);
            /// }
            /// # Ok::<(), beacon_rl::Error>(())
            /// ```
            pub const NAMES: &'static [&'static str] = &[$($vn,)* "beacon", "beacon_official", $($cn),*];

            /// The estimator's name: the serde tag `adv_estimator`, and what [`Display`](fmt::Display)
            /// writes before the keys. BEACON's follows the flavour.
            ///
            /// ```
            /// use beacon_rl::estimator::{BeaconConfig, EstimatorConfig};
            /// assert_eq!(EstimatorConfig::Beacon(BeaconConfig::official()).name(), "beacon_official");
            /// ```
            pub fn name(&self) -> &'static str {
                match self {
                    $( Self::$v { .. } => $vn, )*
                    Self::Beacon(c) => beacon_name(c),
                    Self::BeaconAblation(c) => beacon_name(&c.base),
                    $( Self::$c { .. } => $cn, )*
                }
            }

            /// The variant `name` names, its defaults overridden by `pairs`; None for BEACON's
            /// names and unknown ones.
            fn from_table(name: &str, pairs: &[(String, Raw)]) -> Option<Result<Self>> {
                Some(match name {
                    $( $vn => registry!(@from $v, $vn, pairs $(, $vt, $vd)?), )*
                    $( $cn => registry!(@from $c, $cn, pairs $(, $ct, $cd)?), )*
                    _ => return None,
                })
            }

            /// The keys of the variant (all, or those that differ from its defaults).
            fn pairs(&self, all: bool) -> Vec<(&'static str, Out)> {
                match self {
                    $( registry!(@pat $v, c $(, $vt)?) => registry!(@pairs c, all $(, $vt, $vd)?), )*
                    Self::Beacon(c) => keys::pairs_of(c, (!all).then(|| beacon_preset(c)).as_ref()),
                    Self::BeaconAblation(c) => ablation_pairs(c, all),
                    $( registry!(@pat $c, c $(, $ct)?) => registry!(@pairs c, all $(, $ct, $cd)?), )*
                }
            }
        }
    };
    (@from $v:ident, $n:literal, $pairs:ident) => {
        keys::apply(&mut NoKeys, $n, $pairs).map(|()| Self::$v)
    };
    (@from $v:ident, $n:literal, $pairs:ident, $t:ty, $d:expr) => {{
        let mut c: $t = $d;
        keys::apply(&mut c, $n, $pairs).map(|()| Self::$v(c))
    }};
    (@pat $v:ident, $c:ident) => { Self::$v };
    (@pat $v:ident, $c:ident, $t:ty) => { Self::$v($c) };
    (@pairs $c:ident, $all:ident) => { Vec::new() };
    (@pairs $c:ident, $all:ident, $t:ty, $d:expr) => {{
        let d: $t = $d;
        keys::pairs_of($c, (!$all).then_some(&d))
    }};
}

registry! {
    /// An estimator by name, with its parameters: one grammar for `FromStr`, `Display`, serde,
    /// the command line and the Python package.
    ///
    /// The string form is `name` or `name:key=value,key=value`. The name is verl's
    /// `adv_estimator` string (or the crate's, [`NAMES`](Self::NAMES)); the keys are the fields
    /// of the variant's config by their serde names, and a value is spelled as serde spells it,
    /// an enum variant with fields as `variant(field=value)` (serde's
    /// `{"variant": {"field": value}}`). Omitted keys keep the name's defaults (verl's values,
    /// or the preset the variant's docs name). [`Display`](fmt::Display) writes the name and the
    /// keys that differ from its defaults, so it parses back to the same config. Serde writes
    /// `{"adv_estimator": name, key: value, ...}` with every key and reads the same keys as the
    /// string form. An unknown name or key is an error listing the valid ones; a value that does
    /// not parse names its key. Ranges are checked by [`build`](Self::build).
    ///
    /// BEACON's flavour lives in its config: `beacon` is the paper preset and `beacon_official`
    /// the release's, and a config prints under the name of its flavour. The paper's Table 3
    /// ablations are the keys `ablation` and `seed` of `beacon`.
    ///
    /// ```
    /// use beacon_rl::estimator::{BeaconConfig, EstimatorConfig, GrpoConfig, NormMode};
    ///
    /// let c: EstimatorConfig = "beacon:segment_decay=0.9".parse()?;
    /// assert_eq!(c, EstimatorConfig::Beacon(BeaconConfig::default().with_segment_decay(0.9)));
    /// assert_eq!(c.to_string(), "beacon:segment_decay=0.9");
    ///
    /// let official = EstimatorConfig::Beacon(BeaconConfig::official());
    /// assert_eq!(official, "beacon_official".parse()?);
    /// assert_eq!(official.build()?.name(), "beacon_official");
    ///
    /// let dr_grpo = EstimatorConfig::Grpo(GrpoConfig::default().with_norm(NormMode::MeanNorm));
    /// assert_eq!(dr_grpo.to_string(), "grpo:norm=mean_norm");
    ///
    /// let err = "beacon:gamma=0.9".parse::<EstimatorConfig>().unwrap_err();
    /// assert!(err.to_string().contains("its keys: flavour, milestone_reward, segment_decay"));
    /// // Out-of-range values are rejected when building.
    /// assert!("gae:discount=1.5".parse::<EstimatorConfig>()?.build().is_err());
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    verl {
        /// `gae`: generalized advantage estimation with a critic; reads `token_level_rewards`,
        /// `response_mask` and `values`, writes returns.
        Gae(GaeConfig = GaeConfig::default()) => "gae";
        /// `grpo`: group-normalized outcome reward; reads `token_level_rewards` and
        /// `response_mask` (or step rows, [`estimate_steps_into`](AdvantageEstimator::estimate_steps_into)).
        Grpo(GrpoConfig = GrpoConfig::default()) => "grpo";
        /// `grpo_vectorized`: verl's vectorized GRPO with float32 group statistics
        /// (verl's `compute_grpo_vectorized_outcome_advantage`).
        GrpoVectorized(GrpoConfig = GrpoConfig::default()) => "grpo_vectorized";
        /// `grpo_passk`: only the best response of a group gets r_max − r_second
        /// (verl's `compute_grpo_passk_outcome_advantage`).
        GrpoPassk(GrpoConfig = GrpoConfig::default()) => "grpo_passk";
        /// `gdpo`: GRPO then batch whitening (single reward; verl's
        /// `compute_gdpo_outcome_advantage`).
        Gdpo(GrpoConfig = GrpoConfig::default()) => "gdpo";
        /// `rloo`: leave-one-out baseline; reads `token_level_rewards` and `response_mask`.
        Rloo => "rloo";
        /// `rloo_vectorized`: verl's vectorized RLOO (singletons get 0).
        RlooVectorized => "rloo_vectorized";
        /// `opo`: length-weighted group baseline; reads `token_level_rewards` and `response_mask`.
        Opo => "opo";
        /// `gpg`: group mean baseline scaled by the batch's share of nonzero row scores; reads
        /// `token_level_rewards` and `response_mask`.
        Gpg(GpgConfig = GpgConfig::default()) => "gpg";
        /// `reinforce_plus_plus`: discounted token returns, batch-whitened; reads
        /// `token_level_rewards` and `response_mask`, writes returns.
        ReinforcePlusPlus(ReinforcePlusPlusConfig = ReinforcePlusPlusConfig::default()) => "reinforce_plus_plus";
        /// `reinforce_plus_plus_baseline`: group mean baseline, batch-whitened
        /// (verl's `compute_reinforce_plus_plus_baseline_outcome_advantage`).
        ReinforcePlusPlusBaseline => "reinforce_plus_plus_baseline";
        /// `remax`: reward-to-go minus a per-row (greedy) baseline; reads `token_level_rewards`,
        /// `response_mask` and `reward_baselines`, writes returns.
        Remax => "remax";
        /// `optimal_token_baseline`: per-position variance-weighted group baseline; reads
        /// `token_level_rewards`, `response_mask`, `old_log_probs`, `sum_pi_squared` (and
        /// optionally `rollout_is_weights`), writes returns.
        OptimalTokenBaseline(OptimalTokenBaselineConfig = OptimalTokenBaselineConfig::default()) => "optimal_token_baseline";
        /// `tir_optimal_token_baseline`: the same over each row's generated tokens only
        /// (verl's `compute_multi_turn_optimal_token_baseline_advantage`).
        TirOptimalTokenBaseline(OptimalTokenBaselineConfig = OptimalTokenBaselineConfig::default()) => "tir_optimal_token_baseline";
    }
    crate_only {
        /// `gigpo`: episode plus anchor-state step advantages, verl-agent's GiGPO
        /// ([`Gigpo`](super::Gigpo)). Omitted fields take [`GigpoConfig::default()`](super::GigpoConfig::default).
        Gigpo(super::GigpoConfig = super::GigpoConfig::default()) => "gigpo";
        /// `step_reinforce`: discounted per-turn returns normalised over turns, as ROLL runs
        /// them; reads `step_rewards` (one turn per row). Omitted fields take
        /// [`StepReinforceConfig::default()`](step_reinforce::StepReinforceConfig::default).
        StepReinforce(step_reinforce::StepReinforceConfig = step_reinforce::StepReinforceConfig::default()) => "step_reinforce";
        /// `mt_grpo`: multi-turn GRPO with turn-level advantages; reads `step_rewards`.
        /// Omitted fields take [`MtGrpoConfig::default()`](mt_grpo::MtGrpoConfig::default).
        MtGrpo(mt_grpo::MtGrpoConfig = mt_grpo::MtGrpoConfig::default()) => "mt_grpo";
        /// `turn_gae`: GAE over one critic value per turn; reads `step_rewards` and `turn_values`.
        /// Omitted fields take [`TurnGaeConfig::default()`](turn_gae::TurnGaeConfig::default).
        TurnGae(turn_gae::TurnGaeConfig = turn_gae::TurnGaeConfig::default()) => "turn_gae";
        /// `tree_grpo`: Tree-GRPO's prompt and tree groups; reads `step_rewards` and `tree_parents`.
        /// Omitted fields take [`TreeGrpoConfig::default()`](TreeGrpoConfig::default).
        TreeGrpo(TreeGrpoConfig = TreeGrpoConfig::default()) => "tree_grpo";
        /// `empg`: entropy-modulated policy gradients over step rows; reads `step_entropy`.
        /// Omitted fields take [`EmpgConfig::default()`](EmpgConfig::default).
        Empg(EmpgConfig = EmpgConfig::default()) => "empg";
    }
}

/// `beacon` or `beacon_official`, after the flavour.
fn beacon_name(c: &super::BeaconConfig) -> &'static str {
    match c.flavour {
        super::BeaconFlavour::Paper => "beacon",
        super::BeaconFlavour::Official { .. } => "beacon_official",
    }
}

/// The preset of `c`'s name: what `Display` leaves out.
fn beacon_preset(c: &super::BeaconConfig) -> super::BeaconConfig {
    match c.flavour {
        super::BeaconFlavour::Paper => super::BeaconConfig::default(),
        super::BeaconFlavour::Official { .. } => super::BeaconConfig::official(),
    }
}

/// The keys of an ablated BEACON: the base's (all, or those off its preset), then `ablation`
/// (always, so that the string parses back to the ablation variant) and `seed` (unless 0).
fn ablation_pairs(c: &BeaconAblationConfig, all: bool) -> Vec<(&'static str, Out)> {
    let preset = BeaconAblationConfig::new(beacon_preset(&c.base), c.ablation);
    let mut pairs = keys::pairs_of(c, (!all).then_some(&preset));
    if !pairs.iter().any(|(k, _)| *k == "ablation") {
        let at = pairs
            .iter()
            .position(|(k, _)| *k == "seed")
            .unwrap_or(pairs.len());
        pairs.insert(at, ("ablation", keys::Param::write(&c.ablation)));
    }
    pairs
}

impl EstimatorConfig {
    /// The config of `name` with `pairs` set on its defaults.
    fn from_parts(name: &str, pairs: &[(String, Raw)]) -> Result<Self> {
        let preset = match name {
            "beacon" => super::BeaconConfig::default(),
            "beacon_official" => super::BeaconConfig::official(),
            _ => {
                return Self::from_table(name, pairs).unwrap_or_else(|| {
                    Err(Error::UnknownEstimator {
                        name: name.to_owned(),
                        known: Self::NAMES,
                    })
                })
            }
        };
        let name = if name == "beacon" {
            "beacon"
        } else {
            "beacon_official"
        };
        let mut c = BeaconAblationConfig::new(preset, Ablation::Full);
        keys::apply(&mut c, name, pairs)?;
        Ok(if pairs.iter().any(|(k, _)| k == "ablation" || k == "seed") {
            Self::BeaconAblation(c)
        } else {
            Self::Beacon(c.base)
        })
    }

    /// Validates the parameters and builds the estimator: the one place a configuration is
    /// checked (each estimator's `new` validates, and this calls it).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the first parameter out of range.
    ///
    /// ```
    /// use beacon_rl::estimator::EstimatorConfig;
    /// let est = "rloo".parse::<EstimatorConfig>()?.build()?;
    /// assert_eq!(est.name(), "rloo");
    /// assert!("gpg:f_norm=0".parse::<EstimatorConfig>()?.build().is_err());
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
            Self::Gigpo(c) => Box::new(super::Gigpo::new(*c)?),
            Self::Beacon(c) => Box::new(super::Beacon::new(*c)?),
            Self::BeaconAblation(c) => Box::new(ablation::BeaconAblation::new(*c)?),
            Self::StepReinforce(c) => Box::new(step_reinforce::StepReinforce::new(*c)?),
            Self::MtGrpo(c) => Box::new(mt_grpo::MtGrpo::new(*c)?),
            Self::TurnGae(c) => Box::new(turn_gae::TurnGae::new(*c)?),
            Self::TreeGrpo(c) => Box::new(TreeGrpo::new(*c)?),
            Self::Empg(c) => Box::new(Empg::new(*c)?),
        })
    }
}

impl FromStr for EstimatorConfig {
    type Err = Error;

    /// Parses `name` or `name:key=value,key=value` (see the type's docs).
    ///
    /// # Errors
    /// [`Error::UnknownEstimator`] listing [`NAMES`](Self::NAMES); [`Error::UnknownKey`]
    /// listing the estimator's keys; [`Error::InvalidValue`] naming the key whose value does not
    /// parse; [`Error::Parse`] for text that is not `key=value` pairs or a key given twice.
    fn from_str(s: &str) -> Result<Self> {
        let (name, pairs) = match s.split_once(':') {
            Some((name, rest)) => (name.trim(), keys::parse_pairs(rest, s)?),
            None => (s.trim(), Vec::new()),
        };
        Self::from_parts(name, &pairs)
    }
}

impl fmt::Display for EstimatorConfig {
    /// The name, then `:` and the keys that differ from the name's defaults (if any).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        let pairs = self.pairs(false);
        if !pairs.is_empty() {
            f.write_str(":")?;
            keys::write_pairs(f, &pairs)?;
        }
        Ok(())
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for EstimatorConfig {
    /// `{"adv_estimator": name, key: value, ...}` with every key.
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let pairs = self.pairs(true);
        let mut m = s.serialize_map(Some(pairs.len() + 1))?;
        m.serialize_entry("adv_estimator", self.name())?;
        for (k, v) in &pairs {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for EstimatorConfig {
    /// The keys of the string form, with the name under `adv_estimator`.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        use serde::de::Error as _;
        let keys::Pairs(mut pairs) = keys::Pairs::deserialize(d)?;
        let at = pairs
            .iter()
            .position(|(k, _)| k == "adv_estimator")
            .ok_or_else(|| D::Error::missing_field("adv_estimator"))?;
        let Raw::Text(name) = pairs.remove(at).1 else {
            return Err(D::Error::custom("adv_estimator: expected a name"));
        };
        Self::from_parts(&name, &pairs).map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimator::{BeaconConfig, BeaconFlavour};
    use crate::estimator::{GigpoConfig, StepGrouping};
    use crate::stats::NormMode;

    fn parse(s: &str) -> EstimatorConfig {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn every_name_parses_prints_and_builds_under_itself() {
        assert_eq!(
            &EstimatorConfig::NAMES[..EstimatorConfig::VERL_NAMES.len()],
            EstimatorConfig::VERL_NAMES
        );
        assert_eq!(EstimatorConfig::NAMES.len(), 22);
        let unique: std::collections::BTreeSet<_> = EstimatorConfig::NAMES.iter().collect();
        assert_eq!(unique.len(), EstimatorConfig::NAMES.len());
        for name in EstimatorConfig::NAMES {
            let c = parse(name);
            assert_eq!((c.name(), c.to_string().as_str()), (*name, *name));
            assert_eq!(c.build().unwrap().name(), *name);
        }
        // Spot checks written out, not read from the table.
        for name in ["gae", "grpo", "rloo_vectorized", "tir_optimal_token_baseline"] {
            assert!(EstimatorConfig::VERL_NAMES.contains(&name), "{name}");
        }
        for name in ["gigpo", "beacon", "beacon_official", "step_reinforce"] {
            assert!(!EstimatorConfig::VERL_NAMES.contains(&name), "{name}");
            assert!(EstimatorConfig::NAMES.contains(&name), "{name}");
        }
        for gone in ["beacon_ablation", "beacon_completion"] {
            assert!(!EstimatorConfig::NAMES.contains(&gone));
        }
    }

    #[test]
    fn empg_takes_its_keys_and_grpos() {
        let c = parse("empg:k=2");
        assert_eq!(c, EstimatorConfig::Empg(EmpgConfig::default().with_k(2.0)));
        assert_eq!(c.to_string(), "empg:k=2.0");
        assert_eq!(parse(&c.to_string()), c);
        assert_eq!(c.build().unwrap().name(), "empg");
        let text = "empg:k=0.5,k_f=2.0,zeta=0.05,std_eps=0.001,norm=mean_norm,statistics=trajectories";
        let c = parse(text);
        let EstimatorConfig::Empg(e) = c else {
            panic!("{c:?}")
        };
        assert_eq!((e.k, e.k_f, e.zeta, e.grpo.std_eps), (0.5, 2.0, 0.05, 0.001));
        assert_eq!(e.grpo.norm, crate::estimator::NormMode::MeanNorm);
        assert_eq!(c.to_string(), text);
        let err = "empg:gamma=1".parse::<EstimatorConfig>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "estimator empg has no key gamma; its keys: k, k_f, zeta, std_eps, norm, statistics"
        );
        assert!(matches!(
            parse("empg:zeta=-1").build().err(),
            Some(Error::InvalidConfig { name: "zeta", .. })
        ));
    }

    #[test]
    fn keys_are_the_config_fields_and_print_when_off_default() {
        let c = parse("beacon:segment_decay=0.9");
        assert_eq!(
            c,
            EstimatorConfig::Beacon(BeaconConfig::default().with_segment_decay(0.9))
        );
        assert_eq!(c.to_string(), "beacon:segment_decay=0.9");
        // Spaces around items are allowed; printing is canonical (table order).
        let c = parse("gae: gae_lambda = 0.5 , discount=0.9");
        assert_eq!(
            c,
            EstimatorConfig::Gae(GaeConfig {
                discount: 0.9,
                gae_lambda: 0.5
            })
        );
        assert_eq!(c.to_string(), "gae:discount=0.9,gae_lambda=0.5");
        // A key set to its default is not printed.
        assert_eq!(parse("gae:discount=1.0").to_string(), "gae");
        // Small and large numbers print in the form that parses back exactly.
        let c = parse("grpo:std_eps=1e-9");
        assert_eq!(c.to_string(), "grpo:std_eps=1e-9");
        assert_eq!(parse(&c.to_string()), c);
        // Enum values with fields: `variant(field=value)`; a bare variant takes its defaults.
        let c = parse("gigpo:grouping=similarity(threshold=0.9),norm=mean_std_norm");
        let want = GigpoConfig {
            grouping: StepGrouping::Similarity { threshold: 0.9 },
            norm: NormMode::MeanStdNorm,
            ..GigpoConfig::default()
        };
        assert_eq!(c, EstimatorConfig::Gigpo(want));
        assert_eq!(
            c.to_string(),
            "gigpo:norm=mean_std_norm,grouping=similarity(threshold=0.9)"
        );
        let c = parse("step_reinforce:reward_clip=2.5,norm_std=none,whiten_advantages=true");
        assert_eq!(parse(&c.to_string()), c);
    }

    #[test]
    fn the_flavour_is_the_configs_and_names_it() {
        assert_eq!(
            parse("beacon_official"),
            EstimatorConfig::Beacon(BeaconConfig::official())
        );
        let c = EstimatorConfig::Beacon(BeaconConfig::official().with_segment_weight(10.0));
        assert_eq!(c.to_string(), "beacon_official:segment_weight=10.0");
        assert_eq!(c.build().unwrap().name(), "beacon_official");
        // The flavour key over the paper preset: the name follows the flavour, the other
        // keys print against the new name's preset.
        let c = parse("beacon:flavour=official(norm=mean_std_norm)");
        let want = BeaconConfig::default().with_flavour(BeaconFlavour::Official {
            norm: NormMode::MeanStdNorm,
        });
        assert_eq!(c, EstimatorConfig::Beacon(want));
        assert_eq!(
            c.to_string(),
            "beacon_official:flavour=official(norm=mean_std_norm),milestone_reward=1.0"
        );
        assert_eq!(parse(&c.to_string()), c);
        assert_eq!(parse("beacon_official:flavour=paper").name(), "beacon");
    }

    #[test]
    fn ablations_are_keys_of_beacon() {
        let c = parse("beacon:ablation=milestone_dropout(p=0.3),seed=3");
        let mut want =
            BeaconAblationConfig::new(BeaconConfig::default(), Ablation::MilestoneDropout { p: 0.3 });
        want.seed = 3;
        assert_eq!(c, EstimatorConfig::BeaconAblation(want));
        assert_eq!(c.to_string(), "beacon:ablation=milestone_dropout(p=0.3),seed=3");
        // Bare variants take the paper's parameters; BEACON's keys combine with the row's.
        let c = parse("beacon_official:segment_decay=0.5,ablation=random_partition");
        let want = BeaconAblationConfig::new(
            BeaconConfig::official().with_segment_decay(0.5),
            Ablation::RandomPartition { positions: 5 },
        );
        assert_eq!(c, EstimatorConfig::BeaconAblation(want));
        assert_eq!(
            c.to_string(),
            "beacon_official:segment_decay=0.5,ablation=random_partition(positions=5)"
        );
        assert_eq!(c.build().unwrap().name(), "beacon_official");
        // `ablation=full` stays the ablation variant, so printing round-trips.
        let c = parse("beacon:ablation=full");
        assert_eq!(c.to_string(), "beacon:ablation=full");
        assert_eq!(parse("beacon:seed=4").to_string(), "beacon:ablation=full,seed=4");
        for a in Ablation::paper_table3() {
            let row = EstimatorConfig::BeaconAblation(BeaconAblationConfig::new(BeaconConfig::default(), a));
            assert_eq!(parse(&row.to_string()), row);
            assert_eq!(a.to_string().parse::<Ablation>().unwrap(), a);
        }
    }

    #[test]
    fn an_unknown_name_lists_the_names() {
        let err = "ppo".parse::<EstimatorConfig>().unwrap_err();
        assert_eq!(
            err,
            Error::UnknownEstimator {
                name: "ppo".into(),
                known: EstimatorConfig::NAMES
            }
        );
        let text = err.to_string();
        assert!(
            text.starts_with("unknown estimator ppo; known: gae, grpo, "),
            "{text}"
        );
        assert!(
            text.contains("beacon, beacon_official") && text.ends_with("tree_grpo, empg"),
            "{text}"
        );
        assert!(matches!(
            "beacon_ablation".parse::<EstimatorConfig>(),
            Err(Error::UnknownEstimator { .. })
        ));
    }

    #[test]
    fn an_unknown_key_lists_the_estimators_keys() {
        let err = "beacon:gamma=0.9".parse::<EstimatorConfig>().unwrap_err();
        let Error::UnknownKey {
            estimator,
            ref key,
            ref known,
        } = err
        else {
            panic!("{err}")
        };
        assert_eq!((estimator, key.as_str()), ("beacon", "gamma"));
        assert_eq!(
            known,
            &[
                "flavour",
                "milestone_reward",
                "segment_decay",
                "segment_weight",
                "trajectory_weight",
                "std_eps",
                "singleton",
                "segment_baseline",
                "ablation",
                "seed"
            ]
        );
        assert!(err
            .to_string()
            .starts_with("estimator beacon has no key gamma; its keys: flavour, "));
        // The old ablation spelling names the key it is not.
        let err = "beacon:milestone_dropout=0.5"
            .parse::<EstimatorConfig>()
            .unwrap_err();
        assert!(matches!(err, Error::UnknownKey { .. }), "{err}");
        let err = "gae:std_eps=1".parse::<EstimatorConfig>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "estimator gae has no key std_eps; its keys: discount, gae_lambda"
        );
        let err = "rloo:x=1".parse::<EstimatorConfig>().unwrap_err();
        assert_eq!(err.to_string(), "estimator rloo has no key x; it takes none");
    }

    #[test]
    fn a_bad_value_names_its_key() {
        for (s, key) in [
            ("beacon:segment_decay=abc", "segment_decay"),
            ("beacon:seed=-1", "seed"),
            ("beacon:ablation=dropout", "ablation"),
            ("beacon:ablation=milestone_dropout(q=1)", "ablation"),
            ("beacon:flavour=official(norm=median)", "flavour"),
            ("grpo:norm=none", "norm"),
            ("gigpo:grouping=similarity", "grouping"),
            ("turn_gae:whiten=1", "whiten"),
        ] {
            match s.parse::<EstimatorConfig>() {
                Err(Error::InvalidValue { key: k, .. }) => assert_eq!(k, key, "{s}"),
                other => panic!("{s}: {other:?}"),
            }
        }
        let err = "grpo:norm=none".parse::<EstimatorConfig>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "estimator grpo: key norm = none: expected one of mean_norm mean_std_norm"
        );
        // Syntax: not key=value, unbalanced, a key twice.
        for s in [
            "beacon:",
            "beacon:segment_decay",
            "beacon:=1",
            "beacon:ablation=milestone_dropout(p=0.5",
            "gae:discount=0.9,discount=0.8",
        ] {
            assert!(
                matches!(s.parse::<EstimatorConfig>(), Err(Error::Parse { .. })),
                "{s}"
            );
        }
        // Ranges are the builder's: the value parses, build names the key.
        let c = parse("beacon:segment_decay=1.5");
        assert!(matches!(
            c.build().err(),
            Some(Error::InvalidConfig {
                name: "segment_decay",
                ..
            })
        ));
        let c = parse("beacon:ablation=milestone_dropout(p=2)");
        assert!(matches!(
            c.build().err(),
            Some(Error::InvalidConfig { name: "p", .. })
        ));
    }

    #[cfg(feature = "serde")]
    #[test]
    fn serde_reads_and_writes_the_same_keys() {
        let c: EstimatorConfig =
            serde_json::from_str(r#"{"adv_estimator": "beacon", "segment_decay": 0.9}"#).unwrap();
        assert_eq!(c, parse("beacon:segment_decay=0.9"));
        // The name may come after the keys; nested enums are serde's externally tagged form.
        let c: EstimatorConfig = serde_json::from_str(
            r#"{"segment_weight": 10, "flavour": {"official": {"norm": "mean_std_norm"}}, "adv_estimator": "beacon_official"}"#,
        )
        .unwrap();
        assert_eq!(
            c,
            parse("beacon_official:flavour=official(norm=mean_std_norm),segment_weight=10")
        );
        let c: EstimatorConfig = serde_json::from_str(
            r#"{"adv_estimator":"beacon","ablation":{"milestone_dropout":{"p":0.25}},"seed":9}"#,
        )
        .unwrap();
        assert_eq!(c, parse("beacon:ablation=milestone_dropout(p=0.25),seed=9"));
        let c: EstimatorConfig = serde_json::from_str(
            r#"{"adv_estimator":"step_reinforce","reward_clip":null,"norm_std":"batch"}"#,
        )
        .unwrap();
        assert_eq!(c, parse("step_reinforce:reward_clip=none,norm_std=batch"));
        // Every name: all keys written, read back equal; omitted keys take the defaults.
        for name in EstimatorConfig::NAMES {
            let c = parse(name);
            let json = serde_json::to_string(&c).unwrap();
            assert!(
                json.starts_with(&format!("{{\"adv_estimator\":\"{name}\"")),
                "{json}"
            );
            assert_eq!(serde_json::from_str::<EstimatorConfig>(&json).unwrap(), c);
            let bare: EstimatorConfig =
                serde_json::from_str(&format!("{{\"adv_estimator\":\"{name}\"}}")).unwrap();
            assert_eq!(bare, c);
        }
        let json = serde_json::to_value(parse("grpo")).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"adv_estimator": "grpo", "std_eps": 1e-6, "norm": "mean_std_norm", "statistics": "rows"})
        );
        // The same errors as the string form.
        for (bad, starts) in [
            (r#"{"adv_estimator":"ppo"}"#, "unknown estimator ppo; known: gae"),
            (
                r#"{"adv_estimator":"beacon","gamma":0.9}"#,
                "estimator beacon has no key gamma; its keys: ",
            ),
            (
                r#"{"adv_estimator":"gae","discount":"x"}"#,
                "estimator gae: key discount = x: expected a number",
            ),
            (r#"{"discount":0.9}"#, "missing field `adv_estimator`"),
        ] {
            let err = serde_json::from_str::<EstimatorConfig>(bad)
                .unwrap_err()
                .to_string();
            assert!(err.starts_with(starts), "{bad}: {err}");
        }
    }
}
