"""Each run owns its knobs (harness/ppo/run_knobs.py): its folder runs/<id>/knobs is made at its start
from the project folder and its config's values; edits there reach only it; the project folder is what
persists across runs (`eau knobs promote`, `eau train --from`); `eau knobs` addresses a run or the
project folder (harness/cli/knob_target.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from harness.io import jsonl, yamlio

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


def eau_env(knobs_dir: Path, runs_dir: Path) -> dict[str, str]:
    return {**os.environ, "EAU_KNOBS_DIR": str(knobs_dir), "EAU_RUNS_DIR": str(runs_dir)}


def eau(args, knobs_dir, runs_dir, **kw):
    return subprocess.run(
        [sys.executable, "-m", "harness.cli.main", *args],
        env=eau_env(knobs_dir, runs_dir),
        capture_output=True,
        text=True,
        timeout=600,
        **kw,
    )


def values(kdir: Path) -> dict:
    return {a: yamlio.load_plain(kdir / f"{a}.yaml") for a in ("agent", "env", "user", "reward")}


def wait_for(cond, timeout: float = 600) -> bool:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if cond():
            return True
        time.sleep(0.2)
    return False


def test_a_run_makes_its_own_folder_and_leaves_the_project_folder_alone(knobs_dir, tmp_path):
    before = values(knobs_dir)
    out = eau(["train", "--preset", "tiny", "--steps", "1", "--run-id", "r", *TINY], knobs_dir, tmp_path / "runs")
    assert out.returncode == 0, out.stderr[-2000:]
    run = tmp_path / "runs" / "r"
    assert values(knobs_dir) == before  # nothing was written to the project folder
    own = values(run / "knobs")
    assert own["agent"]["lr"] == 1e-3 and own["env"]["max_steps"]["default"] == 3  # the preset's values
    status = json.loads((run / "status.json").read_text())
    assert status["knobs_dir"] == str((run / "knobs").resolve())
    assert status["project_knobs_dir"] == str(knobs_dir.resolve())
    system = [e for e in jsonl.read(run / "knob_events.jsonl") if e["source"] == "system"]
    assert ("agent.lr", 1e-5, 1e-3) in [(e["knob"], e["old"], e["new"]) for e in system]
    traj = jsonl.read(run / "trajectories" / "step_000000.jsonl")
    assert {t["knobs"]["env"]["max_steps"] for t in traj} == {3}
    assert not (knobs_dir / ".pending").exists() and not (knobs_dir / ".history").exists()


def test_a_bad_preset_value_leaves_no_run_folder(knobs_dir, tmp_path):
    out = eau(
        ["train", "--preset", "tiny", "--steps", "1", "--run-id", "bad", "--set", "agent_knobs.lr=5", "--no-progress"],
        knobs_dir,
        tmp_path / "runs",
    )
    assert out.returncode == 1 and "agent.lr=5 refused" in out.stderr, out.stderr[-2000:]
    assert not (tmp_path / "runs" / "bad").exists()


def test_two_runs_at_once_each_with_its_own_value_and_edits(knobs_dir, tmp_path):
    """Two live runs from one project folder with different values of the same knob; one is edited
    through the CLI, the other by hand in its own folder; neither sees the other's value or edit."""
    rdir = tmp_path / "runs"
    env = eau_env(knobs_dir, rdir)
    procs = {}
    for run, value in (("a", "0.002"), ("b", "0.003")):
        args = ["train", "--preset", "tiny", "--steps", "400", "--run-id", run, *TINY]
        args += ["--set", f"agent_knobs.entropy_coeff={value}", "--set", "checkpoint_every=0"]
        procs[run] = subprocess.Popen(
            [sys.executable, "-m", "harness.cli.main", *args],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(tmp_path / f"{run}.log", "w"),
            start_new_session=True,
        )
    try:
        for run in procs:
            assert wait_for(lambda r=run: len(jsonl.read(rdir / r / "metrics.jsonl")) >= 1), (
                tmp_path / f"{run}.log"
            ).read_text()[-2000:]
        ambiguous = eau(["knobs", "get", "agent.entropy_coeff"], knobs_dir, rdir)
        assert (
            ambiguous.returncode == 2
            and "--run" in ambiguous.stderr
            and "a, b" in ambiguous.stderr.replace("b, a", "a, b")
        )
        out = eau(
            [
                "knobs",
                "set",
                "agent.entropy_coeff",
                "0.004",
                "--run",
                "a",
                "--reason",
                "a only",
                "--author",
                "agent",
                "--json",
            ],
            knobs_dir,
            rdir,
        )
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout)
        assert doc["live"] and doc["pending"] and doc["run"] == "a"
        b_agent = rdir / "b" / "knobs" / "agent.yaml"
        b_agent.write_text(b_agent.read_text().replace("entropy_coeff: 0.003", "entropy_coeff: 0.005"))

        def applied(run: str, value: float) -> bool:
            return any(
                e["new"] == value and e.get("step_effective") is not None
                for e in jsonl.read(rdir / run / "knob_events.jsonl")
            )

        assert wait_for(lambda: applied("a", 0.004) and applied("b", 0.005))
        for run in procs:
            procs[run].send_signal(signal.SIGTERM)
        for run in procs:
            assert procs[run].wait(timeout=600) == 0
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    seen = {run: {m["entropy_coeff"] for m in jsonl.read(rdir / run / "metrics.jsonl")} for run in procs}
    assert seen["a"] == {0.002, 0.004} and seen["b"] == {0.003, 0.005}, seen
    a_events = jsonl.read(rdir / "a" / "knob_events.jsonl")
    b_events = jsonl.read(rdir / "b" / "knob_events.jsonl")
    assert [(e["author"], e["reason"]) for e in a_events if e["new"] == 0.004] == [("agent", "a only")]
    assert [e["author"] for e in b_events if e["new"] == 0.005] == ["human"]  # a hand edit
    assert not any(e["new"] in (0.004, 0.005) for e in a_events + b_events if e["knob"] != "agent.entropy_coeff")
    assert {e["new"] for e in a_events if e["knob"] == "agent.entropy_coeff"} == {0.002, 0.004}
    assert {e["new"] for e in b_events if e["knob"] == "agent.entropy_coeff"} == {0.003, 0.005}
    assert values(knobs_dir)["agent"]["entropy_coeff"] == 0.001  # the project folder never changed


