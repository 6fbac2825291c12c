"""``eau knobs``: list | get | set | set-rules | add | promote | history | revert | watch | validate |
init | reset | upgrade | plugin.

Knob names are ``<area>.<name>`` (``agent.entropy_coeff``). A command addresses a run's own knobs
folder (``--run``, default the one live run) or the project folder (``--project``, or when no run is
live): harness/cli/knob_target.py. Writes go through the knob store's one validation path; a live
run applies a write at its next step boundary and logs it with the step it takes effect.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from harness.cli.common import (
    EXIT_INVALID,
    EXIT_NOT_FOUND,
    EXIT_REFUSED,
    EXIT_USAGE,
    JsonOpt,
    KnobsDirOpt,
    RunsDirOpt,
    emit_json,
    err,
    fail,
    knobs_dir,
    runs_dir,
)
from harness.cli.knob_target import ProjectOpt, RunOpt, Target, find_target, log_to_run, target
from harness.cli.plugins import app as plugin_app
from harness.cli.plugins import revert_plugin
from harness.gyms import gym_names
from harness.io import jsonl, yamlio
from harness.knobs.events import AUTHORS, EventLog, KnobEvent
from harness.knobs.folder import copy_defaults, is_knobs_dir, reset_to_defaults, upgrade_from_defaults, upgrade_hint
from harness.knobs.layout import HISTORY, RULE_KINDS
from harness.knobs.snapshot import AREAS, resolve
from harness.knobs.store import UnknownKnob
from harness.knobs.watcher import KnobWatcher
from harness.knobs.writes import IDENTIFIER, is_identifier
from harness.runs import reader
from harness.stores import open_store, validate_folder

app = typer.Typer(
    help="List, read, change, validate and watch knobs: a run's own (runs/<id>/knobs, --run; the live run by "
    "default) or the project folder's (knobs/, --project: what the next run starts from).",
    no_args_is_help=True,
)
app.add_typer(plugin_app, name="plugin")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="knobs")


def _parse_value(text: str) -> Any:
    """A CLI value as YAML (``0.004``, ``true``, ``[-1, 2]``, ``neutral``)."""
    try:
        return yamlio.plain(yamlio.parse_text(Path("<value>"), text))
    except yamlio.FileProblem as exc:
        raise typer.BadParameter(f"cannot parse value {text!r}: {exc.message}") from None


def _check_gym(gym: Optional[str], as_json: bool) -> None:
    """A ``--gym`` must name a gym exactly (a path, another case or a look-alike letter is no gym)."""
    if gym is not None and gym not in gym_names():
        fail(f"unknown gym {gym!r}; gyms: {', '.join(gym_names())}", EXIT_NOT_FOUND, as_json, rule="unknown gym")


@app.command("list")
def list_cmd(
    as_json: bool = JsonOpt,
    knobs_dir_: Optional[Path] = KnobsDirOpt,
    runs_dir_: Optional[Path] = RunsDirOpt,
    run: Optional[str] = RunOpt,
    project: bool = ProjectOpt,
) -> None:
    """List every knob with its value in force, allowed range, live/next-run and gyms."""
    with target(knobs_dir_, runs_dir_, run, project, as_json) as t:
        rows = [{**spec.catalogue_entry(), "value": t.store.raw(spec.full_name)} for spec in t.store.specs()]
    if as_json:
        emit_json({"knobs": rows, **t.run_info()})
        return
    where = f" (run {t.run_dir.name}{', live at step ' + str(t.step) if t.live else ''})" if t.run_dir else ""
    table = Table(title=f"knobs in {t.kdir}{where}")
    for col in ("knob", "value", "allowed", "live", "gyms"):
        table.add_column(col, overflow="fold")
    for r in rows:
        live = "yes" if r["hot"] else "next run"
        table.add_row(r["name"], json.dumps(r["value"]), r["allowed"], live, ",".join(r["gyms"]))
    Console(width=140).print(table)


@app.command("get")
def get_cmd(
    name: str = typer.Argument(..., help="Knob name <area>.<name>, e.g. agent.entropy_coeff."),
    gym: Optional[str] = typer.Option(None, "--gym", help="Resolve the value for this gym."),
    as_json: bool = JsonOpt,
    knobs_dir_: Optional[Path] = KnobsDirOpt,
    runs_dir_: Optional[Path] = RunsDirOpt,
    run: Optional[str] = RunOpt,
    project: bool = ProjectOpt,
) -> None:
    """Show one knob: its value in force (for a gym with --gym), documentation and limits."""
    _check_gym(gym, as_json)
    with target(knobs_dir_, runs_dir_, run, project, as_json) as t:
        try:
            spec = t.store.spec(name)
        except UnknownKnob as exc:
            fail(str(exc), EXIT_NOT_FOUND, as_json, rule="unknown knob")
        pending = _pending(t, spec, gym)
        out = {
            "name": spec.full_name,
            "value": t.store.get(name, gym),
            "raw": t.store.raw(name),
            "gym": gym,
            "in_force_for": t.run_dir.name if t.run_dir else None,
            "pending": pending,
            **{k: v for k, v in spec.catalogue_entry().items() if k != "name"},
            **t.run_info(),
        }
    if as_json:
        emit_json(out)
        return
    where = (f"in force for run {t.run_dir.name}" + ("" if t.live else " (not live)")) if t.run_dir else "project"
    typer.echo(f"{spec.full_name} = {json.dumps(out['value'])}" + (f"  (gym {gym})" if gym else "") + f"  [{where}]")
    if out["raw"] != out["value"]:
        typer.echo(f"  per gym: {json.dumps(out['raw'])}")
    if pending is not None:
        when = "at its next step boundary" if t.live else "when it resumes"
        typer.echo(f"  PENDING: the file holds {json.dumps(pending['value'])}; the run applies it {when}")
    typer.echo(f"  {spec.description}")
    typer.echo(
        f"  allowed: {spec.allowed_text()}; {'live' if spec.hot else 'next run'}; gyms: {', '.join(spec.gyms)}"
        + (f"; max change per write: {spec.max_delta}" if spec.max_delta else "")
        + (f"; max factor per write: {spec.max_factor}" if spec.max_factor else "")
    )
    for r in spec.requires:
        per_gym = " per gym" if r.get("per_gym") else ""
        typer.echo(f"  requires on {r['when']}: {r['metric']} {r['op']} {r['value']} over {r['window']} steps{per_gym}")


def _pending(t: Target, spec: Any, gym: Optional[str]) -> Optional[dict[str, Any]]:
    """What a run's knob file holds for ``spec`` when the run has not applied it yet (None: nothing)."""
    if t.run_dir is None:
        return None
    try:
        written = yamlio.load_plain(t.kdir / f"{spec.area}.yaml")
    except yamlio.FileProblem:
        return None
    written = written.get(spec.name) if isinstance(written, dict) else None
    if written is None or written == t.store.raw(spec.full_name):
        return None
    return {"raw": written, "value": resolve(written, gym)}


