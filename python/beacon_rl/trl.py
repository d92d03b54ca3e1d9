"""beacon-rl's estimators inside TRL's ``GRPOTrainer`` (TRL 1.16).

TRL computes GRPO advantages inline (one number per completion). :class:`BeaconGRPOTrainer`
is a ``GRPOTrainer`` whose advantages come from any estimator of the crate, by name, one
number per token, which TRL 1.16's loss accepts (it broadcasts a (B,) advantage and reads a
(B, T) one as is)::

    from beacon_rl.trl import BeaconGRPOTrainer

    trainer = BeaconGRPOTrainer(
        model=model, reward_funcs=reward_fn, args=GRPOConfig(...), train_dataset=dataset,
        rollout_func=rollout,          # multi-turn: returns env_mask and turn_rewards
        estimator="beacon",            # any name of beacon_rl.names()
        estimator_config={"segment_weight": 0.5},
    )

What the estimator reads (the package's multi-turn convention, :func:`beacon_rl.estimate_turns`)
    - **Turns**: maximal runs of the tokens TRL trains on, ``completion_mask × tool_mask``
      (``tool_mask`` is TRL's mask of model tokens: the ``env_mask`` a ``rollout_func``
      returns, or the tool-call loop's). A single-turn completion is one turn.
    - **Token rewards**: TRL's reward for the completion (the reward functions' weighted sum,
      the ``reward`` TRL logs) on the last token of the last turn, plus, when the rollout
      gives them, per-turn rewards on each turn's last token: a list per completion under
      the input key ``turn_rewards`` (a ``rollout_func`` returns it as an extra field, which
      TRL copies into the inputs). A positive turn reward on a turn other than the last marks a
      **milestone**; the terminal reward is what the convention takes from these token rewards.
    - **Groups**: the ``num_generations`` completions of a prompt.

    The BEACON family needs the milestones: without ``turn_rewards`` in the inputs it raises
    ``ValueError``; pass ``turn_rewards_key=None`` to state that the rollouts have none. A
    ``turn_rewards`` list whose length is not the completion's number of turns raises
    ``ValueError``. Outcome estimators (``grpo``, ``rloo``, ...) read each completion's
    summed reward.

    A completion every reward function returned None for (TRL's "unscorable") and a
    completion with no trained token (e.g. truncated, with ``mask_truncated_completions``) get
    zero advantages and stay out of their group's statistics, as TRL zeroes the former; their
    count is logged as ``beacon_rl/rows_left_out``.

The advantages TRL logs (``advantages`` in its completions table) are replaced by each
completion's mean advantage over its trained tokens.
"""

from __future__ import annotations

from typing import Any, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from . import estimate, estimate_turns, names, validate
from ._integration import is_step, needs_milestones

__all__ = ["BeaconGRPOTrainer", "token_rewards"]

try:
    from trl import GRPOTrainer
except ImportError as e:  # pragma: no cover - the module is TRL's
    raise ImportError("beacon_rl.trl needs TRL (pip install trl)") from e


def _turns(mask_row: np.ndarray) -> List[Tuple[int, int]]:
    """(start, end) of each maximal run of ones."""
    padded = np.concatenate(([0], (mask_row != 0).astype(np.int8), [0]))
    edges = np.flatnonzero(np.diff(padded))
    return [(int(s), int(e)) for s, e in zip(edges[::2], edges[1::2])]


def token_rewards(
    rewards: np.ndarray, mask: np.ndarray, turn_rewards: Optional[Sequence[Optional[Sequence[float]]]] = None
) -> Tuple[np.ndarray, np.ndarray]:
    """The token-level rewards the estimator reads, and which rows take part.

    ``rewards``: one float per completion (NaN: unscorable); ``mask``: rows × T, the trained
    tokens; ``turn_rewards``: per completion None or one float per turn. Returns
    ``(token_level_rewards, included)``: the completion's reward on the last token of its last
    turn plus each turn reward on its turn's last token, and False for rows left out
    (unscorable, or without a trained token), whose rewards are zero. Raises ``ValueError``
    for a turn-reward list of the wrong length or with a non-finite value.
    """
    rows, width = mask.shape
    out = np.zeros((rows, width), dtype=np.float64)
    included = np.ones(rows, dtype=bool)
    for i in range(rows):
        turns = _turns(mask[i])
        if not turns or not np.isfinite(rewards[i]):
            included[i] = False
            continue
        out[i, turns[-1][1] - 1] += rewards[i]
        per_turn = None if turn_rewards is None else turn_rewards[i]
        if per_turn is None:
            continue
        values = np.asarray(per_turn, dtype=np.float64).reshape(-1)
        if len(values) != len(turns):
            raise ValueError(
                f"turn_rewards: completion {i} has {len(turns)} turns (runs of trained tokens) but "
                f"{len(values)} turn rewards"
            )
        if not np.isfinite(values).all():
            raise ValueError(f"turn_rewards: completion {i} has a non-finite turn reward {values.tolist()}")
        for (_, end), v in zip(turns, values):
            out[i, end - 1] += v
    return out, included


