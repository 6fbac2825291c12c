"""The KV cache of continuous multi-turn decoding (``HFBackend.run_turns``): no padding, no copies.

Each row (one episode) keeps its tokens at columns ``0 .. length-1`` of one preallocated buffer per
layer, in order, so a token's column is its position. A model call feeds some rows a block of new
tokens (one sampled token each, or a sampled token plus an observation); each row's tokens are
written at its own next columns, in place. Why not transformers' ``DynamicCache``: it grows by
``torch.cat`` on every call, copying the whole cache per decoded token (over half of a decode
step's time at 16 rows x 600 columns on the tiny model), and its columns are shared by all rows, so
a call that encodes one row's observation had to pad every other row by the observation's width.

The attention masks are built here, not by the model (a custom 4-D mask, or one per layer type for
models that mix full and sliding-window layers, which transformers' models accept as they are):
a query at column ``q`` of row ``r`` sees that row's columns ``0..q`` (``q-window+1..q`` in a
sliding-window layer). The block is right-aligned, as the model reads the last position's logits;
the padding in front of a row's shorter block is written to the columns right after its tokens
(overwritten by its next tokens, never seen by them) and attends to itself only, so every value
in the buffer is finite and a masked column can never turn a softmax into NaN.

On CPU the buffers' storage is kept between rollouts (:class:`KVBufferPool`, owned by the backend):
torch's CPU allocator caches nothing, so a fresh multi-megabyte buffer comes from the OS and every
page of it faults on first touch (BENCHMARKS.md has the profile). A reused buffer is not cleared: its unwritten columns hold an earlier rollout's keys
and values, finite numbers that the masks hide as they hide padding.

A call where some rows encode an observation and the others decode one token is PACKED
(:meth:`RowKVCache.begin_packed`): the rows' tokens go one after another in a single sequence, so
no row is padded to another's width; every token's keys and values are written first, and the
attention (the model's own sdpa or eager kernel, reached through transformers' ``AttentionInterface``
while the call runs) is computed in two groups: each row's last token (width 1, the decode step)
and the other observation tokens. Saves a model call per observation, with no padding.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.cache_utils import Cache, CacheLayerMixin
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

SUPPORTED_ATTENTION = ("sdpa", "eager")
SUPPORTED_LAYER_TYPES = ("full_attention", "sliding_attention")


@dataclass(frozen=True)
class MaskSpec:
    """How a model takes the masks this cache builds (from its config; :func:`mask_spec`)."""

    layer_types: tuple[str, ...]  # the distinct layer types (full_attention, sliding_attention)
    sliding_window: int | None  # tokens a sliding-window layer sees (itself included)
    additive_dtype: torch.dtype | None  # masks as additive floats of this dtype (None: bool masks)
    as_dict: bool  # pass {layer type: mask} (a model with layer_types, not all full) instead of one 4-D tensor
    layer_kinds: tuple[str, ...] = ()  # the type of each layer, by layer index (packed calls pick its mask)
    attention: str = "sdpa"  # the model's own attention kernel (sdpa or eager), which packed calls run per group
    packable: bool = False  # the model dispatches attention through transformers' AttentionInterface


def mask_spec(model: torch.nn.Module) -> MaskSpec | str:
    """The model's :class:`MaskSpec`, or why this cache cannot serve it (another attention kernel, or
    layers that are neither full nor sliding-window attention)."""
    config = model.config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    impl = getattr(config, "_attn_implementation", None) or "eager"
    if impl not in SUPPORTED_ATTENTION:
        return f"attention implementation {impl!r} (supported: {', '.join(SUPPORTED_ATTENTION)})"
    window = getattr(text, "sliding_window", None)
    types = getattr(text, "layer_types", None)
    if types is None:  # one kind of layer: sliding-window in every layer when the config names a window (Mistral)
        distinct: tuple[str, ...] = ("sliding_attention",) if window else ("full_attention",)
        as_dict = False
    else:
        distinct = tuple(sorted(set(types)))
        unknown = [t for t in distinct if t not in SUPPORTED_LAYER_TYPES]
        if unknown:
            return f"layer types {unknown} (supported: {', '.join(SUPPORTED_LAYER_TYPES)})"
        as_dict = distinct != ("full_attention",)
    if "sliding_attention" in distinct and not window:
        return "sliding_attention layers without a sliding_window"
    # additive float masks for sdpa too: given a bool mask, sdpa converts it to a float one in every
    # layer; this one is built once per call
    dtype = next(model.parameters()).dtype
    n_layers = int(getattr(text, "num_hidden_layers", 0) or 0)
    kinds = tuple(types) if types is not None else (distinct[0],) * n_layers
    packable = bool(attention_configs(model)) and bool(
        getattr(_base_model(model), "_supports_attention_backend", False)
    )
    return MaskSpec(distinct, int(window) if window else None, dtype, as_dict, kinds, impl, packable)


def _base_model(model: torch.nn.Module) -> Any:
    """The transformers model under wrappers (peft's get_base_model, a value head's ``policy``)."""
    for _ in range(8):  # a few layers of wrapping at most
        if hasattr(model, "get_base_model"):
            model = model.get_base_model()
        elif isinstance(getattr(model, "policy", None), torch.nn.Module):
            model = model.policy
        else:
            break
    return model


def attention_configs(model: torch.nn.Module) -> list[Any]:
    """The configs the attention modules read their kernel from (one for a text model)."""
    found: dict[int, Any] = {}
    for m in model.modules():
        cfg = getattr(m, "config", None)
        if hasattr(m, "layer_idx") and cfg is not None and hasattr(cfg, "_attn_implementation_internal"):
            found[id(cfg)] = cfg
    return list(found.values())


@dataclass
class CallLayout:
    """Where one model call's block goes: ``rows`` (cache rows called, None: all), ``columns`` (n, w)
    the cache column of every block position, ``real`` (n, w) which positions are tokens (not
    padding), ``fed`` tokens per row, ``kv_len`` the columns the attention reads, ``span`` the rows
    as a slice when they are neighbours (the attention then reads a view, not a gathered copy)."""

    rows: torch.Tensor | None
    columns: torch.Tensor
    real: torch.Tensor
    fed: torch.Tensor
    kv_len: int
    span: slice | None
    on_device: dict[Any, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)

    def index(self, n_rows: int, device: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """(rows as a column vector, columns) on ``device``, made once per call."""
        if device not in self.on_device:
            rows = torch.arange(n_rows) if self.rows is None else self.rows
            self.on_device[device] = (rows.to(device)[:, None], self.columns.to(device))
        return self.on_device[device]


@dataclass
class _QueryGroup:
    """One attention call inside a packed call: queries ``query`` (n, w) (indices into the packed
    sequence; ``real`` marks tokens, the rest are padding whose output is dropped) at the cache
    rows and columns of ``layout``, with its ``masks`` by layer type."""

    query: torch.Tensor
    real: torch.Tensor
    layout: CallLayout
    masks: dict[str, torch.Tensor]
    folded: dict[tuple[str, int], torch.Tensor] = field(default_factory=dict)  # see _grouped_sdpa
    # made once per call, used by every layer: the packed positions of the real queries, and where they
    # sit among the group's n * w outputs (None: all of them, no padding)
    dest: torch.Tensor = field(init=False)
    pick: torch.Tensor | None = field(init=False)

    def __post_init__(self) -> None:
        self.dest = self.query[self.real]
        self.pick = None if bool(self.real.all()) else self.real.flatten().nonzero()[:, 0]


@dataclass
class PackedLayout:
    """A packed call: the rows' new tokens one after another in a single sequence (1, T), so a row
    encoding an observation and rows decoding one token share a model call without padding each
    other. Every token's keys and values are written first (``token_rows``, ``token_columns``);
    attention then runs in two groups with the model's own kernel: every row's LAST token (width 1,
    all rows: the decode step, over a view of the cache) and the other tokens of rows fed more than
    one (their observation, right-aligned in a block as wide as the longest). ``last`` (n,): where
    each row's last token sits in the packed sequence (its logits are the call's output)."""

    rows: torch.Tensor | None
    fed: torch.Tensor
    token_rows: torch.Tensor
    token_columns: torch.Tensor
    last: torch.Tensor
    groups: list[_QueryGroup]
    kv_len: int
    spec: MaskSpec

    def positions(self) -> torch.Tensor:
        """Position ids (1, T): a token's column."""
        return self.token_columns[None, :]


