"""Inter-run evolution (``eau train --from``), ``eau runs list`` and ``eau runs compare`` on real runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from eval_runs import one_torch_thread, recording_opens, scratch, small_protocol, trained_run
from typer.testing import CliRunner

from harness.cli.main import app

runner = CliRunner()
REASON = "user rules repaired: retry from the parent's policy"


def invoke(*args: str, **kw):
    return runner.invoke(app, list(args), **kw)


@pytest.fixture(scope="module")
def lineage():
    """(parent run, child run, knobs dir): the child evolved with --from --from-checkpoint after a knob edit
    of the stopped parent's folder (the child starts from that folder as it is)."""
    with one_torch_thread():
        parent, kdir = trained_run()
        rdir = parent.parent
        if not (rdir / "child").exists():
            res = invoke(
                "knobs", "set", "user.match_threshold", "0.35", "--reason", "between runs", "--run", parent.name,
                "--knobs-dir", str(kdir), "--runs-dir", str(rdir),
            )  # fmt: skip
            assert res.exit_code == 0, res.output
            cfg = scratch() / "child-config.yaml"
            cfg.write_text("checkpoint_every: 7\nsteps: 3\n")
            res = invoke(
                "train",
                "--from",
                parent.name,
                "--from-checkpoint",
                "--reason",
                REASON,
                "--run-id",
                "child",
                "--config",
                str(cfg),
                "--set",
                "steps=1",
                "--no-progress",
                "--json",
                "--runs-dir",
                str(rdir),
                "--knobs-dir",
                str(kdir),
            )
            assert res.exit_code == 0, res.output
        yield parent, rdir / "child", kdir


def test_from_records_the_parent_and_starts_from_its_checkpoint(lineage):
    parent, child, _ = lineage
    cfg = yaml.safe_load((child / "config.yaml").read_text())
    assert cfg["parent"] == parent.name and cfg["parent_reason"] == REASON and cfg["lineage"] == [parent.name]
    assert Path(cfg["init_checkpoint"]) == (parent / "checkpoints" / "step_000000").resolve()
    assert Path(cfg["init_checkpoint"]).is_absolute()
    # the parent's checkpoint is pinned by the child: the parent's pruning keeps it
    from harness.ppo import checkpoint

    assert checkpoint.pinned_by(Path(cfg["init_checkpoint"])) == ["child"]
    # precedence: parent config < --config FILE < --set
    assert cfg["checkpoint_every"] == 7 and cfg["steps"] == 1
    assert cfg["policy"] == yaml.safe_load((parent / "config.yaml").read_text())["policy"]


def test_child_starting_policy_is_the_parents_checkpoint(lineage):
    """Evaluated on one protocol, the child's 'init' policy and the parent's checkpoint score identically."""
    from harness.eval.evaluate import evaluate_run
    from harness.eval.protocol import load_protocol

    parent, child, _ = lineage
    p = load_protocol(small_protocol(scratch() / "protocols" / "lineage.yaml", gyms={"intention": {"tasks": 2}}))
    with one_torch_thread():
        a, ra = evaluate_run(parent, p)
        b, rb = evaluate_run(child, p, checkpoint="init")
    assert a["checkpoint"] == "step_000000" and b["checkpoint"] == "init"
    assert a["gyms"] == b["gyms"] and [r["turns"] for r in ra] == [r["turns"] for r in rb]


def test_lineage_cap_refuses_a_new_run(lineage, tmp_path):
    parent, _, kdir = lineage
    rdir = tmp_path / "runs"
    capped = rdir / "gen4"
    capped.mkdir(parents=True)
    cfg = yaml.safe_load((parent / "config.yaml").read_text())
    cfg.update(run_id="gen4", lineage=["g0", "g1", "g2", "g3"], parent="g3")
    (capped / "config.yaml").write_text(yaml.safe_dump(cfg))
    res = invoke(
        "train",
        "--from",
        "gen4",
        "--reason",
        "one more",
        "--run-id",
        "gen5",
        "--json",
        "--runs-dir",
        str(rdir),
        "--knobs-dir",
        str(kdir),
    )
    assert res.exit_code == 1
    err = json.loads(res.stdout)["error"]
    assert "already has 5 runs" in err and "max_lineage=5" in err
    assert not (rdir / "gen5").exists()
    res = invoke("train", "--from", "nope", "--json", "--runs-dir", str(rdir), "--knobs-dir", str(kdir))
    assert res.exit_code == 5


