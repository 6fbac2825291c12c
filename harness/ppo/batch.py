"""A rollout batch as padded tensors, and how the update cuts it into mini-batches."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.ppo.models import trunk_states
from harness.rollout.engine import Episode


@dataclass
class Batch:
    """Padded tensors of a rollout batch, all ``(B, T)`` (right padding) unless said otherwise."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    action_mask: torch.Tensor  # 1 on the policy's own tokens (never the first token of a row)
    rewards: torch.Tensor  # each turn's reward on its last action token
    turn_ends: torch.Tensor  # 1 on each turn's last action token
    old_logprobs: torch.Tensor | None = None  # the rollout policy's log-probs (PPO's ratio denominator)
    rollout_logprobs: torch.Tensor | None = None  # recorded while sampling (rollout_stats), 0 off actions
    rollout_values: torch.Tensor | None = None  # the shared critic's values recorded while sampling
    ref_logprobs: torch.Tensor | None = None  # the KL reference's log-probs
    trunk: torch.Tensor | None = None  # (B, T, H) frozen-trunk states (models.trunk_states), when computed
    trunk_depth: int = 0  # decoder layers the trunk states have passed through
    old_values: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    returns: torch.Tensor | None = None

    def rows(self, idx: torch.Tensor) -> Batch:
        """The batch restricted to rows ``idx`` (every tensor field sliced alike)."""
        pick = {k: (v[idx] if isinstance(v, torch.Tensor) else v) for k, v in self.__dict__.items()}
        return Batch(**pick)

    def trunk_for(self, rows: slice | torch.Tensor | None, device: torch.device) -> tuple[torch.Tensor, int] | None:
        """``(states, depth)`` of ``rows`` (all rows: None) for a forward pass, or None without states."""
        if self.trunk is None:
            return None
        return (self.trunk if rows is None else self.trunk[rows]).to(device), self.trunk_depth

    @torch.no_grad()
    def share_frozen_trunk(
        self, policy: torch.nn.Module, depth: int, passes: int, micro_batch_size: int, device: torch.device
    ) -> None:
        """With LoRA on the top layers only (``policy.lora.top_layers``) the ``depth`` layers below are
        the same in every pass over this batch: when the step makes two passes or more (PPO epochs, the
        KL reference, a scoring pass) their output is computed once here and each pass runs the top
        layers alone. Exact (tests/test_models.py)."""
        if not depth or passes < 2:
            return
        policy.eval()
        self.trunk = trunk_states(
            policy, self.input_ids.to(device), self.attention_mask.to(device), depth, micro_batch_size
        ).cpu()
        self.trunk_depth = depth
        policy.train()


def kept_length(e: Episode) -> int:
    """Tokens of ``e`` that go into the batch: all of them, or one for an episode with no generated
    token (it ended at its prompt, a prompt longer than agent.max_episode_tokens): such a row trains
    nothing (no action token takes a loss or a return), and its whole prompt would cost every pass of
    the update a long sequence (a tau2 policy prompt is 8-14k tokens)."""
    return len(e.ids) if any(e.action_mask) else min(1, len(e.ids))


def collate(episodes: list[Episode], pad_id: int) -> Batch:
    """Episodes -> padded tensors. Masks are 0 on padding; action mask 1 on generated tokens only.
    An episode without generated tokens keeps one token (:func:`kept_length`)."""
    seq_len = max(1, max(kept_length(e) for e in episodes))
    rows = len(episodes)
    ids = torch.full((rows, seq_len), pad_id, dtype=torch.long)
    am = torch.zeros((rows, seq_len), dtype=torch.long)
    act = torch.zeros((rows, seq_len), dtype=torch.float32)
    rew = torch.zeros((rows, seq_len), dtype=torch.float32)
    ends = torch.zeros((rows, seq_len), dtype=torch.float32)
    for i, e in enumerate(episodes):
        n = kept_length(e)
        ids[i, :n] = torch.tensor(e.ids[:n])
        am[i, :n] = 1
        act[i, :n] = torch.tensor(e.action_mask[:n], dtype=torch.float32)
        for t, r in zip(e.turn_last_token, e.turn_rewards):
            if t < n:  # an episode that ended at its prompt has no turn to credit
                rew[i, t] += r
                ends[i, t] = 1.0
    act[:, 0] = 0.0  # the first token has no predecessor: never scored
    batch = Batch(ids, am, act, rew, ends)
    # the rollout's own log-probs / values, when every episode has them (one unscored turn: none used)
    for name in ("logprobs", "values"):
        if all(getattr(e, name) is not None for e in episodes):
            t = torch.zeros((rows, seq_len), dtype=torch.float32)
            for i, e in enumerate(episodes):
                n = kept_length(e)
                t[i, :n] = torch.tensor(getattr(e, name)[:n], dtype=torch.float32)
            setattr(batch, f"rollout_{name}", t * act)
    return batch


def minibatch_plan(lengths: torch.Tensor, minibatch_size: int, epochs: int, seed: int) -> list[list[torch.Tensor]]:
    """The update's mini-batches, epoch by epoch: rows shuffled (``seed``), each mini-batch sorted by
    length (micro-batches of similar lengths pad less; their gradients sum to the same mini-batch's)."""
    gen = torch.Generator().manual_seed(seed)
    rows = len(lengths)
    size = max(1, min(minibatch_size, rows))
    plan = []
    for _epoch in range(epochs):
        order = torch.randperm(rows, generator=gen)
        plan.append([idx[torch.argsort(lengths[idx], stable=True)] for idx in order.split(size)])
    return plan
