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
from harness.rollout.backends import MIN_SHARED_PREFIX, HFBackend, SamplingParams
from harness.rollout.row_cache import KVBufferPool, MaskSpec, RowKVCache, mask_spec, packed_attention

VOCAB = 97
WINDOW = 5  # shorter than the rows, so a sliding-window layer that saw a full mask would give other logits


def llama(attn: str):
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    return LlamaForCausalLM._from_config(config, attn_implementation=attn)


def gemma3(attn: str):
    config = Gemma3TextConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        sliding_window=WINDOW,
        layer_types=["sliding_attention", "full_attention"],
        max_position_embeddings=256,
    )
    return Gemma3ForCausalLM._from_config(config, attn_implementation=attn)


def mistral(attn: str):
    config = MistralConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        sliding_window=WINDOW,
        max_position_embeddings=256,
    )
    return MistralForCausalLM._from_config(config, attn_implementation=attn)


BUILDS = {
    "llama-sdpa": (llama, "sdpa"),
    "llama-eager": (llama, "eager"),
    "gemma3-sdpa": (gemma3, "sdpa"),
    "gemma3-eager": (gemma3, "eager"),
    "mistral-sdpa": (mistral, "sdpa"),
}


def stale_pool() -> KVBufferPool:
    """A pool holding an earlier cache's storage: large finite values everywhere (every model above has
    16 key/value numbers per row and column), some tensors too small for a first call of 4 rows."""
    pool = KVBufferPool(1 << 30)
    gen = torch.Generator().manual_seed(9)
    for columns in (80, 80, 80, 40, 40):
        pool.give(torch.randn(4 * 16 * columns, generator=gen) * 50)
    return pool


def check_stale_columns_were_hidden(cache: RowKVCache, pool: KVBufferPool | None) -> None:
    """Every value in the buffers is finite; with a pool, unwritten columns still held stale values
    (so the logits above were computed with them behind the mask); release hands the buffers back."""
    for layer in cache.layers:
        assert torch.isfinite(layer.keys).all() and torch.isfinite(layer.values).all()
    if pool is not None:
        past = int(cache.lengths.max()) + 1
        assert any((layer.keys[:, :, past:] != 0).any() for layer in cache.layers)
        held = pool.bytes
        cache.release()
        assert pool.bytes > held and cache.layers == []


@pytest.mark.parametrize("pooled", [False, True], ids=["fresh", "pooled"])
@pytest.mark.parametrize("name", list(BUILDS))
@torch.no_grad()
def test_every_call_gives_each_row_the_logits_of_its_own_unpadded_sequence(name, pooled):
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
    pool = stale_pool() if pooled else None
    cache = RowKVCache(4, pool)
    checked = 0

    def call(called: list[int], fed: list[list[int]]) -> None:
        nonlocal checked
        width = max(len(f) for f in fed)
        ids = torch.zeros((len(called), width), dtype=torch.long)
        for j, f in enumerate(fed):
            ids[j, width - len(f) :] = torch.tensor(f)
            seqs[rows[called[j]]].extend(f)
        layout = cache.begin(None if len(called) == len(rows) else called, [len(f) for f in fed], width)
        out = model(
            input_ids=ids,
            attention_mask=cache.attention_mask(layout, spec),
            position_ids=cache.positions(layout),
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        )
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
    order = cache.keep([0, 2, 3])  # episode 1 is over: the last row moves into its place
    assert order == [0, 3, 2]
    rows = [rows[i] for i in order]
    call([2], [tokens(60)])  # a long observation (episode 2): the buffers grow past their first capacity
    for _ in range(2):
        call([0, 1, 2], [tokens(1), tokens(1), tokens(1)])
    assert cache.lengths.tolist() == [len(seqs[r]) for r in rows]
    assert len(seqs[2]) > 64 and checked == 9 and seqs[3][:12] == seqs[1][:12] and seqs[3] != seqs[1]
    check_stale_columns_were_hidden(cache, pool)  # padding wrote finite values: no masked column brings a NaN


