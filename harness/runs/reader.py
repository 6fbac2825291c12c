"""Reading runs from the file system (what the CLI, the skill's commands and the meta-agent see).

A run folder ``runs/<run_id>/`` holds ``status.json`` (heartbeat, rewritten atomically by the
trainer), ``metrics.jsonl``, ``knob_events.jsonl``, ``knobs_in_force.json`` and more (see
harness/runs/writer.py and skill/references/formats.md).
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

from harness.io import jsonl
from harness.io.processes import pid_alive, sees_pid_namespace


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        obj = json.loads(Path(path).read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError, IsADirectoryError):
        return None
    return obj if isinstance(obj, dict) else None


def status(run_dir: Path) -> dict[str, Any] | None:
    return read_json(Path(run_dir) / "status.json")


def is_live(st: dict[str, Any] | None) -> bool:
    """A run is live when its status says running and its trainer process exists on this host.

    A reader in another PID namespace than the trainer's (a command of a Codex session runs in its
    own) cannot see that process; for it the status's word stands: concluding "ended" there would
    treat a live run as dead (and take a write meant for it as one for a stopped run)."""
    if not st or st.get("state") != "running":
        return False
    if st.get("host") not in (None, socket.gethostname()):
        return False
    if not sees_pid_namespace(st.get("pid_ns")):
        return True
    return pid_alive(st.get("pid"))


def list_runs(runs_dir: Path) -> list[Path]:
    """Run folders (those with a status.json or config.yaml), oldest first by creation."""
    root = Path(runs_dir)
    if not root.is_dir():
        return []
    runs = [p for p in root.iterdir() if p.is_dir() and ((p / "status.json").exists() or (p / "config.yaml").exists())]
    return sorted(runs, key=lambda p: ((status(p) or {}).get("started_unix", p.stat().st_mtime), p.name))


def find_run(runs_dir: Path, run: str | None) -> Path | None:
    """``run`` as a path or a run id under ``runs_dir``; None -> the newest run."""
    if run:
        p = Path(run)
        if p.is_dir() and (p / "status.json").exists():
            return p
        p = Path(runs_dir) / run
        return p if p.is_dir() else None
    runs = list_runs(runs_dir)
    return runs[-1] if runs else None


def live_runs(runs_dir: Path, knobs_dir: Path | None = None) -> list[Path]:
    """The live runs, newest first (optionally: those made from the project knobs folder ``knobs_dir``,
    or training from it)."""
    want = str(Path(knobs_dir).resolve()) if knobs_dir is not None else None
    out = []
    for p in reversed(list_runs(runs_dir)):
        st = status(p)
        if is_live(st) and (want is None or want in (st.get("knobs_dir"), st.get("project_knobs_dir"))):
            out.append(p)
    return out


def find_live_run(runs_dir: Path, knobs_dir: Path | None = None) -> Path | None:
    """The newest live run (optionally: one made from, or training from, ``knobs_dir``)."""
    runs = live_runs(runs_dir, knobs_dir)
    return runs[0] if runs else None


def final_knob_state(run_dir: Path | None, next_run: bool = True) -> dict[str, Any] | None:
    """The knob state a run had in force last (``knobs_in_force.json``: ``values``, ``rules``,
    ``next_run``; None when unreadable). ``next_run``: the values it accepted for the next run are put
    in force (where ``eau train --from`` and ``eau knobs promote`` start)."""
    doc = read_json(Path(run_dir) / "knobs_in_force.json") if run_dir is not None else None
    if not isinstance(doc, dict) or not isinstance(doc.get("values"), dict):
        return None
    state = {"values": doc["values"], "rules": doc.get("rules") or {}, "next_run": doc.get("next_run") or {}}
    if next_run:
        for name, raw in state.pop("next_run").items():
            area, _, knob = name.partition(".")
            state["values"].setdefault(area, {})[knob] = raw
    return state


def recent_episodes(run_dir: Path | None, steps: int = 3) -> list[dict[str, Any]]:
    """The episodes of a run's last ``steps`` recorded steps (what a plug-in's gate replays)."""
    folder = Path(run_dir) / "trajectories" if run_dir is not None else None
    if folder is None or not folder.is_dir():
        return []
    return [rec for f in sorted(folder.glob("step_*.jsonl"))[-steps:] for rec in jsonl.read(f)]


def recent_metrics(run_dir: Path | None, n: int = 50) -> list[dict[str, Any]]:
    if run_dir is None:
        return []
    return jsonl.tail(Path(run_dir) / "metrics.jsonl", n)
