"""Leak guard: detects a user reply that gives away the task's hidden answer (``task.secret``).

Both user arms run every reply through a :class:`LeakGuard` built for the task at reset; a reply
that leaks is replaced by a refusal and flagged ``leak_redacted`` (symbolic replies are built from
templates and fact texts only, so there the guard is the last line of defence; for the LLM user it
is the main one).

Measures (text normalised: lower-case, whitespace runs collapsed to one space; tokens are runs of
word characters or single punctuation marks, so ``f(x)`` is four tokens). A reply leaks when any
of these holds:

1. **token span**: it shares a contiguous run of ``max_span_tokens`` (default 8) tokens with the
   secret;
2. **char span**: it shares a verbatim substring of ``max_span_chars`` (default 40) characters with
   the secret (catches long identifiers and string literals that are few tokens);
3. **n-gram coverage**: it contains at least ``max_ngram_coverage`` (default 0.3) of the secret's
   distinct token ``ngram``-grams (default 4), counted only when the secret has at least
   ``min_ngrams`` (default 5) of them (catches a secret pasted in short pieces);
4. **whole secret**: the whole secret (at least ``min_secret_chars``, default 3, characters, and
   at least one letter) appears in it between word boundaries (short secrets: a telepathy word,
   option ids). A purely numeric secret (the function gym's value) is not checked this way: a
   probe's value may equal it by chance and is legitimate information.

Spans that also occur in the public text the agent already sees (``public``: the task prompt, e.g.
a function signature) are not counted as leaks. Precomputing the secret's k-gram sets makes a check
linear in the reply's length.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_TOKEN_RE = re.compile(r"\w+|[^\w\s]")
_WS_RE = re.compile(r"\s+")


def normalise(text: str) -> str:
    """Lower-case with whitespace runs collapsed (the form every measure compares)."""
    return _WS_RE.sub(" ", text.lower()).strip()


def tokens(text: str) -> list[str]:
    """Word tokens and single punctuation marks of the normalised text."""
    return _TOKEN_RE.findall(text.lower())


def _grams(toks: list[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(toks[i : i + n]) for i in range(len(toks) - n + 1)}


def _char_windows(text: str, n: int) -> set[str]:
    return {text[i : i + n] for i in range(len(text) - n + 1)}


@dataclass(frozen=True)
class LeakReport:
    """Result of one check: which measures fired (``leaked`` if any) and the n-gram coverage."""

    leaked: bool
    token_span: bool
    char_span: bool
    ngram_coverage: float
    whole_secret: bool

    def reasons(self) -> list[str]:
        """Names of the measures that fired."""
        out = [
            n
            for n, v in (
                ("token_span", self.token_span),
                ("char_span", self.char_span),
                ("whole_secret", self.whole_secret),
            )
            if v
        ]
        if self.leaked and not out:
            out.append("ngram_coverage")
        return out

    def to_flag(self) -> dict[str, Any]:
        """What ``UserReply.flags['leak_redacted']`` records."""
        return {"reasons": self.reasons(), "ngram_coverage": round(self.ngram_coverage, 3)}


class LeakGuard:
    """Checks texts against one secret (see the module docstring for the measures)."""

    def __init__(
        self,
        secret: str,
        public: str = "",
        *,
        max_span_tokens: int = 8,
        max_span_chars: int = 40,
        ngram: int = 4,
        max_ngram_coverage: float = 0.3,
        min_ngrams: int = 5,
        min_secret_chars: int = 3,
    ):
        if max_span_tokens < 2 or max_span_chars < 4 or ngram < 1:
            raise ValueError("LeakGuard: max_span_tokens >= 2, max_span_chars >= 4 and ngram >= 1 are required")
        if not 0.0 < max_ngram_coverage <= 1.0:
            raise ValueError(f"LeakGuard: max_ngram_coverage={max_ngram_coverage} must be in (0, 1]")
        self.secret = secret or ""
        self.max_span_tokens = max_span_tokens
        self.max_span_chars = max_span_chars
        self.ngram = ngram
        self.max_ngram_coverage = max_ngram_coverage
        s_norm, p_norm = normalise(self.secret), normalise(public or "")
        s_toks, p_toks = tokens(s_norm), tokens(p_norm)
        # Public k-grams are removed: repeating what the agent was shown is not a leak.
        self._span_grams = _grams(s_toks, max_span_tokens) - _grams(p_toks, max_span_tokens)
        self._char_grams = _char_windows(s_norm, max_span_chars) - _char_windows(p_norm, max_span_chars)
        cov = _grams(s_toks, ngram) - _grams(p_toks, ngram)
        self._cov_grams = cov if len(cov) >= min_ngrams else set()
        whole = len(s_norm) >= min_secret_chars and s_norm not in p_norm and re.search(r"[a-z]", s_norm) is not None
        self._whole_re = re.compile(r"(?<!\w)" + re.escape(s_norm) + r"(?!\w)") if whole else None

    def check(self, text: str) -> LeakReport:
        """Measure ``text`` against the secret."""
        if not self.secret or not text:
            return LeakReport(False, False, False, 0.0, False)
        t_norm = normalise(text)
        t_toks = tokens(t_norm)
        n = self.max_span_tokens
        token_span = any(tuple(t_toks[i : i + n]) in self._span_grams for i in range(len(t_toks) - n + 1))
        c = self.max_span_chars
        char_span = bool(self._char_grams) and any(
            t_norm[i : i + c] in self._char_grams for i in range(len(t_norm) - c + 1)
        )
        coverage = 0.0
        if self._cov_grams:
            coverage = len(_grams(t_toks, self.ngram) & self._cov_grams) / len(self._cov_grams)
        whole = bool(self._whole_re and self._whole_re.search(t_norm))
        leaked = token_span or char_span or whole or coverage >= self.max_ngram_coverage
        return LeakReport(leaked, token_span, char_span, coverage, whole)

    def leaks(self, text: str) -> bool:
        """True when ``text`` leaks the secret."""
        return self.check(text).leaked
