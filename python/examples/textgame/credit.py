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


def advantages(method: Method, episodes: Sequence[Episode]) -> np.ndarray:
    """One advantage per step of ``episodes`` (in order), from the package."""
    lengths = [len(e.chosen) for e in episodes]
    index = np.repeat([e.game for e in episodes], lengths).astype(np.int64)
    traj = np.repeat(np.arange(len(episodes)), lengths).astype(np.int64)
    success = np.repeat([float(e.success) for e in episodes], lengths)
    progress = np.repeat([e.progress for e in episodes], lengths)
    score = progress if method.score == "progress" else success
    rows = len(index)
    kwargs = {}
    if method.milestones:
        kwargs["milestones"] = np.fromiter((m for e in episodes for m in e.milestones), dtype=bool, count=rows)
    if method.step_rewards is not None:
        win = np.zeros(rows)
        ends = np.cumsum(lengths) - 1
        win[ends] = [float(e.success) for e in episodes]
        reward = win
        if method.step_rewards == "success+milestones":
            reward = win + np.fromiter((m for e in episodes for m in e.milestones), dtype=float, count=rows)
        kwargs["step_rewards"] = reward
        kwargs["anchor_obs"] = np.array([s for e in episodes for s in e.states], dtype=object)
    adv, _ = beacon_rl.estimate(
        method.estimator,
        score[:, None],
        np.ones((rows, 1), dtype=bool),
        index,
        traj_index=traj,
        config=method.config,
        **kwargs,
    )
    return np.asarray(adv[:, 0], dtype=np.float64)
