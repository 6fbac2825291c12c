"""``colbench``: write a Python function from an incomplete description, asking a collaborator.

Tasks come from the built-in procedural families (``families``; the default) or from a
ColBench backend-programming JSONL file (``data_file=``; ``data``). The agent sees the
problem description (which ends with the signature) and may:

* ``ask`` — the collaborator (either user arm) answers from facts extracted from the reference
  (``facts``: signature, shape, return, edge_case, constant); it never pastes code;
* ``answer`` — the complete code, after ``ANSWER:`` (fenced or not; text around a fenced block is
  ignored). The answer ends the episode.

Scoring runs the answer in the sandbox (``harness.sandbox``) on the values the task's tests check
(``harness.sandbox.probes``: a bare call is one value; ``f(x) == v``, ``assert ...``, ``and``/``not``
are taken apart into the values they compare; operands that do not depend on the code, such as
the expected literal, are left out and never reach the answer's sandbox) and compares each value's
canonical encoding with the reference's value of the same expression (computed in the sandbox as
well, once per task and cached). A test's own operators never run, so an answer cannot pass a test
with an object whose ``__eq__`` lies. pass = share of tests all of whose values match; success =
every test passed; the task reward is the pass share. Module-level imports, helper functions,
classes and recursion in an answer work because the answer runs as a whole module. Tests on which
the reference itself fails (timeout, crash, unsupported value) are left out of the share; ``eau
tasks check colbench`` lists them.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from harness.envs.base import SPLITS, UserCentricEnv, split_of
from harness.envs.colbench.data import ColbenchRecord, load_colbench
from harness.envs.colbench.facts import KINDS, extract_facts
from harness.envs.colbench.families import FamilyTask, make_procedural
from harness.envs.registry import register
from harness.sandbox import OK, RAISED, CallResult, Limits, run_calls, run_source
from harness.sandbox.probes import outcomes_match, probe_set
from harness.types import AnswerResult, Task

GYM = "colbench"
# Per-call budget as in ColBench-style evaluators; references and answers run under the same limits.
DEFAULT_LIMITS = Limits(call_time=2.0, module_time=5.0, total_time=40.0)
_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)


def extract_code(content: str) -> str:
    """The code of an answer: the fenced block that defines something (else the first fenced
    block), or the whole text when it has no fence."""
    blocks = [(lang.lower(), body) for lang, body in _FENCE_RE.findall(content or "")]
    if not blocks:
        text = (content or "").strip("\n")
        return text[len("python\n") :] if text.startswith("python\n") else text
    for lang, body in blocks:
        if lang in ("", "python", "py", "python3") and re.search(r"^\s*(def|class|import|from)\s", body, re.M):
            return body
    return blocks[0][1]


@dataclass(frozen=True)
class CodeTask:
    """A colbench task, whatever its source.

    origin: "procedural" or "data". index: the family task index (procedural) or the record's
    position in the file (data). hidden: what the collaborator knows (facts are extracted from it).
    """

    task_id: str
    split: str
    origin: str
    index: int
    prompt: str
    reference: str
    hidden: str
    function: str | None
    calls: tuple[str, ...]
    test_names: tuple[str, ...]
    family: str | None = None

    @classmethod
    def from_record(cls, rec: ColbenchRecord) -> CodeTask:
        return cls(
            task_id=f"{GYM}-data-{rec.index}-{rec.content_key[:8]}",
            split=split_of(rec.content_key),
            origin="data",
            index=rec.index,
            prompt=rec.problem_description,
            reference=rec.ground_truth,
            hidden=rec.hidden_information,
            function=rec.function_name,
            calls=rec.tests,
            test_names=rec.test_names,
        )

    @classmethod
    def from_family(cls, ft: FamilyTask, split: str, index: int) -> CodeTask:
        return cls(
            task_id=f"{GYM}-{ft.family}-{ft.content_key[:10]}",
            split=split,
            origin="procedural",
            index=index,
            prompt=ft.description,
            reference=ft.reference,
            hidden=ft.reference,
            function=ft.function,
            calls=ft.calls,
            test_names=tuple(f"test{i + 1}" for i in range(len(ft.calls))),
            family=ft.family,
        )

    def to_task(self) -> Task:
        facts = extract_facts(self.hidden, self.prompt, self.function)
        return Task(
            gym=GYM,
            task_id=self.task_id,
            split=self.split,
            prompt=self.prompt,
            facts=facts,
            secret=self.hidden,
            data={
                "origin": self.origin,
                "index": self.index,
                "family": self.family,
                "function": self.function,
                "reference": self.reference,
                "calls": list(self.calls),
                "test_names": list(self.test_names),
            },
        )


# --------------------------------------------------------------------------- expected outcomes
class ExpectedCache:
    """Reference outcomes per (reference, probes of the tests, limits), computed in the sandbox
    once (LRU); one list of probe outcomes per test."""

    def __init__(self, size: int = 4096):
        self.size = size
        self._data: OrderedDict[str, list[list[CallResult]]] = OrderedDict()
        self._lock = threading.Lock()
        self.computed = 0

    @staticmethod
    def key(reference: str, calls: Sequence[str], limits: Limits) -> str:
        h = hashlib.sha256(reference.encode())
        for c in calls:
            h.update(b"\0" + c.encode())
        h.update(repr(sorted(limits.child_limits().items())).encode())
        return h.hexdigest()

    def get(self, reference: str, tests: Sequence[str], limits: Limits) -> list[list[CallResult]]:
        probes = probe_set(tests)
        k = self.key(reference, probes.calls, limits)
        with self._lock:
            if k in self._data:
                self._data.move_to_end(k)
                return self._data[k]
        outcomes = probes.per_test(run_calls(reference, list(probes.calls), limits))
        with self._lock:
            self._data[k] = outcomes
            self.computed += 1
            while len(self._data) > self.size:
                self._data.popitem(last=False)
        return outcomes


EXPECTED = ExpectedCache()


def _first_mismatch(got: Sequence[CallResult], expected: Sequence[CallResult]) -> CallResult:
    return next((g for g, e in zip(got, expected) if not g.matches(e)), got[0])


def score_answer(
    code: str, tests: Sequence[str], expected: Sequence[Sequence[CallResult]], limits: Limits
) -> AnswerResult:
    """Run ``code`` on the probes of ``tests`` and compare with the reference's outcomes
    ``expected`` (one list per test, from :class:`ExpectedCache`)."""
    probes = probe_set(tests)
    valid = [i for i, outs in enumerate(expected) if outs and all(r.status in (OK, RAISED) for r in outs)]
    if not valid:
        return AnswerResult(
            0.0,
            False,
            True,
            "This task cannot be scored: its reference fails its own tests.",
            {"error": "reference_invalid", "total": 0},
        )
    if not code.strip():
        return AnswerResult(
            0.0,
            False,
            True,
            f"Your answer contained no code. 0/{len(valid)} tests passed.",
            {"error": "no_code", "passed": 0, "total": len(valid), "pass_rate": 0.0},
        )
    run = run_source(code, list(probes.calls), limits)
    got = probes.per_test(run.calls)
    passed = [i for i in valid if outcomes_match(got[i], expected[i])]
    rate = len(passed) / len(valid)
    ok = len(passed) == len(valid)
    feedback = f"{len(passed)}/{len(valid)} tests passed."
    if not run.module_ok:
        feedback += f" Your code failed to load: {run.module_error}: {run.module_message}"[:300]
    failed = [_first_mismatch(got[i], expected[i]).describe()[:200] for i in valid if i not in set(passed)][:3]
    details = {
        "passed": len(passed),
        "total": len(valid),
        "pass_rate": rate,
        "module_status": run.module_status,
        "module_error": run.module_error,
        "statuses": dict(Counter(c.status for c in run.calls)),
        "failed_calls": failed,
        "skipped_tests": len(expected) - len(valid),
        "sandbox": run.isolation.get("mode"),
        "seconds": round(run.wall_seconds, 3),
    }
    return AnswerResult(rate, ok, True, feedback, details)


# --------------------------------------------------------------------------- task sources
class TaskSource:
    """Where colbench tasks come from: the procedural families, or the records of a data file
    (split by content hash; ``index`` wraps around the split's records)."""

    def __init__(self, data_file: str | os.PathLike | None = None):
        self.data_file = Path(data_file).resolve() if data_file is not None else None
        self.records: tuple[ColbenchRecord, ...] = load_colbench(self.data_file) if self.data_file else ()
        self.by_split: dict[str, list[CodeTask]] = {s: [] for s in SPLITS}
        for rec in self.records:
            ct = CodeTask.from_record(rec)
            self.by_split[ct.split].append(ct)

    def task(self, split: str, index: int) -> CodeTask:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; allowed: {', '.join(SPLITS)}")
        if self.data_file is None:
            return CodeTask.from_family(make_procedural(split, index), split, index)
        pool = self.by_split[split]
        if not pool:
            raise ValueError(f"{self.data_file}: no task falls into the {split!r} split")
        return pool[index % len(pool)]

    def all_data_tasks(self) -> list[CodeTask]:
        """Every record of the data file, in file order."""
        return [CodeTask.from_record(r) for r in self.records]


@register
class ColbenchEnv(UserCentricEnv):
    """Backend programming with a collaborator who knows the reference implementation."""

    name = GYM
    allowed_choices = ("ask", "answer")
    fact_kinds = KINDS
    description = (
        "Backend programming: the user needs a Python function. Ask about the details you are "
        "unsure of (inputs, return value, edge cases, constants), then answer with the complete "
        "code of the function (ANSWER: followed by the code)."
    )

    def __init__(
        self, *args: Any, data_file: str | os.PathLike | None = None, limits: Limits | None = None, **kwargs: Any
    ):
        super().__init__(*args, **kwargs)
        self.source = TaskSource(data_file)
        # The data file holds every reference; the sandbox's file system is an allow list that never
        # holds it (nor this repository), so nothing is hidden per task.
        self.limits = limits or DEFAULT_LIMITS

    def generate_task(self, split: str, index: int) -> Task:
        return self.source.task(split, index).to_task()

    def expected(self) -> list[list[CallResult]]:
        """The reference's outcomes on the current task's tests, one list of probe outcomes per
        test (cached)."""
        assert self.task is not None
        return EXPECTED.get(self.task.data["reference"], self.task.data["calls"], self.limits)

    def on_answer(self, content: str) -> AnswerResult:
        assert self.task is not None
        return score_answer(extract_code(content), self.task.data["calls"], self.expected(), self.limits)

    @classmethod
    def code_check_limits(cls, data_file: str | os.PathLike | None = None) -> Limits:
        """The limits answers are scored with (``eau tasks check`` runs references under them)."""
        return DEFAULT_LIMITS

    @classmethod
    def code_check_tasks(cls, data_file: str | os.PathLike | None = None, limit: int | None = None) -> list[CodeTask]:
        """Tasks whose references ``eau tasks check`` runs: every record of ``data_file`` (the first
        ``limit``), or ``limit`` procedural tasks (default 200: four fifths train, one fifth eval)."""
        source = TaskSource(data_file)
        if source.data_file is not None:
            tasks = source.all_data_tasks()
            return tasks[:limit] if limit is not None else tasks
        n = 200 if limit is None else limit
        n_eval = n // 5
        return [source.task("train", i) for i in range(n - n_eval)] + [source.task("eval", i) for i in range(n_eval)]
