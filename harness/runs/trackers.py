"""Experiment trackers a run reports to (config ``report_to``): trackio, Weights & Biases, TensorBoard.

The run folder stays the record; each tracker gets a copy of what the run writes there, through the
run writer (harness/runs/writer.py), so a run sits beside a researcher's other runs:

* every ``metrics.jsonl`` row, numeric fields under the same names, at the row's ``step``;
* the run's config, and the knob values in force when it starts, as the tracker's run config;
* knob events (``knob_events.jsonl``) and alerts (``events.jsonl``) as the tracker's markers:
  trackio alerts (level info for a knob event, warn for an alert), W&B alerts (for alerts) and a
  ``knob_events`` table, TensorBoard text entries (``alerts``, ``knob_events``);
* a few sampled episodes of each step (:data:`TABLE_EPISODES`) as a ``trajectories`` table (trackio
  and W&B tables; TensorBoard has none, so a markdown table under its text tab).

Nothing reaches a network: trackio writes its local database (``$TRACKIO_DIR``, default
``~/.cache/huggingface/trackio``, project :data:`PROJECT`, run name = run id), W&B runs in offline mode
into ``runs/<id>/wandb/`` (``wandb sync`` uploads it later, if ever), TensorBoard writes event files
into ``runs/<id>/tensorboard/`` (``tensorboard --logdir runs``).

A resumed run reports to the same tracker runs: TensorBoard drops the events of the steps it runs
again (``purge_step``), trackio continues the run (the steps run again appear twice, the later row
last), W&B writes a second offline folder under the same run id (``wandb sync`` joins them).

A tracker that fails (an exception from its library, at start or mid-run) gets one
``tracker_failed`` alert and is dropped; the run and the other trackers go on. Each tracker's
library is imported only when a run reports to it (they are optional extras:
``pip install 'eau-harness[trackio]'`` and likewise ``wandb``, ``tensorboard``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import yaml

from harness.io import jsonl

TRACKERS = ("trackio", "wandb", "tensorboard")
MODULES = {"trackio": "trackio", "wandb": "wandb", "tensorboard": "tensorboard"}  # what must import
PROJECT = "eau"  # the trackio project and W&B project every run reports under (run name = run id)
TABLE_EPISODES = 4  # episodes of each step sampled into the trajectories table
TRANSCRIPT_CHARS = 4000  # a table cell's transcript is cut here (a τ² episode runs to tens of KB)
TRAJECTORY_COLUMNS = ["step", "episode_id", "gym", "task_id", "arm", "reward", "success", "turns", "transcript"]
KNOB_EVENT_COLUMNS = ["id", "knob", "gym", "old", "new", "author", "reason", "status", "message"]


def check_report_to(names: Sequence[str]) -> None:
    """ValueError naming a tracker that is unknown, repeated, or whose library is not installed (and
    the extra that installs it), before a run starts."""
    seen: set[str] = set()
    for name in names:  # the list itself first: its mistakes are the same on every machine
        if name not in TRACKERS:
            raise ValueError(f"report_to: unknown tracker {name!r}; allowed: {', '.join(TRACKERS)}")
        if name in seen:
            raise ValueError(f"report_to: {name} is listed twice")
        seen.add(name)
    for name in names:
        if importlib.util.find_spec(MODULES[name]) is None:
            raise ValueError(
                f"report_to: {name} is not installed here; install it with pip install 'eau-harness[{name}]'"
            )


def numeric_fields(row: Mapping[str, Any]) -> dict[str, float]:
    """The fields of a metrics row a tracker plots: numbers (and booleans as 0/1) under their own
    names; ``step`` is the tracker's step, ``time`` and other text are left out."""
    return {
        k: float(v)
        for k, v in row.items()
        if k != "step" and isinstance(v, (int, float)) and v == v  # NaN dropped (v != v)
    }


def sample_episodes(episodes: Sequence[Mapping[str, Any]], k: int = TABLE_EPISODES) -> list[Mapping[str, Any]]:
    """``k`` episodes spread evenly over a step's records (the first, the last and between them), so
    the table shows each gym of a round-robin step rather than the first task's group only."""
    n = len(episodes)
    if n <= k:
        return list(episodes)
    return [episodes[round(i * (n - 1) / (k - 1))] for i in range(k)] if k > 1 else [episodes[0]]


