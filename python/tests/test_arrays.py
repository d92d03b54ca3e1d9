"""Array in, array out: dtypes, masks, keys, out=, torch tensors without copies, errors."""

import threading

import numpy as np
import pytest

import beacon_rl

UIDS = np.array(["a", "a", "b", "b"], dtype=object)
# Hand case (GRPO, verl defaults): group a scores 1, 0 -> mean 0.5, unbiased std 0.70711;
# advantage ±0.5 / (0.70711 + 1e-6) = ±0.707106; group b scores 1, 1 -> 0.
REWARDS = np.array([[0, 0, 1], [0, 0, 0], [0, 1, 0], [1, 0, 0]], dtype=np.float32)
MASK = np.array([[1, 1, 1], [1, 1, 0], [1, 1, 0], [1, 0, 0]], dtype=np.int64)
A = 0.5 / (np.sqrt(0.5) + 1e-6)
EXPECTED = np.array([[A, A, A], [-A, -A, 0], [0, 0, 0], [0, 0, 0]])


def test_hand_case_grpo():
    adv, ret = beacon_rl.estimate("grpo", REWARDS, MASK, UIDS)
    np.testing.assert_allclose(adv, EXPECTED, rtol=1e-6)
    np.testing.assert_array_equal(adv, ret)


@pytest.mark.parametrize("fdtype", [np.float32, np.float64])
@pytest.mark.parametrize("mdtype", [bool, np.uint8, np.int64])
def test_dtypes_round_trip(fdtype, mdtype):
    adv, ret = beacon_rl.estimate("grpo", REWARDS.astype(fdtype), MASK.astype(mdtype), UIDS)
    assert adv.dtype == fdtype and ret.dtype == fdtype
    np.testing.assert_allclose(adv, EXPECTED, rtol=1e-6)


def _object_array(items: list) -> np.ndarray:
    """A 1-D object array of ``items`` on every supported numpy (``np.fromiter`` builds object
    arrays only from numpy 1.23; ``np.array`` would turn tuples into a second axis)."""
    a = np.empty(len(items), dtype=object)
    for i, k in enumerate(items):
        a[i] = k
    return a


@pytest.mark.parametrize(
    "index",
    [
        np.array([7, 7, 9, 9]),
        np.array([7, 7, 9, 9], dtype=np.int32),
        np.array([7, 7, 9, 9], dtype=np.uint64),
        np.array(["a", "a", "b", "b"]),  # numpy unicode
        _object_array([("t", 1), ("t", 1), ("t", 2), ("t", 2)]),
        ["a", "a", "b", "b"],
    ],
    ids=["int64", "int32", "uint64", "unicode", "tuples", "list"],
)
def test_key_types(index):
    adv, _ = beacon_rl.estimate("grpo", REWARDS, MASK, index)
    np.testing.assert_allclose(adv, EXPECTED, rtol=1e-6)


def test_equal_keys_of_different_python_types_are_one_group():
    # Python's equality decides: 1 == 1.0 == True.
    index = np.array([1, 1.0, "b", "b"], dtype=object)
    adv, _ = beacon_rl.estimate("grpo", REWARDS, MASK, index)
    np.testing.assert_allclose(adv, EXPECTED, rtol=1e-6)


def test_out_writes_in_place_and_returns_it():
    adv_out = np.full((4, 3), np.nan, dtype=np.float32)
    ret_out = np.full((4, 3), np.nan, dtype=np.float64)  # dtypes may differ
    adv, ret = beacon_rl.estimate("grpo", REWARDS, MASK, UIDS, out=(adv_out, ret_out))
    assert adv is adv_out and ret is ret_out
    np.testing.assert_allclose(adv_out, EXPECTED, rtol=1e-6)
    np.testing.assert_allclose(ret_out, EXPECTED, rtol=1e-6)


def test_out_errors():
    with pytest.raises(ValueError, match="shape"):
        beacon_rl.estimate("grpo", REWARDS, MASK, UIDS, out=(np.zeros((4, 2)), np.zeros((4, 3))))
    with pytest.raises(TypeError):
        beacon_rl.estimate("grpo", REWARDS, MASK, UIDS, out=(np.zeros((4, 3), dtype=np.int64), np.zeros((4, 3))))
    # Overlapping but different outputs are refused.
    big = np.zeros((5, 3))
    with pytest.raises(ValueError, match="same memory"):
        beacon_rl.estimate("grpo", REWARDS, MASK, UIDS, out=(big[:4], big[1:]))
    # One array twice is refused where the returns differ from the advantages.
    shared = np.zeros((4, 3))
    with pytest.raises(ValueError, match="same memory"):
        beacon_rl.estimate("reinforce_plus_plus", REWARDS, MASK, UIDS, out=(shared, shared))
    ro = np.zeros((4, 3))
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        beacon_rl.estimate("grpo", REWARDS, MASK, UIDS, out=(ro, np.zeros((4, 3))))


