"""beacon-rl from Python: BEACON, GiGPO and verl's advantage estimators, computed in Rust.

Every estimator of the crate (``names()``) runs on numpy arrays or CPU torch tensors and
returns ``(advantages, returns)`` in the caller's array type and float dtype:

>>> import numpy as np, beacon_rl
>>> rewards = np.array([[0, 0, 1], [0, 0, 0]], dtype=np.float32)
>>> mask = np.array([[1, 1, 1], [1, 1, 0]], dtype=np.int64)
>>> adv, ret = beacon_rl.estimate("grpo", rewards, mask, index=np.array(["q", "q"], dtype=object))
>>> adv.dtype, adv.shape
(dtype('float32'), (2, 3))

Inputs are read in place: numpy arrays through NumPy's C-API, CPU tensors through
``Tensor.numpy()`` (same memory). Values may be float32 or float64, masks bool, uint8 or
int64 (read in place) or int32, float16, float32 or float64 (as verl's ``.float()`` masks;
converted once, checked to hold exactly 0 and 1), group keys int64 or any object array (verl's uuid strings). The GIL is released while
the crate computes. Bad input raises ``ValueError`` or ``TypeError`` with the crate's message.

``beacon_rl.verl`` registers the estimators with verl (see its docstring), and
``beacon_rl.verl.compute_step_advantages`` fills a verl-agent ``DataProto`` in place.
``beacon_rl.MilestoneDiscovery`` finds milestones for BEACON from each step's action and
response text and each rollout's outcome alone (``beacon_rl.discovery``).
"""

from __future__ import annotations

import functools
import json
import operator
import sys
from typing import Any, Mapping, Optional, Sequence, Tuple

import numpy as np

from . import _native

__all__ = [
    "names",
    "verl_names",
    "estimate",
    "estimate_turns",
    "validate",
    "STEP_ESTIMATORS",
    "set_num_threads",
    "get_num_threads",
    "MilestoneDiscovery",
    "discover_milestones",
]

#: Estimators that credit steps (rows of a step batch, or turns of a dialogue).
STEP_ESTIMATORS = ("beacon", "beacon_official", "gigpo")

Array = Any  # numpy.ndarray or torch.Tensor (torch is optional)


def names() -> list[str]:
    """Every estimator name the crate knows: verl's ``adv_estimator`` strings plus
    ``beacon``, ``beacon_official``, ``gigpo`` and the turn-level ``step_reinforce``,
    ``mt_grpo``, ``turn_gae``, ``tree_grpo`` and ``empg``. A name may carry keys,
    ``"beacon:segment_decay=0.9"`` (the crate's grammar, see :func:`estimate`)."""
    return list(_native.names())


def verl_names() -> list[str]:
    """The names that are verl's own estimators (reproduced by the crate)."""
    return list(_native.verl_names())


def set_num_threads(n: int) -> None:
    """Compute on ``n`` threads from the next call on (default 1: the calling thread).

    The crate's parallel paths split independent groups and row blocks over the threads and
    give the very bits of the serial path. More threads cut wall-clock time on the
    memory-bound passes over rows × L (not in proportion: cores share the memory bus) and add
    CPU time; a trainer's process also runs torch's threads, hence the default of one.
    Raises ``TypeError`` unless ``n`` is an integer (``2.5`` and ``"2"`` are not) and
    ``ValueError`` for less than 1 or more than 1024 (a pool spawns all its threads at once)."""
    n = operator.index(n)
    if n < 1:
        raise ValueError(f"set_num_threads: expected at least 1 thread, got {n}")
    try:
        _native.set_num_threads(n)
    except OverflowError:  # beyond the native size type: far above the limit
        raise ValueError(f"set_num_threads: expected at most 1024 threads, got {n}") from None


def get_num_threads() -> int:
    """The number of threads the estimators compute on (1: the calling thread)."""
    return int(_native.get_num_threads())


def validate(name: str, config: Optional[Mapping[str, Any]] = None) -> None:
    """Raise ``ValueError`` (with the crate's message) unless estimator ``name`` (with keys or
    not) with the parameters ``config`` (the same keys) is valid."""
    _native.validate(name, _config_json(config))


