"""The GPU check: what only a GPU can show, in one script that was run on CPU first (``--small``).

Meant for one H100 (or any one CUDA card) with no network, in under 8 minutes, with the harness
installed with its ``vllm`` extra. It builds a model of Qwen3-4B's shape from a config (random
weights: timing needs no trained model; the tokenizer is the tiny model's, its vocabulary padded to
Qwen3's 151,936 ids), then, each part in a subprocess of its own (a fresh CUDA context, memory
returned between them):

* ``harness``: the harness trainer (``harness.ppo.trainer.train``) on it in bf16 with colocated vLLM
  rollouts (``backend: {name: vllm}``), a shared critic, full fine-tuning, ``--steps`` PPO steps on the
  intention gym in the ``tool_call`` rendering. From ``metrics.jsonl``: each step's time, rollout,
  update and weight-sync time (the sync's share of the step) and the sync check's log-prob
  difference. Then one more rollout batch, and the same turns replayed with a bare
  ``LLM.generate`` on the same engine: each turn index's prompts (the episodes' token ids up to that
  turn) in one call, each request generating exactly as many tokens as the rollout did (no stop
  ids, ``ignore_eos``) with the same seed. ``rollout_vs_bare.ratio`` = bare seconds / harness
  rollout seconds (gym steps, templating and bookkeeping included): the GPU goal is >= 0.8.
* ``trl``: TRL's ``GRPOTrainer`` with ``environment_factory`` on the same model, gym (the adapter of
  ``bench_vs_trl.py``), episodes per step (tasks x samples = ``num_generations``), token budgets and
  turn limit, bf16, TRL's own colocated vLLM (``use_vllm``, ``vllm_mode=colocate``) on a GPU.
  Step time = wall time between ``on_step_end`` callbacks. GRPO has no critic, and TRL ends an
  episode at its first reply without a well-formed tool call (a random model's first turn); the
  tokens each side generated per step are reported beside the times.

* ``server``: server mode on the same card: a vLLM server (``python -m vllm.entrypoints.openai.api_server``
  with the harness's ``eau_tensors`` weight transfer) and the policy in the check's process; a seeded
  batch through TRL's ``VLLMClient``, one update, a verified sync (times). TRL's own server sync
  (NCCL) needs the server on a second card: NCCL refuses two ranks on one device.

``--small`` (the default without CUDA): a model of the same family and vocabulary but 2 layers and
width 256, float32, 2 tasks x 2 samples, on CPU (TRL then generates with transformers: its
colocated vLLM path pushes weights with ``load_weights``, which vLLM's CPU backend refuses). That
is the run ``tests/test_gpu_check.py`` makes, so the GPU minutes are not spent debugging this script.

Output: one JSON document on stdout (``--out FILE`` writes it there too); its fields are listed
in BENCHMARKS.md ("GPU check"). A part that fails is reported with its ``error`` and the tail of its
log; the exit code is 0 when every part ran, 1 otherwise.

    python benchmarks/gpu_check.py [--small] [--steps 2] [--parts harness,trl,server] [--eager] [--out gpu_check.json]

On a GPU each part gets what is left of 560 s (a device session's command may run 10 minutes); a part
still running then is stopped and reported. ``--eager`` saves the compilation of the harness's and the
server's engines (TRL's colocated engine compiles either way).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import torch
from _common import REPO, bench_knobs, emit, load_average, machine, median, private_knobs, stderr_log
from bench_vs_trl import StepTimer, make_environment_class
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast, Qwen3Config
from trl import GRPOConfig, GRPOTrainer

from harness.envs.registry import make as make_gym
from harness.ppo.config import build_config
from harness.ppo.models import load_policy
from harness.ppo.trainer import episode_sampling_seed, train
from harness.rollout.backends import SamplingParams, turn_seed
from harness.users.vllm_server import VLLMServer

# vLLM (and the harness modules that import it) are imported inside the parts that use it: each part runs
# in a process of its own, and TRL's part needs no vLLM on a CPU

QWEN3_4B = {  # Qwen/Qwen3-4B's config.json (architecture fields)
    "hidden_size": 2560,
    "intermediate_size": 9728,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}
SMALL = {
    **QWEN3_4B,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
}
TEMPLATE = "qwen3"  # TRL's tool-calling path parses this template's tool calls
RENDERING = "tool_call"
GYM = "intention"
TIME_LIMIT_S = 480.0  # the check's target on one H100 (elapsed_s is reported against it)
HARD_LIMIT_S = 560.0  # on a GPU every part is stopped by then: a session's command may run 10 minutes
TARGET_ROLLOUT_RATIO = 0.8


def sizes(small: bool) -> dict[str, Any]:
    """The run's sizes: the GPU check's, or ``--small``'s for a CPU."""
    if small:
        return {
            "arch": SMALL,
            "dtype": "float32",
            "tasks": 2,
            "samples": 2,
            "micro_batch": 2,
            "turn_tokens": 16,
            "episode_tokens": 1024,
            "max_steps": 3,
        }
    return {
        "arch": QWEN3_4B,
        "dtype": "bfloat16",
        "tasks": 8,
        "samples": 4,
        "micro_batch": 4,
        "turn_tokens": 64,
        "episode_tokens": 2048,
        "max_steps": 4,
    }


