"""Reward rules: every predicate on hand-made records, scaling and clipping on hand-computed
cases, rule-file validation (unknown predicate lists the valid ones) and compile caching."""

from __future__ import annotations

import pytest
import yaml

from harness.knobs.folder import defaults_dir
from harness.rewards import RewardModel, RewardRuleError, predicate_names, validate_rule_file
from harness.rewards.predicates import get_predicate
from harness.types import Action, EpisodeState, TurnRecord, UserReply

KNOBS = {"default_scale": 1.0, "per_gym_scale": 1.0, "turn_reward_clip": [-1.0, 2.0], "predicate_weight": 0.1}


def rec(choice, events=(), tool_ok=None, declined=False) -> TurnRecord:
    action = Action(choice, "x" if choice else "", "raw", None if choice else "no_action_tag")
    r = TurnRecord(0, action, "obs", "user", events=list(events))
    if tool_ok is not None:
        r.tool = {"name": "search", "args": "q", "ok": tool_ok, "result": ""}
    if declined:
        r.user_reply = UserReply("no more", [], {"declined": "max_reveals"})
    return r


def holds(name, record, state=None, **params) -> bool:
    return get_predicate(name)(record, state or EpisodeState(turn=1), params)


def test_predicates_on_hand_made_records():
    assert holds("format_error", rec(None, ["format_error"])) and not holds("format_error", rec("ask"))
    assert holds("question_asked", rec("ask")) and not holds("question_asked", rec("search"))
    asked = EpisodeState(turn=3, questions=2)
    assert holds("asked_before_answer", rec("answer", ["answer"]), asked)
    assert not holds("asked_before_answer", rec("answer", ["answer"]), EpisodeState(turn=1, questions=0))
    assert not holds("asked_before_answer", rec("answer", ["early_answer"]), asked)  # refused answer
    assert holds("new_fact_disclosed", rec("ask", ["new_fact"])) and not holds(
        "new_fact_disclosed", rec("ask", ["repeat_fact"])
    )
    assert holds("repeated_fact", rec("ask", ["repeat_fact"])) and not holds("repeated_fact", rec("ask", ["new_fact"]))
    assert holds("repeated_question", rec("ask", ["repeated_question"])) and not holds("repeated_question", rec("ask"))
    assert holds("tool_failure", rec("search", ["tool_failure"])) and holds(
        "tool_failure", rec("search", tool_ok=False)
    )
    assert not holds("tool_failure", rec("search", tool_ok=True))
    assert holds("early_answer", rec("answer", ["early_answer"])) and not holds(
        "early_answer", rec("answer", ["answer"])
    )
    ok = rec("answer", ["answer"])
    ok.answer = {"content": "x", "task_reward": 0.0, "success": True}
    bad = rec("answer", ["answer"])
    bad.answer = {"content": "x", "task_reward": 0.0, "success": False}
    assert holds("answer_success", ok) and not holds("answer_success", bad) and not holds("answer_success", rec("ask"))
    assert holds("deadlock", rec("ask", ["deadlock"])) and not holds("deadlock", rec("ask", ["turn_limit"]))
    assert holds("user_declined", rec("ask", declined=True)) and not holds("user_declined", rec("ask"))
    assert holds("questions_over", rec("ask"), EpisodeState(questions=4), limit=3)
    assert not holds("questions_over", rec("ask"), EpisodeState(questions=3), limit=3)


def test_required_predicates_are_registered():
    need = {
        "format_error",
        "asked_before_answer",
        "new_fact_disclosed",
        "repeated_question",
        "repeated_fact",
        "tool_failure",
        "early_answer",
        "deadlock",
        "question_asked",
    }
    assert need <= set(predicate_names())


def model_with(rules: list[dict]) -> RewardModel:
    m = RewardModel()
    m.set_rules({"test": {"rules": rules}})
    return m


def test_default_rule_file_values():
    data = yaml.safe_load((defaults_dir() / "rules" / "rewards" / "default.yaml").read_text())
    m = RewardModel()
    m.set_rules({"default": data})
    assert {r.predicate.name: r.value for r in m.rules} == {
        "format_error": -0.1,
        "new_fact_disclosed": 0.05,
        "repeated_question": -0.05,
        "answer_success": 1.0,
        "deadlock": -1.0,
    }
    for name in ("answer_success", "deadlock"):
        assert next(r for r in m.rules if r.predicate.name == name).gyms == frozenset({"intention"})


def test_raw_scale_and_breakdown_hand_computed():
    m = model_with(
        [
            {"name": "bonus", "predicate": "new_fact_disclosed", "value": 0.05},
            {"name": "rep", "predicate": "repeated_question", "value": -0.05},
            {"name": "ask", "predicate": "question_asked", "value": 0.02},
        ]
    )
    knobs = dict(KNOBS, default_scale=1.5, per_gym_scale=2.0)
    out = m.score_turn(
        "function",
        rec("ask", ["new_fact"]),
        EpisodeState(turn=1),
        0.25,
        knobs,
        {"probe_new": 1.0, "probe_repeat": -1.0, "probe_varies_one": 1.0},
    )
    # raw = 0.25 + (0.05 + 0.02) + 0.1 * (1 - 1 + 1) = 0.42; scaled = 0.42 * 3.0 = 1.26
    assert out["raw"] == pytest.approx(0.42)
    assert out["total"] == pytest.approx(1.26) and out["scale"] == pytest.approx(3.0)
    assert out["rules"] == {"bonus": 0.05, "ask": 0.02}
    assert out["builtin"] == pytest.approx({"probe_new": 0.1, "probe_repeat": -0.1, "probe_varies_one": 0.1})
    assert out["task"] == 0.25 and out["clipped"] is False


