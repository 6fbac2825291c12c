"""``eau runs list`` and ``eau runs compare A B``: the runs of a runs folder, their lineage
(``eau train --from``), and the config, knob and metric differences between two runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from harness.cli.common import EXIT_ERROR, EXIT_NOT_FOUND, JsonOpt, KnobsDirOpt, RunsDirOpt, emit_json, fail, runs_dir
from harness.runs.compare import compare_runs, summary
from harness.runs.reader import list_runs

runs_app = typer.Typer(help="List runs with their lineage; compare two runs.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(runs_app, name="runs")


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


@runs_app.command("list")
def list_cmd(
    as_json: bool = JsonOpt, knobs_dir_: Optional[Path] = KnobsDirOpt, runs_dir_: Optional[Path] = RunsDirOpt
) -> None:
    """Every run (oldest first): state, progress, preset, gyms, parent and generation in its lineage,
    last reward and success."""
    rows = [summary(p) for p in list_runs(runs_dir(runs_dir_))]
    if as_json:
        emit_json({"ok": True, "runs_dir": str(runs_dir(runs_dir_)), "runs": rows})
        return
    if not rows:
        typer.echo(f"no runs in {runs_dir(runs_dir_)}")
        return
    head = (
        f"{'run':<24} {'state':<11} {'step':>9} {'preset':<10} {'gyms':<26} {'parent':<20} {'gen':>5} "
        f"{'reward':>8} {'success':>8}"
    )
    typer.echo(head)
    for r in rows:
        step = f"{_fmt(r['step'])}/{_fmt(r['total_steps'])}"
        gen = f"{r['generation']}/{_fmt(r['max_lineage'])}"
        gyms = ",".join(r["gyms"] or [])
        typer.echo(
            f"{r['run_id']:<24} {r['state']:<11} {step:>9} {_fmt(r['preset']):<10} {gyms[:26]:<26} "
            f"{_fmt(r['parent'])[:20]:<20} {gen:>5} {_fmt(r['reward_mean']):>8} {_fmt(r['success_rate']):>8}"
        )
    for r in (r for r in rows if r["parent"]):
        init = Path(r["init_checkpoint"]) if r["init_checkpoint"] else None
        from_parent = init is not None and init.parent.name == "checkpoints" and init.parent.parent.name == r["parent"]
        typer.echo(
            f"  {r['run_id']} <- {' <- '.join(reversed(r['lineage']))}: {r['parent_reason']}"
            + (" (from the parent's checkpoint)" if from_parent else "")
        )


@runs_app.command("compare")
def compare_cmd(
    run_a: str = typer.Argument(..., help="First run (A)."),
    run_b: str = typer.Argument(..., help="Second run (B); differences read B - A."),
    window: int = typer.Option(5, "--window", help="Metric means over each run's last N steps."),
    all_metrics: bool = typer.Option(False, "--all", help="Show every metric, not only those beyond noise."),
    as_json: bool = JsonOpt,
    knobs_dir_: Optional[Path] = KnobsDirOpt,
    runs_dir_: Optional[Path] = RunsDirOpt,
) -> None:
    """Config, knob (start and end) and metric differences between runs A and B."""
    rdir = runs_dir(runs_dir_)
    paths = []
    for r in (run_a, run_b):
        p = Path(r) if (Path(r) / "config.yaml").is_file() else rdir / r
        if not (p / "config.yaml").is_file():
            fail(f"no run {r!r} with a config.yaml in {rdir}", EXIT_NOT_FOUND, as_json)
        paths.append(p)
    try:
        res = compare_runs(paths[0], paths[1], window=window)
    except ValueError as exc:
        fail(str(exc), EXIT_ERROR, as_json)
    if as_json:
        emit_json({"ok": True, **res})
        return
    _print_compare(res, all_metrics)


def _print_compare(res: dict[str, Any], all_metrics: bool) -> None:
    a, b = res["a"], res["b"]
    typer.echo(f"A = {a}   B = {b}" + (f"   ({res['relation']})" if res["relation"] else ""))
    for side in ("a", "b"):
        s = res["summary"][side]
        typer.echo(
            f"  {side.upper()}: {s['state']}, step {_fmt(s['step'])}/{_fmt(s['total_steps'])}, preset "
            f"{_fmt(s['preset'])}, gyms {','.join(s['gyms'] or [])}"
            + (f", parent {s['parent']} ({s['parent_reason']})" if s["parent"] else "")
        )
    typer.echo(f"\nconfig: {len(res['config'])} difference(s)")
    for r in res["config"]:
        typer.echo(f"  {r['key']:<40} {_fmt(r['a'])!s:>20} -> {_fmt(r['b'])!s}")
    kn = res["knobs"]
    ev = kn["accepted_events"]
    typer.echo(
        f"\nknobs in force at the end: {len(kn['end'])} difference(s) (accepted knob events: A {ev['a']}, B {ev['b']})"
    )
    for r in kn["end"]:
        typer.echo(f"  {r['key']:<40} {_fmt(r['a'])!s:>20} -> {_fmt(r['b'])!s}")
    if kn["start"]:
        typer.echo(f"knobs at the start: {len(kn['start'])} difference(s)")
        for r in kn["start"]:
            typer.echo(f"  {r['key']:<40} {_fmt(r['a'])!s:>20} -> {_fmt(r['b'])!s}")
    for label, rows in (("rule files at the end", kn["rules_end"]), ("rule files at the start", kn["rules_start"])):
        if rows:
            typer.echo(f"{label} that differ: " + ", ".join(r["file"] for r in rows))
    shown = [m for m in res["metrics"] if all_metrics or m["beyond_noise"] is not False]
    typer.echo(
        f"\nmetrics, mean of the last {res['window']} steps "
        f"({'all' if all_metrics else 'hiding differences within the larger window std; --all shows them'}):"
    )
    typer.echo(f"  {'metric':<40} {'A':>9} {'B':>9} {'B-A':>9} {'std A':>8} {'std B':>8}")
    for m in shown:
        if m["delta"] is None:
            note = "  only in A" if m["b"] is None else "  only in B"
        else:
            note = {True: "", False: "  within noise", None: "  no noise estimate (< 2 steps)"}[m["beyond_noise"]]
        typer.echo(
            f"  {m['metric']:<40} {_fmt(m['a']):>9} {_fmt(m['b']):>9} {_fmt(m['delta']):>9} "
            f"{_fmt(m['a_std']):>8} {_fmt(m['b_std']):>8}{note}"
        )
    if not shown:
        typer.echo("  (none)")
