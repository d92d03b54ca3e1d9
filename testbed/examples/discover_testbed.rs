//! Judging discovery by training: BEACON with discovered milestones, relearned online as the
//! policy improves, against GRPO and against BEACON with the environment's milestones, in the
//! training testbed (`testbed/`, see docs/testbed.md): the key chain at graded budgets
//! and the decoy, with the held-out evaluation of each trained policy.
//!
//! Discovery sees what an LLM trainer has: each step's action and response text and each
//! episode's outcome, one task group at a time (`MilestoneSource::custom`), and one memory for
//! the whole run (so its milestones change as the policy's rollouts change). The testbed's
//! labeler gets no task id, so the task key is the group's first observation (its "prompt").
//! Settings of the testbed's sweep: G = 8, 4 tasks per iteration, η = 100 with batch-RMS
//! scaling, 300 iterations, seeds 0..N (paired: every method sees the same seeds).
//!
//! Per cell: mean AUC (mean training success) of each method, mean held-out greedy success,
//! and the **ratio** (AUC(discovered) − AUC(GRPO)) / (AUC(environment) − AUC(GRPO)): the share
//! of the environment milestones' gain that discovery recovers. Its spread is over seeds: the
//! per-seed ratio (same seed for the three methods) as mean ± std and min, over the seeds
//! whose environment gain is at least 0.05 (below that a ratio is noise over noise).
//!
//! Decoy: every room has a trapdoor that ends the episode in failure. The environment's
//! signal flags it (`env`); `env_doors` flags the real doors only. Discovered milestones are
//! counted on trapdoor steps: the decoy check. Slow decoy: the same trapdoor, but the episode
//! goes on in the cellar, where nothing can be done, until the budget runs out. Busy decoy:
//! the slow decoy with keys to take and drop in the cellar, still with no way out.
//!
//! `cargo run -p beacon-rl-testbed --release --example discover_testbed [-- --seeds N]
//! [--no-novelty]` (default 10 seeds; `--no-novelty`: no milestones before a task's first
//! success, `DiscoveryConfig::novelty` off).

use std::cell::Cell;
use std::rc::Rc;

use beacon_rl::milestone::{DiscoveryConfig, MilestoneDiscovery, Transition};
use beacon_rl::RolloutBatch;
use beacon_rl_testbed::{
    auc, mean, std_dev, train, EpisodeText, KeyChain, Method, MilestoneSource, TrainerConfig,
};

type BoxResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Trapdoor steps seen and flagged by discovery (the decoy check).
type DecoyCount = Rc<Cell<(usize, usize)>>;

/// A testbed labeler backed by one `MilestoneDiscovery` (its memory lives as long as the run).
fn discovered(decoys: DecoyCount) -> BoxResult<MilestoneSource> {
    let novelty = !std::env::args().any(|a| a == "--no-novelty");
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
            let (mut seen, mut kept) = decoys.get();
            for (s, &f) in steps.iter().zip(&flags) {
                if s.action.starts_with("open trapdoor") {
                    seen += 1;
                    kept += usize::from(f);
                }
            }
            decoys.set((seen, kept));
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

/// The milestone sources compared.
#[derive(Clone, Copy)]
enum Source {
    Env,
    EnvDoors,
    Discovered,
}

/// Per seed: AUC and held-out greedy success; then the trapdoor steps seen and flagged.
type Runs = (Vec<f64>, Vec<f64>, (usize, usize));

/// AUCs and held-out greedy successes over the seeds, and the decoy count.
fn runs(env: &KeyChain, method: Method, source: Source, seeds: u64) -> BoxResult<Runs> {
    let (mut aucs, mut heldout) = (Vec::new(), Vec::new());
    let decoys: DecoyCount = Rc::new(Cell::new((0, 0)));
    for seed in 0..seeds {
        let config = TrainerConfig::default()
            .with_iterations(300)
            .with_learning_rate(100.0)
            .with_seed(seed);
        let mut milestones = match source {
            Source::Env => MilestoneSource::Env,
            Source::EnvDoors => MilestoneSource::EnvDoors,
            Source::Discovered => discovered(Rc::clone(&decoys))?,
        };
        let run = train(env, method, &mut milestones, &config)?;
        aucs.push(auc(&run.success));
        heldout.push(run.heldout_greedy.unwrap_or(f64::NAN));
    }
    Ok((aucs, heldout, decoys.get()))
}

/// "ratio of means (per-seed mean ± std, min; n seeds)", or why there is none.
fn ratio(grpo: &[f64], env: &[f64], disc: &[f64]) -> String {
    let gain = mean(env) - mean(grpo);
    if gain < 0.05 {
        return format!("no gap (env gain {gain:+.3})");
    }
    let per_seed: Vec<f64> = (0..grpo.len())
        .filter(|&s| env[s] - grpo[s] >= 0.05)
        .map(|s| (disc[s] - grpo[s]) / (env[s] - grpo[s]))
        .collect();
    let min = per_seed.iter().copied().fold(f64::INFINITY, f64::min);
    format!(
        "{:.3} (per seed {:.3} ± {:.3}, min {:.3}; {} seeds)",
        (mean(disc) - mean(grpo)) / gain,
        mean(&per_seed),
        std_dev(&per_seed),
        min,
        per_seed.len()
    )
}

fn seeds() -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--seeds")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(10)
}

