//! The configuration grammar as a property: on random configurations of every kind,
//! `FromStr ∘ Display` and serde's write-then-read are the identity, and the string and serde
//! forms read to the same configuration.

use beacon_rl::estimator::{
    Ablation, BeaconAblationConfig, BeaconConfig, BeaconFlavour, EmpgConfig, EstimatorConfig, GaeConfig,
    GigpoConfig, GpgConfig, Grouping, GrpoConfig, GrpoStatistics, MtGrpoConfig, NormMode, NormScope,
    OptimalTokenBaselineConfig, ReinforcePlusPlusConfig, SegmentBaseline, SingletonRule, StepGrouping,
    StepReinforceConfig, TurnBaseline, TurnGaeConfig, ZeroTail,
};
use proptest::prelude::*;

/// Any f64 but NaN (which equals nothing): infinities, subnormals and −0 included.
fn num() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>().prop_filter("not NaN", |x| !x.is_nan()),
        (0u32..1000).prop_map(|k| f64::from(k) / 100.0),
    ]
}

fn norm_mode() -> impl Strategy<Value = NormMode> {
    prop_oneof![Just(NormMode::MeanNorm), Just(NormMode::MeanStdNorm)]
}

fn beacon() -> impl Strategy<Value = BeaconConfig> {
    let flavour = prop_oneof![
        Just(BeaconFlavour::Paper),
        norm_mode().prop_map(|mode| BeaconFlavour::Official { norm: mode })
    ];
    let rest = (any::<bool>(), any::<bool>(), any::<bool>());
    (flavour, [num(), num(), num(), num(), num()], rest).prop_map(|(flavour, x, (preset, zero, entered))| {
        let base = if preset {
            BeaconConfig::official()
        } else {
            BeaconConfig::default()
        };
        base.with_flavour(flavour)
            .with_milestone_reward(x[0])
            .with_segment_decay(x[1])
            .with_segment_weight(x[2])
            .with_trajectory_weight(x[3])
            .with_std_eps(x[4])
            .with_singleton(if zero {
                SingletonRule::Zero
            } else {
                SingletonRule::PassThrough
            })
            .with_segment_baseline(if entered {
                SegmentBaseline::Entered
            } else {
                SegmentBaseline::Completed
            })
    })
}

fn ablation() -> impl Strategy<Value = Ablation> {
    prop_oneof![
        num().prop_map(|p| Ablation::MilestoneDropout { p }),
        any::<usize>().prop_map(|positions| Ablation::RandomPartition { positions }),
        Just(Ablation::Full),
        Just(Ablation::NoTemporalDecay),
        Just(Ablation::UniformShaping),
        Just(Ablation::NoSegmentAdvantage),
        Just(Ablation::NoTrajectoryAdvantage),
    ]
}

fn option<T: std::fmt::Debug + Clone>(s: impl Strategy<Value = T>) -> impl Strategy<Value = Option<T>> {
    prop_oneof![Just(None), s.prop_map(Some)]
}

fn scope() -> impl Strategy<Value = NormScope> {
    prop_oneof![Just(NormScope::Batch), Just(NormScope::Group)]
}

