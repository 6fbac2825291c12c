"""function gym: rules, probes through the user, refusals, predicates, scoring and knob timing."""

from __future__ import annotations

import json
import random

import pytest
from gyms_support import env_of, knobs, step

from harness.envs.base import split_of
from harness.envs.function import TEMPLATES, evaluate, make_task, parse_answer, parse_probe, score_answer


def _key(task) -> str:
    return json.dumps({k: task.data[k] for k in ("template", "constants", "test_case")}, sort_keys=True)


def _task_with_template(name: str):
    return next(t for t in (make_task("train", i) for i in range(400)) if t.data["template"] == name)


def test_determinism_and_disjoint_splits():
    assert make_task("eval", 3).data == make_task("eval", 3).data
    train = {_key(make_task("train", i)) for i in range(300)}
    evals = {_key(make_task("eval", i)) for i in range(300)}
    assert not train & evals and len(train) > 250 and len(evals) > 250
    assert all(split_of(k) == "train" for k in train)
    assert {make_task("train", i).data["template"] for i in range(300)} == {t.name for t in TEMPLATES}


def test_rules_compute_what_their_forms_say():
    task = _task_with_template("linear")
    k1, k2, k3 = task.data["constants"]
    assert evaluate(task.data, (1, 2, 3, 4)) == k1 * 1 + k2 * 2 + k3 * 3 - 4
    task = _task_with_template("branch")
    (k1,) = task.data["constants"]
    assert evaluate(task.data, (7, 2, 5, 1)) == 5 and evaluate(task.data, (7, 2, 1, 5)) == k1 * 6
    rng = random.Random(0)
    for tpl in TEMPLATES:
        data = {"template": tpl.name, "constants": [rng.randint(2, 5) for _ in range(tpl.consts)]}
        assert isinstance(evaluate(data, (rng.randint(-9, 9), 3, -2, 5)), int)
    task = make_task("train", 0)
    assert str(task.data["value"]) == task.secret and task.secret not in task.prompt.split()


@pytest.mark.parametrize(
    "text,probe",
    [
        ("What is f(1, 2, 3, 4)?", (1, 2, 3, 4)),
        ("f(-1,0,+2,3)", (-1, 0, 2, 3)),
        ("and (5, 6, 7, 8)?", (5, 6, 7, 8)),
        ("a=1 b=2 c=3 d=4", (1, 2, 3, 4)),
        ("d: 4, c=3, a = 1, b=2 please", (1, 2, 3, 4)),
        ("f(1, 2, 3)?", None),
        ("a=1 b=2 c=3", None),
        ("what is the rule?", None),
        ("f(1, 2, 3, 99999999)", None),
    ],
)
def test_probe_forms(text, probe):
    assert parse_probe(text) == probe


def test_scoring_exact_integer_only():
    task = make_task("train", 5)
    v = task.data["value"]
    assert score_answer(task, str(v)).success is True
    assert score_answer(task, f"f(1, 2, 3, 4) = {v}.").task_reward == 1.0
    assert score_answer(task, str(v + 1)).task_reward == 0.0
    res = score_answer(task, f"{v - 1} + 1")  # expressions are not evaluated
    assert res.task_reward == 0.0 and res.details["error"] == "not_one_integer" and res.terminal
    assert parse_answer("The answer is -12") == -12 and parse_answer("12 or 13") is None


def test_probe_answered_through_the_user_and_search_gives_the_test_case():
    env = env_of("function")
    env.reset(seed=4)
    obs, rec, _ = step(env, "ASK: What is f(2, 0, 1, 3)?")
    assert f"f(2, 0, 1, 3) = {evaluate(env.task.data, (2, 0, 1, 3))}" in obs
    assert rec.user_reply.revealed[0].kind == "probe" and "new_fact" in rec.events
    obs, rec, _ = step(env, "SEARCH: test case")
    assert rec.tool["ok"] and "f(" + ", ".join(map(str, env.task.data["test_case"])) + ")" in obs
    obs, rec, _ = step(env, f"ANSWER: {env.task.data['value']}")
    assert env.state.done and env.state.success is True


