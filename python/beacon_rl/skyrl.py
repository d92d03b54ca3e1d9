"""beacon-rl's estimators inside SkyRL (``skyrl-train`` 0.3.1).

``import beacon_rl.skyrl`` registers the crate's estimators with SkyRL's
``AdvantageEstimatorRegistry``, so ``trainer.algorithm.advantage_estimator=beacon`` works with
SkyRL's ``compute_advantages_and_returns``. Import it in the launch script before
``initialize_ray``: SkyRL copies the registry to its Ray workers from there.

Names
    - ``beacon``, ``beacon_official``, ``gigpo``: the crate's
      step-level estimators. They read turns from SkyRL's ``loss_mask`` (the assistant's tokens;
      ``response_mask`` also covers the environment's), which SkyRL's stock trainer does not
      pass to an estimator: use :class:`BeaconAdvantages` (below). Called without
      ``loss_mask`` they raise ``ValueError`` rather than guess turns.
    - ``beacon_rl_grpo``, ``beacon_rl_rloo``, ``beacon_rl_gae``, ``beacon_rl_reinforce++``: the
      crate's versions of SkyRL's ``grpo``, ``rloo``, ``gae`` and ``reinforce++`` (SkyRL refuses
      to register a name twice, hence the prefix), with SkyRL's keywords and meanings:

      ========================= ==================================================================
      name                      SkyRL keywords read (meaning as in SkyRL 0.3.1)
      ========================= ==================================================================
      beacon_rl_grpo            ``grpo_norm_by_std`` (divide by the group std, else centre only),
                                ``epsilon`` (added to the std, default 1e-6). A singleton group's
                                score is kept (mean 0, std 1), as SkyRL does.
      beacon_rl_rloo            none: leave-one-out baseline; a singleton group gets 0, as SkyRL's
                                ``rloo`` (the crate's ``rloo_vectorized``).
      beacon_rl_gae             ``values`` (required), ``gamma``, ``lambd``.
      beacon_rl_reinforce++     ``gamma``.
      ========================= ==================================================================

      On SkyRL's layout (``response_mask`` a prefix of ones, zero rewards and values on the
      padding after it) they agree with SkyRL's functions to float64 rounding. They differ
      where SkyRL's functions ignore the mask: ``gae`` and ``reinforce++`` here skip mask-0
      tokens inside a row (as verl 0.9.1 does), where SkyRL 0.3.1 reads their values and
      resets the running return.

Turns, milestones, terminal reward (the package's multi-turn convention, :func:`beacon_rl.estimate_turns`)
    A turn is a maximal run of ``loss_mask == 1``; ``rewards`` (SkyRL's token-level rewards)
    are read as that convention reads ``token_level_rewards``: a positive reward on the last
    token of a turn other than the last marks a milestone, the terminal reward is what the convention
    takes from the row. Each turn's advantage is written over its tokens, 0 elsewhere.

Step-wise mode (``generator.step_wise_trajectories=true``: one row per turn)
    :class:`BeaconAdvantages` reads trajectories from ``is_last_step`` (a trajectory is the run
    of rows up to and including a row with ``is_last_step``, as SkyRL reads them) and computes
    the step estimators on each trajectory's steps joined in row order, so a step-wise batch
    gets the advantages the same dialogue gets as one row. The steps of a trajectory must
    share their ``uid``. Other estimators go through SkyRL's own step-wise path.

Parameters
    SkyRL passes ``config`` (``trainer.algorithm``). Its optional mapping ``beacon_rl`` holds the
    crate's own parameters (serde field names) for the estimator in use, e.g.
    ``+trainer.algorithm.beacon_rl.segment_weight=0.5``; they take precedence over what the
    keywords above derive. ``gamma`` is ``gigpo``'s step-return discount (``step_decay``).

Using loss_mask: :class:`BeaconAdvantages`
    A mixin for SkyRL's ``RayPPOTrainer`` whose ``compute_advantages_and_returns`` passes
    ``loss_mask`` (and ``is_last_step``) to the step estimators; every other estimator runs
    SkyRL's own method. :class:`BeaconPPOExp` is SkyRL's ``BasePPOExp`` whose ``get_trainer``
    returns its trainer with the mixin (SkyRL's documented extension point)::

        import beacon_rl.skyrl
        from beacon_rl.skyrl import BeaconPPOExp

        exp = BeaconPPOExp(cfg)   # instead of BasePPOExp(cfg)
        exp.run()

    Padding rows SkyRL appends to fill data-parallel ranks (``metadata["pad_size"]``) get zero
    advantages and join no group.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np

from . import STEP_ESTIMATORS, estimate, estimate_turns, names, validate
from ._integration import config_get, index_or_rows, is_step

__all__ = [
    "PREFIX",
    "STEP_NAMES",
    "register",
    "registered_names",
    "compute_advantages",
    "BeaconAdvantages",
    "BeaconPPOExp",
]

#: Prefix of the crate's versions of SkyRL's own estimators.
PREFIX = "beacon_rl_"

#: The crate's step-level estimators, registered under their own names.
STEP_NAMES = STEP_ESTIMATORS

# SkyRL's name -> the crate's estimator with SkyRL's semantics.
_OWN = {
    "grpo": "grpo",
    "rloo": "rloo_vectorized",
    "gae": "gae",
    "reinforce++": "reinforce_plus_plus",
}

# What SkyRL's compute_advantages_and_returns passes every estimator, plus what
# BeaconAdvantages adds for the step estimators.
_SKYRL_KEYWORDS = {"index", "values", "grpo_norm_by_std", "gamma", "lambd", "config", "epsilon"}
_TURN_KEYWORDS = {"loss_mask", "is_last_step"}

_registered: Dict[str, str] = {}


def _ppo_utils() -> Any:
    """SkyRL's module holding the registry (skyrl-train 0.3.x layout, then the later one)."""
    try:
        from skyrl_train.utils import ppo_utils
    except ImportError:  # SkyRL after 0.3: the skyrl package
        from skyrl.backends.skyrl_train.utils import ppo_utils  # type: ignore[no-redef]
    return ppo_utils


