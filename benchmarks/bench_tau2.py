"""τ² gyms and tau: scripted episodes and the symbolic customer's reply time.

For each gym and split: the scripted oracle's success rate and wall time per episode (median,
p95) over every task of the split (``--step N``: every N-th task), the random agent's success rate
on every ``--random-step``-th task, and the symbolic customer's reply time (median, p95 over
``--replies`` replies cycling through info questions, confirmations and wrap-ups, on the gym's
first task). Prints one JSON document.

    python benchmarks/bench_tau2.py [--gyms tau2_airline,tau2_retail,tau2_telecom,tau] [--step 1]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

from harness.agents.scripted import run_episode
from harness.envs.registry import make

QUESTIONS = (
    "Could you give me your name and zip code?",
    "What is your email address?",
    "I will cancel order #W0000000. Do you confirm (yes/no)?",
    "Which order do you mean?",
    "Is there anything else I can help you with?",
    "Please check your status bar.",
)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def episodes(gym: str, split: str, policy: str, step: int) -> dict[str, float]:
    env = make(gym, split=split)
    n = env.task_count(split)
    times, wins, turns = [], 0, []
    for i in range(0, n, step):
        t0 = time.perf_counter()
        rec = run_episode(env, policy, seed=i, options={"task_index": i})
        times.append((time.perf_counter() - t0) * 1000)
        wins += bool(rec["success"])
        turns.append(rec["num_turns"])
    k = len(times)
    return {
        "episodes": k,
        "success": round(wins / k, 4),
        "median_ms": round(statistics.median(times), 1),
        "p95_ms": round(pct(times, 0.95), 1),
        "mean_turns": round(sum(turns) / k, 2),
    }


def reply_times(gym: str, replies: int) -> dict[str, float]:
    env = make(gym)
    env.reset(seed=0, options={"task_index": 0})
    times = []
    for i in range(replies):
        q = QUESTIONS[i % len(QUESTIONS)] + f" ({i})"
        t0 = time.perf_counter_ns()
        env.user.reply(q, env.state)
        times.append((time.perf_counter_ns() - t0) / 1e6)
    return {"replies": replies, "median_ms": round(statistics.median(times), 3), "p95_ms": round(pct(times, 0.95), 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gyms", default="tau2_airline,tau2_retail,tau2_telecom,tau")
    ap.add_argument("--step", type=int, default=1)
    ap.add_argument("--random-step", type=int, default=3)
    ap.add_argument("--replies", type=int, default=2000)
    args = ap.parse_args()
    out = {"machine": platform.platform(), "python": platform.python_version(), "gyms": {}}
    for gym in args.gyms.split(","):
        # telecom's customer runs its phone's tools; the status-bar question is one of them
        out["gyms"][gym] = {
            "oracle_train": episodes(gym, "train", "oracle", args.step),
            "oracle_eval": episodes(gym, "eval", "oracle", args.step),
            "random_train": episodes(gym, "train", "random", args.random_step),
            "symbolic_reply": reply_times(gym, args.replies),
        }
        print(json.dumps({gym: out["gyms"][gym]}), flush=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
