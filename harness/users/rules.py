"""Symbolic-user rule files (``knobs/rules/users/<gym>.yaml``): validation and compilation.

A rule file is checked against ``knobs/schema/user_rules.schema.json`` and then semantically
(regular expressions compile, intent names are unique, ``fallback_intent`` exists, templates use
only the ``{facts}`` placeholder and use it exactly when they disclose). Compiled rules are cached
by content, so re-reading an unchanged file at every reset costs a hash.

Patterns run on the ``regex`` engine under a time bound: a search that takes longer than
SEARCH_TIMEOUT_S counts as no match (logged once per pattern), so a catastrophic-backtracking pattern
can never hang a live run. The gate (:func:`validate_rule_file`, which the knob store calls on every
write) also refuses a pattern that does not finish on adversarial probes (``aaaa…!``, question-long).
Errors carry ``path``, the keys into the file, so the knob store can name the line.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
import regex

from harness.io import yamlio
from harness.knobs.folder import defaults_dir
from harness.users.personas import Persona, persona_table

DISCLOSURES = ("none", "matched", "next", "matched_or_next")
FACTS_SLOT = "{facts}"
DEFAULT_REDACTED = ("I'd rather not go into that. Could you ask me something more specific?",)
_PLACEHOLDER_RE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
SEARCH_TIMEOUT_S = 0.2  # one pattern on one question (wall clock, so with room for a loaded machine); the shipped patterns take microseconds
PROBE_TIMEOUT_S = 0.2  # one gate probe (wall clock: room for a loaded machine)
PROBE_CHARS = 1500  # as long as a long question: the regex engine keeps (a+)+$ polynomial, not exponential
_log = logging.getLogger(__name__)
_timed_out: set[str] = set()  # patterns already reported (one warning each)


class RuleFileError(ValueError):
    """A user or reward rule file is invalid; the message names the file, the field and the value.
    ``path``: keys and indexes of the offending node in the file (``()``: the file as a whole)."""

    def __init__(self, message: str, path: tuple[Any, ...] = ()):
        super().__init__(message)
        self.path = tuple(path)


def search_bounded(pattern: regex.Pattern[str], text: str, timeout: float = SEARCH_TIMEOUT_S) -> bool:
    """Whether ``pattern`` matches in ``text``; a search past ``timeout`` seconds counts as no match."""
    try:
        return pattern.search(text, timeout=timeout) is not None
    except TimeoutError:
        if pattern.pattern not in _timed_out:
            _timed_out.add(pattern.pattern)
            _log.warning(
                "user-rule pattern %r took longer than %.0f ms on a %d-character question: counted as no match",
                pattern.pattern,
                timeout * 1000,
                len(text),
            )
        return False


@dataclass(frozen=True)
class Intent:
    """One compiled intent rule."""

    name: str
    patterns: tuple[regex.Pattern[str], ...]
    disclosure: str
    replies: tuple[str, ...]

    def matches(self, question: str) -> bool:
        return any(search_bounded(p, question) for p in self.patterns)


def _probes(pattern: str) -> list[str]:
    """Strings that make a backtracking pattern explode: long runs of one character (or of a pair of
    adjacent letters of the pattern) followed by a character that makes the match fail."""
    letters = sorted({c for c in pattern if c.isalnum()})[:16]
    pairs = sorted({pattern[i : i + 2] for i in range(len(pattern) - 1) if pattern[i : i + 2].isalnum()})[:16]
    units = [*letters, "a", "1", " ", "a ", "a1", *pairs]
    return [u * (PROBE_CHARS // len(u)) + end for u in dict.fromkeys(units) for end in ("!", "\n")]


def backtracking_probe(pattern: regex.Pattern[str]) -> str | None:
    """The first probe on which ``pattern`` does not finish within PROBE_TIMEOUT_S (None: none)."""
    for probe in _probes(pattern.pattern):
        try:
            pattern.search(probe, timeout=PROBE_TIMEOUT_S)
        except TimeoutError:
            return probe
    return None


SCENARIO_SLOTS = {
    "insist": {"request"},
    "remind": {"request"},
    "tool_result": {"tool", "result"},
    "tool_failed": {"tool", "result"},
}


@dataclass(frozen=True)
class ScenarioRules:
    """The compiled ``scenario`` section (users that act out a task with a goal: the τ² gyms, tau).
    Fields as in the schema; patterns compiled case-insensitive; user_tools as (tool, patterns)."""

    confirm: tuple[regex.Pattern[str], ...]
    refusal: tuple[regex.Pattern[str], ...]
    closing: tuple[regex.Pattern[str], ...]
    unknown: tuple[regex.Pattern[str], ...]
    ids: tuple[regex.Pattern[str], ...]
    max_insist: int
    user_tools: tuple[tuple[str, tuple[regex.Pattern[str], ...]], ...]
    replies: dict[str, tuple[str, ...]]

    @staticmethod
    def any_match(patterns: tuple[regex.Pattern[str], ...], text: str) -> bool:
        return any(search_bounded(p, text) for p in patterns)


@dataclass(frozen=True)
class UserRules:
    """A compiled symbolic-user rule file."""

    gym: str
    intents: tuple[Intent, ...]
    fallback: Intent
    no_match: tuple[str, ...]
    budget_exhausted: tuple[str, ...]
    volunteer: tuple[str, ...]
    redacted: tuple[str, ...]
    personas: dict[str, Persona]
    scenario: ScenarioRules | None = None

    def classify(self, question: str) -> Intent:
        """The first intent whose patterns match ``question``, else the fallback intent."""
        for intent in self.intents:
            if intent.matches(question):
                return intent
        return self.fallback


@lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    schema = json.loads((defaults_dir() / "schema" / "user_rules.schema.json").read_text())
    return jsonschema.Draft202012Validator(schema)


def _p(source: str) -> str:
    """Message prefix naming the file ("" when the caller adds its own, as the knob store does)."""
    return f"{source}: " if source else ""


def _where(path: Any) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".") or "(top level)"


def _check_templates(source: str, path: tuple[Any, ...], templates: list[str], with_facts: bool) -> None:
    field = _where(path)
    for i, t in enumerate(templates):
        at = (*path, i)
        names = set(_PLACEHOLDER_RE.findall(t))
        unknown = names - {"facts"}
        if unknown:
            raise RuleFileError(
                f"{_p(source)}{field}[{i}] = {t!r} uses unknown placeholder(s) "
                f"{', '.join(sorted('{' + n + '}' for n in unknown))}; only {FACTS_SLOT} exists",
                at,
            )
        if with_facts and FACTS_SLOT not in t:
            raise RuleFileError(f"{_p(source)}{field}[{i}] = {t!r} must contain {FACTS_SLOT} (it discloses facts)", at)
        if not with_facts and FACTS_SLOT in t:
            raise RuleFileError(
                f"{_p(source)}{field}[{i}] = {t!r} must not contain {FACTS_SLOT} (it discloses nothing)", at
            )


def _compile(data: dict[str, Any], source: str, gym: str | None, probe: bool = False) -> UserRules:
    errors = sorted(_validator().iter_errors(data), key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        e = errors[0]
        raise RuleFileError(f"{_p(source)}field {_where(e.absolute_path)}: {e.message}", tuple(e.absolute_path))
    if gym is not None and data["gym"] != gym:
        raise RuleFileError(f"{_p(source)}field gym = {data['gym']!r} but the file serves gym {gym!r}", ("gym",))
    intents: list[Intent] = []
    seen: set[str] = set()
    for i, raw in enumerate(data["intents"]):
        name = raw["name"]
        if name in seen:
            raise RuleFileError(
                f"{_p(source)}intents[{i}].name = {name!r} is a duplicate; intent names must be unique",
                ("intents", i, "name"),
            )
        seen.add(name)
        pats = []
        for j, pat in enumerate(raw["patterns"]):
            try:
                compiled = regex.compile(pat, regex.IGNORECASE | regex.V0)
            except (regex.error, ValueError, OverflowError, RecursionError) as exc:
                raise RuleFileError(
                    f"{_p(source)}intents[{i}].patterns[{j}] = {pat!r} is not a valid regular expression: {exc}",
                    ("intents", i, "patterns", j),
                ) from None
            if probe and (bad := backtracking_probe(compiled)) is not None:
                raise RuleFileError(
                    f"{_p(source)}intents[{i}].patterns[{j}] = {pat!r} backtracks catastrophically: "
                    f"no result within {PROBE_TIMEOUT_S * 1000:.0f} ms on {bad!r}; rewrite it without "
                    "nested repetition such as (a+)+",
                    ("intents", i, "patterns", j),
                )
            pats.append(compiled)
        _check_templates(source, ("intents", i, "replies"), raw["replies"], raw["disclosure"] != "none")
        intents.append(Intent(name, tuple(pats), raw["disclosure"], tuple(raw["replies"])))
    by_name = {it.name: it for it in intents}
    fb = data["fallback_intent"]
    if fb not in by_name:
        raise RuleFileError(
            f"{_p(source)}field fallback_intent = {fb!r} names no intent; intents: {', '.join(by_name)}",
            ("fallback_intent",),
        )
    rep = data["replies"]
    _check_templates(source, ("replies", "no_match"), rep["no_match"], False)
    _check_templates(source, ("replies", "budget_exhausted"), rep["budget_exhausted"], False)
    _check_templates(source, ("replies", "volunteer"), rep["volunteer"], True)
    redacted = rep.get("redacted", list(DEFAULT_REDACTED))
    _check_templates(source, ("replies", "redacted"), redacted, False)
    scenario = _compile_scenario(data["scenario"], source, probe) if "scenario" in data else None
    return UserRules(
        scenario=scenario,
        gym=data["gym"],
        intents=tuple(intents),
        fallback=by_name[fb],
        no_match=tuple(rep["no_match"]),
        budget_exhausted=tuple(rep["budget_exhausted"]),
        volunteer=tuple(rep["volunteer"]),
        redacted=tuple(redacted),
        personas=persona_table(data.get("personas")),
    )


def _patterns(source: str, path: tuple[Any, ...], raw: list[str], probe: bool) -> tuple[regex.Pattern[str], ...]:
    out = []
    for j, pat in enumerate(raw):
        try:
            compiled = regex.compile(pat, regex.IGNORECASE | regex.V0)
        except (regex.error, ValueError, OverflowError, RecursionError) as exc:
            raise RuleFileError(
                f"{_p(source)}{_where((*path, j))} = {pat!r} is not a valid regular expression: {exc}", (*path, j)
            ) from None
        if probe and (bad := backtracking_probe(compiled)) is not None:
            raise RuleFileError(
                f"{_p(source)}{_where((*path, j))} = {pat!r} backtracks catastrophically on {bad!r}", (*path, j)
            )
        out.append(compiled)
    return tuple(out)


def _compile_scenario(raw: dict[str, Any], source: str, probe: bool) -> ScenarioRules:
    """The ``scenario`` section (already schema-checked): patterns compiled, placeholders checked."""
    pats = {
        k: _patterns(source, ("scenario", f"{k}_patterns"), raw[f"{k}_patterns"], probe)
        for k in ("confirm", "refusal", "closing", "unknown", "id")
    }
    replies: dict[str, tuple[str, ...]] = {}
    for key, templates in raw["replies"].items():
        allowed = SCENARIO_SLOTS.get(key, set())
        for i, t in enumerate(templates):
            bad = set(_PLACEHOLDER_RE.findall(t)) - allowed
            if bad:
                only = ", ".join("{" + n + "}" for n in sorted(allowed)) or "none"
                raise RuleFileError(
                    f"{_p(source)}scenario.replies.{key}[{i}] = {t!r} uses unknown placeholder(s) "
                    f"{', '.join(sorted('{' + n + '}' for n in bad))}; allowed here: {only}",
                    ("scenario", "replies", key, i),
                )
        replies[key] = tuple(templates)
    tools = []
    seen: set[str] = set()
    for i, entry in enumerate(raw.get("user_tools", [])):
        if entry["tool"] in seen:
            raise RuleFileError(
                f"{_p(source)}scenario.user_tools[{i}].tool = {entry['tool']!r} is a duplicate",
                ("scenario", "user_tools", i, "tool"),
            )
        seen.add(entry["tool"])
        tools.append(
            (entry["tool"], _patterns(source, ("scenario", "user_tools", i, "patterns"), entry["patterns"], probe))
        )
    return ScenarioRules(
        confirm=pats["confirm"],
        refusal=pats["refusal"],
        closing=pats["closing"],
        unknown=pats["unknown"],
        ids=pats["id"],
        max_insist=int(raw.get("max_insist", 2)),
        user_tools=tuple(tools),
        replies=replies,
    )


_CACHE: dict[str, UserRules] = {}


def compile_user_rules(data: Any, source: str = "user rules", gym: str | None = None, probe: bool = False) -> UserRules:
    """Validate and compile a parsed rule file; results are cached by content.

    source: names the file in error messages (e.g. ``knobs/rules/users/travel.yaml``).
    gym: when given, the file's ``gym`` field must equal it.
    probe: also refuse patterns that backtrack catastrophically on short probes (the gate does; a
    reset does not, as a probe is timed and the file in force has passed it).
    """
    if data is None:
        raise RuleFileError(f"{_p(source)}the file is empty or missing; a symbolic user needs its rules")
    if not isinstance(data, dict):
        raise RuleFileError(f"{_p(source)}the top level must be a mapping, got {type(data).__name__}")
    if any(not isinstance(k, str) for k in data):
        bad = next(k for k in data if not isinstance(k, str))
        raise RuleFileError(f"{_p(source)}key {bad!r} ({type(bad).__name__}) is not a field name", (bad,))
    try:
        text = json.dumps([data, source, gym, probe], sort_keys=True, default=str)
    except (TypeError, ValueError):  # keys of mixed types: the schema refuses such a file below
        text = repr([data, source, gym, probe])
    key = hashlib.sha256(text.encode()).hexdigest()
    rules = _CACHE.get(key)
    if rules is None:
        rules = _compile(data, source, gym, probe)
        if len(_CACHE) > 256:
            _CACHE.clear()
        _CACHE[key] = rules
    return rules


def load_user_rules_file(path: str | Path) -> UserRules:
    """Read (bounded, regular files only: harness.io.yamlio) and compile ``knobs/rules/users/<gym>.yaml``
    (the gym is the file's stem)."""
    p = Path(path)
    try:
        data = yamlio.load_plain(p)
    except yamlio.FileProblem as exc:
        raise RuleFileError(str(exc), ()) from None
    return compile_user_rules(data, str(p), gym=p.stem, probe=True)


def validate_rule_file(data: Any, gym: str | None = None) -> None:
    """Raise :class:`RuleFileError` when ``data`` is not a valid rule file (for ``gym`` when given).
    The knob store calls this on every write of ``knobs/rules/users/<gym>.yaml``; the message does
    not repeat the file name, which the store adds."""
    compile_user_rules(data, "", gym=gym, probe=True)
