"""travel gym: task generation, options, search, elicitation, scoring and knob timing."""

from __future__ import annotations

import json

import pytest
from gyms_support import env_of, knobs, step

from harness.envs.base import split_of
from harness.envs.travel import ASPECTS, make_task, option_complies, score_answer


def _content_key(task) -> str:
    return json.dumps(task.data["content"], sort_keys=True)


def test_same_index_same_task_and_reset_seed_is_deterministic():
    a, b = make_task("train", 7, 3, 2), make_task("train", 7, 3, 2)
    assert a.task_id == b.task_id and a.facts == b.facts and a.data == b.data
    env1, env2 = env_of("travel"), env_of("travel")
    assert env1.reset(seed=11)[0] == env2.reset(seed=11)[0]
    assert env1.task.data == env2.task.data


def test_splits_are_disjoint_and_content_decides_the_split():
    train = {_content_key(make_task("train", i, 3, 2)) for i in range(300)}
    evals = {_content_key(make_task("eval", i, 3, 2)) for i in range(300)}
    assert not train & evals
    assert all(split_of(k) == "train" for k in train) and all(split_of(k) == "eval" for k in evals)
    assert len(train) > 250 and len(evals) > 250  # the generator has far more than a few tasks


@pytest.mark.parametrize("noise,wrong", [(0, 0), (3, 2), (7, 9), (30, 30)])
def test_options_have_one_best_noise_and_wrong(noise, wrong):
    for i in range(40):
        task = make_task("train", i, noise, wrong)
        prefs = task.data["content"]["prefs"]
        for aspect, opts in task.data["options"].items():
            asp = ASPECTS[aspect]
            assert len(opts) == 1 + noise + wrong
            assert len({o["id"] for o in opts}) == len(opts) and all(o["id"][0] == asp.prefix for o in opts)
            ok = [o for o in opts if option_complies(asp, prefs[aspect], o)]
            best = next(o for o in opts if o["id"] == task.data["best"][aspect])
            assert len(ok) == 1 + noise
            assert best in ok and all(o["price"] > best["price"] for o in ok if o is not best)
            assert all(len(asp.attributes) >= 3 for asp in ASPECTS.values())
        assert 1 <= len(task.data["content"]["aspects"]) <= 3
        assert all(f.kind == "preference" for f in task.facts)
        assert task.secret not in task.prompt


def _multi_aspect_task():
    return next(t for t in (make_task("train", i, 3, 2) for i in range(100)) if len(t.data["content"]["aspects"]) == 2)


def test_scoring_best_compliant_wrong_and_malformed_answers():
    task = _multi_aspect_task()
    a1, a2 = task.data["content"]["aspects"]
    best = task.data["best"]
    prefs = task.data["content"]["prefs"]

    def pick(aspect, compliant):
        asp = ASPECTS[aspect]
        return next(
            o["id"]
            for o in task.data["options"][aspect]
            if o["id"] != best[aspect] and option_complies(asp, prefs[aspect], o) == compliant
        )

    res = score_answer(task, f"{best[a1]}, {best[a2]}")
    assert (res.task_reward, res.success, res.terminal) == (1.0, True, True)
    res = score_answer(task, f"I'd book {best[a1].lower()} and {pick(a2, True)}.")
    assert res.task_reward == pytest.approx(0.9) and res.success is False
    res = score_answer(task, f"{pick(a1, False)} {pick(a2, True)}")
    assert res.task_reward == pytest.approx(0.4)
    assert score_answer(task, f"{best[a1]}").task_reward == pytest.approx(0.5)  # an aspect left out scores 0
    both = f"{best[a1]} or {pick(a1, True)}, {best[a2]}"
    assert score_answer(task, both).task_reward == pytest.approx(0.5)  # two ids for one aspect: 0 for it
    res = score_answer(task, "no idea")
    assert res.task_reward == 0.0 and res.terminal and "no option named" in res.feedback


def test_search_lists_named_aspects_and_helps_on_unknown_queries():
    env = env_of("travel", env={"search_failure_interval": 50})
    env.reset(seed=0, options={"task": _multi_aspect_task()})
    a1, a2 = env.task.data["content"]["aspects"]
    obs, rec, _ = step(env, f"SEARCH: {ASPECTS[a1].synonyms[1]}")
    assert rec.tool["ok"] and all(o["id"] in obs for o in env.task.data["options"][a1])
    obs, rec, _ = step(env, "SEARCH: something nice")
    assert rec.tool["ok"] and "Name a part of the trip" in obs and a1 in obs and a2 in obs
    missing = next(a for a in ASPECTS if a not in (a1, a2))
    obs, _, _ = step(env, f"SEARCH: {missing}")
    assert f"This trip has no {missing}" in obs


