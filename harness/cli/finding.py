"""``eau finding``: add | list | search | show | retract | index — the experience pool.

Findings are markdown files with YAML front matter in the pool folder (``--pool-dir``, env
``EAU_POOL_DIR``, default ``./experience_pool``); ``INDEX.md`` there is regenerated on every change.
Field meanings: ``harness/experience/finding.py``; the search score: ``harness/experience/search.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from harness.cli.common import EXIT_ERROR, EXIT_INVALID, EXIT_NOT_FOUND, EXIT_USAGE, JsonOpt, emit_json, err, fail
from harness.experience.finding import VERDICTS, Finding, FindingError, parse_steps
from harness.experience.pool import DEFAULT_DIR, ExperiencePool, FindingNotFound, filter_findings
from harness.experience.search import query_terms, rank

app = typer.Typer(
    help="The experience pool: record, list, search and retract findings about interventions.", no_args_is_help=True
)

PoolDirOpt = typer.Option(
    None, "--pool-dir", envvar="EAU_POOL_DIR", help="Experience pool folder (default: ./experience_pool)."
)
StatusOpt = typer.Option("active", "--status", help="active | retracted | all.")
LimitOpt = typer.Option(20, "--limit", help="Most findings to show (0: all).")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="finding")


def _pool(pool_dir: Optional[Path], as_json: bool, must_exist: bool = True):
    pool = ExperiencePool(pool_dir if pool_dir is not None else Path.cwd() / DEFAULT_DIR)
    if must_exist and not pool.exists():
        fail(
            f"no experience pool at {pool.root}; pass --pool-dir (or set EAU_POOL_DIR), "
            f"or record a first finding with `eau finding add`",
            EXIT_NOT_FOUND,
            as_json,
        )
    return pool


def _warn_problems(problems: list[dict[str, str]]) -> None:
    for p in problems:
        err(f"warning: skipped {p['message']}")


def _check_status(status: str, as_json: bool) -> Optional[str]:
    if status not in ("active", "retracted", "all"):
        fail(f"--status {status!r} is not allowed; use active, retracted or all", EXIT_USAGE, as_json)
    return None if status == "all" else status


def _short(f) -> str:  # one readable line per finding
    knobs = f" [{', '.join(f.knobs)}]" if f.knobs else ""
    mark = " (RETRACTED)" if f.status == "retracted" else ""
    return f"{f.id} {f.verdict:12} {f.title}{knobs}{mark}"


@app.command("add")
def add_cmd(
    title: str = typer.Option(..., "--title", help="One line (<= 120 chars): what was learned."),
    change: str = typer.Option(
        ..., "--change", help="What was changed, e.g. 'user.facts_per_reply 1 -> 3', or the diagnosis for verdict n/a."
    ),
    verdict: str = typer.Option(..., "--verdict", help="improved | harmed | inconclusive | n/a."),
    knob: list[str] = typer.Option(
        [], "--knob", help="Knob or rule file involved (repeatable): env.max_steps, rules.users.colbench."
    ),
    run: Optional[str] = typer.Option(None, "--run", help="Run id the evidence comes from."),
    steps: Optional[str] = typer.Option(None, "--steps", help="Steps covered: FIRST:LAST or one step."),
    predicted: str = typer.Option(
        "", "--predicted", help="Effect predicted before the change (metric, direction, size, lag)."
    ),
    measured: str = typer.Option(
        "",
        "--measured",
        help="Effect measured after the lag (eau effect: difference, noise floor); required unless --verdict n/a.",
    ),
    tag: list[str] = typer.Option([], "--tag", help="Keyword (repeatable or comma-separated): deadlock, colbench."),
    event: list[str] = typer.Option([], "--event", help="Knob event id k-... the finding is about (repeatable)."),
    body: Optional[str] = typer.Option(None, "--body", help="Markdown body (evidence, reasoning); '-' reads stdin."),
    author: str = typer.Option("agent", "--author", help="agent | human."),
    source: str = typer.Option("", "--source", help="Where it comes from when not a run of this harness."),
    pool_dir: Optional[Path] = PoolDirOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Record a finding with the next free id (F-0001, ...) and regenerate INDEX.md."""
    pool = _pool(pool_dir, as_json, must_exist=False)
    text = sys.stdin.read() if body == "-" else (body or "")
    try:
        f = Finding(
            id="F-0000",
            title=title,
            verdict=verdict,
            change=change,
            run=run or None,
            steps=parse_steps(steps, "--steps"),
            knobs=list(dict.fromkeys(knob)),
            predicted=predicted.strip(),
            measured=measured.strip(),
            tags=[t.strip().lower() for v in tag for t in v.split(",") if t.strip()],
            events=list(dict.fromkeys(event)),
            author=author,
            source=source.strip(),
            body=text.strip("\n"),
        )
        f = pool.add(f)
    except FindingError as exc:
        fail(str(exc).replace("new finding: ", ""), EXIT_ERROR, as_json)
    if as_json:
        emit_json({"ok": True, "finding": f.to_json(body=False), "index": str(pool.index_path)})
    else:
        typer.echo(f"{f.id} recorded: {f.path}")


