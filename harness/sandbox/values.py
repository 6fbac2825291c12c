"""Equality and display of the canonical values the sandbox child produces.

The child (``harness.sandbox.child.encode``) turns a returned value into ``[tag, payload...]``
using only plain data types. Reference and candidate go through the same encoder, and a test
passes when :func:`values_equal` holds. The rule is Python's ``==`` on plain data, which is also
what ColBench's own evaluator used, with one deliberate difference:

* numbers compare by value across int, bool, float, Decimal and Fraction (``1 == 1.0 == True``,
  as in Python), but two values of which one is a non-integral float (or complex) compare with a
  relative tolerance of ``FLOAT_REL_TOL`` (absolute ``FLOAT_ABS_TOL``), so that a sum computed in
  another order still matches; NaN equals NaN (a reference that returns NaN can be matched);
* containers keep their type: a list never equals a tuple (as in Python), a set equals a
  frozenset, dict order does not matter, bytes equal bytearray (as in Python);
* dict keys and set members compare exactly after mapping integral floats and bools to ints;
* numpy arrays equal numpy arrays of the same shape and elements (numpy scalars were already
  turned into Python scalars by the child);
* datetime values compare by their ISO text, timedelta by its fields; classes returned as values
  (``type(x)``) by module and qualified name (``builtins.int``).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from decimal import Decimal
from fractions import Fraction
from typing import Any

FLOAT_REL_TOL = 1e-9
FLOAT_ABS_TOL = 1e-12
_NUM_TAGS = frozenset("b i I f c D F".split())


MAX_DEPTH = 250  # deeper than the child ever encodes (200); bounds recursion here


def _hexfloat(x: Any) -> bool:
    try:
        float.fromhex(x)
        return True
    except (TypeError, ValueError, OverflowError):
        return False


def _parses(fn: Any, x: Any) -> bool:
    try:
        fn(x)
        return True
    except (TypeError, ValueError, ArithmeticError):
        return False


def well_formed(v: Any, depth: int = 0) -> bool:
    """Whether ``v`` is a valid encoding. Results come from a process running untrusted code, so
    the caller checks them before comparing or decoding anything."""
    if depth > MAX_DEPTH or not isinstance(v, list) or not v or not isinstance(v[0], str):
        return False
    tag, n = v[0], len(v)
    if tag == "N":
        return n == 1
    if tag == "b":
        return n == 2 and isinstance(v[1], bool)
    if tag == "i":
        return n == 2 and type(v[1]) is int
    if tag == "I":
        return n == 2 and isinstance(v[1], str) and _parses(lambda x: int(x, 16), v[1])
    if tag == "f":
        return n == 2 and isinstance(v[1], str) and _hexfloat(v[1])
    if tag == "c":
        return n == 3 and all(isinstance(x, str) and _hexfloat(x) for x in v[1:])
    if tag in ("s", "T"):
        return n == 2 and isinstance(v[1], str)
    if tag == "y":
        return n == 2 and isinstance(v[1], str) and _parses(bytes.fromhex, v[1])
    if tag in ("dt", "da", "ti"):
        parse = {"dt": _dt.datetime.fromisoformat, "da": _dt.date.fromisoformat, "ti": _dt.time.fromisoformat}[tag]
        return n == 2 and isinstance(v[1], str) and _parses(parse, v[1])
    if tag == "td":
        return n == 4 and all(type(x) is int for x in v[1:]) and _parses(lambda a: _dt.timedelta(*a), v[1:])
    if tag == "D":
        return n == 2 and isinstance(v[1], str) and _parses(Decimal, v[1])
    if tag == "F":
        return n == 3 and all(well_formed(x, depth + 1) and x[0] in ("i", "I") for x in v[1:]) and _number(v[2]) != 0
    if tag in ("l", "t", "S"):
        return n == 2 and isinstance(v[1], list) and all(well_formed(x, depth + 1) for x in v[1])
    if tag == "d":
        return n == 2 and isinstance(v[1], list) and all(
            isinstance(kv, list) and len(kv) == 2 and well_formed(kv[0], depth + 1) and well_formed(kv[1], depth + 1)
            for kv in v[1])
    if tag == "nd":
        return n == 3 and isinstance(v[1], list) and all(type(x) is int for x in v[1]) and well_formed(v[2], depth + 1)
    return False


def _number(v: list) -> int | float | complex | Decimal | Fraction:
    tag = v[0]
    if tag == "b":
        return int(v[1])
    if tag == "i":
        return int(v[1])
    if tag == "I":
        return int(v[1], 16)
    if tag == "f":
        return float.fromhex(v[1])
    if tag == "c":
        return complex(float.fromhex(v[1]), float.fromhex(v[2]))
    if tag == "D":
        return Decimal(v[1])
    return Fraction(_number(v[1]), _number(v[2]))


def numbers_equal(a: Any, b: Any) -> bool:
    """Python numeric equality, with the float tolerance for non-integral floats and complex."""
    inexact = any(isinstance(x, complex) or (isinstance(x, float) and not (math.isfinite(x) and x.is_integer()))
                  for x in (a, b))
    if not inexact:
        try:
            return a == b
        except (TypeError, ArithmeticError):
            return False
    try:
        ca, cb = complex(a), complex(b)
    except (TypeError, ValueError, OverflowError):
        return False
    for x, y in ((ca.real, cb.real), (ca.imag, cb.imag)):
        if math.isnan(x) or math.isnan(y):
            if not (math.isnan(x) and math.isnan(y)):
                return False
        elif x != y:  # equal infinities pass here
            if not (math.isfinite(x) and math.isfinite(y)):
                return False
            if not math.isclose(x, y, rel_tol=FLOAT_REL_TOL, abs_tol=FLOAT_ABS_TOL):
                return False
    return True


def _norm_key(v: list) -> str:
    """Exact identity of a dict key or set member, with integral numbers unified (1 == 1.0 == True)."""
    def norm(x: Any) -> Any:
        if isinstance(x, list) and x and isinstance(x[0], str):
            tag = x[0]
            if tag in _NUM_TAGS:
                n = _number(x)
                if isinstance(n, (int, Fraction, Decimal)) and n == int(n):
                    return ["i", str(int(n))]
                if isinstance(n, float) and math.isfinite(n) and n.is_integer():
                    return ["i", str(int(n))]
                return ["f", float(n).hex()] if not isinstance(n, complex) else ["c", n.real.hex(), n.imag.hex()]
            if tag in ("l", "t"):
                return [tag, [norm(e) for e in x[1]]]
            if tag == "S":
                return ["S", sorted((norm(e) for e in x[1]), key=lambda e: json.dumps(e))]
            return x
        return x
    return json.dumps(norm(v), sort_keys=True, separators=(",", ":"))


def values_equal(a: list, b: list) -> bool:
    """Whether two encoded values are equal under the module's rule."""
    ta, tb = a[0], b[0]
    if ta in _NUM_TAGS and tb in _NUM_TAGS:
        return numbers_equal(_number(a), _number(b))
    if ta != tb:
        return False
    if ta in ("l", "t"):
        return len(a[1]) == len(b[1]) and all(values_equal(x, y) for x, y in zip(a[1], b[1]))
    if ta == "S":
        return sorted(_norm_key(x) for x in a[1]) == sorted(_norm_key(x) for x in b[1])
    if ta == "d":
        da = {_norm_key(k): v for k, v in a[1]}
        db = {_norm_key(k): v for k, v in b[1]}
        return da.keys() == db.keys() and all(values_equal(da[k], db[k]) for k in da)
    if ta == "nd":
        return a[1] == b[1] and values_equal(a[2], b[2])
    return a == b


