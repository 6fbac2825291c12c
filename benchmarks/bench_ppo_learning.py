"""Does PPO learn? Held-out success of the tiny preset before and after PPO, for several seeds.

For each seed: a short supervised warm start on scripted demonstrations (``eau sft``) — the
starting policy — then ``eau train`` (PPO) for a wall-clock budget, then the held-out (eval split)
success of the starting policy and of the final checkpoint on the same tasks with the same sampling
seed. Target (issue "The trainer"): +0.3 absolute held-out success on one gym within 10 minutes of
PPO on 2 CPU cores, for 3 seeds. ``--sft-once``: one warm start (the first seed's) for every seed.

The default warm start imitates the public (non-privileged) intention planner, which asks about
every detail a request may leave out, with ``give_up`` 0.3: at each turn the demonstrator answers at
once with probability 0.3 (1024 demonstrations x 14 epochs). Its student asks well-formed questions
at every position but stops at random (held-out success ~0.1, 2.5 turns); what PPO has to learn is
to keep asking. (``--demonstrator oracle --give-up 0 --sft-episodes 512 --sft-epochs 10``: the
oracle's student, which stops as early as the oracle, who knew when every hidden detail was in.)

    python benchmarks/bench_ppo_learning.py --seeds 0 1 2 --minutes 10 [--sft-once]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.knobs.folder import defaults_dir

REPO = Path(__file__).resolve().parents[1]

# The PPO run: the tiny-warm preset (harness/ppo/presets/tiny-warm.yaml, commented: intention, 8 tasks x
# 4 samples, 8 turns of 24 tokens, lr 3e-4 after a warm-up of 8 updates, kl_coef 0.02, a small separate
# critic), checkpoints every 5 steps so the last one is close to where the time budget ends.
TRAIN = ["--preset", "tiny-warm", "--set", "checkpoint_every=5", "--set", "keep_checkpoints=50", "--no-progress"]


def held_out(policy_file: Path | None, seed: int, tasks: int, knobs_dir: Path) -> dict:
    """Held-out (eval split) success of the tiny model with the given weights."""
    import torch

    from harness.eval.runner import evaluate_policy
    from harness.knobs.snapshot import KnobSnapshot
    from harness.ppo.checkpoint import load_trainable
    from harness.ppo.models import load_policy

    model, tok = load_policy({"model": "tiny"})
    if policy_file is not None:
        load_trainable(model, torch.load(policy_file, weights_only=True), str(policy_file))
    snap = KnobSnapshot.read_dir(knobs_dir)
    # the sampling the run trained with (agent.temperature / agent.top_p as the run left them)
    res = evaluate_policy(
        model,
        tok,
        ["intention"],
        knobs=snap,
        tasks_per_gym=tasks,
        seed=1000 + seed,
        temperature=float(snap.get("agent", "temperature")),
        top_p=float(snap.get("agent", "top_p")),
        max_new_tokens_per_turn=24,
        max_episode_tokens=1024,
    )
    return res["gyms"]["intention"]


def eau(args: list[str], knobs_dir: Path, runs_dir: Path, timeout: float | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "EAU_KNOBS_DIR": str(knobs_dir), "EAU_RUNS_DIR": str(runs_dir)}
    return subprocess.run(
        [sys.executable, "-m", "harness.cli.main", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def one_seed(
    seed: int,
    minutes: float,
    sft_episodes: int,
    sft_epochs: int,
    tasks: int,
    work: Path,
    init: Path | None = None,
    extra: list[str] | None = None,
    ppo_steps: int = 1000,
    demonstrator: str = "oracle",
    threads: int = 1,
    give_up: float = 0.0,
) -> dict:
    knobs_dir, runs_dir = work / f"knobs{seed}", work / "runs"
    shutil.copytree(defaults_dir(), knobs_dir, ignore=shutil.ignore_patterns(".pending", ".history"))
    t0 = time.perf_counter()
    sft_dir = init or work / f"sft{seed}"
    if init is None:
        out = eau(
            [
                "sft",
                "--out",
                str(sft_dir),
                "--json",
                "--set",
                f"seed={seed}",
                "--set",
                f"episodes={sft_episodes}",
                "--set",
                f"epochs={sft_epochs}",
                "--set",
                f"demonstrator={demonstrator}",
                "--set",
                f"give_up={give_up}",
                "--set",
                "gyms=[intention]",
            ],
            knobs_dir,
            runs_dir,
        )
        if out.returncode != 0:
            raise RuntimeError(out.stderr[-2000:])
    sft_s = time.perf_counter() - t0
    # PPO for a wall-clock budget: a long step budget, stopped with SIGTERM (the trainer finishes the
    # step, checkpoints and exits cleanly)
    run_id = f"learn{seed}"
    env = {**os.environ, "EAU_KNOBS_DIR": str(knobs_dir), "EAU_RUNS_DIR": str(runs_dir)}
    overrides = [x for e in extra or [] for x in ("--set", e)]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness.cli.main",
            "train",
            *TRAIN,
            "--set",
            f"torch_threads={threads}",
            *overrides,
            "--set",
            f"seed={seed}",
            "--set",
            f"init_checkpoint={sft_dir}",
            "--steps",
            str(ppo_steps),
            "--run-id",
            run_id,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    t1 = time.perf_counter()
    while proc.poll() is None and time.perf_counter() - t1 < minutes * 60:
        time.sleep(1)
    if proc.poll() is None:
        proc.terminate()
    proc.wait(timeout=600)
    ppo_s = time.perf_counter() - t1
    run = runs_dir / run_id
    from harness.io import jsonl
    from harness.ppo import checkpoint

    ck = checkpoint.latest(run)
    metrics = jsonl.read(run / "metrics.jsonl")
    before = held_out(sft_dir / "policy.pt", seed, tasks, knobs_dir)
    after = held_out(ck / "policy.pt", seed, tasks, knobs_dir) if ck else before
    return {
        "seed": seed,
        "sft_s": round(sft_s, 1),
        "ppo_s": round(ppo_s, 1),
        "ppo_steps": len(metrics),
        "train_success_first": metrics[0]["success_rate"] if metrics else None,
        "train_success_last5": (sum(m["success_rate"] for m in metrics[-5:]) / len(metrics[-5:])) if metrics else None,
        "held_out_before": before,
        "held_out_after": after,
        "delta_success": after["success_rate"] - before["success_rate"],
        "delta_reward": after["reward_mean"] - before["reward_mean"],
        "checkpoint": str(ck) if ck else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--minutes", type=float, default=10.0, help="PPO wall-clock budget per seed")
    ap.add_argument("--sft-episodes", type=int, default=1024)
    ap.add_argument(
        "--sft-epochs",
        type=int,
        default=14,
        help="14 epochs of 1024 give-up-0.3 public demonstrations: held-out success ~0.1, 2.5 turns of 8",
    )
    ap.add_argument(
        "--demonstrator",
        choices=("oracle", "public"),
        default="public",
        help="scripted agent of the warm start's demonstrations (eau sft --set demonstrator=)",
    )
    ap.add_argument(
        "--give-up",
        type=float,
        default=0.3,
        help="probability that the demonstrator answers at once at a turn (eau sft --set give_up=)",
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=os.cpu_count() or 1,
        help="torch threads of the PPO run (default: every core; the seeds run one at a time)",
    )
    ap.add_argument(
        "--ppo-steps",
        type=int,
        default=1000,
        help="stop PPO after this many steps if the time budget has not run out first",
    )
    ap.add_argument(
        "--set",
        dest="extra",
        action="append",
        default=[],
        help="extra `eau train --set` overrides (repeatable), e.g. agent_knobs.lr=1e-4",
    )
    ap.add_argument(
        "--init",
        type=Path,
        default=None,
        help="start every seed from this warm start (a folder with policy.pt) instead of its own eau sft",
    )
    ap.add_argument(
        "--sft-once",
        action="store_true",
        help="one eau sft warm start (the first seed's) shared by every seed's PPO run",
    )
    ap.add_argument(
        "--tasks",
        type=int,
        default=96,
        help="held-out tasks per evaluation (96: standard error of a success rate ~0.045)",
    )
    ap.add_argument("--work", type=Path, default=None, help="keep runs here (default: a temp folder)")
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="eau-learn-"))
    work.mkdir(parents=True, exist_ok=True)
    load0 = os.getloadavg()
    results = []
    init = args.init
    for s in args.seeds:
        results.append(
            one_seed(
                s,
                args.minutes,
                args.sft_episodes,
                args.sft_epochs,
                args.tasks,
                work,
                init,
                args.extra,
                args.ppo_steps,
                args.demonstrator,
                args.threads,
                args.give_up,
            )
        )
        if args.sft_once and init is None:
            init = work / f"sft{s}"
    out = {
        "benchmark": "ppo_learning",
        "command": " ".join(["python", *sys.argv]),
        "gym": "intention",
        "target_delta": 0.3,
        "minutes": args.minutes,
        "threads": args.threads,
        "warm_start": {
            "demonstrator": args.demonstrator,
            "episodes": args.sft_episodes,
            "epochs": args.sft_epochs,
            "give_up": args.give_up,
            "init": str(args.init) if args.init else None,
        },
        "machine": {
            "platform": platform.platform(),
            "cores": os.cpu_count(),
            "load_start": load0,
            "load_end": os.getloadavg(),
        },
        "results": results,
        "meets_target": all(r["delta_success"] >= 0.3 for r in results),
        "work": str(work),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
