"""Differential tests: ``beacon_official`` and ``gigpo`` against the BEACON release's own code
(ZJU-REAL/BEACON at db9347f: ``migpo/core_migpo.py``, MiGPO; ``gigpo/core_gigpo.py``,
verl-agent's GiGPO) on arbitrary verl-agent step batches, not only the stored vectors of
``tests/data/official_*.json``.

The release is never part of this repository: when ``$BEACON_RELEASE/{migpo,gigpo}`` holds
it, each module is copied to a temp dir and imported from there at test time (it imports only
numpy, torch and verl's ``DataProto``); otherwise these tests skip. It is called as its trainer
calls it, with the workarounds ``python/bench/bench_verl.py`` lists: the milestone column goes to
``compute_migpo_advantage`` directly, the DataProto carries a zero ``responses`` (MiGPO) or
``input_ids`` (GiGPO) tensor for its device, and ``gamma`` is passed explicitly.

Batches (hypothesis): 1–3 task groups (``uid``) of 1–8 trajectories (``traj_uid``) of 1–12 steps,
rows grouped or interleaved (a trajectory's rows are its steps in row order, as both sides read
them), terminal rewards from a small set (ties, all-equal groups), verl-agent's invalid-action
penalty (``token_level_scores[i, last] -= 0.1``) on some rows, milestone flags anywhere,
anchors drawn from a small pool with near-duplicates (one edit) and long strings (difflib's
autojunk), similarity grouping at thresholds that ratios of the pool's strings hit exactly.

Tolerance. The release computes its step term in float32 (``compute_migpo_step_rewards_dynamic``
stores ``10 · γ^d`` in a float32 tensor; ``compute_step_discounted_returns`` runs the recursion in
``np.float32``; the step normalisation then runs on those float32 tensors), and its episode term
in the dtype of ``token_level_rewards`` (float32 in a trainer; float64 is drawn too). The crate
computes in float64. Instead of one number, each row gets the first-order bound of those
roundings (:func:`term_bound`): an input error δ (half an f32 ulp of ``10 · γ^d``, at most
``10 · 2⁻²⁴``; ``3 · 2⁻²⁴ · T · Σ|r|`` for a float32 return recursion of T steps) plus the
arithmetic of a group of n rows in unit roundoff u (mean: ``(n + 2) · u · max|v|``), passed
through the normalisation: ``2δ + arith`` for ``mean_norm``; for ``mean_std_norm`` the same plus
``√n · Δσ`` divided by ``σ_low + ε`` (``|z| < √n``). Where σ is 0 or tiny (all-equal or nearly
equal float32 values) the bound grows to the size of the release's float32 noise divided by
ε = 1e-6: there the release's answer is rounding noise (the crate's means are clamped to the
group's range, so an all-equal group gives exactly 0; ``src/estimator/gigpo.rs`` module docs),
and the comparison is only as strict as the release is accurate. Each row must satisfy
``|crate − release| ≤ 2 · (bound of A_E + w · bound of A_S)``. In ``mean_norm`` the bound is a few
1e-6 (README's parity vectors: 3.4e-6 / 6.2e-7 max relative error against the release's float64
run).

GiGPO's step groups are compared as partitions: the release's ``build_step_group`` against the
crate's groups, read from a probe run (γ = 0, no terminal reward, distinct random step rewards:
A_S = r − mean of the row's group, so rows of one group share ``r − A``).
"""

import contextlib
import importlib.util
import io
import math
import os
import pathlib
import shutil
import types
from collections import defaultdict
from difflib import SequenceMatcher

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pytest.importorskip("verl")

from beacon_rl.verl import compute_step_advantages  # noqa: E402
from verl import DataProto  # noqa: E402

