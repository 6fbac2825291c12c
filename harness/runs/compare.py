"""Run summaries and run-to-run differences (``eau runs list`` and ``eau runs compare A B``).

Only training-side files of ``runs/<id>/`` are read (config.yaml, status.json, metrics.jsonl,
knob_events.jsonl, knobs_in_force.json, knobs_at_start.json); evaluation results never are.

A comparison has three parts:

* ``config``: every dotted config key whose value differs (run id excluded);
* ``knobs``: knob values in force at the end of each run (``knobs_in_force.json``; the start state
  when absent) and at the start (``knobs_at_start.json``), per ``area.knob`` (per-gym cells as
  ``area.knob[gym]``), plus which rule files differ;
* ``metrics``: the mean of each headline metric (and its per-gym and per-arm splits) over the last
  ``window`` steps of each run, the difference B - A and each run's standard deviation over that
  window (a difference inside it is noise; with fewer than 2 steps in a window, unknown).
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any, Mapping

import yaml

from harness.io import jsonl, yamlio
from harness.runs.reader import is_live, read_json, status

AREAS = ("env", "user", "reward", "agent")
HEADLINE = (
    "reward_mean",
    "success_rate",
    "task_score_mean",
    "turns_mean",
    "questions_mean",
    "answer_rate",
    "deadlock_rate",
    "format_error_rate",
    "response_tokens_mean",
    "entropy",
    "kl",
    "value_loss",
)
SPLIT_SUFFIXES = ("reward_mean", "success_rate")
IGNORED_CONFIG = ("run_id",)


def read_config(run_dir: Path) -> dict[str, Any]:
    """``config.yaml`` as a mapping ({} when absent or unreadable)."""
    try:
        data = yaml.safe_load((Path(run_dir) / "config.yaml").read_text(encoding="utf-8"))
    except (FileNotFoundError, yaml.YAMLError, UnicodeDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def summary(run_dir: Path) -> dict[str, Any]:
    """One row of ``eau runs list``: identity, lineage, progress and the last step's headline metrics."""
    run_dir = Path(run_dir)
    cfg = read_config(run_dir)
    st = status(run_dir) or {}
    last = jsonl.tail(run_dir / "metrics.jsonl", 1)
    m = last[0] if last else {}
    lineage = list(cfg.get("lineage") or [])

    state = st.get("state", "unknown")
    if state == "running" and not is_live(st):
        state = "stale"  # says running, but its process is gone: crashed or killed
    return {
        "run_id": run_dir.name,
        "state": state,
        "step": st.get("step"),
        "total_steps": st.get("total_steps"),
        "preset": cfg.get("preset"),
        "gyms": cfg.get("gyms") or st.get("gyms"),
        "parent": cfg.get("parent"),
        "parent_reason": cfg.get("parent_reason"),
        "lineage": lineage,
        "generation": len(lineage),
        "max_lineage": cfg.get("max_lineage"),
        "init_checkpoint": cfg.get("init_checkpoint"),
        "started": st.get("started"),
        "reward_mean": m.get("reward_mean"),
        "success_rate": m.get("success_rate"),
        "last_step": m.get("step"),
    }


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings -> ``{"a.b.c": leaf}`` (lists are leaves)."""
    if isinstance(obj, Mapping) and obj:
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: obj} if prefix else {}


def _diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[dict[str, Any]]:
    missing = object()
    rows = []
    for k in sorted(set(a) | set(b)):
        va, vb = a.get(k, missing), b.get(k, missing)
        if va != vb:
            rows.append(
                {
                    "key": k,
                    "a": None if va is missing else va,
                    "b": None if vb is missing else vb,
                    "only_in": "a" if vb is missing else "b" if va is missing else None,
                }
            )
    return rows


def knob_cells(values: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """``{area: {knob: value}}`` -> ``{"area.knob": v}``; per-gym values as ``area.knob[gym]`` cells."""
    out: dict[str, Any] = {}
    for area, knobs in (values or {}).items():
        for name, value in (knobs or {}).items():
            if isinstance(value, Mapping):
                for gym, cell in value.items():
                    out[f"{area}.{name}[{gym}]"] = cell
            else:
                out[f"{area}.{name}"] = value
    return out


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:12]


def start_knobs(run_dir: Path) -> dict[str, Any]:
    """Knob values and rule files the run's step 0 ran with (``knobs_at_start.json``; a run folder
    made before that file existed: its ``knobs/`` folder, then a snapshot taken at the start)."""
    doc = read_json(Path(run_dir) / "knobs_at_start.json")
    if doc and isinstance(doc.get("values"), dict):
        return {"values": doc["values"], "rules": doc.get("rules") or {}}
    root = Path(run_dir) / "knobs"
    values: dict[str, Any] = {}
    for area in AREAS:
        try:
            values[area] = yamlio.load_plain(root / f"{area}.yaml") or {}
        except yamlio.FileProblem:
            values[area] = {}
    rules: dict[str, Any] = {"users": {}, "rewards": {}}
    for kind in rules:
        for p in sorted((root / "rules" / kind).glob("*.yaml")):
            try:
                rules[kind][p.stem] = yamlio.load_plain(p)
            except yamlio.FileProblem:
                rules[kind][p.stem] = {"unparseable": p.read_text(encoding="utf-8", errors="replace")}
    return {"values": values, "rules": rules}


def end_knobs(run_dir: Path) -> dict[str, Any]:
    """Knob values and rule files in force at the run's last step (start snapshot when unknown)."""
    doc = read_json(Path(run_dir) / "knobs_in_force.json")
    if doc and isinstance(doc.get("values"), dict):
        return {"values": doc["values"], "rules": doc.get("rules") or {}}
    return start_knobs(run_dir)


