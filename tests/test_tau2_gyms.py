"""τ² gyms end to end on τ²'s real databases and tools: tool calls, malformed input, the error
limit, dual control, the symbolic customer's behaviour, and the scripted agents."""

from __future__ import annotations

import json

from tau2_support import need_tau2, reset_on

need_tau2()

import pytest  # noqa: E402
from gyms_support import env_of  # noqa: E402

from harness.agents.scripted import run_episode  # noqa: E402
from harness.envs.tau2 import domain as dom  # noqa: E402


def call(name: str, **arguments) -> str:
    return "CALL: " + json.dumps({"name": name, "arguments": arguments})


def test_tool_call_rendering_lists_every_domain_tool_as_a_native_schema():
    env = env_of("tau2_retail", rendering="tool_call")
    _, info = env.reset(seed=0, options={"task_index": 0})
    names = {t["function"]["name"] for t in info["tools"]}
    assert names == set(dom.tool_names("retail")) and "interact" not in names
    assert all(t["type"] == "function" and "parameters" in t["function"] for t in info["tools"])
    assert "<policy>" in info["system_prompt"] and "<tools>" not in info["system_prompt"]
    obs, _, _, _, _ = env.step(
        '<tool_call>{"name": "find_user_id_by_name_zip", "arguments": {"first_name": "Yusuf", "last_name": "Rossi", "zip": "19122"}}</tool_call>'
    )
    assert obs == "yusuf_rossi_9620"
    tagged = env_of("tau2_retail")
    _, info = tagged.reset(seed=0, options={"task_index": 0})
    assert "<tools>" in info["system_prompt"] and "find_user_id_by_name_zip" in info["system_prompt"]


def test_tools_change_the_database_through_tau2():
    env = env_of("tau2_retail")
    reset_on(env, "36")
    before = env.world_env.get_db_hash()
    obs, _, _, _, _ = env.step(call("cancel_pending_order", order_id="#W9348897", reason="no longer needed"))
    assert '"status": "cancelled"' in obs and env.world_env.get_db_hash() != before


@pytest.mark.parametrize(
    "text, error",
    [
        ("CALL: {not json", "not valid JSON"),
        (call("fly_to_the_moon", x=1), "not found"),
        (call("get_order_details", order="#W1"), "unexpected keyword argument"),
        ('CALL: {"name": "get_order_details", "arguments": [1, 2]}', "must be a JSON object"),
        ('CALL: ["get_order_details"]', "a tool call is a JSON object"),
        (call("get_order_details", order_id="#W0000000"), "Order not found"),
    ],
)
def test_malformed_calls_come_back_as_the_tools_error_and_count(text, error):
    env = env_of("tau2_retail")
    env.reset(seed=0, options={"task_index": 0})
    obs, reward, terminated, truncated, info = env.step(text)
    assert obs.startswith("Error") and error in obs
    assert env.errors == 1 and not (terminated or truncated)
    assert info["turn"]["tool"]["ok"] is False and "tool_failure" in info["turn"]["events"]


def test_the_error_limit_ends_the_episode_with_zero():
    env = env_of("tau2_retail", env={"max_tool_errors": 3})
    env.reset(seed=0, options={"task_index": 0})
    for _ in range(3):
        _, reward, terminated, truncated, _ = env.step("CALL: {broken")
    assert terminated and env.end == "too_many_errors" and reward <= 0.0
    rec = env.episode_record()
    assert rec["tau2"]["score"]["reward"] == 0.0 and rec["tau2"]["tool_errors"] == 3 and not rec["success"]


def test_max_steps_and_the_agents_stop():
    env = env_of("tau2_retail", env={"max_steps": 3})
    env.reset(seed=0, options={"task_index": 0})
    for _ in range(3):
        _, _, terminated, truncated, _ = env.step(call("list_all_product_types"))
    assert truncated and env.end == "max_steps" and env.score.reward == 0.0
    env = env_of("tau2_retail")
    env.reset(seed=0, options={"task_index": 0})
    _, _, terminated, _, _ = env.step("Goodbye. ###STOP###")
    assert terminated and env.end == "agent_stop" and env.messages == ["Goodbye."]


def test_empty_turn_is_a_format_error_not_a_tool_error():
    env = env_of("tau2_retail")
    env.reset(seed=0, options={"task_index": 0})
    obs, _, _, _, info = env.step("   ")
    assert info["format_error"] == "empty_turn" and env.errors == 0 and env.state.format_errors == 1


def test_telecom_dual_control_the_customer_runs_its_own_tools():
    env = env_of("tau2_telecom")
    reset_on(env, dom.split_ids("telecom")["train"][0])  # airplane mode is on
    user_db = env.world_env.user_tools.db
    assert user_db.device.airplane_mode is True
    obs, _, _, _, info = env.step("Could you please turn off airplane mode on your phone?")
    assert "Airplane Mode is now OFF" in obs and user_db.device.airplane_mode is False
    assert env.calls[-1].requestor == "user" and env.calls[-1].name == "toggle_airplane_mode"
    assert info["turn"]["user_reply"]["flags"]["user_tools"][0]["tool"] == "toggle_airplane_mode"
    obs, _, _, _, _ = env.step("Please run toggle_roaming {} on your device.")
    assert "Roaming" in obs and env.calls[-1].name == "toggle_roaming"
    obs, _, _, _, _ = env.step("What does your status bar show?")
    assert "Status Bar" in obs or "status" in obs.lower()


