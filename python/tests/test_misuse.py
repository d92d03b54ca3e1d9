"""What a user may pass wrongly or unusually: every input either gives the numbers of its plain
contiguous copy or raises ValueError/TypeError naming the argument (and row); never different
numbers, never a crash. Expected values come from the same call on a contiguous, well-formed
copy of the input (the binding's layout handling is what is under test, not the estimators)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import beacon_rl
from conftest import in_fresh_thread

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

REWARDS = np.array([[0, 0, 1], [0, 0, 0], [0, 1, 0], [1, 0, 0]], dtype=np.float32)
MASK = np.array([[1, 1, 1], [1, 1, 0], [1, 1, 0], [1, 0, 0]], dtype=np.int64)
UIDS = np.array(["a", "a", "b", "b"], dtype=object)
# Hand case (GRPO, verl defaults): group a scores 1, 0 -> ±0.5 / (sqrt(0.5) + 1e-6).
A = 0.5 / (np.sqrt(0.5) + 1e-6)
EXPECTED = np.array([[A, A, A], [-A, -A, 0], [0, 0, 0], [0, 0, 0]])

# Every estimator with the inputs it reads (4 rows, 3 tokens).
STEP_KW = dict(
    traj_index=np.arange(4),
    milestones=np.array([1, 0, 0, 1], dtype=bool),
    step_rewards=np.array([1.0, 0.0, 0.5, 1.0]),
    anchor_obs=np.array(["s0", "s1", "s0", "s1"], dtype=object),
)
EXTRA_KW = dict(
    values=np.linspace(-1, 1, 12).reshape(4, 3),
    old_log_probs=-np.linspace(0.1, 1, 12).reshape(4, 3),
    sum_pi_squared=np.linspace(0.2, 0.9, 12).reshape(4, 3),
    reward_baselines=np.array([0.1, -0.2, 0.3, 0.0]),
)


def kwargs_for(name):
    kw = dict(EXTRA_KW, **(STEP_KW if name in beacon_rl.STEP_ESTIMATORS else {}))
    if name == "tree_grpo":
        kw["tree_parents"] = np.array([-1, 0, -1, 2])
    if name == "empg":
        kw["step_entropy"] = np.array([0.5, 1.0, 1.5, 2.0])
    return kw


# --- masks: numpy's bool is a byte, not guaranteed 0 or 1 ----------------------------------


@pytest.mark.parametrize("name", beacon_rl.names())
def test_a_bool_view_holding_2_is_refused_not_misread(name):
    # `uint8_mask.view(bool)` is a zero-copy bool array whose byte may be 2. Read as a Rust
    # bool it changed gae, gdpo, gpg and reinforce_plus_plus numbers and made
    # tir_optimal_token_baseline panic; read as bytes, the crate's 0/1 check names it.
    m8 = MASK.astype(np.uint8)
    m8[1, 1] = 2
    with pytest.raises(ValueError, match=r"response_mask\[1, 1\] = 2"):
        beacon_rl.estimate(name, REWARDS, m8.view(bool), UIDS, **kwargs_for(name))


@SETTINGS
@given(
    data=hnp.arrays(np.uint8, (5, 4), elements=st.sampled_from([0, 1, 1, 0, 2, 255])),
    name=st.sampled_from(["grpo", "rloo", "gae", "reinforce_plus_plus", "gdpo", "gpg", "tir_optimal_token_baseline"]),
)
def test_bool_masks_are_their_bytes(data, name):
    """Any bytes viewed as bool: ValueError when one is neither 0 nor 1, else the numbers of
    the same mask built as bool."""
    rng = np.random.default_rng(0)
    rewards = rng.normal(size=(5, 4))
    index = np.array([0, 0, 1, 1, 1])
    kw = dict(values=rng.normal(size=(5, 4)), old_log_probs=-rng.random((5, 4)), sum_pi_squared=rng.random((5, 4)))
    if (data > 1).any():
        with pytest.raises(ValueError, match="response_mask"):
            beacon_rl.estimate(name, rewards, data.view(bool), index, **kw)
        return
    try:
        want = beacon_rl.estimate(name, rewards, data.astype(bool), index, **kw)
    except ValueError:
        return  # undefined for these inputs (the crate's typed error), either way
    got = beacon_rl.estimate(name, rewards, data.view(bool), index, **kw)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)


def test_bool_milestones_holding_2_are_refused():
    flags = np.array([1, 0, 2, 0], dtype=np.uint8).view(bool)
    with pytest.raises(ValueError, match=r"milestones: value 2 at index 2"):
        beacon_rl.estimate("beacon", REWARDS, MASK, UIDS, traj_index=np.arange(4), milestones=flags)


def test_torch_bool_view_holding_2_is_refused():
    torch = pytest.importorskip("torch")
    m = torch.tensor(MASK, dtype=torch.uint8)
    m[2, 0] = 2
    with pytest.raises(ValueError, match=r"response_mask\[2, 0\] = 2"):
        beacon_rl.estimate("grpo", torch.tensor(REWARDS), m.view(torch.bool), UIDS)


# --- layouts: strided, transposed, reversed, packed fields, misaligned ---------------------


def packed_field(a):
    """`a` as a field of a packed structured array: strides that are no whole number of items."""
    rec = np.zeros(a.shape, dtype=[("pad", "u1"), ("x", a.dtype)])
    rec["x"] = a
    return rec["x"]


def misaligned(a):
    """`a`'s values at an address one byte off the dtype's alignment."""
    buf = np.zeros(a.nbytes + 1, dtype=np.uint8)
    out = np.frombuffer(buf.data, dtype=a.dtype, count=a.size, offset=1).reshape(a.shape)
    out[...] = a
    return out


def layouts(a, draw):
    """One of the layouts a caller may hold `a` in (same values)."""
    kind = draw(st.sampled_from(["c", "fortran", "reversed", "stepped", "transposed", "packed", "misaligned"]))
    if kind == "fortran":
        return kind, np.asfortranarray(a)
    if kind == "reversed":
        big = np.ascontiguousarray(a[::-1, ::-1])
        return kind, big[::-1, ::-1]
    if kind == "stepped":
        big = np.zeros((a.shape[0] * 2, a.shape[1] * 3), dtype=a.dtype)
        big[::2, ::3] = a
        return kind, big[::2, ::3]
    if kind == "transposed":
        return kind, np.ascontiguousarray(a.T).T
    if kind == "packed":
        return kind, packed_field(a)
    if kind == "misaligned":
        return kind, misaligned(a)
    return kind, a


@SETTINGS
@given(data=st.data(), which=st.sampled_from(["token_level_rewards", "response_mask", "values"]))
def test_any_layout_gives_the_contiguous_numbers_or_a_value_error(data, which):
    """A 2-D input in any layout: the bits of its contiguous copy, or (for layouts the binding
    cannot view in place: packed structured fields, misaligned buffers) a ValueError naming it.
    Before the layout check a packed float32 field was read at the wrong elements."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    rows, cols = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 5))
    kw = dict(
        token_level_rewards=rng.normal(size=(rows, cols)).astype(data.draw(st.sampled_from([np.float32, np.float64]))),
        response_mask=(rng.random((rows, cols)) < 0.7).astype(data.draw(st.sampled_from([bool, np.uint8, np.int64]))),
        values=rng.normal(size=(rows, cols)),
        index=rng.integers(0, 2, rows),
    )
    name = "gae" if which == "values" else data.draw(st.sampled_from(["grpo", "reinforce_plus_plus", "rloo"]))
    if name != "gae":
        kw.pop("values")
    try:
        want = beacon_rl.estimate(name, **kw)
    except ValueError as e:
        want = e  # undefined for these values (the crate's typed error): so for every layout
    kind, kw[which] = layouts(kw[which], data.draw)
    if kind in ("packed", "misaligned") and kw[which].dtype.itemsize > 1:
        with pytest.raises(ValueError, match=rf"{which}: unaligned"):
            beacon_rl.estimate(name, **kw)
        return
    if isinstance(want, ValueError):
        with pytest.raises(ValueError) as got:
            beacon_rl.estimate(name, **kw)
        assert str(got.value) == str(want)
        return
    got = beacon_rl.estimate(name, **kw)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)