# The release's directory, as python/bench/bench_verl.py reads it.
RELEASE = pathlib.Path(os.environ.get("BEACON_RELEASE", "/tmp/beacon-release"))
SOURCES = {"migpo": RELEASE / "migpo" / "core_migpo.py", "gigpo": RELEASE / "gigpo" / "core_gigpo.py"}
EPS = 1e-6
R_MS = 10.0  # the release's WebShop path hard-codes the milestone reward 10.0
U32 = 2.0**-24
U64 = 2.0**-52  # generous for float64 (the crate's arithmetic, and the release's in float64)
L = 4  # tokens per row
SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# The worst observed error over the run, for the report (pytest -s prints it).
OBSERVED = defaultdict(lambda: {"examples": 0, "rows": 0, "abs": 0.0, "rel": 0.0, "of_bound": 0.0, "tight": 0.0})


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """The release's two modules, imported from copies in a temp dir, or skip."""
    missing = [str(p) for p in SOURCES.values() if not p.exists()]
    if missing:
        pytest.skip(f"the BEACON release is not at {RELEASE} (missing {', '.join(missing)}; optional)")
    tmp = tmp_path_factory.mktemp("beacon_release")
    mods = {}
    for name, src in SOURCES.items():
        copy = tmp / f"release_core_{name}.py"
        shutil.copy(src, copy)
        spec = importlib.util.spec_from_file_location(f"release_core_{name}", copy)
        mods[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mods[name])
    yield types.SimpleNamespace(**mods)
    for name, stats in OBSERVED.items():
        print(
            f"\n{name}: {stats['examples']} examples, {stats['rows']} rows, max |Δ| {stats['abs']:.3e}, "
            f"max |Δ|/max(1,|A|) {stats['rel']:.3e}, max |Δ|/bound {stats['of_bound']:.3f}, "
            f"max |Δ| where the bound is below 1e-4 {stats['tight']:.3e}"
        )


# ----------------------------------------------------------------------------------------- #
# Batches
# ----------------------------------------------------------------------------------------- #

REWARDS = (0.0, 1.0, 0.5, -1.0, 10.0, 0.3, 2.7)  # 0.3 and 2.7 are inexact in binary
# Non-ASCII too: difflib compares code points (the crate must not compare UTF-8 bytes).
ALPHABET = "ab c\u00e9\u65e5\U0001f642"


def edit(draw, base):
    """``base`` with one character replaced, inserted or deleted."""
    i = draw(st.integers(0, len(base)))
    c = draw(st.sampled_from(ALPHABET))
    op = draw(st.sampled_from("rid"))
    return {"r": base[:i] + c + base[i + 1 :], "i": base[:i] + c + base[i:], "d": base[:i] + base[i + 1 :]}[op]


@st.composite
def anchor_pool(draw):
    """1–5 anchor texts of one task group: short random ones and one-edit variants of earlier
    ones (ratios near any threshold: a replacement in n characters gives (n − 1)/n exactly),
    and sometimes a long one (≥ 200 characters: difflib's autojunk drops the popular characters
    of the second string) with a one-edit variant."""
    pool = []
    for _ in range(draw(st.integers(1, 5))):
        if pool and draw(st.integers(0, 2)):
            pool.append(edit(draw, draw(st.sampled_from(pool))))
        else:
            pool.append(draw(st.text(ALPHABET, max_size=12)))
    if draw(st.integers(0, 3)) == 0:
        long = draw(st.text(ALPHABET, min_size=200, max_size=206))
        pool += [long, edit(draw, long)]
    return pool


def ratios(pool):
    """The difflib ratios in (0, 1) between the pool's texts (similarity thresholds that are hit
    exactly, in both argument orders)."""
    return {r for a in pool for b in pool if 0 < (r := SequenceMatcher(None, a, b).ratio()) < 1}


