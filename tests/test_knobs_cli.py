"""``eau knobs`` verbs through the real CLI (typer's runner in-process; a subprocess for watch)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest
from typer.testing import CliRunner

from harness.cli.main import app

runner = CliRunner()


@pytest.fixture
def cli(knobs_dir, runs_dir):
    def run(*args, code=0):
        res = runner.invoke(app, ["knobs", *args, "--knobs-dir", str(knobs_dir), "--runs-dir", str(runs_dir)])
        assert res.exit_code == code, (args, res.exit_code, res.output, res.stderr if hasattr(res, "stderr") else "")
        return res

    return run


def test_list_json(cli):
    out = json.loads(cli("list", "--json").stdout)
    names = {k["name"] for k in out["knobs"]}
    assert "agent.entropy_coeff" in names and "env.max_steps" in names
    k = next(k for k in out["knobs"] if k["name"] == "env.max_steps")
    assert (
        k["value"]
        == {"default": 16, "colbench": 10, "tau": 30, "tau2_airline": 50, "tau2_retail": 50, "tau2_telecom": 50}
        and k["hot"] is True
        and k["description"]
    )


def test_list_text(cli):
    assert "agent.entropy_coeff" in cli("list").stdout


def test_get_json_and_text(cli):
    out = json.loads(cli("get", "env.max_steps", "--gym", "colbench", "--json").stdout)
    assert out["name"] == "env.max_steps" and out["value"] == 10
    assert "allowed" in cli("get", "agent.entropy_coeff").stdout
    cli("get", "agent.nope", code=5)


def test_set_accepted_and_each_refusal(cli, knobs_dir):
    out = json.loads(cli("set", "agent.entropy_coeff", "0.003", "--reason", "r", "--author", "agent", "--json").stdout)
    assert out["ok"] and out["event"]["author"] == "agent" and out["event"]["new"] == 0.003
    before = {p.name: p.read_bytes() for p in knobs_dir.glob("*.yaml")}
    for args, rule in [
        (("agent.entropy_coeff", "0.2"), "range"),
        (("agent.entropy_coeff", "0.009"), "max delta"),
        (("env.max_steps", "8", "--gym", "travel"), "requires"),
        (("env.max_repeated_probes", "5", "--gym", "colbench"), "wrong gym"),
        (("agent.ppo_epochs", "two"), "type"),
    ]:
        res = cli("set", *args, "--reason", "r", code=3)
        assert rule in res.stderr, (args, res.stderr)
    # an unknown knob is "not found" (5, README's table), refused and logged the same way
    assert "unknown knob" in cli("set", "agent.unknown_knob", "1", "--reason", "r", code=5).stderr
    assert before == {p.name: p.read_bytes() for p in knobs_dir.glob("*.yaml")}  # untouched
    cli("set", "agent.lr", "1e-5", code=2)  # --reason is required (usage error)


def test_set_list_value_and_persona(cli):
    cli("set", "reward.turn_reward_clip", "[-0.5, 1.5]", "--reason", "r")
    cli("set", "user.persona", "terse", "--reason", "r")
    out = json.loads(cli("get", "reward.turn_reward_clip", "--json").stdout)
    assert out["value"] == [-0.5, 1.5]


def test_validate(cli, knobs_dir):
    assert json.loads(cli("validate", "--json").stdout)["ok"] is True
    (knobs_dir / "reward.yaml").write_text("default_scale: 5\n")
    res = cli("validate", code=4)
    assert "reward.yaml" in res.stderr and "default_scale" in res.stderr
    out = json.loads(cli("validate", "--json", code=4).stdout)
    assert not out["ok"] and any(p["file"].endswith("reward.yaml") for p in out["problems"])


def test_history_and_revert(cli):
    ev = json.loads(cli("set", "agent.kl_coef", "0.01", "--reason", "more kl", "--json").stdout)["event"]
    cli("set", "agent.kl_coef", "0.9", "--reason", "too much", code=3)
    hist = json.loads(cli("history", "agent.kl_coef", "--json").stdout)
    assert [e["status"] for e in hist["events"]] == ["accepted", "rejected"]
    assert json.loads(cli("history", "--status", "rejected", "--json").stdout)["total"] == 1
    out = json.loads(cli("revert", ev["id"], "--json").stdout)
    assert out["event"]["new"] == 0.001 and out["event"]["ref"] == ev["id"]
    assert json.loads(cli("get", "agent.kl_coef", "--json").stdout)["value"] == 0.001
    assert "k-" in cli("history").stdout
    cli("revert", "k-0000000000", code=5)
    assert "unknown knob" in cli("history", "agent.nosuch", code=5).stderr  # not an empty history
    assert json.loads(cli("history", "env.", "--json").stdout)["total"] == 0  # an area prefix is fine


def test_add(cli):
    schema = json.dumps(
        {
            "description": "Steps of linear learning-rate warm-up.",
            "x-hot": True,
            "x-gyms": ["*"],
            "type": "integer",
            "minimum": 0,
            "maximum": 500,
        }
    )
    cli("add", "agent.warmup_steps", "--schema", schema, "--value", "20", "--reason", "r")
    assert json.loads(cli("get", "agent.warmup_steps", "--json").stdout)["value"] == 20
    cli("validate")
    cli("add", "agent.other", "--schema", "{}", "--value", "1", "--reason", "r", code=3)


def test_env_vars_and_watch_subprocess(knobs_dir, runs_dir):
    env = {**os.environ, "EAU_KNOBS_DIR": str(knobs_dir), "EAU_RUNS_DIR": str(runs_dir)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli.main", "knobs", "watch", "--interval", "0.2", "--duration", "8", "--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    # wait until the watcher reports that it is watching (start-up takes seconds on a busy machine)
    first = proc.stderr.readline()
    assert first.startswith("watching"), first

    def edits():
        time.sleep(0.5)
        p = knobs_dir / "agent.yaml"
        p.write_text(p.read_text().replace("ppo_epochs: 2", "ppo_epochs: 3"))
        time.sleep(1.2)
        p.write_text(p.read_text().replace("ppo_epochs: 3", "ppo_epochs: [3"))

    t = threading.Thread(target=edits)
    t.start()
    out, errout = proc.communicate(timeout=30)
    t.join()
    events = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert [(e["knob"], e["status"]) for e in events] == [
        ("agent.ppo_epochs", "accepted"),
        ("agent.yaml", "rejected"),
    ], errout
    assert events[1]["rule"] == "syntax" and events[1]["line"]