@SETTINGS
@given(data=st.data())
def test_outputs_in_any_layout_receive_the_fresh_numbers_or_a_value_error(data):
    """`out=` arrays in any layout: the written values equal a fresh result; overlapping
    elements (stride 0: numpy's as_strided, torch's expand) and unaligned layouts are refused.
    Before the check a stride-0 output silently kept only the last row's values."""
    name = data.draw(st.sampled_from(["grpo", "reinforce_plus_plus"]))
    dtype = data.draw(st.sampled_from([np.float32, np.float64]))
    # The crate computes in the output's dtype: the reference is a contiguous pair of it.
    fresh = (np.zeros((4, 3), dtype), np.zeros((4, 3), dtype))
    beacon_rl.estimate(name, REWARDS, MASK, UIDS, out=fresh)
    kind = data.draw(st.sampled_from(["c", "fortran", "reversed", "stepped", "broadcast-rows", "broadcast-cols", "packed"]))
    outs = []
    for _ in range(2):
        base = np.full((4, 3), np.nan, dtype=dtype)
        if kind == "fortran":
            o = np.asfortranarray(base)
        elif kind == "reversed":
            o = base[::-1, ::-1]
        elif kind == "stepped":
            o = np.full((8, 9), np.nan, dtype=dtype)[::2, ::3]
        elif kind == "broadcast-rows":
            o = np.lib.stride_tricks.as_strided(base, shape=(4, 3), strides=(0, base.itemsize))
        elif kind == "broadcast-cols":
            o = np.lib.stride_tricks.as_strided(base, shape=(4, 3), strides=(3 * base.itemsize, 0))
        elif kind == "packed":
            o = packed_field(base)
        else:
            o = base
        outs.append(o)
    if kind.startswith("broadcast"):
        with pytest.raises(ValueError, match="out_advantages: its elements overlap"):
            beacon_rl.estimate(name, REWARDS, MASK, UIDS, out=tuple(outs))
        return
    if kind == "packed":
        with pytest.raises(ValueError, match="out_advantages: unaligned"):
            beacon_rl.estimate(name, REWARDS, MASK, UIDS, out=tuple(outs))
        return
    adv, ret = beacon_rl.estimate(name, REWARDS, MASK, UIDS, out=tuple(outs))
    np.testing.assert_array_equal(adv, fresh[0])
    np.testing.assert_array_equal(ret, fresh[1])


