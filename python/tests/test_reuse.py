"""The binding keeps a batch builder, a batch and a workspace per thread and rebuilds the batch
in place on every call; integer masks that are prefix masks go to the crate as per-row lengths;
uuid strings are compared by value without a dict. None of this may change a number."""

import numpy as np
import pytest

import beacon_rl
from conftest import in_fresh_thread


def grpo_reference(rewards, mask, index, eps=1e-6):
    """verl's compute_grpo_outcome_advantage in numpy (float64): s = Σ rewards, per uid
    (s − mean) / (unbiased std + eps), a singleton group uses mean 0 and std 1 (verl's
    float32 tensor(1.0) + eps), times the mask."""
    s = rewards.astype(np.float64).sum(axis=1)
    out = np.empty_like(s)
    for key in set(index.tolist()):
        rows = [i for i, k in enumerate(index.tolist()) if k == key]
        if len(rows) == 1:
            out[rows] = s[rows] / float(np.float32(1.0) + np.float32(eps))
        else:
            g = s[rows]
            out[rows] = (g - g.mean()) / (g.std(ddof=1) + eps)
    return out[:, None] * (mask != 0)


def random_batch(rng, rows, cols, groups, keys="str"):
    lens = rng.integers(0, cols + 1, rows)
    mask = (np.arange(cols)[None, :] < lens[:, None]).astype(np.int64)
    rewards = np.zeros((rows, cols), dtype=np.float32)
    rewards[np.arange(rows), np.maximum(lens - 1, 0)] = rng.integers(0, 3, rows)
    gid = rng.integers(0, groups, rows)
    if keys == "str":
        # Distinct str objects for equal keys (not the same object repeated).
        index = np.array(["".join(["uid-", str(g)]) for g in gid], dtype=object)
    else:
        index = gid.astype(np.int64)
    return rewards, mask, index


def test_rebuilt_batches_match_the_reference_when_keys_and_sizes_change():
    rng = np.random.default_rng(7)
    # Shrinking, growing, other groups, other key types: each call rebuilds the kept batch.
    for rows, groups, keys in [(40, 5, "str"), (7, 3, "int"), (64, 1, "str"), (3, 3, "int"), (50, 20, "str")]:
        rewards, mask, index = random_batch(rng, rows, 9, groups, keys)
        adv, _ = beacon_rl.estimate("grpo", rewards, mask, index)
        np.testing.assert_allclose(adv, grpo_reference(rewards, mask, index), rtol=1e-5, atol=1e-6)


def test_a_failed_call_does_not_leak_into_the_next():
    rng = np.random.default_rng(3)
    rewards, mask, index = random_batch(rng, 12, 5, 3)
    want, _ = beacon_rl.estimate("grpo", rewards, mask, index)
    with pytest.raises(ValueError):
        beacon_rl.estimate("grpo", rewards, mask, index[:5])  # 5 keys for 12 rows
    bad = rewards.copy()
    bad[2, 1] = np.nan
    with pytest.raises(ValueError):
        beacon_rl.estimate("grpo", bad, mask, index)
    got, _ = beacon_rl.estimate("grpo", rewards, mask, index)
    np.testing.assert_array_equal(got, want)


def step_batch(rng, groups=3, trajs=4, steps=5):
    uid = np.repeat(np.array([f"u{g}" for g in range(groups)], dtype=object), trajs * steps)
    traj = np.repeat(np.array([f"t{j}" for j in range(groups * trajs)], dtype=object), steps)
    reward = np.repeat(rng.integers(0, 2, groups * trajs).astype(np.float64), steps)
    flags = rng.random(groups * trajs * steps) < 0.3
    mask = np.ones((len(uid), 4), dtype=np.int64)
    return uid, traj, reward, flags, mask


