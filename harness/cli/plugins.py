"""``eau knobs plugin``: list | show | points | check | set | remove (plug-ins, harness.plugins).

A plug-in is ``knobs/plugins/<name>.py``: Python whose ``OVERRIDES`` dict replaces override points
of the gyms (``eau knobs plugin points`` lists them). ``set`` runs the gate (import in a separate
process under a time limit, the points' checks, a replay of the live run's recent episodes) and
writes the file only when it passes; a live run gates it again and puts it in force at its next step
boundary, logging the event with ``--author``/``--reason``. ``eau knobs revert <id>`` puts the
previous code back; ``eau knobs history plugins.`` lists the swaps.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional

import typer

from harness.cli.common import (
    EXIT_NOT_FOUND,
    EXIT_REFUSED,
    EXIT_USAGE,
    JsonOpt,
    KnobsDirOpt,
    RunsDirOpt,
    emit_json,
    err,
    fail,
)
from harness.cli.knob_target import ProjectOpt, RunOpt, Target, find_target, log_to_run, target
from harness.envs.registry import gym_class
from harness.gyms import BUILTIN_GYMS
from harness.knobs.events import AUTHORS
from harness.plugins.folder import NAME_RE, VERSIONS, PluginFolder, check_name, plugin_dir
from harness.plugins.gate import code_sha
from harness.plugins.points import POINTS
from harness.runs import reader

app = typer.Typer(
    help="Plug-ins: Python in knobs/plugins/ that replaces a gym's override points live (a repair without a restart).",
    no_args_is_help=True,
)
REPLAY_STEPS = 3


def declare_points() -> None:
    """Import every built-in gym, so that all override points are declared."""
    for name in BUILTIN_GYMS:
        gym_class(name)


def _folder(t: Target) -> PluginFolder:
    return PluginFolder(t.kdir, lambda: t.log)


def _stem(name: str, as_json: bool) -> str:
    stem = name[:-3] if name.endswith(".py") else name
    stem = Path(stem).name
    try:
        check_name(stem)
    except ValueError as exc:
        fail(str(exc), 2, as_json)
    return stem


def _read(file: Path, as_json: bool) -> str:
    try:
        return file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read {file}: {exc}", EXIT_NOT_FOUND, as_json)


def _print_gate(res: Any) -> None:
    if res.ok:
        typer.echo(f"gate passed (sha256 {res.sha[:12]}): {res.summary()}")
        for point, r in res.replay.items():
            for ex in r.get("examples", []):
                typer.echo(f"  {point}{tuple(ex['input'])!r}: default {ex['default']!r} -> plug-in {ex['plugin']!r}")
    else:
        where = f" (line {res.line})" if res.line else ""
        err(f"refused [{res.rule}]{where}: {res.message}")


@app.command("points")
def points_cmd(as_json: bool = JsonOpt) -> None:
    """The override points a plug-in may implement: name, signature, default, documentation."""
    declare_points()
    rows = [
        {
            "name": p.name,
            "signature": p.signature(),
            "params": list(p.params),
            "returns": p.returns.__name__,
            "doc": p.doc,
        }
        for p in sorted(POINTS.values(), key=lambda p: p.name)
    ]
    if as_json:
        emit_json({"points": rows})
        return
    for r in rows:
        typer.echo(f"{r['name']}: {r['signature']}\n    {r['doc']}")


@app.command("list")
def list_cmd(
    as_json: bool = JsonOpt,
    knobs_dir_: Optional[Path] = KnobsDirOpt,
    runs_dir_: Optional[Path] = RunsDirOpt,
    run: Optional[str] = RunOpt,
    project: bool = ProjectOpt,
) -> None:
    """Plug-in files in the knobs folder, and those the run has in force (sha256, points)."""
    with target(knobs_dir_, runs_dir_, run, project, as_json, need_valid=False) as ctx:
        folder = _folder(ctx)
    files = {}
    for stem, path in folder.files().items():
        try:
            files[stem] = {"file": str(path), "sha256": code_sha(folder.read_source(path))}
        except Exception as exc:  # noqa: BLE001 -- an unreadable file is listed as such
            files[stem] = {"file": str(path), "error": str(exc)}
    doc = reader.read_json(ctx.run_dir / "knobs_in_force.json") if ctx.run_dir is not None else None
    in_force = (doc or {}).get("plugins") or {}
    if as_json:
        emit_json({"files": files, "in_force": in_force, **ctx.run_info()})
        return
    if not files and not in_force:
        typer.echo(f"no plug-ins in {folder.dir}")
    for stem, f in files.items():
        live = in_force.get(stem)
        state = (
            "in force since step " + str(live.get("since_step"))
            if live and live.get("sha256") == f.get("sha256")
            else ("file differs from the version in force" if live else "not in force")
        )
        typer.echo(
            f"{stem}: sha256 {str(f.get('sha256', '?'))[:12]} ({state})" + (f" {live['points']}" if live else "")
        )
    for stem, live in in_force.items():
        if stem not in files:
            typer.echo(
                f"{stem}: in force (sha256 {live['sha256'][:12]}) but its file is gone: defaults at the next step"
            )


@app.command("show")
def show_cmd(
    name: str = typer.Argument(..., help="Plug-in name, or a sha256 (prefix) of a version."),
    knobs_dir_: Optional[Path] = KnobsDirOpt,
    runs_dir_: Optional[Path] = RunsDirOpt,
    run: Optional[str] = RunOpt,
    project: bool = ProjectOpt,
) -> None:
    """Print a plug-in's code (the file, or a recorded version by its sha256)."""
    if not NAME_RE.match(name) and not re.fullmatch(r"[0-9a-f]{6,64}", name):
        # a name is a plain module name; a version is a hex sha256 prefix: never a path or a glob
        fail(
            f"plug-in {name!r}: a name is lowercase letters, digits and _ (a module name), a version a "
            "sha256 prefix of 6-64 hex digits",
            EXIT_USAGE,
        )
    root = plugin_dir(find_target(knobs_dir_, runs_dir_, run, project, False)[0])
    path = root / f"{name}.py"
    if not path.is_file():
        hits = sorted((root / VERSIONS).glob(f"{name}*.py")) if len(name) >= 6 else []
        if len(hits) != 1:
            fail(
                f"no plug-in {name!r} in {root} and no single recorded version with that sha256 prefix", EXIT_NOT_FOUND
            )
        path = hits[0]
    typer.echo(path.read_text(encoding="utf-8"), nl=False)


