"""Scripted agents: the oracle solves every gym, the random agent rarely does, no counter deadlock."""

from __future__ import annotations

import numpy as np
import pytest
from gyms_support import env_of

from harness.agents.scripted import oracle_action, random_action, run_episode
from harness.envs.actions import parse_action

GYMS = ("travel", "function", "telepathy", "intention")
# Largest random-agent success rate asserted over 100 episodes (measured over 300: travel 0.03,
# intention 0.013, function and telepathy 0.007).
# travel's bound is the loosest: a random answer can hit the best option of a one-aspect trip (1 in 6).
RANDOM_BOUND = {"travel": 0.12, "function": 0.05, "telepathy": 0.03, "intention": 0.05}


@pytest.mark.parametrize("gym", GYMS)
def test_oracle_solves_at_least_95_percent(gym):
    env = env_of(gym)
    records = [run_episode(env, "oracle", seed) for seed in range(50)]
    assert np.mean([r["success"] for r in records]) >= 0.95
    assert all(r["answered"] and not r["deadlock"] and r["format_errors"] == 0 for r in records)
    assert all(r["questions"] >= 1 for r in records)  # it elicits; it does not just answer


@pytest.mark.parametrize("gym", GYMS)
def test_random_agent_rarely_succeeds(gym):
    env = env_of(gym)
    rate = np.mean([run_episode(env, "random", seed)["success"] for seed in range(100)])
    assert rate <= RANDOM_BOUND[gym]


@pytest.mark.parametrize("gym", GYMS)
def test_min_questions_equal_to_max_steps_does_not_deadlock(gym):
    env = env_of(gym, env={"min_questions": 3, "max_steps": 3})
    for seed in range(10):
        rec = run_episode(env, "oracle", seed)
        assert rec["answered"] and not rec["deadlock"] and rec["num_turns"] == 3 and rec["questions"] == 2
        early = [t for t in rec["turns"] if "early_answer" in t["events"]]
        assert not early


@pytest.mark.parametrize("gym", GYMS)
def test_oracle_answers_within_tight_budgets(gym):
    env = env_of(gym, env={"max_steps": 4}, user={"max_reveals": 1})
    for seed in range(10):
        rec = run_episode(env, "oracle", seed)
        assert rec["answered"] and rec["num_turns"] <= 4 and rec["disclosures"] <= 1


@pytest.mark.parametrize("gym", GYMS)
def test_oracle_turns_are_clean_demonstrations_in_both_renderings(gym):
    for rendering in ("tagged", "tool_call"):
        env = env_of(gym, rendering=rendering)
        env.reset(seed=7)
        while not env.state.done:
            text = oracle_action(env)
            act = parse_action(text, env.allowed_choices, rendering)
            assert act.format_error is None and act.rendering == rendering
            if act.choice != "answer":
                assert "\n" not in text and len(text) < 200
            env.step(text)
        assert env.state.success is True


@pytest.mark.parametrize("gym", GYMS)
def test_episodes_are_deterministic_per_seed(gym):
    env = env_of(gym)
    for policy in ("oracle", "random"):
        a, b = run_episode(env, policy, 3), run_episode(env, policy, 3)
        assert a["turns"] == b["turns"] and a["task"] == b["task"]


def test_random_action_draws_allowed_choices_from_the_vocabulary():
    env = env_of("telepathy")
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    choices = {parse_action(random_action(env, rng), env.allowed_choices).choice for _ in range(50)}
    assert choices == {"ask", "answer"}


def test_bad_policy_and_missing_reset_are_clear_errors():
    env = env_of("travel")
    with pytest.raises(RuntimeError, match="reset"):
        oracle_action(env)
    with pytest.raises(ValueError, match="oracle, public, random"):
        run_episode(env, "clever", 0)


@pytest.mark.parametrize("gym", GYMS)
def test_prompts_never_carry_the_answer(gym):
    from harness.users.leakguard import LeakGuard

    env = env_of(gym)
    for seed in range(60):
        obs, info = env.reset(seed=seed)
        guard = LeakGuard(env.task.secret)
        assert not guard.leaks(obs) and not guard.leaks(info["system_prompt"]), (seed, env.task.secret)


