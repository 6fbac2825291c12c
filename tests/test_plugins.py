"""Plug-ins (harness.plugins): the gate, the runtime's time limits, and swaps and reverts in live runs."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from test_trainer import FAST, eau, eau_bg, metric_steps, wait_for

import harness.envs.intention  # noqa: F401  (declares intention.answer_success)
import harness.envs.telepathy  # noqa: F401  (declares telepathy.answer_correct)
from harness.envs.base import TURN_LIMIT_REACHED
from harness.io import jsonl
from harness.knobs.snapshot import KnobSnapshot
from harness.plugins.gate import code_sha, gate_plugin
from harness.plugins.runtime import PluginError, PluginTimeout, shared_worker

GOOD = """\
def turn_limit(turns, max_steps):
    return turns >= max_steps - 1

OVERRIDES = {"base.turn_limit_reached": turn_limit}
"""
SHORTER = GOOD.replace("max_steps - 1", "max_steps - 2")
BROKEN = GOOD.replace("def turn_limit(turns, max_steps):", "def turn_limit(turns, max_steps)")


def _record(turns: int, max_steps: int = 3, asks: tuple[str, ...] = ()) -> dict:
    ts = [{"action": {"choice": "ask", "content": q}} for q in asks]
    ts += [{"action": {"choice": None, "content": ""}} for _ in range(turns - len(ts))]
    return {"gym": "intention", "knobs": {"env": {"max_steps": max_steps}}, "turns": ts}


# ---------------------------------------------------------------------------------------------- the gate
def test_gate_passes_a_good_plugin_and_counts_the_decisions_it_changes():
    res = gate_plugin("short", GOOD, "plugins/short.py", records=[_record(3), _record(2, max_steps=4)])
    assert res.ok, res.message
    assert res.sha == code_sha(GOOD) and len(res.sha) == 64
    assert res.points == ["base.turn_limit_reached"]
    # (1,3) (2,3) (3,3) (1,4) (2,4): the plug-in ends at 2 of 3 and at 3 of 4 -> (2,3) changes
    assert res.replay["base.turn_limit_reached"]["decisions"] == 5
    assert res.replay["base.turn_limit_reached"]["changed"] == 1
    assert res.replay["base.turn_limit_reached"]["examples"][0] == {"input": [2, 3], "default": False, "plugin": True}


@pytest.mark.parametrize(
    "source, rule, text, line",
    [
        (BROKEN, "plugin import", "SyntaxError", 1),
        ("x = 1\nraise RuntimeError('boom')\n", "plugin import", "RuntimeError: boom", 2),
        ("OVERRIDES = {'base.turn_limit_reachd': lambda t, m: True}\n", "plugin check", "known points: base.", 1),
        (
            "def f(turns):\n    return True\nOVERRIDES = {'base.turn_limit_reached': f}\n",
            "plugin check",
            "takes (turns)",
            1,
        ),
        (
            "def f(t, m):\n    return 'yes'\nOVERRIDES = {'base.turn_limit_reached': f}\n",
            "plugin check",
            "must return a bool",
            1,
        ),
        (
            "def f(t, m):\n    return 1 / 0\nOVERRIDES = {'base.turn_limit_reached': f}\n",
            "plugin check",
            "ZeroDivisionError",
            2,
        ),
        ("x = 1\n", "plugin check", "no OVERRIDES", None),
    ],
)
def test_gate_refuses_with_the_error_and_the_line(source, rule, text, line):
    res = gate_plugin("p", source, "plugins/p.py")
    assert not res.ok and res.rule == rule and text in res.message, res.to_dict()
    assert res.line == line


def test_gate_refuses_a_second_plugin_for_a_point_in_force():
    res = gate_plugin("other", GOOD, "plugins/other.py", others={"short": ["base.turn_limit_reached"]})
    assert not res.ok and res.rule == "plugin conflict" and "plug-in short" in res.message


def test_gate_refuses_a_plugin_that_fails_on_a_recorded_input():
    src = "def f(t, m):\n    if m == 3:\n        raise ValueError('three')\n    return t >= m\nOVERRIDES = {'base.turn_limit_reached': f}\n"
    assert gate_plugin("p", src, "plugins/p.py").ok  # the samples never use max_steps 3
    res = gate_plugin("p", src, "plugins/p.py", records=[_record(2)])
    assert not res.ok and res.rule == "plugin replay" and "recorded input (1, 3)" in res.message and res.line == 3


def test_import_that_hangs_and_point_that_loops_are_stopped_at_the_limits(monkeypatch):
    monkeypatch.setenv("EAU_PLUGIN_IMPORT_S", "0.5")
    monkeypatch.setenv("EAU_PLUGIN_CALL_S", "0.5")
    t0 = time.monotonic()
    res = gate_plugin("p", "import time\ntime.sleep(3600)\n", "plugins/p.py")
    assert not res.ok and res.rule == "plugin timeout" and "within 0.5 s" in res.message
    res = gate_plugin(
        "p", "def f(t, m):\n    while True:\n        pass\nOVERRIDES = {'base.turn_limit_reached': f}\n", "p.py"
    )
    assert not res.ok and res.rule == "plugin timeout" and "sample input (1, 16)" in res.message
    assert time.monotonic() - t0 < 5


def _snapshot_with(source: str, point: str = "base.turn_limit_reached") -> KnobSnapshot:
    entry = {"plugin": "p", "sha": code_sha(source), "file": "/k/plugins/p.py", "source": source}
    return KnobSnapshot(values={}, plugins={point: entry})


def test_the_point_runs_the_plugin_in_force_in_the_worker_under_the_call_limit(monkeypatch):
    monkeypatch.setenv("EAU_PLUGIN_CALL_S", "0.5")
    assert TURN_LIMIT_REACHED(None, 2, 3) is False  # no snapshot: the default
    assert TURN_LIMIT_REACHED(_snapshot_with(GOOD), 2, 3) is True  # the plug-in, in another process
    worker = shared_worker()
    assert worker.proc is not None and worker.proc.pid != os.getpid()
    raising = "def f(t, m):\n    raise KeyError('x')\nOVERRIDES = {'base.turn_limit_reached': f}\n"
    with pytest.raises(PluginError) as info:
        TURN_LIMIT_REACHED(_snapshot_with(raising), 2, 3)
    assert "/k/plugins/p.py:2" in str(info.value) and "KeyError" in str(info.value)
    looping = "def f(t, m):\n    while True:\n        pass\nOVERRIDES = {'base.turn_limit_reached': f}\n"
    t0 = time.monotonic()
    with pytest.raises(PluginTimeout):
        TURN_LIMIT_REACHED(_snapshot_with(looping), 2, 3)
    assert time.monotonic() - t0 < 3
    assert TURN_LIMIT_REACHED(_snapshot_with(GOOD), 1, 3) is False  # a fresh worker serves the next call
    wrong = "OVERRIDES = {'base.turn_limit_reached': lambda t, m: [t]}\n"
    with pytest.raises(PluginError, match="must return a bool"):
        TURN_LIMIT_REACHED(_snapshot_with(wrong), 2, 3)


# ---------------------------------------------------------------------------------------------- live runs
def _events(run: Path, knob: str = "plugins.short") -> list[dict]:
    return [e for e in jsonl.read(run / "knob_events.jsonl") if e.get("knob") == knob]


def _turns_by_step(run: Path) -> dict[int, float]:
    return {m["step"]: m["turns_mean"] for m in jsonl.read(run / "metrics.jsonl")}


def test_live_swap_refusals_and_revert(tmp_path, knobs_dir, monkeypatch):
    """A broken plug-in and one that hangs at import are refused while the run goes on; a good one is
    in force from the next step; a second version then a revert restore the first version's code."""
    monkeypatch.setenv("EAU_PLUGIN_IMPORT_S", "1")
    rdir, run = tmp_path / "runs", tmp_path / "runs" / "plug"
    plugin = run / "knobs" / "plugins" / "short.py"  # the run's own knobs folder
    args = ["train", "--preset", "tiny", "--steps", "300", "--run-id", "plug", "--set", "checkpoint_every=0", *FAST]
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "shorter.py").write_text(SHORTER)
    with open(tmp_path / "run.log", "w") as log:
        proc = eau_bg(args, knobs_dir, rdir, log)
        try:
            assert wait_for(lambda: (run / "metrics.jsonl").exists() and len(metric_steps(run)) >= 1, timeout=600)
            # 1. a hand-written broken plug-in: refused with its line, nothing in force
            plugin.parent.mkdir(exist_ok=True)
            plugin.write_text(BROKEN)
            assert wait_for(lambda: any(e["status"] == "rejected" for e in _events(run)), timeout=300)
            # 2. the CLI's own gate refuses it too, and leaves the file as it is
            (tmp_path / "broken.py").write_text(BROKEN)
            out = eau(
                ["knobs", "plugin", "set", "short", str(tmp_path / "broken.py"), "--reason", "x"], knobs_dir, rdir
            )
            assert out.returncode == 3 and "SyntaxError" in out.stderr
            # 3. a good one through the CLI, author agent: in force from the next step
            out = eau(
                ["knobs", "plugin", "set", "short", str(tmp_path / "good.py"), "--author", "agent"]
                + ["--reason", "episodes end one turn early", "--json"],
                knobs_dir,
                rdir,
            )
            assert out.returncode == 0, out.stderr
            assert json.loads(out.stdout)["pending"] is True
            assert wait_for(lambda: any(e["status"] == "accepted" for e in _events(run)), timeout=300)
            # 4. a plug-in that hangs at import (hand edit): refused at the time limit, the run goes on
            (run / "knobs" / "plugins" / "sleepy.py").write_text("import time\ntime.sleep(3600)\n")
            assert wait_for(lambda: _events(run, "plugins.sleepy"), timeout=300)
            # 5. a second version, then a revert of it
            out = eau(
                ["knobs", "plugin", "set", "short", str(tmp_path / "shorter.py"), "--reason", "v2"], knobs_dir, rdir
            )
            assert out.returncode == 0, out.stderr
            assert wait_for(lambda: len([e for e in _events(run) if e["status"] == "accepted"]) >= 2, timeout=300)
            v2 = [e for e in _events(run) if e["status"] == "accepted"][-1]
            out = eau(
                ["knobs", "revert", v2["id"], "--author", "agent", "--reason", "v2 ends too soon"], knobs_dir, rdir
            )
            assert out.returncode == 0, out.stderr
            assert wait_for(lambda: any(e.get("source") == "revert" for e in _events(run)), timeout=300)
            reverted_at = next(e for e in _events(run) if e.get("source") == "revert")["step_effective"]
            assert wait_for(lambda: max(metric_steps(run)) > reverted_at, timeout=300)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=600) == 0
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    evs = _events(run)
    broken, v1, v2, rev = (
        evs[0],
        *[e for e in evs if e["status"] == "accepted"],
    )
    assert broken["status"] == "rejected" and broken["rule"] == "plugin import" and broken["line"] == 1
    assert (
        broken["author"] == "human" and "hand edit" in broken["reason"] and "keep their defaults" in broken["message"]
    )
    assert (v1["author"], v1["reason"], v1["new"], v1["old"]) == (
        "agent",
        "episodes end one turn early",
        code_sha(GOOD),
        None,
    )
    assert "replay" in v1["message"]
    assert (v2["old"], v2["new"], v2["author"]) == (code_sha(GOOD), code_sha(SHORTER), "human")
    assert (rev["old"], rev["new"], rev["author"], rev["ref"]) == (code_sha(SHORTER), code_sha(GOOD), "agent", v2["id"])
    assert plugin.read_text() == GOOD  # the previous code restored
    sleepy = _events(run, "plugins.sleepy")[0]
    assert sleepy["status"] == "rejected" and sleepy["rule"] == "plugin timeout"
    # the run never stopped, and each version held exactly from its effective step
    turns = _turns_by_step(run)
    assert sorted(turns) == list(range(len(turns)))
    for step, t in turns.items():
        if step < v1["step_effective"]:
            assert t == 3.0, (step, t)  # FAST: max_steps 3, the tiny policy never answers
        elif step < v2["step_effective"]:
            assert t == 2.0, (step, t)
        elif step < rev["step_effective"]:
            assert t == 1.0, (step, t)
        else:
            assert t == 2.0, (step, t)
    doc = json.loads((run / "knobs_in_force.json").read_text())
    assert doc["plugins"]["short"]["sha256"] == code_sha(GOOD)
    assert "plugin" in (run / "log.txt").read_text()


