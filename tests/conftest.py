"""Shared fixtures. Every test runs with ``EAU_KNOBS_DIR`` pointing at a fresh copy of the packaged
default knobs, so no test reads or writes the checkout's live ``knobs/`` (whatever a user or a run
left there) and every test sees the same defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.knobs.folder import copy_defaults

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture(autouse=True)
def _isolated_knobs(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test: ``EAU_KNOBS_DIR`` is a fresh copy of the packaged defaults (commands that take no
    --knobs-dir use it, never ./knobs of the checkout)."""
    dst = copy_defaults(tmp_path_factory.mktemp("default-knobs") / "knobs")
    monkeypatch.setenv("EAU_KNOBS_DIR", str(dst))
    return dst


@pytest.fixture
def knobs_dir(tmp_path: Path) -> Path:
    """A copy of the packaged default knobs (schemas, values, rules) that a test may edit freely."""
    return copy_defaults(tmp_path / "knobs")


@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    d = tmp_path / "runs"
    d.mkdir()
    return d
