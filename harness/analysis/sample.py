"""``eau sample``: pick trajectories by step range, gym, arm, outcome or detector flag, and render
them readably (turns, parsed actions, user replies with disclosed facts, tool traces, rewards).

Outcomes: ``success`` (task solved), ``deadlock`` (turn limit hit without an answer), ``failure``
(neither: a wrong answer, or an answer that did not solve the task). Without ``--seed`` the newest
matching episodes come first; with it, a seeded random sample of the matches.
"""

from __future__ import annotations

import json
import random
from typing import Any, Mapping, Sequence

from harness.analysis.detectors import DETECTORS
from harness.analysis.diagnose import DEFAULT_WINDOW, UsageError, window_input
from harness.analysis.run_data import RunData

OUTCOMES = ("success", "failure", "deadlock")
DEFAULT_LIMIT = 3
MAX_LIMIT = 100  # a screenful of transcripts is a few; a hundred is already a file to grep
DEFAULT_MAX_CHARS = 1500  # per text field: a reference solution or a search listing stays readable
CLIP_MARK = "…[clipped {n} chars]"


def parse_steps(spec: str | None, run: RunData, window: int = DEFAULT_WINDOW) -> list[int]:
    """``A:B`` (inclusive; ``A:`` or ``:B`` open-ended) or ``N`` -> the recorded steps in it; None -> the
    last ``window`` steps."""
    recorded = run.trajectory_steps()
    if spec is None:
        return recorded[-window:]
    text = spec.strip()
    try:
        if ":" in text:
            a, _, b = text.partition(":")
            lo = int(a) if a.strip() else None
            hi = int(b) if b.strip() else None
        else:
            lo = hi = int(text)
    except ValueError:
        raise UsageError(f"--steps {spec!r}: expected A:B, A:, :B or N (integers)") from None
    return [s for s in recorded if (lo is None or s >= lo) and (hi is None or s <= hi)]


def outcome(ep: Mapping[str, Any]) -> str:
    if ep.get("success"):
        return "success"
    if ep.get("deadlock"):
        return "deadlock"
    return "failure"


