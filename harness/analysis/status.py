"""``eau status``: the state of a run on one screen (the same data as JSON with ``--json``).

Sections: run state (step/total, live or not, ETA, heartbeat age), trends with sparklines of the
headline metrics over the last ``spark`` steps, per-gym and per-arm lines (episode-weighted over the
last ``window`` steps), the last knob events, and open alerts: alert events of the recent window from
``events.jsonl`` plus the detectors that flag over the window (``eau diagnose``).
"""

from __future__ import annotations

import time
from io import StringIO
from typing import Any

from rich.console import Console
from rich.table import Table

from harness.analysis.diagnose import DEFAULT_WINDOW, diagnose
from harness.analysis.run_data import RunData, num
from harness.analysis.stats import mean, slope, sparkline

TREND_METRICS = ("reward_mean", "success_rate", "entropy", "kl", "deadlock_rate", "question_rate")
SPLIT_METRICS = ("success_rate", "reward_mean", "deadlock_rate", "questions_mean")
DEFAULT_SPARK = 40  # steps shown in a sparkline: fits one terminal line next to the numbers
DEFAULT_EVENTS = 5
DEFAULT_ALERTS = 5


def _weighted(lines: list[dict[str, Any]], prefix: str, name: str) -> float | None:
    tot = n = 0.0
    for m in lines:
        v, w = num(m.get(f"{prefix}/{name}")), num(m.get(f"{prefix}/episodes"))
        if v is not None and w:
            tot += v * w
            n += w
    return tot / n if n else None


def _splits(run: RunData, kind: str, steps: list[int], spark: int) -> list[dict[str, Any]]:
    """Per-gym (kind ``gym``) or per-arm (``arm``) lines over the window."""
    lines = run.metrics_for(steps)
    names = sorted(
        {
            k.split("/")[1]
            for m in run.metrics
            for k in m
            if k.startswith(f"{kind}/") and k.endswith("/episodes") and k.count("/") == 2
        }
    )
    out = []
    for name in names:
        prefix = f"{kind}/{name}"
        row: dict[str, Any] = {"name": name, "episodes": int(sum(num(m.get(f"{prefix}/episodes")) or 0 for m in lines))}
        for metric in SPLIT_METRICS:
            v = _weighted(lines, prefix, metric)
            row[metric] = round(v, 4) if v is not None else None
        row["spark_success"] = sparkline([num(m.get(f"{prefix}/success_rate")) for m in run.metrics], spark)
        out.append(row)
    return out


def _event_line(e: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": e.get("id"),
        "time": e.get("time"),
        "knob": e.get("knob"),
        "gym": e.get("gym"),
        "old": e.get("old"),
        "new": e.get("new"),
        "status": e.get("status"),
        "author": e.get("author"),
        "reason": e.get("reason"),
        "step_effective": e.get("step_effective"),
        "rule": e.get("rule"),
        "message": e.get("message") if e.get("status") == "rejected" else None,
    }


def status_doc(
    run: RunData,
    *,
    spark: int = DEFAULT_SPARK,
    window: int = DEFAULT_WINDOW,
    events: int = DEFAULT_EVENTS,
    alerts: int = DEFAULT_ALERTS,
    detectors: bool = True,
) -> dict[str, Any]:
    """The data ``eau status`` shows."""
    st = run.status
    steps = run.last_steps(window)
    last_step = steps[-1] if steps else None
    hb = num(st.get("heartbeat_unix"))
    trends = {}
    for name in TREND_METRICS:
        series = run.series(name)
        if not series:
            continue
        recent = [v for s, v in series if last_step is None or s in set(steps)]
        trends[name] = {
            "latest": round(series[-1][1], 5),
            "window_mean": round(mean(recent) or 0.0, 5),
            "window_slope": round(slope(recent) or 0.0, 6),
            "spark": sparkline([v for _, v in series], spark),
            "first_step_shown": series[-spark:][0][0],
        }
    recent_alerts = [
        e
        for e in run.alerts()
        if last_step is None or not isinstance(e.get("step"), int) or e["step"] >= last_step - window
    ]
    open_alerts = [
        {
            "source": "events",
            "alert": e.get("alert"),
            "step": e.get("step"),
            "time": e.get("time"),
            "message": str(e.get("message", ""))[:300],
        }
        for e in recent_alerts[-alerts:]
    ]
    findings_flagged: list[dict[str, Any]] = []
    if detectors and steps:
        doc = diagnose(run, window=window)
        findings_flagged = [
            {
                "source": "detector",
                "alert": f["name"],
                "severity": f["severity"],
                "component": f["component"],
                "message": f["summary"][:300],
            }
            for f in doc["findings"]
            if f["flagged"]
        ]
    return {
        "run": run.run_id,
        "dir": str(run.dir),
        "state": st.get("state", "unknown"),
        "live": run.live,
        "stale": st.get("state") == "running" and not run.live,
        "step": st.get("step", last_step),
        "last_metrics_step": last_step,
        "total_steps": st.get("total_steps"),
        "eta_s": st.get("eta_s"),
        "heartbeat_age_s": round(time.time() - hb, 1) if hb else None,
        "phase": st.get("phase"),
        "phase_done": st.get("phase_done"),
        "phase_total": st.get("phase_total"),
        "phase_eta_s": st.get("phase_eta_s"),
        "ended": st.get("ended"),
        "gyms": run.gyms,
        "window": window,
        "trends": trends,
        "per_gym": _splits(run, "gym", steps, spark),
        "per_arm": _splits(run, "arm", steps, spark),
        "knob_events": [_event_line(e) for e in run.knob_events[-events:]],
        "knob_events_total": len(run.knob_events),
        "alerts": open_alerts + findings_flagged[:alerts],
    }


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def _fmt(v: Any, width: int = 7) -> str:
    if v is None:
        return "-".rjust(width)
    if isinstance(v, float):
        return f"{v:.3f}".rjust(width)
    return str(v).rjust(width)


