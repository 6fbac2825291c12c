"""Rebuild the policy of a run at one of its checkpoints, exactly as the trainer built it.

The trainer builds the policy from the run config (``load_policy(PolicySpec)``), loads the config's
``init_checkpoint`` (an ``eau sft`` output or a parent run's checkpoint) or its own warm start
(``runs/<id>/warm_start/``, config ``warm_start``) and trains; checkpoints hold
only the trainable tensors. So the policy at ``checkpoints/step_N`` is: build from config, load
``init_checkpoint``, load ``step_N/policy.pt``. ``init`` names the policy before any update.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

INIT = "init"
_STEP_RE = re.compile(r"^(?:step_)?(\d+)$")


class CheckpointError(LookupError):
    """The requested checkpoint does not exist (the message lists those that do)."""


@dataclass
class RunPolicy:
    """A run's policy at one checkpoint, ready to generate."""

    model: Any
    tokenizer: Any
    run_id: str
    label: str  # "step_000012" or "init"
    step: int | None  # the last training step the weights include; None for init
    config: dict[str, Any]  # the run's config.yaml
    device: str


def read_run_config(run_dir: Path) -> dict[str, Any]:
    """The run's ``config.yaml`` as a mapping (ValueError naming the file when absent or malformed)."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no run config (is {run_dir} a run folder?)")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a run config is a mapping of TrainConfig fields")
    return data


def resolve_checkpoint(run_dir: Path, which: str | int | None) -> tuple[str, Path | None, int | None]:
    """``(label, folder, step)`` of checkpoint ``which``: None = the latest complete one, an int or
    ``step_NNNNNN`` = that step, ``init`` = the policy before training (no folder)."""
    from harness.ppo import checkpoint

    run_dir = Path(run_dir)
    done = checkpoint.complete(run_dir)
    available = ", ".join(p.name for p in done) or "none"
    if which is None:
        if not done:
            raise CheckpointError(
                f"run {run_dir.name} has no complete checkpoint (checkpoints: none); "
                f"evaluate the starting policy with --checkpoint {INIT}"
            )
        path = done[-1]
        return path.name, path, checkpoint.read_state(path)["step"]
    if str(which) == INIT:
        return INIT, None, None
    m = _STEP_RE.match(str(which))
    if not m:
        raise CheckpointError(f"checkpoint {which!r} is not a step number, step_NNNNNN or {INIT!r}")
    path = checkpoint.ckpt_dir(run_dir, int(m.group(1)))
    if path not in done:
        raise CheckpointError(f"run {run_dir.name} has no complete checkpoint {path.name}; available: {available}")
    return path.name, path, checkpoint.read_state(path)["step"]


def pick_device(device: str) -> str:
    """``auto`` -> cuda when available, else cpu."""
    import torch

    if device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be auto, cpu or cuda, got {device!r}")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device cuda requested but torch sees no CUDA device")
    return device


def load_run_policy(
    run_dir: Path, which: str | int | None = None, device: str = "auto", log=lambda m: None
) -> RunPolicy:
    """The policy of ``run_dir`` at checkpoint ``which`` (see :func:`resolve_checkpoint`), in eval mode.
    ``log`` receives a line if a packaged model is de-quantised on first use."""
    import torch

    from harness.ppo import checkpoint
    from harness.ppo.models import PolicySpec, load_policy

    run_dir = Path(run_dir)
    cfg = read_run_config(run_dir)
    label, path, step = resolve_checkpoint(run_dir, which)
    spec = PolicySpec.from_dict(cfg.get("policy"), where=f"{run_dir / 'config.yaml'}: policy")
    model, tokenizer = load_policy(spec, log=log)
    init = cfg.get("init_checkpoint")
    if not init and cfg.get("warm_start") is not None:
        init = str(run_dir / "warm_start")  # the run made its own warm start (config warm_start)
    if init:
        init_file = Path(init) / "policy.pt"
        if not init_file.is_file():
            raise FileNotFoundError(f"{run_dir / 'config.yaml'}: starting weights {init} have no policy.pt")
        checkpoint.load_trainable(model, torch.load(init_file, weights_only=True), str(init_file))
    if path is not None:
        checkpoint.load_trainable(model, torch.load(path / "policy.pt", weights_only=True), str(path / "policy.pt"))
    dev = pick_device(device)
    model.to(dev)
    model.eval()
    return RunPolicy(
        model=model,
        tokenizer=tokenizer,
        run_id=str(cfg.get("run_id") or run_dir.name),
        label=label,
        step=step,
        config=cfg,
        device=dev,
    )
