"""Benchmark (run by hand): beacon-rl against verl 0.9.1 and the BEACON release, in one process,
on the same tensors.

    python python/bench/bench_verl.py                                   # shapes B and C
    python python/bench/bench_verl.py --beacon-release /tmp/beacon-release --reps 9

Shapes: B = 16 prompts × 8 rollouts × 30 steps = 3840 step rows, C = 64 × 16 × 30 =
30720 rows; L = 512 tokens. Inputs as verl holds them: float32 token_level_rewards (a step row's
episode reward on its last valid token, as verl-agent places it), int64 response_mask (prefix
masks of random length), `index`/`uid` an object array of uuid strings (one object per group,
repeated as verl's np.repeat does), `traj_uid` strings, a milestone flag on 10% of the steps.

Every row prints the median and range (min–max) of --reps timed runs after one warm-up, in
wall-clock and in CPU time (time.process_time, all threads of the process: robust to the
scheduler on a loaded machine, but it adds up torch's intra-op threads where verl uses them).
Ratios are taken between medians of the same process run; the binding's overhead is also given
per interleaved pair (binding call and crate call, each preceded by an untimed run of itself, in an
order that alternates between pairs, one block of --pair-reps pairs per comparison with nothing
else run in between; 101 by default), as the median and range of the ratios.

- grpo: verl's compute_grpo_outcome_advantage and compute_grpo_vectorized_outcome_advantage
  against beacon_rl.estimate("grpo") returning a fresh torch float32 tensor (verl's contract)
  and with out= a kept buffer; both again on two threads (beacon_rl.set_num_threads(2), opt-in;
  the script checks that the result equals the serial one bit for bit).
- binding overhead: beacon_rl.estimate("grpo", ..., out=(buf, buf)) from the torch tensors and
  uuid keys, against the crate's own call on the same arrays with int64 group ids and no Python
  around it (`_native._time_crate_call`, built only with the binding's `bench-timers` feature:
  `MATURIN_PEP517_ARGS="--features bench-timers" pip install ./python`; kept BatchBuilder +
  Workspace, `estimate_into` the f32 buffer), with the int64 mask (crate: as the matrix, which is what the binding hands it, the
  crate testing each entry for 0/1 as it writes that token; and as per-row lengths, the
  cheapest form a caller can hold) and with the mask as a bool tensor.
- beacon_official end to end from a verl-agent DataProto (compute_step_advantages, in place),
  and, given the release (--beacon-release DIR or $BEACON_RELEASE: a directory holding
  `migpo/__init__.py` and `migpo/core_migpo.py` of ZJU-REAL/BEACON at commit db9347f, e.g.
  `for f in __init__.py core_migpo.py; do git --git-dir=<clone>/.git show db9347f:migpo/$f >
  DIR/migpo/$f; done`; it imports only numpy, torch and verl's DataProto), the release's MiGPO on the
  same DataProto: `compute_migpo_step_rewards` then `compute_migpo_advantage`, as its
  ray_trainer calls them (WebShop path: `milestone_achieved`; the scripts' gamma = 0.95,
  step_advantage_w = 1, mode = mean_norm, which are beacon_official's defaults). The two
  advantage tensors are compared. The release runs at B only unless --migpo-at-c (its segment
  grouping is quadratic in the rows: about 64× B's time at C).

What the release needed: its trainer reads the milestone column as
`non_tensor_batch.get('milestone_achieved') or ...`, which raises "truth value of an array ...
is ambiguous" for any numpy column of more than one row, so the column is passed to
compute_migpo_advantage directly; compute_migpo_step_rewards reads `batch['responses']` (only
for its device and row count), so the DataProto carries a zero `responses` tensor; its code
default gamma is 0.99 where the scripts use 0.95, so gamma is passed explicitly. The release
computes in float32 torch, the crate in float64 rounded once to float32: the advantages agree to
about 1e-6 (a float32 ulp at |A| ≈ 9).
"""