def test_runs_list_shows_parent_and_generation(lineage):
    parent, child, _ = lineage
    res = invoke("runs", "list", "--json", "--runs-dir", str(parent.parent))
    assert res.exit_code == 0, res.output
    rows = {r["run_id"]: r for r in json.loads(res.stdout)["runs"]}
    assert rows[parent.name]["parent"] is None and rows[parent.name]["generation"] == 0
    c = rows["child"]
    assert c["parent"] == parent.name and c["generation"] == 1 and c["max_lineage"] == 5
    assert c["state"] == "finished" and c["step"] == 1 and c["parent_reason"] == REASON
    assert isinstance(c["reward_mean"], float)
    text = invoke("runs", "list", "--runs-dir", str(parent.parent)).stdout
    assert f"child <- {parent.name}: {REASON} (from the parent's checkpoint)" in text
    empty = invoke("runs", "list", "--runs-dir", str(scratch() / "no-runs-here"))
    assert empty.exit_code == 0 and "no runs" in empty.stdout


def test_runs_compare_config_knobs_and_metrics(lineage):
    parent, child, _ = lineage
    res = invoke("runs", "compare", parent.name, "child", "--json", "--runs-dir", str(parent.parent))
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["relation"] == f"child descends from {parent.name}"
    keys = {r["key"]: r for r in out["config"]}
    assert {"parent", "parent_reason", "lineage", "init_checkpoint", "checkpoint_every"} <= set(keys)
    assert "run_id" not in keys and keys["checkpoint_every"]["a"] == 10 and keys["checkpoint_every"]["b"] == 7
    assert keys["parent"]["a"] is None and keys["parent"]["b"] == parent.name
    start = {r["key"]: r for r in out["knobs"]["start"]}
    assert start["user.match_threshold"]["a"] == 0.3 and start["user.match_threshold"]["b"] == 0.35
    assert any(r["key"] == "user.match_threshold" for r in out["knobs"]["end"])
    metrics = {m["metric"]: m for m in out["metrics"]}
    for k in ("reward_mean", "success_rate", "gym/intention/reward_mean", "arm/symbolic/success_rate"):
        m = metrics[k]
        assert m["a_steps"] == 1 and m["b_steps"] == 1 and m["delta"] == pytest.approx(m["b"] - m["a"])
    text = invoke("runs", "compare", parent.name, "child", "--all", "--runs-dir", str(parent.parent)).stdout
    assert "user.match_threshold" in text and "checkpoint_every" in text and "reward_mean" in text
    res = invoke("runs", "compare", parent.name, "ghost", "--json", "--runs-dir", str(parent.parent))
    assert res.exit_code == 5 and "ghost" in json.loads(res.stdout)["error"]


def test_compare_detects_rule_file_and_per_gym_knob_differences(tmp_path):
    from harness.runs.compare import compare_runs

    def fake_run(name: str, per_gym: dict, rule_value: float) -> Path:
        run = tmp_path / name
        (run / "knobs" / "rules" / "rewards").mkdir(parents=True)
        (run / "config.yaml").write_text(yaml.safe_dump({"run_id": name, "gyms": ["travel"]}))
        (run / "knobs" / "env.yaml").write_text(yaml.safe_dump({"max_steps": per_gym}))
        (run / "knobs" / "rules" / "rewards" / "default.yaml").write_text(
            yaml.safe_dump({"rules": [{"name": "x", "predicate": "new_fact_disclosed", "value": rule_value}]})
        )
        return run

    a = fake_run("a", {"default": 16, "travel": 12}, 0.05)
    b = fake_run("b", {"default": 16, "travel": 14}, 0.1)
    out = compare_runs(a, b)
    assert [r["key"] for r in out["knobs"]["start"]] == ["env.max_steps[travel]"]
    assert [r["file"] for r in out["knobs"]["rules_start"]] == ["rules/rewards/default.yaml"]
    assert out["metrics"] == [] and out["relation"] is None
    with pytest.raises(ValueError, match="window must be >= 1"):
        compare_runs(a, b, window=0)


def test_skill_side_commands_never_read_eval_results(lineage, tmp_path, monkeypatch):
    """`eau runs` and `eau plot` are allowed to the meta-agent: they must not open eval_results/."""
    parent, child, _ = lineage
    er = tmp_path / "eval_results" / parent.name
    er.mkdir(parents=True)
    (er / "step_000000.json").write_text('{"secret": 1}')
    monkeypatch.setenv("EAU_EVAL_DIR", str(tmp_path / "eval_results"))
    monkeypatch.chdir(tmp_path)
    with recording_opens() as opened:
        rdir = str(parent.parent)
        for args in (
            ["runs", "list"],
            ["runs", "compare", parent.name, "child"],
            ["plot", "--run", parent.name, "--run", "child", "-o", str(tmp_path / "p.png")],
        ):
            res = invoke(*args, "--runs-dir", rdir)
            assert res.exit_code == 0, res.output
    assert opened and not [p for p in opened if "eval_results" in p]
    shutil.rmtree(tmp_path / "eval_results")
