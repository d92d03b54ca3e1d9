//! The training testbed's sweep: trains a tabular policy with every method on the key chain
//! (and its decoy variant) at several horizons and seeds, and prints what trains better.
//!
//! cargo run -p beacon-rl-testbed --release --example testbed [-- [--horizons 2,4,6,8] [--seeds 10]
//!     [--iterations 300] [--budgets 4,6,8] [--lr X] [--skip-tuning] [--scale rms|none]
//!     [--env both|key|decoy|decoy-doors|all] [--eval-episodes 200]
//!     [--format text|json] [--svg docs/testbed.svg]]
//!
//! `docs/testbed.svg` is `cargo run -p beacon-rl-testbed --release --example testbed -- --svg
//! docs/testbed.svg` (from the repository root).
//!
//! 1. **Learning rate.** Unless `--lr` is given, one shared learning rate is chosen from
//!    `--lr-grid` as the one with the highest mean AUC of `grpo` on the key chain at K =
//!    `--tune-k` over `--tune-seeds` seeds numbered from 1000 (never used for evaluation,
//!    which uses seeds 0..`--seeds`). The best rate of every other method on the same grid is
//!    reported too, and each method is also evaluated at its own rate at the longest horizon.
//! 2. **Random policy.** The uniform policy's success rate per environment and K.
//! 3. **Sweep.** Per environment, budget per room, K and method: final training success (mean
//!    ± std over seeds), held-out success of the trained policy (fresh tasks and action draws,
//!    greedy and sampling), iterations to 50% success (median over the seeds that reach it,
//!    and how many do), AUC (mean ± std); BEACON against GRPO and GiGPO seed by seed.
//!    Environments: `key` (the key chain), `decoy` (the decoy variant, the trapdoor flagged
//!    as a milestone by the environment's signal), `decoy_doors` (the decoy variant with only
//!    the real doors flagged).
//! 4. **Table 3.** The ablation rows' AUC at each K next to the paper's numbers, with
//!    Kendall's τ-b between the two orders.

use std::error::Error;
use std::path::PathBuf;
use std::time::Instant;

use beacon_rl_testbed::{
    auc, final_success, iterations_to_half, kendall_tau, mean, random_policy_success, std_dev, train,
    AdvantageScale, KeyChain, Method, MilestoneSource, TrainerConfig, TrainingRun,
};
use beacon_rl_testbed::{PAPER_TABLE3_ALFWORLD, PAPER_TABLE3_WEBSHOP};
use clap::{Parser, ValueEnum};
use serde_json::{json, Value};

mod draw;

use draw::draw;

