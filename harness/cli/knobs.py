"""``eau knobs``: list | get | set | validate | history | revert | watch | add | init | reset | plugin.

Knob names are ``<area>.<name>`` (``agent.entropy_coeff``). Writes go through the knob store's one
validation path; when a run is live on the same knobs folder, ``set`` writes the file and the run
applies it at its next step boundary (logging the accepted event with the step it takes effect).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any, Optional

import typer

from harness.cli.common import (
    EXIT_INVALID,
    EXIT_NOT_FOUND,
    EXIT_REFUSED,
    JsonOpt,
    KnobsDirOpt,
    RunsDirOpt,
    emit_json,
    err,
    fail,
    knobs_dir,
    runs_dir,
)

app = typer.Typer(help="List, read, change, validate and watch knobs (live training settings).", no_args_is_help=True)

RunOpt = typer.Option(None, "--run", help="Run id or folder (default: the live run training from this knobs folder).")


def register(root: typer.Typer) -> None:
    from harness.cli.plugins import app as plugin_app

    app.add_typer(plugin_app, name="plugin")
    root.add_typer(app, name="knobs")


class _Ctx:
    """Resolved folders, the store and the run a knobs command works against."""

    def __init__(
        self,
        kdir: Optional[Path],
        rdir: Optional[Path],
        run: Optional[str],
        as_json: bool,
        need_valid: bool = True,
        allow_invalid: bool = False,
        lock: bool = False,
    ):
        """need_valid: invalid files end the command (exit 4); allow_invalid: they leave ``store`` None
        (reset and upgrade repair such a folder, writing to ``log``); lock: a write command holds the
        folder's lock (harness.knobs.lease.folder_lock) until :meth:`release`, so that the run it
        finds live cannot hand over and give its values back before the write is made."""
        self.kdir = knobs_dir(kdir, as_json)
        self.rdir = runs_dir(rdir)
        self.as_json = as_json
        if not (self.kdir / "schema").is_dir():
            fail(f"{self.kdir} is not a knobs folder (no schema/ inside); pass --knobs-dir", EXIT_NOT_FOUND, as_json)
        from harness.knobs.lease import folder_lock

        self._lock = folder_lock(self.kdir) if lock else None
        if self._lock is not None:
            self._lock.__enter__()
        try:
            self._open(run, as_json, need_valid, allow_invalid)
        except BaseException:
            self.release()
            raise

    def _open(self, run: Optional[str], as_json: bool, need_valid: bool, allow_invalid: bool) -> None:
        from harness.knobs.lease import read_lease, settle_stale_lease
        from harness.knobs.store import KnobError, KnobStore
        from harness.runs import reader

        try:  # a run killed without giving its knob values back: give them back before anything is read
            settle_stale_lease(self.kdir, log=err)
        except KnobError:
            pass  # invalid files are reported below
        self.lease = read_lease(self.kdir)
        if run:
            self.run_dir = reader.find_run(self.rdir, run)
            if self.run_dir is None:
                fail(f"no run {run!r} in {self.rdir}", EXIT_NOT_FOUND, as_json)
        else:
            self.run_dir = reader.find_live_run(self.rdir, self.kdir)
        self.status = reader.status(self.run_dir) if self.run_dir else None
        self.live = reader.is_live(self.status)
        self.ending: str | None = None  # a run still running whose knob values already went back
        if self.live and not self._holds_lease():
            # its end has begun: it handed over its unapplied writes and gave its values back, so it
            # would never see a write made now; the write is the folder's (logged in its history)
            self.live, self.ending = False, self.run_dir.name
            if not run:
                self.run_dir, self.status = None, None
        events = (self.run_dir / "knob_events.jsonl") if self.run_dir else "auto"
        gyms = (self.status or {}).get("gyms") if self.live else None
        try:
            self.store = KnobStore(self.kdir, events_path=events, run_gyms=gyms)
        except KnobError as exc:
            if allow_invalid:
                from harness.knobs.events import EventLog

                self.store = None
                self.log = EventLog(self.kdir / ".history" / "knob_events.jsonl" if events == "auto" else events)
                self.metrics = []
                return
            if need_valid:
                fail(str(exc), EXIT_INVALID, as_json, problems=exc.problems)
            raise
        self.log = self.store.log
        if self.live:
            from harness.knobs.run_checks import read_run_facts

            doc = reader.read_json(self.run_dir / "knobs_in_force.json")
            if doc and isinstance(doc.get("values"), dict):
                self.store.load_in_force(doc["values"])
            self.store.run_facts = read_run_facts(self.run_dir)  # a value this run cannot use is refused now
        self.metrics = reader.recent_metrics(self.run_dir, 100) if self.run_dir else []

    def _holds_lease(self) -> bool:
        """Whether the live run found holds this folder's lease (a run holds it from before it goes live
        until it has handed over at its end)."""
        if self.lease is None or self.run_dir is None:
            return False
        run_id = (self.status or {}).get("run_id") or self.run_dir.name
        return self.lease.run_id == run_id or Path(self.lease.run_dir).resolve() == self.run_dir.resolve()

    def release(self) -> None:
        """Let go of the folder's lock (a write command, once its write is made)."""
        if self._lock is not None:
            lk, self._lock = self._lock, None
            lk.__exit__(None, None, None)

    @property
    def step(self) -> int | None:
        return (self.status or {}).get("step") if self.live else None

    def run_info(self) -> dict[str, Any]:
        info = {"run": self.run_dir.name if self.run_dir else None, "live": self.live, "step": self.step}
        if self.ending:
            info["ending_run"] = self.ending
            info["note"] = (
                f"run {self.ending} is ending: it had already handed over and given its knob values back, so "
                "this write is not for it; it is the folder's (logged in the folder history)"
                + ("" if self.run_dir is None else f", logged in the stopped run {self.run_dir.name}'s knob log")
            )
        return info


