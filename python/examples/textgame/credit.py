"""The compared methods, as data, and the one place the study calls ``beacon_rl``.

Rows are steps (verl-agent's layout): every step of every episode is one row with one token;
``index`` is the game (its G episodes form a group), ``traj_index`` the episode. Each method is
an estimator name, its parameters, the row score it is given and, for GiGPO, its step rewards.

| method | what the trainer hands the package |
|---|---|
| ``grpo`` | verl's ``grpo``; each row scored by its episode's 0/1 success |
| ``gigpo`` | verl-agent's GiGPO; step reward 1 on the winning step; anchors = state texts |
| ``beacon`` | the paper preset, milestones = the game's score increments |
| ``beacon+discovered`` | the paper preset, milestones discovered from the text (no score) |
| ``beacon+discovered_support`` | control: the same with discovery's novelty rule off (``{"novelty": false}``) |
| ``beacon+discovered_adjacent`` | control: novelty off, and a no-op only when repeated in a row (``noop_window`` 1) |
| ``beacon_official`` | the release preset (R_ms = 10, row statistics), same milestones |
| ``beacon_completion`` | the paper preset with ``{"segment_baseline": "entered"}``: completion credit |
| ``gigpo+milestones`` | control: GiGPO whose step reward is 1 per milestone (plus 1 on the winning step) |
| ``grpo+progress`` | control: ``grpo`` on the highest score reached (0..1) instead of success |

``beacon+discovered`` reads no score: its milestones come from ``beacon_rl.MilestoneDiscovery``,
which sees each step's action and response text (score messages stripped) and each episode's
success, one memory for the whole run, relearned every iteration as the policy's episodes change
(``Discovered``).

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
    discovered: bool = False  # the flags come from discovery, not from the score
    discovery: Optional[Mapping] = None  # discovery's settings (DiscoveryConfig fields)


METHODS: List[Method] = [
    Method("grpo", "grpo"),
    Method("gigpo", "gigpo", step_rewards="success"),
    Method("beacon", "beacon", milestones=True),
    Method("beacon+discovered", "beacon", milestones=True, discovered=True),
    # Control: only the success rule (events most successes of the game share); a game none of
    # whose episodes succeeded gets no milestones instead of irreversible first visits.
    Method("beacon+discovered_support", "beacon", milestones=True, discovered=True, discovery={"novelty": False}),
    # Control: as above, and an action is a no-op only when repeated in a row with the same
    # response. Random play takes an object, puts it somewhere and takes it again within three
    # steps, which makes `take <object>` a no-op under the default window.
    Method(
        "beacon+discovered_adjacent", "beacon", milestones=True, discovered=True,
        discovery={"novelty": False, "noop_window": 1},
    ),
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
    if method.discovered and not hasattr(beacon_rl, "MilestoneDiscovery"):
        return "the installed beacon_rl has no MilestoneDiscovery"
    try:
        beacon_rl.validate(method.estimator, method.config)
    except (ValueError, TypeError) as e:
        return str(e)
    return None


class Discovered:
    """Discovered milestones for one training run: one ``beacon_rl.MilestoneDiscovery`` whose
    memory lives as long as the run. Each game is a task (named by its fold, seed and level),
    its episodes one group; discovery reads the action and response texts and the success of
    each episode, never the score. ``counts`` tallies, over the run, the steps flagged by
    discovery, by the score, and by both (how far the two agree), separately for games with a
    successful episode in the batch (``won``: the success rule applies) and without
    (``unwon``: the novelty rule, if on)."""

    def __init__(self, config: Optional[Mapping] = None) -> None:
        self.discovery = beacon_rl.MilestoneDiscovery(config)
        self.counts = {f"{g}_{k}": 0 for g in ("won", "unwon") for k in ("steps", "discovered", "score", "both")}

    def flags(self, episodes: Sequence[Episode]) -> np.ndarray:
        """One milestone flag per step of ``episodes`` (in order); the memory is updated."""
        lengths = [len(e.chosen) for e in episodes]
        flags = self.discovery.discover(
            [a for e in episodes for a in e.actions],
            [r for e in episodes for r in e.responses],
            index=np.repeat([e.game for e in episodes], lengths),
            traj_index=np.repeat(np.arange(len(episodes)), lengths),
            terminal_rewards=np.repeat([float(e.success) for e in episodes], lengths),
            tasks=[e.task for e in episodes for _ in e.chosen],
            observations=[s for e in episodes for s in e.states],
        )
        score = np.fromiter((m for e in episodes for m in e.milestones), dtype=bool, count=len(flags))
        won_games = {e.game for e in episodes if e.success}
        won = np.repeat([e.game in won_games for e in episodes], lengths).astype(bool)
        for name, rows in (("won", won), ("unwon", ~won)):
            c = {"steps": rows, "discovered": flags & rows, "score": score & rows, "both": flags & score & rows}
            for k, v in c.items():
                self.counts[f"{name}_{k}"] += int(v.sum())
        return flags


def columns(method: Method, episodes: Sequence[Episode], flags: Optional[np.ndarray] = None) -> dict:
    """The arguments of ``beacon_rl.estimate`` for ``method``: one row per step of ``episodes``.
    ``flags``: the milestones to hand over in place of the score's (discovered ones)."""
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
    if flags is None:
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


def advantages(method: Method, episodes: Sequence[Episode], discovered: Optional[Discovered] = None) -> np.ndarray:
    """One advantage per step of ``episodes`` (in order), from the package; a ``discovered``
    method needs the run's ``Discovered``."""
    flags = None
    if method.discovered:
        if discovered is None:
            raise ValueError(f"{method.name}: needs the run's Discovered")
        flags = discovered.flags(episodes)
    cols = columns(method, episodes, flags)
    adv, _ = beacon_rl.estimate(method.estimator, config=method.config, **cols)
    return np.asarray(adv[:, 0], dtype=np.float64)
