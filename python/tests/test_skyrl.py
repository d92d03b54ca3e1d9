"""beacon-rl inside SkyRL (skyrl-train 0.3.1, installed without its GPU stack): the real
AdvantageEstimatorRegistry and compute_advantages_and_returns of skyrl_train.utils.ppo_utils,
the real TrainingInputBatch, and SkyRL's own grpo, rloo, gae and reinforce++ as references.

The differential tests draw batches in SkyRL's layout with hypothesis: rows grouped by uid
(1 to 4 groups of 1 to 6 rows, singletons included, uids in any order), response_mask a
prefix of ones (right padding; int64, as SkyRL builds it), rewards and values zero on the
padding, float64 (SkyRL's are float32; float64 keeps the comparison at float64 rounding). Each
estimator runs twice: SkyRL's function under its own name and the crate's under
``beacon_rl_<name>``, through SkyRL's compute_advantages_and_returns. The bound is
|ours − SkyRL| ≤ 1e-10 · (1 + |SkyRL| + cond): both compute in float64 from the same inputs,
so only the order of additions differs (relative 1e-15 per sum); cond carries that rounding
through the division by a group's std (GRPO: max |score| / (σ + ε)) or by the batch std
(whitening: max |x| / σ). A change of formula (Bessel factor, ε, a singleton rule, a
discount) moves results by 1e-7 relative or more.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
ppo_utils = pytest.importorskip("skyrl_train.utils.ppo_utils")

import beacon_rl  # noqa: E402
import beacon_rl.skyrl as bs  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from skyrl_train.training_batch import TrainingInputBatch  # noqa: E402

Registry = ppo_utils.AdvantageEstimatorRegistry
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def algorithm(**extra):
    """SkyRL's trainer.algorithm section (the keys the estimators read)."""
    base = {"advantage_estimator": "grpo", "gamma": 1.0, "lambd": 1.0, "grpo_norm_by_std": True}
    base.update(extra)
    return OmegaConf.create(base)


def skyrl(name, rewards, mask, uids, values=None, gamma=1.0, lambd=1.0, norm=True, **kw):
    """SkyRL's compute_advantages_and_returns, as its trainer calls it."""
    return ppo_utils.compute_advantages_and_returns(
        token_level_rewards=rewards.clone(),
        response_mask=mask,
        index=uids,
        adv_estimator=name,
        config=algorithm(),
        values=values,
        grpo_norm_by_std=norm,
        gamma=gamma,
        lambd=lambd,
        **kw,
    )


# ---------------------------------------------------------------------------------------
# Registration
# ---------------------------------------------------------------------------------------


def test_import_registers_with_skyrl():
    available = set(Registry.list_available())
    for name in ("beacon", "beacon_official", "gigpo", "beacon_rl_grpo", "beacon_rl_rloo", "beacon_rl_gae", "beacon_rl_reinforce++"):
        assert name in available, name
    # SkyRL's own estimators are untouched.
    assert Registry.get("grpo").__module__.startswith("skyrl_train")
    assert bs.register() == bs.registered_names()  # idempotent
    assert bs.registered_names()["beacon_rl_rloo"] == "rloo_vectorized"


def test_unknown_name_fails_in_skyrl_with_its_message():
    with pytest.raises(ValueError, match="Unknown advantage estimator 'beacon_rl_nope'"):
        skyrl("beacon_rl_nope", torch.zeros(1, 2, dtype=torch.float64), torch.ones(1, 2), np.array(["a"]))


def test_a_foreign_estimator_under_our_name_is_not_overwritten():
    def foreign(**kwargs):
        raise AssertionError("never called")

    Registry.unregister("beacon_rl_rloo")
    Registry.register("beacon_rl_rloo", foreign)
    try:
        with pytest.raises(ValueError, match="already has an advantage estimator 'beacon_rl_rloo'"):
            bs.register()
    finally:
        Registry.unregister("beacon_rl_rloo")
        bs.register()
    assert Registry.get("beacon_rl_rloo").__module__ == "beacon_rl.skyrl"


