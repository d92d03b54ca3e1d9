"""Type stubs of the compiled module (PyO3). Use the wrappers in ``beacon_rl``."""

from typing import Optional, Sequence, Tuple

import numpy as np
import numpy.typing as npt

def estimate(
    name: str,
    config_json: Optional[str],
    out_advantages: npt.NDArray[np.floating],
    out_returns: Optional[npt.NDArray[np.floating]],
    *,
    token_level_rewards: Optional[npt.NDArray[np.floating]] = None,
    response_mask: Optional[np.ndarray] = None,
    index: np.ndarray,
    traj_index: Optional[np.ndarray] = None,
    terminal_rewards: Optional[npt.NDArray[np.floating]] = None,
    row_scores: Optional[npt.NDArray[np.floating]] = None,
    values: Optional[npt.NDArray[np.floating]] = None,
    old_log_probs: Optional[npt.NDArray[np.floating]] = None,
    sum_pi_squared: Optional[npt.NDArray[np.floating]] = None,
    rollout_is_weights: Optional[npt.NDArray[np.floating]] = None,
    reward_baselines: Optional[npt.NDArray[np.floating]] = None,
    milestones: Optional[np.ndarray] = None,
    step_rewards: Optional[npt.NDArray[np.floating]] = None,
    turn_values: Optional[npt.NDArray[np.floating]] = None,
    anchor_obs: Optional[npt.NDArray[np.object_]] = None,
    tree_parents: Optional[npt.NDArray[np.int64]] = None,
    step_entropy: Optional[npt.NDArray[np.floating]] = None,
) -> None:
    """Computes advantages and returns of estimator ``name`` into the two output arrays
    (float32 or float64, allocated by the caller; ``out_returns`` may be ``None`` when
    ``has_returns(name)`` is false, and only the advantages are written). Inputs:
    float32/float64 values, bool/uint8/int64 masks read in place (bool read as its bytes:
    only 0 and 1) or int32/float32/float64 masks converted once into a kept byte buffer (every
    entry exactly 0 or 1, else ValueError naming row and token; ``beacon_rl`` passes float16 as
    float32), int64 or object keys (None and NaN refused), in any aligned layout. Outputs must have
    distinct elements and share no memory with an input or each other. Releases the GIL
    while computing. Raises TypeError for unsupported dtypes, ValueError with the crate's
    message otherwise."""

def estimate_turns(
    name: str,
    config_json: Optional[str],
    out_advantages: npt.NDArray[np.floating],
    out_returns: Optional[npt.NDArray[np.floating]],
    *,
    token_level_rewards: npt.NDArray[np.floating],
    response_mask: np.ndarray,
    index: np.ndarray,
) -> Tuple[int, int, int]:
    """verl's multi-turn convention (see ``beacon_rl.estimate_turns``: a row's outcome is its
    whole reward sum, masked tokens included; non-finite rewards and rewards on rows without a
    turn raise ValueError naming row and token), masks as for :func:`estimate`; returns
    ``(turns, milestones, empty_rows)``."""

def output_shape(
    *,
    index: np.ndarray,
    token_level_rewards: Optional[npt.NDArray[np.floating]] = None,
    response_mask: Optional[np.ndarray] = None,
) -> Tuple[int, int]:
    """The shape ``estimate`` writes: the mask's, else the rewards', else (rows, 1). The
    mask's dtype is checked, its entries are not read."""

def names() -> list[str]:
    """Every estimator name the crate knows: verl's ``adv_estimator`` strings plus ``beacon``,
    ``beacon_official``, ``gigpo`` and the turn-level estimators."""

def verl_names() -> list[str]:
    """The names that are verl's own estimators."""

def validate(name: str, config_json: Optional[str] = None) -> None:
    """Raises ValueError unless ``name`` with ``config_json`` builds."""

def has_returns(name: str, config_json: Optional[str] = None) -> bool:
    """True when ``name`` computes returns of its own (else they equal its advantages)."""


def set_num_threads(n: int) -> None:
    """Compute on ``n`` threads from the next call on (1, the default: the calling thread).
    Raises ValueError for 0 or more than 1024."""

def get_num_threads() -> int:
    """The number of threads the estimators compute on."""

class MilestoneDiscovery:
    """The crate's milestone discovery with its memory (use ``beacon_rl.MilestoneDiscovery``)."""

    def __init__(self, config_json: Optional[str] = None) -> None:
        """Empty memory; ``config_json``: ``DiscoveryConfig`` fields as a JSON object (unknown
        fields and out-of-range values raise ValueError)."""
    def discover(
        self,
        actions: Sequence[str],
        responses: Sequence[str],
        *,
        index: npt.NDArray[np.int64],
        traj_index: npt.NDArray[np.int64],
        terminal_rewards: npt.NDArray[np.float64],
        tasks: Sequence[str],
        observations: Optional[Sequence[str]] = None,
    ) -> npt.NDArray[np.bool_]:
        """One flag per row: this batch's milestones; the memory is updated. TypeError for a
        non-``str`` text, ValueError for mismatched lengths, an empty batch, non-finite
        rewards, inconsistent trajectories or a group with two task names."""
    def clear(self) -> None:
        """Forgets everything learned."""
    @property
    def num_tasks(self) -> int:
        """Tasks in memory."""
    def num_learned(self) -> Tuple[int, int]:
        """(no-op actions, feedback sentences) learned so far."""
    def config_json(self) -> str:
        """Every setting as a JSON object."""
