"""Parity vectors for `step_reinforce`: runs ROLL's own functions on generated step batches.

Run from a checkout of ROLL (nothing of ROLL's is copied here):

    git clone https://github.com/alibaba/ROLL /tmp/ROLL
    git -C /tmp/ROLL checkout 8eb27cc2dc34c4d1310b169d9b86d339004d811a
    PYTHONPATH=/tmp/ROLL python tests/data/step_reinforce.py tests/data/step_reinforce.json

`imageio` and `transfer_queue` (imported by ROLL's modules, unused by these functions) are
replaced by empty stand-in modules when they are not installed. Needs torch, numpy, tensordict.

Per case, ROLL's pipeline order for `adv_estimator: step_reinforce`:
`compute_discounted_returns(batch, "step_reinforce", step_reward_gamma)`,
`compute_response_level_rewards(batch, config)` (→ `agentic_reward_norm`, then `reward_clip`),
`expand_to_token_level(batch)` (the reward on each row's last attended token; what
`compute_token_reward` does with no KL penalty), then `agentic_compute_advantage` with
gamma = 1. The crate's input mask is ROLL's `response_mask[:, 1:]`.
"""

import importlib
import importlib.abc
import importlib.machinery
import json
import subprocess
import sys
import types
from types import SimpleNamespace

import numpy as np
import torch


class _Stub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    NAMES = {"imageio", "transfer_queue"}

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in self.NAMES:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        from unittest import mock

        m = mock.MagicMock(name=spec.name)
        m.__path__ = []
        m.__spec__ = spec
        return m

    def exec_module(self, module):
        pass


for _n in list(_Stub.NAMES):
    try:
        importlib.import_module(_n)
        _Stub.NAMES.discard(_n)
    except ImportError:
        pass
sys.meta_path.insert(0, _Stub())

from roll.distributed.scheduler.protocol import DataProto  # noqa: E402
from roll.pipeline.agentic.agentic_config import RewardNormalizationConfig  # noqa: E402
from roll.pipeline.agentic.utils import (  # noqa: E402
    agentic_compute_advantage,
    compute_discounted_returns,
    compute_response_level_rewards,
)
from roll.utils.functionals import expand_to_token_level  # noqa: E402

PROMPT = 3  # prompt tokens before each response
L = 12  # crate columns = ROLL's sequence length − 1


def f32(x):
    return float(np.float32(x))


def make_batch(rng, groups, trajs_per_group, scenario):
    rows = []
    for g in range(groups):
        for j in range(trajs_per_group):
            steps = int(rng.integers(1, 5))
            outcome = float(rng.integers(0, 2))
            for s in range(steps):
                if scenario == "outcome":
                    score = outcome if s == steps - 1 else 0.0
                elif scenario == "equal":
                    score = 1.0 if s == steps - 1 else 0.0
                else:
                    score = f32(rng.normal() * 0.7)
                rows.append(
                    {
                        "group": f"g{g}",
                        "traj": f"g{g}t{j}",
                        "step": s,
                        "step_score": score,
                        "response_len": int(rng.integers(1, L - PROMPT + 2)),
                    }
                )
    if scenario == "equal":
        # Every trajectory one step with the same score: σ = 0 in every scope.
        rows = [dict(r, step=0, traj=f"{r['traj']}s{i}", step_score=1.0) for i, r in enumerate(rows)]
    order = rng.permutation(len(rows))
    # Shuffled, then stably sorted by step: trajectories interleave, each in step order.
    return sorted((rows[i] for i in order), key=lambda r: r["step"])


def tensors(rows):
    n, seq = len(rows), L + 1
    attention = torch.zeros((n, seq), dtype=torch.int64)
    response = torch.zeros((n, seq), dtype=torch.int64)
    for i, r in enumerate(rows):
        end = min(PROMPT + r["response_len"], seq)
        attention[i, :end] = 1
        response[i, PROMPT:end] = 1
    position = (torch.cumsum(attention, dim=1) - 1).clamp(min=0)
    return attention, response, position