@st.composite
def step_batch(draw):
    """A verl-agent step batch as numpy columns (one row per step)."""
    penalty = draw(st.booleans())
    hits = set()
    trajs = []  # (uid, traj_uid, R, [per-step dicts])
    for g in range(draw(st.integers(1, 3))):
        uid = f"u{g}"
        pool = draw(anchor_pool())
        hits |= ratios(pool)
        n_traj = draw(st.integers(1, 8))
        same = draw(st.booleans())  # an all-equal group
        first = draw(st.sampled_from(REWARDS))
        for t in range(n_traj):
            reward = first if same else draw(st.sampled_from(REWARDS))
            steps = []
            for _ in range(draw(st.integers(1, 12))):
                steps.append(
                    dict(
                        milestone=draw(st.booleans()),
                        invalid=penalty and draw(st.booleans()),
                        anchor=pool[draw(st.integers(0, len(pool) - 1))],
                        step_reward=draw(st.sampled_from((0.0, 0.0, 1.0, 10.0, -0.5, 0.1))),
                        mask_len=draw(st.integers(1, L)),
                    )
                )
            trajs.append((uid, f"{uid}t{t}", reward, steps))
    # Row order: trajectories one after another, or any interleaving (each keeps its order).
    tags = [k for k, (_, _, _, steps) in enumerate(trajs) for _ in steps]
    if draw(st.booleans()):
        tags = draw(st.permutations(tags))
    pos = [0] * len(trajs)
    rows = []
    for k in tags:
        uid, traj, reward, steps = trajs[k]
        rows.append(dict(steps[pos[k]], uid=uid, traj=traj, reward=reward))
        pos[k] += 1
    n = len(rows)
    col = lambda key, dtype=object: np.array([r[key] for r in rows], dtype=dtype)  # noqa: E731
    lens = col("mask_len", np.int64)
    mask = (np.arange(L)[None, :] < lens[:, None]).astype(np.int64)
    # verl-agent: the terminal reward on each step's last valid token, float32; then
    # apply_invalid_action_penalty subtracts 0.1 there (in float32) on invalid rows.
    tokens = torch.zeros(n, L, dtype=torch.float32)
    last = torch.from_numpy(lens - 1)
    tokens[torch.arange(n), last] = torch.tensor(col("reward", np.float64), dtype=torch.float32)
    tokens[torch.arange(n), last] -= 0.1 * torch.tensor(col("invalid", np.float64), dtype=torch.float32)
    dtype = draw(st.sampled_from((torch.float32, torch.float64)))
    return dict(
        uid=col("uid"),
        traj=col("traj"),
        milestone=col("milestone", bool),
        anchor=col("anchor"),
        step_reward=col("step_reward", np.float64),
        traj_len=np.array([len(trajs[k][3]) for k in tags]),
        mask=torch.from_numpy(mask),
        tokens=tokens.to(dtype),
        ratios=sorted(hits),
    )


def data_proto(b, step_rewards=None, tokens=None):
    return DataProto.from_dict(
        tensors={
            "token_level_rewards": (b["tokens"] if tokens is None else tokens).clone(),
            "response_mask": b["mask"].clone(),
        },
        non_tensors={
            "uid": b["uid"],
            "traj_uid": b["traj"],
            "milestone": b["milestone"],
            "anchor_obs": b["anchor"],
            "rewards": b["step_reward"] if step_rewards is None else step_rewards,
        },
    )


def row_values(adv, mask):
    """The per-row value of token advantages (constant on the mask, 0 off it)."""
    adv = adv.double().numpy()
    per_row = adv[:, 0]  # every row has at least one valid token, the first
    np.testing.assert_array_equal(adv, per_row[:, None] * mask.numpy())
    return per_row


def quiet(fn, *args, **kwargs):
    """The release prints group-size summaries and warnings on every call."""
    with contextlib.redirect_stdout(io.StringIO()):
        return fn(*args, **kwargs)


# ----------------------------------------------------------------------------------------- #
# The tolerance
# ----------------------------------------------------------------------------------------- #


def term_bound(values, groups, delta_in, u, mode, singleton_is_unit):
    """Per-row bound on |release − crate| of one normalised term (before its weight).

    ``values``: the term's inputs as the release holds them (widened to float64);
    ``groups``: each row's normalisation group; ``delta_in``: per-row bound on the error of the
    release's input; ``u``: unit roundoff of the release's arithmetic for this term (U64 is added
    for the crate's). ``singleton_is_unit``: a one-row group uses μ = 0, σ = 1 (episode term)
    rather than its own mean (step term: exactly 0 on both sides)."""
    u = u + U64
    out = np.empty(len(values))
    members = defaultdict(list)
    for i, g in enumerate(groups):
        members[g].append(i)
    for rows in members.values():
        v, n = values[rows], len(rows)
        d_in = float(np.max(delta_in[rows]))
        big = float(np.max(np.abs(v)))
        if n == 1:
            out[rows] = (d_in + 2 * u * big) if singleton_is_unit else 0.0
            continue
        arith = (n + 2) * u * big  # mean over n rows, then one subtraction
        d_centred = 2 * d_in + arith
        if mode == "mean_norm":
            out[rows] = d_centred
            continue
        sigma = float(np.std(v, ddof=1))
        d_sigma = math.sqrt(2) * d_in + 2 * arith
        sigma_low = max(0.0, sigma - d_sigma)
        z = math.sqrt(n)  # |z| < √n for any z-score of n values
        out[rows] = (d_centred + z * d_sigma) / (sigma_low + EPS) + 2 * u * z
    return out


