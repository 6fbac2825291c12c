"""Generation backends behind one interface: one batched call per turn over all live episodes.

* :class:`HFBackend`: transformers ``generate`` on the policy being trained (CPU or GPU); nothing to
  sync, it *is* the policy.
* ``VLLMBackend`` (:mod:`harness.rollout.vllm_backend`, imported only by a vllm run): vLLM, colocated
  in this process or a server, on CPU or GPU; the policy's weights are synced in after each update
  and the sync is checked. Needs the ``vllm`` extra. :mod:`harness.rollout.backend_choice` builds the
  one a run config names.

``generate`` returns only the sampled ids; the trainer then recomputes log-probs with one forward
pass of the same policy, so every backend yields exactly the numbers the PPO ratio needs.
``HFBackend.run_turns(with_stats=True)`` also returns each token's log-prob from the logits it was
sampled from (and the shared critic's value), which saves that pass when the rollout's arithmetic
is the update's (float32; trainer option ``rollout_stats``).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

import numpy as np
import torch
from transformers.modeling_outputs import CausalLMOutputWithPast

from harness.distributions import logprobs_from_logits
from harness.rollout.row_cache import (
    KVBufferPool,
    MaskSpec,
    RowKVCache,
    attention_configs,
    mask_spec,
    packed_attention,
)

logger = logging.getLogger(__name__)

# the keyword a transformers model's forward and generate take the KV cache under, and the output
# field that returns it: `cache` from transformers 5.20, `past_key_values` before (vLLM 0.32 pins
# transformers < 5.20, so an environment with vLLM has the older name)
CACHE_KWARG = "cache" if "cache" in {f.name for f in dataclasses.fields(CausalLMOutputWithPast)} else "past_key_values"

# the most bytes of KV buffers HFBackend keeps between rollouts on CPU (the tiny preset's 16 episodes
# use ~35 MB; Gemma 3 270M ~37 KB per token: 8 episodes x 2k tokens ~600 MB)
KV_POOL_BYTES = 1 << 30
# the shortest prefix shared by a rollout's distinct prompts that run_turns encodes once for all of
# them (a call of its own; below this it costs more than it saves)
MIN_SHARED_PREFIX = 16


@dataclass
class SamplingParams:
    """temperature / top_p of the policy (knobs agent.temperature, agent.top_p); stop_ids end a turn."""

    temperature: float = 1.0
    top_p: float = 1.0
    stop_ids: tuple[int, ...] = ()


class GenerationBackend(Protocol):
    # whether ``generate`` takes one sampling seed per prompt (``seeds=``): a backend whose requests are
    # seeded one by one (vLLM); the hf backend's ``generate`` samples the batch from one RNG
    per_request_seeds: bool

    def generate(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: Sequence[int], params: SamplingParams
    ) -> list[list[int]]:
        """Sampled continuation ids per prompt, each cut after its first stop id and at its budget."""

    def sync_weights(self, model: torch.nn.Module) -> dict[str, float]:
        """Make the backend sample from the current policy weights; numbers about the sync, for metrics."""

    def clear_cache(self) -> None:
        """Forget state kept between calls (the engine calls it before and after every batch)."""


def turn_seed(episode_seed: int, turn: int) -> int:
    """The sampling seed of one turn of one episode on a backend that seeds each request (vLLM): a
    function of the episode's seed and the turn's index only, so a turn samples the same tokens
    whatever else is in the batch.

    >>> turn_seed(7, 0) == turn_seed(7, 0) != turn_seed(7, 1)
    True
    """
    return int(np.random.SeedSequence([int(episode_seed), int(turn)]).generate_state(1)[0])


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
    """Batched sampling with ``model.generate`` (left padding), one call per turn.

    Across the turns of a batch the backend keeps the KV cache of its last call (``reuse_cache``):
    when a new prompt extends a row's previous prompt plus what that row generated (the next turn of
    the same episode), those tokens are not encoded again; only the new observation tokens (and a few
    cached ones, to give every row the same number of new columns) go through the model. Rows are
    re-laid out with plain left padding, so positions and masks are exactly those of a fresh call.
    The first call of a batch starts a cache of full layers (also for sliding-window models, whose
    window the attention mask applies); a model that ends up with any other cache (quantised,
    offloaded) is encoded afresh every turn. ``clear_cache()`` drops it (the engine calls it at the
    start and end of a batch; weights change between batches).
    """

    per_request_seeds = False  # generate samples the batch from one RNG; run_turns takes seeds

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        device: str | torch.device | None = None,
        reuse_cache: bool = True,
        continuous: bool = True,
    ):
        self.model = model
        # the engine decodes with run_turns (continuous batching) when the row cache can serve the model
        self.row_cache_spec: MaskSpec | str = mask_spec(model)
        if continuous and isinstance(self.row_cache_spec, str):
            logger.warning(
                "continuous decoding off (one generate per turn instead): the row cache cannot serve this model: %s",
                self.row_cache_spec,
            )
            continuous = False
        self.continuous = continuous
        self.tokenizer = tokenizer
        self.device = device or next(model.parameters()).device
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.reuse_cache = reuse_cache
        self._cache: _RowCache | None = None
        self.reused_tokens = 0  # prompt tokens served from the cache since construction (benchmarks read it)
        self.encoded_tokens = 0  # prompt tokens encoded by the model since construction
        self.model_calls = 0  # forward calls of run_turns since construction (benchmarks read it)
        self.shared_prefix_calls = 0  # of those, calls that encoded a prefix shared by distinct prompts
        # run_turns encodes observations in the same call as the other rows' next tokens (a packed call)
        # when the model allows (MaskSpec.packable); False: the observing rows get a call of their own
        self.pack_observations = True
        self._packed_configs: list[Any] | None = None  # the attention configs packed calls switch (found once)
        # run_turns encodes the prefix its distinct prompts share once and copies it to their rows
        # (_encode_shared_prefix); False: every distinct prompt is encoded whole
        self.share_prompt_prefix = True
        # the shared critic's values from last hidden states (PolicyWithValueHead.values_from_hidden), set
        # by the trainer: run_turns with stats then also records the values of the states tokens were sampled in
        self.value_fn: Callable[[torch.Tensor], torch.Tensor] | None = None
        # run_turns' KV buffers kept for the next rollout on CPU (no caching allocator there; see
        # row_cache.KVBufferPool), up to KV_POOL_BYTES; None on other devices. release_buffers() frees it.
        self.kv_pool = KVBufferPool(KV_POOL_BYTES) if torch.device(self.device).type == "cpu" else None

    def release_buffers(self) -> None:
        """Free the KV buffers kept between rollouts (the next rollout allocates afresh)."""
        if self.kv_pool is not None:
            self.kv_pool.clear()

    def clear_cache(self) -> None:
        self._cache = None

    @torch.no_grad()
    def generate(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: Sequence[int], params: SamplingParams
    ) -> list[list[int]]:
        if not prompts:
            return []
        prompts = [list(p) for p in prompts]
        plan = self._cache.plan(prompts) if (self.reuse_cache and self._cache is not None) else None
        self._cache = None  # consumed (or stale): rebuilt from this call's output below
        cached = plan.cached if plan is not None else 0
        width = max(len(p) for p in prompts) if plan is None else plan.width
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p) :] = 1
        self.reused_tokens += int(mask[:, :cached].sum())
        self.encoded_tokens += int(mask[:, cached:].sum())
        budget = max(1, max(max_new_tokens))
        model = self.model
        was_training = model.training
        model.eval()
        try:
            kwargs: dict[str, Any] = dict(
                input_ids=ids.to(self.device),
                attention_mask=mask.to(self.device),
                max_new_tokens=budget,
                pad_token_id=self.pad_id,
                eos_token_id=list(params.stop_ids) or None,
                use_cache=True,
                return_dict_in_generate=True,
            )
            if plan is not None:
                kwargs[CACHE_KWARG] = plan.cache
            elif self.reuse_cache:
                from transformers.cache_utils import DynamicCache

                # full-attention layers everywhere (a config-less cache), so the cache can be re-laid out;
                # sliding-window layers still get their window from the attention mask
                kwargs[CACHE_KWARG] = DynamicCache()
            if params.temperature > 0:
                kwargs.update(do_sample=True, temperature=float(params.temperature), top_p=float(params.top_p), top_k=0)
            else:
                kwargs.update(do_sample=False)
            out = model.generate(**kwargs)
        finally:
            model.train(was_training)
        gen = out.sequences[:, width:].tolist()
        results = [cut_at_stop(g, params.stop_ids, int(b), self.pad_id) for g, b in zip(gen, max_new_tokens)]
        if self.reuse_cache:
            self._cache = _RowCache.after_generate(getattr(out, CACHE_KWARG), prompts, results, width)
        return results

    def sync_weights(self, model: torch.nn.Module) -> dict[str, float]:
        self.model = model  # generation uses the live policy itself: nothing to check
        self._packed_configs = None
        self.clear_cache()
        return {}

    @torch.no_grad()
    def run_turns(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: Sequence[int],
        params: SamplingParams,
        on_turn_end: TurnEnd,
        with_stats: bool = False,
        seeds: Sequence[int] | None = None,
    ) -> int:
        """Continuous batching over whole episodes (docs/rollout.md): decode every live row one token per
        model call; when a row's turn ends (a stop id or its budget) hand its ids to ``on_turn_end(row,
        ids)`` at once; the returned ``(observation ids, next budget)`` are encoded in the next call,
        beside the other rows' next tokens (``None``: the episode is over, the row leaves the batch).
        Sampling follows ``generate``: temperature, then top-p, over float32 logits (greedy at
        temperature 0). A model the row cache cannot serve is refused (ValueError; such a backend is built
        with ``continuous`` off and decodes one ``generate`` per turn). Returns the number of model calls.

        ``with_stats``: also hand ``on_turn_end`` a :class:`TurnStats`: each sampled token's log-prob
        under ``softmax(logits / temperature)`` (PPO's old log-prob, from the very logits it was sampled
        from) and, with a ``value_fn`` (the shared critic's), the value of the state it was sampled in.
        ``seeds``: one sampling seed per prompt, so a row's draws do not depend on the other rows
        (default: the global torch RNG).
        """
        spec = self.row_cache_spec
        if isinstance(spec, str):
            raise ValueError(f"continuous decoding cannot serve this model: {spec}; use continuous=False")
        stops = set(int(t) for t in params.stop_ids)
        warpers = _sampling_warpers(params)
        rows = list(range(len(prompts)))  # episode index of each cache row, in row order
        pending = {r: [int(t) for t in p] for r, p in enumerate(prompts)}  # tokens to feed in the next call
        budget = {r: max(1, int(b)) for r, b in enumerate(max_new_tokens)}
        turn: dict[int, list[int]] = {r: [] for r in rows}
        if with_stats and params.temperature <= 0:
            raise ValueError(f"log-probs need a temperature > 0, got {params.temperature}")
        turn_lp: dict[int, list[float]] = {r: [] for r in rows}
        turn_v: dict[int, list[float]] = {r: [] for r in rows}
        if seeds is not None and len(seeds) != len(rows):
            raise ValueError(f"one seed per prompt: {len(seeds)} seeds for {len(rows)} prompts")
        cache = RowKVCache(len(rows), self.kv_pool)
        generators = (
            None
            if seeds is None
            else {r: torch.Generator(device=self.device).manual_seed(int(sd)) for r, sd in zip(rows, seeds)}
        )
        calls = prefix_calls = 0
        was_training = self.model.training
        self.model.eval()
        try:
            while rows:
                packed = False
                if calls == 0:  # the prompts: each distinct one once (a task's samples share theirs)
                    batch = list(range(len(rows)))
                    computed, source = distinct_rows([pending[r] for r in rows])
                    if self.share_prompt_prefix:
                        prefix_calls = self._encode_shared_prefix(computed, rows, pending, cache, spec)
                else:
                    observing = [i for i, r in enumerate(rows) if len(pending[r]) > 1]
                    packed = 0 < len(observing) < len(rows) and spec.packable and self.pack_observations
                    # packed: the observations and the other rows' next tokens in one call; else the rows
                    # with an observation go first, on their own (all rows when all observe), then all decode
                    batch = list(range(len(rows))) if packed or not observing else observing
                    computed, source = batch, None
                if packed:
                    logits, hidden = self._forward_packed(rows, pending, cache, spec, with_stats)
                else:
                    logits, hidden = self._forward(computed, rows, pending, cache, spec, with_stats)
                if source is not None:
                    cache.copy_rows([computed[j] for j in source], batch)
                    logits = logits[source]
                    hidden = None if hidden is None else hidden[source]
                tokens, lps, vals = self._sample(
                    logits,
                    hidden,
                    warpers,
                    params.temperature if with_stats else None,
                    None if generators is None else [generators[rows[i]] for i in batch],
                )
                calls += 1
                done: list[int] = []
                for j, (i, t) in enumerate(zip(batch, tokens)):
                    r = rows[i]
                    turn[r].append(t)
                    pending[r] = [t]
                    if with_stats:
                        turn_lp[r].append(lps[j])
                        if vals is not None:
                            turn_v[r].append(vals[j])
                    if t in stops or len(turn[r]) >= budget[r]:
                        stats = (TurnStats(turn_lp[r], turn_v[r] if vals is not None else None),) if with_stats else ()
                        nxt = on_turn_end(r, turn[r], *stats)
                        turn[r], turn_lp[r], turn_v[r] = [], [], []
                        if nxt is None:
                            done.append(i)  # the episode is over: its row leaves the batch
                            continue
                        budget[r] = max(1, int(nxt[1]))
                        pending[r] = [t] + [int(x) for x in nxt[0]]
                if done:
                    order = cache.keep([i for i in range(len(rows)) if i not in done])
                    rows = [rows[i] for i in order]  # a later row may have moved into a freed one
        finally:
            self.model.train(was_training)
            cache.release()
        return calls + prefix_calls

    def _encode_shared_prefix(
        self, computed: list[int], rows: list[int], pending: dict[int, list[int]], cache: RowKVCache, spec: MaskSpec
    ) -> int:
        """Encode the prefix the distinct prompts ``computed`` share (the system prompt and tool
        descriptions every task of a gym starts with) once, on the first of them, copy its keys and
        values to the others and leave each its own rest in ``pending``: the prompt call then encodes
        the rests only. Nothing happens below ``MIN_SHARED_PREFIX`` tokens (a call of its own would
        cost more than it saves). Returns the model calls made (0 or 1)."""
        prompts = [pending[rows[i]] for i in computed]
        n = shared_prefix_len(prompts)
        if n < MIN_SHARED_PREFIX:
            return 0
        first = rows[computed[0]]
        pending[first] = prompts[0][:n]
        self._forward([computed[0]], rows, pending, cache, spec, False)  # its logits are not needed
        cache.copy_rows([computed[0]] * (len(computed) - 1), computed[1:])
        for i, p in zip(computed, prompts):
            pending[rows[i]] = p[n:]
        self.shared_prefix_calls += 1
        return 1

    def _forward(
        self,
        batch: list[int],
        rows: list[int],
        pending: dict[int, list[int]],
        cache: RowKVCache,
        spec: MaskSpec,
        want_hidden: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One model call on cache rows ``batch`` feeding their pending tokens (right-aligned in a block
        as wide as the longest; each row's tokens go to its own next columns of the cache). Returns the
        next-token logits (float32, one row per batch row) and, with ``want_hidden`` and a
        ``value_fn``, the last position's last hidden state (None otherwise)."""
        fed = [len(pending[rows[i]]) for i in batch]
        width = max(fed)
        ids = torch.tensor(
            [[self.pad_id] * (width - k) + pending[rows[i]] for i, k in zip(batch, fed)], dtype=torch.long
        )
        self.encoded_tokens += sum(fed)
        layout = cache.begin(batch if len(batch) < len(rows) else None, fed, width)
        want_hidden = want_hidden and self.value_fn is not None
        mask = cache.attention_mask(layout, spec)
        if isinstance(mask, dict):
            mask = {k: m.to(self.device) for k, m in mask.items()}
        else:
            mask = mask.to(self.device)
        out = self.model(
            input_ids=ids.to(self.device),
            attention_mask=mask,
            position_ids=cache.positions(layout).to(self.device),
            **{CACHE_KWARG: cache},
            use_cache=True,
            logits_to_keep=1,
            output_hidden_states=want_hidden,
        )
        cache.commit(layout)
        self.model_calls += 1
        return out.logits[:, -1, :].float(), (out.hidden_states[-1][:, -1] if want_hidden else None)

    def _forward_packed(
        self, rows: list[int], pending: dict[int, list[int]], cache: RowKVCache, spec: MaskSpec, want_hidden: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One packed model call on every cache row (:meth:`RowKVCache.begin_packed`): their pending
        tokens one row after another, no padding between them; same returns as :meth:`_forward`."""
        fed = [len(pending[r]) for r in rows]
        ids = torch.tensor([[t for r in rows for t in pending[r]]], dtype=torch.long)
        self.encoded_tokens += sum(fed)
        layout = cache.begin_packed(None, fed, spec, self.device)
        want_hidden = want_hidden and self.value_fn is not None
        placeholder = torch.ones((1, 1, 1, 1), dtype=torch.bool, device=self.device)  # masks come from the layout
        mask: Any = {t: placeholder for t in spec.layer_types} if spec.as_dict else placeholder
        last = layout.last.to(self.device)
        if self._packed_configs is None:
            self._packed_configs = attention_configs(self.model)
        with packed_attention(self.model, self._packed_configs):
            out = self.model(
                input_ids=ids.to(self.device),
                attention_mask=mask,
                position_ids=layout.positions().to(self.device),
                **{CACHE_KWARG: cache},
                use_cache=True,
                logits_to_keep=last,
                output_hidden_states=want_hidden,
                packed_rows=layout,
            )
        cache.commit(layout)
        self.model_calls += 1
        return out.logits[0].float(), (out.hidden_states[-1][0, last] if want_hidden else None)

    def _sample(
        self,
        logits: torch.Tensor,
        hidden: torch.Tensor | None,
        warpers: Any,
        score_temperature: float | None,
        generators: list[torch.Generator] | None,
    ) -> tuple[list[int], list[float] | None, list[float] | None]:
        """One token per row of ``logits``; with ``score_temperature``, also their log-probs at that
        temperature and the states' values (``value_fn(hidden)``; None without ``hidden``)."""
        sampled = _sample_next(logits, warpers, generators)
        tokens = [int(t) for t in sampled.tolist()]
        lps = vals = None
        if score_temperature is not None:
            lps = logprobs_from_logits(logits, sampled, score_temperature).tolist()
            if hidden is not None:  # the last hidden state, as PolicyWithValueHead.forward reads it
                vals = self.value_fn(hidden).float().tolist()
        return tokens, lps, vals


def shared_prefix_len(prompts: Sequence[Sequence[int]]) -> int:
    """Length of the longest prefix all ``prompts`` share, at most the shortest one's length minus 1
    (each prompt keeps a token of its own to feed, whose logits start its first turn); 0 for fewer
    than two prompts.

    >>> shared_prefix_len([[1, 2, 3, 4], [1, 2, 5], [1, 2, 3]])
    2
    >>> shared_prefix_len([[7, 8], [7, 8, 9]])
    1
    """
    if len(prompts) < 2:
        return 0
    n = min(len(p) for p in prompts) - 1
    first = prompts[0]
    for p in prompts[1:]:
        k = 0
        while k < n and p[k] == first[k]:
            k += 1
        n = k
    return max(n, 0)


def distinct_rows(prompts: Sequence[Sequence[int]]) -> tuple[list[int], list[int]]:
    """The first row of each distinct prompt (ascending), and for every row the index of its prompt's
    first row in that list: the n samples of a task share their prompt, which is encoded once."""
    first: dict[tuple[int, ...], int] = {}
    computed: list[int] = []
    source: list[int] = []
    for i, p in enumerate(prompts):
        key = tuple(p)
        if key not in first:
            first[key] = len(computed)
            computed.append(i)
        source.append(first[key])
    return computed, source


@dataclass
class TurnStats:
    """Per sampled token of a turn (``run_turns(with_stats=True)``): its log-prob at the sampling
    temperature, and the value of the state it was sampled in (None without a ``value_fn``)."""

    logprobs: list[float]
    values: list[float] | None


# on_turn_end(row, the turn's ids[, TurnStats]) -> (observation ids to feed next, next turn's budget) or
# None (over)
TurnEnd = Callable[..., "tuple[Sequence[int], int] | None"]


def _sampling_warpers(params: SamplingParams) -> Any:
    """transformers' own logits warpers for the sampling ``generate`` does (top_k off)."""
    from transformers.generation.logits_process import (
        LogitsProcessorList,
        TemperatureLogitsWarper,
        TopPLogitsWarper,
    )

    if params.temperature <= 0:
        return None  # greedy
    warpers = LogitsProcessorList()
    if float(params.temperature) != 1.0:
        warpers.append(TemperatureLogitsWarper(float(params.temperature)))
    if float(params.top_p) < 1.0:
        warpers.append(TopPLogitsWarper(float(params.top_p)))
    return warpers


def _sample_next(logits: torch.Tensor, warpers: Any, generators: list[torch.Generator] | None = None) -> torch.Tensor:
    """One token per row from last-position logits (argmax when ``warpers`` is None: temperature 0).

    Inverse-CDF sampling: one uniform draw per row against the cumulative probabilities (the same
    distribution as ``torch.multinomial``, which on CPU draws an exponential per vocabulary entry and
    took ~0.7 ms of a ~6 ms decode step at 16 rows x 2k tokens). ``generators``: one per row."""
    if warpers is None:
        return logits.argmax(dim=-1)
    probs = torch.softmax(warpers(None, logits), dim=-1)
    if generators is None:
        uniform = torch.rand((probs.shape[0], 1), device=probs.device, dtype=probs.dtype)
    else:
        uniform = torch.stack([torch.rand(1, generator=g, device=probs.device, dtype=probs.dtype) for g in generators])
    return inverse_cdf_sample(probs, uniform)


def inverse_cdf_sample(probs: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """Row ``i``'s token: the first whose cumulative probability exceeds ``uniform[i] * total``
    (``uniform`` in [0, 1), shape (rows, 1)); a token with probability 0 is never returned."""
    cdf = probs.cumsum(dim=-1)
    index = torch.searchsorted(cdf, uniform.to(cdf.dtype) * cdf[:, -1:], right=True).squeeze(1)
    # a found index has a chance (its cdf step is > 0); only u * total rounding up to the total finds
    # none (index == vocabulary size): then the last token that has a chance (searched only then)
    if bool((index >= probs.shape[1]).any()):
        last = probs.shape[1] - 1 - (probs > 0).flip(-1).to(torch.int8).argmax(dim=-1)
        index = torch.minimum(index, last)
    return index


@dataclass
class _ReusePlan:
    cache: Any  # the re-laid-out DynamicCache holding the first ``cached`` columns of every row
    cached: int  # columns served from the cache
    width: int  # total columns of the call (cached + encoded)


class _RowCache:
    """The KV cache of one ``generate`` call and, per row, the tokens it holds and where.

    ``known[i]``: the row's real tokens (prompt + kept generation); ``slots[i]``: the cache column of
    each of them that is in the cache (the last sampled token never is: generate does not feed it).
    """

    def __init__(self, cache: Any, known: list[list[int]], slots: list[list[int]]):
        self.cache, self.known, self.slots = cache, known, slots

    @classmethod
    def after_generate(
        cls, cache: Any, prompts: list[list[int]], results: list[list[int]], width: int
    ) -> _RowCache | None:
        from transformers.cache_utils import DynamicLayer

        layers = getattr(cache, "layers", None)
        if not layers or any(type(layer) is not DynamicLayer or not layer.is_initialized for layer in layers):
            return None  # sliding-window, quantised or offloaded caches: no reuse
        length = cache.get_seq_length()
        known, slots = [], []
        for p, r in zip(prompts, results):
            kept = r[: max(0, min(len(r), length - width))]
            known.append(p + r)
            slots.append(list(range(width - len(p), width)) + list(range(width, width + len(kept))))
        return cls(cache, known, slots)

    def plan(self, prompts: list[list[int]]) -> _ReusePlan | None:
        """Lay the cached tokens of each new prompt's earlier row out for this call, or None when no
        prompt continues a cached row."""
        rows: list[int | None] = []
        start = 0
        for p in prompts:  # the engine keeps its episodes' order: search forward from the last match
            found = None
            for r in list(range(start, len(self.known))) + list(range(start)):
                k = self.known[r]
                if len(k) <= len(p) and p[: len(k)] == k:
                    found = r
                    break
            rows.append(found)
            if found is not None:
                start = found + 1
        avail = [len(self.slots[r]) if r is not None else 0 for r in rows]
        if not any(avail):
            return None
        new = [len(p) - a for p, a in zip(prompts, avail)]
        encoded = max(1, max(new))  # every row gets this many encoded columns
        reuse = [max(0, min(a, len(p) - encoded)) for p, a in zip(prompts, avail)]
        cached = max(reuse)
        if cached == 0:
            return None
        # gather index per (row, column): left padding (any slot; masked) then the reused slots
        index = torch.zeros((len(prompts), cached), dtype=torch.long)
        source = torch.zeros(len(prompts), dtype=torch.long)
        for i, (r, k) in enumerate(zip(rows, reuse)):
            if r is not None and k:
                source[i] = r
                index[i, cached - k :] = torch.tensor(self.slots[r][:k], dtype=torch.long)
        relayout_cache(self.cache, source, index)
        return _ReusePlan(self.cache, cached, cached + encoded)


def relayout_cache(cache: Any, source: torch.Tensor, index: torch.Tensor) -> None:
    """Rebuild every layer of a DynamicCache in place: new row ``i`` column ``j`` is old row
    ``source[i]`` column ``index[i, j]`` (how rows are dropped, re-ordered and their holes closed)."""
    for layer in cache.layers:
        idx = index.to(layer.keys.device)
        src = source.to(layer.keys.device)[:, None]
        # (rows, columns, heads, dim) -> (rows, heads, columns, dim)
        layer.keys = layer.keys[src, :, idx].permute(0, 2, 1, 3).contiguous()
        layer.values = layer.values[src, :, idx].permute(0, 2, 1, 3).contiguous()


def rollout_records_stats(mode: str, backend: Any, engine: Any, policy: torch.nn.Module) -> bool:
    """Whether PPO's old log-probs (and a shared critic's values) are recorded while sampling (run
    config ``rollout_stats``: ``rollout``, ``recompute``, or ``auto`` = recorded when the hf backend
    decodes continuously with a float32 policy)."""
    if mode == "recompute" or not isinstance(backend, HFBackend) or not engine.continuous:
        return False
    return mode == "rollout" or next(policy.parameters()).dtype == torch.float32
