"""Leak guard measures (harness/users/leakguard.py) and redaction in both arms."""

from __future__ import annotations

from harness.users.leakguard import LeakGuard

CODE = (
    "def scale_scores(scores, factor, cap):\n    out = []\n    for s in scores:\n        v = s * factor\n"
    "        out.append(min(v, cap))\n    return out"
)
PROMPT = "Write a function. The signature is: def scale_scores(scores, factor, cap)"


WORDS = [f"w{i}" for i in range(40)]


def test_token_span_of_eight_is_a_leak_seven_is_not():
    g = LeakGuard(" ".join(WORDS))  # 37 distinct 4-grams: 7 tokens cover 4 of them, under 0.3
    assert g.check("so: " + " ".join(WORDS[3:11])).token_span
    r = g.check("so: " + " ".join(WORDS[3:10]))
    assert not r.leaked and r.ngram_coverage == 4 / 37


def test_char_span_catches_long_identifiers():
    g = LeakGuard("x = compute_the_weighted_moving_average_of_prices(window)")
    r = g.check("call compute_the_weighted_moving_average_of_prices please")
    assert r.char_span and r.leaked and not r.token_span


def test_ngram_coverage_catches_a_secret_pasted_in_pieces():
    g = LeakGuard(CODE)
    pieces = (
        "first out = [ ] then for s in scores : then v = s * factor and out . append ( min "
        "also ( v , cap ) ) and then return out and def scale_scores ( scores ,"
    )
    r = g.check(pieces)
    assert r.ngram_coverage >= 0.3 and r.leaked and not r.token_span


def test_whole_short_secret_at_word_boundaries():
    g = LeakGuard("elephant")
    assert g.check("Is it an Elephant? yes").whole_secret
    assert not g.check("elephants are big").leaked  # a different word
    assert not LeakGuard("B").check("B is fine").leaked  # too short to guard by containment
    assert LeakGuard("H4, T6").check("book h4, t6 then").whole_secret
    assert not LeakGuard("215").check("f(1, 2, 3, 4) = 215.").leaked  # numbers: a probe may hit the value


def test_public_text_is_not_a_leak():
    g = LeakGuard(CODE, public=PROMPT)
    assert not g.check("It is def scale_scores(scores, factor, cap) as in the prompt.").leaked
    assert g.check("out.append(min(v, cap))\n    return out").leaked


def test_whitespace_and_case_do_not_hide_a_leak():
    g = LeakGuard(CODE)
    assert g.check("FOR S IN SCORES:   V = S * FACTOR   OUT.APPEND(MIN(V, CAP))").leaked


def test_ordinary_reply_is_clean():
    g = LeakGuard(CODE, public=PROMPT)
    r = g.check("The scores come as a list of numbers; values above the cap are set to the cap.")
    assert not r.leaked and r.reasons() == []
