"""``eau train``: run PPO from a preset (``--preset``), a config file and ``--set`` overrides; resume a
run (``--resume RUN``) or evolve a new one from a finished run (``--from RUN``)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Optional

import typer

from harness.cli.common import (EXIT_ERROR, EXIT_INVALID, EXIT_NOT_FOUND, JsonOpt, KnobsDirOpt, RunsDirOpt, emit_json,
                                fail, knobs_dir, runs_dir)


def register(app: typer.Typer) -> None:
    app.command("train")(train_cmd)
    app.command("sft")(sft_cmd)


def train_cmd(
    preset: str = typer.Option("tiny", "--preset", help="tiny | cpu-small | usergym | colbench | tau2."),
    config: Optional[Path] = typer.Option(None, "--config", help="YAML file of TrainConfig fields (over the preset)."),
    set_: list[str] = typer.Option([], "--set", help="Override a field: --set steps=50 --set policy.lora.r=16."),
    steps: Optional[int] = typer.Option(None, "--steps", help="Shorthand for --set steps=N."),
    run_id: Optional[str] = typer.Option(None, "--run-id", help="Run folder name (default <preset>-<time>)."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Shorthand for --set seed=N."),
    resume: Optional[str] = typer.Option(None, "--resume", help="Continue RUN from its latest checkpoint."),
    from_run: Optional[str] = typer.Option(None, "--from", help="Start a new run evolved from RUN (current knobs)."),
    reason: Optional[str] = typer.Option(None, "--reason", help="Why this run was started (with --from)."),
    from_checkpoint: bool = typer.Option(False, "--from-checkpoint", help="With --from: start from RUN's latest policy."),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar (log lines go to stderr)."),
    as_json: bool = JsonOpt, knobs_dir_: Optional[Path] = KnobsDirOpt, runs_dir_: Optional[Path] = RunsDirOpt,
) -> None:
    """Train with PPO. Writes runs/<run_id>/ (metrics.jsonl, trajectories/, log.txt, checkpoints/...)."""
    from harness.knobs.store import KnobError
    from harness.ppo import checkpoint
    from harness.ppo.config import build_config
    from harness.ppo.trainer import resume_config, train

    kdir, rdir = knobs_dir(knobs_dir_), runs_dir(runs_dir_)
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
                cfg.steps = int(val)
        else:
            if from_run:
                parent = rdir / from_run
                if not (parent / "config.yaml").exists():
                    fail(f"no run {from_run!r} in {rdir}", EXIT_NOT_FOUND, as_json)
                pcfg = resume_config(parent)
                base = {k: v for k, v in pcfg.to_dict().items() if k not in ("run_id", "parent", "parent_reason",
                                                                             "lineage", "init_checkpoint")}
                base["parent"], base["parent_reason"] = from_run, reason or "evolved run"
                base["lineage"] = list(pcfg.lineage) + [from_run]
                if from_checkpoint:
                    ck = checkpoint.latest(parent)
                    if ck is None:
                        fail(f"run {from_run!r} has no checkpoint to start from", EXIT_NOT_FOUND, as_json)
                    base["init_checkpoint"] = str(ck.resolve())  # absolute: valid from any working folder
                # knobs are NOT copied from the parent: a new run starts from the current knob files
                base["agent_knobs"], base["env_knobs"] = {}, {}
                # precedence: parent config < --config FILE < --set (as preset < file < --set without --from)
                cfg = build_config(pcfg.preset, None, {**base, **_config_file(config), **dict(_parse(overrides))})
            else:
                cfg = build_config(preset, config, overrides)
            if run_id:
                cfg.run_id = run_id
    except ValueError as exc:
        fail(str(exc), EXIT_ERROR, as_json)
    if no_progress:
        cfg.progress = False
    echo = not (cfg.progress and sys.stderr.isatty())
    try:
        trainer = train(cfg, rdir, kdir, resume=bool(resume), echo=echo)
    except KnobError as exc:
        fail(str(exc), EXIT_INVALID, as_json, problems=exc.problems)
    except (ValueError, FileExistsError) as exc:
        fail(str(exc), EXIT_ERROR, as_json)
    if as_json and trainer.dist.main:
        from harness.runs import jsonl

        last = jsonl.tail(trainer.run_dir / "metrics.jsonl", 1)
        emit_json({"ok": True, "run_id": trainer.run_id, "run_dir": str(trainer.run_dir),
                   "steps": cfg.steps, "last_metrics": last[0] if last else None})
    elif trainer.dist.main:
        typer.echo(f"run {trainer.run_id} done: {trainer.run_dir}")
    if trainer.dist.world > 1:
        _exit_after_process_group()


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


def _config_file(path: Optional[Path]) -> dict:
    """The mapping of a ``--config`` file ({} without one)."""
    import yaml

    if path is None:
        return {}
    data = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a config file is a mapping of TrainConfig fields")
    return data


def _parse(overrides: list[str]):
    from harness.ppo.config import parse_override

    return [parse_override(o) for o in overrides]


def sft_cmd(
    set_: list[str] = typer.Option([], "--set", help="Override an SFTConfig field: --set episodes=128."),
    preset: str = typer.Option("tiny", "--preset", help="Take policy, gyms and rendering from this train preset."),
    out: Optional[Path] = typer.Option(None, "--out", help="Output folder (default runs/sft-<preset>-<time>)."),
    as_json: bool = JsonOpt, knobs_dir_: Optional[Path] = KnobsDirOpt, runs_dir_: Optional[Path] = RunsDirOpt,
) -> None:
    """Supervised warm start on scripted oracle demonstrations; start PPO from it with
    ``eau train --set init_checkpoint=OUT``."""
    import dataclasses

    from harness.knobs.store import KnobError, KnobStore
    from harness.ppo.config import load_preset, parse_override
    from harness.ppo.sft import SFTConfig, run_sft
    from harness.ppo.trainer import default_run_id

    try:
        p = load_preset(preset)
        data = {"policy": p.get("policy", {"model": "tiny"}), "gyms": p.get("gyms", ["intention"]),
                "rendering": p.get("rendering", "tagged"), "user_replies": p.get("user_replies", "user")}
        for o in set_:
            k, v = parse_override(o)
            data[k] = v
        valid = {f.name for f in dataclasses.fields(SFTConfig)}
        unknown = sorted(set(data) - valid)
        if unknown:
            raise ValueError(f"unknown SFT key(s) {', '.join(unknown)}; valid: {', '.join(sorted(valid))}")
        cfg = SFTConfig(**data)
        store = KnobStore(knobs_dir(knobs_dir_), events_path=None)
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
        typer.echo(f"warm start written to {out_dir} (loss {summary['loss_first']:.2f} -> {summary['loss_last']:.2f}); "
                   f"train from it: eau train --preset {then} --set init_checkpoint={out_dir}{gyms}")