def test_every_nth_search_fails_and_the_knob_applies_at_the_next_reset():
    env = env_of("travel", env={"search_failure_interval": 2})
    env.reset(seed=3)
    aspect = env.task.data["content"]["aspects"][0]
    oks = []
    for _ in range(4):
        _, rec, _ = step(env, f"SEARCH: {aspect}")
        oks.append(rec.tool["ok"])
        if not rec.tool["ok"]:
            assert "tool_failure" in rec.events and "no results" in rec.observation
    assert oks == [True, False, True, False]
    env.set_knobs(knobs(env={"search_failure_interval": 1}))
    _, rec, _ = step(env, f"SEARCH: {aspect}")
    assert rec.tool["ok"]  # 5th search: still the episode's interval 2
    env.reset(seed=3)
    _, rec, _ = step(env, f"SEARCH: {aspect}")
    assert not rec.tool["ok"]  # interval 1 from the new episode on


def test_noise_and_wrong_numbers_change_options_at_next_reset_only():
    env = env_of("travel")
    env.reset(seed=5, options={"task_index": 4})
    before = {a: len(o) for a, o in env.task.data["options"].items()}
    assert all(n == 1 + 3 + 2 for n in before.values())
    env.set_knobs(knobs(env={"noise_choice_number": 6, "wrong_choice_number": 0}))
    assert {a: len(o) for a, o in env.task.data["options"].items()} == before
    env.reset(seed=5, options={"task_index": 4})
    assert all(len(o) == 7 for o in env.task.data["options"].values())
    assert env.task.task_id == make_task("train", 4, 3, 2).task_id  # same content, other options


def test_elicitation_volunteers_a_preference_with_consistent_accounting():
    # volunteer_interval 0 isolates the gym's elicitation from the user's own volunteering.
    env = env_of(
        "travel", env={"elicitation_interval": 2, "search_failure_interval": 50}, user={"volunteer_interval": 0}
    )
    env.reset(seed=1)
    aspect = env.task.data["content"]["aspects"][0]
    _, rec, _ = step(env, f"SEARCH: {aspect}")
    assert "new_fact" not in rec.events and env.state.disclosures == 0
    obs, rec, _ = step(env, f"SEARCH: {aspect}")
    first = env.task.facts[0]
    assert first.text in obs and "elicitation" in rec.events and "new_fact" in rec.events
    assert env.state.revealed == {first.key: 1} and env.state.disclosures == 1
    assert env.state.turns_since_disclosure == 0
    assert rec.user_reply is not None and rec.user_reply.revealed == [first]
    assert rec.reward_breakdown["rules"].get("new_fact_disclosed", 0) > 0


def test_elicitation_obeys_interval_reveal_kinds_and_max_reveals():
    def volunteered(**areas) -> int:
        env = env_of("travel", **areas)
        env.reset(seed=1)
        for _ in range(6):
            step(env, "SEARCH: nothing")
        return sum("elicitation" in t.events for t in env.state.turns)

    base = {"search_failure_interval": 50}
    env = env_of("travel", env={**base, "elicitation_interval": 20}, user={"volunteer_interval": 0})
    env.reset(seed=1)
    env.set_knobs(knobs(env={**base, "elicitation_interval": 1}, user={"volunteer_interval": 0}))
    step(env, "SEARCH: nothing")
    step(env, "SEARCH: nothing")
    assert env.state.disclosures == 0  # the episode keeps interval 20
    assert volunteered(env={**base, "elicitation_interval": 3}, user={"volunteer_interval": 0}) >= 1
    assert volunteered(env={**base, "elicitation_interval": 20}, user={"volunteer_interval": 0}) == 0
    assert (
        volunteered(env={**base, "elicitation_interval": 1}, user={"volunteer_interval": 0, "reveal_kinds": ["detail"]})
        == 0
    )
    assert volunteered(env={**base, "elicitation_interval": 1}, user={"volunteer_interval": 0, "max_reveals": 0}) == 0


def test_asking_reveals_preferences_and_malformed_turns_do_not_raise():
    env = env_of("travel")
    env.reset(seed=2)
    fact = env.task.facts[0]
    aspect = fact.key.split(".")[1]
    obs, rec, _ = step(env, f"ASK: Do you have a preference for the {aspect} {fact.keywords[1]}?")
    assert fact.text in obs and rec.user_reply.revealed[0].key == fact.key
    for bad in ("hello there", "", "ASK:", '<tool_call>{"name": "x"}'):
        obs, rec, _ = step(env, bad)
        assert "format_error" in rec.events and obs.startswith("Format error")
        assert rec.reward_breakdown["rules"]["format_error"] < 0
    assert env.state.format_errors == 4 and not env.state.done
