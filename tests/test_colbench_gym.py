"""The colbench gym: procedural families, episodes through the gym API, data-file tasks."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from harness.envs.base import split_of
from harness.envs.colbench import EXPECTED, CodeTask, ColbenchEnv, extract_code
from harness.envs.colbench.families import FAMILIES, build, family_names, make_procedural
from harness.envs.colbench.taskcheck import CheckItem, run_check
from harness.envs.registry import make
from harness.types import Task

SHARED_FILE = Path(__file__).resolve().parents[1].parent / "shared" / "colbench" / "backend_test.jsonl"


# ------------------------------------------------------------------ families
def test_at_least_fifty_families():
    assert len(FAMILIES) >= 50


def test_every_family_reference_passes_its_own_tests_deterministically():
    items = []
    for i, name in enumerate(family_names()):
        t = build(name, random.Random(i))
        items.append(CheckItem(i, name, t.reference, t.calls, tuple(f"test{k + 1}" for k in range(len(t.calls)))))
    report = run_check(items, ColbenchEnv.code_check_limits(), workers=2)
    assert report.passed == report.total, report.to_dict()["failures"]


@pytest.mark.parametrize("name", family_names())
def test_family_description_leaves_out_the_constants(name):
    for seed in range(3):
        t = build(name, random.Random(seed))
        assert t.description.rstrip().endswith(")") and f"def {t.function}(" in t.description
        assert len(t.calls) >= 4 and all(c.startswith(t.function + "(") for c in t.calls)
        prose = t.description.split("The signature of the function is:")[0]
        for value in _scalars(t.variant):
            if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) not in (0, 1, 2):
                assert not re.search(rf"(?<![\d.]){re.escape(str(value))}(?![\d.])", prose), (name, value)


def _scalars(v):
    if isinstance(v, dict):
        for x in v.values():
            yield from _scalars(x)
    elif isinstance(v, (list, tuple)):
        for x in v:
            yield from _scalars(x)
    else:
        yield v


def test_variants_differ_across_seeds():
    differing = sum(len({build(n, random.Random(s)).reference for s in range(8)}) > 1 for n in family_names())
    assert differing >= 45  # nearly every family is parameterised


def test_procedural_tasks_are_deterministic_and_split_by_content():
    for split in ("train", "eval"):
        for i in range(20):
            a, b = make_procedural(split, i), make_procedural(split, i)
            assert a == b and split_of(a.content_key) == split


# ------------------------------------------------------------------ answers
def test_extract_code():
    assert extract_code("Here it is:\n```python\ndef f():\n    return 1\n```\nThanks") == "def f():\n    return 1\n"
    assert extract_code("def f():\n    return 2") == "def f():\n    return 2"
    assert extract_code("```\nx = 1\n```\n```python\nimport os\ndef g(): pass\n```") == "import os\ndef g(): pass\n"


@pytest.fixture
def env():
    return make("colbench")


def _episode(env, task_index: int, turns: list[str], split: str = "train"):
    obs, info = env.reset(seed=task_index, options={"task_index": task_index, "split": split, "arm": "symbolic"})
    out = None
    for t in turns:
        out = env.step(t)
        if out[2] or out[3]:
            break
    return obs, info, out


def test_oracle_asks_then_answers_with_the_reference(env):
    obs, info, _ = _episode(env, 3, [])
    assert info["gym"] == "colbench" and "The signature of the function is" in obs
    ref = env.task.data["reference"]
    obs2, r1, term, trunc, _ = env.step("ASK: What should the function return?")
    assert not term and obs2 and env.state.questions == 1
    _, reward, term, trunc, info = env.step("I have what I need.\nANSWER:\n```python\n" + ref + "```")
    assert term and info["success"] is True
    assert info["turn"]["answer"]["task_reward"] == 1.0
    assert env.episode_record()["success"] is True


def test_wrong_answer_fails(env):
    _episode(env, 3, [])
    name = env.task.data["function"]
    _, _, term, _, info = env.step(f"ANSWER: def {name}(*args, **kwargs):\n    return None")
    assert term and info["success"] is False and info["turn"]["answer"]["task_reward"] < 1.0


def test_broken_answer_reports_the_load_error(env):
    _episode(env, 4, [])
    obs, _, term, _, info = env.step("ANSWER: def broken(:\n  pass")
    assert term and info["success"] is False and "SyntaxError" in obs


def test_answers_with_imports_helpers_classes_and_recursion_score_one(env):
    ref = "def digit_sum(n):\n    n = abs(n)\n    return sum(int(d) for d in str(n))\n"
    calls = ["digit_sum(0)", "digit_sum(38)", "digit_sum(-123)", "digit_sum(999999)"]
    ct = CodeTask(
        "colbench-custom",
        "train",
        "procedural",
        0,
        "Sum the digits. The signature of the function is: def digit_sum(n)",
        ref,
        ref,
        "digit_sum",
        tuple(calls),
        ("t1", "t2", "t3", "t4"),
    )
    answers = {
        "import": "import math\nfrom functools import reduce\n\ndef digit_sum(n):\n"
        "    return reduce(lambda a, d: a + int(d), str(abs(n)), 0)\n",
        "helper": "def _digits(n):\n    return [int(d) for d in str(abs(n))]\n\ndef digit_sum(n):\n    return sum(_digits(n))\n",
        "class": "class Digits:\n    def __init__(self, n):\n        self.n = abs(n)\n    def total(self):\n"
        "        return sum(map(int, str(self.n)))\n\ndef digit_sum(n):\n    return Digits(n).total()\n",
        "recursion": "def digit_sum(n):\n    n = abs(n)\n    return n if n < 10 else n % 10 + digit_sum(n // 10)\n",
    }
    for kind, code in answers.items():
        env.reset(seed=1, options={"task": ct.to_task(), "arm": "symbolic"})
        _, _, term, _, info = env.step(f"ANSWER:\n```python\n{code}```")
        assert info["success"] is True, (kind, info["turn"]["answer"])
    env.reset(seed=1, options={"task": ct.to_task(), "arm": "symbolic"})
    _, _, _, _, info = env.step("ANSWER: def digit_sum(n):\n    return sum(int(d) for d in str(n) if d.isdigit()) + 1")
    assert info["turn"]["answer"]["task_reward"] < 1.0


def test_collaborator_discloses_facts_never_code(env):
    _episode(env, 7, [])
    ref = env.task.data["reference"]
    for q in (
        "What does it return?",
        "What type is the input?",
        "Paste the reference code please",
        "What happens with empty input?",
        "Any constants or thresholds I should know?",
    ):
        obs, *_ = env.step(f"ASK: {q}")
        for i in range(len(obs) - 40 + 1):
            assert obs[i : i + 40] not in ref, (q, obs)
    assert env.state.disclosures >= 1


def test_expected_outcomes_are_cached(env):
    _episode(env, 9, [])
    before = EXPECTED.computed
    env.expected()
    env.expected()
    assert EXPECTED.computed <= before + 1


def test_choices_are_ask_and_answer_only(env):
    _episode(env, 2, [])
    obs, _, term, _, info = env.step("SEARCH: reference implementation")
    assert not term and info["format_error"] == "choice_not_allowed"


# ------------------------------------------------------------------ data files
def _jsonl(tmp_path: Path, n: int = 12) -> Path:
    rows = []
    for i in range(n):
        ref = f"def scale(x, k={i + 2}):\n    if x < 0:\n        return 0\n    return x * k + {i}\n"
        rows.append(
            {
                "problem_description": f"Scale a number (variant {i}). The signature of the function is: "
                f"def scale(x, k={i + 2})",
                "ground_truth": ref,
                "hidden_information": ref,
                "test_cases": {f"test{j + 1}": f"scale({j - 2})" for j in range(6)},
            }
        )
    p = tmp_path / "tasks.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return p


def test_data_file_tasks_and_splits(tmp_path):
    path = _jsonl(tmp_path)
    env = make("colbench", data_file=path)
    pools = env.source.by_split
    assert len(pools["train"]) + len(pools["eval"]) == 12
    split = "train" if pools["train"] else "eval"
    env.reset(seed=0, options={"task_index": 0, "split": split, "arm": "symbolic"})
    assert env.task.split == split and env.task.facts[0].kind == "signature"
    _, _, term, _, info = env.step("ANSWER:\n" + env.task.data["reference"])
    assert info["success"] is True


def test_answers_cannot_read_the_data_file(tmp_path):
    path = _jsonl(tmp_path)
    env = make("colbench", data_file=path)
    env.reset(
        seed=0,
        options={"task_index": 0, "split": "train" if env.source.by_split["train"] else "eval", "arm": "symbolic"},
    )
    cheat = (
        "import json\ndef scale(x, k=0):\n"
        f"    rows = [json.loads(l) for l in open({str(path)!r})]\n"
        "    ns = {}\n    exec(rows[0]['ground_truth'], ns)\n    return ns['scale'](x)\n"
    )
    _, _, _, _, info = env.step("ANSWER:\n" + cheat)
    details = info["turn"]["answer"]["details"]
    if details["sandbox"] == "kernel":
        # Hidden (FileNotFoundError), or behind a folder the sandbox uid may not enter.
        assert details["passed"] == 0
        assert re.search(r"FileNotFoundError|PermissionError", " ".join(details["failed_calls"]))


@pytest.mark.skipif(not SHARED_FILE.exists(), reason="shared ColBench file absent")
def test_shared_file_oracle_episode():
    env = make("colbench", data_file=SHARED_FILE)
    env.reset(seed=0, options={"task_index": 5, "split": "eval", "arm": "symbolic"})
    assert isinstance(env.task, Task) and env.task.data["origin"] == "data"
    _, _, _, _, info = env.step("ANSWER:\n" + env.task.data["reference"])
    assert info["success"] is True
