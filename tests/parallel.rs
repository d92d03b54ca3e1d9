//! The `rayon` feature changes no bit: BEACON (both flavours), GiGPO and the token broadcast
//! give identical results on a 1-thread pool (one chunk: the serial path) and on 2- and
//! 4-thread pools (groups / token rows split into chunks), on random batches large enough to be
//! split (GAE and REINFORCE++: `tests/it/parallel_whiten.rs`). Also counts heap allocations on
//! every thread: after a warm-up call, a parallel call allocates nothing (per-chunk workspaces
//! are kept in the `Workspace`), for these and for GAE and REINFORCE++.
//!
//! `cargo test --features rayon --test parallel`
#![cfg(feature = "rayon")]

#[path = "support/splitmix64.rs"]
mod splitmix64;
use beacon_rl::estimator::{
    AdvantageEstimator, Beacon, BeaconConfig, BeaconFlavour, EstimatorConfig, EstimatorInput, Gigpo,
    GigpoConfig, GigpoOutput, NormMode, Workspace,
};
use beacon_rl::tensor::{broadcast_into, MaskView};
use beacon_rl::RolloutBatch;
use ndarray::Array2;
use splitmix64::SplitMix64;

// The shared counting allocator; this binary counts on every thread (the pool's workers
// allocate for the measured call), so its tests run one at a time (`one_at_a_time`).
#[path = "support/counting.rs"]
mod counting;

/// The counter sees every thread: tests of this binary run one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("pool")
}

/// `f` on pools of 1, 2 and 4 threads: every result equals the 1-thread one, bit for bit.
fn same_bits_on_every_pool<R: PartialEq + std::fmt::Debug + Send>(what: &str, f: impl Fn() -> R + Sync) {
    let serial = pool(1).install(|| {
        assert_eq!(rayon::current_num_threads(), 1);
        f()
    });
    for threads in [2, 4] {
        let parallel = pool(threads).install(|| {
            assert_eq!(rayon::current_num_threads(), threads);
            f()
        });
        assert!(parallel == serial, "{what}: {threads} threads differ from 1");
    }
}

fn bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// An agent batch: `trajs` trajectories of 1..=40 steps in groups of 1..=8, rows in step order
/// (`from_blocks`-like) or shuffled by interleaving keys; milestone flags, step rewards and
/// anchors drawn at random.
struct Agent {
    batch: RolloutBatch,
    flags: Vec<bool>,
    step_rewards: Vec<f64>,
    anchors: Vec<u64>,
}

fn agent(seed: u64, trajs: usize, interleaved: bool) -> Agent {
    let mut rng = SplitMix64::new(seed);
    let mut below = |n: u64| rng.next_u64() % n;
    let (mut uid, mut traj, mut reward) = (vec![], vec![], vec![]);
    let mut j = 0;
    let mut g = 0u64;
    while j < trajs {
        let size = 1 + below(8) as usize;
        for _ in 0..size.min(trajs - j) {
            let r = below(3) as f64 * 0.5 - 0.25;
            for _ in 0..1 + below(40) {
                uid.push(g);
                traj.push(j as u64);
                reward.push(r);
            }
            j += 1;
        }
        g += 1;
    }
    let rows = uid.len();
    if interleaved {
        // Rotate rows by a third: groups stay whole but rows leave step order.
        let k = rows / 3;
        uid.rotate_left(k);
        traj.rotate_left(k);
        reward.rotate_left(k);
    }
    let batch = RolloutBatch::from_row_keys(&uid, &traj, &reward).expect("batch");
    let mut rng = SplitMix64::new(seed ^ 0xABCD);
    let flags = (0..rows).map(|_| rng.next_f64() < 0.2).collect();
    let step_rewards = (0..rows).map(|_| (rng.next_f64() * 4.0).floor() - 1.0).collect();
    let anchors = (0..rows).map(|r| uid[r] * 64 + rng.next_u64() % 12).collect();
    Agent {
        batch,
        flags,
        step_rewards,
        anchors,
    }
}

fn beacon_configs() -> Vec<BeaconConfig> {
    let mut std_norm = BeaconConfig::official();
    std_norm.flavour = BeaconFlavour::Official {
        norm: NormMode::MeanStdNorm,
    };
    vec![BeaconConfig::default(), BeaconConfig::official(), std_norm]
}

#[test]
fn beacon_is_bit_identical_on_every_pool() {
    let _serial = one_at_a_time();
    for (seed, interleaved) in [(1, false), (2, true), (3, false)] {
        let a = agent(seed, 1500, interleaved);
        assert!(a.batch.num_steps() > 4 * 4096, "large enough for 4 chunks");
        for cfg in beacon_configs() {
            let b = Beacon::new(cfg).unwrap();
            same_bits_on_every_pool("beacon parts", || {
                let out = b.compute(&a.batch, &a.flags).unwrap();
                (
                    bits(&out.advantages),
                    bits(&out.trajectory_advantages),
                    bits(&out.segment_advantages),
                    bits(&out.shaped_rewards),
                    out.segments,
                )
            });
        }
    }
}

