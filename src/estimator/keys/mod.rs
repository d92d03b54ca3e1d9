//! The configuration grammar's keys: one table per estimator configuration, read by
//! [`EstimatorConfig`](super::EstimatorConfig)'s `FromStr`, `Display` and serde alike.
//!
//! ```text
//! config  = name [ ":" pairs ]          beacon:segment_decay=0.9,segment_weight=2
//! pairs   = key "=" value { "," key "=" value }
//! value   = scalar | variant "(" pairs ")"
//! scalar  = number | true | false | none | variant      a variant with its default fields
//! ```
//!
//! A key is a config field by its serde name; a value is spelled as serde spells it, with an
//! enum variant that has fields written `variant(field=value)` where serde writes
//! `{"variant": {"field": value}}` (`flavour=official(norm=mean_std_norm)`,
//! `grouping=similarity(threshold=0.9)`). Serde values arrive as the same [`Raw`] tree, so a
//! JSON number is read by the same parser as its text.

use std::fmt;

use super::empg::EmpgConfig;
use super::gae::GaeConfig;
use super::gpg::GpgConfig;
use super::grpo::{GrpoConfig, GrpoStatistics};
use super::mt_grpo::{MtGrpoConfig, TurnBaseline};
use super::optimal_baseline::{OptimalTokenBaselineConfig, ZeroTail};
use super::reinforce::ReinforcePlusPlusConfig;
use super::step_reinforce::{Grouping, NormScope, StepReinforceConfig};
use super::tree_grpo::{TreeGrpoConfig, TreeGrpoVariant};
use super::turn_gae::TurnGaeConfig;
use super::{Ablation, BeaconAblationConfig};
use super::{BeaconConfig, BeaconFlavour, SegmentBaseline};
use super::{GigpoConfig, StepGrouping};
use crate::error::{Error, Result};
use crate::stats::{NormMode, SingletonRule};

#[cfg(feature = "serde")]
mod serde_form;
#[cfg(feature = "serde")]
pub(crate) use serde_form::Pairs;

/// A value as given: a scalar's text, or a variant with fields.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Raw {
    Text(String),
    Variant(String, Vec<(String, Raw)>),
}

impl fmt::Display for Raw {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Raw::Text(t) => f.write_str(t),
            Raw::Variant(name, fields) => {
                write!(f, "{name}(")?;
                for (i, (k, v)) in fields.iter().enumerate() {
                    write!(f, "{}{k}={v}", if i > 0 { "," } else { "" })?;
                }
                f.write_str(")")
            }
        }
    }
}

/// A value as written: typed, so serde writes numbers as numbers.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Out {
    F64(f64),
    U64(u64),
    Bool(bool),
    None,
    Name(&'static str),
    Variant(&'static str, Vec<(&'static str, Out)>),
}

impl fmt::Display for Out {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // Debug is the shortest text that parses back to the same f64 (`1e-6`, `0.9`).
            Out::F64(x) => write!(f, "{x:?}"),
            Out::U64(x) => write!(f, "{x}"),
            Out::Bool(x) => write!(f, "{x}"),
            Out::None => f.write_str("none"),
            Out::Name(n) => f.write_str(n),
            Out::Variant(name, fields) => {
                write!(f, "{name}(")?;
                write_pairs(f, fields)?;
                f.write_str(")")
            }
        }
    }
}

/// `k=v,k=v`.
pub(crate) fn write_pairs(f: &mut fmt::Formatter<'_>, pairs: &[(&'static str, Out)]) -> fmt::Result {
    for (i, (k, v)) in pairs.iter().enumerate() {
        write!(f, "{}{k}={v}", if i > 0 { "," } else { "" })?;
    }
    Ok(())
}

/// A syntax error in a configuration string.
fn syntax(input: &str, reason: &str) -> Error {
    Error::Parse {
        what: "estimator configuration",
        reason: format!("{input:?}: {reason} (expected NAME or NAME:KEY=VALUE,KEY=VALUE)"),
    }
}

/// Splits `s` at the commas outside parentheses.
fn split_top(s: &str) -> Option<Vec<&str>> {
    let (mut depth, mut start, mut out) = (0usize, 0, Vec::new());
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.checked_sub(1)?,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    (depth == 0).then(|| {
        out.push(&s[start..]);
        out
    })
}