def _params(name: str, derived: Dict[str, Any], config: Any) -> Optional[Dict[str, Any]]:
    """The crate parameters: derived from SkyRL's keywords, then ``config.beacon_rl``."""
    params = dict(derived)
    extra = config_get(config, "beacon_rl")
    if extra is not None:
        try:
            items = dict(extra).items()
        except (TypeError, ValueError):
            raise TypeError(f"trainer.algorithm.beacon_rl: expected a mapping, got {type(extra).__name__}") from None
        params.update({str(k): v for k, v in items})
    if params:
        try:
            validate(name, params)
        except ValueError as e:
            raise ValueError(f"trainer.algorithm.beacon_rl ({name}): {e}") from None
    return params or None


def _refuse(fn: str, kwargs: Mapping[str, Any], allowed: set) -> None:
    """A keyword the function does not read is an error, not a silently dropped value."""
    unknown = sorted(set(kwargs) - allowed)
    if unknown:
        raise TypeError(f"{fn}: unexpected keyword argument(s) {', '.join(unknown)}")


def _discount(what: str, gamma: Any) -> float:
    g = float(gamma)
    if not 0.0 <= g <= 1.0:
        raise ValueError(f"{what}: gamma must be in [0, 1], got {gamma!r}")
    return g


def _make_own(skyrl_name: str) -> Any:
    """SkyRL's estimator signature around the crate's version of ``skyrl_name``."""
    crate = _OWN[skyrl_name]
    reg_name = PREFIX + skyrl_name

    def adv_fn(token_level_rewards: Any, response_mask: Any, index: Any = None, **kwargs: Any) -> Tuple[Any, Any]:
        _refuse(reg_name, kwargs, _SKYRL_KEYWORDS | {"loss_mask", "is_last_step"})
        config = kwargs.get("config")
        derived: Dict[str, Any] = {}
        values = None
        if skyrl_name == "grpo":
            derived["std_eps"] = float(kwargs.get("epsilon", 1e-6))
            if not kwargs.get("grpo_norm_by_std", True):
                derived["norm"] = "mean_norm"
        elif skyrl_name == "gae":
            values = kwargs.get("values")
            if values is None:
                raise ValueError(f"{reg_name}: values are required (SkyRL passes them when a critic is configured)")
            derived["discount"] = _discount(reg_name, kwargs.get("gamma", 1.0))
            lambd = float(kwargs.get("lambd", 1.0))
            if not 0.0 <= lambd <= 1.0:
                raise ValueError(f"{reg_name}: lambd must be in [0, 1], got {kwargs.get('lambd')!r}")
            derived["gae_lambda"] = lambd
        elif skyrl_name == "reinforce++":
            derived["discount"] = _discount(reg_name, kwargs.get("gamma", 1.0))
        return estimate(
            crate,
            token_level_rewards,
            _mask(response_mask, "response_mask"),
            # reinforce++ and gae do not group; SkyRL passes uids anyway.
            index_or_rows(index, token_level_rewards),
            values=values,
            config=_params(crate, derived, config),
        )

    adv_fn.__name__ = adv_fn.__qualname__ = "beacon_rl_" + skyrl_name.replace("+", "p") + "_adv"
    adv_fn.__doc__ = f"beacon-rl's version of SkyRL's `{skyrl_name}`, with SkyRL's estimator signature."
    return adv_fn