@pytest.mark.parametrize("name", ["beacon_official", "beacon", "gigpo", "grpo"])
def test_reused_state_gives_the_fresh_numbers_for_step_batches(name):
    rng = np.random.default_rng(11)
    batches = [step_batch(rng, 3, 4, 5), step_batch(rng, 2, 2, 7), step_batch(rng, 4, 3, 2)]

    def run(b):
        uid, traj, reward, flags, mask = b
        extra = {}
        if name == "gigpo":
            extra = dict(anchor_obs=np.array([f"s{i % 3}" for i in range(len(uid))], dtype=object), step_rewards=reward)
        elif name != "grpo":
            extra = dict(milestones=flags)
        tlr = np.zeros(mask.shape, np.float32)
        tlr[:, -1] = reward
        adv, _ = beacon_rl.estimate(
            name, tlr, mask, uid, traj_index=traj, terminal_rewards=reward, **extra
        )
        return adv

    # This thread's state goes through every batch (and another estimator in between).
    reused = []
    for b in batches:
        reused.append(run(b))
        beacon_rl.estimate("rloo", np.ones((9, 2), np.float32), np.ones((9, 2), np.int64), np.arange(9) % 2)
    for b, got in zip(batches, reused):
        np.testing.assert_array_equal(got, in_fresh_thread(lambda: run(b)))


# Estimators verl feeds from (token_level_rewards, response_mask, index) alone.
MASKED = ["grpo", "grpo_vectorized", "gdpo", "rloo", "rloo_vectorized", "opo", "gpg", "reinforce_plus_plus", "reinforce_plus_plus_baseline"]


@pytest.mark.parametrize("name", MASKED)
@pytest.mark.parametrize("holes", [False, True], ids=["prefix", "multi-turn"])
def test_integer_masks_give_the_bool_mask_numbers(name, holes):
    # Prefix int64/uint8 masks reach the crate as per-row lengths, others (holes: masked tool
    # tokens between turns) as the matrix; bool masks are read as their bytes (numpy's bool may
    # hold 2), so they take the uint8 path.
    rng = np.random.default_rng(5)
    rows, cols = 24, 11
    lens = rng.integers(0, cols + 1, rows)
    mask = np.arange(cols)[None, :] < lens[:, None]
    if holes:
        mask[::3, 2:4] = False
        assert any(m.any() and not m[: m.sum()].all() for m in mask)
    rewards = rng.normal(size=(rows, cols)).astype(np.float32)
    index = np.array([f"q{i % 5}" for i in range(rows)], dtype=object)
    want, want_ret = beacon_rl.estimate(name, rewards, mask, index)
    for dtype in (np.int64, np.uint8):
        got, got_ret = beacon_rl.estimate(name, rewards, mask.astype(dtype), index)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got_ret, want_ret)


def test_bad_integer_mask_values_are_named_on_both_paths():
    rewards = np.zeros((2, 4), np.float32)
    index = np.array([0, 0])
    prefix = np.array([[1, 1, 0, 0], [1, 0, 0, 0]], dtype=np.int64)
    for bad_at, value in [((1, 3), 2), ((0, 1), -1)]:
        m = prefix.copy()
        m[bad_at] = value
        row, token = bad_at
        with pytest.raises(ValueError, match=rf"response_mask\[{row}, {token}\] = {value}: an integer mask holds only 0 and 1"):
            beacon_rl.estimate("grpo", rewards, m, index)


@pytest.mark.parametrize(
    "index",
    [
        # The same str object repeated (verl's np.repeat) and equal but distinct objects.
        np.array(["a", "a", "b", "b"], dtype=object),
        np.array(["".join("a"), "".join(["", "a"]), "b", str("b")], dtype=object),
        # Not all str: the dict path (Python equality).
        np.array(["a", "a", 2, 2], dtype=object),
        # A str subclass may redefine equality: the dict path.
        np.array([type("S", (str,), {})("a"), "a", "b", "b"], dtype=object),
        # Lone surrogates have no UTF-8 form: the dict path.
        np.array(["\ud800", "\ud800", "b", "b"], dtype=object),
    ],
    ids=["same-object", "equal-strings", "mixed", "str-subclass", "surrogates"],
)
def test_string_keys_group_by_value(index):
    rewards = np.array([[1.0], [0.0], [1.0], [1.0]], dtype=np.float32)
    mask = np.ones((4, 1), dtype=np.int64)
    adv, _ = beacon_rl.estimate("grpo", rewards, mask, index)
    a = 0.5 / (np.sqrt(0.5) + 1e-6)
    np.testing.assert_allclose(adv[:, 0], [a, -a, 0, 0], rtol=1e-6)


def _left_to_right(row: np.ndarray) -> float:
    """The plain sequential float64 sum. Not ``sum()``: from CPython 3.12 it compensates
    (Neumaier), which gives other bits than left-to-right addition."""
    s = 0.0
    for x in row:
        s += float(x)
    return s


