"""beacon-rl's estimators inside a stock verl 0.9.1.

Importing this module registers the crate's estimators with verl's own
``verl.trainer.ppo.core_algos.register_adv_est``, so ``algorithm.adv_estimator=beacon`` (or
``beacon_official``, ``gigpo``, ``beacon_rl_grpo``, ...) works with verl's unmodified
``compute_advantage``.

Names
    - ``beacon``, ``beacon_official``, ``gigpo``: the crate's step-level
      estimators. On verl's layout (one dialogue per row) they read turns by the multi-turn
      convention below; on verl-agent's layout (one row per step) they read the
      ``traj_uid`` and milestone columns when verl passes ``non_tensor_batch``.
    - ``step_reinforce``, ``mt_grpo``: the crate's turn-level estimators. They read the turns
      of each row (maximal runs of ``response_mask == 1``), each turn's reward being the sum
      of the ``token_level_rewards`` it owns (the crate's ``estimator::turns``); when
      ``non_tensor_batch`` holds the trajectory column, a trajectory's turns are those of its
      rows in row order.
    - ``beacon_rl_<name>`` for verl's own estimators: ``beacon_rl_grpo``,
      ``beacon_rl_grpo_vectorized``, ``beacon_rl_grpo_passk``, ``beacon_rl_rloo``,
      ``beacon_rl_rloo_vectorized``, ``beacon_rl_opo``, ``beacon_rl_gpg``,
      ``beacon_rl_reinforce_plus_plus``, ``beacon_rl_reinforce_plus_plus_baseline``. verl
      refuses to register a name it already has, hence the prefix. Each takes exactly the
      keyword arguments of verl's function of that name, with verl's meaning (table below).
    - Not registered, because a stock trainer cannot feed them under another name: ``gae``
      (verl calls its own function directly, with ``values``), ``remax`` (verl computes
      ``reward_baselines`` only when ``adv_estimator`` is ``remax``), ``gdpo`` (verl passes
      ``non_tensor_batch`` and ``batch``, where ``gdpo_reward_keys`` are read, only to the
      name ``gdpo``) and the optimal-token-baseline estimators (``sum_pi_squared`` is passed
      only under their own names), and ``turn_gae`` (it needs one critic value per turn, which
      verl's generic ``compute_advantage`` does not pass). :func:`beacon_rl.estimate` computes
      all of them from the tensors directly.
    - ``tree_grpo``: Tree-GRPO's prompt and tree groups. It reads the trees from
      ``non_tensor_batch``: ``tree_parents`` (one parent row per row, -1 for a tree's first
      rollout) or, as the Tree-GRPO authors' trainer keeps them, ``tree_uid`` (one tree key
      per row). A stock verl 0.9.1 passes ``non_tensor_batch`` only to ``gdpo``, so there
      ``tree_grpo`` raises ``ValueError`` saying so; a verl that forwards ``non_tensor_batch``
      (as the step estimators above use it) runs it, and :func:`beacon_rl.estimate` takes
      ``tree_parents`` directly.

The multi-turn convention (one dialogue per row)
    What verl's GRPO reads, read the same way:

    - a row's **terminal reward** R(τ) (verl's outcome reward) is the sum of its ``token_level_rewards`` over the whole row,
      masked tokens included (``token_level_rewards.sum(-1)``, as verl's GRPO takes a score);
    - a **turn** is a maximal run of ``response_mask == 1`` and is one step;
    - a turn other than the last whose **last token** carries a reward > 0 is a
      **milestone** (the reward function's in-turn increment);
    - no reward is dropped: a reward between turns, after the last turn, mid-turn or on any
      masked token counts in the terminal reward, where verl counts it. A row without any turn but
      with a nonzero reward has no token to credit and raises ``ValueError`` naming the row
      and token; NaN or ±inf anywhere in ``token_level_rewards`` raises ``ValueError`` naming
      the row and token;
    - rows sharing an ``index`` key form a group; a row with no turn (and no reward) gets
      zeros and joins no group. Each turn's advantage is written over its tokens; every other
      token gets 0.

    Worked example, one row of L = 10 (``|`` separates turns from tool / environment tokens)::

        token               0    1    2  | 3    4  | 5    6  | 7    8    9
        response_mask       1    1    1  | 0    0  | 1    1  | 0    0    0
        token_level_rewards 0    0   0.5 | 0    0  | 0    0  | 0    0   1.0

    Turns: tokens 0-2 and 5-6. Terminal reward R = 0.5 + 1.0 = 1.5 (verl's reward manager put the
    score 1.0 on token 9, the last attended token, a masked environment token; verl's GRPO
    scores this row 1.5 too). Turn 0 is a milestone (0.5 on its last token). GiGPO's step
    reward of a turn is the sum of the rewards that belong to it: each reward belongs to the
    turn it is in or follows (one before the first turn to the first), so turn 0 gets 0.5 and
    turn 1 gets 1.0, which GiGPO discounts into step returns with ``algorithm.gamma``
    (γ = 1: 1.5 and 1.0). GiGPO's anchor state of a turn is its position in the dialogue
    (verl passes no observations).

Parameters
    verl passes ``config`` (the ``algorithm`` section). Besides the keywords in the table,
    ``algorithm.beacon_rl`` (an optional mapping) holds the crate's own parameters (serde
    field names) for the estimator in use, e.g. ``+algorithm.beacon_rl.segment_weight=0.5``;
    they are explicit and take precedence over what the table derives, and
    :func:`set_config` takes precedence over both. It also holds the column names the step
    estimators read from ``non_tensor_batch``: ``milestone_key`` (default ``"milestone"``),
    ``traj_key`` (``"traj_uid"``), ``anchor_key`` (``"anchor_obs"``) and
    ``step_reward_key`` (``"rewards"``).

    ======================================= =========================================================
    registered name (verl's keywords)       meaning, as in verl 0.9.1
    ======================================= =========================================================
    beacon_rl_grpo (epsilon=1e-6,           ``epsilon``: added to the group std. Without the keyword,
    norm_adv_by_std_in_grpo, config)        ``config.norm_adv_by_std_in_grpo`` (default True) is read:
                                            verl's trainer passes that value to ``grpo``; the generic
                                            path that calls ``beacon_rl_grpo`` does not.
    beacon_rl_grpo_vectorized (epsilon=1e-6, ``config`` is not read, as in verl: verl's trainer never
    norm_adv_by_std_in_grpo=True, config)   passes the keyword here, so it normalises by the std.
                                            ``+algorithm.beacon_rl.norm=mean_norm`` deviates
                                            explicitly.
    beacon_rl_grpo_passk (epsilon=1e-6,     ``config`` is required and its
    norm_adv_by_std_in_grpo, config)        ``norm_adv_by_std_in_grpo`` (default True) decides; the
                                            keyword is accepted and unused, as in verl.
    beacon_rl_rloo, _rloo_vectorized, _opo  ``epsilon`` accepted and unused, as in verl.
    (epsilon=1e-6, config)
    beacon_rl_gpg (epsilon=1e-6,            ``f_norm``: divisor of every advantage. ``alpha`` and
    f_norm=1.0, alpha=1.0, config)          ``epsilon`` accepted and unused (verl recomputes alpha as
                                            rows / nonzero scores).
    beacon_rl_reinforce_plus_plus (config)  ``config.gamma``: the per-token discount; ``config`` is
                                            required, as in verl. ``index`` is accepted, unused.
    beacon_rl_reinforce_plus_plus_baseline  ``epsilon`` accepted and unused, as in verl.
    (epsilon=1e-6, config)
    gigpo (index, config)                   ``config.gamma``: the step-return discount (verl-agent's
                                            ``algorithm.gamma``); ``+algorithm.beacon_rl.step_decay``
                                            deviates explicitly.
    beacon, beacon_official only ``algorithm.beacon_rl`` (the ablations: its ``ablation`` key).
    (index, config)
    step_reinforce, mt_grpo (index, config) only ``algorithm.beacon_rl`` (e.g. ``step_discount``,
                                            ROLL's ``step_reward_gamma``, default 0.95;
                                            ``algorithm.gamma`` is not read: its default 1.0
                                            would silently replace ROLL's).
    ======================================= =========================================================

    Every function also accepts ``non_tensor_batch`` and ``batch``, which a verl that forwards
    them to estimators passes (the outcome estimators do not read them, as verl's do not);
    any other keyword raises ``TypeError`` naming it, where verl's functions with ``**kwargs``
    would drop it. Empty batches give advantages of shape (0, L), as verl's do (verl's
    batch-whitened ``reinforce_plus_plus`` and ``reinforce_plus_plus_baseline`` raise there).

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
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

import numpy as np

from . import STEP_ESTIMATORS, _config_json, _has_returns, estimate, estimate_turns, names, verl_names
from ._integration import config_get, flag_column, index_or_rows, is_step, needs_milestones

__all__ = [
    "PREFIX",
    "register",
    "registered_names",
    "set_config",
    "compute_step_advantages",
]

#: Prefix of the crate's versions of verl's own estimators.
PREFIX = "beacon_rl_"

#: Turn-level estimators a stock trainer can feed (``turn_gae`` needs per-turn values).
_TURN = ("step_reinforce", "mt_grpo")

#: Keys of ``algorithm.beacon_rl`` (and of :func:`set_config`) that name ``non_tensor_batch``
#: columns for the step estimators, with their defaults; the rest are the crate's parameters.
_COLUMN_KEYS = {
    "milestone_key": "milestone",
    "traj_key": "traj_uid",
    "anchor_key": "anchor_obs",
    "step_reward_key": "rewards",
    "tree_key": "tree_parents",
    "tree_uid_key": "tree_uid",
}

#: What verl (its trainer, or a verl that forwards the batch to estimators) may pass besides
#: the named arguments; the outcome estimators do not read them, as verl's own do not.
_CONTEXT = ("non_tensor_batch", "batch")


_log = logging.getLogger(__name__)
_overrides: Dict[str, Dict[str, Any]] = {}
_registered: Dict[str, str] = {}


def set_config(name: str, params: Optional[Mapping[str, Any]]) -> None:
    """Parameters (the crate's serde field names, plus the column keys ``milestone_key``,
    ``traj_key``, ``anchor_key``, ``step_reward_key``) for crate estimator ``name`` when verl
    calls it, e.g. ``set_config("beacon", {"segment_weight": 0.5})``; ``None`` clears them.
    Checked now: raises ``ValueError`` with the crate's message when invalid."""
    from . import validate

    if params is None:
        _overrides.pop(name, None)
        return
    params = dict(params)
    crate = dict(params)
    _columns(crate)  # checks the column names and leaves the crate's parameters
    validate(name, crate)
    _overrides[name] = params