@pytest.mark.parametrize("pooled", [False, True], ids=["fresh", "pooled"])
@pytest.mark.parametrize("name", list(BUILDS))
@torch.no_grad()
def test_packed_calls_give_each_row_the_logits_of_its_own_unpadded_sequence(name, pooled):
    """Rows fed different numbers of tokens share one packed call (observations beside one-token
    decode steps, no padding in the sequence); every row's last-token logits are those of a fresh
    forward of its own tokens, and the model's attention kernel is restored after each call."""
    build, attn = BUILDS[name]
    torch.manual_seed(0)
    model = build(attn).eval()
    spec = mask_spec(model)
    assert isinstance(spec, MaskSpec) and spec.packable and spec.attention == attn
    gen = torch.Generator().manual_seed(2)

    def tokens(n: int) -> list[int]:
        return torch.randint(1, VOCAB, (n,), generator=gen).tolist()

    seqs: list[list[int]] = [[], [], [], []]
    rows = [0, 1, 2, 3]
    pool = stale_pool() if pooled else None
    cache = RowKVCache(4, pool)
    checked = 0

    def call(called: list[int] | None, fed: list[list[int]]) -> None:
        nonlocal checked
        lay = cache.begin_packed(called, [len(f) for f in fed], spec)
        ids = torch.tensor([[t for f in fed for t in f]])
        for j, f in enumerate(fed):
            seqs[rows[j if called is None else called[j]]].extend(f)
        with packed_attention(model):
            out = model(
                input_ids=ids,
                attention_mask=torch.ones((1, 1, 1, 1), dtype=torch.bool),
                position_ids=lay.positions(),
                cache=cache,
                use_cache=True,
                logits_to_keep=lay.last,
                packed_rows=lay,
            )
        assert model.config._attn_implementation == attn
        cache.commit(lay)
        for j, i in enumerate(range(len(rows)) if called is None else called):
            ref = model(input_ids=torch.tensor([seqs[rows[i]]])).logits[0, -1]
            torch.testing.assert_close(out.logits[0, j], ref, atol=1e-5, rtol=1e-5)
        checked += 1

    call(None, [tokens(7), tokens(12), tokens(2), tokens(1)])  # prompts, one of a single token
    for _ in range(2):
        call(None, [tokens(1) for _ in range(4)])  # decode only: the last-token group alone
    call(None, [tokens(1), tokens(9), tokens(1), tokens(4)])  # two observations beside two decode steps
    call([1, 3], [tokens(3), tokens(1)])  # a subset (not neighbours: the attention gathers its rows)
    call([0, 1], [tokens(2), tokens(6)])  # neighbours: a view
    rows = [rows[i] for i in cache.keep([0, 2, 3])]
    assert rows == [0, 3, 2]
    call(None, [tokens(1), tokens(1), tokens(60)])  # a long observation (episode 2): the buffers grow
    assert cache.lengths.tolist() == [len(seqs[r]) for r in rows]
    assert checked == 7 and len(seqs[2]) > 64
    check_stale_columns_were_hidden(cache, pool)


def sampled_episodes(name: str, prompts: list[list[int]], budgets: list[int], next_turn, **backend_attrs):
    """run_turns on a fresh seeded model ``name`` and a fresh HFBackend with ``backend_attrs`` set:
    sampled (one seed per row), no stop ids (turns run to their budgets), with stats. ``next_turn(row,
    turns so far)`` gives the next (observation, budget) or None. Returns each row's turns, each
    sampled token's log-prob, the model calls and the backend."""
    build, attn = BUILDS[name]
    torch.manual_seed(0)
    model = build(attn).eval()
    tok = type("Tok", (), {"pad_token_id": 0, "eos_token_id": 0})()
    backend = HFBackend(model, tok)
    for key, value in backend_attrs.items():
        setattr(backend, key, value)
    turns: dict[int, list[list[int]]] = {}
    logprobs: dict[int, list[float]] = {}

    def on_turn_end(row, ids, stats):
        turns.setdefault(row, []).append(list(ids))
        logprobs.setdefault(row, []).extend(stats.logprobs)
        return next_turn(row, len(turns[row]))

    calls = backend.run_turns(
        prompts,
        budgets,
        SamplingParams(1.0, 1.0, ()),
        on_turn_end,
        with_stats=True,
        seeds=list(range(1, len(prompts) + 1)),
    )
    return turns, logprobs, calls, backend