def test_telecom_the_agent_can_never_call_a_user_tool():
    env = env_of("tau2_telecom")
    reset_on(env, dom.split_ids("telecom")["train"][0])
    obs, _, _, _, _ = env.step(call("toggle_airplane_mode"))
    assert obs.startswith("Error") and "customer's phone" in obs and env.errors == 1
    assert env.world_env.user_tools.db.device.airplane_mode is True


def test_the_customer_confirms_only_the_wanted_action_and_never_stops_before_the_write():
    env = env_of("tau2_retail")
    reset_on(env, "38")  # wants order #W9348897 cancelled (an id it was never told: it cannot check one)
    wrong = "I will return order #W9348897 for you. Do you confirm (yes/no)?"
    obs, _, _, _, info = env.step(wrong)
    assert info["turn"]["user_reply"]["flags"]["confirmed"] is None and obs.lower().startswith("no")
    right = "I will cancel order #W9348897 (reason: no longer needed). Do you confirm (yes/no)?"
    obs, _, terminated, _, info = env.step(right)
    assert info["turn"]["user_reply"]["flags"]["confirmed"] == "cancel_pending_order" and not terminated
    obs, _, terminated, _, _ = env.step("Thank you for confirming.")  # no write yet
    assert not terminated and "still" in obs
    env.step(call("cancel_pending_order", order_id="#W9348897", reason="no longer needed"))
    _, _, terminated, _, _ = env.step("Your order is cancelled; it had a camera costing 481.50. Anything else?")
    assert terminated and env.end == "user_stop" and env.score.reward == 1.0


def test_the_customer_discloses_known_info_when_asked_and_does_not_know_the_rest():
    env = env_of("tau2_retail")
    reset_on(env, "5")  # known: user id and zip; unknown: email
    assert "28236" not in env.task.prompt
    obs, _, _, _, info = env.step("Can you tell me your zip code?")
    assert "28236" in obs and info["turn"]["user_reply"]["revealed"]
    obs, _, _, _, info = env.step("What is your email address?")
    assert info["turn"]["user_reply"]["flags"]["intent"] == "unknown" and "@" not in obs


@pytest.mark.parametrize("gym", ["tau2_airline", "tau2_retail", "tau2_telecom"])
@pytest.mark.parametrize("rendering", ["tagged", "tool_call"])
def test_the_oracle_solves_tasks_in_both_renderings(gym, rendering):
    env = env_of(gym, rendering=rendering)
    for i in (0, 1, 2):
        rec = run_episode(env, "oracle", seed=i, options={"task_index": i})
        assert rec["success"] and rec["tau2"]["end"] == "user_stop", rec["tau2"]["score"]
        assert rec["tau2"]["score"]["scored_on"]


def _rate(gym: str, policy: str, split: str, step: int = 1) -> float:
    env = env_of(gym, split=split)
    n = env.task_count(split)
    recs = [run_episode(env, policy, seed=i, options={"task_index": i}) for i in range(0, n, step)]
    return sum(r["success"] for r in recs) / len(recs)


@pytest.mark.slow
@pytest.mark.parametrize("gym", ["tau2_airline", "tau2_retail", "tau2_telecom"])
@pytest.mark.parametrize("split", ["train", "eval"])
def test_oracle_success_is_at_least_95_percent(gym, split):
    assert _rate(gym, "oracle", split) >= 0.95


@pytest.mark.slow
@pytest.mark.parametrize("gym", ["tau2_airline", "tau2_retail", "tau2_telecom"])
def test_random_agent_rarely_succeeds_where_something_must_be_done(gym):
    """Over the tasks that want a change or an answer. The others (19 of airline's 50: the policy
    forbids the request) score 1.0 for an agent that changes nothing, in τ² as here."""
    env = env_of(gym, split="train")
    wins, n = 0, 0
    for i in range(env.task_count("train")):
        rec = run_episode(env, "random", seed=i, options={"task_index": i})
        if env.user.had_requests():
            n, wins = n + 1, wins + bool(rec["success"])
    assert n >= 10 and wins / n <= 0.1


def test_the_tau2_protocol_is_taus_test_split_with_frozen_files_inside_eval():
    from pathlib import Path

    import yaml

    from harness.eval.protocol import load_protocol

    root = Path(__file__).resolve().parents[1] / "eval"
    p = load_protocol(root / "protocol-tau2.yaml")
    assert p.name == "eau-eval-tau2-v1" and p.split == "eval" and p.trials == 4
    assert {g.name: g.tasks for g in p.gyms} == {"tau2_airline": 20, "tau2_retail": 40, "tau2_telecom": 40}
    for g in p.gyms:  # the task counts are τ²'s test splits, whole
        assert len(env_of(g.name, split="eval").split_ids("eval")) == g.tasks
    doc = yaml.safe_load((root / "protocol-tau2.yaml").read_text())
    for ref in [*doc["knob_schemas"].values(), *doc["rules"]["users"].values(), *doc["rules"]["rewards"].values()]:
        assert (root / ref).resolve().is_relative_to(root.resolve()), ref
    assert (
        p.knobs.get("env", "max_steps", "tau2_retail") == 50
        and p.knobs.get("user", "user_strategy_mix", "tau2_retail") == 1.0
    )