/// Parses `key=value,key=value` (the part after `name:`).
pub(crate) fn parse_pairs(s: &str, input: &str) -> Result<Vec<(String, Raw)>> {
    let items = split_top(s).ok_or_else(|| syntax(input, "unbalanced parentheses"))?;
    items
        .into_iter()
        .map(|item| {
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| syntax(input, &format!("{:?} is not KEY=VALUE", item.trim())))?;
            let (k, v) = (k.trim(), v.trim());
            if k.is_empty() || v.is_empty() {
                return Err(syntax(input, &format!("{:?} is not KEY=VALUE", item.trim())));
            }
            Ok((k.to_owned(), parse_value(v, input)?))
        })
        .collect()
}

fn parse_value(v: &str, input: &str) -> Result<Raw> {
    match v.find('(') {
        None => Ok(Raw::Text(v.to_owned())),
        Some(open) => {
            let inner = v[open + 1..]
                .strip_suffix(')')
                .ok_or_else(|| syntax(input, &format!("{v:?}: text after ')'")))?;
            let fields = if inner.trim().is_empty() {
                Vec::new()
            } else {
                parse_pairs(inner, input)?
            };
            Ok(Raw::Variant(v[..open].trim().to_owned(), fields))
        }
    }
}

/// A parameter type: how its values read and write.
pub(crate) trait Param: Sized {
    /// What a value must look like, for the error message.
    const EXPECTED: &'static str;
    fn read(raw: &Raw) -> Option<Self>;
    fn write(&self) -> Out;
}

fn text(raw: &Raw) -> Option<&str> {
    match raw {
        Raw::Text(t) => Some(t),
        Raw::Variant(..) => None,
    }
}

/// Scalars: their text, parsed by `str::parse`.
macro_rules! scalar {
    ($($t:ty => $out:expr, $expected:literal;)*) => {$(
        impl Param for $t {
            const EXPECTED: &'static str = $expected;
            fn read(raw: &Raw) -> Option<Self> {
                text(raw)?.parse().ok()
            }
            fn write(&self) -> Out {
                $out(*self)
            }
        }
    )*};
}

scalar! {
    f64 => Out::F64, "a number";
    u64 => Out::U64, "an unsigned integer";
    usize => |x: usize| Out::U64(x as u64), "an unsigned integer";
    bool => Out::Bool, "true or false";
}

/// `Option<T>`: `none` or a `T`.
macro_rules! optional {
    ($($t:ty => $expected:literal;)*) => {$(
        impl Param for Option<$t> {
            const EXPECTED: &'static str = $expected;
            fn read(raw: &Raw) -> Option<Self> {
                if text(raw) == Some("none") {
                    return Some(None);
                }
                <$t>::read(raw).map(Some)
            }
            fn write(&self) -> Out {
                self.as_ref().map_or(Out::None, Param::write)
            }
        }
    )*};
}

optional! {
    f64 => "none or a number";
    NormScope => "none, batch or group";
}

/// Enums without fields: one snake_case name per variant (serde's).
macro_rules! unit_enum {
    ($($t:ty { $($v:ident => $n:literal),* };)*) => {$(
        impl Param for $t {
            const EXPECTED: &'static str = concat!("one of" $(, " ", $n)*);
            fn read(raw: &Raw) -> Option<Self> {
                match text(raw)? {
                    $($n => Some(<$t>::$v),)*
                    _ => None,
                }
            }
            fn write(&self) -> Out {
                match self {
                    $(<$t>::$v => Out::Name($n),)*
                }
            }
        }
    )*};
}

unit_enum! {
    NormMode { MeanNorm => "mean_norm", MeanStdNorm => "mean_std_norm" };
    SingletonRule { PassThrough => "pass_through", Zero => "zero" };
    SegmentBaseline { Completed => "completed", Entered => "entered" };
    GrpoStatistics { Rows => "rows", Trajectories => "trajectories" };
    ZeroTail { ZeroBaseline => "zero_baseline", KeepBaseline => "keep_baseline" };
    Grouping { Batch => "batch", Group => "group" };
    NormScope { Batch => "batch", Group => "group" };
    TurnBaseline { PerIndex => "per_index", RewardToGo => "reward_to_go" };
    TreeGrpoVariant { Sum => "sum", Intra => "intra", Nested => "nested" };
}

/// A variant's name and its fields (none for a bare name).
fn variant(raw: &Raw) -> (&str, &[(String, Raw)]) {
    match raw {
        Raw::Text(t) => (t, &[]),
        Raw::Variant(n, f) => (n, f),
    }
}

