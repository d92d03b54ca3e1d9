"""Records ScienceWorld and TextWorld trajectories in the format of sample_trajectories.jsonl.

Each group is one task (ScienceWorld task and variation, or one generated TextWorld game) with
8 trajectories: the environment's gold action sequence, two mildly noisy variants (random valid
actions inserted), two harshly noisy variants (random valid actions inserted and one gold action
left out), two truncated variants (the gold sequence cut early) and a random policy (at most 30
random valid actions). Observations are cut to 600 characters. Deterministic for a given seed,
environment versions and Java.

    python -m venv /tmp/recvenv && /tmp/recvenv/bin/pip install scienceworld==1.2.3 textworld==1.7.0
    /tmp/recvenv/bin/python data/record_trajectories.py --out /tmp/recorded.jsonl \
        --sw-tasks 12 --sw-variations 2 --tw-games 6

A set recorded after the rules were fixed draws other variations and games (docs/discovery.md,
"A fresh set"):

    /tmp/recvenv/bin/python data/record_trajectories.py --out /tmp/fresh.jsonl --seed 2027 \
        --tw-first-seed 106 --exclude /tmp/recorded.jsonl data/sample_trajectories.jsonl

ScienceWorld needs Java (17 was used). The output is read from its path by
`cargo run --release --example discover_eval -- --data /tmp/recorded.jsonl`; it is not
committed (see docs/discovery.md).
"""

import argparse
import json
import os
import random
import subprocess
import sys

CUT = 600


def step_record(t, action, obs, score, prev, done, completed, subgoals=None):
    rec = {
        "t": t,
        "action": action,
        "observation": obs[:CUT],
        "score": score,
        "reward": score - prev,
        "done": done,
        "isCompleted": completed,
        "milestone": score > prev,
    }
    if subgoals is not None:
        rec["new_subgoals"] = subgoals
    return rec