fn config() -> impl Strategy<Value = EstimatorConfig> {
    let grpo = (num(), any::<bool>(), any::<bool>()).prop_map(|(eps, mean_only, traj)| {
        let mut c = GrpoConfig::default();
        c.std_eps = eps;
        c.norm = if mean_only {
            NormMode::MeanNorm
        } else {
            NormMode::MeanStdNorm
        };
        c.statistics = if traj {
            GrpoStatistics::Trajectories
        } else {
            GrpoStatistics::Rows
        };
        c
    });
    let grpo_variant = (grpo, 0..4).prop_map(|(c, k)| match k {
        0 => EstimatorConfig::Grpo(c),
        1 => EstimatorConfig::GrpoVectorized(c),
        2 => EstimatorConfig::GrpoPassk(c),
        _ => EstimatorConfig::Gdpo(c),
    });
    let gigpo = (num(), num(), norm_mode(), num(), option(num())).prop_map(|(d, w, mode, eps, sim)| {
        let mut c = GigpoConfig::default();
        (c.step_decay, c.step_advantage_weight, c.norm, c.std_eps) = (d, w, mode, eps);
        c.grouping = sim.map_or(StepGrouping::Exact, |threshold| StepGrouping::Similarity {
            threshold,
        });
        EstimatorConfig::Gigpo(c)
    });
    let ablated = (beacon(), ablation(), any::<u64>()).prop_map(|(base, a, seed)| {
        let mut c = BeaconAblationConfig::new(base, a);
        c.seed = seed;
        EstimatorConfig::BeaconAblation(c)
    });
    let step_reinforce = (
        (num(), any::<bool>(), option(scope()), option(scope())),
        (option(num()), any::<bool>(), option(num())),
    )
        .prop_map(|((d, group, mean, std), (rclip, whiten, aclip))| {
            let mut c = StepReinforceConfig::default();
            c.step_discount = d;
            c.grouping = if group { Grouping::Group } else { Grouping::Batch };
            (c.norm_mean, c.norm_std, c.reward_clip) = (mean, std, rclip);
            (c.whiten_advantages, c.advantage_clip) = (whiten, aclip);
            EstimatorConfig::StepReinforce(c)
        });
    let turn_level = (num(), num(), any::<bool>(), 0..2).prop_map(|(a, b, flag, k)| {
        if k == 0 {
            let mut c = MtGrpoConfig::default();
            (c.turn_advantage_coef, c.std_eps) = (a, b);
            c.turn_baseline = if flag {
                TurnBaseline::RewardToGo
            } else {
                TurnBaseline::PerIndex
            };
            EstimatorConfig::MtGrpo(c)
        } else {
            let mut c = TurnGaeConfig::default();
            (c.discount, c.lam, c.whiten) = (a, b, flag);
            EstimatorConfig::TurnGae(c)
        }
    });
    let empg = ((num(), num(), num()), (num(), any::<bool>(), any::<bool>())).prop_map(
        |((k, k_f, zeta), (eps, mean_only, traj))| {
            let mut c = EmpgConfig::default();
            (c.k, c.k_f, c.zeta, c.grpo.std_eps) = (k, k_f, zeta, eps);
            c.grpo.norm = if mean_only {
                NormMode::MeanNorm
            } else {
                NormMode::MeanStdNorm
            };
            c.grpo.statistics = if traj {
                GrpoStatistics::Trajectories
            } else {
                GrpoStatistics::Rows
            };
            EstimatorConfig::Empg(c)
        },
    );
    let outcome = (num(), num(), any::<bool>(), 0..4).prop_map(|(a, b, flag, k)| match k {
        0 => {
            let mut c = GaeConfig::default();
            (c.discount, c.gae_lambda) = (a, b);
            EstimatorConfig::Gae(c)
        }
        1 => {
            let mut c = GpgConfig::default();
            c.f_norm = a;
            EstimatorConfig::Gpg(c)
        }
        2 => {
            let mut c = ReinforcePlusPlusConfig::default();
            c.discount = a;
            EstimatorConfig::ReinforcePlusPlus(c)
        }
        _ => {
            let mut c = OptimalTokenBaselineConfig::default();
            c.denominator_eps = b;
            c.zero_tail = if flag {
                ZeroTail::KeepBaseline
            } else {
                ZeroTail::ZeroBaseline
            };
            EstimatorConfig::OptimalTokenBaseline(c)
        }
    });
    let bare = proptest::sample::select(vec![
        "rloo",
        "rloo_vectorized",
        "opo",
        "remax",
        "reinforce_plus_plus_baseline",
    ])
    .prop_map(|n| n.parse::<EstimatorConfig>().unwrap());
    prop_oneof![
        grpo_variant,
        gigpo,
        beacon().prop_map(EstimatorConfig::Beacon),
        ablated,
        step_reinforce,
        turn_level,
        empg,
        outcome,
        bare,
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn display_then_parse_is_the_identity(c in config()) {
        let text = c.to_string();
        prop_assert_eq!(text.parse::<EstimatorConfig>().unwrap(), c.clone(), "{}", text);
        // The name printed is the config's, and the flavour names BEACON.
        prop_assert!(text.starts_with(c.name()));
        if let EstimatorConfig::Beacon(b) | EstimatorConfig::BeaconAblation(BeaconAblationConfig { base: b, .. }) = &c {
            let official = matches!(b.flavour, BeaconFlavour::Official { .. });
            prop_assert_eq!(c.name(), if official { "beacon_official" } else { "beacon" });
        }
    }

    #[cfg(feature = "serde")]
    #[test]
    fn serde_round_trips_and_reads_as_the_string_does(c in config()) {
        let json = serde_json::to_value(&c).unwrap();
        prop_assert_eq!(serde_json::from_value::<EstimatorConfig>(json.clone()).unwrap(), c.clone());
        // Only the keys Display writes, as JSON: the same config.
        let text = c.to_string();
        let object = json.as_object().unwrap();
        let mut sparse = serde_json::Map::new();
        sparse.insert("adv_estimator".into(), object["adv_estimator"].clone());
        if let Some((_, pairs)) = text.split_once(':') {
            for key in object.keys().filter(|k| pairs.contains(&format!("{k}="))) {
                sparse.insert(key.clone(), object[key].clone());
            }
        }
        prop_assert_eq!(serde_json::from_value::<EstimatorConfig>(sparse.into()).unwrap(), c);
    }
}