def render_status(doc: dict[str, Any], width: int = 120) -> str:
    """``doc`` as one screen of text (rich tables, no colour codes when not a terminal)."""
    buf = StringIO()
    con = Console(file=buf, width=width, force_terminal=False, color_system=None)
    running = doc["state"] == "running"
    eta = f", ETA {doc['eta_s'] / 60:.1f} min" if isinstance(doc.get("eta_s"), (int, float)) and running else ""
    live = "live" if doc["live"] else ("STALE: no trainer process on this host" if doc["stale"] else "not live")
    age = doc.get("heartbeat_age_s")
    if running:
        hb = f", heartbeat {age:.0f}s ago" if age is not None else ""
    else:  # a run that ended has no heartbeat: say when it ended
        hb = f", ended {_ago(age)}" if age is not None else ""
    phase = ""
    if running and doc.get("phase"):
        phase = f", phase: {doc['phase']}"
        if doc.get("phase_total"):
            phase += f" {doc.get('phase_done') or 0}/{doc['phase_total']}"
        if isinstance(doc.get("phase_eta_s"), (int, float)):
            phase += f" (ETA {doc['phase_eta_s'] / 60:.1f} min)"
    con.print(
        f"run {doc['run']}: {doc['state']} ({live}){phase}, step {doc['step']}/{doc['total_steps']}{eta}{hb}; "
        f"gyms {', '.join(doc['gyms']) or '-'}"
    )
    t = Table(title=f"trends (window {doc['window']} steps)", title_justify="left", expand=False)
    for col in ("metric", "latest", "window mean", "slope/step", "history"):
        t.add_column(col, no_wrap=True)
    for name, tr in doc["trends"].items():
        t.add_row(name, _fmt(tr["latest"]), _fmt(tr["window_mean"]), f"{tr['window_slope']:+.4f}", tr["spark"])
    con.print(t)
    for kind in ("per_gym", "per_arm"):
        if not doc[kind]:
            continue
        t = Table(title=kind.replace("_", " ") + f" (last {doc['window']} steps)", title_justify="left")
        for col in ("name", "episodes", "success", "reward", "deadlock", "questions", "success history"):
            t.add_column(col, no_wrap=True)
        for r in doc[kind]:
            t.add_row(
                r["name"],
                str(r["episodes"]),
                _fmt(r["success_rate"]),
                _fmt(r["reward_mean"]),
                _fmt(r["deadlock_rate"]),
                _fmt(r["questions_mean"]),
                r["spark_success"],
            )
        con.print(t)
    if doc["knob_events"]:
        con.print(f"last knob events ({len(doc['knob_events'])} of {doc['knob_events_total']}):")
        for e in doc["knob_events"]:
            gym = f"[{e['gym']}]" if e.get("gym") else ""
            tail = f" step {e['step_effective']}" if e.get("step_effective") is not None else ""
            msg = f" | {e['rule']}: {str(e['message'])[:80]}" if e.get("status") == "rejected" else ""
            con.print(
                f"  {e['id']} {e['status']:8} {e['knob']}{gym} {str(e['old'])[:30]} -> {str(e['new'])[:30]} "
                f"by {e['author']}{tail}{msg}",
                overflow="ellipsis",
                no_wrap=True,
            )
    if doc["alerts"]:
        con.print("open alerts:")
        for a in doc["alerts"]:
            sev = f" [{a['severity']}/{a['component']}]" if a.get("severity") else ""
            con.print(f"  {a['alert']}{sev}: {a['message'][:160]}", overflow="ellipsis", no_wrap=True)
    else:
        con.print("open alerts: none")
    return buf.getvalue()
