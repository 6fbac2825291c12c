"""``eau play GYM``: a person plays the agent's side of one episode in the terminal.

Each turn is read from stdin, one line at a time; a line ending with ``\\`` continues on the next
line (for multi-line answers). Turns use the agent's own action forms (``ASK: ...``,
``SEARCH: ...``, ``ANSWER: ...``, or an ``interact`` tool call with ``--format tool_call``), so a
malformed turn gets the same feedback and format penalty a model would. After every turn the
observation, the facts the user revealed and the reward breakdown are shown; the episode summary
comes at the end (also when stdin ends before an answer). ``--json`` prints the episode record as
one JSON document on stdout and the interactive transcript on stderr.

``--user llm`` plays against an LLM user on an OpenAI-compatible endpoint (``--llm-url``,
``--llm-model``; ``vllm serve`` or any hosted API).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional, TextIO

import typer

from harness.cli.common import (
    EXIT_INVALID,
    EXIT_NOT_FOUND,
    EXIT_USAGE,
    JsonOpt,
    KnobsDirOpt,
    emit_json,
    fail,
    knobs_dir,
)
from harness.envs.actions import RENDERINGS
from harness.envs.base import SPLITS
from harness.envs.registry import gym_class, names
from harness.knobs.store import KnobError
from harness.stores import open_store
from harness.types import ARMS
from harness.users import UserFactory
from harness.users.backends import OpenAIChatBackend

CONTINUATION = "\\"


def register(app: typer.Typer) -> None:
    """Add the ``play`` command to the ``eau`` app."""
    app.command("play", help="Play one episode of a gym as the agent, in the terminal (reads stdin).")(play)


def read_turn(stream: TextIO) -> str | None:
    """One agent turn from ``stream``: a line, joined with the following ones while it ends with
    a backslash. None at end of input with nothing read."""
    lines: list[str] = []
    while True:
        line = stream.readline()
        if not line:
            return "\n".join(lines) if lines else None
        line = line.rstrip("\r\n")
        if line.endswith(CONTINUATION):
            lines.append(line[: -len(CONTINUATION)])
            continue
        lines.append(line)
        return "\n".join(lines)


def _fmt_breakdown(b: dict[str, Any]) -> str:
    parts = [f"total {b.get('total', 0.0):+.3f}", f"task {b.get('task', 0.0):+.3f}"]
    parts += [f"{k} {v:+.3f}" for k, v in (b.get("rules") or {}).items()]
    parts += [f"{k} {v:+.3f}" for k, v in (b.get("builtin") or {}).items() if v]
    if b.get("clipped"):
        parts.append(f"clipped to {b.get('clip')}")
    return ", ".join(parts)


def _summary(rec: dict[str, Any]) -> str:
    keys = (
        "success",
        "answered",
        "deadlock",
        "task_score",
        "reward",
        "num_turns",
        "questions",
        "searches",
        "format_errors",
        "disclosures",
    )
    body = "\n".join(f"  {k}: {round(rec[k], 4) if isinstance(rec[k], float) else rec[k]}" for k in keys)
    return f"=== episode summary ===\n{body}"


def _make_factory(user: str, llm_url: Optional[str], llm_model: Optional[str], as_json: bool) -> Any:
    if user != "llm":
        return UserFactory()
    if not llm_url or not llm_model:
        fail(
            "--user llm needs an OpenAI-compatible endpoint: pass --llm-url URL (e.g. http://127.0.0.1:8000/v1, "
            "from `vllm serve`) and --llm-model NAME",
            EXIT_USAGE,
            as_json,
        )

    return UserFactory(llm=OpenAIChatBackend(base_url=llm_url, model=llm_model))


def play(
    gym: str = typer.Argument(
        ...,
        help=(
            "Gym name (travel, function, telepathy, intention, persuade, turtle, colbench, tau, "
            "tau2_airline, tau2_retail, tau2_telecom)."
        ),
    ),
    user: str = typer.Option("symbolic", "--user", help="User arm: symbolic or llm."),
    seed: int = typer.Option(0, "--seed", help="Episode seed (task draw and user)."),
    split: str = typer.Option("train", "--split", help="Task split: train or eval."),
    fmt: str = typer.Option("tagged", "--format", help="Action rendering: tagged or tool_call."),
    llm_url: Optional[str] = typer.Option(None, "--llm-url", help="OpenAI-compatible base URL for --user llm."),
    llm_model: Optional[str] = typer.Option(None, "--llm-model", help="Model name for --user llm."),
    kdir: Optional[Path] = KnobsDirOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Play one episode of GYM, reading agent turns from stdin."""
    for opt, value, allowed in (("--user", user, ARMS), ("--split", split, SPLITS), ("--format", fmt, RENDERINGS)):
        if value not in allowed:
            fail(f"{opt} {value!r} is not allowed; choose one of: {', '.join(allowed)}", EXIT_USAGE, as_json)
    try:
        cls = gym_class(gym)
    except KeyError:
        fail(f"unknown gym {gym!r}; known gyms: {', '.join(names())}", EXIT_NOT_FOUND, as_json)
    folder = knobs_dir(kdir)
    try:
        knobs = open_store(folder, events_path=None).snapshot()
    except KnobError as exc:
        fail(f"knobs folder {folder} is invalid: {exc}", EXIT_INVALID, as_json, problems=exc.problems)
    factory = _make_factory(user, llm_url, llm_model, as_json)
    try:
        env = cls(knobs=knobs, rendering=fmt, user_factory=factory, split=split)
    except ImportError as exc:  # a gym on an optional package (τ²) names its install command
        fail(str(exc), 1, as_json)
    out = sys.stderr if as_json else sys.stdout

    def show(text: str = "") -> None:
        out.write(text + "\n")
        out.flush()

    obs, info = env.reset(seed=seed, options={"arm": user, "split": split})
    show(f"=== {gym} | task {info['task_id']} | split {info['split']} | user {info['arm']} | seed {seed} ===")
    show(info["system_prompt"])
    show(f"(A line ending with {CONTINUATION} continues your turn on the next line.)")
    show(f"\n[task] {obs}")
    while not env.state.done:
        out.write(f"\nturn {env.state.turn + 1}> ")
        out.flush()
        text = read_turn(sys.stdin)
        if text is None:
            show("\n(end of input: the episode stops here without an answer)")
            break
        obs, _, _, _, _ = env.step(text)
        record = env.state.turns[-1]
        role = {"user": "user", "tool": "search", "env": "env"}[record.obs_role]
        show(f"[{role}] {obs}")
        if record.user_reply and record.user_reply.revealed:
            for fact in record.user_reply.revealed:
                show(f"  revealed {fact.key} ({fact.kind}): {fact.text}")
        if record.events:
            show(f"  events: {', '.join(record.events)}")
        show(f"  reward: {_fmt_breakdown(record.reward_breakdown)}")
    rec = env.episode_record()
    show("\n" + _summary(rec))
    if as_json:
        emit_json({"ok": True, "episode": rec})