/// Field `name` of a variant, `default` when absent; None when a field is unknown, repeated
/// or does not parse.
fn field<T: Param>(fields: &[(String, Raw)], known: &[&str], name: &str, default: Option<T>) -> Option<T> {
    if fields.iter().any(|(k, _)| !known.contains(&k.as_str())) {
        return None;
    }
    let mut given = fields.iter().filter(|(k, _)| k == name);
    match (given.next(), given.next()) {
        (None, _) => default,
        (Some((_, v)), None) => T::read(v),
        (Some(_), Some(_)) => None,
    }
}

impl Param for BeaconFlavour {
    const EXPECTED: &'static str = "paper or official(norm=mean_norm|mean_std_norm)";
    fn read(raw: &Raw) -> Option<Self> {
        match variant(raw) {
            ("paper", []) => Some(BeaconFlavour::Paper),
            ("official", f) => Some(BeaconFlavour::Official {
                norm: field(f, &["norm"], "norm", Some(NormMode::MeanNorm))?,
            }),
            _ => None,
        }
    }
    fn write(&self) -> Out {
        match self {
            BeaconFlavour::Paper => Out::Name("paper"),
            BeaconFlavour::Official { norm } => Out::Variant("official", vec![("norm", norm.write())]),
        }
    }
}

impl Param for StepGrouping {
    const EXPECTED: &'static str = "exact or similarity(threshold=X)";
    fn read(raw: &Raw) -> Option<Self> {
        match variant(raw) {
            ("exact", []) => Some(StepGrouping::Exact),
            ("similarity", f) => Some(StepGrouping::Similarity {
                threshold: field(f, &["threshold"], "threshold", None)?,
            }),
            _ => None,
        }
    }
    fn write(&self) -> Out {
        match self {
            StepGrouping::Exact => Out::Name("exact"),
            StepGrouping::Similarity { threshold } => {
                Out::Variant("similarity", vec![("threshold", threshold.write())])
            }
        }
    }
}

impl Param for Ablation {
    const EXPECTED: &'static str = "one of full, milestone_dropout(p=0.5), random_partition(positions=5), \
         no_temporal_decay, uniform_shaping, no_segment_advantage, no_trajectory_advantage";
    fn read(raw: &Raw) -> Option<Self> {
        Some(match variant(raw) {
            ("milestone_dropout", f) => Ablation::MilestoneDropout {
                p: field(f, &["p"], "p", Some(0.5))?,
            },
            ("random_partition", f) => Ablation::RandomPartition {
                positions: field(f, &["positions"], "positions", Some(5))?,
            },
            ("full", []) => Ablation::Full,
            ("no_temporal_decay", []) => Ablation::NoTemporalDecay,
            ("uniform_shaping", []) => Ablation::UniformShaping,
            ("no_segment_advantage", []) => Ablation::NoSegmentAdvantage,
            ("no_trajectory_advantage", []) => Ablation::NoTrajectoryAdvantage,
            _ => return None,
        })
    }
    fn write(&self) -> Out {
        match *self {
            Ablation::MilestoneDropout { p } => Out::Variant("milestone_dropout", vec![("p", p.write())]),
            Ablation::RandomPartition { positions } => {
                Out::Variant("random_partition", vec![("positions", positions.write())])
            }
            other => Out::Name(other.name()),
        }
    }
}

/// One key of a configuration type `C`.
pub(crate) struct Key<C> {
    pub(crate) name: &'static str,
    pub(crate) get: fn(&C) -> Out,
    /// Sets the field from `raw`, or returns what the value must look like.
    pub(crate) set: fn(&mut C, &Raw) -> std::result::Result<(), &'static str>,
}

/// A configuration type with a key table.
pub(crate) trait Keyed: Sized + 'static {
    const KEYS: &'static [Key<Self>];
}

fn read_like<T: Param>(raw: &Raw, _field: &T) -> std::result::Result<T, &'static str> {
    T::read(raw).ok_or(T::EXPECTED)
}