def _mask(x: Any, what: str) -> Any:
    """SkyRL's masks may be float tensors (its ``loss_mask`` is): checked to hold only 0 and 1,
    then given to the crate as uint8 (the crate reads bool, uint8 or int64 masks)."""
    import torch

    if isinstance(x, torch.Tensor) and x.is_floating_point():
        bad = (x != 0) & (x != 1)
        if bad.any():
            row, tok = (int(v) for v in bad.nonzero()[0])
            raise ValueError(f"{what}: row {row} token {tok} is {x[row, tok].item()!r}, expected 0 or 1")
        return x.to(torch.uint8)
    return x


def _make_step(name: str) -> Any:
    """SkyRL's estimator signature around the crate's step estimator ``name``."""

    def adv_fn(token_level_rewards: Any, response_mask: Any, index: Any = None, **kwargs: Any) -> Tuple[Any, Any]:
        _refuse(name, kwargs, _SKYRL_KEYWORDS | _TURN_KEYWORDS)
        loss_mask = kwargs.get("loss_mask")
        if loss_mask is None:
            raise ValueError(
                f"advantage estimator {name!r} reads turns from loss_mask, which SkyRL's trainer does not "
                "pass to estimators: train with beacon_rl.skyrl.BeaconPPOExp (or mix "
                "beacon_rl.skyrl.BeaconAdvantages into your trainer), or pass loss_mask=..."
            )
        if index is None:
            raise ValueError(f"advantage estimator {name!r}: index (the uids) is required")
        return compute_advantages(
            name,
            token_level_rewards,
            response_mask,
            loss_mask,
            index,
            is_last_step=kwargs.get("is_last_step"),
            gamma=kwargs.get("gamma"),
            config=kwargs.get("config"),
        )

    adv_fn.__name__ = adv_fn.__qualname__ = f"beacon_rl_{name}_adv"
    adv_fn.__doc__ = f"beacon-rl's `{name}` with SkyRL's estimator signature plus loss_mask and is_last_step."
    return adv_fn