@pytest.mark.parametrize("gym", ("intention", "function", "travel"))
def test_oracle_does_not_nag_a_user_who_discloses_nothing(gym):
    # reveal_kinds without this gym's kind: the user never discloses; the oracle asks each thing once.
    env = env_of(gym, user={"reveal_kinds": ["constant"], "volunteer_interval": 0}, env={"elicitation_interval": 20})
    for seed in range(5):
        rec = run_episode(env, "oracle", seed)
        assert rec["answered"] and rec["disclosures"] == 0 and rec["num_turns"] < 16
        assert not any("repeated_question" in t["events"] for t in rec["turns"])


@pytest.mark.parametrize("gym", GYMS)
def test_max_steps_change_applies_from_the_next_episode(gym):
    from gyms_support import knobs

    env = env_of(gym, env={"max_steps": 16})
    env.reset(seed=0)
    env.set_knobs(knobs(env={"max_steps": 3}))
    for _ in range(4):
        env.step("not an action")
    assert not env.state.done and env.state.turn == 4  # this episode keeps 16
    env.reset(seed=0)
    for _ in range(3):
        env.step("not an action")
    assert env.state.done and env.state.truncated and "deadlock" in env.state.turns[-1].events


def test_public_planner_solves_intention_without_reading_hidden_facts():
    from harness.agents.scripted import public_action

    env = env_of("intention", env={"max_steps": 8})
    records = [run_episode(env, "public", seed) for seed in range(50)]
    assert np.mean([r["success"] for r in records]) >= 0.95  # six details at most: all fit in 8 turns
    assert all(r["answered"] and r["format_errors"] == 0 for r in records)
    # it asks about details that are not hidden too (it cannot tell), so it asks more than the oracle
    oracle = [run_episode(env, "oracle", seed) for seed in range(50)]
    assert np.mean([r["questions"] for r in records]) > np.mean([r["questions"] for r in oracle])
    # its first question depends on the request only: tasks of the same request, different hidden details
    firsts: dict[str, set[str]] = {}
    for seed in range(60):
        env.reset(seed=seed)
        firsts.setdefault(env.task.data["request"], set()).add(public_action(env))
    assert len(firsts) >= 10 and all(len(v) == 1 for v in firsts.values())
    with pytest.raises(ValueError, match="no public planner for gym 'travel'"):
        env_t = env_of("travel")
        env_t.reset(seed=0)
        public_action(env_t)


def test_impatient_planner_gives_up_at_a_random_turn_with_its_own_answer():
    from harness.agents.scripted import impatient, public_action

    env = env_of("intention", env={"max_steps": 8})
    full = [run_episode(env, "public", seed) for seed in range(40)]
    # give_up 0 is the planner itself, turn for turn
    same = [run_episode(env, impatient(public_action, 0.0, np.random.default_rng(0)), seed) for seed in range(40)]
    assert [[t["action"]["raw"] for t in r["turns"]] for r in same] == [
        [t["action"]["raw"] for t in r["turns"]] for r in full
    ]
    # give_up 1 answers at the first turn, with the planner's answer for a user who said nothing
    first = run_episode(env, impatient(public_action, 1.0, np.random.default_rng(0)), 3)
    assert first["num_turns"] == 1 and first["answered"] and first["questions"] == 0
    assert first["turns"][0]["action"]["raw"] == "ANSWER: Here is the plan, based on what you told me: a standard plan."
    assert env.env_knobs["max_steps"] == 8  # the budget the planner was shown for one turn is put back
    # in between: the questions asked are a prefix of the planner's, then an answer; fewer turns and successes
    rng = np.random.default_rng(1)
    some = [run_episode(env, impatient(public_action, 0.3, rng), seed) for seed in range(40)]
    for r, f in zip(some, full):
        asks = [t["action"]["raw"] for t in r["turns"] if t["action"]["raw"].startswith("ASK:")]
        assert asks == [t["action"]["raw"] for t in f["turns"]][: len(asks)]
        assert r["answered"] and r["turns"][-1]["action"]["raw"].startswith("ANSWER:")
    assert np.mean([r["num_turns"] for r in some]) < np.mean([r["num_turns"] for r in full]) - 1
    assert 0.05 < np.mean([r["success"] for r in some]) < 0.9
    with pytest.raises(ValueError, match=r"give_up must be a probability in \[0, 1\]; got 1.5"):
        impatient(public_action, 1.5, rng)