def _columns(params: Dict[str, Any]) -> Dict[str, str]:
    """Pops the column keys from ``params`` (defaults for those absent)."""
    out = {}
    for key, default in _COLUMN_KEYS.items():
        value = params.pop(key, default)
        if not isinstance(value, str):
            raise TypeError(f"{key}: expected a column name (str), got {type(value).__name__}")
        out[key] = value
    return out


def _params(name: str, derived: Dict[str, Any], config: Any) -> Tuple[Optional[Dict[str, Any]], Dict[str, str]]:
    """The crate parameters for ``name`` (derived from verl's keywords, then
    ``algorithm.beacon_rl``, then :func:`set_config`) and the step estimators' column names."""
    params = dict(derived)
    extra = config_get(config, "beacon_rl")
    if extra:
        params.update({str(k): v for k, v in dict(extra).items()})
    params.update(_overrides.get(name, {}))
    columns = _columns(params)
    return (params or None), columns


def _refuse(fn: str, kwargs: Mapping[str, Any], allowed: Tuple[str, ...] = _CONTEXT) -> None:
    """``TypeError`` naming the first keyword this function cannot honour (verl's own functions
    with ``**kwargs`` drop them without a word)."""
    for key in kwargs:
        if key not in allowed:
            raise TypeError(f"{fn}: unexpected keyword argument {key!r}: beacon-rl cannot honour it")