def select(
    run: RunData,
    *,
    steps: Sequence[int],
    gym: str | None = None,
    arm: str | None = None,
    outcome_: str | None = None,
    flag: str | None = None,
    limit: int = DEFAULT_LIMIT,
    seed: int | None = None,
    thresholds: Mapping[str, float] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Matching episodes (at most ``limit``) and a summary of the selection."""
    if outcome_ is not None and outcome_ not in OUTCOMES:
        raise UsageError(f"--outcome {outcome_!r}: allowed {', '.join(OUTCOMES)}")
    if not 1 <= limit <= MAX_LIMIT:
        raise UsageError(f"--limit {limit}: allowed 1..{MAX_LIMIT}")
    flagged_ids: set[str] | None = None
    note = None
    if flag is not None:
        if flag not in DETECTORS:
            raise UsageError(f"--flag {flag!r}: unknown detector; detectors: {', '.join(DETECTORS)}")
        data = window_input(run, len(steps), until=steps[-1] if steps else None)
        data.episodes = run.episodes(steps)
        finding = DETECTORS[flag].run(data, thresholds)
        flagged_ids = set(finding.matches)
        note = (
            f"detector {flag}: {'flagged' if finding.flagged else 'not flagged'} over these steps; "
            f"{len(flagged_ids)} episode(s) attributed"
            + (" (it judges step metrics, not single episodes)" if finding.flagged and not flagged_ids else "")
        )
    matches = []
    for ep in run.iter_episodes_newest_first(steps):
        if gym is not None and ep.get("gym") != gym:
            continue
        if arm is not None and ep.get("arm") != arm:
            continue
        if outcome_ is not None and outcome(ep) != outcome_:
            continue
        if flagged_ids is not None and str(ep.get("episode_id")) not in flagged_ids:
            continue
        matches.append(ep)
    chosen = random.Random(seed).sample(matches, min(limit, len(matches))) if seed is not None else matches[:limit]
    summary = {
        "steps": [steps[0], steps[-1]] if steps else None,
        "matching": len(matches),
        "shown": len(chosen),
        "filters": {"gym": gym, "arm": arm, "outcome": outcome_, "flag": flag},
        "seed": seed,
    }
    if note:
        summary["flag_note"] = note
    return chosen, summary


def clip(obj: Any, max_chars: int) -> Any:
    """A copy of ``obj`` with every string longer than ``max_chars`` cut and marked."""
    if isinstance(obj, str):
        return obj if len(obj) <= max_chars else obj[:max_chars] + CLIP_MARK.format(n=len(obj) - max_chars)
    if isinstance(obj, dict):
        return {k: clip(v, max_chars) for k, v in obj.items()}
    if isinstance(obj, list):
        return [clip(v, max_chars) for v in obj]
    return obj


def _short(text: Any, n: int) -> str:
    s = " ".join(str(text).split()) if text is not None else ""
    return s if len(s) <= n else s[: n - 1] + "…"


def _reward_line(t: Mapping[str, Any]) -> str:
    bd = t.get("reward_breakdown") or {}
    parts = []
    if bd.get("task"):
        parts.append(f"task {bd['task']:+.3g}")
    parts += [f"{k} {v:+.3g}" for k, v in (bd.get("rules") or {}).items()]
    parts += [f"{k} {v:+.3g}" for k, v in (bd.get("builtin") or {}).items()]
    scale = bd.get("scale")
    tail = (f" x{scale:g}" if isinstance(scale, (int, float)) and scale != 1 else "") + (
        " clipped" if bd.get("clipped") else ""
    )
    return f"reward {float(t.get('reward', 0.0)):+.3f}" + (f" = {' + '.join(parts)}{tail}" if parts else "")


def render_episode(ep: Mapping[str, Any], max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """One episode as readable text."""
    task = ep.get("task") or {}
    facts = task.get("facts") or []
    revealed = ep.get("revealed") or {}
    head = (
        f"━━ {ep.get('episode_id')} · step {ep.get('step')} · {ep.get('gym')} · arm {ep.get('arm')} · "
        f"task {task.get('task_id')} ({task.get('split')}) · {outcome(ep).upper()} · reward "
        f"{float(ep.get('reward', 0.0)):+.3f} · {ep.get('num_turns')} turns, {ep.get('questions')} asks, "
        f"{ep.get('disclosures')} disclosures"
    )
    lines = [head, f"prompt: {_short(task.get('prompt'), max_chars)}"]
    if facts:
        lines.append(f"hidden facts ({sum(1 for f in facts if f.get('key') in revealed)}/{len(facts)} revealed):")
        for f in facts[:20]:
            mark = f"✓x{revealed[f['key']]}" if f.get("key") in revealed else "✗  "
            lines.append(f"  {mark} {f.get('key')} [{f.get('kind')}] {_short(f.get('text'), 160)}")
        if len(facts) > 20:
            lines.append(f"  … {len(facts) - 20} more")
    for t in ep.get("turns") or []:
        a = t.get("action") or {}
        if a.get("choice"):
            lines.append(f"T{t.get('turn')} {str(a['choice']).upper():6} {_short(a.get('content'), max_chars)}")
        else:
            lines.append(f"T{t.get('turn')} MALFORMED {_short(a.get('raw'), max_chars)}  ({a.get('format_error')})")
        ur = t.get("user_reply")
        if isinstance(ur, dict):
            flags = {k: v for k, v in (ur.get("flags") or {}).items() if k != "arm"}
            rev = f"  [revealed {', '.join(ur.get('revealed') or [])}]" if ur.get("revealed") else ""
            lines.append(
                f"   USER  {_short(ur.get('text'), max_chars)}{rev}"
                + (f"  {json.dumps(flags, default=str)[:200]}" if flags else "")
            )
        tool = t.get("tool")
        if isinstance(tool, dict):
            ok = "ok" if tool.get("ok") else "FAILED"
            lines.append(
                f"   TOOL  {tool.get('name')}({_short(tool.get('args'), 80)!r}) {ok} → "
                f"{_short(tool.get('result'), max_chars)}"
            )
        if t.get("obs_role") == "env" or (
            t.get("observation") and not isinstance(ur, dict) and not isinstance(tool, dict)
        ):
            lines.append(f"   ENV   {_short(t.get('observation'), max_chars)}")
        ans = t.get("answer")
        if isinstance(ans, dict):
            lines.append(
                f"   ANSWER scored: task_reward {ans.get('task_reward')}, success {ans.get('success')}, "
                f"details {_short(json.dumps(ans.get('details'), default=str), 200)}"
            )
        ev = ", ".join(t.get("events") or [])
        lines.append(f"   {_reward_line(t)}" + (f"   events: {ev}" if ev else ""))
    return "\n".join(lines)