def compare(name, got, want, tol):
    """got (crate) against want (release) row by row, within tol; records the worst."""
    assert not np.isnan(want).any(), "the release gave NaN on finite input"
    err = np.abs(got - want)
    bad = np.flatnonzero(err > tol)
    assert bad.size == 0, (
        f"{name}: rows {bad.tolist()} differ: crate {got[bad].tolist()} vs release {want[bad].tolist()} "
        f"(|Δ| {err[bad].tolist()}, bound {tol[bad].tolist()})"
    )
    s = OBSERVED[name]
    s["examples"] += 1
    s["rows"] += len(got)
    s["abs"] = max(s["abs"], float(err.max()))
    s["rel"] = max(s["rel"], float((err / np.maximum(1.0, np.abs(want))).max()))
    s["of_bound"] = max(s["of_bound"], float((err / tol).max()))
    s["tight"] = max([s["tight"], *err[tol <= 1e-4]])


def episode_bound(b, mode):
    scores = b["tokens"].double().sum(-1).numpy()  # both sides read the same values
    u = U32 if b["tokens"].dtype == torch.float32 else U64
    return term_bound(scores, list(b["uid"]), np.zeros(len(scores)), u, mode, singleton_is_unit=True)


def output_rounding(want):
    """The last operations (w·A_S, A_E + w·A_S, × mask) round in float32 in the release."""
    return 4 * U32 * (np.abs(want) + 1.0)


# ----------------------------------------------------------------------------------------- #
# beacon_official against the release's MiGPO
# ----------------------------------------------------------------------------------------- #


def release_migpo(m, b, gamma, w, mode):
    """The release's WebShop path, as its ray_trainer calls it: ``compute_migpo_step_rewards``
    (``milestone_achieved`` → ``compute_migpo_step_rewards_dynamic``), then
    ``compute_migpo_advantage`` with the flags."""
    n = len(b["uid"])
    proto = DataProto.from_dict(
        tensors={"responses": torch.zeros(n, 1, dtype=torch.long)},
        non_tensors={"milestone_achieved": b["milestone"], "traj_uid": b["traj"]},
    )
    step_rewards = m.compute_migpo_step_rewards(proto, gamma=gamma)
    adv, ret = quiet(
        m.compute_migpo_advantage,
        b["tokens"].clone(),
        step_rewards,
        b["mask"].clone(),
        actions=None,
        index=b["uid"],
        traj_uid=b["traj"],
        gamma=gamma,
        epsilon=EPS,
        step_advantage_w=w,
        mode=mode,
        milestone_achieved=b["milestone"],
    )
    assert adv is ret
    return step_rewards, adv


def official_config(gamma, w, mode):
    return {
        "flavour": {"official": {"norm": mode}},
        "segment_decay": gamma,
        "segment_weight": w,
        "std_eps": EPS,
        "milestone_reward": R_MS,
    }


GAMMAS = (0.95, 0.9, 0.5, 1.0, 0.0)
WEIGHTS = (1.0, 1.0, 0.5, 10.0, 0.0)
MODES = ("mean_norm", "mean_std_norm")


@pytest.mark.parametrize("mode", MODES)
@SETTINGS
@given(b=step_batch(), gamma=st.sampled_from(GAMMAS), w=st.sampled_from(WEIGHTS))
def test_beacon_official_against_the_release(release, b, gamma, w, mode):
    step_rewards, adv = release_migpo(release.migpo, b, gamma, w, mode)
    want = row_values(adv, b["mask"])
    data = compute_step_advantages(data_proto(b), "beacon_official", config=official_config(gamma, w, mode))
    assert data.batch["advantages"].dtype == b["tokens"].dtype
    got = row_values(data.batch["advantages"], b["mask"])

    # The release's segment groups (uid, milestones of the trajectory before the row).
    segments = list(release.migpo.build_segment_groups_dynamic(b["milestone"], b["uid"], b["traj"]))
    shaped = step_rewards.double().numpy()
    step = term_bound(shaped, segments, np.full(len(shaped), R_MS * U32), U32, mode, singleton_is_unit=False)
    tol = 2 * (episode_bound(b, mode) + w * step) + output_rounding(want)
    compare(f"beacon_official/{mode}/{b['tokens'].dtype}", got, want, tol)


