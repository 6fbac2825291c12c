"""Shared pieces of the trainer benchmarks (``bench_rollout``, ``bench_train_step``, ``bench_vs_trl``).

* :func:`machine` -- what the numbers were measured on (platform, cores, torch, threads, load).
* :func:`set_threads` -- torch's intra-op thread count. On a shared 2-core box, OpenMP's two
  threads wait on each other at every tiny matmul while other processes hold a core; one thread
  is then several times faster (see ``--threads`` in each script). Both sides of a ratio always run
  with the same setting.
* :func:`bench_knobs` -- the packaged default knobs (``KnobSnapshot.read_dir(defaults_dir())``) with
  ``env.max_steps`` set to the tiny preset's value, so episodes have the tiny preset's length.
* :func:`warm_start` -- a short ``eau sft`` warm start of the tiny model, trained once through the
  real CLI and cached, so rollouts are real multi-turn episodes (questions, answers, early stops)
  rather than a random model's format errors until the turn limit.
* :func:`alternate` -- run several sides of a comparison in turn, repeat after repeat, so load
  changes on the shared machine hit every side alike; medians are reported.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.knobs.folder import defaults_dir
from harness.ppo.specs import PolicySpec

REPO = Path(__file__).resolve().parents[1]
# The tiny preset's per-turn and per-episode token budgets and turn limit (harness/ppo/presets/tiny.yaml).
TINY_MAX_STEPS = 6
TINY_TURN_TOKENS = 48
TINY_EPISODE_TOKENS = 1024
# Warm start per rendering: epochs enough for the tiny model to ask, answer and stop (2 epochs leave
# it at format errors), and the demonstration length cap. The tool-call JSON is longer to get right
# than an ASK:/ANSWER: tag (at 10 epochs its calls are still mostly malformed), and with the qwen3
# template's tool block a demonstration runs past 1,024 tokens (its later turns would never be
# trained), so that rendering trains longer on longer demonstrations.
SFT_EPOCHS = {"tagged": 10, "tool_call": 30}
SFT_MAX_TOKENS = {"tagged": 1024, "tool_call": 2048}


def machine() -> dict[str, Any]:
    """Platform, usable cores, torch version and threads, and the load average now."""
    import torch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cores": cores,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.is_available(),
    }


def load_average() -> list[float]:
    """The 1/5/15-minute load averages (the machine is shared; read at start and end)."""
    return [round(x, 2) for x in os.getloadavg()]


def set_threads(n: int) -> int:
    """Set torch's intra-op threads (``n`` > 0) and export OMP_NUM_THREADS for child processes;
    0 keeps torch's default. Returns the count in force."""
    import torch

    if n < 0:
        raise ValueError(f"--threads must be >= 0 (0 = torch's default), got {n}")
    if n > 0:
        torch.set_num_threads(n)
        os.environ["OMP_NUM_THREADS"] = str(n)
        os.environ["MKL_NUM_THREADS"] = str(n)
    return torch.get_num_threads()


def bench_knobs(max_steps: int = TINY_MAX_STEPS) -> Any:
    """The repository's knob files as a snapshot, with ``env.max_steps`` = ``max_steps`` for every gym."""
    from harness.knobs.snapshot import KnobSnapshot

    snap = KnobSnapshot.read_dir(defaults_dir())
    values = {area: dict(v) for area, v in snap.values.items()}
    values["env"]["max_steps"] = int(max_steps)
    return dataclasses.replace(snap, values=values)


def private_knobs(root: Path) -> Path:
    """A private copy of the packaged default knobs under ``root`` (a run lends preset values there)."""
    dst = Path(root) / "knobs"
    shutil.copytree(defaults_dir(), dst, ignore=shutil.ignore_patterns(".pending", ".history"))
    return dst


def eau_env(**extra: str) -> dict[str, str]:
    """Environment for an ``eau`` child process (this interpreter's package, given overrides)."""
    env = dict(os.environ)
    env.update(extra)
    return env


def eau_cmd(*args: str) -> list[str]:
    """``eau ARGS`` run with this interpreter (same as the console script)."""
    return [sys.executable, "-m", "harness.cli.main", *args]


def cache_root() -> Path:
    """``$EAU_CACHE_DIR`` or ``~/.cache/eau`` (where the harness keeps model caches)."""
    from harness.ppo.packaged import default_cache_root

    return default_cache_root()


def tiny_tokenizer_fingerprint() -> str:
    """A short hash of the tiny tokenizer's vocabulary: a warm start trained with another tokenizer
    (the built-in corpus changed) is not reused."""
    import hashlib

    from harness.ppo.tiny import build_tiny_tokenizer

    vocab = sorted(build_tiny_tokenizer().get_vocab().items())
    return hashlib.sha256(json.dumps(vocab).encode()).hexdigest()[:8]