@pytest.mark.parametrize("rows", [13, 16, 3])
def test_row_sums_are_the_sequential_sums(rows):
    # The binding sums token rewards into terminal rewards eight rows at a time; each row must
    # still be summed left to right in float64 (the bits of a plain sequential sum), which
    # matters when a row has several rewards (float addition is not associative).
    rng = np.random.default_rng(rows)
    cols = 37
    rewards = (rng.normal(size=(rows, cols)) * 10.0 ** rng.integers(-6, 6, size=(rows, cols))).astype(np.float32)
    sequential = np.array([_left_to_right(row) for row in rewards])
    mask = np.ones((rows, cols), dtype=bool)
    uid = np.array(["g"] * rows, dtype=object)
    traj = np.arange(rows)
    flags = np.zeros(rows, dtype=bool)
    kw = dict(traj_index=traj, milestones=flags, config={"segment_weight": 0.0})
    got, _ = beacon_rl.estimate("beacon_official", rewards.astype(np.float64), mask, uid, **kw)
    want, _ = beacon_rl.estimate("beacon_official", rewards.astype(np.float64), mask, uid, terminal_rewards=sequential, **kw)
    np.testing.assert_array_equal(got, want)


def test_step_estimators_still_reject_bad_token_rewards():
    # With no terminal_rewards the binding takes each row's reward sum as its row score and
    # skips the crate's re-check of the same sums; a non-finite reward must still raise, as
    # must rows of one trajectory that differ where the estimator counts each trajectory once
    # (the paper's beacon). beacon_official scores each row by its own sum (verl-agent's
    # penalised rows).
    mask = np.ones((4, 3), dtype=np.int64)
    uid = np.array(["g"] * 4, dtype=object)
    traj = np.array(["a", "a", "b", "b"], dtype=object)
    flags = np.zeros(4, dtype=bool)
    rewards = np.zeros((4, 3), dtype=np.float32)
    rewards[:, 2] = [1, 1, 0, 0]
    for name in ("beacon_official", "beacon"):
        adv, _ = beacon_rl.estimate(name, rewards, mask, uid, traj_index=traj, milestones=flags)
        assert adv[0, 0] > 0 > adv[2, 0]
        bad = rewards.copy()
        bad[1, 0] = np.nan
        with pytest.raises(ValueError, match=r"^non-finite value NaN in token_level_rewards at index 3$"):
            beacon_rl.estimate(name, bad, mask, uid, traj_index=traj, milestones=flags)
    disagree = rewards.copy()
    disagree[1, 2] = 0.5
    with pytest.raises(ValueError, match=r"^row 1 carries terminal reward 0.5, but its trajectory's earlier rows carry 1$"):
        beacon_rl.estimate("beacon", disagree, mask, uid, traj_index=traj, milestones=flags)
    # Row scores 1, 0.5, 0, 0 (no milestones: the segment term is 0): mean_norm over the
    # rows, μ = 1.5 / 4 = 0.375, A = 0.625, 0.125, −0.375, −0.375.
    adv, _ = beacon_rl.estimate("beacon_official", disagree, mask, uid, traj_index=traj, milestones=flags)
    np.testing.assert_allclose(adv[:, 0], [0.625, 0.125, -0.375, -0.375], rtol=0, atol=1e-7)


# --- verl's layout: each group's rows one contiguous run -----------------------------------
# The binding interns object keys into first-appearance ids (a row holding the previous row's
# object takes its id without a lookup); the crate's batch builder writes the batch of a verl
# layout straight from the runs (one key hashed per run, no sort) and sorts any other layout's
# rows by group. Both must give the same bits and the same errors.


def verl_layout(rng, groups, per_group, cols, keys):
    """Rows as verl holds them: one uuid object per group repeated over its rows (np.repeat),
    prefix masks of random length, a 0/1/2 score on each row's last valid token."""
    rows = groups * per_group
    lens = rng.integers(0, cols + 1, rows)
    mask = (np.arange(cols)[None, :] < lens[:, None]).astype(np.int64)
    rewards = np.zeros((rows, cols), dtype=np.float32)
    rewards[np.arange(rows), np.maximum(lens - 1, 0)] = rng.integers(0, 3, rows)
    if keys == "same-object":
        uids = np.array([f"uid-{g}-{rng.integers(1 << 30)}" for g in range(groups)], dtype=object)
        index = np.repeat(uids, per_group)
    elif keys == "equal-strings":
        # Equal keys in distinct str objects: grouped by value, not by identity.
        index = np.array(["".join(["uid-", str(g)]) for g in np.repeat(np.arange(groups), per_group)], dtype=object)
    else:
        # Integer keys, not numbered from 0 nor increasing.
        index = np.repeat(rng.permutation(groups) * 7 + 3, per_group).astype(np.int64)
    return rewards, mask, index


