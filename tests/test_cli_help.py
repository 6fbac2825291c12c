"""Every command's --help reads as plain text: no reStructuredText markup from docstrings."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from harness.cli.main import app


def all_commands(group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = [prefix]
    for name, cmd in group.commands.items():
        if getattr(cmd, "commands", None):  # a group (TyperGroup)
            out += all_commands(cmd, prefix + (name,))
        else:
            out.append(prefix + (name,))
    return out


def test_no_help_text_shows_rst_double_backticks():
    runner = CliRunner()
    commands = all_commands(typer.main.get_command(app))
    assert len(commands) > 20
    for path in commands:
        res = runner.invoke(app, [*path, "--help"])
        assert res.exit_code == 0, (path, res.output)
        assert "``" not in res.output, f"eau {' '.join(path)} --help shows RST markup:\n{res.output}"


def test_train_help_lists_every_preset():
    from harness.ppo.config import preset_names

    out = CliRunner().invoke(app, ["train", "--help"], terminal_width=200).output
    for name in preset_names():
        assert name in out, name
