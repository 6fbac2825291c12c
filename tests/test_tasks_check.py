"""``eau tasks check`` through the real command line (subprocesses), and the checker's reasons."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli.common import EXIT_INVALID, EXIT_NOT_FOUND
from harness.envs.colbench import ColbenchEnv
from harness.envs.colbench.taskcheck import CheckItem, check_item

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
    # What remains must be explained: only modules that are not installed here.
    assert set(doc["reasons"]) <= {"unavailable_module"}