# ---------------------------------------------------------------------------------------
# SkyRL's own estimators, cross-checked
# ---------------------------------------------------------------------------------------


@st.composite
def batches(draw):
    """A float64 batch in SkyRL's layout: prefix response masks, zero padding."""
    groups = draw(st.integers(1, 4))
    sizes = [draw(st.integers(1, 6)) for _ in range(groups)]
    labels = [g for g, n in enumerate(sizes) for _ in range(n)]
    order = draw(st.permutations(range(len(labels))))
    labels = [labels[i] for i in order]
    rows, width = len(labels), draw(st.integers(1, 12))
    scale = draw(st.sampled_from([1.0, 1.0, 1e-3, 1e3]))
    mask = torch.zeros(rows, width, dtype=torch.int64)  # SkyRL's response_mask dtype
    rewards = torch.zeros(rows, width, dtype=torch.float64)
    values = torch.zeros(rows, width, dtype=torch.float64)
    dense = draw(st.booleans())
    for r in range(rows):
        n = draw(st.integers(1, width))
        mask[r, :n] = 1
        unit = st.floats(-1, 1, allow_nan=False)
        if dense:
            rewards[r, :n] = torch.tensor(draw(st.lists(unit, min_size=n, max_size=n)), dtype=torch.float64) * scale
        else:
            rewards[r, n - 1] = draw(st.sampled_from([0.0, 1.0, draw(unit)])) * scale
        values[r, :n] = torch.tensor(draw(st.lists(unit, min_size=n, max_size=n)), dtype=torch.float64)
    uids = np.array([f"u{g}" for g in labels], dtype=object)
    return rewards, mask, uids, values


def close(ours, ref, cond):
    ours, ref = ours.double(), ref.double()
    assert ours.shape == ref.shape
    assert torch.isfinite(ours).all()
    bound = 1e-10 * (1 + ref.abs() + cond)
    err = (ours - ref).abs()
    assert (err <= bound).all(), f"max error {err.max().item()} ({(err - bound).argmax().item()})"


def group_cond(rewards, uids, eps=1e-6):
    """max |score| / (σ_g + ε) per row: the rounding a group's normalisation amplifies."""
    scores = rewards.sum(-1)
    out = torch.zeros(len(uids), dtype=torch.float64)
    for u in set(uids.tolist()):
        rows = [i for i, v in enumerate(uids) if v == u]
        s = scores[rows]
        std = s.std().item() if len(rows) > 1 else 1.0
        out[rows] = s.abs().max().item() * len(rows) / (std + eps)
    return out[:, None]


def whiten_cond(x, mask):
    sel = x[mask.bool()]
    if sel.numel() < 2:
        return torch.tensor(0.0)
    return sel.abs().max() * sel.numel() / (sel.std() + 1e-8)


@SETTINGS
@given(batches(), st.booleans())
def test_grpo_is_skyrls(batch, norm):
    rewards, mask, uids, _ = batch
    ref, ref_ret = skyrl("grpo", rewards, mask, uids, norm=norm)
    ours, ret = skyrl("beacon_rl_grpo", rewards, mask, uids, norm=norm)
    close(ours, ref, group_cond(rewards, uids))
    assert ret is ours


@SETTINGS
@given(batches())
def test_rloo_is_skyrls(batch):
    rewards, mask, uids, _ = batch
    ref, _ = skyrl("rloo", rewards, mask, uids)
    ours, _ = skyrl("beacon_rl_rloo", rewards, mask, uids)
    close(ours, ref, group_cond(rewards, uids))


@SETTINGS
@given(batches(), st.sampled_from([1.0, 0.99, 0.5, 0.0]))
def test_reinforce_plus_plus_is_skyrls(batch, gamma):
    rewards, mask, uids, _ = batch
    if mask.sum() < 2:
        return  # both raise or return NaN: test_fewer_than_two_tokens_raise
    ref, ref_ret = skyrl("reinforce++", rewards, mask, uids, gamma=gamma)
    ours, ret = skyrl("beacon_rl_reinforce++", rewards, mask, uids, gamma=gamma)
    close(ret, ref_ret, 0.0)
    close(ours, ref, whiten_cond(ref_ret, mask))


