"""The package as a drop-in for verl 0.9.1's estimators: verl's keywords, masks, empty batches
and the multi-turn convention, checked against verl's own functions (no mock).

Kinds of test verl's own estimator suite runs: float masks, loop against vectorized variants at
verl's tolerance, multi-turn GAE, and the registry and ``AlgoConfig`` paths.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("verl")

import beacon_rl  # noqa: E402
import beacon_rl.verl as bv  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.trainer.config import AlgoConfig  # noqa: E402
from verl.trainer.ppo import core_algos as ca  # noqa: E402
from verl.trainer.ppo.ray_trainer import compute_advantage  # noqa: E402

# verl's own tests compare float32 results at these tolerances.
RTOL, ATOL = 1e-5, 1e-6

REGISTERED_OUTCOME = {
    "beacon_rl_grpo": ca.compute_grpo_outcome_advantage,
    "beacon_rl_grpo_vectorized": ca.compute_grpo_vectorized_outcome_advantage,
    "beacon_rl_grpo_passk": ca.compute_grpo_passk_outcome_advantage,
    "beacon_rl_rloo": ca.compute_rloo_outcome_advantage,
    "beacon_rl_rloo_vectorized": ca.compute_rloo_vectorized_outcome_advantage,
    "beacon_rl_opo": ca.compute_opo_outcome_advantage,
    "beacon_rl_gpg": ca.compute_gpg_outcome_advantage,
    "beacon_rl_reinforce_plus_plus": ca.compute_reinforce_plus_plus_outcome_advantage,
    "beacon_rl_reinforce_plus_plus_baseline": ca.compute_reinforce_plus_plus_baseline_outcome_advantage,
}
STEP = ("beacon", "beacon_official", "gigpo")
TURN = ("step_reinforce", "mt_grpo")


def fn(name):
    return ca.get_adv_estimator_fn(name)


def batch(seed=0, rows=12, L=9, groups=3, dtype=torch.float32):
    """verl's shapes: float rewards (outcome on the last valid token plus dense noise), prefix
    masks as float32 (as verl's tests build them with ``.float()``), uid strings."""
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, L + 1, (rows,), generator=g)
    mask = (torch.arange(L)[None, :] < lens[:, None]).float()
    rewards = torch.randn(rows, L, generator=g, dtype=dtype) * 0.1
    rewards[torch.arange(rows), lens - 1] += torch.randint(0, 2, (rows,), generator=g).to(dtype)
    uid = np.array([f"q{r % groups}" for r in range(rows)], dtype=object)
    return rewards, mask, uid


def verl_call(name, rewards, mask, uid, **kw):
    """verl's own function of that name, as its trainer's generic path calls it."""
    f = REGISTERED_OUTCOME[name]
    config = kw.pop("config", AlgoConfig(gamma=0.9))
    if name == "beacon_rl_reinforce_plus_plus":
        return f(token_level_rewards=rewards, response_mask=mask, config=config, index=uid, **kw)
    return f(token_level_rewards=rewards, response_mask=mask, index=uid, config=config, **kw)


# --- the multi-turn convention -------------------------------------------------------


def test_an_outcome_on_a_masked_trailing_token_is_counted():
    rewards = torch.tensor([[0, 0, 0, 1.0], [0, 0, 0, 0]])
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 0, 0]])
    uid = np.array([0, 0])
    want, _ = ca.compute_grpo_outcome_advantage(rewards, mask, uid)
    assert abs(float(want[0, 0]) - 0.7071) < 1e-3  # verl's GRPO sees the score
    got, _ = beacon_rl.estimate_turns("beacon", rewards, mask, uid)
    torch.testing.assert_close(got, want, rtol=RTOL, atol=1e-5)
    # The same through verl's trainer path, with the package registered as a plugin.
    data = DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask}, non_tensors={"uid": uid})
    adv = compute_advantage(data, adv_estimator="beacon", config=AlgoConfig(adv_estimator="beacon")).batch["advantages"]
    torch.testing.assert_close(adv, want, rtol=RTOL, atol=1e-5)


