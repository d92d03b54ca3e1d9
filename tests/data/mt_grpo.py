"""Parity vectors for `mt_grpo`: runs the authors' own functions on generated batches.

Run from a checkout of the authors' code (nothing of theirs is copied here):

    git clone https://github.com/SiliangZeng/Multi-Turn-RL-Agent /tmp/MTRL
    git -C /tmp/MTRL checkout 7dbdd08bdb27810019bc1511dbd0af3c7cfaac7a
    python tests/data/mt_grpo.py /tmp/MTRL tests/data/mt_grpo.json

The trainers import trl, transformers and the authors' environments; only two methods are
needed, so this script reads `GRPOEnvTrainer._compute_normalized_advantages`
(verifiers/trainers/grpo_env_trainer.py) and `MTGRPOEnvTrainer._assign_advantages`
(verifiers/trainers/mt_grpo_env_trainer.py) from the checkout's files with `ast` and runs
them as they are, on an object carrying the attributes they read (`num_generations`,
`accelerator.process_index`, `accelerator.device`, `turn_advantage_coef`). Needs torch.

Each rollout has one or two turns (the authors' setting: a tool-calling turn whose result
comes back, then the answer; or a single answer). A two-turn rollout's turn reward r^T is on
its first turn's last token and the outcome r^O on its second turn's; a one-turn rollout has
no tool result (`result_segment = -1`), r^T = 0 and r^O on its turn's last token. The turn,
outcome and combined (r^T + r^O) rewards go through `_compute_normalized_advantages`, then
`_assign_advantages` writes the token advantages.
"""

import ast
import json
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import torch


def method(path, cls, name):
    tree = ast.parse(open(path).read())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for f in node.body:
                if isinstance(f, ast.FunctionDef) and f.name == name:
                    scope = {"torch": torch}
                    exec(compile(ast.Module([f], []), path, "exec"), scope)
                    return scope[name]
    raise SystemExit(f"{cls}.{name} not found in {path}")


def main():
    root, out = sys.argv[1], sys.argv[2]
    normalize = method(f"{root}/verifiers/trainers/grpo_env_trainer.py", "GRPOEnvTrainer", "_compute_normalized_advantages")
    assign = method(f"{root}/verifiers/trainers/mt_grpo_env_trainer.py", "MTGRPOEnvTrainer", "_assign_advantages")
    rng = np.random.default_rng(2505)
    cases = []
    L = 16
    for scenario in ["random", "binary", "all_two_turn", "all_one_turn"]:
        for coef in [1.0, 0.5]:
            for generations in [2, 4, 5]:
                groups = int(rng.integers(1, 4))
                n = groups * generations
                turns, r_turn, r_out, masks, segments = [], [], [], [], []
                for _ in range(n):
                    k = {"all_two_turn": 2, "all_one_turn": 1}.get(scenario, int(rng.integers(1, 3)))
                    if scenario == "binary":
                        rt = float(rng.integers(0, 2)) if k == 2 else 0.0
                        ro = float(rng.integers(0, 2))
                    else:
                        rt = float(np.float32(rng.normal())) if k == 2 else 0.0
                        ro = float(np.float32(rng.normal()))
                    # The completion starts with the first turn (mask 1 at token 0).
                    mask = [0] * L
                    a = int(rng.integers(1, 5))
                    for t in range(a):
                        mask[t] = 1
                    if k == 2:
                        obs = int(rng.integers(1, 4))
                        b = int(rng.integers(1, 5))
                        for t in range(a + obs, a + obs + b):
                            mask[t] = 1
                    turns.append(k)
                    r_turn.append(rt)
                    r_out.append(ro)
                    masks.append(mask)
                    segments.append(1 if k == 2 else -1)
                trainer = SimpleNamespace(
                    num_generations=generations,
                    accelerator=SimpleNamespace(process_index=0, device="cpu"),
                    turn_advantage_coef=coef,
                )
                tr = torch.tensor(r_turn, dtype=torch.float32)
                orr = torch.tensor(r_out, dtype=torch.float32)
                _, _, a_t = normalize(trainer, tr, n)
                _, _, a_o = normalize(trainer, orr, n)
                _, _, a_c = normalize(trainer, tr + orr, n)
                adv = assign(trainer, torch.tensor(masks, dtype=torch.float32), a_t, a_o, a_c, segments)
                cases.append(
                    {
                        "scenario": scenario,
                        "turn_advantage_coef": coef,
                        "num_generations": generations,
                        "turns": turns,
                        "turn_reward": r_turn,
                        "outcome_reward": r_out,
                        "completion_mask": masks,
                        "advantages": adv.tolist(),
                    }
                )
    commit = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    meta = {
        "source": f"SiliangZeng/Multi-Turn-RL-Agent@{commit}: verifiers/trainers/grpo_env_trainer.py "
        "(GRPOEnvTrainer._compute_normalized_advantages), verifiers/trainers/mt_grpo_env_trainer.py "
        "(MTGRPOEnvTrainer._assign_advantages)",
        "command": "git clone https://github.com/SiliangZeng/Multi-Turn-RL-Agent /tmp/MTRL && git -C /tmp/MTRL "
        f"checkout {commit} && python tests/data/mt_grpo.py /tmp/MTRL tests/data/mt_grpo.json",
        "torch": torch.__version__,
        "notes": "float32, as the authors run. Rows are rollouts, groups are consecutive blocks of "
        "num_generations. advantages cover every token (the authors write outcome advantages on "
        "observation and padding tokens too); compare under completion_mask.",
    }
    with open(out, "w") as f:
        json.dump({"meta": meta, "cases": cases}, f)


if __name__ == "__main__":
    main()