def transcript(episode: Mapping[str, Any], limit: int = TRANSCRIPT_CHARS) -> str:
    """An episode's turns as text: the agent's turn, then what came back (user, search or env)."""
    lines = []
    for t in episode.get("turns") or []:
        action = t.get("action") or {}
        lines.append(f"agent: {action.get('raw', action.get('content', ''))}")
        lines.append(f"{t.get('obs_role', 'env')}: {t.get('observation', '')}")
    text = "\n".join(lines)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def trajectory_rows(step: int, episodes: Sequence[Mapping[str, Any]]) -> list[list[Any]]:
    """The trajectories table of one step (:data:`TRAJECTORY_COLUMNS`), from sampled episodes."""
    rows = []
    for e in sample_episodes(episodes):
        task = e.get("task") or {}
        rows.append(
            [
                step,
                str(e.get("episode_id", "")),
                str(e.get("gym", "")),
                str(task.get("task_id", "")),
                str(e.get("arm", "")),
                float(e.get("reward", 0.0)),
                bool(e.get("success", False)),
                int(e.get("num_turns", len(e.get("turns") or []))),
                transcript(e),
            ]
        )
    return rows


def records_after(path: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    """The complete JSONL records of ``path`` from byte ``offset`` on, and the offset after the last
    of them (a line still being written is read next time)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], offset
    whole = data[: data.rfind(b"\n") + 1]
    return jsonl.read_lines(whole.split(b"\n")[:-1]), offset + len(whole)


def knob_event_row(event: Mapping[str, Any]) -> list[str]:
    """A knob event as a table row (:data:`KNOB_EVENT_COLUMNS`; values as JSON text)."""
    return [
        v if isinstance(v, str) else json.dumps(v, default=str)
        for v in (event.get(c) if event.get(c) is not None else "" for c in KNOB_EVENT_COLUMNS)
    ]


def knob_event_title(event: Mapping[str, Any]) -> str:
    gym = f"[{event['gym']}]" if event.get("gym") else ""
    return f"knob {event.get('knob')}{gym} {event.get('status')}"


def knob_event_text(event: Mapping[str, Any]) -> str:
    head = f"{json.dumps(event.get('old'), default=str)} -> {json.dumps(event.get('new'), default=str)}"
    who = f"{event.get('author')}: {event.get('reason')}"
    return f"{head} ({who})" + (f"; {event.get('message')}" if event.get("message") else "")


def markdown_table(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A markdown table (TensorBoard's text tab renders it as a table)."""

    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", "<br>")

    head = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns)
    return head + "".join("\n| " + " | ".join(cell(v) for v in r) + " |" for r in rows)


# ----------------------------------------------------------------------------------------------------
# one adapter per tracker: start, metrics, marker, table, finish
# ----------------------------------------------------------------------------------------------------


class TrackioTracker:
    """trackio's local database; alerts are its markers, tables its own."""

    name = "trackio"

    def __init__(self, run_id: str, run_dir: Path, config: Mapping[str, Any], resume_step: int | None):
        import trackio

        self._trackio = trackio
        with trackio_local_only():
            self.run = trackio.init(
                project=PROJECT,
                name=run_id,
                config=dict(config),
                resume="allow",  # a resumed run (or a rerun of the id) continues the same trackio run
                auto_log_gpu=False,
                auto_log_cpu=False,
                embed=False,
            )

    def metrics(self, step: int, values: Mapping[str, float]) -> None:
        self.run.log(dict(values), step=step)

    def marker(self, step: int, kind: str, title: str, text: str) -> None:
        level = self._trackio.AlertLevel.WARN if kind == "alert" else self._trackio.AlertLevel.INFO
        self.run.alert(title=title, text=text, level=level)

    def table(self, step: int, key: str, columns: Sequence[str], rows: list[list[Any]]) -> None:
        self.run.log({key: self._trackio.Table(columns=list(columns), data=rows)}, step=step)

    def finish(self) -> None:
        if self._trackio.context_vars.current_run.get() is self.run:
            self._trackio.finish()  # also no longer trackio's current run: its exit hook would finish it again
        else:
            self.run.finish()


