"""Hypothesis properties: arbitrary arrays never crash the interpreter; results are either a
typed exception or finite arrays of the input's shape and dtype."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import beacon_rl

FLOATS = st.sampled_from([np.float32, np.float64])
MASKS = st.sampled_from([bool, np.uint8, np.int64])
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def verl_batches(draw):
    rows = draw(st.integers(0, 12))
    width = draw(st.integers(0, 6))
    fdt = draw(FLOATS)
    rewards = draw(
        hnp.arrays(fdt, (rows, width), elements=st.floats(-1e3, 1e3, width=32, allow_nan=False))
    )
    mask = draw(hnp.arrays(draw(MASKS), (rows, width), elements=st.integers(0, 1)))
    groups = draw(st.integers(1, 4))
    index = draw(hnp.arrays(np.int64, (rows,), elements=st.integers(0, groups - 1)))
    return rewards, mask, index


@SETTINGS
@given(batch=verl_batches(), name=st.sampled_from(["grpo", "rloo", "opo", "gpg", "grpo_vectorized", "reinforce_plus_plus"]))
def test_verl_estimators_shape_dtype_or_value_error(batch, name):
    rewards, mask, index = batch
    try:
        adv, ret = beacon_rl.estimate(name, rewards, mask, index)
    except ValueError:
        return  # the crate's typed errors (empty batch, undefined statistics, ...)
    assert adv.shape == rewards.shape and ret.shape == rewards.shape
    assert adv.dtype == rewards.dtype and ret.dtype == rewards.dtype
    assert np.isfinite(adv).all() and np.isfinite(ret).all()
    # Masked tokens carry no advantage.
    assert (adv[mask == 0] == 0).all()


@SETTINGS
@given(
    data=hnp.arrays(
        st.sampled_from([np.float16, np.int8, np.int32, np.float64, np.complex64, np.bool_, object]),
        hnp.array_shapes(min_dims=0, max_dims=3, max_side=4),
        elements=None,
    ).filter(lambda a: a.dtype != object),
    which=st.sampled_from(["token_level_rewards", "response_mask", "index", "milestones"]),
)
def test_arbitrary_arrays_raise_typed_errors(data, which):
    """Any array in any slot: a result or TypeError/ValueError, never a crash."""
    rows = data.shape[0] if data.ndim else 1
    kwargs = dict(
        token_level_rewards=np.zeros((rows, 3)),
        response_mask=np.ones((rows, 3), dtype=bool),
        index=np.zeros(rows, dtype=np.int64),
    )
    kwargs[which] = data
    try:
        adv, _ = beacon_rl.estimate("beacon" if which == "milestones" else "grpo", **kwargs)
    except (TypeError, ValueError):
        return
    assert np.isfinite(adv).all()


@st.composite
def dialogues(draw):
    """verl multi-turn rows: turns of mask 1 separated by masked tokens."""
    rows = draw(st.integers(1, 8))
    width = draw(st.integers(1, 12))
    mask = draw(hnp.arrays(np.int64, (rows, width), elements=st.integers(0, 1)))
    rewards = draw(hnp.arrays(np.float32, (rows, width), elements=st.sampled_from([0.0, 0.0, 1.0, -1.0, 0.5])))
    index = draw(hnp.arrays(np.int64, (rows,), elements=st.integers(0, 2)))
    return rewards, mask, index


@SETTINGS
@given(d=dialogues(), name=st.sampled_from(["beacon", "beacon_official", "beacon:ablation=full", "gigpo"]))
def test_turn_convention_writes_only_turn_tokens(d, name):
    rewards, mask, index = d
    try:
        adv, ret = beacon_rl.estimate_turns(name, rewards, mask, index)
    except ValueError:
        return
    assert adv.shape == rewards.shape and adv.dtype == np.float32
    assert np.isfinite(adv).all()
    assert (adv[mask == 0] == 0).all()
    np.testing.assert_array_equal(adv, ret)
    # Every token of one turn carries the same advantage.
    for r in range(mask.shape[0]):
        j = 0
        while j < mask.shape[1]:
            if mask[r, j]:
                k = j
                while k < mask.shape[1] and mask[r, k]:
                    k += 1
                assert (adv[r, j:k] == adv[r, j]).all()
                j = k
            else:
                j += 1
