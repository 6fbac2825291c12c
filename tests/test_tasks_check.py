"""``eau tasks check`` through the real command line (subprocesses), and the checker's reasons."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli.common import EXIT_INVALID, EXIT_NOT_FOUND
from harness.envs.colbench import ColbenchEnv, score_answer
from harness.envs.colbench.taskcheck import CheckItem, check_item, constant_answer_share
from harness.sandbox import OK, RAISED, CallResult, run_source
from harness.sandbox.child import encode
from harness.sandbox.probes import probe_set

REPO = Path(__file__).resolve().parents[1]
SHARED_FILE = REPO.parent / "shared" / "colbench" / "backend_test.jsonl"
needs_shared = pytest.mark.skipif(not SHARED_FILE.exists(), reason=f"{SHARED_FILE} is not present")


def eau(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli.main", *args], capture_output=True, text=True, timeout=timeout, cwd=REPO
    )


def _row(ref: str, calls: list[str]) -> str:
    return json.dumps(
        {
            "problem_description": "Do it. The signature of the function is: def f(x)",
            "ground_truth": ref,
            "hidden_information": ref,
            "test_cases": {f"test{i + 1}": c for i, c in enumerate(calls)},
        }
    )


BROKEN = {
    "ok": ("def f(x):\n    return x * 2\n", ["f(1)", "f(2)"]),
    "unavailable_module": ("def f(x):\n    import no_such_module_xyz\n    return x\n", ["f(1)"]),
    "raised": ("def f(x):\n    return 1 / x\n", ["f(1)", "f(0)"]),
    "timeout": ("def f(x):\n    while True:\n        pass\n", ["f(1)"]),
    "nondeterministic": ("import os\ndef f(x):\n    return os.urandom(4).hex()\n", ["f(1)"]),
    "syntax_error": ("def f(x) return x\n", ["f(1)"]),
    "unsupported_value": ("def f(x):\n    return object()\n", ["f(1)"]),
    "sudo_and_random": (
        "import random\ndef f(x):\n    cmd = 'sudo apt-get install x'\n    return [cmd, random.randint(0, 10**9)]\n",
        ["f(1)", "f(2)"],
    ),
}


@pytest.fixture
def broken_file(tmp_path: Path) -> Path:
    p = tmp_path / "broken.jsonl"
    p.write_text("\n".join(_row(*BROKEN[k]) for k in BROKEN) + "\n")
    return p


def test_reasons_of_a_broken_task_set(broken_file):
    proc = eau("tasks", "check", "colbench", "--data", str(broken_file), "--json", "--workers", "2")
    assert proc.returncode == EXIT_INVALID, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["total"] == len(BROKEN) and doc["passed"] == 2  # "ok" and "sudo_and_random"
    kinds = {f["index"]: f["reason_kind"] for f in doc["failures"]}
    names = list(BROKEN)
    assert {names[i]: k for i, k in kinds.items()} == {k: k for k in names if k not in ("ok", "sudo_and_random")}
    assert all(isinstance(f["reason"], str) and f["reason"] for f in doc["failures"])
    assert doc["reasons"] == {k: 1 for k in kinds.values()}
    assert "no_such_module_xyz" in next(
        f["reason"] for f in doc["failures"] if f["reason_kind"] == "unavailable_module"
    )


def test_human_output_and_exit_code(broken_file):
    proc = eau("tasks", "check", "colbench", "--data", str(broken_file), "--limit", "3")
    assert proc.returncode == EXIT_INVALID
    assert "1/3 references pass" in proc.stdout and "unavailable_module" in proc.stdout


def test_procedural_set_passes():
    proc = eau("tasks", "check", "colbench", "--limit", "30", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["total"] == 30 and doc["passed"] == 30 and doc["failures"] == [] and doc["source"] == "procedural"


def test_gyms_without_code_references_and_unknown_gyms():
    proc = eau("tasks", "check", "travel", "--json")
    assert proc.returncode == 0 and "no code references" in json.loads(proc.stdout)["note"]
    proc = eau("tasks", "check", "nosuchgym", "--json")
    assert proc.returncode == EXIT_NOT_FOUND and "unknown gym" in json.loads(proc.stdout)["error"]


def test_malformed_data_file_is_invalid(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem_description": "x"}\n')
    proc = eau("tasks", "check", "colbench", "--data", str(bad), "--json")
    assert proc.returncode == EXIT_INVALID and "bad.jsonl:1: missing field" in json.loads(proc.stdout)["error"]


def test_random_and_sudo_are_not_failures():
    ref, calls = BROKEN["sudo_and_random"]
    res = check_item(CheckItem(0, "t", ref, tuple(calls), ("test1", "test2")), ColbenchEnv.code_check_limits())
    assert res.passed, res


@needs_shared
def test_shared_file_sample_through_the_cli():
    proc = eau("tasks", "check", "colbench", "--data", str(SHARED_FILE), "--limit", "60", "--json", "--workers", "2")
    doc = json.loads(proc.stdout)
    assert doc["total"] == 60 and set(doc) >= {"total", "passed", "failures", "reasons"}
    assert doc["passed"] == 60, doc["failures"]
    assert proc.returncode == 0


@pytest.mark.slow
@needs_shared
def test_shared_file_full_check(capsys):
    proc = eau("tasks", "check", "colbench", "--data", str(SHARED_FILE), "--json", "--workers", "2", timeout=1800)
    doc = json.loads(proc.stdout)
    with capsys.disabled():
        print(
            f"\nfull ColBench check: {doc['passed']}/{doc['total']} in {doc['seconds']}s; failures: {doc['failures']}"
        )
    assert doc["total"] == 1000 and doc["passed"] >= 998
    # What remains must be explained: a module that is not installed here (214, bs4) and one test
    # value over the sandbox's output limit (484: 851,975 bytes against 512 KiB).
    assert set(doc["reasons"]) <= {"unavailable_module", "too_large"}
    # what a constant answer earns on this file (BENCHMARKS.md, colbench)
    assert len(doc["constant_answer"]["solved"]) == 35 and 0.3 < doc["constant_answer"]["mean_share"] < 0.4


# --------------------------------------------------------------------------- what a constant answer earns
def _ok(call: str, value) -> CallResult:
    return CallResult(call, OK, value)


def test_constant_answer_share_hand_computed():
    # the reference's values in the sandbox's own encoding: two tests check [], one [3], one prints,
    # one is len(...)
    empty, three = encode([]), encode([3])
    probes = [["f(1)"], ["f(2)"], ["f(3)"], ["print(f(4))"], ["len(f(5))"]]
    outcomes = [
        [_ok("f(1)", empty)],
        [_ok("f(2)", empty)],
        [_ok("f(3)", three)],
        [_ok("print(f(4))", encode(None))],
        [_ok("len(f(5))", encode(0))],
    ]
    share, value = constant_answer_share(probes, outcomes)
    assert share == 3 / 5 and value == empty  # f(1), f(2) and the print; len(...) is never counted
    # a raised outcome is never matched by a constant answer; no tests, no share
    raised = [[CallResult("f(1)", RAISED, None, "ValueError")], [_ok("f(2)", empty)]]
    assert constant_answer_share([["f(1)"], ["f(2)"]], raised) == (0.5, empty)
    assert constant_answer_share([], []) == (0.0, None)
    # only prints: every answer passes them, no value to return
    assert constant_answer_share([["print(f(1))"]], [[_ok("print(f(1))", encode(None))]]) == (1.0, None)
    # a builtin or a method call is not a direct call of the answer's function
    assert constant_answer_share([["sorted(f(1))"], ["f(2).x"]], [[_ok("s", empty)], [_ok("x", empty)]]) == (0.0, None)


def test_constant_share_is_a_lower_bound_of_the_real_score():
    """Through the real sandbox: the check's share for a task, then the constant program it names
    scored by the gym's own scoring."""
    ref = "def f(x):\n    return [x] if x == 3 else []\n"
    tests = ("f(1) == []", "f(2) == []", "f(3) == [3]", "print(f(4)) == None", "len(f(5)) == 0")
    item = CheckItem(0, "t", ref, tests, tuple(f"test{i}" for i in range(len(tests))))
    limits = ColbenchEnv.code_check_limits()
    res = check_item(item, limits)
    assert res.passed and res.constant_share == 0.6 and res.constant_value == "[]"
    expected = probe_set(tests).per_test(run_source(ref, probe_set(tests).calls, limits).calls)
    scored = score_answer("def f(*args, **kwargs):\n    return []\n", tests, expected, limits)
    assert scored.task_reward >= res.constant_share and scored.details["passed"] == 4  # len([]) == 0 passes too