def worked_example():
    """The example of the documentation: one row, L = 10, two turns, a milestone increment of
    0.5 on turn 0's last token and the score 1.0 on a masked trailing token."""
    mask = torch.tensor([[1, 1, 1, 0, 0, 1, 1, 0, 0, 0]])
    rewards = torch.tensor([[0, 0, 0.5, 0, 0, 0, 0, 0, 0, 1.0]])
    return rewards, mask


def test_the_documented_worked_example():
    rewards, mask = worked_example()
    assert "0.5 + 1.0 = 1.5" in bv.__doc__ and "R = 1.5" in beacon_rl.estimate_turns.__doc__
    # A second row (no milestone, score 0) makes a group of two.
    r2 = torch.cat([rewards, torch.zeros(1, 10)])
    m2 = torch.cat([mask, mask])
    uid = np.array(["p", "p"], dtype=object)
    got, _ = beacon_rl.estimate_turns("beacon", r2, m2, uid)
    # Expected by hand through the step API: 2 turns per row, R = 1.5 and 0, turn 0 of row 0
    # is a milestone.
    steps, _ = beacon_rl.estimate(
        "beacon",
        index=np.array(["p"] * 4, dtype=object),
        traj_index=np.array([0, 0, 1, 1]),
        terminal_rewards=np.array([1.5, 1.5, 0.0, 0.0]),
        milestones=np.array([True, False, False, False]),
    )
    want = torch.zeros(2, 10)
    for k, (r, s, e) in enumerate([(0, 0, 3), (0, 5, 7), (1, 0, 3), (1, 5, 7)]):
        want[r, s:e] = float(steps[k, 0])
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    # GiGPO's step rewards: 0.5 for turn 0 and 1.0 for turn 1 (the masked score follows it).
    got, _ = beacon_rl.estimate_turns("gigpo", r2, m2, uid, config={"step_decay": 1.0})
    steps, _ = beacon_rl.estimate(
        "gigpo",
        index=np.array(["p"] * 4, dtype=object),
        traj_index=np.array([0, 0, 1, 1]),
        terminal_rewards=np.array([1.5, 1.5, 0.0, 0.0]),
        step_rewards=np.array([0.5, 1.0, 0.0, 0.0]),
        anchor_obs=np.array(["turn 0", "turn 1"] * 2, dtype=object),
        config={"step_decay": 1.0},
    )
    for k, (r, s, e) in enumerate([(0, 0, 3), (0, 5, 7), (1, 0, 3), (1, 5, 7)]):
        want[r, s:e] = float(steps[k, 0])
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("where", [1, 3, 4, 8])  # mid-turn, between turns, on the turn end, after the last turn
def test_a_reward_anywhere_counts_in_the_outcome(where):
    """The outcome is the row's reward sum wherever a reward sits: moving a reward between
    tokens of the row (not onto a turn end of a non-final turn, which marks a milestone)
    changes nothing, as in verl's GRPO."""
    mask = torch.tensor([[1, 1, 1, 0, 0, 1, 1, 0, 0, 0]] * 2)
    rewards = torch.zeros(2, 10)
    rewards[0, 9] = 1.0
    uid = np.array([0, 0])
    base, _ = beacon_rl.estimate_turns("beacon_official", rewards, mask, uid)
    moved = torch.zeros(2, 10)
    moved[0, where if where != 2 else 9] = 1.0
    got, _ = beacon_rl.estimate_turns("beacon_official", moved, mask, uid)
    torch.testing.assert_close(got, base, rtol=0, atol=0)
    assert (base[0, mask[0] == 1] > 0).all()


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("token", [0, 3, 9])  # in a turn, between turns, masked trailing
def test_a_non_finite_reward_anywhere_is_refused_with_row_and_token(value, token):
    rewards, mask = worked_example()
    rewards = torch.cat([torch.zeros(1, 10), rewards])
    mask = torch.cat([mask, mask])
    rewards[1, token] = value
    for name in STEP:
        with pytest.raises(ValueError, match=rf"token_level_rewards\[1, {token}\]"):
            beacon_rl.estimate_turns(name, rewards, mask, np.array([0, 0]))


