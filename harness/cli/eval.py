"""``eau eval``: score a run's checkpoint on the fixed evaluation protocol (``eval/protocol.yaml``).

The protocol (gyms, task split, symbolic user, rules, limits, sampling, seed) comes from its own
frozen files, never from ``knobs/``: ``--knobs-dir`` is accepted like on every command and ignored.
Results go to ``eval_results/<run_id>/`` (``--eval-dir``, env ``EAU_EVAL_DIR``), a folder the skill's
commands never read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from harness.cli.common import (
    EXIT_ERROR,
    EXIT_INVALID,
    EXIT_NOT_FOUND,
    JsonOpt,
    RunsDirOpt,
    emit_json,
    err,
    fail,
    runs_dir,
)
from harness.eval.policy import CheckpointError
from harness.eval.protocol import ProtocolError, load_protocol
from harness.eval.results import eval_root, write_result
from harness.runs.progress import Progress


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_cmd)


def eval_cmd(
    run: Optional[str] = typer.Option(None, "--run", help="Run id (under --runs-dir) or run folder to evaluate."),
    checkpoint: Optional[str] = typer.Option(
        None,
        "--checkpoint",
        help="Checkpoint step (12 or step_000012), or 'init' for the starting "
        "policy; default: the latest complete checkpoint.",
    ),
    protocol_file: Optional[Path] = typer.Option(
        None, "--protocol", help="Protocol file (default eval/protocol.yaml)."
    ),
    eval_dir: Optional[Path] = typer.Option(
        None, "--eval-dir", envvar="EAU_EVAL_DIR", help="Results folder (default ./eval_results)."
    ),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda."),
    describe: bool = typer.Option(False, "--describe", help="Print the protocol and its hash; evaluate nothing."),
    no_save: bool = typer.Option(False, "--no-save", help="Print the result without writing eval_results/."),
    as_json: bool = JsonOpt,
    knobs_dir_: Optional[Path] = typer.Option(
        None,
        "--knobs-dir",
        envvar="EAU_KNOBS_DIR",
        help="Ignored: evaluation never reads knobs (accepted like on every eau command).",
    ),
    runs_dir_: Optional[Path] = RunsDirOpt,
) -> None:
    """Evaluate a checkpoint on the fixed protocol: per-gym reward and success (colbench: pass and
    success), pass^k with several trials, and protocol_hash."""
    del knobs_dir_  # see the option's help: evaluation is independent of the knob folder
    try:
        protocol = load_protocol(protocol_file)
    except ProtocolError as exc:
        fail(str(exc), EXIT_INVALID, as_json)
    if describe:
        info = protocol.describe()
        if as_json:
            emit_json({"ok": True, **info})
        else:
            _print_protocol(info)
        return
    if not run:
        fail("--run RUN is required (or --describe to show the protocol)", EXIT_ERROR, as_json)
    run_dir = _find_run(run, runs_dir(runs_dir_), as_json)

    from harness.eval.evaluate import ProtocolRuntimeError, evaluate_run

    progress = Progress(enabled=True)  # on stderr: a live bar on a terminal, plain lines otherwise
    from harness.eval.evaluate import turn_budget

    try:
        with progress.phase(
            f"evaluating on {protocol.name}", total=turn_budget(protocol), unit="turns", eta_bound=True
        ) as ph:
            result, records = evaluate_run(
                run_dir,
                protocol,
                checkpoint,
                device,
                log=progress.plain,
                progress=lambda done, n, turns: ph.set(turns, f"{done}/{n} episodes done"),
            )
    except CheckpointError as exc:
        fail(str(exc), EXIT_NOT_FOUND, as_json)
    except ProtocolRuntimeError as exc:
        fail(str(exc), EXIT_INVALID, as_json)
    except (ValueError, FileNotFoundError) as exc:
        fail(str(exc), EXIT_ERROR, as_json)
    finally:
        progress.close()
    saved = None if no_save else write_result(eval_root(eval_dir), result, records)
    result["saved"] = str(saved) if saved else None
    for w in result["warnings"]:
        err(f"warning: {w}")
    if as_json:
        emit_json({"ok": True, **result})
    else:
        _print_result(result)


def _find_run(run: str, rdir: Path, as_json: bool) -> Path:
    p = Path(run)
    if (p / "config.yaml").is_file():
        return p
    if (rdir / run / "config.yaml").is_file():
        return rdir / run
    fail(f"no run {run!r} with a config.yaml in {rdir} (nor a run folder at that path)", EXIT_NOT_FOUND, as_json)


def _fmt(x: Any) -> str:
    return "-" if x is None else f"{x:.3f}" if isinstance(x, float) else str(x)


def _print_protocol(info: dict[str, Any]) -> None:
    typer.echo(f"protocol {info['name']}  hash {info['protocol_hash']}\n  file {info['path']}")
    typer.echo(
        f"  split {info['split']}  seed {info['seed']}  trials {info['trials']}  rendering {info['rendering']}"
        f"  batch {info['batch_size']}"
    )
    typer.echo(f"  sampling {info['sampling']}  limits {info['limits']}")
    for g, spec in info["gyms"].items():
        typer.echo(f"  gym {g:<10} tasks {spec['tasks']:<4}" + ("  held out" if spec["held_out"] else ""))


def _print_result(r: dict[str, Any]) -> None:
    typer.echo(
        f"{r['run_id']} {r['checkpoint']} on {r['protocol_name']} (protocol_hash {r['protocol_hash'][:16]}, "
        f"seed {r['seed']}, {r['episodes']} episodes, {r['wall_s']:.1f}s)"
    )
    pk = any("pass_hat_k" in g for g in r["gyms"].values())
    head = f"{'gym':<11}{'tasks':>6}{'reward':>9}{'success':>9}{'pass':>7}{'answer':>8}{'turns':>7}"
    typer.echo(head + ("  pass^k" if pk else "") + "  note")
    for name, g in r["gyms"].items():
        note = ("held out" if g["held_out"] else "") + (" (trained on!)" if g["held_out"] and g["trained_on"] else "")
        line = (
            f"{name:<11}{g['tasks']:>6}{g['reward_mean']:>9.3f}{g['success_rate']:>9.3f}"
            f"{_fmt(g.get('pass')):>7}{g['answer_rate']:>8.2f}{g['turns_mean']:>7.1f}"
        )
        if pk:
            line += "  " + " ".join(f"{k}:{v:.2f}" for k, v in g.get("pass_hat_k", {}).items())
        typer.echo(line + ("  " + note if note else ""))
    for key, label in (("all", "mean, all gyms"), ("in_distribution", "mean, others"), ("held_out", "mean, held out")):
        o = r["overall"][key]
        if o["gyms"] and (key == "all" or len(o["gyms"]) < len(r["gyms"])):
            typer.echo(f"{label:<17}{o['reward_mean']:>9.3f}{o['success_rate']:>9.3f}")
    if r.get("saved"):
        typer.echo(f"saved {r['saved']}")
