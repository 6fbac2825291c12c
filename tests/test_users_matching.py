"""Question-fact similarity (harness/users/matching.py) on hand-computed cases."""

from __future__ import annotations

import pytest

from harness.types import Fact
from harness.users.matching import rank_facts, score_terms, similarity, stem, terms


@pytest.mark.parametrize(
    "word, expected",
    [
        ("budgets", "budget"),
        ("cheapest", "cheap"),
        ("flying", "fly"),
        ("running", "run"),
        ("strings", "string"),
        ("class", "class"),
        ("cities", "city"),
        ("rated", "rat"),
        ("rate", "rat"),
        ("2024", "2024"),
        ("returns", "return"),
    ],
)
def test_stem(word, expected):
    assert stem(word) == expected


def test_terms_split_identifiers_and_drop_stop_words():
    assert terms("What is the max_len of inputList?") == {"max", "len", "input", "list"}


def test_score_formula_hand_computed():
    q, k, t = frozenset({"a", "b"}), frozenset({"a", "c", "d"}), frozenset({"a", "x"})
    # kw = min(1, 1 / min(2, 3)) = 0.5; txt = 1 / min(2, 2) = 0.5; 0.7 * 0.5 + 0.3 * 0.5
    assert score_terms(q, k, t) == pytest.approx(0.5)
    assert score_terms(q, frozenset(), t) == pytest.approx(0.5)  # no keywords: text overlap alone
    assert score_terms(frozenset(), k, t) == 0.0
    assert score_terms(frozenset({"a", "c"}), k, frozenset({"a", "c"})) == pytest.approx(1.0)
    assert score_terms(frozenset({"a"}), frozenset({"a"}), frozenset({"z"})) == pytest.approx(0.7)


def test_similarity_range_and_order():
    f = Fact("k", "preference", "My hotel budget is under 150 euros a night.", ("budget", "hotel", "price"))
    assert similarity("What's your hotel budget?", f) == pytest.approx(1.0)
    assert similarity("How much can you spend on the hotel?", f) < similarity("What's your hotel budget?", f)
    assert similarity("Which airline?", f) == 0.0
    for q in ["", "?", "the a an", "hotel hotel hotel", "BUDGETS!!!"]:
        assert 0.0 <= similarity(q, f) <= 1.0


def test_rank_facts_threshold_and_tie_order():
    a = Fact("a", "detail", "The budget is 300 dollars.", ("budget", "cost"))
    b = Fact("b", "detail", "The budget may stretch to 350.", ("budget", "stretch"))
    c = Fact("c", "detail", "Twenty guests.", ("guest",))
    ranked = rank_facts("what budget?", [a, b, c], 0.3)
    assert [f.key for f, _ in ranked] == ["a", "b"]  # equal scores keep task order; c below threshold
    assert rank_facts("what budget?", [a, b, c], 1.0) == []