# ----------------------------------------------------------------------------------------- #
# gigpo against verl-agent's GiGPO (as the release ships it)
# ----------------------------------------------------------------------------------------- #


def release_gigpo(g, b, gamma, w, mode, threshold):
    """``compute_step_discounted_returns`` then ``compute_gigpo_outcome_advantage``, as
    verl-agent's trainer calls them, and ``build_step_group`` for the partition."""
    n = len(b["uid"])
    proto = DataProto.from_dict(
        tensors={"input_ids": torch.zeros(n, 1, dtype=torch.long)},
        non_tensors={"rewards": b["step_reward"], "traj_uid": b["traj"], "active_masks": np.ones(n, dtype=bool)},
    )
    returns = g.compute_step_discounted_returns(proto, gamma)
    similar = threshold is not None
    thresh = threshold if similar else 0.95
    adv, ret = quiet(
        g.compute_gigpo_outcome_advantage,
        b["tokens"].clone(),
        returns,
        b["mask"].clone(),
        b["anchor"],
        b["uid"],
        b["traj"],
        EPS,
        w,
        mode,
        similar,
        thresh,
    )
    assert adv is ret
    groups = quiet(g.build_step_group, b["anchor"], b["uid"], similar, thresh)
    return returns, adv, groups


def gigpo_config(gamma, w, mode, threshold):
    return {
        "step_decay": gamma,
        "step_advantage_weight": w,
        "norm": mode,
        "std_eps": EPS,
        "grouping": "exact" if threshold is None else {"similarity": {"threshold": threshold}},
    }


def partition(keys):
    """Labels by first appearance: two rows share a label iff their keys are equal."""
    first = {}
    return [first.setdefault(k, len(first)) for k in keys]


def crate_step_groups(b, threshold):
    """The crate's step groups, from a probe run: γ = 0 (returns = step rewards), no episode
    reward, w = 1, mean_norm, distinct random step rewards r; then A = r − mean(group), and
    rows of one group (only they, almost surely) share r − A."""
    n = len(b["uid"])
    probe = np.random.default_rng(n).uniform(1.0, 2.0, n)
    data = data_proto(b, step_rewards=probe, tokens=torch.zeros(n, L, dtype=torch.float64))
    compute_step_advantages(data, "gigpo", config=gigpo_config(0.0, 1.0, "mean_norm", threshold))
    means = probe - row_values(data.batch["advantages"], b["mask"])
    labels = []
    for i in range(n):
        same = np.flatnonzero(np.abs(means[:i] - means[i]) < 1e-9)
        labels.append(labels[same[0]] if same.size else i)
    return partition(labels)


def returns_delta(b):
    """Bound on the error of the release's float32 return recursion, per row: each of the
    trajectory's T steps rounds r and γ to float32, then γ·R and r + γ·R, which adds at most
    u·(|r_t| + 2|R_t+1| + |R_t|) ≤ 3u·Σ|r| (sums over the trajectory), and γ ≤ 1 carries the
    earlier error: T · 3u · Σ|r|."""
    total = defaultdict(float)
    for t, r in zip(b["traj"], b["step_reward"]):
        total[t] += abs(r)
    return np.array([3 * U32 * n * total[t] for t, n in zip(b["traj"], b["traj_len"])])


def check_gigpo(release, b, gamma, w, mode, threshold):
    returns, adv, groups = release_gigpo(release.gigpo, b, gamma, w, mode, threshold)
    want = row_values(adv, b["mask"])
    crate, peer = crate_step_groups(b, threshold), partition(groups)
    assert crate == peer, f"step groups differ: crate {crate} vs release {peer} (anchors {list(b['anchor'])})"
    data = compute_step_advantages(data_proto(b), "gigpo", config=gigpo_config(gamma, w, mode, threshold))
    got = row_values(data.batch["advantages"], b["mask"])
    step = term_bound(returns.double().numpy(), list(groups), returns_delta(b), U32, mode, singleton_is_unit=False)
    tol = 2 * (episode_bound(b, mode) + w * step) + output_rounding(want)
    compare(f"gigpo/{'exact' if threshold is None else 'similarity'}/{mode}/{b['tokens'].dtype}", got, want, tol)