@SETTINGS
@given(batches(), st.sampled_from([1.0, 0.99, 0.5]), st.sampled_from([1.0, 0.95, 0.0]))
def test_gae_is_skyrls(batch, gamma, lambd):
    rewards, mask, uids, values = batch
    if mask.sum() < 2:
        return
    ref, ref_ret = skyrl("gae", rewards, mask, uids, values=values, gamma=gamma, lambd=lambd)
    ours, ret = skyrl("beacon_rl_gae", rewards, mask, uids, values=values, gamma=gamma, lambd=lambd)
    close(ret, ref_ret, 0.0)
    # SkyRL whitens the raw GAE (returns − values) over the response tokens.
    close(ours, ref, whiten_cond(ref_ret - values, mask))


def test_fewer_than_two_tokens_raise():
    one = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 0]])
    with pytest.raises(ValueError):
        skyrl("beacon_rl_reinforce++", one, mask, np.array(["a"], dtype=object))


def test_interior_mask_gaps_follow_verl_not_skyrl():
    # A documented difference: SkyRL 0.3.1's reinforce++ resets its running return at a mask-0
    # token inside a row; the crate carries it through, as verl 0.9.1 does.
    rewards = torch.tensor([[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 0, 1, 1], [1, 1, 1, 1]])
    uids = np.array(["a", "b"], dtype=object)
    _, ref_ret = skyrl("reinforce++", rewards, mask, uids)
    _, ret = skyrl("beacon_rl_reinforce++", rewards, mask, uids)
    assert ref_ret[0, 0].item() == 0.0  # reset at token 1
    assert ret[0, 0].item() == 1.0  # carried through


def test_skyrl_keywords_and_their_errors():
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0]], dtype=torch.float64)
    mask = torch.ones(2, 2, dtype=torch.int64)
    uids = np.array(["a", "a"], dtype=object)
    with pytest.raises(ValueError, match="beacon_rl_gae: values are required"):
        skyrl("beacon_rl_gae", rewards, mask, uids)
    with pytest.raises(ValueError, match="gamma must be in"):
        skyrl("beacon_rl_reinforce++", rewards, mask, uids, gamma=1.5)
    with pytest.raises(TypeError, match="unexpected keyword argument.*surprise"):
        skyrl("beacon_rl_grpo", rewards, mask, uids, surprise=1)
    # grpo_norm_by_std=False centres only: ±0.5, not ±0.707.
    adv, _ = skyrl("beacon_rl_grpo", rewards, mask, uids, norm=False)
    assert adv[:, 0].tolist() == [0.5, -0.5]
    # A float mask (SkyRL's loss_mask dtype) is read when it holds 0 and 1 only.
    adv, _ = skyrl("beacon_rl_grpo", rewards, mask.double(), uids, norm=False)
    assert adv[:, 0].tolist() == [0.5, -0.5]
    with pytest.raises(ValueError, match=r"response_mask: row 0 token 1 is 0.5, expected 0 or 1"):
        skyrl("beacon_rl_grpo", rewards, torch.tensor([[1.0, 0.5], [1.0, 1.0]]), uids)


# ---------------------------------------------------------------------------------------
# Step estimators: loss_mask, the trainer mixin, step-wise mode
# ---------------------------------------------------------------------------------------


def dialogues():
    """Two prompts × 2 dialogues in SkyRL's layout: response_mask covers the environment's
    tokens, loss_mask the assistant's; rewards on turn ends. Row 3 ends in padding."""
    L = 12
    resp = torch.ones(4, L, dtype=torch.int64)
    loss = torch.zeros(4, L, dtype=torch.int64)
    rewards = torch.zeros(4, L, dtype=torch.float32)
    loss[0, 0:3] = 1
    loss[0, 5:8] = 1
    loss[0, 10:12] = 1
    rewards[0, 2] = 1.0  # milestone
    rewards[0, 11] = 1.0  # success
    loss[1, 0:2] = 1
    loss[1, 4:9] = 1
    loss[2, 1:4] = 1
    loss[2, 6:7] = 1
    rewards[2, 3] = 1.0
    loss[3, 0:6] = 1
    resp[3, 8:] = 0
    rewards[3, 5] = 1.0
    uids = ["p0", "p0", "p1", "p1"]
    return rewards, resp, loss, uids


