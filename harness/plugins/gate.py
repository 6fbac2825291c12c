"""The plug-in gate: what a plug-in must pass before a run puts it in force.

1. **Import** in a fresh worker process (:class:`harness.plugins.runtime.Worker`) under the import
   time limit: a syntax error, an exception at module level, a module that never finishes importing,
   or tables of the wrong shape are refused with the file and line.
2. **The override points' own checks**: every key of ``OVERRIDES`` names a known point (the error
   lists them); its function accepts the point's arguments (signature); no other plug-in in force
   implements the same point; on the point's sample inputs it returns, within the call time limit,
   a value of the point's type.
   Calls run under the call time limit, and all of them within the gate's budget
   (``EAU_PLUGIN_GATE_S``, default 30 s): a point runs on every turn, so a slow one is refused.
3. **Replay** of recorded episodes: every decision the point made in the run's recent episodes is
   made again by the candidate (under the call limit) and by the default; the result counts the
   decisions and how many the candidate changes, with a few examples. An error or a timeout on a
   recorded input refuses the plug-in: it would end those episodes.

Nothing here writes a file; :mod:`harness.plugins.folder` logs the outcome as a knob event.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from harness.plugins.points import POINTS, get_point
from harness.plugins.runtime import PluginError, PluginTimeout, Worker, call_limit_s, gate_budget_s

MAX_REPLAY_DECISIONS = 400  # per point: enough to count, seconds at most

RULE_IMPORT = "plugin import"
RULE_TIMEOUT = "plugin timeout"
RULE_CHECK = "plugin check"
RULE_REPLAY = "plugin replay"
RULE_CONFLICT = "plugin conflict"


def code_sha(source: str) -> str:
    """The sha256 of a plug-in's code (hex), as its knob events record it."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


@dataclass
class GateResult:
    """Outcome of the gate. ``rule``/``message``/``line``: the refusal (None/""/None when it passed)."""

    ok: bool
    sha: str
    points: list[str] = field(default_factory=list)
    replay: dict[str, dict[str, Any]] = field(default_factory=dict)
    rule: str | None = None
    message: str = ""
    line: int | None = None

    def summary(self) -> str:
        """One line: what the plug-in implements and what the replay found."""
        parts = []
        for p in self.points:
            r = self.replay.get(p) or {}
            n, k = r.get("decisions", 0), r.get("changed", 0)
            parts.append(
                f"{p} (replay: {k} of {n} recorded decisions changed)" if n else f"{p} (no recorded decisions)"
            )
        return "; ".join(parts) or "nothing"

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "sha256": self.sha,
            "points": self.points,
            "replay": self.replay,
            "rule": self.rule,
            "message": self.message,
            "line": self.line,
        }


def _refuse(res: GateResult, rule: str, message: str, line: int | None = None) -> GateResult:
    res.ok, res.rule, res.message, res.line = False, rule, message, line
    return res


def _refuse_error(res: GateResult, exc: PluginError, what: str) -> GateResult:
    rule = RULE_TIMEOUT if isinstance(exc, PluginTimeout) else what
    return _refuse(res, rule, exc.bare, exc.line)


def _accepts(desc: Mapping[str, Any], n: int) -> bool:
    return desc.get("required", 0) <= n and (desc.get("varargs") or len(desc.get("params", [])) >= n)


