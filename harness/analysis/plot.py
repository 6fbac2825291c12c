"""Learning curves with knob events marked (``eau plot``): a PNG, matplotlib's Agg backend.

One panel per metric (reward, success). In each panel: the run's overall curve (a wide translucent
band), one line per gym (solid, from ``gym/<gym>/<metric>``) and one per user arm (dashed,
``arm/<arm>/<metric>``) of ``metrics.jsonl``. Every *accepted* knob event that reached the run
(``step_effective`` set) is a vertical line at that step, labelled ``knob: old→new`` in a strip above
the panels.
Several runs overlay on the same panels: then colour tells the run and the marker the gym or arm.
Reads only training-side files (``metrics.jsonl``, ``knob_events.jsonl``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from harness.io import jsonl

PANELS = {"reward": ("reward_mean", "reward (episode mean)"), "success": ("success_rate", "success rate")}
_MARKERS = "os^Dv<>Pp*hX"
_LABEL_CHARS = 46  # longest knob label drawn at one step (the full list goes to the JSON output)


@dataclass
class Series:
    """One curve: ``kind`` is ``all``, ``gym`` or ``arm``; ``name`` the gym or arm (``all`` for overall)."""

    run: str
    kind: str
    name: str
    steps: list[int]
    values: list[float]

    @property
    def label(self) -> str:
        return "overall" if self.kind == "all" else f"{self.kind} {self.name}"


def _number(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(float(x)):
        return None
    return float(x)


def smooth(values: Sequence[float], window: int) -> list[float]:
    """Trailing mean over ``window`` points (1 = unchanged)."""
    if window <= 1:
        return list(values)
    out = []
    for i in range(len(values)):
        chunk = values[max(0, i - window + 1) : i + 1]
        out.append(sum(chunk) / len(chunk))
    return out


def run_series(run: str, rows: Sequence[Mapping[str, Any]], metric: str) -> list[Series]:
    """Overall, per-gym and per-arm curves of ``metric`` (e.g. ``reward_mean``) from metric lines.
    A step where a gym or arm had no episode has no point (the curve skips it)."""
    keys: dict[tuple[str, str], str] = {("all", "all"): metric}
    for r in rows:
        for k in r:
            parts = k.split("/")
            if len(parts) == 3 and parts[0] in ("gym", "arm") and parts[2] == metric:
                keys[(parts[0], parts[1])] = k
    order = sorted(keys, key=lambda t: ({"all": 0, "gym": 1, "arm": 2}[t[0]], t[1]))
    out = []
    for kind, name in order:
        pts = [(int(r["step"]), _number(r.get(keys[(kind, name)]))) for r in rows if "step" in r]
        pts = [(s, v) for s, v in pts if v is not None]
        if pts:
            out.append(Series(run, kind, name, [s for s, _ in pts], [v for _, v in pts]))
    return out


def _short(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, (list, tuple)):
        text = "[" + ",".join(_short(x) for x in v) + "]"
        return text if len(text) <= 18 else text[:15] + "…]"
    if isinstance(v, Mapping):
        return "{…}"
    return str(v)


def event_label(e: Mapping[str, Any]) -> str:
    """``max_steps[travel]: 6→7``; rule files: ``rules.users.travel edited``; reverts start with ``revert``."""
    knob = str(e.get("knob", "?"))
    if knob.startswith("rules.") or knob.startswith("schema."):
        text = f"{knob} edited"
    else:
        name = knob.split(".", 1)[1] if "." in knob else knob
        gym = f"[{e['gym']}]" if e.get("gym") else ""
        text = f"{name}{gym}: {_short(e.get('old'))}→{_short(e.get('new'))}"
    return ("revert " if e.get("source") == "revert" else "") + text


def knob_marks(run_dir: Path) -> list[dict[str, Any]]:
    """Accepted knob events that reached the run: ``[{"step", "label", "knob", "author"}]`` by step."""
    marks = []
    for e in jsonl.read(Path(run_dir) / "knob_events.jsonl"):
        if e.get("status") != "accepted" or not isinstance(e.get("step_effective"), int):
            continue
        marks.append(
            {"step": e["step_effective"], "label": event_label(e), "knob": e.get("knob"), "author": e.get("author")}
        )
    return sorted(marks, key=lambda m: m["step"])


def layout_labels(
    items: Sequence[tuple[float, str]], char_width: float, max_rows: int, x_max: float = math.inf
) -> list[tuple[float, str, int]]:
    """Rows for horizontal labels of events at x positions (data units) so that no two overlap.

    A label starts at its event, or ends there when it would run past ``x_max``; it takes the first
    row whose last label ends before it starts. Labels beyond ``max_rows`` rows are folded into one
    ``+N more`` note. Returns ``(text start, text, row)``.

    >>> layout_labels([(0, "aaaa"), (1, "bb"), (10, "c")], char_width=1.0, max_rows=3)
    [(0, 'aaaa', 0), (1, 'bb', 1), (10, 'c', 0)]
    >>> layout_labels([(9, "abc")], char_width=1.0, max_rows=1, x_max=10)
    [(5.0, 'abc', 0)]
    """
    ends: list[float] = []
    placed: list[tuple[float, str, int]] = []
    dropped = 0
    for x, text in sorted(items, key=lambda t: t[0]):
        width = (len(text) + 1) * char_width
        start = x if x + width <= x_max else x - width
        row = next((i for i, e in enumerate(ends) if e <= start), None)
        if row is None and len(ends) < max_rows:
            ends.append(-math.inf)
            row = len(ends) - 1
        if row is None:
            dropped += 1
            continue
        ends[row] = start + width
        placed.append((start, text, row))
    if dropped:
        placed.append((max(ends), f"+{dropped} more (see --json)", max_rows - 1))
    return placed


def plot_runs(
    run_dirs: Sequence[Path],
    out: Path,
    panels: Sequence[str] = ("reward", "success"),
    smooth_window: int = 1,
    title: str | None = None,
) -> dict[str, Any]:
    """Draw the runs' curves and knob events into ``out`` (PNG); returns what was drawn (JSON-ready).

    Knob labels sit in a strip above the panels, one row per overlap, so they never cover a curve.
    Raises ValueError for an unknown panel or a run without metrics."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    unknown = [p for p in panels if p not in PANELS]
    if unknown or not panels:
        raise ValueError(f"unknown panel(s) {', '.join(unknown) or '(none)'}; allowed: {', '.join(PANELS)}")
    if smooth_window < 1:
        raise ValueError(f"smooth window must be >= 1, got {smooth_window}")
    data: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}
    for r in (Path(x) for x in run_dirs):
        rows = jsonl.read(r / "metrics.jsonl")
        if not rows:
            raise ValueError(f"run {r.name} has no metrics yet ({r / 'metrics.jsonl'})")
        data[r.name] = (rows, knob_marks(r))
    multi = len(data) > 1
    run_colors = {name: f"C{i % 10}" for i, name in enumerate(data)}
    steps = [int(r["step"]) for rows, _ in data.values() for r in rows if "step" in r]
    steps += [m["step"] for _, marks in data.values() for m in marks]
    x_lo, x_hi = -0.5, max(steps, default=0) + 0.5

    # knob labels: rows in the strip, horizontal text starting at its line
    fig_w, axes_frac = 12.0, 0.74  # the panels take ~74% of the width (the legend the rest)
    char_w = 7.5 * 0.55 / (fig_w * axes_frac * 72) * (x_hi - x_lo)  # one 7.5pt character in steps
    items = [
        (float(m["step"]), (f"{run}: " if multi else "") + m["label"], run)
        for run, (_, marks) in data.items()
        for m in marks
    ]
    placed = layout_labels([(x, t) for x, t, _ in items], char_w, max_rows=8, x_max=x_hi)
    owner = {t: run for _, t, run in items}
    n_rows = 1 + max((row for _, _, row in placed), default=-1)

    strip_h = 0.22 * n_rows + 0.1 if n_rows else 0.0
    heights = ([strip_h] if n_rows else []) + [3.4] * len(panels)
    fig, axs = plt.subplots(
        len(heights),
        1,
        figsize=(fig_w, sum(heights) + 0.9),
        sharex=True,
        squeeze=False,
        gridspec_kw={"height_ratios": heights, "hspace": 0.08},
    )
    axs = [a[0] for a in axs]
    strip, axes = (axs[0], axs[1:]) if n_rows else (None, axs)
    drawn: dict[str, list[str]] = {p: [] for p in panels}
    for ax, panel in zip(axes, panels):
        metric, ylabel = PANELS[panel]
        all_series = {run: run_series(run, rows, metric) for run, (rows, _) in data.items()}
        # one marker per gym/arm across runs, so the same gym looks the same in every run
        names = sorted(
            {(s.kind, s.name) for ss in all_series.values() for s in ss if s.kind != "all"},
            key=lambda t: (t[0] != "gym", t[1]),
        )
        style_index = {f"{k} {n}": i for i, (k, n) in enumerate(names)}
        for run, series in all_series.items():
            for i, s in enumerate(series):
                if multi:
                    color = run_colors[run]
                    marker = None if s.kind == "all" else _MARKERS[style_index[s.label] % len(_MARKERS)]
                else:
                    color = "black" if s.kind == "all" else f"C{i % 10}"
                    marker = None if s.kind == "all" else "o"
                label = f"{run}: {s.label}" if multi else s.label
                # the overall curve is a wide translucent band under the splits: a split equal to it
                # (one gym, one arm) stays visible on top instead of being hidden
                ax.plot(
                    s.steps,
                    smooth(s.values, smooth_window),
                    color=color,
                    lw=4.0 if s.kind == "all" else 1.3,
                    ls="--" if s.kind == "arm" else "-",
                    marker=marker,
                    markersize=4,
                    alpha=0.45 if s.kind == "all" else 0.9,
                    label=label,
                    zorder=2 if s.kind == "all" else 3,
                )
                drawn[panel].append(label)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        if metric == "success_rate":
            ax.set_ylim(-0.03, 1.03)
    events = []
    for run, (_rows, marks) in data.items():
        color = run_colors[run] if multi else "dimgray"
        for step in sorted({m["step"] for m in marks}):
            for ax in axs:
                ax.axvline(step, color=color, ls=":", lw=1.4, zorder=1)
        events += [{"run": run, **m} for m in marks]
    if strip is not None:
        for x, text, row in placed:
            color = run_colors[owner[text]] if multi and text in owner else "black"
            strip.text(
                x + 0.5 * char_w,
                n_rows - row - 0.5,
                text,
                fontsize=7.5,
                color=color,
                va="center",
                ha="left",
                clip_on=True,
            )
        strip.set_ylim(0, n_rows)
        strip.set_yticks([])
        strip.set_ylabel("knobs", rotation=0, ha="right", va="center", fontsize=8)
        for side in ("top", "right", "left"):
            strip.spines[side].set_visible(False)
        strip.tick_params(axis="x", length=0)
    axs[-1].set_xlabel("step")
    axs[-1].set_xlim(x_lo, x_hi)
    axs[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0].legend(
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize=8,
        frameon=False,
        title="solid: overall, gym\ndashed: user arm\n" + ("colour: run\n" if multi else "") + "dotted: knob change",
        title_fontsize=8,
    )
    head = title or (
        (" vs ".join(data) if multi else next(iter(data)))
        + " — learning curves"
        + (f" (smoothed over {smooth_window} steps)" if smooth_window > 1 else "")
    )
    fig.suptitle(head, fontsize=11)
    fig.subplots_adjust(
        left=0.07, right=0.07 + axes_frac, top=1 - 0.5 / (sum(heights) + 0.9), bottom=0.45 / (sum(heights) + 0.9) + 0.03
    )
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return {"path": str(out), "runs": list(data), "panels": drawn, "events": events, "smooth": smooth_window}
