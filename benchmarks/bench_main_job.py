"""The README main job, timed and scored: `eau train --preset cpu-small` for several seeds.

For each seed, in a fresh folder (its own knobs, runs and eval results; the model cache is shared
unless ``--cold-cache``), the exact command a new user runs, with ``--seed``. Reported per seed,
from the run's own files:

* wall time of the whole command and of each phase (model load, warm start, evaluation before, PPO
  steps, evaluation after), read from ``log.txt`` and ``status.json``;
* seconds from the start to the first line of ``log.txt`` that reports progress with a number
  (a warm-start update's loss), and to the first PPO metrics line (``metrics.jsonl``);
* held-out success and reward before and after, per gym, from ``eval_results/<run>/`` (the fixed
  protocol ``eval/protocol-intention-cpu.yaml``), and the change;
* training success and reward at the first and last steps.

Target (issue "The first hour of a new user"): the whole job in at most 30 minutes on a quiet 2-core
machine, held-out success up by at least +0.2 for every seed, a progress line within 2 minutes.

    python benchmarks/bench_main_job.py --seeds 0 1 2 [--work DIR] [--cold-cache]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TARGET_MINUTES, TARGET_DELTA, TARGET_FIRST_LINE_S = 30.0, 0.2, 120.0


def _t(line: str) -> float | None:
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)Z", line)
    return datetime.fromisoformat(m.group(1)).timestamp() if m else None


def phases(log_lines: list[str], t_start: float) -> dict[str, float | None]:
    """Seconds from the command's start at which each phase began, from log.txt's timestamps."""
    marks = {
        "warm_start": "warm start: ",
        "first_progress_line": "warm start: update ",
        "eval_before": "evaluating the starting policy",
        "first_step": "step 0: ",
        "eval_after": "evaluating the final policy",
        "finished": "run finished",
    }
    out: dict[str, float | None] = {k: None for k in marks}
    for line in log_lines:
        t = _t(line)
        for key, needle in marks.items():
            if out[key] is None and t is not None and needle in line:
                out[key] = round(t - t_start, 1)
    return out


def one_seed(seed: int, work: Path, cache_dir: str | None, extra: list[str]) -> dict[str, Any]:
    root = work / f"seed{seed}"
    root.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "EAU_RUNS_DIR": str(root / "runs"), "EAU_EVAL_DIR": str(root / "eval_results")}
    env.pop("EAU_KNOBS_DIR", None)  # as a new user: ./knobs made from the packaged defaults
    if cache_dir:
        env["EAU_CACHE_DIR"] = cache_dir
    run_id = f"main-seed{seed}"
    cmd = [
        sys.executable,
        "-m",
        "harness.cli.main",
        "train",
        "--preset",
        "cpu-small",
        "--seed",
        str(seed),
        "--run-id",
        run_id,
        "--json",
        *extra,
    ]
    t0 = time.time()
    proc = subprocess.Popen(
        cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=open(root / "stderr.txt", "w"), text=True
    )
    metrics = root / "runs" / run_id / "metrics.jsonl"
    first_metrics_s = None
    while proc.poll() is None:
        if first_metrics_s is None and metrics.exists() and metrics.stat().st_size:
            first_metrics_s = round(time.time() - t0, 1)
        time.sleep(0.5)
    wall = time.time() - t0
    out = proc.stdout.read()
    if proc.returncode != 0:
        raise RuntimeError(f"seed {seed}: exit {proc.returncode}; see {root / 'stderr.txt'}")
    doc = json.loads(out)
    run = root / "runs" / run_id
    rows = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()]
    log = (run / "log.txt").read_text().splitlines()
    ev = doc["evaluation"]
    return {
        "seed": seed,
        "wall_s": round(wall, 1),
        "phases_s": phases(log, t0),
        "first_metrics_line_s": first_metrics_s,
        "steps": len(rows),
        "step_s_median": sorted(r["time_step_s"] for r in rows)[len(rows) // 2],
        "train_success_first_last": [rows[0]["success_rate"], rows[-1]["success_rate"]],
        "train_success_last5": round(sum(r["success_rate"] for r in rows[-5:]) / len(rows[-5:]), 3),
        "held_out": ev["gyms"],
        "held_out_overall": ev["overall"],
        "delta_success": round(ev["overall"]["success_rate_delta"], 4),
        "command": " ".join(cmd[2:]),
        "dir": str(root),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--work", type=Path, default=None, help="keep every seed's folder here (default: a temp folder)")
    ap.add_argument("--cold-cache", action="store_true", help="each seed on an empty model cache (de-quantises)")
    ap.add_argument(
        "--set",
        dest="extra",
        action="append",
        default=[],
        help="extra `eau train --set` overrides (repeatable): for trying recipes, not the target",
    )
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="eau-main-job-"))
    extra = [x for e in args.extra for x in ("--set", e)]
    load0 = os.getloadavg()
    results = []
    for s in args.seeds:
        cache = str(work / f"cache{s}") if args.cold_cache else None
        results.append(one_seed(s, work, cache, extra))
        print(
            json.dumps({k: results[-1][k] for k in ("seed", "wall_s", "delta_success", "phases_s")}),
            file=sys.stderr,
            flush=True,
        )
    out = {
        "benchmark": "main_job",
        "command": " ".join(["python", *sys.argv]),
        "targets": {"minutes": TARGET_MINUTES, "delta_success": TARGET_DELTA, "first_line_s": TARGET_FIRST_LINE_S},
        "machine": {
            "platform": platform.platform(),
            "cores": os.cpu_count(),
            "load_start": load0,
            "load_end": os.getloadavg(),
        },
        "results": results,
        "meets_target": all(
            r["wall_s"] <= TARGET_MINUTES * 60
            and r["delta_success"] >= TARGET_DELTA
            and (r["phases_s"]["first_progress_line"] or 1e9) <= TARGET_FIRST_LINE_S
            for r in results
        ),
        "work": str(work),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