def _report(t: Target, res: Any) -> None:
    ev = res.event
    if t.as_json:
        emit_json({"ok": res.ok, "pending": res.pending, "event": ev, "events": res.events, **t.run_info()})
    if not res.ok:
        err(f"refused ({ev.get('rule')}): {ev.get('message')}")
        new, who = json.dumps(ev.get("new")), f"{ev.get('author')}: {ev.get('reason')}"
        log_to_run(t, f"knob write REFUSED {ev.get('knob')} = {new} ({ev.get('rule')}, {who}): {ev.get('message')}")
        raise typer.Exit(EXIT_REFUSED)
    if not t.as_json:
        where = f" for gym {ev['gym']}" if ev.get("gym") else ""
        old, new = json.dumps(ev.get("old")), json.dumps(ev.get("new"))
        typer.echo(f"{ev['knob']}{where}: {old} -> {new} [{ev.get('id')}] {ev.get('message')}")


def _write(t: Target, write: Any, *args: Any, **kw: Any) -> None:
    """Run a store write for the target and report it. KeyError (no such event to revert): exit 5;
    ValueError (a usage error of author or reason, an event that cannot be reverted): exit 3."""
    try:
        res = write(*args, for_run=t.for_run, **kw)
    except KeyError as exc:
        fail(str(exc).strip("'\""), EXIT_NOT_FOUND, t.as_json)
    except ValueError as exc:
        fail(str(exc), EXIT_REFUSED, t.as_json)
    _report(t, res)


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
    project: bool = ProjectOpt,
) -> None:
    """Change a knob through the validation path (range, max delta, requires, gym). Refused: exit 3, file untouched."""
    _check_gym(gym, as_json)
    parsed = _parse_value(value)
    with target(knobs_dir_, runs_dir_, run, project, as_json, write=True) as t:
        try:
            t.store.spec(name)
        except UnknownKnob as exc:
            t.log.append(
                KnobEvent(knob=name, gym=gym, new=parsed, author=author, reason=reason, status="rejected",
                          rule="unknown knob", message=str(exc), source="cli", step_written=t.step)
            )  # fmt: skip
            log_to_run(t, f"knob write REFUSED {name} (unknown knob, {author}: {reason})")
            fail(str(exc), EXIT_NOT_FOUND, as_json, rule="unknown knob")  # README: 5 for an unknown knob
        kw = dict(gym=gym, author=author, reason=reason, recent_metrics=t.metrics, step_written=t.step)
        _write(t, t.store.set, name, parsed, **kw)


