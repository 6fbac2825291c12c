"""The single agent tool ``interact(choice, content)`` and its two renderings.

* ``tool_call``: the model's native tool calls. The tool is described to the chat template with
  ``tools=[interact_tool_schema(...)]``; the model answers with a JSON call, either wrapped in
  ``<tool_call>...</tool_call>`` (Qwen/Hermes style) or bare.
* ``tagged``: a plain-text form that small models learn quickly: one line starting with
  ``ASK:``, ``SEARCH:`` or ``ANSWER:``; text before the tag is free reasoning, everything after the
  tag (several lines for code) is the content.

Malformed turns never raise: they come back as an :class:`Action` with ``choice=None`` and a
``format_error`` that :func:`format_feedback` turns into a message for the agent.
"""

from __future__ import annotations

import json
import re
from typing import Any, Sequence

from harness.types import CHOICES, Action

RENDERINGS = ("tagged", "tool_call")
TOOL_NAME = "interact"

_TAG_RE = re.compile(r"^[ \t>*`#-]*(ASK|SEARCH|ANSWER)[ \t]*[:：][ \t]*", re.IGNORECASE | re.MULTILINE)
_TOOL_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_FENCE_RE = re.compile(r"^```[a-zA-Z0-9_+-]*\n(.*?)\n?```\s*$", re.DOTALL)


def interact_tool_schema(allowed: Sequence[str] = CHOICES, description: str | None = None) -> dict[str, Any]:
    """OpenAI-style function schema of the ``interact`` tool for ``apply_chat_template(tools=...)``."""
    return {
        "type": "function",
        "function": {
            "name": TOOL_NAME,
            "description": description
            or "Talk to the user or the environment. ask: put a question to the user; search: query the "
            "environment's search tool; answer: give the final answer (ends the task).",
            "parameters": {
                "type": "object",
                "properties": {
                    "choice": {"type": "string", "enum": list(allowed), "description": "What to do."},
                    "content": {"type": "string", "description": "The question, the search query or the answer."},
                },
                "required": ["choice", "content"],
            },
        },
    }


def tagged_instructions(allowed: Sequence[str] = CHOICES) -> str:
    """How to act in the tagged rendering, for the system prompt."""
    lines = {
        "ask": "ASK: <a question to the user>",
        "search": "SEARCH: <a query for the search tool>",
        "answer": "ANSWER: <your final answer>",
    }
    shown = "\n".join(lines[c] for c in CHOICES if c in allowed)
    return (
        "Each turn, end with exactly one line in one of these forms (an answer may continue on the "
        f"following lines):\n{shown}"
    )


def _strip_fence(text: str) -> str:
    m = _FENCE_RE.match(text.strip())
    return m.group(1) if m else text.strip()


def _parse_tagged(text: str, allowed: Sequence[str]) -> Action:
    m = _TAG_RE.search(text)
    if not m:
        return Action(None, "", text, "no_action_tag", "tagged")
    choice = m.group(1).lower()
    content = text[m.end() :]
    if choice != "answer":
        # ask/search: one line; a second tag or extra lines after it are ignored.
        content = content.split("\n", 1)[0]
    else:
        nxt = _TAG_RE.search(content)
        if nxt and nxt.group(1).lower() != "answer":
            content = content[: nxt.start()]
        content = _strip_fence(content)
    return _finish(choice, content.strip(), text, allowed, "tagged")


def _parse_call_json(blob: str) -> tuple[str | None, str | None, str | None]:
    """(choice, content, error) from a JSON tool call."""
    try:
        obj = json.loads(blob)
    except json.JSONDecodeError:
        return None, None, "bad_tool_json"
    if not isinstance(obj, dict):
        return None, None, "bad_tool_json"
    name = obj.get("name", TOOL_NAME)
    if name != TOOL_NAME:
        return None, None, "unknown_tool"
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None, None, "bad_tool_json"
    if not isinstance(args, dict):
        return None, None, "bad_tool_json"
    choice, content = args.get("choice"), args.get("content")
    if not isinstance(choice, str) or not isinstance(content, (str, int, float)):
        return None, None, "missing_arguments"
    return choice.strip().lower(), str(content), None


def _parse_tool_call(text: str, allowed: Sequence[str]) -> Action:
    m = _TOOL_CALL_RE.search(text)
    blob = m.group(1) if m else None
    if blob is None:
        start, end = text.find("{"), text.rfind("}")
        if start < 0 or end <= start:
            # Small models often fall back to the tagged form; accept it rather than punish twice.
            act = _parse_tagged(text, allowed)
            if act.choice is not None:
                return act
            return Action(None, "", text, "no_tool_call", "tool_call")
        blob = text[start : end + 1]
    choice, content, err = _parse_call_json(blob)
    if err:
        return Action(None, "", text, err, "tool_call")
    return _finish(choice, content.strip(), text, allowed, "tool_call")


def _finish(choice: str, content: str, raw: str, allowed: Sequence[str], rendering: str) -> Action:
    if choice not in CHOICES:
        return Action(None, content, raw, "unknown_choice", rendering)
    if choice not in allowed:
        return Action(None, content, raw, "choice_not_allowed", rendering)
    if not content:
        return Action(None, "", raw, "empty_content", rendering)
    return Action(choice, content, raw, None, rendering)


def parse_action(text: str, allowed: Sequence[str] = CHOICES, rendering: str = "tagged") -> Action:
    """Parse one agent turn. Never raises on model output.

    >>> parse_action("I should ask.\\nASK: Which city?").choice
    'ask'
    >>> parse_action('<tool_call>{"name": "interact", "arguments": {"choice": "answer", "content": "B"}}</tool_call>',
    ...              rendering="tool_call").content
    'B'
    >>> parse_action("hello").format_error
    'no_action_tag'
    """
    if rendering not in RENDERINGS:
        raise ValueError(f"unknown action rendering {rendering!r}; allowed: {', '.join(RENDERINGS)}")
    if not isinstance(text, str) or not text.strip():
        return Action(None, "", text if isinstance(text, str) else "", "empty_turn", rendering)
    if rendering == "tagged":
        return _parse_tagged(text, allowed)
    return _parse_tool_call(text, allowed)


_FEEDBACK = {
    "empty_turn": "Your turn was empty.",
    "no_action_tag": "Your turn had no action.",
    "no_tool_call": "Your turn had no interact tool call.",
    "bad_tool_json": "Your tool call was not valid JSON.",
    "unknown_tool": "Only the interact tool exists.",
    "missing_arguments": "The interact tool needs string arguments choice and content.",
    "unknown_choice": "Unknown choice.",
    "choice_not_allowed": "That choice is not available in this task.",
    "empty_content": "The action had no content.",
}


def format_feedback(error: str, allowed: Sequence[str], rendering: str) -> str:
    """Message returned to the agent after a malformed turn."""
    head = _FEEDBACK.get(error, "Your turn could not be understood.")
    if rendering == "tagged":
        how = tagged_instructions(allowed)
    else:
        how = (
            'Call the interact tool, e.g. <tool_call>{"name": "interact", "arguments": {"choice": "'
            + allowed[0]
            + '", "content": "..."}}</tool_call>; choice is one of '
            + ", ".join(allowed)
            + "."
        )
    return f"Format error ({error}): {head} {how}"
