"""The binding's fixed cost per call: `beacon_rl.estimate("grpo", ..., out=(buf, buf))` on
3,840 rows (16 groups of 240, verl's uuid `index` as one repeated str object per group, or
the same groups as int64 ids), at 1 token per row (where the call is almost all binding) and
at 512 (bench shape B), with int64 and bool masks; and the crate's own call on the same arrays
(`_native._time_crate_call`: int64 ids, a kept batch builder and workspace, no Python), whose
difference to the binding's is the binding's own work. Median of 200 calls after 20 warm-up
calls, in µs. The timer is built only with the binding's `bench-timers` feature: install with
`MATURIN_PEP517_ARGS="--features bench-timers" pip install ./python`, then run by hand:
`python python/bench/fixed_cost.py`."""

import statistics
import time
import uuid

import numpy as np
import torch

import beacon_rl
from beacon_rl import _native

ROWS = 3840


def median_us(cols, index, mask_dtype):
    rewards = torch.zeros(ROWS, cols)
    mask = torch.ones(ROWS, cols, dtype=mask_dtype)
    buf = torch.empty(ROWS, cols)

    def call():
        beacon_rl.estimate("grpo", rewards, mask, index, out=(buf, buf))

    for _ in range(20):
        call()
    times = []
    for _ in range(200):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def crate_us(cols, mask_dtype):
    rewards = torch.zeros(ROWS, cols)
    mask = torch.ones(ROWS, cols, dtype=mask_dtype)
    buf = torch.empty(ROWS, cols)
    ids = np.repeat(np.arange(16), 240).astype(np.int64)
    wall, _ = _native._time_crate_call(
        "grpo", buf.numpy(), token_level_rewards=rewards.numpy(), response_mask=mask.numpy(), index=ids, reps=200
    )
    return statistics.median(wall) * 1e6


def main():
    uids = [str(uuid.uuid4()) for _ in range(16)]
    objects = np.array([uids[r // 240] for r in range(ROWS)], dtype=object)
    ids = np.repeat(np.arange(16), 240).astype(np.int64)
    for cols in (1, 512):
        cells = [
            f"{name} {median_us(cols, index, dtype):.0f} µs"
            for name, index, dtype in [
                ("uuid objects, int64 mask", objects, torch.long),
                ("int64 ids, int64 mask", ids, torch.long),
                ("uuid objects, bool mask", objects, torch.bool),
                ("int64 ids, bool mask", ids, torch.bool),
            ]
        ]
        print(f"{ROWS} rows x {cols} tokens: " + "; ".join(cells))
        print(
            f"{ROWS} rows x {cols} tokens, the crate's own call: "
            f"int64 mask {crate_us(cols, torch.long):.0f} µs; bool mask {crate_us(cols, torch.bool):.0f} µs"
        )


if __name__ == "__main__":
    main()
