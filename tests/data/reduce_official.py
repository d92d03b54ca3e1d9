"""Reduce ../shared/parity/official_public.json to the compact files in this folder.

The peer's token-level outputs are `step advantage x response mask` with prefix masks, so each
row is stored as one scalar plus its mask length. This script *asserts* that structure on every
row before dropping the token arrays, so the compact files carry the same information.

    python3 tests/data/reduce_official.py ../shared/parity/official_public.json
"""
import json
import sys

src = json.load(open(sys.argv[1]))
out = {"migpo": [], "gigpo": []}
for c in src["cases"]:
    inp, o = c["inputs"], c["outputs"]
    mask_len, adv32, adv64 = [], [], []
    for m, a32, a64 in zip(inp["response_mask"], o["advantages"], o["advantages_f64"]):
        n = sum(m)
        assert m == [1] * n + [0] * (len(m) - n), "mask is not a prefix"
        assert all(x == a32[0] for x in a32[:n]) and all(x == 0 for x in a32[n:])
        assert all(x == a64[0] for x in a64[:n]) and all(x == 0 for x in a64[n:])
        mask_len.append(n)
        adv32.append(a32[0])
        adv64.append(a64[0])
    rows = {
        "uid": inp["uid"],
        "traj_uid": inp["traj_uid"],
        "milestone": inp["milestone"],
        "episode_reward": inp["episode_reward"],
        "mask_len": mask_len,
        "step_rewards": o["step_rewards"],
        "advantage_f32": adv32,
        "advantage_f64": adv64,
    }
    if c["estimator"] == "gigpo":
        rows["step_reward"] = inp["step_reward"]
        rows["anchor_obs"] = inp["anchor_obs"]
        rows["step_groups"] = o["step_groups"]
    out[c["estimator"]].append({
        "name": c["name"],
        "layout": c["layout"],
        "params": c["params"],
        "tokens": len(inp["response_mask"][0]),
        "f32_near_cancellation": c["f32_near_cancellation"],
        "rows": rows,
    })
meta = {"source": src["source"], "reduced_by": "tests/data/reduce_official.py"}
for est, cases in out.items():
    json.dump({"meta": meta, "cases": cases}, open(f"tests/data/official_{est}.json", "w"), separators=(",", ":"))
json.dump({"meta": meta, "difflib": src["difflib"]}, open("tests/data/difflib.json", "w"), separators=(",", ":"))
