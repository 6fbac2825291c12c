"""Detectors of the simulated user: leakage of hidden information, disparity between user arms, and
replies a verifier flags as wrong."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Mapping

from harness.analysis.detectors.base import DetectorInput, Finding, detector, skipped
from harness.analysis.leakage import episode_leaks
from harness.analysis.run_data import num
from harness.analysis.tasks import regenerate

# --------------------------------------------------------------------------- user leakage
# One reply the agent read that gives away the hidden answer (or a fact of a kind the filter
# excludes) is already a defect: the reward for that episode measures nothing. So the count is 1.
LEAK_SECRET_EPISODES = 1
LEAK_FILTERED_EPISODES = 1
# The guard redacting one reply in 20 means the user (LLM prompt, rule templates) keeps producing
# leaks and the agent keeps reading refusals; a rare redaction is the guard doing its job.
LEAK_REDACTED_RATE = 0.05
# Replies beyond facts_per_reply (or bulk replies) in 1 of 10 disclosing replies: the per-reply limit
# is not holding. A healthy symbolic user never exceeds it.
LEAK_OVERDISCLOSURE_RATE = 0.10
# A reply carrying 60%+ of a task's hidden facts (3+ facts) hands over the task in one turn.
LEAK_BULK_SHARE = 0.6
LEAK_BULK_MIN_FACTS = 3
# Disclosing replies that answer something the question did not ask: the user's rules (or the LLM
# user) hand out details for any question, so asking well stops mattering. Measured on the tiny
# intention runs of benchmarks/bench_coevolution.py: 0.0 over 1,100 replies with the packaged rules
# (a symbolic user discloses only the facts its question matches), 0.54-0.60 with a catch-all intent
# disclosing `next` (the rest are replies where the next detail happened to be the one asked about).
LEAK_UNASKED_RATE = 0.3


@detector(
    "user_leakage",
    "user",
    {
        "secret_episodes": (LEAK_SECRET_EPISODES, "episodes with a read reply that gives away the hidden answer"),
        "filtered_episodes": (LEAK_FILTERED_EPISODES, "episodes disclosing a fact kind outside reveal_kinds"),
        "redacted_rate": (LEAK_REDACTED_RATE, "share of user replies the leak guard had to redact"),
        "overdisclosure_rate": (
            LEAK_OVERDISCLOSURE_RATE,
            "share of disclosing replies over facts_per_reply or in bulk",
        ),
        "bulk_share": (LEAK_BULK_SHARE, "share of a task's facts in one reply that counts as bulk"),
        "bulk_min_facts": (LEAK_BULK_MIN_FACTS, "facts a bulk reply must carry"),
        "unasked_rate": (
            LEAK_UNASKED_RATE,
            "share of disclosing replies to a question that disclose what it did not ask",
        ),
    },
)
def user_leakage(data: DetectorInput, th: Mapping[str, float]) -> Finding:
    """User replies that give away the hidden answer (checked against the task rebuilt from the gym
    registry), disclose fact kinds the reveal filter excludes, exceed facts_per_reply or hand over most
    facts at once, or had to be redacted by the leak guard (measures: harness/analysis/leakage.py)."""
    eps = data.episodes
    if not eps:
        return skipped("user_leakage", "user", "no trajectories in the window", th)
    replies = redacted = disclosing = over = unasked = 0
    unasked_eps: list[str] = []
    secret_eps, filtered_eps, over_eps, redacted_eps, bulk_eps = [], [], [], [], []
    unchecked: dict[str, int] = defaultdict(int)
    checked = no_secret = 0
    kinds: set[str] = set()
    reasons: dict[str, int] = defaultdict(int)
    by_arm: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for e in eps:
        task, why = regenerate(e)
        lk = episode_leaks(e, task, why, bulk_share=th["bulk_share"], bulk_min_facts=int(th["bulk_min_facts"]))
        eid = str(e.get("episode_id"))
        replies += lk.replies
        redacted += len(lk.redacted_turns)
        disclosing += lk.disclosing_replies
        n_over = len(set(lk.over_disclosed_turns) | set(lk.bulk_turns))
        over += n_over
        by_arm[str(e.get("arm"))][0] += n_over
        by_arm[str(e.get("arm"))][1] += lk.disclosing_replies
        if lk.secret_checked:
            checked += 1
        elif lk.no_secret:
            no_secret += 1
        elif lk.secret_unchecked_reason:
            unchecked[lk.secret_unchecked_reason] += 1
        if lk.secret_leak:
            secret_eps.append(eid)
            for r in lk.secret_leak_reasons:
                reasons[r.split(" ")[0]] += 1
        if lk.filtered_kind_turns:
            filtered_eps.append(eid)
            kinds.update(lk.filtered_kinds)
        unasked += len(lk.unasked_turns)
        if lk.unasked_turns:
            unasked_eps.append(eid)
        if n_over:
            over_eps.append(eid)
        if lk.bulk_turns:
            bulk_eps.append(eid)
        if lk.redacted_turns:
            redacted_eps.append(eid)
    if not replies:
        return skipped("user_leakage", "user", "no user replies in the window", th)
    red_rate = redacted / replies
    over_rate = over / disclosing if disclosing else 0.0
    unasked_rate = unasked / disclosing if disclosing else 0.0
    metrics = {
        "episodes": len(eps),
        "user_replies": replies,
        "secret_checked_episodes": checked,
        "no_hidden_answer_episodes": no_secret,
        "secret_unchecked": dict(unchecked),
        "secret_leak_episodes": len(secret_eps),
        "secret_leak_measures": dict(reasons),
        "filtered_kind_episodes": len(filtered_eps),
        "filtered_kinds_disclosed": sorted(kinds),
        "redacted_replies": redacted,
        "redacted_rate": round(red_rate, 4),
        "disclosing_replies": disclosing,
        "overdisclosed_replies": over,
        "overdisclosure_rate": round(over_rate, 4),
        "bulk_episodes": len(bulk_eps),
        "unasked_replies": unasked,
        "unasked_rate": round(unasked_rate, 4),
        "overdisclosure_rate_by_arm": {a: round(o / d, 4) for a, (o, d) in sorted(by_arm.items()) if d},
    }
    problems = []
    if len(secret_eps) >= th["secret_episodes"]:
        problems.append(f"{len(secret_eps)} episode(s) where a reply the agent read gives away the hidden answer")
    if len(filtered_eps) >= th["filtered_episodes"]:
        problems.append(
            f"{len(filtered_eps)} episode(s) disclose fact kinds outside reveal_kinds ({', '.join(sorted(kinds))})"
        )
    if disclosing and over_rate >= th["overdisclosure_rate"]:
        problems.append(
            f"{over_rate:.0%} of disclosing replies exceed facts_per_reply or hand over most facts at once "
            f"({len(bulk_eps)} episode(s) with bulk replies)"
        )
    if disclosing and unasked_rate >= th["unasked_rate"]:
        problems.append(
            f"{unasked_rate:.0%} of disclosing replies to a question disclose details it did not ask about "
            f"(rules/users/<gym>.yaml: an intent disclosing 'next' for any question?)"
        )
    if red_rate >= th["redacted_rate"]:
        problems.append(f"the leak guard redacted {red_rate:.0%} of replies")
    flagged = bool(problems)
    severity = "high" if secret_eps or filtered_eps or bulk_eps else "medium"
    examples = (secret_eps or filtered_eps or bulk_eps or over_eps or unasked_eps or redacted_eps)[:5]
    note = f"; hidden answer not checked for {sum(unchecked.values())} episode(s)" if unchecked else ""
    return Finding(
        "user_leakage",
        flagged,
        "user",
        ("; ".join(problems) + note)
        if flagged
        else f"no leak over {replies} user replies in {len(eps)} episodes (answer checked in {checked}){note}",
        severity=severity,
        metrics=metrics,
        evidence_episodes=examples,
        matches=secret_eps + filtered_eps + over_eps + unasked_eps + redacted_eps,
        suggestion=(
            "user.facts_per_reply (1 keeps elicitation multi-turn), user.reveal_kinds (exclude the kinds "
            "listed in filtered_kinds_disclosed or that carry the answer), rules/users/<gym>.yaml, the LLM "
            "user's model and prompt; eau sample --flag user_leakage; eau gate a candidate user.yaml"
        ),
    )


# --------------------------------------------------------------------------- arm disparity
# Each arm needs enough episodes for a success rate to mean something (1 episode = 10 points at n=10).
ARM_MIN_EPISODES = 10
# The method's two user arms differed by 0.29 in success under a fixed 0.5 mixture; 0.15 is half of
# that, large enough to change what a blended metric says about the policy.
ARM_GAP = 0.15
# The gap must also exceed this many standard errors of the difference (binomial), so small arms do
# not flag on noise.
ARM_Z = 2.0
# Success alone misses arms that differ while neither succeeds (a weak policy, or a hard gym): episode
# rewards still separate them. A standardised reward gap (Cohen's d over the pooled standard deviation)
# of 0.8 is a large effect; it must also exceed ARM_Z standard errors (Welch).
ARM_REWARD_EFFECT = 0.8


def _arm_stats(eps: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in eps:
        by[str(e.get("arm"))].append(e)
    out = {}
    for arm, group in by.items():
        n = len(group)
        rewards = [float(e.get("reward", 0.0)) for e in group]
        mean = sum(rewards) / n
        out[arm] = {
            "episodes": n,
            "success_rate": sum(1 for e in group if e.get("success")) / n,
            "reward_mean": mean,
            "reward_std": math.sqrt(sum((r - mean) ** 2 for r in rewards) / max(n - 1, 1)),
            "disclosures_mean": sum(float(e.get("disclosures", 0)) for e in group) / n,
            "questions_mean": sum(float(e.get("questions", 0)) for e in group) / n,
        }
    return out


def _arm_stats_from_metrics(lines: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    acc: dict[str, dict[str, float]] = defaultdict(lambda: {"episodes": 0.0, "s": 0.0, "r": 0.0})
    for m in lines:
        for key in m:
            if key.startswith("arm/") and key.endswith("/episodes") and key.count("/") == 2:
                arm = key.split("/")[1]
                n, s, r = num(m.get(key)), num(m.get(f"arm/{arm}/success_rate")), num(m.get(f"arm/{arm}/reward_mean"))
                if n and s is not None:
                    acc[arm]["episodes"] += n
                    acc[arm]["s"] += s * n
                    acc[arm]["r"] += (r or 0.0) * n
    return {
        a: {
            "episodes": int(v["episodes"]),
            "success_rate": v["s"] / v["episodes"],
            "reward_mean": v["r"] / v["episodes"],
        }
        for a, v in acc.items()
        if v["episodes"]
    }


def _gap(a: dict[str, float], b: dict[str, float]) -> tuple[float, float]:
    """(success gap a - b, its standard error)."""
    pa, pb, na, nb = a["success_rate"], b["success_rate"], a["episodes"], b["episodes"]
    se = math.sqrt(max(pa * (1 - pa), 1e-4) / na + max(pb * (1 - pb), 1e-4) / nb)
    return pa - pb, se


def _reward_gap(a: dict[str, float], b: dict[str, float]) -> tuple[float, float, float] | None:
    """(reward gap a - b, its Welch standard error, Cohen's d) or None without per-episode spreads
    (arm statistics read from metrics lines carry means only).

    >>> _reward_gap({"episodes": 4, "reward_mean": 1.0, "reward_std": 0.5},
    ...             {"episodes": 4, "reward_mean": 0.0, "reward_std": 0.5})
    (1.0, 0.3536, 2.0)
    """
    if "reward_std" not in a or "reward_std" not in b:
        return None
    na, nb, sa, sb = a["episodes"], b["episodes"], a["reward_std"], b["reward_std"]
    gap = a["reward_mean"] - b["reward_mean"]
    se = math.sqrt(sa * sa / na + sb * sb / nb)
    pooled = math.sqrt(((na - 1) * sa * sa + (nb - 1) * sb * sb) / max(na + nb - 2, 1))
    # identical rewards within each arm: any difference between the arms is a full separation
    d = gap / pooled if pooled > 1e-9 else (0.0 if abs(gap) < 1e-9 else math.copysign(99.0, gap))
    return round(gap, 4), round(max(se, 1e-9), 4), round(d, 4)


@detector(
    "arm_disparity",
    "user",
    {
        "min_episodes": (ARM_MIN_EPISODES, "episodes each arm needs in the window (overall and per gym)"),
        "gap": (ARM_GAP, "absolute success-rate gap between the symbolic and LLM arms"),
        "z": (ARM_Z, "standard errors the gap must exceed (success and reward)"),
        "reward_effect": (ARM_REWARD_EFFECT, "standardised episode-reward gap (Cohen's d) that flags on its own"),
    },
)
def arm_disparity(data: DetectorInput, th: Mapping[str, float]) -> Finding:
    """Success and episode reward of the symbolic and the LLM user arms compared overall and per gym:
    a large gap in either means the arms pose different tasks and a blended metric hides it. The
    reward gap is standardised (Cohen's d), so it reads the same on every gym's reward scale, and it
    catches arms that differ while neither succeeds."""
    if data.episodes:
        overall = _arm_stats(data.episodes)
        source = "trajectories"
    else:
        overall = _arm_stats_from_metrics(data.metrics)
        source = "metrics"
    if "llm" not in overall or overall["llm"]["episodes"] < th["min_episodes"]:
        n = int(overall.get("llm", {}).get("episodes", 0))
        return skipped(
            "arm_disparity",
            "user",
            f"no LLM-arm episodes to compare ({n} in the window; user_strategy_mix 1.0 uses the symbolic user only)",
            th,
        )
    if "symbolic" not in overall or overall["symbolic"]["episodes"] < th["min_episodes"]:
        return skipped("arm_disparity", "user", "too few symbolic-arm episodes in the window to compare", th)
    results = {"all": overall}
    gaps = {}
    flagged_where = []
    if data.episodes:
        by_gym: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for e in data.episodes:
            by_gym[str(e.get("gym"))].append(e)
        for g, group in sorted(by_gym.items()):
            results[g] = _arm_stats(group)
    for where, st in results.items():
        if "llm" not in st or "symbolic" not in st:
            continue
        if min(st["llm"]["episodes"], st["symbolic"]["episodes"]) < th["min_episodes"]:
            continue
        gap, se = _gap(st["symbolic"], st["llm"])
        gaps[where] = {
            "symbolic_minus_llm": round(gap, 4),
            "se": round(se, 4),
            "symbolic": {k: round(v, 4) for k, v in st["symbolic"].items()},
            "llm": {k: round(v, 4) for k, v in st["llm"].items()},
        }
        by_success = abs(gap) >= th["gap"] and abs(gap) >= th["z"] * se
        rg = _reward_gap(st["symbolic"], st["llm"])
        by_reward = False
        if rg is not None:
            r_gap, r_se, d = rg
            gaps[where].update({"reward_symbolic_minus_llm": r_gap, "reward_se": r_se, "reward_effect": d})
            by_reward = abs(d) >= th["reward_effect"] and abs(r_gap) >= th["z"] * r_se
        gaps[where]["flagged_by"] = [k for k, v in (("success", by_success), ("reward", by_reward)) if v]
        if by_success or by_reward:
            flagged_where.append(where)
    flagged = bool(flagged_where)
    worst = max((abs(v["symbolic_minus_llm"]) for v in gaps.values()), default=0.0)
    worst_d = max((abs(v.get("reward_effect", 0.0)) for v in gaps.values()), default=0.0)
    llm_eps = [
        str(e.get("episode_id"))
        for e in data.episodes
        if e.get("arm") == "llm"
        and (("all" in flagged_where) or str(e.get("gym")) in flagged_where)
        and not e.get("success")
    ]
    if flagged:
        g = gaps[flagged_where[0]]
        summary = (
            f"symbolic and LLM user arms differ ({flagged_where[0]}: success symbolic "
            f"{g['symbolic']['success_rate']:.2f} vs LLM {g['llm']['success_rate']:.2f}, "
            f"{g['symbolic_minus_llm']:+.2f}"
        )
        if "reward_effect" in g:
            summary += (
                f"; reward {g['symbolic']['reward_mean']:.2f} vs {g['llm']['reward_mean']:.2f}, "
                f"effect {g['reward_effect']:+.2f} sd"
            )
        summary += (
            f"; {g['symbolic']['episodes']:.0f} and {g['llm']['episodes']:.0f} episodes); "
            f"flagged in {', '.join(flagged_where)} by {'+'.join(g['flagged_by'])}"
        )
    else:
        summary = (
            f"largest arm gap: success {worst:.2f} (threshold {th['gap']:.2f}), reward effect "
            f"{worst_d:.2f} sd (threshold {th['reward_effect']:.2f})"
        )
    return Finding(
        "arm_disparity",
        flagged,
        "user",
        summary,
        severity="high" if worst >= 2 * th["gap"] or worst_d >= 2 * th["reward_effect"] else "medium",
        metrics={"source": source, "gaps": gaps},
        matches=llm_eps,
        suggestion=(
            "read metrics per arm (arm/<arm>/*), never blended; inspect the LLM user (model, "
            "prompt, user.temperature, user.persona) with eau sample --arm llm; "
            "user.user_strategy_mix changes the share, not the gap"
        ),
    )


# --------------------------------------------------------------------------- user reliability
# The share of an arm's replies (to a question) that the gym's verifier flags wrong. An honest user
# is flagged only by the verifier's own errors: 0 of 5,875 symbolic replies on travel and intention
# (benchmarks/bench_user_fidelity.py), and on turtle the judge's false alarms, 0.08-0.11 of questions
# on unseen stories (benchmarks/bench_turtle_user.py, `verifier.truthful_flagged`). A host that flips
# every answer is flagged on about a third of turtle's questions and on 0.69-0.98 of the lies about
# travel and intention. 0.2 sits above the honest turtle level and below a liar's.
UNRELIABLE_WRONG_RATE = 0.2
# A rise over the steps just before the window flags below that level (a user that started to drift,
# or an honest level the verifier's own errors set): 0.1 more of the replies, and 2 standard errors.
UNRELIABLE_RISE = 0.1
UNRELIABLE_Z = 2.0
# Fewer replies than this make a share of noise (1 wrong reply in 10 is 0.1).
UNRELIABLE_MIN_REPLIES = 20
MAX_EXAMPLES = 5  # flagged replies quoted in the finding (question, reply, what the truth is)


def _reply_counts(eps: list[dict[str, Any]]) -> tuple[dict[tuple[str, str], list[int]], list[dict[str, Any]]]:
    """({(gym, arm): [replies, checked, wrong]}, the flagged replies with their episode and turn)."""
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    flagged: list[dict[str, Any]] = []
    for e in eps:
        key = (str(e.get("gym")), str(e.get("arm")))
        for t in e.get("turns") or []:
            reply = t.get("user_reply")
            if (t.get("action") or {}).get("choice") != "ask" or not reply:
                continue
            check = (reply.get("flags") or {}).get("check")
            c = counts[key]
            c[0] += 1
            if isinstance(check, Mapping):
                c[1] += 1
                if check.get("wrong"):
                    c[2] += 1
                    flagged.append(
                        {
                            "episode": str(e.get("episode_id")),
                            "gym": key[0],
                            "arm": key[1],
                            "turn": t.get("turn"),
                            "question": str((t.get("action") or {}).get("content", ""))[:200],
                            "reply": str(reply.get("text", ""))[:200],
                            "why": check.get("why"),
                        }
                    )
    return counts, flagged


def _fold(counts: dict[tuple[str, str], list[int]], by: int) -> dict[str, list[int]]:
    """Counts summed over gyms (``by=1``: per arm) or arms (``by=0``: per gym)."""
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for key, c in counts.items():
        for i in range(3):
            out[key[by]][i] += c[i]
    return out


def _counts_from_metrics(lines: list[dict[str, Any]]) -> dict[tuple[str, str], list[int]]:
    """Per-arm counts rebuilt from metrics lines (``arm/<a>/user_replies`` x the rates), all gyms as one."""
    out: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for m in lines:
        for key in m:
            if key.startswith("arm/") and key.endswith("/user_replies") and key.count("/") == 2:
                arm = key.split("/")[1]
                n = int(num(m.get(key)) or 0)
                c = out[("*", arm)]
                c[0] += n
                c[1] += round(n * (num(m.get(f"arm/{arm}/user_checked_rate")) or 0.0))
                c[2] += round(n * (num(m.get(f"arm/{arm}/user_wrong_rate")) or 0.0))
    return out


@detector(
    "user_unreliable",
    "user",
    {
        "wrong_rate": (UNRELIABLE_WRONG_RATE, "share of an arm's replies the gym's verifier flags wrong"),
        "rise": (UNRELIABLE_RISE, "rise of that share over the steps before the window that flags below the level"),
        "z": (UNRELIABLE_Z, "standard errors a rise must exceed"),
        "min_replies": (UNRELIABLE_MIN_REPLIES, "replies an arm (or arm of a gym) needs in the window"),
    },
)
def user_unreliable(data: DetectorInput, th: Mapping[str, float]) -> Finding:
    """User replies that the gym's verifier flags as wrong (``check`` flag on the reply: turtle's judge,
    where confident, contradicts the reply; a travel or intention reply states a value the task's facts
    rule out), per arm and per gym of each arm: flagged when an arm's share reaches ``wrong_rate``, or
    rises by ``rise`` over the steps before the window. A wrong reply teaches the policy a wrong
    inference, and the LLM arm is where it comes from (the symbolic arm states its rules' facts)."""
    if data.episodes:
        counts, flagged_replies = _reply_counts(data.episodes)
        before, _ = _reply_counts(data.before_episodes)
        source = "trajectories"
    else:
        counts, flagged_replies, before = _counts_from_metrics(data.metrics), [], _counts_from_metrics(data.history)
        source = "metrics"
    if not any(c[1] for c in counts.values()):
        return skipped(
            "user_unreliable",
            "user",
            "no user reply in the window was checked (no question asked, or no gym of the run has a verifier)",
            th,
        )
    groups: dict[str, tuple[list[int], list[int]]] = {}
    arms, arms_before = _fold(counts, 1), _fold(before, 1)
    for arm, c in arms.items():
        groups[arm] = (c, arms_before.get(arm, [0, 0, 0]))
    if source == "trajectories":
        for (gym, arm), c in counts.items():
            groups[f"{gym}/{arm}"] = (c, before.get((gym, arm), [0, 0, 0]))
    stats: dict[str, dict[str, Any]] = {}
    flagged_where: list[str] = []
    for where, (c, b) in sorted(groups.items()):
        rate = c[2] / c[0] if c[0] else 0.0
        prior = b[2] / b[0] if b[0] else None
        st: dict[str, Any] = {"replies": c[0], "checked": c[1], "wrong": c[2], "wrong_rate": round(rate, 4)}
        by = []
        if c[0] >= th["min_replies"]:
            if rate >= th["wrong_rate"]:
                by.append("level")
            if prior is not None and b[0] >= th["min_replies"]:
                se = math.sqrt(max(rate * (1 - rate), 1e-4) / c[0] + max(prior * (1 - prior), 1e-4) / b[0])
                st.update({"before_wrong_rate": round(prior, 4), "rise": round(rate - prior, 4)})
                if rate - prior >= th["rise"] and rate - prior >= th["z"] * se:
                    by.append("rise")
        st["flagged_by"] = by
        st["flagged"] = 1 if by else 0
        stats[where] = st
        if by:
            flagged_where.append(where)
    by_arm = {w: s for w, s in stats.items() if "/" not in w}
    per_gym: dict[str, dict[str, Any]] = defaultdict(dict)
    for w, s in stats.items():
        if "/" in w:
            gym, arm = w.split("/", 1)
            per_gym[gym][arm] = s
    flagged = bool(flagged_where)
    bad_arms = {w.split("/")[-1] for w in flagged_where}
    matches = [r["episode"] for r in flagged_replies if r["arm"] in bad_arms] if flagged else []
    examples = [r for r in flagged_replies if r["arm"] in bad_arms][:MAX_EXAMPLES] if flagged else flagged_replies[:2]
    worst = max(stats.values(), key=lambda s: s["wrong_rate"])
    worst_where = next(w for w, s in stats.items() if s is worst)
    if flagged:
        parts = []
        for w in flagged_where:
            s = stats[w]
            text = f"{w}: {s['wrong']} of {s['replies']} replies flagged wrong ({s['wrong_rate']:.0%}"
            if "before_wrong_rate" in s:
                text += f", {s['before_wrong_rate']:.0%} before"
            parts.append(text + f"; by {'+'.join(s['flagged_by'])})")
        summary = "user replies the verifier flags wrong: " + "; ".join(parts)
    else:
        summary = (
            f"highest share of replies flagged wrong: {worst['wrong_rate']:.0%} ({worst_where}, "
            f"{worst['replies']} replies; threshold {th['wrong_rate']:.0%})"
        )
    high = any(stats[w]["wrong_rate"] >= 2 * th["wrong_rate"] for w in flagged_where)
    return Finding(
        "user_unreliable",
        flagged,
        "user",
        summary,
        severity="high" if high else "medium",
        metrics={"source": source, "by_arm": by_arm, "per_gym": dict(per_gym), "examples": examples},
        matches=matches,
        suggestion=(
            "read the flagged replies (eau sample --flag user_unreliable --limit 3) against the task; an LLM arm "
            "that contradicts the truth: raise user.user_strategy_mix (fewer LLM-arm episodes) while its model, "
            "prompt or user.temperature is fixed, and measure user_wrong_rate and arm/llm/success_rate; a symbolic "
            "arm flagged wrong: an edited rules/users/<gym>.yaml or persona states something the task rules out"
        ),
    )
