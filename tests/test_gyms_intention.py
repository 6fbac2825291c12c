"""intention gym: request templates, detail coverage rewards, the several-at-once discount, success."""

from __future__ import annotations

import json

import pytest
from gyms_support import env_of, knobs, step

from harness.envs.base import split_of
from harness.envs.intention import IMPORTANCE_VALUE, REQUESTS, covered_share, make_task
from harness.types import UserReply


def _key(task) -> str:
    return json.dumps({"request": task.data["request"], "details": task.data["details"]}, sort_keys=True)


def test_request_pool():
    assert len(REQUESTS) >= 30 and len({r.name for r in REQUESTS}) == len(REQUESTS)
    for req in REQUESTS:
        names = [d.name for d in req.details]
        assert len(names) == len(set(names)) >= 6, req.name
        for d in req.details:
            assert d.importance in (1, 2, 3) and d.keywords and d.values and "{v}" in d.text, (req.name, d.name)


def test_tasks_are_deterministic_and_splits_disjoint():
    assert make_task("train", 12).facts == make_task("train", 12).facts
    train = {_key(make_task("train", i)) for i in range(300)}
    evals = {_key(make_task("eval", i)) for i in range(300)}
    assert not train & evals and len(train) > 250 and len(evals) > 250
    assert all(split_of(k) == "eval" for k in evals)
    for i in range(100):
        task = make_task("train", i)
        assert 3 <= len(task.facts) <= 6
        assert all(f.kind == "detail" and f.importance in (1, 2, 3) for f in task.facts)
        assert all(f.text not in task.prompt for f in task.facts)


def _env(**areas):
    env = env_of("intention", **areas)
    env.reset(seed=0, options={"task_index": 3})
    return env


def test_each_new_detail_earns_its_importance_value_once():
    env = _env(user={"volunteer_interval": 0})
    fact = min(env.task.facts, key=lambda f: f.importance)
    obs, rec, _ = step(env, f"ASK: What should I know about the {fact.keywords[0]}?")
    assert fact.text in obs and rec.reward_breakdown["task"] == pytest.approx(IMPORTANCE_VALUE[fact.importance])
    assert "detail_covered" in rec.events and env.covered == {fact.key}
    _, rec, _ = step(env, f"ASK: What should I know about the {fact.keywords[0]}?")
    assert rec.reward_breakdown["task"] == 0.0 and "repeat_fact" in rec.events


def test_one_question_covering_several_details_is_discounted():
    env = _env()
    f1, f2 = env.task.facts[:2]
    reward, events = env.on_ask("both at once", UserReply("...", [f1, f2]))
    expected = (IMPORTANCE_VALUE[f1.importance] + IMPORTANCE_VALUE[f2.importance]) / 2
    assert reward == pytest.approx(expected) and "multi_detail_question" in events
    assert env.on_ask("again", UserReply("...", [f1, f2])) == (0.0, [])


def test_volunteered_details_do_not_count_as_covered():
    env = _env(user={"volunteer_interval": 1})
    _, rec, _ = step(env, "ASK: Is the sky blue today?")
    assert rec.user_reply is not None and rec.user_reply.flags.get("volunteered")
    assert env.state.revealed and not env.covered and rec.reward_breakdown["task"] == 0.0


def test_success_threshold_and_its_timing():
    env = _env(env={"success_threshold": 0.1}, user={"volunteer_interval": 0})
    fact = max(env.task.facts, key=lambda f: f.importance)
    step(env, f"ASK: What should I know about the {fact.keywords[0]}?")
    share = covered_share(env.task, env.covered)
    assert 0.1 <= share < 0.7
    env.set_knobs(knobs(env={"success_threshold": 0.9}))  # not for this episode
    obs, rec, _ = step(env, "ANSWER: A plan based on what you said.")
    assert env.state.success is True and rec.answer["details"]["threshold"] == 0.1 and "share" in obs
    env.reset(seed=0, options={"task_index": 3})
    step(env, f"ASK: What should I know about the {fact.keywords[0]}?")
    step(env, "ANSWER: A plan.")
    assert env.state.success is False and env.state.turns[-1].reward_breakdown["task"] == 0.0


def test_score_can_exceed_one_and_malformed_turns_are_fed_back():
    env = _env(user={"volunteer_interval": 0})
    for f in env.task.facts:
        step(env, f"ASK: What should I know about the {' '.join(f.keywords[:2])}?")
    assert env.state.task_score == pytest.approx(sum(IMPORTANCE_VALUE[f.importance] for f in env.task.facts))
    assert env.state.task_score > 1.0
    _, rec, info = step(env, "I think we are done")
    assert info["format_error"] == "no_action_tag" and "format_error" in rec.events and not env.state.done
