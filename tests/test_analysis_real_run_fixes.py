"""Detector fixes found on real tiny training runs (tests/test_planted_faults_training.py):
unreachable_tasks against the share of tasks a weak policy leaves unsolved by chance,
reward_hacking ignoring a rule that pays only in successful episodes (a success reward), and
arm_disparity comparing episode rewards when neither arm succeeds (a weak policy)."""

from __future__ import annotations

from harness.analysis.detectors import DETECTORS, DetectorInput


def _input(successes: list[int], samples: int = 4) -> DetectorInput:
    """One intention task per entry, ``samples`` episodes each, the first ``successes[i]`` of them solved."""
    eps = [{"episode_id": f"s000000-e{t:02d}{s}", "gym": "intention", "task": {"task_id": f"intention/train/{t}"},
            "success": s < k, "answered": True, "disclosures": 1}
           for t, k in enumerate(successes) for s in range(samples)]
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
        eps.append({"episode_id": f"s000000-e{i:03d}", "gym": "intention", "success": success,
                    "turns": [{"reward_breakdown": {"task": 0.3, "rules": {"bonus": 1.0 if paid else 0.0}}}]})
    return DetectorInput(metrics=[], history=[], episodes=eps, steps=[0], gyms=["intention"])


def test_reward_hacking_ignores_a_rule_paid_only_on_success():
    f = DETECTORS["reward_hacking"].run(_rule_input(False))
    assert f.metrics["rule_shares"]["bonus"] >= 0.5 and f.metrics["rule_failed_episode_share"]["bonus"] == 0.0
    assert not f.flagged, f.summary
    farmed = DETECTORS["reward_hacking"].run(_rule_input(True))
    assert farmed.flagged and "bonus" in farmed.summary
    assert farmed.evidence_episodes and all(e in {f"s000000-e{i:03d}" for i in range(1, 40, 2)}
                                            for e in farmed.evidence_episodes)


def test_question_rate_drop_to_zero_names_episodes():
    """A policy that stops asking altogether (rate 0 in the window) still gets example episodes."""
    def ep(step: int, i: int, questions: int) -> dict:
        return {"episode_id": f"s{step:06d}-e{i:03d}", "gym": "intention", "num_turns": 4, "questions": questions}

    before = [ep(s, i, 2) for s in range(3) for i in range(8)]
    now = [ep(s, i, 0) for s in range(3, 6) for i in range(8)]
    data = DetectorInput(metrics=[{"step": s, "question_rate": 0.0} for s in range(3, 6)],
                         history=[{"step": s, "question_rate": 0.5 + 0.01 * s} for s in range(3)],
                         episodes=now, steps=[3, 4, 5], gyms=["intention"], before_episodes=before)
    f = DETECTORS["question_rate_drop"].run(data)
    assert f.flagged and f.evidence_episodes and set(f.evidence_episodes) <= {e["episode_id"] for e in now}


def _arm_input(symbolic: list[float], llm: list[float], success_symbolic: int = 0) -> DetectorInput:
    """Intention episodes per arm with the given episode rewards; the first ``success_symbolic``
    symbolic episodes succeed, no LLM episode does."""
    eps = [{"episode_id": f"s000000-{arm[0]}{i:03d}", "gym": "intention", "arm": arm, "reward": r,
            "success": arm == "symbolic" and i < success_symbolic}
           for arm, rewards in (("symbolic", symbolic), ("llm", llm)) for i, r in enumerate(rewards)]
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
    loose = DETECTORS["arm_disparity"].run(_arm_input([0.4, 0.6] * 10, [0.35, 0.55] * 10),
                                           {"reward_effect": 0.4, "z": 1.5})
    assert loose.flagged and loose.thresholds["reward_effect"] == 0.4


def test_arm_success_gap_still_flags_alone():
    # equal reward distributions, success 10/20 vs 0/20
    f = DETECTORS["arm_disparity"].run(_arm_input([0.4, 0.6] * 10, [0.4, 0.6] * 10, success_symbolic=10))
    assert f.flagged and f.metrics["gaps"]["all"]["flagged_by"] == ["success"]
