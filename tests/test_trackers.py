"""Experiment trackers (config ``report_to``): what the run writer sends each of them, read back from
each tracker's own files; a tracker failing mid-run (its real service killed) is dropped with one alert
and the run goes on."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest
import tracker_support as ts  # first: points trackio at a temporary folder before it is imported

from harness.io import jsonl
from harness.knobs.events import EventLog, KnobEvent
from harness.ppo.config import build_config, help_epilog
from harness.runs.trackers import (
    KNOB_EVENT_COLUMNS,
    TRACKERS,
    TRAJECTORY_COLUMNS,
    check_report_to,
    markdown_table,
    numeric_fields,
    records_after,
    sample_episodes,
    transcript,
)
from harness.runs.writer import RunWriter

EAU = shutil.which("eau")


def _episode(i: int, gym: str = "intention") -> dict:
    return {
        "episode_id": f"s000000-e{i:03d}",
        "gym": gym,
        "task": {"task_id": f"{gym}-{i}"},
        "arm": "symbolic",
        "reward": 0.25 * i,
        "success": i % 2 == 1,
        "num_turns": 2,
        "turns": [
            {"action": {"raw": "ASK: which tone?"}, "obs_role": "user", "observation": "A formal one."},
            {"action": {"raw": "ANSWER: formal"}, "obs_role": "env", "observation": "Scored 1.0"},
        ],
    }


# ------------------------------------------------------------------------------------------ pieces
def test_numeric_fields_keep_numbers_under_their_names():
    row = {"step": 3, "time": "2026-01-01T00:00:00", "reward_mean": 0.5, "gym/travel/success_rate": 1, "ok": True}
    assert numeric_fields(row) == {"reward_mean": 0.5, "gym/travel/success_rate": 1.0, "ok": 1.0}
    assert numeric_fields({"step": 0, "x": float("nan")}) == {}


def test_sampled_episodes_spread_over_the_step():
    eps = [{"i": i} for i in range(10)]
    assert [e["i"] for e in sample_episodes(eps, 4)] == [0, 3, 6, 9]
    assert [e["i"] for e in sample_episodes(eps[:3], 4)] == [0, 1, 2]
    assert [e["i"] for e in sample_episodes(eps, 1)] == [0]


def test_transcript_and_markdown_table():
    text = transcript(_episode(1))
    assert text == "agent: ASK: which tone?\nuser: A formal one.\nagent: ANSWER: formal\nenv: Scored 1.0"
    assert transcript(_episode(1), limit=10) == "agent: AS…"
    assert markdown_table(["a", "b"], [["x|y", "1\n2"]]) == "| a | b |\n|---|---|\n| x\\|y | 1<br>2 |"


def test_records_after_leaves_a_line_being_written_for_next_time(tmp_path: Path):
    p = tmp_path / "log.jsonl"
    p.write_bytes(b'{"a": 1}\n{"a": 2')
    recs, off = records_after(p, 0)
    assert recs == [{"a": 1}] and off == 9
    with open(p, "ab") as f:
        f.write(b'}\n{"a": 3}\n')
    recs, off = records_after(p, off)
    assert recs == [{"a": 2}, {"a": 3}] and off == p.stat().st_size
    assert records_after(tmp_path / "absent.jsonl", 5) == ([], 5)


def test_report_to_is_checked_before_a_run():
    with pytest.raises(ValueError, match="unknown tracker 'mlflow'; allowed: trackio, wandb, tensorboard"):
        check_report_to(["mlflow"])
    with pytest.raises(ValueError, match="tensorboard is listed twice"):
        check_report_to(["tensorboard", "tensorboard"])
    assert build_config("tiny").report_to == []
    assert "report_to = []: experiment trackers" in help_epilog()  # what eau train --help lists
    with pytest.raises(ValueError, match="report_to must be a list of strings"):
        build_config("tiny", overrides=["report_to=wandb"])


# ------------------------------------------------------------------- through the run writer, read back
def test_each_tracker_holds_the_runs_records(tmp_path: Path, knobs_dir: Path):
    for module in TRACKERS:
        ts.require(module)
    run_id = f"writer-{uuid.uuid4().hex[:8]}"
    run = tmp_path / "runs" / run_id
    config = {"preset": "tiny", "run_id": run_id, "steps": 2, "report_to": list(TRACKERS)}
    w = RunWriter.create(run, config, knobs_dir, ["intention"], 2)
    w.knobs_in_force({"values": {"agent": {"lr": 0.001}}, "rules": {}})
    EventLog(run / "knob_events.jsonl").append(
        KnobEvent(knob="agent.lr", status="accepted", old=0.001, new=0.0005, author="agent", reason="calmer steps")
    )
    episodes = [_episode(i) for i in range(6)]
    w.trajectories(0, episodes)
    rows = [
        {"step": 0, "time": "t0", "reward_mean": 0.5, "gym/intention/success_rate": 0.25, "knob_changes": 1},
        {"step": 1, "time": "t1", "reward_mean": 0.75, "gym/intention/success_rate": 0.5, "knob_changes": 0},
    ]
    w.metrics(rows[0])
    w.status_doc["step"] = 1
    w.alert("prompt_over_budget", "step 1: 3 of 4 intention episodes ended at their prompt")
    w.metrics(rows[1])
    w.finish("finished", steps=2)
    sampled = [e["episode_id"] for e in sample_episodes(episodes)]

    # W&B (offline run file): the metrics rows, the tables, the alert, the config and knobs at start
    ts.wait_for_wandb_exit(run)
    hist = ts.wandb_history(run)
    for row in rows:
        for key, value in numeric_fields(row).items():
            assert hist[row["step"]][key] == value
    table = ts.wandb_table(run, hist[0], "trajectories")
    assert table["columns"] == TRAJECTORY_COLUMNS and [r[1] for r in table["data"]] == sampled
    assert table["data"][1][-1] == transcript(episodes[2])
    knob_table = ts.wandb_table(run, hist[0], "knob_events")
    assert knob_table["columns"] == KNOB_EVENT_COLUMNS
    assert knob_table["data"][0][1:8] == ["agent.lr", "", "0.001", "0.0005", "agent", "calmer steps", "accepted"]
    assert ("prompt_over_budget", "step 1: 3 of 4 intention episodes ended at their prompt") in ts.wandb_alerts(run)
    cfg = ts.wandb_config(run)
    assert cfg["report_to"] == {"value": list(TRACKERS)} or cfg["report_to"] == list(TRACKERS)

    # TensorBoard: scalars under the same names, markers and the table as text
    acc = ts.tensorboard(run)
    for key in ("reward_mean", "gym/intention/success_rate", "knob_changes"):
        assert [(e.step, e.value) for e in acc.Scalars(key)] == [(r["step"], r[key]) for r in rows]
    ((step, knob_text),) = ts.tensorboard_texts(acc, "knob_events")
    assert step == 0 and knob_text == "**knob agent.lr accepted**: 0.001 -> 0.0005 (agent: calmer steps)"
    assert ts.tensorboard_texts(acc, "alerts") == [
        (1, "**prompt_over_budget**: step 1: 3 of 4 intention episodes ended at their prompt")
    ]
    ((step, md),) = ts.tensorboard_texts(acc, "trajectories")
    assert step == 0 and all(f"| {e} |" in md for e in sampled)
    ((_, cfg_text),) = ts.tensorboard_texts(acc, "config")
    assert "knobs_at_start:" in cfg_text and "lr: 0.001" in cfg_text

    # trackio: logs, tables, alerts (its markers), the config
    logs = ts.trackio_logs(run_id)
    for row in rows:
        mine = [log for log in logs if log["step"] == row["step"] and "reward_mean" in log]
        assert mine and all(mine[0][k] == v for k, v in numeric_fields(row).items())
    traj = [log["trajectories"] for log in logs if "trajectories" in log]
    assert traj[0]["_type"] == "trackio.table" and [r["episode_id"] for r in traj[0]["_value"]] == sampled
    alerts = {(a["title"], a["level"]) for a in ts.trackio_alerts(run_id)}
    assert ("knob agent.lr accepted", "info") in alerts and ("prompt_over_budget", "warn") in alerts
    tcfg = ts.trackio_config(run_id)
    assert tcfg["report_to"] == list(TRACKERS) and tcfg["knobs_at_start"]["agent"]["lr"] == 0.001


def test_a_tracker_that_fails_at_start_gets_one_alert_and_the_rest_go_on(tmp_path: Path, knobs_dir: Path):
    ts.require("tensorboard")
    ts.require("trackio")
    run_id = f"failing-{uuid.uuid4().hex[:8]}"
    run = tmp_path / "runs" / run_id
    w = RunWriter.create(run, {"preset": "tiny", "report_to": ["tensorboard", "trackio"]}, knobs_dir, ["intention"], 2)
    (run / "tensorboard").write_text("a file where TensorBoard's folder goes")  # a real failure to start
    w.knobs_in_force({"values": {}})
    w.metrics({"step": 0, "reward_mean": 0.5})
    w.metrics({"step": 1, "reward_mean": 0.6})
    w.finish("finished")
    alerts = [e for e in jsonl.read(run / "events.jsonl") if e.get("alert") == "tracker_failed"]
    assert len(alerts) == 1 and alerts[0]["tracker"] == "tensorboard"
    assert "tracker tensorboard failed (start: " in alerts[0]["message"]
    assert [log["reward_mean"] for log in ts.trackio_logs(run_id) if "reward_mean" in log] == [0.5, 0.6]
    assert "tracker_failed" in {a["title"] for a in ts.trackio_alerts(run_id)}


# ------------------------------------------------------------------------------- real training runs
def _train_cmd(run_id: str, runs: Path, knobs_dir: Path, steps: int, report_to: str) -> list[str]:
    """``eau train`` on the tiny preset at its smallest (a fraction of a second a step)."""
    return [
        EAU, "train", "--preset", "tiny", "--run-id", run_id, "--runs-dir", str(runs), "--knobs-dir", str(knobs_dir),
        "--no-progress", "--json", "--steps", str(steps), "--set", f"report_to={report_to}",
        "--set", "tasks_per_step=2", "--set", "samples_per_task=1", "--set", "env_knobs.max_steps=3",
        "--set", "agent_knobs.max_new_tokens_per_turn=12", "--set", "agent_knobs.mini_batch_size=2",
        "--set", "agent_knobs.micro_batch_size=2", "--set", "agent_knobs.ppo_epochs=1",
        "--set", "policy.tiny.num_hidden_layers=2", "--set", "policy.tiny.hidden_size=64",
        "--set", "policy.tiny.intermediate_size=128", "--set", "checkpoint_every=0",
    ]  # fmt: skip


@contextlib.contextmanager
def listener() -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on loopback that records every request it gets (and answers 503)."""
    seen: list[str] = []

    class Record(BaseHTTPRequestHandler):
        def _any(self) -> None:
            seen.append(f"{self.command} {self.path}")
            self.send_response(503)
            self.end_headers()

        do_GET = do_POST = do_PUT = do_HEAD = _any

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Record)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