def test_clipping_both_ends():
    m = model_with([{"name": "fmt", "predicate": "format_error", "value": -0.9}])
    low = m.score_turn("travel", rec(None), EpisodeState(turn=1), 0.0, dict(KNOBS, default_scale=2.0), {})
    assert low["total"] == -1.0 and low["clipped"] and low["raw"] == pytest.approx(-0.9)
    high = m.score_turn(
        "travel",
        rec("answer", ["answer"]),
        EpisodeState(turn=1),
        1.0,
        dict(KNOBS, default_scale=2.0, turn_reward_clip=[-0.5, 1.5]),
        {},
    )
    assert high["total"] == 1.5 and high["clipped"] and high["clip"] == [-0.5, 1.5]


def test_gym_restricted_rule():
    m = model_with([{"name": "tf", "predicate": "tool_failure", "value": -0.2, "gyms": ["travel"]}])
    r = rec("search", ["tool_failure"])
    assert m.score_turn("travel", r, EpisodeState(turn=1), 0.0, KNOBS, {})["total"] == pytest.approx(-0.2)
    assert m.score_turn("colbench", r, EpisodeState(turn=1), 0.0, KNOBS, {})["total"] == 0.0


def test_missing_predicate_weight_ignores_builtins():
    m = model_with([])
    knobs = {k: v for k, v in KNOBS.items() if k != "predicate_weight"}
    assert m.score_turn("travel", rec("ask"), EpisodeState(turn=1), 0.0, knobs, {"x": 1.0})["total"] == 0.0


@pytest.mark.parametrize(
    "rule, message",
    [
        (
            {"name": "a", "predicate": "nope", "value": 0.1},
            r"unknown reward predicate 'nope'; valid predicates: .*asked_before_answer.*question_asked",
        ),
        ({"name": "a", "predicate": "format_error", "value": 5}, r"rules\[0\]\.value|rules\.0\.value|5 is greater"),
        (
            {"name": "a", "predicate": "format_error", "value": 0.1, "gyms": ["mars"]},
            r"unknown gym\(s\) mars; known gyms",
        ),
        ({"name": "a", "predicate": "questions_over", "value": 0.1}, r"params\.limit is required"),
        (
            {"name": "a", "predicate": "questions_over", "value": 0.1, "params": {"limit": "x"}},
            r"params\.limit = 'x' must be of type int",
        ),
        (
            {"name": "a", "predicate": "format_error", "value": 0.1, "params": {"k": 1}},
            r"unknown parameter\(s\) k .*allowed: none",
        ),
        ({"name": "a", "predicate": "format_error", "value": 0.1, "colour": 1}, r"Additional properties"),
    ],
)
def test_invalid_rules_name_file_and_field(rule, message):
    with pytest.raises(RewardRuleError, match=message):
        RewardModel().set_rules({"mine": {"rules": [rule]}})
    with pytest.raises(RewardRuleError, match="knobs/rules/rewards/mine.yaml"):
        RewardModel().set_rules({"mine": {"rules": [rule]}})


def test_duplicate_names_across_files():
    r = {"name": "same", "predicate": "format_error", "value": -0.1}
    with pytest.raises(RewardRuleError, match="already defined in knobs/rules/rewards/a.yaml"):
        RewardModel().set_rules({"a": {"rules": [r]}, "b": {"rules": [r]}})


def test_validate_rule_file_hook_for_the_knob_store():
    validate_rule_file({"rules": [{"name": "a", "predicate": "deadlock", "value": -0.5}]})
    with pytest.raises(RewardRuleError, match="^rules\\[0\\]\\.predicate: unknown reward predicate"):
        validate_rule_file({"rules": [{"name": "a", "predicate": "nope", "value": 0.1}]})


def test_identical_rules_compile_once():
    files = {"x": {"rules": [{"name": "a", "predicate": "deadlock", "value": -0.5}]}}
    m = RewardModel()
    m.set_rules(files)
    first = m.rules
    m.set_rules({"x": {"rules": [{"name": "a", "predicate": "deadlock", "value": -0.5}]}})
    assert m.rules is first  # same content: no recompilation
    m.set_rules({"x": {"rules": [{"name": "a", "predicate": "deadlock", "value": -0.4}]}})
    assert m.rules is not first and m.rules[0].value == -0.4


def test_rules_fire_in_a_real_episode():
    from test_users_support import ToyGym, travel_task

    from harness.knobs.snapshot import KnobSnapshot

    base = KnobSnapshot.read_dir(defaults_dir())
    values = {a: dict(v) for a, v in base.values.items()}
    values["env"]["max_steps"] = 3
    values["user"]["volunteer_interval"] = 0
    rules = dict(base.reward_rules)
    rules["extra"] = {
        "rules": [
            {"name": "deadlock", "predicate": "deadlock", "value": -0.5},
            {"name": "repeat_fact", "predicate": "repeated_fact", "value": -0.02},
        ]
    }
    env = ToyGym(
        "travel", travel_task(), knobs=KnobSnapshot(values=values, user_rules=base.user_rules, reward_rules=rules)
    )
    env.reset(seed=0)
    r1 = env.step("ASK: What is your hotel budget?")[1]
    r2 = env.step("ASK: What is your hotel budget?")[1]
    _, r3, _, truncated, info = env.step("not an action")
    assert r1 == pytest.approx(0.05)  # new_fact_disclosed
    assert r2 == pytest.approx(-0.05 - 0.02)  # repeated_question + repeated_fact
    assert r3 == pytest.approx(-0.1 - 0.5) and truncated and info["deadlock"]  # format_error + deadlock
    assert info["turn"]["reward_breakdown"]["rules"] == {"format_error": -0.1, "deadlock": -0.5}
