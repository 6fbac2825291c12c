"""CLI input errors are one line that names the option or file, with an exit code from README's
table, never a traceback (issue 28). The known cases one by one, then every command and option of
the app (read from the app itself) fed malformed values by benchmarks/bench_cli_fuzz.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from harness.cli.common import EXIT_CODES, GuardedGroup
from harness.cli.main import app

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
import bench_cli_fuzz as fz  # noqa: E402  (benchmarks/ is put on sys.path just above)


def _run(args: list[str], code: int, *needles: str) -> str:
    res = CliRunner().invoke(app, args, input="")
    out = res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), (args, repr(res.exception))
    assert "Traceback" not in out, out
    assert res.exit_code == code, (args, res.exit_code, out)
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "unexpected" not in errors[0], out
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.yaml").write_text("steps: [1\n")
    (tmp_path / "list.yaml").write_text("- steps\n")
    (tmp_path / "non_utf8.yaml").write_bytes(b"steps: 3\nname: \xff\n")
    (tmp_path / "deep.yaml").write_text("[" * 200_000)
    (tmp_path / "alias.yaml").write_text("a: &x [1, 2]\nb: *x\n")
    (tmp_path / "a_file").write_text("x")
    return tmp_path


@pytest.mark.parametrize(
    ("override", "needles"),
    [
        ("steps=abc", ("steps must be an integer", "'abc'")),
        ("gyms=[intention", ("--set gyms", "not YAML")),
        ("seed=1e400", ("seed must be an integer", "inf")),
        ("seed=-1", ("seed must be between 0 and",)),
        ("samples_per_task=1000000000", ("samples_per_task must be between 1 and 256",)),
        ("tasks_per_step=4096|samples_per_task=8", ("at most 16,384 episodes",)),
        ("policy.lora.alpha=.nan", ("policy.lora.alpha", "must be a finite number")),
        ("policy.lr=1", ("policy: unknown key(s) lr", "allowed: model")),
        ("warm_start={episodes: 1e400}", ("warm_start.episodes", "must be an integer; got inf")),
        ("run_id=../x", ("run_id '../x'", "plain name")),
        ("steps=" + "9" * 5000, ("--set steps", "4300 digits")),
        ("gyms=" + "[" * 100_000, ("--set gyms", "deeper than 64 levels")),  # the C parser would segfault
        ("..=1", ("--set '..'",)),
    ],
)
def test_set_values_are_refused_with_the_field_named(override: str, needles: tuple[str, ...]) -> None:
    # the guard: a config this check wrongly accepted stops at its missing protocol file (exit 4)
    # instead of training
    sets = [a for o in override.split("|") for a in ("--set", o)]
    _run(["train", *sets, "--set", "evaluation={protocol: /nonexistent/protocol.yaml}"], 1, *needles)


def test_unknown_knob_in_agent_knobs_is_not_found(tmp_path: Path) -> None:
    _run(
        ["train", "--set", "agent_knobs.nosuch=1", "--set", "steps=1", "--runs-dir", str(tmp_path)],
        5,
        "agent.nosuch",
        "unknown knob",
    )


@pytest.mark.parametrize(
    ("name", "needles"),
    [
        ("missing.yaml", ("--config missing.yaml", "no such file")),
        ("bad.yaml", ("--config bad.yaml:2", "YAML syntax error")),
        ("list.yaml", ("--config list.yaml", "mapping")),
        ("non_utf8.yaml", ("--config non_utf8.yaml:2", "not UTF-8")),
        ("deep.yaml", ("--config deep.yaml", "deep")),
        ("alias.yaml", ("--config alias.yaml", "aliases")),
        (".", ("--config .", "not a regular file")),
    ],
)
def test_config_file_problems_name_the_file(files: Path, name: str, needles: tuple[str, ...]) -> None:
    _run(["train", "--config", name], 1, *needles)


def test_corrupt_run_config_on_resume(files: Path) -> None:
    run = files / "runs" / "broken"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("seed: [\n")
    _run(["train", "--resume", "broken", "--runs-dir", "runs"], 1, "config.yaml", "YAML syntax error")
    (run / "config.yaml").write_text("steps: abc\n")
    _run(["train", "--resume", "broken", "--runs-dir", "runs"], 1, "config.yaml", "steps must be an integer")


def test_runs_dir_that_is_a_file(files: Path) -> None:
    for args in (["train"], ["status"], ["runs", "list"], ["knobs", "list"]):
        _run([*args, "--runs-dir", "a_file"], 2, "--runs-dir a_file", "not a folder")


@pytest.mark.parametrize("option", ["--run-id", "--resume", "--from"])
@pytest.mark.parametrize("value", ["../x", ".hidden", "a/b", ""])
def test_run_ids_are_plain_names(files: Path, option: str, value: str) -> None:
    _run(["train", option, value], 2, option, "plain name")
    assert not (files.parent / "x").exists()


def test_options_that_belong_to_from(files: Path) -> None:
    _run(["train", "--reason", "why"], 2, "--reason", "--from")
    _run(["train", "--resume", "a", "--from", "b"], 2, "--resume", "--from")


def test_preset_is_a_name_not_a_path() -> None:
    _run(["train", "--preset", "../presets/tiny"], 1, "--preset", "unknown preset")


def test_colbench_data_file_names_file_and_line(files: Path) -> None:
    (files / "tasks.jsonl").write_bytes(b"\n  \n\xff\xfe\n")  # blank lines first: the line number counts them
    _run(["tasks", "check", "colbench", "--data", "tasks.jsonl"], 4, "tasks.jsonl:3", "not UTF-8")
    (files / "tasks.jsonl").write_text("[" * 200_000 + "\n")
    _run(["tasks", "check", "colbench", "--data", "tasks.jsonl"], 4, "tasks.jsonl:1", "nested too deeply")


def test_knobs_exit_codes() -> None:
    _run(["knobs", "set", "nosuch.knob", "1", "--reason", "r"], 5, "unknown knob")
    _run(["knobs", "history", "agent.nosuch"], 5, "unknown knob")
    res = CliRunner().invoke(app, ["knobs", "watch", "--duration", "nan"])
    assert res.exit_code == 2 and "--duration" in res.output


@pytest.mark.parametrize("command", ["status", "sample", "diagnose", "effect"])
def test_read_only_commands_take_knobs_dir(files: Path, command: str) -> None:
    # accepted (README: every command takes it) and checked: a missing folder is refused ...
    _run([command, "--knobs-dir", "missing", "--runs-dir", "runs"], 5, "--knobs-dir missing")
    # ... a real one gets as far as the run lookup
    CliRunner().invoke(app, ["knobs", "init", "k"])
    _run([command, "--knobs-dir", "k", "--runs-dir", "runs"], 5, "run")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["sample", "--seed", "-1"], "--seed"),
        (["status", "--window", "99999999999999999999999"], "--window"),
        (["gate", "x.yaml", "--time-budget", "nan"], "--time-budget"),
    ],
)
def test_numeric_options_refuse_nan_and_out_of_range(args: list[str], needle: str) -> None:
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2 and needle in res.output and "Traceback" not in res.output


def test_debug_env_shows_the_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    crashing = typer.Typer(cls=GuardedGroup)

    @crashing.command("boom")
    def boom(n: int = typer.Option(1, "--n")) -> None:
        raise TypeError(f"bug {n}")

    @crashing.command("other")
    def other() -> None:
        pass

    res = CliRunner().invoke(crashing, ["boom"])
    assert res.exit_code == 1 and "error: unexpected TypeError: bug 1" in res.output
    monkeypatch.setenv("EAU_DEBUG", "1")
    res = CliRunner().invoke(crashing, ["boom"])
    assert isinstance(res.exception, TypeError)


def test_fuzz_suite_finds_a_crash_in_a_new_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite reads commands from the app: a command it has never seen, with an option that
    crashes on a negative value, is found and reported (the suite can fail)."""
    monkeypatch.chdir(tmp_path)
    plain = typer.Typer()  # no GuardedGroup: an exception escapes as it would have before

    @plain.command("fragile")
    def fragile(count: int = typer.Option(1, "--count")) -> None:
        if count < 0:
            raise IndexError("negative")

    @plain.command("fine")
    def fine(name: str = typer.Option("a", "--name")) -> None:
        pass

    doc = fz.fuzz(fz.Workspace(tmp_path / "ws"), target=plain)
    assert doc["commands"] == 2 and doc["tracebacks"] >= 1
    assert any(f["command"] == "fragile" and f["value"] == "int:-1" for f in doc["failures"])


