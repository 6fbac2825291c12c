"""Typed specs for the parts of a run config that have parts of their own: the policy, the critic,
the generation backend, the LLM user, the warm start and the held-out evaluation.

Every field is documented where it is defined (``metadata["help"]``, as TRL's configs do); ``eau
train --help`` lists them from there (:func:`field_docs`). Specs are built from plain mappings (a
preset, ``--config``, ``--set policy.lora.r=16``, a frozen ``config.yaml``) by :func:`from_mapping`,
which rejects unknown keys and wrong types naming the dotted key and what is allowed, then runs the
spec's own ``check``. No torch here: the CLI validates a config before any model is imported.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, TypeVar, Union

# names only (harness.ppo.packaged has the files; tests keep the two in step)
PACKAGED_MODELS = ("smollm2-135m", "gemma3-270m")
DTYPE_NAMES = ("float32", "bfloat16", "float16", "auto")
USER_LLM_KINDS = ("openai", "vllm", "transformers", "gemma3_270m")
# special tokens of the tiny model's tokenizer: pad, bos, eos, start and end of turn
TINY_SPECIAL_TOKENS = 5

S = TypeVar("S")


def doc(default: Any = dataclasses.MISSING, *, help: str, factory: Any = dataclasses.MISSING) -> Any:
    """A dataclass field with its documentation (``default`` or ``factory``)."""
    return field(default=default, default_factory=factory, metadata={"help": help})


# ----------------------------------------------------------------------------------------------------
# building specs from mappings, with types checked from the annotations
# ----------------------------------------------------------------------------------------------------


def _type_name(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args)
    if tp is type(None):
        return "null"
    if origin in (list, tuple):
        return "a list of " + {int: "integers", float: "numbers", str: "strings"}.get(args[0], _type_name(args[0]))
    if origin is dict or tp is dict:
        return "a mapping"
    if dataclasses.is_dataclass(tp):
        return f"a mapping of {', '.join(f.name for f in dataclasses.fields(tp))}"
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(tp, str(tp))


def _convert(value: Any, tp: Any, where: str) -> Any:
    """``value`` as type ``tp`` (nested specs built, lists of strings made tuples where declared), or
    ValueError naming ``where``. Numbers must be finite; an integer field refuses 2.5 and true."""
    if tp is Any:
        return value
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:  # X | None: X's own message (it names the nested key at fault)
            return _convert(value, options[0], where)
        for arg in options:
            try:
                return _convert(value, arg, where)
            except ValueError:
                continue
        raise ValueError(f"{where} must be {_type_name(tp)}; got {show(value)}") from None
    if tp is type(None):
        if value is None:
            return None
    elif dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if isinstance(value, Mapping):
            return from_mapping(tp, value, where)
    elif origin in (list, tuple) and isinstance(value, (list, tuple)):
        items = [_convert(v, args[0], f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    elif (origin is dict or tp is dict) and isinstance(value, Mapping):
        if not all(isinstance(k, str) for k in value):
            raise ValueError(f"{where}: keys must be strings; got {show(sorted(map(repr, value)))}")
        return dict(value)
    elif tp is bool and isinstance(value, bool):
        return value
    elif tp is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    elif tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ValueError(f"{where} must be a finite number; got {value!r}")
        return value
    elif tp is str and isinstance(value, str):
        return value
    raise ValueError(f"{where} must be {_type_name(tp)}; got {show(value)}")


def from_mapping(cls: type[S], data: Mapping[str, Any], where: str) -> S:
    """Build spec ``cls`` from ``data``: unknown keys, wrong types and failed checks raise ValueError
    naming the dotted key (``policy.lora.r``) and what is allowed."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{where} must be {_type_name(cls)}; got {show(data)}")
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    unknown = sorted(set(map(str, data)) - set(names))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(names)}")
    hints = typing.get_type_hints(cls)
    values = {k: _convert(v, hints[k], f"{where}.{k}" if where else k) for k, v in data.items()}
    spec = cls(**values)
    check = getattr(spec, "check", None)
    if check is not None:
        check(where)
    return spec


def to_plain(spec: Any) -> Any:
    """A spec (or a value holding specs) as plain YAML-safe data: mappings, lists, scalars."""
    if dataclasses.is_dataclass(spec) and not isinstance(spec, type):
        return {f.name: to_plain(getattr(spec, f.name)) for f in dataclasses.fields(spec)}
    if isinstance(spec, (list, tuple)):
        return [to_plain(v) for v in spec]
    if isinstance(spec, dict):
        return {k: to_plain(v) for k, v in spec.items()}
    return spec


