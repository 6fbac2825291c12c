"""Run analysis commands: ``eau status``, ``eau sample``, ``eau diagnose``, ``eau effect``, ``eau gate``.

All read a run folder (``--run`` id or folder; default: the newest run in ``--runs-dir``), print
readable text or one JSON document with ``--json``, and bound their output with flags. Exit codes
(harness/cli/common.py): 0 ok, 1 error, 2 usage, 3 a gate candidate refused, 5 run/event/file not found.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

from harness.analysis.diagnose import UsageError, catalogue, diagnose, parse_thresholds
from harness.analysis.effect import EffectError, effect
from harness.analysis.gate import GateUsageError, gate
from harness.analysis.run_data import RunNotFound, load_run
from harness.analysis.sample import clip, parse_steps, render_episode, select
from harness.analysis.status import render_status, status_doc
from harness.cli.common import (
    EXIT_ERROR,
    EXIT_NOT_FOUND,
    EXIT_REFUSED,
    EXIT_USAGE,
    JsonOpt,
    KnobsDirOpt,
    ReadOnlyKnobsDirOpt,
    RunsDirOpt,
    check_knobs_dir,
    emit_json,
    fail,
    knobs_dir,
    runs_dir,
)
from harness.knobs.store import KnobError
from harness.stores import open_store

RunOpt = typer.Option(None, "--run", help="Run id (under --runs-dir) or run folder; default: the newest run.")
WindowOpt = typer.Option(10, "--window", min=1, help="Recent steps to analyse.")


def register(app: typer.Typer) -> None:
    app.command("status")(status_cmd)
    app.command("sample")(sample_cmd)
    app.command("diagnose")(diagnose_cmd)
    app.command("effect")(effect_cmd)
    app.command("gate")(gate_cmd)


def _load(rdir: Optional[Path], run: Optional[str], as_json: bool, kdir: Optional[Path] = None) -> Any:
    check_knobs_dir(kdir, as_json)
    try:
        return load_run(runs_dir(rdir, as_json), run)
    except RunNotFound as exc:
        fail(str(exc), EXIT_NOT_FOUND, as_json)


def _compact(obj: Any, limit: int) -> str:
    text = json.dumps(obj, default=str, ensure_ascii=False, separators=(", ", ": "))
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ---------------------------------------------------------------------------- status
def status_cmd(
    as_json: bool = JsonOpt,
    runs_dir_: Optional[Path] = RunsDirOpt,
    run: Optional[str] = RunOpt,
    window: int = WindowOpt,
    spark: int = typer.Option(40, "--spark", min=5, max=200, help="Steps shown in each sparkline."),
    events: int = typer.Option(5, "--events", min=0, max=100, help="Last knob events shown."),
    alerts: int = typer.Option(5, "--alerts", min=0, max=100, help="Open alerts shown."),
    detectors: bool = typer.Option(
        True, "--detectors/--no-detectors", help="Run the detectors over the window for open alerts."
    ),
    width: int = typer.Option(120, "--width", min=60, max=400, help="Screen width of the text view."),
    knobs_dir_: Optional[Path] = ReadOnlyKnobsDirOpt,
) -> None:
    """The state of a run on one screen: step, trends with sparklines, per gym and arm, knob events, alerts."""
    data = _load(runs_dir_, run, as_json, knobs_dir_)
    doc = status_doc(data, spark=spark, window=window, events=events, alerts=alerts, detectors=detectors)
    if as_json:
        emit_json(doc)
    else:
        typer.echo(render_status(doc, width=width).rstrip())


# ---------------------------------------------------------------------------- diagnose
def diagnose_cmd(
    as_json: bool = JsonOpt,
    runs_dir_: Optional[Path] = RunsDirOpt,
    run: Optional[str] = RunOpt,
    window: int = WindowOpt,
    until: Optional[int] = typer.Option(None, "--until", help="Last step of the window (default: latest)."),
    detector: Optional[list[str]] = typer.Option(None, "--detector", help="Run only this detector (repeatable)."),
    threshold: Optional[list[str]] = typer.Option(
        None, "--threshold", help="Override a threshold: NAME.KEY=VALUE (repeatable)."
    ),
    list_: bool = typer.Option(False, "--list", help="List detectors and their thresholds, then exit."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show evidence of unflagged detectors too."),
    evidence_chars: int = typer.Option(
        600, "--evidence-chars", min=80, max=20000, help="Characters of evidence metrics per finding in text output."
    ),
    knobs_dir_: Optional[Path] = ReadOnlyKnobsDirOpt,
) -> None:
    """Detectors over recent steps, each with evidence (metric values, example episode ids) and a suggestion."""
    if list_:
        cat = catalogue()
        if as_json:
            emit_json({"detectors": cat})
            return
        for d in cat:
            first = " ".join(d["doc"].split()).split(". ")[0]
            typer.echo(f"{d['name']} ({d['component']}): {first[:200]}")
            for k, t in d["thresholds"].items():
                typer.echo(f"    {d['name']}.{k} = {t['default']:g}  {t['doc']}")
        return
    data = _load(runs_dir_, run, as_json, knobs_dir_)
    try:
        th = parse_thresholds(threshold or [], detector)
        doc = diagnose(data, window=window, until=until, names=detector or None, thresholds=th)
    except UsageError as exc:
        fail(str(exc), EXIT_USAGE, as_json)
    if as_json:
        emit_json(doc)
        return
    w = doc["window"]
    typer.echo(
        f"run {doc['run']}: steps {w['first']}..{w['last']} ({w['steps']} steps, {doc['episodes']} episodes); "
        f"flagged: {', '.join(doc['flagged']) or 'none'}"
    )
    for f in doc["findings"]:
        if f["flagged"]:
            typer.echo(f"\nFLAGGED {f['name']} [{f['severity']}, {f['component']}]: {f['summary']}")
            typer.echo(f"  evidence: {_compact(f['evidence']['metrics'], evidence_chars)}")
            if f["evidence"]["episodes"]:
                typer.echo(
                    f"  episodes: {', '.join(f['evidence']['episodes'])} "
                    f"({f['evidence']['matching_episodes']} matching; eau sample --flag {f['name']})"
                )
            typer.echo(f"  look at: {f['suggestion']}")
        elif f.get("skipped"):
            typer.echo(f"skipped {f['name']}: {f['skipped']}")
        else:
            typer.echo(f"ok      {f['name']}: {f['summary']}")
            if verbose:
                typer.echo(f"  evidence: {_compact(f['evidence']['metrics'], evidence_chars)}")


# ---------------------------------------------------------------------------- sample
def sample_cmd(
    as_json: bool = JsonOpt,
    runs_dir_: Optional[Path] = RunsDirOpt,
    run: Optional[str] = RunOpt,
    steps: Optional[str] = typer.Option(
        None, "--steps", help="Step range A:B (inclusive), A:, :B or N; default: the last --window steps."
    ),
    window: int = WindowOpt,
    gym: Optional[str] = typer.Option(None, "--gym", help="Only this gym."),
    arm: Optional[str] = typer.Option(None, "--arm", help="Only this user arm: symbolic | llm."),
    outcome: Optional[str] = typer.Option(None, "--outcome", help="success | failure | deadlock."),
    flag: Optional[str] = typer.Option(None, "--flag", help="Only episodes a detector attributes its problem to."),
    limit: int = typer.Option(3, "--limit", help="Episodes shown (1..100)."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Random sample with this seed (default: newest first)."),
    max_chars: int = typer.Option(
        1500, "--max-chars", min=40, max=100000, help="Longest text field shown; longer ones are clipped with a marker."
    ),
    knobs_dir_: Optional[Path] = ReadOnlyKnobsDirOpt,
) -> None:
    """Trajectories by step range, gym, arm, outcome or detector flag, rendered readably."""
    data = _load(runs_dir_, run, as_json, knobs_dir_)
    try:
        chosen_steps = parse_steps(steps, data, window)
        eps, summary = select(
            data, steps=chosen_steps, gym=gym, arm=arm, outcome_=outcome, flag=flag, limit=limit, seed=seed
        )
    except UsageError as exc:
        fail(str(exc), EXIT_USAGE, as_json)
    if as_json:
        emit_json({"run": data.run_id, **summary, "episodes": [clip(e, max_chars) for e in eps]})
        return
    span = f"steps {summary['steps'][0]}..{summary['steps'][1]}" if summary["steps"] else "no recorded steps"
    typer.echo(
        f"run {data.run_id}: {span}; {summary['matching']} matching episode(s), showing {summary['shown']}"
        + (f"; {summary['flag_note']}" if summary.get("flag_note") else "")
    )
    for e in eps:
        typer.echo("")
        typer.echo(render_episode(e, max_chars))


# ---------------------------------------------------------------------------- effect
def effect_cmd(
    event: Optional[str] = typer.Option(None, "--event", help="Knob event id (k-...) of the run."),
    at_step: Optional[int] = typer.Option(None, "--at-step", help="Compare around this step instead of an event."),
    metric: Optional[str] = typer.Option(
        None,
        "--metric",
        help="Metric of metrics.jsonl (default success_rate; gym/<g>/success_rate for a per-gym event).",
    ),
    lag: int = typer.Option(0, "--lag", min=0, help="Steps after step_effective before the post-window starts."),
    window: int = WindowOpt,
    direction: Optional[str] = typer.Option(
        None, "--direction", help="higher | lower is better (default: known per metric)."
    ),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
    as_json: bool = JsonOpt,
    runs_dir_: Optional[Path] = RunsDirOpt,
    run: Optional[str] = RunOpt,
    knobs_dir_: Optional[Path] = ReadOnlyKnobsDirOpt,
) -> None:
    """Before/after comparison around a knob event, with a bootstrap noise floor and a lag."""
    data = _load(runs_dir_, run, as_json, knobs_dir_)
    try:
        doc = effect(
            data, event_id=event, at_step=at_step, metric=metric, lag=lag, window=window, direction=direction, seed=seed
        )
    except KeyError as exc:
        fail(str(exc).strip("'\""), EXIT_NOT_FOUND, as_json)
    except EffectError as exc:
        fail(str(exc), EXIT_ERROR if event else EXIT_USAGE, as_json)
    if as_json:
        emit_json(doc)
        return
    ev = doc["event"]
    what = (
        f"event {ev['id']} {ev['knob']}{'[' + ev['gym'] + ']' if ev.get('gym') else ''} {json.dumps(ev['old'])[:40]} -> "
        f"{json.dumps(ev['new'])[:40]} (effective step {ev['step_effective']})"
        if ev
        else f"step {doc['at_step']}"
    )
    better = f"{doc['direction']} is better" if doc["direction"] != "none" else "no better direction"
    typer.echo(f"run {doc['run']}: {what}; metric {doc['metric']} ({better}), lag {doc['lag']}, window {doc['window']}")
    pre, post = doc["pre"], doc["post"]
    fmt = lambda v: "-" if v is None else f"{v:.4f}"  # noqa: E731
    typer.echo(f"  before: {fmt(pre['mean'])} over {pre['n']} steps {pre['steps'][:1] + pre['steps'][-1:]}")
    typer.echo(f"  after:  {fmt(post['mean'])} over {post['n']} steps {post['steps'][:1] + post['steps'][-1:]}")
    if doc["state"] == "ok":
        typer.echo(
            f"  difference {doc['difference']:+.4f}, noise floor {doc['noise_floor']:.4f} "
            f"(bootstrap of the before-window, {doc['bootstrap']['iterations']} draws, seed {doc['bootstrap']['seed']})"
        )
    typer.echo(f"verdict: {doc['verdict'].upper()}: {doc['explanation']}")
    for o in doc["other_events_in_windows"][:3]:
        typer.echo(f"  note: {o['id']} {o['knob']} also took effect at step {o['step_effective']}")


# ---------------------------------------------------------------------------- gate
def _gate_knobs_dir(value: Optional[Path], data: Any) -> Path:
    if value is not None:
        return Path(value)
    if data is not None:
        kd = data.status.get("knobs_dir")
        if kd and (Path(kd) / "schema").is_dir():
            return Path(kd)
        if (data.dir / "knobs" / "schema").is_dir():
            return data.dir / "knobs"
    return knobs_dir(None)


def gate_cmd(
    files: list[str] = typer.Argument(
        ...,
        help="Candidate files: env.yaml, user.yaml, reward.yaml, agent.yaml, "
        ".../rules/users/<gym>.yaml, .../rules/rewards/<name>.yaml, a plug-in FILE=plugins/<name>.py, "
        "or FILE=TARGET.",
    ),
    steps: int = typer.Option(5, "--steps", min=0, max=1000, help="Recent recorded steps to replay."),
    time_budget: float = typer.Option(30.0, "--time-budget", min=0.0, help="Seconds the replays may take."),
    as_json: bool = JsonOpt,
    runs_dir_: Optional[Path] = RunsDirOpt,
    run: Optional[str] = RunOpt,
    knobs_dir_: Optional[Path] = KnobsDirOpt,
    no_run: bool = typer.Option(False, "--no-run", help="Validate against the knobs folder only (no run)."),
) -> None:
    """Validate candidate knob/rule files without applying them, and replay recent episodes through them."""
    data = None
    if not no_run:
        try:
            data = load_run(runs_dir(runs_dir_), run)
        except RunNotFound as exc:
            if run:
                fail(str(exc), EXIT_NOT_FOUND, as_json)
    kdir = _gate_knobs_dir(knobs_dir_, data)
    if not (kdir / "schema").is_dir():
        fail(f"{kdir} is not a knobs folder (no schema/ inside); pass --knobs-dir", EXIT_NOT_FOUND, as_json)
    try:
        store = open_store(kdir, events_path=None, run_gyms=data.gyms if data else None)
    except KnobError as exc:
        fail(f"the knobs folder in force is invalid: {exc}", EXIT_ERROR, as_json)
    try:
        doc = gate(data, store, files, steps=steps, time_budget_s=time_budget)
    except GateUsageError as exc:
        fail(str(exc), EXIT_USAGE, as_json)
    except FileNotFoundError as exc:
        fail(str(exc), EXIT_NOT_FOUND, as_json)
    if as_json:
        emit_json(doc)
    else:
        _print_gate(doc)
    if not doc["ok"]:
        raise typer.Exit(EXIT_REFUSED)


def _print_gate(doc: dict[str, Any]) -> None:
    typer.echo(f"gate against {'run ' + doc['run'] if doc['run'] else 'no run'} (knobs {doc['knobs_dir']}):")
    for c in doc["candidates"]:
        typer.echo(f"  {c['status'].upper():8} {c['file']} -> {c['target']}")
        for r in c["refusals"]:
            line = f":{r['line']}" if r.get("line") else ""
            typer.echo(f"      refused {r['knob']}{line} [{r['rule']}]: {r['message']}")
        for ch in c["changes"][:20]:
            gym = f"[{ch['gym']}]" if ch.get("gym") else ""
            typer.echo(
                f"      change  {ch['knob']}{gym}: {json.dumps(ch['old'])[:50]} -> {json.dumps(ch['new'])[:50]}"
                + (" (next run)" if ch["applies"] == "next_run" else "")
            )
            if ch.get("summary"):
                typer.echo(f"              {ch['summary']}")
    for r in doc["replays"]:
        done = f"{r['replayed']}/{r['episodes']} episodes in {r['elapsed_s']}s" + (
            "" if r["complete"] else " (time budget hit)"
        )
        if r["kind"] == "rewards":
            m = r["reward_mean"]
            typer.echo(f"  reward replay ({done}): mean reward {m['old']:+.4f} -> {m['new']:+.4f} ({m['delta']:+.4f})")
            for k, o in r["by_outcome"].items():
                typer.echo(f"      {k}: {o['old_mean']:+.4f} -> {o['new_mean']:+.4f} over {o['episodes']}")
            for name, v in r["rules"].items():
                if v["old_total"] != v["new_total"]:
                    typer.echo(f"      rule {name}: total {v['old_total']:+.3f} -> {v['new_total']:+.3f}")
            for mv in r["most_moved"][:3]:
                typer.echo(f"      moved most: {mv['episode_id']} {mv['old']:+.3f} -> {mv['new']:+.3f}")
        else:
            m = r["mean_per_episode"]
            typer.echo(
                f"  episode replay ({done}; {r['ran_out_of_recorded_turns']} ran out of recorded turns): "
                f"disclosures {m['disclosures']['old']:.2f} -> {m['disclosures']['new']:.2f}, facts revealed "
                f"{r['facts_revealed_per_episode']['old']:.2f} -> {r['facts_revealed_per_episode']['new']:.2f}, "
                f"secret leaks {m['secret_leak']['old']:.2f} -> {m['secret_leak']['new']:.2f}, over-disclosure "
                f"{m['overdisclosed']['old']:.2f} -> {m['overdisclosed']['new']:.2f}, reward "
                f"{m['reward']['old']:+.3f} -> {m['reward']['new']:+.3f}, success {m['success']['old']:.2f} -> "
                f"{m['success']['new']:.2f}, deadlocks {m['deadlock']['old']:.2f} -> {m['deadlock']['new']:.2f}"
            )
            if r["skipped"]:
                typer.echo(f"      not replayed: {_compact(r['skipped'], 200)}")
    for key in ("replays_note", "agent_note"):
        if doc.get(key):
            typer.echo(f"  note: {doc[key]}")
    typer.echo("all candidates pass" if doc["ok"] else "REFUSED: at least one candidate would be rejected (exit 3)")
