"""The experience pool: a folder of finding files plus a generated ``INDEX.md``.

Layout (``--pool-dir``, env ``EAU_POOL_DIR``, default ``./experience_pool``)::

    experience_pool/
      README.md                      what the pool is (hand-written, never touched here)
      INDEX.md                       generated on every change; do not edit
      F-0001-<slug>.md ...           one finding each (see harness.experience.finding)
      .lock                          advisory lock held while a finding is added or retracted

Several meta-agent sessions or humans may write at once: ``add`` and ``retract`` hold an exclusive
``flock`` on ``.lock`` while they pick the next id and write, and every file is written to a temp
file and renamed into place, so readers never see half a finding. A change is all or nothing: the
finding and the INDEX.md that lists it are both rendered and checked before either is written, and
a write that fails half-way (disk full, permissions) puts back what was there before, so a failed
``add`` leaves neither file and a failed ``retract`` leaves the finding active in both.
"""

from __future__ import annotations

import contextlib
import fcntl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from harness.experience.finding import (
    FILE_RE,
    Finding,
    FindingError,
    format_id,
    from_mapping,
    id_number,
    now_iso,
    read_finding,
    split_front_matter,
)
from harness.experience.index import render_index
from harness.io.yamlio import atomic_write_text

INDEX_NAME = "INDEX.md"
LOCK_NAME = ".lock"
DEFAULT_DIR = "experience_pool"


class FindingNotFound(KeyError):
    """No finding with that id in the pool."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0])


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temp file in the same folder and a rename."""
    atomic_write_text(path, text)


@dataclass
class PoolContents:
    """What a read of the pool found: valid findings (by id) and files that could not be read."""

    findings: list[Finding] = field(default_factory=list)
    problems: list[dict[str, str]] = field(default_factory=list)  # {"file", "message"}