def test_a_reward_on_a_row_without_turns_is_refused():
    rewards = torch.tensor([[0, 0, 1.0], [0, 0.0, 0.5]])
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]])
    with pytest.raises(ValueError, match=r"token_level_rewards\[1, 2\] = 0.5: row 1 has no token"):
        beacon_rl.estimate_turns("beacon", rewards, mask, np.array([0, 0]))
    # A row without turns and without rewards gets zeros, as before.
    rewards[1, 2] = 0.0
    adv, _ = beacon_rl.estimate_turns("beacon", rewards, mask, np.array([0, 0]))
    assert (adv[1] == 0).all()


def multi_turn(seed, rows=8, L=16):
    """Random multi-turn rows: two or three turns separated by masked tool tokens, trailing
    masked tokens, the score on the last attended token (often masked)."""
    g = np.random.default_rng(seed)
    mask = np.zeros((rows, L), dtype=np.int64)
    rewards = np.zeros((rows, L), dtype=np.float32)
    for r in range(rows):
        pos = 0
        for _ in range(g.integers(2, 4)):
            n = int(g.integers(1, 4))
            mask[r, pos : pos + n] = 1
            pos += n + int(g.integers(1, 3))
        last = min(L - 1, pos - 1)
        rewards[r, last] = float(g.integers(0, 2))
    return torch.from_numpy(rewards), torch.from_numpy(mask)


@pytest.mark.parametrize("seed", range(5))
def test_single_turn_beacon_equals_verl_grpo_on_multi_turn_outcomes(seed):
    """Without milestones the paper's BEACON reduces to its trajectory term, which is verl's
    GRPO on the row sums: so on rows whose only reward is the score (often on a masked
    trailing token), BEACON's advantages on the turns equal verl's GRPO there."""
    rewards, mask = multi_turn(seed)
    uid = np.array([f"p{r // 4}" for r in range(8)], dtype=object)
    want, _ = ca.compute_grpo_outcome_advantage(rewards, mask.float(), uid)
    got, _ = beacon_rl.estimate_turns("beacon", rewards, mask, uid)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


# --- verl's keywords ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,kw",
    [
        ("beacon_rl_grpo", {"norm_adv_by_std_in_grpo": False}),
        ("beacon_rl_grpo", {"epsilon": 0.25}),
        ("beacon_rl_grpo_vectorized", {"norm_adv_by_std_in_grpo": False, "epsilon": 0.5}),
        ("beacon_rl_gpg", {"f_norm": 2.5}),
        ("beacon_rl_gpg", {"alpha": 7.0, "epsilon": 3.0}),  # unused by verl
        ("beacon_rl_rloo", {"epsilon": 0.5}),  # unused by verl
        ("beacon_rl_grpo_passk", {"config": AlgoConfig(norm_adv_by_std_in_grpo=False)}),
        ("beacon_rl_grpo_passk", {"norm_adv_by_std_in_grpo": False}),  # verl reads config instead
        ("beacon_rl_reinforce_plus_plus", {"config": AlgoConfig(gamma=0.5)}),
    ],
)
def test_verl_keywords_have_verls_meaning(name, kw):
    rewards, mask, uid = batch(seed=3)
    want = verl_call(name, rewards.clone(), mask, uid, **dict(kw))
    kw = dict(kw)
    config = kw.pop("config", AlgoConfig(gamma=0.9))
    if name == "beacon_rl_reinforce_plus_plus":
        got = fn(name)(token_level_rewards=rewards, response_mask=mask, config=config, index=uid, **kw)
    else:
        got = fn(name)(token_level_rewards=rewards, response_mask=mask, index=uid, config=config, **kw)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", sorted(REGISTERED_OUTCOME) + list(STEP))
