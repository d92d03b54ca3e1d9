"""beacon-rl inside a stock verl 0.9.1 (no mock): verl's own compute_advantage on real
DataProto batches, with the estimators registered through verl's plugin mechanism."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
verl = pytest.importorskip("verl")

import beacon_rl  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.trainer.config import AlgoConfig  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.trainer.ppo.ray_trainer import compute_advantage  # noqa: E402


def test_import_verl_registers_through_the_plugin_entry_point():
    # `import verl` loaded beacon_rl.verl through the "verl.plugins" entry point.
    for name in ("beacon", "beacon_official", "gigpo", "beacon_rl_grpo", "beacon_rl_rloo"):
        assert name in core_algos.ADV_ESTIMATOR_REGISTRY, name
    assert "beacon_rl_gae" not in core_algos.ADV_ESTIMATOR_REGISTRY
    # verl's own entries are untouched.
    assert core_algos.get_adv_estimator_fn("rloo").__module__.startswith("verl")
    import beacon_rl.verl as bv

    assert bv.register() == bv.registered_names()  # idempotent


def test_verl_config_accepts_the_names():
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass

    for name in ("beacon", "beacon_official", "gigpo", "beacon_rl_grpo"):
        cfg = omega_conf_to_dataclass(OmegaConf.create({"_target_": "verl.trainer.config.AlgoConfig", "adv_estimator": name}))
        assert cfg.adv_estimator == name
        assert callable(core_algos.get_adv_estimator_fn(cfg.adv_estimator))


def multi_turn_batch():
    """Two prompts × 2 dialogues, L = 12. Turns are runs of mask 1; the reward on a turn's
    last token (not the last turn) > 0 marks a milestone; a row's outcome is its reward sum."""
    L = 12
    mask = torch.zeros(4, L, dtype=torch.int64)
    rewards = torch.zeros(4, L, dtype=torch.float32)
    # row 0: turns [0,3) [5,8) [10,12); milestone on turn 0; success
    mask[0, 0:3] = 1
    mask[0, 5:8] = 1
    mask[0, 10:12] = 1
    rewards[0, 2] = 1.0
    rewards[0, 11] = 1.0
    # row 1: turns [0,2) [4,9); no milestone; failure
    mask[1, 0:2] = 1
    mask[1, 4:9] = 1
    # row 2: turns [1,4) [6,7); milestone on turn 0; failure (padding after)
    mask[2, 1:4] = 1
    mask[2, 6:7] = 1
    rewards[2, 3] = 1.0
    # row 3: one turn [0,6); success
    mask[3, 0:6] = 1
    rewards[3, 5] = 1.0
    uid = np.array(["p0", "p0", "p1", "p1"], dtype=object)
    return rewards, mask, uid


def turns_by_hand(mask):
    """(row, start, end) of every turn, found independently of the binding's Rust code."""
    out = []
    for r in range(mask.shape[0]):
        m = mask[r].tolist() + [0]
        start = None
        for j, v in enumerate(m):
            if v and start is None:
                start = j
            if not v and start is not None:
                out.append((r, start, j))
                start = None
    return out


