"""Differential tests: the crate's verl estimators against verl 0.9.1's own functions.

The stored vectors (tests/data/verl_public.json, test_parity.py) pin 76 hand-picked cases.
Here hypothesis draws arbitrary batches and every estimator of ``beacon_rl.verl_names()`` runs
twice on each: verl's own function from ``verl.trainer.ppo.core_algos`` (float64 torch
tensors, int64 mask, uid an object array of strings, as verl's trainer passes them) and
``beacon_rl.estimate`` (float64 numpy arrays; the mask as int64, uint8 or bool). Batches have
1 to 4 groups of 1 to 8 rows (singletons included), laid out in runs, round-robin or
shuffled; widths 1 to 24; mask rows full, prefixes, empty or arbitrary bit patterns
(interior gaps); rewards outcome-only, dense (masked tokens included), tied within a group,
all zero, or 0/1, at magnitudes from 1e-300 to 1e150; each estimator's parameters (ε, γ, λ,
f_norm, the normalisation flag, OTB's zero tail, IS weights and consistent or arbitrary
policy statistics) drawn too.

The contract, element by element, for advantages and returns:

- verl returns finite numbers: the crate returns float64 of the same shape, finite, with
  |ours − verl| ≤ TOL · max(1, |verl|, cond), TOL = 1e-12;
- verl raises, or returns NaN/±inf anywhere: the crate raises ValueError (a typed error,
  never a non-finite number).

Why 1e-12: both sides compute in float64 from the same inputs, and the crate follows verl's
formulas including its float32 steps (``grpo_vectorized``'s statistics, the whitening's token
count, ``gpg``'s α). What may differ is the order of additions (torch's vectorised reductions
vs the crate's fixed order, the crate's 8-lane row sums): a sum of N ≤ 32 × 24 terms then
differs by at most N · 2^-53 ≈ 8.5e-14 of the sum of the magnitudes added (observed: below
1e-15). Any change of formula (a Bessel factor, an ε moved or resized, a singleton rule,
float32 vs float64 statistics) moves results by 1e-8 relative or more, far above TOL.
``cond`` carries that rounding through cancellation: per element, the sum of the magnitudes
entering the formula's sums over the divisor applied after the subtraction (σ + ε for the
GRPO family, √(σ² + 1e-8) for batch whitening, |Σ W + ε| for OTB), computed here from the
inputs, independently of both implementations. Tied groups at magnitude 1e150 leave only
rounding noise in s − μ (both sides return different noise, correctly); cond admits that and
nothing more. Over 3,000 examples per estimator (42,000 in all) the largest |Δ| was 2.5e-4
of the bound, 1.7e-2 for OTB with arbitrary (sign-mixed) weights, and 0.25 of grpo_vectorized's
float32 bound below.

One estimator needs a float32 term: ``grpo_vectorized``'s σ_g is a float32 ``torch.sqrt``,
which torch's CPU build does not always round correctly, so its advantages may differ by
a float32 ulp of σ: |Δ| ≤ TOL32 · |verl| (TOL32 = 2^-21, two float32 ulps with margin), see
``test_grpo_vectorized_sigma_is_the_correctly_rounded_float32_root``.

The documented differences from verl (numeric-string uids in ``grpo_vectorized``, batch
whitening on overflowing sums) are encoded as hand-sized cases at the end of this file.

150 examples per estimator (~20 s; ``BEACON_DIFFTEST_EXAMPLES`` raises it for a longer hunt,
``pytest -s`` prints per-estimator counts and errors).
"""

from __future__ import annotations

import math
import os
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pytest.importorskip("verl")

import beacon_rl  # noqa: E402
from verl.trainer.ppo import core_algos as ca  # noqa: E402