def test_torch_views_and_transposes_are_read_and_written_in_place():
    torch = pytest.importorskip("torch")
    rewards = torch.tensor(REWARDS.T.copy()).t()  # a transposed view
    mask = torch.zeros(4, 6, dtype=torch.int64)[:, ::2]
    mask.copy_(torch.tensor(MASK))
    out = torch.full((3, 4), float("nan")).t()
    adv, ret = beacon_rl.estimate("grpo", rewards, mask, UIDS, out=(out, out))
    assert adv is out and ret is out
    np.testing.assert_allclose(out.numpy(), EXPECTED, rtol=1e-6)
    # requires_grad inputs are read (detached), never written.
    adv, _ = beacon_rl.estimate("grpo", torch.tensor(REWARDS, requires_grad=True), torch.tensor(MASK), UIDS)
    np.testing.assert_allclose(adv.numpy(), EXPECTED, rtol=1e-6)


def test_torch_expanded_output_is_refused():
    torch = pytest.importorskip("torch")
    out = torch.zeros(1, 3).expand(4, 3)
    with pytest.raises(ValueError, match="out_advantages: its elements overlap"):
        beacon_rl.estimate("grpo", torch.tensor(REWARDS), torch.tensor(MASK), UIDS, out=(out, out))


# --- outputs sharing memory with inputs or each other, across objects ---------------------


