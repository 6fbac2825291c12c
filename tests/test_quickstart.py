"""The README's two commands work in either order: tests never read the checkout's live knobs/ (a
run or a person may have changed it), and a run leaves the knobs folder as it found it."""

from __future__ import annotations

import filecmp
import os
import subprocess
import sys
from pathlib import Path

from harness.io import yamlio
from harness.knobs.folder import copy_defaults, defaults_dir, made_from, packaged_files, resolve_knobs_dir

REPO = Path(__file__).resolve().parents[1]


def same_tree(a: Path, b: Path) -> bool:
    # the folder's bookkeeping (history, pending notes, its lock, what it was made from) is not content
    cmp = filecmp.dircmp(a, b, ignore=[".history", ".pending", ".lock", ".defaults.json", "__pycache__"])
    if cmp.left_only or cmp.right_only or cmp.diff_files or cmp.funny_files:
        return False
    return all(same_tree(a / d, b / d) for d in cmp.common_dirs)


def test_every_test_reads_a_fresh_copy_of_the_packaged_defaults():
    folder = Path(os.environ["EAU_KNOBS_DIR"])
    assert folder.resolve() != (REPO / "knobs").resolve()
    assert same_tree(folder, defaults_dir()) and made_from(folder) == packaged_files()
    assert resolve_knobs_dir(None) == folder  # what a command without --knobs-dir uses in a test


def test_the_tests_pass_beside_a_knobs_folder_a_run_or_a_person_changed(tmp_path):
    """The issue's failure: a run's preset values left in ./knobs made `eau play travel` end after 4
    turns and 38 tests fail. Here ./knobs (the working directory's) holds such values and a broken
    rule file, no EAU_KNOBS_DIR is set, and the gym and play tests still pass."""
    knobs = copy_defaults(tmp_path / "knobs")
    env_doc, _ = yamlio.read_yaml(knobs / "env.yaml")
    yamlio.assign(env_doc, "max_steps", 4)
    yamlio.atomic_write_text(knobs / "env.yaml", yamlio.dump(env_doc))
    (knobs / "rules" / "users" / "travel.yaml").write_text("intents: {{{ not yaml")
    env = {k: v for k, v in os.environ.items() if k not in ("EAU_KNOBS_DIR", "PYTEST_ADDOPTS")}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(REPO / "tests" / "test_gyms_play.py"),
            str(REPO / "tests" / "test_gyms_travel.py"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and "failed" not in out.stdout


def test_a_command_without_a_knobs_folder_makes_one_from_the_defaults(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "EAU_KNOBS_DIR"}
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli.main", "knobs", "get", "env.max_steps", "--gym", "travel"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "env.max_steps = 16" in out.stdout
    assert f"created {tmp_path / 'knobs'} from the packaged defaults" in out.stderr
    assert same_tree(tmp_path / "knobs", defaults_dir())
    again = subprocess.run(
        [sys.executable, "-m", "harness.cli.main", "knobs", "list"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0 and "created" not in again.stderr  # made once