/// The key table of a configuration: `key = field.path` (or the field's own name).
macro_rules! keyed {
    ($($t:ty { $($key:ident $(= $($path:ident).+)?),* $(,)? };)*) => {$(
        impl Keyed for $t {
            const KEYS: &'static [Key<Self>] = &[$(
                keyed!(@key $t, $key $(= $($path).+)?)
            ),*];
        }
    )*};
    (@key $t:ty, $key:ident) => { keyed!(@key $t, $key = $key) };
    (@key $t:ty, $key:ident = $($path:ident).+) => {
        Key {
            name: stringify!($key),
            get: |c: &$t| c.$($path).+.write(),
            set: |c: &mut $t, raw| {
                c.$($path).+ = read_like(raw, &c.$($path).+)?;
                Ok(())
            },
        }
    };
}

/// Estimators without parameters.
pub(crate) struct NoKeys;

keyed! {
    NoKeys {};
    GaeConfig { discount, gae_lambda };
    GrpoConfig { std_eps, norm, statistics };
    GpgConfig { f_norm };
    ReinforcePlusPlusConfig { discount };
    OptimalTokenBaselineConfig { zero_tail, denominator_eps };
    GigpoConfig { step_decay, step_advantage_weight, norm, std_eps, grouping };
    BeaconConfig {
        flavour, milestone_reward, segment_decay, segment_weight, trajectory_weight, std_eps,
        singleton, segment_baseline,
    };
    BeaconAblationConfig {
        flavour = base.flavour, milestone_reward = base.milestone_reward,
        segment_decay = base.segment_decay, segment_weight = base.segment_weight,
        trajectory_weight = base.trajectory_weight, std_eps = base.std_eps,
        singleton = base.singleton, segment_baseline = base.segment_baseline, ablation, seed,
    };
    StepReinforceConfig {
        step_discount, grouping, norm_mean, norm_std, reward_clip, whiten_advantages, advantage_clip,
    };
    MtGrpoConfig { turn_advantage_coef, std_eps, turn_baseline };
    TurnGaeConfig { discount, lam, whiten };
    TreeGrpoConfig { std_eps, singleton, variant };
    EmpgConfig {
        k, k_f, zeta, std_eps = grpo.std_eps, norm = grpo.norm, statistics = grpo.statistics,
    };
}

/// The key names of `C`, in table order.
pub(crate) fn names<C: Keyed>() -> Vec<&'static str> {
    C::KEYS.iter().map(|k| k.name).collect()
}

/// Sets `pairs` on `config` (estimator `estimator`).
///
/// # Errors
/// [`Error::UnknownKey`] listing `C`'s keys; [`Error::InvalidValue`] naming the key whose value
/// does not parse; [`Error::Parse`] for a key given twice.
pub(crate) fn apply<C: Keyed>(
    config: &mut C,
    estimator: &'static str,
    pairs: &[(String, Raw)],
) -> Result<()> {
    for (i, (key, raw)) in pairs.iter().enumerate() {
        let Some(k) = C::KEYS.iter().find(|k| k.name == key) else {
            return Err(Error::UnknownKey {
                estimator,
                key: key.clone(),
                known: names::<C>(),
            });
        };
        if pairs[..i].iter().any(|(earlier, _)| earlier == key) {
            return Err(Error::Parse {
                what: "estimator configuration",
                reason: format!("{estimator}: key {key} given twice"),
            });
        }
        (k.set)(config, raw).map_err(|expected| Error::InvalidValue {
            estimator,
            key: k.name,
            value: raw.to_string(),
            expected,
        })?;
    }
    Ok(())
}

/// `config`'s keys with their values: all of them, or (with `preset`) those that differ.
pub(crate) fn pairs_of<C: Keyed>(config: &C, preset: Option<&C>) -> Vec<(&'static str, Out)> {
    C::KEYS
        .iter()
        .filter_map(|k| {
            let out = (k.get)(config);
            match preset {
                Some(p) if (k.get)(p) == out => None,
                _ => Some((k.name, out)),
            }
        })
        .collect()
}

impl std::str::FromStr for Ablation {
    type Err = Error;

    /// The `ablation` key's value: `uniform_shaping`, `milestone_dropout(p=0.3)`, ...
    fn from_str(s: &str) -> Result<Self> {
        let raw = parse_value(s.trim(), s)?;
        Self::read(&raw).ok_or_else(|| Error::InvalidValue {
            estimator: "beacon",
            key: "ablation",
            value: s.to_owned(),
            expected: Self::EXPECTED,
        })
    }
}

impl fmt::Display for Ablation {
    /// The `ablation` key's value (what `FromStr` reads).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write().fmt(f)
    }
}
