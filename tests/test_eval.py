"""``eau eval`` on a really trained tiny run: results, determinism, independence from knobs/, errors."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml
from eval_runs import (
    TRAIN_OVERRIDES,
    copy_knobs,
    one_torch_thread,
    recording_opens,
    scratch,
    small_protocol,
    trained_run,
)
from typer.testing import CliRunner

from harness.cli.main import app
from harness.eval.evaluate import comparable, evaluate_run
from harness.eval.protocol import load_protocol
from harness.knobs.folder import defaults_dir

runner = CliRunner()


@pytest.fixture(scope="module", autouse=True)
def single_thread():
    with one_torch_thread():
        yield


@pytest.fixture(scope="module")
def setup(single_thread):
    run, kdir = trained_run()
    proto = small_protocol(scratch() / "protocols" / "small.yaml")
    return run, kdir, proto


def eval_json(run: Path, proto: Path, eval_dir: Path, *extra: str, env: dict | None = None) -> dict:
    res = runner.invoke(
        app,
        [
            "eval",
            "--run",
            run.name,
            "--runs-dir",
            str(run.parent),
            "--protocol",
            str(proto),
            "--eval-dir",
            str(eval_dir),
            "--json",
            *extra,
        ],
        env=env,
    )
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_eval_writes_per_gym_scores_and_stores_them_outside_runs(setup, tmp_path):
    run, _, proto = setup
    out = eval_json(run, proto, tmp_path / "er")
    assert out["ok"] and out["run_id"] == run.name and out["checkpoint"] == "step_000000" and out["step"] == 0
    assert out["protocol_hash"] == load_protocol(proto).hash and out["protocol_name"] == "eval-test-small"
    assert list(out["gyms"]) == ["intention", "colbench", "telepathy"]
    for g in out["gyms"].values():
        assert {"reward_mean", "success_rate", "episodes", "tasks", "held_out", "trained_on"} <= set(g)
    assert out["gyms"]["intention"]["episodes"] == 2 and out["gyms"]["intention"]["trained_on"] is True
    assert out["gyms"]["telepathy"]["held_out"] is True and out["gyms"]["telepathy"]["trained_on"] is False
    assert {"pass", "success"} <= set(out["gyms"]["colbench"]) and "pass" not in out["gyms"]["intention"]
    assert (
        out["rendering"] == "tagged" and out["user_replies"] == "user" and out["episodes"] == 4 and not out["warnings"]
    )
    assert len(out["scorer_hash"]) == 64 and out["harness_version"]
    # stored under eval_results/<run_id>/, never inside the run folder
    saved = Path(out["saved"])
    assert saved == tmp_path / "er" / run.name / "step_000000.json"
    assert json.loads(saved.read_text())["protocol_hash"] == out["protocol_hash"]
    recs = [json.loads(x) for x in (saved.parent / "step_000000.records.jsonl").read_text().splitlines()]
    assert len(recs) == 4 and all(r["task"]["split"] == "eval" and r["arm"] == "symbolic" for r in recs)
    assert all(r["knobs"]["env"]["max_steps"] == 3 for r in recs)  # the protocol's value, not the run's knobs
    hist = (saved.parent / "history.jsonl").read_text().splitlines()
    assert len(hist) == 1 and json.loads(hist[0])["protocol_hash"] == out["protocol_hash"]
    assert not list(run.rglob("*eval_results*")) and not (run / "step_000000.json").exists()


def test_a_checkpoint_scores_the_same_twice_with_the_same_seed(setup):
    run, _, proto = setup
    p = load_protocol(proto)
    a, recs_a = evaluate_run(run, p)
    b, recs_b = evaluate_run(run, p)
    assert comparable(a) == comparable(b)
    assert [r["turns"] for r in recs_a] == [r["turns"] for r in recs_b]
    # the responses are sampled (temperature 1): a different seed gives different transcripts
    other = small_protocol(scratch() / "protocols" / "seed.yaml", seed=7)
    c, recs_c = evaluate_run(run, load_protocol(other))
    assert c["protocol_hash"] != a["protocol_hash"]
    assert [r["turns"] for r in recs_c] != [r["turns"] for r in recs_a]


def test_eval_never_reads_knobs(setup, tmp_path, monkeypatch):
    """Same result with the knob folder edited or garbage, and no file under it is opened (a missing
    folder: tests/test_eval_protocol.py and the slow end-to-end test)."""
    run, kdir, proto = setup
    base = comparable(eval_json(run, proto, tmp_path / "a"))
    garbage = tmp_path / "garbage" / "knobs"
    (garbage / "schema").mkdir(parents=True)
    for name in ("env.yaml", "user.yaml", "reward.yaml", "agent.yaml", "schema/env.schema.json"):
        (garbage / name).write_text("{{{ not yaml ::")
    edited = copy_knobs(tmp_path / "edited")
    env_doc = yaml.safe_load((edited / "env.yaml").read_text())
    env_doc["max_steps"] = 7
    (edited / "env.yaml").write_text(yaml.safe_dump(env_doc))

    monkeypatch.delenv("EAU_KNOBS_DIR", raising=False)
    monkeypatch.chdir(garbage.parent)  # no flag: a command would pick ./knobs (garbage) from here
    with recording_opens() as opened:
        results = [
            eval_json(run, proto, tmp_path / "b"),
            eval_json(run, proto, tmp_path / "c", env={"EAU_KNOBS_DIR": str(edited)}),
        ]
    for r in results:
        assert comparable(r) == base
    for folder in (garbage, edited, kdir):
        touched = [p for p in opened if Path(p).resolve().is_relative_to(folder.resolve())]
        assert not touched, touched
    # the packaged defaults: at most the two rule-*format* schemas the rule compilers validate with
    packaged = [p for p in opened if Path(p).resolve().is_relative_to(defaults_dir().resolve())]
    assert {Path(p).name for p in packaged} <= {"user_rules.schema.json", "reward_rules.schema.json"}, packaged


def test_eval_with_the_knob_store_and_snapshot_reader_disabled(setup, tmp_path, monkeypatch):
    run, _, proto = setup
    before = comparable(eval_json(run, proto, tmp_path / "a"))
    from harness.knobs import snapshot, store

    def boom(*a, **k):
        raise AssertionError("evaluation read the training knobs")

    monkeypatch.setattr(snapshot.KnobSnapshot, "read_dir", classmethod(boom))
    monkeypatch.setattr(store.KnobStore, "__init__", boom)
    assert comparable(eval_json(run, proto, tmp_path / "b")) == before


def test_pass_hat_k_with_trials_and_table_output(setup, tmp_path):
    run, _, _ = setup
    proto = small_protocol(tmp_path / "trials.yaml", trials=2, gyms={"intention": {"tasks": 2}})
    out = eval_json(run, proto, tmp_path / "er", "--no-save")
    g = out["gyms"]["intention"]
    assert g["episodes"] == 4 and g["tasks"] == 2 and set(g["pass_hat_k"]) == {"1", "2"}
    assert out["saved"] is None and not (tmp_path / "er").exists()
    res = runner.invoke(app, ["eval", "--run", str(run), "--protocol", str(proto), "--eval-dir", str(tmp_path / "er")])
    assert res.exit_code == 0, res.output
    assert "intention" in res.stdout and "pass^k" in res.stdout and out["protocol_hash"][:16] in res.stdout


def test_starting_policy_and_checkpoint_errors(setup, tmp_path):
    run, _, proto = setup
    init = eval_json(run, proto, tmp_path / "er", "--checkpoint", "init")
    assert init["checkpoint"] == "init" and init["step"] is None
    assert (tmp_path / "er" / run.name / "init.json").is_file()
    args = [
        "eval",
        "--run",
        run.name,
        "--runs-dir",
        str(run.parent),
        "--protocol",
        str(proto),
        "--json",
        "--eval-dir",
        str(tmp_path / "er"),
    ]
    res = runner.invoke(app, [*args, "--checkpoint", "99"])
    assert res.exit_code == 5 and "available: step_000000" in json.loads(res.stdout)["error"]
    res = runner.invoke(app, [*args, "--checkpoint", "last-good"])
    assert res.exit_code == 5 and "not a step number" in json.loads(res.stdout)["error"]
    res = runner.invoke(app, ["eval", "--run", "nope", "--runs-dir", str(run.parent), "--json"])
    assert res.exit_code == 5 and "no run 'nope'" in json.loads(res.stdout)["error"]
    res = runner.invoke(app, ["eval", "--json"])
    assert res.exit_code == 1 and "--run RUN is required" in json.loads(res.stdout)["error"]


def test_held_out_gym_trained_on_is_flagged(setup, tmp_path):
    run, _, _ = setup
    proto = small_protocol(tmp_path / "p.yaml", gyms={"intention": {"tasks": 1, "held_out": True}})
    out = eval_json(run, proto, tmp_path / "er", "--no-save")
    assert out["gyms"]["intention"]["trained_on"] is True
    assert any("held out" in w and "trained on it" in w for w in out["warnings"])


@pytest.mark.slow
def test_new_user_flow_train_eval_raise_max_steps_eval_plot(tmp_path):
    """As a new user would, through the console script: train a few steps, evaluate, raise
    env.max_steps by one, evaluate again (same protocol_hash and scores), plot the run."""
    import subprocess

    kdir = copy_knobs(tmp_path / "knobs")
    env = {
        **os.environ,
        "EAU_KNOBS_DIR": str(kdir),
        "EAU_RUNS_DIR": str(tmp_path / "runs"),
        "EAU_EVAL_DIR": str(tmp_path / "eval_results"),
        "OMP_NUM_THREADS": "1",
    }

    def eau(*args: str) -> subprocess.CompletedProcess:
        # the console script of the environment running the tests (PATH may hold another, or none)
        script = Path(sys.executable).with_name("eau")
        out = subprocess.run([str(script), *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, out.stderr[-3000:]
        return out

    overrides = [x for k, v in TRAIN_OVERRIDES.items() if k != "steps" for x in ("--set", f"{k}={v}")]
    eau("train", "--preset", "tiny", "--steps", "2", "--run-id", "newuser", "--no-progress", *overrides)
    proto = small_protocol(tmp_path / "protocol.yaml")
    first = json.loads(eau("eval", "--run", "newuser", "--protocol", str(proto), "--json").stdout)
    # the run trained in its own knobs folder; the project's is what a person edits next
    before = yaml.safe_load((kdir / "env.yaml").read_text())["max_steps"]["default"]
    eau("knobs", "set", "env.max_steps", str(before + 1), "--reason", "one more turn")
    assert yaml.safe_load((kdir / "env.yaml").read_text())["max_steps"]["default"] == before + 1
    second = json.loads(eau("eval", "--run", "newuser", "--protocol", str(proto), "--json").stdout)
    missing = json.loads(
        eau(
            "eval",
            "--run",
            "newuser",
            "--protocol",
            str(proto),
            "--json",
            "--no-save",
            "--knobs-dir",
            str(tmp_path / "does-not-exist"),
        ).stdout
    )
    assert first["protocol_hash"] == second["protocol_hash"] == missing["protocol_hash"]
    assert comparable(first) == comparable(second) == comparable(missing)
    assert first["checkpoint"] == "step_000001"
    assert len((tmp_path / "eval_results" / "newuser" / "history.jsonl").read_text().splitlines()) == 2
    default_hash = json.loads(eau("eval", "--describe", "--json").stdout)["protocol_hash"]
    assert default_hash == load_protocol().hash
    table = eau("eval", "--run", "newuser", "--protocol", str(proto), "--no-save").stdout
    assert "telepathy" in table and "held out" in table
    eau("plot", "--run", "newuser", "-o", str(tmp_path / "newuser.png"))
    assert (tmp_path / "newuser.png").read_bytes()[:4] == b"\x89PNG"


def test_the_tau2_protocol_runs_end_to_end_and_says_what_each_reward_was_computed_from(setup, tmp_path):
    """``eval/protocol-tau2.yaml`` cut to one airline and one retail task, two trials and three turns
    (its frozen schemas and rules as shipped): the τ² gyms run under ``eau eval`` and the result says,
    per gym, which reward-basis components were scored and how the episodes ended."""
    from tau2_support import need_tau2

    need_tau2()
    run, _, _ = setup
    import shutil

    root = Path(__file__).resolve().parents[1] / "eval"
    shutil.copytree(root, tmp_path / "eval")
    doc = yaml.safe_load((root / "protocol-tau2.yaml").read_text())
    doc["name"] = "eval-test-tau2"
    doc["trials"] = 2
    doc["gyms"] = {"tau2_airline": {"tasks": 1}, "tau2_retail": {"tasks": 1}}
    doc["limits"] = {"max_new_tokens_per_turn": 16, "max_episode_tokens": 12000}
    for gym in ("tau2_airline", "tau2_retail", "tau2_telecom"):
        doc["knobs"]["env"]["max_steps"][gym] = 3
    proto = tmp_path / "eval" / "protocol-tau2-small.yaml"
    proto.write_text(yaml.safe_dump(doc, sort_keys=False))
    out = eval_json(run, proto, tmp_path / "er")
    assert list(out["gyms"]) == ["tau2_airline", "tau2_retail"] and out["episodes"] == 4
    for gym, g in out["gyms"].items():
        assert g["episodes"] == 2 and g["tasks"] == 1 and set(g["pass_hat_k"]) == {"1", "2"}
        t = g["tau2"]
        # τ²'s default basis (the shipped tasks name none): the database and the required outputs
        assert set(t["components"]) == {"DB", "COMMUNICATE"}, (gym, t)
        assert all(c["episodes"] == 2 for c in t["components"].values())
        # an untrained policy in three turns: every episode ran out of turns and scored 0
        assert t["ends"] == {"max_steps": 2} and t["unscored_episodes"] == 0
        assert g["success_rate"] == 0.0
    recs = [json.loads(x) for x in (Path(out["saved"]).parent / "step_000000.records.jsonl").read_text().splitlines()]
    assert all(r["tau2"]["score"]["scored_on"] == ["DB", "COMMUNICATE"] for r in recs)
    assert all(r["knobs"]["env"]["max_steps"] == 3 for r in recs)
