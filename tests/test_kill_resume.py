"""SIGKILL real tiny runs while an agent writes knobs, resume them, and check every event and every
write's author, reason and event id (benchmarks/bench_kill_resume.py does the work; its full
campaign of 20 kills is the slow test here and the Reliability figures in BENCHMARKS.md)."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_kill_resume as bench  # noqa: E402  (benchmarks/ is put on sys.path just above)

from harness.io import jsonl  # noqa: E402
from harness.knobs.folder import copy_defaults  # noqa: E402


@pytest.mark.timeout(900)
def test_writes_between_a_kill_and_the_resume_keep_their_ids_and_authors(tmp_path):
    """No timing involved: the trainer is stopped (SIGSTOP) while an agent write waits for its step
    boundary, then SIGKILLed; the agent then writes, for the run that is not live, a knob its preset does
    not set and one it sets. The resume applies all three at its first step boundary under the ids the
    CLI printed, as the agent's, with their reasons (and does not write its preset's values again over
    the one it sets)."""
    kdir, rdir = copy_defaults(tmp_path / "knobs"), tmp_path / "runs"
    run, log = rdir / "gap", tmp_path / "train.log"
    args = ["train", "--preset", "tiny", "--steps", "5", "--run-id", "gap", "--set", "checkpoint_every=1", *bench.FAST]
    proc = bench.start(args, kdir, rdir, log)

    def agent_set(knob: str, value: str, reason: str) -> dict:
        out = bench.eau(
            ["knobs", "set", knob, value, "--run", "gap", "--author", "agent", "--reason", reason, "--json"], kdir, rdir
        )
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    try:
        assert bench.wait_for(lambda: bench.run_live(run) and len(jsonl.read(run / "metrics.jsonl")) >= 2, 600), (
            log.read_text()[-3000:]
        )
        os.kill(bench._status_pid(run), signal.SIGSTOP)  # between two step boundaries, for good
        pending = agent_set("agent.entropy_coeff", "0.0042", "pending at the kill")
        assert pending["live"] and pending["pending"]
    finally:
        bench.kill(proc)
    gap = json.loads(bench.eau(["knobs", "get", "agent.entropy_coeff", "--run", "gap", "--json"], kdir, rdir).stdout)
    assert not gap["live"] and gap["pending"]["value"] == 0.0042  # the killed run's folder holds it
    not_set = agent_set("agent.temperature", "0.9", "run not live, a knob the preset does not set")
    preset = agent_set("agent.lr", "0.0001", "run not live, a knob the preset sets")
    assert not not_set["live"] and not preset["live"] and not_set["event"]["status"] == "not_applied"

    out = bench.eau(["train", "--resume", "gap", "--no-progress"], kdir, rdir)
    assert out.returncode == 0, out.stderr[-3000:]
    start = next(e for e in jsonl.read(run / "events.jsonl") if e["event"] == "resumed")["next_step"]
    last = {}
    for rec in jsonl.read(run / "knob_events.jsonl"):
        last[rec["id"]] = rec
    for doc, value in ((pending, 0.0042), (not_set, 0.9), (preset, 0.0001)):
        ev = doc["event"]
        rec = last.get(ev["id"])
        assert rec is not None, f"{ev['knob']} {ev['id']} is not in knob_events.jsonl"
        assert (rec["knob"], rec["new"], rec["author"], rec["reason"], rec["status"]) == (
            ev["knob"],
            value,
            "agent",
            ev["reason"],
            "accepted",
        ), rec
        assert rec["step_effective"] == start, rec
        found = bench.eau(["effect", "--event", ev["id"], "--run", "gap", "--json", "--window", "2"], kdir, rdir)
        assert found.returncode != 5, found.stderr
    hand_edits = [r for r in last.values() if r["reason"].startswith("hand edit")]
    assert hand_edits == []
    metrics = jsonl.read(run / "metrics.jsonl")
    assert [m["step"] for m in metrics] == list(range(5))
    for m in metrics:
        after = m["step"] >= start
        assert (m["entropy_coeff"], m["temperature"], m["lr"]) == (
            (0.0042, 0.9, 0.0001) if after else (0.001, 1.0, 0.001)
        ), m
    assert not list((run / "knobs" / ".pending").glob("*.json"))


# Not slow-marked (a few minutes on a loaded 2-core box). The run killed before its first checkpoint
# could end before a slow CLI write reached it (a timing assumption: the trainer is stopped while that
# write is made).
@pytest.mark.timeout(1800)
def test_two_random_kills_keep_every_event_and_attribution(tmp_path):
    doc = bench.kill_campaign(
        tmp_path,
        kills=2,
        steps=4,
        checkpoint_every=1,
        seed=7,
        min_delay=0.0,
        max_delay=10.0,
        cli_effects=1,
        timeout=900,
    )
    assert doc["problems"] == [], doc["problems"]
    assert doc["kills"] == 2 and all(r["final_rc"] == 0 for r in doc["per_run"])
    assert sum(doc["lines_checked"].values()) > 0
    assert doc["timeline_steps_checked"] == 4 * doc["runs"]


@pytest.mark.timeout(1800)
def test_a_kill_before_the_first_checkpoint_keeps_the_knob_log(tmp_path):
    doc = bench.before_first_checkpoint(tmp_path, steps=6, timeout=900)
    assert doc["problems"] == [], doc["problems"]
    assert not doc["had_checkpoint_at_kill"]
    assert doc["writes_to_the_live_run"] == 1 and doc["write_outcomes"] == {"accepted": 1}
    assert doc["found_by_effect"] == 1


@pytest.mark.slow
@pytest.mark.timeout(7200)
def test_twenty_random_kills(tmp_path):
    doc = bench.kill_campaign(
        tmp_path,
        kills=20,
        steps=12,
        checkpoint_every=1,
        seed=0,
        min_delay=0.0,
        max_delay=20.0,
        cli_effects=3,
        timeout=1800,
    )
    assert doc["problems"] == [], doc["problems"]
    assert doc["kills"] == 20 and all(r["final_rc"] == 0 for r in doc["per_run"])
