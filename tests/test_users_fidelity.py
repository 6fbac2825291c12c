"""The verifier of user replies for gyms with hidden facts (harness/users/fidelity.py; travel and
intention's ``check_reply``): a reply stating a value the task rules out is flagged, an honest one
never, and the flag reaches the trajectory as the reply's ``check`` flag."""

from __future__ import annotations

import re

import pytest
from gyms_support import env_of, step
from test_users_support import ChatServer

from harness.agents.scripted import run_episode
from harness.envs import intention, travel
from harness.users import UserFactory
from harness.users.backends import OpenAIChatBackend
from harness.users.fidelity import Claim, check_claims

STARS = Claim("pref.hotel.stars", ("stars", "star"), ("4",), ("2", "3"), where=("hotel",))
SLOT = Claim("pref.tour.slot", ("time", "slot"), ("morning",), ("afternoon", "evening"), where=("tour",))
DEPARTURE = Claim("pref.flight.departure", ("departure", "time"), ("evening",), ("morning", "night"), where=("flight",))
POOL = Claim("pref.hotel.pool", ("pool",), ("pool",), need=True, where=("hotel",))


@pytest.mark.parametrize(
    "text,wrong,checked",
    [
        ("At least 3 stars, please.", True, True),
        ("3 or 4 stars is fine.", False, True),  # the task's value is stated too
        ("A 3-day trip.", False, False),  # no word of the fact
        ("For the tour, I want the time to be morning.", False, True),  # not the flight's departure time
        ("For the flight, the departure time should be morning.", True, True),
        ("I don't really need a pool.", True, True),
        ("A pool would be great.", False, True),
    ],
)
def test_check_claims_on_hand_written_replies(text, wrong, checked):
    res = check_claims(text, [STARS, SLOT, DEPARTURE, POOL])
    assert (res.wrong, res.checked) == (wrong, checked)


def test_a_value_of_one_fact_is_not_a_ruled_out_value_of_another():
    home = Claim("detail.home", ("live", "home"), ("small apartment",), ("house",))
    size = Claim("detail.size", ("size", "home"), ("large",), ("small", "medium-sized"))
    assert not check_claims("My home is a small apartment.", [home, size]).wrong
    assert check_claims("My home is small.", [home, size]).wrong


@pytest.mark.parametrize("gym", ["travel", "intention"])
def test_the_symbolic_user_is_never_flagged(gym):
    env = env_of(gym)
    checked = 0
    for seed in range(40):
        for agent in ("oracle", "random"):
            for t in run_episode(env, agent, seed)["turns"]:
                check = ((t.get("user_reply") or {}).get("flags") or {}).get("check")
                checked += check is not None
                assert not (check or {}).get("wrong"), t
    assert checked >= 40


def _liar(gym: str):
    """A user model that states every fact it was told with its value swapped for a ruled-out one."""
    mod = {"travel": travel, "intention": intention}[gym]

    def reply(req):
        system = req["messages"][0]["content"]
        facts = re.findall(r"^- (.+)$", system, re.M)
        return " ".join(facts) or "I don't mind."

    return mod, reply


@pytest.mark.parametrize("gym", ["travel", "intention"])
def test_an_llm_user_stating_wrong_values_is_flagged_on_its_reply(gym):
    """A real OpenAI-compatible endpoint on loopback plays a user who states wrong values."""
    mod, honest = _liar(gym)
    env = env_of(gym, user={"user_strategy_mix": 0.0, "facts_per_reply": 3})
    with ChatServer(honest) as srv:
        env.user_factory = UserFactory(
            OpenAIChatBackend(srv.base_url, "u", api_key="k", timeout_s=5, retry_backoff_s=0.01)
        )
        env.reset(seed=3, options={"task_index": 3})
        claims = {c.key: c for c in mod.claims_of(env.task)}
        _, rec, _ = step(env, "ASK: What matters to you?")
        assert rec.user_reply.flags["check"] == {"wrong": False}  # every fact as told: right
        fact = next(f for f in env.task.facts if f.key in claims and claims[f.key].others)
        wrong = re.sub(re.escape(claims[fact.key].value[0]), claims[fact.key].others[0], fact.text, flags=re.I)
        srv.reply = lambda req: wrong
        _, rec, _ = step(env, "ASK: Tell me more?")
    check = rec.user_reply.flags["check"]
    assert check["wrong"] and check["expected"] == claims[fact.key].value[0] and fact.key in check["why"]
