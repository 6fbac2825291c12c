"""What a knob store holds, and the checks against it that loading, polling and writing share.

:class:`InForce` is the state of one knobs folder (its fields: :meth:`InForce.__init__`). The store
(harness/knobs/store.py) loads it and answers reads; polling (harness/knobs/poll.py) and writing
(harness/knobs/writes.py) change it, each through :meth:`InForce.check_cells` and
:meth:`InForce.rule_file_problem`, the one validation path (harness/knobs/checks.py).
"""

from __future__ import annotations

import copy
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from jsonschema import Draft202012Validator

from harness.knobs.checks import RuleChecks, RunFacts, check_cells, rule_file_problem, run_refusal
from harness.knobs.events import EventLog, KnobEvent
from harness.knobs.layout import HISTORY, RULE_KINDS, area_path
from harness.knobs.notes import Notes
from harness.knobs.schema import AreaSchema, KnobSpec, Refusal
from harness.knobs.snapshot import AREAS, KnobSnapshot, resolve


class UnknownKnob(KeyError):
    def __init__(self, name: str, known: Sequence[str]):
        super().__init__(name)
        self.name = name
        self.message = f"unknown knob {name!r}; knob names are <area>.<name> with area in {', '.join(AREAS)}" + (
            f" (e.g. {', '.join(sorted(known)[:4])}, ...)" if known else ""
        )

    def __str__(self) -> str:
        return self.message


class ChangeQueue:
    """Paths the watcher thread saw change, with when (the trainer's thread takes them at a poll)."""

    def __init__(self) -> None:
        self._dirty: dict[Path, float] = {}
        self._lock = threading.Lock()

    def mark(self, path: Path, t: float | None = None) -> None:
        with self._lock:
            self._dirty[path] = time.monotonic() if t is None else t

    def paths(self) -> list[Path]:
        with self._lock:
            return list(self._dirty)

    def take(self, debounce_s: float, wait: bool, also: Sequence[Path] = ()) -> list[Path]:
        """The paths older than ``debounce_s`` (all with ``wait`` False), and ``also``; the young stay queued."""
        now = time.monotonic()
        with self._lock:
            for p in also:
                self._dirty.setdefault(p, now - debounce_s - 1)
            ready = [p for p, t in self._dirty.items() if not wait or now - t >= debounce_s]
            for p in ready:
                del self._dirty[p]
        return ready


class InForce:
    """The state of one knobs folder (see the module docstring)."""

    def __init__(
        self,
        knobs_dir: str | Path,
        rule_checks: RuleChecks,
        events_path: str | Path | None,
        run_gyms: Sequence[str] | None,
        debounce_s: float,
    ):
        missing = set(RULE_KINDS) - set(rule_checks)
        if missing:
            raise ValueError(f"a knob store needs the checks of every rule kind; missing: {sorted(missing)}")
        self.dir = Path(knobs_dir)
        self.rule_checks = dict(rule_checks)
        self.log = EventLog(self.dir / HISTORY if events_path == "auto" else events_path)  # the event log
        self.run_gyms = list(run_gyms) if run_gyms is not None else None
        self.debounce_s = debounce_s
        self.current_step: int | None = None  # the step in progress (set by the trainer)
        self.run_facts: RunFacts | None = None  # the run's config facts (harness.knobs.checks.run_refusal)
        self.schemas: dict[str, AreaSchema] = {}  # area -> its schema
        self.rule_validators: dict[str, Draft202012Validator | None] = {}  # rule kind -> its schema's (None: none)
        self.in_force: dict[str, dict[str, Any]] = {}  # area -> knob -> raw value in force
        self.rules: dict[str, dict[str, Any]] = {kind: {} for kind in RULE_KINDS}  # kind -> key -> rule file in force
        self.next_run: dict[str, Any] = {}  # accepted non-hot values waiting for the next run
        self.version = 0  # increases with every change put in force
        self.files: dict[Path, tuple[str | None, Any]] = {}  # path -> (sha, plain value) last processed
        self.notes = Notes(self.dir)  # attribution notes of writes a run has not applied yet
        self.changes = ChangeQueue()  # the changed files the watcher queued
        self._snapshot: KnobSnapshot | None = None

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

    def event(self, **kw: Any) -> dict[str, Any]:
        return self.log.append(KnobEvent(**kw))

    def rule_file_problem(
        self, kind: str, key: str, value: Any, lines: Mapping[Any, int] | None = None
    ) -> tuple[str, int | None, str] | None:
        """Why ``value`` would be refused as ``rules/<kind>/<key>.yaml``: ``(message, line, rule)``, or None."""
        others = {k: v for k, v in self.rules[kind].items() if k != key}
        return rule_file_problem(
            kind,
            key,
            value,
            validator=self.rule_validators.get(kind),
            check=self.rule_checks[kind],
            others=others,
            lines=lines,
        )

    def check_cells(
        self, spec: KnobSpec, old_raw: Any, new_raw: Any, **opts: Any
    ) -> tuple[list[tuple[str | None, Any, Any]], Refusal | None]:
        """:func:`harness.knobs.checks.check_cells` against this store's run (its gyms and facts);
        ``opts``: recent_metrics, skip_requires, skip_delta."""
        return check_cells(spec, old_raw, new_raw, run_gyms=self.run_gyms, run_facts=self.run_facts, **opts)

    def accept(self, spec: KnobSpec, new_raw: Any) -> dict[str, str]:
        """Put a validated value in force, or keep it for the next run when the knob is not hot; the
        ``applies`` and ``message`` of its accepted events."""
        if not spec.hot:
            self.next_run[spec.full_name] = copy.deepcopy(new_raw)
            return {"applies": "next_run", "message": "accepted; x-hot is false so it takes effect at the next run"}
        self.in_force[spec.area][spec.name] = copy.deepcopy(new_raw)
        self.version += 1
        return {"applies": "live", "message": "applied"}

    def run_problems(self) -> list[str]:
        """Values in force that the run of ``run_facts`` cannot work with (a run refuses to start on
        them rather than fail at its first reset)."""
        out = []
        for spec in self.specs():
            ref = run_refusal(spec, self.in_force[spec.area].get(spec.name), self.run_facts)
            if ref:
                out.append(f"{area_path(self.dir, spec.area)}: {ref.message}")
        return out
