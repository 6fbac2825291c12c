"""Planted-fault tests of ``eau diagnose``'s detectors on run folders built from real episodes.

For every detector, one run has that fault planted through knobs, rule files, the LLM user's model
or (for policy faults) the agent (tests/analysis_runs.py); the detector must flag it. The healthy
runs (symbolic user; both user arms with a cooperative LLM user; the question-rate run's agent
without its knob change) must not be flagged by any detector. False positives are counted: on
healthy runs they must be zero; on planted runs, flags by other detectors are allowed only where the
planted fault really causes that second problem (listed in COLLATERAL with the reason).
"""

from __future__ import annotations

import json

import pytest
from analysis_runs import CONTROL_SEARCH_FIRST, HEALTHY, HEALTHY_MIXED, SPECS, cached_run

from harness.analysis.detectors import DETECTORS, DetectorInput
from harness.analysis.diagnose import UsageError, diagnose, parse_thresholds, window_input
from harness.analysis.run_data import load_run_dir

WINDOW = 6  # the runs have 12 steps (8 with an LLM user): the window and a preceding window fit
HEALTHY_RUNS = (HEALTHY, HEALTHY_MIXED, CONTROL_SEARCH_FIRST)
PLANTED = tuple(n for n in SPECS if n not in HEALTHY_RUNS)
# Second flags a planted fault really causes (not false positives):
COLLATERAL = {
    # 3 turns with 2 required questions leave no room for function's 3 probes or intention's details
    "deadlock": {"unreachable_tasks"},
    # the question farmer asks one filler question until the turn limit, in every gym
    "reward_hacking": {"deadlock", "template_collapse"},
    # a host whose answers are wrong discloses no clue (its "No." matches no "Yes." verdict), so the
    # LLM arm earns less rule reward than the symbolic one: the arms really differ
    "user_unreliable": {"arm_disparity"},
}


@pytest.fixture(scope="module")
def reports() -> dict[str, dict]:
    return {name: diagnose(load_run_dir(cached_run(name)), window=WINDOW) for name in SPECS}


def test_every_detector_has_a_planted_run():
    assert set(PLANTED) == set(DETECTORS), "each detector needs exactly one planted-fault run"


@pytest.mark.parametrize("name", PLANTED)
def test_planted_fault_is_flagged(reports, name):
    doc = reports[name]
    finding = next(f for f in doc["findings"] if f["name"] == name)
    assert finding["flagged"], json.dumps(finding, indent=1)[:3000]
    assert finding["severity"] in ("medium", "high")
    assert finding["summary"] and finding["suggestion"]


def test_false_positives_counted(reports):
    healthy_fp = {n: reports[n]["flagged"] for n in HEALTHY_RUNS if reports[n]["flagged"]}
    planted_fp = {n: sorted(set(reports[n]["flagged"]) - {n} - COLLATERAL.get(n, set())) for n in PLANTED}
    planted_fp = {n: v for n, v in planted_fp.items() if v}
    checks = len(HEALTHY_RUNS) * len(DETECTORS) + sum(len(DETECTORS) - 1 for _ in PLANTED)
    fp = sum(len(v) for v in healthy_fp.values()) + sum(len(v) for v in planted_fp.values())
    print(f"false positives: {fp} of {checks} detector checks (healthy: {healthy_fp}, planted: {planted_fp})")
    assert fp == 0, (healthy_fp, planted_fp)


@pytest.mark.parametrize("name", HEALTHY_RUNS)
def test_healthy_runs_are_not_flagged(reports, name):
    assert reports[name]["flagged"] == [], [f["summary"] for f in reports[name]["findings"] if f["flagged"]]


def test_evidence_is_bounded_and_points_at_real_episodes(reports):
    for name in PLANTED:
        run = load_run_dir(cached_run(name))
        ids = {e["episode_id"] for s in run.trajectory_steps() for e in run.episodes_of_step(s)}
        for f in reports[name]["findings"]:
            assert len(f["evidence"]["episodes"]) <= 5
            assert set(f["evidence"]["episodes"]) <= ids, (name, f["name"])
            assert len(json.dumps(f)) < 20000, (name, f["name"])  # bounded output


def test_deadlock_blames_min_questions(reports):
    f = next(f for f in reports["deadlock"]["findings"] if f["name"] == "deadlock")
    assert f["component"] == "config"
    assert f["evidence"]["metrics"]["min_questions"] == [2] and f["evidence"]["metrics"]["max_steps"] == [3]
    assert "min_questions" in f["suggestion"]


def test_leakage_names_over_disclosure_on_the_llm_arm(reports):
    f = next(f for f in reports["user_leakage"]["findings"] if f["name"] == "user_leakage")
    m = f["evidence"]["metrics"]
    assert m["overdisclosure_rate"] >= 0.1 and m["bulk_episodes"] > 0
    assert m["overdisclosure_rate_by_arm"]["llm"] >= 0.1
    healthy = next(f for f in reports[HEALTHY_MIXED]["findings"] if f["name"] == "user_leakage")
    assert healthy["evidence"]["metrics"]["overdisclosed_replies"] == 0
    # every travel/function task was rebuilt and its hidden answer checked
    assert healthy["evidence"]["metrics"]["secret_unchecked"] == {}


def test_reward_hacking_names_the_rule(reports):
    f = next(f for f in reports["reward_hacking"]["findings"] if f["name"] == "reward_hacking")
    m = f["evidence"]["metrics"]
    assert max(m["rule_shares"], key=m["rule_shares"].get) == "ask_bonus"
    assert m["reward_rise"] > 0 and m["success_rise"] <= 0


