"""Latency of a full scripted oracle episode per user gym (reset, every step with the symbolic user
and the reward model, the oracle's own planning, the episode record).

Target: median under 50 ms per episode for every gym. Each gym is warmed up once (knowledge base
parsing, rule compilation) before timing. Prints one JSON document.

    python benchmarks/bench_gyms.py [--episodes 100]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

from harness.agents.scripted import run_episode
from harness.envs.registry import make
from harness.knobs.folder import defaults_dir
from harness.knobs.snapshot import KnobSnapshot

GYMS = ("travel", "function", "telepathy", "intention")
TARGET_MS = 50.0


def bench(gym: str, episodes: int, knobs: KnobSnapshot) -> dict[str, float]:
    """Per-episode wall times (ms) of ``episodes`` oracle episodes of ``gym`` and their outcome."""
    env = make(gym, knobs=knobs)
    run_episode(env, "oracle", seed=10**6)  # warm-up: lazy tables and compiled rules
    times, turns, success = [], [], 0
    for seed in range(episodes):
        t = time.perf_counter()
        rec = run_episode(env, "oracle", seed=seed)
        times.append((time.perf_counter() - t) * 1000.0)
        turns.append(rec["num_turns"])
        success += bool(rec["success"])
    times.sort()
    return {
        "median_ms": round(statistics.median(times), 3),
        "p95_ms": round(times[int(0.95 * (len(times) - 1))], 3),
        "mean_turns": round(statistics.mean(turns), 2),
        "ms_per_turn": round(statistics.median(times) / statistics.mean(turns), 3),
        "oracle_success": success / episodes,
        "meets_target": statistics.median(times) < TARGET_MS,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=100, help="timed episodes per gym")
    args = ap.parse_args()
    knobs = KnobSnapshot.read_dir(defaults_dir())
    results = {gym: bench(gym, args.episodes, knobs) for gym in GYMS}
    print(
        json.dumps(
            {
                "benchmark": "bench_gyms",
                "episodes_per_gym": args.episodes,
                "target_median_ms": TARGET_MS,
                "python": platform.python_version(),
                "machine": platform.machine(),
                "gyms": results,
                "all_meet_target": all(r["meets_target"] for r in results.values()),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
