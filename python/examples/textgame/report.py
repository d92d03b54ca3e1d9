"""Markdown tables of a study's ``summary.json``: ``python report.py <out>/summary.json``
(``study.py`` also writes them to ``<out>/table.md``); ``python report.py a.json b.json`` merges
studies of other methods run with the same configuration."""

from __future__ import annotations

import json
import sys
from typing import Dict, List, Optional

# The ratio's methods: the score's milestones and the baseline; discovered milestones are every
# method whose name starts with DISCOVERED.
DISCOVERED, ENV, BASE = "beacon+discovered", "beacon", "grpo"
# Per-seed ratios only where the score's milestones gained at least this much (below it a
# ratio is noise over noise), as in the testbed's discovery study.
MIN_GAIN = 0.05


def _mean_std(xs: List[float]) -> Dict[str, float]:
    mean = sum(xs) / len(xs)
    std = (sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)) ** 0.5 if len(xs) > 1 else 0.0
    return {"mean": mean, "std": std}


def aucs(run: dict) -> Dict[str, float]:
    """A run's areas under its learning curves: mean held-out success over the curve's
    checkpoints (iteration 0 included), sampled and greedy play, and mean training success
    over all iterations (the testbed's AUC)."""
    curve = run["curve"]
    return {
        "held_out_sampled": sum(c["sampled"] for c in curve) / len(curve),
        "held_out_greedy": sum(c["greedy"] for c in curve) / len(curve),
        "training": sum(run["train_success"]) / len(run["train_success"]),
    }


def discovery_ratios(runs: List[dict]) -> Dict[str, dict]:
    """``discovery_ratio`` of every discovered method among ``runs``."""
    names = sorted({r["method"] for r in runs if r["method"].startswith(DISCOVERED)})
    out = {n: discovery_ratio(runs, n) for n in names}
    return {n: r for n, r in out.items() if r is not None}


def discovery_ratio(runs: List[dict], discovered: str = DISCOVERED) -> Optional[dict]:
    """Per AUC: the share of the score milestones' gain over ``grpo`` that discovered
    milestones recover, (AUC_discovered − AUC_grpo) / (AUC_beacon − AUC_grpo) on the means over
    run seeds, the paired per-seed gains, and the per-seed ratios where the score's gain is at
    least ``MIN_GAIN``. None unless the three methods ran on the same seeds."""
    by = {m: {r["seed"]: aucs(r) for r in runs if r["method"] == m} for m in (discovered, ENV, BASE)}
    seeds = sorted(set(by[discovered]) & set(by[ENV]) & set(by[BASE]))
    if not seeds:
        return None
    out: dict = {"method": discovered, "seeds": seeds, "min_gain": MIN_GAIN}
    for key in ("held_out_sampled", "held_out_greedy", "training"):
        d, e, g = ([by[m][s][key] for s in seeds] for m in (discovered, ENV, BASE))
        env_gain = [x - y for x, y in zip(e, g)]
        disc_gain = [x - y for x, y in zip(d, g)]
        mean_env = sum(env_gain) / len(seeds)
        per_seed = [dg / eg for dg, eg in zip(disc_gain, env_gain) if eg >= MIN_GAIN]
        out[key] = {
            "auc": {"discovered": _mean_std(d), ENV: _mean_std(e), BASE: _mean_std(g)},
            "env_gain": {**_mean_std(env_gain), "runs": env_gain},
            "discovered_gain": {**_mean_std(disc_gain), "runs": disc_gain},
            "ratio": sum(disc_gain) / len(seeds) / mean_env if abs(mean_env) > 1e-12 else None,
            "per_seed_ratio": {**_mean_std(per_seed), "min": min(per_seed), "runs": per_seed} if per_seed else None,
        }
    return out


def _ratio_lines(r: dict) -> List[str]:
    n = len(r["seeds"])
    lines = ["", f"`{r['method']}` against the score's milestones, paired by run seed ({n} seeds): AUC = mean "
             "held-out success over the curve's checkpoints (or mean training success over the "
             "iterations); gain = AUC − AUC(`grpo`); ratio = mean discovered gain / mean score gain.", "",
             f"| AUC | `{BASE}` | `{ENV}` (score) | `{r['method']}` | score gain | discovered gain | ratio | "
             f"per-seed ratio (seeds with score gain ≥ {r['min_gain']}) |",
             "|---|---|---|---|---|---|---|---|"]
    for key in ("held_out_sampled", "held_out_greedy", "training"):
        x = r[key]
        cells = [_cell(x["auc"][m]) for m in (BASE, ENV, "discovered")]
        gains = [f"{x[k]['mean']:+.3f} ± {x[k]['std']:.3f}" for k in ("env_gain", "discovered_gain")]
        ratio = "undefined" if x["ratio"] is None else f"{x['ratio']:.2f}"
        ps = x["per_seed_ratio"]
        ps = "no seed" if ps is None else f"{ps['mean']:.2f} ± {ps['std']:.2f}, min {ps['min']:.2f} ({len(ps['runs'])} seeds)"
        lines.append(f"| {key.replace('_', ' ')} | " + " | ".join(cells + gains + [ratio, ps]) + " |")
    return lines


