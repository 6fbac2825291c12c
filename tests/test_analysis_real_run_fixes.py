"""Detector fixes found on real tiny training runs (tests/test_planted_faults_training.py):
unreachable_tasks against the share of tasks a weak policy leaves unsolved by chance,
reward_hacking ignoring a rule that pays only in successful episodes (a success reward), and
arm_disparity comparing episode rewards when neither arm succeeds (a weak policy)."""

from __future__ import annotations

from harness.analysis.detectors import DETECTORS, DetectorInput


def _input(successes: list[int], samples: int = 4) -> DetectorInput:
    """One intention task per entry, ``samples`` episodes each, the first ``successes[i]`` of them solved."""
    eps = [
        {
            "episode_id": f"s000000-e{t:02d}{s}",
            "gym": "intention",
            "task": {"task_id": f"intention/train/{t}"},
            "success": s < k,
            "answered": True,
            "disclosures": 1,
        }
        for t, k in enumerate(successes)
        for s in range(samples)
    ]
    return DetectorInput(metrics=[], history=[], episodes=eps, steps=[0], gyms=["intention"])


def test_weak_policy_leaves_tasks_unsolved_by_chance_and_is_not_flagged():
    # 2 of 24 samples solved (p 0.08): 4 of 6 tasks unsolved, as (1-p)^4 = 0.71 predicts
    f = DETECTORS["unreachable_tasks"].run(_input([1, 1, 0, 0, 0, 0]))
    g = f.metrics["per_gym"]["intention"]
    assert g["share"] >= 0.5 and g["chance_share"] > 0.6
    assert not f.flagged, f.summary


def test_tasks_never_solved_while_others_are_are_flagged():
    # half the tasks solved 3 times in 4, the other half never: 0.5 unsolved against 0.15 by chance
    f = DETECTORS["unreachable_tasks"].run(_input([3, 3, 3, 0, 0, 0]))
    assert f.flagged and f.metrics["per_gym"]["intention"]["chance_share"] < 0.2
    assert f.evidence_episodes and all(e.startswith("s000000-e0") for e in f.evidence_episodes)


def test_no_success_at_all_keeps_the_plain_share_test():
    assert DETECTORS["unreachable_tasks"].run(_input([0, 0, 0, 0])).flagged
    relaxed = DETECTORS["unreachable_tasks"].run(_input([3, 3, 3, 0, 0, 0]), {"excess": 0.5})
    assert not relaxed.flagged and relaxed.thresholds["excess"] == 0.5


def _rule_input(success_bonus_in_failed: bool) -> DetectorInput:
    """40 one-turn episodes: the task pays 0.3 per turn and a rule 1.0, in successful episodes only
    (a success bonus) or also in failed ones (a channel to farm)."""
    eps = []
    for i in range(40):
        success = i % 2 == 0
        paid = success or success_bonus_in_failed
        eps.append(
            {
                "episode_id": f"s000000-e{i:03d}",
                "gym": "intention",
                "success": success,
                "turns": [{"reward_breakdown": {"task": 0.3, "rules": {"bonus": 1.0 if paid else 0.0}}}],
            }
        )
    return DetectorInput(metrics=[], history=[], episodes=eps, steps=[0], gyms=["intention"])


def test_reward_hacking_ignores_a_rule_paid_only_on_success():
    f = DETECTORS["reward_hacking"].run(_rule_input(False))
    assert f.metrics["rule_shares"]["bonus"] >= 0.5 and f.metrics["rule_failed_episode_share"]["bonus"] == 0.0
    assert not f.flagged, f.summary
    farmed = DETECTORS["reward_hacking"].run(_rule_input(True))
    assert farmed.flagged and "bonus" in farmed.summary
    assert farmed.evidence_episodes and all(
        e in {f"s000000-e{i:03d}" for i in range(1, 40, 2)} for e in farmed.evidence_episodes
    )


