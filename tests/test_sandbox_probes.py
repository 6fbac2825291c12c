"""Tests taken apart into the values they check (harness.sandbox.probes), and scoring through them:
an answer's object never takes part in a comparison, so lying objects pass nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.envs.colbench import EXPECTED, CodeTask, score_answer
from harness.envs.colbench.taskcheck import CheckItem, check_item
from harness.envs.registry import make
from harness.sandbox import OK, RAISED, CallResult, Limits
from harness.sandbox.probes import outcomes_match, plan_test, probe_set

FAST = Limits(call_time=1.0, module_time=2.0, total_time=10.0)
SHARED_FILE = Path(__file__).resolve().parents[1].parent / "shared" / "colbench" / "backend_test.jsonl"


@pytest.mark.parametrize(
    "test, probes, form",
    [
        ("f(3)", ("f(3)",), "call"),
        ("  f(3, k=[1, 2])  ", ("  f(3, k=[1, 2])  ",), "call"),  # a bare call goes as written
        ("f(3) == 7", ("f(3)",), "split"),
        ("7 == f(3)", ("f(3)",), "split"),
        ("f(3) == -0.5", ("f(3)",), "split"),
        ("assert f(3) == [1, (2, 'a')], 'wrong'", ("f(3)",), "split"),
        ("assert f(3)", ("f(3)",), "split"),
        ("f(1) == f(2) and not g(0) is None", ("f(1)", "f(2)", "g(0)"), "split"),
        ("0 < f(1) <= g(2) != {'a': 1}", ("f(1)", "g(2)"), "split"),
        ("f(1) in (1, 2) or f(2) not in [3]", ("f(1)", "f(2)"), "split"),
        ("abs(f(1) - 2.5) < 1e-9", ("abs(f(1) - 2.5)",), "split"),
        ("print(f(1)) == 10.0", ("print(f(1))",), "split"),
        ("(f(1) == 2) == True", ("f(1)",), "split"),
        ("f(1,\n  2) == 3", ("f(1,\n  2)",), "split"),
        ("1 == 1", ("1 == 1",), "as_written"),
        ("assert 1 == 1", ("1 == 1",), "as_written"),
        ("def g(): pass", ("def g(): pass",), "as_written"),
        ("f(1); f(2)", ("f(1); f(2)",), "as_written"),
        ("f(1) ==", ("f(1) ==",), "as_written"),
        ("f(3) == float('inf')", ("f(3)",), "split"),
        ("f(3) == [0] * 3 + list(range(2))", ("f(3)",), "split"),
        ("f(3) == len(DATA)", ("f(3)", "len(DATA)"), "split"),
        ("f(3) == [i for i in range(3)]", ("f(3)", "[i for i in range(3)]"), "split"),
        ("max(1, 2) == 2", ("max(1, 2) == 2",), "as_written"),
    ],
)
def test_plan_of_each_form(test, probes, form):
    plan = plan_test(test)
    assert (plan.probes, plan.form) == (probes, form)


def test_plan_never_raises_on_pathological_text():
    for text in ("not " * 100_000 + "f(1)", "(" * 100_000 + ")" * 100_000, "f(1) == " + "[" * 5000, "\x00", ""):
        plan = plan_test(text)
        assert plan.probes


def test_probe_set_groups_outcomes_by_test():
    ps = probe_set(["f(1)", "f(2) == f(3)", "4 == g(5)"])
    assert ps.calls == ("f(1)", "f(2)", "f(3)", "g(5)") and ps.spans == ((0, 1), (1, 3), (3, 4))
    assert ps.per_test(list("abcd")) == [["a"], ["b", "c"], ["d"]]
    with pytest.raises(ValueError):
        ps.per_test(["a"])


def test_a_test_passes_only_when_every_value_matches():
    one = ["n", False, "1", "0x1.0000000000000p+0", "0x0.0p+0", "1"]
    two = ["n", False, "2", "0x1.0000000000000p+1", "0x0.0p+0", "2"]
    ok = lambda v: CallResult("f(1)", OK, v)  # noqa: E731
    assert outcomes_match([ok(one), ok(two)], [ok(one), ok(two)])
    assert not outcomes_match([ok(one), ok(one)], [ok(one), ok(two)])
    raised = CallResult("f(0)", RAISED, error="ZeroDivisionError")
    assert outcomes_match([raised], [raised]) and not outcomes_match([ok(one)], [raised])
    assert not outcomes_match([ok(one)], [ok(one), ok(two)])


# ------------------------------------------------------------------ scoring through the gym
REFERENCE = "def f(x):\n    return [x * 3, x % 7]\n"
TESTS = [
    "f(3) == [9, 3]",
    "assert f(17) == [51, 3], 'f(17)'",
    "[768, 4] == f(256)",
    "f(4) != [0, 0]",
    "not f(5) == []",
    "f(6)",
]
# Answers that pass these tests if the scorer lets their value take part in the comparison.
YES = "class _Yes:\n    def __eq__(self, o): return True\n    def __ne__(self, o): return False\n    __hash__ = object.__hash__\n"
CHEATS = {
    "always_equal": YES + "def f(*a, **k): return _Yes()\n",
    "always_unequal": "class _No:\n    def __eq__(self, o): return False\n    def __ne__(self, o): return True\n"
    "    __hash__ = object.__hash__\ndef f(*a, **k): return _No()\n",
    "raising": "class _R:\n    def __eq__(self, o): raise ValueError('no')\n    __ne__ = __eq__\n"
    "    __hash__ = object.__hash__\ndef f(*a, **k): return _R()\n",
    "mutating": "class _M(list):\n    def __eq__(self, o):\n        o[:] = self\n        return True\n"
    "    __hash__ = None\ndef f(*a, **k): return _M([0])\n",
    "list_subclass_equal": "class _L(list):\n    def __eq__(self, o): return True\n    __ne__ = lambda s, o: False\n"
    "    __hash__ = None\ndef f(*a, **k): return _L()\n",
    # reads the test being evaluated from the frame that evaluates it and returns its other side
    "peek_expected": "import ast, sys\ndef f(x):\n    fr = sys._getframe(1)\n    while fr is not None:\n"
    "        for v in list(fr.f_locals.values()):\n            if isinstance(v, str) and '==' in v:\n"
    "                try:\n                    node = ast.parse(v.strip()).body[0]\n"
    "                    node = getattr(node, 'test', getattr(node, 'value', None))\n"
    "                    return ast.literal_eval(node.comparators[0])\n                except Exception:\n"
    "                    pass\n        fr = fr.f_back\n    return None\n",
}


def _data_file(tmp_path: Path, tests: list[str], reference: str = REFERENCE) -> Path:
    p = tmp_path / "compared.jsonl"
    row = {
        "problem_description": "Compute the codes of x. The signature of the function is: def f(x)",
        "ground_truth": reference,
        "hidden_information": reference,
        "test_cases": {f"test{i + 1}": t for i, t in enumerate(tests)},
    }
    p.write_text(json.dumps(row) + "\n")
    return p


def _answer(env, code: str) -> dict:
    split = "train" if env.source.by_split["train"] else "eval"
    env.reset(seed=0, options={"task_index": 0, "split": split, "arm": "symbolic"})
    _, _, _, _, info = env.step(f"ANSWER:\n```python\n{code}```")
    return info["turn"]["answer"]["details"]


@pytest.fixture(scope="module")
def compared_env(tmp_path_factory):
    return make("colbench", data_file=_data_file(tmp_path_factory.mktemp("cmp"), TESTS), limits=FAST)


def test_honest_answers_pass_tests_written_as_comparisons(compared_env):
    assert _answer(compared_env, REFERENCE)["passed"] == len(TESTS)
    # other code, equal values (3.0 * x equals 3 * x under the encoding's rule, as in Python)
    other = "def f(x):\n    return [int(3.0 * x), x - 7 * (x // 7)]\n"
    assert _answer(compared_env, other)["passed"] == len(TESTS)
    wrong = "def f(x):\n    return [x * 3, 0]\n"
    assert _answer(compared_env, wrong)["passed"] == 0


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_lying_answers_pass_no_test_written_as_a_comparison(compared_env, name):
    details = _answer(compared_env, CHEATS[name])
    assert details["passed"] == 0 and details["total"] == len(TESTS), details


def test_scoring_never_sends_the_expected_values_to_the_answers_sandbox(compared_env):
    ps = probe_set(TESTS)
    assert not any(v in c for c in ps.calls for v in ("[9, 3]", "[51, 3]", "[768, 4]", "[0, 0]", "[]"))
    per_test = compared_env.expected()
    assert [len(outs) for outs in per_test] == [1] * len(TESTS)
    assert all(o.status == OK and o.call.startswith("f(") for outs in per_test for o in outs)


def test_a_reference_that_raises_is_matched_by_the_same_exception(tmp_path):
    ref = "def f(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x\n"
    env = make("colbench", data_file=_data_file(tmp_path, ["f(-1) == None", "f(2) == 2"], ref), limits=FAST)
    same = "def f(x):\n    if x < 0:\n        raise ValueError\n    return x + 0\n"
    assert _answer(env, same)["passed"] == 2
    other = "def f(x):\n    if x < 0:\n        raise KeyError\n    return x\n"
    assert _answer(env, other)["passed"] == 1


def test_score_answer_takes_per_test_outcomes():
    tests = ["g(2) == 4", "g(3)"]
    ref = "def g(x):\n    return x * x\n"
    expected = EXPECTED.get(ref, tests, FAST)
    res = score_answer(ref, tests, expected, FAST)
    assert res.success and res.details["passed"] == 2
    res = score_answer("def g(x):\n    return x + 2\n", tests, expected, FAST)
    assert res.details["passed"] == 1 and "g(3) -> 5" in res.details["failed_calls"][0]


def test_tasks_check_runs_the_values_a_test_compares():
    ok = CheckItem(0, "t0", REFERENCE, tuple(TESTS), tuple(f"test{i + 1}" for i in range(len(TESTS))))
    assert check_item(ok, FAST).passed
    odd = "class C:\n    pass\ndef f(x):\n    return C()\n"
    bad = check_item(CheckItem(1, "t1", odd, ("f(1) == 3",), ("test1",)), FAST)
    assert not bad.passed and bad.reason_kind == "unsupported_value" and "test1 (f(1))" in bad.reason


@pytest.mark.skipif(not SHARED_FILE.exists(), reason="shared ColBench file absent")
def test_the_reports_always_equal_answer_on_colbench_data_scores_zero():
    """Task 227 of backend_test.jsonl (tests ``get_backup_sets_to_keep(...) == v``): 10/10 before."""
    env = make("colbench", data_file=SHARED_FILE, limits=FAST)
    ct = CodeTask.from_record(env.source.records[227])
    index = env.source.by_split[ct.split].index(ct)
    env.reset(seed=0, options={"task_index": index, "split": ct.split, "arm": "symbolic"})
    assert env.task.data["function"] == "get_backup_sets_to_keep"
    _, _, _, _, info = env.step(f"ANSWER:\n```python\n{YES}def get_backup_sets_to_keep(*a, **k): return _Yes()\n```")
    assert info["turn"]["answer"]["details"]["passed"] == 0
    env.reset(seed=0, options={"task_index": index, "split": ct.split, "arm": "symbolic"})
    _, _, _, _, info = env.step("ANSWER:\n" + ct.reference)
    assert info["success"]
