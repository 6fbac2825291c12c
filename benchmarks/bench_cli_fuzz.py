"""Every ``eau`` command and option fed malformed values: no traceback, an exit code from the table.

The commands and their options are read from the typer app itself (:func:`cases`), so a new command
or option is fuzzed without a change here. Each option gets the malformed values of its type (wrong
types, huge numbers, 1e400, NaN, empty, path traversal, missing / folder / non-UTF-8 / deeply nested /
unclosed-bracket files, strings with undecodable bytes); the command's other required parameters
get plain valid fillers. A case passes when the output holds no traceback, no ``unexpected`` error
line (an error no command handled: see ``harness.cli.common.error_line``), the exit code is one
of README's table (0-5) and, with ``--json``, stdout holds no NaN/Infinity token (strict JSON; the
workspace's runs ``a`` and ``b`` hold non-finite metrics and config values). Commands that would start long work (train, sft, eval, supervise, ...) get
a *guard*: an input the command checks after all the others and refuses, so that an option value the
command accepts stops there instead of loading a model. Every other case of a command that has
``--json`` runs with it, so both its outputs are fuzzed.

    python benchmarks/bench_cli_fuzz.py [--subprocess N] [--out FILE]

In-process (typer's CliRunner) by default; ``--subprocess N`` also runs N of the cases (every
N-th) as real ``python -m harness.cli.main`` processes. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer
from typer.testing import CliRunner

from harness.cli.common import EXIT_CODES, UNEXPECTED
from harness.cli.main import app

CASE_SECONDS = 120  # a case that takes longer counts as a hang
DEEP = 100_000  # nesting depth of a --set value (an argv string stays under Linux's 128 KiB per argument)

INT_VALUES = ["abc", "1e400", "nan", "", "99999999999999999999999999", "-99999999999999999999", "-1", "1.5"]
FLOAT_VALUES = ["abc", "1e400", "nan", "inf", "-inf", "", "-1", "1e308"]
STR_VALUES = [
    "",
    "../x",
    "../../../../etc/passwd",
    "/",
    "nosuch",
    "x" * 10_000,
    "[intention",
    "1e400",
    "nan",
    "\udcff\udcfe",
    "{a: [1, 2",
]
SET_VALUES = [
    "steps=abc",
    "gyms=[intention",
    "seed=1e400",
    "agent_knobs.nosuch=1",
    "samples_per_task=1000000000",
    "=",
    "steps",
    "policy.lr=.nan",
    "gyms=" + "[" * DEEP,
    "..=1",
    "steps=" + "9" * 5000,
    "tasks_per_step=-3",
    "run_id=../x",
    "warm_start={episodes: 1e400}",
]
PATH_KINDS = ["missing", "folder", "file", "non_utf8", "deep", "unclosed", "empty_name", "traversal"]


@dataclass
class Workspace:
    """Folders and hostile files the cases point at (one temporary folder)."""

    root: Path
    knobs: Path = field(init=False)
    runs: Path = field(init=False)
    busy_port: int = field(init=False)

    def __post_init__(self) -> None:
        self.knobs, self.runs = self.root / "knobs", self.root / "runs"
        # a port held for the workspace's lifetime, on every address (eau openenv's guard, below)
        self._held = socket.create_server(("", 0))
        self.busy_port = self._held.getsockname()[1]
        self.runs.mkdir(parents=True)
        res = CliRunner().invoke(app, ["knobs", "init", str(self.knobs)])
        assert res.exit_code == 0, res.output
        (self.root / "folder").mkdir()
        (self.root / "file.txt").write_text("a plain file where a folder is expected\n")
        (self.root / "non_utf8.yaml").write_bytes(b"steps: 3\nname: \xff\xfe\xfa\n")
        (self.root / "deep.yaml").write_text("[" * 200_000 + "\n")
        (self.root / "unclosed.yaml").write_text("steps: [1, 2\ngyms: {a: 1\n")
        (self.root / "candidate.yaml").write_text("entropy_coeff: 0.002\n")
        # runs "a" and "b" (the fillers of runs compare) whose metrics and config hold NaN and infinities
        for run, lr in (("a", ".nan"), ("b", ".inf")):
            (self.runs / run).mkdir()
            (self.runs / run / "config.yaml").write_text(f"run_id: {run}\ngyms: [intention]\npolicy: {{lr: {lr}}}\n")
            rows = [{"step": 0, "reward_mean": float("nan"), "success_rate": float("inf")}, {"step": 1, "loss": 1.0}]
            (self.runs / run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    def path_value(self, kind: str) -> str:
        return {
            "missing": str(self.root / "missing.yaml"),
            "folder": str(self.root / "folder"),
            "file": str(self.root / "file.txt"),
            "non_utf8": str(self.root / "non_utf8.yaml"),
            "deep": str(self.root / "deep.yaml"),
            "unclosed": str(self.root / "unclosed.yaml"),
            "empty_name": "",
            "traversal": "../../../../../etc",
        }[kind]

    def env(self) -> dict[str, str]:
        return {
            "EAU_KNOBS_DIR": str(self.knobs),
            "EAU_RUNS_DIR": str(self.runs),
            "EAU_DEBUG": "",
            "EAU_POOL_DIR": str(self.root / "pool"),
            "EAU_EVAL_DIR": str(self.root / "eval"),
            "NO_COLOR": "1",
            "COLUMNS": "200",
        }


# Valid values for required parameters that are not the one under test (by parameter name).
def fillers(ws: Workspace) -> dict[str, list[str]]:
    return {
        "gym": ["intention"],
        "name": ["agent.entropy_coeff"],
        "value": ["0.002"],
        "reason": ["fuzz"],
        "folder": [str(ws.root / "new-knobs")],
        "event": ["k-0000000000"],
        "files": [str(ws.root / "candidate.yaml")],
        "query": ["entropy"],
        "fid": ["f-0000000000"],
        "title": ["t"],
        "change": ["c"],
        "verdict": ["helped"],
        "run": ["fuzz-run"],
        "every": ["1"],
        "agent": ["claude"],
        "run_a": ["a"],
        "run_b": ["b"],
        "schema": ['{"description": "d", "x-hot": true, "x-gyms": ["*"], "type": "integer"}'],
    }


# Inputs each long-running command checks after every other input and refuses: an option value the
# command accepts stops at this refusal, never at a model load. (option, value, fallback when that
# option is the one under test)
def guards(ws: Workspace) -> dict[tuple[str, ...], list[tuple[list[str], str | None]]]:
    bad_protocol = ["--set", f"evaluation={{protocol: {ws.root / 'missing-protocol.yaml'}}}"]
    return {
        ("train",): [(bad_protocol, "--set"), (["--set", "steps=0"], None)],
        ("sft",): [(["--knobs-dir", str(ws.root / "folder")], "--knobs-dir"), (["--set", "epochs=0"], None)],
        ("knobs", "watch"): [(["--duration", "0.2"], "--duration"), (["--interval", "0.1"], None)],
        ("tasks", "check"): [(["--data", str(ws.root / "missing.jsonl")], "--data"), (["--limit", "1"], None)],
        # the run may still be starting: both wait --wait seconds for its folder
        # it serves until stopped: a port the workspace holds (or, when --port is under test, an address
        # that is not one) makes it refuse after every other input, where it would start listening
        ("openenv",): [(["--port", str(ws.busy_port)], "--port"), (["--host", "256.0.0.1"], None)],
        ("supervise",): [(["--wait", "0"], "--wait"), ([], None)],
        ("autopilot",): [(["--wait", "0"], "--wait"), ([], None)],
    }


@dataclass
class Case:
    command: tuple[str, ...]
    param: str
    label: str
    argv: list[str]


def walk(cmd: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    subs = getattr(cmd, "commands", None)
    if subs:
        return [c for name, sub in subs.items() for c in walk(sub, path + (name,))]
    return [(path, cmd)]


def values_for(param: Any, ws: Workspace) -> list[tuple[str, str]]:
    """(label, value) malformed values for one parameter, by its annotation."""
    annotation = param.type_descriptor.annotation
    if annotation is int:
        return [(f"int:{v[:20]}", v) for v in INT_VALUES]
    if annotation is float:
        return [(f"float:{v[:20]}", v) for v in FLOAT_VALUES]
    if annotation is Path:
        return [(f"path:{k}", ws.path_value(k)) for k in PATH_KINDS]
    extra = SET_VALUES if param.name in ("set_", "threshold") else []
    paths = [(f"path:{k}", ws.path_value(k)) for k in ("missing", "folder", "non_utf8", "deep")]
    return [(f"str:{_short(v)}", v) for v in STR_VALUES + extra] + paths


def _short(v: str) -> str:
    return (v[:20] + f"...({len(v)})") if len(v) > 24 else v


def _is_flag(param: Any) -> bool:
    return bool(getattr(param, "is_flag", False)) or getattr(param, "count", False)


def base_argv(path: tuple[str, ...], cmd: Any, under_test: Any, ws: Workspace) -> list[str]:
    """The command with fillers for every required parameter except ``under_test``."""
    fill = fillers(ws)
    positional, options = [], []
    for p in cmd.params:
        if p is under_test or not p.required:
            continue
        value = fill.get(p.name, ["x"])
        if p.param_type_name == "argument":
            positional += value
        else:
            options += [p.opts[0], *value]
    return [*path, *positional, *options]


def cases(ws: Workspace, target: typer.Typer = app, sample: int = 0) -> list[Case]:
    """Every (command, parameter, malformed value) of ``target``; ``sample`` > 0: only ``sample``
    values per parameter, rotated over the parameters so that each value is still tried somewhere."""
    root = typer.main.get_command(target)
    out: list[Case] = []
    all_guards = guards(ws)
    for path, cmd in walk(root):
        for param in cmd.params:
            if _is_flag(param) or param.name == "help":
                continue
            opt = param.opts[0] if param.param_type_name == "option" else None
            guard: list[str] = []
            for argv, clash in all_guards.get(path, []):
                if clash != opt:
                    guard = argv
                    break
            values = values_for(param, ws)
            if sample:
                start = len(out) % len(values)
                values = (values[start:] + values[:start])[:sample]
            json_mode = any("--json" in p.opts for p in cmd.params)
            for label, value in values:
                argv = base_argv(path, cmd, param, ws)
                # every other case of a command with --json runs in JSON mode: both outputs are fuzzed
                if json_mode and len(out) % 2 == 0:
                    argv.append("--json")
                if opt is None:  # an argument: in its place among the positional fillers
                    idx = [p for p in cmd.params if p.param_type_name == "argument" and (p.required or p is param)]
                    pos = len(path) + idx.index(param)
                    argv = [*argv[:pos], value, *argv[pos:]]
                else:
                    argv = [*argv, opt, value]
                out.append(Case(path, opt or param.name.upper(), label, [*argv, *guard]))
    return out


class CaseTimeout(BaseException):
    """Raised by the alarm inside a case that ran too long (a BaseException: no handler swallows it)."""


def _alarm(signum: int, frame: Any) -> None:
    raise CaseTimeout()


class NonStandardToken(ValueError):
    """A NaN, Infinity or -Infinity token in a JSON document (strict parsers refuse them)."""


def _refuse(token: str) -> Any:
    raise NonStandardToken(token)


def strict_json_problem(stdout: str) -> str | None:
    """Why ``stdout`` (a ``--json`` command's) is not strict JSON, or None: a NaN/Infinity token in
    the document (or, for commands that print JSON lines, in any line)."""
    texts = [stdout] if stdout.strip() else []
    try:
        json.loads(stdout, parse_constant=_refuse)
        return None
    except NonStandardToken as exc:
        return f"{exc} in --json output"
    except ValueError:  # not one document: JSON lines, or text
        texts = [line for line in stdout.splitlines() if line.lstrip().startswith(("{", "["))]
    for line in texts:
        try:
            json.loads(line, parse_constant=_refuse)
        except NonStandardToken as exc:
            return f"{exc} in --json output"
        except ValueError:
            pass
    return None


def judge(output: str, code: int | None, json_stdout: str | None = None) -> list[str]:
    """The problems of one case; ``json_stdout``: the stdout of a case run with ``--json``."""
    problems = []
    if "Traceback (most recent call last)" in output:
        problems.append("traceback")
    if f"error: {UNEXPECTED} " in output:
        problems.append("unexpected error (no command handled it)")
    if code not in EXIT_CODES:
        problems.append(f"exit code {code} not in the table")
    bad = strict_json_problem(json_stdout) if json_stdout else None
    if bad:
        problems.append(bad)
    return problems


def run_in_process(case: Case, ws: Workspace, target: typer.Typer = app) -> dict[str, Any]:
    runner = CliRunner(env=ws.env())
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CASE_SECONDS)
    t0 = time.perf_counter()
    try:
        res = runner.invoke(target, case.argv, input="")
        output, code = res.output, res.exit_code
        json_stdout = res.stdout if "--json" in case.argv else None
        exc = res.exception
        if exc is not None and not isinstance(exc, SystemExit):  # CliRunner caught what main() would show
            import traceback

            output += "Traceback (most recent call last):\n" + "".join(traceback.format_exception(exc))
    except CaseTimeout:
        output, code = "", None
        return _record(case, output, code, time.perf_counter() - t0, ["hang"])
    finally:
        signal.alarm(0)
    return _record(case, output, code, time.perf_counter() - t0, judge(output, code, json_stdout))


def run_subprocess(case: Case, ws: Workspace, repo: Path) -> dict[str, Any]:
    env = {**os.environ, **ws.env(), "PYTHONPATH": str(repo)}
    t0 = time.perf_counter()
    argv = [a.encode("utf-8", "surrogateescape") for a in case.argv]  # undecodable bytes as a shell passes them
    try:
        proc = subprocess.run(
            [sys.executable.encode(), b"-m", b"harness.cli.main", *argv],
            cwd=ws.root,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=CASE_SECONDS,
        )
    except subprocess.TimeoutExpired:
        return _record(case, "", None, time.perf_counter() - t0, ["hang"])
    output = proc.stdout.decode("utf-8", "replace") + proc.stderr.decode("utf-8", "replace")
    json_stdout = proc.stdout.decode("utf-8", "replace") if "--json" in case.argv else None
    return _record(case, output, proc.returncode, time.perf_counter() - t0, judge(output, proc.returncode, json_stdout))


def _record(case: Case, output: str, code: int | None, seconds: float, problems: list[str]) -> dict[str, Any]:
    last = [line for line in output.strip().splitlines() if line.strip()][-1:] or [""]
    return {
        "command": " ".join(case.command),
        "param": case.param,
        "value": case.label,
        "exit_code": code,
        "seconds": round(seconds, 3),
        "problems": problems,
        "json": "--json" in case.argv,
        "last_line": last[0][:300],
    }


def warm_up() -> None:
    """Import what the long commands import lazily (torch, transformers), once, before any case is
    timed: an import cut short by a case's alarm leaves torch half-registered for every later case."""
    import harness.ppo.sft  # noqa: F401
    import harness.ppo.trainer  # noqa: F401


def fuzz(
    ws: Workspace,
    subprocess_every: int = 0,
    repo: Path | None = None,
    only: set[str] | None = None,
    target: typer.Typer = app,
    sample: int = 0,
    shard: tuple[int, int] = (0, 1),
    log: Any = None,
    rows_file: Path | None = None,
) -> dict[str, Any]:
    """Run every case (in-process; every ``subprocess_every``-th also as a real process) and summarise;
    ``shard`` (i, n): only cases i, i+n, i+2n, ... (n processes share the work)."""
    todo = [c for c in cases(ws, target, sample) if only is None or " ".join(c.command) in only]
    todo = todo[shard[0] :: shard[1]]
    if any(c.command[0] in ("train", "sft", "eval", "gate") for c in todo):
        warm_up()
    rows = []
    for i, c in enumerate(todo):
        rows.append(run_in_process(c, ws, target))
        if rows_file is not None:  # one JSON line per case as it ends: a cut-short run still counts
            with open(rows_file, "a", encoding="utf-8") as f:
                f.write(json.dumps(rows[-1], ensure_ascii=True) + "\n")
        if log is not None and rows[-1]["problems"]:
            log(f"[{i + 1}/{len(todo)}] {rows[-1]}")
    sub_rows = []
    if subprocess_every:
        sub_rows = [run_subprocess(c, ws, repo or Path.cwd()) for c in todo[::subprocess_every]]
    return summarise(rows, sub_rows)


def summarise_file(path: Path) -> dict[str, Any]:
    """The summary of the rows of one or more ``--rows`` files (a shard each)."""
    rows = [json.loads(line) for p in str(path).split(",") for line in Path(p).read_text().splitlines() if line]
    return summarise(rows, [])


def summarise(rows: list[dict[str, Any]], sub_rows: list[dict[str, Any]]) -> dict[str, Any]:
    def count(rs: list[dict[str, Any]], problem: str) -> int:
        return sum(any(p.startswith(problem) for p in r["problems"]) for r in rs)

    codes: dict[str, int] = {}
    for r in rows:
        codes[str(r["exit_code"])] = codes.get(str(r["exit_code"]), 0) + 1
    return {
        "commands": len({r["command"] for r in rows}),
        "parameters": len({(r["command"], r["param"]) for r in rows}),
        "cases": len(rows),
        "tracebacks": count(rows, "traceback"),
        "unexpected_errors": count(rows, "unexpected"),
        "bad_exit_codes": count(rows, "exit code"),
        "hangs": count(rows, "hang"),
        "json_cases": sum(bool(r.get("json")) for r in rows),
        "non_strict_json": count(rows, "NaN") + count(rows, "Infinity") + count(rows, "-Infinity"),
        "exit_codes": dict(sorted(codes.items())),
        "accepted_exit_0": sum(r["exit_code"] == 0 for r in rows),
        "seconds_total": round(sum(r["seconds"] for r in rows), 1),
        "subprocess": {
            "cases": len(sub_rows),
            "tracebacks": count(sub_rows, "traceback"),
            "unexpected_errors": count(sub_rows, "unexpected"),
            "hangs": count(sub_rows, "hang"),
            "bad_exit_codes": count(sub_rows, "exit code"),
        },
        "failures": [r for r in rows + sub_rows if r["problems"]],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--subprocess", type=int, default=0, metavar="N", help="Also run every N-th case as a real process (0: none)."
    )
    ap.add_argument("--only", action="append", help="Only this command (e.g. 'knobs set'); repeatable.")
    ap.add_argument("--out", type=Path, help="Also write the JSON here.")
    ap.add_argument(
        "--sample",
        type=int,
        default=0,
        metavar="K",
        help="Only K values per option, rotated over the options (0: every value).",
    )
    ap.add_argument("--rows", type=Path, help="Append each case's row to this JSONL file as it ends.")
    ap.add_argument("--shard", default="0/1", help="I/N: run only every N-th case from the I-th (parallel runs).")
    ap.add_argument("--summarise", help="Print the summary of these --rows files (comma-separated) and exit.")
    args = ap.parse_args()
    if args.summarise:
        print(json.dumps(summarise_file(args.summarise), indent=2, ensure_ascii=False))
        return
    shard = tuple(int(x) for x in args.shard.split("/"))
    with tempfile.TemporaryDirectory(prefix="eau-cli-fuzz-") as tmp:
        os.chdir(tmp)  # ./knobs, ./runs and anything a command creates by default land here
        ws = Workspace(Path(tmp) / "ws")
        t0 = time.perf_counter()
        doc = fuzz(
            ws,
            args.subprocess,
            Path(__file__).resolve().parents[1],
            set(args.only) if args.only else None,
            sample=args.sample,
            shard=shard,
            log=lambda m: print(m, file=sys.stderr, flush=True),
            rows_file=args.rows,
        )
        doc["wall_s"] = round(time.perf_counter() - t0, 1)
    text = json.dumps(doc, indent=2, ensure_ascii=False)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