type BoxResult<T> = Result<T, Box<dyn Error>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Envs {
    /// key and decoy
    Both,
    Key,
    Decoy,
    DecoyDoors,
    /// key, decoy and decoy-doors
    All,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scale {
    Rms,
    None,
}

/// Train a tabular policy with every estimator on the key chain and compare.
#[derive(Parser, Debug, Clone)]
#[command(name = "testbed")]
struct Args {
    /// Numbers of rooms K (milestones) to sweep; the budget is H = budget-per-room · K.
    #[arg(long, value_delimiter = ',', default_value = "2,4,6,8")]
    horizons: Vec<usize>,
    /// Evaluation seeds 0..N.
    #[arg(long, default_value_t = 10)]
    seeds: u64,
    /// Policy updates per run.
    #[arg(long, default_value_t = 300)]
    iterations: usize,
    /// Step budgets per room to sweep (H = budget · K).
    #[arg(long, alias = "budget-per-room", value_delimiter = ',', default_value = "4")]
    budgets: Vec<usize>,
    /// Shared learning rate; default: tuned on grpo (see the module docs).
    #[arg(long)]
    lr: Option<f64>,
    /// Skip the learning-rate tuning (needs --lr).
    #[arg(long)]
    skip_tuning: bool,
    /// Held-out episodes per trained policy, for each of greedy and sampling.
    #[arg(long, default_value_t = 200)]
    eval_episodes: usize,
    /// Learning rates tried by the tuning.
    #[arg(long, value_delimiter = ',', default_value = "3,10,30,100,300,1000")]
    lr_grid: Vec<f64>,
    /// K of the tuning runs.
    #[arg(long, default_value_t = 4)]
    tune_k: usize,
    /// Tuning seeds (numbered from 1000).
    #[arg(long, default_value_t = 5)]
    tune_seeds: u64,
    /// Advantage scaling before the update: batch RMS or none.
    #[arg(long, value_enum, default_value_t = Scale::Rms)]
    scale: Scale,
    /// Methods (default: all).
    #[arg(long, value_delimiter = ',')]
    methods: Vec<String>,
    /// Environments.
    #[arg(long, value_enum, default_value_t = Envs::Both)]
    env: Envs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// SVG of the success curves (one panel per environment and K).
    #[arg(long, default_value = "target/testbed.svg")]
    svg: PathBuf,
}

/// Runs of one (environment, budget, K, method) over the seeds.
struct Cell {
    env: &'static str,
    budget: usize,
    k: usize,
    method: Method,
    curves: Vec<Vec<f64>>,
    greedy: Vec<f64>,
    sampling: Vec<f64>,
}

impl Cell {
    fn new(env: &'static str, budget: usize, k: usize, method: Method, runs: Vec<TrainingRun>) -> Self {
        let held = |f: fn(&TrainingRun) -> Option<f64>| runs.iter().filter_map(f).collect();
        Self {
            env,
            budget,
            k,
            method,
            greedy: held(|r| r.heldout_greedy),
            sampling: held(|r| r.heldout_sampling),
            curves: runs.into_iter().map(|r| r.success).collect(),
        }
    }
    fn aucs(&self) -> Vec<f64> {
        self.curves.iter().map(|c| auc(c)).collect()
    }
    fn finals(&self) -> Vec<f64> {
        self.curves.iter().map(|c| final_success(c)).collect()
    }
    fn to_half(&self) -> (Option<f64>, usize) {
        let mut hits: Vec<f64> = self
            .curves
            .iter()
            .filter_map(|c| iterations_to_half(c))
            .map(|i| i as f64)
            .collect();
        hits.sort_by(f64::total_cmp);
        let median = (!hits.is_empty()).then(|| {
            let n = hits.len();
            if n % 2 == 1 {
                hits[n / 2]
            } else {
                (hits[n / 2 - 1] + hits[n / 2]) / 2.0
            }
        });
        (median, hits.len())
    }
}

fn make_env(name: &str, k: usize, budget: usize) -> BoxResult<KeyChain> {
    Ok(if name.starts_with("decoy") {
        KeyChain::with_decoy(k, budget)?
    } else {
        KeyChain::new(k, budget)?
    })
}

/// The milestone flags of an environment name: `decoy_doors` flags the real doors only.
fn source(name: &str) -> MilestoneSource {
    if name == "decoy_doors" {
        MilestoneSource::EnvDoors
    } else {
        MilestoneSource::Env
    }
}

fn runs(
    env_name: &str,
    env: &KeyChain,
    method: Method,
    lr: f64,
    seeds: impl Iterator<Item = u64>,
    args: &Args,
) -> BoxResult<Vec<TrainingRun>> {
    let scale = match args.scale {
        Scale::Rms => AdvantageScale::BatchRms,
        Scale::None => AdvantageScale::None,
    };
    seeds
        .map(|seed| {
            let config = TrainerConfig::default()
                .with_iterations(args.iterations)
                .with_learning_rate(lr)
                .with_scale(scale)
                .with_eval_episodes(args.eval_episodes)
                .with_seed(seed);
            Ok(train(env, method, &mut source(env_name), &config)?)
        })
        .collect()
}

/// Success curves only (the tuning reads nothing else).
fn curves(
    env_name: &str,
    env: &KeyChain,
    method: Method,
    lr: f64,
    seeds: impl Iterator<Item = u64>,
    args: &Args,
) -> BoxResult<Vec<Vec<f64>>> {
    let args = Args {
        eval_episodes: 0,
        ..args.clone()
    };
    let runs = runs(env_name, env, method, lr, seeds, &args)?;
    Ok(runs.into_iter().map(|r| r.success).collect())
}

/// Each method's AUC per rate of the grid on the tuning seeds, and its best rate.
fn tune(methods: &[Method], budget: usize, args: &Args) -> BoxResult<Vec<Tuned>> {
    let tune_env = make_env("key", args.tune_k, budget)?;
    let tune_seeds = || 1000..1000 + args.tune_seeds;
    let mut tuned = Vec::new();
    for &m in methods {
        let mut grid = Vec::new();
        for &lr in &args.lr_grid {
            let c = curves("key", &tune_env, m, lr, tune_seeds(), args)?;
            grid.push((lr, mean(&c.iter().map(|c| auc(c)).collect::<Vec<_>>())));
        }
        // Highest AUC; ties go to the smaller rate (the grid is ascending).
        let best = grid.iter().copied().fold(
            (f64::NAN, f64::NEG_INFINITY),
            |b, x| if x.1 > b.1 { x } else { b },
        );
        tuned.push((m, best.0, best.1, grid));
    }
    Ok(tuned)
}

/// Every (environment, budget, K, method) cell at the shared rate, seeds 0..N.
fn sweep(envs: &[&'static str], methods: &[Method], lr: f64, args: &Args) -> BoxResult<Vec<Cell>> {
    let mut cells = Vec::new();
    for &e in envs {
        for &b in &args.budgets {
            for &k in &args.horizons {
                let env = make_env(e, k, b)?;
                for &m in methods {
                    let r = runs(e, &env, m, lr, 0..args.seeds, args)?;
                    cells.push(Cell::new(e, b, k, m, r));
                }
            }
        }
    }
    Ok(cells)
}

fn main() -> BoxResult<()> {
    let args = Args::parse();
    let start = Instant::now();
    let methods: Vec<Method> = if args.methods.is_empty() {
        Method::all()
    } else {
        args.methods.iter().map(|m| m.parse()).collect::<Result<_, _>>()?
    };
    let envs: Vec<&'static str> = match args.env {
        Envs::Both => vec!["key", "decoy"],
        Envs::Key => vec!["key"],
        Envs::Decoy => vec!["decoy"],
        Envs::DecoyDoors => vec!["decoy_doors"],
        Envs::All => vec!["key", "decoy", "decoy_doors"],
    };
    let longest = *args.horizons.iter().max().ok_or("no horizons")?;
    let first_budget = *args.budgets.first().ok_or("no budgets")?;
    if args.skip_tuning && args.lr.is_none() {
        return Err("--skip-tuning needs --lr".into());
    }

    // 1. Learning rates, on seeds 1000.. at K = tune_k (key chain, first budget).
    let tuned = if args.skip_tuning {
        Vec::new()
    } else {
        tune(&methods, first_budget, &args)?
    };
    let grpo_lr = tuned.iter().find(|t| t.0 == Method::Grpo).map(|t| t.1);
    let lr = match (args.lr, grpo_lr) {
        (Some(lr), _) => lr,
        (None, Some(lr)) => lr,
        (None, None) => 30.0,
    };

    // 2. Random policy (the decoy with doors-only flags is the decoy's environment).
    let mut random = Vec::new();
    for &e in envs.iter().filter(|&&e| e != "decoy_doors") {
        for &b in &args.budgets {
            for &k in &args.horizons {
                random.push((e, b, k, random_policy_success(&make_env(e, k, b)?, 20_000, 1)));
            }
        }
    }

    // 3. Sweep at the shared rate.
    let cells = sweep(&envs, &methods, lr, &args)?;
    // Each method at its own rate, longest K, key chain, first budget.
    let own_env = make_env("key", longest, first_budget)?;
    let mut own = Vec::new();
    for t in &tuned {
        let c = curves("key", &own_env, t.0, t.1, 0..args.seeds, &args)?;
        own.push((t.0, t.1, c.iter().map(|c| auc(c)).collect::<Vec<_>>()));
    }
    let seconds = start.elapsed().as_secs_f64();

    let report = Report {
        args: &args,
        lr,
        tuned: &tuned,
        random: &random,
        cells: &cells,
        own: &own,
        seconds,
        envs: &envs,
    };
    match args.format {
        Format::Text => report.print_text(),
        Format::Json => println!("{}", serde_json::to_string_pretty(&report.json())?),
    }
    let panel_rows: Vec<(&str, usize)> = envs
        .iter()
        .flat_map(|&e| args.budgets.iter().map(move |&b| (e, b)))
        .collect();
    draw(&args.svg, &cells, &panel_rows, &args.horizons)?;
    if args.format == Format::Text {
        println!("\nsuccess curves: {}", args.svg.display());
    }
    Ok(())
}

type Tuned = (Method, f64, f64, Vec<(f64, f64)>);

struct Report<'a> {
    args: &'a Args,
    lr: f64,
    tuned: &'a [Tuned],
    random: &'a [(&'static str, usize, usize, f64)],
    cells: &'a [Cell],
    own: &'a [(Method, f64, Vec<f64>)],
    seconds: f64,
    envs: &'a [&'static str],
}