def _require_config(fn: str, config: Any) -> None:
    """``TypeError`` unless verl passed ``config`` (verl's function of that name asserts it)."""
    if config is None:
        raise TypeError(f"{fn}: config is required (verl's function of this name reads it)")


def _grpo(token_level_rewards: Any, response_mask: Any, index: Any, epsilon: float, norm: Any, config: Any, name: str) -> Tuple[Any, Any]:
    """A GRPO-family estimator with verl's ``epsilon`` and normalisation flag."""
    derived = {"std_eps": float(epsilon)}
    if not norm:
        derived["norm"] = "mean_norm"
    return _outcome(name, token_level_rewards, response_mask, index, config, derived)


def _outcome(name: str, token_level_rewards: Any, response_mask: Any, index: Any, config: Any, derived: Optional[Dict[str, Any]] = None) -> Tuple[Any, Any]:
    """An outcome estimator with the parameters verl's keywords derive (``derived``)."""
    params, _ = _params(name, derived or {}, config)
    return estimate(name, token_level_rewards, response_mask, index, config=params)


def beacon_rl_grpo(
    token_level_rewards: Any,
    response_mask: Any,
    index: Any,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: Optional[bool] = None,
    config: Any = None,
) -> Tuple[Any, Any]:
    """verl's ``compute_grpo_outcome_advantage``, computed by the crate. Without
    ``norm_adv_by_std_in_grpo``, ``config.norm_adv_by_std_in_grpo`` (default True) decides, as
    verl's trainer decides for ``grpo``."""
    norm = norm_adv_by_std_in_grpo
    if norm is None:
        norm = config_get(config, "norm_adv_by_std_in_grpo", True)
    return _grpo(token_level_rewards, response_mask, index, epsilon, norm, config, "grpo")