PACKED_ATTENTION = "eau_packed_rows"  # the attention implementation packed calls switch the model to


def packed_rows_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Any,
    packed_rows: PackedLayout | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention of a packed call (registered with transformers as :data:`PACKED_ATTENTION`): ``query``
    (1, heads, T, dim); ``key``/``value`` are the layer's whole buffers (rows, kv heads, capacity,
    dim), already holding the call's tokens. Each query group runs the model's own kernel (sdpa or
    eager) on its rows; the outputs go back to their packed positions, (1, T, heads, dim)."""
    lay = packed_rows
    if lay is None:
        raise RuntimeError(f"attention {PACKED_ATTENTION!r} runs inside RowKVCache packed calls only")
    kind = lay.spec.layer_kinds[module.layer_idx]
    base = _kernel(module, lay.spec.attention)
    q = query[0]  # (heads, T, dim)
    # every packed token is a real query of exactly one group (a row's last token, or one of the others)
    out = query.new_empty((q.shape[1], q.shape[0], q.shape[2]))
    for g in lay.groups:
        gl = g.layout
        if gl.span is not None:
            k, v = key[gl.span, :, : gl.kv_len], value[gl.span, :, : gl.kv_len]
        else:
            rows = gl.index(key.shape[0], key.device)[0][:, 0]
            k, v = key[rows, :, : gl.kv_len], value[rows, :, : gl.kv_len]
        qg = q[:, g.query].permute(1, 0, 2, 3)  # (heads, n, w, dim) -> (n, heads, w, dim)
        if lay.spec.attention == "sdpa" and _grouped_sdpa_applies(module, qg, kwargs):
            o = _grouped_sdpa(module, qg, k, v, g, kind, kwargs)
        else:
            o, _ = base(module, qg, k, v, g.masks[kind], **kwargs)  # (n, w, heads, dim)
        o = o.reshape(-1, o.shape[2], o.shape[3])  # (n * w, heads, dim)
        out.index_copy_(0, g.dest, o if g.pick is None else o.index_select(0, g.pick))
    return out[None], None


def _grouped_sdpa_applies(module: torch.nn.Module, query: torch.Tensor, kwargs: dict[str, Any]) -> bool:
    """Several queries per row on a grouped-query model, with nothing but a mask and a scale: there
    transformers' sdpa path copies every key and value head ``num_key_value_groups`` times
    (``repeat_kv``) where :func:`_grouped_sdpa` copies nothing."""
    return (
        query.shape[2] > 1
        and getattr(module, "num_key_value_groups", 1) > 1
        and not kwargs.get("dropout")
        and kwargs.get("softcap") is None
        and kwargs.get("position_bias") is None
        and not kwargs.get("output_attentions")
    )


def _grouped_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    group: _QueryGroup,
    kind: str,
    kwargs: dict[str, Any],
) -> torch.Tensor:
    """sdpa with the query heads that share a key/value head folded into the query axis: query (n,
    heads, w, dim) -> (n, kv heads, groups * w, dim), each query row keeping its mask row (the mask
    tiled ``groups`` times, once per group and layer kind). Same result as repeating the keys and
    values per query head (query head ``h`` reads kv head ``h // groups``, as ``repeat_kv`` lays them
    out). Returns (n, w, heads, dim), as transformers' kernels do."""
    n, heads, w, dim = query.shape
    groups = int(module.num_key_value_groups)
    mask = group.folded.get((kind, groups))
    if mask is None:
        mask = group.folded[(kind, groups)] = group.masks[kind].repeat(1, 1, groups, 1)
    o = torch.nn.functional.scaled_dot_product_attention(
        query.reshape(n, heads // groups, groups * w, dim), key, value, attn_mask=mask, scale=kwargs.get("scaling")
    )
    return o.reshape(n, heads, w, dim).transpose(1, 2)


def _kernel(module: torch.nn.Module, name: str) -> Callable[..., Any]:
    """The attention function ``name`` as the module's model would call it (eager: its own module's)."""
    if name == "eager":
        fn = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
        if fn is None:
            raise RuntimeError(f"{type(module).__name__}: no eager_attention_forward in its module")
        return fn
    return ALL_ATTENTION_FUNCTIONS[name]


AttentionInterface.register(PACKED_ATTENTION, packed_rows_attention)


@contextmanager
def packed_attention(model: torch.nn.Module, configs: list[Any] | None = None) -> Iterator[None]:
    """Run the model's attention through :func:`packed_rows_attention` inside the block (its configs'
    kernel switched and restored after, also on error). ``configs``: the model's
    :func:`attention_configs`, when the caller keeps them (finding them walks every module)."""
    configs = attention_configs(model) if configs is None else configs
    saved = [c._attn_implementation_internal for c in configs]
    for c in configs:
        c._attn_implementation_internal = PACKED_ATTENTION
    try:
        yield
    finally:
        for c, impl in zip(configs, saved):
            c._attn_implementation_internal = impl


class KVBufferPool:
    """Flat storage for :class:`RowKVCache` buffers, reused across caches (rollouts) up to ``max_bytes``.

    ``take`` returns the largest pooled tensor of the dtype and device that holds ``numel`` elements
    (its contents are an earlier cache's finite keys and values), else a new zero-filled one: the
    largest, so that a cache like the last one does not grow (each growth copies the buffer); ``give``
    returns storage and frees the smallest pooled tensors while the pool holds more than
    ``max_bytes``. Only for devices without a caching allocator (CPU): on CUDA torch already reuses
    freed memory, and pooled buffers would stay reserved through the update."""

    def __init__(self, max_bytes: int):
        if max_bytes < 0:
            raise ValueError(f"KVBufferPool max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes = int(max_bytes)
        self._free: list[torch.Tensor] = []

    @property
    def bytes(self) -> int:
        """Bytes the pool holds now (buffers handed out are not counted)."""
        return sum(t.numel() * t.element_size() for t in self._free)

    def take(self, numel: int, dtype: torch.dtype, device: Any) -> torch.Tensor:
        fits = [t for t in self._free if t.dtype == dtype and t.device == torch.device(device) and t.numel() >= numel]
        if not fits:
            return torch.zeros(numel, dtype=dtype, device=device)
        best = max(fits, key=lambda t: t.numel())
        self._free = [t for t in self._free if t is not best]
        return best

    def give(self, flat: torch.Tensor) -> None:
        self._free.append(flat)
        self._free.sort(key=lambda t: t.numel(), reverse=True)
        while self._free and self.bytes > self.max_bytes:
            self._free.pop()  # the smallest: large buffers serve any later request

    def clear(self) -> None:
        self._free = []


class _RowLayer(CacheLayerMixin):
    """One layer's keys and values, (rows, kv heads, capacity, head dim); written by :class:`RowKVCache`.
    ``flat``: the 1-D storage under each buffer (what goes back to a :class:`KVBufferPool`)."""

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self.is_initialized = True
        self.flat: dict[str, torch.Tensor] = {}

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        raise RuntimeError("a _RowLayer is written by RowKVCache.update")

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        raise RuntimeError("RowKVCache builds its own attention masks")

    def get_seq_length(self) -> int:
        """The buffer's capacity in columns (the rows' own lengths are :attr:`RowKVCache.lengths`)."""
        return 0 if self.keys is None else int(self.keys.shape[2])

    def get_max_length(self) -> int:
        return -1


class RowKVCache(Cache):
    """Per-row contiguous KV cache (see the module docstring). Use: ``layout = cache.begin(rows, fed,
    width)``; call the model with ``attention_mask=cache.attention_mask(layout, spec)``,
    ``position_ids=cache.positions(layout)`` and ``cache=cache``; then ``cache.commit(layout)``.
    ``keep(rows)`` drops the other rows (finished episodes) and says where the kept ones are.
    ``pool``: where buffers come from and, at :meth:`release`, go back to (None: fresh zeroed buffers)."""

    def __init__(self, rows: int, pool: KVBufferPool | None = None):
        super().__init__(layers=[])
        self.lengths = torch.zeros(rows, dtype=torch.long)  # tokens of each row in the cache
        self.pool = pool
        self._layout: CallLayout | None = None
        self._packed: PackedLayout | None = None

    # --- one call ---------------------------------------------------------------------------------
    def begin(self, rows: list[int] | None, fed: list[int], width: int) -> CallLayout:
        """Lay out a call feeding ``fed[j]`` tokens (right-aligned in a block of ``width``) to cache row
        ``rows[j]`` (all rows in order when None)."""
        self._layout = self._block(rows, fed, width, self.lengths)
        self._packed = None
        return self._layout

    def _block(self, rows: list[int] | None, fed: list[int], width: int, lengths: torch.Tensor) -> CallLayout:
        """The layout of ``fed[j]`` tokens right-aligned in a block of ``width`` for row ``rows[j]``,
        the rows holding ``lengths`` tokens before the block."""
        if rows is not None and (not rows or any(b <= a for a, b in zip(rows, rows[1:]))):
            raise ValueError(f"rows of a call must be distinct and ascending, got {rows}")
        index = None if rows is None else torch.tensor(rows, dtype=torch.long)
        start = lengths if index is None else lengths[index]
        k = torch.tensor(fed, dtype=torch.long)
        if k.shape[0] != start.shape[0] or bool((k < 1).any()) or bool((k > width).any()):
            raise ValueError(f"fed {fed} does not fit rows {rows} with a block of width {width}")
        p = torch.arange(width)
        # real tokens at their row's next columns; padding right after them (overwritten later)
        offset = (p[None, :] - (width - k)[:, None]) % width
        columns = start[:, None] + offset
        real = p[None, :] >= (width - k)[:, None]
        if rows is None:
            span: slice | None = slice(0, int(lengths.shape[0]))
        else:
            span = slice(rows[0], rows[-1] + 1) if rows[-1] - rows[0] == len(rows) - 1 else None
        return CallLayout(index, columns, real, k, int((start + width).max()), span)

    def begin_packed(self, rows: list[int] | None, fed: list[int], spec: MaskSpec, device: Any = "cpu") -> PackedLayout:
        """Lay out a packed call (see :class:`PackedLayout`) feeding ``fed[j]`` tokens to cache row
        ``rows[j]`` (all rows in order when None); the tokens go in that order, row by row. Call the
        model on the packed ids (1, T) inside :func:`packed_attention` with ``packed_rows=layout``,
        ``position_ids=layout.positions()``, ``logits_to_keep=layout.last`` and ``cache=cache``;
        then ``commit(layout)``."""
        whole = self._block(rows, [1] * len(fed), 1, self.lengths)  # checks the rows; the last tokens' group
        index = whole.rows
        start = self.lengths if index is None else self.lengths[index]
        k = torch.tensor(fed, dtype=torch.long)
        if k.shape[0] != start.shape[0] or bool((k < 1).any()):
            raise ValueError(f"fed {fed} does not fit rows {rows}: one count >= 1 per row")
        first = torch.cumsum(k, 0) - k  # where each row's tokens begin in the packed sequence
        token_rows = torch.repeat_interleave(torch.arange(k.shape[0]) if index is None else index, k)
        # a token's column: its row's length plus its place among the row's tokens
        token_columns = torch.arange(int(k.sum())) + torch.repeat_interleave(start - first, k)
        last = first + k - 1
        # every row's last token: width 1 at its column, the cache rows as they are (a view for all rows)
        lay_last = CallLayout(
            index,
            (start + k - 1)[:, None],
            torch.ones((k.shape[0], 1), dtype=torch.bool),
            k,
            int((start + k).max()),
            whole.span,
        )
        groups = [self._group(last[:, None], lay_last.real, lay_last, spec, device)]
        more = [j for j, n in enumerate(fed) if n > 1]
        if more:  # the other tokens of rows fed several (observations), right-aligned in one block
            sub = more if index is None else [rows[j] for j in more]
            rest = [fed[j] - 1 for j in more]
            width = max(rest)
            lay_rest = self._block(sub, rest, width, self.lengths)
            p = torch.arange(width)
            pad = torch.tensor([width - r for r in rest])
            base = first[torch.tensor(more)]
            query = torch.where(lay_rest.real, base[:, None] + p[None, :] - pad[:, None], base[:, None])
            groups.append(self._group(query, lay_rest.real, lay_rest, spec, device))
        kv_len = max(g.layout.kv_len for g in groups)
        self._packed = PackedLayout(index, k, token_rows, token_columns, last, groups, kv_len, spec)
        self._layout = None
        return self._packed

    def _group(
        self, query: torch.Tensor, real: torch.Tensor, layout: CallLayout, spec: MaskSpec, device: Any
    ) -> _QueryGroup:
        masks = self.attention_mask(layout, spec)
        if not isinstance(masks, dict):
            masks = {spec.layer_types[0]: masks}
        return _QueryGroup(query.to(device), real.to(device), layout, {t: m.to(device) for t, m in masks.items()})

    def positions(self, layout: CallLayout) -> torch.Tensor:
        """Position ids of the block: a token's column (padding gets its own, harmlessly)."""
        return layout.columns

    def attention_mask(self, layout: CallLayout, spec: MaskSpec) -> Any:
        """The call's masks, shaped as the model takes them (see :class:`MaskSpec`)."""
        cols = torch.arange(layout.kv_len)[None, None, :]
        q = layout.columns[:, :, None]
        own = cols == q
        causal = torch.where(layout.real[:, :, None], cols <= q, own)
        masks: dict[str, torch.Tensor] = {}
        for kind in spec.layer_types:
            m = causal if kind == "full_attention" else causal & (cols > q - int(spec.sliding_window or 0))
            m = m[:, None]  # (n, 1, w, kv_len)
            if spec.additive_dtype is not None:
                m = torch.zeros(m.shape, dtype=spec.additive_dtype).masked_fill(
                    ~m, torch.finfo(spec.additive_dtype).min
                )
            masks[kind] = m
        return masks if spec.as_dict else masks[spec.layer_types[0]]

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the call's keys and values at their columns; return the called rows' first kv_len columns."""
        lay = self._layout
        if lay is None and self._packed is None:
            raise RuntimeError("RowKVCache.update outside a call: begin() or begin_packed() first")
        while len(self.layers) <= layer_idx:
            self.layers.append(_RowLayer())
        layer = self.layers[layer_idx]
        if not layer.is_initialized:
            layer.lazy_initialization(key_states, value_states)
        if lay is None:  # packed: every token at its row and column; the attention reads the buffers
            packed = self._packed
            for name, new in (("keys", key_states), ("values", value_states)):
                buf = self._reserve(layer, name, new, packed.kv_len)
                buf[packed.token_rows.to(buf.device), :, packed.token_columns.to(buf.device)] = (
                    new[0].transpose(0, 1).to(buf.dtype)
                )  # (kv heads, T, dim) -> (T, kv heads, dim)
            return layer.keys, layer.values
        for name, new in (("keys", key_states), ("values", value_states)):
            buf = self._reserve(layer, name, new, lay.kv_len)
            rows, columns = lay.index(buf.shape[0], buf.device)
            # (n, heads, w, dim) -> (n, w, heads, dim), the layout of buf[rows, :, columns]
            buf[rows, :, columns] = new.transpose(1, 2).to(buf.dtype)
        if lay.span is not None:  # all rows, or neighbours (often one row): a view, nothing copied
            return layer.keys[lay.span, :, : lay.kv_len], layer.values[lay.span, :, : lay.kv_len]
        rows = lay.index(layer.keys.shape[0], layer.keys.device)[0][:, 0]
        return layer.keys[rows, :, : lay.kv_len], layer.values[rows, :, : lay.kv_len]

    def commit(self, layout: CallLayout | PackedLayout) -> None:
        """The call ran: its rows hold their fed tokens."""
        if layout.rows is None:
            self.lengths += layout.fed
        else:
            self.lengths[layout.rows] += layout.fed
        self._layout = None
        self._packed = None

    def _reserve(self, layer: _RowLayer, name: str, new: torch.Tensor, needed: int) -> torch.Tensor:
        """The layer's buffer, grown (doubling) to at least ``needed`` columns; unwritten columns hold
        zeros or (from the pool) an earlier cache's finite keys and values."""
        buf = getattr(layer, name)
        if buf is None or buf.shape[2] < needed:
            rows, heads, dim = int(self.lengths.shape[0]), int(new.shape[1]), int(new.shape[3])
            capacity = max(needed, 2 * (0 if buf is None else buf.shape[2]), 64)
            if self.pool is None:
                flat = torch.zeros(rows * heads * capacity * dim, dtype=new.dtype, device=new.device)
            else:
                flat = self.pool.take(rows * heads * capacity * dim, new.dtype, new.device)
                capacity = flat.numel() // (rows * heads * dim)  # a pooled tensor may hold more
            grown = flat[: rows * heads * capacity * dim].view(rows, heads, capacity, dim)
            if buf is not None:
                grown[: buf.shape[0], :, : buf.shape[2]] = buf
                self._give(layer.flat.get(name))
            layer.flat[name] = flat
            setattr(layer, name, grown)
            buf = grown
        return buf

    def _give(self, flat: torch.Tensor | None) -> None:
        if self.pool is not None and flat is not None:
            self.pool.give(flat)

    def release(self) -> None:
        """Hand the buffers back to the pool (the cache is unusable after); without a pool, drop them."""
        for layer in self.layers:
            for name in ("keys", "values"):
                self._give(getattr(layer, "flat", {}).pop(name, None))
                setattr(layer, name, None)
        self.layers = []

    # --- rows -------------------------------------------------------------------------------------
    def copy_rows(self, sources: list[int], rows: list[int]) -> None:
        """Row ``rows[j]`` becomes a copy of row ``sources[j]`` (its tokens, keys and values): a prompt
        shared by several episodes is encoded once. A row that is its own source is left as it is."""
        if len(sources) != len(rows):
            raise ValueError(f"one source per row: {len(sources)} sources for {len(rows)} rows")
        pairs = [(s, r) for s, r in zip(sources, rows) if s != r]
        if not pairs:
            return
        src = torch.tensor([s for s, _ in pairs], dtype=torch.long)
        dst = torch.tensor([r for _, r in pairs], dtype=torch.long)
        used = int(self.lengths[src].max())
        for layer in self.layers:
            for name in ("keys", "values"):
                buf = getattr(layer, name)
                if buf is not None:
                    buf[dst.to(buf.device), :, :used] = buf[src.to(buf.device), :, :used]
        self.lengths[dst] = self.lengths[src]

    def keep(self, rows: list[int]) -> list[int]:
        """Keep only cache rows ``rows`` (the others' episodes are over) and return the new row order:
        new row ``j`` holds old row ``order[j]``. The fewest rows move: each kept row past the new last
        row fills a freed row before it, the others stay where they are (moving every row after the
        first freed one copied most of the cache each time an episode ended). The buffers stay
        allocated (a view of their first rows)."""
        n = len(rows)
        kept = set(int(r) for r in rows)
        total = int(self.lengths.shape[0])
        if len(kept) != n or any(r < 0 or r >= total for r in kept):
            raise ValueError(f"rows to keep must be distinct rows of the {total} in the cache, got {rows}")
        holes = [i for i in range(n) if i not in kept]
        movers = sorted(r for r in kept if r >= n)
        order = list(range(n))
        for h, m in zip(holes, movers):
            order[h] = m
        dst, src = torch.tensor(holes, dtype=torch.long), torch.tensor(movers, dtype=torch.long)
        used = int(self.lengths[src].max()) if movers else 0
        for layer in self.layers:
            for name in ("keys", "values"):
                buf = getattr(layer, name)
                if buf is None:
                    continue
                if movers:
                    buf[dst.to(buf.device), :, :used] = buf[src.to(buf.device), :, :used]
                setattr(layer, name, buf[:n])
        self.lengths = self.lengths[torch.tensor(order, dtype=torch.long)]
        return order

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """The longest row (models ask only when given no position ids; this cache always gives them)."""
        return int(self.lengths.max()) if self.lengths.numel() else 0
