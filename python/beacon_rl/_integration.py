"""What the trainer integrations (``verl``, ``verl_agent``, ``skyrl``, ``trl``) share: reading
a trainer's config, the step-estimator names, and verl's rule for a batch without group keys."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import STEP_ESTIMATORS


def config_get(config: Any, key: str, default: Any = None) -> Any:
    """``config[key]`` for a DictConfig, a dataclass config or a plain mapping."""
    if config is None:
        return default
    try:
        return config.get(key, default)
    except AttributeError:
        return getattr(config, key, default)


def is_step(name: str) -> bool:
    """Step-level estimators, with or without keys (``beacon:ablation=...``)."""
    return name.partition(":")[0] in STEP_ESTIMATORS


def needs_milestones(name: str) -> bool:
    """The BEACON family reads one milestone flag per step."""
    return is_step(name) and name != "gigpo"


def index_or_rows(index: Any, token_level_rewards: Any) -> Any:
    """The group keys, or without them (verl passes ``index`` only when the batch has a uid)
    one group per row."""
    if index is None:
        return np.arange(token_level_rewards.shape[0], dtype=np.int64)
    return index
