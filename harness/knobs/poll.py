"""Polling a knobs folder: the changes the watcher queued (harness/knobs/watcher.py), validated and
applied at a step boundary, never in between.

A changed file is read bounded and parsed once (unchanged bytes are recognised by hash before any
parsing, so a poll with nothing new is cheap); each knob of a value file whose text changed goes
through the store's one validation path; a refused edit leaves the last valid value in force and its
event names the file, the line and the rule; a later fixing edit is accepted. Schemas are applied
before values, so a new knob's schema is known when its value is read. The author and reason of a
changed cell come from its CLI note (harness/knobs/notes.py), else it is a hand edit. An unexpected
error while checking a file is a refusal of that file: nothing raises out of :func:`poll`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from harness.io import yamlio
from harness.knobs.layout import RULE_KINDS, area_path, classify, file_key, sha
from harness.knobs.schema import (
    RULE_MISSING,
    RULE_REQUIRES,
    RULE_SCHEMA,
    RULE_UNKNOWN,
    SchemaProblem,
    json_line,
    load_rule_schema,
    parse_area_schema,
    schema_from_bytes,
    schema_path,
    validate_value,
)
from harness.knobs.snapshot import AREAS, resolve
from harness.knobs.state import InForce

RULE_INTERNAL = "internal error"
ORDER = {"rule_schema": 0, "schema": 1, "area": 2, "rules": 3}  # schemas before the values they govern


@dataclass
class PollResult:
    """The events of one poll: applied (in force from its step), refused, accepted for the next run."""

    applied: list[dict[str, Any]] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)
    next_run: list[dict[str, Any]] = field(default_factory=list)


def all_paths(store: InForce) -> list[Path]:
    """Every knob, schema and rule file of the folder, and every file processed before (a deleted one)."""
    paths = [area_path(store.dir, a) for a in AREAS] + [schema_path(store.dir, a) for a in AREAS]
    for kind in RULE_KINDS:
        folder = store.dir / "rules" / kind
        if folder.is_dir():
            paths += [p for p in folder.glob("*.yaml") if classify(store.dir, p)]
    return sorted({file_key(p) for p in [*paths, *store.files]})


def poll(
    store: InForce,
    step: int,
    recent_metrics: Sequence[Mapping[str, Any]] | None = None,
    *,
    rescan: bool = False,
    wait_debounce: bool = True,
) -> PollResult:
    """Apply the queued changes at a step boundary (``step``: the first step that runs with them); changes
    younger than the debounce interval stay queued for the next poll: an editor may still be writing.
    ``rescan``: check every file by content hash (no watcher needed)."""
    result = PollResult()
    ready = store.changes.take(store.debounce_s, wait_debounce, all_paths(store) if rescan else ())
    items = [(c, p) for p in ready if (c := classify(store.dir, p)) is not None]
    for (kind, key), path in sorted(items, key=lambda x: ORDER[x[0][0]]):
        try:
            if kind == "area":
                _poll_area(store, key, path, step, recent_metrics, result)
            elif kind == "rules":
                _poll_rules(store, *key.split("/", 1), path, step, result)
            elif kind == "schema":
                _poll_schema(store, key, path, step, result)
            else:
                _poll_rule_schema(store, key, path, step, result)
        except Exception as exc:  # a file must never stop the run: refuse it, keep what is in force
            message = (
                f"checking this file failed ({type(exc).__name__}: {exc}); the values in force stay "
                "(please report this as a harness bug)"
            )
            result.refused.append(_hand(store, path, knob=path.name, rule=RULE_INTERNAL, line=1, message=message))
    return result


def _by_hand(store: InForce, path: Path) -> dict[str, Any]:
    """Who made an edit of ``path`` that no CLI note claims: a person, at the step in progress."""
    return dict(author="human", reason=f"hand edit of {path.name}", source="watch", step_written=store.current_step)


def _hand(store: InForce, path: Path, status: str = "rejected", **kw: Any) -> dict[str, Any]:
    """The outcome of a hand edit of ``path`` (logged; a refusal unless ``status`` says otherwise)."""
    return store.event(status=status, file=str(path), **_by_hand(store, path), **kw)


def _read_changed(
    store: InForce, path: Path, result: PollResult, knob: str, stays: str, parse: bool = True
) -> tuple[dict, Any, Any] | None:
    """(node lines by path, plain value, the value last processed) of a file changed since last processed
    (``parse`` False: its bytes for the value), recorded as processed now; unchanged bytes are recognised
    by hash before any parsing. A file that cannot be read or parsed is refused once, until it changes
    again (``stays``: what stays in force)."""
    key = file_key(path)
    prev_sha, prev_value = store.files.get(key, (None, None))
    lines: dict[Any, int] = {}
    try:
        data = yamlio.read_capped(path)
        if prev_sha == sha(data):
            return None
        value = (
            yamlio.plain(yamlio.parse_text(path, yamlio.decode(path, data), fast=True, lines=lines)) if parse else data
        )
    except yamlio.FileProblem as exc:
        marker = f"problem:{exc.kind}:{exc.message}"
        if prev_sha != marker:
            store.files[key] = (marker, prev_value)
            message = f"{exc.message}; {stays} in force"
            result.refused.append(_hand(store, path, knob=knob, rule=exc.kind, line=exc.line, message=message))
        return None
    store.files[key] = (sha(data), value if parse else None)
    return lines, value, prev_value


def _logged(store: InForce, path: Path, knob: str, gym: str | None, old: Any, new: Any, **kw: Any) -> dict[str, Any]:
    """Log the event of a changed cell, attributed to the CLI write behind it (its note, dropped once the
    event is logged: a kill in between keeps it) or, without one, to a hand edit of ``path``."""
    note = store.notes.peek(knob, gym, new)
    who = _by_hand(store, path)
    if note is not None:
        who = {k: note.get(k) for k in ("author", "reason", "step_written", "ref", "id")}
        who["source"] = note.get("source") or "cli"
        if (again := note.get("first_applied_at")) is not None:
            kw["message"] += (
                f" (again: the run resumed from a checkpoint before step {again}, where it was first applied)"
            )
    rec = store.event(knob=knob, gym=gym, old=old, new=new, file=str(path), **who, **kw)
    if note is not None:
        store.notes.drop(knob, gym, new)
    return rec


def _poll_area(store: InForce, area: str, path: Path, step: int, metrics: Any, result: PollResult) -> None:
    got = _read_changed(store, path, result, path.name, "the last valid values stay")
    if got is None:
        return
    lines, value, prev = got
    prev = prev if isinstance(prev, dict) else {}
    if not isinstance(value, dict):
        message = f"{path.name} must be a mapping of knob names to values; the last valid values stay in force"
        result.refused.append(_hand(store, path, knob=path.name, rule=RULE_SCHEMA, line=1, message=message))
        return
    specs = store.schemas[area].knobs
    for key in value:
        if key not in specs and (key not in prev or prev[key] != value[key]):
            message = (
                f"unknown knob {area}.{key}; a new knob needs its schema entry in "
                f"{schema_path(store.dir, area).name} (eau knobs add)"
            )
            line = yamlio.line_of(lines, (key,))
            result.refused.append(
                _hand(store, path, knob=f"{area}.{key}", rule=RULE_UNKNOWN, line=line, new=value[key], message=message)
            )
    for name, spec in specs.items():
        in_force = store.in_force[area].get(name)
        if name not in value:
            if name in prev:
                message = f"{spec.full_name} was removed from {path.name}; {in_force!r} stays in force"
                line = yamlio.line_of(lines, ())
                result.refused.append(
                    _hand(store, path, knob=spec.full_name, rule=RULE_MISSING, old=in_force, line=line, message=message)
                )
            continue
        new_raw = value[name]
        if (name in prev and prev[name] == new_raw) or new_raw == in_force:
            continue  # this knob's text did not change (a refused value stays refused until edited)
        line = yamlio.line_of(lines, (name,))
        changed, refusal = store.check_cells(spec, in_force, new_raw, recent_metrics=metrics)
        if refusal and refusal.rule == RULE_REQUIRES:
            # a revert (eau knobs revert) restores a value that was in force before: as on the CLI
            # path, x-requires does not apply to it; every other check still does
            cells, other = store.check_cells(spec, in_force, new_raw, recent_metrics=metrics, skip_requires=True)
            notes = [store.notes.peek(spec.full_name, g, n) for g, _, n in cells]
            if other is None and cells and all(n is not None and n.get("source") == "revert" for n in notes):
                changed, refusal = cells, None
        if refusal:
            g, o, n = changed[-1] if changed else (None, resolve(in_force, None), new_raw)
            message = refusal.message + f"; {resolve(in_force, g)!r} stays in force"
            refused = dict(status="rejected", rule=refusal.rule, message=message, line=line)
            result.refused.append(_logged(store, path, spec.full_name, g, o, n, **refused))
            continue
        applied = {**store.accept(spec, new_raw), "step_effective": step if spec.hot else None}
        events = [
            _logged(store, path, spec.full_name, g, o, n, status="accepted", line=line, **applied)
            for g, o, n in changed
        ]
        (result.applied if spec.hot else result.next_run).extend(events)


def _poll_rules(store: InForce, kind: str, key: str, path: Path, step: int, result: PollResult) -> None:
    knob = f"rules.{kind}.{key}"
    got = _read_changed(store, path, result, knob, "the last valid rules stay")
    if got is None:
        return
    lines, value, _ = got
    old = store.rules[kind].get(key)
    if value == old:
        return
    err = store.rule_file_problem(kind, key, value, lines)
    if err:
        message = err[0] + "; the rules in force stay"
        result.refused.append(
            _logged(store, path, knob, None, old, value, status="rejected", rule=err[2], line=err[1], message=message)
        )
        return
    store.rules[kind][key] = value
    store.version += 1
    result.applied.append(
        _logged(store, path, knob, None, old, value, status="accepted", message="applied", step_effective=step)
    )


def _poll_schema(store: InForce, area: str, path: Path, step: int, result: PollResult) -> None:
    knob = f"schema.{area}"
    got = _read_changed(store, path, result, knob, "the schema stays", parse=False)
    if got is None:
        return

    def refuse(rule: str, line: int | None, message: str) -> None:
        message += "; the schema in force stays"
        result.refused.append(_hand(store, path, knob=knob, rule=rule, line=line, message=message))

    try:
        raw, text = schema_from_bytes(path, got[1])
        new = parse_area_schema(area, path, raw, text)
    except SchemaProblem as exc:
        refuse(RULE_SCHEMA, exc.line, str(exc))
        return
    # every value in force must stay valid; new knobs take their value from the area file
    try:
        file_values = yamlio.load_plain(area_path(store.dir, area)) or {}
    except yamlio.FileProblem:
        file_values = {}
    values: dict[str, Any] = {}
    for name, spec in new.knobs.items():
        v = store.in_force[area].get(name, file_values.get(name) if isinstance(file_values, dict) else None)
        if v is None:
            refuse(RULE_MISSING, json_line(text, name), f"new knob {spec.full_name} has no value in {area}.yaml")
            return
        ref = validate_value(spec, v)
        if ref:
            refuse(ref.rule, json_line(text, name), f"under the new schema: {ref.message}")
            return
        values[name] = v
    added = sorted(set(new.knobs) - set(store.schemas[area].knobs))
    removed = sorted(set(store.schemas[area].knobs) - set(new.knobs))
    store.schemas[area], store.in_force[area] = new, values
    store.version += 1
    message = f"schema reloaded (added: {added or 'none'}, removed: {removed or 'none'})"
    new = {"added": added, "removed": removed}
    result.applied.append(_hand(store, path, "accepted", knob=knob, step_effective=step, new=new, message=message))


def _poll_rule_schema(store: InForce, kind: str, path: Path, step: int, result: PollResult) -> None:
    knob = f"schema.rules.{kind}"
    got = _read_changed(store, path, result, knob, "the rule schema stays", parse=False)
    if got is None:
        return
    try:
        validator = load_rule_schema(path, got[1])
    except SchemaProblem as exc:
        message = f"{exc}; the rule schema in force stays"
        result.refused.append(_hand(store, path, knob=knob, rule=RULE_SCHEMA, line=exc.line, message=message))
        return
    for key, value in store.rules[kind].items() if validator is not None else ():
        error = next(validator.iter_errors(value), None)
        if error is not None:
            message = (
                f"rules/{kind}/{key}.yaml in force would be invalid under this schema: {error.message}; "
                "the rule schema in force stays"
            )
            result.refused.append(_hand(store, path, knob=knob, rule=RULE_SCHEMA, line=1, message=message))
            return
    store.rule_validators[kind] = validator
    result.applied.append(
        _hand(store, path, "accepted", knob=knob, step_effective=step, message="rule schema reloaded")
    )