def gate_plugin(
    stem: str,
    source: str,
    file: str,
    *,
    others: Mapping[str, Sequence[str]] | None = None,
    records: Sequence[Mapping[str, Any]] = (),
) -> GateResult:
    """Gate plug-in ``stem`` (its ``source``, shown as ``file``). ``others``: the points each other
    plug-in in force implements ({stem: [point]}); ``records``: recorded episodes to replay."""
    res = GateResult(ok=True, sha=code_sha(source))
    worker = Worker()
    deadline = time.monotonic() + gate_budget_s()
    calls = [0]

    def call(name: str, args: tuple[Any, ...]) -> Any:
        """One call under the call limit and within the gate's budget (a point runs on every turn:
        a candidate too slow for the budget would stall the run's rollouts)."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise PluginTimeout(f"the gate's budget of {gate_budget_s():g} s ran out after {calls[0]} calls: too slow")
        calls[0] += 1
        try:
            return worker.call(res.sha, file, "override", name, list(args), limit_s=min(call_limit_s(), left))
        except PluginTimeout as exc:
            if left < call_limit_s():
                exc.bare = f"the gate's budget of {gate_budget_s():g} s ran out after {calls[0]} calls: too slow"
            raise

    try:
        try:
            loaded = worker.load(res.sha, file, source)
        except PluginError as exc:
            return _refuse_error(res, exc, RULE_IMPORT)
        overrides, predicates = loaded.get("overrides") or {}, loaded.get("predicates") or {}
        if not overrides and not predicates:
            return _refuse(
                res,
                RULE_CHECK,
                "the module defines no OVERRIDES (a dict of override point names to functions)",
            )
        # 2. the points' own checks
        for name, desc in overrides.items():
            if name not in POINTS:
                return _refuse(res, RULE_CHECK, f"OVERRIDES: {get_point_error(name)}", desc.get("line"))
            point = get_point(name)
            if not _accepts(desc, len(point.params)):
                return _refuse(
                    res,
                    RULE_CHECK,
                    f"{name} is called as {point.signature()}; the function takes "
                    f"({', '.join(desc.get('params', []))})",
                    desc.get("line"),
                )
            for other, pts in sorted((others or {}).items()):
                if other != stem and name in pts:
                    return _refuse(
                        res,
                        RULE_CONFLICT,
                        f"{name} is already implemented by plug-in {other} (plugins/{other}.py); one plug-in "
                        "per point: change or remove that one",
                        desc.get("line"),
                    )
        if predicates:
            return _refuse(
                res,
                RULE_CHECK,
                "PREDICATES: reward predicates in plug-ins are not supported yet; a plug-in implements "
                "override points (OVERRIDES) only",
            )
        res.points = sorted(overrides)
        for name in res.points:
            point = get_point(name)
            for args in point.samples:
                try:
                    value = call(name, args)
                except PluginError as exc:
                    exc.bare = f"on the sample input {args!r}: {exc.bare}"[:600]
                    return _refuse_error(res, exc, RULE_CHECK)
                problem = point.check_value(value)
                if problem:
                    return _refuse(
                        res, RULE_CHECK, f"on the sample input {args!r}: {problem}", overrides[name].get("line")
                    )
        # 3. replay
        for name in res.points:
            point = get_point(name)
            inputs = _replay_inputs(point, records)
            changed, examples = 0, []
            for args in inputs:
                try:
                    value = call(name, args)
                except PluginError as exc:
                    exc.bare = f"on a recorded input {args!r}: {exc.bare}"[:600]
                    return _refuse_error(res, exc, RULE_REPLAY)
                problem = point.check_value(value)
                if problem:
                    return _refuse(res, RULE_REPLAY, f"on a recorded input {args!r}: {problem}")
                before = point.default(*args)
                if value != before:
                    changed += 1
                    if len(examples) < 3:
                        examples.append({"input": list(args), "default": before, "plugin": value})
            res.replay[name] = {"decisions": len(inputs), "changed": changed, "examples": examples}
        return res
    finally:
        worker.close()


def get_point_error(name: str) -> str:
    try:
        get_point(name)
    except KeyError as exc:
        return str(exc.args[0])
    return ""


def _replay_inputs(point: Any, records: Sequence[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
    if point.replay is None:
        return []
    out: list[tuple[Any, ...]] = []
    for rec in records:
        try:
            out.extend(tuple(a) for a in point.replay(rec))
        except (KeyError, TypeError, ValueError, AttributeError):
            continue  # a record of another shape (another gym, an older format): nothing to replay
        if len(out) >= MAX_REPLAY_DECISIONS:
            return out[:MAX_REPLAY_DECISIONS]
    return out
