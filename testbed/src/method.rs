use std::fmt;
use std::str::FromStr;

use beacon_rl::estimator::Ablation;
use beacon_rl::{Error, Result};

/// One trained method.
///
/// ```
/// use beacon_rl_testbed::Method;
/// let m: Method = "beacon/no_temporal_decay".parse()?;
/// assert_eq!(m.to_string(), "beacon/no_temporal_decay");
/// assert_eq!(Method::all().len(), 14);
/// assert!(Method::all().iter().all(|m| m.to_string().parse::<Method>() == Ok(*m)));
/// # Ok::<(), beacon_rl::Error>(())
/// ```
///
/// The methods the testbed compares, by name.
///
/// | name | what the trainer hands the library |
/// |---|---|
/// | `grpo` | verl's `grpo` on verl-agent's step rows: the terminal reward R on every step row, normalised over the rows of the task group |
/// | `grpo_trajectory` | trajectory-level GRPO, (R_i − μ)/(σ + ε) over the G episodes. **Stand-in**: main has no `grpo` parameter for it yet, so it runs as `beacon` with λ = 0, whose output is exactly that term (see [`Ablation`](beacon_rl::estimator::Ablation)) |
/// | `gigpo` | verl-agent's GiGPO ([`GigpoConfig::default()`](beacon_rl::estimator::GigpoConfig::default)), step reward 1 on the goal step, anchors = observation texts |
/// | `beacon` | [`BeaconConfig::default`](beacon_rl::estimator::BeaconConfig::default) (the paper) with the trainer's milestones |
/// | `beacon_official` | [`BeaconConfig::official`](beacon_rl::estimator::BeaconConfig::official) (R_ms = 10, row statistics) |
/// | `beacon_completion` | the paper preset with [`SegmentBaseline::Entered`](beacon_rl::estimator::SegmentBaseline::Entered): completion credited against non-completion |
/// | `beacon/<ablation>` | a Table 3 row: [`Ablation::config`] of the paper preset and [`Ablation::milestones`] of the trainer's flags |
/// | `gigpo+milestones` | control: GiGPO whose step rewards are 1 per milestone (plus 1 on the goal step) |
/// | `grpo+progress` | control: `grpo` on the progress score (milestones reached) / K instead of the 0/1 terminal reward |
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Method {
    /// verl's `grpo` over step rows.
    Grpo,
    /// Trajectory-level GRPO (stand-in: BEACON with λ = 0).
    GrpoTrajectory,
    /// verl-agent's GiGPO with the sparse environment reward.
    Gigpo,
    /// BEACON, paper preset.
    Beacon,
    /// BEACON, the release's preset.
    BeaconOfficial,
    /// BEACON, paper preset with the entered-segment baseline.
    BeaconCompletion,
    /// A Table 3 ablation of the paper preset (`Ablation::Full` is `Beacon`).
    Ablation(Ablation),
    /// Control: GiGPO with the milestones as step rewards.
    GigpoMilestoneRewards,
    /// Control: `grpo` on the progress score.
    GrpoProgress,
}

impl Method {
    /// Every method: the five compared methods, the completion-credit option, the six Table 3 ablations (without `Full`,
    /// which is `beacon`), the two controls.
    pub fn all() -> Vec<Method> {
        let mut all = vec![
            Method::Grpo,
            Method::GrpoTrajectory,
            Method::Gigpo,
            Method::Beacon,
            Method::BeaconOfficial,
            Method::BeaconCompletion,
        ];
        all.extend(
            Ablation::paper_table3()
                .into_iter()
                .filter(|a| *a != Ablation::Full)
                .map(Method::Ablation),
        );
        all.extend([Method::GigpoMilestoneRewards, Method::GrpoProgress]);
        all
    }

    /// The method of each row of the paper's Table 3, in its order (BEACON first).
    pub fn table3() -> [Method; 7] {
        Ablation::paper_table3().map(|a| match a {
            Ablation::Full => Method::Beacon,
            a => Method::Ablation(a),
        })
    }

    /// Whether the method reads milestone flags.
    pub fn uses_milestones(&self) -> bool {
        matches!(
            self,
            Method::Beacon
                | Method::BeaconOfficial
                | Method::BeaconCompletion
                | Method::Ablation(_)
                | Method::GigpoMilestoneRewards
        )
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Method::Grpo => f.write_str("grpo"),
            Method::GrpoTrajectory => f.write_str("grpo_trajectory"),
            Method::Gigpo => f.write_str("gigpo"),
            Method::Beacon => f.write_str("beacon"),
            Method::BeaconOfficial => f.write_str("beacon_official"),
            Method::BeaconCompletion => f.write_str("beacon_completion"),
            Method::Ablation(a) => write!(f, "beacon/{}", ablation_name(*a)),
            Method::GigpoMilestoneRewards => f.write_str("gigpo+milestones"),
            Method::GrpoProgress => f.write_str("grpo+progress"),
        }
    }
}

/// An ablation's part of a method name (`beacon/<name>`): its variant in snake_case, without
/// parameters (the Table 3 rows use the defaults, which `FromStr` of the name gives back).
fn ablation_name(a: Ablation) -> &'static str {
    match a {
        Ablation::Full => "full",
        Ablation::MilestoneDropout { .. } => "milestone_dropout",
        Ablation::RandomPartition { .. } => "random_partition",
        Ablation::NoTemporalDecay => "no_temporal_decay",
        Ablation::UniformShaping => "uniform_shaping",
        Ablation::NoSegmentAdvantage => "no_segment_advantage",
        Ablation::NoTrajectoryAdvantage => "no_trajectory_advantage",
    }
}

impl FromStr for Method {
    type Err = Error;

    /// # Errors
    /// [`Error::UnknownEstimator`] for a name not listed in the module docs.
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "grpo" => Method::Grpo,
            "grpo_trajectory" => Method::GrpoTrajectory,
            "gigpo" => Method::Gigpo,
            "beacon" | "beacon/full" => Method::Beacon,
            "beacon_official" => Method::BeaconOfficial,
            "beacon_completion" => Method::BeaconCompletion,
            "gigpo+milestones" => Method::GigpoMilestoneRewards,
            "grpo+progress" => Method::GrpoProgress,
            _ => match s.strip_prefix("beacon/").map(str::parse::<Ablation>) {
                Some(Ok(a)) => Method::Ablation(a),
                _ => {
                    return Err(Error::UnknownEstimator {
                        name: s.to_owned(),
                        known: &[
                            "grpo",
                            "grpo_trajectory",
                            "gigpo",
                            "beacon",
                            "beacon_official",
                            "beacon_completion",
                            "beacon/ABLATION",
                            "gigpo+milestones",
                            "grpo+progress",
                        ],
                    })
                }
            },
        })
    }
}