RAISES = """\
def turn_limit(turns, max_steps):
    if max_steps == 3 and turns == 2:
        raise RuntimeError("planted failure")
    return turns >= max_steps

OVERRIDES = {"base.turn_limit_reached": turn_limit}
"""
LOOPS = RAISES.replace('raise RuntimeError("planted failure")', "while True:\n            pass")


@pytest.mark.parametrize("source, error", [(RAISES, "planted failure"), (LOOPS, "did not finish within")])
def test_a_plugin_failing_inside_episodes_ends_them_with_an_error_and_the_run_goes_on(
    tmp_path, knobs_dir, monkeypatch, source, error
):
    monkeypatch.setenv("EAU_PLUGIN_CALL_S", "0.3")
    (knobs_dir / "plugins").mkdir()
    (knobs_dir / "plugins" / "planted.py").write_text(source)  # passes the gate: the samples never hit it
    rdir = tmp_path / "runs"
    t0 = time.monotonic()
    out = eau(
        ["train", "--preset", "tiny", "--steps", "2", "--run-id", "err", "--set", "checkpoint_every=0", *FAST],
        knobs_dir,
        rdir,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    run = rdir / "err"
    assert [m["episode_errors"] for m in jsonl.read(run / "metrics.jsonl")] == [4, 4]
    recs = jsonl.read(run / "trajectories" / "step_000001.jsonl")
    assert all(r["error"]["where"] == "step" and error in r["error"]["message"] for r in recs), recs[0].get("error")
    assert all(len(r["turns"]) == 1 and r["error"]["turn"] == 1 for r in recs)  # it ended at the failing turn
    if source is RAISES:
        assert "planted.py:3" in recs[0]["error"]["message"]
    assert time.monotonic() - t0 < 120


# ---------------------------------------------------------------------------------------------- CLI, no run
def test_cli_check_set_history_and_revert_without_a_live_run(tmp_path, knobs_dir, runs_dir):
    from typer.testing import CliRunner

    from harness.cli.main import app

    cli = CliRunner()
    env = {"EAU_KNOBS_DIR": str(knobs_dir), "EAU_RUNS_DIR": str(runs_dir)}
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "broken.py").write_text(BROKEN)
    out = cli.invoke(app, ["knobs", "plugin", "points", "--json"], env=env)
    assert out.exit_code == 0 and "base.turn_limit_reached" in out.stdout
    out = cli.invoke(app, ["knobs", "plugin", "check", "short", str(tmp_path / "broken.py"), "--json"], env=env)
    assert out.exit_code == 3 and json.loads(out.stdout)["rule"] == "plugin import"
    out = cli.invoke(app, ["knobs", "plugin", "set", "short", str(tmp_path / "broken.py"), "--reason", "r"], env=env)
    assert out.exit_code == 3 and not (knobs_dir / "plugins" / "short.py").exists()
    out = cli.invoke(
        app, ["knobs", "plugin", "set", "short", str(tmp_path / "good.py"), "--reason", "r", "--json"], env=env
    )
    assert out.exit_code == 0, out.output
    ev = json.loads(out.stdout)["event"]
    assert (ev["knob"], ev["old"], ev["new"], ev["applies"]) == ("plugins.short", None, code_sha(GOOD), "next_run")
    assert (knobs_dir / "plugins" / "short.py").read_text() == GOOD
    assert (knobs_dir / "plugins" / ".versions" / f"{code_sha(GOOD)}.py").read_text() == GOOD
    out = cli.invoke(app, ["knobs", "history", "plugins.", "--json"], env=env)
    assert [e["status"] for e in json.loads(out.stdout)["events"]] == ["rejected", "accepted"]
    out = cli.invoke(app, ["knobs", "plugin", "list", "--json"], env=env)
    assert json.loads(out.stdout)["files"]["short"]["sha256"] == code_sha(GOOD)
    out = cli.invoke(app, ["knobs", "revert", ev["id"], "--reason", "undo", "--json"], env=env)
    assert out.exit_code == 0, out.output
    assert not (knobs_dir / "plugins" / "short.py").exists()  # before that event there was no plug-in
    out = cli.invoke(app, ["knobs", "plugin", "show", code_sha(GOOD)[:10]], env=env)
    assert out.exit_code == 0 and out.stdout == GOOD


