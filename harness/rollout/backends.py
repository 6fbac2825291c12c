"""Generation backends behind one interface: one batched call per turn over all live episodes.

* :class:`HFBackend`: transformers ``generate`` on the policy being trained (CPU or GPU); nothing to
  sync, it *is* the policy.
* :class:`VLLMBackend`: vLLM for rollouts on GPU, either colocated (a ``vllm.LLM`` in this process;
  weights pushed after each update) or a server started with ``trl vllm-serve`` (TRL's
  ``VLLMClient`` generates and receives the updated weights). Needs the ``vllm`` extra and a GPU.

A backend returns only the sampled ids; the trainer recomputes log-probs with one forward pass of the
same policy, so every backend yields exactly the numbers the PPO ratio needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence

import torch


@dataclass
class SamplingParams:
    """temperature / top_p of the policy (knobs agent.temperature, agent.top_p); stop_ids end a turn."""

    temperature: float = 1.0
    top_p: float = 1.0
    stop_ids: tuple[int, ...] = ()


class GenerationBackend(Protocol):
    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: Sequence[int],
                 params: SamplingParams) -> list[list[int]]:
        """Sampled continuation ids per prompt, each cut after its first stop id and at its budget."""

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Make the backend sample from the current policy weights."""


def cut_at_stop(ids: Sequence[int], stop_ids: Sequence[int], budget: int, pad_id: int | None) -> list[int]:
    """Keep ids up to and including the first stop id, at most ``budget`` of them, without padding.

    >>> cut_at_stop([5, 6, 2, 0, 0], [2], 10, 0)
    [5, 6, 2]
    >>> cut_at_stop([5, 6, 7], [2], 2, 0)
    [5, 6]
    """
    out: list[int] = []
    stops = set(int(s) for s in stop_ids)
    for t in ids[:budget]:
        t = int(t)
        out.append(t)
        if t in stops:
            break
    if pad_id is not None and (not out or out[-1] not in stops):
        while out and out[-1] == pad_id and pad_id not in stops:
            out.pop()
    return out


class HFBackend:
    """Batched sampling with ``model.generate`` (left padding), one call per turn."""

    def __init__(self, model: torch.nn.Module, tokenizer: Any, device: str | torch.device | None = None):
        self.model = model
        self.tokenizer = tokenizer
        self.device = device or next(model.parameters()).device
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: Sequence[int],
                 params: SamplingParams) -> list[list[int]]:
        if not prompts:
            return []
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(list(p), dtype=torch.long)
            mask[i, width - len(p):] = 1
        budget = max(1, max(max_new_tokens))
        model = self.model
        was_training = model.training
        model.eval()
        try:
            kwargs: dict[str, Any] = dict(
                input_ids=ids.to(self.device), attention_mask=mask.to(self.device), max_new_tokens=budget,
                pad_token_id=self.pad_id, eos_token_id=list(params.stop_ids) or None, use_cache=True)
            if params.temperature > 0:
                kwargs.update(do_sample=True, temperature=float(params.temperature), top_p=float(params.top_p),
                              top_k=0)
            else:
                kwargs.update(do_sample=False)
            out = model.generate(**kwargs)
        finally:
            model.train(was_training)
        gen = out[:, width:].tolist()
        return [cut_at_stop(g, params.stop_ids, int(b), self.pad_id) for g, b in zip(gen, max_new_tokens)]

    def sync_weights(self, model: torch.nn.Module) -> None:
        self.model = model  # generation uses the live policy itself


class VLLMBackend:
    """vLLM rollouts (GPU). ``mode="colocate"``: a ``vllm.LLM`` in this process sharing the GPU
    (``gpu_memory_utilization`` caps its share); ``mode="server"``: a ``trl vllm-serve`` server at
    ``host:port`` reached through TRL's ``VLLMClient``. Weights are pushed after each PPO update."""

    def __init__(self, model_path: str, mode: str = "colocate", gpu_memory_utilization: float = 0.5,
                 host: str = "127.0.0.1", port: int = 8000, dtype: str = "bfloat16", max_model_len: int = 16384,
                 seed: int = 0):
        if mode not in ("colocate", "server"):
            raise ValueError(f"vLLM mode must be colocate or server, got {mode!r}")
        try:
            import vllm  # noqa: F401
        except ImportError as exc:
            raise RuntimeError("the vllm backend needs `pip install 'eau-harness[vllm]'` and a GPU; use "
                               "backend: hf on CPU") from exc
        self.mode = mode
        if mode == "colocate":
            from vllm import LLM

            self.llm = LLM(model=model_path, gpu_memory_utilization=gpu_memory_utilization, dtype=dtype,
                           max_model_len=max_model_len, seed=seed, enable_prefix_caching=True)
            self.client = None
        else:
            from trl.extras.vllm_client import VLLMClient

            self.llm = None
            self.client = VLLMClient(host=host, server_port=port)
            self.client.init_communicator()

    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: Sequence[int],
                 params: SamplingParams) -> list[list[int]]:
        if not prompts:
            return []
        if self.llm is not None:
            from vllm import SamplingParams as VSP
            from vllm.inputs import TokensPrompt

            sps = [VSP(temperature=params.temperature, top_p=params.top_p, max_tokens=int(b),
                       stop_token_ids=list(params.stop_ids)) for b in max_new_tokens]
            outs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], sps, use_tqdm=False)
            gen = [list(o.outputs[0].token_ids) for o in outs]
        else:
            # the server takes one budget per call: group prompts by budget
            gen = [[] for _ in prompts]
            for b in sorted(set(int(x) for x in max_new_tokens)):
                idx = [i for i, x in enumerate(max_new_tokens) if int(x) == b]
                res = self.client.generate(prompts=[list(prompts[i]) for i in idx], n=1, temperature=params.temperature,
                                           top_p=params.top_p, max_tokens=b)
                completions = res["completion_ids"] if isinstance(res, dict) else res
                for i, c in zip(idx, completions):
                    gen[i] = list(c)
        return [cut_at_stop(g, params.stop_ids, int(b), None) for g, b in zip(gen, max_new_tokens)]

    def sync_weights(self, model: torch.nn.Module) -> None:
        state = _merged_state_dict(model)
        if self.llm is not None:
            runner = self.llm.llm_engine.model_executor.driver_worker.model_runner
            runner.model.load_weights(state.items())
            self.llm.reset_prefix_cache()
        else:
            for name, tensor in state.items():
                self.client.update_named_param(name, tensor)
            self.client.reset_prefix_cache()


def _merged_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Plain HF parameter names and tensors of the policy (LoRA adapters merged in)."""
    if hasattr(model, "merge_adapter") and hasattr(model, "unmerge_adapter"):
        model.merge_adapter()
        try:
            sd = {k.replace("base_model.model.", "").replace(".base_layer", ""): v.detach().clone()
                  for k, v in model.state_dict().items() if "lora_" not in k}
        finally:
            model.unmerge_adapter()
        return sd
    return {k: v.detach() for k, v in model.state_dict().items()}