@app.command("list")
def list_cmd(
    status: str = StatusOpt,
    tag: list[str] = typer.Option([], "--tag", help="Only findings with this tag (repeatable: all must match)."),
    knob: Optional[str] = typer.Option(
        None,
        "--knob",
        help="Only findings about this knob: user.max_reveals, an area prefix 'user.', or a bare name max_reveals.",
    ),
    verdict: Optional[str] = typer.Option(None, "--verdict", help="improved | harmed | inconclusive | n/a."),
    run: Optional[str] = typer.Option(None, "--run", help="Only findings from this run."),
    limit: int = LimitOpt,
    pool_dir: Optional[Path] = PoolDirOpt,
    as_json: bool = JsonOpt,
) -> None:
    """List findings (newest first) with filters; retracted ones only with --status retracted|all."""
    st = _check_status(status, as_json)
    if verdict is not None and verdict not in VERDICTS:
        fail(f"--verdict {verdict!r} is not allowed; use one of {', '.join(VERDICTS)}", EXIT_USAGE, as_json)
    pool = _pool(pool_dir, as_json)
    contents = pool.read()
    _warn_problems(contents.problems)
    sel = filter_findings(contents.findings, st, tag, knob, verdict, run)[::-1]
    total = len(sel)
    shown = sel[:limit] if limit > 0 else sel
    if as_json:
        emit_json(
            {
                "findings": [f.to_json(body=False) for f in shown],
                "total": total,
                "shown": len(shown),
                "pool": str(pool.root),
                "problems": contents.problems,
            }
        )
        return
    for f in shown:
        typer.echo(_short(f))
    hidden_retracted = sum(1 for f in contents.findings if f.status == "retracted") if st == "active" else 0
    notes = []
    if total > len(shown):
        notes.append(f"{total - len(shown)} more; --limit 0 shows all")
    if hidden_retracted:
        notes.append(f"{hidden_retracted} retracted not shown; --status all")
    if not shown:
        typer.echo("no findings match")
    if notes:
        typer.echo("(" + "; ".join(notes) + ")")


@app.command("search")
def search_cmd(
    query: str = typer.Argument(..., help="Words to look for: symptoms, knob names, gyms."),
    status: str = StatusOpt,
    limit: int = typer.Option(10, "--limit", help="Most findings to show (0: all)."),
    pool_dir: Optional[Path] = PoolDirOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Search findings, best first, by a keyword score.

    Per query term: title +3, tag +3, knob name +3, change/predicted/measured +2, +1 per body
    occurrence (at most 3); +2 once when the whole query is in the title. Ties: newer first.
    """
    st = _check_status(status, as_json)
    if not query_terms(query):
        fail(f"query {query!r} has no searchable words (two or more letters, not a stop word)", EXIT_USAGE, as_json)
    pool = _pool(pool_dir, as_json)
    contents = pool.read()
    _warn_problems(contents.problems)
    hits = rank(filter_findings(contents.findings, st), query)
    shown = hits[:limit] if limit > 0 else hits
    if as_json:
        emit_json(
            {
                "query": query,
                "terms": query_terms(query),
                "total": len(hits),
                "results": [{"score": h.score, "matched": h.matched, **h.finding.to_json(body=False)} for h in shown],
                "pool": str(pool.root),
                "problems": contents.problems,
            }
        )
        return
    if not shown:
        typer.echo(f"no findings match {query!r}")
    for h in shown:
        typer.echo(f"{h.score:3d}  {_short(h.finding)}")


@app.command("show")
def show_cmd(
    fid: str = typer.Argument(..., help="Finding id, e.g. F-0003."),
    pool_dir: Optional[Path] = PoolDirOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Print one finding (front matter and body)."""
    pool = _pool(pool_dir, as_json)
    try:
        f = pool.get(fid)
    except FindingNotFound as exc:
        fail(str(exc), EXIT_NOT_FOUND, as_json)
    except FindingError as exc:
        fail(str(exc), EXIT_INVALID, as_json)
    if as_json:
        emit_json(f.to_json())
    else:
        typer.echo(f.render().rstrip("\n"))


@app.command("retract")
def retract_cmd(
    fid: str = typer.Argument(..., help="Finding id, e.g. F-0003."),
    reason: str = typer.Option(..., "--reason", help="Why the finding no longer holds (kept in the file)."),
    pool_dir: Optional[Path] = PoolDirOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Mark a finding retracted (the file stays, with the reason) and regenerate INDEX.md."""
    pool = _pool(pool_dir, as_json)
    try:
        f = pool.retract(fid, reason)
    except FindingNotFound as exc:
        fail(str(exc), EXIT_NOT_FOUND, as_json)
    except FindingError as exc:
        fail(str(exc), EXIT_ERROR, as_json)
    if as_json:
        emit_json({"ok": True, "finding": f.to_json(body=False)})
    else:
        typer.echo(f"{f.id} retracted: {f.path}")


@app.command("index")
def index_cmd(
    check: bool = typer.Option(False, "--check", help="Only check that INDEX.md is current (exit 4 if not)."),
    pool_dir: Optional[Path] = PoolDirOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Regenerate INDEX.md from the finding files (after a hand edit); exit 4 when a file is invalid."""
    pool = _pool(pool_dir, as_json)
    if check:
        current = pool.index_is_current()
        problems = pool.read().problems
        if as_json:
            emit_json({"ok": current and not problems, "current": current, "problems": problems})
        elif current and not problems:
            typer.echo(f"ok: {pool.index_path} is current")
        else:
            _warn_problems(problems)
            if not current:
                err(f"{pool.index_path} is out of date; run `eau finding index`")
        if not current or problems:
            raise typer.Exit(EXIT_INVALID)
        return
    contents = pool.write_index()
    if as_json:
        emit_json(
            {
                "ok": not contents.problems,
                "index": str(pool.index_path),
                "findings": len(contents.findings),
                "problems": contents.problems,
            }
        )
    else:
        _warn_problems(contents.problems)
        typer.echo(f"{pool.index_path}: {len(contents.findings)} findings")
    if contents.problems:
        raise typer.Exit(EXIT_INVALID)