def _config_json(config: Optional[Mapping[str, Any]]) -> Optional[str]:
    """The crate reads parameters as a JSON object (its serde format)."""
    if config is None:
        return None
    if not isinstance(config, Mapping):
        raise TypeError(f"config: expected a mapping, got {type(config).__name__}")
    try:
        return json.dumps(dict(config), default=_json_scalar)
    except (TypeError, ValueError) as e:
        raise TypeError(f"config: {e}") from None


def _json_scalar(x: Any) -> Any:
    """numpy scalars (``np.float32(0.5)``, ``np.int64(3)``) as the Python numbers they hold."""
    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(f"{type(x).__name__} is not a parameter value (number, string, bool or None)")


@functools.lru_cache(maxsize=256)
def _has_returns(name: str, config_json: Optional[str]) -> bool:
    """Whether ``name`` computes returns of its own (else they equal its advantages)."""
    return bool(_native.has_returns(name, config_json))


def _is_torch(x: Any) -> bool:
    """True for a torch.Tensor, without importing torch (no tensor exists before it is)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


class _Caller:
    """Remembers the caller's array type (numpy or torch, and the torch device) so results
    come back in it."""

    def __init__(self) -> None:
        self.torch_device: Any = None
        # The first tensor is on the CPU: results (always computed on the CPU) stay where they are.
        self.torch_cpu = False

    def numpy(self, x: Any, what: str) -> Optional[np.ndarray]:
        """A numpy view of ``x`` (no copy for numpy arrays and CPU tensors)."""
        if x is None:
            return None
        if type(x) is np.ndarray:
            return x
        if _is_torch(x):
            if self.torch_device is None:
                self.torch_device = x.device
                self.torch_cpu = x.is_cpu
            if x.is_meta:
                # torch's own NotImplementedError would name no argument.
                raise TypeError(f"{what}: a meta-device tensor holds no values")
            # Tensor.numpy() views the same memory; only autograd history needs a detach
            # first (each of detach and device.type costs about 1 µs per tensor).
            t = x if x.is_cpu and not x.requires_grad else x.detach()
            if not t.is_cpu:
                # Not zero-copy: the crate computes on the host.
                t = t.cpu()
            return _tensor_numpy(t, what)
        if isinstance(x, np.ndarray):
            return x
        return np.asarray(x)


def _tensor_numpy(t: Any, what: str) -> np.ndarray:
    """``t.numpy()`` (same memory), with the argument named when torch refuses (bfloat16 and
    other dtypes numpy has no view for, sparse tensors)."""
    try:
        return t.numpy()
    except (TypeError, RuntimeError) as e:
        raise TypeError(f"{what}: unsupported tensor ({t.dtype}, {t.layout}): {e}") from None


def _mask(m: Optional[np.ndarray]) -> Optional[np.ndarray]:
    """A float16 mask as float32 (a copy; the native layer reads bool, uint8, int32, int64,
    float32 and float64 masks itself and checks every entry is exactly 0 or 1)."""
    if m is not None and m.dtype == np.float16:
        return m.astype(np.float32)
    return m


def _keys(caller: _Caller, x: Any, what: str) -> np.ndarray:
    """Group or trajectory keys as int64 or object (what the native layer interns)."""
    if isinstance(x, (list, tuple)):
        # A list's keys are the Python objects it holds, compared by Python's equality as in an
        # object array: np.asarray would turn [1, "1"] into two equal strings.
        try:
            a = np.fromiter(x, dtype=object, count=len(x))
        except ValueError:  # numpy < 1.23 builds no object array from an iterator
            a = np.empty(len(x), dtype=object)
            for i, k in enumerate(x):
                a[i] = k
        return a
    a = caller.numpy(x, what)
    if a is None:
        raise TypeError(f"{what}: required")
    if a.ndim != 1:
        raise ValueError(f"{what}: expected one key per row (1-D), got shape {a.shape}")
    kind = a.dtype.kind
    if kind == "O" or (kind == "i" and a.dtype.itemsize == 8 and a.dtype.isnative):
        return a
    if kind in "iub":
        if kind == "u" and a.size and int(a.max()) > np.iinfo(np.int64).max:
            return a.astype(object)
        return a.astype(np.int64)
    if kind in "USV":
        return a.astype(object)
    raise TypeError(f"{what}: expected integer, string or object keys, got {a.dtype} array")


def _madvise() -> Any:
    """libc's ``madvise`` on Linux (else None), for :func:`_advise_huge_pages`."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        f = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    f.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    f.restype = ctypes.c_int
    return f


