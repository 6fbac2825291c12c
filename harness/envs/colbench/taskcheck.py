"""Checking a task set: every reference passes its own tests, deterministically, in the sandbox.

For each task the reference runs on the values its tests check (``harness.sandbox.probes``: a
bare call, or each side of a comparison, as scoring evaluates them); a task passes when every one
returns a plain value (``ok``) and a second run in a fresh sandbox returns equal values. Otherwise
the first reason found is reported (naming the test, and the value when the test was taken apart):

* ``unavailable_module`` — an import of a module that is not installed (e.g. ``bs4``);
* ``syntax_error`` / ``module_error`` — the reference does not load;
* ``raised`` — a test call raised (the expected outcome of a test must be a value);
* ``timeout``, ``crashed``, ``output_limit`` — a sandbox limit was hit;
* ``unsupported_value`` / ``too_large`` — a test returned something that cannot be compared;
* ``nondeterministic`` — the two runs returned different values;
* ``no_tests`` — the task has no test calls;
* ``check_error`` — checking this task failed unexpectedly (named with the exception); the check
  goes on with the other tasks. Only a sandbox that cannot start at all stops it.

The second run is only made when the first passes. Tasks are checked by a small thread pool (each
sandbox run is its own process, so threads only wait).

**What a constant answer earns.** The reward of a colbench episode is the share of tests passed,
so a task whose tests mostly check one value pays an answer that ignores its input. For every task
that passes, :func:`constant_answer_share` reads the reference's first run: the best share of tests
that one program returning a single value ``v`` from every function would pass (a test counts when
each value it checks is a direct call of a function, ``f(...)``, whose reference value is ``v``, or
a ``print(...)``, which is None whatever the answer). It is a lower bound of what a constant answer
earns (a test such as ``len(f(x)) == 3`` is not counted). Not a failure: the report gives the mean
and the tasks a constant answer solves outright.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from harness.envs.registry import gym_class
from harness.sandbox import (
    CRASHED,
    MODULE_ERROR,
    OK,
    OUTPUT_LIMIT,
    RAISED,
    TIMEOUT,
    TOO_LARGE,
    UNSUPPORTED,
    CallResult,
    Limits,
    SandboxError,
    run_source,
)
from harness.sandbox.probes import probe_kind, probe_set
from harness.sandbox.values import render, values_equal

REASONS = (
    "unavailable_module",
    "syntax_error",
    "module_error",
    "raised",
    "timeout",
    "crashed",
    "output_limit",
    "unsupported_value",
    "too_large",
    "nondeterministic",
    "no_tests",
    "check_error",
)
_MISSING_RE = re.compile(r"No module named '([^']+)'")


class NoCodeReferences(LookupError):
    """The gym has no code references to check (only colbench has)."""


@dataclass(frozen=True)
class CheckItem:
    """One reference to check. index: position in the task set (file order for data files)."""

    index: int
    task_id: str
    reference: str
    calls: tuple[str, ...]
    test_names: tuple[str, ...]


@dataclass
class CheckResult:
    """Outcome of one task: passed, else the reason kind (one of ``REASONS``) and a sentence.
    ``constant_share`` and ``constant_value`` (passed tasks only): :func:`constant_answer_share`."""

    index: int
    task_id: str
    passed: bool
    reason_kind: str | None = None
    reason: str | None = None
    seconds: float = 0.0
    constant_share: float | None = None
    constant_value: str | None = None


@dataclass
class CheckReport:
    """All results of a check, with counts per reason kind."""

    total: int
    passed: int
    results: list[CheckResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if not r.passed]

    def reason_counts(self) -> dict[str, int]:
        return dict(Counter(r.reason_kind for r in self.failures))

    def constant_answer(self) -> dict[str, Any]:
        """What a constant answer earns over the passed tasks: ``mean_share`` (the mean of each
        task's ``constant_share``, None when no task passed), ``half_or_more`` (tasks where it
        passes at least half the tests) and ``solved`` (tasks where it passes every test: index,
        task_id and the value, rendered)."""
        shares = [r for r in self.results if r.constant_share is not None]
        return {
            "mean_share": round(sum(r.constant_share for r in shares) / len(shares), 4) if shares else None,
            "half_or_more": sum(r.constant_share >= 0.5 for r in shares),
            "solved": [
                {"index": r.index, "task_id": r.task_id, "value": r.constant_value}
                for r in shares
                if r.constant_share >= 1.0
            ],
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "passed": self.passed,
            "failed": self.total - self.passed,
            "failures": [
                {"index": r.index, "task_id": r.task_id, "reason_kind": r.reason_kind, "reason": r.reason}
                for r in self.failures
            ],
            "reasons": self.reason_counts(),
            "constant_answer": self.constant_answer(),
            "seconds": round(self.seconds, 2),
        }


def constant_answer_share(
    probes: Sequence[Sequence[str]], outcomes: Sequence[Sequence[CallResult]]
) -> tuple[float, Any]:
    """The best share of tests one constant answer passes, and its value (the canonical encoding;
    None when no test can be passed that way). ``probes`` and ``outcomes``: per test, the values it
    checks and the reference's outcomes of them. A test is passed by the answer that returns ``v``
    from every function when each of its values is a direct call whose reference value is ``v``
    (an exception is never matched: the constant answer does not raise) or a ``print(...)``; a
    test with no value at all is not counted as passed."""
    if not probes:
        return 0.0, None
    tests: list[tuple[list[Any], bool]] = []  # (values of its direct calls, whether it can pass at all)
    for calls, outs in zip(probes, outcomes):
        values: list[Any] = []
        ok = bool(calls) and len(calls) == len(outs)
        for call, out in zip(calls, outs):
            kind = probe_kind(call)
            if out.status != OK or kind == "other":
                ok = False
            elif kind == "call":
                values.append(out.value)
        tests.append((values, ok))
    candidates = [v for values, ok in tests if ok for v in values[:1]]
    best, best_value = sum(1 for values, ok in tests if ok and not values), None  # print-only tests pass for any
    for v in candidates:
        n = sum(1 for values, ok in tests if ok and all(values_equal(v, w) for w in values))
        if n > best:
            best, best_value = n, v
    return best / len(probes), best_value


def _missing_module(res_error: str | None, message: str) -> str | None:
    if res_error in ("ModuleNotFoundError", "ImportError"):
        m = _MISSING_RE.search(message or "")
        return m.group(1) if m else "?"
    return None


def _call_reason(name: str, res: CallResult) -> tuple[str, str]:
    """(kind, sentence) for a failed call outcome."""
    if res.status == RAISED:
        missing = _missing_module(res.error, res.message)
        if missing:
            return "unavailable_module", f"{name}: import of an unavailable module {missing!r} ({res.error})"
        return "raised", f"{name}: raised {res.error}: {res.message}"
    if res.status == MODULE_ERROR:
        missing = _missing_module(res.error, res.message.split(": ", 1)[-1])
        if missing:
            return "unavailable_module", f"module: import of an unavailable module {missing!r} ({res.error})"
        if res.error in ("SyntaxError", "IndentationError", "TabError"):
            return "syntax_error", f"module: {res.error}: {res.message}"
        return "module_error", f"module: {res.error}: {res.message}"
    kind = {
        TIMEOUT: "timeout",
        CRASHED: "crashed",
        OUTPUT_LIMIT: "output_limit",
        UNSUPPORTED: "unsupported_value",
        TOO_LARGE: "too_large",
    }.get(res.status, res.status)
    return kind, f"{name}: {res.status} ({res.message or res.error})"


def _label(name: str, test: str, res: CallResult) -> str:
    """The test's name, with the value checked when the test was taken apart (``f(x) == v``)."""
    return name if res.call == test else f"{name} ({res.call[:80]})"


