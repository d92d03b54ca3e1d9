"""The configuration grammar from Python: ``name`` or ``name:key=value,...``, the same keys as
the ``config`` mapping, and errors that list the valid names and keys."""

import numpy as np
import pytest

import beacon_rl

# Two groups of two 3-step trajectories on step rows (one token each, holding the terminal
# reward of its trajectory, as verl-agent's step rows do); the successes reach their milestone
# at step 1, the failures at step 0, so the segment term depends on the decay.
N = 12
R = np.repeat([1.0, 0.0, 1.0, 0.0], 3)
REWARDS = R.reshape(N, 1).copy()
MASK = np.ones((N, 1))
INDEX = np.array(["g0"] * 6 + ["g1"] * 6)
TRAJ = np.repeat(np.arange(4), 3)
FLAGS = np.array([False, True, False, True, False, False] * 2)


def run(name, **kw):
    adv, _ = beacon_rl.estimate(
        name, REWARDS, MASK, INDEX, traj_index=TRAJ, terminal_rewards=R, milestones=FLAGS, **kw
    )
    return np.asarray(adv)


def test_keys_in_the_name_equal_the_config_mapping():
    by_name = run("beacon:segment_decay=0.5,segment_weight=2")
    by_config = run("beacon", config={"segment_decay": 0.5, "segment_weight": 2})
    mixed = run("beacon:segment_decay=0.5", config={"segment_weight": 2.0})
    np.testing.assert_array_equal(by_name, by_config)
    np.testing.assert_array_equal(by_name, mixed)
    assert not np.array_equal(by_name, run("beacon"))
    # Defaults written out are the defaults.
    np.testing.assert_array_equal(run("beacon:segment_decay=0.95"), run("beacon"))


def test_flavour_presets_and_ablations_are_names_and_keys():
    np.testing.assert_array_equal(
        run("beacon_official"), run("beacon", config={"flavour": {"official": {"norm": "mean_norm"}}, "milestone_reward": 10})
    )
    # Without the segment term BEACON is its trajectory term: one value per trajectory.
    adv = run("beacon:ablation=no_segment_advantage").reshape(4, 3)
    assert (adv == adv[:, :1]).all()
    np.testing.assert_array_equal(
        run("beacon:ablation=milestone_dropout(p=0.3),seed=7"),
        run("beacon", config={"ablation": {"milestone_dropout": {"p": 0.3}}, "seed": 7}),
    )
    # A string value may use the text form of a variant, as Hydra passes it.
    np.testing.assert_array_equal(
        run("beacon", config={"ablation": "milestone_dropout(p=0.3)", "seed": 7}),
        run("beacon:ablation=milestone_dropout(p=0.3),seed=7"),
    )


def test_an_unknown_name_lists_the_names():
    with pytest.raises(ValueError) as e:
        run("beacon_ablation")
    msg = str(e.value)
    assert msg.startswith("unknown estimator beacon_ablation; known: gae, grpo, ")
    assert all(n in msg for n in beacon_rl.names())


def test_an_unknown_key_lists_the_keys_in_the_name_and_in_config():
    want = "estimator beacon has no key gamma; its keys: flavour, milestone_reward, segment_decay"
    for kw in ({"name": "beacon:gamma=0.9"}, {"name": "beacon", "config": {"gamma": 0.9}}):
        with pytest.raises(ValueError, match=want):
            run(kw.pop("name"), **kw)
    with pytest.raises(ValueError, match="estimator rloo has no key std_eps; it takes none"):
        beacon_rl.validate("rloo", {"std_eps": 1e-6})


def test_a_bad_value_names_its_key():
    with pytest.raises(ValueError, match="key segment_decay = high: expected a number"):
        run("beacon:segment_decay=high")
    with pytest.raises(ValueError, match="key segment_decay = high: expected a number"):
        run("beacon", config={"segment_decay": "high"})
    with pytest.raises(ValueError, match="segment_decay"):
        run("beacon:segment_decay=1.5")  # out of range: the builder names the key
    with pytest.raises(ValueError, match="is not KEY=VALUE"):
        run("beacon:segment_decay")


def test_a_key_in_the_name_and_in_config_is_refused():
    with pytest.raises(ValueError, match="segment_decay is given in the name"):
        run("beacon:segment_decay=0.5", config={"segment_decay": 0.6})
    with pytest.raises(ValueError, match="given twice"):
        run("beacon:segment_decay=0.5,segment_decay=0.6")


def test_validate_takes_the_grammar():
    beacon_rl.validate("grpo:norm=mean_norm")
    beacon_rl.validate("gigpo:grouping=similarity(threshold=0.9)")
    with pytest.raises(ValueError, match="expected one of mean_norm mean_std_norm"):
        beacon_rl.validate("grpo:norm=median")
