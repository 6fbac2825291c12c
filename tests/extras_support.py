"""Tests of the optional extras (trackers, openenv): skipped where an extra is absent, except in CI."""

from __future__ import annotations

import importlib.util
import os

import pytest


def require(module: str, extra: str | None = None) -> None:
    """Skip when an optional extra's module is absent; fail instead under ``EAU_REQUIRE_EXTRAS=1``
    (.ci/run installs the extras, so a missing one there is a broken install, not a reason to skip)."""
    if importlib.util.find_spec(module) is None:
        message = f"{module} is not installed (pip install 'eau-harness[{extra or module}]')"
        if os.environ.get("EAU_REQUIRE_EXTRAS") == "1":
            pytest.fail(message + " and EAU_REQUIRE_EXTRAS=1")
        pytest.skip(message, allow_module_level=True)  # test_openenv calls it at import
