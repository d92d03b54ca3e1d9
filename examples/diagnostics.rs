//! Credit-assignment diagnostics (CAR, EGR, ZAR, CCR, utilisation) of GRPO and BEACON side by
//! side on real trajectories.
//!
//! cargo run --release --example diagnostics [-- [--json] [--ablations] [--failures-only] [--seed N] [FILE.jsonl ...]]
//!
//! Without files, reads the bundled `data/sample_trajectories.jsonl` (ScienceWorld and TextWorld,
//! 4 groups × 8 trajectories). Milestones are the steps where the environment's score went up.
//! State key = (group, observation before the step), action key = the action text.
//!
//! "GRPO" here is BEACON with λ = 0 (trajectory-level (R − μ)/(σ + ε) on every step), which is
//! GRPO's outcome advantage for one-step-per-row batches; it stands in until the crate's own
//! GRPO estimator lands. `--ablations` adds the paper's Table 3 variants (paper flavour,
//! seeded by `--seed`, default 0). `--failures-only` drops the successful trajectories, leaving
//! each group with failures only (the situation early in training, where GRPO has no signal).
//! `--json` prints the reports as JSON instead of tables.

use beacon_rl::ablation::Ablation;
use beacon_rl::diagnostics::{Diagnostics, DiagnosticsConfig};
use beacon_rl::milestone::{detect_milestones, ScoreIncrease, Transition};
use beacon_rl::{Beacon, BeaconConfig, RolloutBatch};
use serde_json::Value;

struct Args {
    json: bool,
    ablations: bool,
    failures_only: bool,
    seed: u64,
    files: Vec<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        json: false,
        ablations: false,
        failures_only: false,
        seed: 0,
        files: vec![],
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--json" => args.json = true,
            "--ablations" => args.ablations = true,
            "--failures-only" => args.failures_only = true,
            "--seed" => {
                let v = it.next().ok_or("--seed needs a value")?;
                args.seed = v.parse().map_err(|_| format!("--seed: not a u64: {v}"))?;
            }
            "-h" | "--help" => {
                return Err(
                    "usage: diagnostics [--json] [--ablations] [--failures-only] [--seed N] [FILE.jsonl ...]"
                        .to_owned(),
                )
            }
            f if f.starts_with("--") => return Err(format!("unknown option {f}")),
            f => args.files.push(f.to_owned()),
        }
    }
    if args.files.is_empty() {
        args.files
            .push(concat!(env!("CARGO_MANIFEST_DIR"), "/data/sample_trajectories.jsonl").to_owned());
    }
    Ok(args)
}

/// The batch as per-row columns (one row per step, trajectory-major in file order).
#[derive(Default)]
struct Rows {
    group: Vec<String>,
    traj: Vec<String>,
    reward: Vec<f64>,
    /// (group, observation before the step).
    state: Vec<(String, String)>,
    action: Vec<String>,
    /// (score before, score after).
    scores: Vec<(f64, f64)>,
}

fn load(files: &[String], failures_only: bool) -> Result<Rows, Box<dyn std::error::Error>> {
    let mut rows = Rows::default();
    for path in files {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
        for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let t: Value = serde_json::from_str(line).map_err(|e| format!("{path}:{}: {e}", n + 1))?;
            let field = |k: &str| format!("{path}:{}: field {k} missing or mistyped", n + 1);
            let group = t["group_id"].as_str().ok_or_else(|| field("group_id"))?;
            let traj = t["traj_id"].as_str().ok_or_else(|| field("traj_id"))?;
            let reward = t["terminal_reward"]
                .as_f64()
                .ok_or_else(|| field("terminal_reward"))?;
            if failures_only && reward > 0.0 {
                continue;
            }
            let mut obs = t["initial_observation"].as_str().unwrap_or("").to_owned();
            let mut score = t["initial_score"].as_f64().unwrap_or(0.0);
            for s in t["steps"].as_array().ok_or_else(|| field("steps"))? {
                let next_score = s["score"].as_f64().ok_or_else(|| field("steps[].score"))?;
                let action = s["action"].as_str().ok_or_else(|| field("steps[].action"))?;
                let next_obs = s["observation"].as_str().unwrap_or("");
                rows.group.push(group.to_owned());
                rows.traj.push(traj.to_owned());
                rows.reward.push(reward);
                rows.state
                    .push((group.to_owned(), std::mem::replace(&mut obs, next_obs.to_owned())));
                rows.action.push(action.to_owned());
                rows.scores.push((score, next_score));
                score = next_score;
            }
        }
    }
    Ok(rows)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args()?;
    let rows = load(&args.files, args.failures_only)?;
    let batch = RolloutBatch::from_row_keys(&rows.group, &rows.traj, &rows.reward)?;
    let flags = detect_milestones(&batch, &mut ScoreIncrease, |row, _| Transition {
        score: Some(rows.scores[row].0),
        next_score: Some(rows.scores[row].1),
        ..Transition::default()
    });

    let grpo_cfg = BeaconConfig {
        segment_weight: 0.0,
        ..BeaconConfig::paper()
    };
    let grpo = Beacon::new(grpo_cfg)?.compute(&batch, &flags)?.advantages;
    let paper = Beacon::new(BeaconConfig::paper())?
        .compute(&batch, &flags)?
        .advantages;
    let official = Beacon::new(BeaconConfig::official())?
        .compute(&batch, &flags)?
        .advantages;

    let diag = Diagnostics::new(
        &batch,
        &rows.state,
        &rows.action,
        &flags,
        DiagnosticsConfig::default(),
    )?;
    let main = diag.compare(&[
        ("GRPO (BEACON λ=0 stand-in)", &grpo),
        ("BEACON paper", &paper),
        ("BEACON official (MiGPO)", &official),
    ])?;

    let ablations = if args.ablations {
        let mut named = Vec::new();
        for a in Ablation::paper_table3() {
            let out = a.compute(BeaconConfig::paper(), &batch, &flags, args.seed)?;
            named.push((a.label(), out.advantages));
        }
        Some(diag.compare(&named)?)
    } else {
        None
    };

    if args.json {
        let doc = serde_json::json!({
            "files": args.files,
            "failures_only": args.failures_only,
            "steps": batch.num_steps(),
            "groups": batch.num_groups(),
            "milestone_steps": flags.iter().filter(|&&f| f).count(),
            "estimators": main,
            "ablations": ablations,
            "ablation_seed": args.seed,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }

    println!(
        "{} steps, {} trajectories in {} groups, {} milestone steps (score increases)\n",
        batch.num_steps(),
        batch.num_trajectories(),
        batch.num_groups(),
        flags.iter().filter(|&&f| f).count()
    );
    print!("{main}");
    if let Some(t) = ablations {
        println!("\nPaper Table 3 ablations (paper flavour, seed {}):", args.seed);
        print!("{t}");
    }
    println!(
        "\nCAR: shared (state, action) pairs pushed both ways; EGR: gradient surviving cancellation;\n\
         ZAR: steps with |A| < 1e-6; CCR: milestone / non-milestone mean |A|;\n\
         utilisation: trajectories with at least one step of non-zero advantage."
    );
    Ok(())
}
