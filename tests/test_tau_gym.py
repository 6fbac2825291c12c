"""UserGym's tau on τ²'s retail and airline databases: shipped task files, UserRL's interface,
tau-bench v1's reward, the policy shown, the scripted agents."""

from __future__ import annotations

import json

from tau2_support import need_tau2

need_tau2()

import pytest  # noqa: E402
from gyms_support import env_of  # noqa: E402

from harness.agents.scripted import run_episode  # noqa: E402
from harness.envs.tau import DATA_DIR, load_tasks  # noqa: E402


def test_the_task_files_ship_in_the_package_with_their_license():
    assert "Apache License" in (DATA_DIR / "LICENSE.txt").read_text()
    assert "UserRL" in (DATA_DIR / "SOURCE.md").read_text()
    train, test = load_tasks("train"), load_tasks("eval")
    assert len(train) == 500 and len(test) == 165
    assert sum(r["id"].startswith("airline") for r in test) == 50


def test_userrl_interface_search_message_and_tool_call():
    env = env_of("tau")
    obs, info = env.reset(seed=0, options={"task_index": 3})
    assert "<policy>" in info["system_prompt"] and [t["function"]["name"] for t in info["tools"]] == ["interact"]
    tools, _, _, _, _ = env.step("SEARCH: tools")
    assert "find_user_id_by_name_zip" in [t["name"] for t in json.loads(tools)]
    assert "confirmation" in env.step("SEARCH: help")[0]
    assert "Unknown search" in env.step("SEARCH: weather")[0]
    reply, _, _, _, _ = env.step("ASK: What is your name and zip code?")
    assert "Sofia Kovacs" in reply and "19049" in reply
    out, _, _, _, _ = env.step(
        'ANSWER: {"name": "find_user_id_by_name_zip", "arguments": {"first_name": "Sofia", "last_name": "Kovacs", "zip": "19049"}}'
    )
    assert out == "sofia_kovacs_7075"
    bad, _, _, _, _ = env.step("ANSWER: {not json")
    assert bad.startswith("Error") and env.errors == 1
    fmt, _, _, _, info = env.step("no tag at all")
    assert info["format_error"] == "no_action_tag" and "Format error" in fmt and env.errors == 1


def test_reward_is_tau_bench_v1_db_and_outputs():
    env = env_of("tau", split="eval")
    i = next(
        k for k, r in enumerate(load_tasks("eval")) if r["info"]["task"]["outputs"] and r["info"]["task"]["actions"]
    )
    rec = run_episode(env, "oracle", seed=0, options={"task_index": i})
    assert rec["success"] and rec["tau2"]["score"]["components"] == {"DB": 1.0, "COMMUNICATE": 1.0}
    # the same gold calls without saying the outputs: COMMUNICATE fails, the reward is 0
    env.reset(seed=0, options={"task_index": i})
    for g in env.gold():
        env.step(env.render_call(g.name, g.arguments))
    env.step("ASK: Done. ###STOP###")
    assert env.score.components == {"DB": 1.0, "COMMUNICATE": 0.0} and env.score.reward == 0.0


@pytest.mark.parametrize("rendering", ["tagged", "tool_call"])
def test_oracle_solves_tau_tasks(rendering):
    for split, idx in (("train", (0, 1)), ("eval", (0, 120))):
        env = env_of("tau", rendering=rendering, split=split)
        for i in idx:
            rec = run_episode(env, "oracle", seed=i, options={"task_index": i})
            assert rec["success"], rec["tau2"]


@pytest.mark.slow
def test_oracle_success_on_tau_eval_is_at_least_95_percent():
    env = env_of("tau", split="eval")
    recs = [run_episode(env, "oracle", seed=i, options={"task_index": i}) for i in range(env.task_count("eval"))]
    assert sum(r["success"] for r in recs) / len(recs) >= 0.95


@pytest.mark.slow
def test_random_agent_rarely_solves_tau():
    env = env_of("tau", split="train")
    recs = [run_episode(env, "random", seed=i, options={"task_index": i}) for i in range(0, 500, 10)]
    assert sum(r["success"] for r in recs) / len(recs) <= 0.1
