"""Writing a run folder: ``runs/<run_id>/``.

    config.yaml            frozen run configuration (preset + overrides), written once
    knobs/                 the run's own knobs folder: made at its start from the project's knobs folder
                           and its config's values; the run applies edits there (harness/ppo/run_knobs.py)
    metrics.jsonl          one line per completed step
    trajectories/step_NNNNNN.jsonl   every episode of a step (written atomically when the step ends)
    knob_events.jsonl      accepted and refused knob writes (harness/knobs/events.py)
    knobs_in_force.json    the knob values the run is using now (rewritten atomically on change)
    knobs_at_start.json    the knob state step 0 ran with (a resume with no checkpoint starts from it)
    events.jsonl           run lifecycle and alerts: started, resumed, checkpoint, finished, failed, alert
    status.json            heartbeat: state, step, pid, host, ETA (rewritten atomically every step)
    log.txt                human-readable, one line per event/step, for ``tail -f``
    checkpoints/step_NNNNNN/  resumable state (harness/ppo/checkpoint.py)
    warm_start/            the run's own supervised warm start (config warm_start): policy.pt, sft.json,
                           metrics.jsonl (one line per update: update, updates, epoch, loss, time_s)
    meta/                  meta-agent sessions (eau supervise)
    wandb/, tensorboard/   the trackers' own files when the config's report_to names them
                           (harness/runs/trackers.py; trackio writes its own local database)

Every JSONL file is append-only with one complete line per record (harness/io/jsonl.py), and
``events.jsonl``, ``knob_events.jsonl`` and ``metrics.jsonl`` are fsynced at each append. On resume,
``metrics.jsonl`` is cut back to the byte offset recorded in the checkpoint (the steps after it run
again, so the run continues with no gap or duplicate step); the other logs keep every complete line
written before the kill (only a torn last line is dropped): ``events.jsonl`` and ``log.txt`` record
every attempt, ``knob_events.jsonl`` every write (harness/ppo/run_knobs.py applies again, under the
same event id, the writes that were in force in the steps run again).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from harness.io import jsonl
from harness.io.processes import pid_namespace
from harness.io.yamlio import atomic_write_text
from harness.knobs.events import new_event_id
from harness.runs.reader import status
from harness.runs.trackers import TrackerHub

LOGS = ("metrics.jsonl", "events.jsonl", "knob_events.jsonl", "log.txt")
CUT_ON_RESUME = ("metrics.jsonl",)  # one line per step: the steps after the checkpoint run again


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def traj_path(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / "trajectories" / f"step_{step:06d}.jsonl"


class RunWriter:
    """Writes one run folder. Create with :meth:`create` (new run) or :meth:`reopen` (resume)."""

    def __init__(self, run_dir: Path, *, echo: bool = False):
        self.dir = Path(run_dir)
        self.echo = echo  # also print log lines to stderr (when no progress bar is shown)
        self.status_doc: dict[str, Any] = {}
        self.trackers: TrackerHub | None = None  # config report_to: each record goes to these too

    def _report_to(self, config: Mapping[str, Any], resume_step: int | None) -> None:
        names = list(config.get("report_to") or [])
        if names:
            self.trackers = TrackerHub(names, self.dir.name, self.dir, config, self.alert, resume_step)

    # ------------------------------------------------------------------ lifecycle
    @classmethod
    def create(
        cls,
        run_dir: Path,
        config: Mapping[str, Any],
        knobs_dir: Path,
        gyms: list[str],
        total_steps: int,
        echo: bool = False,
        project_knobs_dir: Path | None = None,
    ) -> RunWriter:
        """A new run folder. ``knobs_dir``: the knobs folder the run trains from (its own
        ``knobs/``, made before this, is the only entry the folder may hold already);
        ``project_knobs_dir``: the project folder that one was made from."""
        run_dir = Path(run_dir)
        if run_dir.exists() and any(p.name != "knobs" for p in run_dir.iterdir()):
            raise FileExistsError(
                f"run folder {run_dir} exists and is not empty; choose another --run-id "
                f"or resume it with --resume {run_dir.name}"
            )
        (run_dir / "trajectories").mkdir(parents=True, exist_ok=True)
        (run_dir / "checkpoints").mkdir(exist_ok=True)
        (run_dir / "meta").mkdir(exist_ok=True)
        w = cls(run_dir, echo=echo)
        for name in LOGS:
            (run_dir / name).touch()
        atomic_write_text(
            run_dir / "config.yaml", yaml.safe_dump(json.loads(json.dumps(dict(config), default=str)), sort_keys=False)
        )
        w.status_doc = {
            "run_id": run_dir.name,
            "state": "running",
            "step": 0,
            "total_steps": total_steps,
            "pid": os.getpid(),
            "pid_ns": pid_namespace(),
            "host": socket.gethostname(),
            "knobs_dir": str(Path(knobs_dir).resolve()),
            "project_knobs_dir": str(Path(project_knobs_dir or knobs_dir).resolve()),
            "gyms": gyms,
            "started": now_iso(),
            "started_unix": time.time(),
            "argv": sys.argv,
        }
        w.write_status()
        w.event("started", config=config.get("preset"), gyms=gyms, total_steps=total_steps)
        w._report_to(config, None)
        return w

    @classmethod
    def reopen(cls, run_dir: Path, offsets: Mapping[str, int], next_step: int, echo: bool = False) -> RunWriter:
        """Resume: cut ``metrics.jsonl`` back to ``offsets`` (the steps from ``next_step`` run again),
        drop a torn last line of every log, drop trajectories of steps >= ``next_step``."""
        run_dir = Path(run_dir)
        w = cls(run_dir, echo=echo)
        for name in LOGS:
            p = run_dir / name
            if p.exists() and name in CUT_ON_RESUME:
                keep = int(offsets.get(name, 0))
                if p.stat().st_size > keep:
                    with open(p, "rb+") as f:
                        f.truncate(keep)
            jsonl.repair(p)
        for p in sorted((run_dir / "trajectories").glob("step_*.jsonl")):
            if int(p.stem.split("_")[1]) >= next_step:
                p.unlink()
        for p in (run_dir / "trajectories").glob(".*.tmp"):
            p.unlink()

        w.status_doc = status(run_dir) or {"run_id": run_dir.name}
        w.status_doc.update(
            {
                "state": "running",
                "pid": os.getpid(),
                "pid_ns": pid_namespace(),
                "host": socket.gethostname(),
                "step": next_step,
                "resumed": now_iso(),
            }
        )
        w.write_status()
        config_path = run_dir / "config.yaml"
        w._report_to(yaml.safe_load(config_path.read_text()) or {} if config_path.exists() else {}, next_step)
        return w

    def offsets(self) -> dict[str, int]:
        """Current byte size of each log (stored in checkpoints)."""
        return {name: (self.dir / name).stat().st_size if (self.dir / name).exists() else 0 for name in LOGS}

    # ------------------------------------------------------------------ records
    def log(self, line: str) -> None:
        text = f"{now_iso()} {line.rstrip()}\n"
        with open(self.dir / "log.txt", "a", encoding="utf-8") as f:
            f.write(text)
        if self.echo:
            sys.stderr.write(text)

    def event(self, kind: str, **data: Any) -> str:
        """Append one lifecycle event (durable); returns its id (``e-`` + 10 hex)."""
        eid = new_event_id("e-")
        jsonl.append(
            self.dir / "events.jsonl",
            {"id": eid, "time": now_iso(), "event": kind, "step": self.status_doc.get("step"), **data},
            durable=True,
        )
        return eid

    def alert(self, name: str, message: str, **data: Any) -> str:
        eid = self.event("alert", alert=name, message=message, **data)
        self.log(f"ALERT {name}: {message}")
        if self.trackers is not None:
            self.trackers.marker(int(self.status_doc.get("step") or 0), name, message)
        return eid

    def episode_errors(self, step: int, records: Iterable[Mapping[str, Any]]) -> None:
        """An ``episode_error`` event and a log line for each episode a gym failed in (the rollout
        engine ended that episode with an error record and the run went on)."""
        for r in records:
            err = r.get("error")
            if err:
                self.event("episode_error", episode_id=r.get("episode_id"), gym=r.get("gym"), error=err)
                self.log(
                    f"step {step}: episode {r.get('episode_id')} ({r.get('gym')}) ended by an error in "
                    f"{err.get('where')}: {err.get('type')}: {str(err.get('message'))[:200]}"
                )

    def metrics(self, record: Mapping[str, Any]) -> None:
        jsonl.append(self.dir / "metrics.jsonl", dict(record), durable=True)
        if self.trackers is not None:  # with the knob events logged since the last row
            self.trackers.metrics(record)

    def trajectories(self, step: int, episodes: Iterable[Mapping[str, Any]]) -> Path:
        path = traj_path(self.dir, step)
        episodes = list(episodes)
        atomic_write_text(path, "".join(jsonl.dumps(dict(e)) + "\n" for e in episodes))
        if self.trackers is not None:
            self.trackers.trajectories(step, episodes)
        return path

    def warm_start_metrics(self, record: Mapping[str, Any]) -> None:
        """One line per warm-start update (``warm_start/metrics.jsonl``; the first update starts the file anew)."""
        path = self.dir / "warm_start" / "metrics.jsonl"
        path.parent.mkdir(exist_ok=True)
        if record.get("update") == 1:
            path.write_text("")
        jsonl.append(path, dict(record))

    def knobs_in_force(self, doc: Mapping[str, Any]) -> None:
        atomic_write_text(self.dir / "knobs_in_force.json", json.dumps(doc, indent=1, default=str))
        if self.trackers is not None:  # the first one is the run's knobs at start (later changes: knob events)
            self.trackers.start(doc.get("values", doc))

    def write_status(self, **fields: Any) -> None:
        self.status_doc.update(fields)
        self.status_doc["heartbeat"] = now_iso()
        self.status_doc["heartbeat_unix"] = time.time()
        atomic_write_text(self.dir / "status.json", json.dumps(self.status_doc, indent=1, default=str))

    def finish(self, state: str, **data: Any) -> None:
        """``state``: finished | failed | interrupted | stopped (the trainer's numeric guard; ``reason`` says
        why, in ``status.json`` too)."""
        self.write_status(state=state, ended=now_iso(), **({"reason": data["reason"]} if "reason" in data else {}))
        self.event(state, **data)
        if self.trackers is not None:
            self.trackers.finish()
        self.log(f"run {state}" + (f": {data}" if data else ""))
