"""The compared methods, as data, and the one place the study calls ``beacon_rl``.

Rows are steps (verl-agent's layout): every step of every episode is one row with one token;
``index`` is the game (its G episodes form a group), ``traj_index`` the episode. Each method is
an estimator name, its parameters, the row score it is given and, for GiGPO, its step rewards.

| method | what the trainer hands the package |
|---|---|
| ``grpo`` | verl's ``grpo``; each row scored by its episode's 0/1 success |
| ``gigpo`` | verl-agent's GiGPO; step reward 1 on the winning step; anchors = state texts |
| ``beacon`` | the paper preset, milestones = the game's score increments |
| ``beacon_official`` | the release preset (R_ms = 10, row statistics), same milestones |
| ``beacon_completion`` | the paper preset with ``{"segment_baseline": "entered"}``: completion credit |
| ``gigpo+milestones`` | control: GiGPO whose step reward is 1 per milestone (plus 1 on the winning step) |
| ``grpo+progress`` | control: ``grpo`` on the highest score reached (0..1) instead of success |

A method whose estimator or parameters the installed package does not know (``validate``
raises) is listed as unavailable and not run: the completion-credit remedy is one more entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Mapping, Optional, Sequence

import numpy as np

import beacon_rl
from game import Episode


@dataclass(frozen=True)
class Method:
    name: str
    estimator: str
    config: Optional[Mapping] = None
    score: str = "success"  # or "progress": the row score
    step_rewards: Optional[str] = None  # GiGPO: "success" or "success+milestones"
    milestones: bool = False  # BEACON: pass the milestone flags


METHODS: List[Method] = [
    Method("grpo", "grpo"),
    Method("gigpo", "gigpo", step_rewards="success"),
    Method("beacon", "beacon", milestones=True),
    Method("beacon_official", "beacon_official", milestones=True),
    # The completion-credit remedy: the paper preset whose segment baseline b_k counts every
    # rollout that entered segment k, a rollout that did not finish it with shaped return 0
    # (see docs/completion-credit.md).
    Method("beacon_completion", "beacon", config={"segment_baseline": "entered"}, milestones=True),
    Method("gigpo+milestones", "gigpo", step_rewards="success+milestones"),
    Method("grpo+progress", "grpo", score="progress"),
]


def available(method: Method) -> Optional[str]:
    """None if the installed package runs ``method``, else the package's reason."""
    try:
        beacon_rl.validate(method.estimator, method.config)
    except (ValueError, TypeError) as e:
        return str(e)
    return None


def columns(method: Method, episodes: Sequence[Episode]) -> dict:
    """The arguments of ``beacon_rl.estimate`` for ``method``: one row per step of ``episodes``."""
    lengths = [len(e.chosen) for e in episodes]
    rows = sum(lengths)
    per_episode = {
        "success": [float(e.success) for e in episodes],
        "progress": [e.progress for e in episodes],
    }
    cols = {
        "token_level_rewards": np.repeat(per_episode[method.score], lengths)[:, None],
        "response_mask": np.ones((rows, 1), dtype=bool),
        "index": np.repeat([e.game for e in episodes], lengths).astype(np.int64),
        "traj_index": np.repeat(np.arange(len(episodes)), lengths).astype(np.int64),
    }
    flags = np.fromiter((m for e in episodes for m in e.milestones), dtype=bool, count=rows)
    if method.milestones:
        cols["milestones"] = flags
    if method.step_rewards is not None:
        # The game's reward in the sparse setting: 1 on the winning step (an episode's last).
        reward = np.zeros(rows)
        reward[np.cumsum(lengths) - 1] = per_episode["success"]
        if method.step_rewards == "success+milestones":
            reward = reward + flags
        cols["step_rewards"] = reward
        cols["anchor_obs"] = np.array([s for e in episodes for s in e.states], dtype=object)
    return cols


def advantages(method: Method, episodes: Sequence[Episode]) -> np.ndarray:
    """One advantage per step of ``episodes`` (in order), from the package."""
    cols = columns(method, episodes)
    adv, _ = beacon_rl.estimate(method.estimator, config=method.config, **cols)
    return np.asarray(adv[:, 0], dtype=np.float64)