def test_outputs_sharing_a_torch_storage_with_an_input_or_each_other_are_refused():
    # rust-numpy's borrow check compares arrays of one base object; two torch tensors over one
    # storage are two bases. Before, reinforce_plus_plus wrote its returns over its advantages
    # (a[:] and a) and returned wrong advantages without a word.
    torch = pytest.importorskip("torch")
    rewards, mask = torch.tensor(REWARDS), torch.tensor(MASK)
    a = torch.zeros(4, 3)
    with pytest.raises(ValueError, match="out_returns: the same memory as out_advantages"):
        beacon_rl.estimate("reinforce_plus_plus", rewards, mask, UIDS, out=(a, a[:]))
    with pytest.raises(ValueError, match="out_advantages: the same memory as token_level_rewards"):
        beacon_rl.estimate("grpo", rewards, mask, UIDS, out=(rewards[:], rewards[:]))
    # Disjoint halves of one storage are fine.
    both = torch.full((8, 3), float("nan"))
    adv, ret = beacon_rl.estimate("reinforce_plus_plus", rewards, mask, UIDS, out=(both[:4], both[4:]))
    want = beacon_rl.estimate("reinforce_plus_plus", REWARDS, MASK, UIDS)
    np.testing.assert_array_equal(adv.numpy(), want[0])
    np.testing.assert_array_equal(ret.numpy(), want[1])


# --- keys ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "index,row",
    [
        (np.array(["a", None, "b", "b"], dtype=object), 1),
        (np.array([None, None, None, None], dtype=object), 0),
        (np.array([1.0, float("nan"), 2.0, 2.0], dtype=object), 1),
        ([3, 3, None, 4], 2),
    ],
    ids=["one-none", "all-none", "nan", "list-none"],
)
def test_missing_keys_are_refused_with_their_row(index, row):
    # None (a missing uuid) grouped every such row into one group; NaN (never equal to itself)
    # is no key either.
    with pytest.raises(ValueError, match=rf"index: row {row} holds"):
        beacon_rl.estimate("grpo", REWARDS, MASK, index)
    with pytest.raises(ValueError, match=rf"traj_index: row {row} holds"):
        beacon_rl.estimate("beacon", REWARDS, MASK, UIDS, traj_index=index, milestones=np.zeros(4, bool))


def test_list_keys_are_compared_as_python_objects():
    # np.asarray([1, "1", ...]) makes both "1": one group where Python (and an object array)
    # sees two.
    as_list, _ = beacon_rl.estimate("grpo", REWARDS, MASK, [1, "1", "b", "b"])
    as_objects, _ = beacon_rl.estimate("grpo", REWARDS, MASK, np.array([1, "1", "b", "b"], dtype=object))
    np.testing.assert_array_equal(as_list, as_objects)
    # Rows 0 and 1 are singleton groups: GRPO gives a singleton its score / (1 + eps).
    np.testing.assert_allclose(as_list[0], [1 / (1 + 1e-6)] * 3, rtol=1e-6)
    np.testing.assert_array_equal(as_list[1], [0, 0, 0])
    # Lists of one key type keep their grouping.
    np.testing.assert_allclose(beacon_rl.estimate("grpo", REWARDS, MASK, ["a", "a", "b", "b"])[0], EXPECTED, rtol=1e-6)
    np.testing.assert_allclose(beacon_rl.estimate("grpo", REWARDS, MASK, (5, 5, 6, 6))[0], EXPECTED, rtol=1e-6)


# --- milestones as Python objects -----------------------------------------------------------


@pytest.mark.parametrize(
    "flags,row",
    [([True, 2, False, False], 1), ([0, 1, None, 0], 2), ([0, 1, 0, "0"], 3), ([float("nan"), 0, 0, 0], 0), ([0, -1, 0, 0], 1)],
)
def test_object_milestones_must_be_flags(flags, row):
    # astype(bool) read 2, -1, NaN and "0" as True and None as False.
    with pytest.raises(ValueError, match=rf"milestones: row {row} is"):
        beacon_rl.estimate("beacon", REWARDS, MASK, UIDS, traj_index=np.arange(4), milestones=np.array(flags, dtype=object))