class BeaconGRPOTrainer(GRPOTrainer):
    """TRL's ``GRPOTrainer`` with advantages from beacon-rl's estimator ``estimator``.

    Extra arguments (keywords): ``estimator`` (a name of :func:`beacon_rl.names`, default
    ``"beacon"``), ``estimator_config`` (the crate's parameters, serde field names; checked
    now, ``ValueError`` with the crate's message), ``turn_rewards_key`` (the input key holding
    per-turn rewards, default ``"turn_rewards"``; None: the rollouts carry none). Everything
    else is ``GRPOTrainer``'s. See the module docstring for what the estimator reads.
    """

    def __init__(
        self,
        *args: Any,
        estimator: str = "beacon",
        estimator_config: Optional[Mapping[str, Any]] = None,
        turn_rewards_key: Optional[str] = "turn_rewards",
        **kwargs: Any,
    ) -> None:
        if estimator not in names() and not is_step(estimator):
            raise ValueError(f"estimator: unknown name {estimator!r}; expected one of {', '.join(names())}")
        validate(estimator, estimator_config)
        self.beacon_estimator = estimator
        self.beacon_config = None if estimator_config is None else dict(estimator_config)
        self.beacon_turn_rewards_key = turn_rewards_key
        self._beacon_rewards: Any = None
        super().__init__(*args, **kwargs)

    def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> Any:
        # TRL gathers the rewards of every process here (rows × reward functions).
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._beacon_rewards = rewards_per_func
        return rewards_per_func

    def _generate_and_score_completions(self, inputs: Any) -> Any:
        self._beacon_rewards = None
        output = super()._generate_and_score_completions(inputs)
        if self._beacon_rewards is None:
            raise RuntimeError("BeaconGRPOTrainer: GRPOTrainer scored no rewards (its _calculate_rewards was not called)")
        local = output["completion_mask"]
        if "tool_mask" in output:
            local = local * output["tool_mask"]
        mask = self._gather_rows(local)
        per_func = self._beacon_rewards
        weights = self.reward_weights.to(per_func.device)
        rewards = (per_func * weights.unsqueeze(0)).nansum(dim=1)
        rewards[per_func.isnan().all(dim=1)] = float("nan")
        turn_rewards = self._turn_rewards(inputs)
        adv = self._advantages(rewards.double().cpu().numpy(), mask.cpu().numpy(), turn_rewards)
        rows = local.shape[0]
        start = self.accelerator.process_index * rows
        mine = adv[start : start + rows, : local.shape[1]]
        import torch

        output["advantages"] = torch.as_tensor(mine, dtype=torch.float32, device=local.device)
        self._beacon_log(adv, mask.cpu().numpy())
        return output

    def _gather_rows(self, local: Any) -> Any:
        """Every process's rows (padded to one width), in process order."""
        if self.accelerator.num_processes == 1:
            return local
        padded = self.accelerator.pad_across_processes(local, dim=1, pad_index=0)
        return self.accelerator.gather(padded)

    def _turn_rewards(self, inputs: Any) -> Optional[List[Any]]:
        key = self.beacon_turn_rewards_key
        if key is None:
            return None
        local = [inp.get(key) if isinstance(inp, Mapping) else None for inp in inputs]
        if self.accelerator.num_processes > 1:
            from accelerate.utils import gather_object

            local = gather_object(local)
        if all(v is None for v in local):
            if needs_milestones(self.beacon_estimator):
                raise ValueError(
                    f"estimator {self.beacon_estimator!r} reads milestones from per-turn rewards, and no input has "
                    f"{key!r}: return it from rollout_func (one list per completion, one reward per turn), or pass "
                    "turn_rewards_key=None if the rollouts have no milestones"
                )
            return None
        missing = [i for i, v in enumerate(local) if v is None]
        if missing:
            raise ValueError(f"{key}: completion {missing[0]} has none while others have them")
        return local

    def _advantages(self, rewards: np.ndarray, mask: np.ndarray, turn_rewards: Optional[List[Any]]) -> np.ndarray:
        """Rows × T advantages of the crate's estimator for every process's completions."""
        tokens, included = token_rewards(rewards, mask, turn_rewards)
        mode_generations = self.num_generations if self.model.training else self.num_generations_eval
        index = np.arange(len(rewards), dtype=np.int64) // int(mode_generations)
        # Rows left out: no token, no reward, and a group of their own (zeros).
        index = np.where(included, index, -1 - np.arange(len(rewards)))
        m = np.where(included[:, None], mask, 0).astype(np.uint8)
        self._beacon_left_out = int((~included).sum())
        if is_step(self.beacon_estimator):
            adv, _ = estimate_turns(self.beacon_estimator, tokens, m, index, config=self.beacon_config)
        else:
            adv, _ = estimate(self.beacon_estimator, tokens, m, index, config=self.beacon_config)
        return np.asarray(adv)

    def _beacon_log(self, adv: np.ndarray, mask: np.ndarray) -> None:
        mode = "train" if self.model.training else "eval"
        self._metrics[mode]["beacon_rl/rows_left_out"].append(float(self._beacon_left_out))
        counts = mask.sum(axis=1)
        means = np.where(counts > 0, (adv * (mask != 0)).sum(axis=1) / np.maximum(counts, 1), 0.0)
        logged = self._logs.get("advantages") if isinstance(self._logs, dict) else None
        if logged is not None and len(logged) >= len(means):
            # TRL appended its own advantages for these completions last: replace them.
            for _ in range(len(means)):
                logged.pop()
            logged.extend(means.tolist())
