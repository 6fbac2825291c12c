"""Scores of an evaluation from its episode records (the protocol's scoring, in one place).

Per gym: ``reward_mean`` (mean episode reward: the score), ``success_rate`` and the behaviour stats of
:func:`harness.runs.metrics.core_stats`. For ``colbench`` also ``pass`` (mean share of tests passed;
an episode that never answered with code scores 0) and ``success`` (share of episodes whose answer
passed every test). With several trials per task, ``pass_hat_k`` for k = 1..trials (the unbiased
estimator of :func:`harness.eval.runner.pass_hat_k`, averaged over tasks). For τ² gyms also ``tau2``
(:func:`tau2_summary`): which reward-basis components the rewards were computed from.
``overall`` macro-averages reward and success over all gyms, the held-out ones and the others.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Mapping, Sequence

from harness.eval.runner import pass_hat_k
from harness.runs.metrics import core_stats

GYM_STATS = (
    "episodes",
    "reward_mean",
    "reward_std",
    "success_rate",
    "task_score_mean",
    "turns_mean",
    "questions_mean",
    "answer_rate",
    "deadlock_rate",
    "format_error_rate",
    "response_tokens_mean",
)
CODE_GYMS = ("colbench",)  # gyms scored by tests: pass / success


def answer_pass_rate(record: Mapping[str, Any]) -> float:
    """Share of tests the episode's final scored answer passed (0 when it never answered with code)."""
    rate = 0.0
    for turn in record.get("turns") or []:
        details = (turn.get("answer") or {}).get("details") or {}
        if "pass_rate" in details:
            rate = float(details["pass_rate"])
    return rate


def pass_hat(records: Sequence[Mapping[str, Any]], trials: int) -> dict[str, float]:
    """``{"1": ..., "k": ...}``: pass^k averaged over the tasks (records grouped by ``group``)."""
    by_task: dict[str, list[bool]] = {}
    for r in records:
        by_task.setdefault(str(r["group"]), []).append(bool(r.get("success")))
    out = {}
    for k in range(1, trials + 1):
        vals = [pass_hat_k(sum(v), len(v), k) for v in by_task.values() if len(v) >= k]
        out[str(k)] = sum(vals) / len(vals) if vals else 0.0
    return out


def gym_score(gym: str, records: Sequence[Mapping[str, Any]], trials: int) -> dict[str, Any]:
    """Scores of one gym's episodes (see the module docstring)."""
    st = core_stats(records)
    entry: dict[str, Any] = {k: st.get(k, 0.0) for k in GYM_STATS}
    entry["tasks"] = len({r["group"] for r in records})
    if gym in CODE_GYMS:
        entry["pass"] = sum(answer_pass_rate(r) for r in records) / len(records) if records else 0.0
        entry["success"] = entry["success_rate"]
    if trials > 1:
        entry["pass_hat_k"] = pass_hat(records, trials)
    tau2 = tau2_summary(records)
    if tau2:
        entry["tau2"] = tau2
    return entry


def tau2_summary(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """For τ² gyms, what the rewards were computed from (``{}`` for other gyms): per reward-basis
    component, the episodes scored on it and the share of those it passed; the episodes with a basis
    component left unscored (NL_ASSERTION without a judge), never counted as passed; how episodes
    ended (only ``user_stop`` and ``agent_stop`` are scored, the others score 0)."""
    scores = [(r.get("tau2") or {}).get("score") for r in records if r.get("tau2")]
    scores = [s for s in scores if s]
    if not scores:
        return {}
    components: dict[str, dict[str, float]] = {}
    for s in scores:
        for name in s.get("scored_on") or []:
            c = components.setdefault(name, {"episodes": 0, "passed": 0})
            c["episodes"] += 1
            c["passed"] += float((s.get("components") or {}).get(name) or 0.0) >= 1.0
    ends = Counter(str(s.get("end")) for s in scores)
    return {
        "components": {
            k: {"episodes": int(v["episodes"]), "pass_rate": v["passed"] / v["episodes"]}
            for k, v in sorted(components.items())
        },
        "unscored_episodes": sum(1 for s in scores if s.get("unscored")),
        "ends": dict(sorted(ends.items())),
    }


def score_records(
    records: Iterable[Mapping[str, Any]], gyms: Sequence[str], trials: int, held_out: Iterable[str] = ()
) -> dict[str, Any]:
    """``{"gyms": {gym: scores}, "overall": {...}}`` for the protocol's gyms, in protocol order."""
    recs = list(records)
    per = {g: gym_score(g, [r for r in recs if r.get("gym") == g], trials) for g in gyms}
    held = [g for g in gyms if g in set(held_out)]
    return {
        "gyms": per,
        "overall": {
            "all": _macro(per, list(gyms)),
            "held_out": _macro(per, held),
            "in_distribution": _macro(per, [g for g in gyms if g not in held]),
        },
    }


def _macro(per: Mapping[str, Mapping[str, Any]], gyms: list[str]) -> dict[str, Any]:
    if not gyms:
        return {"gyms": [], "reward_mean": None, "success_rate": None}
    return {
        "gyms": gyms,
        "reward_mean": sum(per[g]["reward_mean"] for g in gyms) / len(gyms),
        "success_rate": sum(per[g]["success_rate"] for g in gyms) / len(gyms),
    }
