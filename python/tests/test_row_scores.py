"""verl-agent's penalised step rows through the binding.

With ``use_invalid_action_penalty=True`` (``invalid_action_penalty_coef=0.1`` in verl-agent's
ALFWorld, WebShop and GiGPO scripts) verl-agent's trainer runs ``apply_invalid_action_penalty``
before the advantage: ``token_level_scores[i, valid_response_length - 1] -= coef * (1 -
is_action_valid[i])``. A row's reward sum is then R(τ) minus its step's penalty, and the rows
of one trajectory differ. The release's (and verl-agent's) ``episode_norm_reward`` scores each
row by its own sum; so must ``compute_step_advantages``.

Expected values come from numpy transcriptions of the release's functions written here (not
from the crate), and, when the release's code is present at ``$BEACON_RELEASE/migpo``
(never part of this repository), from the release itself, run on a copy in a temp dir.
"""

import importlib.util
import os
import pathlib
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
verl = pytest.importorskip("verl")

import beacon_rl  # noqa: E402
from beacon_rl.verl import compute_step_advantages  # noqa: E402
from verl import DataProto  # noqa: E402

EPS = 1e-6
# The release's directory, as python/bench/bench_verl.py reads it.
RELEASE = pathlib.Path(os.environ.get("BEACON_RELEASE", "/tmp/beacon-release"), "migpo", "core_migpo.py")


def episode_norm_reward(scores, index, traj, remove_std, cross_steps=True):
    """Transcription of ``episode_norm_reward`` (BEACON release ``migpo/core_migpo.py``, lines
    124–183, "Identical to GiGPO's episode_norm_reward" in verl-agent's
    ``gigpo/core_gigpo.py``) on the row scores ``token_level_rewards.sum(-1)``, in float64:
    each uid's list holds every row's score (``compute_mean_std_cross_steps=True``) or only the
    first row (row order) of each ``(uid, traj)`` pair; a list of one gives μ = 0, σ = 1, else
    ``torch.mean`` / ``torch.std`` (unbiased); every row's own score is normalised."""
    id2score, seen = {}, set()
    for i, s in enumerate(scores):
        if (index[i], traj[i]) in seen:
            continue
        id2score.setdefault(index[i], []).append(s)
        if not cross_steps:
            seen.add((index[i], traj[i]))
    stats = {k: (0.0, 1.0) if len(v) == 1 else (np.mean(v), np.std(v, ddof=1)) for k, v in id2score.items()}
    out = np.empty(len(scores))
    for i, s in enumerate(scores):
        mean, std = stats[index[i]]
        out[i] = s - mean if remove_std else (s - mean) / (std + EPS)
    return out


def segment_term(flags, index, traj, gamma=0.95, scale=10.0):
    """Transcription of the release's WebShop path (``compute_migpo_step_rewards_dynamic``,
    ``build_segment_groups_dynamic``, ``segment_norm_reward`` with ``remove_std=True``):
    within each trajectory, the steps up to and including a milestone get
    ``scale · γ^(distance to it)``, later steps 0; rows are grouped by (uid, number of
    milestones of the trajectory before the row), and each row's reward minus its group's
    mean is its segment advantage."""
    n = len(flags)
    reward = np.zeros(n)
    for t in dict.fromkeys(traj):
        rows = [i for i in range(n) if traj[i] == t]
        start = 0
        for k, r in enumerate(rows):
            if flags[r]:
                for j in range(start, k + 1):
                    reward[rows[j]] = gamma ** (k - j) * scale
                start = k + 1
    seg = [sum(1 for j in range(i) if traj[j] == traj[i] and flags[j]) for i in range(n)]
    groups = {}
    for i in range(n):
        groups.setdefault((index[i], seg[i]), []).append(reward[i])
    return np.array([reward[i] - np.mean(groups[(index[i], seg[i])]) for i in range(n)])


