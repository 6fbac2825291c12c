"""The knob store: the values in force for one knobs folder, loaded and validated whole, and its reads
(``snapshot()`` for the gyms, users, rewards and trainer; ``in_force_document()`` for
``knobs_in_force.json``). Its state and the checks against it: harness.knobs.state; polling:
harness.knobs.poll; writing: harness.knobs.writes; the folder's layout: harness.knobs.layout.

What every value must be, whatever the path (hand edit, ``set``, preset): finite numbers only (in
lists, per-gym cells and rule values too), each element in range, clip bounds ordered, per-gym keys
``default`` or gym names, rule names unique across files, and a value the run can work with. Files are
read bounded (``harness.io.yamlio``: regular files only, size, depth, alias expansion, integer size,
plain YAML types); an unexpected error while checking a file is a refusal of that file, never an
exception out of ``poll``. The rule-file checks are handed in (``rule_checks``, see harness.stores).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Mapping, Sequence

from harness.io import jsonl, yamlio
from harness.knobs import poll as polling
from harness.knobs import writes
from harness.knobs.checks import RuleChecks, area_values
from harness.knobs.events import EventLog, now_iso
from harness.knobs.folder import upgrade_hint
from harness.knobs.layout import RULE_KINDS, RULE_SCHEMAS, area_path, classify, file_key, sha
from harness.knobs.schema import (
    RULE_MISSING,
    RULE_SCHEMA,
    SchemaProblem,
    load_area_schema,
    load_rule_schema,
    schema_path,
)
from harness.knobs.snapshot import AREAS, KnobSnapshot
from harness.knobs.state import InForce, UnknownKnob

__all__ = ["KnobError", "KnobStore", "UnknownKnob"]


class KnobError(Exception):
    """Invalid knob files at load time; ``problems`` lists every one (dicts with file, line, rule, message)."""

    def __init__(self, problems: list[dict[str, Any]], hint: str | None = None):
        self.problems = problems
        lines = [
            f"{p['file']}" + (f":{p['line']}" if p.get("line") else "") + f": [{p['rule']}] {p['message']}"
            for p in problems
        ]
        super().__init__("invalid knob files:\n  " + "\n  ".join(lines) + (f"\n{hint}" if hint else ""))


class KnobStore(InForce):
    """Values in force for one knobs folder (see the module docstring)."""

    def __init__(
        self,
        knobs_dir: str | Path,
        *,
        rule_checks: RuleChecks,
        events_path: str | Path | None = "auto",
        run_gyms: Sequence[str] | None = None,
        debounce_s: float = 0.2,
        base: Mapping[str, Any] | None = None,
    ):
        """``rule_checks``: the checks of users and rewards rule files (harness.stores assembles them).
        ``events_path``: the knob event log ("auto": ``<knobs>/.history/knob_events.jsonl``; None: in
        memory only). ``run_gyms``: the gyms of the run this store serves (scope checks); None outside a
        run. ``base``: a knob state (``{"values", "rules"}`` as in a checkpoint or knobs_in_force.json)
        in force instead of the files' values; the files are then compared with it at the first poll
        with ``rescan``, and what differs is applied or refused like any edit (a resumed run)."""
        super().__init__(knobs_dir, rule_checks, events_path, run_gyms, debounce_s)
        problems = self._load_schemas()
        if not problems:
            file_problems = self._load_values()
            if base is not None:  # the files are compared with the base at the first rescan instead
                self.restore(base)
                file_problems = [
                    self._problem(area_path(self.dir, s.area), RULE_MISSING, f"knob {s.full_name} has no value", None)
                    for s in self.specs()
                    if s.name not in self.in_force[s.area]
                ]
            problems += file_problems
        if problems:
            raise KnobError(problems, upgrade_hint(self.dir))

    # ------------------------------------------------------------------ loading
    def _problem(self, path: Path, rule: str, message: str, line: int | None) -> dict[str, Any]:
        return {"file": str(path), "line": line, "rule": rule, "message": message}

    def _load_schemas(self) -> list[dict[str, Any]]:
        problems = []
        for area in AREAS:
            try:
                self.schemas[area] = load_area_schema(self.dir, area)
                self.remember_bytes(schema_path(self.dir, area))
            except SchemaProblem as exc:
                problems.append(self._problem(schema_path(self.dir, area), RULE_SCHEMA, str(exc), exc.line))
        for kind, fname in RULE_SCHEMAS.items():
            path = self.dir / "schema" / fname
            try:
                self.rule_validators[kind] = load_rule_schema(path)
                self.remember_bytes(path)
            except SchemaProblem as exc:
                problems.append(self._problem(path, RULE_SCHEMA, str(exc), exc.line))
        return problems

    def _load_values(self) -> list[dict[str, Any]]:
        problems: list[dict[str, Any]] = []
        for area in AREAS:
            path = area_path(self.dir, area)
            try:
                doc, text = yamlio.read_yaml(path)
            except yamlio.FileProblem as exc:
                problems.append(self._problem(path, exc.kind, exc.message, exc.line))
                self.in_force[area] = {}
                continue
            values, errs = area_values(self.schemas[area].knobs, path, doc, schema_path(self.dir, area).name)
            problems.extend(errs)
            present = set(map(str, doc)) if isinstance(doc, dict) else set()
            for spec in self.schemas[area].knobs.values():
                if spec.name not in present:
                    problems.append(self._problem(path, RULE_MISSING, f"knob {spec.full_name} has no value", None))
            self.in_force[area] = values
            self.files[file_key(path)] = (sha(text), yamlio.plain(doc))
        for kind in RULE_KINDS:
            folder = self.dir / "rules" / kind
            for path in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
                if classify(self.dir, path) is None:
                    continue
                lines: dict[Any, int] = {}
                try:
                    doc, text = yamlio.read_yaml(path, lines)
                except yamlio.FileProblem as exc:
                    problems.append(self._problem(path, exc.kind, exc.message, exc.line))
                    continue
                value = yamlio.plain(doc)
                err = self.rule_file_problem(kind, path.stem, value, lines)
                if err:
                    problems.append(self._problem(path, err[2], err[0], err[1]))
                    continue
                self.rules[kind][path.stem] = value
                self.files[file_key(path)] = (sha(text), value)
        return problems

    def remember_bytes(self, path: Path) -> None:
        """Record a file's content hash as processed (so a rescan does not reload it)."""
        try:
            self.files[file_key(path)] = (sha(yamlio.read_capped(path)), None)
        except yamlio.FileProblem:
            pass

    # ------------------------------------------------------------------ reading
    def snapshot(self) -> KnobSnapshot:
        if self._snapshot is None or self._snapshot.version != self.version:
            self._snapshot = KnobSnapshot(
                values=copy.deepcopy(self.in_force),
                user_rules=copy.deepcopy(self.rules["users"]),
                reward_rules=copy.deepcopy(self.rules["rewards"]),
                version=self.version,
            )
        return self._snapshot

    def in_force_document(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "time": now_iso(),
            "values": copy.deepcopy(self.in_force),
            "rules": copy.deepcopy(self.rules),
            "next_run": copy.deepcopy(self.next_run),
        }

    # ------------------------------------------------------------------ state in force
    def load_in_force(self, values: Mapping[str, Mapping[str, Any]]) -> None:
        """Use a run's values in force (``runs/<id>/knobs_in_force.json``) as the base of checks."""
        for area, knobs in values.items():
            if area in self.in_force and isinstance(knobs, Mapping):
                for name, v in knobs.items():
                    if name in self.schemas[area].knobs:
                        self.in_force[area][name] = copy.deepcopy(v)
        self.version += 1

    def restore(self, knob_state: Mapping[str, Any]) -> None:
        """A knob state (a checkpoint's, or what a run started with) becomes the values and rules in
        force, and every value and rule file is compared with it again at the next rescan (edits made
        while the run was stopped are then applied or refused like any edit)."""
        self.load_in_force(knob_state.get("values") or {})
        if isinstance(knob_state.get("rules"), Mapping):
            self.rules = {kind: copy.deepcopy(dict(knob_state["rules"].get(kind) or {})) for kind in RULE_KINDS}
        self.next_run = copy.deepcopy(dict(knob_state.get("next_run") or {}))
        for p in list(self.files):
            c = classify(self.dir, p)
            if c is not None and c[0] in ("area", "rules"):
                del self.files[p]

    def attach_log(self, path: str | Path) -> None:
        """Write events to ``path`` from now on, carrying over those logged before (in memory)."""
        earlier = self.log.memory if self.log.path is None else []
        self.log = EventLog(path)
        for rec in earlier:
            jsonl.append(self.log.path, rec)

    # ------------------------------------------------------------------ polling and writing
    def mark_dirty(self, path: str | Path, t: float | None = None) -> None:
        """Queue a changed path (called by the watcher thread); non-knob files are ignored."""
        if classify(self.dir, Path(path)) is not None:
            self.changes.mark(file_key(Path(path)), t)

    def pending_paths(self) -> list[Path]:
        return self.changes.paths()

    # functions of the store's state, so its methods: store.poll(step, metrics) applies the queued changes
    # at a step boundary (harness.knobs.poll); the writes go through the one validation path (harness.knobs.writes)
    poll = polling.poll
    set = writes.set_knob
    revert = writes.revert
    write_rules = writes.write_rules
    add_knob = writes.add_knob