def warm_start(
    rendering: str = "tagged",
    chat_template: str | None = None,
    epochs: int | None = None,
    directory: str | Path | None = None,
    log: Callable[[str], None] | None = None,
    user_replies: str = "user",
) -> dict[str, Any]:
    """An ``eau sft`` warm start of the tiny model: ``{"dir", "cached", "time_s", "summary"}``.

    Trained once with the real CLI (oracle demonstrations through the real gyms and the symbolic
    user) into ``directory`` (default: ``<cache root>/bench-sft/`` + ``<rendering>-<template>-
    e<epochs>-t<max tokens>-k<tokenizer fingerprint>``, plus ``-utool`` with ``user_replies="tool"``)
    and reused while ``policy.pt`` and ``sft.json`` are there. ``epochs`` None:
    ``SFT_EPOCHS[rendering]``; demonstrations are cut at ``SFT_MAX_TOKENS[rendering]`` tokens.
    """
    epochs = SFT_EPOCHS[rendering] if epochs is None else epochs
    max_tokens = SFT_MAX_TOKENS[rendering]
    policy: dict[str, Any] = {"model": "tiny"}
    if chat_template:
        policy["chat_template"] = chat_template
    name = f"{rendering}-{chat_template or 'turns'}-e{epochs}-t{max_tokens}-k{tiny_tokenizer_fingerprint()}"
    name += "" if user_replies == "user" else f"-u{user_replies}"
    out = Path(directory) if directory else cache_root() / "bench-sft" / name
    summary_file = out / "sft.json"
    if (out / "policy.pt").is_file() and summary_file.is_file():
        summary = json.loads(summary_file.read_text())
        want = {
            "rendering": rendering,
            "epochs": epochs,
            "policy": policy,
            "max_episode_tokens": max_tokens,
            "user_replies": user_replies,
        }
        got = {k: summary["config"].get(k, "user" if k == "user_replies" else None) for k in want}
        # sft.json writes the whole policy spec (every field); compare specs, not mappings
        same_policy = PolicySpec.from_dict(got["policy"]) == PolicySpec.from_dict(want["policy"])
        if {k: v for k, v in got.items() if k != "policy"} != {
            k: v for k, v in want.items() if k != "policy"
        } or not same_policy:
            raise ValueError(f"{out} holds a warm start of {got}, not {want}; pass another --sft-dir or delete it")
        return {"dir": str(out), "cached": True, "time_s": summary.get("time_s"), "summary": _sft_brief(summary)}
    if log:
        log(
            f"training the tiny warm start ({rendering}, user replies as {user_replies} messages, "
            f"{chat_template or 'turns'}, {epochs} epochs, demonstrations "
            f"<= {max_tokens} tokens) into {out}; this takes minutes, once"
        )
    policy_yaml = "{" + ", ".join(f"{k}: {v}" for k, v in policy.items()) + "}"
    t0 = time.perf_counter()
    proc = subprocess.run(
        eau_cmd(
            "sft",
            "--out",
            str(out),
            "--json",
            "--set",
            f"rendering={rendering}",
            "--set",
            f"policy={policy_yaml}",
            "--set",
            f"epochs={epochs}",
            "--set",
            f"max_episode_tokens={max_tokens}",
            "--set",
            f"user_replies={user_replies}",
        ),
        env=eau_env(EAU_KNOBS_DIR=str(private_knobs(Path(tempfile.mkdtemp(prefix="eau-sft-knobs-"))))),
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"eau sft failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    summary = json.loads(summary_file.read_text())
    return {"dir": str(out), "cached": False, "time_s": time.perf_counter() - t0, "summary": _sft_brief(summary)}


def _sft_brief(summary: Mapping[str, Any]) -> dict[str, Any]:
    return {k: summary.get(k) for k in ("demonstrations", "demo_success", "action_tokens", "loss_first", "loss_last")}


def load_tiny(sft_dir: str | None, chat_template: str | None = None) -> tuple[Any, Any]:
    """The tiny policy and tokenizer (``load_policy``), with the warm start's weights when given."""
    import torch

    from harness.ppo.checkpoint import load_trainable
    from harness.ppo.models import load_policy

    spec: dict[str, Any] = {"model": "tiny"}
    if chat_template:
        spec["chat_template"] = chat_template
    model, tok = load_policy(spec)
    if sft_dir:
        load_trainable(model, torch.load(Path(sft_dir) / "policy.pt", weights_only=True), sft_dir)
    model.eval()
    return model, tok


def alternate(
    sides: Mapping[str, Callable[[int], Any]], repeats: int, log: Callable[[str], None] | None = None
) -> dict[str, list[Any]]:
    """Call each side once per repeat, in turn (A B A B ...; the order flips every repeat so neither
    side always runs first). ``side(repeat)`` returns that repeat's measurement."""
    if repeats < 1:
        raise ValueError(f"--repeats must be >= 1, got {repeats}")
    out: dict[str, list[Any]] = {name: [] for name in sides}
    names = list(sides)
    for r in range(repeats):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            t0 = time.perf_counter()
            out[name].append(sides[name](r))
            if log:
                log(f"repeat {r + 1}/{repeats} {name}: {time.perf_counter() - t0:.1f}s")
    return out


def median(xs: Sequence[float]) -> float:
    """Median of a non-empty sequence (NaN when empty)."""
    return float(statistics.median(xs)) if xs else float("nan")


def summary(xs: Sequence[float]) -> dict[str, Any]:
    """Median, min, max and the values themselves (rounded for the report)."""
    return {
        "median": round(median(xs), 4),
        "min": round(min(xs), 4) if xs else None,
        "max": round(max(xs), 4) if xs else None,
        "values": [round(x, 4) for x in xs],
    }


def stderr_log(msg: str) -> None:
    """Progress lines go to stderr; stdout carries only the JSON result."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def temp_root(prefix: str) -> Path:
    """A fresh temporary folder for one benchmark's runs."""
    return Path(tempfile.mkdtemp(prefix=prefix))


def emit(result: Mapping[str, Any]) -> None:
    """Print the result as one JSON object on stdout."""
    print(json.dumps(result, indent=2, default=str))
