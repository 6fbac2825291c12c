"""Knob writes are atomic and every file problem is a refusal (harness/knobs/writes.py, harness/io/yamlio.py):
a write is validated whole (value, reason, author, file) before anything is written; refused means every
file untouched and the refusal logged; a write that fails part way is rolled back; a knob or rule file
that cannot be parsed (an integer longer than Python converts, decimal or hex) is refused naming file,
line and rule; names that are not names (a gym, a new knob) are refused before anything is read."""

from __future__ import annotations

import json
import os
import shutil
import socket

import pytest
from typer.testing import CliRunner

from harness.cli.main import app
from harness.io import jsonl
from harness.stores import open_store

runner = CliRunner()
BAD_REASON = "bad \udcff byte"  # what `--reason $'bad \xff byte'` arrives as (a lone surrogate)
HUGE = {"decimal": "7" * 5000, "hex": "0x" + "f" * 4000}


def cli(knobs_dir, runs_dir, *args):
    return runner.invoke(app, ["knobs", *args, "--knobs-dir", str(knobs_dir), "--runs-dir", str(runs_dir)])


def fake_live_run(runs_dir, knobs_dir, step=3):
    """A run folder whose status says live (this process) and which trains from ``knobs_dir``."""
    run = runs_dir / "live"
    run.mkdir(parents=True)
    status = {"run_id": "live", "state": "running", "pid": os.getpid(), "host": socket.gethostname(), "step": step}
    status.update(knobs_dir=str(knobs_dir.resolve()), gyms=["travel", "intention"])
    (run / "status.json").write_text(json.dumps(status))
    return run


def test_a_reason_that_is_not_text_is_refused_with_nothing_written(knobs_dir, runs_dir):
    before = (knobs_dir / "agent.yaml").read_bytes()
    res = cli(knobs_dir, runs_dir, "set", "agent.entropy_coeff", "0.0012", "--reason", BAD_REASON)
    assert res.exit_code == 3, res.output
    assert (knobs_dir / "agent.yaml").read_bytes() == before
    (ev,) = jsonl.read(knobs_dir / ".history" / "knob_events.jsonl")
    assert (ev["status"], ev["rule"], ev["new"]) == ("rejected", "reason", 0.0012)
    assert ev["reason"] == "bad \\udcff byte"  # logged, its byte kept as an escape


def test_for_a_live_run_a_bad_reason_writes_nothing_and_the_next_write_is_applied(knobs_dir, runs_dir):
    run = fake_live_run(runs_dir, knobs_dir)
    store = open_store(knobs_dir, events_path=run / "knob_events.jsonl", run_gyms=["travel", "intention"])
    before = (knobs_dir / "agent.yaml").read_bytes()
    res = cli(knobs_dir, runs_dir, "set", "agent.clip_ratio", "0.21", "--reason", BAD_REASON)
    assert res.exit_code == 3, res.output
    assert (knobs_dir / "agent.yaml").read_bytes() == before and not list((knobs_dir / ".pending").glob("*"))
    ok = cli(
        knobs_dir, runs_dir, "set", "agent.temperature", "0.95", "--reason", "cooler", "--author", "agent", "--json"
    )
    assert ok.exit_code == 0, ok.output
    eid = json.loads(ok.stdout)["event"]["id"]
    polled = store.poll(4, [], rescan=True, wait_debounce=False)
    assert polled.refused == []
    assert [(e["id"], e["knob"], e["new"], e["step_effective"]) for e in polled.applied] == [
        (eid, "agent.temperature", 0.95, 4)
    ]
    log = jsonl.read(run / "knob_events.jsonl")
    assert [(e["status"], e.get("rule")) for e in log] == [("rejected", "reason"), ("accepted", None)]
    assert "knob write REFUSED agent.clip_ratio" in (run / "log.txt").read_text()


def test_a_write_that_fails_part_way_is_rolled_back(knobs_dir):
    store = open_store(knobs_dir, events_path=None)
    value_file, schema_file = knobs_dir / "agent.yaml", knobs_dir / "schema" / "agent.schema.json"
    before = value_file.read_bytes()
    schema_file.unlink()
    (schema_file / "in-the-way").mkdir(parents=True)  # the schema file cannot be replaced: a folder is there
    schema = {"description": "d", "x-hot": True, "x-gyms": ["*"], "type": "integer", "minimum": 0}
    res = store.add_knob("agent", "warmup_steps", schema, 3, author="human", reason="r")
    assert not res.ok and res.event["rule"] == "not written" and "nothing was changed" in res.event["message"]
    assert value_file.read_bytes() == before  # the value written first was put back
    assert "warmup_steps" not in store.schemas["agent"].knobs


