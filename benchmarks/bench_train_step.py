"""Trainer step time and harness overhead from a real ``eau train`` run (issue "The trainer", benchmarks).

Runs ``eau train`` as a child process in a temporary folder (a private copy of ``knobs/``, its own
runs folder) and reads the run's ``metrics.jsonl``:

* harness overhead: the median over steps of ``time_harness_s / time_step_s`` (knob poll + metrics,
  trajectory and status writing, as the trainer times it; target <= 2%), with the breakdown of a
  step into rollout (generate / env), update and harness, and the part of ``time_step_s`` that none
  of the three covers (``unattributed``: the status write before the rollout and the gather of
  episode records);
* step time: the median ``time_step_s`` (step 0 excluded when there are more steps: it pays the
  first knob scan and warm-up), the wall time to the first metrics line from process start (model
  load included) and the whole run's wall time.

``--preset tiny`` (default) runs the seconds-scale preset. ``--preset cpu-gemma --steps 2`` runs
the real Gemma 3 270M with LoRA (and any preset with a packaged model: ``--preset cpu-small --set
warm_start=null --set evaluation=null`` times SmolLM2's PPO steps alone); the result says whether the
model's cache was complete before the run (warm) or was built by it (cold: de-quantising the GGUF).
``--cold-cache`` measures both in one call: a first run with ``EAU_CACHE_DIR`` set to an empty
temporary folder, then a second run on the cache the first one built (deleted at the end). The whole
main job (warm start, evaluations, PPO) is timed by ``bench_main_job.py``.

``--versus KEY=VALUE`` (repeatable) measures a setting against the run without it: the two sides
alternate over ``--repeats`` (A B, B A, ...), and ``versus`` reports their median update, step and
rollout times (steps after the first, pooled over repeats) and the ratios versus / plain. Each run
reports its per-step times and rewards, so equal work on both sides can be checked.

    python benchmarks/bench_train_step.py [--preset tiny] [--steps 5] [--threads 1]
    python benchmarks/bench_train_step.py --preset cpu-gemma --steps 2 [--cold-cache]
    python benchmarks/bench_train_step.py --policy sft --steps 6 --versus rollout_stats=recompute --repeats 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import (
    eau_cmd,
    eau_env,
    emit,
    load_average,
    machine,
    median,
    private_knobs,
    set_threads,
    stderr_log,
    summary,
    temp_root,
    warm_start,
)

TARGET_HARNESS_SHARE = 0.02


def model_cache_state(preset: str, cache_root: str | None) -> dict[str, Any] | None:
    """Whether the cache of the preset's packaged model (None for tiny) under ``cache_root`` (None:
    the default root) is complete, and where."""
    from harness.ppo.config import build_config
    from harness.ppo.packaged import MODELS, cache_complete, default_cache_root

    name = build_config(preset).policy.model
    if name not in MODELS:
        return None
    folder = (Path(cache_root) if cache_root else default_cache_root()) / name
    return {"model": name, "dir": str(folder), "complete": cache_complete(name, folder)}


def run_train(
    root: Path, preset: str, steps: int, extra: list[str], env_extra: dict[str, str], timeout_s: float
) -> dict[str, Any]:
    """One ``eau train`` run: wall times (first metrics line, total) and the metrics lines."""
    kdir = private_knobs(root)
    rdir = root / "runs"
    run_id = "bench"
    cmd = eau_cmd(
        "train",
        "--preset",
        preset,
        "--steps",
        str(steps),
        "--run-id",
        run_id,
        "--json",
        "--no-progress",
        "--set",
        "checkpoint_every=0",
        *extra,
    )
    env = eau_env(EAU_KNOBS_DIR=str(kdir), EAU_RUNS_DIR=str(rdir), **env_extra)
    metrics = rdir / run_id / "metrics.jsonl"
    first_line_s = None
    with open(root / "train.log", "w") as log:
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            while proc.poll() is None:
                if first_line_s is None and metrics.exists() and metrics.stat().st_size > 0:
                    first_line_s = time.monotonic() - t0
                if time.monotonic() - t0 > timeout_s:
                    raise TimeoutError(f"eau train did not finish within {timeout_s:.0f}s (see {root / 'train.log'})")
                time.sleep(0.1)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    total_s = time.monotonic() - t0
    if proc.returncode != 0:
        tail = (root / "train.log").read_text()[-3000:]
        raise RuntimeError(f"eau train exited {proc.returncode}: {' '.join(cmd)}\n{tail}")
    if first_line_s is None:  # finished between two polls
        first_line_s = total_s
    lines = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()]
    traj = sorted((rdir / run_id / "trajectories").glob("step_*.jsonl"))
    return {
        "command": " ".join(cmd),
        "wall_first_metrics_s": round(first_line_s, 2),
        "wall_total_s": round(total_s, 2),
        "metrics": lines,
        "trajectory_bytes_per_step": [p.stat().st_size for p in traj],
    }


def analyse(run: dict[str, Any]) -> dict[str, Any]:
    """Step time, harness share and the breakdown from the run's metrics lines."""
    ms = run["metrics"]
    steady = ms[1:] if len(ms) > 1 else ms  # step 0 pays the first knob scan and warm-up
    share = [m["time_harness_s"] / m["time_step_s"] for m in ms]
    unattributed = [m["time_step_s"] - m["time_rollout_s"] - m["time_update_s"] - m["time_harness_s"] for m in ms]
    return {
        "steps": len(ms),
        "time_step_s": summary([m["time_step_s"] for m in ms]),
        "time_step_s_excluding_step0": round(median([m["time_step_s"] for m in steady]), 3),
        "breakdown_median_s": {
            "rollout": round(median([m["time_rollout_s"] for m in ms]), 3),
            "rollout_generate": round(median([m["time_generate_s"] for m in ms]), 3),
            "rollout_env": round(median([m["time_env_s"] for m in ms]), 3),
            "update": round(median([m["time_update_s"] for m in ms]), 3),
            "harness": round(median([m["time_harness_s"] for m in ms]), 4),
            "unattributed": round(median(unattributed), 4),
        },
        "harness_share": summary(share),
        "harness_plus_unattributed_share": round(
            median([(m["time_harness_s"] + u) / m["time_step_s"] for m, u in zip(ms, unattributed)]), 4
        ),
        "rollout_tokens_per_s": round(median([m.get("rollout_tokens_per_s", 0.0) for m in ms]), 1),
        "turns_mean": round(median([m.get("turns_mean", 0.0) for m in ms]), 2),
        "response_tokens_mean": round(median([m.get("response_tokens_mean", 0.0) for m in ms]), 1),
        "format_error_rate": round(median([m.get("format_error_rate", 0.0) for m in ms]), 3),
        "trajectory_bytes_per_step": run["trajectory_bytes_per_step"],
        "per_step": {k: [round(m[k], 3) for m in ms] for k in ("time_step_s", "time_rollout_s", "time_update_s")},
        "reward_mean_per_step": [round(m.get("reward_mean", 0.0), 4) for m in ms],
        "wall_first_metrics_s": run["wall_first_metrics_s"],
        "wall_total_s": run["wall_total_s"],
        "command": run["command"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__
    )
    ap.add_argument("--preset", default="tiny", help="train preset (default tiny; cpu-gemma: Gemma 3 270M)")
    ap.add_argument("--steps", type=int, default=5, help="PPO steps of the run (default 5)")
    ap.add_argument(
        "--policy",
        choices=["preset", "sft"],
        default="preset",
        help="preset: the preset's policy as is (default); sft: tiny preset started from the cached "
        "`eau sft` warm start (real multi-turn episodes)",
    )
    ap.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        help="extra `eau train --set key=value` overrides (repeatable)",
    )
    ap.add_argument(
        "--cold-cache",
        action="store_true",
        help="a packaged model's preset: first run on an empty EAU_CACHE_DIR (cold), then a second run on it (warm)",
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="OMP threads of the training process (default 1: stable on a shared 2-core box; 0 = torch's default)",
    )
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per run before giving up (default 3600)")
    ap.add_argument(
        "--versus",
        action="append",
        default=[],
        help="also run with these extra overrides (repeatable; e.g. rollout_stats=recompute), "
        "alternating with the plain run over --repeats, and report the update/step time ratios",
    )
    ap.add_argument("--repeats", type=int, default=1, help="with --versus: alternating runs of each side (default 1)")
    args = ap.parse_args()
    if args.steps < 1:
        ap.error("--steps must be >= 1")
    if args.cold_cache and model_cache_state(args.preset, None) is None:
        ap.error(
            f"--cold-cache applies to a preset with a packaged model (cpu-gemma, cpu-small); {args.preset} has none"
        )
    if args.versus and args.cold_cache:
        ap.error("--versus and --cold-cache measure different things: use one")

    load_start = load_average()
    threads = set_threads(args.threads)  # exported as OMP_NUM_THREADS to the child
    extra = [x for o in args.overrides for x in ("--set", o)]
    ws = None
    if args.policy == "sft":
        if args.preset != "tiny":
            ap.error("--policy sft applies to --preset tiny")
        ws = warm_start("tagged", None, log=stderr_log)
        extra += ["--set", f"init_checkpoint={ws['dir']}"]

    root = temp_root("bench_train_step_")
    runs: list[dict[str, Any]] = []
    try:
        plans: list[tuple[str, dict[str, str], list[str]]] = []
        if args.cold_cache:
            cache = root / "cache"
            cache.mkdir()
            plans = [("cold", {"EAU_CACHE_DIR": str(cache)}, extra), ("warm", {"EAU_CACHE_DIR": str(cache)}, extra)]
        elif args.versus:
            versus = extra + [x for o in args.versus for x in ("--set", o)]
            for r in range(args.repeats):  # A B B A ...: neither side always runs first
                pair = [("default", {}, extra), ("versus", {}, versus)]
                plans += pair if r % 2 == 0 else pair[::-1]
        else:
            plans = [("default", {}, extra)]
        for n, (label, env_extra, plan_extra) in enumerate(plans):
            cache_before = model_cache_state(
                args.preset, env_extra.get("EAU_CACHE_DIR") or os.environ.get("EAU_CACHE_DIR")
            )
            stderr_log(
                f"eau train --preset {args.preset} --steps {args.steps} ({label}; model cache complete before: "
                f"{cache_before['complete'] if cache_before else 'no packaged model'})"
            )
            run = run_train(root / f"{label}-{n}", args.preset, args.steps, plan_extra, env_extra, args.timeout)
            res = analyse(run)
            res["label"] = label
            if cache_before is not None:
                res["model_cache_warm_before_run"] = cache_before["complete"]
                res["model_cache_dir"] = cache_before["dir"]
            runs.append(res)
            stderr_log(
                f"{label}: first metrics line after {res['wall_first_metrics_s']}s, step "
                f"{res['time_step_s']['median']}s, harness share {res['harness_share']['median']}"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)

    main_run = [r for r in runs if r["label"] != "versus"][-1]
    out: dict[str, Any] = {
        "benchmark": "train_step",
        "command": " ".join(["python", *sys.argv]),
        "machine": {
            **machine(),
            "train_process_threads": threads if args.threads else "torch default",
            "load_average_start": load_start,
        },
        "setup": {
            "preset": args.preset,
            "steps": args.steps,
            "policy": args.policy,
            "warm_start": ws,
            "overrides": args.overrides,
            "checkpoints": "only after the last step (outside time_step_s)",
        },
        "runs": runs,
        "harness_share_median": main_run["harness_share"]["median"],
        "target_harness_share": TARGET_HARNESS_SHARE,
        "meets_target": all(r["harness_share"]["median"] <= TARGET_HARNESS_SHARE for r in runs),
        "step_time_s_median": main_run["time_step_s"]["median"],
    }
    if args.versus:
        out["versus"] = compare(
            [r for r in runs if r["label"] == "default"], [r for r in runs if r["label"] == "versus"]
        )
        out["versus"]["overrides"] = args.versus
    out["machine"]["load_average_end"] = load_average()
    emit(out)


def compare(plain: list[dict[str, Any]], versus: list[dict[str, Any]]) -> dict[str, Any]:
    """Median update and step times of the plain runs and the --versus runs (all steps pooled; step
    0 excluded when there are more), and their ratios (versus / plain)."""

    def pooled(runs: list[dict[str, Any]], key: str) -> float:
        return median(
            [x for r in runs for x in (r["per_step"][key][1:] if len(r["per_step"][key]) > 1 else r["per_step"][key])]
        )

    out: dict[str, Any] = {}
    for key in ("time_update_s", "time_step_s", "time_rollout_s"):
        a, b = pooled(plain, key), pooled(versus, key)
        out[key] = {"plain": round(a, 3), "versus": round(b, 3), "ratio_versus_over_plain": round(b / a, 3)}
    return out


if __name__ == "__main__":
    main()
