"""Knob schemas: loading, meta-validation, and validation of knob values.

One JSON Schema per area in ``knobs/schema/<area>.schema.json``. Each property is one knob, written
as the schema of its *scalar* value (type, range, enum, ...) plus a ``description`` and the harness
keywords below. The harness derives the per-gym form itself: a knob's value is either the scalar or a
mapping ``{default: <scalar>, <gym>: <scalar>, ...}``.

Harness keywords (all documented in the skill's knob catalogue):

``x-hot`` (bool, required)
    true: applied live at the next step boundary (env/user/reward knobs from the next episode);
    false: accepted into the file but in force only from the next run.
``x-gyms`` (list, required)
    gyms the knob governs; ``["*"]`` for every gym. A write for a gym outside the list, or a write
    that governs none of the run's gyms, is refused ("wrong gym").
``x-max-delta`` (number)
    largest absolute change one write may make (element-wise for arrays).
``x-max-factor`` (number > 1)
    largest multiplicative change one write may make (for scale-free knobs such as learning rates).
``x-requires`` (list of conditions)
    conditions on recent training metrics that a write must meet; each
    ``{when: increase|decrease|change, metric, per_gym, op: ">="|"<=", value, window, why}``:
    when the write moves the value in direction ``when``, the mean of ``metric`` (``gym/<g>/<metric>``
    for each affected gym when ``per_gym``) over the last ``window`` steps must satisfy ``op value``.
``x-check`` (string)
    a named cross-field check: ``increasing`` (array items strictly increasing, e.g. clip bounds).

Every number in a value — a scalar, a list element, a per-gym cell — must be finite: NaN passes
every JSON Schema range comparison (``nan < lo`` and ``nan > hi`` are both false), so it is refused
before the schema is asked. Schema files are read as regular files only and must not contain
``NaN``/``Infinity`` either.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from harness.gyms import gym_names
from harness.io import yamlio
from harness.knobs.snapshot import AREAS, DEFAULT_KEY

HARNESS_KEYWORDS = {"x-hot", "x-gyms", "x-max-delta", "x-max-factor", "x-requires", "x-check"}
REQUIRES_KEYS = {"when", "metric", "per_gym", "op", "value", "window", "why"}
GYM_NAME = re.compile(r"^[a-z][a-z0-9_]*$")

# Refusal rules (the ``rule`` field of a rejected knob event; the CLI names them).
RULE_UNKNOWN = "unknown knob"
RULE_TYPE = "type"
RULE_RANGE = "range"
RULE_DELTA = "max delta"
RULE_REQUIRES = "requires"
RULE_GYM = "wrong gym"
RULE_MISSING = "missing"
RULE_SCHEMA = "schema"
RULE_RUN = "this run"  # a value the live run cannot work with (e.g. an LLM-user share without an LLM user)


class SchemaProblem(Exception):
    """A schema file that is not a valid knob schema (names the file and the knob); ``line``: the
    line of the knob's entry or of the JSON error when known."""

    def __init__(self, message: str, line: int | None = None):
        super().__init__(message)
        self.line = line


def first_node(
    value: Any, bad: Callable[[Any], bool], where: tuple[Any, ...] = ()
) -> tuple[tuple[Any, ...], Any] | None:
    """The path and value of the first node of ``value`` (mappings and lists walked) for which ``bad``
    is true (None: no such node)."""
    if bad(value):
        return where, value
    items: Any = (
        value.items() if isinstance(value, Mapping) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    )
    for k, v in items:
        found = first_node(v, bad, (*where, k))
        if found:
            return found
    return None


def non_finite(value: Any) -> tuple[tuple[Any, ...], float] | None:
    """The path and value of the first NaN or infinite number anywhere in ``value`` (None: all finite)."""
    return first_node(value, lambda v: isinstance(v, float) and not math.isfinite(v))


