"""Attribution notes: who made a CLI write that a run has not applied yet, and why.

A write for a run (``eau knobs set --run``, or the one live run) is validated, then its note is
written to ``<run knobs>/.pending/<sha16>.json`` and then the file; the run, at its next step
boundary, finds the changed cell, reads its note (author, reason, the event id the CLI printed) and
logs the event under that id. One note per changed cell, named by the hash of (knob, gym, value), so
a note matches exactly the value it was written for::

    {"knob": "agent.lr", "gym": null, "new": 0.0001, "author": "agent", "reason": "...",
     "id": "k-...", "step_written": 12, "source": "cli", "ref": null, "time": 1712345678.9}

``first_applied_at`` (a step) marks a write a resumed run applies again: it was in force from that
step in steps the resume runs again, so the run logs it again under the same id.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from harness.io.yamlio import atomic_write_text
from harness.knobs.events import new_id
from harness.knobs.layout import sha

PENDING = ".pending"
LOCK = ".lock"


def canonical_json(value: Any) -> str:
    """JSON of a value with every mapping key as a string, sorted (mixed key types cannot be sorted)."""

    def canon(v: Any) -> Any:
        if isinstance(v, Mapping):
            return {str(k): canon(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [canon(x) for x in v]
        return v

    return json.dumps(canon(value), sort_keys=True, default=str)


class Notes:
    """The attribution notes of one knobs folder."""

    def __init__(self, knobs_dir: Path):
        self.dir = Path(knobs_dir) / PENDING

    def path(self, knob: str, gym: str | None, new: Any) -> Path:
        return self.dir / (sha(f"{knob}|{gym}|{canonical_json(new)}") + ".json")

    def texts(
        self,
        knob: str,
        changed: Sequence[tuple[str | None, Any, Any]],
        fields: Mapping[str, Any],
        *,
        event_id: str | None = None,
    ) -> tuple[list[str], list[tuple[Path, str]]]:
        """The event ids and the (path, text) of the notes of a write's changed cells, nothing written
        yet (the writer commits them with the file). ``fields``: author, reason, step_written, source,
        ref (and first_applied_at); the first cell gets ``event_id`` when given."""
        ids, files = [], []
        for i, (g, _, n) in enumerate(changed):
            eid = event_id if event_id and i == 0 else new_id()
            rec = {"knob": knob, "gym": g, "new": n, **fields, "id": eid, "time": time.time()}
            ids.append(eid)
            files.append((self.path(knob, g, n), json.dumps(rec)))
        return ids, files

    def write(self, record: Mapping[str, Any], first_applied_at: int | None = None) -> None:
        """A note for a logged write (kept for the next time a run applies it: a resume)."""
        fields = {k: record.get(k) for k in ("author", "reason", "step_written", "ref")}
        fields["source"] = record.get("source") or "cli"
        if first_applied_at is not None:
            fields["first_applied_at"] = first_applied_at
        _, files = self.texts(
            record["knob"], [(record.get("gym"), None, record.get("new"))], fields, event_id=record["id"]
        )
        for path, text in files:
            atomic_write_text(path, text)

    def peek(self, knob: str, gym: str | None, new: Any) -> dict[str, Any] | None:
        try:
            rec = json.loads(self.path(knob, gym, new).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return rec if isinstance(rec, dict) and "author" in rec and "reason" in rec else None

    def drop(self, knob: str, gym: str | None, new: Any) -> None:
        self.path(knob, gym, new).unlink(missing_ok=True)

    def all(self) -> list[dict[str, Any]]:
        """Every readable note, oldest first."""
        out = []
        for p in sorted(self.dir.glob("*.json")) if self.dir.is_dir() else []:
            try:
                rec = json.loads(p.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(rec, dict) and rec.get("knob") and rec.get("author") and rec.get("id"):
                out.append({"reason": "", **rec})
        return sorted(out, key=lambda r: r.get("time") or 0)


@contextlib.contextmanager
def write_lock(knobs_dir: Path) -> Iterator[None]:
    """Hold a knobs folder's write lock (``<knobs>/.lock``, an exclusive ``flock``) for the block.

    A command that writes for a run holds it from deciding whether the run is live to its note and
    file; the run holds it while it ends (it logs the writes it never applied, then its final state).
    So a write is either seen by the end of the run it was made for, or made after the run ended and
    logged as such. A killed holder's lock is released by the kernel."""
    fd = os.open(Path(knobs_dir) / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock
