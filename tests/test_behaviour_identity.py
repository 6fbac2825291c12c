"""A seeded `eau train --preset tiny --steps 5` gives the metrics it gave before the trainer was
restructured (tests/data/tiny_seed0_steps5_metrics.json, recorded then), to float tolerance: the
restructuring (issue "A codebase a newcomer can read") changed where code lives, not what it does."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

GOLDEN = Path(__file__).parent / "data" / "tiny_seed0_steps5_metrics.json"


def test_a_seeded_tiny_run_gives_the_recorded_metrics(tmp_path, knobs_dir):
    golden = json.loads(GOLDEN.read_text())
    if golden["torch"] != torch.__version__:
        pytest.skip(f"recorded with torch {golden['torch']}; kernels of torch {torch.__version__} round differently")
    env = {**os.environ, "EAU_KNOBS_DIR": str(knobs_dir), "EAU_RUNS_DIR": str(tmp_path / "runs")}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli.main",
            "train",
            "--preset",
            "tiny",
            "--steps",
            "5",
            "--seed",
            "0",
            "--run-id",
            "g",
            "--no-progress",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "runs" / "g" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == len(golden["metrics"]) == 5
    for want, got in zip(golden["metrics"], rows):
        assert set(want) <= set(got), set(want) - set(got)
        for key, w in want.items():
            g = got[key]
            if isinstance(w, float) or isinstance(g, float):
                assert math.isclose(g, w, rel_tol=1e-3, abs_tol=1e-4), (want["step"], key, w, g)
            else:
                assert g == w, (want["step"], key, w, g)
