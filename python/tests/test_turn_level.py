"""The turn-level estimators (``step_reinforce``, ``mt_grpo``, ``turn_gae``, ``tree_grpo``, ``empg``) through the
package: hand-computed multi-turn rows, the ``turn_values`` argument and the verl registration.

On verl's multi-turn rows a turn is a run of ``response_mask == 1`` and owns the tokens after
the previous turn's last token up to its own last token (the row's last turn also owns the
tail), so its reward is the sum of the token rewards it owns.
"""

import numpy as np
import pytest

import beacon_rl

# Row 0: turn 0 = tokens 0-1 (reward 0.5), turn 1 = tokens 3-4 (owns 2-5: reward 1.0 on the
# masked token 5). Row 1: one turn, token 0, which owns the tail's 0.2.
MASK = np.array([[1, 1, 0, 1, 1, 0], [1, 0, 0, 0, 0, 0]], dtype=np.int64)
REWARDS = np.array([[0, 0.5, 0, 0, 0, 1.0], [0, 0, 0, 0, 0, 0.2]])
UIDS = np.array([0, 1])


def spread(mask, per_turn):
    """Writes per_turn[r][k] over the tokens of turn k of row r (runs of mask == 1)."""
    out = np.zeros(mask.shape)
    for r, row in enumerate(mask):
        k, prev = -1, 0
        for t, m in enumerate(row):
            if m and not prev:
                k += 1
            if m:
                out[r, t] = per_turn[r][k]
            prev = m
    return out


# --- step_reinforce: ROLL's formulas --------------------------------------------------------


def roll_returns(turn_rewards, gamma):
    """G_k = r_k + γ G_{k+1} per trajectory (ROLL's compute_discounted_returns)."""
    out = []
    for rs in turn_rewards:
        g, gs = 0.0, []
        for r in reversed(rs):
            g = r + gamma * g
            gs.append(g)
        out.append(gs[::-1])
    return out