@pytest.mark.parametrize("mode", MODES)
@SETTINGS
@given(b=step_batch(), gamma=st.sampled_from(GAMMAS), w=st.sampled_from(WEIGHTS))
def test_gigpo_exact_against_the_release(release, b, gamma, w, mode):
    check_gigpo(release, b, gamma, w, mode, None)


# Fixed thresholds (the peer's default 0.95, extremes), and more often one of the ratios between
# the batch's own anchors, so that a ratio equal to the threshold (">=" against ">") is common.
THRESHOLDS = (0.95, 0.9, 0.5, 0.99, 0.01)


@pytest.mark.parametrize("mode", MODES)
@SETTINGS
@given(b=step_batch(), gamma=st.sampled_from(GAMMAS), w=st.sampled_from(WEIGHTS), data=st.data())
def test_gigpo_similarity_against_the_release(release, b, gamma, w, mode, data):
    hit = bool(b["ratios"]) and data.draw(st.integers(0, 2), label="hit") > 0
    threshold = data.draw(st.sampled_from(b["ratios"] if hit else THRESHOLDS), label="threshold")
    check_gigpo(release, b, gamma, w, mode, threshold)


# ----------------------------------------------------------------------------------------- #
# Where the release crashes, gives NaN or silently computes on bad input
# ----------------------------------------------------------------------------------------- #


def small_batch():
    """One task, trajectories a (rows 0, 1: success) and b (rows 2, 3: failure)."""
    tokens = torch.zeros(4, L)
    tokens[:, -1] = torch.tensor([1.0, 1.0, 0.0, 0.0])
    return dict(
        uid=np.array(["g"] * 4, dtype=object),
        traj=np.array(["a", "a", "b", "b"], dtype=object),
        milestone=np.array([True, False, False, True]),
        anchor=np.array(["s", "t", "s", "t"], dtype=object),
        step_reward=np.array([0.0, 1.0, 0.0, 0.0]),
        traj_len=np.array([2, 2, 2, 2]),
        mask=torch.ones(4, L, dtype=torch.int64),
        tokens=tokens,
    )


def test_small_batch_agrees(release):
    """The batch the cases below spoil, computed alike by both (so each difference below is the
    spoiled input's)."""
    b = small_batch()
    want = row_values(release_migpo(release.migpo, b, 0.95, 1.0, "mean_norm")[1], b["mask"])
    got = row_values(compute_step_advantages(data_proto(b), "beacon_official").batch["advantages"], b["mask"])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    want = row_values(release_gigpo(release.gigpo, b, 0.95, 1.0, "mean_norm", None)[1], b["mask"])
    got = row_values(compute_step_advantages(data_proto(b), "gigpo").batch["advantages"], b["mask"])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", ["beacon_official", "gigpo"])
def test_non_finite_rewards_nan_in_the_release_valueerror_here(release, name):
    b = small_batch()
    b["tokens"][2, -1] = float("nan")
    if name == "gigpo":
        want = release_gigpo(release.gigpo, b, 0.95, 1.0, "mean_norm", None)[1]
    else:
        want = release_migpo(release.migpo, b, 0.95, 1.0, "mean_norm")[1]
    assert torch.isnan(want).all()  # the NaN spreads to the whole task group
    with pytest.raises(ValueError, match=r"^non-finite value NaN in token_level_rewards at index 11$"):
        compute_step_advantages(data_proto(b), name)


def test_infinite_step_reward_gigpo(release):
    b = small_batch()
    b["step_reward"][1] = np.inf
    want = release_gigpo(release.gigpo, b, 0.95, 1.0, "mean_norm", None)[1]
    assert not torch.isfinite(want).any()  # inf returns, then inf − inf
    with pytest.raises(ValueError, match=r"^non-finite value inf in step_rewards at index 1$"):
        compute_step_advantages(data_proto(b), "gigpo")


