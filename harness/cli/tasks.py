"""``eau tasks check GYM``: every reference of a task set passes its own tests, deterministically.

Runs each reference on its test calls in the code sandbox twice (fresh processes) and reports per
task: passed, or why not (``harness.envs.colbench.taskcheck.REASONS``). ``turtle`` is checked
without the sandbox (``harness.envs.turtle.taskcheck``): each story's bottom must solve it, and the
stories left out for a broken surface are listed. Exit code 0 when every task passes,
``EXIT_INVALID`` (4) when any fails or the data file is malformed, ``EXIT_NOT_FOUND`` (5) for an
unknown gym. Gyms whose tasks are not programs have nothing to check (exit 0, said so).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

import typer

from harness.cli.common import (
    EXIT_INVALID,
    EXIT_NOT_FOUND,
    EXIT_USAGE,
    JsonOpt,
    KnobsDirOpt,
    RunsDirOpt,
    emit_json,
    err,
    fail,
)
from harness.envs.colbench.data import ColbenchDataError, load_colbench
from harness.envs.colbench.taskcheck import CheckReport, NoCodeReferences, items_for_gym, limits_for, run_check
from harness.envs.tau2.domain import Tau2Unavailable
from harness.envs.turtle.data import StoryDataError
from harness.envs.turtle.taskcheck import ORACLE_MIN, check_turtle
from harness.io.yamlio import atomic_write_text
from harness.sandbox import SandboxError, isolation_report

app = typer.Typer(help="Check task sets (references against their own tests, in the sandbox).", no_args_is_help=True)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="tasks")


def _check_tau(gym: str, limit: int | None, verbose: bool, as_json: bool) -> None:
    """The τ² (and tau) task check: gold actions replay, the gold trajectory scores 1.0."""
    try:
        if gym == "tau":
            from harness.envs.tau.taskcheck import run_tau_check as run
        else:
            from harness.envs.tau2.taskcheck import run_tau2_check as run
    except Tau2Unavailable as exc:
        fail(str(exc), 1, as_json)

    def progress(res) -> None:
        if not res.passed:
            err(f"  {res.domain} {res.task_id} ({res.split}): {res.reason_kind}: {res.reason}")
        elif verbose:
            err(f"  {res.domain} {res.task_id} ({res.split}): passed on {', '.join(res.scored_on)}")

    try:
        doc = run(gym, limit=limit, progress=None if as_json else progress)
    except KeyError as exc:
        fail(str(exc.args[0]) if exc.args else str(exc), EXIT_NOT_FOUND, as_json)
    except Tau2Unavailable as exc:
        fail(str(exc), 1, as_json)
    if as_json:
        emit_json(doc)
    else:
        per = ", ".join(f"{d} {v['passed']}/{v['total']}" for d, v in doc["per_domain"].items())
        print(
            f"{gym} ({doc['source']}): {doc['passed']}/{doc['total']} tasks replay their gold actions and score 1.0 "
            f"on every scored component ({per}) in {doc['seconds']:.1f}s; the gold trajectory scores 1.0 on "
            f"{doc['gold_scores_1']}/{doc['total']}; {doc['unscored_tasks']} task(s) have a basis component left "
            "unscored (no LLM judge)."
        )
        if doc["failures"]:
            print("failures by reason: " + ", ".join(f"{k} {v}" for k, v in sorted(doc["reasons"].items())))
            for r in doc["failures"][:50]:
                print(f"  {r['domain']} {r['task_id']} ({r['split']}): {r['reason_kind']}: {r['reason']}")
    sys.stdout.flush()
    if doc["failures"]:
        raise typer.Exit(EXIT_INVALID)


def _default_workers() -> int:
    # Each worker keeps one sandbox process busy; more than the cores only adds contention.
    return max(1, min(4, os.cpu_count() or 1))


@app.command("check")
def check(
    gym: str = typer.Argument(..., help="Gym whose task set to check (e.g. colbench)."),
    data: Optional[Path] = typer.Option(
        None,
        "--data",
        help="A task data file (colbench: ColBench JSONL). Default: the gym's built-in procedural tasks.",
    ),
    as_json: bool = JsonOpt,
    limit: Optional[int] = typer.Option(
        None, "--limit", min=1, help="Check only the first N tasks (procedural default: 200)."
    ),
    workers: int = typer.Option(_default_workers(), "--workers", min=1, max=64, help="Sandbox processes in parallel."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Print every task's result, not only failures."),
    keep_out: Optional[Path] = typer.Option(
        None,
        "--keep-out",
        help="colbench --data only: write the checked records that pass and that no constant answer solves "
        "to this JSONL file (their lines as they are, in file order); the report says how many were kept.",
    ),
    knobs_dir: Optional[Path] = KnobsDirOpt,
    runs_dir: Optional[Path] = RunsDirOpt,
) -> None:
    """Run every reference against its own tests twice in the sandbox and report failures by reason
    (turtle: every story's own bottom solves it, and broken stories are listed as excluded; τ² gyms
    (tau2, tau2_<domain>, tau): replay every task's gold actions and score the gold trajectory, every
    scored component must be 1.0)."""
    if gym == "tau2" or gym.startswith("tau2_") or gym == "tau":
        _check_tau(gym, limit, verbose, as_json)
        return
    if gym == "turtle":
        if data is not None:
            fail(
                "turtle: --data is not supported; the check runs on the stories shipped with the package",
                EXIT_USAGE,
                as_json,
            )
        _check_turtle(as_json, limit)
        return

    if data is not None and not data.exists():
        fail(f"--data {data}: no such file", EXIT_USAGE, as_json)
    if keep_out is not None and (data is None or gym != "colbench"):
        fail("--keep-out writes a cleaned copy of a colbench --data file; give both", EXIT_USAGE, as_json)
    if keep_out is not None and keep_out.resolve() == data.resolve():
        fail(f"--keep-out {keep_out}: the data file itself; name another file", EXIT_USAGE, as_json)
    try:
        items = items_for_gym(gym, str(data) if data is not None else None, limit)
        limits = limits_for(gym, str(data) if data is not None else None)
    except KeyError as exc:
        fail(str(exc.args[0]) if exc.args else str(exc), EXIT_NOT_FOUND, as_json)
    except NoCodeReferences as exc:
        if as_json:
            emit_json(
                {
                    "gym": gym,
                    "source": None,
                    "total": 0,
                    "passed": 0,
                    "failed": 0,
                    "failures": [],
                    "reasons": {},
                    "note": str(exc),
                }
            )
        else:
            print(f"{exc}; nothing to check.")
        return
    except ColbenchDataError as exc:
        fail(str(exc), EXIT_INVALID, as_json)
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE, as_json)

    def progress(res) -> None:  # human mode: failures (and with -v everything) as they come
        if not res.passed:
            err(f"  #{res.index} {res.task_id}: {res.reason_kind}: {res.reason}")
        elif verbose:
            err(f"  #{res.index} {res.task_id}: passed ({res.seconds:.2f}s)")

    try:
        report = run_check(items, limits, workers=workers, progress=None if as_json else progress)
    except SandboxError as exc:
        fail(f"the sandbox could not run: {exc}", 1, as_json)
    source = str(data) if data is not None else "procedural"
    doc = {
        "gym": gym,
        "source": source,
        **report.to_dict(),
        "workers": workers,
        "sandbox": isolation_report(limits).get("mode"),
    }
    if keep_out is not None:
        try:
            doc["kept"] = {"file": str(keep_out), "records": write_kept(data, report, keep_out)}
        except OSError as exc:
            fail(f"--keep-out {keep_out}: cannot write ({exc.strerror or exc})", 1, as_json)
    if as_json:
        emit_json(doc)
    else:
        print(
            f"{gym} ({source}): {report.passed}/{report.total} references pass their tests (two runs each) "
            f"in {report.seconds:.1f}s with {workers} worker(s), sandbox {doc['sandbox']}."
        )
        if report.failures:
            print("failures by reason: " + ", ".join(f"{k} {v}" for k, v in sorted(report.reason_counts().items())))
            for r in report.failures[:50]:
                print(f"  #{r.index} {r.task_id}: {r.reason_kind}: {r.reason}")
        if keep_out is not None:
            print(f"kept {doc['kept']['records']} of {report.total} checked records in {keep_out}")
        const = doc["constant_answer"]
        if const["mean_share"] is not None:
            print(
                f"a constant answer (one value from every function) passes {const['mean_share']:.0%} of a task's "
                f"tests on average, half or more on {const['half_or_more']} task(s), all on {len(const['solved'])}:"
                + "".join(f"\n  #{t['index']} {t['task_id']}: returns {t['value']}" for t in const["solved"][:20])
                + ("\n  ..." if len(const["solved"]) > 20 else "")
            )
    sys.stdout.flush()
    if report.failures:
        raise typer.Exit(EXIT_INVALID)


def write_kept(data: Path, report: CheckReport, out: Path) -> int:
    """Write the lines of ``data``'s checked records that passed and that no constant answer
    solves to ``out`` (atomically); how many were written."""
    solved = {t["index"] for t in report.constant_answer()["solved"]}
    keep = {r.index for r in report.results if r.passed and r.index not in solved}
    lines = data.read_text(encoding="utf-8").splitlines()
    kept = [lines[rec.line - 1] for rec in load_colbench(data) if rec.index in keep]
    atomic_write_text(out, "".join(line + "\n" for line in kept))
    return len(kept)


def _check_turtle(as_json: bool, limit: int | None) -> None:
    """``eau tasks check turtle``: see ``harness.envs.turtle.taskcheck``."""
    try:
        report = check_turtle(limit)
    except StoryDataError as exc:
        fail(str(exc), EXIT_INVALID, as_json)
    if as_json:
        emit_json({"gym": "turtle", "source": "package", **report.to_dict()})
    else:
        print(
            f"turtle: {report.passed}/{report.playable} playable stories pass (their bottom scores >= {ORACLE_MIN}, "
            f"their surface 0); {len(report.excluded)} of {report.total} excluded; "
            f"{report.fallback_criteria} criteria scored on the bottom's most specific words; "
            f"playable per split: {', '.join(f'{k} {v}' for k, v in report.splits.items())}."
        )
        for sid, why in report.excluded.items():
            print(f"  excluded story {sid}: {why}")
        for f in report.failures[:50]:
            print(f"  story {f['story']} ({f['split']}): {f['reason']}")
    sys.stdout.flush()
    if report.failures:
        raise typer.Exit(EXIT_INVALID)
