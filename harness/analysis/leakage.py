"""Per-episode leak measures for the ``user_leakage`` detector (and ``eau gate`` replays).

What a reply must not give away, and how each is checked:

1. **The hidden answer** (``task.secret``, rebuilt by :mod:`harness.analysis.tasks`): every reply the
   agent actually read is checked with the users' own :class:`~harness.users.leakguard.LeakGuard`
   (token span, character span, n-gram coverage, whole secret), and so is the concatenation of all
   replies of the episode, which catches a secret given away in pieces that no single reply shows.
   A secret that is a list of short labels (travel's ``F2, H4``: one option id per part of the
   trip) is also checked label by label, since naming one label gives away one part of the answer
   and is far below the guard's whole-secret length. The guard runs inside the user before the
   agent reads a reply, so a hit here means the guard was bypassed or is too weak for the case.
2. **Fact kinds the reveal filter excludes** (``reveal_kinds`` of the episode): a revealed fact of an
   excluded kind, or a reply that carries such a fact's text by the users' own disclosure measure
   (``matching.discloses``). This is the method's ``return``-vs-``shape`` defect: a filter that does
   not cover the kind that leaks.
3. **Over-disclosure**: a reply disclosing more facts than ``facts_per_reply`` (one volunteered fact
   on top allowed), or flagged ``over_disclosed`` by the LLM user, and *bulk* replies that hand over
   most of the task's hidden facts at once (the method's facts_per_reply 1 -> 3 change produced
   reference-solution disclosure in 837-character replies).
4. **Unasked disclosures**: a reply to a question that discloses a fact the question does not ask
   about (the users' own similarity below ``match_threshold``; one volunteered fact on top allowed).
   A healthy symbolic user discloses only matched facts; a rule that answers every question with the
   next hidden detail lets any question, however empty, collect the task.
5. **Redactions** (``flags.leak_redacted``): the guard caught a leaking reply; the agent read a
   refusal instead. Frequent redactions mean the user keeps trying to leak.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from harness.types import Fact, Task
from harness.users.leakguard import LeakGuard, normalise
from harness.users.matching import discloses, discloses_unasked

_LABEL_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,15}$")
MIN_LABELS = 2  # a list answer has at least two labels; a single short token is too ambiguous to search for


def secret_labels(secret: str, public: str = "") -> list[str]:
    """The labels of a list-shaped secret (``"F2, H4"`` -> ``["f2", "h4"]``), else ``[]``.

    Labels that also appear in the public prompt are dropped (they give nothing away)."""
    parts = [p.strip() for p in re.split(r"[,;\n]", normalise(secret)) if p.strip()]
    if len(parts) < MIN_LABELS or not all(_LABEL_RE.match(p) for p in parts):
        return []
    pub = normalise(public)
    return [p for p in parts if not re.search(rf"(?<!\w){re.escape(p)}(?!\w)", pub)]


def _label_hits(text: str, labels: list[str]) -> list[str]:
    t = normalise(text)
    return [lb for lb in labels if re.search(rf"(?<!\w){re.escape(lb)}(?!\w)", t)]


@dataclass
class EpisodeLeaks:
    """Leak measures of one episode (see the module docstring)."""

    replies: int = 0
    secret_checked: bool = False
    no_secret: bool = False  # the task has no single hidden answer (intention): nothing to give away
    secret_unchecked_reason: str | None = None
    secret_leak_turns: list[int] = field(default_factory=list)
    secret_leak_reasons: list[str] = field(default_factory=list)
    cumulative_leak: bool = False
    filtered_kind_turns: list[int] = field(default_factory=list)
    filtered_kinds: list[str] = field(default_factory=list)
    disclosing_replies: int = 0
    over_disclosed_turns: list[int] = field(default_factory=list)
    # replies to a question that disclose a fact the question does not ask about (similarity below
    # match_threshold; a volunteered fact on top is allowed): a rule answering what was not asked
    unasked_turns: list[int] = field(default_factory=list)
    bulk_turns: list[int] = field(default_factory=list)
    redacted_turns: list[int] = field(default_factory=list)

    @property
    def secret_leak(self) -> bool:
        return bool(self.secret_leak_turns) or self.cumulative_leak


def _facts(record: Mapping[str, Any]) -> list[Fact]:
    out = []
    for f in (record.get("task") or {}).get("facts") or []:
        try:
            out.append(
                Fact(
                    key=str(f["key"]),
                    kind=str(f["kind"]),
                    text=str(f.get("text", "")),
                    keywords=tuple(f.get("keywords") or ()),
                    importance=int(f.get("importance", 1)),
                )
            )
        except (KeyError, TypeError, ValueError):
            continue
    return out


def episode_leaks(
    record: Mapping[str, Any],
    task: Task | None,
    unchecked_reason: str | None = None,
    *,
    bulk_share: float = 0.6,
    bulk_min_facts: int = 3,
) -> EpisodeLeaks:
    """Measure one recorded episode; ``task`` is the rebuilt task (None: the secret is not checked)."""
    out = EpisodeLeaks()
    user_knobs = (record.get("knobs") or {}).get("user") or {}
    kinds = user_knobs.get("reveal_kinds")
    allowed_kinds = set(kinds) if isinstance(kinds, list) else None
    per_reply = user_knobs.get("facts_per_reply")
    threshold = float(user_knobs.get("match_threshold", 0.3) or 0.3)
    facts = _facts(record)
    by_key = {f.key: f for f in facts}
    excluded = [f for f in facts if allowed_kinds is not None and f.kind not in allowed_kinds]
    guard = labels = None
    if task is not None and task.secret:
        guard = LeakGuard(task.secret, public=task.prompt)
        labels = secret_labels(task.secret, task.prompt)
        out.secret_checked = True
    elif task is not None:
        out.no_secret = True
    else:
        out.secret_unchecked_reason = unchecked_reason or "task not rebuilt"
    texts = []
    for t in record.get("turns") or []:
        reply = t.get("user_reply")
        if not isinstance(reply, dict):
            continue
        turn = int(t.get("turn", 0))
        text = str(reply.get("text") or "")
        flags = reply.get("flags") or {}
        revealed = [str(k) for k in reply.get("revealed") or []]
        out.replies += 1
        texts.append(text)
        if flags.get("leak_redacted"):
            out.redacted_turns.append(turn)
        if guard is not None:
            rep = guard.check(text)
            hits = _label_hits(text, labels or [])
            if rep.leaked or hits:
                out.secret_leak_turns.append(turn)
                out.secret_leak_reasons += rep.reasons() + [f"label {h}" for h in hits]
        bad_kinds = {
            by_key[k].kind
            for k in revealed
            if k in by_key and allowed_kinds is not None and by_key[k].kind not in allowed_kinds
        }
        bad_kinds |= {f.kind for f in excluded if text and discloses(text, f, threshold)}
        if bad_kinds:
            out.filtered_kind_turns.append(turn)
            out.filtered_kinds = sorted(set(out.filtered_kinds) | bad_kinds)
        distinct = list(dict.fromkeys(revealed))
        if distinct:
            out.disclosing_replies += 1
            allowance = (int(per_reply) if isinstance(per_reply, int) else 1) + (1 if flags.get("volunteered") else 0)
            if flags.get("over_disclosed") or len(distinct) > allowance:
                out.over_disclosed_turns.append(turn)
            static = [k for k in distinct if k in by_key]
            action = t.get("action") if isinstance(t.get("action"), dict) else {}
            if action.get("choice") == "ask" and flags.get("intent") != "volunteer":
                question = str(action.get("content") or "")
                if discloses_unasked(
                    question, [by_key[k] for k in static], threshold, volunteered=bool(flags.get("volunteered"))
                ):
                    out.unasked_turns.append(turn)
            if (
                len(facts) >= bulk_min_facts
                and len(static) >= bulk_min_facts
                and len(static) >= bulk_share * len(facts)
            ):
                out.bulk_turns.append(turn)
    if guard is not None and len(texts) > 1 and not out.secret_leak_turns:
        joined = "\n".join(texts)
        out.cumulative_leak = guard.check(joined).leaked  # labels were already checked reply by reply
        if out.cumulative_leak:
            out.secret_leak_reasons.append("cumulative")
    return out