@pytest.mark.parametrize("threshold", [0.0, 1.0])
def test_similarity_threshold_outside_the_open_unit_interval(release, threshold):
    b = small_batch()
    with pytest.raises(AssertionError, match="similarity_thresh should be in"):
        release_gigpo(release.gigpo, b, 0.95, 1.0, "mean_norm", threshold)
    with pytest.raises(ValueError, match=r"grouping\.threshold"):
        compute_step_advantages(data_proto(b), "gigpo", config=gigpo_config(0.95, 1.0, "mean_norm", threshold))


@pytest.mark.parametrize("name", ["beacon_official", "gigpo"])
def test_trajectory_under_two_uids(release, name):
    """A deliberate difference: the release computes (its step rewards and returns follow the
    traj_uid across both tasks, its statistics the uid) where the crate refuses the batch."""
    b = small_batch()
    b["uid"] = np.array(["g", "h", "g", "g"], dtype=object)  # trajectory a in tasks g and h
    if name == "gigpo":
        want = release_gigpo(release.gigpo, b, 0.95, 1.0, "mean_norm", None)[1]
    else:
        want = release_migpo(release.migpo, b, 0.95, 1.0, "mean_norm")[1]
    assert torch.isfinite(want).all()
    with pytest.raises(ValueError, match=r"^trajectory at row 1 already belongs to another group"):
        compute_step_advantages(data_proto(b), name)


@pytest.mark.parametrize("name", ["beacon_official", "gigpo"])
def test_empty_batch(release, name):
    """Both return empty tensors (the release with numpy's "mean of empty slice" warnings)."""
    b = {k: v[:0] for k, v in small_batch().items()}
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning) if name == "gigpo" else contextlib.nullcontext():
        if name == "gigpo":
            want = release_gigpo(release.gigpo, b, 0.95, 1.0, "mean_norm", None)[1]
        else:
            want = release_migpo(release.migpo, b, 0.95, 1.0, "mean_norm")[1]
    assert want.shape == (0, L)
    got = compute_step_advantages(data_proto(b), name).batch["advantages"]
    assert tuple(got.shape) == (0, L)


def test_non_text_anchors(release):
    """The release's exact grouping hashes any anchor (``to_hashable``: ints, tuples, arrays);
    the binding reads ``str`` anchors only (a TypeError naming the row; the Rust API groups any
    ``Hash + Eq`` key through ``Gigpo::compute_by_key``). In similarity mode both refuse them
    (the release with ValueError, the binding with TypeError, as it does for every wrong type)."""
    b = small_batch()
    b["anchor"] = np.array([1, 2, 1, 2], dtype=object)
    want = row_values(release_gigpo(release.gigpo, b, 0.95, 1.0, "mean_norm", None)[1], b["mask"])
    as_text = dict(b, anchor=b["anchor"].astype(str).astype(object))
    got = row_values(compute_step_advantages(data_proto(as_text), "gigpo").batch["advantages"], b["mask"])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)  # the same grouping as text
    with pytest.raises(TypeError, match=r"^anchor_obs: row 0 is int, expected str$"):
        compute_step_advantages(data_proto(b), "gigpo")
    with pytest.raises(ValueError, match="Only text-based observations"):
        release_gigpo(release.gigpo, b, 0.95, 1.0, "mean_norm", 0.9)
    with pytest.raises(TypeError, match=r"^anchor_obs: row 0 is int, expected str$"):
        compute_step_advantages(data_proto(b), "gigpo", config=gigpo_config(0.95, 1.0, "mean_norm", 0.9))


def test_lone_surrogate_anchor(release):
    """A deliberate difference: Python strings may hold lone surrogates, which the release's
    grouping compares like any code point; the binding passes anchors to Rust as UTF-8, which
    cannot hold them, and raises a ValueError naming the row."""
    b = small_batch()
    b["anchor"] = np.array(["s\ud800", "t", "s\ud800", "t"], dtype=object)
    for threshold in (None, 0.9):
        want = row_values(release_gigpo(release.gigpo, b, 0.95, 1.0, "mean_norm", threshold)[1], b["mask"])
        assert np.isfinite(want).all()
        with pytest.raises(ValueError, match=r"^anchor_obs: row 0 has no UTF-8 form \(.*surrogates not allowed"):
            compute_step_advantages(data_proto(b), "gigpo", config=gigpo_config(0.95, 1.0, "mean_norm", threshold))