# ------------------------------------------------------------------------------------------ the model
def build_model_folder(folder: Path, arch: dict[str, Any], dtype: str, device: str) -> dict[str, Any]:
    """A Hugging Face folder: a Qwen3 model of shape ``arch`` with random weights in ``dtype``, and the
    tiny tokenizer (qwen3 chat template) padded to the model's vocabulary. Its size and build time."""
    t0 = time.perf_counter()
    _, tok = load_policy({"model": "tiny", "chat_template": TEMPLATE})
    tok.save_pretrained(folder)
    pad_vocabulary(folder / "tokenizer.json", arch["vocab_size"])
    PreTrainedTokenizerFast.from_pretrained(folder)  # loads as saved
    config = Qwen3Config(
        **arch,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        torch_dtype=dtype,
    )
    config.architectures = ["Qwen3ForCausalLM"]
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    model.save_pretrained(folder)
    n = sum(p.numel() for p in model.parameters())
    del model
    return {"parameters": n, "dtype": dtype, "build_s": round(time.perf_counter() - t0, 1)}


def pad_vocabulary(path: Path, size: int) -> None:
    """Give a byte-level BPE ``tokenizer.json`` ``size`` ids: the extra ids get tokens no merge produces
    (text never encodes to them; sampled, they decode to short strings), so a model with a larger
    vocabulary than the tokenizer samples nothing the tokenizer cannot decode."""
    data = json.loads(path.read_text())
    vocab = data["model"]["vocab"]
    taken = set(vocab.values()) | {t["id"] for t in data.get("added_tokens", [])}
    i = 0
    for idx in range(size):
        if idx in taken:
            continue
        while f"x{i}" in vocab:
            i += 1
        vocab[f"x{i}"] = idx
        i += 1
    path.write_text(json.dumps(data))


