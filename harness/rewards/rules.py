"""Reward rule files (``knobs/rules/rewards/*.yaml``): validation and compilation.

Each file is checked against ``knobs/schema/reward_rules.schema.json``, then semantically: every
predicate exists (the error lists the valid names), its params are exactly the ones it declares,
rule names are unique across files, and ``gyms`` names known gyms.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping

import jsonschema

from harness.gyms import gym_names
from harness.knobs.folder import defaults_dir
from harness.rewards.predicates import Predicate, get_predicate


class RewardRuleError(ValueError):
    """A reward rule file is invalid; the message names the file, the field and the value.
    ``path``: keys and indexes of the offending node in the file (``()``: the file as a whole)."""

    def __init__(self, message: str, path: tuple[Any, ...] = ()):
        super().__init__(message)
        self.path = tuple(path)


@dataclass(frozen=True)
class RewardRule:
    """One compiled rule: ``value`` is added when ``predicate`` holds on a turn of a gym in ``gyms``."""

    name: str
    predicate: Predicate
    value: float
    gyms: frozenset[str] | None
    params: Mapping[str, Any]
    source: str

    def applies_to(self, gym: str) -> bool:
        return self.gyms is None or gym in self.gyms


@lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    schema = json.loads((defaults_dir() / "schema" / "reward_rules.schema.json").read_text())
    return jsonschema.Draft202012Validator(schema)


def _p(source: str) -> str:
    """Message prefix naming the file ("" when the caller adds its own, as the knob store does)."""
    return f"{source}: " if source else ""


def _where(path: Any) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".") or "(top level)"


def _known_gyms() -> list[str]:
    return gym_names()


def _check_params(src: str, i: int, pred: Predicate, params: Mapping[str, Any]) -> dict[str, Any]:
    where = f"rules[{i}]"
    unknown = set(params) - set(pred.params)
    if unknown:
        allowed = ", ".join(pred.params) or "none"
        raise RewardRuleError(
            f"{_p(src)}{where}.params has unknown parameter(s) {', '.join(sorted(map(str, unknown)))} "
            f"for predicate {pred.name!r}; allowed: {allowed}",
            ("rules", i, "params"),
        )
    out = {}
    for name, typ in pred.params.items():
        if name not in params:
            raise RewardRuleError(
                f"{_p(src)}{where}.params.{name} is required by predicate {pred.name!r}", ("rules", i, "params")
            )
        v = params[name]
        if isinstance(v, bool) or not isinstance(v, typ):
            raise RewardRuleError(
                f"{_p(src)}{where}.params.{name} = {v!r} must be of type {typ.__name__}", ("rules", i, "params", name)
            )
        out[name] = v
    return out


def compile_rule_files(files: Mapping[str, Any], name_files: bool = True) -> tuple[RewardRule, ...]:
    """Compile ``{file stem: parsed yaml}`` (name order) into rules; raises :class:`RewardRuleError`.

    name_files: start error messages with the file (``knobs/rules/rewards/<stem>.yaml``)."""
    rules: list[RewardRule] = []
    seen: dict[str, str] = {}
    gyms_known: list[str] | None = None
    for stem in sorted(files):
        data = files[stem]
        src = f"knobs/rules/rewards/{stem}.yaml" if name_files else ""
        if data is None:
            continue  # an empty file holds no rules
        if not isinstance(data, dict):
            raise RewardRuleError(
                f"{_p(src)}the top level must be a mapping with a 'rules' list, got {type(data).__name__}"
            )
        errors = sorted(_validator().iter_errors(data), key=lambda e: [str(p) for p in e.absolute_path])
        if errors:
            raise RewardRuleError(
                f"{_p(src)}field {_where(errors[0].absolute_path)}: {errors[0].message}", tuple(errors[0].absolute_path)
            )
        for i, raw in enumerate(data["rules"]):
            where = f"rules[{i}]"
            name = raw["name"]
            if name in seen:
                raise RewardRuleError(
                    f"{_p(src)}{where}.name = {name!r} is already defined in {seen[name]}; "
                    "rule names must be unique across reward rule files",
                    ("rules", i, "name"),
                )
            seen[name] = src
            try:
                pred = get_predicate(raw["predicate"])
            except KeyError as exc:
                raise RewardRuleError(f"{_p(src)}{where}.predicate: {exc.args[0]}", ("rules", i, "predicate")) from None
            params = _check_params(src, i, pred, raw.get("params") or {})
            gyms = None
            if "gyms" in raw:
                gyms_known = gyms_known if gyms_known is not None else _known_gyms()
                bad = [g for g in raw["gyms"] if g not in gyms_known]
                if bad:
                    raise RewardRuleError(
                        f"{_p(src)}{where}.gyms names unknown gym(s) {', '.join(bad)}; "
                        f"known gyms: {', '.join(gyms_known)}",
                        ("rules", i, "gyms"),
                    )
                gyms = frozenset(raw["gyms"])
            if not math.isfinite(raw["value"]):  # NaN passes the schema's range (every comparison is false)
                raise RewardRuleError(
                    f"{_p(src)}{where}.value = {raw['value']!r} is not a finite number", ("rules", i, "value")
                )
            rules.append(RewardRule(name, pred, float(raw["value"]), gyms, params, src))
    return tuple(rules)


def validate_rule_file(data: Any) -> None:
    """Raise :class:`RewardRuleError` when ``data`` is not a valid reward rule file on its own. The
    knob store calls this on every write of ``knobs/rules/rewards/<stem>.yaml`` and adds the file
    name itself; name clashes with the other files are :func:`check_unique_names`."""
    compile_rule_files({"file": data}, name_files=False)


def check_unique_names(stem: str, data: Any, others: Mapping[str, Any]) -> None:
    """Raise :class:`RewardRuleError` at the first rule of ``data`` (a valid file, to be installed as
    ``<stem>.yaml``) whose name a rule of another file in ``others`` ({stem: parsed file}) has already:
    the knob store refuses it at the gate, since the set of files could not be compiled at reset."""
    taken = {}
    for other, doc in sorted(others.items()):
        if other != stem and isinstance(doc, dict) and isinstance(doc.get("rules"), list):
            for rule in doc["rules"]:
                if isinstance(rule, dict) and isinstance(rule.get("name"), str):
                    taken.setdefault(rule["name"], other)
    for i, rule in enumerate((data or {}).get("rules") or []):
        if rule["name"] in taken:
            raise RewardRuleError(
                f"rules[{i}].name = {rule['name']!r} is already defined in "
                f"knobs/rules/rewards/{taken[rule['name']]}.yaml; rule names must be unique across "
                "reward rule files",
                ("rules", i, "name"),
            )
