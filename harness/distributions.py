"""Token distributions over a vocabulary: the log-probability of chosen tokens and the entropy of
``softmax(logits / temperature)``, chunked so that no second vocabulary-sized tensor is held at once.

The rollout records log-probs with these functions while it samples and the trainer scores with
them, so both give the same numbers. Pure tensor code: nothing here imports the harness.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _rows_per_chunk(vocab: int, chunk_size: int | None) -> int:
    """Rows per chunk: about 32M logits (128 MiB in float32) when not given."""
    return chunk_size if chunk_size else max(1, (1 << 25) // max(vocab, 1))


def logprobs_from_logits(
    logits: torch.Tensor, labels: torch.Tensor, temperature: float = 1.0, chunk_size: int | None = None
) -> torch.Tensor:
    """Log-probability of ``labels`` under ``softmax(logits / temperature)``.

    ``logits (..., V)``, ``labels (...)`` -> ``(...)``. Memory-frugal: log-softmax is taken over
    ``chunk_size`` rows at a time and only the chosen entry is kept (``logsumexp`` then gather),
    so no second ``(..., V)`` tensor is materialised at once.

    >>> logprobs_from_logits(torch.tensor([[0.0, 0.0]]), torch.tensor([1]))
    tensor([-0.6931])
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    V = logits.shape[-1]
    flat = logits.reshape(-1, V)  # (N, V)
    idx = labels.reshape(-1, 1)  # (N, 1)
    out = []
    n = _rows_per_chunk(V, chunk_size)
    for rows, ids in zip(flat.split(n), idx.split(n)):
        rows = rows.float() / temperature if temperature != 1.0 else rows.float()
        out.append((rows.gather(-1, ids) - torch.logsumexp(rows, dim=-1, keepdim=True)).squeeze(-1))
    return torch.cat(out).reshape(labels.shape)


def entropy_from_logits(logits: torch.Tensor, temperature: float = 1.0, chunk_size: int | None = None) -> torch.Tensor:
    """Entropy (nats) of ``softmax(logits / temperature)`` per row: ``(..., V) -> (...)``, chunked.

    >>> entropy_from_logits(torch.zeros(1, 4))
    tensor([1.3863])
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    V = logits.shape[-1]
    out = []
    for rows in logits.reshape(-1, V).split(_rows_per_chunk(V, chunk_size)):
        rows = rows.float() / temperature if temperature != 1.0 else rows.float()
        logp = F.log_softmax(rows, dim=-1)
        out.append(-(logp.exp() * logp).sum(-1))
    return torch.cat(out).reshape(logits.shape[:-1])