def _first_failure(item: CheckItem, per_test: Sequence[Sequence[CallResult]]) -> tuple[str, str] | None:
    for name, test, outs in zip(item.test_names, item.calls, per_test):
        for res in outs:
            if res.status != OK:
                return _call_reason(_label(name, test, res), res)
    return None


def check_item(item: CheckItem, limits: Limits) -> CheckResult:
    """Run one reference twice (the second run only when the first passes) and judge it. Never
    raises for anything the reference does; SandboxError when the sandbox cannot run at all."""
    t0 = time.monotonic()
    try:
        return _check_item(item, limits, t0)
    except SandboxError:
        raise
    except Exception as exc:  # noqa: BLE001 -- one task's failure is a line of the report, not a traceback
        return CheckResult(
            item.index,
            item.task_id,
            False,
            "check_error",
            f"checking failed: {type(exc).__name__}: {str(exc)[:300]}",
            time.monotonic() - t0,
        )


def _check_item(item: CheckItem, limits: Limits, t0: float) -> CheckResult:
    def done(kind: str | None, reason: str | None) -> CheckResult:
        return CheckResult(item.index, item.task_id, kind is None, kind, reason, time.monotonic() - t0)

    if not item.calls:
        return done("no_tests", "the task has no test calls")
    probes = probe_set(item.calls)
    first = probes.per_test(run_source(item.reference, probes.calls, limits).calls)
    failure = _first_failure(item, first)
    if failure:
        return done(*failure)
    second = probes.per_test(run_source(item.reference, probes.calls, limits).calls)
    failure = _first_failure(item, second)
    if failure:
        return done("nondeterministic", f"second run differs: {failure[1]}")
    for name, test, outs_a, outs_b in zip(item.test_names, item.calls, first, second):
        for a, b in zip(outs_a, outs_b):
            if not values_equal(a.value, b.value):
                return done(
                    "nondeterministic",
                    f"{_label(name, test, a)} returned {render(a.value, 80)} then {render(b.value, 80)}",
                )
    result = done(None, None)
    share, value = constant_answer_share([p.probes for p in probes.plans], first)
    result.constant_share = round(share, 4)
    result.constant_value = render(value, 80) if value is not None else ("None (print)" if share else None)
    return result