@app.command("check")
def check_cmd(
    name: str = typer.Argument(..., help="Plug-in name (the file it would become: knobs/plugins/NAME.py)."),
    file: Path = typer.Argument(..., help="The candidate's code."),
    as_json: bool = JsonOpt,
    knobs_dir_: Optional[Path] = KnobsDirOpt,
    runs_dir_: Optional[Path] = RunsDirOpt,
    run: Optional[str] = RunOpt,
    project: bool = ProjectOpt,
) -> None:
    """Run the gate on a candidate without writing anything: import under a time limit, the points'
    checks, a replay of the run's recent episodes (decisions changed). Refused: exit 3."""
    declare_points()
    stem = _stem(name, as_json)
    with target(knobs_dir_, runs_dir_, run, project, as_json, need_valid=False) as ctx:
        res = _folder(ctx).check(stem, _read(file, as_json), reader.recent_episodes(ctx.run_dir, REPLAY_STEPS))
    if as_json:
        emit_json({**res.to_dict(), **ctx.run_info()})
    else:
        _print_gate(res)
    if not res.ok:
        raise typer.Exit(EXIT_REFUSED)


@app.command("set")
def set_cmd(
    name: str = typer.Argument(..., help="Plug-in name: the file becomes knobs/plugins/NAME.py."),
    file: Path = typer.Argument(..., help="The new code."),
    reason: str = typer.Option(..., "--reason", help="Why (kept in the event log)."),
    author: str = typer.Option("human", "--author", help="human | agent | system."),
    as_json: bool = JsonOpt,
    knobs_dir_: Optional[Path] = KnobsDirOpt,
    runs_dir_: Optional[Path] = RunsDirOpt,
    run: Optional[str] = RunOpt,
    project: bool = ProjectOpt,
) -> None:
    """Gate and write a plug-in; a live run gates it again and puts it in force at its next step
    boundary. Refused: exit 3, the file untouched, the refusal logged."""
    if author not in AUTHORS:
        fail(f"author must be one of {', '.join(AUTHORS)}, got {author!r}", EXIT_USAGE, as_json)
    declare_points()
    stem = _stem(name, as_json)
    with target(knobs_dir_, runs_dir_, run, project, as_json, write=True, need_valid=False) as ctx:
        try:
            ok, ev, res = _folder(ctx).write(
                stem,
                _read(file, as_json),
                author=author,
                reason=reason,
                step_written=ctx.step,
                run_live=ctx.live,
                records=reader.recent_episodes(ctx.run_dir, REPLAY_STEPS),
            )
        except ValueError as exc:
            fail(str(exc), EXIT_REFUSED, as_json)
        _report(ctx, ok, ev, res)


