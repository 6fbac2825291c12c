"""Pieces of the analysis: statistics, rebuilt tasks, leak measures, run reading, step ranges, clipping."""

from __future__ import annotations

import copy
import json
import math
import shutil

import pytest
from analysis_runs import HEALTHY, cached_run

from harness.analysis.detectors import DETECTORS, DetectorInput
from harness.analysis.diagnose import UsageError
from harness.analysis.leakage import episode_leaks, secret_labels
from harness.analysis.run_data import load_run_dir, num
from harness.analysis.sample import CLIP_MARK, clip, parse_steps
from harness.analysis.stats import distinct_n, normalise_argument, opening, slope, slope_t, sparkline, top_share
from harness.analysis.tasks import regenerate, task_index
from harness.types import Task
from harness.users.leakguard import tokens


@pytest.fixture(scope="module")
def run():
    return load_run_dir(cached_run(HEALTHY))


def _episode(run, gym: str, want=lambda e: True) -> dict:
    for s in reversed(run.trajectory_steps()):
        for e in run.episodes_of_step(s):
            if e["gym"] == gym and want(e):
                return copy.deepcopy(e)
    raise AssertionError(f"no {gym} episode")


# ---------------------------------------------------------------------------- statistics
def test_statistics():
    assert slope([1, 2, 3, 4]) == pytest.approx(1.0) and slope([5, 5]) is None
    assert slope([3, 1, 2], [10, 20, 30]) == pytest.approx(-0.05)
    assert math.isinf(slope_t([0, 1, 2, 3])) and abs(slope_t([1, -1, 1, -1, 1, -1])) < 1
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7]) == "▁▂▃▄▅▆▇█" and sparkline([2, 2]) == "▅▅"
    assert sparkline([None, 1.0, 2.0]) == " ▁█" and sparkline(list(range(100)), width=10) == sparkline(
        list(range(90, 100))
    )
    assert distinct_n(["a b a b"], 1) == 0.5 and distinct_n(["a b c", "a b d"], 2) == 0.75 and distinct_n([], 2) is None
    assert top_share(["x", "y", "x"]) == ("x", pytest.approx(2 / 3)) and top_share([]) == (None, 0.0)
    assert opening("Okay, to be sure: what is it?", 3) == "okay to be"
    assert normalise_argument("Hotels, 3 nights!") == "hotels # nights"
    assert num(1) == 1.0 and num("nan") is None and num(True) is None and num(float("inf")) is None


# ---------------------------------------------------------------------------- rebuilt tasks
def test_tasks_are_rebuilt_from_the_registry(run):
    for gym in ("travel", "function", "intention"):
        ep = _episode(run, gym)
        task, why = regenerate(ep)
        assert why is None and task.task_id == ep["task"]["task_id"]
        assert [f.key for f in task.facts] == [f["key"] for f in ep["task"]["facts"]]
    ep = _episode(run, "travel")
    assert task_index(ep) == ("train", int(ep["group"].split("/")[2]))
    wrong = copy.deepcopy(ep)
    wrong["group"] = f"travel/train/{task_index(ep)[1] + 1}"
    task, why = regenerate(wrong)
    assert task is None and "differs" in why
    bare = {k: v for k, v in ep.items() if k != "group"}
    assert regenerate(bare) == (None, regenerate(bare)[1]) and "no task index" in regenerate(bare)[1]
    assert task_index({**bare, "task_index": 7}) == ("train", 7)


# ---------------------------------------------------------------------------- leak measures
def test_clean_episodes_have_no_leak(run):
    for gym in ("travel", "function", "intention"):
        ep = _episode(run, gym)
        lk = episode_leaks(ep, regenerate(ep)[0])
        assert (
            not lk.secret_leak and not lk.filtered_kind_turns and not lk.over_disclosed_turns and not lk.redacted_turns
        )
        assert lk.no_secret == (gym == "intention")


def test_a_reply_naming_part_of_the_answer_is_a_leak(run):
    ep = _episode(run, "travel", lambda e: any(t["user_reply"] for t in e["turns"]) and "," in regenerate(e)[0].secret)
    task = regenerate(ep)[0]
    labels = secret_labels(task.secret, task.prompt)
    assert len(labels) >= 2
    turn = next(t for t in ep["turns"] if t["user_reply"])
    turn["user_reply"]["text"] += f" Between us, {labels[0].upper()} is the one to book."  # a guard that let it pass
    lk = episode_leaks(ep, task)
    assert lk.secret_leak and lk.secret_leak_turns == [turn["turn"]] and f"label {labels[0]}" in lk.secret_leak_reasons
    eps = [copy.deepcopy(e) for e in run.episodes(run.last_steps(2))]
    f = DETECTORS["user_leakage"].run(DetectorInput(metrics=[], history=[], episodes=eps + [ep], steps=[]))
    assert f.flagged and f.severity == "high" and f.evidence_episodes == [ep["episode_id"]]
    assert not DETECTORS["user_leakage"].run(DetectorInput(metrics=[], history=[], episodes=eps, steps=[])).flagged


