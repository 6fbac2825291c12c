"""The user mixture: which arm (symbolic or LLM) an episode gets, and building that user.

``user_strategy_mix`` is the probability of the symbolic arm, drawn per episode for *every* gym (the
method's selector resolved to None for most gyms; here a gym either gets an arm or an error).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from harness.types import ARMS
from harness.users.backends import make_backend
from harness.users.base import SimulatedUser
from harness.users.llm import LLMUser
from harness.users.persuasion import PersuadableUser
from harness.users.persuasion_llm import PersuadableLLMUser
from harness.users.rules import RuleFileError, compile_user_rules
from harness.users.symbolic import SymbolicUser


class UserFactory:
    """Chooses the arm of each episode and builds its user.

    llm: an LLM chat backend (``harness.users.backends``: a local transformers model or an
        OpenAI-compatible endpoint), or the run config's ``user_llm`` mapping to build one from
        (``make_backend``), or None when the run has no LLM user; then an episode that draws the
        LLM arm raises (``user_strategy_mix: 1.0`` never draws it).
    """

    def __init__(self, llm: Any = None):
        if isinstance(llm, Mapping):
            llm = make_backend(llm)
        self.llm = llm

    def close(self) -> None:
        """Release the LLM backend's resources (a vLLM server it started); the run calls it at its end."""
        close = getattr(self.llm, "close", None)
        if close is not None:
            close()

    def choose_arm(self, rng: np.random.Generator, user_knobs: Mapping[str, Any]) -> str:
        """Draw the episode's arm: "symbolic" with probability ``user_strategy_mix``, else "llm".

        One uniform number is drawn whatever the mix, so changing the mix does not shift the rest
        of the episode's random stream. A mix of exactly 1.0 never needs an LLM backend."""
        if "user_strategy_mix" not in user_knobs:
            raise ValueError("user knob 'user_strategy_mix' is missing (knobs/user.yaml)")
        mix = user_knobs["user_strategy_mix"]
        if isinstance(mix, bool) or not isinstance(mix, (int, float)) or not 0.0 <= float(mix) <= 1.0:
            raise ValueError(f"user knob user_strategy_mix={mix!r} is invalid; expected a number in [0, 1]")
        u = float(rng.random())
        arm = "symbolic" if u < float(mix) else "llm"
        if arm == "llm" and self.llm is None:
            raise RuntimeError(
                f"user_strategy_mix={mix} drew the LLM user, but no LLM user is configured. Set `user_llm` in "
                "the run config (a local transformers model path, or an OpenAI-compatible endpoint: base_url, "
                "model, api_key) or set user_strategy_mix: 1.0 in knobs/user.yaml for the symbolic user only."
            )
        return arm

    def make(self, arm: str, env: Any) -> SimulatedUser:
        """The user of arm ``arm`` for ``env`` (a ``UserCentricEnv``: its ``name``, ``knobs`` and
        ``dynamic_facts`` hook are used). A rule file with a ``persuasion`` section (persuade) gives the
        persuadable user of either arm (``harness.users.persuasion``). The gym's rule file ``knobs/rules/users/<gym>.yaml`` is
        required by both arms (the LLM arm uses its decline, volunteer and redaction templates)."""
        if arm not in ARMS:
            raise ValueError(f"unknown user arm {arm!r}; allowed: {', '.join(ARMS)}")
        data = env.knobs.user_rules_for(env.name)
        if data is None:
            raise RuleFileError(
                f"gym {env.name!r} has no symbolic-user rule file knobs/rules/users/{env.name}.yaml; both user arms "
                "need one (start from knobs/rules/users/travel.yaml; schema knobs/schema/user_rules.schema.json)"
            )
        rules = compile_user_rules(data, f"knobs/rules/users/{env.name}.yaml", gym=env.name)
        build = getattr(env, "build_user", None)
        if build is not None:
            # a gym whose users act in its world (τ²'s customers run tools on their own phone)
            if arm == "llm" and self.llm is None:
                raise RuntimeError(
                    "the LLM user arm was requested but UserFactory has no LLM backend (llm=None); configure `user_llm` in the run config"
                )
            return build(arm, rules, self.llm)
        if arm == "symbolic":
            if rules.persuasion is not None:  # a rule file with a persuasion section: a persuadable user
                return PersuadableUser(rules, env.dynamic_facts)
            return SymbolicUser(rules, env.dynamic_facts)
        if self.llm is None:
            raise RuntimeError(
                "the LLM user arm was requested but UserFactory has no LLM backend (llm=None); "
                "configure `user_llm` in the run config"
            )
        # local imports: keep the symbolic-only path free of openai/torch imports
        if rules.persuasion is not None:
            return PersuadableLLMUser(rules, self.llm, env.dynamic_facts)

        return LLMUser(rules, self.llm, env.dynamic_facts)