def variants(gold, rng):
    """(kind, plan) pairs: a plan lists actions; None is a random valid action that is not
    risky (noise), False any random valid action (the random policy)."""
    out = [("gold", list(gold))]
    for level in ["mild", "mild", "harsh", "harsh"]:
        plan = list(gold)
        if level == "harsh" and len(plan) > 2:
            del plan[rng.randrange(1, len(plan))]
        for _ in range(rng.randint(2, max(2, len(gold) // 4 + 1))):
            plan.insert(rng.randrange(0, len(plan) + 1), None)
        out.append(("noisy", plan))
    for _ in range(2):
        cut = rng.randint(max(1, len(gold) // 4), max(1, 3 * len(gold) // 4))
        out.append(("truncated", list(gold[:cut])))
    out.append(("random", [False] * 30))
    return out


# Verbs a noisy insertion avoids: they end the episode or spoil the task at once (a wrong
# focus in ScienceWorld, eating or cooking an ingredient twice in TextWorld). The random
# policy uses every valid action.
RISKY = ("focus on", "eat", "drink", "cook", "slice", "dice", "chop", "drop", "put")


def pick(valid, rng, safe=True):
    if safe:
        valid = [a for a in valid if not a.startswith(RISKY)] or valid
    return rng.choice(sorted(valid)) if valid else "look"


def record_scienceworld(out, tasks, variations, seed, exclude):
    from scienceworld import ScienceWorldEnv

    env = ScienceWorldEnv("", envStepLimit=200)
    rng = random.Random(seed)
    names = env.get_task_names()
    for task in sorted(rng.sample(names, min(tasks, len(names)))):
        pool = [v for v in range(env.get_max_variations(task)) if f"sw/{task}/v{v}" not in exclude]
        for var in sorted(rng.sample(pool, min(variations, len(pool)))):
            env.load(task, var, generateGoldPath=True)
            gold = env.get_gold_action_sequence()
            group = f"sw/{task}/v{var}"
            for k, (kind, plan) in enumerate(variants(gold, rng)):
                obs0, info = env.reset()
                desc = env.get_task_description()
                prev, steps, done, score = 0, [], False, 0
                init = info.get("score", 0) or 0
                prev = init
                for t, action in enumerate(plan):
                    if done:
                        break
                    if action is None or action is False:
                        action = pick(info.get("valid", []), rng, safe=action is None)
                    obs, _, done, info = env.step(action)
                    score = info["score"]
                    completed = score >= 100
                    done = done or completed or score < 0
                    steps.append(step_record(t, action, obs, score, prev, done, completed))
                    prev = score
                success = bool(steps) and steps[-1]["isCompleted"]
                write(out, "scienceworld", task, var, group, k, kind, success, desc, obs0, init, 100, score, steps)


def write(out, env, task, var, group, k, kind, success, desc, obs0, init, max_score, final, steps):
    rec = {
        "env": env,
        "task": task,
        "variation": var,
        "group_id": group,
        "traj_id": f"{group}/{k}_{kind}",
        "kind": kind,
        "terminal_reward": 1 if success else 0,
        "task_description": desc,
        "initial_observation": obs0[:CUT],
        "initial_score": init,
        "max_score": max_score,
        "final_score": final,
        "success": success,
        "failed": not success,
        "steps": steps,
    }
    out.write(json.dumps(rec) + "\n")
    out.flush()


def record_textworld(out, games, first, seed, workdir):
    import textworld

    rng = random.Random(seed + 1)
    tw_make = os.path.join(os.path.dirname(sys.executable), "tw-make")
    infos = textworld.EnvInfos(policy_commands=True, admissible_commands=True, max_score=True, won=True, lost=True)
    for g in range(games):
        gseed = first + g
        path = os.path.join(workdir, f"cook{gseed}.z8")
        if not os.path.exists(path):
            cmd = [tw_make, "tw-cooking", "--recipe", "3", "--take", "2", "--go", "6", "--open",
                   "--cut", "--cook", "--seed", str(gseed), "--output", path, "-f", "--silent"]
            subprocess.run(cmd, check=True)
        group = f"tw/cook_r3_go6/s{gseed}"
        env = textworld.start(path, request_infos=infos)
        state = env.reset()
        gold = list(state["policy_commands"])
        for k, (kind, plan) in enumerate(variants(gold, rng)):
            state = env.reset()
            obs0, prev, steps, done = state.feedback, 0, [], False
            for t, action in enumerate(plan):
                if done:
                    break
                if action is None or action is False:
                    action = pick(state["admissible_commands"] or [], rng, safe=action is None)
                state, score, done = env.step(action)
                steps.append(step_record(t, action, state.feedback, score, prev, done, bool(state["won"])))
                prev = score
            success = bool(steps) and steps[-1]["isCompleted"]
            write(out, "textworld", "tw-cooking", gseed, group, k, kind, success,
                  "", obs0, 0, state["max_score"], prev, steps)
        env.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--sw-tasks", type=int, default=12)
    p.add_argument("--sw-variations", type=int, default=2)
    p.add_argument("--tw-games", type=int, default=6)
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--tw-first-seed", type=int, default=100, help="seed of the first TextWorld game")
    p.add_argument("--exclude", nargs="*", default=[], help="JSONL files whose groups are not drawn again")
    p.add_argument("--workdir", default="/tmp/tw-games")
    a = p.parse_args()
    exclude = {json.loads(line)["group_id"] for path in a.exclude for line in open(path) if line.strip()}
    os.makedirs(a.workdir, exist_ok=True)
    with open(a.out, "w") as out:
        if a.tw_games:
            record_textworld(out, a.tw_games, a.tw_first_seed, a.seed, a.workdir)
        if a.sw_tasks:
            record_scienceworld(out, a.sw_tasks, a.sw_variations, a.seed, exclude)


if __name__ == "__main__":
    main()
