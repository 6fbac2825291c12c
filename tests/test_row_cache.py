"""RowKVCache: continuous decoding's per-row KV cache gives each row the logits of a fresh, unpadded
forward of that row's tokens, whatever the other rows do (full, sliding-window and mixed models)."""

from __future__ import annotations

import logging

import pytest
import torch
from transformers import (
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
)

from harness.ppo.models import load_policy
from harness.rollout.backends import HFBackend, SamplingParams
from harness.rollout.row_cache import MaskSpec, RowKVCache, mask_spec

VOCAB = 97
WINDOW = 5  # shorter than the rows, so a sliding-window layer that saw a full mask would give other logits


def llama(attn: str):
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    return LlamaForCausalLM._from_config(config, attn_implementation=attn)


def gemma3(attn: str):
    config = Gemma3TextConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=2, num_key_value_heads=1, head_dim=16, sliding_window=WINDOW,
                              layer_types=["sliding_attention", "full_attention"], max_position_embeddings=256)
    return Gemma3ForCausalLM._from_config(config, attn_implementation=attn)


def mistral(attn: str):
    config = MistralConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, sliding_window=WINDOW,
                           max_position_embeddings=256)
    return MistralForCausalLM._from_config(config, attn_implementation=attn)


BUILDS = {"llama-sdpa": (llama, "sdpa"), "llama-eager": (llama, "eager"), "gemma3-sdpa": (gemma3, "sdpa"),
          "gemma3-eager": (gemma3, "eager"), "mistral-sdpa": (mistral, "sdpa")}


@pytest.mark.parametrize("name", list(BUILDS))
@torch.no_grad()
def test_every_call_gives_each_row_the_logits_of_its_own_unpadded_sequence(name):
    build, attn = BUILDS[name]
    torch.manual_seed(0)
    model = build(attn).eval()
    spec = mask_spec(model)
    assert isinstance(spec, MaskSpec), spec
    gen = torch.Generator().manual_seed(1)

    def tokens(n: int) -> list[int]:
        return torch.randint(1, VOCAB, (n,), generator=gen).tolist()

    seqs: list[list[int]] = [[], [], [], []]  # the episodes' tokens so far, by episode
    rows = [0, 1, 2, 3]  # episode of each cache row
    cache = RowKVCache(4)
    checked = 0

    def call(called: list[int], fed: list[list[int]]) -> None:
        nonlocal checked
        width = max(len(f) for f in fed)
        ids = torch.zeros((len(called), width), dtype=torch.long)
        for j, f in enumerate(fed):
            ids[j, width - len(f):] = torch.tensor(f)
            seqs[rows[called[j]]].extend(f)
        layout = cache.begin(None if len(called) == len(rows) else called, [len(f) for f in fed], width)
        out = model(input_ids=ids, attention_mask=cache.attention_mask(layout, spec),
                    position_ids=cache.positions(layout), cache=cache, use_cache=True, logits_to_keep=1)
        cache.commit(layout)
        for j, i in enumerate(called):
            ref = model(input_ids=torch.tensor([seqs[rows[i]]])).logits[0, -1]
            torch.testing.assert_close(out.logits[j, -1], ref, atol=1e-5, rtol=1e-5)
        checked += 1

    call([0, 1, 2], [tokens(7), tokens(12), tokens(2)])  # the prompts, right-aligned in a block of 12
    cache.copy_rows([1], [3])  # episode 3 shares episode 1's prompt: copied, not encoded
    seqs[3] = list(seqs[1])
    for _ in range(3):  # decode: one token each
        call([0, 1, 2, 3], [tokens(1) for _ in range(4)])
    call([0, 2], [tokens(4), tokens(9)])  # observations for two rows; rows 1 and 3 wait
    call([0, 1, 2, 3], [tokens(1) for _ in range(4)])
    cache.keep([0, 2, 3])  # episode 1 is over
    rows = [0, 2, 3]
    call([1], [tokens(60)])  # a long observation: the buffers grow past their first capacity
    for _ in range(2):
        call([0, 1, 2], [tokens(1), tokens(1), tokens(1)])
    assert cache.lengths.tolist() == [len(seqs[0]), len(seqs[2]), len(seqs[3])]
    assert len(seqs[2]) > 64 and checked == 9 and seqs[3][:12] == seqs[1][:12] and seqs[3] != seqs[1]
    for layer in cache.layers:  # padding wrote finite values only: no masked column can bring a NaN
        assert torch.isfinite(layer.keys).all() and torch.isfinite(layer.values).all()


def test_layouts_put_each_rows_tokens_at_its_next_columns_and_padding_after_them():
    cache = RowKVCache(2)
    cache.lengths = torch.tensor([3, 5])
    lay = cache.begin(None, [1, 3], 3)
    # row 0: one token at column 3, its two padding positions at 4 and 5; row 1: tokens at 5, 6, 7
    assert lay.columns.tolist() == [[4, 5, 3], [5, 6, 7]]
    assert lay.real.tolist() == [[False, False, True], [True, True, True]]
    assert lay.kv_len == 8
    spec = MaskSpec(("full_attention", "sliding_attention"), 2, None, True)
    masks = cache.attention_mask(lay, spec)
    full, sliding = masks["full_attention"][:, 0].int().tolist(), masks["sliding_attention"][:, 0].int().tolist()
    assert full[0] == [[0, 0, 0, 0, 1, 0, 0, 0], [0, 0, 0, 0, 0, 1, 0, 0], [1, 1, 1, 1, 0, 0, 0, 0]]
    assert full[1][0] == [1, 1, 1, 1, 1, 1, 0, 0]
    assert sliding[0][2] == [0, 0, 1, 1, 0, 0, 0, 0] and sliding[1][2] == [0, 0, 0, 0, 0, 0, 1, 1]
    eager = cache.attention_mask(lay, MaskSpec(("full_attention",), None, torch.float32, False))
    assert eager.dtype == torch.float32 and eager[0, 0, 2, 3] == 0 and eager[0, 0, 2, 4] == torch.finfo(torch.float32).min
    cache.commit(lay)
    assert cache.lengths.tolist() == [4, 8]
    with pytest.raises(ValueError, match="does not fit"):
        cache.begin(None, [1, 4], 3)
    with pytest.raises(ValueError, match="ascending"):
        cache.begin([1, 0], [1, 1], 1)


def test_a_model_the_cache_cannot_serve_decodes_one_generate_per_turn(caplog):
    model, tok = load_policy({"model": "tiny", "tiny": {"num_hidden_layers": 1, "hidden_size": 32,
                                                        "intermediate_size": 64}})
    model.config._attn_implementation = "flex_attention"
    assert "flex_attention" in mask_spec(model)
    with caplog.at_level(logging.WARNING, logger="harness.rollout.backends"):
        backend = HFBackend(model, tok)
    assert backend.continuous is False and "flex_attention" in caplog.text
    with pytest.raises(ValueError, match="continuous=False"):
        backend.run_turns([[5]], [2], SamplingParams(), lambda *a: None)
    odd = gemma3("eager")
    odd.config.layer_types = ["chunked_attention", "full_attention"]
    assert "chunked_attention" in mask_spec(odd)