def test_unknown_keywords_are_refused_by_name(name):
    rewards, mask, uid = batch()
    with pytest.raises(TypeError, match="bogus_option"):
        fn(name)(token_level_rewards=rewards, response_mask=mask, index=uid, config=AlgoConfig(gamma=1.0), bogus_option=1)


def test_signatures_are_verls():
    import inspect

    for name, verl_fn in REGISTERED_OUTCOME.items():
        ours = list(inspect.signature(fn(name)).parameters)
        theirs = list(inspect.signature(verl_fn).parameters)
        assert ours == theirs, name


# --- config of grpo_vectorized -----------------------------------------------------------


def run_trainer(name, rewards, mask, uid, config):
    data = DataProto.from_dict(tensors={"token_level_rewards": rewards.clone(), "response_mask": mask.clone()}, non_tensors={"uid": uid})
    return compute_advantage(data, adv_estimator=name, config=config).batch["advantages"]


def test_grpo_vectorized_ignores_config_like_verl_unless_asked():
    rewards, mask, uid = batch(seed=5)
    config = AlgoConfig(adv_estimator="x", norm_adv_by_std_in_grpo=False)
    want = run_trainer("grpo_vectorized", rewards, mask, uid, config)
    got = run_trainer("beacon_rl_grpo_vectorized", rewards, mask, uid, config)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    # The deviation is explicit: algorithm.beacon_rl.norm.
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"norm_adv_by_std_in_grpo": True, "gamma": 1.0, "beacon_rl": {"norm": "mean_norm"}})
    got = run_trainer("beacon_rl_grpo_vectorized", rewards, mask, uid, cfg)
    want = ca.compute_grpo_vectorized_outcome_advantage(rewards, mask, uid, norm_adv_by_std_in_grpo=False)[0]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_grpo_follows_the_trainer_which_passes_the_flag_to_grpo():
    rewards, mask, uid = batch(seed=6)
    for flag in (True, False):
        config = AlgoConfig(adv_estimator="x", norm_adv_by_std_in_grpo=flag)
        want = compute_advantage(
            DataProto.from_dict(tensors={"token_level_rewards": rewards.clone(), "response_mask": mask.clone()}, non_tensors={"uid": uid}),
            adv_estimator="grpo",
            norm_adv_by_std_in_grpo=flag,
            config=config,
        ).batch["advantages"]
        got = run_trainer("beacon_rl_grpo", rewards, mask, uid, config)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


# --- gigpo's gamma -----------------------------------------------------------------------


def test_gigpo_reads_algorithm_gamma():
    rewards, mask = multi_turn(7)
    rewards[:, 0] += 0.25  # a step reward on the first turn of every row
    uid = np.array(["a"] * 4 + ["b"] * 4, dtype=object)
    for gamma in (1.0, 0.5):
        got = run_trainer("gigpo", rewards, mask, uid, AlgoConfig(adv_estimator="gigpo", gamma=gamma))
        want, _ = beacon_rl.estimate_turns("gigpo", rewards, mask, uid, config={"step_decay": gamma})
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    a = run_trainer("gigpo", rewards, mask, uid, AlgoConfig(adv_estimator="gigpo", gamma=1.0))
    b = run_trainer("gigpo", rewards, mask, uid, AlgoConfig(adv_estimator="gigpo", gamma=0.5))
    assert (a - b).abs().max() > 1e-3


# --- names a stock trainer cannot feed ---------------------------------------------------


def test_names_a_stock_trainer_cannot_feed_are_not_registered():
    for name in ("beacon_rl_remax", "beacon_rl_gdpo", "beacon_rl_gae", "beacon_rl_optimal_token_baseline", "turn_gae"):
        assert name not in ca.ADV_ESTIMATOR_REGISTRY, name
    # tree_grpo is registered for a verl that forwards non_tensor_batch (see test_turn_level).
    assert set(bv.registered_names()) == set(REGISTERED_OUTCOME) | set(STEP) | set(TURN) | {"tree_grpo"}
    for name in bv.registered_names():
        assert ca.get_adv_estimator_fn(name).__module__ == "beacon_rl.verl"


