"""ColBench JSONL loader and fact extraction (hand-written references and the shared test file)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from harness.envs.colbench.data import ColbenchDataError, load_colbench
from harness.envs.colbench.facts import KINDS, MAX_SPAN, extract_facts, shares_span

SHARED_FILE = Path(__file__).resolve().parents[1].parent / "shared" / "colbench" / "backend_test.jsonl"
needs_shared = pytest.mark.skipif(not SHARED_FILE.exists(), reason=f"{SHARED_FILE} is not present")


def _row(**over):
    row = {
        "problem_description": "Write f. The signature of the function is: def f(x)",
        "ground_truth": "def f(x):\n    return x + 1\n",
        "hidden_information": "def f(x):\n    return x + 1\n",
        "test_cases": {"test2": "f(2)", "test1": "f(1)", "test10": "f(10)"},
    }
    row.update(over)
    return row


def _write(tmp_path: Path, rows: list, name: str = "t.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return p


# ------------------------------------------------------------------ loader
def test_loader_orders_tests_numerically_and_skips_blank_lines(tmp_path):
    recs = load_colbench(_write(tmp_path, [_row(), "", _row(ground_truth="def f(x):\n    return x\n")]))
    assert len(recs) == 2 and recs[1].line == 3 and recs[1].index == 1
    assert recs[0].test_names == ("test1", "test2", "test10") and recs[0].tests == ("f(1)", "f(2)", "f(10)")
    assert recs[0].function_name == "f" and recs[0].content_key != recs[1].content_key


@pytest.mark.parametrize(
    "bad, message",
    [
        ("{not json", r"t.jsonl:1: not valid JSON"),
        ("[1, 2]", r"t.jsonl:1: expected a JSON object"),
        (json.dumps({"ground_truth": "x", "test_cases": {"a": "f()"}}), r"missing field 'problem_description'"),
        (json.dumps(_row(test_cases={})), r"field 'test_cases' must be a non-empty object"),
        (json.dumps(_row(test_cases={"test1": 3})), r"test_cases\['test1'\] must be a non-empty call expression"),
        (json.dumps(_row(ground_truth="  ")), r"field 'ground_truth' must be a non-empty string"),
    ],
)
def test_loader_errors_name_file_line_and_field(tmp_path, bad, message):
    with pytest.raises(ColbenchDataError, match=message):
        load_colbench(_write(tmp_path, [bad]))


def test_loader_missing_file(tmp_path):
    with pytest.raises(ColbenchDataError, match="cannot read"):
        load_colbench(tmp_path / "nope.jsonl")


# ------------------------------------------------------------------ facts on hand-written references
REF = """
import math

RATE = 0.08

def invoice_total(items, customer, discount_code=None):
    if not items:
        return 0.0
    if customer is None:
        raise ValueError("customer required")
    subtotal = 0
    for item in items:
        subtotal += item["price"] * item.get("qty", 1)
    if subtotal > 500:
        subtotal = subtotal * 0.95
    if discount_code == "WELCOME":
        subtotal -= 10
    return round(subtotal * (1 + RATE), 2)
"""
PROMPT = (
    "Compute an invoice total. The signature of the function is: def invoice_total(items, customer, discount_code=None)"
)


def test_facts_of_every_kind_from_a_reference():
    facts = extract_facts(REF, PROMPT)
    by_kind = {k: [f.text for f in facts if f.kind == k] for k in KINDS}
    assert (
        facts[0].kind == "signature"
        and "invoice_total" in facts[0].text
        and "discount_code defaults to None" in facts[0].text
    )
    assert by_kind["return"] == ["It returns a number rounded to 2 decimal places."]
    assert any("items is a list" in t and "'price'" in t for t in by_kind["shape"])
    edges = " ".join(by_kind["edge_case"])
    assert "items is empty" in edges and "returns 0.0" in edges and "ValueError" in edges
    consts = " ".join(by_kind["constant"])
    assert "500" in consts and "0.95" in consts and "'WELCOME'" in consts and "0.08" in consts
    assert len({f.key for f in facts}) == len(facts)
    for f in facts:
        assert f.keywords and not shares_span(f.text, REF), f


def test_facts_never_quote_long_spans_of_code():
    long_name = "compute_the_weighted_average_of_all_the_student_scores_in_class"
    ref = (
        f"def {long_name}(first_student_scores, second_student_scores, third_student_scores):\n"
        "    return 'This message is long enough to be a verbatim leak of the reference text'\n"
    )
    facts = extract_facts(ref, "")
    assert facts[0].kind == "signature"
    for f in facts:
        assert not shares_span(f.text, ref, MAX_SPAN), f.text


def test_facts_from_unparsable_reference_fall_back_to_the_prompt_signature():
    facts = extract_facts("def f(x) return", "Do it. The signature of the function is: def f(x, y=2)")
    assert [f.kind for f in facts] == ["signature"] and "x and y" in facts[0].text


# ------------------------------------------------------------------ the shared ColBench file
@needs_shared
def test_shared_file_loads():
    recs = load_colbench(SHARED_FILE)
    assert len(recs) == 1000 and all(len(r.tests) == 10 for r in recs)
    assert all(r.function_name for r in recs)


@needs_shared
def test_shared_file_every_task_yields_a_signature_fact_and_plausible_kinds(capsys):
    recs = load_colbench(SHARED_FILE)
    counts: Counter = Counter()
    tasks_with: Counter = Counter()
    for r in recs:
        facts = extract_facts(r.hidden_information, r.problem_description)
        assert facts and facts[0].kind == "signature", r.index
        for f in facts:
            assert not shares_span(f.text, r.ground_truth), (r.index, f.text)
        counts.update(f.kind for f in facts)
        tasks_with.update({f.kind for f in facts})
    with capsys.disabled():
        print(f"\nColBench fact kinds: {dict(counts)}; tasks with each kind: {dict(tasks_with)}")
    assert tasks_with["signature"] == tasks_with["return"] == 1000
    assert tasks_with["shape"] > 700 and tasks_with["constant"] > 400 and tasks_with["edge_case"] > 100
