"""``eau effect``: did a knob change help? Windows before and after it, against a noise floor.

* pre-window: the ``window`` steps with the metric just before the event's ``step_effective``;
* post-window: the ``window`` steps with the metric from ``step_effective + lag`` on (``lag``: steps
  the change needs to show; env/user/reward knobs act from the next episode, optimisation knobs
  through training, so a lag of a few steps suits them);
* difference: mean(post) - mean(pre);
* noise floor: how large that difference gets by chance, from a seeded bootstrap of the
  pre-window (both windows resampled from it; :func:`harness.analysis.stats.bootstrap_noise_floor`);
* verdict: ``inconclusive`` when ``|difference| <= noise floor``; else ``improved`` or ``harmed``
  by the metric's better direction (``LOWER_IS_BETTER``: deadlock_rate, format_error_rate, ...),
  or ``changed`` for a metric with no better direction (entropy, turns, ...; pass ``--direction``);
  ``not_enough_data`` when a window is short, with how many steps are missing.
"""

from __future__ import annotations

from typing import Any

from harness.analysis.run_data import RunData
from harness.analysis.stats import bootstrap_noise_floor, mean

DEFAULT_METRIC = "success_rate"
DEFAULT_WINDOW = 10  # steps per window: the method judged effects over 10-step windows
DEFAULT_LAG = 0  # env/user/reward knobs act from the next episode
BOOTSTRAP_ITERATIONS = 2000  # enough for a stable 95% quantile (its run-to-run spread is ~1%)
BOOTSTRAP_QUANTILE = 0.95  # a difference beyond what chance gives 19 times in 20
BOOTSTRAP_SEED = 0

# Metrics (last path part, so gym/<g>/<m> and arm/<a>/<m> too) where higher or lower is better.
HIGHER_IS_BETTER = {"success_rate", "reward_mean", "task_score_mean", "answer_rate", "rollout_tokens_per_s"}
LOWER_IS_BETTER = {
    "deadlock_rate",
    "format_error_rate",
    "tool_failure_rate",
    "leak_flag_rate",
    "unasked_rate",
    "token_truncation_rate",
    "kl",
    "approx_kl",
    "value_loss",
    "time_step_s",
    "time_rollout_s",
    "time_update_s",
    "time_harness_s",
    "reward_std",
}
VERDICTS = ("improved", "harmed", "inconclusive", "changed", "not_enough_data")


class EffectError(ValueError):
    """The event cannot be analysed (rejected, never applied); the message says why."""


def metric_direction(metric: str) -> str | None:
    """``higher``, ``lower`` or None (no better direction) for a metric name."""
    base = metric.rsplit("/", 1)[-1]
    if base in HIGHER_IS_BETTER:
        return "higher"
    if base in LOWER_IS_BETTER:
        return "lower"
    return None


def _event_brief(e: dict[str, Any]) -> dict[str, Any]:
    return {
        k: e.get(k)
        for k in (
            "id",
            "knob",
            "gym",
            "old",
            "new",
            "status",
            "author",
            "reason",
            "step_written",
            "step_effective",
            "applies",
            "time",
        )
    }