TRACKIO_REMOTE_ENV = ("TRACKIO_SPACE_ID", "TRACKIO_SERVER_URL", "TRACKIO_BUCKET_ID", "TRACKIO_WEBHOOK_URL")


@contextlib.contextmanager
def trackio_local_only():
    """trackio.init reads from the environment where else to send a run (a Space, a server, a bucket,
    a webhook for alerts) and asks the Hub who the user is when a token is set. Around it: those
    variables unset and the Hub client offline (huggingface_hub's own offline switch), so the run
    stays in the local database whatever the environment says."""
    from huggingface_hub import constants as hub

    saved = {k: os.environ.pop(k) for k in TRACKIO_REMOTE_ENV if k in os.environ}
    offline, hub.HF_HUB_OFFLINE = hub.HF_HUB_OFFLINE, True
    try:
        yield
    finally:
        hub.HF_HUB_OFFLINE = offline
        os.environ.update(saved)


class WandbTracker:
    """Weights & Biases in offline mode (``runs/<id>/wandb/``); alerts as W&B alerts, knob events and
    trajectories as tables."""

    name = "wandb"

    def __init__(self, run_id: str, run_dir: Path, config: Mapping[str, Any], resume_step: int | None):
        import wandb

        self._wandb = wandb
        # the process's W&B settings offline too: its own telemetry (OpenTelemetry metrics to the W&B
        # server) follows them, not the run's mode
        wandb.setup(settings=wandb.Settings(mode="offline"))
        self.run = wandb.init(
            project=PROJECT,
            name=run_id,
            id=run_id,
            dir=str(run_dir),
            mode="offline",  # never the network, whatever WANDB_MODE says
            resume="allow",
            config=dict(config),
            reinit="create_new",  # a second run in one process (tests, eau supervise) gets its own
            settings=wandb.Settings(
                console="off", silent=True, x_disable_stats=True, disable_git=True, save_code=False
            ),
        )

    def metrics(self, step: int, values: Mapping[str, float]) -> None:
        self.run.log(dict(values), step=step)

    def marker(self, step: int, kind: str, title: str, text: str) -> None:
        if kind == "alert":
            self.run.alert(title=title, text=text, level=self._wandb.AlertLevel.WARN)

    def table(self, step: int, key: str, columns: Sequence[str], rows: list[list[Any]]) -> None:
        self.run.log({key: self._wandb.Table(columns=list(columns), data=rows)}, step=step)

    def finish(self) -> None:
        self.run.finish()


class TensorBoardTracker:
    """TensorBoard event files in ``runs/<id>/tensorboard/``: scalars, and text entries for the config,
    the markers and the tables (a resume purges the events of the steps it runs again)."""

    name = "tensorboard"

    def __init__(self, run_id: str, run_dir: Path, config: Mapping[str, Any], resume_step: int | None):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(Path(run_dir) / "tensorboard"), purge_step=resume_step)
        dumped = yaml.safe_dump(json.loads(json.dumps(dict(config), default=str)), sort_keys=False)
        self.writer.add_text("config", "```yaml\n" + dumped + "```", resume_step or 0)

    def metrics(self, step: int, values: Mapping[str, float]) -> None:
        for k, v in values.items():
            self.writer.add_scalar(k, v, step)
        self.writer.flush()

    def marker(self, step: int, kind: str, title: str, text: str) -> None:
        self.writer.add_text("alerts" if kind == "alert" else "knob_events", f"**{title}**: {text}", step)

    def table(self, step: int, key: str, columns: Sequence[str], rows: list[list[Any]]) -> None:
        self.writer.add_text(key, markdown_table(columns, rows), step)

    def finish(self) -> None:
        self.writer.close()


ADAPTERS: dict[str, Callable[..., Any]] = {
    "trackio": TrackioTracker,
    "wandb": WandbTracker,
    "tensorboard": TensorBoardTracker,
}


# ----------------------------------------------------------------------------------------------------
# the hub the run writer holds
# ----------------------------------------------------------------------------------------------------


