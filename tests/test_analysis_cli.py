"""``eau status``, ``eau diagnose``, ``eau sample``, ``eau effect`` on real run folders: JSON and readable
text, bounded output, filters and exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from analysis_runs import EFFECT_HARM, HEALTHY, cached_run
from typer.testing import CliRunner

from harness.analysis.detectors import DETECTORS
from harness.analysis.sample import CLIP_MARK
from harness.analysis.stats import SPARK_BLOCKS
from harness.cli.common import EXIT_NOT_FOUND, EXIT_USAGE
from harness.cli.main import app

runner = CliRunner()


def _run(*args: str):
    return runner.invoke(app, list(args))


@pytest.fixture(scope="module")
def healthy():
    d = cached_run(HEALTHY)
    return ["--runs-dir", str(d.parent), "--run", d.name]


@pytest.fixture(scope="module")
def faulty():
    d = cached_run("silent_tool_failures")
    return ["--runs-dir", str(d.parent), "--run", d.name]


def test_status_json_and_text(healthy):
    res = _run("status", *healthy, "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["run"] == HEALTHY and doc["state"] == "finished" and doc["step"] == 12 and doc["total_steps"] == 12
    assert set(doc["trends"]) >= {"reward_mean", "success_rate", "entropy", "kl"}
    assert all(set(t["spark"]) <= set(SPARK_BLOCKS) and len(t["spark"]) == 12 for t in doc["trends"].values())
    assert [g["name"] for g in doc["per_gym"]] == ["function", "intention", "travel"]
    assert [a["name"] for a in doc["per_arm"]] == ["symbolic"] and doc["per_arm"][0]["episodes"] == 10 * 24
    assert doc["alerts"] == []
    text = _run("status", *healthy)
    assert text.exit_code == 0
    assert "run healthy: finished" in text.output and "success_rate" in text.output and "per gym" in text.output
    assert any(b in text.output for b in SPARK_BLOCKS) and "open alerts: none" in text.output
    assert len(text.output.splitlines()) < 50  # one screen


def test_status_shows_knob_events_and_detector_alerts(faulty):
    doc = json.loads(_run("status", *faulty, "--json", "--window", "6").stdout)
    assert any(a["alert"] == "silent_tool_failures" and a["source"] == "detector" for a in doc["alerts"])
    harm = cached_run(EFFECT_HARM)
    doc = json.loads(
        _run("status", "--runs-dir", str(harm.parent), "--run", harm.name, "--json", "--events", "1").stdout
    )
    assert len(doc["knob_events"]) == 1 and doc["knob_events"][0]["knob"] == "user.max_reveals"


def test_diagnose_json_and_text(faulty):
    res = _run("diagnose", *faulty, "--json", "--window", "6")
    doc = json.loads(res.stdout)
    assert doc["flagged"] == ["silent_tool_failures"] and len(doc["findings"]) == len(DETECTORS)
    assert doc["window"] == {"steps": 6, "first": 6, "last": 11, "requested": 6}
    text = _run("diagnose", *faulty, "--window", "6").output
    assert "FLAGGED silent_tool_failures" in text and "eau sample --flag silent_tool_failures" in text
    assert "skipped arm_disparity" in text
    one = json.loads(_run("diagnose", *faulty, "--json", "--detector", "deadlock", "--threshold", "rate=0.0").stdout)
    assert [f["name"] for f in one["findings"]] == ["deadlock"] and one["findings"][0]["thresholds"]["rate"] == 0.0
    assert _run("diagnose", *faulty, "--detector", "nope").exit_code == EXIT_USAGE
    listing = json.loads(_run("diagnose", "--list", "--json").stdout)
    assert {d["name"] for d in listing["detectors"]} >= {"deadlock", "user_leakage", "arm_disparity"}


def test_sample_filters_and_rendering(faulty):
    doc = json.loads(_run("sample", *faulty, "--json", "--gym", "travel", "--steps", "3:5", "--limit", "4").stdout)
    assert doc["shown"] == 4 and doc["matching"] == 3 * 8
    assert all(e["gym"] == "travel" and 3 <= e["step"] <= 5 for e in doc["episodes"])
    assert [e["step"] for e in doc["episodes"]] == sorted((e["step"] for e in doc["episodes"]), reverse=True)
    flagged = json.loads(_run("sample", *faulty, "--json", "--flag", "silent_tool_failures", "--limit", "5").stdout)
    assert flagged["shown"] == 5 and all(
        any(t["tool"] and t["tool"]["ok"] is False for t in e["turns"]) for e in flagged["episodes"]
    )
    a = json.loads(_run("sample", *faulty, "--json", "--seed", "7", "--limit", "3").stdout)
    b = json.loads(_run("sample", *faulty, "--json", "--seed", "7", "--limit", "3").stdout)
    assert [e["episode_id"] for e in a["episodes"]] == [e["episode_id"] for e in b["episodes"]]
    clipped = _run("sample", *faulty, "--json", "--gym", "travel", "--max-chars", "40", "--limit", "1").output
    assert CLIP_MARK.split("{")[0] in clipped
    text = _run("sample", *faulty, "--gym", "travel", "--flag", "silent_tool_failures", "--limit", "1").output
    assert "TOOL  search(" in text and "FAILED" in text and "reward" in text and "hidden facts" in text
    for outcome in ("success", "failure", "deadlock"):
        res = json.loads(_run("sample", *faulty, "--json", "--outcome", outcome, "--limit", "2").stdout)
        for e in res["episodes"]:
            assert (e["success"], e["deadlock"]) == {
                "success": (True, False),
                "failure": (False, False),
                "deadlock": (False, True),
            }[outcome]
    assert _run("sample", *faulty, "--outcome", "maybe").exit_code == EXIT_USAGE
    assert _run("sample", *faulty, "--steps", "x:y").exit_code == EXIT_USAGE
    assert _run("sample", *faulty, "--limit", "0").exit_code == EXIT_USAGE


def test_effect_cli(tmp_path):
    harm = cached_run(EFFECT_HARM)
    base = ["effect", "--runs-dir", str(harm.parent), "--run", harm.name]
    ev = json.loads((harm / "knob_events.jsonl").read_text().splitlines()[-1])["id"]
    doc = json.loads(_run(*base, "--event", ev, "--window", "6", "--json").stdout)
    assert doc["verdict"] == "harmed" and doc["event"]["id"] == ev
    text = _run(*base, "--event", ev, "--window", "6").output
    assert "verdict: HARMED" in text and "noise floor" in text
    assert _run(*base, "--event", "k-nope").exit_code == EXIT_NOT_FOUND


def test_missing_run_is_not_found(tmp_path):
    for cmd in ("status", "diagnose", "sample"):
        res = _run(cmd, "--runs-dir", str(tmp_path), "--run", "ghost", "--json")
        assert res.exit_code == EXIT_NOT_FOUND and json.loads(res.stdout)["ok"] is False


def test_console_script_in_a_real_process(healthy):
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli.main", "diagnose", *healthy, "--json", "--window", "6"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["flagged"] == []


@pytest.mark.slow
def test_commands_on_a_real_tiny_training_run(tmp_path):
    """A real `eau train --preset tiny` run (untrained policy, 2 steps): status, diagnose and sample
    answer in JSON and text, and the deadlock detector blames the policy's malformed turns."""
    import shutil

    from harness.knobs.folder import defaults_dir

    knobs = tmp_path / "knobs"
    shutil.copytree(defaults_dir(), knobs, ignore=shutil.ignore_patterns(".pending", ".history"))
    runs = tmp_path / "runs"
    cmd = [
        sys.executable,
        "-m",
        "harness.cli.main",
        "train",
        "--preset",
        "tiny",
        "--steps",
        "2",
        "--run-id",
        "real",
        "--set",
        "tasks_per_step=4",
        "--set",
        "samples_per_task=2",
        "--set",
        "agent_knobs.max_new_tokens_per_turn=16",
        "--set",
        "env_knobs.max_steps=3",
        "--no-progress",
        "--knobs-dir",
        str(knobs),
        "--runs-dir",
        str(runs),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stderr[-3000:]
    base = ["--runs-dir", str(runs), "--run", "real"]
    st = json.loads(_run("status", *base, "--json").stdout)
    assert st["state"] == "finished" and st["last_metrics_step"] == 1 and "success_rate" in st["trends"]
    assert "run real: finished" in _run("status", *base).stdout
    diag = json.loads(_run("diagnose", *base, "--json").stdout)
    assert diag["episodes"] == 16 and len(diag["findings"]) == len(DETECTORS)
    dead = next(f for f in diag["findings"] if f["name"] == "deadlock")
    if dead["flagged"] and dead["evidence"]["metrics"]["format_error_share_in_deadlocked"] >= 0.5:
        assert dead["component"] == "policy"
    assert "deadlock" in _run("diagnose", *base).stdout
    sample = json.loads(_run("sample", *base, "--json", "--limit", "2").stdout)
    assert sample["shown"] == 2 and all(e["group"].startswith("intention/train/") for e in sample["episodes"])
    text = _run("sample", *base, "--limit", "1").stdout
    assert "━━ s00000" in text and "T0 " in text and "reward" in text