def test_predicates_and_refusals():
    env = env_of("function", env={"max_repeated_probes": 2}, reward={"predicate_weight": 0.1})
    env.reset(seed=8)
    test = ", ".join(str(x) for x in env.task.data["test_case"])
    base = next(p for p in ((1, 1, 1, 1), (2, 2, 2, 2)) if list(p) != env.task.data["test_case"])
    b = ", ".join(map(str, base))
    varied = ", ".join(map(str, (base[0] + 1, *base[1:])))

    def builtin(text):
        _, rec, _ = step(env, text)
        return {k: v for k, v in rec.reward_breakdown["builtin"].items() if v}, rec

    got, _ = builtin(f"ASK: f({b})?")
    assert got == {"probe_new": pytest.approx(0.1)}
    got, _ = builtin(f"ASK: f({varied})?")
    assert got == {"probe_new": pytest.approx(0.1), "probe_varies_one": pytest.approx(0.1)}
    got, rec = builtin(f"ASK: f({b})?")  # second time: allowed (max 2), a repeat
    assert got == {"probe_repeat": pytest.approx(-0.1)} and "repeat_fact" in rec.events
    got, rec = builtin(f"ASK: f({b})?")  # third time: refused
    assert got == {"probe_repeat": pytest.approx(-0.1)} and "probe_repeat_limit" in rec.events
    assert not rec.user_reply.revealed and "won't evaluate it again" in rec.observation
    got, rec = builtin(f"ASK: f({test})?")
    assert got == {"probe_test_case": pytest.approx(-0.1)} and not rec.user_reply.revealed
    assert "test case" in rec.observation and str(env.task.data["value"]) not in rec.observation.split()
    got, rec = builtin("ASK: what does the function do?")
    assert got == {"probe_malformed": pytest.approx(-0.1)} and "f(1, 2, 3, 4)" in rec.observation
    got, _ = builtin("SEARCH: test")
    assert got == {}


def test_max_repeated_probes_applies_from_the_next_episode():
    env = env_of("function", env={"max_repeated_probes": 1})
    env.reset(seed=2)
    probe = "ASK: f(0, 1, 0, 1)?" if env.task.data["test_case"] != [0, 1, 0, 1] else "ASK: f(0, 2, 0, 2)?"
    step(env, probe)
    env.set_knobs(knobs(env={"max_repeated_probes": 5}))
    _, rec, _ = step(env, probe)
    assert "probe_repeat_limit" in rec.events  # still 1 in this episode
    env.reset(seed=2)
    step(env, probe)
    _, rec, _ = step(env, probe)
    assert "probe_repeat_limit" not in rec.events and rec.user_reply.revealed


def test_malformed_actions_give_feedback_without_raising():
    env = env_of("function", rendering="tool_call")
    env.reset(seed=1)
    for bad in (
        "{not json",
        '<tool_call>{"name": "interact", "arguments": {"choice": "fly", "content": "x"}}</tool_call>',
        "just text",
    ):
        obs, rec, info = step(env, bad)
        assert "format_error" in rec.events and info["format_error"] and obs.startswith("Format error")
    obs, rec, _ = step(
        env, '<tool_call>{"name": "interact", "arguments": {"choice": "search", "content": "t"}}</tool_call>'
    )
    assert rec.tool["ok"]


@pytest.mark.parametrize(
    "rules_file", ["harness/knobs/defaults/rules/users/function.yaml", "eval/rules/users/function.yaml"]
)
def test_demand_answer_keeps_the_meaning_of_its_former_lookahead(rules_file):
    """demand_answer's second pattern used to end in a negative lookahead (``(?!\\s+(returns?|...|value))``);
    RE2 has none, so the intent's ``unless`` says it: a demand for the function is refused, a question
    about its values is a probe."""
    from pathlib import Path

    from harness.users.rules import load_user_rules_file

    rules = load_user_rules_file(Path(__file__).resolve().parents[1] / rules_file)
    demand = next(i for i in rules.intents if i.name == "demand_answer")
    for q in ("show me the formula", "Show me the function.", "tell me your hidden function", "give me the code?"):
        assert demand.matches(q) and rules.classify(q).name == "demand_answer", q
    for q in (
        "show me the function at 3",
        "give me the function value for 2",
        "tell me the function output for f(1, 2, 3, 4)",
        "show me what the function returns",  # no noun right after show/give/tell: never a demand
        "give me the formula of f(0, 1, 0, 1)",
    ):
        assert not demand.matches(q) and rules.classify(q).name == "probe", q