# ---------------------------------------------------------------------------------------- harness part
def harness_part(args: argparse.Namespace, folder: Path, work: Path) -> dict[str, Any]:
    """The harness trainer with colocated vLLM: step times, the sync's share, rollout vs bare generate."""
    s = sizes(args.small)
    cuda = torch.cuda.is_available() and not args.small
    batch = s["tasks"] * s["samples"]
    backend: dict[str, Any] = {"name": "vllm"}
    if cuda:
        backend.update(gpu_memory_utilization=args.vllm_memory, enforce_eager=args.eager)
    overrides = {
        "steps": args.steps,
        "run_id": "gpu-check",
        "seed": 0,
        "gyms": [GYM],
        "rendering": RENDERING,
        "tasks_per_step": s["tasks"],
        "samples_per_task": s["samples"],
        "policy": {"model": str(folder), "dtype": s["dtype"], "gradient_checkpointing": cuda},
        "critic": {"mode": "shared"},
        "backend": backend,
        "checkpoint_every": 0,
        "keep_checkpoints": 1,
        "progress": False,
        "torch_threads": 0,
        "agent_knobs.lr": 1e-6,
        "agent_knobs.critic_lr": 1e-6,
        "agent_knobs.kl_coef": 0.0,  # full fine-tuning: a KL reference would be a second 4B copy
        "agent_knobs.ppo_epochs": 1,
        "agent_knobs.mini_batch_size": batch,
        "agent_knobs.micro_batch_size": s["micro_batch"],
        "agent_knobs.max_new_tokens_per_turn": s["turn_tokens"],
        "agent_knobs.max_episode_tokens": s["episode_tokens"],
        "env_knobs.max_steps": s["max_steps"],
    }
    cfg = build_config("tiny", None, overrides)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = train(cfg, work / "runs", private_knobs(work))
    train_s = time.perf_counter() - t0
    metrics = [json.loads(x) for x in (trainer.run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steps = [
        {
            k: m.get(k)
            for k in (
                "time_step_s",
                "time_rollout_s",
                "time_generate_s",
                "time_update_s",
                "time_weight_sync_s",
                "weight_sync_logprob_diff",
                "rollout_tokens_per_s",
                "turns_mean",
                "response_tokens_mean",
                "episode_tokens_mean",
            )
        }
        for m in metrics
    ]
    last = steps[-1]
    out: dict[str, Any] = {
        "train_s": round(train_s, 1),
        "steps": steps,
        "weight_sync_share": last["time_weight_sync_s"] / last["time_step_s"],
        "rollout_vs_bare": rollout_vs_bare(trainer),
    }
    if cuda:
        out["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    return out


def rollout_vs_bare(trainer: Any) -> dict[str, Any]:
    """One more rollout batch through the harness, then the same turns with a bare ``LLM.generate``."""
    cfg = trainer.cfg  # the knobs of the last step stay in force (the run has given its lent values back)
    episodes, t = trainer.rollout(cfg.steps)
    seeds = [
        episode_sampling_seed(cfg.seed, cfg.steps, i // cfg.samples_per_task, i % cfg.samples_per_task)
        for i in range(len(episodes))
    ]
    bare = bare_replay(trainer.backend.llm, episodes, seeds, trainer.knobs.temperature, trainer.knobs.top_p)
    return {
        "harness_rollout_s": t["time_rollout_s"],
        "harness_generate_s": t["time_generate_s"],
        "bare_generate_s": bare["seconds"],
        "ratio": bare["seconds"] / t["time_rollout_s"],
        "episodes": len(episodes),
        "turns": bare["turns"],
        "generated_tokens": int(t["generated_tokens"]),
        "bare_generated_tokens": bare["tokens"],
    }


def bare_replay(llm: Any, episodes: list[Any], seeds: list[int], temperature: float, top_p: float) -> dict[str, Any]:
    """The turns of ``episodes`` again with a bare ``LLM.generate``: per turn index, one call over the
    prompts the episodes had at that turn (their ids up to the turn), each request generating exactly
    the tokens the turn did (``max_tokens``, no stop ids, ``ignore_eos``: exactly that many) with the
    turn's seed. The prefix cache is emptied first (a rollout starts cold too, after a sync). Seconds,
    tokens, turns."""
    from vllm import SamplingParams as VSP
    from vllm.inputs import TokensPrompt

    by_turn: dict[int, list[tuple[list[int], int, int]]] = {}
    for ep, seed in zip(episodes, seeds):
        for k, (last, n) in enumerate(zip(ep.turn_last_token, ep.response_tokens)):
            by_turn.setdefault(k, []).append((ep.ids[: last - n + 1], n, turn_seed(seed, k)))
    llm.reset_prefix_cache()
    t0 = time.perf_counter()
    tokens = 0
    for k in sorted(by_turn):
        rows = by_turn[k]
        params = [
            VSP(
                temperature=temperature,
                top_p=top_p,
                max_tokens=n,
                ignore_eos=True,
                seed=sd,
                detokenize=False,
            )
            for _, n, sd in rows
        ]
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p, _, _ in rows], params, use_tqdm=False)
        tokens += sum(len(o.outputs[0].token_ids) for o in outs)
    return {"seconds": time.perf_counter() - t0, "tokens": tokens, "turns": sum(len(v) for v in by_turn.values())}


# -------------------------------------------------------------------------------------------- TRL part
def trl_part(args: argparse.Namespace, folder: Path, work: Path) -> dict[str, Any]:
    """TRL's GRPOTrainer (environment_factory) on the same model, gym and batch: step wall times."""
    s = sizes(args.small)
    cuda = torch.cuda.is_available() and not args.small
    knobs = bench_knobs(s["max_steps"])
    counters: dict[str, Any] = {"resets": {}, "episodes": 0, "env_steps": 0, "calls_after_end": 0}
    env_cls = make_environment_class(GYM, knobs, s["samples"], counters)
    _, info = make_gym(GYM, knobs=knobs, rendering=RENDERING, split="train").reset(seed=0, options={"task_index": 0})
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, s["dtype"]))
    batch = s["tasks"] * s["samples"]
    rows = s["tasks"] * args.steps
    data = Dataset.from_dict(
        {
            "prompt": [[{"role": "system", "content": info["system_prompt"]}, {"role": "user", "content": ""}]] * rows,
            "task_index": list(range(rows)),
        }
    )
    vllm = {"use_vllm": True, "vllm_mode": "colocate", "vllm_gpu_memory_utilization": args.vllm_memory} if cuda else {}
    cfg = GRPOConfig(
        output_dir=str(work / "trl"),
        use_cpu=not cuda,
        bf16=cuda,
        seed=0,
        max_steps=args.steps,
        per_device_train_batch_size=s["micro_batch"],
        gradient_accumulation_steps=batch // s["micro_batch"],
        num_generations=s["samples"],
        num_iterations=1,
        beta=0.0,
        learning_rate=1e-6,
        lr_scheduler_type="constant",
        warmup_steps=0,
        max_completion_length=s["episode_tokens"] // 2,
        # the per-turn budget, under the name each generator takes (vLLM's SamplingParams, transformers' generate)
        generation_kwargs={"max_tokens" if cuda else "max_new_tokens": s["turn_tokens"]},
        max_tool_calling_iterations=s["max_steps"],
        gradient_checkpointing=cuda,
        shuffle_dataset=False,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        dataloader_num_workers=0,
        **vllm,
    )
    timer = StepTimer()
    with warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr):
        warnings.simplefilter("ignore")
        trainer = GRPOTrainer(
            model=model,
            args=cfg,
            train_dataset=data,
            processing_class=tok,
            environment_factory=env_cls,
            callbacks=[timer],
        )
        trainer.train()
    step_logs = [x for x in timer.logs if "loss" in x or "reward" in x]
    return {
        "step_s": timer.times,
        "vllm": bool(vllm),
        "episodes": counters["episodes"],
        "completion_tokens_per_episode": median([x.get("completions/mean_length", 0.0) for x in step_logs]),
        "env_steps_per_episode": counters["env_steps"] / max(1, counters["episodes"]),
        "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None,
    }