def _rule_diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for kind in ("users", "rewards"):
        ra, rb = (a or {}).get(kind) or {}, (b or {}).get(kind) or {}
        for stem in sorted(set(ra) | set(rb)):
            da = _digest(ra[stem]) if stem in ra else None
            db = _digest(rb[stem]) if stem in rb else None
            if da != db:
                rows.append({"file": f"rules/{kind}/{stem}.yaml", "a": da, "b": db})
    return rows


def accepted_knob_events(run_dir: Path) -> list[dict[str, Any]]:
    """Accepted knob events of a run, in file order."""
    return [e for e in jsonl.read(Path(run_dir) / "knob_events.jsonl") if e.get("status") == "accepted"]


def window_stats(rows: list[Mapping[str, Any]], key: str) -> tuple[float | None, float | None, int]:
    """(mean, std, n) of ``key`` over ``rows`` (None when no row has it)."""
    vals = [
        float(r[key])
        for r in rows
        if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool) and math.isfinite(float(r[key]))
    ]
    if not vals:
        return None, None, 0
    mean = sum(vals) / len(vals)
    std = math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals))
    return mean, std, len(vals)


def metric_keys(rows_a: list[Mapping[str, Any]], rows_b: list[Mapping[str, Any]]) -> list[str]:
    """Headline metrics, then per-gym and per-arm reward/success splits seen in either run."""
    seen = {k for r in rows_a + rows_b for k in r}
    splits = sorted(
        k for k in seen if (k.startswith("gym/") or k.startswith("arm/")) and k.rsplit("/", 1)[-1] in SPLIT_SUFFIXES
    )
    return [k for k in HEADLINE if k in seen] + splits


def compare_runs(run_a: Path, run_b: Path, window: int = 5) -> dict[str, Any]:
    """The difference between two runs (see the module docstring)."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    run_a, run_b = Path(run_a), Path(run_b)
    ca, cb = read_config(run_a), read_config(run_b)
    config = [r for r in _diff(flatten(ca), flatten(cb)) if r["key"] not in IGNORED_CONFIG]
    ka, kb = end_knobs(run_a), end_knobs(run_b)
    sa, sb = start_knobs(run_a), start_knobs(run_b)
    ma = jsonl.tail(run_a / "metrics.jsonl", window)
    mb = jsonl.tail(run_b / "metrics.jsonl", window)
    metrics = []
    for key in metric_keys(ma, mb):
        a_mean, a_std, a_n = window_stats(ma, key)
        b_mean, b_std, b_n = window_stats(mb, key)
        delta = b_mean - a_mean if a_mean is not None and b_mean is not None else None
        noise = max(a_std or 0.0, b_std or 0.0)
        metrics.append(
            {
                "metric": key,
                "a": a_mean,
                "b": b_mean,
                "delta": delta,
                "a_std": a_std,
                "b_std": b_std,
                "a_steps": a_n,
                "b_steps": b_n,
                # None: unknown (a run with fewer than 2 steps in the window has no noise estimate)
                "beyond_noise": None if delta is None or min(a_n, b_n) < 2 else abs(delta) > noise,
            }
        )
    relation = None
    if run_a.name in (cb.get("lineage") or []):
        relation = f"{run_b.name} descends from {run_a.name}"
    elif run_b.name in (ca.get("lineage") or []):
        relation = f"{run_a.name} descends from {run_b.name}"
    return {
        "a": run_a.name,
        "b": run_b.name,
        "relation": relation,
        "window": window,
        "summary": {"a": summary(run_a), "b": summary(run_b)},
        "config": config,
        "knobs": {
            "end": _diff(knob_cells(ka["values"]), knob_cells(kb["values"])),
            "start": _diff(knob_cells(sa["values"]), knob_cells(sb["values"])),
            "rules_end": _rule_diff(ka["rules"], kb["rules"]),
            "rules_start": _rule_diff(sa["rules"], sb["rules"]),
            "accepted_events": {"a": len(accepted_knob_events(run_a)), "b": len(accepted_knob_events(run_b))},
        },
        "metrics": metrics,
    }
