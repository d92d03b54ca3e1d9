"""Milestone discovery from rollouts alone (the crate's ``MilestoneDiscovery``, see
docs/discovery.md): milestones mined from each step's action and response text and each
episode's outcome, with no score, step reward or subgoal list, to hand to BEACON as
``milestones``.

Rows are steps in verl-agent's layout, as for :func:`beacon_rl.estimate`: ``index`` names each
row's group (rollouts of one task), ``traj_index`` its trajectory (a trajectory's rows are its
steps in row order), ``terminal_rewards`` the trajectory's outcome R(τ) repeated on its rows (a
rollout succeeded when R(τ) > ``success_threshold``, default 0: 0/1 successes work as they are).

The rules, in short (docs/discovery.md has them in full). Step t is an *event* when its action
is the first occurrence of that action in the trajectory and is not a *no-op* (an action that,
done twice within ``noop_window`` steps anywhere in the data, got the identical response). A
task's milestones are the events, keyed by (action, first sentence of the response), that at
least ``min_support`` (default 0.6) of its remembered successful rollouts reached; every
rollout of the task, success or failure, is flagged on those events. A task never seen
succeeding gets *irreversible first visits* instead (``novelty``): steps whose response is a
state the rollout had not been in, reached by a move nobody was seen to undo, and not a dead end
(a state a failed rollout was stopped or stuck in) or in a dead region (states in each of which
every action was tried, with no way out).

Discovery must not read the environment's own progress signal: remove score messages
("Your score has just gone up by one point.") from the responses before passing them.
"""

from __future__ import annotations

import json
from typing import Any, List, Mapping, Optional, Sequence, Tuple

import numpy as np

# Imported last by the package's __init__, after these are defined.
from . import _config_json, _native

__all__ = ["MilestoneDiscovery", "discover_milestones"]


def _keys(x: Any, what: str) -> Tuple[np.ndarray, List[Any]]:
    """Group or trajectory keys as int64 ids (equal keys, equal ids) and the keys themselves.
    Integer arrays are read as they are; strings and other hashable objects are interned.
    None, NaN, floats and unhashable objects are refused."""
    if isinstance(x, (str, bytes)) or x is None:
        raise TypeError(f"{what}: expected one key per row, got {type(x).__name__}")
    if isinstance(x, (list, tuple)):
        items = list(x)
    else:
        a = np.asarray(x)
        if a.ndim != 1:
            raise ValueError(f"{what}: expected one key per row (1-D), got shape {a.shape}")
        if a.dtype.kind in "iub" and not (a.dtype.kind == "u" and a.size and int(a.max()) > np.iinfo(np.int64).max):
            return a.astype(np.int64), a.tolist()
        if a.dtype.kind in "fc":
            raise TypeError(f"{what}: expected integer, string or object keys, got {a.dtype} array")
        items = a.tolist()
    ids: dict = {}
    out = np.empty(len(items), dtype=np.int64)
    for r, k in enumerate(items):
        if k is None or isinstance(k, float):
            raise TypeError(f"{what}: row {r} is {k!r}, not a key (int, str or another hashable object)")
        try:
            out[r] = ids.setdefault(k, len(ids))
        except TypeError:
            raise TypeError(f"{what}: row {r} is an unhashable {type(k).__name__}") from None
    return out, items


def _rewards(x: Any) -> np.ndarray:
    """Outcomes as float64: bool, integer or float values (NaN and inf are refused by the crate)."""
    if isinstance(x, (str, bytes)) or x is None:
        raise TypeError(f"terminal_rewards: expected one number per row, got {type(x).__name__}")
    a = np.asarray(x)
    if a.dtype.kind not in "biuf":
        raise TypeError(f"terminal_rewards: expected bool, integer or float values, got {a.dtype} array")
    if a.ndim != 1:
        raise ValueError(f"terminal_rewards: expected one value per row (1-D), got shape {a.shape}")
    return a.astype(np.float64)