# ----------------------------------------------------------------------------------------- server part
def server_part(args: argparse.Namespace, folder: Path, work: Path) -> dict[str, Any]:
    """Server mode on one card: a vLLM server with the harness's same-host weight transfer, the trainer's
    policy in this process; a seeded batch generated through TRL's client, one update, a verified sync.
    (TRL's NCCL transfer needs the server on a card of its own: NCCL refuses two ranks on one device.)"""
    from harness.rollout.vllm_backend import VLLMBackend
    from harness.rollout.vllm_engine import BACKEND

    s = sizes(args.small)
    cuda = torch.cuda.is_available() and not args.small
    policy, tok = load_policy({"model": str(folder), "dtype": s["dtype"]})
    policy.to("cuda" if cuda else "cpu")
    extra = ["--weight-transfer-config", json.dumps({"backend": BACKEND})]
    if cuda:
        extra += ["--gpu-memory-utilization", str(args.vllm_memory)] + (["--enforce-eager"] if args.eager else [])
    t0 = time.perf_counter()
    server = VLLMServer(
        folder,
        served_name="check",
        device="cuda" if cuda else "cpu",
        dtype=s["dtype"],
        max_model_len=s["episode_tokens"],
        extra_args=extra,
        env={"VLLM_SERVER_DEV_MODE": "1"},
        log_path=work / "server.log",
    )
    with server:
        start_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        backend = VLLMBackend(str(folder), policy, tok, mode="server", port=server.port, device=policy.device)
        first_sync_s = time.perf_counter() - t0
        prompts = [tok.encode(f"Task {i}: plan a trip and ask about the budget first.") for i in range(8)]
        params = SamplingParams(1.0, 1.0, ())
        t0 = time.perf_counter()
        out = backend.generate(prompts, [s["turn_tokens"]] * len(prompts), params, seeds=list(range(len(prompts))))
        generate_s = time.perf_counter() - t0
        opt = torch.optim.SGD(policy.parameters(), lr=1e-3)
        x = torch.tensor([prompts[0] + out[0]], device=policy.device)
        (-policy(input_ids=x).logits.float().log_softmax(-1).mean()).backward()
        opt.step()
        t0 = time.perf_counter()
        stats = backend.sync_weights(policy)
        sync_s = time.perf_counter() - t0
    return {
        "server_start_s": round(start_s, 1),
        "first_sync_s": first_sync_s,
        "generate_s": generate_s,
        "generated_tokens": sum(len(o) for o in out),
        "sync_s": sync_s,
        "weight_sync_logprob_diff": stats["weight_sync_logprob_diff"],
        "transfer": backend.transfer,
    }


# ------------------------------------------------------------------------------------------ orchestration
PARTS = {"harness": harness_part, "trl": trl_part, "server": server_part}


