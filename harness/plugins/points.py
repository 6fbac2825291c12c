"""Override points: the named pieces of gym logic a plug-in may replace while a run is live.

A gym declares a point next to the code that uses it::

    COUNTS_AS_QUESTION = override_point(
        "base.counts_as_question", default=_counts_as_question, returns=bool,
        samples=[("What is your budget?", "travel")], replay=_asks_of, doc="...")

and calls it where the decision is made: ``COUNTS_AS_QUESTION(self.knobs, text, self.name)``. With
no plug-in in force for the point (the knob snapshot's ``plugins``) that is the default function,
called in-process; with one, the plug-in's function in the plug-in worker, under the call time limit
(:mod:`harness.plugins.runtime`), and a value of the wrong type is an error of the plug-in.

A point is a small pure function over plain data (str, int, float, bool, lists, dicts): what it
receives can be sent to another process and replayed from recorded episodes. ``samples`` are the
gate's check inputs; ``replay(episode_record)`` lists the inputs the point saw in a recorded episode
(``trajectories/step_*.jsonl``), for the gate's count of decisions a candidate changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from harness.plugins.runtime import PluginError, call_entry


@dataclass(frozen=True)
class OverridePoint:
    """One named override point (see the module docstring)."""

    name: str
    default: Callable[..., Any]
    params: tuple[str, ...]
    returns: type
    doc: str
    samples: tuple[tuple[Any, ...], ...] = ()
    replay: Callable[[Mapping[str, Any]], Iterable[tuple[Any, ...]]] | None = field(default=None, compare=False)

    def signature(self) -> str:
        return f"{self.name.split('.')[-1]}({', '.join(self.params)}) -> {self.returns.__name__}"

    def check_value(self, value: Any) -> str | None:
        """Why ``value`` is not a valid result of this point (None when it is)."""
        if self.returns is bool:
            ok = isinstance(value, bool)
        elif self.returns is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif self.returns is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        else:
            ok = isinstance(value, self.returns)
        return (
            None
            if ok
            else f"returned {value!r} ({type(value).__name__}); {self.name} must return a {self.returns.__name__}"
        )

    def __call__(self, knobs: Any, *args: Any) -> Any:
        entry = _entry(knobs, self.name)
        if entry is None:
            return self.default(*args)
        value = call_entry(entry, "override", self.name, [_plain(a) for a in args])
        problem = self.check_value(value)
        if problem:
            raise PluginError(problem, entry.get("file"))
        return value


POINTS: dict[str, OverridePoint] = {}


def override_point(
    name: str,
    *,
    default: Callable[..., Any],
    params: Sequence[str],
    returns: type,
    doc: str,
    samples: Sequence[Sequence[Any]] = (),
    replay: Callable[[Mapping[str, Any]], Iterable[tuple[Any, ...]]] | None = None,
) -> OverridePoint:
    """Declare (register) an override point; returns the callable the gym uses."""
    if "." not in name:
        raise ValueError(f"override point names are <scope>.<name> (base.*, or the gym's name): {name!r}")
    if name in POINTS:
        raise ValueError(f"override point {name!r} is declared twice")
    point = OverridePoint(name, default, tuple(params), returns, doc.strip(), tuple(tuple(s) for s in samples), replay)
    POINTS[name] = point
    return point


def get_point(name: str) -> OverridePoint:
    try:
        return POINTS[name]
    except KeyError:
        raise KeyError(
            f"unknown override point {name!r}; known points: {', '.join(sorted(POINTS)) or 'none (no gym imported)'}"
        ) from None


def point_names() -> list[str]:
    return sorted(POINTS)


def _entry(knobs: Any, name: str) -> Mapping[str, Any] | None:
    plugins = getattr(knobs, "plugins", None) if knobs is not None else None
    return plugins.get(name) if plugins else None


def _plain(value: Any) -> Any:
    """Tuples and sets as lists (what the plug-in worker receives is JSON data)."""
    if isinstance(value, (tuple, set, frozenset)):
        return [_plain(v) for v in (sorted(value) if isinstance(value, (set, frozenset)) else value)]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value