def penalised_batch():
    """Two tasks in verl-agent's layout (a trajectory's rows are its steps, in row order;
    trajectories interleaved), the terminal reward on each row's last valid token minus 0.1 on
    the rows of invalid actions."""
    uid = np.array(["u", "u", "u", "u", "u", "v", "v", "v", "v"], dtype=object)
    traj = np.array(["a", "b", "a", "c", "a", "d", "e", "d", "e"], dtype=object)
    r_tau = {"a": 1.0, "b": 0.0, "c": 1.0, "d": 1.0, "e": 0.0}
    valid = np.array([0, 1, 1, 0, 1, 1, 0, 0, 1])
    lengths = np.array([3, 2, 4, 1, 2, 4, 3, 2, 1])
    milestone = np.array([False, False, True, False, False, True, False, False, False])
    anchor = np.array(["s0", "s0", "s1", "s0", "s2", "t0", "t0", "t1", "t1"], dtype=object)
    step_rewards = np.array([0.0, 0.0, 1.0, 0.5, 0.0, 0.0, 1.0, 0.0, 0.0])
    rows, cols = len(uid), 5
    mask = np.zeros((rows, cols), dtype=np.int64)
    tokens = np.zeros((rows, cols), dtype=np.float32)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
        tokens[i, n - 1] = r_tau[traj[i]]
        tokens[i, n - 1] -= 0.1 * (1 - valid[i])  # apply_invalid_action_penalty
    scores = tokens.astype(np.float64).sum(-1)
    assert len(set(scores[traj == "a"])) == 2  # the rows of "a" differ
    return dict(
        uid=uid, traj=traj, mask=mask, tokens=tokens, scores=scores, milestone=milestone, anchor=anchor, step_rewards=step_rewards
    )


def data_proto(b):
    return DataProto.from_dict(
        tensors={
            "token_level_rewards": torch.from_numpy(b["tokens"].copy()),
            "response_mask": torch.from_numpy(b["mask"].copy()),
        },
        non_tensors={
            "uid": b["uid"],
            "traj_uid": b["traj"],
            "milestone": b["milestone"],
            "anchor_obs": b["anchor"],
            "rewards": b["step_rewards"],
        },
    )


def row_advantages(data, b):
    """The per-row value of the advantages (constant over each row's mask, 0 outside it)."""
    adv = data.batch["advantages"].double().numpy()
    per_row = adv[:, 0]
    np.testing.assert_array_equal(adv, per_row[:, None] * b["mask"])
    return per_row


def test_compute_step_advantages_on_penalised_rows():
    b = penalised_batch()
    uid, traj, scores = b["uid"], b["traj"], b["scores"]
    episode = episode_norm_reward(scores, uid, traj, remove_std=True)

    # beacon_official: the release's joint advantage, episode term plus segment term (w = 1).
    got = row_advantages(compute_step_advantages(data_proto(b), "beacon_official"), b)
    want = episode + segment_term(b["milestone"], uid, traj)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)

    # grpo on step rows: verl-agent's GRPO, every row's own score over its uid's rows.
    got = row_advantages(compute_step_advantages(data_proto(b), "grpo"), b)
    np.testing.assert_allclose(got, episode_norm_reward(scores, uid, traj, remove_std=False), rtol=0, atol=1e-5)
    # With compute_mean_std_cross_steps=False: each trajectory's first row.
    got = row_advantages(compute_step_advantages(data_proto(b), "grpo", config={"statistics": "trajectories"}), b)
    want = episode_norm_reward(scores, uid, traj, remove_std=False, cross_steps=False)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)

    # gigpo: zero step rewards leave the episode term alone ...
    zero = dict(b, step_rewards=np.zeros(len(uid)))
    got = row_advantages(compute_step_advantages(data_proto(zero), "gigpo"), zero)
    np.testing.assert_allclose(got, episode, rtol=0, atol=1e-5)
    # ... and with step rewards, the penalty moves only the episode term: the advantage minus
    # that of the unpenalised batch is the difference of the two episode terms.
    got = row_advantages(compute_step_advantages(data_proto(b), "gigpo"), b)
    clean = dict(b, tokens=np.zeros_like(b["tokens"]))
    r_tau = np.array([{"a": 1.0, "b": 0.0, "c": 1.0, "d": 1.0, "e": 0.0}[t] for t in traj])
    clean["tokens"][np.arange(len(uid)), b["mask"].sum(1) - 1] = r_tau
    base = row_advantages(compute_step_advantages(data_proto(clean), "gigpo"), clean)
    moved = episode - episode_norm_reward(r_tau, uid, traj, remove_std=True)
    np.testing.assert_allclose(got - base, moved, rtol=0, atol=1e-5)

    # The paper's beacon counts each trajectory once: differing rows are an error.
    with pytest.raises(ValueError, match=r"^row 2 carries terminal reward 1, but its trajectory's earlier rows carry 0.8999999"):
        compute_step_advantages(data_proto(b), "beacon")


