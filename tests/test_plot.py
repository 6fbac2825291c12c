"""``eau plot``: curves per gym and per user arm with knob events marked, on runs with real episodes
and real knob events (tests/analysis_runs.py: real gyms and users, an LLM user arm on a loopback server)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from analysis_runs import RunSpec, build_run, cooperative_user, learner
from eval_runs import scratch, trained_run
from typer.testing import CliRunner

from harness.analysis.plot import event_label, knob_marks, layout_labels, plot_runs
from harness.cli.main import app
from harness.io import jsonl
from harness.stores import open_store

runner = CliRunner()


@pytest.fixture(scope="module")
def runs():
    root = scratch() / "plot"
    rdir = root / "runs"
    if not (rdir / "mixed").exists():
        build_run(
            rdir,
            RunSpec(
                "mixed",
                gyms=("travel", "function"),
                steps=6,
                samples=2,
                user={"user_strategy_mix": 0.5},
                llm=cooperative_user,
                changes={
                    2: [("env.max_steps", 17)],
                    4: [("user.volunteer_interval", 3), ("reward.turn_reward_clip", [-1.0, 1.5])],
                },
            ),
            root,
        )
        build_run(
            rdir,
            RunSpec(
                "plain",
                gyms=("travel", "function"),
                steps=6,
                samples=2,
                agent=learner(0.3, 0.6),
                changes={3: [("user.match_threshold", 0.35)]},
            ),
            root,
        )
        # a refused write lands in the run's event log too; it must not be drawn
        store = open_store(
            rdir / "mixed" / "knobs", events_path=rdir / "mixed" / "knob_events.jsonl", run_gyms=["travel", "function"]
        )
        assert not store.set("env.max_steps", 2, author="human", reason="too hard", step_written=5).ok
    return rdir


def plot_json(rdir: Path, *args: str) -> dict:
    res = runner.invoke(app, ["plot", "--runs-dir", str(rdir), "--json", *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def ink(path: Path) -> float:
    """Share of pixels that are not white in a PNG."""
    import matplotlib.image as mpimg

    img = mpimg.imread(path)
    return float((img[..., :3].min(axis=-1) < 0.95).mean())


def test_single_run_panels_series_and_events(runs, tmp_path):
    out = plot_json(runs, "--run", "mixed", "-o", str(tmp_path / "m.png"))
    png = Path(out["path"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and 0.02 < ink(png) < 0.5
    for panel in ("reward", "success"):
        assert out["panels"][panel] == ["overall", "gym function", "gym travel", "arm llm", "arm symbolic"]
    accepted = [
        e
        for e in jsonl.read(runs / "mixed" / "knob_events.jsonl")
        if e["status"] == "accepted" and e["step_effective"] is not None
    ]
    assert len(accepted) == 3 and any(
        e["status"] == "rejected" for e in jsonl.read(runs / "mixed" / "knob_events.jsonl")
    )
    assert sorted((e["step"], e["label"]) for e in out["events"]) == [
        (2, "max_steps: 16→17"),
        (4, "turn_reward_clip: [-1,2]→[-1,1.5]"),
        (4, "volunteer_interval: 4→3"),
    ]
    assert sorted(e["step"] for e in out["events"]) == sorted(e["step_effective"] for e in accepted)


def test_overlay_of_two_runs(runs, tmp_path, monkeypatch):
    out = plot_json(runs, "--run", "mixed", "--run", "plain", "-o", str(tmp_path / "both.png"), "--smooth", "2")
    assert out["runs"] == ["mixed", "plain"] and out["smooth"] == 2
    labels = out["panels"]["reward"]
    assert "mixed: arm llm" in labels and "plain: gym travel" in labels and "plain: arm llm" not in labels
    assert {(e["run"], e["step"]) for e in out["events"]} == {("mixed", 2), ("mixed", 4), ("plain", 3)}
    assert ink(Path(out["path"])) > 0.02
    # default file name in the working directory
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["plot", "--runs-dir", str(runs), "--run", "mixed", "--run", "plain"])
    assert res.exit_code == 0 and (tmp_path / "plot_mixed_vs_plain.png").is_file()


def test_plot_of_a_trained_run_has_no_preset_events():
    run, _ = trained_run()
    events = jsonl.read(run / "knob_events.jsonl")
    assert all(e["step_effective"] is None for e in events)  # preset writes before step 0
    assert knob_marks(run) == []
    res = plot_runs([run], scratch() / "trained.png")
    assert res["panels"]["reward"] == ["overall", "gym intention", "arm symbolic"] and res["events"] == []


def test_event_labels():
    assert event_label({"knob": "env.max_steps", "gym": "travel", "old": 16, "new": 12}) == "max_steps[travel]: 16→12"
    assert (
        event_label({"knob": "agent.lr", "old": 1e-5, "new": 2.5e-5, "source": "revert"}) == "revert lr: 1e-05→2.5e-05"
    )
    assert event_label({"knob": "rules.users.travel", "old": {"a": 1}, "new": {"a": 2}}) == "rules.users.travel edited"
    assert (
        event_label({"knob": "user.reveal_kinds", "old": ["preference", "attribute", "detail"], "new": ["detail"]})
        == "reveal_kinds: [preference,att…]→[detail]"
    )


def test_label_layout_never_overlaps():
    rng = np.random.default_rng(0)
    items = [(float(rng.integers(0, 40)), f"{i}:" + "k" * int(rng.integers(5, 30))) for i in range(40)]
    event = dict((text, x) for x, text in items)
    placed = layout_labels(items, char_width=0.25, max_rows=6, x_max=40)
    rows: dict[int, list[tuple[float, float]]] = {}
    for start, text, row in placed:
        assert 0 <= row < 6
        if not text.startswith("+"):
            end = start + (len(text) + 1) * 0.25
            rows.setdefault(row, []).append((start, end))
            # a label starts at its event and stays inside the plot, or ends at its event
            assert (start == event[text] and end <= 40) or end == pytest.approx(event[text]), (start, text)
    for spans in rows.values():
        spans.sort()
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))
    shown = sum(1 for _, t, _ in placed if not t.startswith("+"))
    more = [t for _, t, _ in placed if t.startswith("+")]
    assert shown + (int(more[0].split()[0][1:]) if more else 0) == 40


def test_plot_errors(runs, tmp_path):
    res = runner.invoke(app, ["plot", "--runs-dir", str(runs), "--run", "ghost", "--json"])
    assert res.exit_code == 5 and "ghost" in json.loads(res.stdout)["error"]
    res = runner.invoke(app, ["plot", "--runs-dir", str(runs), "--run", "mixed", "-o", str(tmp_path / "x.jpg")])
    assert res.exit_code == 1 and "PNG" in res.output
    res = runner.invoke(
        app,
        ["plot", "--runs-dir", str(runs), "--run", "mixed", "--panel", "loss", "--json", "-o", str(tmp_path / "x.png")],
    )
    assert res.exit_code == 1 and "allowed: reward, success" in json.loads(res.stdout)["error"]
