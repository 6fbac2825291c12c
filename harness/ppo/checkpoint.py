"""Checkpoints: ``runs/<id>/checkpoints/step_NNNNNN/``, written atomically (temp folder + rename).

    trainer_state.json   next step, knob state in force, log offsets, config hash
    policy.pt            trainable policy weights (LoRA adapters only when LoRA is on)
    critic.pt            trainable critic weights (value head included)
    optim.pt             optimiser states
    rng.pt               python / numpy / torch RNG states and the trainer's task RNG

A checkpoint another run started from (``init_checkpoint``, ``eau train --from RUN --from-checkpoint``)
holds a ``.pinned-by-<run_id>`` file, and pruning keeps it: the child's config keeps pointing at
weights that exist.

Only *trainable* tensors are saved: frozen base weights are rebuilt from the run config (the tiny
model's seed, the Gemma cache), which keeps a LoRA checkpoint small. A folder without
``trainer_state.json`` (killed mid-write) is never picked by :func:`latest`.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

STATE = "trainer_state.json"


def ckpt_dir(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step_{step:06d}"


def trainable_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Tensors of the parameters that train (names as in ``model.state_dict()``)."""
    names = {n for n, p in model.named_parameters() if p.requires_grad}
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items() if k in names}


def load_trainable(model: torch.nn.Module, state: Mapping[str, torch.Tensor], where: str) -> None:
    own = model.state_dict()
    missing = [k for k in state if k not in own]
    if missing:
        raise ValueError(
            f"{where}: checkpoint tensors not in the model ({missing[:3]}...); was the run config changed?"
        )
    model.load_state_dict(dict(state), strict=False)


def rng_state(task_rng: np.random.Generator | None) -> dict[str, Any]:
    st = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        st["cuda"] = torch.cuda.get_rng_state_all()
    if task_rng is not None:
        st["task_rng"] = task_rng.bit_generator.state
    return st


def restore_rng(st: Mapping[str, Any], task_rng: np.random.Generator | None) -> None:
    random.setstate(st["python"])
    np.random.set_state(st["numpy"])
    torch.set_rng_state(st["torch"])
    if "cuda" in st and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(st["cuda"])
    if task_rng is not None and "task_rng" in st:
        task_rng.bit_generator.state = st["task_rng"]


def save(
    run_dir: Path,
    step: int,
    *,
    next_step: int,
    policy: torch.nn.Module,
    critic: torch.nn.Module | None,
    optimizers: Mapping[str, torch.optim.Optimizer],
    task_rng: np.random.Generator | None,
    knob_state: Mapping[str, Any],
    offsets: Mapping[str, int],
    keep: int = 3,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write the checkpoint of the state *after* ``step`` (resume starts at ``next_step``)."""
    final = ckpt_dir(run_dir, step)
    tmp = final.parent / f".tmp-{final.name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    torch.save(trainable_state_dict(policy), tmp / "policy.pt")
    if critic is not None:
        torch.save(trainable_state_dict(critic), tmp / "critic.pt")
    torch.save({k: o.state_dict() for k, o in optimizers.items()}, tmp / "optim.pt")
    torch.save(rng_state(task_rng), tmp / "rng.pt")
    (tmp / STATE).write_text(
        json.dumps(
            {"step": step, "next_step": next_step, "knob_state": knob_state, "offsets": dict(offsets), **(extra or {})},
            default=str,
        )
    )
    for f in tmp.iterdir():
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    prune(run_dir, keep)
    return final


def complete(run_dir: Path) -> list[Path]:
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    return sorted(p for p in root.glob("step_*") if (p / STATE).exists())


def latest(run_dir: Path) -> Path | None:
    done = complete(run_dir)
    return done[-1] if done else None


PIN_PREFIX = ".pinned-by-"


def pin(path: Path, by: str) -> None:
    """Mark checkpoint ``path`` as the starting point of run ``by``: :func:`prune` keeps it."""
    (Path(path) / f"{PIN_PREFIX}{by}").write_text(f"run {by} starts from this checkpoint\n")


def pinned_by(path: Path) -> list[str]:
    """Run ids that started from checkpoint ``path``."""
    return sorted(p.name[len(PIN_PREFIX) :] for p in Path(path).glob(f"{PIN_PREFIX}*"))


def prune(run_dir: Path, keep: int) -> None:
    """Delete all but the newest ``keep`` complete checkpoints (pinned ones stay) and stale temp folders."""
    for p in complete(run_dir)[:-keep] if keep > 0 else []:
        if not pinned_by(p):
            shutil.rmtree(p, ignore_errors=True)
    root = Path(run_dir) / "checkpoints"
    for p in root.glob(".tmp-*"):
        if not str(p).endswith(f"-{os.getpid()}"):
            shutil.rmtree(p, ignore_errors=True)


def read_state(path: Path) -> dict[str, Any]:
    return json.loads((Path(path) / STATE).read_text())


def load(
    path: Path,
    *,
    policy: torch.nn.Module,
    critic: torch.nn.Module | None,
    optimizers: Mapping[str, torch.optim.Optimizer] | None,
    task_rng: np.random.Generator | None,
    restore_rngs: bool = True,
) -> dict[str, Any]:
    """Load a checkpoint into the given objects; returns its trainer state."""
    path = Path(path)
    load_trainable(policy, torch.load(path / "policy.pt", weights_only=True), f"{path}/policy.pt")
    if critic is not None and (path / "critic.pt").exists():
        load_trainable(critic, torch.load(path / "critic.pt", weights_only=True), f"{path}/critic.pt")
    if optimizers:
        states = torch.load(path / "optim.pt", weights_only=False)
        for k, o in optimizers.items():
            if k in states:
                o.load_state_dict(states[k])
    if restore_rngs:
        restore_rng(torch.load(path / "rng.pt", weights_only=False), task_rng)
    return read_state(path)