def decode(v: list) -> Any:
    """The Python value an encoding stands for (for display and for tests)."""
    tag = v[0]
    if tag == "N":
        return None
    if tag == "b":
        return bool(v[1])
    if tag in _NUM_TAGS:
        return _number(v)
    if tag == "s":
        return v[1]
    if tag == "y":
        return bytes.fromhex(v[1])
    if tag == "l":
        return [decode(e) for e in v[1]]
    if tag == "t":
        return tuple(decode(e) for e in v[1])
    if tag == "S":
        return frozenset(decode(e) for e in v[1])
    if tag == "d":
        return {decode(k): decode(val) for k, val in v[1]}
    if tag == "dt":
        return _dt.datetime.fromisoformat(v[1])
    if tag == "da":
        return _dt.date.fromisoformat(v[1])
    if tag == "ti":
        return _dt.time.fromisoformat(v[1])
    if tag == "td":
        return _dt.timedelta(days=v[1], seconds=v[2], microseconds=v[3])
    if tag == "nd":
        return decode(v[2])
    if tag == "T":
        return _ClassName(v[1])
    raise ValueError(f"unknown value tag {tag!r}")


class _ClassName(str):
    """A class value from the sandbox, displayed like Python displays classes."""

    def __repr__(self) -> str:
        return f"<class '{self.removeprefix('builtins.')}'>"


def render(v: list | None, limit: int = 200) -> str:
    """A short human-readable form of an encoded value."""
    if v is None:
        return "<no value>"
    try:
        text = repr(decode(v))
    except (ValueError, TypeError, IndexError):
        text = json.dumps(v)
    return text if len(text) <= limit else text[: limit - 1] + "…"
