"""Detectors of ``eau diagnose``: small pure functions over a window's metrics and episodes,
registered by name (see :mod:`harness.analysis.detectors.base` for the contract).

Registered: deadlock, user_leakage, user_unreliable, reward_hacking, template_collapse,
entropy_collapse, silent_tool_failures, unreachable_tasks, arm_disparity, question_rate_drop.
"""

from harness.analysis.detectors import episodes, policy, reward, user  # noqa: F401  (registration)
from harness.analysis.detectors.base import COMPONENTS, DETECTORS, Detector, DetectorInput, Finding, Threshold, detector

ORDER = (
    "deadlock",
    "user_leakage",
    "user_unreliable",
    "reward_hacking",
    "template_collapse",
    "entropy_collapse",
    "silent_tool_failures",
    "unreachable_tasks",
    "arm_disparity",
    "question_rate_drop",
)

__all__ = ["COMPONENTS", "DETECTORS", "Detector", "DetectorInput", "Finding", "Threshold", "detector", "ORDER"]
