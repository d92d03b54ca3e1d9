"""One training run: a policy trained with REINFORCE on one method's advantages, on a curriculum
of games, evaluated on held-out games as it learns.

Per iteration: ``games`` games of the current level, ``group`` episodes of each sampled from
the policy, one advantage per step from the package, then one Adam step on

    L(θ) = −(1/N) Σ_rows A_row · log π_θ(a_row | s_row) − β · (1/N) Σ_rows H(π_θ(· | s_row))

over the N step rows of the batch (β = ``entropy``, the same for every method). The level
rises every ``iterations / len(levels)`` iterations.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Dict, List, Sequence, Tuple

import numpy as np
import torch

from credit import Discovered, Method, advantages
from game import Episode, Games, Level
from policy import Chooser, Policy

# Game seeds of TextWorld Express's train fold (0..999): training draws from the first range,
# learning-rate selection evaluates on the second, the reported evaluation on the third. The
# test fold (20000..20999, objects never seen in training) is a second held-out set.
TRAIN_SEEDS = range(0, 400)
SELECT_SEEDS = range(400, 500)
HELD_OUT_SEEDS = range(500, 1000)
TEST_FOLD_SEEDS = range(20000, 21000)


@dataclass(frozen=True)
class RunConfig:
    levels: Tuple[Level, ...]
    iterations: int
    games: int  # games per iteration
    group: int  # episodes per game (G)
    learning_rate: float
    entropy: float
    eval_every: int
    eval_games: int  # per level and checkpoint
    final_eval_games: int  # per level, at the end
    dim: int = 64


@dataclass
class RunResult:
    method: str
    seed: int
    learning_rate: float
    curve: List[dict] = field(default_factory=list)  # per checkpoint
    train_success: List[float] = field(default_factory=list)  # per iteration
    final: Dict[str, dict] = field(default_factory=dict)  # eval set → level → success
    discovery: Dict[str, int] = field(default_factory=dict)  # discovered methods: Discovered.counts
    seconds: float = 0.0


def evaluate(
    games: Games, policy: Policy, levels: Sequence[Level], fold: str, seeds: Sequence[int], seed: int
) -> Dict[str, Dict[str, float]]:
    """Success rate per level on the games ``seeds``, greedy and sampled (one episode each)."""
    gen = torch.Generator().manual_seed(seed)
    out: Dict[str, Dict[str, float]] = {"greedy": {}, "sampled": {}}
    policy.eval()
    for mode in out:
        chooser = Chooser(policy, gen, greedy=mode == "greedy")
        for level in levels:
            wins = [games.play(level, fold, s, chooser).success for s in seeds]
            out[mode][level.name] = float(np.mean(wins))
    policy.train()
    return out


def _mean_over_levels(d: Dict[str, float]) -> float:
    return float(np.mean(list(d.values())))


def update(policy: Policy, opt: torch.optim.Optimizer, episodes: Sequence[Episode], adv: np.ndarray, beta: float) -> None:
    states = [s for e in episodes for s in e.state_ids]
    actions = [a for e in episodes for a in e.action_ids]
    chosen = torch.tensor([k for e in episodes for k in e.chosen])
    logits = policy.logits(states, actions)
    logp = torch.log_softmax(logits, dim=1)
    p = logp.exp()
    entropy = -(p * torch.where(torch.isfinite(logp), logp, torch.zeros_like(logp))).sum(1)
    taken = logp.gather(1, chosen[:, None]).squeeze(1)
    loss = -(torch.as_tensor(adv, dtype=torch.float32) * taken).mean() - beta * entropy.mean()
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
    opt.step()


def run(games: Games, method: Method, seed: int, cfg: RunConfig, eval_fold_seeds: Dict[str, Tuple[str, Sequence[int]]]) -> RunResult:
    """Trains one policy. ``eval_fold_seeds``: eval-set name → (fold, game seeds); the first is
    used for the learning curve."""
    start = time.time()
    torch.manual_seed(seed)
    policy = Policy(cfg.dim)
    opt = torch.optim.Adam(policy.parameters(), lr=cfg.learning_rate)
    # The training games depend on the seed only, so every method sees the same games.
    game_rng = random.Random(seed)
    gen = torch.Generator().manual_seed(10_000 + seed)
    sampler = Chooser(policy, gen, greedy=False)
    # One discovery memory for the whole run: milestones relearned as the episodes change.
    discovered = Discovered(method.discovery) if method.discovered else None
    res = RunResult(method.name, seed, cfg.learning_rate)
    curve_name, (curve_fold, curve_seeds) = next(iter(eval_fold_seeds.items()))
    curve_seeds = list(curve_seeds)[: cfg.eval_games]
    per_level = max(1, cfg.iterations // len(cfg.levels))
    for it in range(cfg.iterations + 1):
        if it % cfg.eval_every == 0 or it == cfg.iterations:
            ev = evaluate(games, policy, cfg.levels, curve_fold, curve_seeds, seed)
            res.curve.append({"iteration": it, **{m: _mean_over_levels(v) for m, v in ev.items()}, "by_level": ev})
        if it == cfg.iterations:
            break
        level = cfg.levels[min(it // per_level, len(cfg.levels) - 1)]
        episodes: List[Episode] = []
        for g in range(cfg.games):
            game_seed = game_rng.choice(TRAIN_SEEDS)
            for _ in range(cfg.group):
                ep = games.play(level, "train", game_seed, sampler, game=g)
                if ep.chosen:
                    episodes.append(ep)
        res.train_success.append(float(np.mean([e.success for e in episodes])))
        adv = advantages(method, episodes, discovered)
        update(policy, opt, episodes, adv, cfg.entropy)
    for name, (fold, seeds) in eval_fold_seeds.items():
        res.final[name] = evaluate(games, policy, cfg.levels, fold, list(seeds)[: cfg.final_eval_games], seed + 1)
    if discovered is not None:
        res.discovery = dict(discovered.counts)
    res.seconds = time.time() - start
    return res
