"""Per-step behaviour metrics from episode records (harness/runs/metrics.py), on hand-computed cases."""

from __future__ import annotations

import pytest

from harness.runs.metrics import core_stats, episode_metrics


def _episode(
    gym: str, reward: float, success: bool, response: list[int], episode_tokens: int | None, choices: list[str]
) -> dict:
    ep = {
        "gym": gym,
        "arm": "symbolic",
        "reward": reward,
        "success": success,
        "answered": success,
        "num_turns": len(choices),
        "questions": choices.count("ask"),
        "format_errors": 0,
        "response_tokens": response,
        "turns": [{"action": {"choice": c}, "events": []} for c in choices],
    }
    if episode_tokens is not None:
        ep["episode_tokens"] = episode_tokens
    return ep


def test_core_stats_on_a_hand_computed_pair_of_episodes():
    eps = [
        _episode("travel", 1.0, True, [10, 20], 300, ["ask", "answer"]),
        _episode("travel", -1.0, False, [30, 10, 30], 500, ["ask", "ask", "search"]),
    ]
    st = core_stats(eps)
    assert st["episodes"] == 2 and st["reward_mean"] == 0.0 and st["reward_std"] == 1.0
    assert st["success_rate"] == 0.5 and st["turns_mean"] == 2.5 and st["questions_mean"] == 1.5
    assert st["question_rate"] == pytest.approx(3 / 5)
    assert st["response_tokens_mean"] == 20.0  # per turn: (10 + 20 + 30 + 10 + 30) / 5
    assert st["episode_tokens_mean"] == 400.0


def test_episode_tokens_mean_skips_records_without_the_field():
    eps = [_episode("travel", 0.0, False, [5], None, ["ask"]), _episode("function", 0.0, False, [5], 120, ["ask"])]
    assert core_stats(eps)["episode_tokens_mean"] == 120.0
    assert core_stats([_episode("travel", 0.0, False, [5], None, ["ask"])])["episode_tokens_mean"] == 0.0
    m = episode_metrics(eps)
    assert m["gym/travel/reward_mean"] == 0.0 and m["gym/function/episodes"] == 1


def test_unasked_rate_counts_disclosing_replies_to_questions():
    def turn(choice, revealed, unasked=False):
        return {
            "action": {"choice": choice},
            "events": ["unasked_disclosure"] if unasked else [],
            "user_reply": {"text": "x", "revealed": revealed, "flags": {}},
        }

    ep = _episode("intention", 0.0, False, [1], None, [])
    # four asks: three replies disclose (one of them what was not asked), one discloses nothing;
    # the answer turn's reply is not a reply to a question
    ep["turns"] = [
        turn("ask", ["a"]),
        turn("ask", ["b"], unasked=True),
        turn("ask", []),
        turn("ask", ["c"]),
        turn("answer", ["d"], unasked=True),
    ]
    ep["num_turns"] = 5
    st = core_stats([ep])
    assert st["unasked_rate"] == pytest.approx(1 / 3)
    assert core_stats([_episode("intention", 0.0, False, [1], None, ["ask"])])["unasked_rate"] == 0.0


def _ask(check: dict | None) -> dict:
    flags = {"check": check} if check is not None else {}
    return {"action": {"choice": "ask", "content": "q?"}, "user_reply": {"text": "a", "flags": flags}, "events": []}


def test_user_fidelity_shares_per_step_gym_and_arm():
    llm = {
        "gym": "turtle",
        "arm": "llm",
        "num_turns": 4,
        "turns": [_ask({"wrong": True}), _ask({"wrong": False}), _ask(None)],
    }
    llm["turns"].append({"action": {"choice": "answer", "content": "x"}, "user_reply": None, "events": []})
    sym = {"gym": "turtle", "arm": "symbolic", "num_turns": 1, "turns": [_ask({"wrong": False})]}
    m = episode_metrics([llm, sym])
    # 4 replies to a question (the answer turn has none), 3 checked, 1 wrong
    assert m["user_replies"] == 4 and m["user_checked_rate"] == 0.75 and m["user_wrong_rate"] == 0.25
    assert m["arm/llm/user_wrong_rate"] == pytest.approx(1 / 3) and m["arm/llm/user_checked_rate"] == pytest.approx(
        2 / 3
    )
    assert m["arm/symbolic/user_wrong_rate"] == 0.0 and m["arm/symbolic/user_replies"] == 1
    assert m["gym/turtle/user_wrong_rate"] == 0.25 and "arm/llm/leak_flag_rate" in m
    assert core_stats([{"gym": "g", "arm": "symbolic", "num_turns": 0, "turns": []}])["user_wrong_rate"] == 0.0
