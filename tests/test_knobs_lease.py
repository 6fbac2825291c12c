"""A run lends its preset's knob values to the knobs folder and gives them back when it ends; a write
accepted for a run that ended first is reported and applied on resume (harness.knobs.lease)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.io import jsonl, yamlio
from harness.knobs.lease import LEASE_FILE, Lease, lend, read_lease
from harness.stores import open_store

TINY = [
    "--set",
    "tasks_per_step=2",
    "--set",
    "samples_per_task=1",
    "--set",
    "env_knobs.max_steps=3",
    "--set",
    "agent_knobs.max_new_tokens_per_turn=8",
    "--set",
    "agent_knobs.max_episode_tokens=400",
    "--set",
    "agent_knobs.mini_batch_size=2",
    "--set",
    "agent_knobs.micro_batch_size=2",
    "--set",
    "policy.tiny.num_hidden_layers=1",
    "--set",
    "policy.tiny.hidden_size=32",
    "--set",
    "policy.tiny.intermediate_size=64",
    "--set",
    "checkpoint_every=1",
    "--no-progress",
]


def eau(args, knobs_dir, runs_dir, **kw):
    env = {**os.environ, "EAU_KNOBS_DIR": str(knobs_dir), "EAU_RUNS_DIR": str(runs_dir)}
    return subprocess.run(
        [sys.executable, "-m", "harness.cli.main", *args], env=env, capture_output=True, text=True, timeout=600, **kw
    )


def values(kdir: Path) -> dict:
    return {a: yamlio.plain(yamlio.read_yaml(kdir / f"{a}.yaml")[0]) for a in ("agent", "env", "user", "reward")}


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_run_gives_its_preset_values_back(knobs_dir, tmp_path):
    before = values(knobs_dir)
    out = eau(["train", "--preset", "tiny", "--steps", "1", "--run-id", "r", *TINY], knobs_dir, tmp_path / "runs")
    assert out.returncode == 0, out.stderr[-2000:]
    assert values(knobs_dir) == before  # lr 1e-3, max_steps 3 ... all went back
    assert not (knobs_dir / LEASE_FILE).exists()
    run = tmp_path / "runs" / "r"
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert cfg["agent_knobs"]["lr"] == 1e-3 and cfg["env_knobs"]["max_steps"] == 3
    events = jsonl.read(run / "knob_events.jsonl")
    lent = [e for e in events if e["source"] == "system" and e["knob"] == "agent.lr"]
    assert [(e["old"], e["new"]) for e in lent] == [(1e-5, 1e-3), (1e-3, 1e-5)]  # lent, then given back
    log = (run / "log.txt").read_text()
    assert "knobs lent to this run" in log and "knobs given back" in log and "checkpoint step_000000 saved" in log
    # the run ran with its preset's values
    traj = [json.loads(x) for x in (run / "trajectories" / "step_000000.jsonl").read_text().splitlines()]
    assert {t["knobs"]["env"]["max_steps"] for t in traj} == {3}


def test_a_killed_runs_lease_is_given_back_by_the_next_command(knobs_dir, tmp_path):
    before = values(knobs_dir)
    store = open_store(knobs_dir, events_path=None)
    lease = Lease(run_id="gone", run_dir=str(tmp_path / "runs" / "gone"), pid=dead_pid())
    lend(store, lease, {"agent.lr": 3e-4, "env.max_steps": 5}, reason="test")
    assert values(knobs_dir)["agent"]["lr"] == 3e-4 and read_lease(knobs_dir).run_id == "gone"
    out = eau(["knobs", "get", "env.max_steps", "--gym", "travel", "--json"], knobs_dir, tmp_path / "runs")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["value"] == 16
    assert "run gone is no longer running" in out.stderr
    assert values(knobs_dir) == before and not (knobs_dir / LEASE_FILE).exists()
    history = jsonl.read(knobs_dir / ".history" / "knob_events.jsonl")
    assert {e["knob"] for e in history if e["source"] == "system"} == {"agent.lr", "env.max_steps"}


def test_a_second_run_on_a_lent_folder_is_refused(knobs_dir, tmp_path):
    store = open_store(knobs_dir, events_path=None)
    lend(
        store,
        Lease(run_id="other", run_dir=str(tmp_path / "other"), pid=os.getpid()),
        {"agent.lr": 3e-4},
        reason="test",
    )  # this process is alive: the lease is live
    out = eau(["train", "--preset", "tiny", "--steps", "1", "--run-id", "r", *TINY], knobs_dir, tmp_path / "runs")
    assert out.returncode == 1
    assert "run other" in out.stderr and "--knobs-dir" in out.stderr
    assert values(knobs_dir)["agent"]["lr"] == 3e-4 and read_lease(knobs_dir).run_id == "other"


def test_a_write_for_a_run_that_ended_is_reported_and_applied_on_resume(knobs_dir, tmp_path, monkeypatch):
    """`eau knobs set` for a live run, after its last step boundary: the run ends without applying it;
    the write is a not_applied event and a log line, kept in knobs_not_applied.json, the file goes back
    to the value from before the run, and `eau train --resume` applies it at its first boundary."""
    from harness.ppo.config import build_config
    from harness.ppo.trainer import Trainer

    rdir = tmp_path / "runs"
    monkeypatch.setenv("EAU_KNOBS_DIR", str(knobs_dir))
    monkeypatch.setenv("EAU_RUNS_DIR", str(rdir))
    overrides = [x for x in TINY[1::2] if "=" in x] + ["run_id=r", "steps=1", "progress=false"]
    cfg = build_config("tiny", None, overrides)
    trainer = Trainer(cfg, rdir, knobs_dir)
    with trainer.session():
        trainer.train()
        # the run is live (this process) and past its last boundary: a CLI write now waits for a boundary
        out = eau(["knobs", "set", "agent.entropy_coeff", "0.003", "--reason", "more exploration"], knobs_dir, rdir)
        assert out.returncode == 0, out.stderr
        assert "next step boundary" in out.stdout
        got = json.loads(eau(["knobs", "get", "agent.entropy_coeff", "--json"], knobs_dir, rdir).stdout)
        assert got["value"] == 0.001 and got["in_force_for"] == "r"  # what the run uses
        assert got["pending"] == {"raw": 0.003, "value": 0.003}  # what it has not applied yet
        assert got["lent"] == {"run": "r", "before": 0.001}
        refused = eau(["knobs", "set", "agent.lr", "5", "--reason", "way too big"], knobs_dir, rdir)
        assert refused.returncode == 3
    run = rdir / "r"
    # a refused write never reaches the run, yet log.txt has it (as README and formats.md promise)
    assert "knob write REFUSED agent.lr = 5 (range, human: way too big)" in (run / "log.txt").read_text()
    ev = [e for e in jsonl.read(run / "knob_events.jsonl") if e["status"] == "not_applied"]
    assert [(e["knob"], e["new"], e["author"], e["reason"]) for e in ev] == [
        ("agent.entropy_coeff", 0.003, "human", "more exploration")
    ]
    assert "agent.entropy_coeff = 0.003 NOT APPLIED" in (run / "log.txt").read_text()
    kept = json.loads((run / "knobs_not_applied.json").read_text())
    assert kept[0]["written"] == 0.003 and kept[0]["event"] == ev[0]["id"]
    assert values(knobs_dir)["agent"]["entropy_coeff"] == 0.001  # the folder's value is back
    got = json.loads(eau(["knobs", "get", "agent.entropy_coeff", "--json"], knobs_dir, rdir).stdout)
    assert got["value"] == 0.001 and got["pending"] is None and got["in_force_for"] is None

    out = eau(["train", "--resume", "r", "--steps", "2", "--no-progress"], knobs_dir, rdir)
    assert out.returncode == 0, out.stderr[-2000:]
    applied = [
        e
        for e in jsonl.read(run / "knob_events.jsonl")
        if e["knob"] == "agent.entropy_coeff" and e["status"] == "accepted" and e["source"] == "cli"
    ]
    assert [(e["new"], e["step_effective"], e["author"], e["reason"]) for e in applied] == [
        (0.003, 1, "human", "more exploration")
    ]
    assert [m["entropy_coeff"] for m in jsonl.read(run / "metrics.jsonl")] == [0.001, 0.003]
    assert not (run / "knobs_not_applied.json").exists()
    assert values(knobs_dir)["agent"]["entropy_coeff"] == 0.001 and not (knobs_dir / LEASE_FILE).exists()


def test_from_starts_where_the_parent_left_its_lent_knobs(knobs_dir, tmp_path):
    rdir = tmp_path / "runs"
    out = eau(["train", "--preset", "tiny", "--steps", "1", "--run-id", "p", *TINY], knobs_dir, rdir)
    assert out.returncode == 0, out.stderr[-2000:]
    final = json.loads((rdir / "p" / "knobs_in_force.json").read_text())["values"]
    child = eau(
        ["train", "--from", "p", "--steps", "1", "--run-id", "c", "--reason", "next", "--no-progress"], knobs_dir, rdir
    )
    assert child.returncode == 0, child.stderr[-2000:]
    cfg = yaml.safe_load((rdir / "c" / "config.yaml").read_text())
    assert cfg["agent_knobs"]["lr"] == final["agent"]["lr"] == 1e-3
    assert cfg["env_knobs"]["max_steps"] == final["env"]["max_steps"]


# the τ² gyms' own entries stay as they are: a whole-value write may not change gyms the run does not train
TAU2_STEPS = {"tau": 30, "tau2_airline": 50, "tau2_retail": 50, "tau2_telecom": 50}


@pytest.mark.parametrize("value", [{"default": 6, "colbench": 4, **TAU2_STEPS}, 7])
def test_lend_and_give_back_are_exact_for_scalars_and_per_gym_values(knobs_dir, value):
    store = open_store(knobs_dir, events_path=None, run_gyms=["intention", "colbench"])
    before = values(knobs_dir)
    lease = Lease(run_id="x", run_dir="/nowhere", pid=os.getpid())
    lend(store, lease, {"env.max_steps": value}, reason="test")
    now = values(knobs_dir)["env"]["max_steps"]
    assert now == (
        value
        if isinstance(value, dict)
        else {"default": 7, "colbench": 10, "tau": 30, "tau2_airline": 50, "tau2_retail": 50, "tau2_telecom": 50}
    )  # a scalar sets default
    from harness.knobs.lease import give_back

    give_back(store, lease, reason="done")
    assert values(knobs_dir) == before


def test_a_reader_in_another_pid_namespace_never_takes_a_live_run_for_dead(tmp_path, monkeypatch):
    """A command in a Codex session runs in its own PID namespace and cannot see the trainer's pid:
    there the recorded state stands (settling the lease of a live run would undo its knob values)."""
    import socket

    from harness.io import processes
    from harness.knobs.lease import lease_is_live
    from harness.runs.reader import is_live

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid, ours = int(dead.stdout), processes.pid_namespace()
    st = {"state": "running", "pid": pid, "host": socket.gethostname(), "pid_ns": ours}
    lease = Lease(run_id="r", run_dir=str(tmp_path), pid=pid, pid_ns=ours)
    assert not is_live(st) and not lease_is_live(lease)  # same namespace: the pid is gone, so is the run
    for rec in (st, {**st, "pid_ns": None}):  # unknown namespace (older records): the pid decides
        assert is_live(rec) is False
    monkeypatch.setattr(processes, "pid_namespace", lambda: "pid:[4026532249]")  # a sandboxed reader
    if ours is not None:
        assert is_live(st) and lease_is_live(lease)
        assert not is_live({**st, "state": "finished"})  # an ended run stays ended
    lease.save(tmp_path)
    assert read_lease(tmp_path).pid_ns == ours


def test_a_second_hand_over_before_the_resume_took_up_the_first_keeps_its_offsets(knobs_dir, tmp_path):
    """A resume killed before it took up the hand-over (knobs_handed_back.json) ran no step: when its own
    lease is settled, the writes made while no run was live since the first hand-over must still be
    found, so the earlier offsets and values stay; a write made for that resume (with its note) is new."""
    from harness.knobs.lease import HANDED_BACK, HISTORY, hand_over
    from harness.ppo.run_knobs import writes_with_no_run

    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    store = open_store(knobs_dir, events_path=run / "knob_events.jsonl")
    lease = Lease(run_id="r", run_dir=str(run), pid=dead_pid())
    lend(store, lease, {"agent.lr": 1e-3}, reason="the run's preset")
    assert hand_over(store, run, lease, log=lambda m: None) == []
    first = json.loads((run / HANDED_BACK).read_text())
    assert first["lent"] == {"agent.lr": 1e-3} and first["history_offset"] == 0
    # no run live: an agent write to the folder, logged in its history
    free = open_store(knobs_dir)
    res = free.set("agent.temperature", 0.9, author="agent", reason="while no run was live")
    assert res.ok and (knobs_dir / HISTORY).stat().st_size > 0
    # the resume lends again, is killed before it takes up the hand-over; a write for it was pending
    store = open_store(knobs_dir, events_path=run / "knob_events.jsonl")
    pending = store.set("agent.entropy_coeff", 0.002, author="agent", reason="for the resume", run_live=True)
    assert pending.pending
    left = hand_over(store, run, lease, log=lambda m: None)
    second = json.loads((run / HANDED_BACK).read_text())
    assert (second["lent"], second["history_offset"], second["log_offset"]) == (
        first["lent"],
        first["history_offset"],
        first["log_offset"],
    )
    # the pending write is handed over under its id; the no-run write (no note) is not, it is found again
    assert [(w["knob"], w["id"], w["author"]) for w in left] == [("agent.entropy_coeff", pending.event["id"], "agent")]
    apply, replaced = writes_with_no_run(jsonl.read_from(knobs_dir / HISTORY, second["history_offset"]))
    assert [(r["knob"], r["id"], r["author"]) for r in apply] == [("agent.temperature", res.event["id"], "agent")]
    assert replaced == []


def test_a_write_after_the_run_handed_over_is_the_folders_not_an_orphan(knobs_dir, tmp_path, monkeypatch):
    """The 20-kill campaign's defect: `eau knobs set` while the run is past its hand-over and has given
    its values back, but still running (its status not yet written as ended). The command used to take
    the run for live and leave a note in .pending that nobody ever logged; the run no longer holds the
    folder's lease, so the write is the folder's: logged in the folder history under the id the CLI
    printed, its JSON saying so, and nothing left in .pending."""
    from harness.knobs.lease import HISTORY
    from harness.ppo.config import build_config
    from harness.ppo.trainer import Trainer

    rdir = tmp_path / "runs"
    monkeypatch.setenv("EAU_KNOBS_DIR", str(knobs_dir))
    monkeypatch.setenv("EAU_RUNS_DIR", str(rdir))
    overrides = [x for x in TINY[1::2] if "=" in x] + ["run_id=r", "steps=1", "progress=false"]
    trainer = Trainer(build_config("tiny", None, overrides), rdir, knobs_dir)
    docs = []
    finish = trainer.writer.finish

    def write_then_finish(state, **data):  # the run handed over and gave back; its status still says running
        assert json.loads((rdir / "r" / "status.json").read_text())["state"] == "running"
        out = eau(
            ["knobs", "set", "agent.entropy_coeff", "0.004", "--author", "agent", "--reason", "late", "--json"],
            knobs_dir,
            rdir,
        )
        assert out.returncode == 0, out.stderr
        docs.append(json.loads(out.stdout))
        finish(state, **data)

    trainer.writer.finish = write_then_finish
    with trainer.session():
        trainer.train()
    doc = docs[0]
    eid = doc["event"]["id"]
    assert doc["ok"] and not doc["live"] and not doc["pending"] and doc["ending_run"] == "r", doc
    assert "folder history" in doc["note"]
    hist = [e for e in jsonl.read(knobs_dir / HISTORY) if e["id"] == eid]
    assert [(e["status"], e["author"], e["reason"], e["new"]) for e in hist] == [("accepted", "agent", "late", 0.004)]
    assert not any(e["id"] == eid for e in jsonl.read(rdir / "r" / "knob_events.jsonl"))
    assert not list((knobs_dir / ".pending").glob("*.json"))  # no note waits for a run that is gone
    assert values(knobs_dir)["agent"]["entropy_coeff"] == 0.004


def test_a_write_command_waits_while_a_run_hands_over(knobs_dir, tmp_path):
    """A write command decides whether the run is live and writes under the folder's lock, which a run
    holds while it hands over and gives its values back: a command that found the run live cannot write
    after the hand-over looked (its note would never be logged)."""
    import time

    from harness.knobs.lease import folder_lock

    rdir = tmp_path / "runs"
    env = {**os.environ, "EAU_KNOBS_DIR": str(knobs_dir), "EAU_RUNS_DIR": str(rdir)}
    cmd = [sys.executable, "-m", "harness.cli.main", "knobs", "set", "agent.entropy_coeff", "0.002", "--reason", "x"]
    with folder_lock(knobs_dir):
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(3)
        assert proc.poll() is None  # waiting for the lock
        assert values(knobs_dir)["agent"]["entropy_coeff"] != 0.002
    out, errs = proc.communicate(timeout=120)
    assert proc.returncode == 0, errs
    assert values(knobs_dir)["agent"]["entropy_coeff"] == 0.002


def test_notes_no_run_applied_are_logged_by_the_hand_over_or_the_next_run(knobs_dir, tmp_path):
    """A write replaced in the file before a step boundary applied it leaves a note the run never
    matches: the hand-over logs it as not_applied under its id; a note left with no run holding the
    folder is logged in the folder history by the next run that starts there. .pending ends empty."""
    from harness.knobs.lease import HISTORY
    from harness.ppo.run_knobs import RunKnobs
    from harness.runs.writer import RunWriter

    run = tmp_path / "runs" / "r"
    rk = RunKnobs(knobs_dir, "r", run, ["travel"])
    rk.lend({}, "test")
    run.mkdir(parents=True)
    rk.attach(RunWriter(run), resumed=False)
    first = rk.store.set("agent.entropy_coeff", 0.002, author="agent", reason="first", run_live=True)
    second = rk.store.set("agent.entropy_coeff", 0.003, author="agent", reason="second", run_live=True)
    rk.end()
    last = {e["id"]: e for e in jsonl.read(run / "knob_events.jsonl")}
    for res, reason in ((first, "first"), (second, "second")):
        e = last[res.event["id"]]
        assert (e["status"], e["author"], e["reason"]) == ("not_applied", "agent", reason)
    assert not list((knobs_dir / ".pending").glob("*.json"))

    # a note nobody matched (left by a run before this fix, or a command killed between note and file)
    orphan = open_store(knobs_dir)
    orphan.live_run = True
    ids = orphan._write_attribution("agent.entropy_coeff", [(None, 0, 0.009)], "agent", "orphan", 3, "cli", None)
    rk2 = RunKnobs(knobs_dir, "r2", tmp_path / "runs" / "r2", ["travel"])
    rk2.lend({}, "test")
    hist = [e for e in jsonl.read(knobs_dir / HISTORY) if e["id"] == ids[0]]
    assert [(e["status"], e["author"], e["reason"]) for e in hist] == [("not_applied", "agent", "orphan")]
    assert not list((knobs_dir / ".pending").glob("*.json"))
    rk2.give_back("done")


def test_a_write_of_the_value_already_there_is_logged_under_its_id(knobs_dir, tmp_path):
    """The second campaign's find: an agent write made while no run was live, of the value the folder
    already held (a settle had just given it back), was reported with an id that no log held, so the
    resume never applied it. It is logged (accepted, unchanged) under the id the CLI printed."""
    from harness.knobs.lease import HISTORY
    from harness.ppo.run_knobs import writes_with_no_run

    rdir = tmp_path / "runs"
    value = values(knobs_dir)["agent"]["entropy_coeff"]
    out = eau(
        ["knobs", "set", "agent.entropy_coeff", str(value), "--author", "agent", "--reason", "keep", "--json"],
        knobs_dir,
        rdir,
    )
    assert out.returncode == 0, out.stderr
    eid = json.loads(out.stdout)["event"]["id"]
    hist = [e for e in jsonl.read(knobs_dir / HISTORY) if e["id"] == eid]
    assert [(e["status"], e["author"], e["reason"], e["new"]) for e in hist] == [("accepted", "agent", "keep", value)]
    assert [w["id"] for w in writes_with_no_run(hist)[0]] == [eid]  # a resume applies it like any such write
