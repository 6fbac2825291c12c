"""The optimisers of a run, and one optimiser step per PPO mini-batch: gradients clipped, the
learning rate set from the knobs (times the warm-up factor of ``agent.lr_warmup_steps``), then the
step. The trainer's numeric guard (harness/ppo/guards.py) clips first, looks at the norms, and steps
only when every one is finite."""

from __future__ import annotations

from typing import Any, Mapping

import torch

from harness.ppo import core
from harness.ppo.hyperparams import AgentKnobs
from harness.ppo.models import trainable_parameters


def make_optimizers(
    policy: torch.nn.Module,
    critic: torch.nn.Module,
    shared_critic: bool,
    knobs: AgentKnobs,
    accelerator: Any = None,
) -> tuple[dict[str, torch.optim.Optimizer], torch.nn.Module, torch.nn.Module]:
    """AdamW for the policy (``lr``) and the critic (``critic_lr``), or one for both when the critic is
    a value head on the policy (it wraps the policy: its parameters are the adapters and the head).
    Under ``accelerate`` the models and optimisers are prepared (DDP). Returns ``(optimizers,
    train_policy, train_critic)``: the modules the update's forward passes go through."""
    if shared_critic:
        optimizers = {"policy": torch.optim.AdamW(trainable_parameters(critic), lr=knobs.lr)}
    else:
        optimizers = {
            "policy": torch.optim.AdamW(trainable_parameters(policy), lr=knobs.lr),
            "critic": torch.optim.AdamW(trainable_parameters(critic), lr=knobs.critic_lr),
        }
    if accelerator is None:
        return optimizers, policy, critic
    if shared_critic:
        train_critic, optimizers["policy"] = accelerator.prepare(critic, optimizers["policy"])
        return optimizers, policy, train_critic
    train_policy, train_critic, optimizers["policy"], optimizers["critic"] = accelerator.prepare(
        policy, critic, optimizers["policy"], optimizers["critic"]
    )
    return optimizers, train_policy, train_critic


def updates_done(opt: torch.optim.Optimizer) -> int:
    """Updates an Adam-style optimiser has made (its per-parameter ``step``; 0 before the first)."""
    for st in opt.state.values():
        if "step" in st:
            return int(st["step"])
    return 0


def _prefix(name: str) -> str:
    return "" if name == "policy" else "critic_"


def clip_grads(optimizers: Mapping[str, torch.optim.Optimizer], knobs: AgentKnobs) -> dict[str, float]:
    """Clip each optimiser's gradients to ``max_grad_norm``; returns each one's norm before clipping
    (``grad_norm``, ``critic_grad_norm``; non-finite when a gradient is)."""
    out = {}
    max_norm = knobs.max_grad_norm
    for name, opt in optimizers.items():
        params = [p for g in opt.param_groups for p in g["params"] if p.grad is not None]
        if params:
            norm = torch.nn.utils.clip_grad_norm_(params, max_norm if max_norm > 0 else float("inf"))
            out[f"{_prefix(name)}grad_norm"] = float(norm)
    return out


def step_all(optimizers: Mapping[str, torch.optim.Optimizer], knobs: AgentKnobs) -> dict[str, float]:
    """Set each optimiser's learning rate (``lr`` for ``policy``, ``critic_lr`` for ``critic``, times the
    warm-up factor of its own update count, which travels in checkpoints) and step it. Returns
    ``lr_warmup_factor`` (``critic_``-prefixed for the critic's optimiser)."""
    out = {}
    for name, opt in optimizers.items():
        if not any(p.grad is not None for g in opt.param_groups for p in g["params"]):
            continue
        factor = core.warmup_factor(updates_done(opt), knobs.lr_warmup_steps)
        base = knobs.lr if name == "policy" else knobs.critic_lr
        for g in opt.param_groups:
            g["lr"] = base * factor
        out[f"{_prefix(name)}lr_warmup_factor"] = factor
        opt.step()
    return out