class MilestoneDiscovery:
    """Online milestone discovery with a bounded memory: call :meth:`discover` once per batch;
    what it learns (each task's successful rollouts, no-ops, reversed moves, dead ends, the
    actions tried in each state) carries over to the next call, so the milestones follow the
    policy as it improves.

    ``config``: the crate's ``DiscoveryConfig`` fields (``min_support``, ``success_threshold``,
    ``noop_window``, ``novelty``, ``max_tasks``, ...; docs/discovery.md); missing ones take
    their defaults. Unknown keys and out-of-range values raise ``ValueError``, a config that is
    not a mapping ``TypeError``.

    >>> import beacon_rl
    >>> d = beacon_rl.MilestoneDiscovery()
    >>> actions = ["look", "take key", "open door",                # success
    ...            "take key", "look", "look", "open door",        # success
    ...            "look", "sing"]                                 # failure
    >>> responses = ["A room.", "Taken.", "You win.",
    ...              "Taken.", "A room.", "A room.", "You win.",
    ...              "A room.", "You sing."]
    >>> traj = [0, 0, 0, 1, 1, 1, 1, 2, 2]
    >>> d.discover(actions, responses, index=[0] * 9, traj_index=traj,
    ...            terminal_rewards=[1, 1, 1, 1, 1, 1, 1, 0, 0]).tolist()
    [False, True, True, True, False, False, True, False, False]

    ``look`` repeated with the same response is a no-op; both successes took the key and
    opened the door, so those steps are the task's milestones.
    """

    def __init__(self, config: Optional[Mapping[str, Any]] = None) -> None:
        self._native = _native.MilestoneDiscovery(_config_json(config))

    def discover(
        self,
        actions: Sequence[str],
        responses: Sequence[str],
        *,
        index: Any,
        traj_index: Any,
        terminal_rewards: Any,
        tasks: Optional[Sequence[str]] = None,
        observations: Optional[Sequence[str]] = None,
    ) -> np.ndarray:
        """The milestones of one batch, one bool per row, and the memory updated.

        - ``actions[r]``, ``responses[r]``: row r's action text and the environment's response
          to it (score messages removed), ``str`` each.
        - ``index``, ``traj_index``: group and trajectory keys per row (integers, strings or
          other hashable objects).
        - ``terminal_rewards``: the trajectory's outcome on each of its rows (bool, int or float).
        - ``tasks``: the task each row's group belongs to (``str``, the same on every row of a
          group); the memory is kept per task across calls, so a task seen again in a later
          batch should carry the same name. Default: the group key as ``str``.
        - ``observations``: what the agent saw before each step; only a trajectory's first is
          read (its start state, for the novelty rule). Default: empty.

        Raises ``TypeError`` for a non-``str`` text or an unsupported key or reward type and
        ``ValueError`` for mismatched lengths, an empty batch, non-finite rewards, a trajectory
        under two groups or with two outcomes, or a group with two task names; the memory is
        unchanged when it raises.
        """
        idx, keys = _keys(index, "index")
        traj, _ = _keys(traj_index, "traj_index")
        rewards = _rewards(terminal_rewards)
        if tasks is None:
            tasks = [str(k) for k in keys]
        flags = self._native.discover(
            actions,
            responses,
            index=idx,
            traj_index=traj,
            terminal_rewards=rewards,
            tasks=tasks,
            observations=observations,
        )
        return np.asarray(flags, dtype=bool)

    def clear(self) -> None:
        """Forgets everything learned."""
        self._native.clear()

    @property
    def num_tasks(self) -> int:
        """Tasks in memory (at most ``max_tasks``)."""
        return int(self._native.num_tasks)

    @property
    def num_noops(self) -> int:
        """No-op actions learned so far (over all tasks)."""
        return int(self._native.num_learned()[0])

    @property
    def config(self) -> dict:
        """Every setting, defaults included."""
        return json.loads(self._native.config_json())


def discover_milestones(
    actions: Sequence[str],
    responses: Sequence[str],
    *,
    index: Any,
    traj_index: Any,
    terminal_rewards: Any,
    tasks: Optional[Sequence[str]] = None,
    observations: Optional[Sequence[str]] = None,
    config: Optional[Mapping[str, Any]] = None,
) -> np.ndarray:
    """One batch's milestones with a fresh memory: ``MilestoneDiscovery(config).discover(...)``
    (see :class:`MilestoneDiscovery` for the arguments and errors). A trainer that calls it
    every iteration should keep one :class:`MilestoneDiscovery` instead, so that what was
    learned from earlier batches is kept."""
    return MilestoneDiscovery(config).discover(
        actions,
        responses,
        index=index,
        traj_index=traj_index,
        terminal_rewards=terminal_rewards,
        tasks=tasks,
        observations=observations,
    )
