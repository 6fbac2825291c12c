"""The autopilot's intervention table (``interventions.yaml``: detector -> knob, direction, step,
predicted effect) and the arithmetic of one step of a knob.

Every field is documented at the top of ``interventions.yaml``. :func:`load_table` checks each entry
and names the file, entry and field of any problem.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml

TABLE_PATH = Path(__file__).with_name("interventions.yaml")
DIRECTIONS = ("raise", "lower")
BETTER = ("higher", "lower")
KNOB_AREAS = ("env", "user", "reward", "agent")
FIELDS = {
    "detector",
    "action",
    "knob",
    "direction",
    "step",
    "metric",
    "better",
    "predicted",
    "guards",
    "lag",
    "window",
    "why",
    "repair",
    "when",
}
REQUIRED = ("detector", "metric", "better", "predicted")
KNOB_REQUIRED = ("knob", "direction", "step")
# What an entry changes: one step of a numeric knob, or a rule file (see interventions.yaml)
ACTIONS = ("knob", "restore_user_rules", "disable_dominant_rule")
WHEN_OPS = {">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, "<": lambda a, b: a < b}
DEFAULT_LAG = 1
DEFAULT_WINDOW = 5


class TableError(ValueError):
    """A table entry that cannot be used (the message names file, entry and field)."""


@dataclass(frozen=True)
class Intervention:
    """One row of the table (fields as documented in interventions.yaml)."""

    detector: str
    knob: str  # "" for a rule-file action
    direction: str  # "" for a rule-file action
    delta: float | None
    factor: float | None
    metric: str
    better: str
    predicted: str
    guards: tuple[tuple[str, str], ...] = ()  # (metric, better) pairs that must not get worse
    lag: int = DEFAULT_LAG
    window: int = DEFAULT_WINDOW
    why: str = ""
    action: str = "knob"
    repair: bool = False  # kept when inconclusive (reverted only when harmed)
    when: tuple[tuple[str, str, float], ...] = ()  # (metric path, op, value): all must hold

    @property
    def area(self) -> str:
        return self.knob.split(".", 1)[0]

    @property
    def name(self) -> str:
        return self.knob.split(".", 1)[1]

    def step_text(self) -> str:
        return (
            f"{'+' if self.direction == 'raise' else '-'}{self.delta:g}"
            if self.delta is not None
            else f"{'x' if self.direction == 'raise' else '/'}{self.factor:g}"
        )


def _entry(raw: Any, where: str) -> Intervention:
    if not isinstance(raw, Mapping):
        raise TableError(f"{where}: an entry is a mapping of {', '.join(sorted(FIELDS))}")
    unknown = sorted(set(raw) - FIELDS)
    if unknown:
        raise TableError(f"{where}: unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(FIELDS))}")
    action = raw.get("action", "knob")
    if action not in ACTIONS:
        raise TableError(f"{where}: action {action!r} is not allowed; use one of {', '.join(ACTIONS)}")
    order = REQUIRED[:1] + (KNOB_REQUIRED if action == "knob" else ()) + REQUIRED[1:]
    for f in order:
        if raw.get(f) in (None, ""):
            raise TableError(f"{where}: field {f!r} is required" + (" for a knob action" if f in KNOB_REQUIRED else ""))
    repair = raw.get("repair", False)
    if not isinstance(repair, bool):
        raise TableError(f"{where}: repair must be true or false, got {repair!r}")
    when = _when(raw.get("when"), where)
    common = dict(
        detector=str(raw["detector"]),
        metric=str(raw["metric"]),
        better=raw["better"],
        predicted=str(raw["predicted"]).strip(),
        why=str(raw.get("why", "")).strip(),
        action=action,
        repair=repair,
        when=when,
    )
    if action != "knob":
        extra = sorted(f for f in KNOB_REQUIRED if f in raw)
        if extra:
            raise TableError(f"{where}: action {action} changes a rule file; drop {', '.join(extra)}")
    if raw["better"] not in BETTER:
        raise TableError(f"{where}: better {raw['better']!r} is not allowed; use higher or lower")
    guards = raw.get("guards") or {}
    if not isinstance(guards, Mapping):
        raise TableError(f"{where}: guards must be a mapping metric: higher|lower, got {guards!r}")
    for m, b in guards.items():
        if b not in BETTER:
            raise TableError(f"{where}: guards.{m} {b!r} is not allowed; use higher or lower")
    for f, lo in (("lag", 0), ("window", 2)):
        v = raw.get(f)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < lo):
            raise TableError(f"{where}: {f} must be an integer >= {lo}, got {v!r}")
    common.update(
        guards=tuple((str(m), str(b)) for m, b in guards.items()),
        lag=int(raw.get("lag", DEFAULT_LAG)),
        window=int(raw.get("window", DEFAULT_WINDOW)),
    )
    if action != "knob":
        return Intervention(knob="", direction="", delta=None, factor=None, **common)
    knob = str(raw["knob"])
    area, dot, name = knob.partition(".")
    if not dot or area not in KNOB_AREAS or not name:
        raise TableError(f"{where}: knob {knob!r} must be <area>.<name> with area in {', '.join(KNOB_AREAS)}")
    if raw["direction"] not in DIRECTIONS:
        raise TableError(f"{where}: direction {raw['direction']!r} is not allowed; use raise or lower")
    step = raw["step"]
    if not isinstance(step, Mapping) or len(step) != 1 or next(iter(step)) not in ("delta", "factor"):
        raise TableError(f"{where}: step must be {{delta: D}} or {{factor: F}}, got {step!r}")
    kind, val = next(iter(step.items()))
    if isinstance(val, bool) or not isinstance(val, (int, float)) or not math.isfinite(val):
        raise TableError(f"{where}: step {kind} must be a number, got {val!r}")
    if kind == "delta" and val <= 0:
        raise TableError(f"{where}: step delta must be positive (direction says which way), got {val}")
    if kind == "factor" and val <= 1:
        raise TableError(f"{where}: step factor must be > 1 (direction says which way), got {val}")
    return Intervention(
        knob=knob,
        direction=raw["direction"],
        delta=float(val) if kind == "delta" else None,
        factor=float(val) if kind == "factor" else None,
        **common,
    )


def _when(raw: Any, where: str) -> tuple[tuple[str, str, float], ...]:
    """``when``: a list of {metric, op, value}; metric is a dotted path into the detector finding's
    metrics, where ``{gym}`` stands for each gym of the run."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not raw:
        raise TableError(f"{where}: when must be a non-empty list of {{metric, op, value}}, got {raw!r}")
    out = []
    for i, c in enumerate(raw):
        if not isinstance(c, Mapping) or set(c) != {"metric", "op", "value"}:
            raise TableError(f"{where}: when[{i}] must have exactly metric, op and value, got {c!r}")
        if c["op"] not in WHEN_OPS:
            raise TableError(f"{where}: when[{i}].op {c['op']!r} is not allowed; use {', '.join(WHEN_OPS)}")
        v = c["value"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise TableError(f"{where}: when[{i}].value must be a number, got {v!r}")
        out.append((str(c["metric"]), str(c["op"]), float(v)))
    return tuple(out)


def when_holds(entry: Intervention, metrics: Mapping[str, Any], gym: str | None) -> tuple[bool, str | None]:
    """(True, None) when every condition of ``entry.when`` holds on a finding's ``metrics`` for ``gym``;
    (False, why) otherwise (a path the finding does not have fails the condition)."""
    for path, op, value in entry.when:
        node: Any = metrics
        for part in path.replace("{gym}", gym or "").split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        if isinstance(node, bool) or not isinstance(node, (int, float)):
            return False, f"{path} is not in the finding (needed: {op} {value:g})"
        if not WHEN_OPS[op](float(node), value):
            return False, f"{path} = {node:g}, needed {op} {value:g}"
    return True, None


def load_table(path: Path | None = None) -> list[Intervention]:
    """The entries of ``path`` (default: the packaged interventions.yaml), in order."""
    path = Path(path) if path is not None else TABLE_PATH
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TableError(f"{path}: no such intervention table") from None
    except yaml.YAMLError as exc:
        raise TableError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(doc, Mapping) or not isinstance(doc.get("interventions"), list):
        raise TableError(f"{path}: expected a mapping with an 'interventions' list")
    return [_entry(e, f"{path}: interventions[{i}]") for i, e in enumerate(doc["interventions"])]


def check_detectors(table: list[Intervention], known: list[str], where: str) -> None:
    """Refuse entries naming a detector ``eau diagnose`` does not have."""
    bad = sorted({e.detector for e in table if e.detector not in known})
    if bad:
        raise TableError(f"{where}: unknown detector(s) {', '.join(bad)}; detectors: {', '.join(known)}")


# ------------------------------------------------------------------------------------------ arithmetic
def _clip(v: float, spec: Mapping[str, Any]) -> float | None:
    """``v`` inside the schema's bounds; None when an exclusive bound leaves no room."""
    sch = spec.get("schema") or {}
    lo, hi = sch.get("minimum"), sch.get("maximum")
    if lo is not None:
        v = max(v, lo)
    if hi is not None:
        v = min(v, hi)
    if sch.get("exclusiveMinimum") is not None and v <= sch["exclusiveMinimum"]:
        return None
    if sch.get("exclusiveMaximum") is not None and v >= sch["exclusiveMaximum"]:
        return None
    return v


def next_value(entry: Intervention, current: Any, spec: Mapping[str, Any]) -> tuple[Any, str | None]:
    """(new value, None) one step away from ``current``, or (None, why not).

    ``spec`` is ``eau knobs get --json``'s document (``schema`` with type and bounds, ``max_delta``,
    ``max_factor``). The step is clipped to the range and the per-write limits; integers are rounded
    away from ``current`` so a step always moves an integer knob.
    """
    if isinstance(current, bool) or not isinstance(current, (int, float)):
        return None, f"{entry.knob} is {current!r}, not a number"
    sign = 1 if entry.direction == "raise" else -1
    cur = float(current)
    if entry.delta is not None:
        new = cur + sign * entry.delta
    elif cur == 0:
        return None, f"{entry.knob} is 0; a factor cannot move it"
    else:
        new = cur * entry.factor if sign > 0 else cur / entry.factor
    md, mf = spec.get("max_delta"), spec.get("max_factor")
    if md:
        new = min(max(new, cur - md), cur + md)
    if mf and cur != 0:
        lo, hi = sorted((cur / mf, cur * mf))
        new = min(max(new, lo), hi)
    is_int = (spec.get("schema") or {}).get("type") == "integer"
    if is_int:
        new = math.ceil(new) if sign > 0 else math.floor(new)
    clipped = _clip(new, spec)
    if clipped is None:
        return None, f"{entry.knob} {current!r} is at its limit ({spec.get('allowed', 'range')})"
    new = int(round(clipped)) if is_int else float(f"{clipped:.6g}")
    if new == cur:
        return None, f"{entry.knob} {current!r} is already at its limit ({spec.get('allowed', 'range')})"
    return new, None
