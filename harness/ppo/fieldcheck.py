"""Type and size checks of a config dataclass, read from its own annotations.

A config comes from YAML (presets, ``--config``, ``--set``), so any field may hold any value:
``steps: abc``, ``seed: 1e400`` (inf), ``samples_per_task: 1000000000``. :func:`check_fields`
refuses such values with one message that names the field, what it holds and what is allowed,
before any cross-field check compares them (``"abc" < 1`` would raise a TypeError there).
The expected types come from the dataclass annotations, so a field whose type changes (a dict
turned into a typed spec dataclass) is checked by its new type without a change here.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Mapping, Union

Limits = Mapping[str, tuple[float, float]]


def check_fields(obj: Any, limits: Limits | None = None, prefix: str = "") -> None:
    """ValueError naming the first field of dataclass ``obj`` whose value does not fit its annotation
    (bool is not an int, a float is finite, a list's items and a mapping's values are checked too) or
    lies outside ``limits`` ({field: (low, high)}, inclusive)."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        name, value = prefix + f.name, getattr(obj, f.name)
        check_value(name, value, hints.get(f.name, Any))
        if limits and f.name in limits and value is not None:
            check_range(name, value, *limits[f.name])


def check_range(name: str, value: Any, low: float, high: float) -> None:
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {_num(low)} and {_num(high)}, got {_num(value)}")


def check_value(name: str, value: Any, hint: Any) -> None:
    """ValueError when ``value`` does not fit type ``hint``; ``Any`` parts are checked for
    non-finite numbers only."""
    if not _fits(value, hint):
        raise ValueError(f"{name} must be {describe(hint)}, got {_show(value)}")
    bad = _non_finite(value)
    if bad is not None:
        raise ValueError(f"{name}{bad}: NaN and infinity are not allowed (a finite number is)")
    if dataclasses.is_dataclass(hint) and isinstance(value, hint):
        check_fields(value, prefix=name + ".")


def _fits(value: Any, hint: Any) -> bool:
    if hint is Any or hint is object:
        return True
    if hint is None or hint is type(None):
        return value is None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        return any(_fits(value, a) for a in args)
    if origin is typing.Literal:
        return value in args
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin is list or hint is list:
        return isinstance(value, list) and all(_fits(v, args[0] if args else Any) for v in value)
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            return False
        kt, vt = args if args else (Any, Any)
        return all(_fits(k, kt) and _fits(v, vt) for k, v in value.items())
    if dataclasses.is_dataclass(hint):
        # a typed spec, or the mapping it is built from (the spec's own constructor checks that)
        return isinstance(value, (hint, dict))
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True  # a typing construct this helper does not know: no opinion


def _non_finite(value: Any, where: str = "") -> str | None:
    """Where (``.key`` / ``[i]``) the first NaN or infinity sits inside ``value``; None when all finite."""
    if isinstance(value, float) and not math.isfinite(value):
        return where
    if isinstance(value, dict):
        for k, v in value.items():
            hit = _non_finite(v, f"{where}.{k}")
            if hit is not None:
                return hit
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            hit = _non_finite(v, f"{where}[{i}]")
            if hit is not None:
                return hit
    return None


def describe(hint: Any) -> str:
    """``int`` -> "an integer", ``list[str] | None`` -> "a list of strings or null", ..."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        parts = [describe(a) for a in args if a is not type(None)]
        return " or ".join(parts + (["null"] if type(None) in args else []))
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin is list or hint is list:
        return f"a list of {_plural(describe(args[0]))}" if args and args[0] is not Any else "a list"
    if origin is dict or hint is dict:
        return "a mapping"
    if dataclasses.is_dataclass(hint):
        return f"a mapping of {hint.__name__} fields"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(
        hint, getattr(hint, "__name__", str(hint)))


def _plural(text: str) -> str:
    return {"an integer": "integers", "a number": "numbers", "a string": "strings",
            "true or false": "booleans"}.get(text, text)


def _num(x: Any) -> str:
    if isinstance(x, int) and not isinstance(x, bool):
        # a huge int has no str() beyond 4300 digits; its size says enough
        return f"{x:,}" if abs(x) < 10**30 else f"an integer of {x.bit_length()} bits"
    return repr(x)


def _show(value: Any, limit: int = 80) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return _num(value)
    try:
        text = repr(value)
    except ValueError:  # a huge int nested in a list or mapping
        text = f"a {type(value).__name__} holding a huge integer"
    return text if len(text) <= limit else text[: limit - 1] + "…"
