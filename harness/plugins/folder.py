"""Plug-in files in a knobs folder, the ones in force for a run, and every swap as a knob event.

Files it owns::

    knobs/plugins/<name>.py               a plug-in (name: lower-case letters, digits, _)
    knobs/plugins/.versions/<sha256>.py   every version that was written or put in force (revert reads it)
    knobs/plugins/.pending/<sha16>.json   author and reason of a CLI write a live run has not applied yet

A run (``harness.ppo.run_knobs``) calls :meth:`PluginFolder.poll` at every step boundary: a plug-in
whose bytes changed since the last poll goes through the gate (:mod:`harness.plugins.gate`) and is
put in force from that step, or refused; a refused version leaves the previous one in force (or the
default, when none was). A deleted file takes its plug-in out of force: the points go back to their
defaults. Each outcome is a knob event (``knob: plugins.<name>``, ``old``/``new``: the code's
sha256, null for no plug-in) with author and reason: a CLI write's (``eau knobs plugin set``,
``--author/--reason``), else a hand edit's. ``eau knobs revert <id>`` writes the code of ``old``
back (or removes the file when ``old`` is null); the run gates and applies it like any write.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from harness.io import yamlio
from harness.knobs.events import EventLog, KnobEvent, new_id
from harness.plugins.gate import RULE_CONFLICT, GateResult, code_sha, gate_plugin

PLUGINS = "plugins"
VERSIONS = ".versions"
PENDING = ".pending"
NAME_RE = re.compile(r"^[a-z_][a-z0-9_]{0,63}$")
RULE_FILE = "plugin file"
DELETED = "deleted"


def plugin_dir(knobs_dir: str | Path) -> Path:
    return Path(knobs_dir) / PLUGINS


def knob_name(stem: str) -> str:
    return f"{PLUGINS}.{stem}"


def check_name(stem: str) -> None:
    if not NAME_RE.match(stem):
        raise ValueError(
            f"plug-in name {stem!r}: use lower-case letters, digits and _ (a Python module name), at most 64"
        )


@dataclass
class InForce:
    """A plug-in version in force for a run."""

    stem: str
    sha: str
    source: str
    file: str
    points: list[str] = field(default_factory=list)
    step: int | None = None  # first step it was in force

    def entry(self) -> dict[str, Any]:
        return {"plugin": self.stem, "sha": self.sha, "file": self.file, "source": self.source}


class PluginFolder:
    """The plug-ins of one knobs folder (see the module docstring). ``log``: where events go (a
    callable, since a run's log moves into its run folder once that exists)."""

    def __init__(self, knobs_dir: str | Path, log: Callable[[], EventLog]):
        self.knobs_dir = Path(knobs_dir)
        self.dir = plugin_dir(knobs_dir)
        self._log = log
        self.in_force: dict[str, InForce] = {}
        self._seen: dict[str, str] = {}  # stem -> sha (or a problem marker) last processed
        self.version = 0  # increases with every swap
        self.start_note = "when the run started"  # how the first poll attributes the files it finds
        self._conflicted: set[str] = set()  # refused because another plug-in held one of their points

    # ------------------------------------------------------------------ reading
    def files(self) -> dict[str, Path]:
        if not self.dir.is_dir():
            return {}
        return {p.stem: p for p in sorted(self.dir.glob("*.py")) if NAME_RE.match(p.stem)}

    def entries(self) -> dict[str, dict[str, Any]]:
        """Override point -> the plug-in in force for it (what a knob snapshot carries)."""
        return {pt: pl.entry() for pl in self.in_force.values() for pt in pl.points}

    def summary(self) -> dict[str, Any]:
        """Plug-ins in force: ``{name: {sha256, points, file, since_step}}`` (for knobs_in_force.json)."""
        return {
            s: {"sha256": p.sha, "points": p.points, "file": p.file, "since_step": p.step}
            for s, p in sorted(self.in_force.items())
        }

    def others(self, stem: str) -> dict[str, list[str]]:
        return {s: p.points for s, p in self.in_force.items() if s != stem}

    def read_source(self, path: Path) -> str:
        return yamlio.decode(path, yamlio.read_capped(path))

    # ------------------------------------------------------------------ versions and attribution notes
    def archive(self, source: str) -> str:
        sha = code_sha(source)
        path = self.dir / VERSIONS / f"{sha}.py"
        if not path.exists():
            yamlio.atomic_write_text(path, source)
        return sha

    def version_source(self, sha: str) -> str | None:
        path = self.dir / VERSIONS / f"{sha}.py"
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None

    def _note_path(self, stem: str, sha: str | None) -> Path:
        key = hashlib.sha256(f"{stem}|{sha or DELETED}".encode()).hexdigest()[:16]
        return self.dir / PENDING / f"{key}.json"

    def _write_note(self, stem: str, sha: str | None, **att: Any) -> str:
        att.setdefault("id", new_id())
        att["time"] = time.time()
        yamlio.atomic_write_text(self._note_path(stem, sha), json.dumps(att))
        return att["id"]

    def _take_note(self, stem: str, sha: str | None) -> dict[str, Any] | None:
        path = self._note_path(stem, sha)
        try:
            att = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            return None
        path.unlink(missing_ok=True)
        return att if isinstance(att, dict) and att.get("author") and att.get("reason") else None

    def _event(self, **kw: Any) -> dict[str, Any]:
        return self._log().append(KnobEvent(**kw))

    # ------------------------------------------------------------------ the run's side
    def poll(
        self,
        step: int,
        records: Callable[[], Sequence[Mapping[str, Any]]] = lambda: (),
        *,
        current_step: int | None = None,
        first: bool = False,
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Gate and apply the plug-in files changed since the last poll; ``step``: the first step that
        runs with them. ``records``: the run's recent recorded episodes (read only when a gate needs
        them). ``first``: the run's first step boundary (files found then are attributed to the run's
        start unless a CLI write says otherwise). Returns the accepted and the refused events."""
        applied: list[dict[str, Any]] = []
        refused: list[dict[str, Any]] = []
        cache: list[Sequence[Mapping[str, Any]]] = []

        def recorded() -> Sequence[Mapping[str, Any]]:
            if not cache:
                try:
                    cache.append(list(records()))
                except Exception:  # noqa: BLE001 -- unreadable records: gate without a replay
                    cache.append([])
            return cache[0]

        files = self.files()
        for stem in sorted(set(files) | set(self.in_force) | set(self._seen)):
            try:
                self._poll_one(stem, files.get(stem), step, current_step, first, recorded, applied, refused)
            except Exception as exc:  # noqa: BLE001 -- a plug-in file must never stop the run
                self._seen[stem] = f"internal:{exc}"
                refused.append(
                    self._event(
                        knob=knob_name(stem),
                        status="rejected",
                        rule="internal error",
                        author="human",
                        reason=f"hand edit of {PLUGINS}/{stem}.py",
                        file=str(self.dir / f"{stem}.py"),
                        message=f"checking this plug-in failed ({type(exc).__name__}: {exc}); what is in force "
                        "stays (please report this as a harness bug)",
                        step_written=current_step,
                        source="watch",
                    )
                )
        if applied:
            self.version += 1
            for stem in self._conflicted - set(self.in_force):
                self._seen.pop(stem, None)  # refused for a point another plug-in held: gated again next time
            self._conflicted.clear()
        return applied, refused

    def _attribution(self, stem: str, sha: str | None, first: bool, current_step: int | None) -> dict[str, Any]:
        att = self._take_note(stem, sha)
        if att is not None:
            return {
                "author": att["author"],
                "reason": att["reason"],
                "source": att.get("source") or "cli",
                "ref": att.get("ref"),
                "step_written": att.get("step_written"),
                "id": att.get("id") or new_id(),
            }
        if first and sha is not None:
            return {
                "author": "system",
                "reason": f"plug-in {PLUGINS}/{stem}.py in the knobs folder {self.start_note}",
                "source": "system",
                "ref": None,
                "step_written": current_step,
                "id": new_id(),
            }
        what = "removal" if sha is None else "hand edit"
        return {
            "author": "human",
            "reason": f"{what} of {PLUGINS}/{stem}.py",
            "source": "watch",
            "ref": None,
            "step_written": current_step,
            "id": new_id(),
        }

    def _poll_one(
        self,
        stem: str,
        path: Path | None,
        step: int,
        current_step: int | None,
        first: bool,
        recorded: Callable[[], Sequence[Mapping[str, Any]]],
        applied: list[dict[str, Any]],
        refused: list[dict[str, Any]],
    ) -> None:
        knob, shown = knob_name(stem), str(self.dir / f"{stem}.py")
        old = self.in_force.get(stem)
        if path is None:  # deleted: the points go back to their defaults
            if self._seen.get(stem) == DELETED:
                return
            self._seen[stem] = DELETED
            if old is None:
                return
            att = self._attribution(stem, None, first, current_step)
            del self.in_force[stem]
            applied.append(
                self._event(
                    knob=knob,
                    status="accepted",
                    old=old.sha,
                    new=None,
                    file=shown,
                    message=f"plug-in removed: {', '.join(old.points)} back to the default from step {step}",
                    step_effective=step,
                    **att,
                )
            )
            return
        try:
            source = self.read_source(path)
        except yamlio.FileProblem as exc:
            marker = f"problem:{exc.kind}:{exc.message}"
            if self._seen.get(stem) == marker:
                return
            self._seen[stem] = marker
            att = self._attribution(stem, "?", first, current_step)
            refused.append(
                self._event(
                    knob=knob,
                    status="rejected",
                    rule=RULE_FILE,
                    old=old.sha if old else None,
                    file=shown,
                    line=exc.line,
                    message=f"{exc.message}; {self._stays(old)}",
                    **att,
                )
            )
            return
        sha = code_sha(source)
        if self._seen.get(stem) == sha:
            return
        self._seen[stem] = sha
        if old is not None and old.sha == sha:
            return
        att = self._attribution(stem, sha, first, current_step)
        res = gate_plugin(stem, source, shown, others=self.others(stem), records=recorded())
        if not res.ok:
            if res.rule == RULE_CONFLICT:
                self._conflicted.add(stem)
            refused.append(
                self._event(
                    knob=knob,
                    status="rejected",
                    rule=res.rule,
                    old=old.sha if old else None,
                    new=sha,
                    file=shown,
                    line=res.line,
                    message=f"{res.message}; {self._stays(old)}",
                    **att,
                )
            )
            return
        self.archive(source)
        self.in_force[stem] = InForce(stem, sha, source, shown, res.points, step)
        applied.append(
            self._event(
                knob=knob,
                status="accepted",
                old=old.sha if old else None,
                new=sha,
                file=shown,
                message=f"gate passed, in force from step {step}: {res.summary()}",
                step_effective=step,
                **att,
            )
        )

    @staticmethod
    def _stays(old: InForce | None) -> str:
        if old is None:
            return "no version of this plug-in is in force (the points keep their defaults)"
        return f"the version in force stays (sha256 {old.sha[:12]}, since step {old.step})"

    # ------------------------------------------------------------------ writes (CLI)
    def check(self, stem: str, source: str, records: Sequence[Mapping[str, Any]] = ()) -> GateResult:
        """The gate's verdict on a candidate as ``plugins/<stem>.py``; nothing written or logged.
        Points implemented by the folder's other plug-in files count as taken."""
        check_name(stem)
        others: dict[str, list[str]] = {}
        for other, path in self.files().items():
            if other == stem:
                continue
            try:
                txt = self.read_source(path)
            except yamlio.FileProblem:
                continue
            others[other] = _declared_points(txt)
        return gate_plugin(stem, source, str(self.dir / f"{stem}.py"), others=others, records=records)

    def write(
        self,
        stem: str,
        source: str,
        *,
        author: str,
        reason: str,
        step_written: int | None = None,
        run_live: bool = False,
        records: Sequence[Mapping[str, Any]] = (),
        source_kind: str = "cli",
        ref: str | None = None,
    ) -> tuple[bool, dict[str, Any], GateResult]:
        """Gate a new version of ``plugins/<stem>.py`` and write it (atomically) when it passes. With a
        live run the run gates it again at its next step boundary and logs the accepted event under the
        id returned here, with this author and reason; a refusal is logged here and leaves the file as
        it was. Returns (ok, event, gate result)."""
        check_name(stem)
        if not reason or not reason.strip():
            raise ValueError("a reason is required for every plug-in write (--reason TEXT)")
        path = self.dir / f"{stem}.py"
        old_sha = self.file_sha(path)
        res = self.check(stem, source, records)
        common = dict(
            knob=knob_name(stem),
            author=author,
            reason=reason,
            file=str(path),
            step_written=step_written,
            source=source_kind,
            ref=ref,
            old=old_sha,
            new=res.sha,
        )
        if not res.ok:
            ev = self._event(
                status="rejected",
                rule=res.rule,
                line=res.line,
                message=res.message + "; the file is unchanged",
                **common,
            )
            return False, ev, res
        if old_sha == res.sha:
            return (
                True,
                KnobEvent(status="accepted", message="unchanged: this code is already there", **common).to_dict(),
                res,
            )
        self.archive(source)
        if run_live:
            eid = self._write_note(
                stem,
                res.sha,
                author=author,
                reason=reason,
                step_written=step_written,
                source=source_kind,
                ref=ref,
            )
            yamlio.atomic_write_text(path, source)
            ev = KnobEvent(
                status="accepted",
                message=f"written; the live run gates it again and applies it at its next step boundary: {res.summary()}",
                id=eid,
                **common,
            ).to_dict()
            return True, ev, res
        yamlio.atomic_write_text(path, source)
        ev = self._event(status="accepted", applies="next_run", message=f"written: {res.summary()}", **common)
        return True, ev, res

    def remove(
        self,
        stem: str,
        *,
        author: str,
        reason: str,
        step_written: int | None = None,
        run_live: bool = False,
        source_kind: str = "cli",
        ref: str | None = None,
    ) -> dict[str, Any]:
        """Delete ``plugins/<stem>.py`` (its points go back to their defaults); the code stays in
        ``.versions/`` for a revert."""
        check_name(stem)
        path = self.dir / f"{stem}.py"
        old_sha = self.file_sha(path)
        common = dict(
            knob=knob_name(stem),
            author=author,
            reason=reason,
            file=str(path),
            step_written=step_written,
            source=source_kind,
            ref=ref,
            old=old_sha,
            new=None,
        )
        if old_sha is None:
            return self._event(status="rejected", rule=RULE_FILE, message=f"no plug-in file {path}", **common)
        self.archive(self.read_source(path))
        if run_live:
            eid = self._write_note(
                stem, None, author=author, reason=reason, step_written=step_written, source=source_kind, ref=ref
            )
            path.unlink()
            return KnobEvent(
                status="accepted",
                message="removed; the live run puts the defaults back at its next step boundary",
                id=eid,
                **common,
            ).to_dict()
        path.unlink()
        return self._event(status="accepted", applies="next_run", message="removed", **common)

    def revert(
        self,
        event: Mapping[str, Any],
        *,
        author: str,
        reason: str | None = None,
        step_written: int | None = None,
        run_live: bool = False,
        records: Sequence[Mapping[str, Any]] = (),
    ) -> tuple[bool, dict[str, Any]]:
        """Put back the code a plug-in had before ``event`` (an accepted ``plugins.<name>`` event): its
        ``old`` version from ``.versions/``, or no plug-in when ``old`` is null. Gated like any write."""
        stem = str(event["knob"]).split(".", 1)[1]
        reason = reason or f"revert {event['id']}"
        if event.get("old") is None:
            if self.file_sha(self.dir / f"{stem}.py") is None:
                return True, KnobEvent(
                    knob=knob_name(stem),
                    status="accepted",
                    author=author,
                    reason=reason,
                    source="revert",
                    ref=event["id"],
                    message="unchanged: there is no plug-in file to remove",
                ).to_dict()
            ev = self.remove(
                stem,
                author=author,
                reason=reason,
                step_written=step_written,
                run_live=run_live,
                source_kind="revert",
                ref=event["id"],
            )
            return ev["status"] == "accepted", ev
        source = self.version_source(event["old"])
        if source is None:
            raise KeyError(f"the code of {event['old'][:12]} is not in {self.dir / VERSIONS}; cannot revert")
        ok, ev, _ = self.write(
            stem,
            source,
            author=author,
            reason=reason,
            step_written=step_written,
            run_live=run_live,
            records=records,
            source_kind="revert",
            ref=event["id"],
        )
        return ok, ev

    def file_sha(self, path: Path) -> str | None:
        """The sha256 of a plug-in file's code (None when there is no readable file)."""
        try:
            return code_sha(self.read_source(path))
        except yamlio.FileProblem:
            return None


def _declared_points(source: str) -> list[str]:
    """The override point names a plug-in's source mentions as OVERRIDES keys (a cheap reading,
    without importing it; for conflicts between candidate files)."""
    m = re.search(r"OVERRIDES\s*=\s*\{(.*?)\}", source, re.S)
    return sorted(set(re.findall(r"[\"']([a-z_]+\.[a-z_]+)[\"']", m.group(1)))) if m else []
