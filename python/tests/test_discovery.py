"""``beacon_rl.MilestoneDiscovery`` and ``discover_milestones``: hand-built batches whose flags
follow from the rules in docs/discovery.md, the memory across calls, the row layout, and bad
input (TypeError/ValueError naming the argument, the memory left as it was)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import beacon_rl


def rows(trajs):
    """Flattens ``[(reward, [(action, response), ...]), ...]`` (one group) into columns."""
    actions = [a for _, steps in trajs for a, _ in steps]
    responses = [r for _, steps in trajs for _, r in steps]
    traj = [j for j, (_, steps) in enumerate(trajs) for _ in steps]
    rewards = [float(rew) for rew, steps in trajs for _ in steps]
    return actions, responses, dict(index=[0] * len(traj), traj_index=traj, terminal_rewards=rewards)


def said(*actions):
    """Steps whose response names the action (every response distinct)."""
    return [(a, f"You {a}.") for a in actions]


# Five successes and one failure of one task. `finish` is in all five successes, `open door` in
# three, `take key` in two, every other action in one; no action repeats, so every step is a
# novel event and none is a no-op.
SUPPORT = [
    (1, said("take key", "open door", "finish")),
    (1, said("take key", "open door", "finish")),
    (1, said("wave", "open door", "finish")),
    (1, said("jump", "sing", "finish")),
    (1, said("dance", "hum", "finish")),
    (0, said("open door", "take key", "sit")),
]


def test_docstring_example():
    actions = ["look", "take key", "open door", "take key", "look", "look", "open door", "look", "sing"]
    responses = ["A room.", "Taken.", "You win.", "Taken.", "A room.", "A room.", "You win.", "A room.", "You sing."]
    flags = beacon_rl.discover_milestones(
        actions, responses, index=[0] * 9, traj_index=[0, 0, 0, 1, 1, 1, 1, 2, 2],
        terminal_rewards=[1, 1, 1, 1, 1, 1, 1, 0, 0])
    # `look` twice in a row with the same response: a no-op. Both successes took the key and
    # opened the door; the failure did neither.
    assert flags.dtype == bool
    assert flags.tolist() == [False, True, True, True, False, False, True, False, False]


def test_support_rule_counts_successes():
    # Default min_support 0.6 of 5 successes: an event needs ceil(3.0) = 3 of them. `open door`
    # (3) and `finish` (5) are milestones, `take key` (2) is not; the failure is flagged on the
    # milestone events it reached (`open door`).
    a, r, kw = rows(SUPPORT)
    flags = beacon_rl.discover_milestones(a, r, **kw).tolist()
    assert flags == [False, True, True] * 3 + [False, False, True] * 2 + [True, False, False]
    # min_support 0.4: ceil(2.0) = 2 successes suffice, and `take key` joins.
    flags = beacon_rl.discover_milestones(a, r, **kw, config={"min_support": 0.4}).tolist()
    assert flags == [True, True, True] * 2 + [False, True, True] + [False, False, True] * 2 + [True, True, False]


def test_repeated_action_is_not_a_new_event():
    # The second `take key` (another response, so no no-op) is not a first occurrence.
    trajs = [(1, [("take key", "Taken."), ("take key", "You have it."), ("open door", "Open.")])] * 2
    a, r, kw = rows(trajs)
    assert beacon_rl.discover_milestones(a, r, **kw).tolist() == [True, False, True] * 2


def test_memory_carries_over_between_calls():
    d = beacon_rl.MilestoneDiscovery({"novelty": False})
    win = dict(index=[0, 0], traj_index=[0, 0], terminal_rewards=[1, 1], tasks=["door"] * 2)
    assert d.discover(["take key", "open door"], ["Taken.", "Open."], **win).tolist() == [True, True]
    assert d.num_tasks == 1
    # A later batch of the same task fails and only opens the door: the memory still knows it.
    fail = dict(index=[7], traj_index=[3], terminal_rewards=[0], tasks=["door"])
    assert d.discover(["open door"], ["Open."], **fail).tolist() == [True]
    # A fresh memory (or another task) has no success to go by, and novelty is off.
    assert beacon_rl.discover_milestones(["open door"], ["Open."], **fail, config={"novelty": False}).tolist() == [False]
    assert d.discover(["open door"], ["Open."], **{**fail, "tasks": ["window"]}).tolist() == [False]
    d.clear()
    assert d.num_tasks == 0
    assert d.discover(["open door"], ["Open."], **fail).tolist() == [False]


def test_novelty_before_the_first_success():
    # No success: a first visit nobody undid is flagged (novelty, on by default).
    fail = dict(index=[0], traj_index=[0], terminal_rewards=[0], tasks=["window"])
    assert beacon_rl.discover_milestones(["open window"], ["Open."], **fail).tolist() == [True]


def test_a_cellar_nothing_can_be_done_in_is_no_milestone():
    # Before any success: a trapdoor into a cellar where the rollout tried two different actions
    # that changed nothing, and that no rollout left, is a dead end (a decoy), not a first
    # visit; the other rollout's key and door are. The same trapdoor with one action repeated
    # there is still a first visit (the state may be a room the budget cut short).
    trap = [("open trapdoor", "A cellar."), ("take key", "A cellar."), ("wander", "A cellar."),
            ("open door", "A cellar.")]
    walk = [("wander", "Room 0."), ("take key", "Key held."), ("open door", "Room 1."), ("wander", "Room 1.")]
    a, r, kw = rows([(0, trap), (0, walk)])
    flags = beacon_rl.discover_milestones(a, r, **kw, observations=["Room 0."] * 8).tolist()
    assert flags == [False] * 4 + [False, True, True, False]
    idle = [("open trapdoor", "A cellar.")] + [("wander", "A cellar.")] * 3
    a, r, kw = rows([(0, idle), (0, walk)])
    flags = beacon_rl.discover_milestones(a, r, **kw, observations=["Room 0."] * 8).tolist()
    assert flags[:4] == [True, False, False, False]


def test_a_cellar_that_answers_is_no_milestone_once_every_action_was_tried_in_it():
    # A cellar of two states (a key held or not) that the rollout moves between until its
    # budget ends, on a move: the three actions tried anywhere were tried in both states and
    # none led out, so it is a dead region, and the trapdoor into it no first visit.
    c0, c1 = "A cellar.", "A cellar, key held."
    trap = [("open trapdoor", c0), ("wander", c0), ("take key", c1), ("take key", c1), ("wander", c1),
            ("drop key", c0), ("drop key", c0), ("take key", c1)]
    walk = [("wander", "Room 0."), ("take key", "Key held."), ("open door", "Room 1.")] + [("wander", "Room 1.")] * 5
    a, r, kw = rows([(0, trap), (0, walk)])
    flags = beacon_rl.discover_milestones(a, r, **kw, observations=["Room 0."] * 16).tolist()
    assert flags == [False] * 8 + [False, True, True] + [False] * 5
    # With `wander` never tried while the key is held, the trapdoor is a first visit.
    trap[4] = ("take key", c1)
    a, r, kw = rows([(0, trap), (0, walk)])
    assert beacon_rl.discover_milestones(a, r, **kw, observations=["Room 0."] * 16).tolist()[0]


def test_first_observation_is_the_start_state():
    # Novelty flags a response that is a state the rollout had not been in: here the start
    # state s_0 (the first observation) already reads "A room.", so `wait` reaches nothing new.
    fail = dict(index=[0], traj_index=[0], terminal_rewards=[0])
    assert beacon_rl.discover_milestones(["wait"], ["A room."], **fail, observations=["A room."]).tolist() == [False]
    assert beacon_rl.discover_milestones(["wait"], ["A room."], **fail, observations=["A hall."]).tolist() == [True]
    assert beacon_rl.discover_milestones(["wait"], ["A room."], **fail).tolist() == [True]


def test_each_group_reads_its_own_task():
    d = beacon_rl.MilestoneDiscovery({"novelty": False})
    d.discover(["take key"], ["Taken."], index=[0], traj_index=[0], terminal_rewards=[1], tasks=["a"])
    # Two groups in one batch, both failing: only the one of task "a" has a memory to go by.
    got = d.discover(["take key", "take key"], ["Taken.", "Taken."], index=[0, 1], traj_index=[0, 1],
                     terminal_rewards=[0, 0], tasks=["b", "a"])
    assert got.tolist() == [False, True]


def test_tasks_default_to_the_group_key():
    d = beacon_rl.MilestoneDiscovery({"novelty": False})
    d.discover(["take key"], ["Taken."], index=["q1"], traj_index=[0], terminal_rewards=[1])
    assert d.discover(["take key"], ["Taken."], index=["q1"], traj_index=[0], terminal_rewards=[0]).tolist() == [True]
    assert d.discover(["take key"], ["Taken."], index=["q2"], traj_index=[0], terminal_rewards=[0]).tolist() == [False]


def test_config_round_trips_with_defaults():
    cfg = beacon_rl.MilestoneDiscovery({"min_support": 0.5}).config
    assert cfg["min_support"] == 0.5 and cfg["noop_window"] == 3 and cfg["novelty"] is True


@settings(max_examples=40, deadline=None)
@given(st.randoms(use_true_random=False))
def test_row_order_and_key_types_do_not_matter(rng):
    # Rows of trajectories interleaved, keys as strings or numpy ints: the same flag per step.
    a, r, kw = rows(SUPPORT)
    expected = beacon_rl.discover_milestones(a, r, **kw)
    perm = list(range(len(a)))
    rng.shuffle(perm)
    # A trajectory's rows stay in step order: sort each trajectory's positions.
    traj = kw["traj_index"]
    slots = {j: sorted(p for p in range(len(a)) if traj[perm[p]] == j) for j in set(traj)}
    order = [0] * len(a)
    for j, ps in slots.items():
        for p, src in zip(ps, [i for i in range(len(a)) if traj[i] == j]):
            order[p] = src
    got = beacon_rl.discover_milestones(
        [a[i] for i in order], [r[i] for i in order],
        index=np.array(["g"] * len(a), dtype=object),
        traj_index=np.array([traj[i] for i in order], dtype=np.int32),
        terminal_rewards=np.array([kw["terminal_rewards"][i] for i in order], dtype=np.float32))
    assert got.tolist() == [bool(expected[i]) for i in order]


def test_numpy_columns_are_accepted():
    # Texts as numpy str or object arrays, keys as str or uint8 arrays, outcomes as bools.
    got = beacon_rl.discover_milestones(
        np.array(["take key", "open door"]), np.array(["Taken.", "Open."], dtype=object),
        index=np.array(["q", "q"]), traj_index=np.array([0, 0], dtype=np.uint8),
        terminal_rewards=np.array([True, True]))
    assert got.tolist() == [True, True]


GOOD = dict(index=[0, 0], traj_index=[0, 0], terminal_rewards=[1.0, 1.0])


@pytest.mark.parametrize(
    "change, error, match",
    [
        (dict(actions="take key"), TypeError, "actions: expected one str per row"),
        (dict(actions=["take key", 3]), TypeError, "actions: row 1 is a int"),
        (dict(responses=None), TypeError, "responses"),
        (dict(actions=["take key"]), ValueError, "actions: expected one entry per row"),
        (dict(tasks=["a", "b"]), ValueError, "tasks: row 1"),
        (dict(tasks=["a"]), ValueError, "tasks: expected one entry per row"),
        (dict(observations=["s"]), ValueError, "observations"),
        (dict(index=[0, 0, 0]), ValueError, "actions: expected one entry per row \\(3\\)"),
        (dict(traj_index=[0]), ValueError, "traj"),
        (dict(index=[0.0, 0.0]), TypeError, "index: row 0"),
        (dict(index=np.zeros(2)), TypeError, "index: expected integer"),
        (dict(index=[None, None]), TypeError, "index: row 0"),
        (dict(index=[[1], [2]]), TypeError, "unhashable"),
        (dict(index=np.zeros((2, 1), dtype=np.int64)), ValueError, "1-D"),
        (dict(traj_index=[0, 1], index=[0, 1], terminal_rewards=[1.0, 0.0]), None, None),
        (dict(traj_index=[0, 0], index=[0, 1]), ValueError, "group|across"),
        (dict(terminal_rewards=[1.0, 0.0]), ValueError, "reward|terminal"),
        (dict(terminal_rewards=[math.nan, math.nan]), ValueError, "finite|NaN"),
        (dict(terminal_rewards=["1", "1"]), TypeError, "terminal_rewards"),
        (dict(terminal_rewards=[[1.0], [1.0]]), ValueError, "1-D"),
    ],
)
def test_bad_input_is_a_typed_error_and_leaves_the_memory(change, error, match):
    d = beacon_rl.MilestoneDiscovery()
    d.discover(["look"], ["A room."], index=[5], traj_index=[0], terminal_rewards=[1.0], tasks=["t"])
    before = (d.num_tasks, d.num_noops)
    args = dict(actions=["take key", "open door"], responses=["Taken.", "Open."], **GOOD)
    args.update(change)
    actions, responses = args.pop("actions"), args.pop("responses")
    if error is None:  # the control case: a valid variation runs
        assert d.discover(actions, responses, **args).shape == (2,)
        return
    with pytest.raises(error, match=match):
        d.discover(actions, responses, **args)
    assert (d.num_tasks, d.num_noops) == before


def test_empty_batch_is_a_value_error():
    with pytest.raises(ValueError):
        beacon_rl.discover_milestones([], [], index=np.zeros(0, dtype=np.int64), traj_index=[], terminal_rewards=[])


@pytest.mark.parametrize(
    "config, error, match",
    [
        ({"min_support": 0.0}, ValueError, "min_support"),
        ({"min_suport": 0.5}, ValueError, "unknown field"),
        ({"noop_window": 0}, ValueError, "noop_window"),
        ({"max_responses": 0}, ValueError, "max_responses"),
        ({"success_threshold": math.inf}, ValueError, "config"),
        ({"min_support": "high"}, ValueError, "config"),
        ({"max_tasks": -1}, ValueError, "config"),
        ([("min_support", 0.5)], TypeError, "mapping"),
    ],
)
def test_bad_config(config, error, match):
    with pytest.raises(error, match=match):
        beacon_rl.MilestoneDiscovery(config)


def test_native_class_stub_matches_the_compiled_class():
    import ast
    import inspect
    import pathlib

    from beacon_rl import _native

    tree = ast.parse((pathlib.Path(beacon_rl.__file__).parent / "_native.pyi").read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "MilestoneDiscovery"]
    stubs = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    compiled = {n for n in dir(_native.MilestoneDiscovery) if not n.startswith("_")}
    assert set(stubs) - {"__init__"} == compiled
    for name in ("discover", "clear", "num_learned", "config_json"):
        params = list(inspect.signature(getattr(_native.MilestoneDiscovery, name)).parameters.values())
        a = stubs[name].args
        assert [p.name for p in params] == [x.arg for x in a.args + a.kwonlyargs], name
        assert [p.kind == p.KEYWORD_ONLY for p in params] == [False] * len(a.args) + [True] * len(a.kwonlyargs), name
