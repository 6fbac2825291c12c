"""Detectors of the policy's behaviour: template collapse, entropy collapse, question-rate drop."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Mapping

from harness.analysis.detectors.base import DetectorInput, Finding, detector, skipped
from harness.analysis.run_data import num
from harness.analysis.stats import distinct_n, mean, opening, std_error, top_share

# --------------------------------------------------------------------------- template collapse
# Words of a turn's opening: three are enough to tell "Do you have ..." from "Can it fly"; more
# would make every opening unique.
TEMPLATE_OPENING_WORDS = 3
# Gyms have their own protocol (every function probe reads "What is f(...)"), and a policy that
# learns a good question form repeats it; that is convergence, not collapse. Collapse is one
# template used *regardless of context*: the same opening in at least half of the turns of two or
# more different contexts (action choices ask/search/answer, or gyms).
TEMPLATE_CONTEXT_SHARE = 0.5
TEMPLATE_CONTEXTS = 2
# A context needs this many turns to count (a handful of answers says little).
TEMPLATE_CONTEXT_MIN_TURNS = 10
# One opening in 90% of all turns, or distinct-2 of all turn texts below 0.05 (19 bigrams in 20
# repeat), is collapse whatever the contexts.
TEMPLATE_ABSOLUTE_SHARE = 0.9
TEMPLATE_DISTINCT2_FLOOR = 0.05
# Agent turns the window needs for the measures to mean anything.
TEMPLATE_MIN_TURNS = 40


def _turn_text(t: Mapping[str, Any]) -> str:
    action = t.get("action") or {}
    return str(action.get("content") if action.get("choice") else action.get("raw") or "")


def _text_stats(texts: list[str], n_open: int) -> dict[str, Any]:
    top, share = top_share([opening(x, n_open) for x in texts if x.strip()])
    full, full_share = top_share([" ".join(x.lower().split()) for x in texts if x.strip()])
    d1, d2 = distinct_n(texts, 1), distinct_n(texts, 2)
    return {
        "turns": len(texts),
        "distinct_1": round(d1, 4) if d1 is not None else None,
        "distinct_2": round(d2, 4) if d2 is not None else None,
        "top_opening": top,
        "top_opening_share": round(share, 4),
        "top_turn_text": (full or "")[:120],
        "top_turn_text_share": round(full_share, 4),
    }


@detector(
    "template_collapse",
    "policy",
    {
        "opening_words": (TEMPLATE_OPENING_WORDS, "words that make up a turn's opening"),
        "context_share": (TEMPLATE_CONTEXT_SHARE, "share of a context's turns the top opening must hold"),
        "contexts": (TEMPLATE_CONTEXTS, "contexts (choices or gyms) the top opening must dominate"),
        "context_min_turns": (TEMPLATE_CONTEXT_MIN_TURNS, "turns a context needs to count"),
        "absolute_share": (TEMPLATE_ABSOLUTE_SHARE, "share of all turns with one opening that is collapse regardless"),
        "distinct2_floor": (TEMPLATE_DISTINCT2_FLOOR, "distinct-2 of all turn texts below which they collapsed"),
        "min_turns": (TEMPLATE_MIN_TURNS, "agent turns the window needs"),
    },
)
def template_collapse(data: DetectorInput, th: Mapping[str, float]) -> Finding:
    """Agent turns collapsing onto one template used regardless of context: the most common opening
    n-gram dominating several action choices or gyms, or near-identical texts (distinct-1/2);
    per-gym statistics and the preceding window's are given as evidence."""
    n_open = int(th["opening_words"])
    rows = []  # (episode id, gym, choice, text)
    for e in data.episodes:
        for t in e.get("turns") or []:
            rows.append(
                (str(e.get("episode_id")), str(e.get("gym")), str((t.get("action") or {}).get("choice")), _turn_text(t))
            )
    if len(rows) < th["min_turns"]:
        return skipped("template_collapse", "policy", f"only {len(rows)} agent turns in the window", th)
    overall = _text_stats([r[3] for r in rows], n_open)
    top = overall["top_opening"]
    contexts: dict[str, list[str]] = defaultdict(list)
    for _, gym, choice, text in rows:
        contexts[f"choice:{choice}"].append(opening(text, n_open))
        contexts[f"gym:{gym}"].append(opening(text, n_open))
    dominated = {}
    for ctx, ops in sorted(contexts.items()):
        if len(ops) >= th["context_min_turns"]:
            share = sum(1 for o in ops if o == top) / len(ops)
            if share >= th["context_share"]:
                dominated[ctx] = round(share, 4)
    by_kind: dict[str, int] = defaultdict(int)
    for ctx in dominated:
        by_kind[ctx.split(":")[0]] += 1
    why = []
    if max(by_kind.values(), default=0) >= th["contexts"]:
        why.append(f"opening {top!r} starts most turns in {', '.join(f'{k} ({v:.0%})' for k, v in dominated.items())}")
    if overall["top_opening_share"] >= th["absolute_share"]:
        why.append(f"{overall['top_opening_share']:.0%} of all turns open with {top!r}")
    if overall["distinct_2"] is not None and overall["distinct_2"] < th["distinct2_floor"]:
        why.append(f"distinct-2 of all turns is {overall['distinct_2']:.3f}")
    flagged = bool(why)
    per_gym: dict[str, list[str]] = defaultdict(list)
    for _, gym, _, text in rows:
        per_gym[gym].append(text)
    before = [_turn_text(t) for e in data.before_episodes for t in e.get("turns") or []]
    metrics = {
        "all": overall,
        "dominated_contexts": dominated,
        "per_gym": {g: _text_stats(v, n_open) for g, v in sorted(per_gym.items())},
        "before": _text_stats(before, n_open) if len(before) >= th["min_turns"] else None,
    }
    matches = sorted({r[0] for r in rows if opening(r[3], n_open) == top}) if flagged else []
    summary = (
        "agent turns collapsed onto one template: " + "; ".join(why)
        if flagged
        else f"top opening {top!r} in {overall['top_opening_share']:.0%} of turns, dominating "
        f"{len(dominated)} context(s); distinct-2 {overall['distinct_2']}"
    )
    return Finding(
        "template_collapse",
        flagged,
        "policy",
        summary,
        severity="high" if len(why) > 1 else "medium",
        metrics=metrics,
        matches=matches,
        suggestion=(
            "agent.entropy_coeff (raise by at most its max delta), agent.temperature; a "
            "repeated_question penalty in rules/rewards; eau sample --flag template_collapse"
        ),
    )