fn main() -> BoxResult<()> {
    let seeds = seeds();
    println!("key chain: AUC mean ± std over {seeds} seeds (held-out greedy success)");
    println!("budget K | grpo | beacon, env | beacon, discovered | ratio");
    for budget in [4, 6, 8] {
        for k in [4, 6, 8] {
            let env = KeyChain::new(k, budget)?;
            let (g, gh, _) = runs(&env, Method::Grpo, Source::Env, seeds)?;
            let (e, eh, _) = runs(&env, Method::Beacon, Source::Env, seeds)?;
            let (d, dh, _) = runs(&env, Method::Beacon, Source::Discovered, seeds)?;
            println!(
                "{budget} {k} | {:.3} ± {:.3} ({:.2}) | {:.3} ± {:.3} ({:.2}) | {:.3} ± {:.3} ({:.2}) | {}",
                mean(&g),
                std_dev(&g),
                mean(&gh),
                mean(&e),
                std_dev(&e),
                mean(&eh),
                mean(&d),
                std_dev(&d),
                mean(&dh),
                ratio(&g, &e, &d)
            );
        }
    }
    decoy_table("decoy", KeyChain::with_decoy, seeds)?;
    decoy_table("slow decoy", KeyChain::with_slow_decoy, seeds)?;
    decoy_table("busy decoy", KeyChain::with_busy_decoy, seeds)?;
    Ok(())
}

/// One decoy table: K = 2 and 4 at budget 4, BEACON and `beacon_completion`, each with the
/// environment's milestones, the real doors only, and discovery.
fn decoy_table(
    name: &str,
    make: fn(usize, usize) -> beacon_rl::Result<KeyChain>,
    seeds: u64,
) -> BoxResult<()> {
    println!("\n{name} (budget 4): AUC mean ± std (held-out greedy); trapdoor steps flagged by discovery");
    println!(
        "K method | grpo | env (decoy flagged) | env_doors | discovered | ratio vs env_doors | decoy flags"
    );
    for k in [2, 4] {
        let env = make(k, 4)?;
        let (g, gh, _) = runs(&env, Method::Grpo, Source::Env, seeds)?;
        for method in [Method::Beacon, Method::BeaconCompletion] {
            let (e, eh, _) = runs(&env, method, Source::Env, seeds)?;
            let (o, oh, _) = runs(&env, method, Source::EnvDoors, seeds)?;
            let (d, dh, (seen, kept)) = runs(&env, method, Source::Discovered, seeds)?;
            println!(
                "{k} {} | {:.3} ({:.2}) | {:.3} ({:.2}) | {:.3} ({:.2}) | {:.3} ± {:.3} ({:.2}) | {} | {kept} of {seen}",
                method,
                mean(&g),
                mean(&gh),
                mean(&e),
                mean(&eh),
                mean(&o),
                mean(&oh),
                mean(&d),
                std_dev(&d),
                mean(&dh),
                ratio(&g, &o, &d)
            );
        }
    }
    Ok(())
}