def beacon_rl_grpo_vectorized(
    token_level_rewards: Any,
    response_mask: Any,
    index: Any,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
) -> Tuple[Any, Any]:
    """verl's ``compute_grpo_vectorized_outcome_advantage``: ``config`` does not change the
    normalisation (as in verl); ``algorithm.beacon_rl.norm`` does, explicitly."""
    return _grpo(token_level_rewards, response_mask, index, epsilon, norm_adv_by_std_in_grpo, config, "grpo_vectorized")


def beacon_rl_grpo_passk(
    token_level_rewards: Any,
    response_mask: Any,
    index: Any,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
    **kwargs: Any,
) -> Tuple[Any, Any]:
    """verl's ``compute_grpo_passk_outcome_advantage``: ``config`` is required and its
    ``norm_adv_by_std_in_grpo`` decides (verl reads it in place of the keyword)."""
    _refuse("beacon_rl_grpo_passk", kwargs)
    _require_config("beacon_rl_grpo_passk", config)
    norm = config_get(config, "norm_adv_by_std_in_grpo", True)
    return _grpo(token_level_rewards, response_mask, index, epsilon, norm, config, "grpo_passk")


def beacon_rl_rloo(token_level_rewards: Any, response_mask: Any, index: Any, epsilon: float = 1e-6, config: Any = None, **kwargs: Any) -> Tuple[Any, Any]:
    """verl's ``compute_rloo_outcome_advantage`` (``epsilon`` unused, as in verl)."""
    _refuse("beacon_rl_rloo", kwargs)
    return _outcome("rloo", token_level_rewards, response_mask, index, config)


def beacon_rl_rloo_vectorized(token_level_rewards: Any, response_mask: Any, index: Any, epsilon: float = 1e-6, config: Any = None, **kwargs: Any) -> Tuple[Any, Any]:
    """verl's ``compute_rloo_vectorized_outcome_advantage`` (``epsilon`` unused, as in verl)."""
    _refuse("beacon_rl_rloo_vectorized", kwargs)
    return _outcome("rloo_vectorized", token_level_rewards, response_mask, index, config)


def beacon_rl_opo(token_level_rewards: Any, response_mask: Any, index: Any, epsilon: float = 1e-6, config: Any = None, **kwargs: Any) -> Tuple[Any, Any]:
    """verl's ``compute_opo_outcome_advantage`` (``epsilon`` unused, as in verl)."""
    _refuse("beacon_rl_opo", kwargs)
    return _outcome("opo", token_level_rewards, response_mask, index, config)