def run_check(
    items: Iterable[CheckItem], limits: Limits, workers: int = 2, progress: Callable[[CheckResult], None] | None = None
) -> CheckReport:
    """Check every item with ``workers`` threads; results come back in item order."""
    items = list(items)
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    t0 = time.monotonic()
    results: list[CheckResult] = []
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for res in pool.map(lambda it: check_item(it, limits), items):
            results.append(res)
            if progress is not None:
                progress(res)
    return CheckReport(
        total=len(results), passed=sum(r.passed for r in results), results=results, seconds=time.monotonic() - t0
    )


def items_for_gym(gym: str, data_file: str | None = None, limit: int | None = None) -> list[CheckItem]:
    """The references of a gym's task set, from the gym class's ``code_check_tasks(data_file,
    limit)`` hook (tasks with ``index, task_id, reference, calls, test_names``). Raises
    NoCodeReferences for gyms without the hook, KeyError for unknown gyms, ValueError when
    ``data_file`` is given to a gym that does not read data files."""
    cls = gym_class(gym)
    hook = getattr(cls, "code_check_tasks", None)
    if hook is None:
        if data_file is not None:
            raise ValueError(f"gym {gym!r} does not read task data files (--data is for colbench)")
        raise NoCodeReferences(f"gym {gym!r} has no code references to check (its tasks are not programs)")
    tasks = hook(data_file=data_file, limit=limit)
    return [CheckItem(t.index, t.task_id, t.reference, tuple(t.calls), tuple(t.test_names)) for t in tasks]


def limits_for(gym: str, data_file: str | None = None) -> Limits:
    """The sandbox limits the gym scores answers with; references are checked under the same ones."""
    hook = getattr(gym_class(gym), "code_check_limits", None)
    return hook(data_file=data_file) if hook is not None else Limits()
