"""Experiment trackers (config ``report_to``): what the run writer sends each of them, read back from
each tracker's own files; a tracker failing mid-run (its real service killed) is dropped with one alert
and the run goes on."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import tracker_support as ts  # first: points trackio at a temporary folder before it is imported

from harness.io import jsonl
from harness.knobs.events import EventLog, KnobEvent
from harness.ppo.config import build_config
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


# ------------------------------------------------------------------------------- a real training run
def _wandb_core(pid: int) -> list[int]:
    import psutil

    return [p.pid for p in psutil.Process(pid).children(recursive=True) if "wandb-core" in p.name()]


@pytest.mark.skipif(EAU is None, reason="the eau console script is not installed")
def test_tiny_run_reports_to_every_tracker_and_outlives_a_killed_one(tmp_path: Path, knobs_dir: Path):
    """``eau train --set report_to=[trackio,wandb,tensorboard]``: W&B's service process is killed once
    step 0 is in its run file; the run finishes, with one tracker_failed alert, and the other trackers
    hold every step, the knob events and the tables."""
    for module in TRACKERS:
        ts.require(module)
    run_id = f"tiny-trackers-{uuid.uuid4().hex[:8]}"
    runs = tmp_path / "runs"
    steps = 4
    cmd = [
        EAU, "train", "--preset", "tiny", "--run-id", run_id, "--runs-dir", str(runs), "--knobs-dir", str(knobs_dir),
        "--no-progress", "--json", "--steps", str(steps), "--set", "report_to=[trackio,wandb,tensorboard]",
        "--set", "tasks_per_step=2", "--set", "samples_per_task=1", "--set", "env_knobs.max_steps=2",
        "--set", "agent_knobs.max_new_tokens_per_turn=12", "--set", "agent_knobs.mini_batch_size=2",
        "--set", "agent_knobs.micro_batch_size=2", "--set", "agent_knobs.ppo_epochs=1",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run = runs / run_id
    killed = False
    deadline = time.monotonic() + 400
    try:
        while proc.poll() is None and time.monotonic() < deadline and not killed:
            time.sleep(0.3)
            try:  # once step 0 is on disk in W&B's run file, its service dies
                on_disk = 0 in ts.wandb_history(run)
            except (AssertionError, OSError, ValueError, KeyError):
                on_disk = False
            if on_disk and len(jsonl.read(run / "metrics.jsonl")) < steps:
                for pid in _wandb_core(proc.pid):
                    os.kill(pid, signal.SIGKILL)
                    killed = True
        out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
    assert killed, "W&B's service was not found running before the run ended"
    assert proc.returncode == 0, err[-3000:]
    assert json.loads(out)["ok"] is True  # the trackers' banners went to stderr, not into the JSON
    rows = jsonl.read(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(steps))
    assert json.loads((run / "status.json").read_text())["state"] == "finished"
    failed = [e for e in jsonl.read(run / "events.jsonl") if e.get("alert") == "tracker_failed"]
    assert len(failed) == 1 and failed[0]["tracker"] == "wandb", failed
    lent = [e for e in jsonl.read(run / "knob_events.jsonl") if e["knob"] == "env.max_steps"]
    assert lent and lent[0]["status"] == "accepted" and lent[0]["author"] == "system"  # the preset's value, lent

    # W&B: the steps before its service died, as written
    hist = ts.wandb_history(run)
    assert 0 in hist and set(hist) <= set(range(steps)) and len(hist) < steps
    for key, value in numeric_fields(rows[0]).items():
        assert hist[0][key] == pytest.approx(value, rel=1e-12, abs=1e-12), key
    assert ts.wandb_table(run, hist[0], "trajectories")["columns"] == TRAJECTORY_COLUMNS
    assert "env.max_steps" in [r[1] for r in ts.wandb_table(run, hist[0], "knob_events")["data"]]

    # TensorBoard and trackio: every step, the knob event lent at start, the tables, the failure marker
    acc = ts.tensorboard(run)
    assert [(e.step, e.value) for e in acc.Scalars("reward_mean")] == [(r["step"], r["reward_mean"]) for r in rows]
    assert any("knob env.max_steps accepted" in text for _, text in ts.tensorboard_texts(acc, "knob_events"))
    assert {s for s, _ in ts.tensorboard_texts(acc, "trajectories")} == set(range(steps))
    assert any("**tracker_failed**: tracker wandb failed" in t for _, t in ts.tensorboard_texts(acc, "alerts"))
    logs = [log for log in ts.trackio_logs(run_id) if "reward_mean" in log]
    assert [(log["step"], log["entropy"]) for log in logs] == [(r["step"], r["entropy"]) for r in rows]
    assert len([log for log in ts.trackio_logs(run_id) if "trajectories" in log]) == steps
    titles = [a["title"] for a in ts.trackio_alerts(run_id)]
    assert "knob env.max_steps accepted" in titles and titles.count("tracker_failed") == 1
    assert ts.trackio_config(run_id)["knobs_at_start"]["env"]["max_steps"]["default"] == 2