# SkyRL's gamma (1.0 here) is GiGPO's step-return discount.
SKYRL_GAMMA = {"gigpo": {"step_decay": 1.0}}


def test_step_estimators_refuse_without_loss_mask():
    rewards, resp, _, uids = dialogues()
    for name in ("beacon", "beacon_official", "gigpo"):
        with pytest.raises(ValueError, match="reads turns from loss_mask"):
            skyrl(name, rewards, resp, np.array(uids, dtype=object))


@pytest.mark.parametrize("name", ["beacon", "beacon_official", "gigpo"])
def test_loss_mask_turns_are_the_package_convention(name):
    rewards, resp, loss, uids = dialogues()
    adv, ret = skyrl(name, rewards, resp, np.array(uids, dtype=object), loss_mask=loss)
    want, _ = beacon_rl.estimate_turns(name, rewards, loss, np.array(uids, dtype=object), config=SKYRL_GAMMA.get(name))
    assert ret is adv and adv.dtype == torch.float32
    assert torch.equal(adv, want)
    # Environment tokens (response_mask 1, loss_mask 0) get no credit.
    assert (adv[loss == 0] == 0).all()
    # response_mask alone would merge row 0's turns into one (its environment tokens are 1).
    merged, _ = beacon_rl.estimate_turns(name, rewards, resp, np.array(uids, dtype=object))
    assert not torch.equal(merged, want)


def test_crate_parameters_from_the_algorithm_section():
    rewards, resp, loss, uids = dialogues()
    index = np.array(uids, dtype=object)
    base, _ = skyrl("beacon", rewards, resp, index, loss_mask=loss)
    cfg = algorithm(beacon_rl={"trajectory_weight": 0.5})
    tuned, _ = ppo_utils.compute_advantages_and_returns(
        token_level_rewards=rewards, response_mask=resp, index=index, adv_estimator="beacon", config=cfg, loss_mask=loss
    )
    want, _ = beacon_rl.estimate_turns("beacon", rewards, loss, index, config={"trajectory_weight": 0.5})
    assert torch.equal(tuned, want) and not torch.equal(tuned, base)
    with pytest.raises(ValueError, match=r"trainer.algorithm.beacon_rl \(beacon\)"):
        ppo_utils.compute_advantages_and_returns(
            token_level_rewards=rewards,
            response_mask=resp,
            index=index,
            adv_estimator="beacon",
            config=algorithm(beacon_rl={"trajectory_weight": -1.0}),
            loss_mask=loss,
        )


def test_gigpo_discount_is_skyrls_gamma():
    rewards, resp, loss, uids = dialogues()
    index = np.array(uids, dtype=object)
    adv, _ = skyrl("gigpo", rewards, resp, index, loss_mask=loss, gamma=0.5)
    want, _ = beacon_rl.estimate_turns("gigpo", rewards, loss, index, config={"step_decay": 0.5})
    assert torch.equal(adv, want)


