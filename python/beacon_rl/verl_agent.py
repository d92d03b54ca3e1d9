"""BEACON inside verl-agent, without editing verl-agent.

verl-agent (https://github.com/langfengQ/verl-agent, not on PyPI) computes advantages in
``verl.trainer.ppo.ray_trainer.compute_advantage``, a chain of ``if`` branches over its
``AdvantageEstimator`` enum, and its ``RayPPOTrainer`` refuses any other name.
:func:`install` makes ``algorithm.adv_estimator=beacon`` (and ``beacon_official``) work there:

- ``compute_advantage`` routes those two names to the crate's estimator on verl-agent's step
  batch, read as :func:`beacon_rl.verl.compute_step_advantages` reads it (one row per
  environment step, scored by its own reward sum; ``uid`` groups, ``traj_uid`` trajectories
  and the milestone column in ``non_tensor_batch``); every other name goes to verl-agent's
  own code;
- ``RayPPOTrainer.__init__`` accepts the two names (critic-free, as GRPO and GiGPO);
- verl-agent's ``adjust_batch`` (which pads a batch with copies of random steps) and
  ``_balance_batch`` (which reorders rows) would scramble the step order BEACON reads: each
  row is tagged with its position in the collected batch (``non_tensor_batch["beacon_rl_row"]``)
  before them, and advantages are computed on the collected steps in that order; a copied
  step gets its original's advantage.

Parameters come from the trainer's config, read when the trainer is built:
``+algorithm.beacon_rl.milestone_key=<column>`` names the milestone column (one flag per step,
default ``milestone``: the environment manager must put it in ``non_tensor_batch``, as it
puts ``anchor_obs`` there for GiGPO); the other keys of ``algorithm.beacon_rl`` are the
crate's parameters (serde names, e.g. ``+algorithm.beacon_rl.segment_weight=0.5``).
:func:`install`'s keywords set the same when no trainer config is read.

verl-agent runs its trainer in a Ray actor, so :func:`install` must run in that process. The
launcher does it without editing verl-agent: from a verl-agent checkout, ::

    python -m beacon_rl.verl_agent algorithm.adv_estimator=beacon +algorithm.beacon_rl.milestone_key=milestone ...

runs verl-agent's ``verl.trainer.main_ppo`` with the same arguments, and makes Ray call
:func:`install` in every worker process (``runtime_env["worker_process_setup_hook"]``).

Checked against verl-agent at commit d0b97244c50f17fb43a6ef0a15bca0e95a044ff7 (2025-10-15):
the names patched are that commit's. :func:`install` raises ``ImportError`` where they are
missing (e.g. a stock verl, which has its own registry: see :mod:`beacon_rl.verl`).
"""

from __future__ import annotations

import sys
from typing import Any, Dict, Mapping, Optional

import numpy as np

from . import estimate, validate
from ._integration import flag_column

__all__ = ["NAMES", "install", "installed", "main"]

#: The names routed to beacon-rl.
NAMES = ("beacon", "beacon_official")

#: The column tagging each row with its position in the collected batch.
ROW_KEY = "beacon_rl_row"

_settings: Dict[str, Any] = {"milestone_key": "milestone", "config": None}
_installed: Dict[str, Any] = {}


def installed() -> bool:
    """Whether :func:`install` has patched verl-agent in this process."""
    return bool(_installed)


def _settings_from(params: Optional[Mapping[str, Any]], milestone_key: Optional[str]) -> Dict[str, Any]:
    """Checked settings: the milestone column and the crate's parameters."""
    params = dict(params or {})
    key = params.pop("milestone_key", milestone_key or "milestone")
    if not isinstance(key, str) or not key:
        raise TypeError(f"algorithm.beacon_rl.milestone_key: expected a column name (str), got {key!r}")
    for name in NAMES:
        validate(name, params or None)
    return {"milestone_key": key, "config": params or None}


def install(*, milestone_key: Optional[str] = None, config: Optional[Mapping[str, Any]] = None) -> None:
    """Patch verl-agent's ``ray_trainer`` in this process (idempotent; see the module doc).

    ``milestone_key``: the ``non_tensor_batch`` column of milestone flags (default
    ``milestone``); ``config``: the crate's parameters for ``beacon``/``beacon_official``.
    A trainer's ``algorithm.beacon_rl`` overrides both when it is built. Raises
    ``ImportError`` when the installed ``verl`` is not verl-agent's.
    """
    if milestone_key is not None or config is not None:
        _settings.update(_settings_from(config, milestone_key))
    if _installed:
        return
    from verl.trainer.ppo import ray_trainer as rt

    missing = [n for n in ("compute_advantage", "RayPPOTrainer", "adjust_batch", "AdvantageEstimator") if not hasattr(rt, n)]
    if missing or not hasattr(rt.AdvantageEstimator, "GiGPO"):
        raise ImportError(
            "beacon_rl.verl_agent: verl.trainer.ppo.ray_trainer is not verl-agent's (missing "
            f"{', '.join(missing) or 'AdvantageEstimator.GiGPO'}); for a stock verl use beacon_rl.verl"
        )
    original = {
        "compute_advantage": rt.compute_advantage,
        "adjust_batch": rt.adjust_batch,
        "__init__": rt.RayPPOTrainer.__init__,
    }
    rt.compute_advantage = _compute_advantage(original["compute_advantage"])
    rt.adjust_batch = _adjust_batch(original["adjust_batch"])
    rt.RayPPOTrainer.__init__ = _trainer_init(original["__init__"])
    _installed.update(original)