@app.command("set-rules")
def set_rules_cmd(
    rule_file: str = typer.Argument(..., metavar="TARGET", help="users/<gym> (a symbolic user) or rewards/<name>."),
    file: Path = typer.Argument(..., help="The new rule file (YAML, the rule schema of its kind)."),
    reason: str = typer.Option(..., "--reason", help="Why (kept in the event log)."),
    author: str = typer.Option("human", "--author", help="human | agent | system."),
    as_json: bool = JsonOpt,
    knobs_dir_: Optional[Path] = KnobsDirOpt,
    runs_dir_: Optional[Path] = RunsDirOpt,
    run: Optional[str] = RunOpt,
    project: bool = ProjectOpt,
) -> None:
    """Replace a whole rule file through the validation path, attributed like `set` (a live run puts it
    in force at its next step boundary as event rules.<kind>.<key>). Refused: exit 3, file untouched."""
    if author not in AUTHORS:
        fail(f"author must be one of {', '.join(AUTHORS)}, got {author!r}", EXIT_USAGE, as_json)
    kind, slash, key = rule_file.partition("/")
    if not slash or kind not in RULE_KINDS or not re.fullmatch(r"[a-z][a-z0-9_]*", key or ""):
        message = f"target {rule_file!r}: expected users/<gym> or rewards/<name> (lower-case letters, digits, _)"
        fail(message, EXIT_USAGE, as_json)
    try:
        value = yamlio.load_plain(file)
    except yamlio.FileProblem as exc:
        fail(f"{file}: {exc}", EXIT_REFUSED, as_json)
    with target(knobs_dir_, runs_dir_, run, project, as_json, write=True) as t:
        _write(t, t.store.write_rules, kind, key, value, author=author, reason=reason, step_written=t.step)


@app.command("add")
def add_cmd(
    name: str = typer.Argument(..., help="New knob name <area>.<name>: a name of lower-case letters, digits and _."),
    schema: str = typer.Option(
        ...,
        "--schema",
        help="JSON schema of the knob's value with description, x-hot, x-gyms (and optional x-max-delta, x-requires...).",
    ),
    value: str = typer.Option(..., "--value", help="Initial value as YAML."),
    reason: str = typer.Option(..., "--reason"),
    author: str = typer.Option("human", "--author"),
    as_json: bool = JsonOpt,
    knobs_dir_: Optional[Path] = KnobsDirOpt,
    runs_dir_: Optional[Path] = RunsDirOpt,
    run: Optional[str] = RunOpt,
    project: bool = ProjectOpt,
) -> None:
    """Add a new knob with its schema entry (validated like any other write)."""
    area, _, knob = name.partition(".")
    if area not in AREAS or not is_identifier(knob):
        fail(f"knob name {name!r}: <area>.<name> with area in {', '.join(AREAS)} and {IDENTIFIER}", EXIT_USAGE, as_json)
    try:
        sch = json.loads(schema)
    except json.JSONDecodeError as exc:
        fail(f"--schema is not valid JSON: {exc}", EXIT_REFUSED, as_json)
    parsed = _parse_value(value)
    with target(knobs_dir_, runs_dir_, run, project, as_json, write=True) as t:
        _write(t, t.store.add_knob, area, knob, sch, parsed, author=author, reason=reason)