needs_eau = pytest.mark.skipif(EAU is None, reason="the eau console script is not installed")


@needs_eau
def test_tiny_run_writes_every_tracker(tmp_path: Path, knobs_dir: Path):
    """``eau train --set report_to=[trackio,wandb,tensorboard]``: each tracker holds every metrics row,
    the knob event the preset's lent value made, and a trajectories table per step."""
    for module in TRACKERS:
        ts.require(module)
    run_id = f"tiny-trackers-{uuid.uuid4().hex[:8]}"
    steps = 3
    with listener() as (url, requests):  # where every remote setting points: nothing may arrive there
        remote = {
            "HF_ENDPOINT": url, "HF_TOKEN": "hf_not_a_token", "TRACKIO_SPACE_ID": "someone/space",
            "TRACKIO_SERVER_URL": url, "TRACKIO_WEBHOOK_URL": url + "/hook", "WANDB_MODE": "online",
            "WANDB_BASE_URL": url, "WANDB_API_KEY": "x" * 40,
        }  # fmt: skip
        res = subprocess.run(
            _train_cmd(run_id, tmp_path / "runs", knobs_dir, steps, "[trackio,wandb,tensorboard]"),
            capture_output=True, text=True, timeout=600,
            env={**{k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}, **remote},  # its own W&B service
        )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert requests == [], requests
    assert json.loads(res.stdout)["ok"] is True  # the trackers' banners went to stderr, not into the JSON
    run = tmp_path / "runs" / run_id
    rows = jsonl.read(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(steps))
    lent = [e for e in jsonl.read(run / "knob_events.jsonl") if e["knob"] == "env.max_steps"]
    assert lent[0]["status"] == "accepted" and lent[0]["author"] == "system"  # the preset's value, lent at start
    assert not [e for e in jsonl.read(run / "events.jsonl") if e.get("event") == "alert"]

    ts.wait_for_wandb_exit(run)
    hist = ts.wandb_history(run)
    for r in rows:
        for key, value in numeric_fields(r).items():
            assert hist[r["step"]][key] == value, key
        assert ts.wandb_table(run, hist[r["step"]], "trajectories")["columns"] == TRAJECTORY_COLUMNS
    assert "env.max_steps" in [row[1] for row in ts.wandb_table(run, hist[0], "knob_events")["data"]]

    acc = ts.tensorboard(run)
    for key in ("reward_mean", "entropy", "gym/intention/success_rate"):
        assert [(e.step, e.value) for e in acc.Scalars(key)] == [(r["step"], pytest.approx(r[key])) for r in rows]
    assert any(
        text.startswith("**knob env.max_steps accepted**") for _, text in ts.tensorboard_texts(acc, "knob_events")
    )
    assert [s for s, _ in ts.tensorboard_texts(acc, "trajectories")] == list(range(steps))

    logs = ts.trackio_logs(run_id)
    metric_logs = [log for log in logs if "reward_mean" in log]
    assert [(log["step"], log["entropy"]) for log in metric_logs] == [(r["step"], r["entropy"]) for r in rows]
    assert len([log for log in logs if "trajectories" in log]) == steps
    assert "knob env.max_steps accepted" in [a["title"] for a in ts.trackio_alerts(run_id)]
    assert ts.trackio_config(run_id)["knobs_at_start"]["env"]["max_steps"]["default"] == 3