def test_silent_tool_failures_groups_by_argument(reports):
    f = next(f for f in reports["silent_tool_failures"]["findings"] if f["name"] == "silent_tool_failures")
    worst = f["evidence"]["metrics"]["worst_groups"]
    assert worst and all(g["fail_share"] >= 0.9 and g["tool"] == "search" for g in worst)
    assert any(g["argument"].endswith("options") for g in worst)


def test_arm_disparity_and_question_rate_attribution(reports):
    f = next(f for f in reports["arm_disparity"]["findings"] if f["name"] == "arm_disparity")
    gap = f["evidence"]["metrics"]["gaps"]["all"]
    assert gap["symbolic_minus_llm"] >= 0.15
    q = next(f for f in reports["question_rate_drop"]["findings"] if f["name"] == "question_rate_drop")
    assert q["evidence"]["metrics"]["per_gym"]["travel"]["question_rate"]["relative_drop"] >= 0.25


def test_absent_inputs_are_skipped_not_guessed(reports):
    arm = next(f for f in reports[HEALTHY]["findings"] if f["name"] == "arm_disparity")
    assert arm["flagged"] is False and "LLM" in arm["skipped"]
    run = load_run_dir(cached_run(HEALTHY))
    data = window_input(run, WINDOW)
    no_entropy = DetectorInput(
        metrics=[{k: v for k, v in m.items() if k != "entropy"} for m in data.metrics],
        history=data.history,
        episodes=data.episodes,
        steps=data.steps,
    )
    f = DETECTORS["entropy_collapse"].run(no_entropy)
    assert f.flagged is False and f.skipped and "entropy" in f.skipped
    empty = DetectorInput(metrics=[], history=[], episodes=[], steps=[])
    for name, det in DETECTORS.items():
        res = det.run(empty)
        assert res.flagged is False and res.skipped, name


def test_threshold_overrides_change_the_verdict():
    run = load_run_dir(cached_run("deadlock"))
    data = window_input(run, WINDOW)
    assert DETECTORS["deadlock"].run(data).flagged
    relaxed = DETECTORS["deadlock"].run(data, parse_thresholds(["deadlock.rate=0.99"])["deadlock"])
    assert not relaxed.flagged and relaxed.thresholds["rate"] == 0.99
    assert parse_thresholds(["rate=0.5"], ["deadlock"]) == {"deadlock": {"rate": 0.5}}
    for bad in (["rate=0.5"], ["nope.rate=1"], ["deadlock.nope=1"], ["deadlock.rate=high"], ["deadlock.rate"]):
        with pytest.raises(UsageError):
            parse_thresholds(bad)


def test_user_unreliable_names_the_lying_arm_and_quotes_its_wrong_replies(reports):
    f = next(f for f in reports["user_unreliable"]["findings"] if f["name"] == "user_unreliable")
    m = f["evidence"]["metrics"]
    assert m["by_arm"]["llm"]["flagged"] == 1 and m["by_arm"]["llm"]["wrong_rate"] >= 0.5
    assert m["by_arm"]["symbolic"]["wrong"] == 0 and m["per_gym"]["turtle"]["llm"]["flagged_by"] == ["level"]
    assert f["component"] == "user" and f["evidence"]["episodes"] and f["evidence"]["matching_episodes"] >= 5
    for ex in m["examples"]:
        assert ex["arm"] == "llm" and ex["reply"] in ("Yes.", "No.") and ex["why"].startswith("the story says")
        assert ex["episode"] in f["evidence"]["episodes"] or f["evidence"]["matching_episodes"] > 5
    # the honest LLM user of the mixed run is checked and never flagged
    healthy = next(f for f in reports[HEALTHY_MIXED]["findings"] if f["name"] == "user_unreliable")
    assert not healthy["flagged"] and healthy["evidence"]["metrics"]["by_arm"]["llm"]["checked"] > 0
    assert healthy["evidence"]["metrics"]["by_arm"]["llm"]["wrong"] == 0


def _replies(arm: str, wrong: int, right: int, step: int) -> list[dict]:
    """Episodes of one ask each, ``wrong`` of them flagged wrong by the verifier."""
    out = []
    for i in range(wrong + right):
        check = {"wrong": i < wrong}
        turn = {
            "turn": 0,
            "action": {"choice": "ask", "content": "q?"},
            "user_reply": {"text": "a", "flags": {"check": check}},
        }
        out.append({"episode_id": f"s{step}-{arm}-{i}", "gym": "travel", "arm": arm, "turns": [turn]})
    return out


def test_user_unreliable_fires_on_a_rise_below_the_level_and_not_on_a_steady_share():
    det = DETECTORS["user_unreliable"]
    before = _replies("llm", 2, 58, 0)  # 3% before
    rise = det.run(
        DetectorInput(metrics=[], history=[], episodes=_replies("llm", 10, 50, 1), steps=[1], before_episodes=before)
    )
    assert rise.flagged and rise.metrics["by_arm"]["llm"]["flagged_by"] == ["rise"]  # 17%: under the 20% level
    assert rise.metrics["by_arm"]["llm"]["before_wrong_rate"] == round(2 / 60, 4) and len(rise.matches) == 10
    steady = det.run(
        DetectorInput(metrics=[], history=[], episodes=_replies("llm", 3, 57, 1), steps=[1], before_episodes=before)
    )
    assert not steady.flagged and steady.matches == []
    few = det.run(DetectorInput(metrics=[], history=[], episodes=_replies("llm", 5, 5, 1), steps=[1]))
    assert not few.flagged  # 10 replies: too few to call 50% a level
    assert det.run(DetectorInput(metrics=[], history=[], episodes=[], steps=[1])).to_dict()["skipped"]
