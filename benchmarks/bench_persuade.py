"""persuade: success of the scripted agents on UserRL's real tasks, per split.

The oracle (privileged: rebuts each reason by its key words), the public planner (asks why, then
rebuts the reason it was told in the user's words) and a generic arguer (a contrast, a dated study
and a cause, but only the claim's own words: what a policy gaming the cues without addressing any
reason would say) play every task of each split once (UserRL's split and the claim-disjoint one,
train and eval sides); the random agent plays ``--random-episodes`` seeded episodes per split side
(its tasks drawn by the seed). All use the symbolic persuadable user and the shipped knobs (16 turns,
success at "strongly disagree"). Also reported: turns to success, the oracle's judgement outcomes,
the median time of one oracle episode, and the judge on hand-written natural turns
(``tests/data/persuade_rebuttals.yaml``: each put as the first turn of its task; correct = a
rebuttal of the labelled reason). Prints one JSON document.

    python benchmarks/bench_persuade.py [--random-episodes 300]
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import time
from collections import Counter
from pathlib import Path

import yaml

from harness.agents.scripted import run_episode
from harness.envs.persuade import make_task
from harness.envs.persuade.data import TASK_SPLITS, split_rows
from harness.envs.registry import make
from harness.knobs.folder import defaults_dir
from harness.knobs.snapshot import KnobSnapshot


def knobs_with(base: KnobSnapshot, task_split: str) -> KnobSnapshot:
    """The shipped knobs with ``env.task_split`` set."""
    values = copy.deepcopy({k: dict(v) for k, v in base.values.items()})
    values["env"]["task_split"] = task_split
    return KnobSnapshot(values=values, user_rules=base.user_rules, reward_rules=base.reward_rules)


def generic_arguer(env) -> str:
    """A rebuttal in form only: the claim's words, a contrast, a number, a source, a cause."""
    claim = env.task.data["claim"].rstrip(".").lower()
    return (
        f"ASK: But the claim that {claim} is wrong: a {2000 + env.state.turn} study found the opposite because of cost."
    )


def best_stance(rec: dict) -> int:
    return max([0] + [t["user_reply"]["flags"].get("stance", 0) for t in rec["turns"] if t["user_reply"]])


def bench(task_split: str, split: str, random_episodes: int, base: KnobSnapshot) -> dict:
    """Scripted agents over every task of the split side, random agent over seeded episodes."""
    env = make("persuade", knobs=knobs_with(base, task_split), split=split)
    n = len(split_rows(task_split, split))
    times, oracle = [], []
    for i in range(n):
        t = time.perf_counter()
        oracle.append(run_episode(env, "oracle", 0, options={"task_index": i}))
        times.append((time.perf_counter() - t) * 1000.0)
    rand = [run_episode(env, "random", seed) for seed in range(random_episodes)]
    outcomes = Counter(e for r in oracle for t in r["turns"] for e in t["events"] if e.startswith("persuade_"))
    won = [r["num_turns"] for r in oracle if r["success"]]
    public = [run_episode(env, "public", 0, options={"task_index": i}) for i in range(n)]
    generic = [run_episode(env, generic_arguer, 0, options={"task_index": i}) for i in range(n)]
    return {
        "tasks": n,
        "oracle_success": round(sum(r["success"] for r in oracle) / n, 4),
        "oracle_turns_mean": round(statistics.mean(won), 2) if won else None,
        "oracle_outcomes": dict(outcomes),
        "oracle_episode_median_ms": round(statistics.median(times), 2),
        "public_success": round(sum(r["success"] for r in public) / n, 4),
        "public_turns_mean": round(statistics.mean([r["num_turns"] for r in public if r["success"]] or [0]), 2),
        "generic_success": round(sum(r["success"] for r in generic) / n, 4),
        "generic_best_stance_mean": round(statistics.mean(best_stance(r) for r in generic), 3),
        "random_episodes": random_episodes,
        "random_success": round(sum(r["success"] for r in rand) / max(1, random_episodes), 4),
        "random_best_stance_mean": round(statistics.mean(best_stance(r) for r in rand), 3) if rand else None,
    }


REBUTTALS = Path(__file__).resolve().parents[1] / "tests" / "data" / "persuade_rebuttals.yaml"


def judge_on_natural_turns(base: KnobSnapshot, path: Path = REBUTTALS) -> dict:
    """Per set of hand-written turns: rebuttals recognised for the labelled reason, attributed to
    another reason, or missed; and bare assertions that moved the user (false positives)."""
    env = make("persuade", knobs=base, split="eval")
    out: dict[str, Counter] = {}
    for case in yaml.safe_load(path.read_text(encoding="utf-8")):
        env.reset(seed=0, options={"task": make_task("userrl", "eval", case["task"])})
        env.step("ASK: " + case["text"])
        flags = env.state.turns[-1].user_reply.flags
        got = flags.get("reason") if flags["outcome"] == "rebuttal" else None
        c = out.setdefault(case["set"], Counter(dict.fromkeys(("rebuttals", "correct", "misattributed", "missed"), 0)))
        if case["reason"] is None:
            c["assertions"] += 1
            c["false_positive"] += got is not None
        else:
            c["rebuttals"] += 1
            c["correct" if got == case["reason"] else "misattributed" if got is not None else "missed"] += 1
    return {k: dict(v) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--random-episodes", type=int, default=300)
    args = ap.parse_args()
    base = KnobSnapshot.read_dir(defaults_dir())
    out = {
        "machine": {"python": platform.python_version(), "processor": platform.machine()},
        "splits": {
            f"{s}/{side}": bench(s, side, args.random_episodes, base) for s in TASK_SPLITS for side in ("train", "eval")
        },
        "judge_on_natural_turns": judge_on_natural_turns(base),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