def compute_advantages(
    name: str,
    rewards: Any,
    response_mask: Any,
    loss_mask: Any,
    index: Any,
    *,
    is_last_step: Any = None,
    gamma: Any = None,
    config: Any = None,
    pad_size: int = 0,
) -> Tuple[Any, Any]:
    """Advantages and returns (one tensor twice) of step estimator ``name`` on SkyRL tensors.

    ``rewards``, ``response_mask`` and ``loss_mask`` are rows × L (SkyRL's ``rewards``,
    ``response_mask``, ``loss_mask``), ``index`` one uid per row. With ``is_last_step`` (one bool
    per row) rows are steps of trajectories (step-wise mode), else dialogues. The last
    ``pad_size`` rows are SkyRL's padding: zeros, in no group. Results have ``rewards``' type,
    dtype and device. Raises ``ValueError`` naming SkyRL's tensor for bad shapes or values.
    """
    if not is_step(name):
        raise ValueError(f"compute_advantages: {name!r} is not a step estimator ({', '.join(STEP_NAMES)})")
    derived: Dict[str, Any] = {}
    if name == "gigpo" and gamma is not None:
        derived["step_decay"] = _discount(name, gamma)
    params = _params(name, derived, config)
    r = _numpy(rewards, "rewards")
    lm = _numpy(_mask(loss_mask, "loss_mask"), "loss_mask")
    rm = _numpy(_mask(response_mask, "response_mask"), "response_mask")
    if r.ndim != 2:
        raise ValueError(f"rewards: expected rows × L, got shape {r.shape}")
    for what, m in (("loss_mask", lm), ("response_mask", rm)):
        if m.shape != r.shape:
            raise ValueError(f"{what}: shape {m.shape} differs from rewards' {r.shape}")
    n = r.shape[0]
    keys = np.asarray(index, dtype=object) if not isinstance(index, np.ndarray) else index
    if keys.shape != (n,):
        raise ValueError(f"index: expected {n} uids (one per row), got shape {keys.shape}")
    if not 0 <= pad_size <= n:
        raise ValueError(f"pad_size: {pad_size} is not in [0, {n}]")
    real = n - pad_size
    if ((lm != 0) & (rm == 0)).any():
        row, tok = map(int, np.argwhere((lm != 0) & (rm == 0))[0])
        raise ValueError(f"loss_mask: row {row} token {tok} is 1 where response_mask is 0")
    adv = np.zeros(r.shape, dtype=r.dtype if r.dtype in (np.float32, np.float64) else np.float32)
    if is_last_step is None:
        if real:
            a, _ = estimate_turns(name, r[:real], lm[:real], keys[:real], config=params)
            adv[:real] = a
    else:
        last = _numpy(is_last_step, "is_last_step").astype(bool)
        if last.shape != (n,):
            raise ValueError(f"is_last_step: expected {n} flags (one per row), got shape {last.shape}")
        _step_wise(name, r[:real], lm[:real], keys[:real], last[:real], params, adv[:real])
    return _like(rewards, adv)


def _step_wise(
    name: str, r: np.ndarray, lm: np.ndarray, keys: np.ndarray, last: np.ndarray, params: Any, out: np.ndarray
) -> None:
    """Step rows: each trajectory's steps joined in row order into one dialogue row (a masked,
    reward-free token between steps keeps their turns apart), the turn convention on those
    rows, and each step's advantages scattered back."""
    n, width = r.shape
    if n == 0:
        return
    if not last[-1]:
        raise ValueError(f"is_last_step: row {n - 1} (the last) is not a last step: its trajectory has no end")
    ends = np.flatnonzero(last)
    starts = np.concatenate(([0], ends[:-1] + 1))
    # Each step keeps its tokens up to the last one that is in its response or holds a reward.
    used = (lm != 0) | (r != 0)
    lengths = np.where(used.any(axis=1), width - np.argmax(used[:, ::-1], axis=1), 0)
    spans = [(int(s), int(e) + 1) for s, e in zip(starts, ends)]
    wide = max(int(lengths[s:e].sum()) + (e - s) for s, e in spans)
    rows = len(spans)
    jr = np.zeros((rows, wide), dtype=r.dtype)
    jm = np.zeros((rows, wide), dtype=np.uint8)
    jkeys = np.empty(rows, dtype=object)
    where = []  # (step row, dialogue row, offset, length)
    for t, (s, e) in enumerate(spans):
        key = keys[s]
        pos = 0
        for row in range(s, e):
            if keys[row] != key:
                raise ValueError(
                    f"index: rows {s} and {row} are steps of one trajectory (is_last_step) with different uids "
                    f"{key!r} and {keys[row]!r}"
                )
            w = int(lengths[row])
            jr[t, pos : pos + w] = r[row, :w]
            jm[t, pos : pos + w] = lm[row, :w] != 0
            where.append((row, t, pos, w))
            pos += w + 1
        jkeys[t] = key
    ja, _ = estimate_turns(name, jr, jm, jkeys, config=params)
    for row, t, pos, w in where:
        out[row, :w] = ja[t, pos : pos + w]


