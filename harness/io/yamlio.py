"""YAML reading and writing for knob and rule files.

YAML 1.2 (ruamel) everywhere, so ``1e-5`` is a float for the trainer exactly as it is for a human.
Reads are defensive: only regular files (a symlink, FIFO, device or folder in place of a knob file
is refused without being opened for reading: ``os.lstat`` first, then ``O_NONBLOCK | O_NOFOLLOW``),
a size cap, a UTF-8 check, and a pass over the parser's events before anything is built that bounds
nesting depth and alias expansion (a billion-laughs file or a recursive alias is refused in
milliseconds, never expanded) and records the line of every node, so that a refusal of any value can
name its line (:func:`line_of`). Syntax errors carry the parser's line. Writes are round-trip (comments and layout kept) and atomic (temp file in the same folder + ``os.replace``), so
a reader — the trainer's watcher included — never sees a half-written file from the harness.
"""

from __future__ import annotations

import io
import os
import re
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError

MAX_FILE_BYTES = 256 * 1024  # knob and rule files are small; anything larger is a mistake
MAX_DEPTH = 64  # nesting of mappings and sequences; the deepest shipped file has 6 levels
MAX_NODES = 100_000  # nodes of the document with every alias expanded (billion laughs: 10**9)
MAX_INT_DIGITS = 4300  # Python converts no longer integer to or from decimal text (sys.get_int_max_str_digits)
_INT = re.compile(r"[-+]?(0x[0-9a-fA-F_]+|0o[0-7_]+|0b[01_]+|[0-9][0-9_]*)")
_DIGITS_PER_CHAR = {"0x": 1.21, "0o": 0.91, "0b": 0.31}  # decimal digits per digit of the base


def _too_long_integer(text: str) -> int | None:
    """The decimal digits of a plain scalar that is an integer too long for Python to convert to text
    (None: not an integer, or short enough)."""
    if len(text) <= MAX_INT_DIGITS // 4 or not _INT.fullmatch(text):
        return None
    body = text.lstrip("+-").replace("_", "")
    digits = (
        int((len(body) - 2) * _DIGITS_PER_CHAR.get(body[:2].lower(), 1.0))
        if body[:2].lower() in _DIGITS_PER_CHAR
        else len(body)
    )
    return digits if digits > MAX_INT_DIGITS else None


