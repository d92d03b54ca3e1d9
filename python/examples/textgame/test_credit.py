"""The study's columns and one hand-computed advantage (no game process needed):
``python -m pytest python/examples/textgame/test_credit.py``."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from credit import METHODS, Method, advantages, available, columns  # noqa: E402
from game import Episode, token_ids  # noqa: E402

BY_NAME = {m.name: m for m in METHODS}


def _episode(game, milestones, success, progress):
    e = Episode(game=game)
    e.states = [f"state {game} {i}" for i in range(len(milestones))]
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
    adv = advantages(method, EPISODES)
    assert adv.shape == (6,) and np.isfinite(adv).all()


def test_token_ids_are_stable():
    assert token_ids("Take the Coat!") == token_ids("take the coat")
    assert len(token_ids("")) == 1
