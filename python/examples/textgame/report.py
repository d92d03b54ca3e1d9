"""Markdown tables of a study's ``summary.json``: ``python report.py <out>/summary.json``
(``study.py`` also writes them to ``<out>/table.md``)."""

from __future__ import annotations

import json
import sys
from typing import List


def _cell(s: dict) -> str:
    return f"{s['mean']:.3f} ± {s['std']:.3f}"


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
    start = [c for r in summary["runs"] for c in r["curve"][:1]]
    if start:
        g = sum(c["greedy"] for c in start) / len(start)
        s = sum(c["sampled"] for c in start) / len(start)
        lines += ["", f"Untrained policies (iteration 0, all runs, held-out curve games): greedy {g:.3f}, sampled {s:.3f}."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        sys.stdout.write(markdown(json.load(f)))
