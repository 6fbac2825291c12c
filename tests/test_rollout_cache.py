"""The HF backend's KV-cache reuse across turns: same episodes as encoding afresh, fewer tokens encoded."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from harness.envs.registry import make
from harness.knobs.folder import defaults_dir
from harness.knobs.snapshot import KnobSnapshot
from harness.ppo.models import load_policy
from harness.rollout.backends import HFBackend, SamplingParams
from harness.rollout.chat import ChatFormat
from harness.rollout.engine import RolloutEngine

SMALL = {"model": "tiny", "tiny": {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128}}


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return load_policy(SMALL)


def with_max_steps(snap: KnobSnapshot, max_steps: int) -> KnobSnapshot:
    values = {area: dict(v) for area, v in snap.values.items()}
    values["env"]["max_steps"] = max_steps
    return dataclasses.replace(snap, values=values)


def rollout(
    model,
    tok,
    reuse: bool,
    gyms=("intention", "travel", "telepathy", "function"),
    n=6,
    tokens=12,
    max_steps: list[int] | None = None,
):
    chat = ChatFormat(tok, "tagged")
    backend = HFBackend(model, tok, reuse_cache=reuse, continuous=False)  # the per-turn generate path
    snap = KnobSnapshot.read_dir(defaults_dir())
    envs = [
        make(gyms[i % len(gyms)], knobs=with_max_steps(snap, max_steps[i]) if max_steps else snap) for i in range(n)
    ]
    res = RolloutEngine(backend, chat).run(
        envs,
        [{"seed": i, "options": {"task_index": i}} for i in range(n)],
        [str(i) for i in range(n)],
        [0] * n,
        params=SamplingParams(0.0, 1.0, tuple(chat.stop_ids)),
        max_new_tokens_per_turn=tokens,
        max_episode_tokens=900,
    )
    return res, backend


def test_greedy_rollouts_match_with_and_without_cache_reuse(tiny):
    model, tok = tiny
    fresh, b0 = rollout(model, tok, reuse=False)
    reused, b1 = rollout(model, tok, reuse=True)
    assert [e.ids for e in reused.episodes] == [e.ids for e in fresh.episodes]
    assert [e.action_mask for e in reused.episodes] == [e.action_mask for e in fresh.episodes]
    # the episodes are multi-turn, so later turns found their conversation in the cache
    assert max(len(e.turn_rewards) for e in fresh.episodes) > 2
    assert b0.reused_tokens == 0 and b1.reused_tokens > 0
    assert b1.reused_tokens + b1.encoded_tokens == b0.encoded_tokens
    assert b1.encoded_tokens < b0.encoded_tokens / 2
    assert b1._cache is None  # the engine drops the cache at the end of the batch


def test_greedy_rollouts_match_when_episodes_leave_at_different_turns(tiny):
    """Episodes that finish drop out of the batch; the rest keep their rows' cache."""
    model, tok = tiny
    gyms = ("intention",)
    limits = [3, 5, 4, 6, 3]  # turn limits per episode: the untrained model never answers, so each runs to its own
    fresh, _ = rollout(model, tok, reuse=False, gyms=gyms, n=5, tokens=24, max_steps=limits)
    reused, b1 = rollout(model, tok, reuse=True, gyms=gyms, n=5, tokens=24, max_steps=limits)
    turns = [len(e.turn_rewards) for e in fresh.episodes]
    assert [e.ids for e in reused.episodes] == [e.ids for e in fresh.episodes]
    assert b1.reused_tokens > 0
    assert len(set(turns)) > 1  # the premise: rows left the batch at different turns


def test_a_prompt_that_continues_no_row_is_encoded_afresh(tiny):
    """Mixing a continuing prompt with an unrelated one: each row gets what a fresh call would give."""
    model, tok = tiny
    params = SamplingParams(0.0, 1.0, ())
    b = HFBackend(model, tok, reuse_cache=True)
    first = b.generate([[5, 6, 7, 8, 9, 10], [11, 12, 13]], [4, 4], params)
    follow = [[5, 6, 7, 8, 9, 10] + first[0] + [20, 21], [30, 31, 32, 33]]
    out = b.generate(follow, [5, 5], params)
    assert b.reused_tokens > 0
    fresh = HFBackend(model, tok, reuse_cache=False).generate(follow, [5, 5], params)
    assert out == fresh


def test_sync_weights_and_clear_drop_the_cache(tiny):
    model, tok = tiny
    b = HFBackend(model, tok)
    b.generate([[5, 6, 7]], [3], SamplingParams(0.0, 1.0, ()))
    assert b._cache is not None
    b.sync_weights(model)
    assert b._cache is None
