"""Loader of ColBench backend-programming JSONL files (SWEET-RL's format).

One JSON object per line with:

* ``problem_description`` (str): what the agent sees first; ends with the function signature;
* ``ground_truth`` (str): the reference implementation (hidden from the agent);
* ``hidden_information`` (str): what the simulated collaborator holds (in the public test file,
  identical to ``ground_truth``); facts are extracted from it;
* ``test_cases`` (object): ``{"test1": "f(...)", ...}``; each value is a call expression whose
  expected result is what the reference returns for the same call.

Blank lines are skipped. A malformed line raises :class:`ColbenchDataError` naming the file, the
line and the field. Files are cached by path, size and modification time.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path

REQUIRED_FIELDS = ("problem_description", "ground_truth", "test_cases")
_TEST_NUM_RE = re.compile(r"(\d+)$")
_SIG_RE = re.compile(r"def\s+([A-Za-z_]\w*)\s*\(")


class ColbenchDataError(ValueError):
    """A ColBench JSONL file is unreadable or malformed; the message names file, line and field."""


@dataclass(frozen=True)
class ColbenchRecord:
    """One task of a ColBench JSONL file.

    index: 0-based position among the file's non-blank lines (what ``eau tasks check`` reports).
    line: 1-based line number in the file.
    test_names / tests: the ``test_cases`` names and call expressions, in test-number order.
    """

    index: int
    line: int
    problem_description: str
    ground_truth: str
    hidden_information: str
    test_names: tuple[str, ...]
    tests: tuple[str, ...]

    @property
    def content_key(self) -> str:
        """Identity of the task's content (decides its split)."""
        h = hashlib.sha256()
        for part in (self.problem_description, self.ground_truth, *self.tests):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()

    @property
    def function_name(self) -> str | None:
        """The function the task asks for: from the signature at the end of the description, else
        the reference's first ``def``."""
        found = _SIG_RE.findall(self.problem_description)
        if found:
            return found[-1]
        m = _SIG_RE.search(self.ground_truth)
        return m.group(1) if m else None


def _test_order(name: str) -> tuple[int, str]:
    m = _TEST_NUM_RE.search(name)
    return (int(m.group(1)) if m else 1 << 30, name)


def parse_record(obj: object, where: str, index: int, line: int) -> ColbenchRecord:
    """Validate one decoded JSON line; ``where`` prefixes error messages (``file:line``)."""
    if not isinstance(obj, dict):
        raise ColbenchDataError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    for name in REQUIRED_FIELDS:
        if name not in obj:
            raise ColbenchDataError(f"{where}: missing field {name!r} (required: {', '.join(REQUIRED_FIELDS)})")
    for name in ("problem_description", "ground_truth"):
        if not isinstance(obj[name], str) or not obj[name].strip():
            raise ColbenchDataError(f"{where}: field {name!r} must be a non-empty string, got {obj[name]!r:.80}")
    hidden = obj.get("hidden_information", obj["ground_truth"])
    if not isinstance(hidden, str):
        raise ColbenchDataError(f"{where}: field 'hidden_information' must be a string, got {type(hidden).__name__}")
    tests = obj["test_cases"]
    if not isinstance(tests, dict) or not tests:
        raise ColbenchDataError(
            f'{where}: field \'test_cases\' must be a non-empty object {{"test1": "f(...)", ...}}, got {tests!r:.80}'
        )
    for k, v in tests.items():
        if not isinstance(v, str) or not v.strip():
            raise ColbenchDataError(
                f"{where}: test_cases[{k!r}] must be a non-empty call expression string, got {v!r:.80}"
            )
    names = tuple(sorted(tests, key=_test_order))
    return ColbenchRecord(
        index=index,
        line=line,
        problem_description=obj["problem_description"],
        ground_truth=obj["ground_truth"],
        hidden_information=hidden or obj["ground_truth"],
        test_names=names,
        tests=tuple(tests[n] for n in names),
    )


_CACHE: dict[tuple[str, int, int], tuple[ColbenchRecord, ...]] = {}
_LOCK = threading.Lock()


def load_colbench(path: str | Path) -> tuple[ColbenchRecord, ...]:
    """All records of a ColBench JSONL file (cached while the file is unchanged)."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError as exc:
        raise ColbenchDataError(f"{p}: cannot read the ColBench file ({exc.strerror or exc})") from None
    if not p.is_file():
        raise ColbenchDataError(f"{p}: not a file")
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    with _LOCK:
        if key in _CACHE:
            return _CACHE[key]
    records = []
    with p.open("rb") as fh:
        for lineno, raw_bytes in enumerate(fh, start=1):
            where = f"{p}:{lineno}"
            try:
                raw = raw_bytes.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ColbenchDataError(
                    f"{where}: not UTF-8 (byte 0x{raw_bytes[exc.start]:02x} at column {exc.start + 1})"
                ) from None
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise ColbenchDataError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
            except RecursionError:  # e.g. 200,000 nested brackets
                raise ColbenchDataError(f"{where}: JSON nested too deeply") from None
            records.append(parse_record(obj, where, len(records), lineno))
    if not records:
        raise ColbenchDataError(f"{p}: no tasks (the file has no non-blank lines)")
    out = tuple(records)
    with _LOCK:
        _CACHE[key] = out
    return out