def test_question_rate_drop_to_zero_names_episodes():
    """A policy that stops asking altogether (rate 0 in the window) still gets example episodes."""

    def ep(step: int, i: int, questions: int) -> dict:
        return {"episode_id": f"s{step:06d}-e{i:03d}", "gym": "intention", "num_turns": 4, "questions": questions}

    before = [ep(s, i, 2) for s in range(3) for i in range(8)]
    now = [ep(s, i, 0) for s in range(3, 6) for i in range(8)]
    data = DetectorInput(
        metrics=[{"step": s, "question_rate": 0.0} for s in range(3, 6)],
        history=[{"step": s, "question_rate": 0.5 + 0.01 * s} for s in range(3)],
        episodes=now,
        steps=[3, 4, 5],
        gyms=["intention"],
        before_episodes=before,
    )
    f = DETECTORS["question_rate_drop"].run(data)
    assert f.flagged and f.evidence_episodes and set(f.evidence_episodes) <= {e["episode_id"] for e in now}


def _asking_input(
    before: tuple[int, int], now: tuple[int, int], jitter: bool = True, disclosures: tuple[float, float] = (2.0, 1.0)
) -> DetectorInput:
    """3 steps before and 3 in the window, 8 intention episodes a step, each (questions, turns) as
    given; with ``jitter`` every other episode asks one question more (and takes one turn more);
    ``disclosures_mean`` of the steps before and in the window."""

    def eps(steps: range, q: int, n: int) -> list[dict]:
        return [
            {
                "episode_id": f"s{s:06d}-e{i:03d}",
                "gym": "intention",
                "questions": q + (i % 2 if jitter else 0),
                "num_turns": n + (i % 2 if jitter else 0),
            }
            for s in steps
            for i in range(8)
        ]

    def lines(steps: range, q: int, n: int, d: float) -> list[dict]:
        qs = [q + (i % 2 if jitter else 0) for i in range(8)]
        ns = [n + (i % 2 if jitter else 0) for i in range(8)]
        return [
            {"step": s, "question_rate": sum(qs) / sum(ns), "questions_mean": sum(qs) / 8, "disclosures_mean": d}
            for s in steps
        ]

    return DetectorInput(
        metrics=lines(range(3, 6), *now, disclosures[1]),
        history=lines(range(3), *before, disclosures[0]),
        episodes=eps(range(3, 6), *now),
        steps=[3, 4, 5],
        gyms=["intention"],
        before_episodes=eps(range(3), *before),
    )


def test_fewer_questions_before_the_answer_flag_as_questions_per_episode():
    """Episodes of k questions and an answer: 4 of 5 turns -> 2 of 3 turns (jitter +1 on half). Asks
    per turn: 9/11 = 0.818 -> 5/7 = 0.714, a 12.7% drop (under 25%); asks per episode 4.5 -> 2.5, 44%."""
    f = DETECTORS["question_rate_drop"].run(_asking_input((4, 5), (2, 3)))
    m = f.metrics
    assert abs(m["question_rate"]["relative_drop"] - (1 - (5 / 7) / (9 / 11))) < 1e-3
    assert m["questions_per_episode"]["before"] == 4.5 and m["questions_per_episode"]["now"] == 2.5
    assert abs(m["questions_per_episode"]["relative_drop"] - 2 / 4.5) < 1e-3
    assert f.flagged and m["flagged_by"] == ["questions_per_episode"], f.summary
    # disclosures fell with the questions (2.0 -> 1.0): the agent stopped asking, the policy's doing
    assert not m["disclosures_held"] and f.component == "policy"
    assert m["per_gym"]["intention"]["flagged_by"] == ["questions_per_episode"]
    assert "questions per episode" in f.summary
    # examples: window episodes at or under the window mean (2 questions: the even ones)
    assert f.evidence_episodes and all(
        e.startswith("s00000") and int(e[-3:]) % 2 == 0 and int(e[1:7]) >= 3 for e in f.evidence_episodes
    )


def test_same_asking_is_not_flagged_on_either_measure():
    f = DETECTORS["question_rate_drop"].run(_asking_input((4, 5), (4, 5)))
    assert not f.flagged and f.metrics["flagged_by"] == [] and "questions per episode 4.50 -> 4.50" in f.summary
    # half a question fewer per episode (11%): under both the relative and the absolute threshold
    g = DETECTORS["question_rate_drop"].run(_asking_input((4, 5), (4, 5), jitter=False), {"min_abs_questions": 0.0})
    assert not g.flagged