class StockTrainer:
    """Stands in for RayPPOTrainer (which needs SkyRL's GPU stack to import): the attributes
    BeaconAdvantages reads, and the stock method it falls back to."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.all_metrics = {}
        self.stock_calls = 0

    def compute_advantages_and_returns(self, data):
        self.stock_calls += 1
        data["advantages"] = torch.full_like(data["rewards"], 7.0)
        return data


class Trainer(bs.BeaconAdvantages, StockTrainer):
    pass


def trainer_cfg(name, step_wise=False, **algo):
    return OmegaConf.create(
        {
            "trainer": {"algorithm": dict(algorithm(advantage_estimator=name, **algo))},
            "generator": {"step_wise_trajectories": step_wise},
        }
    )


def batch(rewards, resp, loss, uids, pad=0, **extra):
    data = TrainingInputBatch({"rewards": rewards, "response_mask": resp, "loss_mask": loss, **extra})
    data.metadata = {"uids": list(uids), "pad_size": pad, "avg_response_length": 3.0}
    return data


def test_mixin_passes_loss_mask_and_zeroes_padding_rows():
    rewards, resp, loss, uids = dialogues()
    # SkyRL's pad_batch: clones of the first rows, loss_mask 0, uids "pad<i>".
    pad = 2
    data = batch(
        torch.cat([rewards, rewards[:pad]]),
        torch.cat([resp, resp[:pad]]),
        # SkyRL's loss_mask is float.
        torch.cat([loss, torch.zeros_like(loss[:pad])]).float(),
        uids + ["pad0", "pad1"],
        pad=pad,
    )
    trainer = Trainer(trainer_cfg("beacon_official"))
    out = trainer.compute_advantages_and_returns(data)
    want, _ = beacon_rl.estimate_turns("beacon_official", rewards, loss, np.array(uids, dtype=object))
    assert torch.equal(out["advantages"][:4], want)
    assert (out["advantages"][4:] == 0).all()
    assert out["returns"] is out["advantages"]
    assert trainer.stock_calls == 0
    metrics = out.metadata["metrics"]
    assert metrics["avg_final_rewards"] == pytest.approx(rewards.sum(-1).mean().item())
    assert trainer.all_metrics["loss/avg_raw_advantages"] == metrics["avg_advantages"]


def test_mixin_leaves_other_estimators_to_skyrl():
    rewards, resp, loss, uids = dialogues()
    trainer = Trainer(trainer_cfg("grpo"))
    out = trainer.compute_advantages_and_returns(batch(rewards, resp, loss, uids))
    assert trainer.stock_calls == 1 and (out["advantages"] == 7.0).all()


def split_into_steps(rewards, resp, loss, uids):
    """One row per turn (SkyRL's step-wise layout): a turn's tokens and the environment's
    tokens after it, left-aligned; the trajectory's last step has is_last_step."""
    rows, width = rewards.shape
    out_r, out_resp, out_loss, out_uids, last, where = [], [], [], [], [], []
    for i in range(rows):
        used = int(resp[i].sum())
        starts = [j for j in range(used) if loss[i, j] and (j == 0 or not loss[i, j - 1])]
        bounds = starts[1:] + [used]
        for k, (s, e) in enumerate(zip(starts, bounds)):
            r = torch.zeros(width, dtype=rewards.dtype)
            m = torch.zeros(width, dtype=loss.dtype)
            p = torch.zeros(width, dtype=resp.dtype)
            r[: e - s] = rewards[i, s:e]
            m[: e - s] = loss[i, s:e]
            p[: e - s] = 1
            out_r.append(r)
            out_loss.append(m)
            out_resp.append(p)
            out_uids.append(uids[i])
            last.append(k == len(starts) - 1)
            where.append((i, s, e))
    return torch.stack(out_r), torch.stack(out_resp), torch.stack(out_loss), out_uids, torch.tensor(last), where


@pytest.mark.parametrize("name", ["beacon", "beacon_official", "gigpo"])
def test_step_wise_rows_get_the_dialogues_advantages(name):
    rewards, resp, loss, uids = dialogues()
    dialogue, _ = beacon_rl.estimate_turns(name, rewards, loss, np.array(uids, dtype=object), config=SKYRL_GAMMA.get(name))
    r, p, m, u, last, where = split_into_steps(rewards, resp, loss, uids)
    trainer = Trainer(trainer_cfg(name, step_wise=True))
    out = trainer.compute_advantages_and_returns(batch(r, p, m, u, is_last_step=last))
    for row, (i, s, e) in enumerate(where):
        assert torch.equal(out["advantages"][row, : e - s], dialogue[i, s:e]), (row, i)
        assert (out["advantages"][row, e - s :] == 0).all()
    # Every step carries its turn's credit, not only the last one.
    assert (out["advantages"][~last].abs().sum(-1) > 0).any()
    assert out.metadata["metrics"]["avg_final_rewards"] == pytest.approx(rewards.sum(-1).mean().item())


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_step_wise_equals_dialogues_on_generated_batches(data):
    groups = data.draw(st.integers(1, 3))
    uids, rows = [], []
    for g in range(groups):
        uids += [f"g{g}"] * data.draw(st.integers(1, 3))
    width = 16
    rewards = torch.zeros(len(uids), width, dtype=torch.float64)
    loss = torch.zeros(len(uids), width, dtype=torch.int64)
    resp = torch.zeros(len(uids), width, dtype=torch.int64)
    for i in range(len(uids)):
        pos = 0
        for t in range(data.draw(st.integers(1, 4))):
            n = data.draw(st.integers(1, 2))
            gap = data.draw(st.integers(0 if t == 0 else 1, 2))
            if pos + gap + n > width:
                break
            pos += gap
            loss[i, pos : pos + n] = 1
            rewards[i, pos + n - 1] = data.draw(st.sampled_from([0.0, 0.0, 1.0]))
            pos += n
        if not loss[i].any():
            loss[i, 0] = 1
        resp[i, : int(loss[i].nonzero().max()) + 1 + data.draw(st.integers(0, 2))] = 1
        resp[i] = resp[i] | loss[i]
        rows.append(i)
    name = data.draw(st.sampled_from(["beacon", "beacon_official", "gigpo"]))
    # Step rows start at a turn: leading environment tokens belong to no step.
    first = loss.float().argmax(dim=1)
    for i in range(len(uids)):
        rewards[i, : first[i]] = 0
    dialogue, _ = beacon_rl.estimate_turns(name, rewards, loss, np.array(uids, dtype=object))
    r, p, m, u, last, where = split_into_steps(rewards, resp, loss, uids)
    got, _ = bs.compute_advantages(name, r, p, m, np.array(u, dtype=object), is_last_step=last)
    for row, (i, s, e) in enumerate(where):
        assert torch.equal(got[row, : e - s], dialogue[i, s:e])


def test_step_wise_errors_name_skyrls_tensors():
    rewards, resp, loss, uids = dialogues()
    r, p, m, u, last, _ = split_into_steps(rewards, resp, loss, uids)
    bad = last.clone()
    bad[-1] = False
    with pytest.raises(ValueError, match="is_last_step: row .* has no end"):
        bs.compute_advantages("beacon", r, p, m, np.array(u, dtype=object), is_last_step=bad)
    mixed = list(u)
    mixed[1] = "other"
    with pytest.raises(ValueError, match="index: rows 0 and 1 are steps of one trajectory"):
        bs.compute_advantages("beacon", r, p, m, np.array(mixed, dtype=object), is_last_step=last)
    with pytest.raises(ValueError, match="loss_mask: row 0 token 0 is 1 where response_mask is 0"):
        bs.compute_advantages("beacon", r, torch.zeros_like(p), m, np.array(u, dtype=object))
    with pytest.raises(ValueError, match="not a step estimator"):
        bs.compute_advantages("grpo", r, p, m, np.array(u, dtype=object))


def test_the_experiment_class_adds_the_mixin_to_any_trainer():
    class Custom(StockTrainer):
        def extra(self):
            return "kept"

    t = Custom(trainer_cfg("beacon"))
    t.__class__ = bs._with_mixin(type(t))
    assert isinstance(t, bs.BeaconAdvantages) and t.extra() == "kept"
    assert bs._with_mixin(type(t)) is type(t)
    try:
        import skyrl_train.entrypoints.main_base  # noqa: F401
    except Exception:
        pytest.skip("SkyRL's entry point needs its GPU stack (vLLM, flash-attn) to import")
    assert bs.BeaconPPOExp.get_trainer is not None