def test_row_scores_keyword():
    b = penalised_batch()
    uid, traj, scores = b["uid"], b["traj"], b["scores"]
    kw = dict(traj_index=traj, milestones=b["milestone"])
    from_tokens, _ = beacon_rl.estimate("beacon_official", b["tokens"], b["mask"], uid, **kw)
    explicit, _ = beacon_rl.estimate("beacon_official", None, b["mask"], uid, row_scores=scores, **kw)
    np.testing.assert_allclose(explicit, from_tokens, rtol=0, atol=1e-6)
    both, _ = beacon_rl.estimate("beacon_official", b["tokens"], b["mask"], uid, row_scores=scores, **kw)
    np.testing.assert_allclose(both, from_tokens, rtol=0, atol=1e-6)
    off = scores.copy()
    off[4] += 0.5
    with pytest.raises(ValueError, match=r"^row 4: token_level_rewards sum to 1, but its row_scores entry is 1.5$"):
        beacon_rl.estimate("beacon_official", b["tokens"], b["mask"], uid, row_scores=off, **kw)
    with pytest.raises(ValueError, match="conflicting inputs: terminal_rewards and row_scores"):
        beacon_rl.estimate("beacon_official", b["tokens"], b["mask"], uid, row_scores=scores, terminal_rewards=scores, **kw)
    with pytest.raises(ValueError, match=r"^length mismatch: row_scores has 8 entries, expected 9$"):
        beacon_rl.estimate("beacon_official", b["tokens"], b["mask"], uid, row_scores=scores[:8], **kw)
    nan = scores.copy()
    nan[3] = np.nan
    with pytest.raises(ValueError, match=r"^non-finite value NaN in row_scores at index 3$"):
        beacon_rl.estimate("beacon_official", None, b["mask"], uid, row_scores=nan, **kw)


def release_module(tmp_path):
    """The release's ``core_migpo`` loaded from a copy in ``tmp_path``, or skip."""
    if not RELEASE.exists():
        pytest.skip(f"the BEACON release is not at {RELEASE.parent} (optional; the transcriptions above always run)")
    copy = tmp_path / "core_migpo.py"
    shutil.copy(RELEASE, copy)
    spec = importlib.util.spec_from_file_location("release_core_migpo", copy)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_against_the_release_itself(tmp_path):
    m = release_module(tmp_path)
    b = penalised_batch()
    tokens = torch.from_numpy(b["tokens"].astype(np.float32))
    mask = torch.from_numpy(b["mask"].astype(np.float32))
    # The transcription against the release's own episode_norm_reward, both statistics.
    for cross in (True, False):
        for remove_std in (True, False):
            want = m.episode_norm_reward(tokens, mask, b["uid"], b["traj"], EPS, remove_std, cross)[:, 0].double().numpy()
            got = episode_norm_reward(b["scores"], b["uid"], b["traj"], remove_std, cross)
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    # compute_migpo_advantage (mean_norm, γ = 0.95, w = 1) with the release's own step rewards
    # (WebShop path: milestone_achieved) against compute_step_advantages.
    proto = DataProto.from_dict(
        tensors={"responses": torch.zeros(len(b["uid"]), 1, dtype=torch.long)},
        non_tensors={"milestone_achieved": b["milestone"], "traj_uid": b["traj"]},
    )
    step_rewards = m.compute_migpo_step_rewards_dynamic(proto, gamma=0.95)
    want, _ = m.compute_migpo_advantage(
        tokens,
        step_rewards,
        mask,
        actions=None,
        index=b["uid"],
        traj_uid=b["traj"],
        gamma=0.95,
        milestone_achieved=b["milestone"],
    )
    got = compute_step_advantages(data_proto(b), "beacon_official").batch["advantages"]
    np.testing.assert_allclose(got.double().numpy(), want.double().numpy(), rtol=0, atol=1e-5)
