"""The trainer's side of a weight sync into an inference engine, and the check that it arrived.

An inference engine (vLLM) holds its own copy of the policy's weights. After each PPO update the
trainer sends them again (:func:`engine_weights`: plain Hugging Face names, LoRA adapters merged in
without touching the trained model), then checks the sync on a fixed probe: the engine's log-probs
of the probe's tokens must match the policy's own (:func:`compare_logprobs`). A mismatch stops the
run with :class:`WeightSyncError`: a sync that failed or was not taken would otherwise go on
sampling from stale weights, which nothing downstream can tell from a bad policy.

No vLLM import here: these are tensors, names and numbers (``harness.rollout.vllm_backend`` talks
to the engine).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import torch

# the probe the engine and the policy both score after every sync: ordinary text of the gyms' kind,
# so the tokens are ones the policy has seen (a random id sequence would test the vocabulary's tail)
PROBE_TEXT = (
    "The user wants a quiet hotel near the beach for three nights in May. Before answering, ask which "
    "budget they have in mind and whether breakfast matters to them."
)
PROBE_TOKENS = 32  # enough positions to see a layer's change; few enough to cost nothing per step

# mean absolute log-prob difference between engine and policy on the probe that a sync may leave:
# float32 kernels agree to ~1e-6 (measured on CPU, BENCHMARKS.md); 16-bit weights round the engine's
# copy itself, so its log-probs move by up to a few hundredths
DEFAULT_TOLERANCE = {"float32": 1e-3, "bfloat16": 0.1, "float16": 0.05}


class WeightSyncError(RuntimeError):
    """The engine does not sample from the trainer's current weights (the sync failed or was not taken)."""


