"""Parity vectors for `tree_grpo`: runs the authors' own functions on generated batches.

Run from a checkout of the authors' code (nothing of theirs is copied here):

    git clone https://github.com/AMAP-ML/Tree-GRPO /tmp/TreeGRPO
    git -C /tmp/TreeGRPO checkout 90b170995d996d772d68117e0c7bd0b8fe00d393
    python tests/data/tree_grpo.py /tmp/TreeGRPO tests/data/tree_grpo.json

The trainer module imports ray, verl's workers and the search agent; only four functions are
needed, so this script reads `compute_advantage` (verl/trainer/ppo/ray_trainer_ts.py) and
`compute_grpo_outcome_advantage`, `compute_tree_grpo_outcome_advantage` (verl/trainer/ppo/
core_algos.py) from the checkout's files with `ast` and runs them as they are, on an object
carrying the fields `compute_advantage` reads (`batch`: token_level_rewards, responses,
attention_mask; `non_tensor_batch`: uid, tree_uid). Needs torch and numpy.

Each batch is laid out as the crate reads it: rows are complete rollouts (leaves), `uid` the
prompt, and `tree_parents[r]` the row rollout r branched from (-1: the first rollout of its
tree). The authors' `tree_uid` is the root row that a row's parents lead to. Rows are shuffled
(the authors' trainer reorders its batch before computing advantages). Rewards are mostly an
outcome on the last generated token, sometimes extra rewards elsewhere, on masked tokens too
(the authors' score sums every token).
"""

import ast
import json
import subprocess
import sys
from collections import defaultdict
from types import SimpleNamespace

import numpy as np
import torch


def functions(path, names, scope):
    tree = ast.parse(open(path).read())
    found = [f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name in names]
    if len(found) != len(names):
        raise SystemExit(f"{names} not all found in {path}")
    exec(compile(ast.Module(found, []), path, "exec"), scope)
    return [scope[n] for n in names]


def batch(rng, L, P):
    """One generated batch: uid, tree_parents, rewards, mask (row-shuffled)."""
    uids, parents, rows = [], [], []
    for g in range(int(rng.integers(1, 4))):
        for _ in range(int(rng.integers(1, 4))):
            first = len(rows)
            for k in range(int(rng.integers(1, 5))):
                parents.append(-1 if k == 0 else int(rng.integers(first, len(rows))))
                uids.append(f"q{g}")
                rows.append(None)
    n = len(rows)
    perm = rng.permutation(n)
    inv = np.argsort(perm)
    uids = [uids[p] for p in perm]
    parents = [-1 if parents[p] < 0 else int(inv[parents[p]]) for p in perm]
    kind = rng.integers(0, 3)
    rewards = np.zeros((n, L), dtype=np.float32)
    mask = np.zeros((n, L), dtype=np.int64)
    for r in range(n):
        t = 0
        last = 0
        for _ in range(int(rng.integers(1, 4))):
            t += int(rng.integers(0, 3))
            run = int(rng.integers(1, 4))
            if t >= L:
                break
            mask[r, t : min(L, t + run)] = 1
            last = min(L, t + run) - 1
            t += run
        outcome = {0: float(rng.integers(0, 2)), 1: float(rng.choice([0.0, 0.5, 1.0])), 2: float(np.float32(rng.normal()))}[int(kind)]
        rewards[r, last] = outcome
        if rng.random() < 0.3:
            rewards[r, int(rng.integers(0, L))] += np.float32(rng.normal() * 0.5)
    return uids, parents, rewards, mask


def roots(parents):
    out = []
    for r in range(len(parents)):
        while parents[r] >= 0:
            r = parents[r]
        out.append(r)
    return out


def main():
    root, out = sys.argv[1], sys.argv[2]
    algos = SimpleNamespace()
    for f in functions(
        f"{root}/verl/trainer/ppo/core_algos.py",
        ["compute_grpo_outcome_advantage", "compute_tree_grpo_outcome_advantage"],
        {"torch": torch, "defaultdict": defaultdict, "np": np},
    ):
        setattr(algos, f.__name__, f)
    (compute_advantage,) = functions(
        f"{root}/verl/trainer/ppo/ray_trainer_ts.py",
        ["compute_advantage"],
        {"torch": torch, "np": np, "core_algos": algos, "DataProto": object},
    )
    rng = np.random.default_rng(2509)
    L, P = 12, 3
    cases = []
    for variant in ["tree", "tree_inner", "tree_2norm"]:
        for _ in range(12):
            uids, parents, rewards, mask = batch(rng, L, P)
            n = len(uids)
            data = SimpleNamespace(
                batch={
                    "token_level_rewards": torch.tensor(rewards),
                    "responses": torch.zeros((n, L), dtype=torch.long),
                    "attention_mask": torch.cat([torch.ones((n, P), dtype=torch.long), torch.tensor(mask)], dim=1),
                },
                non_tensor_batch={
                    "uid": np.array(uids, dtype=object),
                    "tree_uid": np.array([f"t{r}" for r in roots(parents)], dtype=object),
                },
            )
            compute_advantage(data, adv_estimator=variant)
            cases.append(
                {
                    "variant": variant,
                    "uid": uids,
                    "tree_parents": parents,
                    "token_level_rewards": rewards.tolist(),
                    "response_mask": mask.tolist(),
                    "advantages": data.batch["advantages"].tolist(),
                }
            )
    commit = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    meta = {
        "source": f"AMAP-ML/Tree-GRPO@{commit}: verl/trainer/ppo/ray_trainer_ts.py (compute_advantage, "
        "adv_estimator = tree, tree_inner, tree_2norm), verl/trainer/ppo/core_algos.py "
        "(compute_grpo_outcome_advantage, compute_tree_grpo_outcome_advantage)",
        "command": "git clone https://github.com/AMAP-ML/Tree-GRPO /tmp/TreeGRPO && git -C /tmp/TreeGRPO "
        f"checkout {commit} && python tests/data/tree_grpo.py /tmp/TreeGRPO tests/data/tree_grpo.json",
        "torch": torch.__version__,
        "notes": "float32, as the authors run, epsilon 1e-6. Rows are rollouts (tree leaves); tree_uid "
        "given to the authors is the root row of tree_parents. advantages are the authors' "
        "(score broadcast times the response mask).",
    }
    with open(out, "w") as f:
        json.dump({"meta": meta, "cases": cases}, f)


if __name__ == "__main__":
    main()
