"""beacon-rl's estimators inside a stock verl 0.9.1.

Importing this module registers the crate's estimators with verl's own
``verl.trainer.ppo.core_algos.register_adv_est``, so ``algorithm.adv_estimator=beacon`` (or
``beacon_official``, ``gigpo``, ``beacon_rl_grpo``, ...) works with verl's unmodified
``compute_advantage``.

Names
    - ``beacon``, ``beacon_official``, ``beacon_ablation``, ``gigpo``: the crate's step-level estimators, on verl's
      multi-turn layout by the turn convention of :func:`beacon_rl.estimate_turns` (turns are
      runs of ``response_mask == 1``; a positive reward on a turn's last token marks a
      milestone; the reward on the last valid token is the outcome). A single-turn row is a
      one-step trajectory.
    - ``beacon_rl_<name>`` for verl's own estimators (``beacon_rl_grpo``, ``beacon_rl_rloo``,
      ...): verl refuses to register a name it already has, so the crate's versions carry the
      prefix ``beacon_rl_``. Only those verl feeds through its generic path are registered:
      ``gae`` (verl passes no ``values`` there) and the optimal-token-baseline estimators
      (verl passes ``sum_pi_squared`` only under its own names) are not.

Getting the import into verl's processes
    verl's trainer loop runs inside a Ray actor (``TaskRunner``), not in the script that
    launches it, so ``import beacon_rl.verl`` in a launch script is not enough. Two ways that
    need no patch to verl:

    1. Nothing: this package declares a ``verl.plugins`` entry point, and ``import verl``
       imports every such entry point in every process (``VERL_USE_EXTERNAL_PLUGINS``, default
       ``auto``). Installing the package is enough.
    2. ``VERL_USE_EXTERNAL_MODULES=beacon_rl.verl``, which ``verl/__init__.py`` imports, for
       setups that disable plugins.

    verl's config validation does not check ``adv_estimator`` against a list (``AlgoConfig``
    holds a plain ``str``; ``get_adv_estimator_fn`` looks the name up in the registry when
    advantages are computed), so the names above pass it; a name that is not registered fails
    there with verl's "Unknown advantage estimator".

Parameters
    verl passes ``config`` (the ``algorithm`` section). The registered functions read:
    ``norm_adv_by_std_in_grpo`` (grpo family: ``mean_only`` when false), ``gamma``
    (``reinforce_plus_plus``'s discount) and ``algorithm.beacon_rl`` (an optional mapping of
    the crate's serde parameters for the estimator in use, e.g.
    ``+algorithm.beacon_rl.segment_weight=0.5``), over which :func:`set_config` takes
    precedence.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

import numpy as np

from . import _config_json, _flags, _has_returns, estimate, estimate_turns, names, verl_names

__all__ = [
    "PREFIX",
    "register",
    "registered_names",
    "set_config",
    "compute_step_advantages",
]

#: Prefix of the crate's versions of verl's own estimators.
PREFIX = "beacon_rl_"

# verl's estimators the crate registers (those verl's generic compute_advantage path can feed).
_VERL_FED = (
    "grpo",
    "grpo_vectorized",
    "grpo_passk",
    "gdpo",
    "rloo",
    "rloo_vectorized",
    "opo",
    "gpg",
    "reinforce_plus_plus",
    "reinforce_plus_plus_baseline",
    "remax",
)
_STEP = ("beacon", "beacon_official", "beacon_ablation", "gigpo")
_GRPO_FAMILY = ("grpo", "grpo_vectorized", "grpo_passk", "gdpo")


def _is_step(name: str) -> bool:
    """Step-level estimators, including the crate's ablation names (``beacon:<variant>``)."""
    return name in _STEP or name.startswith(("beacon:", "beacon_official:"))


def _needs_milestones(name: str) -> bool:
    """The BEACON family reads one milestone flag per step."""
    return _is_step(name) and name != "gigpo"

_log = logging.getLogger(__name__)
_overrides: Dict[str, Dict[str, Any]] = {}
_registered: Dict[str, str] = {}


def set_config(name: str, params: Optional[Mapping[str, Any]]) -> None:
    """Parameters (the crate's serde field names) for crate estimator ``name`` when verl calls
    it, e.g. ``set_config("beacon", {"segment_weight": 0.5})``; ``None`` clears them. Checked
    now: raises ``ValueError`` with the crate's message when invalid."""
    from . import validate

    if params is None:
        _overrides.pop(name, None)
        return
    validate(name, params)
    _overrides[name] = dict(params)