TOL = 1e-12
# grpo_vectorized's σ_g is a float32 torch.sqrt, which torch's CPU build need not round
# correctly (see test_grpo_vectorized_sigma_is_the_correctly_rounded_float32_root).
TOL32 = 2.0**-21
STATS: dict = {}
EXAMPLES = int(os.environ.get("BEACON_DIFFTEST_EXAMPLES", "150"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Largest magnitude 1e150: squares of sums of 24 · 32 such values stay finite, so no
# estimator's sums overflow (that path is a documented difference, tested on its own).
SCALES = [1.0, 1.0, 1.0, 1e-3, 1e3, 1e-8, 1e8, 1e-150, 1e150, 1e-300]

# ---------------------------------------------------------------------------------------
# Batches
# ---------------------------------------------------------------------------------------

UID_ALPHABET = "abcdef0123456789-"


@st.composite
def uids(draw, count):
    """``count`` distinct uid strings, uuid-like (never purely numeric: see
    test_numeric_string_uids_are_distinct_groups)."""
    body = st.text(UID_ALPHABET, min_size=0, max_size=12)
    keys = draw(st.lists(body, min_size=count, max_size=count, unique=True))
    return ["u" + k for k in keys]


@st.composite
def masks(draw, rows, width):
    """One mask row per kind: full, prefix (possibly empty), empty, or arbitrary bits."""
    mask = np.zeros((rows, width), dtype=np.int64)
    for r in range(rows):
        kind = draw(st.sampled_from(["full", "prefix", "prefix", "empty", "bits", "bits"]))
        if kind == "full":
            mask[r] = 1
        elif kind == "prefix":
            mask[r, : draw(st.integers(0, width))] = 1
        elif kind == "bits":
            mask[r] = draw(st.lists(st.integers(0, 1), min_size=width, max_size=width))
    return mask


def unit_floats():
    return st.floats(-1.0, 1.0, allow_nan=False, allow_infinity=False)


@st.composite
def rewards_for(draw, labels, mask, scale):
    """Token rewards per group kind: outcome on the last valid token, dense, tied (every
    row of the group the same token row), all zero, or 0/1 outcomes."""
    rows, width = mask.shape
    out = np.zeros((rows, width), dtype=np.float64)
    for g in sorted(set(labels)):
        members = [r for r in range(rows) if labels[r] == g]
        kind = draw(st.sampled_from(["outcome", "dense", "tied", "zeros", "binary"]))
        if kind == "tied":
            row = np.array(draw(st.lists(unit_floats(), min_size=width, max_size=width))) * scale
            out[members] = row
            continue
        for r in members:
            valid = np.flatnonzero(mask[r])
            last = int(valid[-1]) if valid.size else width - 1
            if kind == "outcome":
                out[r, last] = draw(unit_floats()) * scale
            elif kind == "binary":
                out[r, last] = float(draw(st.integers(0, 1))) * scale
            elif kind == "dense":
                out[r] = np.array(draw(st.lists(unit_floats(), min_size=width, max_size=width))) * scale
    return out


@st.composite
def batches(draw, min_group=1):
    sizes = draw(st.lists(st.integers(min_group, 8), min_size=1, max_size=4))
    labels = [g for g, n in enumerate(sizes) for _ in range(n)]
    layout = draw(st.sampled_from(["runs", "round_robin", "shuffled"]))
    if layout == "round_robin":
        labels = [g for k in range(max(sizes)) for g, n in enumerate(sizes) if k < n]
    elif layout == "shuffled":
        labels = draw(st.permutations(labels))
    rows = len(labels)
    # Past 8 tokens the crate's row sums run in 8 lanes.
    width = draw(st.one_of(st.integers(1, 8), st.integers(9, 24)))
    keys = draw(uids(len(sizes)))
    mask = draw(masks(rows, width))
    scale = draw(st.sampled_from(SCALES))
    rewards = draw(rewards_for(labels, mask, scale))
    index = np.array([keys[g] for g in labels], dtype=object)
    # verl gets its int64 mask; the crate any mask dtype it reads (same 0/1 values).
    crate_mask = draw(st.sampled_from([np.int64, np.uint8, bool]))
    return SimpleNamespace(
        rewards=rewards, mask=mask, index=index, labels=labels, scale=scale, crate_mask=crate_mask
    )


# ---------------------------------------------------------------------------------------
# The two sides
# ---------------------------------------------------------------------------------------


def t(a):
    return torch.tensor(a, dtype=torch.float64)


def verl_run(name, b, p):
    """verl 0.9.1's own function on float64 tensors and an int64 mask (fresh copies)."""
    r, m, idx = t(b.rewards), torch.tensor(b.mask, dtype=torch.int64), b.index.copy()
    if name in ("grpo", "grpo_vectorized", "gdpo"):
        fn = {
            "grpo": ca.compute_grpo_outcome_advantage,
            "grpo_vectorized": ca.compute_grpo_vectorized_outcome_advantage,
            "gdpo": ca.compute_gdpo_outcome_advantage,
        }[name]
        return fn(r, m, idx, epsilon=p["epsilon"], norm_adv_by_std_in_grpo=p["norm"])
    if name == "grpo_passk":
        # verl reads the flag from the config, not from the argument.
        return ca.compute_grpo_passk_outcome_advantage(
            r, m, idx, epsilon=p["epsilon"], config={"norm_adv_by_std_in_grpo": p["norm"]}
        )
    if name in ("rloo", "rloo_vectorized", "opo", "reinforce_plus_plus_baseline"):
        return ca.get_adv_estimator_fn(name)(token_level_rewards=r, response_mask=m, index=idx)
    if name == "gpg":
        return ca.compute_gpg_outcome_advantage(r, m, idx, f_norm=p["f_norm"])
    if name == "reinforce_plus_plus":
        return ca.compute_reinforce_plus_plus_outcome_advantage(r, m, config=SimpleNamespace(gamma=p["gamma"]))
    if name == "remax":
        return ca.compute_remax_outcome_advantage(r, t(p["baselines"]), m)
    if name == "gae":
        return ca.compute_gae_advantage_return(r, t(p["values"]), m, gamma=p["gamma"], lam=p["lam"])
    if name in ("optimal_token_baseline", "tir_optimal_token_baseline"):
        w = None if p["is_weights"] is None else t(p["is_weights"])
        return ca.get_adv_estimator_fn(name)(
            token_level_rewards=r,
            response_mask=m,
            index=idx,
            old_log_probs=t(p["old_log_probs"]),
            sum_pi_squared=t(p["sum_pi_squared"]),
            rollout_is_weights=w,
            handle_zero_tail=p["zero_tail"],
            epsilon=p["epsilon"],
        )
    raise AssertionError(f"no verl runner for {name}")


def crate_run(name, b, p):
    """beacon_rl.estimate on float64 numpy arrays, parameters in the crate's serde names."""
    mask = b.mask.astype(getattr(b, "crate_mask", np.int64))
    kwargs = dict(token_level_rewards=b.rewards.copy(), response_mask=mask, index=b.index.copy())
    config = {}
    if name in ("grpo", "grpo_vectorized", "grpo_passk", "gdpo"):
        config = {"std_eps": p["epsilon"], "norm": "mean_std_norm" if p["norm"] else "mean_norm"}
    elif name == "gpg":
        config = {"f_norm": p["f_norm"]}
    elif name == "reinforce_plus_plus":
        config = {"discount": p["gamma"]}
    elif name == "remax":
        kwargs["reward_baselines"] = p["baselines"].copy()
    elif name == "gae":
        config = {"discount": p["gamma"], "gae_lambda": p["lam"]}
        kwargs["values"] = p["values"].copy()
    elif name in ("optimal_token_baseline", "tir_optimal_token_baseline"):
        config = {
            "zero_tail": "zero_baseline" if p["zero_tail"] else "keep_baseline",
            "denominator_eps": p["epsilon"],
        }
        kwargs["old_log_probs"] = p["old_log_probs"].copy()
        kwargs["sum_pi_squared"] = p["sum_pi_squared"].copy()
        if p["is_weights"] is not None:
            kwargs["rollout_is_weights"] = p["is_weights"].copy()
    return beacon_rl.estimate(name, config=config, **kwargs)


@st.composite
def params_for(draw, name, b):
    """The estimator's parameters and extra inputs for batch ``b``."""
    rows, width = b.mask.shape
    matrix = lambda lo, hi: np.array(  # noqa: E731
        draw(st.lists(st.floats(lo, hi, allow_nan=False), min_size=rows * width, max_size=rows * width))
    ).reshape(rows, width)
    p = {}
    if name in ("grpo", "grpo_vectorized", "grpo_passk", "gdpo"):
        p["epsilon"] = draw(st.sampled_from([1e-6, 1e-6, 1e-3, 1e-10]))
        p["norm"] = draw(st.booleans())
    elif name == "gpg":
        p["f_norm"] = draw(st.sampled_from([1.0, 0.5, 3.0]))
    elif name == "reinforce_plus_plus":
        p["gamma"] = draw(st.sampled_from([1.0, 0.99, 0.5, 0.0]))
    elif name == "remax":
        p["baselines"] = np.array(draw(st.lists(unit_floats(), min_size=rows, max_size=rows))) * b.scale
    elif name == "gae":
        p["gamma"] = draw(st.sampled_from([1.0, 0.99, 0.5, 0.0]))
        p["lam"] = draw(st.sampled_from([1.0, 0.95, 0.5, 0.0]))
        p["values"] = matrix(-1.0, 1.0) * b.scale
    elif name in ("optimal_token_baseline", "tir_optimal_token_baseline"):
        if draw(st.booleans()):
            # Consistent policy statistics: π = exp(log π) ∈ (0, 1], π² ≤ Σπ² ≤ 1, so each
            # token's weight 1 − 2π + Σπ² ≥ (1 − π)² ≥ 0.
            logp = matrix(-30.0, 0.0)
            pi = np.exp(logp)
            p["old_log_probs"] = logp
            p["sum_pi_squared"] = pi**2 + matrix(0.0, 1.0) * (1.0 - pi**2)
            p["is_weights"] = matrix(0.0, 3.0) if draw(st.booleans()) else None
        else:
            # Arbitrary finite ones (weights of either sign, Σ W near 0).
            p["old_log_probs"] = matrix(-10.0, 3.0)
            p["sum_pi_squared"] = matrix(-2.0, 2.0)
            p["is_weights"] = matrix(-3.0, 3.0) if draw(st.booleans()) else None
        p["zero_tail"] = draw(st.booleans())
        p["epsilon"] = draw(st.sampled_from([1e-8, 1e-8, 1e-3]))
    return p


# ---------------------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------------------


GRPO_LIKE = ("grpo", "grpo_vectorized", "grpo_passk", "gdpo")
GROUPED = GRPO_LIKE + ("rloo", "rloo_vectorized", "opo", "gpg", "reinforce_plus_plus_baseline")
WHITENED = ("gdpo", "reinforce_plus_plus_baseline", "reinforce_plus_plus", "gae")


def cond(name, b, p, want):
    """Per element, the magnitude of what the formula adds up before its last subtraction,
    over the divisor it applies after it: the scale (in units of TOL) that a different order
    of additions can reach in the output. From the inputs (and, for the whitened estimators,
    verl's own un-whitened returns), never from the crate's output."""
    rows, width = b.mask.shape
    mask = b.mask.astype(bool)
    labels = np.array(b.labels)
    s, s_abs = b.rewards.sum(axis=1), np.abs(b.rewards).sum(axis=1)
    if name in GROUPED:
        # Stage 1: per row, Σ|s| over its group (mean and score) over σ + ε or 1.
        c, x = np.empty(rows), np.empty(rows)
        for g in set(b.labels):
            sel = labels == g
            n, mag = int(sel.sum()), s_abs[sel].sum() + s_abs[sel]
            mu = s[sel].mean() if n > 1 else 0.0
            div = 1.0
            if name in GRPO_LIKE and p["norm"]:
                div = (float(np.std(s[sel], ddof=1)) if n > 1 else 1.0) + p["epsilon"]
            c[sel] = mag / div * (n / (n - 1) if name.startswith("rloo") and n > 1 else 1.0)
            x[sel] = (s[sel] - mu) / div
        if name == "gpg":
            c *= rows / max(1, np.count_nonzero(s)) / p["f_norm"]
        if name in WHITENED:
            return whitened_cond(np.where(mask, x[:, None], 0.0), mask, c[:, None])
        return np.broadcast_to(c[:, None], (rows, width))
    if name == "reinforce_plus_plus":
        return whitened_cond(want[1], mask, s_abs[:, None])
    if name == "gae":
        mag = (np.abs(b.rewards) + 2 * np.abs(p["values"])).sum(axis=1)[:, None]
        y = whitened_cond(want[1] - p["values"], mask, mag)
        return np.maximum(y, mag)  # returns = GAE + V
    if name == "remax":
        return np.broadcast_to((s_abs + np.abs(p["baselines"]))[:, None], (rows, width))
    if name in ("optimal_token_baseline", "tir_optimal_token_baseline"):
        # B_t = Σ_i G W / (Σ_i W + ε): rounding in W (1 − 2π + Σπ² cancels when π → 1, and
        # arbitrary weights of either sign cancel) is amplified by Σ|terms of W| / |Σ W + ε|.
        pi = np.exp(p["old_log_probs"])
        rho2 = 1.0 if p["is_weights"] is None else p["is_weights"] ** 2
        w = (1 - 2 * pi + p["sum_pi_squared"]) * rho2 * mask
        w_abs = (1 + 2 * pi + np.abs(p["sum_pi_squared"])) * rho2 * mask
        big_w, big_w_abs = w.cumsum(axis=1), w_abs.cumsum(axis=1)
        if name == "tir_optimal_token_baseline":
            big_w, big_w_abs = squeeze(big_w, mask), squeeze(big_w_abs, mask)
        ratio = 0.0
        for g in set(b.labels):
            sel = labels == g
            den = np.abs(big_w[sel].sum(axis=0) + p["epsilon"])
            ratio = max(ratio, float((big_w_abs[sel].sum(axis=0) / den).max(initial=0.0)))
        return np.full((rows, width), s_abs.max() * (1.0 + ratio))
    raise AssertionError(name)


def squeeze(m, mask):
    """Each row's masked entries moved to the front (TIR's token-rank layout)."""
    out = np.zeros_like(m)
    for r in range(m.shape[0]):
        v = m[r][mask[r]]
        out[r, : v.size] = v
    return out


def whitened_cond(x, mask, cond_x):
    """Batch whitening y = (x − μ) / √(σ² + 1e-8) of x (its input; cond_x the scale of
    x's own rounding): errors in x and μ over the divisor, computed here in float64."""
    n = int(mask.sum())
    if n < 2:
        return np.ones(x.shape)
    xs = x[mask]
    div = math.sqrt(float(((xs - xs.mean()) ** 2).sum() / (n - 1)) + 1e-8)
    c = np.broadcast_to(cond_x, x.shape)[mask].max()
    return np.full(x.shape, (c + np.abs(xs).max()) / div)


def _stats(name):
    return STATS.setdefault(name, {"finite": 0, "raised": 0, "nonfinite": 0, "max_rel": 0.0, "max_ratio": 0.0})


def compare(name, b, p):
    """One example: verl's outcome, then the crate's, checked against the contract."""
    stats = _stats(name)
    try:
        want = [w.numpy() for w in verl_run(name, b, p)]
    except ValueError:  # verl's own refusals (masked_var on < 2 tokens, pass@k singletons)
        want = None
    if want is None or not all(np.isfinite(w).all() for w in want):
        with pytest.raises(ValueError):
            crate_run(name, b, p)
        stats["raised" if want is None else "nonfinite"] += 1
        return
    adv, ret = crate_run(name, b, p)
    scale = cond(name, b, p, want)
    for what, ours, exp in (("advantages", adv, want[0]), ("returns", ret, want[1])):
        assert ours.dtype == np.float64 and ours.shape == exp.shape, what
        assert np.isfinite(ours).all(), what
        err = np.abs(ours - exp)
        bound = TOL * np.maximum(np.maximum(1.0, np.abs(exp)), scale)
        if name == "grpo_vectorized":
            bound = np.maximum(bound, TOL32 * np.abs(exp))
        if b.scale == 1.0:  # the README's measure, on batches of unit magnitude
            stats["max_rel"] = max(stats["max_rel"], float((err / np.maximum(1.0, np.abs(exp))).max(initial=0)))
        stats["max_ratio"] = max(stats["max_ratio"], float((err / bound).max(initial=0)))
        bad = err > bound
        if bad.any():
            r, c = np.argwhere(bad)[0]
            raise AssertionError(
                f"{name} {what}[{r},{c}]: crate {ours[r, c]!r}, verl {exp[r, c]!r} "
                f"(|Δ| {abs(ours[r, c] - exp[r, c]):.3e} > {bound[r, c]:.3e})"
            )
    stats["finite"] += 1


NAMES = list(beacon_rl.verl_names())


def test_every_verl_estimator_has_a_runner():
    """The differential test covers exactly the crate's verl registry."""
    assert set(NAMES) == {
        "grpo", "grpo_vectorized", "grpo_passk", "gdpo", "rloo", "rloo_vectorized", "opo", "gpg",
        "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax", "gae",
        "optimal_token_baseline", "tir_optimal_token_baseline",
    }  # fmt: skip


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(data=st.data())
def test_matches_verl(name, data):
    b = data.draw(batches(), label="batch")
    p = data.draw(params_for(name, b), label="params")
    compare(name, b, p)


@pytest.fixture(scope="module", autouse=True)
def _report():
    """Per-estimator counts and errors (shown with ``-s``)."""
    yield
    for name, s in sorted(STATS.items()):
        print(
            f"\n{name}: {s['finite']} finite, {s['raised']} verl raised, {s['nonfinite']} verl non-finite; "
            f"max |Δ|/max(1,|verl|) at unit scale {s['max_rel']:.2e}, max |Δ|/bound {s['max_ratio']:.2e}",
            end="",
        )


# ---------------------------------------------------------------------------------------
# Where the crate and verl 0.9.1 differ on purpose, and why the tolerance above has a
# float32 term: each encoded as a hand-sized case.
# ---------------------------------------------------------------------------------------


def one_column(scores, uids):
    return SimpleNamespace(
        rewards=np.array(scores, dtype=np.float64)[:, None],
        mask=np.ones((len(scores), 1), dtype=np.int64),
        index=np.array(uids, dtype=object),
        labels=[list(dict.fromkeys(uids)).index(u) for u in uids],
        scale=1.0,
    )


def test_grpo_vectorized_sigma_is_the_correctly_rounded_float32_root():
    """Scores [0, 0, 1, 1, 1], one group. verl 0.9.1 computes σ_g in float32
    (``group_mean_std``): μ = f32(3/5), Σ(s − μ)² = 1.1999999 in f32, σ² = 0.29999998,
    whose square root lies 0.38 ulp above the float32 0.54772252: that is the crate's σ.
    torch's CPU float32 sqrt is not always correctly rounded (torch 2.15's wheel returns
    0.54772258 here, and is 1 ulp off on ~16% of random inputs on the CI machine), so
    verl's advantages can differ from the crate's by ~1.2e-7 relative: TOL32."""
    f = np.float32
    s = [f(0), f(0), f(1), f(1), f(1)]
    mean = f(sum(s, f(0)) / f(5))
    sq = f(0)
    for x in s:  # row order, as index_add_
        sq = f(sq + f((x - mean) * (x - mean)))
    sigma = np.sqrt(f(sq / f(4)))  # numpy's float32 sqrt is IEEE (correctly rounded)
    assert float(sigma) == 0.5477225184440613
    den = float(f(sigma + f(1e-6)))
    want = np.array([(float(x) - float(mean)) / den for x in s])

    b = one_column([0, 0, 1, 1, 1], ["q"] * 5)
    p = {"epsilon": 1e-6, "norm": True}
    ours, _ = crate_run("grpo_vectorized", b, p)
    np.testing.assert_array_equal(ours[:, 0], want)
    theirs, _ = verl_run("grpo_vectorized", b, p)
    assert np.abs(ours[:, 0] - theirs[:, 0].numpy()).max() <= TOL32 * 1.1


@pytest.mark.parametrize(
    "uids",
    [["1", "01", "1", "01"], ["7", " 7", "7", " 7"], ["1_0", "10", "10", "1_0"], ["-1", "2", "-1", "2"]],
)
def test_numeric_string_uids_are_distinct_groups(uids):
    """Documented difference (grpo module docs): the crate groups rows by key equality for
    every estimator, as verl's own ``grpo`` does. verl 0.9.1's ``grpo_vectorized`` passes the
    uids through ``verl.utils.groupwise.as_torch_index``, which parses strings that Python's
    ``int()`` accepts: "1" and "01" (or " 7" and "7", "1_0" and "10") become one group, and a
    negative one raises IndexError in ``index_add_``. verl's trainer uids are uuid4 strings,
    which never parse, so trainer batches are unaffected."""
    b = one_column([1.0, 0.0, 0.0, 3.0], uids)
    plain = one_column([1.0, 0.0, 0.0, 3.0], ["u" + u for u in uids])
    p = {"epsilon": 1e-6, "norm": True}
    ours, _ = crate_run("grpo_vectorized", b, p)
    want, _ = verl_run("grpo_vectorized", plain, p)
    np.testing.assert_allclose(ours, want.numpy(), rtol=TOL32, atol=TOL)
    # verl's grpo agrees with the crate on these uids (float64 statistics).
    np.testing.assert_allclose(ours, verl_run("grpo", b, p)[0].numpy(), rtol=1e-6)
    try:
        merged = verl_run("grpo_vectorized", b, p)[0].numpy()
    except IndexError:
        assert uids[0].startswith("-")
    else:
        assert np.abs(merged - ours).max() > 0.1, "verl no longer merges numeric uids: drop this case"


@pytest.mark.parametrize("name", ["reinforce_plus_plus", "gae"])
def test_whitening_overflow_is_rescaled_not_zeroed(name):
    """Documented difference (estimator module docs, batch whitening): when finite inputs
    overflow Σ(x − μ)², verl's ``masked_whiten`` multiplies by rsqrt(inf) = 0 and returns
    zeros; the crate rescales and returns the whitened values. Whitening is scale-invariant
    (up to the 1e-8 added to σ², negligible here), so the crate's advantages on the batch must
    equal verl's on the same batch scaled by 2^-630 (exact), and its returns verl's own."""
    rewards = np.array([[1e200, -3e199, 2e200], [-1e200, 5e199, 0.0], [4e199, 0.0, -2e200]])
    mask = np.array([[1, 1, 1], [1, 1, 0], [1, 0, 1]], dtype=np.int64)
    big = SimpleNamespace(rewards=rewards, mask=mask, index=np.array(["a", "a", "b"], dtype=object), labels=[0, 0, 1])
    small = SimpleNamespace(**{**vars(big), "rewards": rewards * 2.0**-630})
    p = {"gamma": 1.0, "lam": 0.95, "values": np.zeros_like(rewards)}
    theirs_big = [x.numpy() for x in verl_run(name, big, p)]
    masked = mask.astype(bool)
    assert (theirs_big[0][masked] == 0).all(), "verl's whitening no longer zeroes on overflow"
    ours_adv, ours_ret = crate_run(name, big, p)
    theirs_small = verl_run(name, small, {**p, "values": p["values"] * 2.0**-630})[0].numpy()
    assert np.abs(theirs_small).max() > 0.5
    np.testing.assert_allclose(ours_adv, theirs_small, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ours_ret, theirs_big[1], rtol=1e-12)