import argparse
import importlib
import os
import statistics
import sys
import time
import uuid

import numpy as np
import torch

import beacon_rl
from beacon_rl import _native


class Timing:
    """Wall-clock and CPU (time.process_time: every thread of the process) seconds per run."""

    def __init__(self, wall, cpu):
        self.wall, self.cpu = list(wall), list(cpu)

    def med(self, clock):
        return statistics.median(getattr(self, clock))

    def __str__(self):
        return "  ".join(
            f"{statistics.median(ts) * 1e3:9.2f} [{min(ts) * 1e3:.2f}–{max(ts) * 1e3:.2f}]" for ts in (self.wall, self.cpu)
        )


def run_once(fn):
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def timeit(fn, reps):
    fn()
    runs = [run_once(fn) for _ in range(reps)]
    return Timing([w for w, _ in runs], [c for _, c in runs])


def batch(groups, rollouts, steps, L, seed=0):
    g = torch.Generator().manual_seed(seed)
    rows = groups * rollouts * steps
    lens = torch.randint(L // 8, L + 1, (rows,), generator=g)
    mask = (torch.arange(L)[None, :] < lens[:, None]).long()
    traj = np.repeat(np.arange(groups * rollouts), steps)
    success = torch.randint(0, 2, (groups * rollouts,), generator=g).float()
    episode = success[torch.from_numpy(traj)]
    rewards = torch.zeros(rows, L)
    rewards[torch.arange(rows), lens - 1] = episode
    uids = [str(uuid.uuid4()) for _ in range(groups)]
    # One uuid per prompt group (rollouts × steps rows), one object repeated as verl does.
    index = np.array([uids[t // rollouts] for t in traj], dtype=object)
    traj_uids = [str(uuid.uuid4()) for _ in range(groups * rollouts)]
    traj_uid = np.array([traj_uids[t] for t in traj], dtype=object)
    milestone = (torch.rand(rows, generator=g) < 0.1).numpy()
    return rewards, mask, index, traj_uid, milestone


def load_release(path):
    """The release's migpo/core_migpo.py, imported from a checkout (never vendored here)."""
    if not path:
        return None
    if not os.path.isfile(os.path.join(path, "migpo", "core_migpo.py")):
        sys.exit(f"--beacon-release {path}: no migpo/core_migpo.py there")
    sys.path.insert(0, path)
    try:
        return importlib.import_module("migpo.core_migpo")
    finally:
        sys.path.remove(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--migpo-reps", type=int, default=3)
    # The binding's overhead is a few percent of a call on a machine whose calls vary by ±30%
    # from one run to the next: it takes many pairs (each call about 1 ms at B).
    ap.add_argument("--pair-reps", type=int, default=101)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--shapes", default="B,C")
    ap.add_argument("--beacon-release", default=os.environ.get("BEACON_RELEASE"))
    ap.add_argument("--migpo-at-c", action="store_true")
    args = ap.parse_args()
    from verl import DataProto
    from verl.trainer.ppo import core_algos
    from beacon_rl.verl import compute_step_advantages

    release = load_release(args.beacon_release)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, reps {args.reps}, pairs {args.pair_reps}, "
          f"release {'at ' + args.beacon_release if release else 'not given'}")
    shapes = {"B": (16, 8, 30), "C": (64, 16, 30)}
    for label in args.shapes.split(","):
        rewards, mask, index, traj_uid, milestone = batch(*shapes[label], args.tokens)
        rows = rewards.shape[0]
        print(f"\n{label}: {rows} rows × {args.tokens} tokens")
        res = {}

        # grpo from verl's tensors.
        res["verl grpo"] = timeit(lambda: core_algos.compute_grpo_outcome_advantage(rewards, mask, index), args.reps)
        res["verl grpo_vectorized"] = timeit(
            lambda: core_algos.compute_grpo_vectorized_outcome_advantage(rewards, mask, index), args.reps
        )
        res["beacon_rl grpo -> fresh torch f32"] = timeit(lambda: beacon_rl.estimate("grpo", rewards, mask, index), args.reps)
        buf = torch.empty_like(rewards)
        res["beacon_rl grpo, out=(buf, buf)"] = timeit(
            lambda: beacon_rl.estimate("grpo", rewards, mask, index, out=(buf, buf)), args.reps
        )
        # The same on two threads (beacon_rl.set_num_threads(2), opt-in: the crate's parallel
        # row passes, same bits; CPU time adds both threads).
        beacon_rl.set_num_threads(2)
        res["beacon_rl grpo -> fresh, 2 threads"] = timeit(lambda: beacon_rl.estimate("grpo", rewards, mask, index), args.reps)
        res["beacon_rl grpo, out=, 2 threads"] = timeit(
            lambda: beacon_rl.estimate("grpo", rewards, mask, index, out=(buf, buf)), args.reps
        )
        threaded, _ = beacon_rl.estimate("grpo", rewards, mask, index)
        beacon_rl.set_num_threads(1)
        want, _ = core_algos.compute_grpo_outcome_advantage(rewards, mask, index)
        got, _ = beacon_rl.estimate("grpo", rewards, mask, index)
        err = (got - want).abs().max().item()
        if not torch.equal(threaded, got):
            sys.exit("grpo on 2 threads differs from the serial result")

        # The binding's overhead over the crate's own call, interleaved pairs.
        r_np, m_np, b_np = rewards.numpy(), mask.numpy(), buf.numpy()
        _, inv = np.unique(index.astype(str), return_inverse=True)
        ids = inv.astype(np.int64).ravel()
        lengths = m_np.sum(axis=1).astype(np.int64)
        mask_bool = mask.bool()
        mb_np = mask_bool.numpy()
        py, rust, py_len, rust_len = Timing([], []), Timing([], []), Timing([], []), Timing([], [])
        py_bool, rust_bool = Timing([], []), Timing([], [])
        beacon_rl.estimate("grpo", rewards, mask, index, out=(buf, buf))
        def binding(acc, m):
            # One untimed run first, as `_time_crate_call` does before its timed run.
            call = lambda: beacon_rl.estimate("grpo", rewards, m, index, out=(buf, buf))  # noqa: E731
            call()
            w, c = run_once(call)
            acc.wall.append(w)
            acc.cpu.append(c)

        def crate(acc, m, extra):
            w, c = _native._time_crate_call(
                "grpo", b_np, token_level_rewards=r_np, response_mask=m, index=ids, reps=1, **extra
            )
            acc.wall += w
            acc.cpu += c

        # One block of pairs per comparison, nothing else run between a block's calls, the order
        # within a pair alternating: at B the inputs nearly fit in the last-level cache, and
        # what the previous call left there shifts a call's time by more than the binding
        # costs, so both calls of a comparison must follow the same calls equally often. (A
        # single round of all five calls, forward then backward, let the crate's bool call
        # and the binding's int64 call follow themselves half the time and the others never.)
        blocks = [
            (lambda: binding(py, mask), lambda: crate(rust, m_np, {})),
            (lambda: binding(py_len, mask), lambda: crate(rust_len, m_np, {"lengths": lengths})),
            (lambda: binding(py_bool, mask_bool), lambda: crate(rust_bool, mb_np, {})),
        ]
        for pair in blocks:
            for rep in range(args.pair_reps):
                for call in pair if rep % 2 == 0 else pair[::-1]:
                    call()
        res["  binding, int64 mask: estimate(out=(buf, buf))"] = py
        res["  crate call, int64 mask matrix"] = rust
        res["  crate call, mask as lengths"] = rust_len
        res["  binding, bool mask: estimate(out=(buf, buf))"] = py_bool
        res["  crate call, bool mask matrix"] = rust_bool

        # beacon_official from a verl-agent DataProto.
        data = DataProto.from_dict(
            tensors={"token_level_rewards": rewards, "response_mask": mask, "responses": torch.zeros_like(mask)},
            non_tensors={"uid": index, "traj_uid": traj_uid, "milestone_achieved": milestone.astype(object)},
        )
        key = "milestone_achieved"
        compute_step_advantages(data, "beacon_official", milestone_key=key)  # allocates advantages once
        res["beacon_official from DataProto (in place)"] = timeit(
            lambda: compute_step_advantages(data, "beacon_official", milestone_key=key), args.reps
        )
        ours = data.batch["advantages"].clone()
        migpo_adv = None
        if release is not None and (label == "B" or args.migpo_at_c):

            def migpo():
                step_rewards = release.compute_migpo_step_rewards(data, gamma=0.95)
                return release.compute_migpo_advantage(
                    token_level_rewards=data.batch["token_level_rewards"],
                    step_rewards=step_rewards,
                    response_mask=data.batch["response_mask"],
                    actions=None,
                    index=data.non_tensor_batch["uid"],
                    traj_uid=data.non_tensor_batch["traj_uid"],
                    trial_id=None,
                    gamma=0.95,
                    step_advantage_w=1.0,
                    mode="mean_norm",
                    milestone_achieved=data.non_tensor_batch[key],
                )[0]

            migpo_adv = migpo()
            res["release MiGPO (db9347f) on the same DataProto"] = timeit(migpo, args.migpo_reps)

        print(f"  {'ms: median [min–max]':50s} {'wall':>24s}  {'cpu':>22s}")
        for k, v in res.items():
            print(f"  {k:50s} {v}")
        for clock in ("wall", "cpu"):
            med = {k: v.med(clock) for k, v in res.items()}
            fresh, out = med["beacon_rl grpo -> fresh torch f32"], med["beacon_rl grpo, out=(buf, buf)"]
            print(f"  [{clock}] grpo: {med['verl grpo'] / fresh:.1f}× verl grpo, "
                  f"{med['verl grpo_vectorized'] / fresh:.1f}× grpo_vectorized (fresh tensor); "
                  f"with out=: {med['verl grpo'] / out:.1f}×, {med['verl grpo_vectorized'] / out:.1f}×")
            fresh2, out2 = med["beacon_rl grpo -> fresh, 2 threads"], med["beacon_rl grpo, out=, 2 threads"]
            print(f"  [{clock}] grpo, 2 threads: {med['verl grpo'] / fresh2:.1f}× verl grpo, "
                  f"{med['verl grpo_vectorized'] / fresh2:.1f}× grpo_vectorized (fresh tensor); "
                  f"with out=: {med['verl grpo'] / out2:.1f}×, {med['verl grpo_vectorized'] / out2:.1f}×")
            for what, top, base in (
                ("int64 mask / crate, int64 matrix", py, rust),
                ("int64 mask / crate, lengths", py_len, rust_len),
                ("bool mask / crate, bool matrix", py_bool, rust_bool),
            ):
                ratios = sorted(p / r for p, r in zip(getattr(top, clock), getattr(base, clock)))
                print(f"  [{clock}] binding {what}: median of pairs "
                      f"{statistics.median(ratios):.3f} [{ratios[0]:.3f}–{ratios[-1]:.3f}], "
                      f"of medians {top.med(clock) / base.med(clock):.3f}")
            if migpo_adv is not None:
                m = med["release MiGPO (db9347f) on the same DataProto"] / med["beacon_official from DataProto (in place)"]
                print(f"  [{clock}] beacon_official: {m:.0f}× the release's MiGPO")
        print(f"  max |ours − verl grpo| = {err:.2e}")
        if migpo_adv is not None:
            diff = (ours - migpo_adv).abs()
            rel = (diff / migpo_adv.abs().clamp(min=1.0)).max().item()
            print(f"  max |beacon_official − release MiGPO| = {diff.max().item():.2e} (relative to "
                  f"max(1, |release|): {rel:.2e}; |release| up to {migpo_adv.abs().max().item():.2f})")


if __name__ == "__main__":
    main()