def beacon_rl_gpg(
    token_level_rewards: Any,
    response_mask: Any,
    index: Any,
    epsilon: float = 1e-6,
    f_norm: float = 1.0,
    alpha: float = 1.0,
    config: Any = None,
    **kwargs: Any,
) -> Tuple[Any, Any]:
    """verl's ``compute_gpg_outcome_advantage``: ``f_norm`` divides every advantage;
    ``alpha`` and ``epsilon`` are unused, as in verl (it recomputes alpha)."""
    _refuse("beacon_rl_gpg", kwargs)
    return _outcome("gpg", token_level_rewards, response_mask, index, config, {"f_norm": float(f_norm)})


def beacon_rl_reinforce_plus_plus(token_level_rewards: Any, response_mask: Any, config: Any = None, **kwargs: Any) -> Tuple[Any, Any]:
    """verl's ``compute_reinforce_plus_plus_outcome_advantage``: ``config.gamma`` is the
    per-token discount and ``config`` is required, as in verl; ``index`` is unused."""
    _refuse("beacon_rl_reinforce_plus_plus", kwargs, _CONTEXT + ("index",))
    _require_config("beacon_rl_reinforce_plus_plus", config)
    gamma = config_get(config, "gamma")
    if gamma is None:
        raise TypeError("beacon_rl_reinforce_plus_plus: config.gamma is required (verl reads it)")
    rows = np.arange(token_level_rewards.shape[0], dtype=np.int64)
    return _outcome("reinforce_plus_plus", token_level_rewards, response_mask, rows, config, {"discount": float(gamma)})


def beacon_rl_reinforce_plus_plus_baseline(token_level_rewards: Any, response_mask: Any, index: Any, epsilon: float = 1e-6, config: Any = None, **kwargs: Any) -> Tuple[Any, Any]:
    """verl's ``compute_reinforce_plus_plus_baseline_outcome_advantage`` (``epsilon`` unused,
    as in verl)."""
    _refuse("beacon_rl_reinforce_plus_plus_baseline", kwargs)
    return _outcome("reinforce_plus_plus_baseline", token_level_rewards, response_mask, index, config)


#: verl's estimators the crate registers, by verl name (those a stock trainer can feed).
_VERL_FNS: Dict[str, Callable[..., Tuple[Any, Any]]] = {
    "grpo": beacon_rl_grpo,
    "grpo_vectorized": beacon_rl_grpo_vectorized,
    "grpo_passk": beacon_rl_grpo_passk,
    "rloo": beacon_rl_rloo,
    "rloo_vectorized": beacon_rl_rloo_vectorized,
    "opo": beacon_rl_opo,
    "gpg": beacon_rl_gpg,
    "reinforce_plus_plus": beacon_rl_reinforce_plus_plus,
    "reinforce_plus_plus_baseline": beacon_rl_reinforce_plus_plus_baseline,
}


#: The part of a registered function that differs between estimators. It gets the token
#: rewards, the mask, the group keys (one group per row when verl passes none), the trajectory
#: column (None when ``non_tensor_batch`` holds none), the crate parameters, the column names
#: and ``non_tensor_batch``.
_Run = Callable[
    [Any, Any, Any, Any, Optional[Dict[str, Any]], Dict[str, str], Optional[Mapping[str, Any]]],
    Tuple[Any, Any],
]


def _verl_fn(name: str, run: _Run, doc: str) -> Callable[..., Tuple[Any, Any]]:
    """verl's registered-estimator signature around crate estimator ``name``, named as verl shows
    it and documented by ``doc``: the argument handling every registered estimator shares
    (``index``, the parameters, the trajectory column), then ``run``."""

    def adv_fn(
        token_level_rewards: Any,
        response_mask: Any,
        index: Any = None,
        config: Any = None,
        non_tensor_batch: Optional[Mapping[str, Any]] = None,
        batch: Any = None,
    ) -> Tuple[Any, Any]:
        index = index_or_rows(index, token_level_rewards)
        derived: Dict[str, Any] = {}
        if name == "gigpo" and config_get(config, "gamma") is not None:
            derived["step_decay"] = float(config_get(config, "gamma"))
        params, columns = _params(name, derived, config)
        traj = None
        if non_tensor_batch is not None and columns["traj_key"] in non_tensor_batch:
            traj = non_tensor_batch[columns["traj_key"]]
        return run(token_level_rewards, response_mask, index, traj, params, columns, non_tensor_batch)

    adv_fn.__name__ = f"beacon_rl_{name}_adv"
    adv_fn.__qualname__ = adv_fn.__name__
    adv_fn.__doc__ = doc
    return adv_fn


