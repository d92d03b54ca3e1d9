"""The text-game study: every method of ``credit.METHODS`` trained on TextWorld Common Sense games
with the same compute, evaluated on held-out games.

    python python/examples/textgame/study.py --out textgame-out          # the full study
    python python/examples/textgame/study.py --smoke --out /tmp/smoke    # a few iterations (CI)
    python python/examples/textgame/study.py --methods grpo,beacon,beacon+discovered \
        --learning-rate 0.01 --out discovered-out                        # discovery's ratio only

1. Learning-rate selection: each candidate rate trains every method once (run seed 100) and is
   scored on selection games (train-fold seeds 400..499); the rate with the best mean success
   over methods, levels, greedy and sampled play is the one rate every method uses.
2. Evaluation: every method trains with run seeds 0..4 (same training games per seed for every
   method) and is evaluated on held-out games: unseen train-fold seeds (500..999) and the test
   fold (unseen seeds and objects).

With ``beacon``, ``beacon+discovered`` and ``grpo`` among the methods, the summary also holds
the share of the score milestones' gain over ``grpo`` that discovered milestones recover
(``report.discovery_ratio``).

Writes ``summary.json`` (configuration, seeds, per-run curves and results, the table),
``table.md`` (the tables in Markdown) and ``curves.svg`` (held-out success against iteration,
mean over seeds) to ``--out``.
"""

from __future__ import annotations

import argparse
import atexit
import json
import multiprocessing as mp
import os
import sys
import time
from dataclasses import asdict, replace
from typing import Dict, List, Optional

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from credit import METHODS, Method, available  # noqa: E402
from game import Games, Level  # noqa: E402
from train import HELD_OUT_SEEDS, SELECT_SEEDS, TEST_FOLD_SEEDS, RunConfig, RunResult, run  # noqa: E402
import report  # noqa: E402
import svg  # noqa: E402

LEVELS = (
    Level("1 room, 1 object", 1, 1, 10),
    Level("1 room, 2 objects", 1, 2, 15),
    Level("1 room, 3 objects", 1, 3, 20),
)
FULL = RunConfig(
    levels=LEVELS, iterations=30, games=4, group=8, learning_rate=0.0, entropy=0.01,
    eval_every=10, eval_games=10, final_eval_games=20,
)
SMOKE = RunConfig(
    levels=LEVELS[:2], iterations=2, games=2, group=2, learning_rate=3e-3, entropy=0.01,
    eval_every=1, eval_games=2, final_eval_games=2,
)
LEARNING_RATES = (3e-3, 1e-2)
SELECT_RUN_SEED = 100
EVAL_RUN_SEEDS = (0, 1, 2, 3, 4)

_games: Optional[Games] = None


def _worker(job: tuple) -> RunResult:
    """Runs one training run in a worker process (each holds one game process)."""
    global _games
    import torch

    torch.set_num_threads(1)
    if _games is None:
        _games = Games()
        # Stop the game process while the interpreter still runs (its own finaliser cannot).
        atexit.register(_games.close)
    method, seed, cfg, sets = job
    r = run(_games, method, seed, cfg, sets)
    print(f"  {r.method:<18} seed {seed:>3} lr {cfg.learning_rate:g}: "
          f"{json.dumps({k: {m: round(float(np.mean(list(v.values()))), 3) for m, v in d.items()} for k, d in r.final.items()})}"
          f" ({r.seconds:.0f} s)", flush=True)
    return r


def _run_all(jobs: List[tuple], workers: int) -> List[RunResult]:
    if workers <= 1:
        return [_worker(j) for j in jobs]
    with mp.get_context("fork").Pool(workers) as pool:
        return pool.map(_worker, jobs, chunksize=1)


def _score(r: RunResult, name: str) -> float:
    """Mean success over levels and greedy/sampled play on eval set ``name``."""
    return float(np.mean([v for d in r.final[name].values() for v in d.values()]))


def _stats(xs: List[float]) -> dict:
    return {"mean": float(np.mean(xs)), "std": float(np.std(xs, ddof=1)) if len(xs) > 1 else 0.0, "runs": xs}