def test_object_milestones_of_bools_and_0_1_are_the_bool_numbers():
    # One group of two 2-step trajectories, a success and a failure, a milestone on the
    # success's first step only.
    uid = np.array(["g"] * 4, dtype=object)
    kw = dict(traj_index=np.array([0, 0, 1, 1]), terminal_rewards=np.array([1.0, 1.0, 0.0, 0.0]))
    want, _ = beacon_rl.estimate("beacon_official", None, MASK, uid, milestones=np.array([1, 0, 0, 0], dtype=bool), **kw)
    got, _ = beacon_rl.estimate("beacon_official", None, MASK, uid, milestones=np.array([True, 0, 0.0, np.False_], dtype=object), **kw)
    np.testing.assert_array_equal(got, want)
    unflagged, _ = beacon_rl.estimate("beacon_official", None, MASK, uid, milestones=np.zeros(4, dtype=bool), **kw)
    assert not np.array_equal(want, unflagged)  # the flag matters here


# --- missing or mis-sized per-row columns name the caller's argument ----------------------


def test_step_estimators_without_any_reward_are_refused():
    # No terminal_rewards and no token_level_rewards: every R(τ) read as 0 before.
    for name in beacon_rl.STEP_ESTIMATORS:
        with pytest.raises(ValueError, match="missing input: terminal_rewards, row_scores or token_level_rewards"):
            beacon_rl.estimate(name, None, MASK, UIDS, **STEP_KW)


@pytest.mark.parametrize(
    "arg", ["index", "traj_index", "terminal_rewards", "milestones", "step_rewards", "anchor_obs", "reward_baselines"]
)
def test_a_short_column_is_named(arg):
    kw = dict(STEP_KW, terminal_rewards=np.array([1.0, 0.0, 1.0, 0.0]), reward_baselines=np.zeros(4))
    if arg == "index":
        index = UIDS[:3]
    else:
        index = UIDS
        kw[arg] = kw[arg][:3]
    name = "remax" if arg == "reward_baselines" else "gigpo"
    if name == "remax":
        kw = dict(reward_baselines=kw["reward_baselines"])
    with pytest.raises(ValueError, match=rf"^length mismatch: {arg} has 3 entries, expected 4$"):
        beacon_rl.estimate(name, REWARDS, MASK, index, **kw)


@pytest.mark.parametrize("arg", ["response_mask", "values", "old_log_probs", "sum_pi_squared", "rollout_is_weights"])
@pytest.mark.parametrize("axis", ["rows", "columns"])
def test_a_mis_shaped_matrix_is_named(arg, axis):
    # Every rows × L input is checked against token_level_rewards' shape before anything is read.
    shape = (3, 3) if axis == "rows" else (4, 2)
    kw = {arg: np.zeros(shape, dtype=np.int64 if arg == "response_mask" else np.float32)}
    mask = kw.pop("response_mask", MASK)
    got, want = (3, 4) if axis == "rows" else (2, 3)
    with pytest.raises(ValueError, match=rf"^length mismatch: {arg} {axis} has {got} entries, expected {want}$"):
        beacon_rl.estimate("grpo", REWARDS, mask, UIDS, **kw)


def test_an_anchor_without_utf8_form_is_named():
    # A Python str may hold a lone surrogate; Rust's &str cannot. Python's own
    # UnicodeEncodeError named no row.
    anchors = np.array(["s0", "s1", "s\ud800", "s1"], dtype=object)
    for config in (None, {"grouping": {"similarity": {"threshold": 0.9}}}):
        with pytest.raises(ValueError, match=r"^anchor_obs: row 2 has no UTF-8 form \(.*surrogates not allowed"):
            beacon_rl.estimate("gigpo", REWARDS, MASK, UIDS, config=config, **dict(STEP_KW, anchor_obs=anchors))


