"""beacon_rl.verl_agent against verl-agent's own ray_trainer.

verl-agent is not on PyPI and ships its own ``verl`` package, which would shadow the stock
verl the other tests import, so its checks run in a subprocess with the checkout first on
``sys.path``: set ``BEACON_RL_VERL_AGENT`` to a checkout (``git clone
https://github.com/langfengQ/verl-agent && git checkout d0b97244c50f17fb43a6ef0a15bca0e95a044ff7``)
in an environment with its dependencies; extra ``sys.path`` entries may follow, separated by
``:``. Without it those tests skip. The refusal on a stock verl runs everywhere verl is.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

CHECKOUT = os.environ.get("BEACON_RL_VERL_AGENT")


def test_install_refuses_a_verl_that_is_not_verl_agents():
    pytest.importorskip("verl")
    import beacon_rl.verl_agent as va

    try:
        import verl.trainer.ppo.ray_trainer as rt
    except ImportError:
        pytest.skip("verl's ray_trainer does not import here")
    if hasattr(getattr(rt, "AdvantageEstimator", None), "GiGPO"):
        pytest.skip("this verl is verl-agent's")
    with pytest.raises(ImportError, match="not verl-agent's.*beacon_rl.verl"):
        va.install()
    assert not va.installed()


def test_install_checks_its_settings():
    import beacon_rl.verl_agent as va

    with pytest.raises(ValueError):
        va._settings_from({"segment_weight": -1.0}, None)
    with pytest.raises(TypeError, match="milestone_key"):
        va._settings_from({"milestone_key": 3}, None)
    assert va._settings_from({"milestone_key": "subgoal", "segment_weight": 0.5}, None) == {
        "milestone_key": "subgoal",
        "config": {"segment_weight": 0.5},
    }


# Runs with verl-agent's verl first on sys.path.
CHECK = textwrap.dedent(
    """
    import numpy as np, torch
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.trainer.ppo import ray_trainer as rt
    import beacon_rl
    import beacon_rl.verl_agent as va

    va.install()
    va.install()  # idempotent
    assert va.installed() and rt.compute_advantage.__wrapped__ is va._installed["compute_advantage"]

    def steps(order):
        # 2 groups x 2 trajectories x 3 steps, one row per step; a milestone column named 'subgoal'.
        rows = []
        for g in range(2):
            for t in range(2):
                for s in range(3):
                    rows.append((f"u{g}", f"t{g}{t}", s))
        rows = [rows[i] for i in order]
        n, L = len(rows), 4
        success = {"t00": 1.0, "t01": 0.0, "t10": 1.0, "t11": 1.0}
        rewards = torch.zeros(n, L)
        for i, (_, t, _) in enumerate(rows):
            rewards[i, 2] = success[t]
        data = DataProto.from_single_dict({
            "token_level_rewards": rewards,
            "response_mask": torch.ones(n, L, dtype=torch.int64),
            "uid": np.array([u for u, _, _ in rows], dtype=object),
            "traj_uid": np.array([t for _, t, _ in rows], dtype=object),
            "subgoal": np.array([s == 1 and t != "t11" for _, t, s in rows], dtype=object),
        })
        return data

    va._settings.update(va._settings_from({"milestone_key": "subgoal"}, None))
    # Rows in collection order: the same as compute_step_advantages.
    plain = steps(range(12))
    d = steps(range(12))
    ntb = d.non_tensor_batch
    want, _ = beacon_rl.estimate("beacon_official", d.batch["token_level_rewards"], d.batch["response_mask"], ntb["uid"],
                                 traj_index=ntb["traj_uid"], milestones=ntb["subgoal"].astype(bool))
    assert want.abs().sum() > 0
    got = rt.compute_advantage(plain, adv_estimator="beacon_official", gamma=1.0, lam=1.0, num_repeat=2)
    assert torch.equal(got.batch["advantages"], want), (got.batch["advantages"], want)

    # adjust_batch pads with copies, _balance_batch reorders: still each step's value.
    cfg = OmegaConf.create({
        "algorithm": {"adv_estimator": "beacon_official"},
        "trainer": {"n_gpus_per_node": 1, "nnodes": 1},
        "actor_rollout_ref": {"ref": {"log_prob_micro_batch_size_per_gpu": 5},
                              "rollout": {"log_prob_micro_batch_size_per_gpu": 5},
                              "actor": {"ppo_micro_batch_size_per_gpu": 5}},
    })
    data = steps(range(12))
    data = rt.adjust_batch(cfg, data)
    assert len(data) == 15
    perm = torch.randperm(15, generator=torch.Generator().manual_seed(0))
    data.reorder(perm)
    out = rt.compute_advantage(data, adv_estimator="beacon_official")
    tags = data.non_tensor_batch[va.ROW_KEY]
    for i in range(15):
        assert torch.equal(out.batch["advantages"][i], want[int(tags[i])]), i

    # Other names are verl-agent's own code.
    grpo = rt.compute_advantage(steps(range(12)), adv_estimator=rt.AdvantageEstimator.GRPO)
    assert "advantages" in grpo.batch.keys()

    # The trainer's constructor accepts the names (critic-free) and reads algorithm.beacon_rl.
    seen = {}
    def fake_init(self, config, *a, **k):
        seen["name"] = config.algorithm.adv_estimator
        self.use_critic = False
    rt.RayPPOTrainer.__init__ = va._trainer_init(fake_init)
    cfg = OmegaConf.create({"algorithm": {"adv_estimator": "beacon", "beacon_rl": {"milestone_key": "m2", "segment_weight": 0.5}}})
    rt.RayPPOTrainer(cfg)
    assert seen["name"] == "grpo" and cfg.algorithm.adv_estimator == "beacon"
    assert va._settings == {"milestone_key": "m2", "config": {"segment_weight": 0.5}}
    print("verl-agent checks passed")
    """
)


@pytest.mark.skipif(not CHECKOUT, reason="BEACON_RL_VERL_AGENT (a verl-agent checkout) is not set")
def test_against_verl_agents_ray_trainer():
    import beacon_rl

    package = os.path.dirname(os.path.dirname(beacon_rl.__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*CHECKOUT.split(":"), package]))
    run = subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "verl-agent checks passed" in run.stdout


@pytest.mark.skipif(not CHECKOUT, reason="BEACON_RL_VERL_AGENT (a verl-agent checkout) is not set")
def test_the_launcher_reads_verl_agents_config():
    import beacon_rl

    package = os.path.dirname(os.path.dirname(beacon_rl.__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*CHECKOUT.split(":"), package]))
    # Hydra's --cfg job prints the composed config and exits before Ray starts.
    args = [sys.executable, "-m", "beacon_rl.verl_agent", "--cfg", "job", "algorithm.adv_estimator=beacon"]
    run = subprocess.run(args, env=env, cwd=CHECKOUT.split(":")[0], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "adv_estimator: beacon" in run.stdout
