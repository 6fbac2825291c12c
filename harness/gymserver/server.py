"""Serving a gym as an OpenEnv environment: OpenEnv's own FastAPI app (``create_app``: ``/ws`` sessions,
``/reset``, ``/step``, ``/state``, ``/schema``, ``/health``) around :class:`GymEnvironment`, run by
uvicorn (``eau openenv GYM``). Each WebSocket session gets its own gym instance; the knobs folder is
read at every reset, the user arm is the folder's mixture unless the client's reset names one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from openenv.core.env_server.http_server import create_app

from harness.gymserver.environment import GymAction, GymEnvironment, GymObservation, knobs_reader

DEFAULT_MAX_SESSIONS = 8  # concurrent episodes (one gym instance each); a symbolic user costs little


def make_app(
    gym: str,
    knobs_dir: Path,
    *,
    rendering: str = "tagged",
    user_factory: Any = None,
    split: str = "train",
    arm: str | None = "symbolic",
    max_sessions: int = DEFAULT_MAX_SESSIONS,
) -> Any:
    """The ASGI app serving ``gym`` (ValueError/KeyError for an unknown gym or an invalid knobs
    folder, raised here rather than at the first session)."""
    knobs = knobs_reader(knobs_dir)
    knobs()  # an invalid folder fails now, naming the file

    def factory() -> GymEnvironment:
        return GymEnvironment(gym, knobs, rendering=rendering, user_factory=user_factory, split=split, arm=arm)

    factory().env.check_available()  # a gym on an absent optional package (τ²) says what to install now
    return create_app(factory, GymAction, GymObservation, env_name=f"eau-{gym}", max_concurrent_envs=max_sessions)