@pytest.mark.parametrize("name", ["beacon", "beacon_official"])
def test_verl_compute_advantage_runs_beacon_multi_turn(name):
    rewards, mask, uid = multi_turn_batch()
    data = DataProto.from_dict(
        tensors={"token_level_rewards": rewards.clone(), "response_mask": mask.clone()},
        non_tensors={"uid": uid},
    )
    data = compute_advantage(data, adv_estimator=name, config=AlgoConfig(adv_estimator=name))
    adv = data.batch["advantages"]
    assert adv.dtype == torch.float32 and adv.shape == rewards.shape
    torch.testing.assert_close(data.batch["returns"], adv)

    # Expected: the crate's step-batch API on the hand-extracted turns, broadcast by hand.
    turns = turns_by_hand(mask.numpy())
    last = {}
    for r, s, e in turns:
        last[r] = e - 1
    steps_uid = np.array([uid[r] for r, _, _ in turns], dtype=object)
    traj = np.array([r for r, _, _ in turns])
    # The outcome is the row's whole reward sum, as verl's GRPO scores it (milestone
    # increments included).
    outcome = np.array([float(rewards[r].sum()) for r, _, _ in turns])
    assert outcome.tolist() == [2.0, 2.0, 2.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    flags = np.array([bool(rewards[r, e - 1] > 0) and e - 1 != last[r] for r, s, e in turns])
    assert flags.tolist() == [True, False, False, False, False, True, False, False]
    step_adv, _ = beacon_rl.estimate(name, index=steps_uid, traj_index=traj, terminal_rewards=outcome, milestones=flags)
    want = torch.zeros_like(rewards)
    for k, (r, s, e) in enumerate(turns):
        want[r, s:e] = float(step_adv[k, 0])
    torch.testing.assert_close(adv, want, rtol=1e-6, atol=1e-6)
    # Masked (tool / environment / padding) tokens get nothing; a milestone turn of a
    # successful dialogue is credited more than its other turns under BEACON.
    assert (adv[mask == 0] == 0).all()


def test_beacon_equals_verl_grpo_on_single_turn_outcome_batches():
    """Single-turn rows with 0/1 outcomes and no milestone: the paper's BEACON reduces to the
    trajectory term (R - mean) / (std + eps), which is verl's own GRPO."""
    g = torch.Generator().manual_seed(0)
    rows, L = 16, 10
    lens = torch.randint(1, L + 1, (rows,), generator=g)
    mask = (torch.arange(L)[None, :] < lens[:, None]).long()
    outcome = torch.randint(0, 2, (rows,), generator=g).float()
    rewards = torch.zeros(rows, L)
    rewards[torch.arange(rows), lens - 1] = outcome
    uid = np.array([f"q{r // 4}" for r in range(rows)], dtype=object)

    def run(name):
        data = DataProto.from_dict(tensors={"token_level_rewards": rewards.clone(), "response_mask": mask.clone()}, non_tensors={"uid": uid})
        return compute_advantage(data, adv_estimator=name, config=AlgoConfig(adv_estimator=name)).batch["advantages"]

    torch.testing.assert_close(run("beacon"), run("grpo"), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(run("beacon_rl_grpo"), run("grpo"), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["rloo", "opo", "reinforce_plus_plus_baseline", "grpo_vectorized"])
def test_prefixed_names_match_verl_inside_compute_advantage(name):
    g = torch.Generator().manual_seed(1)
    rewards = torch.randn(12, 7, generator=g)
    mask = (torch.rand(12, 7, generator=g) > 0.2).long()
    uid = np.array([f"q{r // 3}" for r in range(12)], dtype=object)

    def run(n):
        data = DataProto.from_dict(tensors={"token_level_rewards": rewards.clone(), "response_mask": mask.clone()}, non_tensors={"uid": uid})
        return compute_advantage(data, adv_estimator=n, config=AlgoConfig(adv_estimator=n)).batch["advantages"]

    torch.testing.assert_close(run("beacon_rl_" + name), run(name), rtol=1e-4, atol=1e-5)


def test_verl_agent_step_batch_matches_the_release(official_migpo):
    """verl-agent layout (one row per step) as a verl DataProto: compute_step_advantages fills
    advantages and returns in place, equal to the BEACON release's MiGPO numbers."""
    from beacon_rl.verl import compute_step_advantages

    case = official_migpo["cases"][0]
    p, rows = case["params"], case["rows"]
    n, L = len(rows["uid"]), case["tokens"]
    lens = torch.tensor(rows["mask_len"])
    mask = (torch.arange(L)[None, :] < lens[:, None]).long()
    rewards = torch.zeros(n, L)
    # verl-agent puts the terminal reward on each step's last valid token.
    rewards[torch.arange(n), (lens - 1).clamp(min=0)] = torch.tensor(rows["episode_reward"], dtype=torch.float32)
    adv_buf = torch.full((n, L), float("nan"))
    ret_buf = torch.full((n, L), float("nan"))
    data = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask, "advantages": adv_buf, "returns": ret_buf},
        non_tensors={
            "uid": np.array(rows["uid"], dtype=object),
            "traj_uid": np.array(rows["traj_uid"], dtype=object),
            "is_milestone": np.array(rows["milestone"], dtype=object),
        },
    )
    config = {
        "flavour": {"official": {"norm": p["mode"]}},
        "segment_decay": p["gamma"],
        "segment_weight": p["step_advantage_w"],
        "std_eps": p["epsilon"],
        "milestone_reward": p["milestone_reward"],
    }
    out = compute_step_advantages(data, "beacon_official", milestone_key="is_milestone", config=config)
    assert out is data
    assert data.batch["advantages"].data_ptr() == adv_buf.data_ptr()  # written in place
    want = torch.where(mask.bool(), torch.tensor(rows["advantage_f64"])[:, None], 0.0).float()
    torch.testing.assert_close(data.batch["advantages"], want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(data.batch["returns"], want, rtol=1e-5, atol=1e-5)


def test_verl_agent_step_batch_gigpo():
    from beacon_rl.verl import compute_step_advantages

    n, L = 8, 4
    mask = torch.ones(n, L, dtype=torch.int64)
    episode = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    rewards = torch.zeros(n, L)
    rewards[:, -1] = episode
    data = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask},
        non_tensors={
            "uid": np.array(["u"] * 8, dtype=object),
            "traj_uid": np.array(["a", "a", "b", "b", "c", "c", "d", "d"], dtype=object),
            "anchor_obs": np.array(["s0", "s1"] * 4, dtype=object),
            "rewards": np.array([1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0]),
        },
    )
    compute_step_advantages(data, "gigpo")
    want, _ = beacon_rl.estimate(
        "gigpo",
        rewards,
        mask,
        data.non_tensor_batch["uid"],
        traj_index=data.non_tensor_batch["traj_uid"],
        anchor_obs=data.non_tensor_batch["anchor_obs"],
        step_rewards=data.non_tensor_batch["rewards"],
    )
    torch.testing.assert_close(data.batch["advantages"], want)
    # Successful trajectories (a, c) are credited above failed ones (b, d) at every step.
    adv = data.batch["advantages"][:, 0]
    assert (adv[[0, 1, 4, 5]] > 0).all() and (adv[[2, 3, 6, 7]] < 0).all()


