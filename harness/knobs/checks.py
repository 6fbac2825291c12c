"""The one validation path: what a knob value, a change of it, a rule file and an area file must be.

Every write — CLI, hand edit, agent, preset — goes through :func:`check_cells`: the whole value
against its schema (:func:`harness.knobs.schema.validate_value`) and the run it would apply to
(:func:`run_refusal`), then each changed cell (the global/default value or one gym's value) through
:func:`check_change`: gym scope (``x-gyms`` against the write's gym and the run's gyms),
``x-max-delta``, ``x-max-factor`` and ``x-requires`` against recent training metrics (a list of metric
dicts, oldest first, as in ``metrics.jsonl``). Rule files go through :func:`rule_file_problem` (their
JSON Schema, then the checks of the room that reads them), area files through :func:`area_values`.

Run checks refuse values that pass their schema but that the run cannot work with, at write time
rather than at its next reset. Their facts come from the run's frozen config (``runs/<id>/config.yaml``):
the trainer gives them to its store, and ``eau knobs set`` reads them from the run's folder. A store
outside a run has no facts and skips them (a run checks its values again when it starts).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from jsonschema import Draft202012Validator

from harness.io import yamlio
from harness.knobs.schema import (
    RULE_DELTA,
    RULE_GYM,
    RULE_RANGE,
    RULE_REQUIRES,
    RULE_RUN,
    RULE_SCHEMA,
    RULE_UNKNOWN,
    KnobSpec,
    Refusal,
    non_finite,
    show_path,
    validate_value,
)
from harness.knobs.snapshot import cells, changed_cells

RunFacts = Mapping[str, Any]  # {"llm_user": bool, "config": "<path of the run's config.yaml>"}
Cell = tuple[str | None, Any, Any]  # (gym or None for the default, old value, new value)


# ---------------------------------------------------------------------------- rule files beyond their schema
@dataclass(frozen=True)
class RuleCheck:
    """What a valid rule file of one kind is, beyond its schema, as the room that reads it defines it
    (harness.users for rules/users/<gym>.yaml, harness.rewards for rules/rewards/*.yaml): whoever
    assembles the program hands them to the store (harness.stores), so the store never depends on an
    import having happened. ``check(key, value)`` and, optionally, ``set_check(key, value, {other key:
    value in force})`` (reward rule names are unique across files) raise ValueError/KeyError/TypeError
    naming the problem; an exception with a ``path`` attribute (keys and indexes into the file, e.g.
    ``("rules", 2, "name")``) lets the store name the line."""

    check: Callable[[str, Any], None]
    set_check: Callable[[str, Any, Mapping[str, Any]], None] | None = None


RuleChecks = Mapping[str, RuleCheck]  # rule kind (users | rewards) -> its checks


EPS = 1e-12


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def check_scope(spec: KnobSpec, gym: str | None, run_gyms: Sequence[str] | None) -> Refusal | None:
    if gym is not None and not spec.governs(gym):
        return Refusal(RULE_GYM, f"{spec.full_name} does not govern gym {gym!r}; it governs {', '.join(spec.gyms)}")
    if run_gyms is not None and not any(spec.governs(g) for g in run_gyms):
        return Refusal(
            RULE_GYM,
            f"{spec.full_name} governs {', '.join(spec.gyms)}, none of this run's gyms "
            f"({', '.join(run_gyms) or 'none'}); the write would have no effect",
        )
    if gym is not None and run_gyms is not None and gym not in run_gyms:
        return Refusal(RULE_GYM, f"gym {gym!r} is not trained in this run (gyms: {', '.join(run_gyms)})")
    return None


def check_delta(spec: KnobSpec, old: Any, new: Any) -> Refusal | None:
    pairs: list[tuple[Any, Any]]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        pairs = list(zip(old, new))
    else:
        pairs = [(old, new)]
    for o, n in pairs:
        if not (_is_num(o) and _is_num(n)):
            continue
        if spec.max_delta is not None and abs(n - o) > spec.max_delta + EPS:
            return Refusal(
                RULE_DELTA,
                f"{spec.full_name}: change {o} -> {n} is {abs(n - o):.6g}; "
                f"one write may change it by at most {spec.max_delta}",
            )
        if spec.max_factor is not None and o > 0 and n > 0:
            factor = max(n / o, o / n)
            if factor > spec.max_factor * (1 + 1e-9):
                return Refusal(
                    RULE_DELTA,
                    f"{spec.full_name}: change {o} -> {n} is a factor of {factor:.3g}; "
                    f"one write may change it by a factor of at most {spec.max_factor}",
                )
    return None


def _direction(old: Any, new: Any) -> str | None:
    if _is_num(old) and _is_num(new):
        return "increase" if new > old else "decrease" if new < old else None
    return "change" if old != new else None


def check_requires(
    spec: KnobSpec, old: Any, new: Any, gyms: Sequence[str] | None, recent_metrics: Sequence[Mapping[str, Any]] | None
) -> Refusal | None:
    direction = _direction(old, new)
    if direction is None:
        return None
    metrics = list(recent_metrics or [])
    for cond in spec.requires:
        if cond["when"] not in (direction, "change"):
            continue
        window = int(cond.get("window", 5))
        if cond.get("per_gym"):
            targets = gyms if gyms is not None else [g for g in spec.gyms if g != "*"]
            keys = [f"gym/{g}/{cond['metric']}" for g in targets]
        else:
            keys = [cond["metric"]]
        for key in keys:
            vals = [float(m[key]) for m in metrics if _is_num(m.get(key))][-window:]
            need = f"{key} {cond['op']} {cond['value']} over the last {window} steps"
            why = f" ({cond['why']})" if cond.get("why") else ""
            if len(vals) < window:
                return Refusal(
                    RULE_REQUIRES,
                    f"{spec.full_name} {old} -> {new}: requires {need}{why}; "
                    f"only {len(vals)} recent step(s) have {key}",
                )
            mean = sum(vals) / len(vals)
            ok = mean >= cond["value"] if cond["op"] == ">=" else mean <= cond["value"]
            if not ok:
                return Refusal(
                    RULE_REQUIRES, f"{spec.full_name} {old} -> {new}: requires {need}{why}; it is {mean:.3f}"
                )
    return None


def check_change(
    spec: KnobSpec,
    gym: str | None,
    old: Any,
    new: Any,
    *,
    recent_metrics: Sequence[Mapping[str, Any]] | None,
    run_gyms: Sequence[str] | None,
    overridden: Sequence[str] = (),
    skip_requires: bool = False,
    skip_delta: bool = False,
) -> Refusal | None:
    """All write checks for one cell, in the order a person would fix them. ``skip_delta`` and
    ``skip_requires`` serve writes that set up a run (presets, author system) rather than steer one."""
    r = check_scope(spec, gym, run_gyms) or (None if skip_delta else check_delta(spec, old, new))
    if r or skip_requires:
        return r
    gyms = [gym] if gym is not None else None  # the gyms whose effective value changes (None: not known)
    if gym is None and run_gyms is not None:
        gyms = [g for g in run_gyms if spec.governs(g) and g not in overridden]
        if not gyms:  # every governed gym has its own override: the default changes nothing
            return None
    return check_requires(spec, old, new, gyms, recent_metrics)


def check_cells(
    spec: KnobSpec,
    old_raw: Any,
    new_raw: Any,
    *,
    recent_metrics: Any,
    run_gyms: Sequence[str] | None,
    run_facts: RunFacts | None,
    skip_requires: bool = False,
    skip_delta: bool = False,
) -> tuple[list[Cell], Refusal | None]:
    """Validate a knob's new whole value against the one in force, cell by cell: the changed cells
    ``(gym, old, new)`` and the first refusal (None when all pass). ``run_gyms`` None: no gym scope."""
    ref = validate_value(spec, new_raw) or run_refusal(spec, new_raw, run_facts)
    if ref:
        return [], ref
    overridden = [g for g in cells(new_raw) if g is not None]
    changed: list[Cell] = []
    opts = dict(recent_metrics=recent_metrics, run_gyms=run_gyms, skip_requires=skip_requires, skip_delta=skip_delta)
    for g, old_v, new_v in changed_cells(old_raw, new_raw):
        changed.append((g, old_v, new_v))
        ref = check_change(spec, g, old_v, new_v, overridden=[o for o in overridden if o != g], **opts)
        if ref:
            return changed, ref
    return changed, None


# ---------------------------------------------------------------------------- the run's own checks
def facts_from_config(config: Mapping[str, Any], source: str = "the run config") -> dict[str, Any]:
    """What the run checks need to know about a run, from its config (a mapping as in config.yaml)."""
    return {"llm_user": bool(config.get("user_llm")), "config": source}


def read_run_facts(run_dir: Path) -> dict[str, Any] | None:
    """Facts of the run in ``run_dir`` from its ``config.yaml`` (None when it cannot be read)."""
    path = Path(run_dir) / "config.yaml"
    try:
        config = yamlio.load_plain(path)
    except yamlio.FileProblem:
        return None
    return facts_from_config(config, str(path)) if isinstance(config, dict) else None


def _needs_llm_user(spec: KnobSpec, value: Any, facts: RunFacts) -> Refusal | None:
    if facts.get("llm_user", True):
        return None
    low = {g or "default": v for g, v in cells(value).items() if isinstance(v, (int, float)) and v < 1}
    if not low:
        return None
    return Refusal(
        RULE_RUN,
        f"{spec.full_name} = {value!r} draws the LLM user for a share of episodes, but this run "
        f"has no LLM user (no user_llm in {facts.get('config', 'its config')}); only 1.0 "
        "(symbolic user only) can work in this run",
    )


# full knob name -> check(spec, whole raw value, facts)
RUN_CHECKS: dict[str, Callable[[KnobSpec, Any, RunFacts], Refusal | None]] = {
    "user.user_strategy_mix": _needs_llm_user,
}


def run_refusal(spec: KnobSpec, value: Any, facts: RunFacts | None) -> Refusal | None:
    """Why ``value`` cannot work in the run with ``facts`` (None: it can, or no run is known)."""
    check = RUN_CHECKS.get(spec.full_name)
    return check(spec, value, facts) if check is not None and facts else None


# ---------------------------------------------------------------------------- whole files
def rule_file_problem(
    kind: str,
    key: str,
    value: Any,
    *,
    validator: Draft202012Validator | None,
    check: RuleCheck,
    others: Mapping[str, Any],
    lines: Mapping[Any, int] | None = None,
) -> tuple[str, int | None, str] | None:
    """Why a rule file would be refused as ``rules/<kind>/<key>.yaml``: ``(message, line, rule)``
    (the line of the offending node when ``lines`` maps the file's nodes, see yamlio.scan_events),
    or None when it is valid. ``others``: the kind's other files in force."""
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
    if validator is not None:
        errors = sorted(validator.iter_errors(value), key=lambda e: len(list(e.path)))
        if errors:
            where = "/".join(str(p) for p in errors[0].path) or "(top level)"
            return f"{name} at {where}: {errors[0].message}", yamlio.line_of(lines, errors[0].path), RULE_SCHEMA
    try:
        check.check(key, value)
        if check.set_check is not None and others:
            check.set_check(key, value, others)
    except (ValueError, KeyError, TypeError) as exc:
        message = str(exc).strip("'\"")
        return f"{name}: {message}", yamlio.line_of(lines, getattr(exc, "path", ()) or ()), RULE_SCHEMA
    return None


def area_values(
    specs: Mapping[str, KnobSpec], path: Path, doc: Any, schema_name: str
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The valid knob values of an area file's document and a problem (file, line, rule, message) for
    each invalid or unknown one."""
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        what = type(doc).__name__
        message = f"{path.name} must be a mapping of knob names to values, got {what}"
        return {}, [{"file": str(path), "line": 1, "rule": RULE_SCHEMA, "message": message}]
    values: dict[str, Any] = {}
    problems: list[dict[str, Any]] = []
    for key in doc:
        name, line = str(key), yamlio.key_line(doc, key)
        if name not in specs:
            message = (
                f"unknown knob {path.stem}.{name}; known: {', '.join(sorted(specs))} "
                f"(a new knob needs its schema entry in {schema_name})"
            )
            problems.append({"file": str(path), "line": line, "rule": RULE_UNKNOWN, "message": message})
            continue
        value = yamlio.plain(doc[key])
        ref = validate_value(specs[name], value)
        if ref:
            problems.append({"file": str(path), "line": line, "rule": ref.rule, "message": ref.message})
            continue
        values[name] = value
    return values, problems