# --------------------------------------------------------------------------- entropy collapse
# Mean token entropy (nats) below 0.05: the policy samples nearly one token everywhere; exploration is over.
ENTROPY_FLOOR = 0.05
# Entropy falling to 40% of its early level (a 60% drop) is a collapse in progress even above the floor.
ENTROPY_DROP = 0.6
# Early steps that define the baseline level.
ENTROPY_BASE_STEPS = 5


@detector(
    "entropy_collapse",
    "policy",
    {
        "floor": (ENTROPY_FLOOR, "mean policy entropy (nats/token) below which it collapsed"),
        "drop": (ENTROPY_DROP, "fractional drop from the run's early entropy that counts as collapse"),
        "base_steps": (ENTROPY_BASE_STEPS, "first steps of the run that define the early entropy"),
    },
)
def entropy_collapse(data: DetectorInput, th: Mapping[str, float]) -> Finding:
    """Policy entropy (the ``entropy`` metric) below a floor, or dropped by a large fraction from the
    run's first steps."""
    win = [v for m in data.metrics if (v := num(m.get("entropy"))) is not None]
    if not win:
        return skipped(
            "entropy_collapse", "policy", "no entropy metric in the window (the trainer logs it per step)", th
        )
    hist = [v for m in data.history if (v := num(m.get("entropy"))) is not None]
    base_src = hist[: int(th["base_steps"])]
    cur = mean(win[-min(len(win), 3) :]) or 0.0  # the last few steps: where it is now, not the window's average
    metrics: dict[str, Any] = {
        "entropy_now": round(cur, 5),
        "entropy_window_mean": round(mean(win) or 0.0, 5),
        "window_steps": len(win),
    }
    knob_vals = {k: num(data.metrics[-1].get(k)) for k in ("entropy_coeff", "temperature") if data.metrics}
    metrics.update({k: v for k, v in knob_vals.items() if v is not None})
    problems = []
    drop = None
    if base_src:
        base = mean(base_src) or 0.0
        metrics["entropy_early"] = round(base, 5)
        if base > 0:
            drop = 1.0 - cur / base
            metrics["drop"] = round(drop, 4)
            if drop >= th["drop"]:
                problems.append(f"entropy fell {drop:.0%} from {base:.3f} (first steps) to {cur:.3f}")
    else:
        metrics["drop"] = "skipped: no steps before the window (the floor still applies)"
    if cur < th["floor"]:
        problems.append(f"entropy {cur:.4f} is below the floor {th['floor']}")
    flagged = bool(problems)
    return Finding(
        "entropy_collapse",
        flagged,
        "policy",
        "; ".join(problems)
        if flagged
        else f"entropy {cur:.3f}" + (f" ({drop:+.0%} vs early)" if drop is not None else ""),
        severity="high" if cur < th["floor"] else "medium",
        metrics=metrics,
        suggestion=(
            "agent.entropy_coeff (x-max-delta limits one write), agent.temperature, agent.lr; then "
            "eau effect --event <id> --metric entropy with a lag of a few steps"
        ),
    )