def _make_step(name: str) -> Callable[..., Tuple[Any, Any]]:
    """verl's registered-estimator signature around step estimator ``name``."""

    def run(rewards: Any, mask: Any, index: Any, traj: Any, params: Any, columns: Dict[str, str], ntb: Any) -> Tuple[Any, Any]:
        if traj is not None:
            # verl-agent's layout, one row per step: the columns it names.
            kwargs = _step_columns(name, ntb, columns)
            return estimate(name, rewards, mask, index, traj_index=traj, config=params, **kwargs)
        return estimate_turns(name, rewards, mask, index, config=params)

    return _verl_fn(
        name,
        run,
        f"beacon-rl's `{name}` with verl's registered-estimator signature: "
        "(token_level_rewards, response_mask, index, config, non_tensor_batch, batch) -> "
        "(advantages, returns). With `non_tensor_batch` holding the trajectory column (one row "
        "per step), reads it and the milestone column; else one dialogue per row, by the "
        "multi-turn convention of the module docstring.",
    )


def _make_turn(name: str) -> Callable[..., Tuple[Any, Any]]:
    """verl's registered-estimator signature around turn-level estimator ``name``."""

    def run(rewards: Any, mask: Any, index: Any, traj: Any, params: Any, columns: Dict[str, str], ntb: Any) -> Tuple[Any, Any]:
        return estimate(name, rewards, mask, index, traj_index=traj, config=params)

    return _verl_fn(
        name,
        run,
        f"beacon-rl's turn-level `{name}` with verl's registered-estimator signature: "
        "(token_level_rewards, response_mask, index, config, non_tensor_batch, batch) -> "
        "(advantages, returns). Turns are the runs of response_mask == 1 of each row; with "
        "`non_tensor_batch` holding the trajectory column, a trajectory's turns are those of "
        "its rows.",
    )


def _tree_parents_of(ntb: Optional[Mapping[str, Any]], columns: Mapping[str, str]) -> np.ndarray:
    """``tree_parents`` from ``non_tensor_batch``: the column itself, or one derived from tree
    keys (each tree's first row is its root, the others name it; only membership counts)."""
    key, uid_key = columns["tree_key"], columns["tree_uid_key"]
    if ntb is not None and key in ntb:
        return np.asarray(ntb[key])
    if ntb is not None and uid_key in ntb:
        first: Dict[Any, int] = {}
        parents = np.empty(len(ntb[uid_key]), dtype=np.int64)
        for r, k in enumerate(ntb[uid_key]):
            if k is None or (isinstance(k, float) and k != k):
                raise ValueError(f"non_tensor_batch[{uid_key!r}][{r}]: {k!r} is no tree key")
            if k in first:
                parents[r] = first[k]
            else:
                first[k] = r
                parents[r] = -1
        return parents
    raise ValueError(
        f"tree_grpo: non_tensor_batch has no {key!r} or {uid_key!r} column (a stock verl 0.9.1 "
        "passes non_tensor_batch only to gdpo; call beacon_rl.estimate('tree_grpo', ..., "
        "tree_parents=...) or forward non_tensor_batch)"
    )


def _make_tree(name: str) -> Callable[..., Tuple[Any, Any]]:
    """verl's registered-estimator signature around ``tree_grpo``."""

    def run(rewards: Any, mask: Any, index: Any, traj: Any, params: Any, columns: Dict[str, str], ntb: Any) -> Tuple[Any, Any]:
        parents = _tree_parents_of(ntb, columns)
        return estimate(name, rewards, mask, index, traj_index=traj, config=params, tree_parents=parents)

    return _verl_fn(
        name,
        run,
        "beacon-rl's `tree_grpo` (Tree-GRPO) with verl's registered-estimator signature: "
        "(token_level_rewards, response_mask, index, config, non_tensor_batch, batch) -> "
        "(advantages, returns). Reads the trees from non_tensor_batch: `tree_parents` (one "
        "parent row per row, -1 for a tree's first rollout) or `tree_uid` (one tree key per "
        "row); rows sharing `index` are a prompt's rollouts.",
    )


