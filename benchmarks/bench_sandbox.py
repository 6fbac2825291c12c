"""Sandbox overhead: process start and per-call cost, printed as JSON.

Measures, for the isolation modes available here (kernel when root, and process):

* ``start_s``: wall time of a run with an empty source and no calls (interpreter start, isolation,
  protocol, cleanup) — the fixed cost of one sandbox process;
* ``per_call_s``: extra wall time per trivial call, from runs with 1 and 101 calls;
* ``per_task_s``: a ColBench-like task (a small function, 10 calls);
* ``restart_s``: a run whose middle call times out (0.2 s budget) minus the budget: the cost of
  killing a child and starting another for the remaining calls.

Usage: ``python benchmarks/bench_sandbox.py [--repeat N]``. Numbers depend on machine load; the
JSON records the load average at start.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.sandbox import Limits, isolation_report, run_source  # noqa: E402

TASK = "def score(xs, k=3):\n    s = sorted(xs)\n    return round(sum(s[-k:]) / k, 2) if len(s) >= k else None\n"
TASK_CALLS = [f"score({list(range(i, i + 6))}, {1 + i % 4})" for i in range(10)]


def _timed(source: str, calls: list[str], limits: Limits, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        run_source(source, calls, limits)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def bench(mode: str, repeat: int) -> dict:
    limits = Limits(isolation=mode)
    run_source("", [], limits)  # warm file caches
    start = _timed("", [], limits, repeat)
    one = _timed("def f(x):\n    return x\n", ["f(1)"], limits, repeat)
    many = _timed("def f(x):\n    return x\n", ["f(1)"] * 101, limits, repeat)
    task = _timed(TASK, TASK_CALLS, limits, repeat)
    slow = Limits(isolation=mode, call_time=0.2)
    hang = "def f(x):\n    while x:\n        pass\n    return x\n"
    restart = _timed(hang, ["f(0)", "f(1)", "f(0)"], slow, max(3, repeat // 3)) - 0.2
    return {
        "mode": isolation_report(limits).get("mode"),
        "start_s": round(start, 4),
        "per_call_s": round((many - one) / 100, 6),
        "per_task_s": round(task, 4),
        "restart_s": round(restart, 4),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15, help="runs per measurement (median reported)")
    args = ap.parse_args()
    modes = ["kernel", "process"] if os.geteuid() == 0 else ["process"]
    out = {
        "load_average": os.getloadavg(),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "repeat": args.repeat,
        "results": [bench(m, args.repeat) for m in modes],
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
