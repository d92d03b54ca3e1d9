"""A small policy over a text game's valid actions: bag-of-words encoders, one score per action.

    h = tanh(W_s · mean(E_s[state words]))        g_a = tanh(W_a · mean(E_a[words of action a]))
    logit(a | s) = v · tanh(U · [h, g_a, h ⊙ g_a])         π(· | s) = softmax over the valid actions

Words are hashed into ``game.VOCAB`` buckets, so an unseen word (a held-out game's new object)
still has an embedding, untrained. About 1.1 M parameters at the default width, nearly all in
the two embedding tables.
"""

from __future__ import annotations

from typing import List, Sequence

import torch
from torch import nn

from game import VOCAB


def _bags(seqs: Sequence[List[int]]) -> tuple:
    """Token ids and offsets for ``nn.EmbeddingBag``."""
    flat: List[int] = []
    offsets: List[int] = []
    for s in seqs:
        offsets.append(len(flat))
        flat.extend(s)
    return torch.tensor(flat, dtype=torch.long), torch.tensor(offsets, dtype=torch.long)


class Policy(nn.Module):
    def __init__(self, dim: int = 64) -> None:
        super().__init__()
        self.state_emb = nn.EmbeddingBag(VOCAB, dim, mode="mean")
        self.action_emb = nn.EmbeddingBag(VOCAB, dim, mode="mean")
        self.state_proj = nn.Linear(dim, dim)
        self.action_proj = nn.Linear(dim, dim)
        self.head = nn.Sequential(nn.Linear(3 * dim, dim), nn.Tanh(), nn.Linear(dim, 1))

    def logits(self, states: Sequence[List[int]], actions: Sequence[Sequence[List[int]]]) -> torch.Tensor:
        """Logits of every candidate action of each state, padded with -inf: states × max actions."""
        h = torch.tanh(self.state_proj(self.state_emb(*_bags(states))))
        counts = [len(a) for a in actions]
        g = torch.tanh(self.action_proj(self.action_emb(*_bags([x for a in actions for x in a]))))
        owner = torch.repeat_interleave(torch.arange(len(states)), torch.tensor(counts))
        hs = h[owner]
        scores = self.head(torch.cat([hs, g, hs * g], dim=1)).squeeze(1)
        width = max(counts)
        out = torch.full((len(states), width), float("-inf"))
        col = torch.cat([torch.arange(c) for c in counts])
        out[owner, col] = scores
        return out


class Chooser:
    """Picks actions for ``Games.play``: sampled from π (seeded) or greedy."""

    def __init__(self, policy: Policy, generator: torch.Generator, greedy: bool) -> None:
        self.policy, self.gen, self.greedy = policy, generator, greedy

    def __call__(self, state: List[int], actions: Sequence[List[int]]) -> int:
        with torch.no_grad():
            z = self.policy.logits([state], [actions])[0]
        if self.greedy:
            return int(torch.argmax(z))
        return int(torch.multinomial(torch.softmax(z, 0), 1, generator=self.gen))