def _wandb_core(pid: int) -> list[int]:
    import psutil

    return [p.pid for p in psutil.Process(pid).children(recursive=True) if "wandb-core" in p.name()]


@needs_eau
def test_a_tracker_killed_mid_run_gets_one_alert_and_the_run_goes_on(tmp_path: Path, knobs_dir: Path):
    """W&B's service process is killed after step 1: the run finishes every step, with one
    ``tracker_failed`` alert naming wandb, which TensorBoard shows among its alerts."""
    ts.require("wandb")
    ts.require("tensorboard")
    run_id = f"tiny-killed-{uuid.uuid4().hex[:8]}"
    run = tmp_path / "runs" / run_id
    steps = 30
    # its own W&B service: W&B hands a child process its parent's service (WANDB_SERVICE), and this
    # test process has one when the in-process tests above used W&B
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}
    proc = subprocess.Popen(
        _train_cmd(run_id, tmp_path / "runs", knobs_dir, steps, "[wandb,tensorboard]"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    killed, deadline = [], time.monotonic() + 500
    try:
        while proc.poll() is None and time.monotonic() < deadline and not killed:
            time.sleep(0.05)
            if len(jsonl.read(run / "metrics.jsonl")) >= 2:
                killed = _wandb_core(proc.pid)
                for pid in killed:
                    os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
    assert killed, f"W&B's service was not found running while the run was; stderr: {err[-3000:]}"
    assert proc.returncode == 0, err[-3000:]
    assert json.loads(out)["ok"] is True
    rows = jsonl.read(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(steps))
    assert json.loads((run / "status.json").read_text())["state"] == "finished"
    failed = [e for e in jsonl.read(run / "events.jsonl") if e.get("alert") == "tracker_failed"]
    assert len(failed) == 1 and failed[0]["tracker"] == "wandb", failed
    assert "tracker wandb failed" in failed[0]["message"]
    acc = ts.tensorboard(run)
    assert [e.step for e in acc.Scalars("reward_mean")] == list(range(steps))
    alerts = [t for _, t in ts.tensorboard_texts(acc, "alerts")]
    assert len(alerts) == 1 and alerts[0].startswith("**tracker_failed**: tracker wandb failed")


def test_a_resumed_run_reports_to_the_same_tracker_runs(tmp_path: Path, knobs_dir: Path):
    """A resume (the writer reopened at a checkpoint's offsets) continues each tracker's run: TensorBoard
    drops the events of the steps run again, trackio continues the same run, W&B writes a second
    offline folder under the same run id (``wandb sync`` joins them)."""
    for module in TRACKERS:
        ts.require(module)
    run_id = f"resumed-{uuid.uuid4().hex[:8]}"
    run = tmp_path / "runs" / run_id
    config = {"preset": "tiny", "run_id": run_id, "report_to": list(TRACKERS)}
    w = RunWriter.create(run, config, knobs_dir, ["intention"], 3)
    w.knobs_in_force({"values": {}})
    w.metrics({"step": 0, "reward_mean": 0.1})
    offsets = w.offsets()  # the checkpoint after step 0
    w.metrics({"step": 1, "reward_mean": 0.2})  # killed after this: step 1 runs again
    w.finish("interrupted")
    w = RunWriter.reopen(run, offsets, next_step=1)
    w.knobs_in_force({"values": {}})
    w.metrics({"step": 1, "reward_mean": 0.25})
    w.metrics({"step": 2, "reward_mean": 0.3})
    w.finish("finished")
    acc = ts.tensorboard(run)
    assert [(e.step, e.value) for e in acc.Scalars("reward_mean")] == [
        (0, pytest.approx(0.1)), (1, pytest.approx(0.25)), (2, pytest.approx(0.3))
    ]  # fmt: skip
    rewards = [(log["step"], log["reward_mean"]) for log in ts.trackio_logs(run_id) if "reward_mean" in log]
    assert rewards == [(0, 0.1), (1, 0.2), (1, 0.25), (2, 0.3)]
    assert not [e for e in jsonl.read(run / "events.jsonl") if e.get("alert") == "tracker_failed"]
    folders = sorted(run.glob("wandb/offline-run-*"))
    # W&B names a folder by its start second and the run id, adding "-1" when that name is taken (a
    # resume within the same second, as here)
    assert len(folders) == 2 and all(
        re.fullmatch(rf"offline-run-\d{{8}}_\d{{6}}-{run_id}(-\d+)?", f.name) for f in folders
    )
