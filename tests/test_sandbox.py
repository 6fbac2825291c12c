"""Behaviour of the code sandbox on ordinary code: module semantics, outcomes, equality, limits."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from harness.sandbox import (
    MODULE_ERROR,
    NOT_RUN,
    OK,
    RAISED,
    TIMEOUT,
    CallResult,
    Limits,
    isolation_report,
    pass_fraction,
    run_calls,
    run_source,
)
from harness.sandbox.values import floats_close, render, values_equal

LIM = Limits(call_time=2.0, module_time=2.0, total_time=20.0)

REFERENCE = """
def median(xs):
    s = sorted(xs)
    n = len(s)
    if n == 0:
        return None
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
"""
CALLS = ["median([3, 1, 2])", "median([4, 1, 3, 2])", "median([])", "median([7])"]

# Correct answers in the shapes published evaluators scored 0: module-level imports, helpers,
# classes, recursion.
CORRECT_VARIANTS = {
    "module_import": "import statistics\n\ndef median(xs):\n    return statistics.median(xs) if xs else None\n",
    "helper": "def _mid(s):\n    n = len(s)\n    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2\n\n"
    "def median(xs):\n    return _mid(sorted(xs)) if xs else None\n",
    "class": "class Stats:\n    def __init__(self, xs):\n        self.s = sorted(xs)\n    def median(self):\n"
    "        n = len(self.s)\n        if not n:\n            return None\n"
    "        return self.s[n // 2] if n % 2 else (self.s[n // 2 - 1] + self.s[n // 2]) / 2\n\n"
    "def median(xs):\n    return Stats(xs).median()\n",
    "recursion": "def _sort(xs):\n    if len(xs) <= 1:\n        return list(xs)\n    p, rest = xs[0], xs[1:]\n"
    "    return _sort([x for x in rest if x < p]) + [p] + _sort([x for x in rest if x >= p])\n\n"
    "def median(xs):\n    s = _sort(xs)\n    n = len(s)\n    if n == 0:\n        return None\n"
    "    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2\n",
    "main_guard": "import sys\n\ndef median(xs):\n    s = sorted(xs)\n    if not s:\n        return None\n"
    "    n = len(s)\n    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2\n\n"
    "if __name__ == '__main__':\n    print(median([int(x) for x in input().split()]))\n",
}


@pytest.fixture(scope="module")
def reference_outcomes() -> list[CallResult]:
    return run_calls(REFERENCE, CALLS, LIM)


@pytest.mark.parametrize("name", sorted(CORRECT_VARIANTS))
def test_correct_answers_in_every_shape_score_one(name, reference_outcomes):
    cand = run_calls(CORRECT_VARIANTS[name], CALLS, LIM)
    assert pass_fraction(reference_outcomes, cand) == 1.0, [c.describe() for c in cand]


def test_wrong_answer_scores_below_one(reference_outcomes):
    cand = run_calls("def median(xs):\n    return sorted(xs)[len(xs) // 2] if xs else None\n", CALLS, LIM)
    assert pass_fraction(reference_outcomes, cand) == 0.75  # the even-length case differs
    broken = run_calls("def median(xs) return 1\n", CALLS, LIM)
    assert pass_fraction(reference_outcomes, broken) == 0.0
    assert all(c.status == MODULE_ERROR and c.error == "SyntaxError" for c in broken)


def test_source_runs_once_and_calls_share_its_namespace():
    src = "calls = []\ndef f(x):\n    calls.append(x)\n    return len(calls)\n"
    out = run_calls(src, ["f(1)", "f(2)", "f(3)"], LIM)
    assert [render(c.value) for c in out] == ["1", "2", "3"]


def test_exceptions_are_outcomes_matched_by_type():
    ref = run_calls("def f(x):\n    return 10 // x\n", ["f(0)", "f(2)"], LIM)
    assert ref[0].status == RAISED and ref[0].error == "ZeroDivisionError"
    same = run_calls(
        "def f(x):\n    if x == 0:\n        raise ZeroDivisionError('no')\n    return 10 // x\n", ["f(0)", "f(2)"], LIM
    )
    other = run_calls(
        "def f(x):\n    if x == 0:\n        raise ValueError('no')\n    return 10 // x\n", ["f(0)", "f(2)"], LIM
    )
    fake = run_calls(
        "class ZeroDivisionError(Exception):\n    pass\n"
        "def f(x):\n    if x == 0:\n        raise ZeroDivisionError()\n    return 10 // x\n",
        ["f(0)", "f(2)"],
        LIM,
    )
    assert pass_fraction(ref, same) == 1.0
    assert pass_fraction(ref, other) == 0.5
    assert fake[0].error == "solution.ZeroDivisionError" and pass_fraction(ref, fake) == 0.5


def test_per_call_budget_and_restart_keep_later_calls():
    src = "import time\ndef f(x):\n    if x == 1:\n        while True:\n            pass\n    return x\n"
    run = run_source(src, ["f(0)", "f(1)", "f(2)"], Limits(call_time=0.5, module_time=2.0))
    assert [c.status for c in run.calls] == [OK, TIMEOUT, OK]


def test_total_time_running_out_while_a_rerun_loads_its_module_marks_the_rest_not_run():
    """After a killed call the module loads again in a new child; when total_time ends during that load,
    the calls after it were never reached (not_run), not failed by the module (which loaded fine)."""
    src = (  # f ignores the child's own timer, so the caller kills the child and a new one loads again
        "import signal, time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\ntime.sleep(0.8)\n"
        "def f():\n    while True:\n        pass\ndef g():\n    return 1\n"
    )
    run = run_source(src, ["f()", "g()", "g()"], Limits(call_time=0.5, module_time=3.0, total_time=2.5))
    assert run.module_status == OK and [c.status for c in run.calls] == [TIMEOUT, NOT_RUN, NOT_RUN], run.calls


def test_total_time_marks_unreached_calls_not_run():
    src = "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\ndef f():\n    while True:\n        pass\n"
    run = run_source(src, ["f()", "f()", "f()", "f()"], Limits(call_time=0.5, module_time=2.0, total_time=1.5))
    statuses = [c.status for c in run.calls]
    assert statuses[0] == TIMEOUT and statuses[-1] == NOT_RUN
    assert run.wall_seconds < 1.5 + 1.0


def test_random_is_seeded_per_call_identically_for_every_run():
    src = "import random\nstart = random.random()\ndef f():\n    return [start, random.random(), random.randint(1, 10**9)]\n"
    a = run_calls(src, ["f()", "f()"], LIM)
    b = run_calls(src, ["f()", "f()"], LIM)
    assert [x.value for x in a] == [x.value for x in b]
    other = run_calls(src, ["f()"], Limits(seed=1))
    assert other[0].value != a[0].value


def test_set_order_is_stable_across_runs():
    src = "def f():\n    return list({'pear', 'apple', 'fig', 'kiwi', 'plum', 'lime'})\n"
    assert run_calls(src, ["f()"], LIM)[0].value == run_calls(src, ["f()"], LIM)[0].value


def test_numpy_datetime_and_containers_are_values():
    src = (
        "import numpy as np\nfrom datetime import datetime, timedelta\nfrom collections import OrderedDict, namedtuple\n"
        "P = namedtuple('P', 'x y')\n"
        "def f():\n    return [np.float64(0.5), np.int64(3), np.arange(3), datetime(2024, 1, 2, 3, 4),\n"
        "            timedelta(days=2), OrderedDict(a=1), P(1, 2), {1, 2}, b'xy', 1 + 2j, None, True]\n"
    )
    out = run_calls(src, ["f()"], LIM)[0]
    assert out.status == OK, out.describe()
    items = out.value[1]
    assert items[0][0] == "n" and items[0][3] == (0.5).hex() and render(items[1]) == "3" and items[2][0] == "nd"
    assert items[3] == ["dt", "2024-01-02T03:04:00"] and items[5][0] == "d" and render(items[6]) == "(1, 2)"


def test_equality_rule():
    enc = lambda src: run_calls(f"def f():\n    return {src}\n", ["f()"], LIM)[0].value  # noqa: E731
    # Python's == on plain data: 1 == 1.0 == True, list != tuple, set == frozenset, dict order free.
    assert values_equal(enc("1"), enc("1.0")) and values_equal(enc("True"), enc("1"))
    assert not values_equal(enc("[1, 2]"), enc("(1, 2)"))
    assert values_equal(enc("{1, 2}"), enc("frozenset([2, 1])"))
    assert values_equal(enc("{'a': 1, 'b': 2}"), enc("{'b': 2, 'a': 1}"))
    assert values_equal(enc("{1: 'x'}"), enc("{1.0: 'x'}"))
    # The one deliberate difference: floats compare with a relative tolerance of 1e-9.
    assert values_equal(enc("0.1 + 0.2"), enc("0.3"))
    assert not values_equal(enc("0.3"), enc("0.30001"))
    assert values_equal(enc("float('nan')"), enc("float('nan')"))
    assert not values_equal(enc("float('inf')"), enc("10**308 * 1.0"))
    assert not values_equal(enc("'1'"), enc("1"))
    assert values_equal(enc("b'ab'"), enc("bytearray(b'ab')"))
    assert values_equal(enc("10**30"), enc("10**30")) and not values_equal(enc("10**30"), enc("10**30 + 1"))


def test_floats_close_unit():
    assert floats_close(1, 1.0) and floats_close(0.1 + 0.2, 0.3) and not floats_close(1.0, 1.001)
    assert floats_close(math.nan, math.nan) and not floats_close(math.inf, -math.inf)
    assert floats_close(math.inf, math.inf) and not floats_close(math.nan, 1.0)


def test_render_shows_values_as_python_does():
    out = run_calls(
        "def f():\n    return {'a': [1, 2.5, (None, 'x')], 'b': {3}, 'c': (1,), 'd': set()}\n", ["f()"], LIM
    )[0]
    assert render(out.value) == "{'a': [1, 2.5, (None, 'x')], 'b': {3}, 'c': (1,), 'd': set()}"
    assert render(out.value, limit=10) == "{'a': [1,…"


def test_working_directory_is_private_and_removed(tmp_path):
    lim = Limits(tmp_root=str(tmp_path))
    out = run_calls(
        "import os\ndef f():\n    open('x.txt', 'w').write('hi')\n    return os.listdir('.')\n", ["f()", "f()"], lim
    )
    assert render(out[0].value) == "['x.txt']"
    assert list(tmp_path.iterdir()) == []


def test_limits_validation_names_the_field():
    with pytest.raises(ValueError, match="Limits.call_time"):
        Limits(call_time=0)
    with pytest.raises(ValueError, match="Limits.isolation"):
        Limits(isolation="none")
    with pytest.raises(ValueError, match="Limits.memory_bytes"):
        Limits(memory_bytes=1.5)
    with pytest.raises(ValueError, match="call #1"):
        run_calls("x = 1", ["x", ""], LIM)


def test_isolation_report_names_the_layers():
    rep = isolation_report()
    assert rep["mode"] in ("kernel", "process") and rep["guards"] is True
    if os.geteuid() == 0:
        # Root here: the kernel layer must actually be in force, with its own uid, an allow-list file
        # system that holds neither this repository nor the caller's folder, and its own pid namespace.
        assert rep["mode"] == "kernel" and rep["uid"] != 0 and rep["filesystem"] == "allow_list"
        repo = str(Path(__file__).resolve().parents[1])
        # the venv may live inside the checkout (as in CI): its site-packages may be visible, nothing else of it
        exposed = [v for v in rep["visible"] if repo.startswith(v) or (v.startswith(repo) and "site-packages" not in v)]
        assert not exposed, rep["visible"]
        assert rep["pid_namespace"] is True and rep["network"] == "none" and rep["dies_with_caller"] is True


def test_output_is_captured_for_diagnostics():
    run = run_source("print('hello from the sandbox')\ndef f():\n    return 1\n", ["f()"], LIM)
    assert "hello from the sandbox" in run.output and run.processes == 1


def test_process_mode_runs_code_with_the_python_guards():
    # The mode used where kernel isolation is unavailable (not root): limits, session, guards.
    lim = Limits(isolation="process", call_time=2.0)
    out = run_calls("import os\ndef f(x):\n    return x * 3\ndef g():\n    return os.fork()\n", ["f(2)", "g()"], lim)
    assert render(out[0].value) == "6" and out[1].status == RAISED and out[1].error == "PermissionError"
    rep = isolation_report(lim)
    assert rep["mode"] == "process" and rep["filesystem"] == "host" and rep["pid_namespace"] is False
    assert rep["dies_with_caller"] is True
