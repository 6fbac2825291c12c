"""Reading what the analysis commands need from a run folder (read-only, bounded).

A :class:`RunData` holds the run's small files (``status.json``, ``config.yaml``,
``knobs_in_force.json``), every ``metrics.jsonl`` line (one per step: small), the knob and lifecycle
events, and loads ``trajectories/step_NNNNNN.jsonl`` files only for the steps asked for, because a
long run's trajectories can be gigabytes. The file formats are in ``skill/references/formats.md``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

import yaml

from harness.io import jsonl
from harness.runs import reader

_STEP_FILE = re.compile(r"^step_(\d+)\.jsonl$")


def num(value: Any) -> float | None:
    """A metric value as a finite float, or None (missing, non-numeric, NaN written as a string)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    x = float(value)
    return x if math.isfinite(x) else None


class RunNotFound(LookupError):
    """No run folder matches the ``--run`` given (or the runs folder holds none)."""


@dataclass
class RunData:
    """One run folder, read once. Trajectories are loaded per step on demand (:meth:`episodes`)."""

    dir: Path
    status: dict[str, Any]
    config: dict[str, Any]
    metrics: list[dict[str, Any]]
    knob_events: list[dict[str, Any]]
    events: list[dict[str, Any]]
    in_force: dict[str, Any]
    _traj_cache: dict[int, list[dict[str, Any]]] = field(default_factory=dict, repr=False)

    @property
    def run_id(self) -> str:
        return self.dir.name

    @property
    def live(self) -> bool:
        return reader.is_live(self.status)

    @property
    def gyms(self) -> list[str]:
        """The run's gyms (status.json, else config ``gyms``, else the gyms seen in metrics)."""
        gyms = self.status.get("gyms") or self.config.get("gyms")
        if isinstance(gyms, list) and gyms:
            return [str(g) for g in gyms]
        seen: set[str] = set()
        for m in self.metrics:
            seen.update(k.split("/")[1] for k in m if k.startswith("gym/") and k.count("/") >= 2)
        return sorted(seen)

    # ------------------------------------------------------------------ steps
    def trajectory_steps(self) -> list[int]:
        """Steps that have a trajectory file, ascending."""
        folder = self.dir / "trajectories"
        if not folder.is_dir():
            return []
        out = []
        for p in folder.iterdir():
            m = _STEP_FILE.match(p.name)
            if m:
                out.append(int(m.group(1)))
        return sorted(out)

    def metric_steps(self) -> list[int]:
        return sorted({int(m["step"]) for m in self.metrics if isinstance(m.get("step"), int)})

    def all_steps(self) -> list[int]:
        """Every step with metrics or trajectories, ascending."""
        return sorted(set(self.metric_steps()) | set(self.trajectory_steps()))

    def last_steps(self, n: int, until: int | None = None) -> list[int]:
        """The last ``n`` recorded steps (at or before ``until`` when given)."""
        steps = [s for s in self.all_steps() if until is None or s <= until]
        return steps[-n:] if n > 0 else []

    def metrics_for(self, steps: Iterable[int]) -> list[dict[str, Any]]:
        """Metric lines of ``steps``, in step order (a step logged twice keeps its last line)."""
        want = set(steps)
        by_step = {int(m["step"]): m for m in self.metrics if isinstance(m.get("step"), int) and m["step"] in want}
        return [by_step[s] for s in sorted(by_step)]

    def metrics_before(self, step: int) -> list[dict[str, Any]]:
        """Metric lines of the steps before ``step``, in order."""
        return self.metrics_for(s for s in self.metric_steps() if s < step)

    def series(self, name: str, steps: Iterable[int] | None = None) -> list[tuple[int, float]]:
        """``(step, value)`` of one metric, skipping steps where it is missing."""
        lines = self.metrics if steps is None else self.metrics_for(steps)
        out = []
        for m in lines:
            v = num(m.get(name))
            if v is not None and isinstance(m.get("step"), int):
                out.append((int(m["step"]), v))
        out.sort()
        return out

    # ------------------------------------------------------------------ trajectories
    def episodes_of_step(self, step: int) -> list[dict[str, Any]]:
        """Trajectory records of one step (empty when the step has no trajectory file)."""
        if step not in self._traj_cache:
            recs = jsonl.read(self.dir / "trajectories" / f"step_{step:06d}.jsonl")
            for i, r in enumerate(recs):
                r.setdefault("step", step)
                r.setdefault("episode_id", f"s{step:06d}-e{i:03d}")
            self._traj_cache[step] = recs
        return self._traj_cache[step]

    def episodes(self, steps: Iterable[int]) -> list[dict[str, Any]]:
        """Trajectory records of ``steps``, in step order."""
        return [e for s in sorted(set(steps)) for e in self.episodes_of_step(s)]

    def iter_episodes_newest_first(self, steps: Iterable[int]) -> Iterator[dict[str, Any]]:
        for s in sorted(set(steps), reverse=True):
            yield from self.episodes_of_step(s)

    # ------------------------------------------------------------------ events
    def knob_event(self, event_id: str) -> dict[str, Any] | None:
        for e in reversed(self.knob_events):
            if e.get("id") == event_id:
                return e
        return None

    def alerts(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("event") == "alert"]


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, yaml.YAMLError, UnicodeDecodeError):
        return {}
    return doc if isinstance(doc, dict) else {}


def load_run_dir(run_dir: Path) -> RunData:
    """Read one run folder (missing files read as empty: a run that just started has few)."""
    d = Path(run_dir)
    if not d.is_dir():
        raise RunNotFound(f"run folder {d} does not exist")
    return RunData(
        dir=d,
        status=reader.status(d) or {},
        config=_read_yaml(d / "config.yaml"),
        metrics=jsonl.read(d / "metrics.jsonl"),
        knob_events=jsonl.read(d / "knob_events.jsonl"),
        events=jsonl.read(d / "events.jsonl"),
        in_force=reader.read_json(d / "knobs_in_force.json") or {},
    )


def load_run(runs_dir: Path, run: str | None) -> RunData:
    """The run named ``run`` (an id under ``runs_dir`` or a folder path), or the newest run."""
    found = reader.find_run(Path(runs_dir), run)
    if found is None:
        if run:
            raise RunNotFound(f"no run {run!r} in {runs_dir} (pass a run id, a run folder, or --runs-dir)")
        raise RunNotFound(f"no runs in {runs_dir} (pass --runs-dir or --run)")
    return load_run_dir(found)