def test_step_reinforce_defaults_are_discounted_turn_returns():
    # ROLL's defaults: γ_s = 0.95, no mean, no σ: v_k = G_k.
    # Row 0: G_1 = 1.0, G_0 = 0.5 + 0.95 · 1.0 = 1.45. Row 1: G_0 = 0.2.
    adv, ret = beacon_rl.estimate("step_reinforce", REWARDS, MASK, UIDS)
    want = np.array([[1.45, 1.45, 0, 1.0, 1.0, 0], [0.2, 0, 0, 0, 0, 0]])
    np.testing.assert_allclose(adv, want, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(ret, adv)


def test_step_reinforce_batch_normalisation_follows_roll():
    config = {"step_discount": 0.5, "norm_mean": "batch", "norm_std": "batch"}
    adv, _ = beacon_rl.estimate("step_reinforce", REWARDS, MASK, UIDS, config=config)
    g = roll_returns([[0.5, 1.0], [0.2]], 0.5)  # [[1.0, 1.0], [0.2]]
    flat = np.array([v for row in g for v in row])
    mu, sigma = flat.mean(), flat.std(ddof=1)
    v = [[(x - mu) / (sigma + 1e-6) for x in row] for row in g]
    np.testing.assert_allclose(adv, spread(MASK, v), rtol=1e-12, atol=1e-12)


def test_step_reinforce_reads_the_token_rewards_not_their_row_sums():
    # Moving row 0's outcome from turn 1 to turn 0 keeps its row sum but changes the turns.
    moved = REWARDS.copy()
    moved[0, 5], moved[0, 1] = 0.0, 1.5
    a, _ = beacon_rl.estimate("step_reinforce", REWARDS, MASK, UIDS)
    b, _ = beacon_rl.estimate("step_reinforce", moved, MASK, UIDS)
    np.testing.assert_allclose(b[0], [1.5, 1.5, 0, 0, 0, 0], atol=1e-12)
    assert not np.allclose(a, b)


# --- mt_grpo: the authors' normalisation per turn index ---------------------------------------


def test_mt_grpo_hand_computed():
    # Group 0: rows 0 and 1 have two turns; group 1: rows 2 and 3 have one turn each.
    mask = np.array([[1, 0, 1, 0], [1, 0, 1, 0], [1, 1, 0, 0], [1, 1, 0, 0]])
    rewards = np.array([[0.5, 0, 0, 1.0], [0, 0, 0, 0], [0, 0, 0, 1.0], [0, 0, 0, 0]])
    uids = np.array(["a", "a", "b", "b"], dtype=object)
    adv, _ = beacon_rl.estimate("mt_grpo", rewards, mask, uids)
    eps = 1e-4
    # Outcomes 1 and 0: mean 0.5, unbiased σ = √0.5. Turn rewards 0.5 and 0: mean 0.25,
    # σ = √0.125. A single-turn trajectory gets the normalised combined reward (1 and 0).
    a_o = 0.5 / (np.sqrt(0.5) + eps)
    a_t = 0.25 / (np.sqrt(0.125) + eps)
    want = np.array(
        [
            [a_o + a_t, 0, a_o, 0],
            [-a_o - a_t, 0, -a_o, 0],
            [a_o, a_o, 0, 0],
            [-a_o, -a_o, 0, 0],
        ]
    )
    np.testing.assert_allclose(adv, want, rtol=1e-12, atol=1e-12)
    coef, _ = beacon_rl.estimate("mt_grpo", rewards, mask, uids, config={"turn_advantage_coef": 0.5})
    np.testing.assert_allclose(coef[0, 0], a_o + 0.5 * a_t, rtol=1e-12)


# --- turn_gae: GAE over turns ---------------------------------------------------------------


def test_turn_gae_on_multi_turn_rows_reads_values_at_each_turns_first_token():
    values = np.zeros((2, 6))
    values[0, 0], values[0, 3], values[1, 0] = 0.3, 0.6, 0.1
    adv, ret = beacon_rl.estimate("turn_gae", REWARDS, MASK, UIDS, values=values)
    # Row 0, γ = λ = 1: δ_1 = 1.0 − 0.6 = 0.4 = A_1; δ_0 = 0.5 + 0.6 − 0.3 = 0.8,
    # A_0 = 0.8 + 0.4 = 1.2; R = A + V: 1.5, 1.0. Row 1: A = 0.2 − 0.1, R = 0.2.
    np.testing.assert_allclose(adv, spread(MASK, [[1.2, 0.4], [0.1]]), atol=1e-12)
    np.testing.assert_allclose(ret, spread(MASK, [[1.5, 1.0], [0.2]]), atol=1e-12)
    adv, ret = beacon_rl.estimate("turn_gae", REWARDS, MASK, UIDS, values=values, config={"discount": 0.5, "lam": 0.5})
    # δ_0 = 0.5 + 0.5 · 0.6 − 0.3 = 0.5, A_0 = 0.5 + 0.25 · 0.4 = 0.6, R_0 = 0.9.
    np.testing.assert_allclose(adv, spread(MASK, [[0.6, 0.4], [0.1]]), atol=1e-12)
    np.testing.assert_allclose(ret, spread(MASK, [[0.9, 1.0], [0.2]]), atol=1e-12)


STEP_MASK = np.array([[1, 1, 0], [1, 0, 0]])


def step_gae(token_level_rewards=None, **kw):
    return beacon_rl.estimate(
        "turn_gae",
        token_level_rewards,
        STEP_MASK,
        np.array([0, 0]),
        traj_index=np.array([7, 7]),
        step_rewards=np.array([0.0, 1.0]),
        **kw,
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_turn_gae_on_step_rows_reads_turn_values(dtype):
    adv, ret = step_gae(turn_values=np.array([0.5, 0.25], dtype=dtype))
    # δ_1 = 1 − 0.25 = 0.75 = A_1; δ_0 = 0 + 0.25 − 0.5 = −0.25, A_0 = −0.25 + 0.75 = 0.5.
    np.testing.assert_allclose(adv, [[0.5, 0.5, 0], [0.75, 0, 0]], atol=1e-7)
    np.testing.assert_allclose(ret, [[1.0, 1.0, 0], [1.0, 0, 0]], atol=1e-7)


def test_turn_values_as_a_torch_tensor():
    torch = pytest.importorskip("torch")
    adv, _ = step_gae(turn_values=torch.tensor([0.5, 0.25], dtype=torch.float64))
    np.testing.assert_allclose(np.asarray(adv), [[0.5, 0.5, 0], [0.75, 0, 0]], atol=1e-12)


def test_step_rows_with_token_rewards_are_checked_not_dropped():
    tokens = np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    adv, _ = step_gae(token_level_rewards=tokens, turn_values=np.array([0.5, 0.25]))
    np.testing.assert_allclose(adv, [[0.5, 0.5, 0], [0.75, 0, 0]], atol=1e-12)
    # Row scores the token rewards disagree with are refused.
    with pytest.raises(ValueError, match="row_scores"):
        step_gae(token_level_rewards=tokens, row_scores=np.array([0.0, 2.0]), turn_values=np.array([0.5, 0.25]))


@pytest.mark.parametrize(
    "bad, error, match",
    [
        (np.array([0.5, 0.25, 0.1]), ValueError, "turn_values"),
        (np.array([0.5]), ValueError, "turn_values"),
        (np.array([0.5, np.nan]), ValueError, "turn_values"),
        (np.array([np.inf, 0.0]), ValueError, "turn_values"),
        (np.array([[0.5, 0.25]]), TypeError, "turn_values"),
        (np.array(["a", "b"]), TypeError, "turn_values"),
    ],
)
def test_bad_turn_values_are_refused(bad, error, match):
    with pytest.raises(error, match=match):
        step_gae(turn_values=bad)


def test_turn_values_without_step_rows_are_refused():
    with pytest.raises(ValueError, match="turn_values"):
        beacon_rl.estimate("turn_gae", REWARDS, MASK, UIDS, values=np.zeros((2, 6)), turn_values=np.zeros(2))


@pytest.mark.parametrize("name", ["step_reinforce", "mt_grpo", "grpo", "beacon_official"])
def test_turn_values_for_another_estimator_are_refused_not_ignored(name):
    with pytest.raises(ValueError, match="turn_values: read only by turn_gae"):
        beacon_rl.estimate(name, REWARDS, MASK, UIDS, turn_values=np.zeros(2))


def test_turn_gae_without_any_value_is_refused():
    with pytest.raises(ValueError, match="values"):
        beacon_rl.estimate("turn_gae", REWARDS, MASK, UIDS)


# --- verl's registry -------------------------------------------------------------------------


def _verl():
    torch = pytest.importorskip("torch")
    pytest.importorskip("verl")
    import beacon_rl.verl  # noqa: F401
    from verl import DataProto
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo import core_algos as ca
    from verl.trainer.ppo.ray_trainer import compute_advantage

    def run(name, rewards, mask, uid, config):
        data = DataProto.from_dict(
            tensors={"token_level_rewards": torch.as_tensor(rewards, dtype=torch.float32), "response_mask": torch.as_tensor(mask)},
            non_tensors={"uid": uid},
        )
        return compute_advantage(data, adv_estimator=name, config=config).batch["advantages"]

    return torch, AlgoConfig, ca, run


def test_verl_runs_registered_step_reinforce():
    torch, AlgoConfig, ca, run = _verl()
    uid = np.array(["q0", "q1"], dtype=object)
    got = run("step_reinforce", REWARDS, MASK, uid, AlgoConfig(adv_estimator="step_reinforce"))
    want = np.array([[1.45, 1.45, 0, 1.0, 1.0, 0], [0.2, 0, 0, 0, 0, 0]])
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-6)
    assert got.dtype == torch.float32
    # Parameters from algorithm.beacon_rl; algorithm.gamma is not read.
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"gamma": 0.1, "beacon_rl": {"step_discount": 0.5}})
    got = run("step_reinforce", REWARDS, MASK, uid, cfg)
    np.testing.assert_allclose(got.numpy()[0, :2], [1.0, 1.0], rtol=1e-6)


