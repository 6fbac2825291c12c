"""``eau diagnose``: run the detectors over a window of recent steps of a run.

The window is the last ``window`` recorded steps (at or before ``until``); detectors get that
window's metric lines and trajectory records, plus the metric lines before it as history.
Threshold overrides are ``NAME.KEY=VALUE`` (``deadlock.rate=0.2``); with one detector selected,
``KEY=VALUE`` is enough.
"""

from __future__ import annotations

import time
from typing import Any, Iterable, Mapping, Sequence

from harness.analysis.detectors import DETECTORS, ORDER, DetectorInput, Finding
from harness.analysis.run_data import RunData

DEFAULT_WINDOW = 10  # steps: the method's effect windows were 10 steps; long enough to average a few batches


class UsageError(ValueError):
    """A bad detector name or threshold override (the CLI exits 2 with this message)."""


def detector_names() -> list[str]:
    return [n for n in ORDER if n in DETECTORS] + sorted(n for n in DETECTORS if n not in ORDER)


def parse_thresholds(items: Iterable[str], only: Sequence[str] | None = None) -> dict[str, dict[str, float]]:
    """``["deadlock.rate=0.2", ...]`` -> ``{"deadlock": {"rate": 0.2}}``; errors name the allowed keys."""
    out: dict[str, dict[str, float]] = {}
    for item in items:
        name, eq, raw = item.partition("=")
        if not eq:
            raise UsageError(f"--threshold {item!r}: expected NAME.KEY=VALUE, e.g. deadlock.rate=0.2")
        det, dot, key = name.strip().rpartition(".")
        if not dot:
            if only and len(only) == 1:
                det, key = only[0], name.strip()
            else:
                raise UsageError(
                    f"--threshold {item!r}: name the detector (DETECTOR.KEY=VALUE) unless --detector "
                    "selects exactly one"
                )
        if det not in DETECTORS:
            raise UsageError(
                f"--threshold {item!r}: unknown detector {det!r}; detectors: {', '.join(detector_names())}"
            )
        if key not in DETECTORS[det].thresholds:
            raise UsageError(
                f"--threshold {item!r}: detector {det} has no threshold {key!r}; its thresholds: "
                f"{', '.join(DETECTORS[det].thresholds)}"
            )
        try:
            value = float(raw)
        except ValueError:
            raise UsageError(f"--threshold {item!r}: {raw!r} is not a number") from None
        out.setdefault(det, {})[key] = value
    return out


def window_input(
    run: RunData, window: int = DEFAULT_WINDOW, until: int | None = None, with_episodes: bool = True
) -> DetectorInput:
    """The detectors' input for the last ``window`` steps of ``run`` (at or before ``until``)."""
    steps = run.last_steps(window, until)
    first = steps[0] if steps else None
    before = run.last_steps(len(steps), first - 1) if first is not None else []
    return DetectorInput(
        metrics=run.metrics_for(steps),
        history=run.metrics_before(first) if first is not None else [],
        episodes=run.episodes(steps) if with_episodes else [],
        steps=steps,
        gyms=run.gyms,
        before_episodes=run.episodes(before) if with_episodes else [],
    )


def run_detectors(
    data: DetectorInput, names: Sequence[str] | None = None, thresholds: Mapping[str, Mapping[str, float]] | None = None
) -> list[Finding]:
    """Run the named detectors (all by default) in their documented order."""
    chosen = list(names) if names else detector_names()
    for n in chosen:
        if n not in DETECTORS:
            raise UsageError(f"unknown detector {n!r}; detectors: {', '.join(detector_names())}")
    return [DETECTORS[n].run(data, (thresholds or {}).get(n)) for n in chosen]


def diagnose(
    run: RunData,
    *,
    window: int = DEFAULT_WINDOW,
    until: int | None = None,
    names: Sequence[str] | None = None,
    thresholds: Mapping[str, Mapping[str, float]] | None = None,
) -> dict[str, Any]:
    """The JSON document of ``eau diagnose``."""
    t0 = time.perf_counter()
    data = window_input(run, window, until)
    findings = run_detectors(data, names, thresholds)
    return {
        "run": run.run_id,
        "window": {
            "steps": len(data.steps),
            "first": data.steps[0] if data.steps else None,
            "last": data.steps[-1] if data.steps else None,
            "requested": window,
        },
        "episodes": len(data.episodes),
        "flagged": [f.name for f in findings if f.flagged],
        "findings": [f.to_dict() for f in findings],
        "elapsed_s": round(time.perf_counter() - t0, 3),
    }


def catalogue() -> list[dict[str, Any]]:
    """Every detector with its documentation and thresholds (``eau diagnose --list``)."""
    return [
        {
            "name": d.name,
            "component": d.component,
            "doc": d.doc,
            "thresholds": {k: {"default": t.default, "doc": t.doc} for k, t in d.thresholds.items()},
        }
        for d in (DETECTORS[n] for n in detector_names())
    ]
