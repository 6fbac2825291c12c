"""``eau openenv GYM``: serve a gym as an OpenEnv environment (harness/gymserver/) on an address of
this machine, for any OpenEnv client: TRL, SkyRL, ART, verifiers, or ``openenv``'s own clients."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Optional

import typer

from harness.cli.common import (
    EXIT_ERROR,
    EXIT_INVALID,
    EXIT_NOT_FOUND,
    EXIT_USAGE,
    KnobsDirOpt,
    check_text_option,
    fail,
    knobs_dir,
)
from harness.envs.actions import RENDERINGS
from harness.envs.base import SPLITS
from harness.envs.registry import gym_class, names
from harness.knobs.store import KnobError
from harness.users import UserFactory
from harness.users.backends import OpenAIChatBackend

USERS = ("symbolic", "llm", "mixture")


def register(app: typer.Typer) -> None:
    app.command("openenv")(openenv_cmd)


def openenv_cmd(
    gym: str = typer.Argument(..., help="Gym to serve (eau tasks list shows them)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (loopback by default)."),
    port: int = typer.Option(8000, "--port", help="Port to listen on."),
    user: str = typer.Option(
        "symbolic",
        "--user",
        help="User arm: symbolic, llm, or mixture (the knobs' user mixture); a reset may name one.",
    ),
    fmt: str = typer.Option("tagged", "--format", help="Action rendering: tagged or tool_call."),
    split: str = typer.Option("train", "--split", help="Task split a reset draws from unless it names one."),
    max_sessions: int = typer.Option(8, "--max-sessions", help="Concurrent episodes (one gym instance each)."),
    llm_url: Optional[str] = typer.Option(None, "--llm-url", help="OpenAI-compatible base URL of the LLM user."),
    llm_model: Optional[str] = typer.Option(None, "--llm-model", help="Model name of the LLM user."),
    kdir: Optional[Path] = KnobsDirOpt,
) -> None:
    """Serve GYM as an OpenEnv environment: POST /reset and /step, WebSocket /ws (one episode per
    session), GET /schema, /state, /health. The knobs folder (env, user and reward knobs, rule files) is
    read at every reset. Runs until stopped (Ctrl-C). Exit 5: unknown gym; 4: invalid knobs folder; 2:
    bad option; 1: the server could not start (the openenv extra missing, the port taken)."""
    for opt, value, allowed in (("--user", user, USERS), ("--split", split, SPLITS), ("--format", fmt, RENDERINGS)):
        if value not in allowed:
            fail(f"{opt} {value!r} is not allowed; choose one of: {', '.join(allowed)}", EXIT_USAGE)
    if max_sessions < 1:
        fail(f"--max-sessions must be at least 1, got {max_sessions}", EXIT_USAGE)
    if not 0 <= port <= 65_535:
        fail(f"--port must be 0..65535, got {port}", EXIT_USAGE)
    for opt, text in (("--host", host), ("--llm-url", llm_url), ("--llm-model", llm_model)):
        check_text_option(text, opt)  # the socket layer fails on such a name with a bare TypeError
    try:
        gym_class(gym)
    except KeyError:
        fail(f"unknown gym {gym!r}; known gyms: {', '.join(names())}", EXIT_NOT_FOUND)
    try:  # the openenv extra, imported only when a gym is served
        import uvicorn  # noqa: PLC0415  (optional: the openenv extra)

        from harness.gymserver.server import make_app  # noqa: PLC0415  (optional: the openenv extra)
    except ImportError as exc:
        fail(f"serving OpenEnv environments needs the openenv extra: pip install 'eau-harness[openenv]' ({exc})")
    factory = UserFactory()
    if user in ("llm", "mixture") and llm_url:
        if not llm_model:
            fail("--llm-url needs --llm-model (the model name the endpoint serves)", EXIT_USAGE)
        factory = UserFactory(llm=OpenAIChatBackend(base_url=llm_url, model=llm_model))
    elif user == "llm":
        fail("--user llm needs an OpenAI-compatible endpoint: --llm-url URL --llm-model NAME", EXIT_USAGE)
    folder = knobs_dir(kdir)
    try:
        app = make_app(
            gym,
            folder,
            rendering=fmt,
            user_factory=factory,
            split=split,
            arm=None if user == "mixture" else user,
            max_sessions=max_sessions,
        )
    except KnobError as exc:
        fail(f"knobs folder {folder} is invalid: {exc}", EXIT_INVALID)
    except ImportError as exc:  # a gym on an optional package (τ²) names its install command
        fail(str(exc), EXIT_ERROR)
    try:  # bound before serving, and handed to the server: a taken port or a bad address is a clear error
        sock = socket.create_server((host, port))
    except (OSError, ValueError) as exc:
        fail(f"cannot listen on {host}:{port}: {exc}", EXIT_ERROR)
    sys.stderr.write(f"serving {gym} ({fmt}, user {user}) as an OpenEnv environment at http://{host}:{port}\n")
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