def effect(
    run: RunData,
    *,
    event_id: str | None = None,
    at_step: int | None = None,
    metric: str | None = None,
    lag: int = DEFAULT_LAG,
    window: int = DEFAULT_WINDOW,
    direction: str | None = None,
    iterations: int = BOOTSTRAP_ITERATIONS,
    seed: int = BOOTSTRAP_SEED,
) -> dict[str, Any]:
    """The effect document. Raises KeyError for an unknown event, EffectError when it was not applied."""
    if window < 2:
        raise EffectError(f"--window must be at least 2 steps, got {window}")
    if lag < 0:
        raise EffectError(f"--lag must be >= 0, got {lag}")
    if direction not in (None, "higher", "lower"):
        raise EffectError(f"--direction must be higher or lower, got {direction!r}")
    ev = None
    if event_id is not None:
        ev = run.knob_event(event_id)
        if ev is None:
            known = [e.get("id") for e in run.knob_events if e.get("status") == "accepted"][-5:]
            raise KeyError(
                f"no knob event {event_id!r} in {run.dir / 'knob_events.jsonl'}"
                + (f"; recent accepted events: {', '.join(map(str, known))}" if known else "")
            )
        if ev.get("status") != "accepted":
            raise EffectError(
                f"event {event_id} was {ev.get('status')} ({ev.get('rule')}: {ev.get('message')}); "
                "a refused write changed nothing"
            )
        if not isinstance(ev.get("step_effective"), int):
            raise EffectError(
                f"event {event_id} has no step_effective (applies: {ev.get('applies')}); it never took "
                "effect in this run"
            )
        start = int(ev["step_effective"])
    elif at_step is not None:
        start = int(at_step)
    else:
        raise EffectError("give --event ID (a knob event of the run) or --at-step STEP")
    if metric is None:
        metric = f"gym/{ev['gym']}/{DEFAULT_METRIC}" if ev and ev.get("gym") else DEFAULT_METRIC
    better = direction or metric_direction(metric)
    series = run.series(metric)
    if not series and run.metrics and not any(metric in m for m in run.metrics):
        raise KeyError(
            f"metric {metric!r} is not in {run.dir / 'metrics.jsonl'}; e.g. "
            + ", ".join(sorted(k for k in run.metrics[-1] if isinstance(run.metrics[-1][k], (int, float)))[:12])
        )
    pre = [(s, v) for s, v in series if s < start][-window:]
    post = [(s, v) for s, v in series if s >= start + lag][:window]
    others = [
        _event_brief(e)
        for e in run.knob_events
        if e.get("status") == "accepted"
        and isinstance(e.get("step_effective"), int)
        and (ev is None or e.get("id") != ev.get("id"))
        and (start - window) <= e["step_effective"] < start + lag + window
    ]
    doc: dict[str, Any] = {
        "run": run.run_id,
        "event": _event_brief(ev) if ev else None,
        "at_step": start,
        "metric": metric,
        "direction": better or "none",
        "direction_source": "flag" if direction else ("table" if better else "none"),
        "lag": lag,
        "window": window,
        "pre": {"steps": [s for s, _ in pre], "n": len(pre), "mean": mean([v for _, v in pre])},
        "post": {"steps": [s for s, _ in post], "n": len(post), "mean": mean([v for _, v in post])},
        "bootstrap": {
            "iterations": iterations,
            "quantile": BOOTSTRAP_QUANTILE,
            "seed": seed,
            "resampled_from": "pre-window",
        },
        "other_events_in_windows": others[:10],
    }
    missing_pre, missing_post = window - len(pre), window - len(post)
    if missing_pre > 0 or missing_post > 0:
        doc.update(
            {
                "state": "not_enough_data",
                "verdict": "not_enough_data",
                "difference": None,
                "noise_floor": None,
                "missing": {"pre": max(0, missing_pre), "post": max(0, missing_post)},
                "explanation": (
                    f"need {window} steps with {metric} on each side; missing {max(0, missing_pre)} "
                    f"before step {start} and {max(0, missing_post)} from step {start + lag} on"
                    + (
                        " (the run is still going: wait for more steps)"
                        if run.live and missing_post > 0
                        else " (use a smaller --window or --lag)"
                    )
                ),
            }
        )
        return doc
    diff = float(doc["post"]["mean"] - doc["pre"]["mean"])
    floor = bootstrap_noise_floor(
        [v for _, v in pre], window, iterations=iterations, quantile=BOOTSTRAP_QUANTILE, seed=seed
    )
    if abs(diff) <= floor:
        verdict = "inconclusive"
    elif better is None:
        verdict = "changed"
    else:
        verdict = "improved" if (diff > 0) == (better == "higher") else "harmed"
    why = {
        "inconclusive": f"|{diff:+.4f}| is within the noise floor {floor:.4f}",
        "changed": f"{diff:+.4f} exceeds the noise floor {floor:.4f}, but {metric} has no better direction "
        "(pass --direction higher|lower)",
        "improved": f"{diff:+.4f} exceeds the noise floor {floor:.4f} in the better direction ({better} is better)",
        "harmed": f"{diff:+.4f} exceeds the noise floor {floor:.4f} in the worse direction ({better} is better)",
    }
    doc.update(
        {
            "state": "ok",
            "verdict": verdict,
            "difference": round(diff, 6),
            "noise_floor": round(floor, 6),
            "missing": {"pre": 0, "post": 0},
            "explanation": why[verdict]
            + (f"; {len(others)} other knob change(s) fall in these windows" if others else ""),
        }
    )
    return doc