def run_case(rows, params):
    attention, response, position = tensors(rows)
    batch = DataProto.from_dict(
        {"attention_mask": attention, "response_mask": response, "position_ids": position},
        non_tensors={
            "traj_id": np.array([r["traj"] for r in rows], dtype=object),
            "traj_group_id": np.array([r["group"] for r in rows], dtype=object),
            "step": np.array([r["step"] for r in rows], dtype=object),
            "step_scores": np.array([r["step_score"] for r in rows], dtype=object),
        },
    )
    batch = compute_discounted_returns(batch, "step_reinforce", params["step_discount"])
    norm = RewardNormalizationConfig(
        grouping=params["grouping"],
        method="identity",
        norm_mean_type=params["norm_mean"],
        norm_std_type=params["norm_std"],
    )
    config = SimpleNamespace(
        adv_estimator="step_reinforce", reward_normalization=norm, reward_clip=params["reward_clip"]
    )
    batch, _ = compute_response_level_rewards(batch, config)
    batch.batch["token_level_rewards"] = expand_to_token_level(batch)
    batch = agentic_compute_advantage(
        batch,
        gamma=1.0,
        lambd=0.95,
        adv_estimator="step_reinforce",
        advantage_clip=params["advantage_clip"],
        whiten_advantages=params["whiten_advantages"],
        whiten_rewards=False,
        pipeline_config=SimpleNamespace(is_pure_opd=False, use_opd=False),
    )
    return {
        "step_returns": batch.batch["step_rewards"].tolist(),
        "response_level_rewards": batch.batch["response_level_rewards"].tolist(),
        "advantages": batch.batch["advantages"].tolist(),
    }, response[:, 1:].tolist()


def main():
    rng = np.random.default_rng(31)
    norms = [
        ("batch", None, None),
        ("batch", "batch", "batch"),
        ("traj_group_id", "group", None),
        ("traj_group_id", "group", "group"),
        ("traj_group_id", "batch", "group"),
        ("traj_group_id", "group", "batch"),
    ]
    cases = []
    for scenario in ["random", "outcome", "equal"]:
        for gamma in [1.0, 0.95, 0.5]:
            for grouping, mean, std in norms:
                for reward_clip, whiten, adv_clip in [(None, False, None), (1.0, True, None), (None, True, 0.5)]:
                    rows = make_batch(rng, groups=3, trajs_per_group=int(rng.integers(1, 4)), scenario=scenario)
                    params = {
                        "step_discount": gamma,
                        "grouping": grouping,
                        "norm_mean": mean,
                        "norm_std": std,
                        "reward_clip": reward_clip,
                        "whiten_advantages": whiten,
                        "advantage_clip": adv_clip,
                    }
                    outputs, mask = run_case(rows, params)
                    cases.append(
                        {
                            "scenario": scenario,
                            "params": params,
                            "inputs": {
                                "group": [r["group"] for r in rows],
                                "traj": [r["traj"] for r in rows],
                                "step": [r["step"] for r in rows],
                                "step_scores": [r["step_score"] for r in rows],
                                "response_mask": mask,
                            },
                            "outputs": outputs,
                        }
                    )
    commit = subprocess.run(
        ["git", "-C", sys.modules["roll"].__path__[0] + "/..", "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    meta = {
        "source": f"alibaba/ROLL@{commit}: roll/pipeline/agentic/utils.py (compute_discounted_returns, "
        "compute_response_level_rewards, agentic_reward_norm, agentic_compute_advantage), "
        "roll/utils/functionals.py (expand_to_token_level)",
        "command": "git clone https://github.com/alibaba/ROLL /tmp/ROLL && git -C /tmp/ROLL checkout "
        f"{commit} && PYTHONPATH=/tmp/ROLL python tests/data/step_reinforce.py tests/data/step_reinforce.json",
        "torch": torch.__version__,
        "notes": "ROLL computes in float32. Rows are shuffled, then stably sorted by `step`: "
        "trajectories interleave and each trajectory's rows are in step order (ROLL sorts by `step`; "
        "the crate reads a trajectory's rows in row order). advantages are rows x L over the crate's "
        "mask (ROLL's response_mask[:, 1:]).",
    }
    # ROLL's logger writes to stdout: the vectors go to the file named on the command line.
    with open(sys.argv[1], "w") as f:
        json.dump({"meta": meta, "cases": cases}, f)


if __name__ == "__main__":
    main()
