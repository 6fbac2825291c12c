"""``eau train``: run PPO from a preset (``--preset``), a config file and ``--set`` overrides; resume a
run (``--resume RUN``) or evolve a new one from a finished run (``--from RUN``)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Optional

import typer

from harness.analysis.plot import plot_runs
from harness.cli.common import (
    EXIT_ERROR,
    EXIT_INVALID,
    EXIT_NOT_FOUND,
    EXIT_USAGE,
    JsonOpt,
    KnobsDirOpt,
    RunsDirOpt,
    emit_json,
    fail,
    knobs_dir,
    runs_dir,
)
from harness.eval.policy import INIT
from harness.eval.protocol import ProtocolError
from harness.eval.results import eval_root
from harness.io import jsonl, yamlio
from harness.knobs.store import KnobError, UnknownKnob
from harness.ppo.config import (
    build_config,
    check_sft_sizes,
    default_run_id,
    help_epilog,
    load_config_file,
    load_preset,
    parse_override,
    preset_names,
    resume_config,
)
from harness.ppo.specs import from_mapping
from harness.runs.names import check_run_id
from harness.runs.progress import Progress
from harness.stores import open_store


def register(app: typer.Typer) -> None:
    app.command("train", epilog=help_epilog())(train_cmd)
    app.command("sft")(sft_cmd)


def train_cmd(
    preset: str = typer.Option(
        "tiny",
        "--preset",
        help="One of: " + ", ".join(preset_names()) + " (listed below). The README main job is cpu-small.",
    ),
    config: Optional[Path] = typer.Option(None, "--config", help="YAML file of TrainConfig fields (over the preset)."),
    set_: list[str] = typer.Option([], "--set", help="Override a field: --set steps=50 --set policy.lora.r=16."),
    steps: Optional[int] = typer.Option(None, "--steps", help="Shorthand for --set steps=N."),
    run_id: Optional[str] = typer.Option(None, "--run-id", help="Run folder name (default <preset>-<time>)."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Shorthand for --set seed=N."),
    resume: Optional[str] = typer.Option(None, "--resume", help="Continue RUN from its latest checkpoint."),
    from_run: Optional[str] = typer.Option(None, "--from", help="Start a new run evolved from RUN (current knobs)."),
    reason: Optional[str] = typer.Option(None, "--reason", help="Why this run was started (with --from)."),
    from_checkpoint: bool = typer.Option(
        False, "--from-checkpoint", help="With --from: start from RUN's latest policy."
    ),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar (log lines go to stderr)."),
    as_json: bool = JsonOpt,
    knobs_dir_: Optional[Path] = KnobsDirOpt,
    runs_dir_: Optional[Path] = RunsDirOpt,
) -> None:
    """Train with PPO. Writes runs/<run_id>/ (metrics.jsonl, trajectories/, log.txt, checkpoints/...)."""
    _check_options(resume, from_run, run_id, reason, from_checkpoint, as_json)  # before torch is imported
    from harness.ppo import checkpoint
    from harness.ppo.trainer import Trainer

    kdir, rdir = knobs_dir(knobs_dir_, as_json), runs_dir(runs_dir_, as_json)
    overrides = list(set_)
    if steps is not None:
        overrides.append(f"steps={steps}")
    if seed is not None:
        overrides.append(f"seed={seed}")
    try:
        if resume:
            run_dir = rdir / resume
            if not (run_dir / "config.yaml").exists():
                fail(f"no run {resume!r} with a config.yaml in {rdir}", EXIT_NOT_FOUND, as_json)
            cfg = resume_config(run_dir)
            for o in overrides:  # only the step budget may grow on resume
                key, _, val = o.partition("=")
                if key != "steps":
                    fail(f"--resume keeps the run's config; only --steps can change (got {key})", EXIT_ERROR, as_json)
                cfg.steps = _parse(["steps=" + val])[0][1]
            cfg.validate()  # the new step budget within its limits
        else:
            if from_run:
                parent = rdir / from_run
                if not (parent / "config.yaml").exists():
                    fail(f"no run {from_run!r} in {rdir}", EXIT_NOT_FOUND, as_json)
                pcfg = resume_config(parent)
                base = {
                    k: v
                    for k, v in pcfg.to_dict().items()
                    if k not in ("run_id", "parent", "parent_reason", "lineage", "init_checkpoint")
                }
                base["parent"], base["parent_reason"] = from_run, reason or "evolved run"
                base["lineage"] = list(pcfg.lineage) + [from_run]
                if from_checkpoint:
                    ck = checkpoint.latest(parent)
                    if ck is None:
                        fail(f"run {from_run!r} has no checkpoint to start from", EXIT_NOT_FOUND, as_json)
                    base["init_checkpoint"] = str(ck.resolve())  # absolute: valid from any working folder
                # the new run's knobs folder is made from the parent's as it is now (harness/ppo/run_knobs.py);
                # its config records the values that folder holds for the knobs the parent's config set
                base["agent_knobs"], base["env_knobs"] = _folder_values(parent, pcfg)
                # precedence: parent config < --config FILE < --set (as preset < file < --set without --from)
                cfg = build_config(pcfg.preset, None, {**base, **_config_file(config), **dict(_parse(overrides))})
            else:
                cfg = build_config(preset, config, overrides)
            if run_id:
                cfg.run_id = run_id
                cfg.validate()
    except ValueError as exc:
        fail(str(exc), EXIT_ERROR, as_json)
    if no_progress:
        cfg.progress = False

    progress = Progress(enabled=cfg.progress)
    echo = not progress.on_terminal  # log lines on stderr too when no live display is shown
    protocol = None
    if cfg.evaluation:
        from harness.eval.training import load_run_protocol

        try:
            protocol = load_run_protocol(cfg.evaluation)  # before any model is loaded: a bad file fails fast
        except ProtocolError as exc:
            fail(f"evaluation.protocol: {exc}", EXIT_INVALID, as_json)
    try:
        trainer = Trainer(cfg, rdir, kdir, resume=bool(resume), echo=echo, progress=progress)
    except KnobError as exc:
        progress.close()
        fail(str(exc), EXIT_INVALID, as_json, problems=exc.problems)
    except UnknownKnob as exc:  # a name in agent_knobs / env_knobs (--set agent_knobs.X=...)
        progress.close()
        fail(f"agent_knobs/env_knobs: {exc}", EXIT_NOT_FOUND, as_json)
    except (ValueError, FileExistsError) as exc:
        progress.close()
        fail(str(exc), EXIT_ERROR, as_json)
    evaluation = None
    with trainer.session():
        before = _evaluate(trainer, protocol, progress, before=True) if protocol else None
        trainer.train()
        if protocol and not trainer.stop_requested:
            after = _evaluate(trainer, protocol, progress, before=False)
            if before is not None and after is not None:
                from harness.eval.training import compare

                evaluation = compare(before, after)
    progress.close()
    plot = _plot(trainer) if trainer.dist.main else None
    if as_json and trainer.dist.main:
        last = jsonl.tail(trainer.run_dir / "metrics.jsonl", 1)
        emit_json(
            {
                "ok": not trainer.guard.stopped,
                "run_id": trainer.run_id,
                "run_dir": str(trainer.run_dir),
                "steps": cfg.steps,
                "last_metrics": last[0] if last else None,
                "evaluation": evaluation,
                "plot": str(plot) if plot else None,
            }
        )
    elif trainer.dist.main:
        _print_summary(trainer, evaluation, plot)
    if trainer.dist.world > 1:
        _exit_after_process_group()
    if trainer.guard.stopped:  # the numeric guard stopped the run (harness/ppo/guards.py)
        raise typer.Exit(EXIT_ERROR)


def _check_options(resume, from_run, run_id, reason, from_checkpoint, as_json: bool) -> None:
    """Options that only mean something together, and run names that must be plain names."""
    if resume and from_run:
        fail("--resume continues a run and --from starts a new one; give one of them", EXIT_USAGE, as_json)
    if (reason is not None or from_checkpoint) and not from_run:
        fail("--reason and --from-checkpoint go with --from RUN", EXIT_USAGE, as_json)
    if resume and run_id:
        fail("--resume RUN continues RUN; --run-id names a new run", EXIT_USAGE, as_json)
    for option, value in (("--resume", resume), ("--from", from_run), ("--run-id", run_id)):
        if value is not None:
            try:
                check_run_id(value, option)
            except ValueError as exc:
                fail(str(exc), EXIT_USAGE, as_json)


def _evaluate(trainer, protocol, progress, before: bool):
    """The run's held-out evaluation before (the starting policy) or after training (the final
    checkpoint), on process 0; a stored result of the same checkpoint and protocol is reused (resume)."""
    from harness.eval.training import evaluate_in_memory, stored
    from harness.ppo import checkpoint

    ev = trainer.cfg.evaluation
    if not trainer.dist.main or not (ev.before if before else ev.after):
        return None
    if before:
        label, step = INIT, None
    else:
        ck = checkpoint.latest(trainer.run_dir)
        if ck is None:
            return None
        label, step = ck.name, checkpoint.read_state(ck)["step"]
    root = eval_root()
    old = stored(root, trainer.run_id, label, protocol)
    if old is not None:
        trainer.writer.log(f"held-out evaluation of {label} on {protocol.name}: already in {root / trainer.run_id}")
        return old
    from harness.eval.evaluate import turn_budget

    episodes, budget = sum(g.tasks for g in protocol.gyms) * protocol.trials, turn_budget(protocol)
    phase_name = "evaluating the starting policy" if before else "evaluating the final policy"
    trainer.writer.write_status(phase=phase_name, phase_done=0, phase_total=budget, phase_eta_s=None)
    trainer.writer.log(f"{phase_name} ({label}) on {protocol.name}: {episodes} held-out episodes")
    with progress.phase(phase_name, total=budget, unit="turns", eta_bound=True) as ph:

        def on_turn(done: int, n: int, turns: int) -> None:
            ph.set(turns, f"{done}/{n} episodes done")
            trainer.writer.write_status(phase_done=turns, phase_eta_s=ph.eta())

        res = evaluate_in_memory(
            trainer.policy,
            trainer.tokenizer,
            trainer.run_id,
            trainer.cfg.to_dict(),
            protocol,
            label,
            step,
            str(trainer.dist.device),
            root,
            progress=on_turn,
        )
        ph.info = f"{episodes} episodes, success {res['overall']['all']['success_rate']:.3f}"
    # the score itself stays out of the run folder (the skill reads runs/, never eval_results/)
    trainer.writer.log(f"{phase_name}: done in {res['wall_s']:.0f}s, result in {res['saved']}")
    return res


def _plot(trainer):
    """Training curves (reward, success per gym and arm, knob events) in runs/<id>/plot.png."""
    try:
        return Path(plot_runs([trainer.run_dir], trainer.run_dir / "plot.png")["path"])
    except (ValueError, OSError):
        return None


def _print_summary(trainer, evaluation, plot) -> None:
    from harness.eval.training import summary_lines

    rows = jsonl.read(trainer.run_dir / "metrics.jsonl")
    typer.echo(f"run {trainer.run_id} done: {trainer.run_dir}")
    if rows:
        first, last = rows[0], rows[-1]
        typer.echo(
            f"  training: {len(rows)} steps, success {first['success_rate']:.2f} (step {first['step']}) -> "
            f"{last['success_rate']:.2f} (step {last['step']}), reward {first['reward_mean']:.3f} -> "
            f"{last['reward_mean']:.3f}"
        )
    if evaluation is not None:
        for line in summary_lines(evaluation):
            typer.echo(line)
    if plot is not None:
        typer.echo(f"  plot: {plot}")


def _exit_after_process_group() -> None:
    """End a data-parallel rank without the interpreter's teardown (exit status 0). Why: after
    every rank has met and the process group is destroyed (``Dist.close``) and the run's files are
    closed, a rank could still abort while Python finalises ("terminate called without an active
    exception", SIGABRT from gloo's threads; pytorch/pytorch#179291), so ``accelerate launch``
    reported a finished run as failed (once in a full test-suite run). Nothing is left to write."""
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(0)


def _folder_values(run_dir: Path, cfg) -> tuple[dict, dict]:
    """The values a run's knobs folder holds now for the knobs its config set (its final values, and
    edits made to it since; its config's own values where the folder cannot be read)."""
    values = {}
    for area in ("agent", "env"):
        try:
            values[area] = yamlio.load_plain(run_dir / "knobs" / f"{area}.yaml") or {}
        except yamlio.FileProblem:
            values[area] = {}
    agent = {k: values["agent"].get(k, v) for k, v in (cfg.agent_knobs or {}).items()}
    env = {k: values["env"].get(k, v) for k, v in (cfg.env_knobs or {}).items()}
    return agent, env


def _config_file(path: Optional[Path]) -> dict:
    """The mapping of a ``--config`` file ({} without one)."""
    return {} if path is None else load_config_file(path)


def _parse(overrides: list[str]):
    return [parse_override(o) for o in overrides]


def sft_cmd(
    set_: list[str] = typer.Option([], "--set", help="Override an SFTConfig field: --set episodes=128."),
    preset: str = typer.Option("tiny", "--preset", help="Take policy, gyms and rendering from this train preset."),
    out: Optional[Path] = typer.Option(None, "--out", help="Output folder (default runs/sft-<preset>-<time>)."),
    as_json: bool = JsonOpt,
    knobs_dir_: Optional[Path] = KnobsDirOpt,
    runs_dir_: Optional[Path] = RunsDirOpt,
) -> None:
    """Supervised warm start on scripted demonstrations; start PPO from it with
    `eau train --set init_checkpoint=OUT` (a preset's warm_start makes one inside the run instead)."""
    from harness.ppo.sft import SFTConfig, run_sft

    try:
        p = load_preset(preset)
        data = {
            "policy": p.get("policy", {"model": "tiny"}),
            "gyms": p.get("gyms", ["intention"]),
            "rendering": p.get("rendering", "tagged"),
            "user_replies": p.get("user_replies", "user"),
        }
        for o in set_:
            k, v = parse_override(o)
            data[k] = v
        cfg = from_mapping(SFTConfig, data, "sft")
        check_sft_sizes(data)
        if out is not None and out.exists() and not out.is_dir():
            raise ValueError(f"--out {out}: exists and is not a folder")
        store = open_store(knobs_dir(knobs_dir_, as_json), events_path=None)
    except KnobError as exc:
        fail(str(exc), EXIT_INVALID, as_json)
    except ValueError as exc:
        fail(str(exc), EXIT_ERROR, as_json)
    out_dir = out or runs_dir(runs_dir_) / default_run_id(f"sft-{preset}")
    log = (lambda m: None) if as_json else (lambda m: typer.echo(m, err=True))
    summary = run_sft(cfg, store.snapshot(), out_dir, log=log)
    if as_json:
        emit_json({"ok": True, **summary})
    else:
        # the tiny preset's knobs suit a random start; tiny-warm has the ones that keep a warm start
        then = "tiny-warm" if preset == "tiny" else preset
        gyms = "" if list(cfg.gyms) == load_preset(then).get("gyms") else f" --set gyms=[{','.join(cfg.gyms)}]"
        typer.echo(
            f"warm start written to {out_dir} (loss {summary['loss_first']:.2f} -> {summary['loss_last']:.2f}); "
            f"train from it: eau train --preset {then} --set init_checkpoint={out_dir}{gyms}"
        )
