"""Benchmark (run by hand): what a float32 (or int32, bool) response mask costs against verl's
int64 mask, at shape B (3,840 rows × 512 tokens).

    python python/bench/mask_cost.py [--pairs 41] [--rows 3840] [--cols 512]

bool, uint8 and int64 masks are read in place; int32 and float masks are converted once per
call into a kept byte buffer, every entry checked to be exactly 0 or 1. Inputs as verl holds
them: float32 token_level_rewards, prefix masks of random length, uid an object array of uuid
strings (8 rollouts per prompt). Each comparison runs --pairs interleaved pairs (int64 call,
other-dtype call, in alternating order, each preceded by an untimed run of itself) and prints the
median CPU time (``time.process_time``: robust to the scheduler on a loaded machine; the GIL is
released but the call runs on the calling thread, so this is the call's own time) of each side
with its range, and the median and range of the per-pair difference and ratio; then the same
in wall-clock time.
"""

import argparse
import statistics
import time
import uuid

import numpy as np
import torch

import beacon_rl


def timed(f):
    """(CPU seconds, wall seconds) of one call of ``f``, after an untimed call of itself (caches
    and the kept buffers warm)."""
    f()
    c0, t0 = time.process_time(), time.perf_counter()
    f()
    return time.process_time() - c0, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=41)
    ap.add_argument("--rows", type=int, default=3840)
    ap.add_argument("--cols", type=int, default=512)
    args = ap.parse_args()
    rows, L = args.rows, args.cols
    g = torch.Generator().manual_seed(0)
    lens = torch.randint(1, L + 1, (rows,), generator=g)
    mask64 = (torch.arange(L)[None, :] < lens[:, None]).long()
    rewards = torch.zeros(rows, L)
    rewards[torch.arange(rows), lens - 1] = torch.randint(0, 2, (rows,), generator=g).float()
    uid = np.repeat(np.array([str(uuid.uuid4()) for _ in range(rows // 8)], dtype=object), 8)
    buf = torch.empty(rows, L)
    print(f"shape {rows} x {L}, torch {torch.__version__}, {args.pairs} pairs per comparison")
    calls = {
        "estimate(grpo, out=)": lambda m: beacon_rl.estimate("grpo", rewards, m, uid, out=(buf, buf)),
        "estimate_turns(beacon_official, out=)": lambda m: beacon_rl.estimate_turns("beacon_official", rewards, m, uid, out=(buf, buf)),
    }
    rows_out = []
    for call_name, call in calls.items():
        for dtype in (torch.float32, torch.int32, torch.float64, torch.bool):
            other = mask64.to(dtype)
            a, b = [], []
            for i in range(args.pairs):
                if i % 2 == 0:
                    a.append(timed(lambda: call(mask64)))
                    b.append(timed(lambda: call(other)))
                else:
                    b.append(timed(lambda: call(other)))
                    a.append(timed(lambda: call(mask64)))
            rows_out.append((call_name, str(dtype).removeprefix("torch."), a, b))
    for k, clock in ((0, "CPU"), (1, "wall")):
        print(f"\n{clock} time")
        print("| call | mask | int64 ms (range) | other ms (range) | other − int64 ms (range) | ratio (range) |")
        print("|---|---|---|---|---|---|")
        for call_name, dtype, a, b in rows_out:
            x = [p[k] for p in a]
            y = [p[k] for p in b]
            d = [(v - u) * 1e3 for u, v in zip(x, y)]
            r = [v / u if u > 0 else float("nan") for u, v in zip(x, y)]
            print(
                f"| {call_name} | {dtype} | {ms(x)} | {ms(y)} | "
                f"{statistics.median(d):+.2f} ({min(d):+.2f} to {max(d):+.2f}) | "
                f"{statistics.median(r):.2f}× ({min(r):.2f}–{max(r):.2f}) |"
            )


def ms(v):
    return f"{statistics.median(v) * 1e3:.2f} ({min(v) * 1e3:.2f}–{max(v) * 1e3:.2f})"

if __name__ == "__main__":
    main()
