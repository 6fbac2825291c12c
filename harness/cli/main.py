"""The ``eau`` command line. Each command group lives in its own module with a ``register(app)``."""

from __future__ import annotations

import importlib
import os

import typer

from harness.cli.common import GuardedGroup

app = typer.Typer(
    name="eau",
    cls=GuardedGroup,  # an error no command handled: one line and a documented exit code, no traceback
    help="EAU harness: train user-centric agents with PPO; knobs, runs, diagnosis and the meta-agent loop.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Modules that add commands; each defines register(app). Heavy imports stay inside the commands.
COMMAND_MODULES = [
    "harness.cli.knobs",
    "harness.cli.tasks",
    "harness.cli.play",
    "harness.cli.train",
    "harness.cli.analysis",
    "harness.cli.finding",
    "harness.cli.supervise",
    "harness.cli.skill",
    "harness.cli.eval",
    "harness.cli.runs",
    "harness.cli.plot",
    "harness.cli.export",
    "harness.cli.openenv",
]

for _mod in COMMAND_MODULES:
    importlib.import_module(_mod).register(app)


def main() -> None:
    # transformers' own bars (loading weights, de-quantising) would interleave with the harness's
    # progress display; the harness reports those phases itself

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:
        pass
    app()


if __name__ == "__main__":
    main()
