"""Success of a uniformly random policy on each level (100 train-fold games each), and how often
an episode ends before the action limit without success (TextWorld Common Sense has no losing
move: this prints 0): ``python random_policy.py``."""

import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from game import Games  # noqa: E402
from study import LEVELS  # noqa: E402

games = Games()
rng = random.Random(0)
for level in LEVELS:
    n = 100
    episodes = [games.play(level, "train", s, lambda state, actions: rng.randrange(len(actions))) for s in range(n)]
    success = sum(e.success for e in episodes) / n
    early = sum(not e.success and len(e.chosen) < level.horizon for e in episodes) / n
    print(f"{level.name}: random policy success {success:.2f}, ended early without success {early:.2f}")
games.close()