def test_verl_runs_registered_mt_grpo():
    torch, AlgoConfig, ca, run = _verl()
    mask = np.array([[1, 0, 1, 0], [1, 0, 1, 0]])
    rewards = np.array([[0.5, 0, 0, 1.0], [0, 0, 0, 0]])
    uid = np.array(["q", "q"], dtype=object)
    got = run("mt_grpo", rewards, mask, uid, AlgoConfig(adv_estimator="mt_grpo"))
    want, _ = beacon_rl.estimate("mt_grpo", rewards.astype(np.float32), mask, uid)
    np.testing.assert_array_equal(got.numpy(), want)
    a_o = 0.5 / (np.sqrt(0.5) + 1e-4)
    np.testing.assert_allclose(got.numpy()[0], [a_o + 0.25 / (np.sqrt(0.125) + 1e-4), 0, a_o, 0], rtol=1e-5)


def test_turn_gae_is_not_registered():
    _, _, ca, _ = _verl()
    import beacon_rl.verl as bv

    assert "turn_gae" not in ca.ADV_ESTIMATOR_REGISTRY
    assert "turn_gae" not in bv.registered_names()
    assert {"step_reinforce", "mt_grpo"} <= set(bv.registered_names())
    for name in ("step_reinforce", "mt_grpo"):
        assert ca.get_adv_estimator_fn(name).__module__ == "beacon_rl.verl"


