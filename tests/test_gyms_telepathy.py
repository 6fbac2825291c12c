"""telepathy gym: the knowledge base (size, consistency, discrimination), questions, guesses."""

from __future__ import annotations

from collections import Counter

import pytest
from gyms_support import env_of, step

from harness.envs.telepathy import entities_of, make_task, score_answer
from harness.envs.telepathy_kb import MAYBE, NO, YES, load_kb, normalise
from harness.users.leakguard import LeakGuard

KB = load_kb()


def _with(attr: str, value: str = YES):
    return [e for e in KB.entities if e.values[attr] == value]


def test_knowledge_base_size_and_attribute_coverage():
    assert len(KB.entities) >= 200 and len(KB.attributes) >= 15
    assert len({e.category for e in KB.entities}) >= 6
    for e in KB.entities:
        assert set(e.values) == set(KB.attributes)
        assert all(v in (YES, NO, MAYBE) for v in e.values.values())
        assert sum(v != NO for v in e.values.values()) >= 5, e.name  # a profile, not a blank


def test_every_entity_has_a_distinct_profile():
    profiles = Counter(tuple(e.values.values()) for e in KB.entities)
    assert max(profiles.values()) == 1


def test_attributes_are_consistent():
    for e in _with("bird"):
        assert e.values["feathers"] == YES and e.values["eggs"] == YES and e.values["animal"] == YES, e.name
    for e in _with("fish"):
        assert e.values["water"] == YES and e.values["legs"] == NO, e.name
    for e in _with("mammal"):
        assert e.values["eggs"] == NO or e.name == "platypus", e.name
    for e in _with("insect"):
        assert e.values["small"] == YES and e.values["legs"] == YES, e.name
    for e in _with("four_legs"):
        assert e.values["legs"] == YES, e.name
    for e in KB.entities:
        living = e.category in ("animal", "plant", "person")
        assert (e.values["alive"] == YES) == living, e.name
        for category in ("animal", "plant", "food", "place", "person", "vehicle", "instrument"):
            # A category attribute is yes exactly for its own category (an animal may be food: maybe).
            assert (e.values[category] == YES) == (e.category == category), (e.name, category)
        assert (e.values["object"] == YES) == (e.category in ("object", "vehicle", "instrument")), e.name
        if e.category == "place":
            assert e.values["big"] == YES and e.values["small"] == NO, e.name
        if e.values["big"] == YES:
            assert e.values["small"] == NO, e.name


def test_questions_map_to_attributes_and_names_are_not_properties():
    for attr in KB.attributes.values():
        assert KB.attributes_in(attr.question) == [attr], attr.name
    names = lambda q: [a.name for a in KB.attributes_in(q)]  # noqa: E731
    assert names("Does it eat meat?") == ["carnivore"]
    assert names("Does it lay eggs?") == ["eggs"] and names("Is it made of glass?") == ["glass"]
    assert names("Is it bigger than a car?") == ["big"]
    assert names("Is it a polar bear?") == []  # a guess, not a property ("polar" is not asked)
    assert names("Can it fly and does it have feathers?") == ["fly", "feathers"]


def test_no_answer_statement_leaks_an_entity_name():
    for e in KB.entities:
        guard = LeakGuard(e.name)
        for a, v in e.values.items():
            assert not guard.leaks(KB.attributes[a].statement(v)), (e.name, a)


def test_splits_are_disjoint_by_entity_and_tasks_are_deterministic():
    train, evals = {e.name for e in entities_of("train")}, {e.name for e in entities_of("eval")}
    assert train and evals and not train & evals and len(train) + len(evals) == len(KB.entities)
    assert {make_task("eval", i).secret for i in range(200)} <= evals
    assert make_task("train", 9).secret == make_task("train", 9).secret
    env1, env2 = env_of("telepathy"), env_of("telepathy")
    env1.reset(seed=3)
    env2.reset(seed=3)
    assert env1.task.secret == env2.task.secret and env1.task.secret not in env1.task.prompt


@pytest.mark.parametrize(
    "answer,ok",
    [
        ("dog", True),
        ("Dogs", True),
        ("a dog", True),
        ("It's a dog!", True),
        ("THE DOG.", True),
        ("dog or cat", False),
        ("cat", False),
        ("a unicorn", False),
        ("", False),
    ],
)
def test_answer_normalisation(answer, ok):
    task = next(t for t in (make_task(s, i) for s in ("train", "eval") for i in range(400)) if t.secret == "dog")
    res = score_answer(task, answer)
    assert res.success is ok and res.terminal and res.task_reward == (1.0 if ok else 0.0)


def test_aliases_and_plurals_name_the_same_entity():
    assert KB.entity("bunnies").name == "rabbit" and KB.entity("Strawberries").name == "strawberry"
    assert KB.entity("the Pyramids").name == "Pyramids of Giza" and normalise("Knives") == ("knife",)
    with pytest.raises(KeyError, match="unknown entity"):
        KB.entity("dragon")


def test_questions_are_answered_yes_no_maybe_through_the_user():
    env = env_of("telepathy")
    env.reset(seed=0)
    ent = KB.entity(env.task.secret)
    obs, rec, _ = step(env, "ASK: Is it alive?")
    expect = KB.attributes["alive"].statement(ent.values["alive"])
    assert expect in obs and rec.user_reply.revealed[0].key == "attr.alive"
    obs, rec, _ = step(env, "ASK: Is it a penguin?" if ent.name != "penguin" else "ASK: Is it a dog?")
    assert not rec.user_reply.revealed and "guess_as_question" in rec.events and "use ANSWER" in obs
    obs, rec, _ = step(env, "ASK: How are you feeling today?")
    assert not rec.user_reply.revealed and "unknown_property" in rec.events and "Can it fly?" in obs
    obs, rec, _ = step(env, "SEARCH: what is it")  # search is not a telepathy choice
    assert "format_error" in rec.events and "choice_not_allowed" in obs
    obs, rec, _ = step(env, f"ANSWER: {ent.name}")
    assert env.state.done and env.state.success is True and rec.reward_breakdown["task"] == 1.0


def test_one_guess_ends_the_episode():
    env = env_of("telepathy")
    env.reset(seed=1)
    wrong = "dog" if env.task.secret != "dog" else "cat"
    _, _, terminated, truncated, info = env.step(f"ANSWER: {wrong}")
    assert terminated and not truncated and info["success"] is False
    with pytest.raises(RuntimeError):
        env.step("ANSWER: anything")
