"""``eau tasks check tau2``: every τ² task's gold trajectory replays and scores 1.0.

For each task of a domain's published set (train and test) the check:

1. replays the gold actions in the task's initial state through τ²'s tools; a gold action that
   returns τ²'s ``Error: ...`` fails the task (``gold_action_error``, with the action and the error);
2. scores the gold trajectory (those calls, the required outputs said) with the gyms' scorer; every
   scored component of the reward basis must be 1.0 (``component_failed``, naming it);
(the DB component compares this replay with a second, independent one: τ²'s gold end state, so a
nondeterministic tool shows up as a failed DB component).

τ²'s retail gold trajectories include calls that fail on purpose (a lookup by a wrong email that
the customer then corrects): these are reported as ``gold_action_error`` all the same, each with
τ²'s error text and whether the gold trajectory still scores 1.0 (τ²'s evaluator replays a failed
gold call as a no-op, so it usually does).

A task whose basis holds a component that cannot be scored without an LLM judge is not a failure;
the report counts such tasks (``unscored``). ``check_error`` names an exception while checking one
task; the check goes on with the others.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from harness.envs.tau2 import domain as dom
from harness.envs.tau2.scoring import Call, score_episode

REASONS = ("gold_action_error", "component_failed", "check_error")
GYM_DOMAINS = {"tau2": dom.DOMAINS, **{f"tau2_{d}": (d,) for d in dom.DOMAINS}}


@dataclass
class TaskCheck:
    """One task's result: passed, else the reason kind (one of ``REASONS``) and a sentence."""

    domain: str
    task_id: str
    split: str
    passed: bool
    reason_kind: str | None = None
    reason: str | None = None
    scored_on: list[str] = field(default_factory=list)
    unscored: list[str] = field(default_factory=list)
    gold_reward: float | None = None  # what the gold trajectory scores (1.0 even for most gold_action_error)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def replay_gold(domain: str, task: Any) -> tuple[Any, list[Call], list[str]]:
    """(the environment after the gold actions, the calls made, the errors as sentences)."""
    env = dom.initial_environment(domain, task)
    calls, errors = [], []
    for a in task.evaluation_criteria.actions or []:
        out = dom.call_tool(env, a.name, a.arguments, requestor=a.requestor)
        calls.append(Call(a.name, dict(a.arguments), a.requestor, out.error))
        if out.error:
            errors.append(f"{a.requestor} {a.name}({dom.canonical_args(a.arguments)}) -> {out.text[:200]}")
    return env, calls, errors


def check_task(domain: str, task: Any, split: str) -> TaskCheck:
    res = TaskCheck(domain, task.id, split, passed=False)
    try:
        env, calls, errors = replay_gold(domain, task)
        said = list(task.evaluation_criteria.communicate_info or [])
        score = score_episode(domain, task, env, [" ".join(said)] if said else [], calls, "user_stop")
        res.scored_on, res.unscored, res.gold_reward = score.scored_on, score.unscored, score.reward
        failed = [c for c in score.scored_on if score.components[c] != 1.0]
        verdict = (
            f"the gold trajectory scores 0 on {', '.join(failed)}" if failed else "the gold trajectory still scores 1.0"
        )
        if errors:
            res.reason_kind, res.reason = "gold_action_error", "; ".join(errors) + f" ({verdict})"
            return res
        if failed:
            detail = {k: v for k, v in score.checks.items() if v}
            res.reason_kind, res.reason = "component_failed", f"{verdict} ({detail})"
            return res
    except Exception as exc:  # noqa: BLE001 -- one task's crash is reported, the check goes on
        res.reason_kind, res.reason = "check_error", f"{type(exc).__name__}: {exc}"
        return res
    res.passed = True
    return res


def run_tau2_check(
    gym: str, limit: int | None = None, progress: Callable[[TaskCheck], None] | None = None
) -> dict[str, Any]:
    """Check the tasks of ``gym`` (``tau2`` for all three domains, or one ``tau2_<domain>``)."""
    if gym not in GYM_DOMAINS:
        raise KeyError(f"no τ² task set for {gym!r}; one of: {', '.join(GYM_DOMAINS)}")
    t0 = time.perf_counter()
    results: list[TaskCheck] = []
    for domain in GYM_DOMAINS[gym]:
        splits = dom.split_ids(domain)
        for split in dom.SPLITS:
            for tid in splits[split][:limit]:
                r = check_task(domain, dom.task_by_id(domain)[tid], split)
                results.append(r)
                if progress is not None:
                    progress(r)
    return summarise(gym, results, time.perf_counter() - t0)


def summarise(gym: str, results: Sequence[TaskCheck], seconds: float) -> dict[str, Any]:
    failures = [r for r in results if not r.passed]
    reasons: dict[str, int] = {}
    for r in failures:
        reasons[r.reason_kind or "?"] = reasons.get(r.reason_kind or "?", 0) + 1
    per_domain: dict[str, dict[str, int]] = {}
    for r in results:
        d = per_domain.setdefault(r.domain, {"total": 0, "passed": 0, "unscored": 0})
        d["total"] += 1
        d["passed"] += int(r.passed)
        d["unscored"] += int(bool(r.unscored))
    return {
        "gym": gym,
        "source": f"{dom.DISTRIBUTION} {dom.require_tau2()}",
        "total": len(results),
        "passed": len(results) - len(failures),
        "failed": len(failures),
        "reasons": reasons,
        "per_domain": per_domain,
        "unscored_tasks": sum(bool(r.unscored) for r in results),
        "gold_scores_1": sum(r.gold_reward == 1.0 for r in results),
        "failures": [r.to_dict() for r in failures],
        "seconds": round(seconds, 2),
    }
