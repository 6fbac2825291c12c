"""One optimiser step per PPO mini-batch: gradients clipped, the learning rate set from the knobs
(times the warm-up factor of ``agent.lr_warmup_steps``), then the step."""

from __future__ import annotations

from typing import Any, Mapping

import torch

from harness.ppo import core


def updates_done(opt: torch.optim.Optimizer) -> int:
    """Updates an Adam-style optimiser has made (its per-parameter ``step``; 0 before the first)."""
    for st in opt.state.values():
        if "step" in st:
            return int(st["step"])
    return 0


def clip_and_step(optimizers: Mapping[str, torch.optim.Optimizer], knobs: Mapping[str, Any]) -> dict[str, float]:
    """Clip each optimiser's gradients to ``max_grad_norm``, set its learning rate (``lr`` for
    ``policy``, ``critic_lr`` for ``critic``, times the warm-up factor of its own update count, which
    travels in checkpoints), step it. Returns ``grad_norm`` / ``lr_warmup_factor`` (``critic_``-prefixed
    for the critic's optimiser)."""
    out = {}
    max_norm = float(knobs["max_grad_norm"])
    for name, opt in optimizers.items():
        params = [p for g in opt.param_groups for p in g["params"] if p.grad is not None]
        if not params:
            continue
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm if max_norm > 0 else float("inf"))
        factor = core.warmup_factor(updates_done(opt), int(knobs.get("lr_warmup_steps", 0) or 0))
        base = float(knobs["lr"] if name == "policy" else knobs["critic_lr"])
        for g in opt.param_groups:
            g["lr"] = base * factor
        prefix = "" if name == "policy" else "critic_"
        out[f"{prefix}grad_norm"], out[f"{prefix}lr_warmup_factor"] = float(norm), factor
        opt.step()
    return out