def test_cli_reports_what_a_constant_answer_earns(tmp_path):
    p = tmp_path / "weak.jsonl"
    p.write_text(
        "\n".join(
            [
                _row("def f(x):\n    return False\n", ["f(1) == False", "f(2) == False"]),
                _row("def f(x):\n    return x * 2\n", ["f(1) == 2", "f(2) == 4"]),
            ]
        )
        + "\n"
    )
    proc = eau("tasks", "check", "colbench", "--data", str(p), "--json", "--workers", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr  # a weak task is reported, not a failure
    const = json.loads(proc.stdout)["constant_answer"]
    assert const == {
        "mean_share": 0.75,
        "half_or_more": 2,
        "solved": [{"index": 0, "task_id": const["solved"][0]["task_id"], "value": "False"}],
    }
    human = eau("tasks", "check", "colbench", "--data", str(p), "--workers", "1")
    assert human.returncode == 0 and "all on 1" in human.stdout and "returns False" in human.stdout


def test_keep_out_writes_the_records_worth_training_on(tmp_path):
    """--keep-out: the passing records that no constant answer solves, their lines as they were."""
    rows = [
        _row("def f(x):\n    return False\n", ["f(1) == False", "f(2) == False"]),  # a constant solves it
        _row("def f(x):\n    return x * 2\n", ["f(1) == 2", "f(2) == 4"]),  # kept
        _row("def f(x):\n    return 1 / x\n", ["f(0)"]),  # its reference raises: a failure
        _row("def f(x):\n    return x + 1\n", ["f(1)", "f(5)"]),  # kept
    ]
    data = tmp_path / "set.jsonl"
    data.write_text(rows[0] + "\n\n" + "\n".join(rows[1:]) + "\n")  # a blank line is skipped, as the gym does
    out = tmp_path / "clean" / "kept.jsonl"
    proc = eau("tasks", "check", "colbench", "--data", str(data), "--keep-out", str(out), "--json", "--workers", "1")
    assert proc.returncode == EXIT_INVALID, proc.stderr  # the failing reference is still reported
    doc = json.loads(proc.stdout)
    assert doc["kept"] == {"file": str(out), "records": 2}
    assert out.read_text() == rows[1] + "\n" + rows[3] + "\n"
    clean = eau("tasks", "check", "colbench", "--data", str(out), "--json", "--workers", "1")
    assert clean.returncode == 0 and json.loads(clean.stdout)["constant_answer"]["solved"] == []
    # usage errors: without --data, or over the data file itself
    for extra in (["--keep-out", str(out)], ["--data", str(data), "--keep-out", str(data)]):
        bad = eau("tasks", "check", "colbench", *extra, "--json")
        assert bad.returncode == 2 and "--keep-out" in json.loads(bad.stdout)["error"]
