"""The knob store: the values in force, the one validation path every write goes through, the event log.

Files it owns in a knobs folder::

    <area>.yaml                    area = env | user | reward | agent (one knob per key)
    schema/<area>.schema.json      one JSON Schema per area (harness keywords: harness/knobs/schema.py)
    schema/user_rules.schema.json  schema of rules/users/<gym>.yaml
    schema/reward_rules.schema.json schema of rules/rewards/<stem>.yaml
    rules/users/<gym>.yaml         symbolic-user rules of a gym
    rules/rewards/<stem>.yaml      reward rules
    .pending/                      attributions of CLI writes awaiting a live run (git-ignored)
    .history/knob_events.jsonl     events of writes made while no run was live (git-ignored)

How writes flow:

* ``set`` (CLI or API) validates a change against the values in force, then writes the file
  atomically (comments and layout kept). When a run is live it leaves the *accepting* to the run
  (and an attribution note so the run logs the right author and reason); otherwise it logs the
  accepted event itself. A refused ``set`` leaves the file untouched and logs the refusal.
* A hand edit is noticed by the watcher (``harness.knobs.watcher``) and queued; ``poll(step,
  metrics)`` at a step boundary validates each changed file through the same checks and applies
  what passes. A refused edit leaves the last valid value in force; its event names the file, the
  line and the rule. A later fixing edit is accepted.

What every value must be, whatever the path (hand edit, ``set``, preset): finite numbers only (in
lists, per-gym cells and rule values too), each element in range, clip bounds ordered, per-gym keys
``default`` or gym names, rule names unique across files, and a value this run can work with
(``harness.knobs.run_checks``). Files are read bounded (``harness.io.yamlio``: regular files only,
size, depth, alias expansion); an unexpected error while checking a file is a refusal of that file,
never an exception out of ``poll``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from harness.io import jsonl, yamlio
from harness.knobs.checks import check_change
from harness.knobs.events import AUTHORS, EventLog, KnobEvent, new_id, now_iso
from harness.knobs.folder import upgrade_hint
from harness.knobs.rule_checks import rule_problem
from harness.knobs.run_checks import RunFacts, run_refusal
from harness.knobs.schema import (
    RULE_MISSING,
    RULE_RANGE,
    RULE_REQUIRES,
    RULE_SCHEMA,
    RULE_UNKNOWN,
    AreaSchema,
    KnobSpec,
    Refusal,
    SchemaProblem,
    cells,
    json_line,
    load_area_schema,
    non_finite,
    parse_area_schema,
    read_schema_json,
    schema_from_bytes,
    schema_path,
    show_path,
    validate_value,
)
from harness.knobs.snapshot import AREAS, DEFAULT_KEY, KnobSnapshot, resolve

RULE_KINDS = ("users", "rewards")
RULE_SCHEMAS = {"users": "user_rules.schema.json", "rewards": "reward_rules.schema.json"}
RULE_INTERNAL = "internal error"


def file_key(path: Path) -> Path:
    """A knob file's identity: its folder resolved, its own name kept (a symlink in place of a knob
    file is that file, refused as such, never the file it points to)."""
    path = Path(os.path.abspath(path))
    return path.parent.resolve() / path.name


def canonical_json(value: Any) -> str:
    """JSON of a value with every mapping key as a string, sorted (mixed key types cannot be sorted)."""

    def canon(v: Any) -> Any:
        if isinstance(v, Mapping):
            return {str(k): canon(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [canon(x) for x in v]
        return v

    return json.dumps(canon(value), sort_keys=True, default=str)


class KnobError(Exception):
    """Invalid knob files at load time; ``problems`` lists every one (dicts with file, line, rule, message)."""

    def __init__(self, problems: list[dict[str, Any]], hint: str | None = None):
        self.problems = problems
        lines = [
            f"{p['file']}" + (f":{p['line']}" if p.get("line") else "") + f": [{p['rule']}] {p['message']}"
            for p in problems
        ]
        super().__init__("invalid knob files:\n  " + "\n  ".join(lines) + (f"\n{hint}" if hint else ""))


class UnknownKnob(KeyError):
    def __init__(self, name: str, known: Sequence[str]):
        super().__init__(name)
        self.name = name
        self.message = f"unknown knob {name!r}; knob names are <area>.<name> with area in {', '.join(AREAS)}" + (
            f" (e.g. {', '.join(sorted(known)[:4])}, ...)" if known else ""
        )

    def __str__(self) -> str:
        return self.message


@dataclass
class WriteResult:
    """Outcome of ``set``/``revert``/``add_knob``: the logged event(s) and whether it is in force now."""

    ok: bool
    events: list[dict[str, Any]]
    pending: bool = False  # written to the file; a live run will apply it at its next step boundary

    @property
    def event(self) -> dict[str, Any]:
        return self.events[-1]


@dataclass
class PollResult:
    applied: list[dict[str, Any]] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)
    next_run: list[dict[str, Any]] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.applied)


def _sha(text: str | bytes) -> str:
    data = text.encode("utf-8") if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()[:16]


def _classify(knobs_dir: Path, path: Path) -> tuple[str, str] | None:
    """(kind, key) of a path in the knobs folder: ('area', env) / ('schema', env) /
    ('rules', 'users/travel') / ('rule_schema', 'users'); None for anything else (swap files, ...)."""
    try:
        rel = file_key(path).relative_to(knobs_dir.resolve())
    except (ValueError, OSError):
        return None
    parts = rel.parts
    if len(parts) == 1 and parts[0].endswith(".yaml") and parts[0][:-5] in AREAS:
        return "area", parts[0][:-5]
    if len(parts) == 2 and parts[0] == "schema":
        for area in AREAS:
            if parts[1] == f"{area}.schema.json":
                return "schema", area
        for kind, fname in RULE_SCHEMAS.items():
            if parts[1] == fname:
                return "rule_schema", kind
        return None
    if (
        len(parts) == 3
        and parts[0] == "rules"
        and parts[1] in RULE_KINDS
        and parts[2].endswith(".yaml")
        and not parts[2].startswith(".")
        and len(parts[2]) > 5
    ):
        return "rules", f"{parts[1]}/{parts[2][:-5]}"
    return None


def changed_cells(old_raw: Any, new_raw: Any) -> list[tuple[str | None, Any, Any]]:
    """The cells (``None`` = the global/default value, else a gym) whose effective value differs
    between two raw values of a knob: ``[(gym, old, new), ...]``, the default first."""
    old_cells, new_cells = cells(old_raw), cells(new_raw)
    out = []
    for g in sorted(set(old_cells) | set(new_cells), key=lambda x: (x is not None, x or "")):
        old_v = resolve(old_raw, g) if g is not None else old_cells.get(None)
        new_v = resolve(new_raw, g) if g is not None else new_cells.get(None)
        if old_v != new_v:
            out.append((g, old_v, new_v))
    return out


class KnobStore:
    """Values in force for one knobs folder (see the module docstring)."""

    def __init__(
        self,
        knobs_dir: str | Path,
        *,
        events_path: str | Path | None = "auto",
        run_gyms: Sequence[str] | None = None,
        debounce_s: float = 0.2,
    ):
        """``events_path``: the knob event log ("auto": ``<knobs>/.history/knob_events.jsonl``; None: in
        memory only). ``run_gyms``: the gyms of the run this store serves (scope checks); None outside a run."""
        self.dir = Path(knobs_dir)
        self.log = EventLog(self.dir / ".history" / "knob_events.jsonl" if events_path == "auto" else events_path)
        self.run_gyms = list(run_gyms) if run_gyms is not None else None
        self.debounce_s = debounce_s
        self.live_run = False  # True inside a trainer: this store applies writes to a run
        self.current_step: int | None = None  # step in progress (set by the trainer)
        self.run_facts: RunFacts | None = None  # the live run's config facts (harness.knobs.run_checks)
        self.schemas: dict[str, AreaSchema] = {}
        self.rule_validators: dict[str, Draft202012Validator | None] = {}
        self.in_force: dict[str, dict[str, Any]] = {}
        self.rules: dict[str, dict[str, Any]] = {"users": {}, "rewards": {}}
        self.next_run: dict[str, Any] = {}  # accepted non-hot values waiting for the next run
        self.version = 0
        self._file_view: dict[Path, tuple[str | None, Any]] = {}  # path -> (sha, plain value) last processed
        self._dirty: dict[Path, float] = {}
        self._lock = threading.Lock()
        self._snapshot: KnobSnapshot | None = None
        problems = self._load_all()
        if problems:
            raise KnobError(problems, upgrade_hint(self.dir))

    # ------------------------------------------------------------------ loading
    def _area_path(self, area: str) -> Path:
        return self.dir / f"{area}.yaml"

    def _load_all(self) -> list[dict[str, Any]]:
        problems: list[dict[str, Any]] = []
        for area in AREAS:
            try:
                self.schemas[area] = load_area_schema(self.dir, area)
                self._remember_bytes(schema_path(self.dir, area))
            except SchemaProblem as exc:
                problems.append(
                    {
                        "file": str(schema_path(self.dir, area)),
                        "line": exc.line,
                        "rule": RULE_SCHEMA,
                        "message": str(exc),
                    }
                )
        for kind, fname in RULE_SCHEMAS.items():
            path = self.dir / "schema" / fname
            try:
                self.rule_validators[kind] = self._load_rule_schema(path)
                self._remember_bytes(path)
            except SchemaProblem as exc:
                problems.append({"file": str(path), "line": exc.line, "rule": RULE_SCHEMA, "message": str(exc)})
        for area in AREAS:
            if area not in self.schemas:
                continue
            path = self._area_path(area)
            try:
                doc, text = yamlio.read_yaml(path)
            except yamlio.FileProblem as exc:
                problems.append({"file": str(path), "line": exc.line, "rule": exc.kind, "message": exc.message})
                continue
            values, errs = self._validate_area_doc(area, path, doc)
            problems.extend(errs)
            present = set(map(str, doc)) if isinstance(doc, dict) else set()
            for name in self.schemas[area].knobs:
                if name not in present:
                    problems.append(
                        {
                            "file": str(path),
                            "line": None,
                            "rule": RULE_MISSING,
                            "message": f"knob {area}.{name} has no value",
                        }
                    )
            self.in_force[area] = values
            self._file_view[file_key(path)] = (_sha(text), yamlio.plain(doc))
        for kind in RULE_KINDS:
            folder = self.dir / "rules" / kind
            for path in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
                if _classify(self.dir, path) is None:
                    continue
                key = path.stem
                lines: dict[Any, int] = {}
                try:
                    doc, text = yamlio.read_yaml(path, lines)
                except yamlio.FileProblem as exc:
                    problems.append({"file": str(path), "line": exc.line, "rule": exc.kind, "message": exc.message})
                    continue
                value = yamlio.plain(doc)
                err = self._rule_problem(kind, key, value, lines)
                if err:
                    problems.append({"file": str(path), "line": err[1], "rule": err[2], "message": err[0]})
                    continue
                self.rules[kind][key] = value
                self._file_view[file_key(path)] = (_sha(text), value)
        return problems

    def forget_file_values(self) -> None:
        """Forget what the knob and rule files held, so the next rescan compares every file with the
        values in force (used on resume, when the values come from a checkpoint)."""
        for p in list(self._file_view):
            c = _classify(self.dir, p)
            if c is not None and c[0] in ("area", "rules"):
                del self._file_view[p]

    def _remember_bytes(self, path: Path) -> None:
        """Record a file's content hash as processed (so a rescan does not reload it)."""
        try:
            self._file_view[file_key(path)] = (_sha(yamlio.read_capped(path)), None)
        except yamlio.FileProblem:
            pass

    @staticmethod
    def _load_rule_schema(path: Path, data: bytes | None = None) -> Draft202012Validator | None:
        """The validator of a rule schema file (None when there is none); ``data``: its bytes, read already."""
        if data is None:
            if not os.path.lexists(path):
                return None
            raw, _ = read_schema_json(path)
        else:
            raw, _ = schema_from_bytes(path, data)
        try:
            Draft202012Validator.check_schema(raw)
        except SchemaError as exc:
            raise SchemaProblem(f"{path}: invalid JSON Schema: {exc.message}", 1) from None
        return Draft202012Validator(raw)

    def _rule_problem(
        self, kind: str, key: str, value: Any, lines: Mapping[Any, int] | None = None
    ) -> tuple[str, int | None, str] | None:
        """Why a rule file would be refused: ``(message, line, rule)`` (the line of the offending node
        when ``lines`` maps the file's nodes, see yamlio.scan_events), or None when it is valid."""
        lines = lines or {}
        name = f"rules/{kind}/{key}.yaml"
        bad = non_finite(value)
        if bad:
            return (
                f"{name} at {show_path(bad[0])}: {bad[1]!r} is not a finite number (NaN and infinity are "
                "refused everywhere)",
                yamlio.line_of(lines, bad[0]),
                RULE_RANGE,
            )
        validator = self.rule_validators.get(kind)
        if validator is not None:
            errors = sorted(validator.iter_errors(value), key=lambda e: len(list(e.path)))
            if errors:
                e = errors[0]
                where = "/".join(str(p) for p in e.path) or "(top level)"
                return f"{name} at {where}: {e.message}", yamlio.line_of(lines, e.path), RULE_SCHEMA
        others = {k: v for k, v in self.rules[kind].items() if k != key}
        found = rule_problem(kind, key, value, others)
        if found:
            return f"{name}: {found[0]}", yamlio.line_of(lines, found[1]), RULE_SCHEMA
        return None

    def check_rule_file(
        self, kind: str, key: str, value: Any, lines: Mapping[Any, int] | None = None
    ) -> tuple[str, int | None] | None:
        """Why a candidate rule file (parsed) would be refused as ``rules/<kind>/<key>.yaml``, as
        ``(message, line)``, or None when valid. Nothing is written or logged (``eau gate``)."""
        if kind not in RULE_KINDS:
            raise ValueError(f"rule kind must be one of {', '.join(RULE_KINDS)}, got {kind!r}")
        err = self._rule_problem(kind, key, value, lines)
        return (err[0], err[1]) if err else None

    def _validate_area_doc(self, area: str, path: Path, doc: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Valid knob values of an area document and the problems of the invalid ones."""
        problems: list[dict[str, Any]] = []
        values: dict[str, Any] = {}
        if doc is None:
            doc = {}
        if not isinstance(doc, dict):
            return {}, [
                {
                    "file": str(path),
                    "line": 1,
                    "rule": RULE_SCHEMA,
                    "message": f"{path.name} must be a mapping of knob names to values, got {type(doc).__name__}",
                }
            ]
        specs = self.schemas[area].knobs
        for key in doc:
            name = str(key)
            line = yamlio.key_line(doc, key)
            if name not in specs:
                problems.append(
                    {
                        "file": str(path),
                        "line": line,
                        "rule": RULE_UNKNOWN,
                        "message": f"unknown knob {area}.{name}; known: {', '.join(sorted(specs))} "
                        f"(a new knob needs its schema entry in {schema_path(self.dir, area).name})",
                    }
                )
                continue
            value = yamlio.plain(doc[key])
            ref = validate_value(specs[name], value)
            if ref:
                problems.append({"file": str(path), "line": line, "rule": ref.rule, "message": ref.message})
                continue
            values[name] = value
        return values, problems

    # ------------------------------------------------------------------ reading
    def specs(self) -> list[KnobSpec]:
        return [spec for area in AREAS if area in self.schemas for spec in self.schemas[area].knobs.values()]

    def spec(self, full_name: str) -> KnobSpec:
        area, _, name = full_name.partition(".")
        try:
            return self.schemas[area].knobs[name]
        except KeyError:
            raise UnknownKnob(full_name, [s.full_name for s in self.specs()]) from None

    def raw(self, full_name: str) -> Any:
        spec = self.spec(full_name)
        return copy.deepcopy(self.in_force[spec.area][spec.name])

    def get(self, full_name: str, gym: str | None = None) -> Any:
        return resolve(self.raw(full_name), gym)

    def snapshot(self) -> KnobSnapshot:
        if self._snapshot is None or self._snapshot.version != self.version:
            self._snapshot = KnobSnapshot(
                values=copy.deepcopy(self.in_force),
                user_rules=copy.deepcopy(self.rules["users"]),
                reward_rules=copy.deepcopy(self.rules["rewards"]),
                version=self.version,
            )
        return self._snapshot

    def load_in_force(self, values: Mapping[str, Mapping[str, Any]]) -> None:
        """Use a live run's values in force (``runs/<id>/knobs_in_force.json``) as the base of checks."""
        for area, knobs in values.items():
            if area in self.in_force:
                for name, v in knobs.items():
                    if name in self.in_force[area]:
                        self.in_force[area][name] = copy.deepcopy(v)
        self.version += 1

    def restore(self, knob_state: Mapping[str, Any] | None) -> None:
        """Resume a run: its checkpoint's knob state (values and rules in force) becomes the base of
        checks, and every file is compared with it again at the next poll (edits made while the run
        was stopped are then applied or refused like any edit)."""
        if knob_state:
            self.load_in_force(knob_state["values"])
            self.rules = copy.deepcopy(knob_state["rules"])
            self.version += 1
        self.forget_file_values()

    def attach_log(self, path: str | Path) -> None:
        """Write events to ``path`` from now on, carrying over those logged before (in memory)."""
        earlier = self.log.memory if self.log.path is None else []
        self.log = EventLog(path)
        for rec in earlier:
            jsonl.append(self.log.path, rec)

    def in_force_document(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "time": now_iso(),
            "values": copy.deepcopy(self.in_force),
            "rules": copy.deepcopy(self.rules),
            "next_run": copy.deepcopy(self.next_run),
        }

    # ------------------------------------------------------------------ one validation path
    def check_cells(
        self,
        spec: KnobSpec,
        old_raw: Any,
        new_raw: Any,
        *,
        recent_metrics: Any,
        only_gym: str | None | bool = False,
        skip_requires: bool = False,
        skip_delta: bool = False,
        skip_scope: bool = False,
    ) -> tuple[list[tuple[str | None, Any, Any]], Refusal | None]:
        """Validate a knob's new whole value against the one in force, cell by cell.

        Returns the changed cells ``(gym, old, new)`` and the first refusal (None when all pass).
        ``only_gym``: restrict the gym-scope check to a write that targets one cell (CLI ``--gym``).
        """
        ref = validate_value(spec, new_raw) or run_refusal(spec, new_raw, self.run_facts)
        if ref:
            return [], ref
        overridden = [g for g in cells(new_raw) if g is not None]
        changed = []
        for g, old_v, new_v in changed_cells(old_raw, new_raw):
            changed.append((g, old_v, new_v))
            ref = check_change(
                spec,
                g,
                old_v,
                new_v,
                recent_metrics=recent_metrics,
                run_gyms=None if skip_scope else self.run_gyms,
                overridden=[o for o in overridden if o != g],
                skip_requires=skip_requires,
                skip_delta=skip_delta,
            )
            if ref:
                return changed, ref
        return changed, None

    def _event(self, **kw: Any) -> dict[str, Any]:
        return self.log.append(KnobEvent(**kw))

    def run_problems(self) -> list[str]:
        """Values in force that the run of ``run_facts`` cannot work with (a run refuses to start on
        them rather than fail at its first reset)."""
        out = []
        for spec in self.specs():
            ref = run_refusal(spec, self.in_force[spec.area].get(spec.name), self.run_facts)
            if ref:
                out.append(f"{self._area_path(spec.area)}: {ref.message}")
        return out

    # ------------------------------------------------------------------ writes (CLI / API)
    def set(
        self,
        full_name: str,
        value: Any,
        *,
        gym: str | None = None,
        author: str = "human",
        reason: str,
        recent_metrics: Sequence[Mapping[str, Any]] | None = None,
        step_written: int | None = None,
        run_live: bool = False,
        source: str = "cli",
        ref: str | None = None,
        skip_requires: bool = False,
        skip_delta: bool = False,
        whole: bool = False,
        skip_scope: bool = False,
        event_id: str | None = None,
    ) -> WriteResult:
        """Validate and write one knob (the global value, or one gym's value with ``gym``; with
        ``whole`` the knob's entire raw value, a scalar or a per-gym mapping, as a preset lends it).

        ``skip_requires``/``skip_delta``: for writes that set up a run (presets, author system) or undo a
        change (revert skips requires); schema and range checks always apply, gym checks unless
        ``skip_scope`` (a run giving back values it lent: they belong to the folder, not the run).
        ``run_live``: a trainer is running on this folder; the file is written and the run applies it
        at its next step boundary (and logs the accepted event under the id this call returns, or
        ``event_id`` when given: a write carried over a resume keeps its id). Otherwise the accepted
        event is logged here. A refusal is logged here and leaves the file untouched.
        """
        if author not in AUTHORS:
            raise ValueError(f"author must be one of {', '.join(AUTHORS)}, got {author!r}")
        if not reason or not reason.strip():
            raise ValueError("a reason is required for every knob write (--reason TEXT)")
        spec = self.spec(full_name)
        path = self._area_path(spec.area)
        old_raw = self.in_force[spec.area][spec.name]
        if whole:
            gym, new_raw = None, value
        elif gym is None or gym == DEFAULT_KEY:
            gym = None
            new_raw = {**old_raw, DEFAULT_KEY: value} if isinstance(old_raw, Mapping) else value
        else:
            base = dict(old_raw) if isinstance(old_raw, Mapping) else {DEFAULT_KEY: old_raw}
            new_raw = {**base, gym: value}
        common = dict(
            knob=full_name,
            gym=gym,
            author=author,
            reason=reason,
            file=str(path),
            step_written=step_written,
            source=source,
            ref=ref,
        )
        refused = dict(common, line=self._knob_line(path, spec.name))
        if event_id:  # a write carried over a resume is refused now under the id it was accepted with
            refused["id"] = event_id
        old_v = resolve(old_raw, gym)
        if gym is not None and not spec.governs(gym):
            r = Refusal("wrong gym", f"{full_name} does not govern gym {gym!r}; it governs {', '.join(spec.gyms)}")
            return WriteResult(
                False, [self._event(status="rejected", old=old_v, new=value, rule=r.rule, message=r.message, **refused)]
            )
        changed, refusal = self.check_cells(
            spec,
            old_raw,
            new_raw,
            recent_metrics=recent_metrics,
            skip_requires=skip_requires,
            skip_delta=skip_delta,
            skip_scope=skip_scope,
        )
        if refusal:
            return WriteResult(
                False,
                [
                    self._event(
                        status="rejected", old=old_v, new=value, rule=refusal.rule, message=refusal.message, **refused
                    )
                ],
            )
        if not changed:
            unchanged = dict(status="accepted", old=old_v, new=value, message="unchanged: value already in force")
            if source in ("cli", "revert") and not event_id:
                # a person's or an agent's write is logged under the id it is reported with, even when it
                # changes nothing (made with no run live, a resume applies it like any such write)
                return WriteResult(
                    True, [self._event(**unchanged, applies="live" if spec.hot else "next_run", **common)]
                )
            return WriteResult(True, [{**KnobEvent(**unchanged, **common).to_dict()}])
        # write the file (comments and layout kept)
        try:
            doc, _ = yamlio.read_yaml(path)
        except yamlio.FileProblem:
            doc = None
        if not isinstance(doc, dict):  # unreadable file: rebuild it from the values in force
            doc = yamlio.to_rt(copy.deepcopy(self.in_force[spec.area]))
        yamlio.assign(doc, spec.name, new_raw)
        if run_live:
            ids = self._write_attribution(
                spec.full_name, changed, author, reason, step_written, source, ref, event_id=event_id
            )
        text = yamlio.dump(doc)
        yamlio.atomic_write_text(path, text)
        if run_live:
            return WriteResult(
                True,
                [
                    KnobEvent(
                        status="accepted",
                        old=old_v,
                        new=value,
                        applies="live",
                        message="written; the live run applies it at its next step boundary",
                        id=ids[0],
                        **common,
                    ).to_dict()
                ],
                pending=True,
            )
        self._file_view[file_key(path)] = (_sha(text), yamlio.plain(doc))
        return WriteResult(True, self._apply(spec, new_raw, changed, dict(common, file=str(path)), step_effective=None))

    @staticmethod
    def _knob_line(path: Path, name: str) -> int | None:
        """The line of knob ``name`` in its area file (where a refused write would have gone)."""
        lines: dict[Any, int] = {}
        try:
            yamlio.read_yaml(path, lines)
        except yamlio.FileProblem:
            return None
        return yamlio.line_of(lines, (name,))

    def put(
        self, full_name: str, raw: Any, *, author: str, reason: str, source: str = "system"
    ) -> dict[str, Any] | None:
        """Write a knob's whole raw value into its file and into force, whatever the file holds now
        (a pending write included) and whatever is in force: how a run gives back the values it lent.
        Schema-checked: a value the schema no longer accepts is refused and the file left as it is.
        Returns the event, or None when the file already holds ``raw``."""
        spec = self.spec(full_name)
        path = self._area_path(spec.area)
        try:
            doc, _ = yamlio.read_yaml(path)
        except yamlio.FileProblem:
            doc = None
        if not isinstance(doc, dict):
            doc = yamlio.to_rt(copy.deepcopy(self.in_force[spec.area]))
        old = yamlio.plain(doc).get(spec.name)
        if old == raw and self.in_force[spec.area].get(spec.name) == raw:
            return None
        common = dict(knob=full_name, author=author, reason=reason, file=str(path), source=source, old=old, new=raw)
        ref = validate_value(spec, raw)
        if ref:
            return self._event(status="rejected", rule=ref.rule, message=ref.message, **common)
        yamlio.assign(doc, spec.name, raw)
        text = yamlio.dump(doc)
        try:
            yamlio.atomic_write_text(path, text)
        except OSError as exc:  # e.g. a folder where the file was: the value is not written back
            return self._event(
                status="rejected",
                rule="not a file",
                line=None,
                message=f"could not write {path}: {exc.strerror or exc}",
                **common,
            )
        self._file_view[file_key(path)] = (_sha(text), yamlio.plain(doc))
        self.in_force[spec.area][spec.name] = copy.deepcopy(raw)
        self.version += 1
        return self._event(status="accepted", message="written", **common)

    def _apply(
        self,
        spec: KnobSpec,
        new_raw: Any,
        changed: list[tuple[str | None, Any, Any]],
        common: dict[str, Any],
        step_effective: int | None,
    ) -> list[dict[str, Any]]:
        events = []
        if spec.hot:
            self.in_force[spec.area][spec.name] = copy.deepcopy(new_raw)
            self.version += 1
            applies, msg = "live", "applied"
        else:
            self.next_run[spec.full_name] = copy.deepcopy(new_raw)
            applies, msg = "next_run", "accepted; x-hot is false so it takes effect at the next run"
            step_effective = None
        for g, o, n in changed:
            events.append(
                self._event(
                    status="accepted",
                    old=o,
                    new=n,
                    message=msg,
                    applies=applies,
                    step_effective=step_effective,
                    **{**common, "gym": g},
                )
            )
        return events

    def revert(
        self,
        event_id: str,
        *,
        author: str = "human",
        reason: str | None = None,
        recent_metrics: Any = None,
        step_written: int | None = None,
        run_live: bool = False,
        extra_logs: Sequence[EventLog] = (),
    ) -> WriteResult:
        """Set a knob back to its value before event ``event_id`` (skips x-requires: the old value was in
        force before; schema, range, gym and max-delta checks still apply)."""
        ev = self.log.find(event_id)
        for other in extra_logs:
            ev = ev or other.find(event_id)
        if ev is None:
            raise KeyError(f"no knob event {event_id!r} in {self.log.path}")
        if ev.get("status") != "accepted":
            raise ValueError(f"event {event_id} was {ev.get('status')}; only accepted events can be reverted")
        knob = ev["knob"]
        reason = reason or f"revert {event_id}"
        if knob.startswith("rules."):
            _, kind, key = knob.split(".", 2)
            return self.write_rules(
                kind,
                key,
                ev["old"],
                author=author,
                reason=reason,
                step_written=step_written,
                run_live=run_live,
                source="revert",
                ref=event_id,
            )
        return self.set(
            knob,
            ev["old"],
            gym=ev.get("gym"),
            author=author,
            reason=reason,
            recent_metrics=recent_metrics,
            step_written=step_written,
            run_live=run_live,
            source="revert",
            ref=event_id,
            skip_requires=True,
        )

    def write_rules(
        self,
        kind: str,
        key: str,
        value: Any,
        *,
        author: str,
        reason: str,
        step_written: int | None = None,
        run_live: bool = False,
        source: str = "cli",
        ref: str | None = None,
    ) -> WriteResult:
        """Validate and write a whole rule file (``kind`` users|rewards, ``key`` gym or file stem)."""
        if kind not in RULE_KINDS:
            raise ValueError(f"rule kind must be one of {', '.join(RULE_KINDS)}")
        path = self.dir / "rules" / kind / f"{key}.yaml"
        old = self.rules[kind].get(key)
        common = dict(
            knob=f"rules.{kind}.{key}",
            author=author,
            reason=reason,
            file=str(path),
            step_written=step_written,
            source=source,
            ref=ref,
            old=old,
            new=value,
        )
        if value is None:
            return WriteResult(
                False,
                [
                    self._event(
                        status="rejected", rule=RULE_MISSING, message="rule files are not deleted by a write", **common
                    )
                ],
            )
        err = self._rule_problem(kind, key, value)
        if err:
            return WriteResult(False, [self._event(status="rejected", rule=RULE_SCHEMA, message=err[0], **common)])
        text = yamlio.dump(yamlio.to_rt(value))
        if run_live:
            ids = self._write_attribution(
                f"rules.{kind}.{key}", [(None, old, value)], author, reason, step_written, source, ref
            )
        yamlio.atomic_write_text(path, text)
        if run_live:
            return WriteResult(
                True,
                [
                    KnobEvent(
                        status="accepted",
                        message="written; the live run applies it at its next step boundary",
                        id=ids[0],
                        **common,
                    ).to_dict()
                ],
                pending=True,
            )
        self._file_view[file_key(path)] = (_sha(text), value)
        self.rules[kind][key] = value
        self.version += 1
        return WriteResult(True, [self._event(status="accepted", message="applied", **common)])

    def add_knob(
        self,
        area: str,
        name: str,
        schema: dict[str, Any],
        value: Any,
        *,
        author: str,
        reason: str,
        run_live: bool = False,
    ) -> WriteResult:
        """Add a new knob: its schema entry (meta-validated) and its value, through the same checks."""
        if area not in AREAS:
            raise ValueError(f"area must be one of {', '.join(AREAS)}")
        full = f"{area}.{name}"
        common = dict(knob=full, author=author, reason=reason, old=None, new=value, source="cli")
        if name in self.schemas[area].knobs:
            return WriteResult(
                False, [self._event(status="rejected", rule=RULE_SCHEMA, message=f"{full} already exists", **common)]
            )
        raw = copy.deepcopy(self.schemas[area].raw)
        raw["properties"][name] = schema
        try:
            new_area = parse_area_schema(area, schema_path(self.dir, area), raw)
        except SchemaProblem as exc:
            return WriteResult(
                False,
                [
                    self._event(
                        status="rejected",
                        rule=RULE_SCHEMA,
                        message=str(exc),
                        file=str(schema_path(self.dir, area)),
                        **common,
                    )
                ],
            )
        ref = validate_value(new_area.knobs[name], value)
        if ref:
            return WriteResult(
                False,
                [
                    self._event(
                        status="rejected", rule=ref.rule, message=ref.message, file=str(self._area_path(area)), **common
                    )
                ],
            )
        spath = schema_path(self.dir, area)
        path = self._area_path(area)
        doc, _ = yamlio.read_yaml(path)
        yamlio.assign(doc, name, value)
        ids = [new_id()]
        if run_live:
            ids = self._write_attribution(full, [(None, None, value)], author, reason, None, "cli", None)
        stext = json.dumps(raw, indent=2) + "\n"
        text = yamlio.dump(doc)
        # value first, then schema: a live run processes the schema first and finds the value there
        yamlio.atomic_write_text(path, text)
        yamlio.atomic_write_text(spath, stext)
        if run_live:
            return WriteResult(
                True,
                [
                    KnobEvent(
                        status="accepted",
                        message="written; the live run adds it at its next step boundary",
                        file=str(spath),
                        id=ids[0],
                        **common,
                    ).to_dict()
                ],
                pending=True,
            )
        self.schemas[area] = new_area
        self._file_view[file_key(spath)] = (_sha(stext), raw)
        self._file_view[file_key(path)] = (_sha(text), yamlio.plain(doc))
        self.in_force[area][name] = copy.deepcopy(value)
        self.version += 1
        return WriteResult(True, [self._event(status="accepted", message="knob added", file=str(spath), **common)])

    # ------------------------------------------------------------------ attribution of CLI writes to a live run
    def unapplied_writes(self, *, take: bool = True) -> list[dict[str, Any]]:
        """Knob values the files hold that are not in force: writes a live run accepted but has not
        applied (it applies them at a step boundary), and hand edits it has not polled yet. One entry
        per cell: ``{knob, gym, in_force, written, author, reason, source, step_written, file}``; a
        CLI write carries its author and reason (``take``: its attribution note is consumed). Files
        that cannot be read are skipped (the run reports those as refused edits)."""
        out = []
        for area in AREAS:
            path = self._area_path(area)
            try:
                doc, _ = yamlio.read_yaml(path)
            except yamlio.FileProblem:
                continue
            if not isinstance(doc, dict):
                continue
            written = yamlio.plain(doc)
            for name, in_force in self.in_force.get(area, {}).items():
                if name not in written or written[name] == in_force:
                    continue
                full = f"{area}.{name}"
                for g, old, new in changed_cells(in_force, written[name]):
                    att = (self._take_attribution if take else self._peek_attribution)(full, g, new) or {}
                    out.append(
                        {
                            "knob": full,
                            "gym": g,
                            "in_force": old,
                            "written": new,
                            "file": str(path),
                            "author": att.get("author", "human"),
                            "reason": att.get("reason", f"hand edit of {path.name}"),
                            "source": att.get("source", "watch"),
                            "step_written": att.get("step_written"),
                            "id": att.get("id"),
                        }
                    )
        return out

    def _pending_dir(self) -> Path:
        return self.dir / ".pending"

    def _write_attribution(
        self,
        knob: str,
        changed: list[tuple[str | None, Any, Any]],
        author: str,
        reason: str,
        step_written: int | None,
        source: str,
        ref: str | None,
        *,
        event_id: str | None = None,
        first_applied_at: int | None = None,
    ) -> list[str]:
        """One note per changed cell: who wrote it, why, and the event id the run logs it under (the first
        cell gets ``event_id`` when given). Returns the ids. ``first_applied_at``: a write a resumed run
        applies again (it was in force from that step in steps the resume runs again)."""
        ids = []
        for i, (g, _, n) in enumerate(changed):
            eid = event_id if event_id and i == 0 else new_id()
            rec = {
                "knob": knob,
                "gym": g,
                "new": n,
                "author": author,
                "reason": reason,
                "id": eid,
                "step_written": step_written,
                "source": source,
                "ref": ref,
                "time": time.time(),
            }
            if first_applied_at is not None:
                rec["first_applied_at"] = first_applied_at
            yamlio.atomic_write_text(self._note_path(knob, g, n), json.dumps(rec))
            ids.append(eid)
        return ids

    def _note_path(self, knob: str, gym: str | None, new: Any) -> Path:
        return self._pending_dir() / (_sha(f"{knob}|{gym}|{canonical_json(new)}") + ".json")

    def carry_over(self, record: Mapping[str, Any], first_applied_at: int | None) -> None:
        """Keep a logged write's author, reason and event id for the next time a run applies it (a
        resumed run applies again the writes of the steps it runs again; a run that ended before
        applying a write hands it to its resume)."""
        self._write_attribution(
            record["knob"],
            [(record.get("gym"), None, record.get("new"))],
            record["author"],
            record["reason"],
            record.get("step_written"),
            record.get("source") or "cli",
            record.get("ref"),
            event_id=record["id"],
            first_applied_at=first_applied_at,
        )

    def drop_attribution(self, knob: str, gym: str | None, new: Any) -> None:
        self._note_path(knob, gym, new).unlink(missing_ok=True)

    def carried_over(self) -> list[dict[str, Any]]:
        """Notes of writes a resumed run was to apply again that are still waiting (see :meth:`carry_over`)."""
        out = []
        for p in sorted(self._pending_dir().glob("*.json")) if self._pending_dir().is_dir() else []:
            try:
                rec = json.loads(p.read_text())
            except (json.JSONDecodeError, OSError):
                continue
            if isinstance(rec, dict) and "first_applied_at" in rec:
                out.append(rec)
        return out

    def waiting_notes(self) -> list[dict[str, Any]]:
        """The notes of CLI writes waiting for a run to apply them (not those of :meth:`carry_over`), oldest first."""
        out = []
        for p in sorted(self._pending_dir().glob("*.json")) if self._pending_dir().is_dir() else []:
            try:
                rec = json.loads(p.read_text())
            except (json.JSONDecodeError, OSError):
                continue
            if isinstance(rec, dict) and "first_applied_at" not in rec and rec.get("knob") and rec.get("author"):
                out.append({"reason": "", **rec})
        return sorted(out, key=lambda r: r.get("time") or 0)

    def _attribution_source(self, knob: str, gym: str | None, new: Any) -> str | None:
        """The ``source`` of a pending CLI write's attribution, without taking it (None: no attribution)."""
        att = self._peek_attribution(knob, gym, new)
        return att.get("source") if isinstance(att, dict) else None

    def _peek_attribution(self, knob: str, gym: str | None, new: Any) -> dict[str, Any] | None:
        try:
            return json.loads(self._note_path(knob, gym, new).read_text())
        except (FileNotFoundError, json.JSONDecodeError, OSError):
            return None

    def _take_attribution(self, knob: str, gym: str | None, new: Any) -> dict[str, Any] | None:
        path = self._note_path(knob, gym, new)
        try:
            rec = json.loads(path.read_text())
            path.unlink()
            return rec
        except (FileNotFoundError, json.JSONDecodeError, OSError):
            return None

    # ------------------------------------------------------------------ live reload
    def mark_dirty(self, path: str | Path, t: float | None = None) -> None:
        """Queue a changed path (called by the watcher thread); non-knob files are ignored."""
        p = Path(path)
        if _classify(self.dir, p) is None:
            return
        with self._lock:
            self._dirty[file_key(p)] = time.monotonic() if t is None else t

    def pending_paths(self) -> list[Path]:
        with self._lock:
            return list(self._dirty)

    def all_paths(self) -> list[Path]:
        paths = [self._area_path(a) for a in AREAS] + [schema_path(self.dir, a) for a in AREAS]
        for kind in RULE_KINDS:
            folder = self.dir / "rules" / kind
            if folder.is_dir():
                paths += [p for p in folder.glob("*.yaml") if _classify(self.dir, p)]
        paths += [file_key(p) for p in self._file_view]
        return sorted({file_key(p) for p in paths})

    def poll(
        self,
        step: int,
        recent_metrics: Sequence[Mapping[str, Any]] | None = None,
        *,
        rescan: bool = False,
        wait_debounce: bool = True,
    ) -> PollResult:
        """Apply queued file changes at a step boundary; ``step`` is the first step that will run with them.

        Changes younger than the debounce interval stay queued for the next poll (an editor may still
        be writing). ``rescan`` checks every knob file by content hash (no watcher needed).
        """
        result = PollResult()
        now = time.monotonic()
        with self._lock:
            if rescan:
                for p in self.all_paths():
                    self._dirty.setdefault(p, now - self.debounce_s - 1)
            if not self._dirty:
                return result
            ready = [p for p, t in self._dirty.items() if not wait_debounce or now - t >= self.debounce_s]
            for p in ready:
                del self._dirty[p]
        if not ready:
            return result
        # schemas before values, so that a new knob's schema is known when its value is read
        order = {"rule_schema": 0, "schema": 1, "area": 2, "rules": 3}
        items = [(c, p) for p in ready if (c := _classify(self.dir, p)) is not None]
        for (kind, key), path in sorted(items, key=lambda x: order[x[0][0]]):
            try:
                if kind == "area":
                    self._poll_area(key, path, step, recent_metrics, result)
                elif kind == "rules":
                    self._poll_rules(*key.split("/", 1), path, step, result)
                elif kind == "schema":
                    self._poll_schema(key, path, step, result)
                else:
                    self._poll_rule_schema(key, path, step, result)
            except Exception as exc:  # a file must never stop the run: refuse it, keep what is in force
                result.refused.append(
                    self._event(
                        knob=path.name,
                        status="rejected",
                        rule=RULE_INTERNAL,
                        author="human",
                        reason=f"hand edit of {path.name}",
                        file=str(path),
                        line=1,
                        step_written=self.current_step,
                        source="watch",
                        message=f"checking this file failed ({type(exc).__name__}: {exc}); the values "
                        "in force stay (please report this as a harness bug)",
                    )
                )
        return result

    def _read_changed(
        self, path: Path, step: int, result: PollResult, knob: str
    ) -> tuple[dict[Any, int], Any, str] | None:
        """(node lines by path, plain value, sha) when the file changed since last processed; logs read
        problems. Unchanged bytes are detected by hash before any parsing (cheap polls)."""
        key = file_key(path)
        prev_sha, prev_value = self._file_view.get(key, (None, None))
        try:
            data = yamlio.read_capped(path)
            sha = _sha(data)
            if prev_sha == sha:
                return None
            text = yamlio.decode(path, data)
            lines: dict[Any, int] = {}
            value = yamlio.plain(yamlio.parse_text(path, text, fast=True, lines=lines))
        except yamlio.FileProblem as exc:
            marker = f"problem:{exc.kind}:{exc.message}"
            if prev_sha == marker:
                return None
            self._file_view[key] = (marker, prev_value)
            result.refused.append(
                self._event(
                    knob=knob,
                    status="rejected",
                    rule=exc.kind,
                    author="human",
                    reason=f"hand edit of {path.name}",
                    file=str(path),
                    line=exc.line,
                    message=exc.message + "; the last valid values stay in force",
                    step_written=self.current_step,
                    source="watch",
                )
            )
            return None
        return lines, value, sha

    def _attributed(self, knob: str, gym: str | None, new: Any, path: Path) -> dict[str, Any]:
        """Author, reason, ... (and event id) of the write behind a changed cell: its CLI note, else a hand
        edit. The note stays until :meth:`_event_of` has logged the event (a kill in between keeps it)."""
        att = self._peek_attribution(knob, gym, new)
        if isinstance(att, dict) and "author" in att and "reason" in att:
            out = {
                "author": att["author"],
                "reason": att["reason"],
                "step_written": att.get("step_written"),
                "source": att.get("source", "cli"),
                "ref": att.get("ref"),
                "_note": self._note_path(knob, gym, new),
            }
            if att.get("id"):
                out["id"] = att["id"]
            if att.get("first_applied_at") is not None:
                out["_again"] = att["first_applied_at"]
            return out
        return {
            "author": "human",
            "reason": f"hand edit of {path.name}",
            "step_written": self.current_step,
            "source": "watch",
            "ref": None,
        }

    def _event_of(self, att: dict[str, Any], **kw: Any) -> dict[str, Any]:
        """Log an event attributed by :meth:`_attributed`, then consume the write's note."""
        att = dict(att)
        note, again = att.pop("_note", None), att.pop("_again", None)
        if again is not None:
            kw["message"] = (kw.get("message") or "") + (
                f" (again: the run resumed from a checkpoint before step {again}, where it was first applied)"
            )
        rec = self._event(**kw, **att)
        if note is not None:
            note.unlink(missing_ok=True)
        return rec

    def _poll_area(self, area: str, path: Path, step: int, metrics: Any, result: PollResult) -> None:
        if area not in self.schemas:
            return
        got = self._read_changed(path, step, result, knob=path.name)
        if got is None:
            return
        lines, value, sha = got
        prev_view = self._file_view.get(file_key(path), (None, {}))[1] or {}
        self._file_view[file_key(path)] = (sha, value)
        if not isinstance(value, dict):
            result.refused.append(
                self._event(
                    knob=path.name,
                    status="rejected",
                    rule=RULE_SCHEMA,
                    author="human",
                    reason=f"hand edit of {path.name}",
                    file=str(path),
                    line=1,
                    message=f"{path.name} must be a mapping of knob names to values; "
                    "the last valid values stay in force",
                    step_written=self.current_step,
                    source="watch",
                )
            )
            return
        specs = self.schemas[area].knobs
        for key in value:
            if key not in specs and (
                not isinstance(prev_view, dict) or key not in prev_view or prev_view[key] != value[key]
            ):
                result.refused.append(
                    self._event(
                        knob=f"{area}.{key}",
                        status="rejected",
                        rule=RULE_UNKNOWN,
                        author="human",
                        reason=f"hand edit of {path.name}",
                        file=str(path),
                        line=yamlio.line_of(lines, (key,)),
                        new=value[key],
                        message=f"unknown knob {area}.{key}; a new knob needs its schema entry in "
                        f"{schema_path(self.dir, area).name} (eau knobs add)",
                        step_written=self.current_step,
                        source="watch",
                    )
                )
        for name, spec in specs.items():
            in_force = self.in_force[area].get(name)
            if name not in value:
                if isinstance(prev_view, dict) and name in prev_view:
                    result.refused.append(
                        self._event(
                            knob=spec.full_name,
                            status="rejected",
                            rule=RULE_MISSING,
                            author="human",
                            reason=f"hand edit of {path.name}",
                            file=str(path),
                            old=in_force,
                            line=yamlio.line_of(lines, ()),
                            message=f"{spec.full_name} was removed from {path.name}; {in_force!r} stays in force",
                            step_written=self.current_step,
                            source="watch",
                        )
                    )
                continue
            new_raw = value[name]
            if isinstance(prev_view, dict) and name in prev_view and prev_view[name] == new_raw:
                continue  # this knob's text did not change (a refused value stays refused until edited)
            if new_raw == in_force:
                continue
            line = yamlio.line_of(lines, (name,))
            changed, refusal = self.check_cells(spec, in_force, new_raw, recent_metrics=metrics)
            if refusal and refusal.rule == RULE_REQUIRES:
                # a revert (eau knobs revert) restores a value that was in force before: as on the CLI
                # path, x-requires does not apply to it; every other check still does
                cells_, other = self.check_cells(spec, in_force, new_raw, recent_metrics=metrics, skip_requires=True)
                if (
                    other is None
                    and cells_
                    and all(self._attribution_source(spec.full_name, g, n) == "revert" for g, _, n in cells_)
                ):
                    changed, refusal = cells_, None
            if refusal:
                g, o, n = changed[-1] if changed else (None, resolve(in_force, None), new_raw)
                att = self._attributed(spec.full_name, g, n, path)
                result.refused.append(
                    self._event_of(
                        att,
                        knob=spec.full_name,
                        gym=g,
                        old=o,
                        new=n,
                        status="rejected",
                        rule=refusal.rule,
                        message=refusal.message + f"; {resolve(in_force, g)!r} stays in force",
                        file=str(path),
                        line=line,
                    )
                )
                continue
            evs = []
            hot = spec.hot
            if hot:
                self.in_force[area][name] = copy.deepcopy(new_raw)
                self.version += 1
            else:
                self.next_run[spec.full_name] = copy.deepcopy(new_raw)
            for g, o, n in changed:
                att = self._attributed(spec.full_name, g, n, path)
                evs.append(
                    self._event_of(
                        att,
                        knob=spec.full_name,
                        gym=g,
                        old=o,
                        new=n,
                        status="accepted",
                        file=str(path),
                        line=line,
                        message="applied" if hot else "accepted; x-hot is false so it takes effect at the next run",
                        applies="live" if hot else "next_run",
                        step_effective=step if hot else None,
                    )
                )
            (result.applied if hot else result.next_run).extend(evs)

    def _poll_rules(self, kind: str, key: str, path: Path, step: int, result: PollResult) -> None:
        knob = f"rules.{kind}.{key}"
        got = self._read_changed(path, step, result, knob=knob)
        if got is None:
            return
        lines, value, sha = got
        self._file_view[file_key(path)] = (sha, value)
        old = self.rules[kind].get(key)
        if value == old:
            return
        att = self._attributed(knob, None, value, path)
        err = self._rule_problem(kind, key, value, lines)
        if err:
            result.refused.append(
                self._event_of(
                    att,
                    knob=knob,
                    status="rejected",
                    rule=err[2],
                    file=str(path),
                    line=err[1],
                    message=err[0] + "; the rules in force stay",
                    old=old,
                    new=value,
                )
            )
            return
        self.rules[kind][key] = value
        self.version += 1
        result.applied.append(
            self._event_of(
                att,
                knob=knob,
                status="accepted",
                file=str(path),
                old=old,
                new=value,
                message="applied",
                step_effective=step,
            )
        )

    def _read_schema_changed(self, path: Path, result: PollResult, common: dict[str, Any], what: str) -> bytes | None:
        """A schema file's bytes when they changed since last processed; a file that cannot be read
        (deleted, not a regular file, too large) is refused once, until it changes again."""
        key = file_key(path)
        try:
            data = yamlio.read_capped(path)
        except yamlio.FileProblem as exc:
            marker = f"problem:{exc.kind}:{exc.message}"
            if self._file_view.get(key, (None,))[0] != marker:
                self._file_view[key] = (marker, None)
                deleted = "deleted" if exc.kind == RULE_MISSING else exc.message
                result.refused.append(
                    self._event(
                        status="rejected",
                        rule=exc.kind,
                        line=exc.line,
                        message=f"{what} file {deleted}; the {what} in force stays",
                        **common,
                    )
                )
            return None
        sha = _sha(data)
        if self._file_view.get(key, (None,))[0] == sha:
            return None
        self._file_view[key] = (sha, None)
        return data

    def _poll_schema(self, area: str, path: Path, step: int, result: PollResult) -> None:
        knob = f"schema.{area}"
        common = dict(
            knob=knob,
            author="human",
            reason=f"hand edit of {path.name}",
            file=str(path),
            step_written=self.current_step,
            source="watch",
        )
        data = self._read_schema_changed(path, result, common, "schema")
        if data is None:
            return
        try:
            raw, text = schema_from_bytes(path, data)
            new = parse_area_schema(area, path, raw, text)
        except SchemaProblem as exc:
            result.refused.append(
                self._event(
                    status="rejected",
                    rule=RULE_SCHEMA,
                    line=exc.line,
                    message=f"{exc}; the schema in force stays",
                    **common,
                )
            )
            return
        # every value in force must stay valid; new knobs take their value from the area file
        area_file = self._area_path(area)
        try:
            file_values = yamlio.load_plain(area_file) or {}
        except yamlio.FileProblem:
            file_values = {}
        values: dict[str, Any] = {}
        for name, spec in new.knobs.items():
            v = self.in_force[area].get(name, file_values.get(name) if isinstance(file_values, dict) else None)
            if v is None:
                result.refused.append(
                    self._event(
                        status="rejected",
                        rule=RULE_MISSING,
                        line=json_line(text, name),
                        message=f"new knob {spec.full_name} has no value in {area_file.name}; "
                        "the schema in force stays",
                        **common,
                    )
                )
                return
            ref = validate_value(spec, v)
            if ref:
                result.refused.append(
                    self._event(
                        status="rejected",
                        rule=ref.rule,
                        line=json_line(text, name),
                        message=f"under the new schema: {ref.message}; the schema in force stays",
                        **common,
                    )
                )
                return
            values[name] = v
        added = sorted(set(new.knobs) - set(self.schemas[area].knobs))
        removed = sorted(set(self.schemas[area].knobs) - set(new.knobs))
        self.schemas[area] = new
        self.in_force[area] = values
        self.version += 1
        result.applied.append(
            self._event(
                status="accepted",
                step_effective=step,
                old=None,
                new={"added": added, "removed": removed},
                message=f"schema reloaded (added: {added or 'none'}, removed: {removed or 'none'})",
                **common,
            )
        )

    def _poll_rule_schema(self, kind: str, path: Path, step: int, result: PollResult) -> None:
        common = dict(
            knob=f"schema.rules.{kind}",
            author="human",
            reason=f"hand edit of {path.name}",
            file=str(path),
            step_written=self.current_step,
            source="watch",
        )
        data = self._read_schema_changed(path, result, common, "rule schema")
        if data is None:
            return
        try:
            validator = self._load_rule_schema(path, data)
        except SchemaProblem as exc:
            result.refused.append(
                self._event(
                    status="rejected",
                    rule=RULE_SCHEMA,
                    line=exc.line,
                    message=f"{exc}; the rule schema in force stays",
                    **common,
                )
            )
            return
        for key, value in self.rules[kind].items():
            errors = list(validator.iter_errors(value))
            if errors:
                result.refused.append(
                    self._event(
                        status="rejected",
                        rule=RULE_SCHEMA,
                        line=1,
                        message=f"rules/{kind}/{key}.yaml in force would be invalid under "
                        f"this schema: {errors[0].message}; the rule schema in "
                        "force stays",
                        **common,
                    )
                )
                return
        self.rule_validators[kind] = validator
        result.applied.append(
            self._event(status="accepted", step_effective=step, message="rule schema reloaded", **common)
        )


def validate_dir(knobs_dir: str | Path) -> list[dict[str, Any]]:
    """Every problem of a knobs folder (empty when valid); never raises for file contents."""
    try:
        KnobStore(knobs_dir, events_path=None)
    except KnobError as exc:
        return exc.problems
    return []