class FileProblem(Exception):
    """A knob/rule file that cannot be read as YAML. ``kind`` is the refusal rule (``size``,
    ``encoding``, ``syntax``, ``depth``, ``alias``, ``missing``, ``not a file``), ``line`` is 1-based
    when the file has one to name (a folder, FIFO or symlink has none)."""

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
        line = data[:MAX_FILE_BYTES].count(b"\n") + 1  # where the limit is crossed
        raise FileProblem(
            path, "size", f"file is over {MAX_FILE_BYTES} bytes (the limit), reached on line {line}", line
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise FileProblem(
            path, "encoding", f"not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})", line
        ) from None


def _safe() -> YAML:
    return YAML(typ="safe")  # the C parser when ruamel.yaml.clib is installed


_TOP_KEY = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*:", re.MULTILINE)


def top_level_key_lines(text: str) -> dict[str, int]:
    """1-based line of each top-level key (``name:`` at column 0) of a YAML text."""
    lines: dict[str, int] = {}
    for m in _TOP_KEY.finditer(text):
        lines.setdefault(m.group(1), text.count("\n", 0, m.start()) + 1)
    return lines


PathKey = tuple[str, ...]  # a node's path: mapping keys and sequence indexes, as strings


def _event_kind(event: Any) -> str:
    return type(event).__name__


def scan_events(path: Path, text: str) -> dict[PathKey, int]:
    """Walk the parser's events (no document is built) and return the 1-based line of every node by
    path. Raises FileProblem for nesting deeper than MAX_DEPTH, a recursive alias, or more than
    MAX_NODES nodes once aliases are expanded; the events are lazy, so a refusal stops reading there."""
    lines: dict[PathKey, int] = {}
    # one frame per open collection: [path, is_mapping, next index or pending key, anchor, nodes inside]
    stack: list[list[Any]] = []
    sizes: dict[str, int] = {}  # anchor -> expanded node count of its node
    open_anchors: set[str] = set()
    total = 0

    def child_path() -> PathKey | None:
        """The path of the node that starts now (None: it is a mapping key)."""
        if not stack:
            return ()
        frame = stack[-1]
        if frame[1]:
            if frame[2] is None:
                return None
            return (*frame[0], frame[2])
        return (*frame[0], str(frame[2]))

    def finish_child(size: int, key_value: str | None) -> None:
        """Account a finished node in its parent (a key is remembered until its value ends)."""
        if not stack:
            return
        frame = stack[-1]
        frame[4] += size
        if frame[1]:  # a mapping: a key ("?" for a complex one) is remembered until its value ends
            frame[2] = (key_value if key_value is not None else "?") if frame[2] is None else None
        else:
            frame[2] += 1

    def add(n: int, line: int) -> None:
        nonlocal total
        total += n
        if total > MAX_NODES:
            raise FileProblem(
                path,
                "alias",
                f"the document expands to more than {MAX_NODES} nodes (aliases "
                "repeating aliases, as in a 'billion laughs' file)",
                line,
            )

    for event in _safe().parse(text):
        kind = _event_kind(event)
        line = event.start_mark.line + 1 if event.start_mark is not None else 1
        if kind in ("MappingStartEvent", "SequenceStartEvent"):
            here = child_path()
            if here is not None:
                lines.setdefault(here, line)
            if len(stack) >= MAX_DEPTH:
                raise FileProblem(path, "depth", f"nesting deeper than {MAX_DEPTH} levels", line)
            if event.anchor:
                open_anchors.add(event.anchor)
            add(1, line)
            key_path = here if here is not None else (*stack[-1][0], "?")
            stack.append(
                [key_path, kind == "MappingStartEvent", None if kind == "MappingStartEvent" else 0, event.anchor, 1]
            )
        elif kind in ("MappingEndEvent", "SequenceEndEvent"):
            frame = stack.pop()
            if frame[3]:
                sizes[frame[3]] = frame[4]
                open_anchors.discard(frame[3])
            finish_child(frame[4], None)
        elif kind == "ScalarEvent":
            if not event.style and (digits := _too_long_integer(event.value)) is not None:
                raise FileProblem(
                    path, "range", f"an integer of about {digits} digits; at most {MAX_INT_DIGITS} digits", line
                )
            here = child_path()
            # a value's path gets its line; a key gives its line to the value that follows
            lines.setdefault(here if here is not None else (*stack[-1][0], str(event.value)), line)
            add(1, line)
            if event.anchor:
                sizes[event.anchor] = 1
            finish_child(1, str(event.value))
        elif kind == "AliasEvent":
            if event.anchor in open_anchors:
                raise FileProblem(
                    path, "alias", f"recursive alias *{event.anchor} (it refers to a node that contains it)", line
                )
            here = child_path()
            if here is not None:
                lines.setdefault(here, line)
            size = sizes.get(event.anchor, 1)
            add(size, line)
            finish_child(size, None)
    return lines


def parse_text(path: Path, text: str, fast: bool = False, lines: dict[PathKey, int] | None = None) -> Any:
    """Parse YAML 1.2 after a bounded pass over its events (:func:`scan_events`). ``fast``: plain
    values through the safe (C) loader; otherwise a round-trip document that keeps comments and line
    information. ``lines``: filled with the line of every node by path. Errors carry the parser's line."""
    try:
        found = scan_events(path, text)
        if lines is not None:
            lines.update(found)
        return _safe().load(text) if fast else _rt().load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        msg = " ".join(x for x in (exc.context, exc.problem) if x) or "YAML syntax error"
        raise FileProblem(path, "syntax", f"YAML syntax error: {msg}", line) from None
    except YAMLError as exc:
        raise FileProblem(path, "syntax", f"YAML error: {exc}") from None
    except RecursionError:
        raise FileProblem(path, "depth", "YAML nesting too deep") from None


def line_of(lines: dict[PathKey, int], path: Any) -> int | None:
    """The line of the node at ``path`` (keys/indexes, e.g. a jsonschema error's ``absolute_path``),
    or of its nearest ancestor that has one; None when nothing is known."""
    parts = tuple(str(p) for p in path)
    while True:
        if parts in lines:
            return lines[parts]
        if not parts:
            return None
        parts = parts[:-1]


def _not_a_file(mode: int) -> str | None:
    """What a non-regular file is, for the refusal message (None: a regular file)."""
    if stat.S_ISREG(mode):
        return None
    for test, name in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


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
    """The bytes of a regular file, at most MAX_FILE_BYTES + 1 of them (never reads a huge file whole).

    Only regular files are read: the path is checked with ``lstat`` (a symlink is not followed) before
    it is opened, and opened with ``O_NONBLOCK | O_NOFOLLOW`` and checked again with ``fstat``, so a FIFO
    swapped in meanwhile cannot block the reader. Raises FileProblem (``missing`` / ``not a file``)."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise FileProblem(path, "missing", "file not found (deleted?)") from None
    except OSError as exc:
        raise FileProblem(path, "missing", f"cannot be read: {exc.strerror}") from None
    what = _not_a_file(st.st_mode)
    if what is not None:
        target = f" to {os.readlink(path)}" if stat.S_ISLNK(st.st_mode) else ""
        raise FileProblem(
            path,
            "not a file",
            f"is {what}{target}; knob, rule and schema files must be regular files, so it is not read",
        )
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        raise FileProblem(path, "missing", "file not found (deleted?)") from None
    except OSError as exc:  # ELOOP: replaced by a symlink after the lstat
        raise FileProblem(path, "not a file", f"cannot be opened as a regular file: {exc.strerror}") from None
    try:
        what = _not_a_file(os.fstat(fd).st_mode)
        if what is not None:
            raise FileProblem(path, "not a file", f"is {what}; knob, rule and schema files must be regular files")
        chunks, left = [], MAX_FILE_BYTES + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except BlockingIOError:
        raise FileProblem(path, "not a file", "would block when read; not a regular file") from None
    finally:
        os.close(fd)


def read_yaml(path: Path, lines: dict[PathKey, int] | None = None) -> tuple[Any, str]:
    """(round-trip document, text) of a file; raises FileProblem. ``lines``: see :func:`parse_text`."""
    path = Path(path)
    text = decode(path, read_capped(path))
    return parse_text(path, text, lines=lines), text


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
    """Plain value -> ruamel node (lists of numbers in flow style, as people write them; others in block style)."""
    if isinstance(value, dict):
        m = CommentedMap()
        for k, v in value.items():
            m[k] = to_rt(v)
        return m
    if isinstance(value, list):
        s = CommentedSeq(to_rt(v) for v in value)
        # only lists of numbers go in flow style: the emitter wraps long strings inside a flow
        # sequence into plain scalars that no longer parse (a rule file's regex patterns did)
        if all(isinstance(v, (int, float)) for v in value):
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
