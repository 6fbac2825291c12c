"""Equality and display of the canonical values the sandbox child produces.

The child (``harness.sandbox.child.encode``) turns a returned value into ``[tag, payload...]``
using only plain data types, and does there, under the call's time budget, everything that could
raise or take long on a hostile value: exact forms of huge numbers, Decimal NaNs and infinities,
keys of dict entries and set members. This module only checks the shape of what came back
(:func:`well_formed`) and compares strings, lists and short float texts (:func:`values_equal`):
no number is converted here, no hash of an untrusted value is taken, and nothing here raises on a
well-formed value. Reference and candidate go through the same encoder, and a test passes when
:func:`values_equal` holds. The rule is Python's ``==`` on plain data, which is also what
ColBench's own evaluator used, with deliberate differences:

* numbers compare by value across int, bool, float, Decimal and Fraction (``1 == 1.0 == True``,
  as in Python: the child gives each number an exact text, a reduced hex ratio), but two values of
  which one is a non-integral or non-finite float (or complex) compare with a relative tolerance
  of ``FLOAT_REL_TOL`` (absolute ``FLOAT_ABS_TOL``), so that a sum computed in another order still
  matches; NaN equals NaN, of any type (a reference that returns NaN can be matched);
* containers keep their type: a list never equals a tuple (as in Python), a set equals a
  frozenset, dict order does not matter, bytes equal bytearray (as in Python);
* dict keys and set members compare exactly by their key text (numbers by exact value);
* numpy arrays equal numpy arrays of the same shape and elements (numpy scalars were already
  turned into Python scalars by the child);
* datetime values compare by their ISO text, timedelta by its fields; classes returned as values
  (``type(x)``) by module and qualified name (``builtins.int``).
"""

from __future__ import annotations

import math
from typing import Any

FLOAT_REL_TOL = 1e-9
FLOAT_ABS_TOL = 1e-12
MAX_DEPTH = 250  # deeper than the child ever encodes (200); bounds recursion here
BIG = ("+big", "-big")  # a finite number beyond the float range: close to nothing
_FLOAT_TEXT = 40  # longest float hex text ("-0x1.fffffffffffffp+1023" has 24)
_INT_FIELD = 1 << 62


def _float_text(x: Any) -> bool:
    if not isinstance(x, str) or len(x) > _FLOAT_TEXT:
        return False
    if x in BIG:
        return True
    try:
        float.fromhex(x)
        return True
    except (ValueError, OverflowError):
        return False


def _small_int(x: Any, low: int = -_INT_FIELD) -> bool:
    return type(x) is int and low <= x < _INT_FIELD


def well_formed(v: Any, depth: int = 0) -> bool:
    """Whether ``v`` is a valid encoding. Results come from a process running untrusted code, so
    the caller checks them before comparing or displaying anything. Never raises."""
    try:
        return _well_formed(v, depth)
    except (RecursionError, MemoryError):
        return False


def _well_formed(v: Any, depth: int) -> bool:
    if depth > MAX_DEPTH or not isinstance(v, list) or not v or not isinstance(v[0], str):
        return False
    tag, n = v[0], len(v)
    if tag == "N":
        return n == 1
    if tag == "n":
        return (
            n == 6
            and type(v[1]) is bool
            and isinstance(v[2], str)
            and bool(v[2])
            and _float_text(v[3])
            and _float_text(v[4])
            and isinstance(v[5], str)
            and len(v[5]) <= 200
        )
    if tag in ("s", "T", "y", "dt", "da", "ti"):
        return n == 2 and isinstance(v[1], str)
    if tag == "td":
        return n == 4 and all(_small_int(x) for x in v[1:])
    if tag in ("l", "t"):
        return n == 2 and isinstance(v[1], list) and all(_well_formed(x, depth + 1) for x in v[1])
    if tag == "S":
        return (
            n == 2
            and isinstance(v[1], list)
            and all(
                isinstance(km, list) and len(km) == 2 and isinstance(km[0], str) and _well_formed(km[1], depth + 1)
                for km in v[1]
            )
        )
    if tag == "d":
        return (
            n == 2
            and isinstance(v[1], list)
            and all(
                isinstance(kv, list)
                and len(kv) == 3
                and isinstance(kv[0], str)
                and _well_formed(kv[1], depth + 1)
                and _well_formed(kv[2], depth + 1)
                for kv in v[1]
            )
        )
    if tag == "nd":
        return (
            n == 3 and isinstance(v[1], list) and all(_small_int(x, 0) for x in v[1]) and _well_formed(v[2], depth + 1)
        )
    return False


