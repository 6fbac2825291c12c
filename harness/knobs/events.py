"""Knob events: one JSONL record per accepted or refused write (``knob_events.jsonl``).

Fields (documented for the skill in skill/references/formats.md):
``id`` (``k-`` + 10 hex), ``time`` (ISO 8601 UTC), ``knob`` (``<area>.<name>``, or ``rules.users.<gym>``,
``rules.rewards.<stem>``, ``schema.<area>``, or the file name when the file as a whole was refused),
``gym`` (null for the global/default value), ``old``, ``new``, ``author`` (human|agent|system),
``reason``, ``status`` (accepted|rejected|not_applied: accepted for a run that has not applied it — it
ended or was not live; ``eau train --resume`` applies it under the same id), ``rule`` (refusal rule,
null when accepted), ``message``,
``file``, ``line`` (1-based when known), ``step_written`` (run step in progress when the write was
made; null without a run), ``step_effective`` (first step that runs with the value; null when not
applied to a run), ``applies`` (live|next_run), ``source`` (cli|watch|revert|system), ``ref`` (the
event a revert undoes). Author ``system`` with source ``system``: a run writing its preset's values
into its own knobs folder at start (harness/ppo/run_knobs.py), or ``eau knobs promote`` carrying a
run's values to the project folder. The last record of an id says how that write stands.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from harness.io import jsonl

AUTHORS = ("human", "agent", "system")


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_event_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:10]


def new_id() -> str:
    return new_event_id("k-")


@dataclass(kw_only=True)
class KnobEvent:
    """One record of ``knob_events.jsonl`` (fields in the order they are written: identification first)."""

    id: str = field(default_factory=new_id)
    time: str = field(default_factory=now_iso)
    knob: str
    gym: str | None = None
    old: Any = None
    new: Any = None
    author: str = "human"
    reason: str = ""
    status: str
    rule: str | None = None
    message: str = ""
    file: str | None = None
    line: int | None = None
    step_written: int | None = None
    step_effective: int | None = None
    applies: str = "live"
    source: str = "watch"
    ref: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return _loggable(asdict(self))


def _loggable(value: Any) -> Any:
    """A value every log line and JSON answer can hold: strings as valid UTF-8 (a lone surrogate from a
    command line is kept as its escape), containers walked, anything else that is not plain data (a
    refused ``!!set`` or date) as its repr."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {
            str(_loggable(k)) if not isinstance(k, (int, float, bool)) else k: _loggable(v) for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [_loggable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return repr(value)


class EventLog:
    """Append-only knob event log at ``path`` (None: events are kept in memory only)."""

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path is not None else None
        self.memory: list[dict[str, Any]] = []

    def append(self, event: KnobEvent) -> dict[str, Any]:
        rec = event.to_dict()
        self.memory.append(rec)
        if self.path is not None:
            jsonl.append(self.path, rec, durable=True)
        return rec

    def read(self) -> list[dict[str, Any]]:
        return jsonl.read(self.path) if self.path is not None else list(self.memory)

    def find(self, event_id: str) -> dict[str, Any] | None:
        """The last record of ``event_id`` (a write applied again after a resume is logged again under
        its id; the last record says how it stands)."""
        for rec in reversed(self.read()):
            if rec.get("id") == event_id:
                return rec
        return None