def _step_columns(name: str, ntb: Mapping[str, Any], columns: Mapping[str, str]) -> Dict[str, Any]:
    """The step estimators' per-row columns from ``non_tensor_batch`` (verl-agent's layout)."""
    kwargs: Dict[str, Any] = {}
    if needs_milestones(name):
        key = columns["milestone_key"]
        if key not in ntb:
            raise ValueError(f"non_tensor_batch has no milestone column {key!r}")
        kwargs["milestones"] = flag_column(ntb[key], f"non_tensor_batch[{key!r}]")
    if name == "gigpo":
        anchor_key, step_key = columns["anchor_key"], columns["step_reward_key"]
        for key in (anchor_key, step_key):
            if key not in ntb:
                raise ValueError(f"non_tensor_batch has no column {key!r} (gigpo)")
        kwargs["anchor_obs"] = ntb[anchor_key]
        try:
            kwargs["step_rewards"] = np.asarray(ntb[step_key], dtype=np.float64)
        except (TypeError, ValueError) as e:
            raise TypeError(f"non_tensor_batch[{step_key!r}]: expected numbers ({e})") from None
    return kwargs


def register() -> Dict[str, str]:
    """Register the crate's estimators with verl's ``register_adv_est``; idempotent.

    Returns the mapping verl name → crate name of what is registered (see the module
    docstring for the names). A name another package already registered is skipped with a
    warning, never overwritten.
    """
    from verl.trainer.ppo import core_algos

    known = set(names())
    wanted: Dict[str, Tuple[str, Callable[..., Tuple[Any, Any]]]] = {
        n: (n, _make_step(n)) for n in STEP_ESTIMATORS if n in known
    }
    wanted.update({n: (n, _make_turn(n)) for n in _TURN if n in known})
    if "tree_grpo" in known:
        wanted["tree_grpo"] = ("tree_grpo", _make_tree("tree_grpo"))
    wanted.update({PREFIX + n: (n, fn) for n, fn in _VERL_FNS.items() if n in verl_names()})
    for verl_name, (crate_name, fn) in wanted.items():
        if verl_name in _registered:
            continue
        existing = core_algos.ADV_ESTIMATOR_REGISTRY.get(verl_name)
        if existing is not None and not getattr(existing, "__module__", "").startswith("beacon_rl"):
            _log.warning("beacon_rl: verl already has an estimator %r; not registering it", verl_name)
            continue
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
    batch = data.batch
    ntb = data.non_tensor_batch
    rewards = batch["token_level_rewards"]
    mask = batch["response_mask"]
    out = _reusable_outputs(batch, tuple(mask.shape), name, config)
    kwargs = _step_columns(
        name,
        ntb,
        {"milestone_key": milestone_key, "anchor_key": anchor_key, "step_reward_key": step_reward_key},
    )
    for key in (uid_key,) + ((traj_key,) if is_step(name) else ()):
        if key not in ntb:
            raise ValueError(f"non_tensor_batch has no column {key!r}")
    # Trajectories matter to the step estimators and to grpo's trajectory statistics (without
    # them every row would count as a trajectory of its own).
    with_traj = is_step(name) or (name in ("grpo", "gdpo") and traj_key in ntb)
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


def _reusable_outputs(batch: Any, shape: Tuple[int, ...], name: str, config: Optional[Mapping[str, Any]]) -> Any:
    """``(advantages, returns)`` of ``batch`` when :func:`compute_step_advantages` can write into
    them in place (see its docstring), else None."""
    import torch

    keys = batch.keys()
    if "advantages" not in keys or "returns" not in keys:
        return None
    a, r = batch["advantages"], batch["returns"]
    if (
        tuple(a.shape) == shape
        and tuple(r.shape) == shape
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
        return (a, r)
    return None


register()