# --- empty batches -----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(REGISTERED_OUTCOME) + list(STEP) + list(TURN))
def test_an_empty_batch_gives_shape_0_by_L(name):
    rewards, mask, uid = torch.zeros(0, 5), torch.zeros(0, 5), np.array([], dtype=object)
    adv, ret = fn(name)(token_level_rewards=rewards, response_mask=mask, index=uid, config=AlgoConfig(gamma=1.0))
    assert adv.shape == (0, 5) and ret.shape == (0, 5)
    if name in REGISTERED_OUTCOME:
        if name.startswith("beacon_rl_reinforce_plus_plus"):
            # verl's batch whitening refuses an empty mask; the crate returns (0, L) for every
            # name alike.
            with pytest.raises(ValueError, match="At least one element in the mask"):
                verl_call(name, rewards, mask, uid)
        else:
            assert verl_call(name, rewards, mask, uid)[0].shape == adv.shape


def test_estimate_returns_empty_batches_for_every_name():
    for name in beacon_rl.names():
        kw = {"values": np.zeros((0, 4))} if name == "gae" else {}
        if name == "remax":
            kw = {"reward_baselines": np.zeros(0)}
        adv, _ = beacon_rl.estimate(name, np.zeros((0, 4)), np.zeros((0, 4), dtype=np.int64), np.zeros(0, dtype=np.int64), **kw)
        assert adv.shape == (0, 4), name


# --- masks as verl passes them -----------------------------------------------------------

MASK_DTYPES = [torch.bool, torch.uint8, torch.int32, torch.int64, torch.float16, torch.float32, torch.float64]


@pytest.mark.parametrize("dtype", MASK_DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(REGISTERED_OUTCOME))
def test_masks_of_every_dtype_verl_takes(name, dtype):
    rewards, mask, uid = batch(seed=11)
    want = verl_call(name, rewards.clone(), mask, uid)
    got = fn(name)(token_level_rewards=rewards, response_mask=mask.to(dtype), index=uid, config=AlgoConfig(gamma=0.9))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", MASK_DTYPES, ids=str)
def test_masks_of_every_dtype_in_the_turn_convention(dtype):
    rewards, mask = multi_turn(2)
    uid = np.array([f"p{r // 4}" for r in range(8)], dtype=object)
    want, _ = beacon_rl.estimate_turns("beacon_official", rewards, mask, uid)
    got, _ = beacon_rl.estimate_turns("beacon_official", rewards, mask.to(dtype), uid)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [np.int32, np.float16, np.float32, np.float64])
@pytest.mark.parametrize("value", [0.5, 2, -1, float("nan")])
def test_a_mask_value_other_than_0_or_1_names_row_and_token(dtype, value):
    if np.issubdtype(dtype, np.integer) and (value != value or value != int(value)):
        pytest.skip("not an integer")
    rewards = np.zeros((3, 4), dtype=np.float32)
    mask = np.ones((3, 4), dtype=dtype)
    mask[2, 1] = value
    for call in (
        lambda: beacon_rl.estimate("grpo", rewards, mask, np.array([0, 0, 1])),
        lambda: beacon_rl.estimate_turns("beacon", rewards, mask, np.array([0, 0, 1])),
    ):
        with pytest.raises(ValueError, match=r"response_mask\[2, 1\]"):
            call()


def test_masks_the_crate_reads_directly_are_not_converted():
    """bool, uint8 and int64 masks reach the crate as they are: an invalid entry is reported by
    the crate's own reader of integer masks; an int32 mask goes through the binding's
    conversion, which reports it in its own words."""
    rewards = np.zeros((2, 3), dtype=np.float32)
    for dtype in (np.int64, np.uint8):
        mask = np.array([[1, 2, 0], [1, 1, 1]], dtype=dtype)
        with pytest.raises(ValueError, match=r"response_mask\[0, 1\] = 2: an integer mask holds only 0 and 1"):
            beacon_rl.estimate("grpo", rewards, mask, np.array([0, 0]))
    mask = np.array([[1, 2, 0], [1, 1, 1]], dtype=np.int32)
    with pytest.raises(ValueError, match=r"response_mask\[0, 1\] = 2: a mask holds only 0 and 1"):
        beacon_rl.estimate("grpo", rewards, mask, np.array([0, 0]))


