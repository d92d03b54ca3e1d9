"""What the trainer integrations (``verl``, ``verl_agent``, ``skyrl``, ``trl``) share: reading
a trainer's config, the step-estimator names, verl's rule for a batch without group keys, and
reading a column of milestone flags."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import STEP_ESTIMATORS, _flags


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


def flag_column(values: Any, what: str) -> np.ndarray:
    """A trainer's column of flags (``non_tensor_batch``'s milestones) as the native layer reads
    it: bool, uint8 and int64 as they are, anything else checked entry by entry
    (``astype(bool)`` would read 2, NaN or None as a flag)."""
    flags = np.asarray(values)
    if flags.dtype not in (np.bool_, np.uint8, np.int64):
        flags = _flags(flags, what)
    return flags