def _name(adv_estimator: Any) -> str:
    """The config's estimator name (a str, or verl-agent's str enum)."""
    return str(getattr(adv_estimator, "value", adv_estimator))


def _compute_advantage(original: Any) -> Any:
    def compute_advantage(data: Any, adv_estimator: Any, *args: Any, **kwargs: Any) -> Any:
        name = _name(adv_estimator)
        if name not in NAMES:
            return original(data, adv_estimator, *args, **kwargs)
        return _step_advantages(data, name)

    compute_advantage.__doc__ = original.__doc__
    compute_advantage.__wrapped__ = original  # type: ignore[attr-defined]
    return compute_advantage


def _step_advantages(data: Any, name: str) -> Any:
    """BEACON on the collected steps in collection order; copies get their original's value."""
    import torch

    if "response_mask" not in data.batch.keys():
        raise ValueError("verl-agent batch has no response_mask (compute_advantage runs after fit() sets it)")
    tags = data.non_tensor_batch.get(ROW_KEY)
    if tags is None:
        # Rows are in collection order (no adjust_batch ran through the patch).
        adv = _beacon(data, name, np.arange(len(data)))
    else:
        tags = np.asarray(tags, dtype=np.int64)
        unique, first = np.unique(tags, return_index=True)
        ordered = _beacon(data, name, first)
        adv = ordered[torch.as_tensor(np.searchsorted(unique, tags), device=ordered.device)]
    data.batch["advantages"] = adv
    data.batch["returns"] = adv
    return data


def _beacon(data: Any, name: str, rows: np.ndarray) -> Any:
    """Advantages of ``rows`` of verl-agent's step batch (in that order: each trajectory's
    steps in step order), one row per step: ``uid`` groups, ``traj_uid`` trajectories, the
    milestone column flags steps; each row is scored by its own reward sum, as
    :func:`beacon_rl.verl.compute_step_advantages` reads verl-agent's layout."""
    import torch

    ntb = data.non_tensor_batch
    key = _settings["milestone_key"]
    for column in ("uid", "traj_uid", key):
        if column not in ntb:
            raise ValueError(f"non_tensor_batch has no column {column!r} (algorithm.adv_estimator={name})")
    flags = flag_column(np.asarray(ntb[key])[rows], f"non_tensor_batch[{key!r}]")
    idx = torch.as_tensor(rows)
    adv, _ = estimate(
        name,
        data.batch["token_level_rewards"][idx],
        data.batch["response_mask"][idx],
        np.asarray(ntb["uid"], dtype=object)[rows],
        traj_index=np.asarray(ntb["traj_uid"], dtype=object)[rows],
        milestones=flags,
        config=_settings["config"],
    )
    return adv


def _adjust_batch(original: Any) -> Any:
    def adjust_batch(config: Any, data: Any, *args: Any, **kwargs: Any) -> Any:
        if _name(config.algorithm.adv_estimator) in NAMES:
            data.non_tensor_batch[ROW_KEY] = np.arange(len(data), dtype=np.int64)
        return original(config, data, *args, **kwargs)

    adjust_batch.__wrapped__ = original  # type: ignore[attr-defined]
    return adjust_batch


def _trainer_init(original: Any) -> Any:
    def __init__(self: Any, config: Any, *args: Any, **kwargs: Any) -> None:
        name = _name(config.algorithm.adv_estimator)
        if name not in NAMES:
            return original(self, config, *args, **kwargs)
        from omegaconf import open_dict

        extra = config.algorithm.get("beacon_rl")
        _settings.update(_settings_from(dict(extra) if extra else None, _settings["milestone_key"]))
        # verl-agent's constructor accepts its enum's names only; BEACON, like GRPO and GiGPO,
        # needs no critic, so it is built as for GRPO and the name restored.
        with open_dict(config):
            config.algorithm.adv_estimator = "grpo"
        try:
            original(self, config, *args, **kwargs)
        finally:
            with open_dict(config):
                config.algorithm.adv_estimator = name

    __init__.__wrapped__ = original  # type: ignore[attr-defined]
    return __init__


def main(argv: Optional[list] = None) -> None:
    """verl-agent's ``verl.trainer.main_ppo`` with :func:`install` in every Ray worker.

    ``argv``: the Hydra overrides (default ``sys.argv[1:]``). Run from a verl-agent checkout.
    """
    import runpy

    import ray

    install()
    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    real_init = ray.init

    def init(*args: Any, **kwargs: Any) -> Any:
        env = dict(kwargs.pop("runtime_env", None) or {})
        env.setdefault("worker_process_setup_hook", "beacon_rl.verl_agent.install")
        return real_init(*args, runtime_env=env, **kwargs)

    ray.init = init
    try:
        # As `python -m verl.trainer.main_ppo`: Hydra finds verl-agent's config next to the file.
        runpy.run_module("verl.trainer.main_ppo", run_name="__main__", alter_sys=True)
    finally:
        ray.init = real_init


if __name__ == "__main__":
    main()