def show_path(path: tuple[Any, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number (JSON has no NaN or Infinity)")


def json_line(text: str, name: str) -> int | None:
    """1-based line of a knob's entry (``"name":``) in a schema file's text."""
    m = re.search(r'"' + re.escape(name) + r'"\s*:', text)
    return text.count("\n", 0, m.start()) + 1 if m else None


def schema_from_bytes(path: Path, data: bytes) -> tuple[Any, str]:
    """(parsed JSON, text) of a schema file's bytes: within the size cap, UTF-8, strict JSON (no
    NaN/Infinity), not nested beyond the recursion limit. Raises SchemaProblem with the line."""
    try:
        text = yamlio.decode(path, data)
    except yamlio.FileProblem as exc:
        raise SchemaProblem(str(exc), exc.line) from None
    try:
        return json.loads(text, parse_constant=_refuse_constant), text
    except json.JSONDecodeError as exc:
        raise SchemaProblem(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}", exc.lineno) from None
    except ValueError as exc:  # a NaN, or an integer too long to convert (Python's 4,300 digits)
        m = re.search(r"\d{4301}", text)
        line = text.count("\n", 0, m.start()) + 1 if m else 1
        raise SchemaProblem(f"{path}:{line}: not valid JSON: {exc}", line) from None
    except RecursionError:
        raise SchemaProblem(f"{path}: not valid JSON: nested too deeply", 1) from None


def read_schema_json(path: Path) -> tuple[Any, str]:
    """:func:`schema_from_bytes` of a schema file, read as a regular file only (yamlio.read_capped)."""
    try:
        data = yamlio.read_capped(path)
    except yamlio.FileProblem as exc:
        raise SchemaProblem(str(exc), exc.line) from None
    return schema_from_bytes(path, data)


@dataclass(frozen=True)
class Refusal:
    """Why a value or a write is refused: ``rule`` (one of the RULE_* names) and a message."""

    rule: str
    message: str


@dataclass
class KnobSpec:
    """One knob as declared in its area schema."""

    area: str
    name: str
    schema: dict[str, Any]  # the scalar schema (harness keywords removed)
    description: str
    hot: bool
    gyms: list[str]
    max_delta: float | None = None
    max_factor: float | None = None
    requires: list[dict[str, Any]] = field(default_factory=list)
    check: str | None = None
    validator: Draft202012Validator | None = None

    @property
    def full_name(self) -> str:
        return f"{self.area}.{self.name}"

    def governs(self, gym: str) -> bool:
        return "*" in self.gyms or gym in self.gyms

    def allowed_text(self) -> str:
        """Short human description of the allowed values, for refusal messages and listings."""
        s = self.schema
        if "enum" in s:
            return "one of " + ", ".join(map(str, s["enum"]))
        t = s.get("type", "value")
        lo = s.get("minimum", s.get("exclusiveMinimum"))
        hi = s.get("maximum", s.get("exclusiveMaximum"))
        if t == "array":
            items = s.get("items", {})
            if "enum" in items:
                return "a list of " + ", ".join(map(str, items["enum"]))
            lo, hi = items.get("minimum"), items.get("maximum")
            n = s.get("minItems")
            return f"a list of {n or ''} {items.get('type', 'value')}s in [{lo}, {hi}]".replace("  ", " ")
        if lo is not None or hi is not None:
            lb = "(" if "exclusiveMinimum" in s else "["
            rb = ")" if "exclusiveMaximum" in s else "]"
            return f"{t} in {lb}{lo}, {hi}{rb}"
        return str(t)

    def catalogue_entry(self) -> dict[str, Any]:
        return {
            "name": self.full_name,
            "description": self.description,
            "allowed": self.allowed_text(),
            "hot": self.hot,
            "gyms": self.gyms,
            "max_delta": self.max_delta,
            "max_factor": self.max_factor,
            "requires": self.requires,
            "schema": self.schema,
        }


@dataclass
class AreaSchema:
    area: str
    path: Path
    raw: dict[str, Any]
    knobs: dict[str, KnobSpec]


def _meta_check(area: str, path: Path, name: str, prop: Any) -> KnobSpec:
    where = f"{path}: knob {area}.{name}"
    if not isinstance(prop, dict):
        raise SchemaProblem(f"{where}: must be an object")
    unknown = {k for k in prop if k.startswith("x-")} - HARNESS_KEYWORDS
    if unknown:
        raise SchemaProblem(f"{where}: unknown harness keyword(s) {sorted(unknown)}; known: {sorted(HARNESS_KEYWORDS)}")
    if not isinstance(prop.get("description"), str) or not prop["description"].strip():
        raise SchemaProblem(f"{where}: needs a description (what it governs)")
    if not isinstance(prop.get("x-hot"), bool):
        raise SchemaProblem(f"{where}: needs x-hot: true (live) or false (next run)")
    gyms = prop.get("x-gyms")
    if (
        not isinstance(gyms, list)
        or not gyms
        or not all(isinstance(g, str) and (g == "*" or GYM_NAME.match(g)) for g in gyms)
    ):
        raise SchemaProblem(f'{where}: x-gyms must be a non-empty list of gym names or ["*"]')
    if "type" not in prop and "enum" not in prop:
        raise SchemaProblem(f"{where}: needs a type or an enum")
    for key in ("x-max-delta", "x-max-factor"):
        if key in prop and (not isinstance(prop[key], (int, float)) or isinstance(prop[key], bool) or prop[key] <= 0):
            raise SchemaProblem(f"{where}: {key} must be a positive number")
    if "x-max-factor" in prop and prop["x-max-factor"] <= 1:
        raise SchemaProblem(f"{where}: x-max-factor must be > 1")
    reqs = prop.get("x-requires", [])
    if not isinstance(reqs, list):
        raise SchemaProblem(f"{where}: x-requires must be a list of conditions")
    for r in reqs:
        if not isinstance(r, dict) or set(r) - REQUIRES_KEYS or not {"when", "metric", "op", "value"} <= set(r):
            raise SchemaProblem(
                f"{where}: each x-requires entry needs when, metric, op, value "
                f"(optional per_gym, window, why); got {r!r}"
            )
        if r["when"] not in ("increase", "decrease", "change") or r["op"] not in (">=", "<="):
            raise SchemaProblem(f"{where}: x-requires when must be increase|decrease|change and op >=|<=")
    if prop.get("x-check") not in (None, "increasing"):
        raise SchemaProblem(f"{where}: x-check must be 'increasing'")
    scalar = {k: v for k, v in prop.items() if k not in HARNESS_KEYWORDS}
    try:
        Draft202012Validator.check_schema(scalar)
    except SchemaError as exc:
        raise SchemaProblem(f"{where}: invalid JSON Schema: {exc.message}") from None
    return KnobSpec(
        area=area,
        name=name,
        schema=scalar,
        description=prop["description"].strip(),
        hot=prop["x-hot"],
        gyms=list(gyms),
        max_delta=prop.get("x-max-delta"),
        max_factor=prop.get("x-max-factor"),
        requires=[{"per_gym": False, "window": 5, "why": "", **r} for r in reqs],
        check=prop.get("x-check"),
        validator=Draft202012Validator(scalar),
    )


def parse_area_schema(area: str, path: Path, raw: Any, text: str | None = None) -> AreaSchema:
    """Meta-validate one area schema document; raises SchemaProblem naming file and knob (and its
    line in ``text``, the file's text, when given)."""
    if not isinstance(raw, dict) or raw.get("type") != "object" or not isinstance(raw.get("properties"), dict):
        raise SchemaProblem(f"{path}: an area schema is an object schema with 'properties' (one per knob)", 1)
    knobs = {}
    for name, prop in raw["properties"].items():
        try:
            knobs[name] = _meta_check(area, path, name, prop)
        except SchemaProblem as exc:
            exc.line = json_line(text, name) if text else None
            raise
    return AreaSchema(area=area, path=path, raw=raw, knobs=knobs)


def schema_path(knobs_dir: Path, area: str) -> Path:
    return Path(knobs_dir) / "schema" / f"{area}.schema.json"


def load_area_schema(knobs_dir: Path, area: str) -> AreaSchema:
    path = schema_path(knobs_dir, area)
    raw, text = read_schema_json(path)
    return parse_area_schema(area, path, raw, text)


def load_rule_schema(path: Path, data: bytes | None = None) -> Draft202012Validator | None:
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


def load_schemas(knobs_dir: Path) -> dict[str, AreaSchema]:
    return {area: load_area_schema(knobs_dir, area) for area in AREAS}


# --------------------------------------------------------------------------- value validation
def _scalar_refusal(spec: KnobSpec, value: Any, where: str) -> Refusal | None:
    bad = non_finite(value)
    if bad:
        at = f"{where}[{']['.join(map(str, bad[0]))}]" if bad[0] else where
        return Refusal(
            RULE_RANGE,
            f"{at}: {bad[1]!r} is not a finite number (NaN and infinity are refused "
            f"everywhere); allowed: {spec.allowed_text()}",
        )
    errors = sorted(spec.validator.iter_errors(value), key=lambda e: len(list(e.path)))
    if errors:
        e = errors[0]
        rule = RULE_TYPE if e.validator == "type" else RULE_RANGE
        return Refusal(rule, f"{where}: {value!r} is not allowed ({e.message}); allowed: {spec.allowed_text()}")
    if spec.check == "increasing" and isinstance(value, list):
        if any(not a < b for a, b in zip(value, value[1:])):
            return Refusal(RULE_RANGE, f"{where}: {value!r} must be strictly increasing (low < high)")
    return None


def not_data(value: Any) -> tuple[tuple[Any, ...], Any] | None:
    """The path and value of the first node that is not plain data (a number, string, boolean, null,
    list or mapping): a YAML ``!!set``, a date, binary... (None: all plain)."""
    return first_node(value, lambda v: not (v is None or isinstance(v, (bool, int, float, str, list, Mapping))))


def validate_value(spec: KnobSpec, value: Any) -> Refusal | None:
    """Check a knob's whole value (scalar or per-gym form) against its schema."""
    odd = not_data(value)
    if odd:
        at = spec.full_name + "".join(f"[{p}]" for p in odd[0])
        return Refusal(
            RULE_TYPE,
            f"{at}: a {type(odd[1]).__name__} is not a knob value (a YAML tag such as !!set or a date?); "
            f"values are numbers, strings, booleans, null, lists and mappings; allowed: {spec.allowed_text()}",
        )
    if isinstance(value, Mapping):
        if DEFAULT_KEY not in value:
            return Refusal(
                RULE_RANGE,
                f"{spec.full_name}: a per-gym value needs a 'default' entry (e.g. {{default: ..., travel: ...}})",
            )
        for key, v in value.items():
            if key != DEFAULT_KEY:
                if not isinstance(key, str) or not GYM_NAME.match(key):
                    return Refusal(
                        RULE_GYM,
                        f"{spec.full_name}: per-gym key {key!r} ({type(key).__name__}) is "
                        "not a gym name; keys are 'default' and gym names such as travel",
                    )
                if not spec.governs(key):
                    return Refusal(
                        RULE_GYM, f"{spec.full_name}: has no effect on gym {key!r}; it governs {', '.join(spec.gyms)}"
                    )
                if "*" in spec.gyms and key not in gym_names():  # a typo here would silently change nothing
                    return Refusal(
                        RULE_GYM, f"{spec.full_name}: per-gym key {key!r} names no gym; gyms: {', '.join(gym_names())}"
                    )
            r = _scalar_refusal(spec, v, f"{spec.full_name}[{key}]")
            if r:
                return r
        return None
    return _scalar_refusal(spec, value, spec.full_name)