def _numpy(x: Any, what: str) -> np.ndarray:
    """A CPU numpy view (or copy) of a SkyRL tensor."""
    try:
        import torch
    except ImportError:  # pragma: no cover - SkyRL always has torch
        torch = None
    if torch is not None and isinstance(x, torch.Tensor):
        t = x.detach()
        if t.dtype == torch.bfloat16 or t.dtype == torch.float16:
            t = t.float()
        return t.cpu().numpy()
    if x is None:
        raise ValueError(f"{what}: required")
    return np.asarray(x)


def _like(reference: Any, adv: np.ndarray) -> Tuple[Any, Any]:
    """``adv`` in ``reference``'s type, dtype and device (returns are the advantages)."""
    try:
        import torch
    except ImportError:  # pragma: no cover
        return adv, adv
    if isinstance(reference, torch.Tensor):
        dtype = reference.dtype if reference.is_floating_point() else torch.float32
        t = torch.from_numpy(adv).to(device=reference.device, dtype=dtype)
        return t, t
    return adv, adv


def register() -> Dict[str, str]:
    """Register the crate's estimators with SkyRL's ``AdvantageEstimatorRegistry``; idempotent.

    Returns the mapping SkyRL name → crate name of what is registered. Raises ``ValueError``
    when another package registered one of these names (never overwritten)."""
    registry = _ppo_utils().AdvantageEstimatorRegistry
    known = set(names())
    wanted = {n: n for n in STEP_NAMES if n in known}
    wanted.update({PREFIX + s: c for s, c in _OWN.items()})
    available = set(registry.list_available())
    for reg_name, crate_name in wanted.items():
        if reg_name in available:
            existing = registry.get(reg_name)
            if not getattr(existing, "__module__", "").startswith("beacon_rl"):
                raise ValueError(f"SkyRL already has an advantage estimator {reg_name!r} that is not beacon-rl's")
            if reg_name in _registered:
                continue
            # Registered by an earlier copy of this module (e.g. importlib.reload): replace it.
            registry.unregister(reg_name)
        fn = _make_step(reg_name) if reg_name in STEP_NAMES else _make_own(reg_name[len(PREFIX) :])
        registry.register(reg_name, fn)
        _registered[reg_name] = crate_name
    return dict(_registered)


def registered_names() -> Dict[str, str]:
    """What :func:`register` has registered so far (SkyRL name → crate name)."""
    return dict(_registered)


