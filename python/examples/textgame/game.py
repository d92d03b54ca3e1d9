"""TextWorld Common Sense (TextWorld Express's ``twc``) as episodes for a policy-gradient trainer.

The game: take the objects that are out of place and put each where it belongs (a dirty shirt
in the laundry basket, a coat in the wardrobe). Its score counts the objects taken (+1) and put
in the right place (+1); the episode succeeds when every object is put away. The score can
fall (taking a placed object out again), so a **milestone** is a step where the score reaches
a new high in the episode: a game of n objects has 2n milestones, the last one on the winning
step. Nothing about milestones is written here by hand: they are the game's own score
increments.

The episode also keeps each step's action and response text, for milestone discovery
(``beacon_rl.MilestoneDiscovery``), which must not read the game's score: ``strip_score``
removes any sentence that speaks of the score or points (TextWorld Common Sense's responses
carry none, "You take the coat.", so it is a guard that changes nothing here).

Difficulty grows with the number of objects and rooms (``Level``). Games are generated from a
seed; the fold (``train``/``dev``/``test``) selects TextWorld Express's seed range and, for
``twc``, its object set (the ``test`` fold's objects are never seen in ``train``).
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field
from typing import Callable, List, Sequence

# Actions that only print what the observation already shows. Dropping them shortens the action
# list for every method alike; nothing else is filtered.
_INFO_ACTIONS = ("look around", "inventory")

VOCAB = 1 << 13  # hashed word buckets
_WORD = re.compile(r"[a-z0-9]+")
# A sentence (up to its end mark) that mentions the score or points.
_SCORE_SENTENCE = re.compile(r"[^.!?\n]*\b(?:score|points?)\b[^.!?\n]*[.!?]*", re.IGNORECASE)


def strip_score(text: str) -> str:
    """``text`` without the sentences that mention the score or points, whitespace collapsed:
    what discovery may read of a response."""
    return " ".join(_SCORE_SENTENCE.sub(" ", text).split())


def token_ids(text: str) -> List[int]:
    """Words of ``text`` as hashed bucket ids (crc32: the same on every run and machine)."""
    words = _WORD.findall(text.lower()) or ["<empty>"]
    return [zlib.crc32(w.encode()) % VOCAB for w in words]


@dataclass(frozen=True)
class Level:
    """One difficulty: ``items`` objects to put away in a house of ``locations`` rooms, within
    ``horizon`` actions."""

    name: str
    locations: int
    items: int
    horizon: int

    @property
    def params(self) -> str:
        return (
            f"numLocations={self.locations},numItemsToPutAway={self.items},"
            "includeDoors=0,limitInventorySize=0"
        )


@dataclass
class Episode:
    """One played episode: per step, the state text and its candidate actions (as token ids),
    the chosen action, whether the step was a milestone (the score's new high), the action
    and response texts (score messages stripped); then the outcome. ``task`` names the game
    (fold, seed and level), the same for every episode of one game."""

    game: int
    task: str = ""
    states: List[str] = field(default_factory=list)
    state_ids: List[List[int]] = field(default_factory=list)
    action_ids: List[List[List[int]]] = field(default_factory=list)
    chosen: List[int] = field(default_factory=list)
    milestones: List[bool] = field(default_factory=list)
    actions: List[str] = field(default_factory=list)
    responses: List[str] = field(default_factory=list)
    success: bool = False
    progress: float = 0.0  # the highest normalised score reached, in [0, 1]


class Games:
    """One TextWorld Express process (a JVM) and a cache of token ids."""

    def __init__(self) -> None:
        from textworld_express import TextWorldExpressEnv

        self.env = TextWorldExpressEnv(envStepLimit=1000)
        self._ids: dict = {}

    def ids(self, text: str) -> List[int]:
        v = self._ids.get(text)
        if v is None:
            if len(self._ids) > 200_000:
                self._ids.clear()
            v = self._ids[text] = token_ids(text)
        return v

    def play(
        self,
        level: Level,
        fold: str,
        seed: int,
        choose: Callable[[List[int], Sequence[List[int]]], int],
        game: int = 0,
    ) -> Episode:
        """Plays game ``seed`` of ``fold`` at ``level``; ``choose(state_ids, action_ids)`` picks
        the index of the action to take."""
        _, info = self.env.reset(
            seed=seed, gameFold=fold, gameName="twc", gameParams=level.params, generateGoldPath=False
        )
        ep = Episode(game=game, task=f"twc {fold} {seed} {level.params}")
        best = 0.0
        for _ in range(level.horizon):
            actions = [a for a in info["validActions"] if a not in _INFO_ACTIONS]
            actions.sort()  # the game lists them in no fixed order
            if not actions:
                break
            state = info["look"] + " " + info["inventory"]
            s_ids = self.ids(state)
            a_ids = [self.ids(a) for a in actions]
            k = choose(s_ids, a_ids)
            response, _, done, info = self.env.step(actions[k])
            score = float(info["score"])
            ep.states.append(state)
            ep.state_ids.append(s_ids)
            ep.action_ids.append(a_ids)
            ep.chosen.append(k)
            ep.milestones.append(score > best + 1e-9)
            ep.actions.append(actions[k])
            ep.responses.append(strip_score(response))
            best = max(best, score)
            if done:
                break
        ep.success = bool(info["tasksuccess"])
        ep.progress = min(max(best, 0.0), 1.0)
        return ep

    def close(self) -> None:
        self.env.close()
        # The environment's finaliser would close it again at interpreter exit, when py4j's
        # logging is already gone, and print a traceback.
        self.env.close = lambda: None