@pytest.mark.parametrize("keys", ["same-object", "equal-strings", "int"])
@pytest.mark.parametrize("groups,per_group", [(16, 8), (1, 12), (9, 1), (5, 3)])
def test_contiguous_groups_give_the_bits_of_scattered_rows(keys, groups, per_group):
    rng = np.random.default_rng(groups * 100 + per_group)
    rewards, mask, index = verl_layout(rng, groups, per_group, 11, keys)
    contiguous, _ = beacon_rl.estimate("grpo", rewards, mask, index)
    np.testing.assert_allclose(contiguous, grpo_reference(rewards, mask, index), rtol=1e-5, atol=1e-6)
    # The same rows shuffled (groups interleaved: the batch builder's path) give each row the
    # very same bits.
    perm = rng.permutation(len(index))
    scattered, _ = beacon_rl.estimate("grpo", rewards[perm], mask[perm], index[perm])
    np.testing.assert_array_equal(scattered, contiguous[perm])
    for name in ("grpo_vectorized", "rloo", "opo"):
        a, _ = beacon_rl.estimate(name, rewards, mask, index)
        b, _ = beacon_rl.estimate(name, rewards[perm], mask[perm], index[perm])
        np.testing.assert_array_equal(b, a[perm], err_msg=name)


@pytest.mark.parametrize(
    "index",
    [
        # A group whose rows come back after another group's: one group of four rows, not two
        # groups of two (a run-by-run batch would split it).
        np.array(["a", "a", "b", "b", "a", "a"], dtype=object),
        np.repeat(np.array(["a", "b", "a"], dtype=object), 2),  # the same object each time
        np.array([5, 5, 3, 3, 5, 5], dtype=np.int64),
        np.array([5, 5, 3, 3, 5, 5], dtype=np.int64)[::-1],  # non-contiguous int64 column
        np.array([2, 2, 1, 1, 2, 2], dtype=np.int64),
    ],
    ids=["str", "repeated-objects", "int64", "int64-strided", "int64-decreasing"],
)
def test_a_group_that_comes_back_is_one_group(index):
    rewards = np.array([[1.0], [0.0], [1.0], [1.0], [1.0], [0.0]], dtype=np.float32)
    mask = np.ones((6, 1), dtype=np.int64)
    adv, _ = beacon_rl.estimate("grpo", rewards, mask, index)
    np.testing.assert_allclose(adv, grpo_reference(rewards, mask, index), rtol=1e-6)
    # Hand check for the str case: group a = rows 0, 1, 4, 5 with scores 1, 0, 1, 0 (mean 0.5,
    # unbiased std sqrt(1/3)); group b = rows 2, 3 with scores 1, 1 (all 0).
    if index[0] == "a":
        a = 0.5 / (np.sqrt(1 / 3) + 1e-6)
        np.testing.assert_allclose(adv[:, 0], [a, -a, 0, 0, a, -a], rtol=1e-6)


def test_verl_layout_errors_are_the_builders():
    # Rows of a contiguous layout and the same rows scattered fail with one message: the
    # shortcut is only taken where the batch builder could not fail. The messages name the
    # argument the caller passed (the builder's `row_rewards` are the caller's terminal_rewards).
    mask = np.ones((4, 2), dtype=np.int64)
    rewards = np.zeros((4, 2), dtype=np.float32)
    flags = np.zeros(4, dtype=bool)
    for index in (np.array(["a", "a", "b", "b"], dtype=object), np.array(["a", "b", "a", "b"], dtype=object)):
        with pytest.raises(ValueError, match=r"^non-finite value NaN in terminal_rewards at index 1$"):
            beacon_rl.estimate(
                "beacon_official", rewards, mask, index, terminal_rewards=np.array([0, np.nan, 0, 0]), milestones=flags
            )
        with pytest.raises(ValueError, match=r"^length mismatch: terminal_rewards has 3 entries, expected 4$"):
            beacon_rl.estimate("beacon_official", rewards, mask, index, terminal_rewards=np.zeros(3), milestones=flags)