class BeaconAdvantages:
    """Mixin for SkyRL's ``RayPPOTrainer``: ``compute_advantages_and_returns`` passes SkyRL's
    ``loss_mask`` (and ``is_last_step`` in step-wise mode) to the crate's step estimators.

    For any other ``trainer.algorithm.advantage_estimator`` it runs the trainer's own method.
    Writes ``advantages`` and ``returns`` into the batch and the metrics SkyRL's method logs
    (``avg_final_rewards``: the mean of the trajectories' summed rewards; ``avg_advantages``,
    ``avg_advantages_abs`` over the response tokens of the non-padding rows).
    """

    def compute_advantages_and_returns(self, data: Any) -> Any:
        cfg = self.cfg  # type: ignore[attr-defined]
        algorithm = cfg.trainer.algorithm
        name = algorithm.advantage_estimator
        if not is_step(str(name)):
            return super().compute_advantages_and_returns(data)  # type: ignore[misc]
        step_wise = bool(config_get(cfg.generator, "step_wise_trajectories", False))
        if "loss_mask" not in data.keys():
            raise ValueError(f"advantage estimator {name!r}: the training batch has no loss_mask")
        pad = int(data.metadata.get("pad_size", 0) or 0)
        rewards = data["rewards"]
        adv, ret = compute_advantages(
            str(name),
            rewards,
            data["response_mask"],
            data["loss_mask"],
            np.asarray(data.metadata["uids"], dtype=object),
            is_last_step=data["is_last_step"] if step_wise else None,
            gamma=config_get(algorithm, "gamma"),
            config=algorithm,
            pad_size=pad,
        )
        data["advantages"] = adv
        data["returns"] = ret
        self._beacon_metrics(data, step_wise, pad)
        return data

    def _beacon_metrics(self, data: Any, step_wise: bool, pad: int) -> None:
        import torch

        n = len(data["rewards"]) - pad
        sums = data["rewards"][:n].sum(dim=-1)
        if step_wise and n:
            # Trajectory of each row: the number of last steps before it.
            last = data["is_last_step"][:n].bool().to(sums.device)
            traj = torch.cat([last.new_zeros(1, dtype=torch.long), last[:-1].long()]).cumsum(0)
            per_traj = sums.new_zeros(int(traj[-1]) + 1).index_add_(0, traj, sums)
            avg_rewards = per_traj.mean().item()
        else:
            avg_rewards = sums.mean().item() if n else float("nan")
        valid = data["advantages"][:n][data["response_mask"][:n].bool()]
        metrics = {
            "avg_final_rewards": avg_rewards,
            "avg_response_length": data.metadata.get("avg_response_length"),
            "avg_advantages": valid.mean().item() if valid.numel() else 0.0,
            "avg_advantages_abs": valid.abs().mean().item() if valid.numel() else 0.0,
        }
        data.metadata.setdefault("metrics", {}).update(metrics)
        all_metrics = getattr(self, "all_metrics", None)
        if isinstance(all_metrics, dict):
            all_metrics.update(
                {
                    "loss/avg_final_rewards": metrics["avg_final_rewards"],
                    "loss/avg_raw_advantages": metrics["avg_advantages"],
                    "loss/avg_raw_advantages_abs": metrics["avg_advantages_abs"],
                }
            )


_mixed: Dict[type, type] = {}


def _with_mixin(cls: type) -> type:
    """``cls`` with :class:`BeaconAdvantages` in front (one class per trainer class)."""
    if issubclass(cls, BeaconAdvantages):
        return cls
    if cls not in _mixed:
        _mixed[cls] = type(f"Beacon{cls.__name__}", (BeaconAdvantages, cls), {"__module__": __name__})
    return _mixed[cls]


def _experiment_class() -> type:
    """SkyRL's ``BasePPOExp`` whose ``get_trainer`` adds :class:`BeaconAdvantages` (imported on
    first use: the entry point pulls in SkyRL's whole training stack)."""
    try:
        from skyrl_train.entrypoints.main_base import BasePPOExp
    except ImportError:  # SkyRL after 0.3
        from skyrl.train.entrypoints.main_base import BasePPOExp  # type: ignore[no-redef]

    class BeaconPPOExp(BasePPOExp):  # type: ignore[misc, valid-type]
        """SkyRL's ``BasePPOExp`` training with :class:`BeaconAdvantages`: ``get_trainer``
        returns the trainer ``BasePPOExp`` (or a subclass) builds, its class extended by the
        mixin, so a custom trainer class keeps its own methods."""

        def get_trainer(self, *args: Any, **kwargs: Any) -> Any:
            trainer = super().get_trainer(*args, **kwargs)
            trainer.__class__ = _with_mixin(type(trainer))
            return trainer

    BeaconPPOExp.__module__ = __name__
    return BeaconPPOExp


def __getattr__(attr: str) -> Any:
    if attr == "BeaconPPOExp":
        cls = _experiment_class()
        globals()["BeaconPPOExp"] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


register()
