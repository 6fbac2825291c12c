"""Append-only JSONL: one complete line per record.

Writers append each record with a single ``write`` on an ``O_APPEND`` descriptor, so concurrent
writers (the trainer and ``eau knobs set``) never interleave within a line. Readers skip a torn last
line (a writer killed mid-write); :func:`repair` truncates such a tail before a resumed run appends.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Iterator


def finite(obj: Any) -> Any:
    """Non-finite floats as strings ("nan", "inf", "-inf"): strict JSON has no NaN. The one rule
    for every JSON the harness writes (these files and every command's ``--json`` output)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(float(obj))
    if isinstance(obj, dict):
        return {(finite(k) if isinstance(k, float) else k): finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def dumps(record: Any) -> str:
    """One strict-JSON line (NaN and infinities become strings)."""
    try:
        return json.dumps(record, ensure_ascii=False, default=str, separators=(",", ":"), allow_nan=False)
    except ValueError:
        return json.dumps(finite(record), ensure_ascii=False, default=str, separators=(",", ":"), allow_nan=False)


def append(path: str | Path, record: Any, *, durable: bool = False) -> None:
    """Append one record as one line; ``durable``: on disk (fsync) before this returns, for records a
    resume or an audit relies on (a power loss after the call keeps them)."""
    data = (dumps(record) + "\n").encode("utf-8")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)


def iter_records(path: str | Path) -> Iterator[dict[str, Any]]:
    """Complete records of a JSONL file; a torn or unparsable line is skipped."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return
    with f:
        for raw in f:
            if not raw.endswith(b"\n"):
                break  # torn last line
            try:
                rec = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            if isinstance(rec, dict):
                yield rec


def read(path: str | Path) -> list[dict[str, Any]]:
    return list(iter_records(path))


def read_from(path: str | Path, offset: int) -> list[dict[str, Any]]:
    """Complete records from byte ``offset`` on (an offset a checkpoint recorded: a line boundary)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, int(offset)))
            data = f.read()
    except FileNotFoundError:
        return []
    return read_lines(data.split(b"\n")[:-1])  # the piece after the last newline is a torn line or empty


def read_lines(lines: list[bytes]) -> list[dict[str, Any]]:
    """The JSON objects among ``lines`` (a line that is not one is skipped)."""
    out = []
    for raw in lines:
        try:
            rec = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def tail(path: str | Path, n: int, chunk: int = 1 << 16) -> list[dict[str, Any]]:
    """The last ``n`` complete records, reading from the end (cheap on long files)."""
    if n <= 0:
        return []
    try:
        size = os.path.getsize(path)
    except FileNotFoundError:
        return []
    with open(path, "rb") as f:
        data = b""
        pos = size
        while pos > 0 and data.count(b"\n") <= n + 1:
            step = min(chunk, pos)
            pos -= step
            f.seek(pos)
            data = f.read(step) + data
    lines = data.split(b"\n")
    complete = lines[:-1]  # the element after the last newline is a torn line or empty
    if pos > 0:
        complete = complete[1:]  # the first piece may be a partial line
    return read_lines(complete[-n:])


def repair(path: str | Path, chunk: int = 1 << 20) -> int:
    """Truncate a torn last line; returns the number of bytes removed."""
    try:
        size = os.path.getsize(path)
    except FileNotFoundError:
        return 0
    if size == 0:
        return 0
    with open(path, "rb+") as f:
        pos = size
        keep = 0
        while pos > 0:
            step = min(chunk, pos)
            pos -= step
            f.seek(pos)
            data = f.read(step)
            if pos + step == size and data.endswith(b"\n"):
                return 0
            cut = data.rfind(b"\n")
            if cut >= 0:
                keep = pos + cut + 1
                break
        f.truncate(keep)
        return size - keep