def test_non_finite_terminal_rewards_are_named():
    with pytest.raises(ValueError, match=r"^non-finite value inf in terminal_rewards at index 2$"):
        beacon_rl.estimate("beacon", REWARDS, MASK, UIDS, terminal_rewards=np.array([0, 0, np.inf, 0]), **STEP_KW)


@pytest.mark.parametrize(
    "kw,exc,pattern",
    [
        (dict(token_level_rewards=REWARDS[0]), TypeError, "token_level_rewards: expected a 2-D"),
        (dict(response_mask=MASK.astype(np.int16)), TypeError, "response_mask: expected a 2-D bool, uint8, int32, int64, float16, float32 or float64"),
        (dict(response_mask=MASK.astype(np.uint64)), TypeError, "response_mask: expected"),
        (dict(token_level_rewards=REWARDS.astype(np.float16)), TypeError, "token_level_rewards: expected"),
        (dict(response_mask=MASK * 2), ValueError, r"response_mask\[0, 0\] = 2"),
        (dict(response_mask=-MASK), ValueError, r"response_mask\[0, 0\] = -1"),
        (dict(token_level_rewards=np.where(MASK == 1, np.nan, 0).astype(np.float32)), ValueError, "token_level_rewards at index 0"),
        (dict(index=np.zeros(4, dtype=np.float64)), TypeError, "index: expected integer, string or object keys"),
    ],
    ids=["1-d", "int16-mask", "uint64-mask", "float16", "mask-2", "mask-minus-1", "nan", "float-keys"],
)
def test_wrong_dtypes_and_values_name_the_argument(kw, exc, pattern):
    args = dict(token_level_rewards=REWARDS, response_mask=MASK, index=UIDS)
    args.update(kw)
    with pytest.raises(exc, match=pattern):
        beacon_rl.estimate("grpo", **args)


def test_empty_batches():
    # Shape (0, L), as verl's estimators return for an empty batch.
    adv, ret = beacon_rl.estimate("grpo", REWARDS[:0], MASK[:0], UIDS[:0])
    assert adv.shape == (0, 3) and ret.shape == (0, 3)
    adv, ret = beacon_rl.estimate("grpo", REWARDS[:, :0], MASK[:, :0], UIDS)
    assert adv.shape == (4, 0) and ret.shape == (4, 0)


# --- the rest of the surface ---------------------------------------------------------------


def test_config_takes_numpy_scalars_and_names_bad_values():
    want, _ = beacon_rl.estimate("grpo", REWARDS, MASK, UIDS, config={"std_eps": 1e-3})
    got, _ = beacon_rl.estimate("grpo", REWARDS, MASK, UIDS, config={"std_eps": np.float64(1e-3)})
    np.testing.assert_array_equal(got, want)
    got, _ = beacon_rl.estimate("grpo", REWARDS, MASK, UIDS, config={"std_eps": np.float32(0.5)})
    want, _ = beacon_rl.estimate("grpo", REWARDS, MASK, UIDS, config={"std_eps": float(np.float32(0.5))})
    np.testing.assert_array_equal(got, want)
    with pytest.raises(TypeError, match="config: .*object is not a parameter value"):
        beacon_rl.estimate("grpo", REWARDS, MASK, UIDS, config={"std_eps": object()})


def test_unsupported_torch_outputs_are_named():
    torch = pytest.importorskip("torch")
    out = torch.zeros(4, 3, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match=r"out\[0\] \(advantages\): unsupported tensor"):
        beacon_rl.estimate("grpo", torch.tensor(REWARDS), torch.tensor(MASK), UIDS, out=(out, out))


@pytest.mark.skipif(
    not hasattr(beacon_rl._native, "_time_crate_call"),
    reason="the benchmark timer is built only with the binding's bench-timers feature",
)
def test_time_crate_call_refuses_negative_lengths():
    # The benchmark helper clamped -1 to 0 without a word.
    with pytest.raises(ValueError, match=r"lengths: row 1 has length -1"):
        beacon_rl._native._time_crate_call(
            "grpo",
            np.zeros((4, 3), np.float32),
            token_level_rewards=REWARDS,
            response_mask=MASK,
            index=np.array([0, 0, 1, 1]),
            reps=1,
            lengths=np.array([3, -1, 2, 1]),
        )


