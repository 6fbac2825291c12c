"""YAML reading and writing for knob and rule files.

YAML 1.2 (ruamel) everywhere, so ``1e-5`` is a float for the trainer exactly as it is for a human.
Reads are defensive (size cap, UTF-8 check, syntax errors with the parser's line); writes are
round-trip (comments and layout kept) and atomic (temp file in the same folder + ``os.replace``), so
a reader — the trainer's watcher included — never sees a half-written file from the harness.
"""

from __future__ import annotations

import io
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError

MAX_FILE_BYTES = 256 * 1024  # knob and rule files are small; anything larger is a mistake
# the C (fast) loader recurses on the C stack and segfaults on deep flow nesting (100,000 "[" kill
# the process); no knob, rule or --set value needs more than a few levels
MAX_FLOW_DEPTH = 200


class FileProblem(Exception):
    """A knob/rule file that cannot be read as YAML. ``kind`` is the refusal rule
    (``size``, ``encoding``, ``syntax``, ``missing``), ``line`` is 1-based when the parser knows it."""

    def __init__(self, path: Path, kind: str, message: str, line: int | None = None):
        self.path, self.kind, self.line = Path(path), kind, line
        where = f"{path}" + (f":{line}" if line else "")
        super().__init__(f"{where}: {message}")
        self.message = message


def _rt() -> YAML:
    y = YAML(typ="rt")
    y.preserve_quotes = True
    y.width = 100
    y.indent(mapping=2, sequence=4, offset=2)
    return y


def decode(path: Path, data: bytes) -> str:
    if len(data) > MAX_FILE_BYTES:
        raise FileProblem(path, "size", f"file is {len(data)} bytes; the limit is {MAX_FILE_BYTES}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise FileProblem(path, "encoding", f"not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})",
                          line) from None


def _safe() -> YAML:
    return YAML(typ="safe")  # the C parser when ruamel.yaml.clib is installed


_TOP_KEY = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*:", re.MULTILINE)


def top_level_key_lines(text: str) -> dict[str, int]:
    """1-based line of each top-level key (``name:`` at column 0) of a YAML text."""
    lines: dict[str, int] = {}
    for m in _TOP_KEY.finditer(text):
        lines.setdefault(m.group(1), text.count("\n", 0, m.start()) + 1)
    return lines


def parse_text(path: Path, text: str, fast: bool = False) -> Any:
    """Parse YAML 1.2. ``fast``: plain values through the safe (C) loader; otherwise a round-trip
    document that keeps comments and line information. Errors carry the parser's line."""
    if fast and text.count("[") + text.count("{") > MAX_FLOW_DEPTH and flow_depth(text) > MAX_FLOW_DEPTH:
        raise FileProblem(path, "syntax", f"YAML nested deeper than {MAX_FLOW_DEPTH} levels of [ ] / {{ }}")
    try:
        return _safe().load(text) if fast else _rt().load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        msg = " ".join(x for x in (exc.context, exc.problem) if x) or "YAML syntax error"
        raise FileProblem(path, "syntax", f"YAML syntax error: {msg}", line) from None
    except YAMLError as exc:
        raise FileProblem(path, "syntax", f"YAML error: {exc}") from None
    except RecursionError:
        raise FileProblem(path, "syntax", "YAML nesting too deep") from None


def flow_depth(text: str) -> int:
    """The deepest nesting of YAML flow brackets in ``text`` (brackets inside quotes and comments
    counted too: an upper bound, which is what a limit needs)."""
    depth = deepest = 0
    for ch in text:
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(0, depth - 1)
    return deepest


def read_capped(path: Path) -> bytes:
    """The bytes of a file, at most MAX_FILE_BYTES + 1 of them (never reads a huge file whole)."""
    try:
        with open(path, "rb") as f:
            return f.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise FileProblem(path, "missing", "file not found (deleted?)") from None
    except IsADirectoryError:
        raise FileProblem(path, "missing", "is a directory, expected a YAML file") from None