def test_every_command_and_option_fast_sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every command and option of eau, one malformed value each (rotated so that every value is
    tried): no traceback, no unhandled error, exit codes from the table. The full set:
    benchmarks/bench_cli_fuzz.py (and the slow test below)."""
    monkeypatch.chdir(tmp_path)
    ws = fz.Workspace(tmp_path / "ws")
    doc = fz.fuzz(ws, sample=1)
    assert doc["commands"] >= 30 and doc["parameters"] >= 200
    assert doc["failures"] == [], doc["failures"][:10]
    assert set(map(int, doc["exit_codes"])) <= set(EXIT_CODES)


@pytest.mark.slow
def test_every_command_and_option_every_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    doc = fz.fuzz(fz.Workspace(tmp_path / "ws"))
    assert doc["cases"] >= 2000 and doc["failures"] == [], doc["failures"][:10]


@pytest.mark.parametrize("name", ["/etc/passwd", "../x", "a*", "Name"])
def test_a_plugin_name_is_never_a_path_or_a_pattern(name: str, knobs_dir: Path) -> None:
    # found by the fuzz: an absolute path reached Path.glob and ended in NotImplementedError
    res = CliRunner().invoke(app, ["knobs", "plugin", "show", name, "--knobs-dir", str(knobs_dir)])
    assert res.exit_code == 2 and "a name is lowercase letters" in res.output


@pytest.mark.parametrize("option", ["--host", "--llm-url", "--llm-model"])
def test_openenv_text_options_that_are_not_utf8_are_usage_errors(option: str) -> None:
    # found by the CLI fuzz: a host name holding a byte that is not UTF-8 ended in the socket layer's
    # bare TypeError ("encoding of hostname failed")
    _run(["openenv", "travel", option, "h\udcff"], 2, f"{option}: not valid text", "byte 0xff")
