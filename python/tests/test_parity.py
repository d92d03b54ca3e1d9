"""Parity against the crate's public vectors, through the Python API.

verl_public.json: verl 0.9.1's own estimators (float64 run `outputs_f64`, tolerance
1e-5 · max(1, |expected|), as the crate's tests/parity_verl.rs). official_migpo.json: the
BEACON release's MiGPO (`beacon_official`), row advantages and token broadcast.
"""

import numpy as np
import pytest

import beacon_rl

TOL = 1e-5


def crate_config(case: dict) -> dict:
    """The case's verl parameters in the crate's serde names."""
    p = case["params"]
    name = case["verl_name"]
    if name in ("grpo", "grpo_vectorized", "grpo_passk", "gdpo"):
        return {
            "std_eps": p.get("epsilon", 1e-6),
            "norm": "mean_std_norm" if p.get("norm_adv_by_std_in_grpo", True) else "mean_norm",
        }
    if name == "gae":
        return {"discount": p["gamma"], "gae_lambda": p["lam"]}
    if name == "reinforce_plus_plus":
        return {"discount": p["gamma"]}
    if name == "gpg":
        return {"f_norm": p.get("f_norm", 1.0)}
    if name in ("optimal_token_baseline", "tir_optimal_token_baseline"):
        return {
            "zero_tail": "zero_baseline" if p.get("handle_zero_tail", True) else "keep_baseline",
            "denominator_eps": p.get("epsilon", 1e-8),
        }
    return {}


def case_inputs(case: dict, dtype) -> dict:
    """The case's inputs as verl holds them: float values, int64 mask, object uids."""
    inp = case["inputs"]
    rewards = np.array(inp["token_level_rewards"], dtype=dtype)
    kwargs = {
        "token_level_rewards": rewards,
        "response_mask": np.array(inp["response_mask"], dtype=np.int64),
        "index": np.array(inp["index"], dtype=object)
        if "index" in inp
        else np.array([f"row{r}" for r in range(rewards.shape[0])], dtype=object),
    }
    for key in ("values", "old_log_probs", "sum_pi_squared"):
        if key in inp:
            kwargs[key] = np.array(inp[key], dtype=dtype)
    if "reward_baselines" in inp:
        kwargs["reward_baselines"] = np.array(inp["reward_baselines"], dtype=dtype)
    return kwargs


def verl_cases():
    from conftest import load

    return [pytest.param(c, id=c["id"]) for c in load("verl_public.json")["cases"]]


@pytest.mark.parametrize("case", verl_cases())
def test_verl_vectors_f64(case):
    kwargs = case_inputs(case, np.float64)
    expected = case["outputs_f64"]
    if "error" in expected:
        with pytest.raises(ValueError):
            beacon_rl.estimate(case["verl_name"], config=crate_config(case), **kwargs)
        return
    adv, ret = beacon_rl.estimate(case["verl_name"], config=crate_config(case), **kwargs)
    assert adv.dtype == np.float64 and ret.dtype == np.float64
    for what, ours in (("advantages", adv), ("returns", ret)):
        want = np.array(expected[what], dtype=np.float64)
        assert ours.shape == want.shape
        rel = np.abs(ours - want) / np.maximum(1.0, np.abs(want))
        assert rel.max(initial=0.0) <= TOL, f"{what}: max relative error {rel.max():.3e}"


@pytest.mark.parametrize("case", verl_cases())
def test_verl_vectors_f32_inputs_give_f32(case):
    """float32 inputs (what verl trains with) come back float32, near verl's float32 run."""
    kwargs = case_inputs(case, np.float32)
    expected = case["outputs"]
    if "error" in expected:
        with pytest.raises(ValueError):
            beacon_rl.estimate(case["verl_name"], config=crate_config(case), **kwargs)
        return
    adv, ret = beacon_rl.estimate(case["verl_name"], config=crate_config(case), **kwargs)
    assert adv.dtype == np.float32 and ret.dtype == np.float32
    want = np.array(expected["advantages"], dtype=np.float64)
    # The crate computes in f64 from the f32 inputs; verl's float32 run rounds at every
    # step, so allow float32-level differences.
    rel = np.abs(adv.astype(np.float64) - want) / np.maximum(1.0, np.abs(want))
    assert rel.max(initial=0.0) <= 1e-4


def test_every_verl_name_is_covered(verl_public):
    covered = {c["verl_name"] for c in verl_public["cases"]}
    assert covered == set(beacon_rl.verl_names())


def migpo_cases():
    from conftest import load

    return [pytest.param(c, id=c["name"]) for c in load("official_migpo.json")["cases"]]


@pytest.mark.parametrize("case", migpo_cases())
def test_beacon_official_matches_the_release(case):
    p, rows = case["params"], case["rows"]
    config = {
        "flavour": {"official": {"norm": p["mode"]}},
        "segment_decay": p["gamma"],
        "segment_weight": p["step_advantage_w"],
        "std_eps": p["epsilon"],
        "milestone_reward": p["milestone_reward"],
    }
    n, width = len(rows["uid"]), case["tokens"]
    mask = np.arange(width)[None, :] < np.array(rows["mask_len"])[:, None]
    adv, ret = beacon_rl.estimate(
        "beacon_official",
        response_mask=mask,
        index=np.array(rows["uid"], dtype=object),
        traj_index=np.array(rows["traj_uid"], dtype=object),
        terminal_rewards=np.array(rows["episode_reward"], dtype=np.float64),
        milestones=np.array(rows["milestone"], dtype=bool),
        config=config,
    )
    assert adv.shape == (n, width)
    want = np.where(mask, np.array(rows["advantage_f64"])[:, None], 0.0)
    rel = np.abs(adv - want) / np.maximum(1.0, np.abs(want))
    assert rel.max() <= TOL
    np.testing.assert_array_equal(adv, ret)