class TrackerHub:
    """The trackers of one run. Started at the first record it forwards (the knob values in force
    at start, when the run writer first writes ``knobs_in_force.json``), so each tracker's run config
    holds the run's config and its knobs. ``alert(name, message, **data)`` is the run writer's own
    (a failing tracker is reported there, once, and dropped)."""

    def __init__(
        self,
        names: Sequence[str],
        run_id: str,
        run_dir: Path,
        config: Mapping[str, Any],
        alert: Callable[..., Any],
        resume_step: int | None = None,
    ):
        self.names, self.run_id, self.run_dir = list(names), run_id, Path(run_dir)
        self.config = dict(config)
        self.alert = alert
        self.resume_step = resume_step
        self.active: dict[str, Any] = {}
        self.started = False
        # knob events are the knob store's own log: forward those appended after this point
        self.knob_log = self.run_dir / "knob_events.jsonl"
        self.knob_offset = self.knob_log.stat().st_size if self.knob_log.exists() else 0

    def start(self, knobs: Mapping[str, Any] | None = None) -> None:
        if self.started:
            return
        self.started = True
        config = {**self.config, **({"knobs_at_start": dict(knobs)} if knobs is not None else {})}
        failed = []
        for name in self.names:
            try:
                with _quiet():
                    self.active[name] = ADAPTERS[name](self.run_id, self.run_dir, config, self.resume_step)
            except Exception as exc:  # noqa: BLE001 (a tracker's failure must never end the run)
                failed.append((name, exc))
        for name, exc in failed:  # once every tracker that could start has: they get the alert too
            self._failed(name, "start", exc)

    def metrics(self, row: Mapping[str, Any]) -> None:
        self.start()
        step = int(row.get("step", 0))
        self.knob_events(step)
        values = numeric_fields(row)
        self._each("metrics", lambda t: t.metrics(step, values))

    def knob_events(self, step: int) -> None:
        """Forward the knob events logged since the last call (each as a marker; W&B and trackio
        also get the step's events as a ``knob_events`` table)."""
        events, self.knob_offset = records_after(self.knob_log, self.knob_offset)
        if not events:
            return
        for e in events:
            title, text = knob_event_title(e), knob_event_text(e)
            self._each("knob event", lambda t, title=title, text=text: t.marker(step, "knob_event", title, text))
        rows = [knob_event_row(e) for e in events]
        self._each(
            "knob events table",
            lambda t: t.table(step, "knob_events", KNOB_EVENT_COLUMNS, rows) if t.name != "tensorboard" else None,
        )

    def marker(self, step: int, name: str, message: str) -> None:
        self.start()
        self._each("alert", lambda t: t.marker(step, "alert", name, message))

    def trajectories(self, step: int, episodes: Sequence[Mapping[str, Any]]) -> None:
        self.start()
        rows = trajectory_rows(step, episodes)
        if rows:
            self._each("trajectories", lambda t: t.table(step, "trajectories", TRAJECTORY_COLUMNS, rows))

    def finish(self) -> None:
        if self.started:
            self.knob_events(self._last_step())
        for name in list(self.active):
            tracker = self.active.pop(name)
            try:
                with _quiet():
                    tracker.finish()
            except Exception as exc:  # noqa: BLE001
                self._failed(name, "finish", exc)

    def _last_step(self) -> int:
        last = jsonl.tail(self.run_dir / "metrics.jsonl", 1)
        return int(last[-1].get("step", 0)) if last else 0

    def _each(self, what: str, call: Callable[[Any], Any]) -> None:
        for name in list(self.active):
            try:
                with _quiet():
                    call(self.active[name])
            except Exception as exc:  # noqa: BLE001
                self.active.pop(name, None)
                self._failed(name, what, exc)

    def _failed(self, name: str, what: str, exc: BaseException) -> None:
        self.alert(
            "tracker_failed",
            f"tracker {name} failed ({what}: {type(exc).__name__}: {str(exc)[:300]}); it is dropped, the run "
            "goes on and its own files hold every record",
            tracker=name,
        )


@contextlib.contextmanager
def _quiet():
    """Trackers print banners on stdout; the run's stdout is for JSON (``eau train --json``)."""
    with contextlib.redirect_stdout(sys.stderr):
        yield