def test_turn_end_rewards_must_be_finite():
    # A NaN on the end of a turn other than the last was read as "no milestone".
    rewards = np.array([[0, np.nan, 0, 1.0]], dtype=np.float32)
    mask = np.array([[1, 1, 0, 1]])
    with pytest.raises(ValueError, match=r"token_level_rewards\[0, 1\] = NaN: rewards must be finite"):
        beacon_rl.estimate_turns("beacon", rewards, mask, np.array([0]))


# --- kept per-row buffers: a call never sees the previous call's columns -------------------


def test_kept_column_buffers_give_the_fresh_numbers_as_sizes_and_dtypes_change():
    """The binding keeps the per-row columns it derives (terminal rewards, f64 copies of f32 or
    strided columns, checked flags, the turns of estimate_turns) per thread; calls that shrink,
    grow and change dtype in turn must each give a fresh thread's bits."""
    rng = np.random.default_rng(2)

    def call(rows, dtype, strided, name):
        traj = np.repeat(np.arange(rows), 1)
        uid = np.array([f"u{r % 3}" for r in range(rows)], dtype=object)
        ep = rng.integers(0, 2, rows).astype(dtype)
        step = rng.normal(size=rows * 2).astype(dtype)[::2] if strided else rng.normal(size=rows).astype(dtype)
        flags = (rng.random(rows * 2) < 0.4).astype(np.int64)[::2] if strided else rng.random(rows) < 0.4
        mask = np.ones((rows, 3), dtype=np.int64)
        tlr = np.zeros((rows, 3), dtype=dtype)
        tlr[:, -1] = ep
        kw = dict(traj_index=traj, milestones=flags)
        if name == "gigpo":
            kw = dict(traj_index=traj, step_rewards=step, anchor_obs=np.array([f"s{r % 2}" for r in range(rows)], dtype=object))
        with_ep = beacon_rl.estimate(name, None, mask, uid, terminal_rewards=ep, **kw)[0]
        from_sums = beacon_rl.estimate(name, tlr, mask, uid, **kw)[0]
        # Dialogues: turns of mask 1 between masked tokens, 0/1 rewards on tokens.
        tmask = (rng.random((rows, 7)) < 0.6).astype(np.int64)
        trew = rng.integers(0, 2, (rows, 7)).astype(dtype)
        turns = beacon_rl.estimate_turns("gigpo" if name == "gigpo" else "beacon", trew, tmask, uid)[0]
        return with_ep, from_sums, turns

    plan = [(12, np.float64, False, "beacon"), (5, np.float32, True, "gigpo"), (20, np.float32, False, "beacon_official"), (3, np.float64, True, "beacon")]
    for args in plan:
        state = rng.bit_generator.state
        kept = call(*args)
        rng.bit_generator.state = state
        fresh = in_fresh_thread(lambda: call(*args))
        for k, f in zip(kept, fresh):
            np.testing.assert_array_equal(k, f)


@pytest.mark.parametrize("name", ["grpo", "rloo", "reinforce_plus_plus", "beacon_official"])
def test_shapes_are_checked_before_anything_is_read(name):
    # A zero-stride view with a bogus L (torch's expand, np.broadcast_to) was summed before the
    # crate compared its shape with the mask's: at L = 2^34 that took minutes. Filled with NaN
    # here (L = 2^20, quick either way), reading first reports the NaN instead of the shape.
    wide = np.broadcast_to(np.float32(np.nan), (4, 1 << 20))
    kw = dict(STEP_KW) if name in beacon_rl.STEP_ESTIMATORS else {}
    with pytest.raises(ValueError, match=r"^length mismatch: response_mask columns has 3 entries, expected 1048576$"):
        beacon_rl.estimate(name, wide, MASK, UIDS, **kw)


# --- anything in any slot ------------------------------------------------------------------


