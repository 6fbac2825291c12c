"""Every ``--json`` document is strict JSON: a run whose metrics hold NaN or infinities is listed and
compared with those numbers as the strings "nan", "inf", "-inf" (never the NaN/Infinity tokens).
And a text option that is not UTF-8 is a usage error, not a crash where the text is rendered."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli.common import json_text
from harness.cli.main import app

runner = CliRunner()


def strict_loads(text: str):
    """``json.loads`` that refuses NaN, Infinity and -Infinity (as strict parsers do)."""

    def refuse(token: str):
        raise ValueError(f"non-standard JSON token {token}")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """Two run folders whose metrics.jsonl hold non-finite numbers (as Python's json writes them)."""
    rows = {
        "a": [
            {"step": 0, "reward_mean": math.nan, "success_rate": math.inf, "loss": 1.0},
            {"step": 1, "reward_mean": -math.inf, "success_rate": 0.5, "loss": math.nan},
        ],
        "b": [
            {"step": 0, "reward_mean": 1.0, "success_rate": 0.5, "loss": 2.0},
            {"step": 1, "reward_mean": 0.5, "success_rate": math.nan, "loss": 3.0},
        ],
    }
    config_lr = {"a": ".nan", "b": ".inf"}
    for run, lines in rows.items():
        (tmp_path / run).mkdir()
        (tmp_path / run / "config.yaml").write_text(
            f"run_id: {run}\npreset: tiny\ngyms: [travel]\npolicy:\n  lr: {config_lr[run]}\n"
        )
        (tmp_path / run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert "NaN" in (tmp_path / "a" / "metrics.jsonl").read_text()
    return tmp_path


def test_runs_list_json_is_strict(runs):
    res = runner.invoke(app, ["runs", "list", "--json", "--runs-dir", str(runs)])
    assert res.exit_code == 0, res.output
    doc = strict_loads(res.stdout)
    by_id = {r["run_id"]: r for r in doc["runs"]}
    assert by_id["a"]["reward_mean"] == "-inf" and by_id["b"]["success_rate"] == "nan"
    assert by_id["a"]["success_rate"] == 0.5


def test_runs_compare_json_is_strict(runs):
    res = runner.invoke(app, ["runs", "compare", "a", "b", "--json", "--all", "--runs-dir", str(runs)])
    assert res.exit_code == 0, res.output
    doc = strict_loads(res.stdout)
    config = {c["key"]: c for c in doc["config"]}
    assert (config["policy.lr"]["a"], config["policy.lr"]["b"]) == ("nan", "inf")
    metrics = {m["metric"]: m for m in doc["metrics"]}
    assert metrics["reward_mean"]["b"] == 0.75


def test_json_text_writes_non_finite_numbers_as_strings_everywhere():
    doc = {"x": math.nan, "y": [math.inf, (-math.inf, 1.5)], "z": {math.nan: {"w": math.inf}}, "p": Path("/a")}
    assert strict_loads(json_text(doc)) == {
        "x": "nan",
        "y": ["inf", ["-inf", 1.5]],
        "z": {"nan": {"w": "inf"}},
        "p": "/a",
    }
    assert json_text({"a": 1.0, "b": [1, 2]}) == json.dumps({"a": 1.0, "b": [1, 2]}, indent=2)


def test_a_plot_title_that_is_not_utf8_is_a_usage_error(runs, tmp_path):
    """Found by the CLI fuzz once its workspace held runs: matplotlib raised TypeError on the title."""
    out = tmp_path / "p.png"
    res = runner.invoke(app, ["plot", "--run", "a", "--title", "t \udcff", "--out", str(out), "--runs-dir", str(runs)])
    assert res.exit_code == 2 and "--title: not valid text (character 3 is byte 0xff" in res.output, res.output
    assert not out.exists()