def test_one_array_for_both_outputs_where_returns_equal_advantages():
    # verl's own estimators return `scores, scores`; so does the binding when nothing
    # separates the two, and an out pair may be one array twice (nothing is copied).
    adv, ret = beacon_rl.estimate("grpo", REWARDS, MASK, UIDS)
    assert adv is ret
    np.testing.assert_allclose(adv, EXPECTED, rtol=1e-6)
    shared = np.full((4, 3), np.nan)
    adv, ret = beacon_rl.estimate("grpo", REWARDS, MASK, UIDS, out=(shared, shared))
    assert adv is shared and ret is shared
    np.testing.assert_allclose(shared, EXPECTED, rtol=1e-6)
    # Estimators with returns of their own still get two arrays.
    adv, ret = beacon_rl.estimate("reinforce_plus_plus", REWARDS, MASK, UIDS)
    assert adv is not ret and not np.shares_memory(adv, ret)
    assert beacon_rl._native.has_returns("reinforce_plus_plus") and not beacon_rl._native.has_returns("grpo")


def test_strided_inputs():
    wide = np.zeros((4, 6), dtype=np.float64)
    wide[:, ::2] = REWARDS
    fortran = np.asfortranarray(MASK)
    adv, _ = beacon_rl.estimate("grpo", wide[:, ::2], fortran, UIDS[::-1][::-1])
    np.testing.assert_allclose(adv, EXPECTED, rtol=1e-6)


def test_errors_carry_the_crate_message():
    bad = REWARDS.copy()
    bad[1, 2] = np.inf
    with pytest.raises(ValueError, match=r"token_level_rewards at index 5"):
        beacon_rl.estimate("grpo", bad, MASK, UIDS)
    with pytest.raises(ValueError, match="response_mask"):
        beacon_rl.estimate("grpo", REWARDS, MASK[:, :2], UIDS)
    with pytest.raises(ValueError, match="an integer mask holds only 0 and 1"):
        beacon_rl.estimate("grpo", REWARDS, MASK * 3, UIDS)
    with pytest.raises(ValueError, match="unknown|Unknown"):
        beacon_rl.estimate("ppo", REWARDS, MASK, UIDS)
    with pytest.raises(TypeError, match="float32 or float64"):
        beacon_rl.estimate("grpo", REWARDS.astype(np.int32), MASK, UIDS)
    with pytest.raises(TypeError, match="bool, uint8, int32, int64, float16, float32 or float64"):
        beacon_rl.estimate("grpo", REWARDS, MASK.astype(np.int8), UIDS)
    with pytest.raises(TypeError, match="keys"):
        beacon_rl.estimate("grpo", REWARDS, MASK, np.zeros(4))
    with pytest.raises(ValueError, match="milestones"):
        beacon_rl.estimate("beacon", REWARDS, MASK, UIDS, traj_index=np.arange(4))
    with pytest.raises(ValueError):
        beacon_rl.validate("grpo", {"std_eps": -1.0})
    with pytest.raises(ValueError, match="estimator grpo has no key no_such_field; its keys: std_eps, norm, statistics"):
        beacon_rl.estimate("grpo", REWARDS, MASK, UIDS, config={"no_such_field": 1})


def test_every_name_runs():
    rng = np.random.default_rng(0)
    rows, width = 8, 5
    kwargs = dict(
        token_level_rewards=rng.normal(size=(rows, width)),
        response_mask=np.ones((rows, width), dtype=bool),
        index=np.repeat(np.arange(2), 4),
        traj_index=np.repeat(np.arange(4), 2),
        terminal_rewards=np.repeat(np.array([1.0, 0.0, 1.0, 0.0]), 2),
        values=rng.normal(size=(rows, width)),
        old_log_probs=-rng.random(size=(rows, width)),
        sum_pi_squared=rng.random(size=(rows, width)),
        reward_baselines=rng.normal(size=rows),
        milestones=np.array([1, 0] * 4, dtype=np.uint8),
        step_rewards=rng.normal(size=rows),
        anchor_obs=np.array(["s0", "s1"] * 4, dtype=object),
    )
    for name in beacon_rl.names():
        args = dict(kwargs)
        if name not in beacon_rl.STEP_ESTIMATORS:
            # verl's estimators see one row per response; episode keys are for step batches.
            args.pop("traj_index")
            args.pop("terminal_rewards")
        else:
            args["token_level_rewards"] = None  # R(τ) from terminal_rewards
        if name == "tree_grpo":
            # Two trees per group of four rows (rows 0-3, 4-7).
            args["tree_parents"] = np.array([-1, 0, 1, -1, -1, 4, 4, -1])
        if name == "empg":
            args["step_entropy"] = rng.random(size=rows)
        adv, ret = beacon_rl.estimate(name, **args)
        assert adv.shape == (rows, width), name
        assert np.isfinite(adv).all() and np.isfinite(ret).all(), name