def field_docs(cls: type, prefix: str = "") -> list[tuple[str, str, str]]:
    """``(dotted key, default, help)`` for every field of ``cls``, nested specs expanded."""
    rows: list[tuple[str, str, str]] = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key = prefix + f.name
        default = (
            f.default
            if f.default is not dataclasses.MISSING
            else (f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        )
        nested = [a for a in (hints[f.name], *typing.get_args(hints[f.name])) if dataclasses.is_dataclass(a)]
        if nested:
            rows.append((key, "null" if default is None else "", f.metadata.get("help", "")))
            rows.extend(field_docs(nested[0], key + "."))
        else:
            rows.append((key, json.dumps(to_plain(default)), f.metadata.get("help", "")))
    return rows


def show(value: Any, limit: int = 80) -> str:
    """A value for a message: bounded, and safe for an integer too long for ``str``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}" if abs(value) < 10**30 else f"an integer of {value.bit_length()} bits"
    try:
        text = repr(value)
    except (ValueError, RecursionError):
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_range(name: str, value: Any, low: float, high: float) -> None:
    """ValueError unless ``low <= value <= high`` (a sane-size limit: the message gives it)."""
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {show(low)} and {show(high)}, got {show(value)}")


def _positive_int(value: Any, where: str) -> None:
    if value < 1:
        raise ValueError(f"{where} must be a positive integer; got {value!r}")


# ----------------------------------------------------------------------------------------------------
# the specs
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoraSpec:
    """LoRA adapters (peft) on a model; only the adapters (and a value head) are trained."""

    r: int = doc(16, help="adapter rank")
    alpha: float = doc(32.0, help="scaling numerator: adapters are scaled by alpha / r")
    dropout: float = doc(0.0, help="adapter dropout; 0 keeps rollout and update log-probs identical")
    target_modules: str | tuple[str, ...] = doc(
        "all-linear", help="module names, or all-linear (every linear layer but the LM head)"
    )
    top_layers: int | None = doc(
        None,
        help="adapters only in the last N transformer layers (null: every layer); backpropagation then "
        "stops below them and the frozen layers' output is computed once per batch",
    )

    def check(self, where: str = "lora") -> None:
        _positive_int(self.r, f"{where}.r")
        if self.alpha <= 0:
            raise ValueError(f"{where}.alpha must be > 0; got {self.alpha!r}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"{where}.dropout must be in [0, 1); got {self.dropout!r}")
        if not self.target_modules:
            raise ValueError(f"{where}.target_modules must be 'all-linear' or a non-empty list of module names")
        if self.top_layers is not None:
            _positive_int(self.top_layers, f"{where}.top_layers")


@dataclass(frozen=True)
class TinySpec:
    """Architecture of the tiny model built from a config (about 1M parameters with the defaults:
    several PPO steps a minute on two CPU cores)."""

    vocab_size: int = doc(2048, help="BPE vocabulary target (bytes + merges + special tokens)")
    hidden_size: int = doc(128, help="model width")
    intermediate_size: int = doc(384, help="MLP width (3x hidden, as in Llama's ratio)")
    num_hidden_layers: int = doc(4, help="decoder blocks")
    num_attention_heads: int = doc(4, help="query heads (head_dim = hidden_size / heads)")
    num_key_value_heads: int = doc(2, help="key/value heads (grouped-query attention)")
    max_position_embeddings: int = doc(8192, help="longest sequence (>= the max_episode_tokens knob)")
    tie_word_embeddings: bool = doc(True, help="share input and output embeddings")
    seed: int = doc(0, help="weight initialisation seed (the tokenizer does not depend on it)")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None, where: str = "tiny") -> TinySpec:
        return from_mapping(cls, d or {}, where)

    def check(self, where: str = "tiny") -> None:
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "max_position_embeddings",
        ):
            _positive_int(getattr(self, name), f"{where}.{name}")
        if self.vocab_size < 256 + TINY_SPECIAL_TOKENS:
            raise ValueError(
                f"{where}.vocab_size must be >= {256 + TINY_SPECIAL_TOKENS} (256 bytes + special "
                f"tokens); got {self.vocab_size}"
            )
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"{where}.hidden_size ({self.hidden_size}) must be divisible by "
                f"num_attention_heads ({self.num_attention_heads})"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"{where}.num_attention_heads ({self.num_attention_heads}) must be divisible by "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )

    def to_dict(self) -> dict[str, Any]:
        return to_plain(self)


@dataclass(frozen=True)
class PolicySpec:
    """Which policy to load and how."""

    model: str = doc(
        "tiny", help="tiny, a packaged model (" + ", ".join(PACKAGED_MODELS) + ") or a local transformers folder"
    )
    dtype: str = doc("float32", help="float32 | bfloat16 | float16 | auto (the checkpoint's own dtype)")
    lora: LoraSpec | None = doc(None, help="LoRA adapters; null trains all weights (reference = adapters off)")
    chat_template: str | None = doc(
        None, help="null keeps the tokenizer's template (turns if it has none); or a template name or file"
    )
    tiny: TinySpec = doc(help="architecture when model is tiny", factory=TinySpec)
    cache_dir: str | None = doc(
        None, help="a packaged model's cache folder; null: $EAU_CACHE_DIR/<model> or ~/.cache/eau/<model>"
    )
    gradient_checkpointing: bool = doc(False, help="recompute activations in backward: less memory, more compute")
    attn_implementation: str | None = doc(None, help="e.g. sdpa, eager; null lets transformers choose")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | str | None, where: str = "policy") -> PolicySpec:
        """From a mapping, a bare model string or None (the defaults)."""
        if isinstance(d, PolicySpec):
            return d
        if d is None:
            return cls()
        return from_mapping(cls, {"model": d} if isinstance(d, str) else d, where)

    def check(self, where: str = "policy") -> None:
        if self.dtype not in DTYPE_NAMES:
            raise ValueError(f"{where}.dtype: unknown dtype {self.dtype!r}; allowed: {', '.join(DTYPE_NAMES)}")
        if not self.model:
            raise ValueError(
                f"{where}.model must be 'tiny', a packaged model ({', '.join(PACKAGED_MODELS)}) or a local directory"
            )

    def to_dict(self) -> dict[str, Any]:
        return to_plain(self)


@dataclass(frozen=True)
class CriticSpec:
    """The learned value model."""

    mode: str = doc(
        "separate", help="separate: its own backbone and optimiser; shared: a value head on the policy backbone"
    )
    init: str = doc(
        "policy",
        help="separate only: policy (a copy of the policy's backbone), tiny (a fresh small "
        "backbone) or a local directory",
    )
    lora: LoraSpec | None = doc(
        None, help="separate only: train the critic backbone through LoRA (the head is always trained)"
    )
    head_init_std: float = doc(
        0.0,
        help="0: a zero head, every initial value exactly 0 (robust to backbones "
        "whose hidden states are large); > 0: normal weights of this std",
    )
    tiny: TinySpec = doc(help="backbone size when init is tiny (the vocabulary follows the policy)", factory=TinySpec)

    MODES = ("separate", "shared")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None, where: str = "critic") -> CriticSpec:
        if isinstance(d, CriticSpec):
            return d
        return from_mapping(cls, d or {}, where)

    def check(self, where: str = "critic") -> None:
        if self.mode not in self.MODES:
            raise ValueError(f"{where}.mode: unknown {self.mode!r}; allowed: {', '.join(self.MODES)}")
        if self.mode == "shared" and (self.init != "policy" or self.lora is not None):
            raise ValueError(
                f"{where}: mode 'shared' uses the policy backbone itself; drop init/lora or use mode 'separate'"
            )
        if self.head_init_std < 0:
            raise ValueError(f"{where}.head_init_std must be >= 0; got {self.head_init_std}")


_VLLM_ONLY = (
    "mode",
    "gpu_memory_utilization",
    "kv_cache_gib",
    "enforce_eager",
    "host",
    "port",
    "dtype",
    "max_model_len",
    "model_path",
    "sync_tolerance",
)
BACKEND_MODES = ("colocate", "server")
ENGINE_DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class BackendSpec:
    """The generation backend of the rollout."""

    name: str = doc(
        "hf", help="hf (the policy in this process) or vllm (vLLM on CPU or GPU: needs the vllm extra; README)"
    )
    continuous: bool = doc(
        True,
        help="a row's next turn starts as soon as its last one ended, instead of one generate call per turn "
        "(vllm: colocate mode)",
    )
    mode: str | None = doc(
        None, help="vllm: colocate (an engine in this process) or server (a running vLLM server; README)"
    )
    gpu_memory_utilization: float | None = doc(
        None, help="vllm colocate on GPU: the engine's share of the card (null: 0.5, as in the method)"
    )
    kv_cache_gib: float | None = doc(
        None, help="vllm colocate: KV cache size in GiB (null: 1 on CPU, where vLLM would otherwise ask for 92% of RAM)"
    )
    enforce_eager: bool | None = doc(None, help="vllm colocate: no CUDA graphs or compilation (null: true on CPU)")
    host: str | None = doc(None, help="vllm server mode: host (127.0.0.1)")
    port: int | None = doc(None, help="vllm server mode: port (8000)")
    dtype: str | None = doc(None, help="vllm: the engine's weights dtype (null: the policy's)")
    max_model_len: int | None = doc(None, help="vllm: longest sequence (null: the model's)")
    model_path: str | None = doc(
        None, help="vllm: model folder the engine starts from (default: the policy's; tiny: written for it)"
    )
    sync_tolerance: float | None = doc(
        None,
        help="vllm: largest mean |log-prob| difference between engine and policy on the probe after a weight "
        "sync; more stops the run (null: 1e-3 float32, 0.1 bfloat16, 0.05 float16)",
    )

    def check(self, where: str = "backend") -> None:
        if self.name not in ("hf", "vllm"):
            raise ValueError(f"{where}.name must be hf or vllm, got {self.name!r}")
        if self.name == "hf":
            extra = [k for k in _VLLM_ONLY if getattr(self, k) is not None]
            if extra:
                raise ValueError(f"{where} (hf) takes name and continuous; {', '.join(extra)} are vllm options")
            return
        if self.mode is not None and self.mode not in BACKEND_MODES:
            raise ValueError(f"{where}.mode must be {' or '.join(BACKEND_MODES)}, got {self.mode!r}")
        if self.dtype is not None and self.dtype not in ENGINE_DTYPES:
            raise ValueError(f"{where}.dtype must be one of {', '.join(ENGINE_DTYPES)} (or null), got {self.dtype!r}")
        if self.gpu_memory_utilization is not None and not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"{where}.gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization!r}")
        for name in ("kv_cache_gib", "sync_tolerance"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{where}.{name} must be > 0, got {value!r}")
        for name in ("port", "max_model_len"):
            if getattr(self, name) is not None:
                _positive_int(getattr(self, name), f"{where}.{name}")

    def options(self) -> dict[str, Any]:
        """The mapping ``harness.rollout.backend_choice.make_backend`` takes (unset vllm options left out)."""
        if self.name == "hf":
            return {"name": "hf", "continuous": self.continuous}
        return {
            "name": "vllm",
            "continuous": self.continuous,
            **{k: getattr(self, k) for k in _VLLM_ONLY if getattr(self, k) is not None},
        }


_USER_LLM_FIELDS = {
    "openai": ("base_url", "model", "api_key_env", "timeout_s", "max_retries", "retry_backoff_s", "max_tokens"),
    "vllm": (
        "model",
        "timeout_s",
        "max_retries",
        "retry_backoff_s",
        "max_tokens",
        "max_model_len",
        "kv_cache_gib",
        "start_timeout_s",
    ),
    "transformers": ("path", "gguf_file", "max_new_tokens", "device", "chat_template"),
    "gemma3_270m": ("max_new_tokens", "device"),
}


@dataclass(frozen=True)
class UserLLMSpec:
    """The LLM user's backend (harness.users.backends). Each kind takes its own fields."""

    kind: str = doc(
        "openai",
        help="openai (an OpenAI-compatible endpoint), vllm (a vLLM server the run starts on loopback and "
        "stops at its end), transformers (a local model folder) or gemma3_270m (the model shipped in an "
        "installed package)",
    )
    base_url: str | None = doc(None, help="openai: e.g. http://127.0.0.1:8000/v1 (required)")
    model: str | None = doc(
        None,
        help="openai: the model name the server expects; vllm: the model to serve, a packaged model "
        "(" + ", ".join(PACKAGED_MODELS) + ") or a Hugging Face model folder (required)",
    )
    api_key_env: str | None = doc(
        None, help="openai: environment variable holding the key (OPENAI_API_KEY); keys never go into configs"
    )
    timeout_s: float | None = doc(None, help="openai, vllm: limit on one HTTP call (30)")
    max_retries: int | None = doc(None, help="openai, vllm: further attempts after a failed call (2)")
    retry_backoff_s: float | None = doc(None, help="openai, vllm: wait before retry k is this x 2^(k-1) (0.5)")
    max_tokens: int | None = doc(None, help="openai, vllm: most tokens of one reply (256)")
    max_model_len: int | None = doc(None, help="vllm: longest sequence the server takes (2048)")
    kv_cache_gib: float | None = doc(
        None, help="vllm: the server's KV cache in GiB (1; on a GPU null lets vLLM size it)"
    )
    start_timeout_s: float | None = doc(None, help="vllm: how long the run waits for the server to be healthy (600)")
    path: str | None = doc(None, help="transformers: the model folder (required)")
    gguf_file: str | None = doc(None, help="transformers: a GGUF file inside the folder")
    max_new_tokens: int | None = doc(None, help="transformers, gemma3_270m: most tokens of one reply (128)")
    device: str | None = doc(None, help="transformers, gemma3_270m: torch device (cpu)")
    chat_template: str | None = doc(None, help="transformers: chat template name or file")

    def check(self, where: str = "user_llm") -> None:
        if self.kind not in _USER_LLM_FIELDS:
            raise ValueError(f"{where}.kind={self.kind!r} is not a backend; allowed: {', '.join(USER_LLM_KINDS)}")
        own = _USER_LLM_FIELDS[self.kind]
        extra = [
            f.name
            for f in dataclasses.fields(self)
            if f.name != "kind" and f.name not in own and getattr(self, f.name) is not None
        ]
        if extra:
            raise ValueError(f"{where} (kind {self.kind}) takes {', '.join(own)}; not {', '.join(extra)}")
        required = {"openai": ("base_url", "model"), "vllm": ("model",), "transformers": ("path",)}.get(self.kind, ())
        missing = [k for k in required if not getattr(self, k)]
        if missing:
            raise ValueError(f"{where} (kind {self.kind}) needs {', '.join(missing)}")

    def options(self, model_folder: Callable[[str], str] = str, **server: Any) -> dict[str, Any]:
        """The mapping ``harness.users.backends.make_backend`` takes (unset fields left out). A vllm server
        (started by the run) also gets its model's folder (``model_folder``: a packaged model's cache) and
        the run's ``server`` settings (its device, its log file)."""
        options = {
            "kind": self.kind,
            **{k: getattr(self, k) for k in _USER_LLM_FIELDS[self.kind] if getattr(self, k) is not None},
        }
        if self.kind == "vllm":
            options.update(model=model_folder(options["model"]), **server)
        return options


@dataclass
class WarmStartSpec:
    """A supervised warm start on scripted demonstrations (``eau sft``'s own settings; a run's warm
    start uses the run's policy, gyms, rendering and seed)."""

    demonstrator: str = doc(
        "oracle",
        help="oracle (privileged: sees the hidden facts; every gym) or public "
        "(sees only what the agent sees; intention only)",
    )
    give_up: float = doc(
        0.0,
        help="probability that the demonstrator answers at once at a turn: the student "
        "learns the questions but stops at a random point, and PPO learns when to stop",
    )
    episodes: int = doc(64, help="demonstration episodes (train split), spread over the gyms")
    epochs: int = doc(2, help="passes over the demonstrations")
    batch_size: int = doc(8, help="episodes per optimiser step")
    lr: float = doc(1e-3, help="AdamW learning rate")
    max_episode_tokens: int = doc(1024, help="demonstrations longer than this are cut")

    def check(self, where: str = "warm_start") -> None:
        if self.demonstrator not in ("oracle", "public"):
            raise ValueError(f"{where}.demonstrator must be oracle or public; got {self.demonstrator!r}")
        if not 0 <= self.give_up <= 1:
            raise ValueError(f"{where}.give_up must be in [0, 1]; got {self.give_up!r}")
        for name in ("episodes", "epochs", "batch_size", "max_episode_tokens"):
            _positive_int(getattr(self, name), f"{where}.{name}")
        if self.lr <= 0:
            raise ValueError(f"{where}.lr must be > 0; got {self.lr!r}")


@dataclass(frozen=True)
class EvaluationSpec:
    """Held-out evaluation on a fixed protocol around training (results in eval_results/<run_id>/ and
    a before -> after summary at the end of the run)."""

    protocol: str = doc("", help="protocol file: a name in eval/ (protocol-intention-cpu.yaml) or a path")
    before: bool = doc(True, help="score the starting policy (after any warm start)")
    after: bool = doc(True, help="score the final policy")

    def check(self, where: str = "evaluation") -> None:
        if not self.protocol:
            raise ValueError(f"{where}.protocol is required: a protocol file (eval/*.yaml) or a path")