def step_data(milestones, advantages=None, returns=None):
    """A verl-agent step batch: one group of two 2-step trajectories (a success, a failure)."""
    mask = torch.ones(4, 3, dtype=torch.int64)
    rewards = torch.zeros(4, 3)
    rewards[:, -1] = torch.tensor([1.0, 1.0, 0.0, 0.0])
    tensors = {"token_level_rewards": rewards, "response_mask": mask}
    if advantages is not None:
        tensors.update(advantages=advantages, returns=returns)
    return DataProto.from_dict(
        tensors=tensors,
        non_tensors={
            "uid": np.array(["g"] * 4, dtype=object),
            "traj_uid": np.array(["a", "a", "b", "b"], dtype=object),
            "milestone": np.array(milestones, dtype=object),
        },
    )


@pytest.mark.parametrize("flags,row", [([1, 2, 0, 0], 1), ([True, None, False, False], 1), ([0.0, 0.0, np.nan, 0.0], 2)])
def test_compute_step_advantages_checks_the_milestone_column(flags, row):
    # astype(bool) read 2 and NaN as milestones and None as none.
    from beacon_rl.verl import compute_step_advantages

    with pytest.raises(ValueError, match=rf"non_tensor_batch\['milestone'\]: row {row} is"):
        compute_step_advantages(step_data(flags), "beacon_official")
    # Float and integer columns of 0/1 are read as flags.
    want = compute_step_advantages(step_data([True, False, False, False]), "beacon_official").batch["advantages"]
    for column in (np.array([1.0, 0.0, 0.0, 0.0]), np.array([1, 0, 0, 0], dtype=np.int32)):
        data = step_data([0, 0, 0, 0])
        data.non_tensor_batch["milestone"] = column
        torch.testing.assert_close(compute_step_advantages(data, "beacon_official").batch["advantages"], want, rtol=0, atol=0)


def test_compute_step_advantages_replaces_stored_outputs_it_cannot_write():
    """Stored advantages/returns that cannot take this estimator's numbers in place (one tensor
    stored as both, as the last call of an estimator without returns of its own leaves them,
    half precision, an expanded view) are replaced by fresh tensors, not an error nor returns
    written over the advantages."""
    from beacon_rl.verl import compute_step_advantages

    want = beacon_rl.estimate(
        "reinforce_plus_plus", step_data([0] * 4).batch["token_level_rewards"], torch.ones(4, 3, dtype=torch.int64), np.array(["g"] * 4, dtype=object)
    )
    shared = torch.full((4, 3), float("nan"))
    half = torch.zeros(4, 3, dtype=torch.float16)
    expanded = torch.zeros(1, 3).expand(4, 3)
    for adv, ret in [(shared, shared), (shared, shared[:]), (half, half.clone()), (expanded, expanded.clone())]:
        data = compute_step_advantages(step_data([0] * 4, adv, ret), "reinforce_plus_plus")
        torch.testing.assert_close(data.batch["advantages"], want[0], rtol=0, atol=0)
        torch.testing.assert_close(data.batch["returns"], want[1], rtol=0, atol=0)
    # One tensor as both is written in place by an estimator whose returns are its advantages.
    shared = torch.full((4, 3), float("nan"))
    data = compute_step_advantages(step_data([0] * 4, shared, shared), "beacon_official")
    assert data.batch["advantages"].data_ptr() == shared.data_ptr()
    assert not torch.isnan(shared).any()