def test_the_gil_is_released():
    """Two threads computing at once both finish (a held GIL would still finish, but this
    exercises the release path under threads); results equal the single-thread ones."""
    rng = np.random.default_rng(1)
    rewards = rng.normal(size=(2048, 256)).astype(np.float32)
    mask = np.ones((2048, 256), dtype=bool)
    index = np.repeat(np.arange(256), 8)
    want, _ = beacon_rl.estimate("grpo", rewards, mask, index)
    results = [None, None]

    def run(i):
        results[i] = beacon_rl.estimate("grpo", rewards, mask, index)[0]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        np.testing.assert_array_equal(r, want)


# --- torch ---------------------------------------------------------------------------------


def test_torch_in_torch_out_same_dtype():
    torch = pytest.importorskip("torch")
    for dt in (torch.float32, torch.float64):
        adv, ret = beacon_rl.estimate("grpo", torch.tensor(REWARDS, dtype=dt), torch.tensor(MASK), UIDS)
        assert isinstance(adv, torch.Tensor) and adv.dtype == dt
        np.testing.assert_allclose(adv.numpy(), EXPECTED, rtol=1e-6)
    adv, _ = beacon_rl.estimate("grpo", torch.tensor(REWARDS), torch.tensor(MASK).bool(), torch.tensor([0, 0, 1, 1]))
    np.testing.assert_allclose(adv.numpy(), EXPECTED, rtol=1e-6)


def test_torch_tensors_are_read_without_copy():
    """The numpy views handed to the native layer share the tensors' memory."""
    torch = pytest.importorskip("torch")
    from beacon_rl import _Caller

    t = torch.tensor(REWARDS, requires_grad=True)
    m = torch.tensor(MASK)
    c = _Caller()
    assert c.numpy(t, "r").ctypes.data == t.data_ptr()
    assert c.numpy(m, "m").ctypes.data == m.data_ptr()
    strided = torch.zeros(4, 6)[:, ::2]
    v = c.numpy(strided, "s")
    assert v.ctypes.data == strided.data_ptr() and v.strides == (24, 8)


def test_torch_out_is_written_in_place():
    torch = pytest.importorskip("torch")
    adv_out = torch.full((4, 3), float("nan"))
    ret_out = torch.full((4, 3), float("nan"))
    ptr = adv_out.data_ptr()
    adv, ret = beacon_rl.estimate("grpo", torch.tensor(REWARDS), torch.tensor(MASK), UIDS, out=(adv_out, ret_out))
    assert adv is adv_out and adv.data_ptr() == ptr
    np.testing.assert_allclose(adv_out.numpy(), EXPECTED, rtol=1e-6)


def test_torch_bad_dtype_is_a_type_error():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError):
        beacon_rl.estimate("grpo", torch.tensor(REWARDS).bfloat16(), torch.tensor(MASK), UIDS)
    with pytest.raises(TypeError):
        beacon_rl.estimate("grpo", torch.tensor(REWARDS).half(), torch.tensor(MASK), UIDS)


@pytest.mark.parametrize("torch_out", [False, True])
def test_large_fresh_outputs_advised_for_huge_pages_equal_the_out_path(torch_out):
    # 2,048 x 1,024 float32 = 8 MiB: above the 4 MiB from which fresh outputs are advised
    # for transparent huge pages. The fresh result must equal the kept-buffer result.
    rng = np.random.default_rng(5)
    rows, cols = 2048, 1024
    lengths = rng.integers(0, cols + 1, rows)
    mask = (np.arange(cols)[None, :] < lengths[:, None]).astype(np.int64)
    rewards = np.zeros((rows, cols), np.float32)
    rewards[np.arange(rows), np.maximum(lengths - 1, 0)] = rng.random(rows, dtype=np.float32)
    index = np.arange(rows) // 8
    if torch_out:
        torch = pytest.importorskip("torch")
        rewards, mask = torch.from_numpy(rewards), torch.from_numpy(mask)
    fresh, _ = beacon_rl.estimate("grpo", rewards, mask, index)
    kept = np.full((rows, cols), np.nan, np.float32)
    beacon_rl.estimate("grpo", np.asarray(rewards), np.asarray(mask), index, out=(kept, kept))
    assert np.array_equal(np.asarray(fresh), kept)
    # The advice itself leaves an array's contents as they are.
    a = np.arange(3 << 20, dtype=np.float32)
    beacon_rl._advise_huge_pages(a.ctypes.data, a.nbytes)
    assert np.array_equal(a, np.arange(3 << 20, dtype=np.float32))
