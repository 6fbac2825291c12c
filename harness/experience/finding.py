"""One finding of the experience pool: a markdown file with YAML front matter.

A finding records one intervention and what it taught: which knobs it touched, the change, the
effect predicted before it was applied, the effect measured after the lag, and a verdict. The
front matter fields (all documented on :class:`Finding`) are what ``eau finding list/search`` read;
the markdown body holds the evidence and the reasoning for a human or a later meta-agent session.

File name: ``F-0001-short-title-slug.md``. A finding is never deleted; a wrong one is retracted
(``status: retracted`` with a reason), so later sessions see both the claim and its withdrawal.
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.io.text import not_utf8

VERDICTS = ("improved", "harmed", "inconclusive", "n/a")
STATUSES = ("active", "retracted")
AUTHORS = ("agent", "human")

ID_RE = re.compile(r"^F-(\d{4,})$")
FILE_RE = re.compile(r"^(F-\d{4,})(?:-[a-z0-9-]*)?\.md$")
# Knob names as the knob store and knob events spell them: <area>.<name>, rules.users.<gym>,
# rules.rewards.<file stem>.
KNOB_RE = re.compile(
    r"^(?:(?:env|user|reward|agent)\.[a-z][a-z0-9_]*|rules\.(?:users|rewards)\.[a-z0-9_][a-z0-9_.-]*)$"
)
TAG_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
RUN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
EVENT_RE = re.compile(r"^k-[0-9a-z]+$")
TITLE_MAX = 120

# Front matter keys in the order they are written (the order a reader scans them in).
FIELD_ORDER = (
    "id",
    "title",
    "status",
    "verdict",
    "run",
    "steps",
    "knobs",
    "change",
    "predicted",
    "measured",
    "tags",
    "events",
    "author",
    "created",
    "source",
    "retracted_reason",
    "retracted_time",
)


class FindingError(ValueError):
    """A finding field or file that is not valid; the message names the file/field, value and what is allowed."""


# Fields written as text into the finding file and INDEX.md (each must be encodable as UTF-8).
TEXT_FIELDS = (
    "title",
    "change",
    "run",
    "knobs",
    "predicted",
    "measured",
    "tags",
    "events",
    "author",
    "source",
    "retracted_reason",
    "body",
)


def check_text(text: Any, where: str) -> None:
    """FindingError when ``text`` (a str or None) cannot be written as UTF-8 (a byte that was not
    UTF-8 in an argument or on stdin); names the field, the character and the byte."""
    problem = not_utf8(text) if isinstance(text, str) else None
    if problem:
        raise FindingError(f"{where} is not valid text: {problem}; findings are UTF-8 text")


def now_iso() -> str:
    """Current UTC time as ``2026-12-02T12:00:00Z``."""
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def format_id(number: int) -> str:
    """``7 -> 'F-0007'``."""
    return f"F-{number:04d}"


def id_number(fid: str) -> int:
    """``'F-0007' -> 7``; FindingError for anything else."""
    m = ID_RE.match(fid or "")
    if not m:
        raise FindingError(f"finding id {fid!r} is not valid; ids look like F-0001")
    return int(m.group(1))


def slugify(title: str, limit: int = 48) -> str:
    """A file-name slug of a title: lowercase words joined by hyphens, at most ``limit`` characters.

    >>> slugify("max_reveals ignores repeats!")
    'max-reveals-ignores-repeats'
    """
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
    if len(slug) > limit:
        slug = slug[:limit].rsplit("-", 1)[0] or slug[:limit]
    return slug or "finding"


def parse_steps(value: Any, where: str = "steps") -> list[int] | None:
    """Steps as ``[first, last]`` from ``'120:180'``, ``'120-180'``, ``'150'``, ``150`` or a 2-list.

    >>> parse_steps("120:180"), parse_steps("150"), parse_steps(None)
    ([120, 180], [150, 150], None)
    """
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise FindingError(f"{where}: {value!r} is not a step range; use FIRST:LAST, e.g. 120:180, or one step")
    if isinstance(value, int):
        pair = [value, value]
    elif (
        isinstance(value, (list, tuple))
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        pair = [int(value[0]), int(value[1])]
    elif isinstance(value, str) and re.fullmatch(r"\s*\d+\s*(?:[:-]\s*\d+\s*)?", value):
        nums = [int(x) for x in re.split(r"[:-]", value)]
        pair = [nums[0], nums[-1]]
    else:
        raise FindingError(f"{where}: {value!r} is not a step range; use FIRST:LAST, e.g. 120:180, or one step")
    if pair[0] < 0 or pair[1] < pair[0]:
        raise FindingError(f"{where}: {value!r} must be non-negative with FIRST <= LAST")
    return pair


def _str_list(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise FindingError(f"{where}: {value!r} must be a list of strings")
    out: list[str] = []
    for v in value:  # comma-separated items are allowed on the CLI: --tag a,b
        out += [p.strip() for p in v.split(",") if p.strip()]
    return list(dict.fromkeys(out))  # drop repeats, keep order


def _opt_text(value: Any, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise FindingError(f"{where}: {value!r} must be text")
    return value.strip()


def _time_text(value: Any, where: str) -> str:
    # A hand-written unquoted timestamp comes back from YAML as a datetime; keep it as ISO text.
    if isinstance(value, (_dt.datetime, _dt.date)):
        return value.isoformat().replace("+00:00", "Z")
    return _opt_text(value, where)


@dataclass
class Finding:
    """One lesson about an intervention (front matter fields; ``body`` is the markdown text)."""

    id: str
    """``F-0001``: unique, assigned in order by the pool (never reused, even after a retraction)."""
    title: str
    """One line, at most 120 characters: the lesson, e.g. 'raising facts_per_reply to 3 leaks references'."""
    verdict: str
    """improved | harmed | inconclusive | n/a (n/a: a diagnosis or a control's limitation, no measured change)."""
    change: str
    """What was changed, e.g. 'user.facts_per_reply 1 -> 3 (all gyms)' or 'repaired the question counter'."""
    status: str = "active"
    """active | retracted (kept on disk; a retracted finding says why in retracted_reason)."""
    run: str | None = None
    """Run id the evidence comes from (a folder name under runs/), or a label such as 'paper-colbench'."""
    steps: list[int] | None = None
    """[first, last] training steps the evidence covers."""
    knobs: list[str] = field(default_factory=list)
    """Knobs or rule files involved, spelled as in knob events: env.max_steps, rules.users.colbench."""
    predicted: str = ""
    """The effect predicted before the change was applied (metric, direction, size, lag)."""
    measured: str = ""
    """The effect measured after the lag (eau effect: difference, noise floor, windows); required unless verdict is n/a."""
    tags: list[str] = field(default_factory=list)
    """Lowercase keywords: symptoms (deadlock, leakage), gyms (colbench), components (user, reward)."""
    events: list[str] = field(default_factory=list)
    """Knob event ids (k-...) of the writes the finding is about (eau effect --event ID)."""
    author: str = "agent"
    """agent | human."""
    created: str = ""
    """ISO 8601 UTC time the finding was recorded."""
    source: str = ""
    """Where the finding comes from when not a run of this harness (e.g. the method paper, with section)."""
    retracted_reason: str = ""
    """Why the finding was retracted (status retracted only)."""
    retracted_time: str = ""
    """When it was retracted (status retracted only)."""
    body: str = ""
    """Markdown: evidence (commands and numbers), reasoning, what to try or avoid next time."""
    path: Path | None = None
    """The file the finding was read from or written to (not part of the front matter)."""

    def validate(self, where: str = "finding") -> Finding:
        """Check every field; raises FindingError naming the field, the value and what is allowed."""
        try:
            id_number(self.id)
        except FindingError as exc:
            raise FindingError(f"{where}: {exc}") from None
        for name in TEXT_FIELDS:
            value = getattr(self, name)
            for text in value if isinstance(value, list) else [value]:
                check_text(text, f"{where}: {name}")
        if not isinstance(self.title, str) or not self.title.strip():
            raise FindingError(f"{where}: title is required (one line saying what was learned)")
        if "\n" in self.title.strip() or len(self.title.strip()) > TITLE_MAX:
            raise FindingError(
                f"{where}: title must be one line of at most {TITLE_MAX} characters "
                f"(got {len(self.title.strip())}); put details in the body"
            )
        if self.verdict not in VERDICTS:
            raise FindingError(f"{where}: verdict {self.verdict!r} is not allowed; use one of {', '.join(VERDICTS)}")
        if self.status not in STATUSES:
            raise FindingError(f"{where}: status {self.status!r} is not allowed; use one of {', '.join(STATUSES)}")
        if self.author not in AUTHORS:
            raise FindingError(f"{where}: author {self.author!r} is not allowed; use one of {', '.join(AUTHORS)}")
        if not self.change.strip():
            raise FindingError(f"{where}: change is required (what was changed, or the diagnosis for verdict n/a)")
        if self.verdict != "n/a" and not self.measured.strip():
            raise FindingError(
                f"{where}: measured is required with verdict {self.verdict!r} "
                f"(the effect eau effect reported); use verdict n/a for a diagnosis without a measured change"
            )
        if self.run is not None and not RUN_RE.match(self.run):
            raise FindingError(f"{where}: run {self.run!r} is not a run id (letters, digits, '.', '_', '-')")
        for k in self.knobs:
            if not KNOB_RE.match(k):
                raise FindingError(
                    f"{where}: knob {k!r} is not a knob name; use <area>.<name> with area "
                    f"env|user|reward|agent (e.g. user.max_reveals), rules.users.<gym> or rules.rewards.<name>"
                )
        for t in self.tags:
            if not TAG_RE.match(t):
                raise FindingError(
                    f"{where}: tag {t!r} is not allowed; tags are lowercase words "
                    f"(letters, digits, '_', '-', '.'), e.g. deadlock"
                )
        for e in self.events:
            if not EVENT_RE.match(e):
                raise FindingError(f"{where}: event {e!r} is not a knob event id (k-...; see eau knobs history)")
        if self.status == "retracted" and not self.retracted_reason.strip():
            raise FindingError(f"{where}: a retracted finding needs retracted_reason")
        if self.status == "active" and self.retracted_reason.strip():
            raise FindingError(f"{where}: retracted_reason is set but status is active; set status: retracted")
        return self

    @property
    def number(self) -> int:
        return id_number(self.id)

    def file_name(self) -> str:
        return f"{self.id}-{slugify(self.title)}.md"

    def front_matter(self) -> dict[str, Any]:
        """The front matter as an ordered mapping; empty optional fields are left out."""
        raw = {
            "id": self.id,
            "title": self.title.strip(),
            "status": self.status,
            "verdict": self.verdict,
            "run": self.run,
            "steps": self.steps,
            "knobs": self.knobs,
            "change": self.change,
            "predicted": self.predicted,
            "measured": self.measured,
            "tags": self.tags,
            "events": self.events,
            "author": self.author,
            "created": self.created,
            "source": self.source,
            "retracted_reason": self.retracted_reason,
            "retracted_time": self.retracted_time,
        }
        always = {"id", "title", "status", "verdict", "knobs", "change", "predicted", "measured", "tags"}
        return {k: raw[k] for k in FIELD_ORDER if k in always or raw[k] not in (None, "", [])}

    def to_json(self, body: bool = True) -> dict[str, Any]:
        """All fields (with ``path``), for ``--json`` output."""
        out = {
            **self.front_matter(),
            "run": self.run,
            "steps": self.steps,
            "events": self.events,
            "author": self.author,
            "created": self.created,
            "source": self.source,
            "path": str(self.path) if self.path else None,
        }
        if self.status == "retracted":
            out["retracted_reason"], out["retracted_time"] = self.retracted_reason, self.retracted_time
        if body:
            out["body"] = self.body
        return out

    def render(self) -> str:
        """The file text: ``---`` front matter ``---`` then the body."""
        fm = yaml.safe_dump(
            self.front_matter(), sort_keys=False, allow_unicode=True, width=100, default_flow_style=None
        )
        body = self.body.strip("\n")
        return f"---\n{fm}---\n\n{body}\n" if body else f"---\n{fm}---\n"


def split_front_matter(text: str, where: str) -> tuple[dict[str, Any], str]:
    """(front matter mapping, body) of a markdown file that starts with a ``---`` block."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        raise FindingError(f"{where}: must start with a '---' line opening the YAML front matter")
    for i in range(1, len(lines)):
        if lines[i].strip() == "---":
            head, body = "".join(lines[1:i]), "".join(lines[i + 1 :])
            break
    else:
        raise FindingError(f"{where}: the front matter opened on line 1 is never closed by a '---' line")
    try:
        fm = yaml.safe_load(head)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 2}" if mark is not None else ""
        raise FindingError(f"{where}:{line} front matter is not valid YAML: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(fm, dict):
        raise FindingError(f"{where}: front matter must be a mapping of fields (id, title, verdict, ...)")
    return fm, body


def from_mapping(fm: dict[str, Any], body: str = "", where: str = "finding", path: Path | None = None) -> Finding:
    """A validated Finding from front-matter fields; unknown fields are errors (they would be lost on rewrite)."""
    unknown = set(fm) - set(FIELD_ORDER)
    if unknown:
        raise FindingError(f"{where}: unknown field(s) {sorted(unknown)}; known fields: {', '.join(FIELD_ORDER)}")
    for req in ("id", "title", "verdict", "change"):
        if fm.get(req) in (None, ""):
            raise FindingError(f"{where}: field {req!r} is missing")
    run = fm.get("run")
    finding = Finding(
        id=str(fm["id"]),
        title=_opt_text(fm["title"], f"{where}: title"),
        verdict=str(fm["verdict"]),
        change=_opt_text(fm["change"], f"{where}: change"),
        status=str(fm.get("status") or "active"),
        run=None if run in (None, "") else str(run),
        steps=parse_steps(fm.get("steps"), f"{where}: steps"),
        knobs=_str_list(fm.get("knobs"), f"{where}: knobs"),
        predicted=_opt_text(fm.get("predicted"), f"{where}: predicted"),
        measured=_opt_text(fm.get("measured"), f"{where}: measured"),
        tags=[t.lower() for t in _str_list(fm.get("tags"), f"{where}: tags")],
        events=_str_list(fm.get("events"), f"{where}: events"),
        author=str(fm.get("author") or "agent"),
        created=_time_text(fm.get("created"), f"{where}: created"),
        source=_opt_text(fm.get("source"), f"{where}: source"),
        retracted_reason=_opt_text(fm.get("retracted_reason"), f"{where}: retracted_reason"),
        retracted_time=_time_text(fm.get("retracted_time"), f"{where}: retracted_time"),
        body=body.strip("\n"),
        path=path,
    )
    return finding.validate(where)


def read_finding(path: Path) -> Finding:
    """Parse and validate one finding file; FindingError names the file and the field."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise FindingError(f"{path}: not UTF-8 text") from None
    fm, body = split_front_matter(text, str(path))
    finding = from_mapping(fm, body, str(path), path)
    m = FILE_RE.match(path.name)
    if m and m.group(1) != finding.id:
        raise FindingError(f"{path}: front matter id {finding.id} does not match the file name ({m.group(1)})")
    return finding