@app.command("promote")
def promote_cmd(
    names: Optional[list[str]] = typer.Argument(None, help="Knobs and rule files (rules.users.<gym>); none: all."),
    run: str = typer.Option(..., "--run", help="The run whose final values the project folder takes."),
    reason: str = typer.Option(..., "--reason", help="Why (kept in the project folder's history)."),
    author: str = typer.Option("human", "--author", help="human | agent | system."),
    as_json: bool = JsonOpt,
    knobs_dir_: Optional[Path] = KnobsDirOpt,
    runs_dir_: Optional[Path] = RunsDirOpt,
) -> None:
    """Carry a run's final values (its knobs_in_force.json; all, or the knobs and rule files named) to
    the project knobs folder, where the next run starts: validated (schema and range), logged in the
    project folder's history. A refused value leaves the project's value as it was: exit 3."""
    run_dir = reader.find_run(runs_dir(runs_dir_, as_json), run)
    state = reader.final_knob_state(run_dir) if run_dir is not None else None
    if state is None:
        fail(f"no run {run!r} with a knobs_in_force.json to promote from", EXIT_NOT_FOUND, as_json)
    store = open_store(knobs_dir(knobs_dir_, as_json))
    values = {f"{a}.{k}": v for a, knobs in state["values"].items() for k, v in knobs.items()}
    rules = {f"rules.{kind}.{key}": v for kind, files in state["rules"].items() for key, v in files.items()}
    unknown = [n for n in names or [] if n not in values and n not in rules]
    if unknown:
        fail(f"run {run_dir.name} has no knob or rule file {', '.join(unknown)}", EXIT_NOT_FOUND, as_json)
    chosen = set(names) if names else set(values) | set(rules)
    common = dict(author=author, reason=f"{reason} (promoted from run {run_dir.name})")
    results = []
    for name in sorted(chosen & set(values)):
        try:
            if store.raw(name) != values[name]:
                results.append(store.set(name, values[name], whole=True, skip_delta=True, skip_requires=True,
                                         source="promote", **common))  # fmt: skip
        except UnknownKnob:  # a knob the run added: its schema entry comes along
            area, _, knob = name.partition(".")
            schema = json.loads((run_dir / "knobs" / "schema" / f"{area}.schema.json").read_text())["properties"][knob]
            results.append(store.add_knob(area, knob, schema, values[name], **common))
    for name in sorted(chosen & set(rules)):
        _, kind, key = name.split(".", 2)
        if store.rules[kind].get(key) != rules[name]:
            results.append(store.write_rules(kind, key, rules[name], source="promote", **common))
    events = [e for r in results for e in r.events]
    refused = [e for e in events if e["status"] == "rejected"]
    if as_json:
        emit_json({"ok": not refused, "run": run_dir.name, "knobs_dir": str(store.dir), "events": events})
    else:
        for e in events:
            state_ = "REFUSED " + str(e.get("message")) if e["status"] == "rejected" else e["status"]
            typer.echo(f"{e['knob']}: {json.dumps(e.get('old'))[:50]} -> {json.dumps(e.get('new'))[:50]} [{state_}]")
        typer.echo(
            f"{store.dir}: {len(events) - len(refused)} value(s) from run {run_dir.name}, {len(refused)} refused"
        )
    if refused:
        raise typer.Exit(EXIT_REFUSED)


@app.command("init")
def init_cmd(
    folder: Path = typer.Argument(..., help="Folder to create (a second project folder, e.g. knobs-b)."),
    as_json: bool = JsonOpt,
) -> None:
    """Create a knobs folder from the packaged defaults."""
    if is_knobs_dir(folder):
        message = f"{folder} is already a knobs folder; `eau knobs reset --knobs-dir {folder}` puts the defaults back"
        fail(message, EXIT_REFUSED, as_json)
    if folder.exists() and any(folder.iterdir()):
        fail(f"{folder} exists and is not empty", EXIT_REFUSED, as_json)
    copy_defaults(folder)
    if as_json:
        emit_json({"ok": True, "knobs_dir": str(folder)})
    else:
        typer.echo(f"created {folder} from the packaged defaults; use it with --knobs-dir {folder} (or EAU_KNOBS_DIR)")


@app.command("reset")
def reset_cmd(
    reason: str = typer.Option("reset to the packaged defaults", "--reason", help="Kept in the history."),
    author: str = typer.Option("human", "--author", help="human | agent | system."),
    as_json: bool = JsonOpt,
    knobs_dir_: Optional[Path] = KnobsDirOpt,
) -> None:
    """Put the packaged defaults back into the project folder (values, schemas, rule files). Runs keep
    their own knobs folders."""
    kdir = knobs_dir(knobs_dir_, as_json)
    changed, history = reset_to_defaults(kdir), EventLog(kdir / HISTORY)
    for c in changed:
        history.append(
            KnobEvent(knob=c["knob"], gym=c.get("gym"), old=c.get("old"), new=c.get("new"), author=author,
                      reason=reason, status="accepted", source="cli", file=c["file"], message="reset to the packaged default")
        )  # fmt: skip
    if as_json:
        emit_json({"ok": True, "knobs_dir": str(kdir), "changed": changed})
        return
    typer.echo(f"{kdir}: packaged defaults back ({len(changed)} change(s))")
    for c in changed:
        gym = "[" + c["gym"] + "]" if c.get("gym") else ""
        typer.echo(f"  {c['knob']}{gym}: {json.dumps(c.get('old'))[:50]} -> {json.dumps(c.get('new'))[:50]}")


