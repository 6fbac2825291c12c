"""Simulated users: the symbolic user (YAML rules), the LLM user (local model or OpenAI-compatible
endpoint) and the mixture that picks one per episode (``UserFactory``). A rule file with a
``persuasion`` section (persuade) gives the persuadable user of either arm instead
(``persuasion.PersuadableUser``, ``persuasion_llm.PersuadableLLMUser``)."""

from harness.users.base import SimulatedUser
from harness.users.leakguard import LeakGuard
from harness.users.mixture import UserFactory
from harness.users.personas import PERSONA_NAMES
from harness.users.rules import RuleFileError, compile_user_rules, load_user_rules_file, validate_rule_file
from harness.users.symbolic import SymbolicUser

__all__ = [
    "UserFactory",
    "SimulatedUser",
    "SymbolicUser",
    "LeakGuard",
    "PERSONA_NAMES",
    "RuleFileError",
    "compile_user_rules",
    "load_user_rules_file",
    "validate_rule_file",
]
