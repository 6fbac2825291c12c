"""Shared fixtures: a private copy of the repository's knobs folder for every test that writes knobs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture
def knobs_dir(tmp_path: Path) -> Path:
    """A copy of knobs/ (schemas, values, rules) that a test may edit freely."""
    dst = tmp_path / "knobs"
    shutil.copytree(REPO / "knobs", dst, ignore=shutil.ignore_patterns(".pending", ".history"))
    return dst


@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    d = tmp_path / "runs"
    d.mkdir()
    return d