def engine_weights(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """The policy's weights as an inference engine loads them: ``(Hugging Face name, tensor)`` for every
    parameter, each once (tied weights under their first name), in module order.

    A peft model gives its base model's names with each LoRA layer's adapters merged in
    (``W + B A * scaling``) as a new tensor; the trained model is not touched (merging in place and
    back would drift its base weights by rounding at every sync). Only plain LoRA can be merged so;
    another adapter variant (DoRA) raises ValueError.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") and hasattr(model, "peft_config") else model
    adapters = list(getattr(model, "active_adapters", None) or []) if base is not model else []
    for mod_name, module in base.named_modules():
        if adapters and hasattr(module, "get_delta_weight") and hasattr(module, "base_layer"):
            for name, tensor in _merged_lora_layer(module, adapters):
                yield f"{mod_name}.{name}", tensor
    seen: set[int] = set()
    for name, param in base.named_parameters():
        if id(param) in seen:
            continue
        seen.add(id(param))
        if adapters and (".lora_" in name or ".base_layer." in name):
            continue  # the adapters themselves, and the layers merged above
        if ".original_module." in name:
            continue  # modules_to_save: the trained copy is sent under the plain name
        yield name.replace(".modules_to_save.default.", ".").replace(".modules_to_save.", "."), param.detach()


def _merged_lora_layer(module: Any, adapters: Sequence[str]) -> Iterator[tuple[str, torch.Tensor]]:
    """``("weight", W + deltas)`` (and its bias) of one LoRA layer, adapters merged as peft's ``merge`` does."""
    base_layer = module.get_base_layer()
    weight = base_layer.weight.detach()
    bias = getattr(base_layer, "bias", None)
    merged_bias = None if bias is None else bias.detach()
    for adapter in adapters:
        if adapter not in getattr(module, "lora_A", {}):
            continue
        if adapter in getattr(module, "lora_variant", {}):
            raise ValueError(
                f"LoRA adapter {adapter!r} is a variant (e.g. DoRA) that cannot be merged for the inference "
                "engine; use plain LoRA with the vllm backend"
            )
        weight = weight + module.get_delta_weight(adapter).to(weight.dtype)
        if getattr(module, "lora_bias", {}).get(adapter):
            merged_bias = merged_bias + module.lora_B[adapter].bias.detach() * module.scaling[adapter]
    yield "weight", weight
    if merged_bias is not None:
        yield "bias", merged_bias


def probe_ids(tokenizer: Any, n_tokens: int = PROBE_TOKENS) -> list[int]:
    """The probe's token ids: :data:`PROBE_TEXT` encoded (repeated to reach ``n_tokens``), cut to ``n_tokens``."""
    ids: list[int] = []
    while len(ids) < n_tokens:
        ids += list(tokenizer.encode(PROBE_TEXT, add_special_tokens=not ids))
    return ids[:n_tokens]


@torch.no_grad()
def policy_logprobs(model: torch.nn.Module, ids: Sequence[int]) -> torch.Tensor:
    """Log-probs (float32, temperature 1) the model gives each token of ``ids`` after the first, in eval mode."""
    was_training = model.training
    model.eval()
    try:
        device = next(model.parameters()).device
        x = torch.tensor([list(ids)], dtype=torch.long, device=device)
        logits = model(input_ids=x).logits[0, :-1].float()  # (T-1, vocab): position t predicts token t+1
    finally:
        model.train(was_training)
    return logits.log_softmax(-1).gather(1, x[0, 1:, None]).squeeze(1).cpu()


@dataclass(frozen=True)
class SyncCheck:
    """How the engine's log-probs of the probe compare with the policy's after a sync."""

    mean_abs_diff: float  # mean over the probe's tokens of |engine - policy|
    max_abs_diff: float
    stale: bool  # the engine still matches the policy's log-probs from before the update (and not now's)
    ok: bool  # mean_abs_diff <= tolerance


def compare_logprobs(
    engine: torch.Tensor, policy: torch.Tensor, tolerance: float, previous_policy: torch.Tensor | None = None
) -> SyncCheck:
    """Whether the engine's log-probs of the probe (``engine``, one per token) match the policy's
    (``policy``) within ``tolerance`` (mean absolute difference). ``previous_policy``: the policy's
    log-probs before the update; an engine that matches them rather than the current ones is ``stale``.

    >>> c = compare_logprobs(torch.tensor([-1.0, -2.0]), torch.tensor([-1.0, -2.5]), 0.1)
    >>> (c.mean_abs_diff, c.max_abs_diff, c.ok)
    (0.25, 0.5, False)
    >>> compare_logprobs(torch.tensor([-1.0, -2.0]), torch.tensor([-1.0, -2.5]), 0.1, torch.tensor([-1.0, -2.0])).stale
    True
    >>> compare_logprobs(torch.tensor([-1.0, -2.0]), torch.tensor([-1.0, -2.0001]), 0.1).ok
    True
    """
    if engine.shape != policy.shape:
        raise ValueError(f"log-probs of {tuple(engine.shape)} and {tuple(policy.shape)} tokens cannot be compared")
    diff = (engine.float() - policy.float()).abs()
    mean, worst = float(diff.mean()), float(diff.max())
    stale = False
    if previous_policy is not None and mean > tolerance:
        stale = float((engine.float() - previous_policy.float()).abs().mean()) <= tolerance
    return SyncCheck(mean_abs_diff=mean, max_abs_diff=worst, stale=stale, ok=mean <= tolerance)


def sync_error(check: SyncCheck, tolerance: float, what: str) -> WeightSyncError:
    """The error that stops a run whose engine failed ``check`` (``what``: which sync, for the message)."""
    cause = (
        "it still samples from the weights before this update: the sync was not taken"
        if check.stale
        else "its weights are neither the policy's before nor after this update"
    )
    return WeightSyncError(
        f"{what}: the inference engine's log-probs of the probe differ from the policy's by {check.mean_abs_diff:.3g} "
        f"on average (max {check.max_abs_diff:.3g}; tolerance {tolerance:g}); {cause}. The run stops rather than "
        "train on samples from stale weights (backend.sync_tolerance sets the tolerance)"
    )
