"""The knobs folder an ``eau knobs`` command addresses: a run's own, or the project's.

* ``--run RUN``: that run's folder (``runs/<id>/knobs``), live or not;
* ``--project``: the project folder (``./knobs``, ``--knobs-dir``, ``$EAU_KNOBS_DIR``): what the next
  run starts from;
* neither: the one live run made from the project folder; the project folder when none is live; a
  usage error naming them when several are (``--run`` picks one). A ``--knobs-dir`` that is a run's
  own folder addresses that run.

A write for a run holds the run folder's write lock (harness.knobs.notes.write_lock) from deciding
whether the run is live to its note and file, so the run either applies it or, at its end, logs it
``not_applied``; a write for a run that is not live is logged ``not_applied`` at once and applied by
``eau train --resume``.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterator, Optional

import typer

from harness.cli.common import EXIT_INVALID, EXIT_NOT_FOUND, EXIT_USAGE, fail, knobs_dir, runs_dir
from harness.knobs.checks import read_run_facts
from harness.knobs.events import EventLog
from harness.knobs.layout import HISTORY
from harness.knobs.notes import write_lock
from harness.knobs.store import KnobError
from harness.runs import reader
from harness.runs.writer import RunWriter
from harness.stores import open_store

RunOpt = typer.Option(None, "--run", help="Run id or folder: its own knobs folder (default: the one live run).")
ProjectOpt = typer.Option(False, "--project", help="The project knobs folder (what the next run starts from).")


class Target:
    """A resolved knobs folder, its store, and the run it belongs to (None: the project folder)."""

    def __init__(self, kdir: Path, run_dir: Path | None, status: dict | None, as_json: bool):
        self.kdir, self.run_dir, self.status, self.as_json = kdir, run_dir, status, as_json
        self.live = reader.is_live(status)
        self.store: Any = None
        self.log = EventLog(self.kdir / HISTORY if run_dir is None else run_dir / "knob_events.jsonl")
        self.metrics = reader.recent_metrics(run_dir, 100) if run_dir is not None else []

    @property
    def step(self) -> int | None:
        return (self.status or {}).get("step") if self.live else None

    @property
    def for_run(self) -> str | None:
        """Who applies a write here (harness.knobs.writes): None (the project folder), live or stopped."""
        return None if self.run_dir is None else ("live" if self.live else "stopped")

    def open(self, need_valid: bool = True) -> None:
        """The store: for a run, its values in force (``knobs_in_force.json``) are the base of checks;
        invalid files end the command (exit 4) unless ``need_valid`` is False (then ``store`` is None)."""
        base = reader.final_knob_state(self.run_dir, next_run=False) if self.run_dir is not None else None
        gyms = (self.status or {}).get("gyms") if self.run_dir is not None else None
        try:
            self.store = open_store(self.kdir, events_path=self.log.path, run_gyms=gyms, base=base)
        except KnobError as exc:
            if need_valid:
                fail(str(exc), EXIT_INVALID, self.as_json, problems=exc.problems)
            return
        self.log = self.store.log
        if self.run_dir is not None:
            self.store.run_facts = read_run_facts(self.run_dir)  # a value this run cannot use is refused now

    def run_info(self) -> dict[str, Any]:
        return {
            "run": self.run_dir.name if self.run_dir else None,
            "live": self.live,
            "step": self.step,
            "knobs_dir": str(self.kdir),
        }


def _run_of_folder(kdir: Path) -> Path | None:
    """The run whose own knobs folder ``kdir`` is (None: a project folder)."""
    parent = kdir.resolve().parent
    return parent if kdir.name == "knobs" and (parent / "config.yaml").is_file() else None


def find_target(
    kdir: Optional[Path], rdir: Optional[Path], run: Optional[str], project: bool, as_json: bool
) -> tuple[Path, Path | None]:
    """(knobs folder, run folder or None) a command addresses (see the module docstring)."""
    project_dir, runs = knobs_dir(kdir, as_json), runs_dir(rdir, as_json)
    if run and project:
        fail("--run addresses a run's knobs and --project the project's; give one of them", EXIT_USAGE, as_json)
    run_dir = None
    if run:
        run_dir = reader.find_run(runs, run)
        if run_dir is None:
            fail(f"no run {run!r} in {runs}", EXIT_NOT_FOUND, as_json)
    elif not project:
        run_dir = _run_of_folder(project_dir)
        live = [] if run_dir is not None else reader.live_runs(runs, project_dir)
        if len(live) > 1:
            names = ", ".join(p.name for p in live)
            fail(
                f"{len(live)} runs made from {project_dir} are live ({names}): name one with --run RUN, or "
                "address the project folder with --project",
                EXIT_USAGE,
                as_json,
            )
        run_dir = run_dir or (live[0] if live else None)
    if run_dir is None:
        return project_dir, None
    own = (reader.status(run_dir) or {}).get("knobs_dir")
    folder = Path(own) if own else run_dir / "knobs"
    if not (folder / "schema").is_dir():
        fail(f"run {run_dir.name} has no knobs folder of its own ({folder})", EXIT_NOT_FOUND, as_json)
    return folder, run_dir


@contextlib.contextmanager
def target(
    kdir: Optional[Path],
    rdir: Optional[Path],
    run: Optional[str],
    project: bool,
    as_json: bool,
    *,
    write: bool = False,
    need_valid: bool = True,
) -> Iterator[Target]:
    """The :class:`Target` of a command, its store open; ``write``: the run's write lock held throughout."""
    folder, run_dir = find_target(kdir, rdir, run, project, as_json)
    lock = write_lock(folder) if write and run_dir is not None else contextlib.nullcontext()
    with lock:
        t = Target(folder, run_dir, reader.status(run_dir) if run_dir is not None else None, as_json)
        t.open(need_valid)
        yield t


def log_to_run(t: Target, line: str) -> None:
    """A line in the run's log.txt (a refused write never reaches the run, so it cannot log it)."""
    if t.run_dir is not None:
        RunWriter(t.run_dir).log(line)