#[test]
fn gigpo_is_bit_identical_on_every_pool() {
    let _serial = one_at_a_time();
    for (seed, interleaved) in [(4, false), (5, true)] {
        let a = agent(seed, 1500, interleaved);
        let text: Vec<String> = a.anchors.iter().map(|s| format!("state {}", s % 64)).collect();
        for mode in [NormMode::MeanNorm, NormMode::MeanStdNorm] {
            let g = Gigpo::new(GigpoConfig::default().with_norm(mode)).unwrap();
            let run = |out: GigpoOutput| {
                (
                    bits(&out.advantages),
                    bits(&out.episode_advantages),
                    bits(&out.step_advantages),
                    bits(&out.step_returns),
                    out.step_groups,
                    out.num_step_groups,
                )
            };
            same_bits_on_every_pool("gigpo u64", || {
                run(g.compute_by_key(&a.batch, &a.step_rewards, &a.anchors).unwrap())
            });
            same_bits_on_every_pool("gigpo text", || {
                run(g.compute(&a.batch, &a.step_rewards, &text).unwrap())
            });
        }
    }
}

#[test]
fn broadcast_is_bit_identical_on_every_pool() {
    let _serial = one_at_a_time();
    let (rows, cols) = (700, 512);
    let mut rng = SplitMix64::new(9);
    let values: Vec<f64> = (0..rows).map(|_| rng.next_f64() * 2.0 - 1.0).collect();
    let lengths: Vec<usize> = (0..rows)
        .map(|_| (rng.next_u64() % (cols as u64 + 1)) as usize)
        .collect();
    let b = Array2::from_shape_fn((rows, cols), |(r, t)| t < lengths[r] && (r + t) % 7 != 0);
    let i = b.mapv(i64::from);
    let masks = [
        MaskView::from(&b),
        MaskView::from(&i),
        MaskView::Lengths {
            lengths: &lengths,
            cols,
        },
        MaskView::from(b.t()),
    ];
    for m in masks {
        let rows = m.dim().0;
        same_bits_on_every_pool("broadcast f32", || {
            let mut out = Array2::<f32>::from_elem(m.dim(), f32::NAN);
            broadcast_into(&values[..rows], m, &mut out).unwrap();
            out.mapv(f32::to_bits)
        });
        same_bits_on_every_pool("broadcast f64", || {
            let mut out = Array2::<f64>::from_elem(m.dim(), f64::NAN);
            broadcast_into(&values[..rows], m, &mut out).unwrap();
            out.mapv(f64::to_bits)
        });
    }
}

/// Heap allocations (on every thread) of a second call of `call`, after a warm-up call.
fn allocations_after_warm_up(call: &mut impl FnMut()) -> usize {
    call();
    counting::all_threads(call)
}

/// The trait path a trainer takes, end to end into f32 tokens, and its allocations: none on
/// any thread after the warm-up call.
#[test]
fn trait_path_is_bit_identical_and_allocation_free_after_warm_up() {
    let _serial = one_at_a_time();
    let a = agent(6, 1500, false);
    let rows = a.batch.num_steps();
    let lengths: Vec<usize> = (0..rows).map(|r| 1 + r % 64).collect();
    let text: Vec<String> = a.anchors.iter().map(|s| format!("state {s}")).collect();
    let text: Vec<&str> = text.iter().map(String::as_str).collect();
    let input = EstimatorInput::new(&a.batch)
        .with_milestones(&a.flags)
        .with_step_rewards(&a.step_rewards)
        .with_anchor_obs(&text)
        .with_response_mask(MaskView::Lengths {
            lengths: &lengths,
            cols: 64,
        });
    for name in ["beacon", "beacon_official", "gigpo"] {
        let est: Box<dyn AdvantageEstimator> = name.parse::<EstimatorConfig>().unwrap().build().unwrap();
        same_bits_on_every_pool(name, || {
            let mut out = Array2::<f32>::zeros((rows, 64));
            est.estimate_into(&input, (&mut out).into(), None, &mut Workspace::default())
                .unwrap();
            out.mapv(f32::to_bits)
        });
        let two = pool(2);
        let (mut ws, mut out) = (Workspace::default(), Array2::<f32>::zeros((rows, 64)));
        let mut call = || {
            two.install(|| est.estimate_into(&input, (&mut out).into(), None, &mut ws))
                .unwrap()
        };
        assert_eq!(
            allocations_after_warm_up(&mut call),
            0,
            "{name}: allocations after warm-up"
        );
    }
}