def _config_for(name: str, config: Any) -> Optional[Dict[str, Any]]:
    """The crate parameters for ``name`` from verl's ``algorithm`` config and set_config."""
    params: Dict[str, Any] = {}

    def get(key: str, default: Any = None) -> Any:
        """``config[key]`` for a DictConfig, a verl dataclass config or a plain mapping."""
        if config is None:
            return default
        try:
            return config.get(key, default)
        except AttributeError:
            return getattr(config, key, default)

    if name in _GRPO_FAMILY and get("norm_adv_by_std_in_grpo", True) is False:
        params["norm"] = "mean_only"
    if name == "reinforce_plus_plus" and get("gamma") is not None:
        params["discount"] = float(get("gamma"))
    extra = get("beacon_rl")
    if extra:
        params.update({str(k): v for k, v in dict(extra).items()})
    params.update(_overrides.get(name, {}))
    return params or None


def _make(name: str) -> Callable[..., Tuple[Any, Any]]:
    """verl's registered-estimator signature around crate estimator ``name``."""
    step = _is_step(name)

    def adv_fn(
        token_level_rewards: Any,
        response_mask: Any,
        index: Any = None,
        config: Any = None,
        **kwargs: Any,
    ) -> Tuple[Any, Any]:
        if index is None:
            # verl passes `index` only when the batch has a uid; without one every row is
            # its own group.
            index = np.arange(token_level_rewards.shape[0], dtype=np.int64)
        params = _config_for(name, config)
        if step:
            return estimate_turns(name, token_level_rewards, response_mask, index, config=params)
        return estimate(
            name,
            token_level_rewards,
            response_mask,
            index,
            reward_baselines=kwargs.get("reward_baselines"),
            config=params,
        )

    adv_fn.__name__ = f"beacon_rl_{name}_adv"
    adv_fn.__qualname__ = adv_fn.__name__
    adv_fn.__doc__ = (
        f"beacon-rl's `{name}` with verl's registered-estimator signature: "
        "(token_level_rewards, response_mask, index, config) -> (advantages, returns)."
    )
    return adv_fn


def register() -> Dict[str, str]:
    """Register the crate's estimators with verl's ``register_adv_est``; idempotent.

    Returns the mapping verl name → crate name of what is registered (see the module
    docstring for the names). A name another package already registered is skipped with a
    warning, never overwritten.
    """
    from verl.trainer.ppo import core_algos

    known = set(names())
    wanted = {n: n for n in _STEP if n in known}
    wanted.update({PREFIX + n: n for n in _VERL_FED if n in verl_names()})
    for verl_name, crate_name in wanted.items():
        if verl_name in _registered:
            continue
        existing = core_algos.ADV_ESTIMATOR_REGISTRY.get(verl_name)
        if existing is not None and not getattr(existing, "__module__", "").startswith("beacon_rl"):
            _log.warning("beacon_rl: verl already has an estimator %r; not registering it", verl_name)
            continue
        fn = _make(crate_name)
        if existing is not None:
            # A re-import of this module (e.g. importlib.reload): replace our own entry.
            core_algos.ADV_ESTIMATOR_REGISTRY.pop(verl_name)
        core_algos.register_adv_est(verl_name)(fn)
        _registered[verl_name] = crate_name
    return dict(_registered)


def registered_names() -> Dict[str, str]:
    """What :func:`register` has registered so far (verl name → crate name)."""
    return dict(_registered)