def test_a_secret_given_in_pieces_is_a_cumulative_leak(run):
    ep = _episode(run, "travel", lambda e: sum(1 for t in e["turns"] if t["user_reply"]) >= 3)
    code = (
        "def rank(items, k):\n    scored = [(len(name) * weight, name) for name, weight in items]\n"
        "    scored.sort(reverse=True)\n    top = [name for _, name in scored[:k]]\n"
        "    return {'top': top, 'count': len(scored), 'best': top[0] if top else None}"
    )
    task = Task(
        gym="travel", task_id=ep["task"]["task_id"], split="train", prompt="Rank my items.", facts=[], secret=code
    )
    toks = tokens(code)
    chunks = [" ".join(toks[i : i + 7]) for i in range(0, len(toks), 7)]  # 7 tokens: under the 8-token span
    replies = [t for t in ep["turns"] if t["user_reply"]][:3]
    for j, t in enumerate(replies):  # reply j carries every third chunk, separated so no n-gram spans two
        t["user_reply"]["text"] = "Let me see | " + " | ".join(chunks[j::3])
    for t in replies:
        assert not episode_leaks({**ep, "turns": [t]}, task).secret_leak  # no single reply leaks
    lk = episode_leaks(ep, task)
    assert (
        lk.cumulative_leak and lk.secret_leak and lk.secret_leak_turns == [] and "cumulative" in lk.secret_leak_reasons
    )


def test_filtered_kinds_and_over_disclosure(run):
    ep = _episode(run, "travel", lambda e: e["disclosures"] >= 3)
    task = regenerate(ep)[0]
    filtered = copy.deepcopy(ep)
    filtered["knobs"]["user"]["reveal_kinds"] = ["attribute"]  # preference excluded, yet disclosed
    lk = episode_leaks(filtered, task)
    assert lk.filtered_kind_turns and lk.filtered_kinds == ["preference"]
    bulk = copy.deepcopy(ep)
    keys = [f["key"] for f in ep["task"]["facts"]]
    turn = next(t for t in bulk["turns"] if t["user_reply"] and t["user_reply"]["revealed"])
    turn["user_reply"]["revealed"] = keys
    lk = episode_leaks(bulk, task)
    assert lk.over_disclosed_turns == [turn["turn"]] and (lk.bulk_turns == [turn["turn"]]) == (len(keys) >= 3)


def test_secret_labels():
    assert secret_labels("F2, H4") == ["f2", "h4"]
    assert secret_labels("F2, H4", public="answer like F2") == ["h4"]
    assert secret_labels("elephant") == [] and secret_labels("def f(x): return x") == []


# ---------------------------------------------------------------------------- reading runs
def test_torn_lines_and_missing_files(run, tmp_path):
    copy_dir = tmp_path / "r"
    shutil.copytree(run.dir, copy_dir)
    with open(copy_dir / "metrics.jsonl", "a") as f:
        f.write('{"step": 99, "success_rate": 1')  # a writer killed mid-line
    (copy_dir / "trajectories" / "step_000011.jsonl").unlink()
    (copy_dir / "events.jsonl").unlink()
    r = load_run_dir(copy_dir)
    assert r.metric_steps()[-1] == 11 and r.events == []
    assert r.episodes_of_step(11) == [] and r.trajectory_steps()[-1] == 10
    assert r.last_steps(3) == [9, 10, 11] and r.last_steps(2, until=5) == [4, 5]


def test_step_ranges_and_clipping(run):
    assert parse_steps("3:5", run) == [3, 4, 5] and parse_steps("10:", run) == [10, 11]
    assert (
        parse_steps(":1", run) == [0, 1]
        and parse_steps("7", run) == [7]
        and parse_steps(None, run, 4) == [8, 9, 10, 11]
    )
    with pytest.raises(UsageError):
        parse_steps("a:b", run)
    doc = clip({"a": "x" * 50, "b": ["y" * 5, {"c": "z" * 12}]}, 10)
    assert doc["a"] == "x" * 10 + CLIP_MARK.format(n=40) and doc["b"][0] == "y" * 5
    assert doc["b"][1]["c"].startswith("z" * 10) and json.dumps(doc)
