"""set_num_threads: the crate's parallel paths on a pool the caller asks for give the bits of
the serial path; the default computes on the calling thread."""

import os
import time

import numpy as np
import pytest

import beacon_rl


def pool_threads(want, timeout=5.0):
    """This process's threads named by the binding's pools (beacon-rl-N), polled until there are
    `want` of them: a dropped pool's threads exit asynchronously."""
    deadline = time.monotonic() + timeout
    while True:
        n = 0
        for task in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{task}/comm") as f:
                    n += f.read().startswith("beacon-rl-")
            except OSError:  # the thread exited meanwhile
                pass
        if n == want or time.monotonic() > deadline:
            return n
        time.sleep(0.01)


@pytest.fixture
def restore_threads():
    yield
    beacon_rl.set_num_threads(1)


def step_batch(rng, groups, rollouts, steps, cols):
    """verl-agent's layout (one row per step), large enough for the crate to split: at least
    2^16 tokens per chunk for row passes, several groups for the group-parallel estimators."""
    rows = groups * rollouts * steps
    traj = np.repeat(np.arange(groups * rollouts), steps)
    uid = np.array([f"g{t // rollouts}" for t in traj], dtype=object)
    lens = rng.integers(1, cols + 1, rows)
    mask = (np.arange(cols)[None, :] < lens[:, None]).astype(np.int64)
    success = rng.integers(0, 2, groups * rollouts).astype(np.float32)
    rewards = np.zeros((rows, cols), np.float32)
    rewards[np.arange(rows), lens - 1] = success[traj]
    milestones = rng.random(rows) < 0.1
    anchors = np.array([f"s{rng.integers(4)}" for _ in range(rows)], dtype=object)
    return rewards, mask, uid, traj, milestones, anchors


@pytest.mark.parametrize("threads", [2, 3])
def test_threads_give_the_serial_bits(threads, restore_threads):
    rng = np.random.default_rng(threads)
    rewards, mask, uid, traj, milestones, anchors = step_batch(rng, 8, 4, 10, 512)
    runs = {
        "grpo": dict(),
        "rloo": dict(),
        "reinforce_plus_plus": dict(),
        "gae": dict(values=rng.standard_normal(rewards.shape).astype(np.float32)),
        "beacon_official": dict(traj_index=traj, milestones=milestones),
        "beacon": dict(traj_index=traj, milestones=milestones),
        "gigpo": dict(traj_index=traj, step_rewards=rewards.sum(1), anchor_obs=anchors),
    }
    assert beacon_rl.get_num_threads() == 1
    serial = {name: beacon_rl.estimate(name, rewards, mask, uid, **kw) for name, kw in runs.items()}
    assert pool_threads(0) == 0
    beacon_rl.set_num_threads(threads)
    assert beacon_rl.get_num_threads() == threads
    # The pool's threads exist: the calls below run on them.
    assert pool_threads(threads) == threads
    for name, kw in runs.items():
        adv, ret = beacon_rl.estimate(name, rewards, mask, uid, **kw)
        np.testing.assert_array_equal(adv, serial[name][0], err_msg=name)
        np.testing.assert_array_equal(ret, serial[name][1], err_msg=name)
    turns_serial = None
    beacon_rl.set_num_threads(1)
    turns_serial, _ = beacon_rl.estimate_turns("beacon", rewards, mask, uid)
    beacon_rl.set_num_threads(threads)
    turns, _ = beacon_rl.estimate_turns("beacon", rewards, mask, uid)
    np.testing.assert_array_equal(turns, turns_serial)


def test_default_is_the_calling_thread_and_zero_is_refused(restore_threads):
    assert beacon_rl.get_num_threads() == 1
    with pytest.raises(ValueError, match="at least 1 thread, got 0"):
        beacon_rl.set_num_threads(0)
    assert beacon_rl.get_num_threads() == 1
    beacon_rl.set_num_threads(2)
    beacon_rl.set_num_threads(1)
    assert beacon_rl.get_num_threads() == 1
    # Back to one: the pool's threads are gone.
    assert pool_threads(0) == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_computes_on_its_own_thread(restore_threads):
    # A child forked after set_num_threads(2) has none of the pool's threads: waiting for them
    # would hang it. It computes on its own thread, with the serial bits.
    rng = np.random.default_rng(11)
    rewards, mask, uid, *_ = step_batch(rng, 8, 4, 10, 512)
    want, _ = beacon_rl.estimate("grpo", rewards, mask, uid)
    beacon_rl.set_num_threads(2)
    beacon_rl.estimate("grpo", rewards, mask, uid)  # the pool has run
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report the result's bytes and the thread count, then exit at once
        try:
            os.close(r)
            got, _ = beacon_rl.estimate("grpo", rewards, mask, uid)
            ok = np.array_equal(got, want) and beacon_rl.get_num_threads() == 1
            os.write(w, b"ok" if ok else b"differs")
        finally:
            os._exit(0)
    os.close(w)
    deadline = time.monotonic() + 60
    while True:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung in estimate")
        time.sleep(0.02)
    with os.fdopen(r, "rb") as f:
        assert f.read() == b"ok"


def test_thread_counts_that_are_no_count_are_refused(restore_threads):
    # int() truncated 2.5 to 2 and took "2"; -1 raised OverflowError; a mistyped 10**6 would
    # have spawned threads until the system refused (a pool spawns all of its threads at once).
    with pytest.raises(TypeError):
        beacon_rl.set_num_threads(2.5)
    with pytest.raises(TypeError):
        beacon_rl.set_num_threads("2")
    with pytest.raises(ValueError, match="at least 1 thread, got -1"):
        beacon_rl.set_num_threads(-1)
    for n in (1025, 10**6, 2**70):
        with pytest.raises(ValueError, match=f"at most 1024 threads, got {n}"):
            beacon_rl.set_num_threads(n)
    assert beacon_rl.get_num_threads() == 1
    beacon_rl.set_num_threads(np.int64(2))  # numpy integers are integers
    assert beacon_rl.get_num_threads() == 2
