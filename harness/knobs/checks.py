"""Write checks: what a *change* of a knob must satisfy beyond its schema.

Every write — CLI, hand edit, agent — goes through :func:`check_change` with the old and new value of
one cell (the global/default value or one gym's value): gym scope (``x-gyms`` against the write's
gym and the run's gyms), ``x-max-delta``, ``x-max-factor`` and ``x-requires`` against recent
training metrics (a list of metric dicts, oldest first, as in ``metrics.jsonl``).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from harness.knobs.schema import RULE_DELTA, RULE_GYM, RULE_REQUIRES, KnobSpec, Refusal

EPS = 1e-12


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def affected_gyms(
    spec: KnobSpec, gym: str | None, run_gyms: Sequence[str] | None, overridden: Sequence[str] = ()
) -> list[str] | None:
    """Gyms whose effective value a write changes (None when the run's gyms are unknown)."""
    if gym is not None:
        return [gym]
    if run_gyms is None:
        return None
    return [g for g in run_gyms if spec.governs(g) and g not in overridden]


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
    r = check_scope(spec, gym, run_gyms)
    if r:
        return r
    r = None if skip_delta else check_delta(spec, old, new)
    if r:
        return r
    if skip_requires:
        return None
    gyms = affected_gyms(spec, gym, run_gyms, overridden)
    if gyms is not None and not gyms:  # every governed gym has its own override: the default changes nothing
        return None
    return check_requires(spec, old, new, gyms, recent_metrics)
