"""The τ² LLM customer through the existing OpenAI-compatible backend (a loopback server): its
instructions, τ²'s stop tokens, and telecom's device actions run on the customer's own database."""

from __future__ import annotations

from tau2_support import need_tau2, reset_on

need_tau2()

from gyms_support import knobs  # noqa: E402
from test_users_support import ChatServer  # noqa: E402

from harness.envs.registry import make  # noqa: E402
from harness.envs.tau2 import domain as dom  # noqa: E402
from harness.users import UserFactory  # noqa: E402
from harness.users.backends import OpenAIChatBackend  # noqa: E402


def llm_env(gym: str, server: ChatServer):
    backend = OpenAIChatBackend(server.base_url, "m", timeout_s=5)
    return make(gym, knobs=knobs(user={"user_strategy_mix": 0.0}), user_factory=UserFactory(backend))


def test_llm_customer_gets_the_scenario_and_ends_with_taus_stop_token():
    replies = iter(["My zip code is 28236.", "Thanks, that's all. ###STOP###"])
    with ChatServer(lambda req: next(replies)) as srv:
        env = llm_env("tau2_retail", srv)
        _, info = reset_on(env, "5")
        assert info["arm"] == "llm"
        obs, _, terminated, _, _ = env.step("What is your zip code?")
        assert obs == "My zip code is 28236." and not terminated
        system = srv.requests[0]["body"]["messages"][0]["content"]
        assert "###STOP###" in system and "mei_kovacs_8020" in system and "do not know" in system.lower()
        assert "email" in system  # the unknown info is named as unknown
        obs, _, terminated, _, _ = env.step("Your return is processed.")
        assert terminated and env.end == "user_stop" and "###STOP###" not in obs


def test_llm_customer_runs_its_phone_tools_in_telecom():
    def reply(req):
        last = req["messages"][-1]["content"]
        if last.startswith("[your phone]"):
            return "I turned it off; the phone says airplane mode is off now."
        return 'CALL: {"name": "toggle_airplane_mode", "arguments": {}}'

    with ChatServer(reply) as srv:
        env = llm_env("tau2_telecom", srv)
        reset_on(env, dom.split_ids("telecom")["train"][0])
        assert env.world_env.user_tools.db.device.airplane_mode is True
        obs, _, _, _, info = env.step("Please turn off airplane mode.")
        assert "off now" in obs and env.world_env.user_tools.db.device.airplane_mode is False
        assert (
            env.calls[-1].requestor == "user"
            and info["turn"]["user_reply"]["flags"]["user_tools"][0]["tool"] == "toggle_airplane_mode"
        )
        assert "toggle_airplane_mode" in srv.requests[0]["body"]["messages"][0]["content"]
