//! BEACON with discovered milestones against GRPO and against BEACON with the environment's
//! milestones, in the training testbed (`testbed/`, the key chain).
//!
//! Discovery sees what an LLM trainer has: each step's action and response text and each
//! episode's success, one task group at a time (`MilestoneSource::custom`). The testbed's
//! labeler gets no task id, so the task key is the group's first observation (its "prompt");
//! the memory carries across iterations. Same settings as the testbed's sweep: G = 8, 4 tasks
//! per iteration, η = 100 with batch-RMS scaling, budget 4 steps a room, seeds 0..N.
//!
//! The last column turns off the success-free signal (`novelty: false`): discovery then learns
//! only from successes, and finds nothing while no rollout succeeds.
//!
//! `cargo run -p beacon-rl-testbed --release --example discover_testbed [-- K… ]` (default K = 2 4 6 8; 10 seeds,
//! 300 iterations; `DISCOVER_SEEDS=n` for fewer seeds).

use beacon_rl::milestone::discover::{DiscoveryConfig, MilestoneDiscovery};
use beacon_rl::milestone::Transition;
use beacon_rl::RolloutBatch;
use beacon_rl_testbed::{
    auc, final_success, mean, train, EpisodeText, KeyChain, Method, MilestoneSource, TrainerConfig,
};

type BoxResult<T> = Result<T, Box<dyn std::error::Error>>;

/// A testbed labeler backed by one `MilestoneDiscovery` (its memory lives as long as the run).
fn discovered(novelty: bool) -> BoxResult<MilestoneSource> {
    let mut discovery = MilestoneDiscovery::new(DiscoveryConfig::default().with_novelty(novelty))?;
    Ok(MilestoneSource::custom(
        move |group: &[EpisodeText<'_>]| -> Vec<Vec<bool>> {
            let lens: Vec<usize> = group.iter().map(|e| e.steps.len()).collect();
            let rewards: Vec<f64> = group.iter().map(|e| f64::from(u8::from(e.success))).collect();
            let steps: Vec<_> = group.iter().flat_map(|e| e.steps.iter()).collect();
            let task = group
                .first()
                .and_then(|e| e.steps.first())
                .map_or("", |s| s.observation);
            let flags = RolloutBatch::from_blocks(group.len(), &lens, rewards).and_then(|batch| {
                discovery.discover(&batch, &[task], |row, _| Transition {
                    action: steps[row].action,
                    observation: steps[row].observation,
                    next_observation: steps[row].next_observation,
                    ..Transition::default()
                })
            });
            // A labeler cannot fail; an (impossible) error labels nothing.
            let flags = flags.unwrap_or_else(|_| vec![false; steps.len()]);
            let mut at = 0;
            lens.iter()
                .map(|&n| {
                    at += n;
                    flags[at - n..at].to_vec()
                })
                .collect()
        },
    ))
}

fn main() -> BoxResult<()> {
    let ks: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let ks = if ks.is_empty() { vec![2, 4, 6, 8] } else { ks };
    // DISCOVER_SEEDS=n for a quicker look while iterating.
    let seeds: u64 = std::env::var("DISCOVER_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    println!(
        "K  | grpo AUC (final) | beacon, discovered AUC (final) | beacon, env AUC (final) | gap closed | without novelty: AUC (final), gap closed"
    );
    for k in ks {
        let env = KeyChain::new(k, 4)?;
        let mut row = Vec::new();
        for which in 0..4 {
            let (mut aucs, mut finals) = (Vec::new(), Vec::new());
            for seed in 0..seeds {
                let config = TrainerConfig::default()
                    .with_iterations(300)
                    .with_learning_rate(100.0)
                    .with_seed(seed);
                let run = match which {
                    0 => train(&env, Method::Grpo, &mut MilestoneSource::Env, &config)?,
                    1 => train(&env, Method::Beacon, &mut discovered(true)?, &config)?,
                    2 => train(&env, Method::Beacon, &mut MilestoneSource::Env, &config)?,
                    _ => train(&env, Method::Beacon, &mut discovered(false)?, &config)?,
                };
                aucs.push(auc(&run.success));
                finals.push(final_success(&run.success));
            }
            row.push((mean(&aucs), mean(&finals)));
        }
        let gap = row[2].0 - row[0].0;
        let closed = |auc: f64| {
            if gap > 1e-9 {
                format!("{:.0}%", 100.0 * (auc - row[0].0) / gap)
            } else {
                "no gap".into()
            }
        };
        println!(
            "{k}  | {:.3} ({:.3})    | {:.3} ({:.3})                  | {:.3} ({:.3})           | {:<10} | {:.3} ({:.3}), {}",
            row[0].0,
            row[0].1,
            row[1].0,
            row[1].1,
            row[2].0,
            row[2].1,
            closed(row[1].0),
            row[3].0,
            row[3].1,
            closed(row[3].0)
        );
    }
    Ok(())
}
