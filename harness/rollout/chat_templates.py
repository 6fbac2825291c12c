"""Chat templates for tokenizers that ship none (the tiny model, Gemma 3 270M from GGUF).

A template is named by one string:

* ``turns``: the harness's own template (``harness/rollout/templates/turns.jinja``): Gemma-style
  ``<start_of_turn>ROLE ... <end_of_turn>`` blocks, any role order, ``tools=`` listed in a system
  block and assistant ``tool_calls`` rendered as ``<tool_call>{json}</tool_call>`` (the form
  :func:`harness.envs.actions.parse_action` reads). Fine for both action renderings.
* the name of a template TRL installs under ``trl/chat_templates/`` (e.g. ``qwen3``, ``gemma3``);
  note that ``gemma3`` neither renders tools nor accepts two user/tool messages in a row;
* a path to a ``.jinja`` file.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

TEMPLATE_DIR = Path(__file__).parent / "templates"
DEFAULT_TEMPLATE = "turns"
# The markers of the ``turns`` template; tokenizers built here make them single tokens.
START_OF_TURN = "<start_of_turn>"
END_OF_TURN = "<end_of_turn>"


def _trl_template_dir() -> Path | None:
    """Where the installed TRL keeps its ``.jinja`` templates (found without importing TRL)."""
    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        return None
    d = Path(list(spec.submodule_search_locations)[0]) / "chat_templates"
    return d if d.is_dir() else None


def available_templates() -> dict[str, Path]:
    """Template name -> file: the harness's own first, then TRL's (ours win a name clash)."""
    found: dict[str, Path] = {}
    trl_dir = _trl_template_dir()
    if trl_dir is not None:
        found.update({p.stem: p for p in sorted(trl_dir.glob("*.jinja"))})
    found.update({p.stem: p for p in sorted(TEMPLATE_DIR.glob("*.jinja"))})
    return found


def load_template(name_or_path: str) -> str:
    """The Jinja source of a template given by name (see module docstring) or ``.jinja`` path."""
    path = Path(name_or_path).expanduser()
    if name_or_path.endswith(".jinja") or path.is_file():
        if not path.is_file():
            raise FileNotFoundError(f"chat template file {str(path)!r} does not exist")
        return path.read_text(encoding="utf-8")
    known = available_templates()
    if name_or_path not in known:
        raise ValueError(
            f"unknown chat template {name_or_path!r}; valid: a path to a .jinja file or one of "
            f"{', '.join(sorted(known))}"
        )
    return known[name_or_path].read_text(encoding="utf-8")


def ensure_chat_template(tokenizer: Any, template: str | None = None) -> Any:
    """Give ``tokenizer`` a chat template and return it.

    ``template=None`` keeps a template the tokenizer already has and sets ``turns`` otherwise;
    a name or path always replaces it.
    """
    if template is None:
        if getattr(tokenizer, "chat_template", None):
            return tokenizer
        template = DEFAULT_TEMPLATE
    tokenizer.chat_template = load_template(template)
    return tokenizer


def stop_token_ids(tokenizer: Any) -> list[int]:
    """Token ids that end a generated turn: the tokenizer's EOS and ``<end_of_turn>`` when it is
    one token of the vocabulary (what ``generate(eos_token_id=...)`` should receive)."""
    ids: list[int] = []
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    eot = tokenizer.convert_tokens_to_ids(END_OF_TURN)
    if isinstance(eot, int) and eot != tokenizer.unk_token_id and eot not in ids:
        ids.append(eot)
    return ids