def _arm_input(symbolic: list[float], llm: list[float], success_symbolic: int = 0) -> DetectorInput:
    """Intention episodes per arm with the given episode rewards; the first ``success_symbolic``
    symbolic episodes succeed, no LLM episode does."""
    eps = [
        {
            "episode_id": f"s000000-{arm[0]}{i:03d}",
            "gym": "intention",
            "arm": arm,
            "reward": r,
            "success": arm == "symbolic" and i < success_symbolic,
        }
        for arm, rewards in (("symbolic", symbolic), ("llm", llm))
        for i, r in enumerate(rewards)
    ]
    return DetectorInput(metrics=[], history=[], episodes=eps, steps=[0], gyms=["intention"])


def test_arm_reward_gap_flags_when_neither_arm_succeeds():
    # symbolic rewards 0.4/0.6 (mean 0.5, sd 0.1026), LLM 0.0/0.2 (mean 0.1): d = 0.4 / 0.1026 = 3.9
    f = DETECTORS["arm_disparity"].run(_arm_input([0.4, 0.6] * 10, [0.0, 0.2] * 10))
    g = f.metrics["gaps"]["all"]
    assert f.flagged and g["flagged_by"] == ["reward"] and g["symbolic_minus_llm"] == 0.0
    assert g["reward_symbolic_minus_llm"] == 0.4 and abs(g["reward_effect"] - 3.8987) < 1e-3
    assert f.severity == "high" and "reward" in f.summary and len(f.evidence_episodes) > 0


def test_arm_reward_gap_within_noise_is_not_flagged():
    # the same spread, means 0.05 apart: d = 0.05 / 0.1026 = 0.49 < 0.8
    f = DETECTORS["arm_disparity"].run(_arm_input([0.4, 0.6] * 10, [0.35, 0.55] * 10))
    assert not f.flagged and f.metrics["gaps"]["all"]["flagged_by"] == [], f.summary
    # both gates hold it back: d 0.49 and z = 0.05 / 0.0324 = 1.54
    looser = DETECTORS["arm_disparity"].run(_arm_input([0.4, 0.6] * 10, [0.35, 0.55] * 10), {"reward_effect": 0.4})
    assert not looser.flagged
    loose = DETECTORS["arm_disparity"].run(
        _arm_input([0.4, 0.6] * 10, [0.35, 0.55] * 10), {"reward_effect": 0.4, "z": 1.5}
    )
    assert loose.flagged and loose.thresholds["reward_effect"] == 0.4


def test_arm_success_gap_still_flags_alone():
    # equal reward distributions, success 10/20 vs 0/20
    f = DETECTORS["arm_disparity"].run(_arm_input([0.4, 0.6] * 10, [0.4, 0.6] * 10, success_symbolic=10))
    assert f.flagged and f.metrics["gaps"]["all"]["flagged_by"] == ["success"]


def test_asking_drop_while_disclosures_hold_points_at_the_user():
    """Disclosures per episode 9.7 -> 9.2 (-5%, within the 10% hold) while questions fell: the user
    gives what the agent stopped asking for (a user that pastes every fact)."""
    f = DETECTORS["question_rate_drop"].run(_asking_input((4, 5), (2, 3), disclosures=(9.7, 9.2)))
    assert f.flagged and f.metrics["disclosures_held"] and f.component == "user"
    assert "disclosures per episode held (9.70 -> 9.20)" in f.summary
    # a 20% fall is not "held" at the default; it is with the threshold loosened to 25%
    g = DETECTORS["question_rate_drop"].run(_asking_input((4, 5), (2, 3), disclosures=(10.0, 8.0)))
    assert g.flagged and g.component == "policy"
    h = DETECTORS["question_rate_drop"].run(
        _asking_input((4, 5), (2, 3), disclosures=(10.0, 8.0)), {"disclosure_hold": 0.25}
    )
    assert h.component == "user" and h.thresholds["disclosure_hold"] == 0.25