@app.command("remove")
def remove_cmd(
    name: str = typer.Argument(..., help="Plug-in name."),
    reason: str = typer.Option(..., "--reason", help="Why (kept in the event log)."),
    author: str = typer.Option("human", "--author", help="human | agent | system."),
    as_json: bool = JsonOpt,
    knobs_dir_: Optional[Path] = KnobsDirOpt,
    runs_dir_: Optional[Path] = RunsDirOpt,
    run: Optional[str] = RunOpt,
    project: bool = ProjectOpt,
) -> None:
    """Delete a plug-in: its override points go back to their defaults (at the live run's next step
    boundary). Its code stays recorded, so `eau knobs revert <id>` brings it back."""
    stem = _stem(name, as_json)
    with target(knobs_dir_, runs_dir_, run, project, as_json, write=True, need_valid=False) as ctx:
        if not (_folder(ctx).dir / f"{stem}.py").is_file():
            fail(f"no plug-in {stem!r} in {_folder(ctx).dir} (eau knobs plugin list)", EXIT_NOT_FOUND, as_json)
        ev = _folder(ctx).remove(stem, author=author, reason=reason, step_written=ctx.step, run_live=ctx.live)
        _report(ctx, ev["status"] == "accepted", ev, None)


def _report(ctx: Target, ok: bool, ev: dict[str, Any], res: Any) -> None:
    pending = ok and ctx.live and ev.get("message", "").startswith(("written;", "removed;"))
    if ctx.as_json:
        emit_json({"ok": ok, "pending": pending, "event": ev, "gate": res.to_dict() if res else None, **ctx.run_info()})
    if not ok:
        where = f" (line {ev['line']})" if ev.get("line") else ""
        err(f"refused ({ev.get('rule')}){where}: {ev.get('message')}")
        log_to_run(
            ctx,
            f"plug-in write REFUSED {ev.get('knob')} ({ev.get('rule')}, {ev.get('author')}: {ev.get('reason')}): "
            f"{ev.get('message')}",
        )
        raise typer.Exit(EXIT_REFUSED)
    if not ctx.as_json:
        old, new = (ev.get("old") or "none")[:12], (ev.get("new") or "none")[:12]
        typer.echo(f"{ev['knob']}: {old} -> {new} [{ev.get('id')}] {ev.get('message')}")


def revert_plugin(ctx: Target, event: dict[str, Any], author: str, reason: Optional[str]) -> None:
    """``eau knobs revert`` of a ``plugins.<name>`` event: the code before it, gated like a write."""
    declare_points()
    try:
        ok, ev = _folder(ctx).revert(
            event,
            author=author,
            reason=reason,
            step_written=ctx.step,
            run_live=ctx.live,
            records=reader.recent_episodes(ctx.run_dir, REPLAY_STEPS),
        )
    except KeyError as exc:
        fail(str(exc).strip("'\""), EXIT_NOT_FOUND, ctx.as_json)
    _report(ctx, ok, ev, None)


__all__ = ["app", "revert_plugin"]
