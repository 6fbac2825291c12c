"""``eau export --run ID [--checkpoint STEP] --out DIR``: a run's policy as a Hugging Face model folder
(adapters merged, safetensors, tokenizer, chat template, a model card) that ``transformers`` loads and
``vllm serve`` serves (harness/export/hf_folder.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from harness.cli.common import (
    EXIT_ERROR,
    EXIT_NOT_FOUND,
    EXIT_USAGE,
    JsonOpt,
    RunsDirOpt,
    emit_json,
    fail,
    runs_dir,
)
from harness.eval.policy import CheckpointError
from harness.eval.results import eval_root
from harness.runs.reader import find_run


def register(app: typer.Typer) -> None:
    app.command("export")(export_cmd)


def export_cmd(
    run: str = typer.Option(..., "--run", help="Run id (under --runs-dir) or run folder."),
    checkpoint: Optional[str] = typer.Option(
        None,
        "--checkpoint",
        help="Checkpoint step (12 or step_000012), or 'init' for the starting policy; default: the latest.",
    ),
    out: Path = typer.Option(..., "--out", help="The model folder to write (must be absent or empty)."),
    force: bool = typer.Option(False, "--force", help="Replace what --out holds."),
    eval_dir: Optional[Path] = typer.Option(
        None, "--eval-dir", envvar="EAU_EVAL_DIR", help="Where eau eval stored the held-out scores the card quotes."
    ),
    as_json: bool = JsonOpt,
    knobs_dir_: Optional[Path] = typer.Option(
        None,
        "--knobs-dir",
        envvar="EAU_KNOBS_DIR",
        help="Ignored: the card's knobs are those in force at the checkpoint (accepted like on every eau command).",
    ),
    runs_dir_: Optional[Path] = RunsDirOpt,
) -> None:
    """Write a run's policy as a Hugging Face model folder: config, model.safetensors (LoRA adapters
    merged), tokenizer with the run's chat template, generation config, and a README.md model card
    naming the run, the step, the held-out scores and the knobs in force. Exit 5: no such run or
    checkpoint; 2: --out holds files (use --force); 1: the policy could not be rebuilt."""
    from harness.export.hf_folder import export_run  # noqa: PLC0415  (torch and transformers: 2.0 s)

    del knobs_dir_  # exporting reads the checkpoint's own knob state, never the knobs folder
    run_dir = find_run(runs_dir(runs_dir_), run)
    if run_dir is None or not (run_dir / "config.yaml").is_file():
        fail(f"no run {run!r} with a config.yaml in {runs_dir(runs_dir_)} (nor a run folder at that path)",
             EXIT_NOT_FOUND, as_json)  # fmt: skip
    try:
        res = export_run(
            run_dir, checkpoint, out, eval_root(eval_dir), force=force, log=lambda m: typer.echo(m, err=True)
        )
    except CheckpointError as exc:
        fail(str(exc), EXIT_NOT_FOUND, as_json)
    except FileExistsError as exc:
        fail(str(exc), EXIT_USAGE, as_json)
    except (ValueError, FileNotFoundError, OSError) as exc:
        fail(f"export of run {run_dir.name} failed: {exc}", EXIT_ERROR, as_json)
    if as_json:
        emit_json({"ok": True, **res})
        return
    typer.echo(f"exported {res['run_id']} {res['checkpoint']} to {res['out']}: {', '.join(res['files'])}")
    if not res["held_out_scores"]:
        typer.echo(
            f"(no held-out scores stored for it: eau eval --run {res['run_id']} --checkpoint {res['checkpoint']})"
        )