def floats_close(x: float, y: float) -> bool:
    """Float equality of the rule: NaN equals NaN, equal infinities, else the relative tolerance."""
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    if x == y:
        return True
    if not (math.isfinite(x) and math.isfinite(y)):
        return False
    return math.isclose(x, y, rel_tol=FLOAT_REL_TOL, abs_tol=FLOAT_ABS_TOL)


def _numbers_close(a: list, b: list) -> bool:
    for x, y in ((a[3], b[3]), (a[4], b[4])):
        if x in BIG or y in BIG:
            return False
        if not floats_close(float.fromhex(x), float.fromhex(y)):
            return False
    return True


def values_equal(a: Any, b: Any) -> bool:
    """Whether two encoded values are equal under the module's rule. Never raises: anything
    unexpected (a value that is not well formed) is unequal."""
    try:
        return _equal(a, b)
    except Exception:  # noqa: BLE001 -- scoring must never raise; an odd value is a failed test
        return False


def _equal(a: list, b: list) -> bool:
    ta, tb = a[0], b[0]
    if ta == "n" and tb == "n":
        return _numbers_close(a, b) if (a[1] or b[1]) else a[2] == b[2]
    if ta != tb:
        return False
    if ta in ("l", "t"):
        return len(a[1]) == len(b[1]) and all(_equal(x, y) for x, y in zip(a[1], b[1]))
    if ta == "S":
        return sorted(k for k, _ in a[1]) == sorted(k for k, _ in b[1])
    if ta == "d":
        da = {k: v for k, _, v in a[1]}
        db = {k: v for k, _, v in b[1]}
        return da.keys() == db.keys() and all(_equal(da[k], db[k]) for k in da)
    if ta == "nd":
        return a[1] == b[1] and _equal(a[2], b[2])
    return a == b


class _Text:
    """Display text with a character budget: rendering stops once it is spent."""

    def __init__(self, limit: int):
        self.parts: list[str] = []
        self.left = limit

    def add(self, s: str) -> None:
        if self.left > 0:
            self.parts.append(s[: self.left])
            self.left -= len(s)

    @property
    def full(self) -> bool:
        return self.left <= 0


def _seq(out: _Text, items: list, open_: str, close: str, one: Any) -> None:
    out.add(open_)
    for i, item in enumerate(items):
        if out.full:
            return
        if i:
            out.add(", ")
        one(item)
    out.add(close)


def _render(v: list, out: _Text) -> None:
    tag = v[0]
    if tag == "N":
        out.add("None")
    elif tag == "n":
        out.add(v[5])
    elif tag == "s":
        out.add(repr(v[1][: out.left + 2]))
    elif tag == "y":
        out.add(f"bytes.fromhex({v[1][: out.left]!r})")
    elif tag in ("l", "t"):
        _seq(
            out,
            v[1],
            "[" if tag == "l" else "(",
            "]" if tag == "l" else ("," if len(v[1]) == 1 else "") + ")",
            lambda x: _render(x, out),
        )
    elif tag == "S":
        if not v[1]:
            out.add("set()")
        else:
            _seq(out, v[1], "{", "}", lambda km: _render(km[1], out))
    elif tag == "d":

        def entry(kv: list) -> None:
            _render(kv[1], out)
            out.add(": ")
            _render(kv[2], out)

        _seq(out, v[1], "{", "}", entry)
    elif tag in ("dt", "da", "ti"):
        out.add(v[1])
    elif tag == "td":
        out.add(f"timedelta(days={v[1]}, seconds={v[2]}, microseconds={v[3]})")
    elif tag == "nd":
        out.add("array(")
        _render(v[2], out)
        out.add(")")
    elif tag == "T":
        out.add(f"<class '{v[1].removeprefix('builtins.')}'>")
    else:
        out.add(f"<{tag}>")


def render(v: list | None, limit: int = 200) -> str:
    """A short human-readable form of an encoded value (no value is decoded: display only)."""
    if v is None:
        return "<no value>"
    out = _Text(limit + 1)
    try:
        _render(v, out)
    except Exception:  # noqa: BLE001 -- display of a malformed value
        return "<malformed value>"
    text = "".join(out.parts)
    return text if len(text) <= limit else text[: limit - 1] + "…"
