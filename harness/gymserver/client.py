"""The typed OpenEnv client of a served gym (``EnvClient``: a WebSocket session per client). OpenEnv's
``GenericEnvClient`` works as well, with dictionaries; this one returns :class:`GymObservation`."""

from __future__ import annotations

from typing import Any

from openenv.core import EnvClient
from openenv.core.client_types import StepResult

from harness.gymserver.environment import GymAction, GymObservation, GymState


class GymEnvClient(EnvClient[GymAction, GymObservation, GymState]):
    """``with GymEnvClient(base_url="http://127.0.0.1:8000").sync() as env: env.reset(seed=0)``."""

    def _step_payload(self, action: GymAction) -> dict[str, Any]:
        return {"message": action.message}

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[GymObservation]:
        obs = GymObservation(
            **payload.get("observation", {}), reward=payload.get("reward"), done=payload.get("done", False)
        )
        return StepResult(observation=obs, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: dict[str, Any]) -> GymState:
        return GymState(**payload)