@app.command("upgrade")
def upgrade_cmd(
    dry_run: bool = typer.Option(False, "--dry-run", help="Report what would change; write nothing."),
    as_json: bool = JsonOpt,
    knobs_dir_: Optional[Path] = KnobsDirOpt,
) -> None:
    """Bring a project folder made from older packaged defaults up to date, keeping every edit.

    New files (a new gym's rules) are copied in, files nobody edited are replaced by the newer
    defaults, edited files are kept (new knobs are added to edited value files)."""
    kdir = knobs_dir(knobs_dir_, as_json)
    report = upgrade_from_defaults(kdir, dry_run=dry_run)
    if not dry_run:  # the folder's history says what changed, as for a reset
        history = EventLog(kdir / HISTORY)
        changed = [(rel, "a newer packaged default") for rel in report["added"] + report["updated"]]
        changed += [(k, "a new knob, with its packaged default value") for k in report["knobs_added"]]
        for what, message in changed:
            knob = what if "/" not in what else ".".join(Path(what).with_suffix("").parts)
            file = kdir / what if "/" in what else kdir / f"{what.split('.')[0]}.yaml"
            # source upgrade: not a write a run applies again (no value of its own)
            history.append(
                KnobEvent(knob=knob, author="human", reason="eau knobs upgrade", status="accepted", message=message,
                          source="upgrade", file=str(file))
            )  # fmt: skip
    if as_json:
        emit_json({"ok": True, "knobs_dir": str(kdir), "dry_run": dry_run, **report})
        return
    would = "would be " if dry_run else ""
    for key, what in (("added", "added"), ("updated", "updated to the newer default")):
        for rel in report[key]:
            typer.echo(f"  {rel}: {would}{what}")
    for k in report["knobs_added"]:
        typer.echo(f"  {k}: new knob {would}added with its default value")
    for kept in report["kept"]:
        typer.echo(f"  {kept['file']}: edited here, kept; the newer default is {kept['packaged']}")
    n = len(report["added"]) + len(report["updated"]) + len(report["knobs_added"])
    typer.echo(f"{kdir}: {n} change(s){' (dry run)' if dry_run else ''}, {len(report['kept'])} edited file(s) kept")


@app.command("validate")
def validate_cmd(
    as_json: bool = JsonOpt,
    knobs_dir_: Optional[Path] = KnobsDirOpt,
    runs_dir_: Optional[Path] = RunsDirOpt,
    run: Optional[str] = RunOpt,
    project: bool = ProjectOpt,
) -> None:
    """Validate every knob, schema and rule file; exit 4 naming each invalid file."""
    kdir = find_target(knobs_dir_, runs_dir_, run, project, as_json)[0]
    problems = validate_folder(kdir)
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


@app.command("history")
def history_cmd(
    name: Optional[str] = typer.Argument(None, help="Only events of this knob (prefix match: 'env.', 'rules.')."),
    limit: int = typer.Option(50, "--limit", help="Most recent events to show."),
    status: Optional[str] = typer.Option(None, "--status", help="accepted | rejected | not_applied."),
    as_json: bool = JsonOpt,
    knobs_dir_: Optional[Path] = KnobsDirOpt,
    runs_dir_: Optional[Path] = RunsDirOpt,
    run: Optional[str] = RunOpt,
    project: bool = ProjectOpt,
) -> None:
    """Knob events (accepted, refused, not applied) of the run, or of the project folder."""
    with target(knobs_dir_, runs_dir_, run, project, as_json, need_valid=False) as t:
        records = t.log.read()
    prefix = name if name is None or name.endswith(".") else name + "."
    if name is not None and name.rstrip(".") not in (*AREAS, "rules", "plugins", "schema"):
        known = {s.full_name for s in t.store.specs()} if t.store is not None else set()
        known |= {str(e.get("knob")) for e in records}
        if name not in known and not any(k.startswith(prefix) for k in known):
            message = (
                f"unknown knob {name!r}: no such knob in {t.kdir} and no events of it; knob names are <area>.<name> "
                f"with area in {', '.join(AREAS)} (eau knobs list)"
            )
            fail(message, EXIT_NOT_FOUND, as_json, rule="unknown knob")
    evs = [
        e
        for e in records
        if (name is None or e.get("knob") == name or str(e.get("knob", "")).startswith(prefix))
        and (status is None or e.get("status") == status)
    ]
    total, evs = len(evs), evs[-limit:] if limit > 0 else evs
    if as_json:
        emit_json({"events": evs, "total": total, "shown": len(evs), "log": str(t.log.path), **t.run_info()})
        return
    for e in evs:
        gym = f"[{e['gym']}]" if e.get("gym") else ""
        step = f" step {e.get('step_effective')}" if e.get("step_effective") is not None else ""
        old, new = json.dumps(e.get("old"))[:40], json.dumps(e.get("new"))[:40]
        typer.echo(
            f"{e.get('time')} {e.get('id')} {e.get('status'):8} {e.get('knob')}{gym} {old} -> {new}"
            f" by {e.get('author')}{step}: {e.get('reason')}"
            + (f" | {e.get('rule')}: {e.get('message')}" if e.get("status") == "rejected" else "")
        )
    if total > len(evs):
        typer.echo(f"({total - len(evs)} older events not shown; --limit)")