impl Report<'_> {
    fn cell(&self, env: &str, b: usize, k: usize, m: Method) -> Option<&Cell> {
        self.cells
            .iter()
            .find(|c| c.env == env && c.budget == b && c.k == k && c.method == m)
    }

    /// Seeds on which `a`'s AUC beats `b`'s, out of how many.
    fn wins(&self, env: &str, budget: usize, k: usize, a: Method, b: Method) -> Option<(usize, usize)> {
        let (a, b) = (
            self.cell(env, budget, k, a)?.aucs(),
            self.cell(env, budget, k, b)?.aucs(),
        );
        Some((a.iter().zip(&b).filter(|(x, y)| x > y).count(), a.len()))
    }

    /// Table 3 rows' mean AUC at (env, budget, K), and τ-b against the paper's two columns.
    fn table3(&self, env: &str, b: usize, k: usize) -> Option<(Vec<f64>, Option<f64>, Option<f64>)> {
        let ours: Option<Vec<f64>> = Method::table3()
            .iter()
            .map(|&m| self.cell(env, b, k, m).map(|c| mean(&c.aucs())))
            .collect();
        let ours = ours?;
        let (ta, tw) = (
            kendall_tau(&ours, &PAPER_TABLE3_ALFWORLD),
            kendall_tau(&ours, &PAPER_TABLE3_WEBSHOP),
        );
        Some((ours, ta, tw))
    }

    fn print_text(&self) {
        let a = self.args;
        println!("# Training testbed: tabular softmax policy, REINFORCE, G = 8, 4 tasks/iteration, {} iterations, {} seeds", a.iterations, a.seeds);
        println!(
            "budgets H = b·K for b in {:?}; advantage scale: {:?}; held-out: {} episodes per policy (fresh tasks and draws), greedy and sampling\n",
            a.budgets, a.scale, a.eval_episodes
        );
        if a.skip_tuning {
            println!("## Learning rate: {} (given, tuning skipped)", self.lr);
        } else {
            println!(
                "## Learning rate (grid {:?}, key chain K = {}, seeds 1000..{})",
                a.lr_grid,
                a.tune_k,
                1000 + a.tune_seeds
            );
            let over = if a.lr.is_some() {
                "; overridden by --lr"
            } else {
                ""
            };
            println!("shared rate (best for grpo{over}): {}", self.lr);
            println!("{:<32} {:>8} {:>8}   AUC per rate", "method", "best lr", "AUC");
            for (m, lr, best, grid) in self.tuned {
                let g: Vec<String> = grid.iter().map(|(_, v)| format!("{v:.3}")).collect();
                println!("{:<32} {:>8} {:>8.3}   {}", m.to_string(), lr, best, g.join(" "));
            }
        }
        println!("\n## Random policy success (20000 episodes)");
        for (e, b, k, p) in self.random {
            println!("{e:<6} b = {b} K = {k}  H = {:>3}  {p:.4}", b * k);
        }
        for &e in self.envs {
            for &b in &a.budgets {
                for &k in &a.horizons {
                    self.print_cell_table(e, b, k);
                }
            }
        }
        let longest = *a.horizons.iter().max().unwrap_or(&0);
        if !self.own.is_empty() {
            println!("\n## Each method at its own tuned rate (key chain, K = {longest})");
        }
        for (m, lr, u) in self.own {
            println!(
                "{:<32} lr {:>6}  AUC {:.3} ± {:.3}",
                m.to_string(),
                lr,
                mean(u),
                std_dev(u)
            );
        }
        println!("\n## BEACON − best of (GRPO, GiGPO), mean AUC gap per K");
        for &e in self.envs {
            for &b in &a.budgets {
                let gaps: Vec<String> = a
                    .horizons
                    .iter()
                    .filter_map(|&k| self.gap(e, b, k).map(|g| format!("K={k}: {g:+.3}")))
                    .collect();
                println!("{e:<11} b = {b}  {}", gaps.join("  "));
            }
        }
        println!("\nwall time {:.1} s", self.seconds);
    }

    fn print_cell_table(&self, e: &str, b: usize, k: usize) {
        println!(
            "\n## {e}, budget {b}/room, K = {k}, H = {}, lr = {}",
            b * k,
            self.lr
        );
        println!(
            "{:<26} {:>14} {:>14} {:>14} {:>13} {:>14}",
            "method", "train final", "held greedy", "held sampling", "iters to 50%", "AUC"
        );
        for c in self
            .cells
            .iter()
            .filter(|c| c.env == e && c.budget == b && c.k == k)
        {
            let (f, u) = (c.finals(), c.aucs());
            let (med, hit) = c.to_half();
            let half = med.map_or("—".to_owned(), |m| format!("{m:.0}"));
            println!(
                "{:<26} {:>6.3} ± {:<5.3} {} {} {:>5} ({hit:>2}/{}) {:>6.3} ± {:<5.3}",
                c.method.to_string(),
                mean(&f),
                std_dev(&f),
                pm(&c.greedy),
                pm(&c.sampling),
                half,
                c.curves.len(),
                mean(&u),
                std_dev(&u)
            );
        }
        for (x, rival) in [
            (Method::Beacon, Method::Grpo),
            (Method::Beacon, Method::Gigpo),
            (Method::BeaconCompletion, Method::Beacon),
        ] {
            if let Some((w, n)) = self.wins(e, b, k, x, rival) {
                println!("{x} AUC > {rival} AUC on {w}/{n} seeds");
            }
        }
        if let Some((ours, ta, tw)) = self.table3(e, b, k) {
            println!("Table 3 (AUC here | paper ALFWorld | WebShop):");
            for ((m, o), (pa, pw)) in Method::table3()
                .iter()
                .zip(&ours)
                .zip(PAPER_TABLE3_ALFWORLD.iter().zip(&PAPER_TABLE3_WEBSHOP))
            {
                println!("  {:<32} {o:>6.3} | {pa:>5.1} | {pw:>5.1}", m.to_string());
            }
            println!(
                "  Kendall τ-b vs ALFWorld: {}, vs WebShop: {}",
                fmt_tau(ta),
                fmt_tau(tw)
            );
        }
    }

    fn gap(&self, env: &str, b: usize, k: usize) -> Option<f64> {
        let be = mean(&self.cell(env, b, k, Method::Beacon)?.aucs());
        let g = mean(&self.cell(env, b, k, Method::Grpo)?.aucs());
        let h = mean(&self.cell(env, b, k, Method::Gigpo)?.aucs());
        Some(be - g.max(h))
    }

    fn json(&self) -> Value {
        let a = self.args;
        let cells: Vec<Value> = self
            .cells
            .iter()
            .map(|c| {
                let (f, u) = (c.finals(), c.aucs());
                let (med, hit) = c.to_half();
                json!({
                    "env": c.env, "budget_per_room": c.budget, "k": c.k, "horizon": c.budget * c.k,
                    "method": c.method.to_string(),
                    "final_success_mean": mean(&f), "final_success_std": std_dev(&f),
                    "heldout_greedy_mean": opt_mean(&c.greedy), "heldout_greedy_std": opt_std(&c.greedy),
                    "heldout_sampling_mean": opt_mean(&c.sampling), "heldout_sampling_std": opt_std(&c.sampling),
                    "heldout_greedy_per_seed": c.greedy, "heldout_sampling_per_seed": c.sampling,
                    "iterations_to_half_median": med, "seeds_reaching_half": hit,
                    "auc_mean": mean(&u), "auc_std": std_dev(&u), "auc_per_seed": u,
                })
            })
            .collect();
        let mut table3 = Vec::new();
        let mut wins = Vec::new();
        for &e in self.envs {
            for &b in &a.budgets {
                for &k in &a.horizons {
                    if let Some((ours, ta, tw)) = self.table3(e, b, k) {
                        let rows: Vec<Value> = Method::table3()
                            .iter()
                            .zip(&ours)
                            .map(|(m, o)| json!({"method": m.to_string(), "auc": o}))
                            .collect();
                        table3.push(json!({"env": e, "budget_per_room": b, "k": k, "rows": rows, "kendall_tau_alfworld": ta, "kendall_tau_webshop": tw}));
                    }
                    for rival in [Method::Grpo, Method::Gigpo] {
                        if let Some((w, n)) = self.wins(e, b, k, Method::Beacon, rival) {
                            wins.push(json!({"env": e, "budget_per_room": b, "k": k, "rival": rival.to_string(), "beacon_wins": w, "seeds": n}));
                        }
                    }
                }
            }
        }
        json!({
            "iterations": a.iterations, "seeds": a.seeds, "budgets_per_room": a.budgets,
            "eval_episodes": a.eval_episodes,
            "scale": format!("{:?}", a.scale), "learning_rate": self.lr,
            "tuning": self.tuned.iter().map(|(m, lr, best, grid)| json!({"method": m.to_string(), "best_lr": lr, "best_auc": best, "grid": grid})).collect::<Vec<_>>(),
            "random_policy_success": self.random.iter().map(|(e, b, k, p)| json!({"env": e, "budget_per_room": b, "k": k, "success": p})).collect::<Vec<_>>(),
            "cells": cells, "table3": table3, "beacon_wins": wins,
            "own_rate_longest_k": self.own.iter().map(|(m, lr, u)| json!({"method": m.to_string(), "lr": lr, "auc_mean": mean(u), "auc_std": std_dev(u)})).collect::<Vec<_>>(),
            "paper_table3_alfworld": PAPER_TABLE3_ALFWORLD, "paper_table3_webshop": PAPER_TABLE3_WEBSHOP,
            "wall_seconds": self.seconds,
        })
    }
}

/// "mean ± std" of held-out success over the seeds, or a dash without an evaluation.
fn pm(x: &[f64]) -> String {
    if x.is_empty() {
        format!("{:>14}", "—")
    } else {
        format!("{:>6.3} ± {:<5.3}", mean(x), std_dev(x))
    }
}

fn opt_mean(x: &[f64]) -> Option<f64> {
    (!x.is_empty()).then(|| mean(x))
}

fn opt_std(x: &[f64]) -> Option<f64> {
    (!x.is_empty()).then(|| std_dev(x))
}

fn fmt_tau(t: Option<f64>) -> String {
    t.map_or("undefined (constant)".to_owned(), |t| format!("{t:+.2}"))
}