_MADVISE = _madvise()
_MADV_HUGEPAGE = 14
_HUGE_PAGE = 2 << 20


def _advise_huge_pages(start: int, nbytes: int) -> None:
    """Asks the kernel to back a fresh output of 4 MiB or more (``nbytes`` from address
    ``start``) with 2 MiB pages (Linux ``madvise(MADV_HUGEPAGE)``, the same advice the crate
    gives its own fresh outputs), before its first write: each 4 KiB page of fresh memory
    otherwise faults on that write, which at 30,720 × 512 float32 costs more than the
    estimator. Contents are unaffected; a refusal (transparent huge pages off) is ignored."""
    if _MADVISE is None or nbytes < 2 * _HUGE_PAGE:
        return
    lo = -(-start // _HUGE_PAGE) * _HUGE_PAGE
    hi = (start + nbytes) // _HUGE_PAGE * _HUGE_PAGE
    if hi > lo:
        _MADVISE(lo, hi - lo, _MADV_HUGEPAGE)


def _empty(caller: _Caller, shape: Tuple[int, int], dtype: np.dtype) -> Tuple[Array, np.ndarray]:
    """A fresh output in the caller's type, and its numpy view (advised for huge pages)."""
    if caller.torch_device is not None:
        import torch

        t = torch.empty(shape, dtype=torch.float32 if dtype == np.float32 else torch.float64)
        # data_ptr() is cheap; numpy's .ctypes.data costs about 3 µs.
        _advise_huge_pages(t.data_ptr(), t.nelement() * t.element_size())
        return t, t.numpy()
    a = np.empty(shape, dtype=dtype)
    if a.nbytes >= 2 * _HUGE_PAGE:
        _advise_huge_pages(a.ctypes.data, a.nbytes)
    return a, a


def _finish(caller: _Caller, out: Array) -> Array:
    """Move a torch result back to the caller's device (CPU results are returned as is)."""
    if caller.torch_device is None or caller.torch_cpu:
        # Results are computed on the CPU (fresh ones) or are the caller's CPU outputs.
        return out
    if _is_torch(out) and out.device != caller.torch_device:
        return out.to(caller.torch_device)
    return out


def _finish_pair(caller: _Caller, adv: Array, ret: Array) -> Tuple[Array, Array]:
    """Both results on the caller's device; one array returned twice stays one array."""
    a = _finish(caller, adv)
    return a, (a if ret is adv else _finish(caller, ret))


def _outputs(
    caller: _Caller,
    out: Optional[Sequence[Array]],
    shape: Tuple[int, int],
    dtype: np.dtype,
    returns: bool,
) -> Tuple[Array, Array, np.ndarray, Optional[np.ndarray]]:
    """The two outputs: the caller's ``out`` pair (written in place) or fresh arrays.

    ``returns``: the estimator computes returns of its own. When it does not, a fresh result
    is one array returned twice (as verl's own estimators return ``scores, scores``), and an
    ``out`` pair may be one array twice; the returned returns view is then ``None`` (nothing
    to write besides the advantages)."""
    if out is not None:
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise TypeError("out: expected a pair (advantages, returns)")
        views = []
        for name, o in zip(("out[0] (advantages)", "out[1] (returns)"), out):
            if _is_torch(o):
                if not o.is_cpu:
                    raise ValueError(f"{name}: must be a CPU tensor to be written in place")
                if o.requires_grad:
                    raise ValueError(f"{name}: requires grad; pass a tensor without autograd history")
                v = _tensor_numpy(o, name)
            elif isinstance(o, np.ndarray):
                v = o
            else:
                raise TypeError(f"{name}: expected a numpy array or CPU torch tensor")
            if tuple(v.shape) != tuple(shape):
                raise ValueError(f"{name}: has shape {tuple(v.shape)}, expected {tuple(shape)}")
            views.append(v)
            if out[1] is out[0]:
                break
        if len(views) == 1:
            views.append(views[0])
        if not returns and _same_array(views[0], views[1]):
            return out[0], out[1], views[0], None
        return out[0], out[1], views[0], views[1]
    a, av = _empty(caller, shape, dtype)
    if not returns:
        return a, a, av, None
    r, rv = _empty(caller, shape, dtype)
    return a, r, av, rv


def _same_array(a: np.ndarray, b: np.ndarray) -> bool:
    """The same elements in the same layout (one buffer passed as both outputs)."""
    if a is b:
        return True
    return (
        a.shape == b.shape
        and a.strides == b.strides
        and a.dtype == b.dtype
        and a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
    )


def _flags(a: np.ndarray, what: str) -> np.ndarray:
    """One flag per row given as Python objects (verl-agent's object columns) or in a dtype the
    native layer does not read, as bool, every entry checked to be a bool, 0 or 1:
    ``astype(bool)`` would read 2, -1, NaN, None or "0" as True or False without a word."""
    if a.ndim != 1:
        raise ValueError(f"{what}: expected one flag per row (1-D), got shape {a.shape}")
    try:
        valid = np.asarray((a == 0) | (a == 1), dtype=bool)
    except (TypeError, ValueError):
        valid = np.array([_is_flag(v) for v in a.tolist()], dtype=bool)
    if valid.shape != a.shape:
        valid = np.array([_is_flag(v) for v in a.tolist()], dtype=bool)
    if not valid.all():
        row = int(np.flatnonzero(~valid)[0])
        raise ValueError(f"{what}: row {row} is {a[row]!r}, expected a flag (bool, 0 or 1)")
    return a.astype(bool)


def _is_flag(v: Any) -> bool:
    """A bool, 0 or 1 (one entry at a time, for entries numpy cannot compare at once)."""
    try:
        return bool(v == 0 or v == 1)
    except (TypeError, ValueError):
        return False


def _float_dtype(*arrays: Optional[np.ndarray]) -> np.dtype:
    """The caller's float dtype: that of the first float input, else float32."""
    for a in arrays:
        if a is not None and a.dtype in (np.float32, np.float64):
            return a.dtype
    return np.dtype(np.float32)


def estimate(
    name: str,
    token_level_rewards: Optional[Array] = None,
    response_mask: Optional[Array] = None,
    index: Optional[Array] = None,
    *,
    traj_index: Optional[Array] = None,
    terminal_rewards: Optional[Array] = None,
    row_scores: Optional[Array] = None,
    values: Optional[Array] = None,
    old_log_probs: Optional[Array] = None,
    sum_pi_squared: Optional[Array] = None,
    rollout_is_weights: Optional[Array] = None,
    reward_baselines: Optional[Array] = None,
    milestones: Optional[Array] = None,
    step_rewards: Optional[Array] = None,
    turn_values: Optional[Array] = None,
    anchor_obs: Optional[Array] = None,
    config: Optional[Mapping[str, Any]] = None,
    out: Optional[Sequence[Array]] = None,
    tree_parents: Optional[Array] = None,
    step_entropy: Optional[Array] = None,
) -> Tuple[Array, Array]:
    """Advantages and returns of estimator ``name``: one of ``names()``, or a name with keys,
    ``"beacon:segment_decay=0.9,ablation=milestone_dropout(p=0.3),seed=7"`` (the crate's
    grammar: the keys are the fields of the estimator's config, as in ``config``). ``config``
    (a mapping of the same keys, e.g. ``{"segment_decay": 0.9}``) adds keys; a key in both is a
    ``ValueError``, and so is an unknown name or key (the message lists the valid ones).

    Arguments follow verl's names. Rows are responses (verl) or steps (verl-agent):

    - ``token_level_rewards`` (rows × L, float32/float64), ``response_mask`` (rows × L,
      bool/uint8/int32/int64/float16/float32/float64, exactly 0 or 1; any other value is a
      ``ValueError`` naming its row and token) and ``index`` (one group key per row: integers, strings, or
      any object array such as verl's uuid strings, compared by Python's equality; a list's
      entries are compared as the objects they are; None and NaN are refused) are what
      verl's estimators read.
    - ``traj_index`` (one trajectory key per row) makes rows steps of trajectories, in row
      order; without it every row is its own trajectory.
    - ``terminal_rewards`` (one per row, equal within a trajectory) is R(τ) for BEACON and
      GiGPO. Without it, each row is scored by its own sum of ``token_level_rewards``, as
      verl-agent does (its layout): the rows of one trajectory may then differ, as
      verl-agent's invalid-action penalty makes them (``beacon_official``, ``gigpo`` and
      ``grpo``/``rloo`` normalise each row's own score; ``grpo`` with
      ``{"statistics": "trajectories"}`` counts each trajectory's first row; the paper's
      ``beacon`` counts each trajectory once and raises ``ValueError`` naming the first row
      that differs).
    - ``row_scores`` (one finite float per row) gives those per-row scores explicitly (the
      crate's ``EstimatorInput::with_row_scores``); ``token_level_rewards``, when given too,
      must sum to them on every row. Not together with ``terminal_rewards``.
    - ``milestones`` (one flag per row: bool/uint8/int64, or an object array of bools, 0
      and 1) for ``beacon``/``beacon_official``; ``step_rewards``
      and ``anchor_obs`` (object array of str) for ``gigpo``; ``values`` for ``gae``;
      ``reward_baselines`` for ``remax``; ``old_log_probs``, ``sum_pi_squared``,
      ``rollout_is_weights`` for the optimal-token-baseline estimators.
    - ``step_reinforce``, ``mt_grpo``, ``turn_gae`` credit turns: on verl's multi-turn rows
      (one dialogue per row, a turn per run of ``response_mask == 1``) each turn's reward is
      the sum of the ``token_level_rewards`` it owns; on step rows (``step_rewards`` given,
      one turn per row, ``traj_index`` for the trajectories) it is the row's step reward.
      ``turn_gae`` reads the critic's ``values`` at each turn's first generated token or, on
      step rows, ``turn_values`` (one float32/float64 value per row: V of the state the row's
      turn begins in; a 1-D array, else ``TypeError``; a wrong length, NaN/inf, or
      ``turn_values`` without ``step_rewards`` or for another estimator is a ``ValueError``).
    - ``tree_parents`` (one integer per row) for ``tree_grpo``: the row whose rollout the
      row's rollout branched from, or -1 for the first rollout of a tree (the rollouts that
      lead to the same first rollout form a tree; the batch's groups are the prompts). A
      non-integer or non-1-D array is a ``TypeError``; a wrong length, an entry naming no
      row, a parent in another group, a cycle, or ``tree_parents`` for another estimator is
      a ``ValueError``.
    - ``step_entropy`` (one float32/float64 value per row: the policy's mean token entropy
      at the row's step) for ``empg``, which modulates GRPO's advantage (over
      ``terminal_rewards`` or the rows' scores) step by step with it. A non-1-D array is a
      ``TypeError``; a wrong length, NaN/inf, a negative entry, or ``step_entropy`` for
      another estimator is a ``ValueError``.
    - ``config``: parameters in the crate's serde field names (e.g. ``{"norm": "mean_norm"}``
      for grpo, ``{"segment_weight": 0.5}`` for beacon); omitted ones take verl's defaults.
    - ``out``: a pair ``(advantages, returns)`` of float32/float64 numpy arrays or CPU tensors
      of the output shape, written in place and returned. For estimators whose returns equal
      their advantages (all but ``gae``, ``reinforce_plus_plus`` and the other estimators
      with returns of their own), the pair may be one array twice: only the advantages are
      written.

    An empty batch (0 rows) gives advantages and returns of shape (0, L), as verl's
    estimators do. A meta-device tensor raises ``TypeError`` naming its argument.

    Returns ``(advantages, returns)`` of shape ``response_mask.shape`` (else
    ``token_level_rewards.shape``, else rows × 1), as torch tensors when
    ``token_level_rewards`` (or the first array given) is one, in its float dtype. When the
    estimator's returns equal its advantages and no ``out`` is given, both are the **same**
    array, as verl's own estimators return ``scores, scores`` (one allocation and no copy).

    Inputs may be strided, transposed or reversed views (read in place). Raises ``TypeError``
    for an unsupported array type or dtype and ``ValueError`` with the crate's message (which
    field, which row) for bad values or shapes, for a step estimator given none of
    ``terminal_rewards``, ``row_scores`` and ``token_level_rewards``, for arrays the binding cannot view in
    place (misaligned, or strides that are no whole number of items, as a field of a packed
    structured array), and for outputs whose elements overlap (``expand``, ``as_strided``)
    or that share memory with an input or with each other.
    """
    caller = _Caller()
    rewards = caller.numpy(token_level_rewards, "token_level_rewards")
    mask = _mask(caller.numpy(response_mask, "response_mask"))
    episode = caller.numpy(terminal_rewards, "terminal_rewards")
    scores = caller.numpy(row_scores, "row_scores")
    step = caller.numpy(step_rewards, "step_rewards")
    tvals = caller.numpy(turn_values, "turn_values")
    entropy = caller.numpy(step_entropy, "step_entropy")
    vals = caller.numpy(values, "values")
    if index is None:
        raise TypeError("index: required (one group key per row)")
    idx = _keys(caller, index, "index")
    traj = None if traj_index is None else _keys(caller, traj_index, "traj_index")
    flags = caller.numpy(milestones, "milestones")
    if flags is not None and flags.dtype == object:
        flags = _flags(flags, "milestones")
    anchors = caller.numpy(anchor_obs, "anchor_obs")
    if anchors is not None and anchors.dtype.kind in "US":
        anchors = anchors.astype(object)
    parents = _tree_parents(caller.numpy(tree_parents, "tree_parents"))
    shape = _native.output_shape(index=idx, token_level_rewards=rewards, response_mask=mask)
    dtype = _float_dtype(rewards, episode, scores, step, vals, tvals, entropy)
    config_json = _config_json(config)
    adv, ret, adv_view, ret_view = _outputs(caller, out, shape, dtype, _has_returns(name, config_json))
    if shape[0] == 0 and all(a is None or a.shape[0] == 0 for a in (rewards, mask, idx)):
        # An empty batch: advantages of shape (0, L), as verl's estimators return.
        _native.validate(name, config_json)
        return _finish_pair(caller, adv, ret)
    _native.estimate(
        name,
        config_json,
        adv_view,
        ret_view,
        token_level_rewards=rewards,
        response_mask=mask,
        index=idx,
        traj_index=traj,
        terminal_rewards=episode,
        row_scores=scores,
        values=vals,
        old_log_probs=caller.numpy(old_log_probs, "old_log_probs"),
        sum_pi_squared=caller.numpy(sum_pi_squared, "sum_pi_squared"),
        rollout_is_weights=caller.numpy(rollout_is_weights, "rollout_is_weights"),
        reward_baselines=caller.numpy(reward_baselines, "reward_baselines"),
        milestones=flags,
        step_rewards=step,
        turn_values=tvals,
        anchor_obs=anchors,
        tree_parents=parents,
        step_entropy=entropy,
    )
    return _finish_pair(caller, adv, ret)


def _tree_parents(parents: Optional[np.ndarray]) -> Optional[np.ndarray]:
    """``tree_parents`` as a contiguous int64 array: integers only (bools and floats are
    refused, not read as row numbers)."""
    if parents is None:
        return None
    if parents.ndim != 1 or parents.dtype.kind not in "iu":
        raise TypeError(f"tree_parents: expected a 1-D integer array, got {parents.dtype} of shape {parents.shape}")
    if parents.dtype.kind == "u" and parents.size and int(parents.max()) > np.iinfo(np.int64).max:
        raise ValueError(f"tree_parents: entry {int(parents.max())} names no row")
    return np.ascontiguousarray(parents, dtype=np.int64)


def estimate_turns(
    name: str,
    token_level_rewards: Array,
    response_mask: Array,
    index: Array,
    *,
    config: Optional[Mapping[str, Any]] = None,
    out: Optional[Sequence[Array]] = None,
) -> Tuple[Array, Array]:
    """Per-turn advantages for verl's multi-turn layout (one dialogue per row).

    The convention reads what verl's GRPO reads, and needs nothing beyond what verl passes
    an estimator:

    - a row's **terminal reward** R(τ) is the sum of its ``token_level_rewards`` over the whole row,
      masked tokens included (verl's ``token_level_rewards.sum(-1)``): verl's reward managers
      put the score on the last attended token, which in a multi-turn rollout may be a tool or
      environment token outside ``response_mask``;
    - a **turn** is a maximal run of ``response_mask == 1`` (assistant tokens; tool and
      environment tokens between turns are masked), and each turn is one step;
    - a turn other than the last whose **last token** carries a reward > 0 is a
      **milestone** (a reward function marks a milestone by placing a positive increment
      there; the increment counts in the terminal reward too, as verl's sum counts it);
    - no reward is dropped: one between turns, after the last turn, mid-turn or on any
      masked token counts in the terminal reward. A row with no turn but a nonzero reward raises
      ``ValueError`` naming the row and token (no token could carry its credit), and so does
      NaN or ±inf anywhere in ``token_level_rewards``;
    - rows sharing an ``index`` key form a group; a row with no valid token (and no reward)
      gets zeros and joins no group.

    Example: ``response_mask`` row ``[1, 1, 1, 0, 0, 1, 1, 0, 0, 0]``, rewards
    ``[0, 0, 0.5, 0, 0, 0, 0, 0, 0, 1.0]``: turns are tokens 0-2 and 5-6, turn 0 is a
    milestone, and R = 1.5 (the 1.0 on masked token 9 included, as verl's GRPO scores it).

    ``name`` is ``beacon``, ``beacon_official`` or ``gigpo``, with keys or not. For GiGPO a
    turn's anchor state is its position in the dialogue (verl passes no observations) and its
    step reward the sum of the rewards that belong to it: every reward belongs to the turn it
    is in or follows (one before the first turn to the first turn); GiGPO discounts them into
    step returns (``step_decay``), so with γ = 1 the first turn's return is R. Masks may be
    bool, uint8, int32, int64 or float16/32/64 holding exactly 0 and 1. Each turn's advantage
    is written over its tokens; every other token gets 0. Returns ``(advantages, returns)``,
    one array twice (returns equal the advantages), shaped and typed like
    ``token_level_rewards``; ``out`` as in :func:`estimate` (a pair, possibly one array twice).
    """
    caller = _Caller()
    rewards = caller.numpy(token_level_rewards, "token_level_rewards")
    mask = _mask(caller.numpy(response_mask, "response_mask"))
    if rewards is None or mask is None:
        raise TypeError("token_level_rewards and response_mask are required")
    idx = _keys(caller, index, "index")
    shape = tuple(mask.shape)
    if len(shape) != 2:
        raise ValueError(f"response_mask: expected rows × L, got shape {shape}")
    adv, ret, adv_view, ret_view = _outputs(caller, out, shape, _float_dtype(rewards), False)  # type: ignore[arg-type]
    _native.estimate_turns(
        name,
        _config_json(config),
        adv_view,
        ret_view,
        token_level_rewards=rewards,
        response_mask=mask,
        index=idx,
    )
    return _finish_pair(caller, adv, ret)


# Last: the module reads `_config_json` from this package.
from .discovery import MilestoneDiscovery, discover_milestones  # noqa: E402