# --------------------------------------------------------------------------- question-rate drop
# The method saw question rate fall from 40% to 26% (a 35% relative drop) while flow rose; 25%
# relative catches that with room for noise. The same relative drop applies to both measures below.
QR_DROP = 0.25
# Absolute drops needed, so a measure near zero cannot flag on jitter: 0.05 asks per turn, and half a
# question per episode.
QR_MIN_ABS = 0.05
QR_MIN_ABS_QUESTIONS = 0.5
# The drop must exceed this many standard errors of the difference of the two windows' means
# (steps as units overall, episodes as units per gym).
QR_Z = 2.0
# Steps each window needs (overall test).
QR_MIN_STEPS = 3
# Episodes of a gym each window needs (per-gym test).
QR_MIN_EPISODES = 20
# Two measures of asking. Asks per turn (the method's) misses a policy that asks fewer questions and
# then answers: its episodes are k questions and an answer, so its rate is k/(k+1) (measured on a
# tiny run: 4.0 -> 2.75 questions per episode moved the rate 0.80 -> 0.73). Asks per episode catches
# it; per turn catches asking replaced by other actions (searches) in episodes of the same length.
QR_MEASURES = {"question_rate": "min_abs", "questions_per_episode": "min_abs_questions"}
# Disclosures per episode "held up" when they fell by at most this share while asking dropped: the
# user then gives what the agent stopped asking for (measured on tiny runs: an LLM user that pastes
# every fact, questions -32% and disclosures 9.7 -> 9.2; a question penalty, questions -52% and
# disclosures 2.0 -> 0.7).
QR_DISCLOSURE_HOLD = 0.1


def _ask_measure(e: Mapping[str, Any], measure: str) -> float:
    """One episode's asks per turn (``question_rate``) or asks (``questions_per_episode``); needs turns."""
    q = int(e.get("questions", 0) or 0)
    return q / int(e["num_turns"]) if measure == "question_rate" else float(q)


