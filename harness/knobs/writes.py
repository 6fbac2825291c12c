"""Writing knobs: ``set``, ``revert``, ``write_rules`` and ``add_knob`` through the one validation path.

A write is atomic from the writer's side. Everything is checked first — author, reason (text that
can be logged), value (plain data, schema, range, gym, max delta, requires, the run's facts) — and
every file's new text and every attribution note is prepared; nothing is written until all of it
passes. A refused write leaves every file untouched and logs the refusal. An accepted one writes its
notes, then its files (each atomically: temp file + rename, comments and layout kept); a failure part
way puts back what was written (notes removed, earlier files restored) and is logged as refused.

Who applies an accepted write (``for_run``):

* ``None`` (a project folder, no run): it is in force at once and logged here as accepted;
* ``"live"``: the live run applies it at its next step boundary and logs it under the id returned
  (the note carries author, reason and id); at its end, a write it never applied is logged
  ``not_applied`` by the run;
* ``"stopped"``: a run that is not live: logged here as ``not_applied`` under the id returned;
  ``eau train --resume`` applies it at its first step boundary under the same id.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from harness.io import yamlio
from harness.knobs.events import AUTHORS, KnobEvent
from harness.knobs.layout import RULE_KINDS, area_path, file_key, rule_path, sha
from harness.knobs.schema import (
    RULE_GYM,
    RULE_MISSING,
    RULE_SCHEMA,
    KnobSpec,
    Refusal,
    SchemaProblem,
    parse_area_schema,
    schema_path,
    validate_value,
)
from harness.knobs.snapshot import AREAS, DEFAULT_KEY, resolve
from harness.knobs.state import InForce

RULE_REASON = "reason"
RULE_WRITE = "not written"
IDENTIFIER = "a name of lower-case letters, digits and _ that starts with a letter"
PENDING_MESSAGE = {
    "live": "written; the live run applies it at its next step boundary",
    "stopped": "written to the folder of a run that is not live: `eau train --resume` applies it at its "
    "first step boundary, under this id (and `eau train --from` starts from the folder with it)",
}


@dataclass
class WriteResult:
    """Outcome of a write: the logged (or, for a live run, reported) event(s) and whether it waits for a run."""

    ok: bool
    events: list[dict[str, Any]]
    pending: bool = False  # written; a run applies it (the live one at its next boundary, else a resume)

    @property
    def event(self) -> dict[str, Any]:
        return self.events[-1]


def check_fields(author: str, reason: str) -> Refusal | None:
    """Author and reason of a write: a ValueError for a missing or unknown one (a usage error), a
    refusal for a reason that cannot be logged as text (a byte that is not UTF-8)."""
    if author not in AUTHORS:
        raise ValueError(f"author must be one of {', '.join(AUTHORS)}, got {author!r}")
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError("a reason is required for every knob write (--reason TEXT)")
    try:
        reason.encode("utf-8")
    except UnicodeEncodeError as exc:
        return Refusal(RULE_REASON, f"the reason is not valid text (a byte that is not UTF-8 at position {exc.start})")
    return None


def commit(files: Sequence[tuple[Path, str]]) -> None:
    """Write ``files`` in order, each atomically; on a failure restore those written (their earlier
    content, or no file) and raise OSError naming the file."""
    done: list[tuple[Path, bytes | None]] = []
    try:
        for path, text in files:
            before = path.read_bytes() if path.is_file() and not path.is_symlink() else None
            yamlio.atomic_write_text(path, text)
            done.append((path, before))
    except OSError as exc:
        for path, before in reversed(done):
            try:
                if before is None:
                    path.unlink(missing_ok=True)
                else:
                    yamlio.atomic_write_text(path, before.decode("utf-8"))
            except OSError:
                pass
        raise OSError(f"could not write {path}: {exc.strerror or exc}; nothing was changed") from None


def _refused(store: InForce, refusal: Refusal, common: Mapping[str, Any], **kw: Any) -> WriteResult:
    return WriteResult(
        False, [store.event(status="rejected", rule=refusal.rule, message=refusal.message, **common, **kw)]
    )


def _write(
    store: InForce,
    for_run: str | None,
    files: list[tuple[Path, str, Any]],
    changed: list,
    common: dict[str, Any],
    event_id: str | None = None,
) -> WriteResult | None:
    """Commit a write's files ``(path, text, plain value)``: for a run (``for_run`` live or stopped) its
    notes first, and its result; else None (the caller puts it in force and logs it). A refusal when a
    file could not be written (what was written is put back)."""
    ids, notes = [], []
    if for_run is not None:
        fields = {k: common.get(k) for k in ("author", "reason", "step_written", "source", "ref")}
        ids, notes = store.notes.texts(common["knob"], changed, fields, event_id=event_id)
    try:
        commit(notes + [(path, text) for path, text, _ in files])
    except OSError as exc:
        return _refused(store, Refusal(RULE_WRITE, str(exc)), common)
    if for_run is None:
        for path, text, value in files:
            store.files[file_key(path)] = (sha(text), value)
        return None
    rec = KnobEvent(status="accepted", message=PENDING_MESSAGE[for_run], id=ids[0], **common).to_dict()
    return WriteResult(True, [store.event(**{**rec, "status": "not_applied"}) if for_run == "stopped" else rec], True)


def _area_text(store: InForce, spec: KnobSpec, new_raw: Any) -> tuple[Path, str, Any]:
    """The area file of ``spec`` with ``new_raw`` assigned (comments kept; an unreadable file is
    rebuilt from the values in force): (path, text, plain document)."""
    path = area_path(store.dir, spec.area)
    try:
        doc, _ = yamlio.read_yaml(path)
    except yamlio.FileProblem:
        doc = None
    if not isinstance(doc, dict):
        doc = yamlio.to_rt(copy.deepcopy(store.in_force[spec.area]))
    yamlio.assign(doc, spec.name, new_raw)
    return path, yamlio.dump(doc), yamlio.plain(doc)


def _knob_line(path: Path, name: str) -> int | None:
    """The line of knob ``name`` in its area file (where a refused write would have gone)."""
    lines: dict[Any, int] = {}
    try:
        yamlio.read_yaml(path, lines)
    except yamlio.FileProblem:
        return None
    return yamlio.line_of(lines, (name,))


def set_knob(
    store: InForce,
    full_name: str,
    value: Any,
    *,
    gym: str | None = None,
    author: str = "human",
    reason: str,
    recent_metrics: Sequence[Mapping[str, Any]] | None = None,
    step_written: int | None = None,
    for_run: str | None = None,
    source: str = "cli",
    ref: str | None = None,
    skip_requires: bool = False,
    skip_delta: bool = False,
    whole: bool = False,
    event_id: str | None = None,
) -> WriteResult:
    """Validate and write one knob: the global value, one gym's value with ``gym``, or with ``whole``
    the knob's entire raw value (a scalar or a per-gym mapping, as a preset gives it). ``skip_requires``
    / ``skip_delta``: writes that set up a run (presets, author system) or undo a change (a revert
    skips requires); schema, range and gym checks always apply. ``event_id``: the id of a write carried
    over a resume (it keeps it). ``for_run``: see the module docstring."""
    refusal = check_fields(author, reason)
    spec = store.spec(full_name)
    path = area_path(store.dir, spec.area)
    old_raw = store.in_force[spec.area][spec.name]
    if whole:
        gym, new_raw = None, value
    elif gym is None or gym == DEFAULT_KEY:
        gym = None
        new_raw = {**old_raw, DEFAULT_KEY: value} if isinstance(old_raw, Mapping) else value
    else:
        new_raw = {**(dict(old_raw) if isinstance(old_raw, Mapping) else {DEFAULT_KEY: old_raw}), gym: value}
    common = dict(
        knob=full_name, gym=gym, author=author, reason=reason, file=str(path), step_written=step_written, source=source
    )
    common["ref"] = ref
    old_v = resolve(old_raw, gym)
    changed: list = []
    if refusal is None and gym is not None and not spec.governs(gym):
        refusal = Refusal(RULE_GYM, f"{full_name} does not govern gym {gym!r}; it governs {', '.join(spec.gyms)}")
    if refusal is None:
        changed, refusal = store.check_cells(
            spec, old_raw, new_raw, recent_metrics=recent_metrics, skip_requires=skip_requires, skip_delta=skip_delta
        )
    if refusal:
        extra = {"id": event_id} if event_id else {}  # a write carried over a resume is refused under its id
        return _refused(store, refusal, common, old=old_v, new=value, line=_knob_line(path, spec.name), **extra)
    applies = "live" if spec.hot else "next_run"
    if not changed:
        unchanged = dict(status="accepted", old=old_v, new=value, message="unchanged: value already in force")
        if source in ("cli", "revert") and not event_id:
            # a person's or an agent's write is logged under the id it is reported with, even when it changes nothing
            return WriteResult(True, [store.event(**unchanged, applies=applies, **common)])
        return WriteResult(True, [KnobEvent(**unchanged, **common).to_dict()])
    res = _write(
        store, for_run, [_area_text(store, spec, new_raw)], changed, {**common, "old": old_v, "new": value}, event_id
    )
    return res or WriteResult(True, apply_value(store, spec, new_raw, changed, common, step_effective=None))


def apply_value(
    store: InForce,
    spec: KnobSpec,
    new_raw: Any,
    changed: list,
    common: Mapping[str, Any],
    step_effective: int | None,
) -> list[dict[str, Any]]:
    """Put a validated value in force (or, for a knob that is not hot, keep it for the next run) and
    log one accepted event per changed cell."""
    applied = store.accept(spec, new_raw)
    step_effective = step_effective if spec.hot else None
    return [
        store.event(status="accepted", old=o, new=n, step_effective=step_effective, **applied, **{**common, "gym": g})
        for g, o, n in changed
    ]


def revert(
    store: InForce,
    event_id: str,
    *,
    author: str = "human",
    reason: str | None = None,
    recent_metrics: Any = None,
    step_written: int | None = None,
    for_run: str | None = None,
    extra_logs: Sequence[Any] = (),
) -> WriteResult:
    """Set a knob back to its value before event ``event_id`` (skips x-requires: the old value was in
    force before; schema, range, gym and max-delta checks still apply). KeyError: no such event;
    ValueError: not an accepted event."""
    ev = store.log.find(event_id)
    for other in extra_logs:
        ev = ev or other.find(event_id)
    if ev is None:
        raise KeyError(f"no knob event {event_id!r} in {store.log.path}")
    if ev.get("status") != "accepted":
        raise ValueError(f"event {event_id} was {ev.get('status')}; only accepted events can be reverted")
    knob, reason = ev["knob"], reason or f"revert {event_id}"
    common = dict(author=author, reason=reason, step_written=step_written, for_run=for_run, source="revert")
    common["ref"] = event_id
    if knob.startswith("rules."):
        _, kind, key = knob.split(".", 2)
        return write_rules(store, kind, key, ev["old"], **common)
    return set_knob(
        store, knob, ev["old"], gym=ev.get("gym"), recent_metrics=recent_metrics, skip_requires=True, **common
    )


def write_rules(
    store: InForce,
    kind: str,
    key: str,
    value: Any,
    *,
    author: str,
    reason: str,
    step_written: int | None = None,
    for_run: str | None = None,
    source: str = "cli",
    ref: str | None = None,
) -> WriteResult:
    """Validate and write a whole rule file (``kind`` users|rewards, ``key`` gym or file stem)."""
    if kind not in RULE_KINDS:
        raise ValueError(f"rule kind must be one of {', '.join(RULE_KINDS)}")
    refusal = check_fields(author, reason)
    path = rule_path(store.dir, kind, key)
    old = store.rules[kind].get(key)
    common = dict(knob=f"rules.{kind}.{key}", author=author, reason=reason, file=str(path), step_written=step_written)
    common.update(source=source, ref=ref, old=old, new=value)
    if refusal is None and value is None:
        refusal = Refusal(RULE_MISSING, "rule files are not deleted by a write")
    if refusal is None:
        err = store.rule_file_problem(kind, key, value)
        refusal = Refusal(RULE_SCHEMA, err[0]) if err else None
    if refusal:
        return _refused(store, refusal, common)
    res = _write(store, for_run, [(path, yamlio.dump(yamlio.to_rt(value)), value)], [(None, old, value)], common)
    if res is not None:
        return res
    store.rules[kind][key] = value
    store.version += 1
    return WriteResult(True, [store.event(status="accepted", message="applied", **common)])


def is_identifier(name: str) -> bool:
    """A knob or gym name: lower-case letters, digits and _, starting with a letter (ASCII only)."""
    return name.isascii() and name.isidentifier() and name[:1].isalpha() and name == name.lower()


def add_knob(
    store: InForce,
    area: str,
    name: str,
    schema: dict[str, Any],
    value: Any,
    *,
    author: str,
    reason: str,
    for_run: str | None = None,
) -> WriteResult:
    """Add a new knob: its schema entry (meta-validated) and its value, through the same checks. The
    value file and the schema file are written together or not at all."""
    if area not in AREAS:
        raise ValueError(f"area must be one of {', '.join(AREAS)}")
    if not is_identifier(name):
        raise ValueError(f"knob name {name!r}: use {IDENTIFIER} (e.g. {area}.warmup_steps)")
    full, spath, path = f"{area}.{name}", schema_path(store.dir, area), area_path(store.dir, area)
    common = dict(knob=full, author=author, reason=reason, old=None, new=value, source="cli", file=str(spath))
    refusal = check_fields(author, reason)
    if refusal is None and name in store.schemas[area].knobs:
        refusal = Refusal(RULE_SCHEMA, f"{full} already exists")
    raw = copy.deepcopy(store.schemas[area].raw)
    raw["properties"][name] = schema
    new_area = None
    if refusal is None:
        try:
            new_area = parse_area_schema(area, spath, raw)
        except SchemaProblem as exc:
            refusal = Refusal(RULE_SCHEMA, str(exc))
    if refusal is None:
        refusal = validate_value(new_area.knobs[name], value)
        common["file"] = str(path) if refusal else str(spath)
    if refusal:
        return _refused(store, refusal, common)
    try:
        doc, _ = yamlio.read_yaml(path)
    except yamlio.FileProblem as exc:
        return _refused(store, Refusal(exc.kind, f"{path.name} cannot be read ({exc.message}); fix it first"), common)
    yamlio.assign(doc, name, value)
    # value first, then schema: a live run processes the schema first and finds the value there
    files = [(path, yamlio.dump(doc), yamlio.plain(doc)), (spath, json.dumps(raw, indent=2) + "\n", raw)]
    res = _write(store, for_run, files, [(None, None, value)], common)
    if res is not None:
        return res
    store.schemas[area] = new_area
    store.in_force[area][name] = copy.deepcopy(value)
    store.version += 1
    return WriteResult(True, [store.event(status="accepted", message="knob added", **common)])
