"""The harness's weight-transfer backend for vLLM (``eau_tensors``): the engine side of a weight sync.

vLLM 0.32 receives RL weight updates through weight-transfer engines (``vllm.distributed.
weight_transfer``): ``start_weight_update`` / ``update_weights`` / ``finish_weight_update`` on the
``LLM`` or over the server's HTTP routes. Its own backends move tensors with NCCL or CUDA IPC, so
none works on a CPU. This one receives the weights either as tensors (an engine in the trainer's
process: passed by reference, no copy on the way) or as a safetensors file on the same host (a
server in another process: the update names the file). Either way it loads them through vLLM's
layerwise reload, as vLLM's IPC backend does, so a backend that repacks weights after loading (the
CPU one does) gets them repacked again; ``model.load_weights`` alone would write into the packed
layout and fail.

Two checks vLLM's reload leaves out, both made here because a sync that half-happens samples from
weights nobody trained: every parameter of the model must be sent (a layer left out would keep
reload's uninitialised memory), and a layer whose weight is tied to one that was reloaded (a tied
LM head) is processed again: vLLM re-processes only the first owner of a tied weight, which on
the CPU leaves the LM head's packed copy stale (the probe check in ``weight_sync`` caught it).

``register`` adds the backend to vLLM's registry. It runs as a vLLM general plugin (entry point
``vllm.general_plugins`` in pyproject.toml), so every vLLM process of an installed harness has it: a
server started with ``--weight-transfer-config '{"backend": "eau_tensors"}'`` included. This
module imports vLLM: import it only where vLLM is installed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
from safetensors.torch import load_file
from vllm.distributed.weight_transfer.base import (
    WeightTransferEngine,
    WeightTransferInitInfo,
    WeightTransferUpdateInfo,
)
from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory
from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod
from vllm.model_executor.model_loader.reload import finalize_layerwise_reload, initialize_layerwise_reload

BACKEND = "eau_tensors"
LAYERWISE_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"


@dataclass
class TensorsInitInfo(WeightTransferInitInfo):
    """Nothing to agree on: the transport is the call itself or a file."""


@dataclass
class TensorsUpdateInfo(WeightTransferUpdateInfo):
    """One chunk of a weight update: ``names`` with either ``tensors`` (same order; an engine in the
    sender's process) or ``path`` (a safetensors file holding those names; any process on the host)."""

    names: list[str]
    tensors: list[Any] | None = None
    path: str | None = None

    def __post_init__(self) -> None:
        if (self.tensors is None) == (self.path is None):
            raise ValueError(f"{BACKEND} update: give either tensors or path, not {'both' if self.path else 'neither'}")
        if self.tensors is not None and len(self.tensors) != len(self.names):
            raise ValueError(f"{BACKEND} update: {len(self.names)} names but {len(self.tensors)} tensors")


class TensorsWeightTransferEngine(WeightTransferEngine[TensorsInitInfo, TensorsUpdateInfo]):
    """Loads the trainer's weights (checkpoint names and layout) into the engine's model in place."""

    init_info_cls = TensorsInitInfo
    update_info_cls = TensorsUpdateInfo

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._loaded: set[str] = set()
        self._expected: set[str] = set()

    def init_transfer_engine(self, init_info: TensorsInitInfo) -> None:
        """No rendezvous: the weights come with each update."""

    def start_weight_update(self) -> None:
        self._loaded = set()
        # each parameter once, tied ones under their first name (read before reload unties them)
        self._expected = {name for name, _ in self.model.named_parameters()}
        initialize_layerwise_reload(self.model)

    def receive_weights(self, update_info: TensorsUpdateInfo) -> None:
        if update_info.path is not None:
            stored = load_file(update_info.path)
            missing = [n for n in update_info.names if n not in stored]
            if missing:
                raise ValueError(f"{BACKEND} update: {update_info.path} lacks {', '.join(missing[:5])}")
            weights = [(n, stored[n]) for n in update_info.names]
        else:
            weights = list(zip(update_info.names, update_info.tensors))
        self._loaded |= set(self.model.load_weights(weights))

    def finish_weight_update(self) -> None:
        finalize_layerwise_reload(self.model, self.model_config)
        missing = sorted(self._expected - self._loaded)
        if missing:
            raise ValueError(
                f"{BACKEND} update: {len(missing)} of the model's parameters were not sent "
                f"({', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''}); a weight update sends them all"
            )
        reprocess_tied_embeddings(self.model)

    def shutdown(self) -> None:
        """Nothing held between updates."""


def reprocess_tied_embeddings(model: torch.nn.Module) -> int:
    """Run the post-load processing again on every vocabulary layer (an LM head) whose weight is
    shared with an earlier module (the input embedding): vLLM's reload processes a tied weight for
    its first owner only. Returns how many layers were processed."""
    owners: set[int] = set()
    done = 0
    for module in model.modules():
        params = [id(p) for p in module.parameters(recurse=False)]
        shared = any(p in owners for p in params)
        owners.update(params)
        method = getattr(module, "quant_method", None)
        if shared and isinstance(method, UnquantizedEmbeddingMethod):
            method.process_weights_after_loading(module)
            done += 1
    return done


class _ExpectedReloadWarnings(logging.Filter):
    """Drops layerwise reload's "Failed to load weights" for the layers no checkpoint holds: a rotary
    embedding (its caches are computed) and a tied LM head (loaded through the input embedding, and
    processed again by :func:`reprocess_tied_embeddings`). A parameter really left out is an error
    of its own (``finish_weight_update``); every step would otherwise log these two lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        layer, _, rest = record.getMessage().partition(": ")
        return not (
            rest == "Failed to load weights" and (layer.endswith("RotaryEmbedding") or layer == "ParallelLMHead")
        )


def register() -> None:
    """Add ``eau_tensors`` to vLLM's weight-transfer registry (once per process; vLLM may call
    plugins more than once)."""
    try:
        WeightTransferEngineFactory.register_engine(BACKEND, TensorsWeightTransferEngine)
    except ValueError:  # already registered in this process
        return
    logging.getLogger(LAYERWISE_LOGGER).addFilter(_ExpectedReloadWarnings())
