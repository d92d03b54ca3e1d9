"""The study's columns and one hand-computed advantage (no game process needed):
``python -m pytest python/examples/textgame/test_credit.py``."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from credit import METHODS, Discovered, Method, advantages, available, columns  # noqa: E402
from game import Episode, strip_score, token_ids  # noqa: E402

BY_NAME = {m.name: m for m in METHODS}


def _episode(game, milestones, success, progress, actions=None):
    e = Episode(game=game, task=f"game {game}")
    e.states = [f"state {game} {i}" for i in range(len(milestones))]
    e.actions = actions or [f"act {i}" for i in range(len(milestones))]
    e.responses = [f"You {a}." for a in e.actions]
    e.chosen = [0] * len(milestones)
    e.milestones = list(milestones)
    e.success, e.progress = success, progress
    return e


# Game 0: a win in 3 steps (milestones on steps 1 and 2), a loss in 2 steps that reached half
# the score (milestone on step 0); game 1: a loss in 1 step.
EPISODES = [
    _episode(0, [False, True, True], True, 1.0),
    _episode(0, [True, False], False, 0.5),
    _episode(1, [False], False, 0.0),
]


def test_rows_are_steps_grouped_by_game():
    c = columns(BY_NAME["grpo"], EPISODES)
    assert c["index"].tolist() == [0, 0, 0, 0, 0, 1]
    assert c["traj_index"].tolist() == [0, 0, 0, 1, 1, 2]
    assert c["token_level_rewards"][:, 0].tolist() == [1, 1, 1, 0, 0, 0]
    assert c["response_mask"].all() and "milestones" not in c and "step_rewards" not in c


def test_progress_control_scores_rows_by_progress():
    c = columns(BY_NAME["grpo+progress"], EPISODES)
    assert c["token_level_rewards"][:, 0].tolist() == [1, 1, 1, 0.5, 0.5, 0]


def test_beacon_gets_the_score_increments_as_milestones():
    c = columns(BY_NAME["beacon"], EPISODES)
    assert c["milestones"].tolist() == [False, True, True, True, False, False]


def test_gigpo_step_rewards_sparse_and_with_milestones():
    sparse = columns(BY_NAME["gigpo"], EPISODES)
    assert sparse["step_rewards"].tolist() == [0, 0, 1, 0, 0, 0]
    assert sparse["anchor_obs"].tolist() == [s for e in EPISODES for s in e.states]
    dense = columns(BY_NAME["gigpo+milestones"], EPISODES)
    assert dense["step_rewards"].tolist() == [0, 1, 2, 1, 0, 0]


def test_grpo_by_hand():
    # Game 0's five rows score 1, 1, 1, 0, 0: mean 0.6, unbiased std sqrt(0.3); game 1's single
    # row gets 0 (verl: a singleton group has mean 0, std 1, and its score is 0).
    adv = advantages(BY_NAME["grpo"], EPISODES)
    s = np.sqrt(0.3) + 1e-6
    np.testing.assert_allclose(adv, [0.4 / s] * 3 + [-0.6 / s] * 2 + [0.0], rtol=1e-6)


def test_every_method_but_the_remedy_is_available():
    for m in METHODS:
        if m.name != "beacon_completion":
            assert available(m) is None, m.name
    assert available(Method("x", "beacon", config={"no_such_field": 1})) is not None


@pytest.mark.parametrize("method", [m for m in METHODS if available(m) is None], ids=lambda m: m.name)
def test_one_finite_advantage_per_step(method):
    adv = advantages(method, EPISODES, Discovered() if method.discovered else None)
    assert adv.shape == (6,) and np.isfinite(adv).all()


def test_token_ids_are_stable():
    assert token_ids("Take the Coat!") == token_ids("take the coat")
    assert len(token_ids("")) == 1


def test_strip_score_removes_only_score_sentences():
    assert strip_score("You take the coat. Your score has just gone up by one point.\n") == "You take the coat."
    assert strip_score("You put the coat in the wardrobe.") == "You put the coat in the wardrobe."
    assert strip_score("Points: 3! You win.") == "You win."
    assert strip_score("You take the pointy hat.") == "You take the pointy hat."


# Game 0: two wins that take and put away the coat (with a wasted step between), one loss that
# only takes it (its score milestone, as a made-up case, on another step); game 1: one loss. Discovery sees texts and successes, never the score.
WON = ["take coat", "open box", "put coat in wardrobe"]
DISCOVERY_EPISODES = [
    _episode(0, [True, False, True], True, 1.0, WON),
    _episode(0, [True, False, True], True, 1.0, ["take coat", "close box", "put coat in wardrobe"]),
    _episode(0, [False, True], False, 0.5, ["take coat", "sing"]),
    _episode(1, [False], False, 0.0, ["sing"]),
]


def test_discovered_milestones_replace_the_score():
    # Game 0: `take coat` and `put coat in wardrobe` are in both successes (support 2 of 2),
    # `open box` / `close box` in one (below ceil(0.6 * 2) = 2); the loss reached `take coat`.
    # Game 1 never succeeded, so novelty applies, but its `sing` reaches "You sing.", where
    # game 0's loss ended while the wins of its group went on: a dead end, not a milestone.
    d = Discovered()
    flags = d.flags(DISCOVERY_EPISODES)
    assert flags.tolist() == [True, False, True, True, False, True, True, False, False]
    # Game 0 had a success (8 steps: 5 flagged by discovery, 5 by the score, 4 by both); game 1
    # did not (1 step).
    assert d.counts == {"won_steps": 8, "won_discovered": 5, "won_score": 5, "won_both": 4,
                        "unwon_steps": 1, "unwon_discovered": 0, "unwon_score": 0, "unwon_both": 0}
    c = columns(BY_NAME["beacon+discovered"], DISCOVERY_EPISODES, flags)
    assert c["milestones"].tolist() == flags.tolist()


def test_discovery_settings_reach_the_run_memory():
    # A game without success: its first visit is flagged by novelty, and by nothing without it.
    m = BY_NAME["beacon+discovered_support"]
    unwon = [_episode(2, [False], False, 0.0, ["wave"])]
    assert Discovered().flags(unwon).tolist() == [True]
    assert Discovered(m.discovery).flags(unwon).tolist() == [False]


def test_discovery_reads_no_score():
    # The same texts and outcomes with other score milestones: the same discovered flags.
    other = [_episode(e.game, [not m for m in e.milestones], e.success, 0.0, e.actions) for e in DISCOVERY_EPISODES]
    assert Discovered().flags(other).tolist() == Discovered().flags(DISCOVERY_EPISODES).tolist()


def test_discovered_method_needs_its_run_memory():
    with pytest.raises(ValueError, match="Discovered"):
        advantages(BY_NAME["beacon+discovered"], EPISODES)


def test_adjacent_control_keeps_an_action_redone_two_steps_later():
    # Both wins take the coat, put it in the box, take it again (same response two steps apart)
    # and put it in the wardrobe. Under the default window of 3 steps `take coat` is a no-op;
    # with a window of 1 it is a milestone. Its repeat is never one (not a first occurrence).
    acts = ["take coat", "put coat in box", "take coat", "put coat in wardrobe"]
    wins = [_episode(3, [True, False, False, True], True, 1.0, acts) for _ in range(2)]
    assert Discovered().flags(wins).tolist() == [False, True, False, True] * 2
    adjacent = Discovered(BY_NAME["beacon+discovered_adjacent"].discovery)
    assert adjacent.flags(wins).tolist() == [True, True, False, True] * 2