def _episode_asks(episodes: list[dict[str, Any]]) -> dict[str, dict[str, list[float]]]:
    """Per gym, each episode's value of every measure in QR_MEASURES (episodes with turns)."""
    out: dict[str, dict[str, list[float]]] = defaultdict(lambda: {m: [] for m in QR_MEASURES})
    for e in episodes:
        if int(e.get("num_turns", 0) or 0):
            for m in QR_MEASURES:
                out[str(e.get("gym"))][m].append(_ask_measure(e, m))
    return out


def _drop(
    prev: list[float], now: list[float], th: Mapping[str, float], min_abs: float
) -> tuple[dict[str, float], bool]:
    a, b = mean(prev) or 0.0, mean(now) or 0.0
    se = ((std_error(prev) or 0.0) ** 2 + (std_error(now) or 0.0) ** 2) ** 0.5
    rel = (a - b) / a if a > 0 else 0.0
    stats = {
        "before": round(a, 4),
        "now": round(b, 4),
        "relative_drop": round(rel, 4),
        "absolute_drop": round(a - b, 4),
        "se": round(se, 4),
    }
    return stats, rel >= th["drop"] and a - b >= min_abs and a - b > th["z"] * se


@detector(
    "question_rate_drop",
    "policy",
    {
        "drop": (QR_DROP, "relative drop of question_rate or questions_per_episode vs the preceding window"),
        "min_abs": (QR_MIN_ABS, "absolute drop of question_rate (asks per turn) needed"),
        "min_abs_questions": (QR_MIN_ABS_QUESTIONS, "absolute drop of questions_per_episode needed"),
        "z": (QR_Z, "standard errors the drop must exceed"),
        "min_steps": (QR_MIN_STEPS, "steps with question_rate each window needs"),
        "min_episodes": (QR_MIN_EPISODES, "episodes of a gym each window needs for the per-gym test"),
        "disclosure_hold": (
            QR_DISCLOSURE_HOLD,
            (
                "largest relative fall of disclosures_mean that still counts as held "
                "(the user, not the policy, then explains the drop)"
            ),
        ),
    },
)
def question_rate_drop(data: DetectorInput, th: Mapping[str, float]) -> Finding:
    """Asking in the window against the preceding window of equal length, as asks per turn
    (``question_rate``) and asks per episode (``questions_mean``), overall (metrics, steps as units)
    and per gym (episodes as units): a drop while disclosures hold up often means the user volunteers
    what the agent stopped asking. ``flagged_by`` names the measures that dropped."""
    prev_lines = data.history[-max(1, len(data.metrics)) :]
    source = {"question_rate": "question_rate", "questions_per_episode": "questions_mean"}
    win = {m: [v for x in data.metrics if (v := num(x.get(k))) is not None] for m, k in source.items()}
    prev = {m: [v for x in prev_lines if (v := num(x.get(k))) is not None] for m, k in source.items()}
    if len(win["question_rate"]) < th["min_steps"] or len(prev["question_rate"]) < th["min_steps"]:
        return skipped(
            "question_rate_drop",
            "policy",
            f"needs {int(th['min_steps'])}+ steps with question_rate in the window and before it "
            f"(window {len(win['question_rate'])}, before {len(prev['question_rate'])})",
            th,
        )
    overall: dict[str, Any] = {}
    flagged_by: list[str] = []
    for m, abs_key in QR_MEASURES.items():
        if len(win[m]) >= th["min_steps"] and len(prev[m]) >= th["min_steps"]:
            overall[m], f = _drop(prev[m], win[m], th, th[abs_key])
            if f:
                flagged_by.append(m)
    overall["flagged_by"] = flagged_by
    asks_now, asks_before = _episode_asks(data.episodes), _episode_asks(data.before_episodes)
    per_gym: dict[str, dict[str, Any]] = {}
    flagged_gyms: list[str] = []
    for g in sorted(set(asks_now) & set(asks_before)):
        if min(len(asks_now[g]["question_rate"]), len(asks_before[g]["question_rate"])) < th["min_episodes"]:
            continue
        per_gym[g] = {"flagged_by": []}
        for m, abs_key in QR_MEASURES.items():
            per_gym[g][m], f = _drop(asks_before[g][m], asks_now[g][m], th, th[abs_key])
            if f:
                per_gym[g]["flagged_by"].append(m)
        if per_gym[g]["flagged_by"]:
            flagged_gyms.append(g)
    vol = [v for m in data.metrics if (v := num(m.get("disclosures_mean"))) is not None]
    vol_prev = [v for m in prev_lines if (v := num(m.get("disclosures_mean"))) is not None]
    volunteered = sum(
        1
        for e in data.episodes
        for t in e.get("turns") or []
        if ((t.get("user_reply") or {}).get("flags") or {}).get("volunteered")
    )
    disclosing = sum(
        1 for e in data.episodes for t in e.get("turns") or [] if (t.get("user_reply") or {}).get("revealed")
    )
    vol_share = volunteered / disclosing if disclosing else 0.0
    d_before, d_now = mean(vol_prev) if vol_prev else None, mean(vol) if vol else None
    held = bool(d_before and d_now is not None and d_now >= (1 - th["disclosure_hold"]) * d_before)
    metrics = {
        "question_rate": overall.get("question_rate"),
        "questions_per_episode": overall.get("questions_per_episode"),
        "flagged_by": flagged_by,
        "per_gym": per_gym,
        "disclosures_mean_before": round(mean(vol_prev) or 0.0, 4) if vol_prev else None,
        "disclosures_mean_now": round(mean(vol) or 0.0, 4) if vol else None,
        "volunteered_share_of_disclosing_turns": round(vol_share, 4) if disclosing else None,
        "disclosures_held": held,
    }
    flag_all = bool(flagged_by)
    flagged = flag_all or bool(flagged_gyms)
    component = "user" if flagged and (vol_share >= 0.3 or held) else "policy"
    scope = "all gyms" if flag_all else ", ".join(flagged_gyms)
    stats = overall if flag_all else (per_gym[flagged_gyms[0]] if flagged_gyms else overall)
    measure = (stats["flagged_by"] or ["question_rate"])[0]
    shown = stats[measure]
    low = shown["now"]

    low_q = [
        str(e.get("episode_id"))
        for e in data.episodes
        if (flag_all or str(e.get("gym")) in flagged_gyms)
        and int(e.get("num_turns", 0) or 0)
        and _ask_measure(e, measure) <= low
    ]  # <=: a measure that fell to 0
    unit = "asks per turn" if measure == "question_rate" else "questions per episode"
    qr = overall["question_rate"]
    summary = (
        f"{'question rate' if measure == 'question_rate' else 'questions per episode'} fell "
        f"{shown['relative_drop']:.0%} ({shown['before']:.2f} -> {shown['now']:.2f} {unit}) in {scope}"
        + (f"; {vol_share:.0%} of disclosing turns were volunteered by the user" if vol_share >= 0.3 else "")
        + (
            f"; disclosures per episode held ({d_before:.2f} -> {d_now:.2f}): the user gives what the agent "
            "stopped asking for"
            if held
            else ""
        )
        if flagged
        else f"question rate {qr['before']:.2f} -> {qr['now']:.2f} ({-qr['relative_drop']:+.0%})"
        + (
            f", questions per episode {q['before']:.2f} -> {q['now']:.2f} ({-q['relative_drop']:+.0%})"
            if (q := overall.get("questions_per_episode"))
            else ""
        )
        + "; no gym dropped significantly"
    )
    return Finding(
        "question_rate_drop",
        flagged,
        component,
        summary,
        severity="medium",
        metrics=metrics,
        matches=low_q if flagged else [],
        suggestion=(
            "user.volunteer_interval and env.elicitation_interval (volunteering masks fewer "
            "questions), env.min_questions; eau effect --event <id> --metric question_rate (or "
            "questions_mean) for the knob change before the drop"
        ),
    )