@st.composite
def column(draw, rows, cols, kind, exact=False):
    """One argument of `kind`, mostly of the batch's shape, sometimes a row or column off."""
    r = rows if exact else draw(st.sampled_from([rows, rows, rows, max(rows - 1, 0), rows + 1]))
    c = cols if exact else draw(st.sampled_from([cols, cols, cols, max(cols - 1, 0), cols + 1]))
    if kind == "matrix":
        dt = draw(st.sampled_from([np.float32, np.float64, np.float16]))
        # Exact in every dtype drawn (hypothesis refuses elements a dtype rounds; numpy 1.x
        # compares the rounded float32 1e30 with the float64 one).
        big = 6e4 if dt == np.float16 else 2.0**100
        odd = [np.nan, np.inf, big] if draw(st.booleans()) else []
        return draw(hnp.arrays(dt, (r, c), elements=st.sampled_from([0.0, 1.0, -1.0, 0.5] + odd)))
    if kind == "mask":
        dt = draw(st.sampled_from(["bool-bytes", np.uint8, np.int64, np.int32]))
        values = [0, 1] if draw(st.booleans()) else [0, 1, 1, 2]
        m = draw(hnp.arrays(np.uint8, (r, c), elements=st.sampled_from(values)))
        return m.view(bool) if dt == "bool-bytes" else m.astype(dt)
    if kind == "row":
        dt = draw(st.sampled_from([np.float32, np.float64]))
        return draw(hnp.arrays(dt, (r,), elements=st.sampled_from([0.0, 1.0, -1.0, np.nan])))
    if kind == "flags":
        vals = draw(st.lists(st.sampled_from([0, 1, True, False, 2, None]), min_size=r, max_size=r))
        return np.array(vals, dtype=object)
    if kind == "keys":
        ints = draw(st.lists(st.integers(0, 3), min_size=r, max_size=r))
        form = draw(st.sampled_from(["int", "str", "mixed", "list"]))
        if form == "int":
            return np.array(ints, dtype=np.int64)
        if form == "list":
            return [f"k{i}" for i in ints]
        return np.array([i if form == "mixed" and i % 2 else f"k{i}" for i in ints], dtype=object)
    return np.array([draw(st.sampled_from(["a", "b", 3])) for _ in range(r)], dtype=object)


ARGS = [
    ("token_level_rewards", "matrix"),
    ("response_mask", "mask"),
    ("traj_index", "keys"),
    ("terminal_rewards", "row"),
    ("values", "matrix"),
    ("old_log_probs", "matrix"),
    ("sum_pi_squared", "matrix"),
    ("rollout_is_weights", "matrix"),
    ("reward_baselines", "row"),
    ("milestones", "flags"),
    ("step_rewards", "row"),
    ("anchor_obs", "anchors"),
]


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_any_arguments_give_finite_numbers_or_a_typed_error(data):
    """Every estimator, any subset of arguments of any of these forms (bool masks holding 2,
    NaN, float16, short columns, None flags, mixed keys): finite arrays or ValueError/TypeError,
    never a panic (PanicException is no ValueError) nor a crash. Without estimate_turns' check
    of the keys' length, a short index panics here."""
    name = data.draw(st.sampled_from(beacon_rl.names()))
    rows, cols = data.draw(st.integers(0, 6)), data.draw(st.integers(0, 4))
    turns = name in beacon_rl.STEP_ESTIMATORS and data.draw(st.booleans())
    if turns:
        # verl's multi-turn rows: rewards and mask of one shape, the keys possibly off by one.
        kw = {key: data.draw(column(rows, cols, kind, exact=True)) for key, kind in ARGS[:2]}
    else:
        kw = {key: data.draw(column(rows, cols, kind)) for key, kind in ARGS if data.draw(st.booleans())}
    index = data.draw(column(rows, cols, "keys"))
    try:
        if turns:
            adv, ret = beacon_rl.estimate_turns(name, kw["token_level_rewards"], kw["response_mask"], index)
        else:
            adv, ret = beacon_rl.estimate(name, index=index, **kw)
    except (TypeError, ValueError):
        return
    assert np.isfinite(adv).all() and np.isfinite(ret).all()
