"""Per-turn rewards: the verifiable task reward plus rule rewards from ``knobs/rules/rewards``."""

from harness.rewards.model import RewardModel
from harness.rewards.predicates import PREDICATES, get_predicate, predicate_names, register_predicate
from harness.rewards.rules import (
    RewardRule,
    RewardRuleError,
    check_unique_names,
    compile_rule_files,
    validate_rule_file,
)

__all__ = [
    "RewardModel",
    "RewardRule",
    "RewardRuleError",
    "check_unique_names",
    "compile_rule_files",
    "validate_rule_file",
    "PREDICATES",
    "get_predicate",
    "predicate_names",
    "register_predicate",
]