def assert_same_logprobs(a: dict[int, list[float]], b: dict[int, list[float]]) -> None:
    assert a.keys() == b.keys()
    for row in a:  # each sampled token's log-prob: the same logits either way
        torch.testing.assert_close(torch.tensor(a[row]), torch.tensor(b[row]), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", list(BUILDS))
def test_run_turns_gives_the_same_episodes_with_observations_packed_or_on_their_own(name):
    prompts = [[5, 6, 7, 8], [11, 12], [13, 14, 15], [5, 6, 7, 8]]

    def next_turn(row, done):
        return None if done == 3 else (list(range(10, 10 + 3 * row + 2 * done)), 2 + (row + done) % 3)

    packed, packed_lp, packed_calls, _ = sampled_episodes(
        name, prompts, [3, 1, 4, 2], next_turn, pack_observations=True
    )
    alone, alone_lp, alone_calls, _ = sampled_episodes(name, prompts, [3, 1, 4, 2], next_turn, pack_observations=False)
    assert packed == alone and len(packed) == 4
    assert_same_logprobs(packed_lp, alone_lp)
    assert packed_calls < alone_calls


@pytest.mark.parametrize("name", list(BUILDS))
def test_run_turns_gives_the_same_episodes_with_the_shared_prompt_prefix_encoded_once_or_per_prompt(name):
    """The prefix is longer than the sliding window, so a window-layer mask that went wrong across the
    prefix call and the rest's call would change the logits."""
    system = [20 + (i * 7) % 60 for i in range(MIN_SHARED_PREFIX + 4)]
    prompts = [system + [5, 6, 7], system + [11], system + [13, 14], system + [5, 6, 7]]

    def next_turn(row, done):
        return None if done == 2 else ([30 + row, 31], 3)

    shared, shared_lp, _, b = sampled_episodes(name, prompts, [2, 3, 1, 2], next_turn, share_prompt_prefix=True)
    whole, whole_lp, _, b_whole = sampled_episodes(name, prompts, [2, 3, 1, 2], next_turn, share_prompt_prefix=False)
    assert (b.shared_prefix_calls, b_whole.shared_prefix_calls) == (1, 0)
    assert shared == whole and len(shared) == 4
    assert_same_logprobs(shared_lp, whole_lp)


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
    assert (
        eager.dtype == torch.float32 and eager[0, 0, 2, 3] == 0 and eager[0, 0, 2, 4] == torch.finfo(torch.float32).min
    )
    cache.commit(lay)
    assert cache.lengths.tolist() == [4, 8]
    with pytest.raises(ValueError, match="does not fit"):
        cache.begin(None, [1, 4], 3)
    with pytest.raises(ValueError, match="ascending"):
        cache.begin([1, 0], [1, 1], 1)


def test_a_packed_layout_puts_rows_one_after_another_and_groups_last_tokens_apart_from_the_rest():
    cache = RowKVCache(3)
    cache.lengths = torch.tensor([3, 5, 2])
    spec = MaskSpec(("full_attention",), None, None, False, ("full_attention",) * 2, "sdpa", True)
    lay = cache.begin_packed(None, [1, 3, 2], spec)
    # packed sequence: row 0's token, row 1's three, row 2's two
    assert lay.token_rows.tolist() == [0, 1, 1, 1, 2, 2]
    assert lay.token_columns.tolist() == [3, 5, 6, 7, 2, 3]
    assert lay.positions().tolist() == [[3, 5, 6, 7, 2, 3]]
    assert lay.last.tolist() == [0, 3, 5]
    last, rest = lay.groups
    # every row's last token, at its column, over a view of all rows
    assert last.query.tolist() == [[0], [3], [5]] and last.layout.columns.tolist() == [[3], [7], [3]]
    assert last.layout.span == slice(0, 3) and last.layout.kv_len == 8
    assert last.masks["full_attention"][:, 0, 0].int().tolist() == [
        [1, 1, 1, 1, 0, 0, 0, 0],
        [1] * 8,
        [1, 1, 1, 1, 0, 0, 0, 0],
    ]
    # the others: row 1's first two tokens, row 2's first one right-aligned (its padding queries index 4)
    assert rest.query.tolist() == [[1, 2], [4, 4]] and rest.real.tolist() == [[True, True], [False, True]]
    assert rest.layout.columns.tolist() == [[5, 6], [3, 2]] and rest.layout.span == slice(1, 3)
    assert lay.kv_len == 8
    cache.commit(lay)
    assert cache.lengths.tolist() == [4, 8, 4]
    sub = cache.begin_packed([0, 2], [2, 1], spec)
    assert sub.token_rows.tolist() == [0, 0, 2] and sub.groups[0].layout.span is None
    with pytest.raises(ValueError, match="ascending"):
        cache.begin_packed([2, 0], [1, 1], spec)
    with pytest.raises(ValueError, match="does not fit"):
        cache.begin_packed(None, [1, 0, 1], spec)


def test_a_model_the_cache_cannot_serve_decodes_one_generate_per_turn(caplog):
    model, tok = load_policy(
        {"model": "tiny", "tiny": {"num_hidden_layers": 1, "hidden_size": 32, "intermediate_size": 64}}
    )
    model.config._attn_implementation = "flex_attention"
    assert "flex_attention" in mask_spec(model)
    with caplog.at_level(logging.WARNING, logger="harness.rollout.backends"):
        backend = HFBackend(model, tok)
    assert backend.continuous is False and "flex_attention" in caplog.text
    with pytest.raises(ValueError, match="continuous=False"):
        backend.run_turns([[5]], [2], SamplingParams(), lambda *a: None)
    plain = load_policy(
        {"model": "tiny", "tiny": {"num_hidden_layers": 1, "hidden_size": 32, "intermediate_size": 64}}
    )[0]
    assert mask_spec(plain).packable
    lora = load_policy(
        {
            "model": "tiny",
            "tiny": {"num_hidden_layers": 1, "hidden_size": 32, "intermediate_size": 64},
            "lora": {"r": 4, "alpha": 8},
        }
    )[0]
    assert mask_spec(lora).packable  # seen through peft's wrapper
    plain._supports_attention_backend = False  # attention not dispatched through transformers' interface
    assert not mask_spec(plain).packable  # observations then get calls of their own
    odd = gemma3("eager")
    odd.config.layer_types = ["chunked_attention", "full_attention"]
    assert "chunked_attention" in mask_spec(odd)


def _write(cache: RowKVCache, fed: list[int]) -> None:
    """One call writing keys = values = 10 x row + column for every fed token of every row."""
    width = max(fed)
    lay = cache.begin(None, fed, width)
    n = len(fed)
    keys = (
        10 * torch.arange(n, dtype=torch.float32)[:, None, None, None]
        + lay.columns.float()[:, None, :, None]
        + torch.zeros((n, 2, width, 4))
    )
    cache.update(keys, keys.clone(), 0)
    cache.commit(lay)


def test_keep_moves_only_the_rows_past_the_new_end():
    cache = RowKVCache(5)
    _write(cache, [3, 2, 3, 1, 3])
    before = cache.layers[0].keys.clone()
    order = cache.keep([0, 2, 4])  # rows 1 and 3 are over: row 4 moves into row 1, rows 0 and 2 stay
    assert order == [0, 4, 2]
    keys = cache.layers[0].keys
    assert keys.shape[0] == 3 and cache.lengths.tolist() == [3, 3, 3]
    assert torch.equal(keys[0, :, :3], before[0, :, :3]) and torch.equal(keys[2, :, :3], before[2, :, :3])
    assert torch.equal(keys[1, :, :3], before[4, :, :3]) and torch.equal(
        cache.layers[0].values[1, :, :3], before[4, :, :3]
    )
    with pytest.raises(ValueError, match="distinct rows of the 3"):
        cache.keep([0, 0])
    with pytest.raises(ValueError, match="distinct rows of the 3"):
        cache.keep([3])
    assert cache.keep([2]) == [2] and cache.lengths.tolist() == [3]


def test_the_pool_hands_out_its_largest_fitting_tensor_and_keeps_at_most_max_bytes():
    pool = KVBufferPool(max_bytes=4 * 100)  # 100 float32 numbers
    fresh = pool.take(10, torch.float32, "cpu")
    assert fresh.numel() == 10 and bool((fresh == 0).all())  # nothing pooled: a new zeroed tensor
    small, large = torch.full((20,), 1.0), torch.full((50,), 2.0)
    pool.give(small)
    pool.give(large)
    assert pool.bytes == 4 * 70
    assert pool.take(15, torch.float32, "cpu") is large  # the largest that fits: a later cache need not grow
    assert pool.take(15, torch.float64, "cpu").dtype == torch.float64  # another dtype: new, the pool keeps its own
    assert pool.take(30, torch.float32, "cpu").numel() == 30  # none fits: new
    assert pool.bytes == 4 * 20
    pool.give(large)
    pool.give(torch.full((40,), 3.0))  # 110 numbers now: over the limit, the smallest goes
    assert pool.bytes == 4 * 90 and pool.take(1, torch.float32, "cpu") is large
    pool.clear()
    assert pool.bytes == 0
    with pytest.raises(ValueError, match="max_bytes must be >= 0"):
        KVBufferPool(-1)


def test_a_backend_rolls_out_the_same_episodes_from_pooled_buffers():
    """run_turns on CPU keeps its buffers for the next rollout: the second run (stale buffers) decodes
    the same greedy tokens as the first (fresh ones) and as a backend without a pool."""
    torch.manual_seed(0)
    model = llama("sdpa").eval()
    tok_prompts = [[5, 6, 7, 8, 9], [3, 4], [5, 6, 7, 8, 9], [11] * 9]

    def run(backend: HFBackend) -> list[list[int]]:
        got: list[list[int]] = [[] for _ in tok_prompts]
        turns = [0] * len(tok_prompts)

        def on_turn_end(row: int, ids: list[int]):
            got[row].extend(ids)
            turns[row] += 1
            return None if turns[row] == 3 else ([7, 8, 9][: row + 1], 6)

        backend.run_turns(tok_prompts, [5, 6, 7, 8], SamplingParams(0.0, 1.0, ()), on_turn_end)
        return got

    class Tok:
        pad_token_id = 0
        eos_token_id = 0

    pooled = HFBackend(model, Tok())
    assert pooled.kv_pool is not None and pooled.kv_pool.bytes == 0
    first = run(pooled)
    held = pooled.kv_pool.bytes
    assert held > 0
    assert run(pooled) == first and pooled.kv_pool.bytes == held
    plain = HFBackend(model, Tok())
    plain.kv_pool = None
    assert run(plain) == first
    pooled.release_buffers()
    assert pooled.kv_pool.bytes == 0