@app.command("revert")
def revert_cmd(
    event: str = typer.Argument(..., help="Event id (k-...) whose change to undo."),
    reason: Optional[str] = typer.Option(None, "--reason"),
    author: str = typer.Option("human", "--author"),
    as_json: bool = JsonOpt,
    knobs_dir_: Optional[Path] = KnobsDirOpt,
    runs_dir_: Optional[Path] = RunsDirOpt,
    run: Optional[str] = RunOpt,
    project: bool = ProjectOpt,
) -> None:
    """Set the knob of an accepted event back to its value before that event (a plug-in: its code
    before that event, or no plug-in)."""
    with target(knobs_dir_, runs_dir_, run, project, as_json, write=True) as t:
        ev = t.log.find(event)
        if ev is not None and str(ev.get("knob", "")).startswith("plugins.") and ev.get("status") == "accepted":
            revert_plugin(t, ev, author, reason)  # the code before the event, through the plug-in gate
            return
        _write(t, t.store.revert, event, author=author, reason=reason, recent_metrics=t.metrics, step_written=t.step)


def _print_event(e: dict[str, Any], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(e, default=str))
    elif e.get("status") == "rejected":
        where = f"{e.get('file')}" + (f":{e['line']}" if e.get("line") else "")
        typer.echo(f"REFUSED  {e.get('knob')} in {where} [{e.get('rule')}]: {e.get('message')}")
    else:
        gym = "[" + e["gym"] + "]" if e.get("gym") else ""
        old, new = json.dumps(e.get("old"))[:60], json.dumps(e.get("new"))[:60]
        typer.echo(
            f"{e.get('status', '').upper()} {e.get('knob')}{gym}: {old} -> {new} ({e.get('author')}: {e.get('reason')})"
        )


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
    project: bool = ProjectOpt,
) -> None:
    """Print each accepted or refused knob edit as it happens, until interrupted.

    A live run: what it accepts and refuses (its knob_events.jsonl). Otherwise the folder itself: each
    edit validated as it is saved (logged in a project folder's history; for a stopped run, only printed:
    the run checks its folder again when it resumes)."""
    with target(knobs_dir_, runs_dir_, run, project, as_json) as t:
        pass
    t_end = time.monotonic() + duration if duration > 0 else None
    ready = f"watching {'live run ' + t.run_dir.name if t.live else t.kdir}; Ctrl-C to stop"  # on stderr once watching
    try:
        if t.live:
            path = t.run_dir / "knob_events.jsonl"
            seen = len(jsonl.read(path))
            typer.echo(ready, err=True)
            while t_end is None or time.monotonic() < t_end:
                recs = jsonl.read(path)
                for e in recs[seen:]:
                    _print_event(e, as_json)
                seen = len(recs)
                time.sleep(interval)
            return
        store = open_store(t.kdir, events_path="auto" if t.run_dir is None else None, debounce_s=min(0.2, interval))
        with KnobWatcher(store):
            typer.echo(ready, err=True)
            while t_end is None or time.monotonic() < t_end:
                res = store.poll(0, t.metrics)
                for e in res.applied + res.next_run + res.refused:
                    _print_event(e, as_json)
                time.sleep(interval)
    except KeyboardInterrupt:
        pass