class ExperiencePool:
    """Read, add, retract and index the findings of one pool folder."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    @property
    def index_path(self) -> Path:
        return self.root / INDEX_NAME

    def exists(self) -> bool:
        return self.root.is_dir()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / LOCK_NAME, "a+") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)

    def _files(self) -> list[Path]:
        if not self.exists():
            return []
        return sorted(p for p in self.root.iterdir() if p.is_file() and FILE_RE.match(p.name))

    def read(self) -> PoolContents:
        """Every finding file, parsed; unreadable ones are reported (file and reason), not dropped silently."""
        out = PoolContents()
        seen: dict[str, Path] = {}
        for path in self._files():
            try:
                f = read_finding(path)
            except FindingError as exc:
                out.problems.append({"file": str(path), "message": str(exc)})
                continue
            if f.id in seen:
                out.problems.append({"file": str(path), "message": f"{path}: id {f.id} is also used by {seen[f.id]}"})
                continue
            seen[f.id] = path
            out.findings.append(f)
        out.findings.sort(key=lambda f: f.number)
        return out

    def next_id(self) -> str:
        """The next free id: one more than the highest id on disk (unreadable files included)."""
        highest = 0
        for path in self._files():
            m = FILE_RE.match(path.name)
            if m:
                highest = max(highest, id_number(m.group(1)))
        return format_id(highest + 1)

    def get(self, fid: str) -> Finding:
        """The finding ``fid``; FindingNotFound names the pool and the known ids."""
        id_number(fid)  # a malformed id is a FindingError, not "not found"
        contents = self.read()
        for f in contents.findings:
            if f.id == fid:
                return f
        for p in contents.problems:
            if Path(p["file"]).name.startswith(fid + "-") or Path(p["file"]).name == fid + ".md":
                raise FindingError(p["message"])
        known = ", ".join(f.id for f in contents.findings[-10:]) or "none"
        raise FindingNotFound(f"no finding {fid} in {self.root} (latest ids: {known})")

    def add(self, finding: Finding) -> Finding:
        """Give ``finding`` the next id, validate it, write its file and regenerate INDEX.md (both or
        neither; FindingError before anything is written when a field is invalid)."""
        finding.validate("new finding")  # before the pool folder is even made
        with self._locked():
            finding.id = self.next_id()
            finding.created = finding.created or now_iso()
            finding.status = "active"
            finding.validate("new finding")
            path = self.root / finding.file_name()
            finding.path = path
            self._commit(path, finding.render())
        return finding

    def retract(self, fid: str, reason: str, when: str | None = None) -> Finding:
        """Mark ``fid`` retracted with ``reason`` (the file stays); regenerate INDEX.md (both or neither)."""
        if not reason or not reason.strip():
            raise FindingError("retract: --reason is required (why the finding no longer holds)")
        with self._locked():
            f = self.get(fid)
            if f.status == "retracted":
                raise FindingError(f"{fid} is already retracted ({f.retracted_time}: {f.retracted_reason})")
            f.status, f.retracted_reason, f.retracted_time = "retracted", reason.strip(), when or now_iso()
            f.validate(str(f.path))
            assert f.path is not None  # read from disk by get()
            self._commit(f.path, f.render())
        return f

    def _commit(self, path: Path, text: str) -> None:
        """Write finding file ``path`` and the INDEX.md that includes it, all or nothing. The index
        is rendered from the pool as it will be (the new text parsed back, as a later read would),
        and both texts are encoded before either file is touched; if the second write fails, the
        first file is put back as it was (or removed when it was new)."""
        fm, body = split_front_matter(text, str(path))
        written = from_mapping(fm, body, str(path), path)
        contents = self.read()
        findings = sorted([f for f in contents.findings if f.path != path] + [written], key=lambda f: f.number)
        index = render_index(findings, [p for p in contents.problems if p["file"] != str(path)], self.root)
        for target, t in ((path, text), (self.index_path, index)):
            try:
                t.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise FindingError(
                    f"{target}: cannot be written as UTF-8 ({exc.reason} at character {exc.start})"
                ) from None
        before = path.read_text(encoding="utf-8") if path.exists() else None
        atomic_write(path, text)
        try:
            atomic_write(self.index_path, index)
        except BaseException:
            if before is None:
                path.unlink(missing_ok=True)
            else:
                atomic_write(path, before)
            raise

    def _write_index(self) -> PoolContents:
        contents = self.read()
        atomic_write(self.index_path, render_index(contents.findings, contents.problems, self.root))
        return contents

    def write_index(self) -> PoolContents:
        """Regenerate INDEX.md from the files on disk (after a hand edit); returns what was read."""
        with self._locked():
            return self._write_index()

    def index_is_current(self) -> bool:
        """True when INDEX.md equals what the files on disk generate."""
        contents = self.read()
        want = render_index(contents.findings, contents.problems, self.root)
        return self.index_path.is_file() and self.index_path.read_text(encoding="utf-8") == want


def filter_findings(
    findings: list[Finding],
    status: str | None = "active",
    tags: list[str] | None = None,
    knob: str | None = None,
    verdict: str | None = None,
    run: str | None = None,
) -> list[Finding]:
    """Findings passing every filter given.

    status: ``active`` | ``retracted`` | None/``all``. tags: all must be present. knob: an exact knob
    name, an area prefix ending in '.' (``user.``), or a bare knob name (``max_reveals`` matches
    ``user.max_reveals``). verdict, run: exact.
    """
    out = []
    for f in findings:
        if status not in (None, "all") and f.status != status:
            continue
        if tags and not set(t.lower() for t in tags) <= set(f.tags):
            continue
        if knob and not any(
            k == knob or (knob.endswith(".") and k.startswith(knob)) or k.split(".")[-1] == knob for k in f.knobs
        ):
            continue
        if verdict and f.verdict != verdict:
            continue
        if run and f.run != run:
            continue
        out.append(f)
    return out