def _cell(s: dict) -> str:
    return f"{s['mean']:.3f} ± {s['std']:.3f}"


def _agreement_lines(runs: List[dict]) -> List[str]:
    """How far discovered milestones agree with the score's, over every training step of each
    discovered method's runs, in games with and without a successful episode in the batch."""
    names = sorted({r["method"] for r in runs if r.get("discovery")})
    if not names:
        return []
    lines = ["", "Discovered milestones against the score's, over all training steps of the runs "
             "(precision: share of discovered milestones that are score increments; recall: share "
             "of score increments discovered):", "",
             "| method | games | steps | discovered | score | both | precision | recall |",
             "|---|---|---|---|---|---|---|---|"]
    for name in names:
        counts = [r["discovery"] for r in runs if r["method"] == name]
        tot = {k: sum(c[k] for c in counts) for k in counts[0]}
        for g, label in (("won", "with a success"), ("unwon", "without")):
            st, d, sc, b = (tot[f"{g}_{k}"] for k in ("steps", "discovered", "score", "both"))
            lines.append(f"| `{name}` | {label} | {st} | {d} | {sc} | {b} | {b / max(d, 1):.3f} | {b / max(sc, 1):.3f} |")
    return lines


def merge(summaries: List[dict]) -> dict:
    """One summary from several runs of the study with the same configuration, the ratios
    recomputed over all their runs; a (method, seed) run in a later summary replaces an
    earlier one."""
    first = summaries[0]
    for s in summaries[1:]:
        if s["config"] != first["config"] or s["learning_rate"] != first["learning_rate"]:
            raise ValueError("summaries of different configurations cannot be merged")
    runs = list({(r["method"], r["seed"]): r for s in summaries for r in s["runs"]}.values())
    table = {k: v for s in summaries for k, v in s["table"].items()}
    seeds = sorted({r["seed"] for r in runs})
    return {**first, "runs": runs, "table": table, "eval_run_seeds": seeds, "discovery_ratio": discovery_ratios(runs)}


def markdown(summary: dict) -> str:
    table = summary["table"]
    levels = [x["name"] for x in summary["config"]["levels"]]
    n = len(summary["eval_run_seeds"])
    lines: List[str] = [
        f"Success rate, mean ± std over {n} run seeds (each run: mean over the {len(levels)} levels); "
        f"learning rate {summary['learning_rate']:g}.",
        "",
        "| method | held-out, greedy | held-out, sampled | test fold, greedy | test fold, sampled | training (last 10 iterations) |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in table.items():
        keys = ("held_out/greedy", "held_out/sampled", "test_fold/greedy", "test_fold/sampled", "train_success_last_10")
        lines.append(f"| `{name}` | " + " | ".join(_cell(row[k]) for k in keys) + " |")
    lines += ["", "Held-out games by level, sampled play:", "",
              "| method | " + " | ".join(levels) + " |", "|---|" + "---|" * len(levels)]
    for name, row in table.items():
        lines.append(f"| `{name}` | " + " | ".join(_cell(row[f"held_out/sampled/{lv}"]) for lv in levels) + " |")
    base = table.get("grpo")
    if base is not None:
        lines += ["", "Difference to `grpo`, paired by run seed (same training games), held-out, sampled play:", "",
                  "| method | mean ± std of the difference | seeds better / worse |", "|---|---|---|"]
        b = base["held_out/sampled"]["runs"]
        for name, row in table.items():
            if name == "grpo":
                continue
            d = [x - y for x, y in zip(row["held_out/sampled"]["runs"], b)]
            mean = sum(d) / len(d)
            std = (sum((x - mean) ** 2 for x in d) / (len(d) - 1)) ** 0.5 if len(d) > 1 else 0.0
            better, worse = sum(x > 1e-12 for x in d), sum(x < -1e-12 for x in d)
            lines.append(f"| `{name}` | {mean:+.3f} ± {std:.3f} | {better} / {worse} |")
    for ratio in summary.get("discovery_ratio", {}).values():
        lines += _ratio_lines(ratio)
    lines += _agreement_lines(summary["runs"])
    start = [c for r in summary["runs"] for c in r["curve"][:1]]
    if start:
        g = sum(c["greedy"] for c in start) / len(start)
        s = sum(c["sampled"] for c in start) / len(start)
        lines += ["", f"Untrained policies (iteration 0, all runs, held-out curve games): greedy {g:.3f}, sampled {s:.3f}."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    # Several summaries (runs of other methods with the same configuration) are merged.
    loaded = []
    for path in sys.argv[1:]:
        with open(path) as f:
            loaded.append(json.load(f))
    sys.stdout.write(markdown(merge(loaded) if len(loaded) > 1 else loaded[0]))
