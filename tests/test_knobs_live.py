"""Live reload with the real watchdog observer: hand edits and CLI writes applied only at poll()."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.io import jsonl
from harness.knobs.schema import validate_value
from harness.knobs.store import KnobStore
from harness.knobs.watcher import KnobWatcher
from harness.stores import open_store

DEBOUNCE = 0.15


def settle(store: KnobStore, timeout: float = 5.0) -> None:
    """Wait until the observer has queued a change and the debounce interval has passed."""
    t0 = time.monotonic()
    while not store.pending_paths() and time.monotonic() - t0 < timeout:
        time.sleep(0.02)
    time.sleep(DEBOUNCE + 0.1)


def edit(path: Path, old: str, new: str) -> None:
    path.write_text(path.read_text().replace(old, new))


@pytest.fixture
def live(knobs_dir, tmp_path):
    store = open_store(
        knobs_dir, events_path=tmp_path / "knob_events.jsonl", run_gyms=["travel", "function"], debounce_s=DEBOUNCE
    )
    with KnobWatcher(store):
        yield store


def assert_all_valid(store: KnobStore) -> None:
    for spec in store.specs():
        assert validate_value(spec, store.raw(spec.full_name)) is None, spec.full_name


def test_scripted_edits_with_steps(live, knobs_dir):
    store = live
    agent, env = knobs_dir / "agent.yaml", knobs_dir / "env.yaml"
    metrics = []
    step = 0

    def poll():
        nonlocal step
        step += 1
        store.current_step = step
        return store.poll(step, metrics)

    # 1. a valid edit: not in force until the poll, then applied with its effective step
    edit(agent, "entropy_coeff: 0.001", "entropy_coeff: 0.003")
    settle(store)
    assert store.get("agent.entropy_coeff") == 0.001  # nothing changes between polls
    res = poll()
    assert [(e["knob"], e["new"], e["step_effective"]) for e in res.applied] == [("agent.entropy_coeff", 0.003, 1)]
    # 2. a YAML syntax error: refused with the line, last valid value stays
    good_text = agent.read_text()
    agent.write_text(good_text.replace("kl_coef: 0.001", "kl_coef: [0.001"))
    settle(store)
    res = poll()
    assert not res.applied and res.refused[0]["rule"] == "syntax" and res.refused[0]["line"]
    assert res.refused[0]["file"].endswith("agent.yaml")
    assert store.get("agent.kl_coef") == 0.001 and store.get("agent.entropy_coeff") == 0.003
    # 3. the fixing edit is accepted
    agent.write_text(good_text.replace("kl_coef: 0.001", "kl_coef: 0.01"))
    settle(store)
    res = poll()
    assert [(e["knob"], e["new"]) for e in res.applied] == [("agent.kl_coef", 0.01)]
    # 4. a wrong type: refused, names the knob's line
    edit(agent, "ppo_epochs: 2", "ppo_epochs: two")
    settle(store)
    res = poll()
    assert res.refused[0]["rule"] == "type" and res.refused[0]["knob"] == "agent.ppo_epochs"
    assert agent.read_text().splitlines()[res.refused[0]["line"] - 1].startswith("ppo_epochs")
    # 5. a difficulty increase without the success it requires, then with it
    edit(env, "noise_choice_number: 3", "noise_choice_number: 4")
    settle(store)
    res = poll()
    assert res.refused[0]["rule"] == "requires" and store.get("env.noise_choice_number") == 3
    metrics[:] = [{"gym/travel/success_rate": 0.9}] * 5
    edit(env, "noise_choice_number: 4", "noise_choice_number: 5")
    settle(store)
    res = poll()
    assert [(e["knob"], e["new"], e["step_effective"]) for e in res.applied] == [("env.noise_choice_number", 5, step)]
    # every event is in the log, with file and reason for refusals
    log = jsonl.read(store.log.path)
    assert [e["status"] for e in log] == ["accepted", "rejected", "accepted", "rejected", "rejected", "accepted"]
    assert all(e["file"] and e["message"] for e in log)
    assert_all_valid(store)


def test_editor_swap_and_backup_files(live, knobs_dir):
    store = live
    agent = knobs_dir / "agent.yaml"
    text = agent.read_text()
    # vim-style: write a swap file and a backup, then rename a new file over the original
    (knobs_dir / ".agent.yaml.swp").write_bytes(b"\x00\x01garbage")
    (knobs_dir / "agent.yaml~").write_text(text)
    (knobs_dir / "4913").write_text("")
    tmp = knobs_dir / ".agent.yaml.new"
    tmp.write_text(text.replace("\nlr: 1.0e-5", "\nlr: 2.0e-5"))
    os.replace(tmp, agent)
    settle(store)
    res = store.poll(1, [])
    assert [(e["knob"], e["new"]) for e in res.applied] == [("agent.lr", 2e-5)]
    assert not res.refused  # swap/backup files are not knob files


def test_deleted_file_non_utf8_huge_and_partial(live, knobs_dir):
    store = live
    user = knobs_dir / "user.yaml"
    text = user.read_text()
    user.unlink()
    settle(store)
    res = store.poll(1, [])
    assert res.refused[0]["rule"] == "missing" and store.get("user.max_reveals") == 8
    user.write_bytes(text.encode().replace(b"persona: neutral", b"persona: \xff\xfe"))
    settle(store)
    res = store.poll(2, [])
    assert res.refused[0]["rule"] == "encoding" and res.refused[0]["line"]
    user.write_text(text + "#" + "x" * 300_000 + "\n")
    settle(store)
    res = store.poll(3, [])
    assert res.refused[0]["rule"] == "size"
    # a partial write (file cut mid-way): knobs that disappeared are refused as missing, values stay
    user.write_text(text[: text.index("max_reveals")])
    settle(store)
    res = store.poll(4, [])
    assert {e["rule"] for e in res.refused} == {"missing"} and store.get("user.max_reveals") == 8
    # the complete file again: accepted silently (values equal those in force)
    user.write_text(text.replace("max_reveals: 8", "max_reveals: 6"))
    settle(store)
    res = store.poll(5, [])
    assert [(e["knob"], e["new"]) for e in res.applied] == [("user.max_reveals", 6)]
    assert_all_valid(store)


def test_debounce_keeps_young_changes_queued(live, knobs_dir):
    store = live
    store.debounce_s = 1.0  # long enough that the first poll surely comes too early
    edit(knobs_dir / "agent.yaml", "\ngamma: 1.0", "\ngamma: 0.99")
    t0 = time.monotonic()
    while not store.pending_paths() and time.monotonic() - t0 < 5:
        time.sleep(0.01)
    assert store.poll(1, []).applied == []  # younger than the debounce interval
    time.sleep(1.05)
    assert [e["knob"] for e in store.poll(2, []).applied] == ["agent.gamma"]


def test_rule_file_edits(live, knobs_dir):
    store = live
    rules = sorted((knobs_dir / "rules" / "rewards").glob("*.yaml"))
    assert rules, "the repository ships reward rule files"
    path = rules[0]
    text = path.read_text()
    path.write_text("rules: {broken: [\n")
    settle(store)
    res = store.poll(1, [])
    assert res.refused and res.refused[0]["knob"] == f"rules.rewards.{path.stem}"
    before = store.snapshot().reward_rules[path.stem]
    path.write_text(text + "\n# touched\n")
    settle(store)
    res = store.poll(2, [])
    assert not res.refused  # same content as in force: nothing to apply
    assert store.snapshot().reward_rules[path.stem] == before


def _fake_live_run(runs_dir: Path, knobs_dir: Path, step: int) -> Path:
    run = runs_dir / "live"
    run.mkdir(parents=True)
    (run / "status.json").write_text(
        json.dumps(
            {
                "run_id": "live",
                "state": "running",
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "step": step,
                "knobs_dir": str(knobs_dir.resolve()),
                "gyms": ["travel", "function"],
            }
        )
    )
    return run


def test_cli_set_during_a_live_run_is_applied_at_the_next_poll_with_author(knobs_dir, runs_dir):
    run = _fake_live_run(runs_dir, knobs_dir, step=4)
    store = open_store(
        knobs_dir, events_path=run / "knob_events.jsonl", run_gyms=["travel", "function"], debounce_s=DEBOUNCE
    )
    store.live_run = True
    env = {**os.environ, "EAU_KNOBS_DIR": str(knobs_dir), "EAU_RUNS_DIR": str(runs_dir)}
    cmd = [sys.executable, "-m", "harness.cli.main", "knobs"]
    with KnobWatcher(store):
        out = subprocess.run(
            cmd + ["set", "agent.entropy_coeff", "0.004", "--reason", "entropy falling", "--author", "agent", "--json"],
            env=env,
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["pending"] is True
        assert jsonl.read(run / "knob_events.jsonl") == []  # the run logs the accepted event, not the CLI
        refused = subprocess.run(
            cmd + ["set", "agent.entropy_coeff", "0.04", "--reason", "too much", "--json"],
            env=env,
            capture_output=True,
            text=True,
        )
        assert refused.returncode == 3 and "max delta" in refused.stderr
        settle(store)
        store.current_step = 4
        res = store.poll(5, [])
    ev = res.applied[0]
    assert (ev["knob"], ev["new"], ev["author"], ev["reason"], ev["step_written"], ev["step_effective"]) == (
        "agent.entropy_coeff",
        0.004,
        "agent",
        "entropy falling",
        4,
        5,
    )
    log = jsonl.read(run / "knob_events.jsonl")
    assert [(e["status"], e.get("rule")) for e in log] == [("rejected", "max delta"), ("accepted", None)]
    assert not list((knobs_dir / ".pending").glob("*.json"))  # attribution consumed