def compute_step_advantages(
    data: Any,
    name: str = "beacon_official",
    *,
    milestone_key: str = "milestone",
    uid_key: str = "uid",
    traj_key: str = "traj_uid",
    anchor_key: str = "anchor_obs",
    step_reward_key: str = "rewards",
    config: Optional[Mapping[str, Any]] = None,
) -> Any:
    """Fill ``data.batch["advantages"]`` and ``data.batch["returns"]`` of a verl ``DataProto``
    in verl-agent's layout, in place, and return ``data``.

    Layout (one row per environment step): ``data.batch["token_level_rewards"]`` and
    ``data.batch["response_mask"]`` (rows × L; a row's reward sum is its score: the episode's
    reward R(τ), which verl-agent repeats on every step, minus that step's invalid-action
    penalty when ``use_invalid_action_penalty`` is on, so the rows of one trajectory may
    differ), ``data.non_tensor_batch[uid_key]`` (group),
    ``[traj_key]`` (trajectory; a trajectory's rows are its steps in row order),
    ``[milestone_key]`` (one flag per step, for ``beacon``/``beacon_official``; the caller
    chooses the column), and for ``gigpo`` ``[anchor_key]`` (str observations) and
    ``[step_reward_key]`` (per-step rewards). Any estimator of :func:`beacon_rl.names` is
    accepted; the verl estimators group rows by ``uid``.

    Each row is scored by its own reward sum, as verl-agent's ``episode_norm_reward`` and GRPO
    do: ``beacon_official``, ``gigpo`` and ``grpo`` normalise every row's own sum over the
    rows of its ``uid``; ``grpo``/``gdpo`` with ``{"statistics": "trajectories"}`` (verl-agent's
    ``compute_mean_std_cross_steps=False``) take each trajectory's first row, and read
    ``[traj_key]`` when present; the paper's ``beacon`` counts each trajectory once and raises
    ``ValueError`` when the rows of a trajectory differ.

    When ``data.batch`` already holds ``advantages``/``returns`` of the right shape, float32 or
    float64, contiguous and on the CPU, they are overwritten in place (no allocation; one
    tensor stored as both only for estimators whose returns are their advantages); otherwise
    new tensors in ``token_level_rewards``' dtype are stored. The milestone column may hold
    bools, 0 and 1 in any dtype (anything else raises ``ValueError`` with its row).
    """
    import torch

    batch = data.batch
    ntb = data.non_tensor_batch
    rewards = batch["token_level_rewards"]
    mask = batch["response_mask"]
    out = None
    keys = batch.keys()
    if "advantages" in keys and "returns" in keys:
        a, r = batch["advantages"], batch["returns"]
        if (
            tuple(a.shape) == tuple(mask.shape)
            and tuple(r.shape) == tuple(mask.shape)
            and a.device.type == "cpu"
            and r.device.type == "cpu"
            and a.dtype == r.dtype
            and a.dtype in (torch.float32, torch.float64)
            and not a.requires_grad
            and not r.requires_grad
            # Distinct elements (not `expand`ed), and one buffer twice only where the
            # estimator's returns are its advantages (the last call may have stored one
            # tensor as both): any other pair gets fresh tensors instead of an error.
            and a.is_contiguous()
            and r.is_contiguous()
            and (
                a.untyped_storage().data_ptr() != r.untyped_storage().data_ptr()
                or (a.data_ptr() == r.data_ptr() and not _has_returns(name, _config_json(config)))
            )
        ):
            out = (a, r)
    kwargs: Dict[str, Any] = {}
    if _needs_milestones(name):
        if milestone_key not in ntb:
            raise ValueError(f"non_tensor_batch has no milestone column {milestone_key!r}")
        flags = np.asarray(ntb[milestone_key])
        if flags.dtype not in (np.bool_, np.uint8, np.int64):
            # Checked: astype(bool) would read 2, NaN or None as a flag.
            flags = _flags(flags, f"non_tensor_batch[{milestone_key!r}]")
        kwargs["milestones"] = flags
    if name == "gigpo":
        for key in (anchor_key, step_reward_key):
            if key not in ntb:
                raise ValueError(f"non_tensor_batch has no column {key!r} (gigpo)")
        kwargs["anchor_obs"] = ntb[anchor_key]
        try:
            kwargs["step_rewards"] = np.asarray(ntb[step_reward_key], dtype=np.float64)
        except (TypeError, ValueError) as e:
            raise TypeError(f"non_tensor_batch[{step_reward_key!r}]: expected numbers ({e})") from None
    for key in (uid_key,) + ((traj_key,) if _is_step(name) else ()):
        if key not in ntb:
            raise ValueError(f"non_tensor_batch has no column {key!r}")
    # Trajectories matter to the step estimators and to grpo's trajectory statistics (without
    # them every row would count as a trajectory of its own).
    with_traj = _is_step(name) or (name in ("grpo", "gdpo") and traj_key in ntb)
    adv, ret = estimate(
        name,
        rewards,
        mask,
        ntb[uid_key],
        traj_index=ntb[traj_key] if with_traj else None,
        config=config,
        out=out,
        **kwargs,
    )
    if out is None:
        batch["advantages"] = adv
        batch["returns"] = ret
    return data


register()
