"""An agent turn of a τ² gym: messages to the user and calls of the domain's tools.

* ``tool_call`` rendering: every domain tool is a native function schema (``info["tools"]``); a
  turn holding ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (one or more, or a bare
  JSON object with ``name``) calls tools; any other text is a message to the user.
* ``tagged`` rendering: a line ``CALL: {"name": ..., "arguments": {...}}`` calls a tool (several
  lines, several calls); any other text is a message to the user (a leading ``ASK:``/``SAY:`` is
  dropped).

In both, a message containing ``###STOP###`` ends the conversation (the text before it is still
said to the user). A call whose JSON does not parse is still a call: it becomes a tool error, as
τ² gives it, and counts toward the error limit. Parsing never raises.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

STOP_TOKEN = "###STOP###"
_TOOL_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_CALL_LINE_RE = re.compile(r"^[ \t>*`-]*CALL[ \t]*:[ \t]*(.*)$", re.IGNORECASE | re.MULTILINE)
_SAY_RE = re.compile(r"^\s*(ASK|SAY|MESSAGE)\s*:\s*", re.IGNORECASE)


@dataclass
class ParsedCall:
    """One tool call as written: ``name`` and ``arguments``, or ``error`` when it could not be read."""

    raw: str
    name: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


@dataclass
class TauTurn:
    """One parsed agent turn: tool calls, else a message (``stop``: the agent ends the conversation)."""

    calls: list[ParsedCall]
    message: str
    stop: bool
    empty: bool = False
    search: str | None = None  # tau (UserRL's interface): a search query (``tools`` or ``help``)
    format_error: str | None = None  # why a turn is empty (tau: the harness's format errors)
    feedback: str | None = None  # what the agent is told about a malformed turn


def parse_call(blob: str) -> ParsedCall:
    """A call from its JSON text; errors name what was wrong, for the agent to read.

    >>> parse_call('{"name": "get_user_details", "arguments": {"user_id": "u1"}}').arguments
    {'user_id': 'u1'}
    >>> parse_call('{"name": "x", "arguments": [1]}').error
    'Error: the arguments of x must be a JSON object'
    """
    try:
        obj = json.loads(blob)
    except json.JSONDecodeError as exc:
        return ParsedCall(blob, error=f"Error: the tool call is not valid JSON ({exc.msg} at character {exc.pos})")
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj.get("name"):
        return ParsedCall(blob, error='Error: a tool call is a JSON object {"name": <tool name>, "arguments": {...}}')
    name = obj["name"]
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # some templates emit the arguments as a JSON string
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            return ParsedCall(blob, name, error=f"Error: the arguments of {name} are not valid JSON")
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return ParsedCall(blob, name, error=f"Error: the arguments of {name} must be a JSON object")
    return ParsedCall(blob, name, args)


def _message(text: str) -> tuple[str, bool]:
    stop = STOP_TOKEN in text
    msg = _SAY_RE.sub("", text.replace(STOP_TOKEN, "")).strip()
    return msg, stop


def parse_turn(text: str, rendering: str) -> TauTurn:
    """Parse one agent turn (see the module docstring)."""
    if not isinstance(text, str) or not text.strip():
        return TauTurn([], "", False, empty=True)
    if rendering == "tool_call":
        blobs = _TOOL_CALL_RE.findall(text)
        if not blobs:
            stripped = text.strip()
            if stripped.startswith("{") and stripped.endswith("}") and '"name"' in stripped:
                blobs = [stripped]
        if blobs:
            return TauTurn([parse_call(b) for b in blobs], "", False)
    else:
        blobs = [m.group(1).strip() for m in _CALL_LINE_RE.finditer(text)]
        if blobs:
            return TauTurn([parse_call(b) for b in blobs], "", False)
    msg, stop = _message(text)
    return TauTurn([], msg, stop, empty=not msg and not stop)


def tagged_instructions() -> str:
    return (
        'To call a tool, write one line: CALL: {"name": <tool name>, "arguments": {<arguments>}} (one line '
        "per call; the results come back before your next turn). Anything else you write is sent to the "
        f"customer as your message. To end the conversation, write {STOP_TOKEN}."
    )


def tool_call_instructions() -> str:
    return (
        "Call the tools natively (a tool call per action); any text you write without a tool call is "
        f"sent to the customer as your message. To end the conversation, write {STOP_TOKEN}."
    )