def test_a_write_for_a_run_that_ended_is_not_applied_then_applied_on_resume(knobs_dir, tmp_path, monkeypatch):
    """`eau knobs set` for a live run past its last step boundary: the run ends without applying it and
    logs it `not_applied` under the id the CLI printed; `eau train --resume` applies it under that id."""
    from harness.ppo.config import build_config
    from harness.ppo.trainer import Trainer

    rdir = tmp_path / "runs"
    monkeypatch.setenv("EAU_KNOBS_DIR", str(knobs_dir))
    monkeypatch.setenv("EAU_RUNS_DIR", str(rdir))
    overrides = [x for x in TINY[1::2] if "=" in x] + ["run_id=r", "steps=1", "progress=false"]
    trainer = Trainer(build_config("tiny", None, overrides), rdir, knobs_dir)
    with trainer.session():
        trainer.train()
        # the run is live (this process) and past its last boundary: a CLI write now waits for a boundary
        out = eau(
            ["knobs", "set", "agent.entropy_coeff", "0.003", "--reason", "more exploration", "--json"], knobs_dir, rdir
        )
        assert out.returncode == 0, out.stderr
        eid = json.loads(out.stdout)["event"]["id"]
        got = json.loads(eau(["knobs", "get", "agent.entropy_coeff", "--json"], knobs_dir, rdir).stdout)
        assert got["value"] == 0.001 and got["in_force_for"] == "r" and got["live"]
        assert got["pending"] == {"raw": 0.003, "value": 0.003}
        refused = eau(["knobs", "set", "agent.lr", "5", "--reason", "way too big"], knobs_dir, rdir)
        assert refused.returncode == 3
    run = rdir / "r"
    log = (run / "log.txt").read_text()
    assert "knob write REFUSED agent.lr = 5 (range, human: way too big)" in log  # a refusal never reaches the run
    assert f"agent.entropy_coeff = 0.003 ({eid}) NOT APPLIED" in log
    last = {e["id"]: e for e in jsonl.read(run / "knob_events.jsonl")}
    assert (last[eid]["status"], last[eid]["author"], last[eid]["reason"]) == (
        "not_applied",
        "human",
        "more exploration",
    )
    got = json.loads(eau(["knobs", "get", "agent.entropy_coeff", "--json"], knobs_dir, rdir).stdout)
    assert got["run"] is None and got["value"] == 0.001  # no run live: the project folder, untouched
    out = eau(["train", "--resume", "r", "--steps", "2", "--no-progress"], knobs_dir, rdir)
    assert out.returncode == 0, out.stderr[-2000:]
    last = {e["id"]: e for e in jsonl.read(run / "knob_events.jsonl")}
    assert (last[eid]["status"], last[eid]["step_effective"], last[eid]["reason"]) == (
        "accepted",
        1,
        "more exploration",
    )
    assert [m["entropy_coeff"] for m in jsonl.read(run / "metrics.jsonl")] == [0.001, 0.003]
    assert not list((run / "knobs" / ".pending").glob("*.json"))


