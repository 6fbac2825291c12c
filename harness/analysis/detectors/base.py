"""The detector contract: inputs, findings, thresholds and the registry.

A detector is a small pure function ``fn(data: DetectorInput, th: Mapping[str, float]) -> Finding``
registered by name with :func:`detector`. It sees the metric lines and trajectory records of a
window of recent steps (plus the metric lines before it, for baselines) and never reads files.
Thresholds are module-level constants in the detector's module (each with a comment saying why that
value), declared at registration so that ``eau diagnose --threshold NAME.KEY=VALUE`` can override
them and ``eau diagnose --list`` can document them.

A finding whose inputs are absent (no LLM arm for arm disparity, no ``entropy`` metric, ...) is
``flagged: false`` with ``skipped`` saying why, never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

COMPONENTS = ("policy", "user", "environment", "reward", "config")
SEVERITIES = ("none", "low", "medium", "high")
MAX_EVIDENCE_EPISODES = 5  # example episode ids in a finding: enough to open with `eau sample`, short to read
MAX_MATCHES = 500  # episode ids kept for `eau sample --flag` (bounded memory on long windows)


@dataclass
class DetectorInput:
    """What a detector sees.

    metrics: metric lines of the window's steps, in step order.
    history: metric lines of the steps before the window (baselines, trends).
    episodes: trajectory records of the window's steps.
    steps: the window's steps.
    gyms: the run's gyms.
    before_episodes: trajectory records of the same number of steps just before the window (the
        baseline of behaviour comparisons; empty when the window starts the run).
    """

    metrics: list[dict[str, Any]]
    history: list[dict[str, Any]]
    episodes: list[dict[str, Any]]
    steps: list[int]
    gyms: list[str] = field(default_factory=list)
    before_episodes: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Finding:
    """One detector's verdict over a window (``to_dict`` is the JSON form ``eau diagnose`` prints).

    matches: every episode id the detector attributes to its problem (``eau sample --flag`` uses
        them); only their count is printed, ``evidence_episodes`` holds the examples.
    """

    name: str
    flagged: bool
    component: str
    summary: str
    severity: str = "none"
    metrics: dict[str, Any] = field(default_factory=dict)
    evidence_episodes: list[str] = field(default_factory=list)
    suggestion: str = ""
    skipped: str | None = None
    thresholds: dict[str, float] = field(default_factory=dict)
    matches: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.component not in COMPONENTS:
            raise ValueError(f"finding {self.name}: component {self.component!r} not in {COMPONENTS}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"finding {self.name}: severity {self.severity!r} not in {SEVERITIES}")
        self.matches = list(dict.fromkeys(self.matches))[:MAX_MATCHES]
        if not self.evidence_episodes:
            self.evidence_episodes = self.matches[:MAX_EVIDENCE_EPISODES]
        self.evidence_episodes = self.evidence_episodes[:MAX_EVIDENCE_EPISODES]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "flagged": self.flagged,
            "severity": self.severity if self.flagged else "none",
            "component": self.component,
            "summary": self.summary,
            "evidence": {
                "metrics": self.metrics,
                "episodes": self.evidence_episodes,
                "matching_episodes": len(self.matches),
            },
            "suggestion": self.suggestion,
            "thresholds": self.thresholds,
        }
        if self.skipped:
            out["skipped"] = self.skipped
        return out


def skipped(name: str, component: str, reason: str, th: Mapping[str, float]) -> Finding:
    """The finding of a detector whose inputs are absent."""
    return Finding(name, False, component, f"skipped: {reason}", skipped=reason, thresholds=dict(th))


@dataclass(frozen=True)
class Threshold:
    """One tunable threshold: default value and what it means."""

    key: str
    default: float
    doc: str


DetectorFn = Callable[[DetectorInput, Mapping[str, float]], Finding]


@dataclass(frozen=True)
class Detector:
    """A registered detector."""

    name: str
    component: str
    doc: str
    thresholds: dict[str, Threshold]
    fn: DetectorFn

    def run(self, data: DetectorInput, overrides: Mapping[str, float] | None = None) -> Finding:
        th = {k: t.default for k, t in self.thresholds.items()}
        th.update(overrides or {})
        f = self.fn(data, th)
        f.thresholds = dict(th)
        return f


DETECTORS: dict[str, Detector] = {}


def detector(
    name: str, component: str, thresholds: Mapping[str, tuple[float, str]]
) -> Callable[[DetectorFn], DetectorFn]:
    """Register ``fn`` as detector ``name`` (default ``component``) with ``{key: (default, doc)}`` thresholds;
    the function's docstring is the detector's documentation."""

    def deco(fn: DetectorFn) -> DetectorFn:
        if name in DETECTORS:
            raise ValueError(f"detector {name!r} is registered twice")
        if component not in COMPONENTS:
            raise ValueError(f"detector {name!r}: component {component!r} not in {COMPONENTS}")
        DETECTORS[name] = Detector(
            name,
            component,
            (fn.__doc__ or "").strip(),
            {k: Threshold(k, float(v), d) for k, (v, d) in thresholds.items()},
            fn,
        )
        return fn

    return deco


def severity_of(value: float, threshold: float, *, high_factor: float = 2.0) -> str:
    """``high`` when ``value`` exceeds ``threshold`` by ``high_factor``, else ``medium`` (for flagged findings)."""
    return "high" if threshold > 0 and value >= high_factor * threshold else "medium"