def test_a_write_for_a_run_whose_file_cannot_be_written_leaves_no_note(knobs_dir):
    store = open_store(knobs_dir, events_path=None)
    (knobs_dir / "env.yaml").unlink()
    (knobs_dir / "env.yaml" / "in-the-way").mkdir(parents=True)
    res = store.set("env.max_steps", 12, author="agent", reason="r", for_run="live", skip_requires=True)
    assert not res.ok and res.event["rule"] == "not written"
    assert not list((knobs_dir / ".pending").glob("*.json"))  # the note written before the file was removed


@pytest.mark.parametrize("form", sorted(HUGE))
def test_an_integer_too_long_to_convert_is_refused_with_file_line_and_rule(knobs_dir, runs_dir, tmp_path, form):
    store = open_store(knobs_dir, events_path=tmp_path / "events.jsonl", run_gyms=["travel"], debounce_s=0)
    for rel in ("env.yaml", "rules/rewards/default.yaml"):
        path = knobs_dir / rel
        good = path.read_text()
        lines = good.splitlines()
        at = len(lines) + 1
        path.write_text(good + f"huge_value: {HUGE[form]}\n")
        res = store.poll(1, [], rescan=True, wait_debounce=False)
        (ev,) = res.refused
        assert (ev["rule"], ev["line"], ev["file"]) == ("range", at, str(path)), ev
        assert "digits" in ev["message"] and ev["rule"] != "internal error"
        for args in (["validate"], ["list"], ["get", "agent.lr"], ["set", "agent.lr", "0.00002", "--reason", "r"]):
            out = cli(knobs_dir, runs_dir, *args)
            assert out.exit_code == 4, (args, out.output)
            assert f"{path}:{at}" in out.stderr and "[range]" in out.stderr, out.stderr
        path.write_text(good)
        store.poll(2, [], rescan=True, wait_debounce=False)


def test_a_yaml_set_is_a_refused_write_not_a_crash(knobs_dir, runs_dir):
    before = (knobs_dir / "user.yaml").read_bytes()
    res = cli(knobs_dir, runs_dir, "set", "user.reveal_kinds", "!!set {detail: null}", "--reason", "r", "--json")
    assert res.exit_code == 3, res.output
    doc = json.loads(res.stdout)
    assert doc["event"]["rule"] == "type" and "!!set" in doc["event"]["message"]
    assert (knobs_dir / "user.yaml").read_bytes() == before
    assert jsonl.read(knobs_dir / ".history" / "knob_events.jsonl")[-1]["status"] == "rejected"


@pytest.mark.parametrize("gym", ["../travel", "/etc/passwd", "TRAVEL", "tr\u0430vel", "travel\n", ""])
def test_an_unknown_gym_is_not_found(knobs_dir, runs_dir, gym):
    before = (knobs_dir / "env.yaml").read_bytes()
    for args in (["get", "env.max_steps", "--gym", gym], ["set", "env.max_steps", "9", "--gym", gym, "--reason", "r"]):
        res = cli(knobs_dir, runs_dir, *args)
        assert res.exit_code == 5, (gym, res.output)
        assert "unknown gym" in res.stderr
    assert (knobs_dir / "env.yaml").read_bytes() == before


@pytest.mark.parametrize("name", ["agent.../x", "agent./etc/passwd", "agent.Lr", "agent.9x", "agent.x-y", "nope.x"])
def test_knobs_add_takes_identifier_names_only(knobs_dir, runs_dir, name):
    schema = '{"description": "d", "x-hot": true, "x-gyms": ["*"], "type": "integer"}'
    before = {p: p.read_bytes() for p in (knobs_dir / "agent.yaml", knobs_dir / "schema" / "agent.schema.json")}
    res = cli(knobs_dir, runs_dir, "add", name, "--schema", schema, "--value", "1", "--reason", "r")
    assert res.exit_code == 2, res.output
    assert all(p.read_bytes() == b for p, b in before.items())
    shutil.rmtree(knobs_dir / ".history", ignore_errors=True)