def _parse_value(text: str) -> Any:
    """A CLI value as YAML (``0.004``, ``true``, ``[-1, 2]``, ``neutral``)."""
    from harness.io import yamlio

    try:
        return yamlio.plain(yamlio.parse_text(Path("<value>"), text))
    except yamlio.FileProblem as exc:
        raise typer.BadParameter(f"cannot parse value {text!r}: {exc.message}") from None


def _unknown(ctx: _Ctx, exc: Exception) -> None:
    fail(str(exc), EXIT_NOT_FOUND, ctx.as_json, rule="unknown knob")


@app.command("list")
def list_cmd(
    as_json: bool = JsonOpt,
    knobs_dir_: Optional[Path] = KnobsDirOpt,
    runs_dir_: Optional[Path] = RunsDirOpt,
    run: Optional[str] = RunOpt,
) -> None:
    """List every knob with its value in force, allowed range, live/next-run and gyms."""
    ctx = _Ctx(knobs_dir_, runs_dir_, run, as_json)
    rows = []
    for spec in ctx.store.specs():
        rows.append({**spec.catalogue_entry(), "value": ctx.store.raw(spec.full_name)})
    if as_json:
        emit_json({"knobs": rows, **ctx.run_info(), "knobs_dir": str(ctx.kdir)})
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"knobs in {ctx.kdir}" + (f" (live run {ctx.run_dir.name}, step {ctx.step})" if ctx.live else "")
    )
    for col in ("knob", "value", "allowed", "live", "gyms"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(
            r["name"], json.dumps(r["value"]), r["allowed"], "yes" if r["hot"] else "next run", ",".join(r["gyms"])
        )
    Console(width=140).print(table)


@app.command("get")
def get_cmd(
    name: str = typer.Argument(..., help="Knob name <area>.<name>, e.g. agent.entropy_coeff."),
    gym: Optional[str] = typer.Option(None, "--gym", help="Resolve the value for this gym."),
    as_json: bool = JsonOpt,
    knobs_dir_: Optional[Path] = KnobsDirOpt,
    runs_dir_: Optional[Path] = RunsDirOpt,
    run: Optional[str] = RunOpt,
) -> None:
    """Show one knob: its value in force (for a gym with --gym), documentation and limits."""
    from harness.knobs.store import UnknownKnob

    ctx = _Ctx(knobs_dir_, runs_dir_, run, as_json)
    try:
        spec = ctx.store.spec(name)
    except UnknownKnob as exc:
        _unknown(ctx, exc)
    pending = _pending(ctx, spec, gym)
    lent = ctx.lease.knobs.get(spec.full_name) if ctx.lease is not None and ctx.live else None
    out = {
        "name": spec.full_name,
        "value": ctx.store.get(name, gym),
        "raw": ctx.store.raw(name),
        "gym": gym,
        "in_force_for": ctx.run_dir.name if ctx.live else None,
        "pending": pending,
        "lent": ({"run": ctx.lease.run_id, "before": lent["before"]} if lent else None),
        **{k: v for k, v in spec.catalogue_entry().items() if k != "name"},
        **ctx.run_info(),
    }
    if as_json:
        emit_json(out)
        return
    where = f"in force for live run {ctx.run_dir.name}" if ctx.live else "the value the next run starts from"
    typer.echo(f"{spec.full_name} = {json.dumps(out['value'])}" + (f"  (gym {gym})" if gym else "") + f"  [{where}]")
    if out["raw"] != out["value"]:
        typer.echo(f"  per gym: {json.dumps(out['raw'])}")
    if pending is not None:
        typer.echo(
            f"  PENDING: the file holds {json.dumps(pending['value'])}; the live run applies it at its next "
            f"step boundary (step {ctx.step})"
        )
    if lent:
        typer.echo(f"  lent by run {ctx.lease.run_id}'s preset; {json.dumps(lent['before'])} comes back when it ends")
    typer.echo(f"  {spec.description}")
    typer.echo(
        f"  allowed: {spec.allowed_text()}; {'live' if spec.hot else 'next run'}; gyms: {', '.join(spec.gyms)}"
        + (f"; max change per write: {spec.max_delta}" if spec.max_delta else "")
        + (f"; max factor per write: {spec.max_factor}" if spec.max_factor else "")
    )
    for r in spec.requires:
        typer.echo(
            f"  requires on {r['when']}: {r['metric']} {r['op']} {r['value']} over {r['window']} steps"
            + (" per gym" if r.get("per_gym") else "")
        )


def _pending(ctx: _Ctx, spec: Any, gym: Optional[str]) -> Optional[dict[str, Any]]:
    """What the knob file holds for ``spec`` when a live run has not applied it yet (None: nothing pending)."""
    if not ctx.live:
        return None
    from harness.io import yamlio
    from harness.knobs.snapshot import resolve

    try:
        doc, _ = yamlio.read_yaml(ctx.kdir / f"{spec.area}.yaml")
    except yamlio.FileProblem:
        return None
    written = yamlio.plain(doc).get(spec.name) if isinstance(doc, dict) else None
    if written is None or written == ctx.store.raw(spec.full_name):
        return None
    return {"raw": written, "value": resolve(written, gym)}


def _log_to_run(ctx: _Ctx, line: str) -> None:
    """A line in the live run's log.txt (refused writes never reach the run, so it cannot log them)."""
    if ctx.live and ctx.run_dir is not None:
        from harness.runs.writer import RunWriter

        RunWriter(ctx.run_dir).log(line)


def _report_write(ctx: _Ctx, res: Any) -> None:
    ev = res.event
    if ctx.as_json:
        emit_json({"ok": res.ok, "pending": res.pending, "event": ev, "events": res.events, **ctx.run_info()})
    if not res.ok:
        err(f"refused ({ev.get('rule')}): {ev.get('message')}")
        _log_to_run(
            ctx,
            f"knob write REFUSED {ev.get('knob')} = {json.dumps(ev.get('new'))} ({ev.get('rule')}, "
            f"{ev.get('author')}: {ev.get('reason')}): {ev.get('message')}",
        )
        raise typer.Exit(EXIT_REFUSED)
    if not ctx.as_json:
        if ctx.ending:
            err(ctx.run_info()["note"])
        where = f" for gym {ev['gym']}" if ev.get("gym") else ""
        typer.echo(
            f"{ev['knob']}{where}: {json.dumps(ev.get('old'))} -> {json.dumps(ev.get('new'))} "
            f"[{ev.get('id')}] {ev.get('message')}"
        )


@app.command("set")
def set_cmd(
    name: str = typer.Argument(..., help="Knob name <area>.<name>."),
    value: str = typer.Argument(..., help="New value as YAML: 0.004, true, neutral, '[-1, 2]'."),
    reason: str = typer.Option(..., "--reason", help="Why (kept in the event log)."),
    gym: Optional[str] = typer.Option(None, "--gym", help="Set this gym's value only."),
    author: str = typer.Option("human", "--author", help="human | agent | system."),
    as_json: bool = JsonOpt,
    knobs_dir_: Optional[Path] = KnobsDirOpt,
    runs_dir_: Optional[Path] = RunsDirOpt,
    run: Optional[str] = RunOpt,
) -> None:
    """Change a knob through the validation path (range, max delta, requires, gym). Refused: exit 3, file untouched."""

    ctx = _Ctx(knobs_dir_, runs_dir_, run, as_json, lock=True)
    try:
        _set(ctx, name, value, reason, gym, author, as_json)
    finally:
        ctx.release()


def _set(ctx: _Ctx, name: str, value: str, reason: str, gym: Optional[str], author: str, as_json: bool) -> None:
    from harness.knobs.store import UnknownKnob

    parsed = _parse_value(value)
    try:
        ctx.store.spec(name)
    except UnknownKnob as exc:
        from harness.knobs.events import KnobEvent

        ctx.store.log.append(
            KnobEvent(
                knob=name,
                gym=gym,
                new=parsed,
                author=author,
                reason=reason,
                status="rejected",
                rule="unknown knob",
                message=str(exc),
                source="cli",
                step_written=ctx.step,
            )
        )
        _log_to_run(ctx, f"knob write REFUSED {name} (unknown knob, {author}: {reason})")
        fail(str(exc), EXIT_NOT_FOUND, as_json, rule="unknown knob")  # README: 5 for an unknown knob
    try:
        res = ctx.store.set(
            name,
            parsed,
            gym=gym,
            author=author,
            reason=reason,
            recent_metrics=ctx.metrics,
            step_written=ctx.step,
            run_live=ctx.live,
        )
    except ValueError as exc:
        fail(str(exc), EXIT_REFUSED, as_json)
    _report_write(ctx, res)


@app.command("set-rules")
def set_rules_cmd(
    target: str = typer.Argument(
        ..., help="The rule file to replace: users/<gym> (a symbolic user) or rewards/<name> (reward rules)."
    ),
    file: Path = typer.Argument(..., help="The new rule file (YAML, the rule schema of its kind)."),
    reason: str = typer.Option(..., "--reason", help="Why (kept in the event log)."),
    author: str = typer.Option("human", "--author", help="human | agent | system."),
    as_json: bool = JsonOpt,
    knobs_dir_: Optional[Path] = KnobsDirOpt,
    runs_dir_: Optional[Path] = RunsDirOpt,
    run: Optional[str] = RunOpt,
) -> None:
    """Replace a whole rule file through the validation path, attributed like `set` (a live run puts it
    in force at its next step boundary as event rules.<kind>.<key>). Refused: exit 3, file untouched."""
    from harness.io import yamlio
    from harness.knobs.events import AUTHORS
    from harness.knobs.store import RULE_KINDS

    if author not in AUTHORS:
        fail(f"author must be one of {', '.join(AUTHORS)}, got {author!r}", 2, as_json)
    kind, slash, key = target.partition("/")
    if not slash or kind not in RULE_KINDS or not re.fullmatch(r"[a-z][a-z0-9_]*", key or ""):
        fail(
            f"target {target!r}: expected users/<gym> or rewards/<name> (lower-case letters, digits, _)",
            2,
            as_json,
        )
    try:
        doc, _ = yamlio.read_yaml(file)
    except yamlio.FileProblem as exc:
        fail(f"{file}: {exc}", EXIT_REFUSED, as_json)
    ctx = _Ctx(knobs_dir_, runs_dir_, run, as_json, lock=True)
    try:
        res = ctx.store.write_rules(
            kind,
            key,
            yamlio.plain(doc),
            author=author,
            reason=reason,
            step_written=ctx.step,
            run_live=ctx.live,
        )
        _report_write(ctx, res)
    finally:
        ctx.release()


@app.command("add")
def add_cmd(
    name: str = typer.Argument(..., help="New knob name <area>.<name>."),
    schema: str = typer.Option(
        ...,
        "--schema",
        help="JSON schema of the knob's value with description, "
        "x-hot, x-gyms (and optional x-max-delta, x-requires...).",
    ),
    value: str = typer.Option(..., "--value", help="Initial value as YAML."),
    reason: str = typer.Option(..., "--reason"),
    author: str = typer.Option("human", "--author"),
    as_json: bool = JsonOpt,
    knobs_dir_: Optional[Path] = KnobsDirOpt,
    runs_dir_: Optional[Path] = RunsDirOpt,
    run: Optional[str] = RunOpt,
) -> None:
    """Add a new knob with its schema entry (validated like any other write)."""
    ctx = _Ctx(knobs_dir_, runs_dir_, run, as_json, lock=True)
    try:
        _add(ctx, name, schema, value, reason, author, as_json)
    finally:
        ctx.release()


def _add(ctx: _Ctx, name: str, schema: str, value: str, reason: str, author: str, as_json: bool) -> None:
    area, _, knob = name.partition(".")
    try:
        sch = json.loads(schema)
    except json.JSONDecodeError as exc:
        fail(f"--schema is not valid JSON: {exc}", EXIT_REFUSED, as_json)
    try:
        res = ctx.store.add_knob(area, knob, sch, _parse_value(value), author=author, reason=reason, run_live=ctx.live)
    except ValueError as exc:
        fail(str(exc), EXIT_REFUSED, as_json)
    _report_write(ctx, res)


@app.command("init")
def init_cmd(
    folder: Path = typer.Argument(..., help="Folder to create (e.g. knobs-b for a second run)."),
    as_json: bool = JsonOpt,
) -> None:
    """Create a knobs folder from the packaged defaults (a second run side by side needs its own)."""
    from harness.knobs.folder import copy_defaults, is_knobs_dir

    if is_knobs_dir(folder):
        fail(
            f"{folder} is already a knobs folder; `eau knobs reset --knobs-dir {folder}` puts the defaults back",
            EXIT_REFUSED,
            as_json,
        )
    if folder.exists() and any(folder.iterdir()):
        fail(f"{folder} exists and is not empty", EXIT_REFUSED, as_json)
    copy_defaults(folder)
    if as_json:
        emit_json({"ok": True, "knobs_dir": str(folder)})
    else:
        typer.echo(
            f"created {folder} from the packaged defaults; use it with --knobs-dir {folder} (or EAU_KNOBS_DIR={folder})"
        )


@app.command("reset")
def reset_cmd(
    reason: str = typer.Option("reset to the packaged defaults", "--reason", help="Kept in the history."),
    author: str = typer.Option("human", "--author", help="human | agent | system."),
    as_json: bool = JsonOpt,
    knobs_dir_: Optional[Path] = KnobsDirOpt,
    runs_dir_: Optional[Path] = RunsDirOpt,
) -> None:
    """Put the packaged defaults back (values, schemas, rule files); refused while a run is live on the folder."""
    from harness.knobs.events import KnobEvent
    from harness.knobs.folder import reset_to_defaults

    ctx = _Ctx(knobs_dir_, runs_dir_, None, as_json, need_valid=False, allow_invalid=True)
    if ctx.live:
        fail(
            f"run {ctx.run_dir.name} is live on {ctx.kdir}; stop it first (its lent values go back when it ends)",
            EXIT_REFUSED,
            as_json,
        )
    changed = reset_to_defaults(ctx.kdir)
    for c in changed:
        ctx.log.append(
            KnobEvent(
                knob=c["knob"],
                gym=c.get("gym"),
                old=c.get("old"),
                new=c.get("new"),
                author=author,
                reason=reason,
                status="accepted",
                source="cli",
                file=c["file"],
                message="reset to the packaged default",
            )
        )
    if as_json:
        emit_json({"ok": True, "knobs_dir": str(ctx.kdir), "changed": changed})
    else:
        typer.echo(f"{ctx.kdir}: packaged defaults back ({len(changed)} change(s))")
        for c in changed:
            typer.echo(
                f"  {c['knob']}{'[' + c['gym'] + ']' if c.get('gym') else ''}: "
                f"{json.dumps(c.get('old'))[:50]} -> {json.dumps(c.get('new'))[:50]}"
            )


@app.command("upgrade")
def upgrade_cmd(
    dry_run: bool = typer.Option(False, "--dry-run", help="Report what would change; write nothing."),
    as_json: bool = JsonOpt,
    knobs_dir_: Optional[Path] = KnobsDirOpt,
    runs_dir_: Optional[Path] = RunsDirOpt,
) -> None:
    """Bring a knobs folder made from older packaged defaults up to date, keeping every edit.

    New files (a new gym's rules) are copied in, files nobody edited are replaced by the newer
    defaults, edited files are kept (new knobs are added to edited value files). Refused while a run
    is live on the folder."""
    from harness.knobs.folder import upgrade_from_defaults

    ctx = _Ctx(knobs_dir_, runs_dir_, None, as_json, need_valid=False, allow_invalid=True)
    if ctx.live:
        fail(
            f"run {ctx.run_dir.name} is live on {ctx.kdir}; upgrade it after the run ends",
            EXIT_REFUSED,
            as_json,
        )
    report = upgrade_from_defaults(ctx.kdir, dry_run=dry_run)
    if not dry_run:  # the folder's history says what changed, as for a reset
        from harness.knobs.events import KnobEvent

        changed = [(rel, "a newer packaged default") for rel in report["added"] + report["updated"]]
        changed += [(k, "a new knob, with its packaged default value") for k in report["knobs_added"]]
        for what, message in changed:
            knob = what if "/" not in what else ".".join(Path(what).with_suffix("").parts)
            ctx.log.append(
                KnobEvent(
                    knob=knob,
                    author="human",
                    reason="eau knobs upgrade",
                    status="accepted",
                    source="upgrade",  # not a write a resumed run applies again (no value of its own)
                    file=str(ctx.kdir / what) if "/" in what else str(ctx.kdir / f"{what.split('.')[0]}.yaml"),
                    message=message,
                )
            )
    if as_json:
        emit_json({"ok": True, "knobs_dir": str(ctx.kdir), "dry_run": dry_run, **report})
        return
    would = "would be " if dry_run else ""
    for key, what in (("added", "added"), ("updated", "updated to the newer default")):
        for rel in report[key]:
            typer.echo(f"  {rel}: {would}{what}")
    for k in report["knobs_added"]:
        typer.echo(f"  {k}: new knob {'would be ' if dry_run else ''}added with its default value")
    for kept in report["kept"]:
        typer.echo(f"  {kept['file']}: edited here, kept; the newer default is {kept['packaged']}")
    n = len(report["added"]) + len(report["updated"]) + len(report["knobs_added"])
    typer.echo(f"{ctx.kdir}: {n} change(s){' (dry run)' if dry_run else ''}, {len(report['kept'])} edited file(s) kept")


@app.command("validate")
def validate_cmd(
    as_json: bool = JsonOpt, knobs_dir_: Optional[Path] = KnobsDirOpt, runs_dir_: Optional[Path] = RunsDirOpt
) -> None:
    """Validate every knob, schema and rule file; exit 4 naming each invalid file."""
    from harness.knobs.folder import upgrade_hint
    from harness.knobs.store import validate_dir

    kdir = knobs_dir(knobs_dir_)
    problems = validate_dir(kdir)
    if as_json:
        emit_json({"ok": not problems, "knobs_dir": str(kdir), "problems": problems})
    else:
        for p in problems:
            err(f"{p['file']}" + (f":{p['line']}" if p.get("line") else "") + f": [{p['rule']}] {p['message']}")
        if problems and (hint := upgrade_hint(kdir)):
            err(hint)
        if not problems:
            typer.echo(f"ok: every knob, schema and rule file in {kdir} is valid")
    if problems:
        raise typer.Exit(EXIT_INVALID)


def _events(ctx: _Ctx) -> list[dict[str, Any]]:
    return ctx.store.log.read()


@app.command("history")
def history_cmd(
    name: Optional[str] = typer.Argument(None, help="Only events of this knob (prefix match: 'env.', 'rules.')."),
    limit: int = typer.Option(50, "--limit", help="Most recent events to show."),
    status: Optional[str] = typer.Option(None, "--status", help="accepted | rejected."),
    as_json: bool = JsonOpt,
    knobs_dir_: Optional[Path] = KnobsDirOpt,
    runs_dir_: Optional[Path] = RunsDirOpt,
    run: Optional[str] = RunOpt,
) -> None:
    """Knob events (accepted and refused writes) of the run, or of the knobs folder without a run."""
    ctx = _Ctx(knobs_dir_, runs_dir_, run, as_json, need_valid=False)
    if name is not None:
        _check_history_name(ctx, name)
    evs = [
        e
        for e in _events(ctx)
        if (
            name is None
            or e.get("knob") == name
            or str(e.get("knob", "")).startswith(name if name.endswith(".") else name + ".")
        )
        and (status is None or e.get("status") == status)
    ]
    total = len(evs)
    evs = evs[-limit:] if limit > 0 else evs
    if as_json:
        emit_json({"events": evs, "total": total, "shown": len(evs), "log": str(ctx.store.log.path), **ctx.run_info()})
        return
    for e in evs:
        gym = f"[{e['gym']}]" if e.get("gym") else ""
        step = f" step {e.get('step_effective')}" if e.get("step_effective") is not None else ""
        old, new = (json.dumps(e.get("old"))[:40], json.dumps(e.get("new"))[:40])
        typer.echo(
            f"{e.get('time')} {e.get('id')} {e.get('status'):8} {e.get('knob')}{gym} {old} -> {new}"
            f" by {e.get('author')}{step}: {e.get('reason')}"
            + (f" | {e.get('rule')}: {e.get('message')}" if e.get("status") == "rejected" else "")
        )
    if total > len(evs):
        typer.echo(f"({total - len(evs)} older events not shown; --limit)")


def _check_history_name(ctx: _Ctx, name: str) -> None:
    """A knob (or area prefix such as ``env.``) the folder knows, or one its log has events of (an
    added knob since removed); anything else is an unknown knob (exit 5), not an empty history."""
    from harness.knobs.store import AREAS

    prefix = name if name.endswith(".") else name + "."
    if name.rstrip(".") in (*AREAS, "rules", "plugins"):
        return
    known = {s.full_name for s in ctx.store.specs()}
    logged = {str(e.get("knob")) for e in _events(ctx)}
    if name in known or name in logged or any(k.startswith(prefix) for k in known | logged):
        return
    fail(
        f"unknown knob {name!r}: no such knob in {ctx.kdir} and no events of it; knob names are <area>.<name> "
        f"with area in {', '.join(AREAS)} (eau knobs list)",
        EXIT_NOT_FOUND,
        ctx.as_json,
        rule="unknown knob",
    )


@app.command("revert")
def revert_cmd(
    event: str = typer.Argument(..., help="Event id (k-...) whose change to undo."),
    reason: Optional[str] = typer.Option(None, "--reason"),
    author: str = typer.Option("human", "--author"),
    as_json: bool = JsonOpt,
    knobs_dir_: Optional[Path] = KnobsDirOpt,
    runs_dir_: Optional[Path] = RunsDirOpt,
    run: Optional[str] = RunOpt,
) -> None:
    """Set the knob of an accepted event back to its value before that event (a plug-in: its code
    before that event, or no plug-in)."""

    ctx = _Ctx(knobs_dir_, runs_dir_, run, as_json, lock=True)
    try:
        _revert(ctx, event, reason, author, as_json)
    finally:
        ctx.release()


def _revert(ctx: _Ctx, event: str, reason: Optional[str], author: str, as_json: bool) -> None:
    from harness.knobs.events import EventLog

    extra = [EventLog(ctx.kdir / ".history" / "knob_events.jsonl")]
    ev = ctx.store.log.find(event) or extra[0].find(event)
    if ev is not None and str(ev.get("knob", "")).startswith("plugins.") and ev.get("status") == "accepted":
        from harness.cli.plugins import revert_plugin

        revert_plugin(ctx, ev, author, reason)  # the code before the event, through the plug-in gate
        return
    try:
        res = ctx.store.revert(
            event,
            author=author,
            reason=reason,
            recent_metrics=ctx.metrics,
            step_written=ctx.step,
            run_live=ctx.live,
            extra_logs=extra,
        )
    except KeyError as exc:
        fail(str(exc).strip("'\""), EXIT_NOT_FOUND, as_json)
    except ValueError as exc:
        fail(str(exc), EXIT_REFUSED, as_json)
    _report_write(ctx, res)


def _print_event(e: dict[str, Any], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(e, default=str))
        return
    where = f"{e.get('file')}" + (f":{e['line']}" if e.get("line") else "")
    if e.get("status") == "accepted":
        typer.echo(
            f"ACCEPTED {e.get('knob')}{'[' + e['gym'] + ']' if e.get('gym') else ''}: "
            f"{json.dumps(e.get('old'))[:60]} -> {json.dumps(e.get('new'))[:60]} ({e.get('author')}: {e.get('reason')})"
        )
    else:
        typer.echo(f"REFUSED  {e.get('knob')} in {where} [{e.get('rule')}]: {e.get('message')}")


@app.command("watch")
def watch_cmd(
    interval: float = typer.Option(0.5, "--interval", min=0.05, max=3600.0, help="Seconds between checks."),
    duration: float = typer.Option(
        0.0,
        "--duration",
        min=0.0,
        max=31_536_000.0,
        help="Stop after this many seconds (0: until Ctrl-C; at most a year).",
    ),
    as_json: bool = typer.Option(False, "--json", help="One JSON event per line."),
    knobs_dir_: Optional[Path] = KnobsDirOpt,
    runs_dir_: Optional[Path] = RunsDirOpt,
    run: Optional[str] = RunOpt,
) -> None:
    """Print each accepted or refused knob edit as it happens, until interrupted.

    With a live run: follows what the run accepts and refuses (its knob_events.jsonl). Without one:
    watches the folder itself and validates each edit (logging to the folder's own history).
    """
    from harness.io import jsonl
    from harness.knobs.watcher import KnobWatcher

    ctx = _Ctx(knobs_dir_, runs_dir_, run, as_json)
    t_end = time.monotonic() + duration if duration > 0 else None
    src = f"live run {ctx.run_dir.name}" if ctx.live else f"{ctx.kdir} (no live run)"
    ready = f"watching {src}; Ctrl-C to stop"  # on stderr once edits are being watched
    try:
        if ctx.live:
            path = ctx.run_dir / "knob_events.jsonl"
            seen = len(jsonl.read(path))
            typer.echo(ready, err=True)
            while t_end is None or time.monotonic() < t_end:
                recs = jsonl.read(path)
                for e in recs[seen:]:
                    _print_event(e, as_json)
                seen = len(recs)
                time.sleep(interval)
        else:
            ctx.store.debounce_s = min(ctx.store.debounce_s, interval)
            with KnobWatcher(ctx.store):
                typer.echo(ready, err=True)
                while t_end is None or time.monotonic() < t_end:
                    res = ctx.store.poll(0, ctx.metrics)
                    for e in res.applied + res.next_run + res.refused:
                        _print_event(e, as_json)
                    time.sleep(interval)
    except KeyboardInterrupt:
        pass