def test_a_write_to_a_stopped_run_is_applied_by_its_resume_under_its_id(knobs_dir, tmp_path):
    rdir = tmp_path / "runs"
    assert eau(["train", "--preset", "tiny", "--steps", "1", "--run-id", "s", *TINY], knobs_dir, rdir).returncode == 0
    same = json.loads(
        eau(["knobs", "set", "agent.lr", "0.001", "--run", "s", "--reason", "keep", "--json"], knobs_dir, rdir).stdout
    )
    out = eau(
        ["knobs", "set", "agent.temperature", "0.9", "--run", "s", "--author", "agent", "--reason", "cooler", "--json"],
        knobs_dir,
        rdir,
    )
    doc = json.loads(out.stdout)
    assert out.returncode == 0 and doc["pending"] and not doc["live"] and doc["event"]["status"] == "not_applied"
    assert eau(["train", "--resume", "s", "--steps", "2", "--no-progress"], knobs_dir, rdir).returncode == 0
    last = {e["id"]: e for e in jsonl.read(rdir / "s" / "knob_events.jsonl")}
    rec = last[doc["event"]["id"]]
    assert (rec["status"], rec["author"], rec["reason"], rec["step_effective"]) == ("accepted", "agent", "cooler", 1)
    assert last[same["event"]["id"]]["message"].startswith("unchanged")  # the value in force already: logged as such
    assert [m["temperature"] for m in jsonl.read(rdir / "s" / "metrics.jsonl")] == [1.0, 0.9]


def test_from_starts_from_the_parents_folder_and_promote_carries_values_to_the_project(knobs_dir, tmp_path):
    rdir = tmp_path / "runs"
    assert eau(["train", "--preset", "tiny", "--steps", "1", "--run-id", "p", *TINY], knobs_dir, rdir).returncode == 0
    # a change to the stopped parent, applied by its resume: the child starts from it
    assert eau(["knobs", "set", "agent.top_p", "0.9", "--run", "p", "--reason", "r"], knobs_dir, rdir).returncode == 0
    assert eau(["train", "--resume", "p", "--steps", "2", "--no-progress"], knobs_dir, rdir).returncode == 0
    final = json.loads((rdir / "p" / "knobs_in_force.json").read_text())["values"]
    # an edit of the stopped parent's folder after its end: not applied there, but the child starts with it
    assert (
        eau(["knobs", "set", "agent.temperature", "0.8", "--run", "p", "--reason", "r"], knobs_dir, rdir).returncode
        == 0
    )
    child = eau(
        ["train", "--from", "p", "--steps", "1", "--run-id", "c", "--reason", "next", "--no-progress"], knobs_dir, rdir
    )
    assert child.returncode == 0, child.stderr[-2000:]
    cfg = yaml.safe_load((rdir / "c" / "config.yaml").read_text())
    assert cfg["agent_knobs"]["lr"] == final["agent"]["lr"] == 1e-3
    at_start = json.loads((rdir / "c" / "knobs_at_start.json").read_text())["values"]
    assert values(rdir / "c" / "knobs")["agent"]["top_p"] == 0.9 == at_start["agent"]["top_p"]
    assert at_start["agent"]["temperature"] == 0.8 and final["agent"]["temperature"] == 1.0
    assert values(knobs_dir)["agent"]["top_p"] == 1.0
    out = eau(["knobs", "promote", "agent.top_p", "--run", "c", "--reason", "it worked", "--json"], knobs_dir, rdir)
    assert out.returncode == 0, out.stderr
    assert values(knobs_dir)["agent"]["top_p"] == 0.9
    hist = jsonl.read(knobs_dir / ".history" / "knob_events.jsonl")
    assert [(e["knob"], e["new"], e["source"]) for e in hist] == [("agent.top_p", 0.9, "promote")]
    unknown = eau(["knobs", "promote", "agent.nope", "--run", "c", "--reason", "x"], knobs_dir, rdir)
    assert unknown.returncode == 5


def test_a_knobs_dir_that_is_a_runs_own_folder_addresses_that_run(knobs_dir, tmp_path):
    rdir = tmp_path / "runs"
    assert eau(["train", "--preset", "tiny", "--steps", "1", "--run-id", "k", *TINY], knobs_dir, rdir).returncode == 0
    got = json.loads(eau(["knobs", "get", "agent.lr", "--json"], rdir / "k" / "knobs", rdir).stdout)
    assert got["run"] == "k" and got["value"] == 1e-3
    project = json.loads(eau(["knobs", "get", "agent.lr", "--project", "--json"], knobs_dir, rdir).stdout)
    assert project["run"] is None and project["value"] == 1e-5
    both = eau(["knobs", "get", "agent.lr", "--project", "--run", "k"], knobs_dir, rdir)
    assert both.returncode == 2
