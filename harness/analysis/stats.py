"""Small statistics the detectors, ``eau effect`` and ``eau status`` share (pure functions)."""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Iterable, Sequence

import numpy as np

SPARK_BLOCKS = "▁▂▃▄▅▆▇█"
_WORD_RE = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def mean(xs: Sequence[float]) -> float | None:
    return float(sum(xs) / len(xs)) if xs else None


def slope(ys: Sequence[float], xs: Sequence[float] | None = None) -> float | None:
    """Least-squares slope of ``ys`` over ``xs`` (default 0, 1, 2, ...); None with fewer than 3 points
    (two points always make a "trend")."""
    if len(ys) < 3:
        return None
    x = np.asarray(xs if xs is not None else range(len(ys)), dtype=float)
    y = np.asarray(ys, dtype=float)
    dx = x - x.mean()
    denom = float((dx * dx).sum())
    if denom == 0.0:
        return None
    return float((dx * (y - y.mean())).sum() / denom)


def slope_t(ys: Sequence[float], xs: Sequence[float] | None = None) -> float | None:
    """t statistic of the least-squares slope (slope / its standard error); None with fewer than 4
    points. A perfectly straight line gives +-inf."""
    if len(ys) < 4:
        return None
    x = np.asarray(xs if xs is not None else range(len(ys)), dtype=float)
    y = np.asarray(ys, dtype=float)
    dx = x - x.mean()
    sxx = float((dx * dx).sum())
    if sxx == 0.0:
        return None
    b = float((dx * (y - y.mean())).sum() / sxx)
    resid = y - (y.mean() + b * dx)
    s2 = float((resid * resid).sum()) / (len(ys) - 2)
    if s2 == 0.0:
        return math.copysign(math.inf, b) if b else 0.0
    return b / math.sqrt(s2 / sxx)


def std_error(xs: Sequence[float]) -> float | None:
    """Standard error of the mean (sample std / sqrt(n)); None with fewer than 2 values."""
    if len(xs) < 2:
        return None
    m = sum(xs) / len(xs)
    var = sum((x - m) ** 2 for x in xs) / (len(xs) - 1)
    return math.sqrt(var / len(xs))


def bootstrap_noise_floor(
    values: Sequence[float], n: int, *, iterations: int = 2000, quantile: float = 0.95, seed: int = 0
) -> float:
    """How large a difference of two ``n``-step window means gets by chance alone.

    Both windows are resampled (with replacement) from ``values`` (the pre-event steps, i.e. the
    metric without the change); the noise floor is the ``quantile`` of ``|mean(b) - mean(a)|`` over
    ``iterations`` draws. Seeded, so the same run gives the same floor.
    """
    if not values:
        return 0.0
    rng = np.random.default_rng(seed)
    arr = np.asarray(values, dtype=float)
    a = rng.choice(arr, size=(iterations, n), replace=True).mean(axis=1)
    b = rng.choice(arr, size=(iterations, n), replace=True).mean(axis=1)
    return float(np.quantile(np.abs(b - a), quantile))


def sparkline(values: Sequence[float | None], width: int = 40) -> str:
    """Unicode block sparkline of the last ``width`` values (a gap for a missing value)."""
    vals = list(values)[-width:]
    present = [v for v in vals if v is not None]
    if not present:
        return ""
    lo, hi = min(present), max(present)
    span = hi - lo
    out = []
    for v in vals:
        if v is None:
            out.append(" ")
        elif span == 0:
            out.append(SPARK_BLOCKS[len(SPARK_BLOCKS) // 2])
        else:
            out.append(SPARK_BLOCKS[min(len(SPARK_BLOCKS) - 1, int((v - lo) / span * len(SPARK_BLOCKS)))])
    return "".join(out)


def words(text: str) -> list[str]:
    """Lower-case word tokens (letters/digits, inner apostrophes kept)."""
    return _WORD_RE.findall(text.lower())


def distinct_n(texts: Iterable[str], n: int) -> float | None:
    """Distinct-n: distinct word n-grams / all word n-grams over ``texts`` (None when there are none)."""
    total = 0
    seen: set[tuple[str, ...]] = set()
    for t in texts:
        w = words(t)
        for i in range(len(w) - n + 1):
            seen.add(tuple(w[i : i + n]))
            total += 1
    return len(seen) / total if total else None


def top_share(items: Sequence[str]) -> tuple[str | None, float]:
    """The most common item and its share of ``items`` (``(None, 0.0)`` when empty)."""
    if not items:
        return None, 0.0
    item, count = Counter(items).most_common(1)[0]
    return item, count / len(items)


def opening(text: str, n: int) -> str:
    """The first ``n`` words of ``text`` (fewer when it is shorter), space-joined."""
    return " ".join(words(text)[:n])


def normalise_argument(text: str) -> str:
    """A tool argument reduced to what identifies the call: lower case, punctuation dropped, numbers
    as ``#``, word order kept (``"Hotels, 3 nights!"`` -> ``"hotels # nights"``)."""
    return " ".join("#" if w.isdigit() else w for w in words(text))[:120]
