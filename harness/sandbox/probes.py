"""A test expression as the values it checks: what the sandbox evaluates instead of the test itself.

A task's test is an expression over the code under test (``f(3)``, ``f(3) == 7``, ``assert f(3) ==
7``, ``f(1) == f(2) and g(0) is None``). Evaluating the whole expression in the sandbox would let
the code under test decide the outcome: ``f(3) == 7`` calls the ``__eq__`` of whatever ``f``
returned, and an object whose ``__eq__`` always answers True passes every such test. So a test is
never evaluated as written. :func:`plan_test` reads it (``ast``, in the trusted caller) and keeps
only the values it compares, the *probes*:

* ``assert E[, message]`` is ``E``;
* a comparison (``==``, ``!=``, ``<``, ``is``, ``in``, chains), ``and``/``or`` and ``not`` are
  taken apart: each operand is a probe, or is taken apart in turn when it is itself one of these;
* an operand that does not depend on the code under test is left out: a literal (``7``, ``[1, 2]``,
  ``None``, ``-0.5``) or any expression that loads no name but Python's builtins (``float('inf')``,
  ``[0] * 3``). It is the same for every program, and leaving it out keeps the expected value out
  of the sandbox that runs the code under test (code can read the text of the call it is
  evaluated in);
* anything else (a call, a subscript, arithmetic) is one probe, evaluated whole.

Each probe is evaluated on its own in the sandbox and its value encoded canonically there
(``harness.sandbox.child.encode``: plain data read through the base types' own methods; anything
else is ``unsupported``). A test passes when every probe's outcome matches the reference's outcome
of the same probe (:meth:`CallResult.matches`): equal encodings, or the same exception. The test's
operators never run, for the reference or for the candidate: the reference's value of each probe is
what the candidate's must equal, which is also the contract of ColBench's data (the expected result
is what the reference returns). A test with no probe left (nothing in it depends on the code under
test) and a test that does not parse are evaluated whole, as written.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class TestPlan:
    """How one test is checked.

    test: the test as written. probes: the expressions the sandbox evaluates, in order (each
    compared with the reference's value of the same expression). form: ``call`` (the test was one
    expression, evaluated whole), ``split`` (comparisons, boolean operators or an assert taken
    apart) or ``as_written`` (it does not parse as one expression or assert, or has only literals).
    """

    test: str
    probes: tuple[str, ...]
    form: str


_BUILTIN_NAMES = frozenset(dir(builtins))


def _independent(node: ast.AST) -> bool:
    """Whether ``node`` is the same whatever the code under test: it loads no name but builtins
    (a literal, ``float('inf')``, ``[0] * 3``). A comprehension's own variables count as names:
    such an operand is evaluated, which is the safe side."""
    return all(not isinstance(n, ast.Name) or n.id in _BUILTIN_NAMES for n in ast.walk(node))


def _operands(node: ast.expr) -> list[ast.expr] | None:
    """The operands a comparison, boolean operator or ``not`` checks; None for any other node."""
    if isinstance(node, ast.Compare):
        return [node.left, *node.comparators]
    if isinstance(node, ast.BoolOp):
        return list(node.values)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return [node.operand]
    return None


def _probes(node: ast.expr, out: list[ast.expr]) -> None:
    parts = _operands(node)
    if parts is None:
        out.append(node)
        return
    for part in parts:
        if not _independent(part):
            _probes(part, out)


def probe_kind(probe: str) -> str:
    """``call`` for a direct call of a function the answer defines (``f(1, [2])``), ``print`` for
    a call of the builtin print (None whatever the answer), ``other`` for anything else."""
    try:
        node = ast.parse(probe.strip(), mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return "other"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        if node.func.id == "print":
            return "print"
        if node.func.id not in _BUILTIN_NAMES:
            return "call"
    return "other"


def _text(source: str, node: ast.expr) -> str:
    return ast.get_source_segment(source, node) or ast.unparse(node)


def plan_test(test: str) -> TestPlan:
    """The probes of ``test`` (see the module docstring). Never raises on any text."""
    source = test.strip()
    try:
        tree = ast.parse(source, mode="exec")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return TestPlan(test, (test,), "as_written")
    if len(tree.body) != 1 or not isinstance(tree.body[0], (ast.Expr, ast.Assert)):
        return TestPlan(test, (test,), "as_written")
    stmt = tree.body[0]
    expr = stmt.test if isinstance(stmt, ast.Assert) else stmt.value
    if _operands(expr) is None and isinstance(stmt, ast.Expr):
        return TestPlan(test, (test,), "call")
    nodes: list[ast.expr] = []
    try:
        _probes(expr, nodes)
    except RecursionError:  # an operator chain nested beyond the recursion limit
        return TestPlan(test, (test,), "as_written")
    if not nodes:
        return TestPlan(test, (test,) if isinstance(stmt, ast.Expr) else (_text(source, expr),), "as_written")
    return TestPlan(test, tuple(_text(source, n) for n in nodes), "split")


@dataclass(frozen=True)
class ProbeSet:
    """The probes of a task's tests as one list of sandbox calls.

    plans: one TestPlan per test. calls: every probe, in test order. spans: ``(start, end)`` of
    each test's probes in ``calls``.
    """

    plans: tuple[TestPlan, ...]
    calls: tuple[str, ...]
    spans: tuple[tuple[int, int], ...]

    def per_test(self, outcomes: Sequence) -> list[list]:
        """``outcomes`` (one per call) grouped by test."""
        if len(outcomes) != len(self.calls):
            raise ValueError(f"{len(outcomes)} outcomes for {len(self.calls)} probes")
        return [list(outcomes[a:b]) for a, b in self.spans]


def probe_set(tests: Sequence[str]) -> ProbeSet:
    """The ProbeSet of ``tests`` (see :func:`plan_test`)."""
    plans = tuple(plan_test(t) for t in tests)
    calls: list[str] = []
    spans = []
    for p in plans:
        spans.append((len(calls), len(calls) + len(p.probes)))
        calls += p.probes
    return ProbeSet(plans, tuple(calls), tuple(spans))


def outcomes_match(candidate: Sequence, reference: Sequence) -> bool:
    """Whether a test passes: every probe's candidate outcome matches the reference's (equal
    canonical values, or the same exception). Never raises."""
    return len(candidate) == len(reference) and all(c.matches(r) for c, r in zip(candidate, reference))