def _table(methods: List[Method], results: List[RunResult], sets: dict, levels) -> dict:
    """Per method: mean ± std over run seeds of each eval set × play mode (also per level)."""
    table = {}
    for m in methods:
        rs = [r for r in results if r.method == m.name]
        row = {}
        for name in sets:
            for mode in ("greedy", "sampled"):
                row[f"{name}/{mode}"] = _stats([float(np.mean(list(r.final[name][mode].values()))) for r in rs])
                for level in levels:
                    row[f"{name}/{mode}/{level.name}"] = _stats([r.final[name][mode][level.name] for r in rs])
        row["train_success_last_10"] = _stats([float(np.mean(r.train_success[-10:])) for r in rs])
        table[m.name] = row
    return table


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="directory for summary.json and curves.svg")
    ap.add_argument("--smoke", action="store_true", help="a few iterations: checks that it runs")
    ap.add_argument("--workers", type=int, default=3, help="training runs in parallel (default 3)")
    ap.add_argument("--learning-rate", type=float, help="skip the selection and use this rate")
    ap.add_argument("--methods", help="comma-separated method names to run (default: every method)")
    ap.add_argument("--seeds", type=int, default=len(EVAL_RUN_SEEDS), help="evaluation run seeds 0..N-1 (default 5)")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    start = time.time()

    chosen = METHODS
    if args.methods:
        wanted = args.methods.split(",")
        unknown = sorted(set(wanted) - {m.name for m in METHODS})
        if unknown:
            ap.error(f"unknown methods {unknown}; known: {[m.name for m in METHODS]}")
        chosen = [m for m in METHODS if m.name in wanted]
    if args.seeds < 1:
        ap.error("--seeds: at least 1")
    methods: List[Method] = []
    unavailable: Dict[str, str] = {}
    for m in chosen:
        why = available(m)
        if why is None:
            methods.append(m)
        else:
            unavailable[m.name] = why
            print(f"not run: {m.name} ({why})", flush=True)

    cfg = SMOKE if args.smoke else FULL
    select = {"selection": ("train", SELECT_SEEDS)}
    held_out = {"held_out": ("train", HELD_OUT_SEEDS), "test_fold": ("test", TEST_FOLD_SEEDS)}
    selection: Dict[str, float] = {}
    if args.learning_rate is not None or args.smoke:
        lr = args.learning_rate if args.learning_rate is not None else cfg.learning_rate
    else:
        print("learning-rate selection (run seed 100, selection games):", flush=True)
        jobs = [(m, SELECT_RUN_SEED, replace(cfg, learning_rate=lr), select) for lr in LEARNING_RATES for m in methods]
        results = _run_all(jobs, args.workers)
        for lr in LEARNING_RATES:
            selection[str(lr)] = float(np.mean([_score(r, "selection") for r in results if r.learning_rate == lr]))
        lr = float(max(LEARNING_RATES, key=lambda x: selection[str(x)]))
        print(f"selected learning rate {lr:g}: {selection}", flush=True)
    cfg = replace(cfg, learning_rate=lr)

    seeds = EVAL_RUN_SEEDS[:1] if args.smoke else tuple(range(args.seeds))
    print(f"evaluation runs (seeds {list(seeds)}, lr {lr:g}):", flush=True)
    results = _run_all([(m, s, cfg, held_out) for m in methods for s in seeds], args.workers)

    table = _table(methods, results, held_out, cfg.levels)

    elapsed = time.time() - start
    summary = {
        "game": "TextWorld Express twc (TextWorld Common Sense), textworld-express 1.1.0",
        "config": {**asdict(cfg), "levels": [asdict(x) for x in cfg.levels]},
        "smoke": args.smoke,
        "methods": [asdict(m) for m in methods],
        "unavailable": unavailable,
        "learning_rates": list(LEARNING_RATES),
        "selection": {"run_seed": SELECT_RUN_SEED, "games": "train fold 400..499", "mean_success": selection},
        "learning_rate": lr,
        "eval_run_seeds": list(seeds),
        "eval_sets": {"held_out": "train fold seeds 500..999 (first N)", "test_fold": "test fold seeds 20000.. (first N)"},
        "table": table,
        "runs": [asdict(r) for r in results],
        "discovery_ratio": report.discovery_ratios([asdict(r) for r in results]),
        "seconds": elapsed,
        "workers": args.workers,
    }
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    svg.write_curves(os.path.join(args.out, "curves.svg"), results, [m.name for m in methods])
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(report.markdown(summary))
    print(f"\n{'method':<18} held-out greedy   held-out sampled  test-fold sampled")
    for name, row in table.items():
        cells = [row[k] for k in ("held_out/greedy", "held_out/sampled", "test_fold/sampled")]
        print(f"{name:<18} " + "  ".join(f"{c['mean']:.3f} ± {c['std']:.3f}  " for c in cells))
    for name, ratio in summary["discovery_ratio"].items():
        x = ratio["held_out_sampled"]
        print(f"{name}, held-out sampled AUC: score gain {x['env_gain']['mean']:+.3f}, "
              f"discovered gain {x['discovered_gain']['mean']:+.3f}, ratio {x['ratio']}")
    print(f"wrote {args.out}/summary.json, table.md and curves.svg in {elapsed:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
