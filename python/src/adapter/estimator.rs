//! The crate's estimators by name: building one from the grammar and a JSON mapping of
//! overrides, and the lists of names.

use beacon_rl::estimator::{AdvantageEstimator, EstimatorConfig};

use super::{Failure, Res};

/// A validated estimator of the crate, by verl's `adv_estimator` name.
pub struct Estimator {
    pub(crate) inner: Box<dyn AdvantageEstimator>,
}

impl Estimator {
    /// Builds `name` (the crate's grammar, `NAME` or `NAME:KEY=VALUE,…`), its keys overridden
    /// by the entries of `config_json` (a JSON object of the same keys, the crate's serde
    /// format without `adv_estimator`). A key given in both is an error, as a key given twice
    /// in one string is.
    pub fn new(name: &str, config_json: Option<&str>) -> Res<Self> {
        let mut config: EstimatorConfig = name.parse()?;
        if let Some(json) = config_json {
            let overrides: serde_json::Value =
                serde_json::from_str(json).map_err(|e| Failure(format!("config: {e}")))?;
            let overrides = overrides
                .as_object()
                .ok_or_else(|| Failure("config: expected a mapping".into()))?;
            let mut value = serde_json::to_value(&config).map_err(|e| Failure(e.to_string()))?;
            let obj = value.as_object_mut().expect("a config serialises to a map");
            let in_name = name_keys(name);
            for (k, v) in overrides {
                if k == "adv_estimator" || in_name.contains(&k.as_str()) {
                    return Err(Failure(format!(
                        "config: key {k} is given in the name {name:?} already"
                    )));
                }
                obj.insert(k.clone(), v.clone());
            }
            config = serde_json::from_value(value).map_err(|e| Failure(e.to_string()))?;
        }
        Ok(Self {
            inner: config.build()?,
        })
    }

    /// verl's name of the estimator.
    pub fn name(&self) -> &'static str {
        self.inner.name()
    }

    /// True when the estimator computes returns of its own (else they equal the advantages).
    pub fn has_returns(&self) -> bool {
        self.inner.has_returns()
    }
}

/// The keys written in `NAME:KEY=VALUE,…` (the names before `=` outside parentheses).
fn name_keys(name: &str) -> Vec<&str> {
    let Some((_, pairs)) = name.split_once(':') else {
        return Vec::new();
    };
    let (mut depth, mut start, mut keys) = (0usize, 0, Vec::new());
    for (i, c) in pairs.char_indices().chain([(pairs.len(), ',')]) {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                keys.extend(pairs[start..i].split_once('=').map(|(k, _)| k.trim()));
                start = i + 1;
            }
            _ => {}
        }
    }
    keys
}

/// Every estimator name the crate knows.
pub fn names() -> &'static [&'static str] {
    EstimatorConfig::NAMES
}

/// The turn-level estimators: they read `token_level_rewards` turn by turn on verl's
/// multi-turn rows (the crate's turn layouts), not a score per row.
pub const TURN_NAMES: &[&str] = &["step_reinforce", "mt_grpo", "turn_gae", "tree_grpo"];

/// The names that are verl's own estimators (the rest are the crate's additions).
pub fn verl_names() -> &'static [&'static str] {
    EstimatorConfig::VERL_NAMES
}
