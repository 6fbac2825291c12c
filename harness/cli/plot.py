"""``eau plot``: learning curves (reward and success per gym and per user arm) with every accepted
knob event marked; several ``--run`` values overlay runs on one figure."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from harness.analysis.plot import plot_runs
from harness.cli.common import (
    EXIT_ERROR,
    EXIT_NOT_FOUND,
    JsonOpt,
    KnobsDirOpt,
    RunsDirOpt,
    check_text_option,
    emit_json,
    fail,
    runs_dir,
)
from harness.runs.reader import find_run


def register(app: typer.Typer) -> None:
    app.command("plot")(plot_cmd)


def plot_cmd(
    run: list[str] = typer.Option([], "--run", help="Run id or folder; repeat to overlay runs (default: newest run)."),
    out: Optional[Path] = typer.Option(None, "-o", "--out", help="PNG file (default ./plot_<run>[_vs_<run>].png)."),
    panel: list[str] = typer.Option(["reward", "success"], "--panel", help="Panels, in order: reward, success."),
    smooth: int = typer.Option(1, "--smooth", help="Trailing mean over N steps (1: raw)."),
    title: Optional[str] = typer.Option(None, "--title", help="Figure title."),
    as_json: bool = JsonOpt,
    knobs_dir_: Optional[Path] = KnobsDirOpt,
    runs_dir_: Optional[Path] = RunsDirOpt,
) -> None:
    """Plot reward and success over steps per gym and per arm, knob events as labelled vertical lines."""
    check_text_option(title, "--title", as_json)
    rdir = runs_dir(runs_dir_)
    paths = []
    for r in run or [None]:
        p = find_run(rdir, r)
        if p is None or not (p / "metrics.jsonl").exists():
            what = f"run {r!r}" if r else "any run"
            fail(f"no {what} with metrics.jsonl in {rdir}", EXIT_NOT_FOUND, as_json)
        paths.append(p)
    target = out or Path.cwd() / ("plot_" + "_vs_".join(p.name for p in paths) + ".png")
    if target.suffix.lower() != ".png":
        fail(f"-o {target}: the plot is a PNG; name the file *.png", EXIT_ERROR, as_json)

    try:
        res = plot_runs(paths, target, panels=panel, smooth_window=smooth, title=title)
    except ValueError as exc:
        fail(str(exc), EXIT_ERROR, as_json)
    if as_json:
        emit_json({"ok": True, **res})
    else:
        typer.echo(f"wrote {res['path']} ({len(res['runs'])} run(s), {len(res['events'])} knob event(s) marked)")