def test_every_override_point_is_documented_in_the_skill():
    from harness.cli.plugins import declare_points
    from harness.plugins.points import POINTS

    declare_points()
    doc = (Path(__file__).resolve().parents[1] / "skill" / "references" / "plugins.md").read_text()
    for name, point in POINTS.items():
        assert f"`{name}`" in doc, name
        assert point.samples and point.replay is not None, name  # the gate has something to check


def test_a_candidate_too_slow_for_the_gate_budget_is_refused(monkeypatch):
    monkeypatch.setenv("EAU_PLUGIN_GATE_S", "1")
    src = "import time\ndef f(t, m):\n    time.sleep(0.2)\n    return t >= m\nOVERRIDES = {'base.turn_limit_reached': f}\n"
    t0 = time.monotonic()
    res = gate_plugin("slow", src, "plugins/slow.py", records=[_record(3)] * 10)
    assert not res.ok and res.rule == "plugin timeout" and "budget of 1 s ran out" in res.message
    assert time.monotonic() - t0 < 3


def test_a_resumed_run_gates_its_plugins_again_and_keeps_them_in_force(tmp_path, knobs_dir):
    (knobs_dir / "plugins").mkdir()
    (knobs_dir / "plugins" / "short.py").write_text(GOOD)
    rdir, run = tmp_path / "runs", tmp_path / "runs" / "res"
    args = ["train", "--preset", "tiny", "--steps", "4", "--run-id", "res", "--set", "checkpoint_every=1", *FAST]
    with open(tmp_path / "run.log", "w") as log:
        proc = eau_bg(args, knobs_dir, rdir, log)
        try:
            assert wait_for(lambda: (run / "metrics.jsonl").exists() and len(metric_steps(run)) >= 1, timeout=600)
            proc.send_signal(signal.SIGTERM)  # finishes the step, checkpoints, exits
            assert proc.wait(timeout=600) == 0
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    stopped_at = max(metric_steps(run))
    assert stopped_at < 3
    out = eau(["train", "--resume", "res", "--no-progress"], knobs_dir, rdir, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert metric_steps(run) == [0, 1, 2, 3]
    assert set(_turns_by_step(run).values()) == {2.0}  # in force before and after the resume
    first, again = _events(run)
    assert first["author"] == "system" and "when the run started" in first["reason"] and first["step_effective"] == 0
    assert "resumed at step" in again["reason"] and again["step_effective"] == stopped_at + 1
    assert again["new"] == first["new"] == code_sha(GOOD)
    assert "recorded decisions changed" in again["message"]  # the resume replays the recorded steps
    assert not [e for e in jsonl.read(run / "knob_events.jsonl") if e["status"] == "not_applied"]


def test_folder_poll_swaps_refuses_keeps_and_regates_a_conflict_once_the_point_is_free(tmp_path, knobs_dir):
    from harness.knobs.events import EventLog
    from harness.plugins.folder import PluginFolder

    log = EventLog(tmp_path / "events.jsonl")
    folder = PluginFolder(knobs_dir, lambda: log)
    pdir = knobs_dir / "plugins"
    pdir.mkdir()
    (pdir / "a.py").write_text(GOOD)
    applied, refused = folder.poll(0, first=True)
    assert [e["knob"] for e in applied] == ["plugins.a"] and applied[0]["author"] == "system"
    (pdir / "b.py").write_text(SHORTER)  # the same point: refused while a holds it
    (pdir / "drafts").mkdir()
    (pdir / "drafts" / "c.py").write_text("syntax error here")  # a draft: never loaded
    applied, refused = folder.poll(1)
    assert not applied and [(e["knob"], e["rule"]) for e in refused] == [("plugins.b", "plugin conflict")]
    assert folder.poll(2) == ([], [])  # nothing changed: nothing logged again
    (pdir / "a.py").write_text(BROKEN)
    applied, refused = folder.poll(3)
    assert refused[0]["rule"] == "plugin import" and "the version in force stays" in refused[0]["message"]
    assert folder.entries()["base.turn_limit_reached"]["sha"] == code_sha(GOOD)
    (pdir / "a.py").unlink()
    applied, refused = folder.poll(4)
    assert [(e["knob"], e["new"]) for e in applied] == [("plugins.a", None)]
    applied, refused = folder.poll(5)  # the point is free: b is gated again and goes in
    assert [(e["knob"], e["new"], e["step_effective"]) for e in applied] == [("plugins.b", code_sha(SHORTER), 5)]
    assert folder.summary()["b"]["points"] == ["base.turn_limit_reached"]


def test_a_plugin_that_allocates_without_bound_gets_a_memory_error():
    src = "def f(t, m):\n    x = bytearray(8 << 30)\n    return True\nOVERRIDES = {'base.turn_limit_reached': f}\n"
    res = gate_plugin("big", src, "plugins/big.py")
    assert not res.ok and "MemoryError" in res.message and res.line == 2


def test_eau_gate_replays_recorded_episodes_with_a_plugin_candidate_in_force(tmp_path, knobs_dir):
    rdir = tmp_path / "runs"
    out = eau(
        ["train", "--preset", "tiny", "--steps", "1", "--run-id", "rec", "--set", "checkpoint_every=0", *FAST],
        knobs_dir,
        rdir,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (tmp_path / "good.py").write_text(GOOD)
    out = eau(["gate", f"{tmp_path / 'good.py'}=plugins/short.py", "--run", "rec", "--json"], knobs_dir, rdir)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    cand = doc["candidates"][0]
    assert cand["status"] == "accepted" and cand["target"] == "plugins/short.py"
    # FAST: 4 recorded episodes of 3 turns; the plug-in ends each one turn earlier
    assert cand["plugin"]["replay"]["base.turn_limit_reached"] == {
        "decisions": 12,
        "changed": 4,
        "examples": cand["plugin"]["replay"]["base.turn_limit_reached"]["examples"],
    }
    episodes = doc["replays"][0]
    assert episodes["kind"] == "episodes" and episodes["replayed"] == 4
    assert episodes["ran_out_of_recorded_turns"] == 0
    (tmp_path / "broken.py").write_text(BROKEN)
    out = eau(["gate", f"{tmp_path / 'broken.py'}=plugins/short.py", "--run", "rec", "--json"], knobs_dir, rdir)
    assert out.returncode == 3
    assert json.loads(out.stdout)["candidates"][0]["refusals"][0]["rule"] == "plugin import"
    assert not (knobs_dir / "plugins" / "short.py").exists()  # nothing written