def read_yaml(path: Path) -> tuple[Any, str]:
    """(round-trip document, text) of a file; raises FileProblem."""
    path = Path(path)
    text = decode(path, read_capped(path))
    return parse_text(path, text), text


def plain(obj: Any) -> Any:
    """ruamel containers and scalar subclasses -> plain dict/list/int/float/str/bool/None."""
    if isinstance(obj, dict):
        return {str(k) if not isinstance(k, (str, int, float, bool)) else k: plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, bool) or obj is None:
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return float(obj)
    if isinstance(obj, str):
        return str(obj)
    return obj


def key_line(doc: Any, key: str) -> int | None:
    """1-based line of ``key`` in a round-trip mapping, when known."""
    try:
        return doc.lc.key(key)[0] + 1
    except Exception:  # plain dicts or keys without position
        return None


def dump(doc: Any) -> str:
    buf = io.StringIO()
    _rt().dump(doc, buf)
    return buf.getvalue()


def to_rt(value: Any) -> Any:
    """Plain value -> ruamel node (lists of numbers in flow style, as people write them)."""
    if isinstance(value, dict):
        m = CommentedMap()
        for k, v in value.items():
            m[k] = to_rt(v)
        return m
    if isinstance(value, list):
        s = CommentedSeq(to_rt(v) for v in value)
        s.fa.set_flow_style()
        return s
    return value


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (same-folder temp file, fsync, rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def load_plain(path: Path) -> Any:
    """Plain Python value of a YAML file (raises FileProblem)."""
    doc, _ = read_yaml(path)
    return plain(doc)


@dataclass
class ParsedFile:
    """A knob/rule file as read: round-trip document, plain value, text and content hash."""

    path: Path
    doc: Any
    value: Any
    text: str
    sha: str


def _trailing(node: Any, key: Any) -> Any:
    """The comment token after ``node[key]``'s value (ruamel keeps the comment block that follows a
    value — blank lines and the next knob's comment — on the value before it)."""
    items = getattr(node, "ca", None) and node.ca.items
    if items and key in items and len(items[key]) > 2:
        return items[key][2]
    return None


def _set_trailing(node: Any, key: Any, token: Any) -> None:
    if token is None:
        return
    entry = node.ca.items.setdefault(key, [None, None, None, None])
    entry[2] = token


def assign(doc: Any, key: str, value: Any) -> None:
    """``doc[key] = value`` on a round-trip mapping, keeping the comments around the key.

    A plain assignment loses the comment block after the old value (which ruamel stores on the old
    value's last element); this moves it to the new value's last element instead.
    """
    old = doc.get(key) if key in doc else None
    if isinstance(old, CommentedSeq) and isinstance(value, list):
        old[:] = [to_rt(v) for v in value]
        return
    if isinstance(old, CommentedMap) and isinstance(value, dict):
        last_old = list(old)[-1] if len(old) else None
        token = _trailing(old, last_old) if last_old is not None else None
        if last_old is not None and last_old in old.ca.items:
            old.ca.items[last_old][2] = None
        for k in [k for k in old if k not in value]:
            del old[k]
        for k, v in value.items():
            old[k] = to_rt(v)
        if len(old):
            _set_trailing(old, list(old)[-1], token)
        return
    new = to_rt(value)
    if isinstance(old, CommentedMap) and len(old):
        token = _trailing(old, list(old)[-1])
    elif isinstance(old, CommentedSeq):
        token = None  # flow sequences keep their comment on the parent key
    else:
        token = _trailing(doc, key)
    if isinstance(new, CommentedMap) and len(new) and token is not None:
        if key in doc.ca.items:
            doc.ca.items[key][2] = None
        _set_trailing(new, list(new)[-1], token)
        doc[key] = new
        return
    doc[key] = new
    if token is not None and not isinstance(old, (CommentedSeq,)) and isinstance(old, CommentedMap):
        _set_trailing(doc, key, token)