def test_loop_and_vectorized_variants_agree_at_verls_tolerance():
    rewards, mask, uid = batch(seed=21, rows=32, L=17, groups=5)
    for a, b in (("beacon_rl_grpo", "beacon_rl_grpo_vectorized"), ("beacon_rl_rloo", "beacon_rl_rloo_vectorized")):
        x = fn(a)(rewards, mask, uid, config=AlgoConfig())[0]
        y = fn(b)(rewards, mask, uid, config=AlgoConfig())[0]
        torch.testing.assert_close(x, y, rtol=RTOL, atol=ATOL)


def test_multi_turn_gae_equals_verls():
    """GAE on multi-turn rows (observation tokens masked inside the row), float32 masks: verl
    skips values and TD errors on masked tokens; so does the crate."""
    rewards, mask = multi_turn(4, rows=6, L=14)
    g = torch.Generator().manual_seed(4)
    values = torch.randn(6, 14, generator=g)
    want = ca.compute_gae_advantage_return(rewards, values, mask.float(), gamma=0.9, lam=0.8)
    got = beacon_rl.estimate(
        "gae", rewards, mask.float(), np.arange(6), values=values, config={"discount": 0.9, "gae_lambda": 0.8}
    )
    for g_, w in zip(got, want):
        torch.testing.assert_close(g_, w, rtol=1e-4, atol=1e-5)


def test_the_registry_and_algoconfig_paths():
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass

    rewards, mask, uid = batch(seed=8)
    for name in list(REGISTERED_OUTCOME) + list(STEP):
        cfg = omega_conf_to_dataclass(OmegaConf.create({"_target_": "verl.trainer.config.AlgoConfig", "adv_estimator": name, "gamma": 0.9}))
        assert callable(ca.get_adv_estimator_fn(cfg.adv_estimator))
        out = run_trainer(name, rewards, mask, uid, cfg)
        assert out.shape == rewards.shape and torch.isfinite(out).all(), name
        if name in REGISTERED_OUTCOME:
            want = verl_call(name, rewards.clone(), mask, uid, config=cfg)[0]
            torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-5)


# --- meta-device tensors -----------------------------------------------------------------


@pytest.mark.parametrize("arg", ["token_level_rewards", "response_mask"])
def test_a_meta_tensor_is_refused_by_name(arg):
    rewards, mask, uid = batch()
    kw = {"token_level_rewards": rewards, "response_mask": mask}
    kw[arg] = kw[arg].to("meta")
    with pytest.raises(TypeError, match=rf"{arg}: a meta-device tensor"):
        fn("beacon_rl_grpo")(index=uid, **kw)
    with pytest.raises(TypeError, match=rf"{arg}: a meta-device tensor"):
        beacon_rl.estimate_turns("beacon", index=uid, **kw)


# --- verl-agent's columns when verl passes non_tensor_batch ---------------------------------


def step_batch():
    """verl-agent's layout: one group of two 2-step trajectories (a success, a failure)."""
    mask = torch.ones(4, 3)
    rewards = torch.zeros(4, 3)
    rewards[:, -1] = torch.tensor([1.0, 1.0, 0.0, 0.0])
    ntb = {
        "uid": np.array(["g"] * 4, dtype=object),
        "traj_uid": np.array(["a", "a", "b", "b"], dtype=object),
        "milestone": np.array([True, False, False, False]),
        "anchor_obs": np.array(["s0", "s1"] * 2, dtype=object),
        "rewards": np.array([0.0, 1.0, 0.0, 0.0]),
    }
    return rewards, mask, ntb


