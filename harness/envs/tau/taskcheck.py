"""``eau tasks check tau``: every tau task's gold actions replay on τ²'s database and the gold
trajectory scores 1.0 (tau-bench v1's DB and outputs), as ``harness.envs.tau2.taskcheck`` does
for the τ² domains."""

from __future__ import annotations

import time
from typing import Any, Callable

from harness.envs.tau import domain_of, load_tasks, tau2_task
from harness.envs.tau2.taskcheck import TaskCheck, check_task, summarise


def run_tau_check(
    gym: str = "tau", limit: int | None = None, progress: Callable[[TaskCheck], None] | None = None
) -> dict[str, Any]:
    if gym != "tau":
        raise KeyError(f"no tau task set for {gym!r}")
    t0 = time.perf_counter()
    results = []
    for split in ("train", "eval"):
        for row in load_tasks(split)[:limit]:
            r = check_task(domain_of(row), tau2_task(row), split)
            results.append(r)
            if progress is not None:
                progress(r)
    return summarise(gym, results, time.perf_counter() - t0)