/// Row scores that differ within trajectories (verl-agent's invalid-action penalty) through
/// the step path: the chunked BEACON and GiGPO runs read them as the serial run does, and
/// allocate nothing after the warm-up call.
#[test]
fn row_scores_are_bit_identical_and_allocation_free_on_every_pool() {
    let _serial = one_at_a_time();
    let a = agent(7, 1500, true);
    let rows = a.batch.num_steps();
    let mut rng = SplitMix64::new(77);
    // R(τ) minus 0.1 on about 30% of the rows.
    let mut r_tau = vec![0.0; rows];
    for j in 0..a.batch.num_trajectories() {
        for &r in a.batch.trajectory_rows(j) {
            r_tau[r] = a.batch.terminal_rewards()[j];
        }
    }
    let scores: Vec<f64> = r_tau
        .iter()
        .map(|r| r - if rng.next_f64() < 0.3 { 0.1 } else { 0.0 })
        .collect();
    let input = EstimatorInput::new(&a.batch)
        .with_milestones(&a.flags)
        .with_step_rewards(&a.step_rewards)
        .with_anchor_ids(&a.anchors)
        .with_row_scores(&scores);
    let mut std_norm = BeaconConfig::official();
    std_norm.flavour = BeaconFlavour::Official {
        norm: NormMode::MeanStdNorm,
    };
    let estimators: Vec<Box<dyn AdvantageEstimator>> = vec![
        "beacon_official"
            .parse::<EstimatorConfig>()
            .unwrap()
            .build()
            .unwrap(),
        Box::new(Beacon::new(std_norm).unwrap()),
        "gigpo".parse::<EstimatorConfig>().unwrap().build().unwrap(),
    ];
    for est in &estimators {
        let run = || {
            let mut out = vec![0.0; rows];
            est.estimate_steps_into(&input, &mut out, &mut Workspace::default())
                .unwrap();
            bits(&out)
        };
        same_bits_on_every_pool(est.name(), run);
        // The scores are read: without them the result differs.
        let mut plain = vec![0.0; rows];
        let mut no_scores = input;
        no_scores.row_scores = None;
        est.estimate_steps_into(&no_scores, &mut plain, &mut Workspace::default())
            .unwrap();
        assert_ne!(bits(&plain), run(), "{}", est.name());
        let two = pool(2);
        let (mut ws, mut out) = (Workspace::default(), vec![0.0; rows]);
        let mut call = || {
            two.install(|| est.estimate_steps_into(&input, &mut out, &mut ws))
                .unwrap()
        };
        assert_eq!(allocations_after_warm_up(&mut call), 0, "{}", est.name());
    }
}

/// GAE and REINFORCE++ on a 2-thread pool (rows split into chunks, each with its own block
/// buffers from the `Workspace`): no allocation on any thread after the warm-up call.
#[test]
fn whitening_scans_allocate_nothing_after_warm_up_on_a_pool() {
    let _serial = one_at_a_time();
    // 3,000 rows × 64 tokens: above twice the split threshold (65,536 tokens), so the
    // 2-thread pool gets two chunks.
    let (rows, cols) = (3000, 64);
    let batch = RolloutBatch::from_group_keys(&vec![0; rows], &vec![0.0; rows]).unwrap();
    let rewards = Array2::from_shape_fn((rows, cols), |(r, t)| ((r * 7 + t) % 5) as f32 - 2.0);
    let values = Array2::from_shape_fn((rows, cols), |(r, t)| ((r + t * 3) % 7) as f32 * 0.25);
    let mask = Array2::from_shape_fn((rows, cols), |(r, t)| i64::from(t < 1 + r % cols && t != 2));
    let input = EstimatorInput::new(&batch)
        .with_token_level_rewards(&rewards)
        .with_values(&values)
        .with_response_mask(&mask);
    for name in ["gae", "reinforce_plus_plus"] {
        let est: Box<dyn AdvantageEstimator> = name.parse::<EstimatorConfig>().unwrap().build().unwrap();
        let two = pool(2);
        let mut ws = Workspace::default();
        let (mut adv, mut ret) = (
            Array2::<f32>::zeros((rows, cols)),
            Array2::<f32>::zeros((rows, cols)),
        );
        let mut call = || {
            two.install(|| est.estimate_into(&input, (&mut adv).into(), Some((&mut ret).into()), &mut ws))
                .unwrap()
        };
        assert_eq!(
            allocations_after_warm_up(&mut call),
            0,
            "{name}: allocations after warm-up"
        );
    }
}

/// The counter sees allocations made on a pool's worker threads, not only the caller's.
#[test]
fn the_counter_sees_worker_threads() {
    let _serial = one_at_a_time();
    let pool = pool(2);
    let on_worker = counting::all_threads(|| {
        pool.install(|| drop(std::hint::black_box(vec![1u8; 10])));
    });
    assert!(on_worker >= 1, "{on_worker}");
}
