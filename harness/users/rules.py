"""Symbolic-user rule files (``knobs/rules/users/<gym>.yaml``): validation and compilation.

A rule file is checked against ``knobs/schema/user_rules.schema.json`` and then semantically
(regular expressions compile, intent names are unique, ``fallback_intent`` exists, templates use
only the ``{facts}`` placeholder and use it exactly when they disclose). A file with a
``persuasion`` section (the persuade gym: ``harness.users.persuasion``) discloses no facts, so all
its intents must have ``disclosure: none``; its cue patterns are checked like intent patterns and
its reply templates may use only the placeholders of their outcome (``{point}``, ``{reason}``).
Compiled rules are cached by content, so re-reading an unchanged file at every reset costs a hash.

Patterns are RE2 regular expressions (``google-re2``, imported as ``re2``), searched case-insensitively.
RE2 matches in time linear in the question's length and bounds a pattern's compiled size
(RE2_MAX_MEM), so no pattern, however hostile, can hang a live run or burn CPU at compile time; the
price is RE2's syntax: no lookaround and no backreferences, and ``\\b``, ``\\w``, ``\\d``, ``\\s`` are ASCII-only
(``ï`` is not a word character to ``\\b``; ``\\pL`` matches any letter). The gate (:func:`validate_rule_file`,
which the knob store calls on every write) refuses a pattern RE2 cannot take, naming what is allowed.
An intent's optional ``unless`` patterns veto it: the intent does not match a question that any of
them matches (what a negative lookahead would say in another engine).
Errors carry ``path``, the keys into the file, so the knob store can name the line.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import jsonschema
import re2

from harness.io import yamlio
from harness.knobs.folder import defaults_dir
from harness.users.personas import Persona, persona_table

# The persuade gym's section of a rule file (harness.users.persuasion plays it): the outcomes a turn
# is judged as, the cue kinds, and the placeholders each outcome's templates may use (the why
# templates must use {reason}).
OUTCOMES = ("rebuttal", "repeat", "why", "unsupported", "unconvinced", "off_topic", "abusive", "empty")
CUES = ("rebuttal", "concrete", "abusive", "why")
SLOTS = {o: frozenset() for o in OUTCOMES} | {
    "rebuttal": frozenset({"point"}),
    "repeat": frozenset({"point"}),
    "unsupported": frozenset({"point"}),
    "why": frozenset({"reason"}),
}
REQUIRED_SLOTS = {"why": frozenset({"reason"})}


@dataclass(frozen=True)
class PersuasionRules:
    """The compiled ``persuasion`` section of a rule file (schema: knobs/schema/user_rules.schema.json)."""

    min_term_hits: int
    min_content_terms: int
    repeat_overlap: float
    cues: Mapping[str, tuple[Any, ...]]  # compiled RE2 patterns per cue kind
    moves: Mapping[str, int]
    replies: Mapping[str, tuple[str, ...]]

    def cue(self, name: str, text: str) -> bool:
        """Whether any ``name`` cue pattern matches ``text`` (RE2: linear time, like every rule pattern)."""
        return any(p.search(text) is not None for p in self.cues[name])


DISCLOSURES = ("none", "matched", "next", "matched_or_next")
FACTS_SLOT = "{facts}"
DEFAULT_REDACTED = ("I'd rather not go into that. Could you ask me something more specific?",)
DEFAULT_UNDECIDED = ("I can't tell from what I know. Could you ask it another way?",)
_PLACEHOLDER_RE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
RE2_MAX_MEM = 8 << 20  # bytes for one pattern's compiled program and DFA cache (RE2's default); a bigger
# pattern is refused at compile time, and a search that fills the cache goes on in RE2's NFA (still linear)
RE2_SYNTAX = (
    "user-rule patterns are RE2 regular expressions (https://github.com/google/re2/wiki/Syntax): "
    "no lookaround ((?=, (?!, (?<=, (?<!) and no backreferences (\\1); to exclude questions, "
    "list patterns under the intent's `unless`"
)


class RuleFileError(ValueError):
    """A user or reward rule file is invalid; the message names the file, the field and the value.
    ``path``: keys and indexes of the offending node in the file (``()``: the file as a whole)."""

    def __init__(self, message: str, path: tuple[Any, ...] = ()):
        super().__init__(message)
        self.path = tuple(path)


def _re2_options() -> re2.Options:
    opts = re2.Options()
    opts.case_sensitive = False
    opts.log_errors = False  # a refused pattern is reported through RuleFileError, not on stderr
    opts.max_mem = RE2_MAX_MEM
    return opts


_OPTIONS = _re2_options()


def compile_pattern(pattern: str) -> Any:
    """``pattern`` compiled by RE2 (case-insensitive, memory-bounded); ``re2.error`` when RE2 cannot take it."""
    return re2.compile(pattern, _OPTIONS)


@dataclass(frozen=True)
class Intent:
    """One compiled intent rule."""

    name: str
    patterns: tuple[Any, ...]  # compiled RE2 patterns
    disclosure: str
    replies: tuple[str, ...]
    unless: tuple[Any, ...] = ()  # compiled RE2 patterns that veto the intent

    def matches(self, question: str) -> bool:
        return any(p.search(question) is not None for p in self.patterns) and not any(
            p.search(question) is not None for p in self.unless
        )


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

    confirm: tuple[Any, ...]
    refusal: tuple[Any, ...]
    closing: tuple[Any, ...]
    unknown: tuple[Any, ...]
    ids: tuple[Any, ...]
    max_insist: int
    user_tools: tuple[tuple[str, tuple[Any, ...]], ...]
    replies: dict[str, tuple[str, ...]]

    @staticmethod
    def any_match(patterns: tuple[Any, ...], text: str) -> bool:
        return any(p.search(text) is not None for p in patterns)


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
    undecided: tuple[str, ...] = DEFAULT_UNDECIDED
    persuasion: Any = None  # harness.users.persuasion.PersuasionRules for a persuadable user, else None
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


def _check_templates(
    source: str,
    path: tuple[Any, ...],
    templates: list[str],
    with_facts: bool,
    slots: frozenset[str] = frozenset({"facts"}),
    required: frozenset[str] = frozenset(),
) -> None:
    """Placeholders of ``templates``: only ``slots`` may appear, every one of ``required`` must,
    and ``{facts}`` appears exactly when the templates disclose (``with_facts``)."""
    field = _where(path)
    for i, t in enumerate(templates):
        at = (*path, i)
        names = set(_PLACEHOLDER_RE.findall(t))
        unknown = names - slots
        if unknown:
            allowed = ", ".join(sorted("{" + n + "}" for n in slots)) or "none"
            raise RuleFileError(
                f"{_p(source)}{field}[{i}] = {t!r} uses unknown placeholder(s) "
                f"{', '.join(sorted('{' + n + '}' for n in unknown))}; allowed here: {allowed}",
                at,
            )
        missing = required - names
        if missing:
            raise RuleFileError(
                f"{_p(source)}{field}[{i}] = {t!r} must contain {', '.join(sorted('{' + n + '}' for n in missing))}",
                at,
            )
        if with_facts and FACTS_SLOT not in t:
            raise RuleFileError(f"{_p(source)}{field}[{i}] = {t!r} must contain {FACTS_SLOT} (it discloses facts)", at)
        if not with_facts and FACTS_SLOT in t:
            raise RuleFileError(
                f"{_p(source)}{field}[{i}] = {t!r} must not contain {FACTS_SLOT} (it discloses nothing)", at
            )


def _compile_patterns(source: str, path: tuple[Any, ...], patterns: list[str]) -> list[Any]:
    """The patterns of the list at ``path`` (e.g. ``("intents", 2, "patterns")``) compiled by RE2;
    a pattern RE2 cannot take is a RuleFileError naming its place in the file."""
    out = []
    for j, pat in enumerate(patterns):
        try:
            out.append(compile_pattern(pat))
        except (re2.error, ValueError, TypeError) as exc:
            why = exc.args[0] if exc.args else exc
            why = why.decode("utf-8", "replace") if isinstance(why, bytes) else str(why)
            raise RuleFileError(
                f"{_p(source)}{_where((*path, j))} = {pat!r} is not a valid regular expression for RE2 ({why}); {RE2_SYNTAX}",
                (*path, j),
            ) from None
    return out


def _compile(data: dict[str, Any], source: str, gym: str | None) -> UserRules:
    errors = sorted(_validator().iter_errors(data), key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        e = errors[0]
        raise RuleFileError(f"{_p(source)}field {_where(e.absolute_path)}: {e.message}", tuple(e.absolute_path))
    if gym is not None and data["gym"] != gym:
        raise RuleFileError(f"{_p(source)}field gym = {data['gym']!r} but the file serves gym {gym!r}", ("gym",))
    intents: list[Intent] = []
    seen: set[str] = set()
    persuasive = "persuasion" in data
    for i, raw in enumerate(data["intents"]):
        name = raw["name"]
        if name in seen:
            raise RuleFileError(
                f"{_p(source)}intents[{i}].name = {name!r} is a duplicate; intent names must be unique",
                ("intents", i, "name"),
            )
        seen.add(name)
        pats = tuple(_compile_patterns(source, ("intents", i, "patterns"), raw["patterns"]))
        unless = tuple(_compile_patterns(source, ("intents", i, "unless"), raw.get("unless", [])))
        if persuasive and raw["disclosure"] != "none":
            raise RuleFileError(
                f"{_p(source)}intents[{i}].disclosure = {raw['disclosure']!r}: a rule file with a persuasion "
                "section discloses no facts; every intent's disclosure must be 'none'",
                ("intents", i, "disclosure"),
            )
        _check_templates(source, ("intents", i, "replies"), raw["replies"], raw["disclosure"] != "none")
        intents.append(Intent(name, pats, raw["disclosure"], tuple(raw["replies"]), unless))
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
    undecided = rep.get("undecided", list(DEFAULT_UNDECIDED))
    _check_templates(source, ("replies", "undecided"), undecided, False)
    scenario = _compile_scenario(data["scenario"], source) if "scenario" in data else None
    return UserRules(
        scenario=scenario,
        gym=data["gym"],
        intents=tuple(intents),
        fallback=by_name[fb],
        no_match=tuple(rep["no_match"]),
        budget_exhausted=tuple(rep["budget_exhausted"]),
        volunteer=tuple(rep["volunteer"]),
        redacted=tuple(redacted),
        undecided=tuple(undecided),
        personas=persona_table(data.get("personas")),
        persuasion=_compile_persuasion(data["persuasion"], source) if persuasive else None,
    )


def _compile_persuasion(raw: dict[str, Any], source: str) -> Any:
    """The ``persuasion`` section (already schema-checked) compiled: cue patterns, moves, and
    templates checked against the placeholders each outcome may use."""
    cues = {name: tuple(_compile_patterns(source, ("persuasion", "cues", name), raw["cues"][name])) for name in CUES}
    replies = {}
    for outcome, templates in raw["replies"].items():
        _check_templates(
            source,
            ("persuasion", "replies", outcome),
            templates,
            False,
            slots=SLOTS[outcome],
            required=REQUIRED_SLOTS.get(outcome, frozenset()),
        )
        replies[outcome] = tuple(templates)
    return PersuasionRules(
        min_term_hits=int(raw["min_term_hits"]),
        min_content_terms=int(raw["min_content_terms"]),
        repeat_overlap=float(raw["repeat_overlap"]),
        cues=cues,
        moves={k: int(v) for k, v in raw["moves"].items()},
        replies=replies,
    )


def _compile_scenario(raw: dict[str, Any], source: str) -> ScenarioRules:
    """The ``scenario`` section (already schema-checked): patterns compiled, placeholders checked."""
    pats = {
        k: tuple(_compile_patterns(source, ("scenario", f"{k}_patterns"), raw[f"{k}_patterns"]))
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
            (
                entry["tool"],
                tuple(_compile_patterns(source, ("scenario", "user_tools", i, "patterns"), entry["patterns"])),
            )
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


def compile_user_rules(data: Any, source: str = "user rules", gym: str | None = None) -> UserRules:
    """Validate and compile a parsed rule file; results are cached by content.

    source: names the file in error messages (e.g. ``knobs/rules/users/travel.yaml``).
    gym: when given, the file's ``gym`` field must equal it.
    """
    if data is None:
        raise RuleFileError(f"{_p(source)}the file is empty or missing; a symbolic user needs its rules")
    if not isinstance(data, dict):
        raise RuleFileError(f"{_p(source)}the top level must be a mapping, got {type(data).__name__}")
    if any(not isinstance(k, str) for k in data):
        bad = next(k for k in data if not isinstance(k, str))
        raise RuleFileError(f"{_p(source)}key {bad!r} ({type(bad).__name__}) is not a field name", (bad,))
    try:
        text = json.dumps([data, source, gym], sort_keys=True, default=str)
    except (TypeError, ValueError):  # keys of mixed types: the schema refuses such a file below
        text = repr([data, source, gym])
    key = hashlib.sha256(text.encode()).hexdigest()
    rules = _CACHE.get(key)
    if rules is None:
        rules = _compile(data, source, gym)
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
    return compile_user_rules(data, str(p), gym=p.stem)


def validate_rule_file(data: Any, gym: str | None = None) -> None:
    """Raise :class:`RuleFileError` when ``data`` is not a valid rule file (for ``gym`` when given).
    The knob store calls this on every write of ``knobs/rules/users/<gym>.yaml``; the message does
    not repeat the file name, which the store adds."""
    compile_user_rules(data, "", gym=gym)