@pytest.mark.parametrize("name", ["beacon", "beacon_official", "gigpo"])
def test_step_estimators_read_columns_from_non_tensor_batch(name):
    rewards, mask, ntb = step_batch()
    kw = {"milestones": ntb["milestone"]} if name != "gigpo" else {"anchor_obs": ntb["anchor_obs"], "step_rewards": ntb["rewards"]}
    want, _ = beacon_rl.estimate(
        name, rewards, mask, ntb["uid"], traj_index=ntb["traj_uid"], terminal_rewards=np.array([1.0, 1.0, 0.0, 0.0]), **kw
    )
    got, _ = fn(name)(rewards, mask, index=ntb["uid"], config=AlgoConfig(gamma=0.95), non_tensor_batch=ntb, batch=None)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    # Without the trajectory column: one dialogue per row, the turn convention.
    ntb2 = {k: v for k, v in ntb.items() if k != "traj_uid"}
    got, _ = fn(name)(rewards, mask, index=ntb["uid"], config=AlgoConfig(gamma=0.95), non_tensor_batch=ntb2)
    want, _ = beacon_rl.estimate_turns(name, rewards, mask, ntb["uid"], config={"step_decay": 0.95} if name == "gigpo" else None)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_column_names_come_from_algorithm_beacon_rl():
    from omegaconf import OmegaConf

    rewards, mask, ntb = step_batch()
    ntb["done_subgoal"] = ntb.pop("milestone")
    cfg = OmegaConf.create({"gamma": 1.0, "beacon_rl": {"milestone_key": "done_subgoal"}})
    got, _ = fn("beacon_official")(rewards, mask, index=ntb["uid"], config=cfg, non_tensor_batch=ntb)
    want, _ = beacon_rl.estimate(
        "beacon_official", rewards, mask, ntb["uid"], traj_index=ntb["traj_uid"], milestones=ntb["done_subgoal"]
    )
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    with pytest.raises(ValueError, match="no milestone column 'milestone'"):
        fn("beacon_official")(rewards, mask, index=ntb["uid"], config=AlgoConfig(), non_tensor_batch=ntb)


def test_long_rows_attribute_every_reward_to_its_turn():
    """Rows longer than the binding's 64-token scan blocks, contiguous and column-major: each
    reward counts in the outcome and in the step reward of the turn it lies in or follows."""
    L = 200
    mask = torch.zeros(2, L, dtype=torch.int64)
    for s, e in ((0, 10), (70, 80), (150, 160)):
        mask[:, s:e] = 1
    rewards = torch.zeros(2, L, dtype=torch.float64)
    rewards[0, 75], rewards[0, 130], rewards[0, 199], rewards[0, 64] = 0.25, 0.5, 1.0, -0.125
    uid = np.array([0, 0])
    steps, _ = beacon_rl.estimate(
        "gigpo",
        index=np.zeros(6, dtype=np.int64),
        traj_index=np.array([0, 0, 0, 1, 1, 1]),
        terminal_rewards=np.array([1.625] * 3 + [0.0] * 3),
        # turn 0: -0.125 (token 64 follows it); turn 1: 0.25 + 0.5; turn 2: 1.0
        step_rewards=np.array([-0.125, 0.75, 1.0, 0.0, 0.0, 0.0]),
        anchor_obs=np.array(["turn 0", "turn 1", "turn 2"] * 2, dtype=object),
        config={"step_decay": 0.5},
    )
    want = torch.zeros(2, L, dtype=torch.float64)
    for k, (s, e) in enumerate(((0, 10), (70, 80), (150, 160))):
        want[0, s:e] = float(steps[k, 0])
        want[1, s:e] = float(steps[3 + k, 0])
    for r in (rewards, rewards.T.contiguous().T):
        got, _ = beacon_rl.estimate_turns("gigpo", r, mask, uid, config={"step_decay": 0.5})
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    for token in (64, 130, 199):
        bad = rewards.clone()
        bad[1, token] = float("nan")
        with pytest.raises(ValueError, match=rf"token_level_rewards\[1, {token}\] = NaN"):
            beacon_rl.estimate_turns("beacon", bad.T.contiguous().T if token == 130 else bad, mask, uid)