def run_part(name: str, args: argparse.Namespace, folder: Path, work: Path, timeout: float) -> dict[str, Any]:
    """``name`` in a subprocess of its own (this script with ``--part``): its JSON, or its error."""
    out_file = work / f"{name}.json"
    cmd = [sys.executable, __file__, "--part", name, "--folder", str(folder), "--work", str(work / name)]
    cmd += ["--steps", str(args.steps), "--vllm-memory", str(args.vllm_memory)] + (["--small"] if args.small else [])
    cmd += ["--eager"] if args.eager else []
    cmd += ["--part-out", str(out_file)]
    log = work / f"{name}.log"
    t0 = time.perf_counter()
    stderr_log(f"{name}: running (log {log})")
    try:
        with open(log, "w") as fh:
            proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout, cwd=REPO)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        code = "timeout"
    elapsed = round(time.perf_counter() - t0, 1)
    if code == 0 and out_file.is_file():
        return {**json.loads(out_file.read_text()), "part_s": elapsed}
    tail = log.read_text(errors="replace")[-3000:] if log.is_file() else ""
    return {"error": f"exit {code} after {elapsed} s", "log_tail": tail, "part_s": elapsed}


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--small", action="store_true", help="CPU sizes (default when there is no CUDA device)")
    ap.add_argument("--steps", type=int, default=2, help="PPO / GRPO steps per side (the first warms up)")
    ap.add_argument("--parts", default="harness,trl,server", help="comma-separated parts: harness, trl, server")
    ap.add_argument("--vllm-memory", type=float, default=0.3, help="GPU share of each side's colocated vLLM")
    ap.add_argument(
        "--eager", action="store_true", help="the harness's and the server's engines skip compilation and CUDA graphs"
    )
    ap.add_argument("--out", type=Path, help="also write the JSON document here")
    ap.add_argument("--part", choices=sorted(PARTS), help=argparse.SUPPRESS)
    ap.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--part-out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.steps < 1:
        ap.error(f"--steps must be >= 1, got {args.steps}")
    args.small = args.small or not torch.cuda.is_available()
    if args.part:  # a subprocess: one part, its JSON to --part-out
        args.work.mkdir(parents=True, exist_ok=True)
        result = PARTS[args.part](args, args.folder, args.work)
        args.part_out.write_text(json.dumps(result, default=str))
        return
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        ap.error(f"--parts: unknown {', '.join(unknown)}; allowed: {', '.join(PARTS)}")
    t0 = time.perf_counter()
    load = load_average()
    device = "cuda" if torch.cuda.is_available() and not args.small else "cpu"
    work = Path(tempfile.mkdtemp(prefix="eau-gpu-check-"))
    s = sizes(args.small)
    stderr_log(f"building the model folder ({'small' if args.small else 'Qwen3-4B'} shape) in {work}")
    model = build_model_folder(work / "model", s["arch"], s["dtype"], device)
    result: dict[str, Any] = {
        "check": "gpu_check",
        "version": 1,
        "small": args.small,
        "machine": machine(),
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "model": {"shape": "small" if args.small else "qwen3-4b", **model},
        "sizes": {k: v for k, v in s.items() if k != "arch"},
        "steps": args.steps,
    }
    budget = HARD_LIMIT_S if device == "cuda" else 1800.0  # parts still running then are stopped and reported
    for name in parts:
        left = budget - (time.perf_counter() - t0)
        if left < 30:
            result[name] = {"error": f"skipped: {budget:.0f} s spent before it could start"}
            continue
        result[name] = run_part(name, args, work / "model", work, left)
    h, trl = result.get("harness", {}), result.get("trl", {})
    if "steps" in h and "step_s" in trl and trl["step_s"]:
        result["harness_vs_trl_step_ratio"] = h["steps"][-1]["time_step_s"] / trl["step_s"][-1]
    result["targets"] = {"rollout_vs_bare_min": TARGET_ROLLOUT_RATIO, "time_limit_s": TIME_LIMIT_S}
    result["elapsed_s"] = round(time.perf_counter() - t0, 1)
    result["load_average"] = {"start": load, "end": load_average()}
    result["ok"] = all("error" not in result[p] for p in parts)
    text = json.dumps(result, indent=2, default=str)
    if args.out:
        args.out.write_text(text + "\n")
    emit(result)
    if not os.environ.get("EAU_GPU_CHECK_KEEP"):  # set it to keep the model folder and the parts' logs
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