def test_registered_step_reinforce_reads_verl_agents_trajectory_column():
    torch, AlgoConfig, ca, _ = _verl()
    # Two step rows of one trajectory: its turns are 0.5 then 1.0, so G = 1.45, 1.0; as two
    # trajectories each row is its own: 0.5, 1.0.
    rewards = torch.tensor([[0, 0.5, 0], [0, 0, 1.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    uid = np.array(["q", "q"], dtype=object)
    f = ca.get_adv_estimator_fn("step_reinforce")
    cfg = AlgoConfig(adv_estimator="step_reinforce")
    adv, _ = f(rewards, mask, index=uid, config=cfg, non_tensor_batch={"uid": uid, "traj_uid": np.array(["t", "t"], dtype=object)})
    np.testing.assert_allclose(adv.numpy(), [[1.45, 1.45, 0], [1.0, 0, 0]], rtol=1e-6)
    adv, _ = f(rewards, mask, index=uid, config=cfg)
    np.testing.assert_allclose(adv.numpy(), [[0.5, 0.5, 0], [1.0, 0, 0]], rtol=1e-6)


# --- tree_grpo: Tree-GRPO's prompt and tree groups -------------------------------------------

# One prompt, two trees: rows 0 and 1 (row 1 branched off row 0), row 2 alone. R = 1, 0, 1.
TREE_REWARDS = np.array([[0, 1.0], [0, 0], [1.0, 0]])
TREE_MASK = np.array([[1, 1], [1, 1], [1, 0]])
TREE_UIDS = np.array(["q", "q", "q"], dtype=object)


def tree_want():
    """The authors' `tree` by hand: z over the prompt plus z over the tree; a lone rollout's
    z is R / float32(1 + 1e-6)."""
    sp, st, eps = np.sqrt(1 / 3), np.sqrt(0.5), 1e-6
    lone = 1 / float(np.float32(1) + np.float32(eps))
    a = [(1 / 3) / (sp + eps) + 0.5 / (st + eps), -(2 / 3) / (sp + eps) - 0.5 / (st + eps), (1 / 3) / (sp + eps) + lone]
    return np.array([[a[0], a[0]], [a[1], a[1]], [a[2], 0]])


def test_tree_grpo_hand_computed():
    adv, ret = beacon_rl.estimate("tree_grpo", TREE_REWARDS, TREE_MASK, TREE_UIDS, tree_parents=np.array([-1, 0, -1]))
    np.testing.assert_allclose(adv, tree_want(), rtol=1e-12)
    assert ret is adv
    # The intra-tree variant alone: ±½/(√½ + ε) and the lone rollout's R.
    adv, _ = beacon_rl.estimate(
        "tree_grpo", TREE_REWARDS, TREE_MASK, TREE_UIDS, tree_parents=[-1, 0, -1], config={"variant": "intra"}
    )
    np.testing.assert_allclose(adv[:, 0], [0.5 / (np.sqrt(0.5) + 1e-6), -0.5 / (np.sqrt(0.5) + 1e-6), 1 / float(np.float32(1 + 1e-6))])


@pytest.mark.parametrize(
    "parents, match",
    [
        ([-1, 3, -1], "names no row"),
        ([-1, -2, -1], "names no row"),
        ([1, 0, -1], "cycle"),
        ([-1, 1, -1], "itself"),
        ([-1, 0], "tree_parents"),
    ],
)
def test_tree_grpo_refuses_bad_trees(parents, match):
    with pytest.raises(ValueError, match=match):
        beacon_rl.estimate("tree_grpo", TREE_REWARDS, TREE_MASK, TREE_UIDS, tree_parents=np.array(parents))


def test_tree_parents_must_be_integers_and_for_tree_grpo():
    with pytest.raises(TypeError, match="tree_parents"):
        beacon_rl.estimate("tree_grpo", TREE_REWARDS, TREE_MASK, TREE_UIDS, tree_parents=np.array([-1.0, 0.0, -1.0]))
    with pytest.raises(ValueError, match="tree_parents: read only by tree_grpo"):
        beacon_rl.estimate("mt_grpo", TREE_REWARDS, TREE_MASK, TREE_UIDS, tree_parents=np.array([-1, 0, -1]))
    with pytest.raises(ValueError, match="missing input: tree_parents|tree_parents"):
        beacon_rl.estimate("tree_grpo", TREE_REWARDS, TREE_MASK, TREE_UIDS)


def test_registered_tree_grpo_reads_tree_parents_or_the_authors_tree_uid():
    torch, AlgoConfig, ca, run = _verl()
    f = ca.get_adv_estimator_fn("tree_grpo")
    assert f.__module__ == "beacon_rl.verl"
    rewards, mask = torch.tensor(TREE_REWARDS, dtype=torch.float32), torch.tensor(TREE_MASK)
    cfg = AlgoConfig(adv_estimator="tree_grpo")
    want = tree_want()
    for ntb in ({"tree_parents": np.array([-1, 0, -1])}, {"tree_uid": np.array(["t0", "t0", "t1"], dtype=object)}):
        adv, _ = f(rewards, mask, index=TREE_UIDS, config=cfg, non_tensor_batch=ntb)
        np.testing.assert_allclose(adv.numpy(), want, rtol=1e-6)
    # A stock trainer passes no non_tensor_batch to it: a clear error, not a silent GRPO.
    with pytest.raises(ValueError, match="no 'tree_parents' or 'tree_uid' column"):
        run("tree_grpo", TREE_REWARDS, TREE_MASK, TREE_UIDS, cfg)


# --- empg: entropy-modulated policy gradients ------------------------------------------------

# Trajectories a (rows 0, 1; terminal reward 1) and b (rows 2, 3; reward 0) of one task.
EMPG_UIDS = np.array(["t"] * 4, dtype=object)
EMPG_TRAJ = np.array(["a", "a", "b", "b"], dtype=object)
EMPG_R = np.array([1.0, 1.0, 0.0, 0.0])
EMPG_H = np.array([1.0, 3.0, 2.0, 1.0])
# From the paper's Eqs. 10-12 by hand (the crate's unit test writes the steps out): GRPO's
# A = ±0.5 / (√(1/3) + 1e-6); H̃ = 0, 1, 0.5, 0; g = exp(-H̃) / mean(exp(-H̃)); with k_f = 2 the
# bonus ζ·exp(-2 H̃) of the next step (none for a last step); minus the batch mean.
EMPG_WANT = np.array([1.2192682, 0.4695463, -0.5652836, -1.1235309])


def test_empg_hand_computed_on_step_rows_and_tokens():
    adv, ret = beacon_rl.estimate(
        "empg:k_f=2", index=EMPG_UIDS, traj_index=EMPG_TRAJ, terminal_rewards=EMPG_R, step_entropy=EMPG_H
    )
    np.testing.assert_allclose(adv[:, 0], EMPG_WANT, rtol=0, atol=1e-6)
    assert ret is adv
    # The same through config=, and on token rows: each row's value on its generated tokens.
    mask = np.array([[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 1, 0]], dtype=np.int64)
    adv, _ = beacon_rl.estimate(
        "empg",
        None,
        mask,
        EMPG_UIDS,
        traj_index=EMPG_TRAJ,
        terminal_rewards=EMPG_R,
        step_entropy=EMPG_H.astype(np.float32),
        config={"k_f": 2},
    )
    np.testing.assert_allclose(adv, mask * EMPG_WANT[:, None], rtol=0, atol=1e-6)


def test_empg_needs_its_step_entropy_and_no_other_estimator_takes_it():
    kw = dict(index=EMPG_UIDS, traj_index=EMPG_TRAJ, terminal_rewards=EMPG_R)
    with pytest.raises(ValueError, match="step_entropy"):
        beacon_rl.estimate("empg", **kw)
    with pytest.raises(ValueError, match="step_entropy"):
        beacon_rl.estimate("empg", step_entropy=EMPG_H[:3], **kw)
    with pytest.raises(ValueError, match="step_entropy"):
        beacon_rl.estimate("empg", step_entropy=np.array([1.0, -0.5, 0.0, 1.0]), **kw)
    with pytest.raises(ValueError, match="step_entropy"):
        beacon_rl.estimate("empg", step_entropy=np.array([1.0, np.nan, 0.0, 1.0]), **kw)
    with pytest.raises(TypeError, match="step_entropy"):
        beacon_rl.estimate("empg", step_entropy=EMPG_H.reshape(2, 2), **kw)
    for name in ("grpo", "mt_grpo", "beacon_official"):
        with pytest.raises(ValueError, match="step_entropy: read only by empg"):
            beacon_rl.estimate(name, step_entropy=EMPG_H, **kw)
    with pytest.raises(ValueError, match="no key gamma"):
        beacon_rl.estimate("empg:gamma=1", step_entropy=EMPG_H, **kw)


def test_empg_is_not_registered_with_verl():
    # A stock verl 0.9.1 trainer drops the entropies before it computes the advantage.
    _, _, ca, _ = _verl()
    import beacon_rl.verl as bv

    assert "empg" not in ca.ADV_ESTIMATOR_REGISTRY
    assert "empg" not in bv.registered_names()
