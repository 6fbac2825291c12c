"""A seeded `eau train --preset tiny --steps 5` gives the metrics recorded in
tests/data/tiny_seed0_steps5_metrics.json, to float tolerance: a restructuring changes where code lives,
not what it does.

The run is made under ``PORTABLE_MATH`` (harness/ppo/numerics.py): ATen's kernels at AVX2 width
(``ATEN_CPU_CAPABILITY=avx2``), MKL's reproducible branch for every vendor (``MKL_CBWR=COMPATIBLE``),
oneDNN capped at AVX2 (``ONEDNN_MAX_CPU_ISA=AVX2``); the tiny preset runs one torch thread. Without them
the numbers depend on the processor: the golden recorded on an AVX-512 Xeon failed on an AVX2-only AMD
EPYC at step 1 (``clip_frac`` 0.011747 recorded, 0.011525 got); on an AVX-512 machine
``ATEN_CPU_CAPABILITY=avx2`` reproduced the AVX2 machine's 0.011525 to the bit, and the settings above give
the same bits on AVX-512 and AVX2 processors of either vendor. A processor without AVX2 cannot run
those kernels: the test skips there, saying so.

Provenance of the golden: recorded at a00e61f under ``PORTABLE_MATH`` on an AMD EPYC (AVX-512). At that
commit the same run with the processor's own kernels still matched, to this tolerance, the golden
recorded before the trainer was restructured (092c981, Intel Xeon, AVX-512), so the behaviour this
file pins is the pre-restructuring one. Re-record (a new torch, or a deliberate change of behaviour):
``python tests/test_behaviour_identity.py --record``.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from harness.knobs.folder import copy_defaults
from harness.ppo.numerics import PORTABLE_MATH

GOLDEN = Path(__file__).parent / "data" / "tiny_seed0_steps5_metrics.json"
COMMAND = ["train", "--preset", "tiny", "--steps", "5", "--seed", "0", "--run-id", "g", "--no-progress"]
IGNORED = [  # wall-clock figures: they change with the machine's load, never with behaviour
    "time",
    "time_rollout_s",
    "time_generate_s",
    "time_env_s",
    "time_update_s",
    "time_harness_s",
    "time_step_s",
    "rollout_tokens_per_s",
]


def _portable_env(knobs_dir: Path, runs_dir: Path) -> dict[str, str]:
    return {**os.environ, **PORTABLE_MATH, "EAU_KNOBS_DIR": str(knobs_dir), "EAU_RUNS_DIR": str(runs_dir)}


def _capability_under(env: dict[str, str]) -> str:
    """The CPU kernels torch dispatches in a process started with ``env``."""
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


def _run(knobs_dir: Path, runs_dir: Path) -> tuple[list[dict], dict]:
    """The seeded tiny run under PORTABLE_MATH: its metrics rows and its ``numerics`` event."""
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli.main", *COMMAND],
        env=_portable_env(knobs_dir, runs_dir),
        capture_output=True,
        text=True,
        timeout=1800,  # about 2.5 minutes on two quiet cores (MKL's COMPATIBLE branch is the slow part)
    )
    assert out.returncode == 0, out.stderr[-3000:]
    run = runs_dir / "g"
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    events = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    numerics = next(e for e in events if e["event"] == "numerics")
    return rows, numerics


@pytest.mark.timeout(1800)  # a loaded machine: the run alone takes minutes
def test_a_seeded_tiny_run_gives_the_recorded_metrics(tmp_path, knobs_dir):
    golden = json.loads(GOLDEN.read_text())
    if golden["torch"] != torch.__version__:
        pytest.skip(f"recorded with torch {golden['torch']}; kernels of torch {torch.__version__} round differently")
    runs_dir = tmp_path / "runs"
    capability = _capability_under(_portable_env(knobs_dir, runs_dir))
    if capability != "AVX2":
        pytest.skip(f"this processor runs ATen's {capability} kernels, not AVX2: the portable golden needs AVX2")
    rows, numerics = _run(knobs_dir, runs_dir)
    # the settings took effect in the run itself (a variable set too late would be ignored silently)
    assert numerics["portable"] and numerics["cpu_capability"] == "AVX2", numerics
    assert numerics["torch_threads"] == golden["torch_threads"], numerics
    assert len(rows) == len(golden["metrics"]) == 5
    for want, got in zip(golden["metrics"], rows):
        assert set(want) <= set(got), set(want) - set(got)
        for key, w in want.items():
            g = got[key]
            if isinstance(w, float) or isinstance(g, float):
                assert math.isclose(g, w, rel_tol=1e-3, abs_tol=1e-4), (want["step"], key, w, g)
            else:
                assert g == w, (want["step"], key, w, g)


def _record() -> None:
    """Write the golden from a fresh run at this commit (see the module's docstring for when)."""
    with tempfile.TemporaryDirectory() as tmp:
        rows, numerics = _run(copy_defaults(Path(tmp) / "knobs"), Path(tmp) / "runs")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    doc = {
        "command": "eau " + " ".join(COMMAND[:-3]),
        "recorded_at_commit": commit,
        "torch": numerics["torch"],
        "cpu": numerics["cpu_model"],
        "numerics": PORTABLE_MATH,
        "torch_threads": numerics["torch_threads"],
        "ignored": IGNORED,
        "metrics": [{k: v for k, v in row.items() if k not in IGNORED} for row in rows],
    }
    GOLDEN.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {GOLDEN} ({len(rows)} steps, {numerics['cpu_capability']} kernels, {numerics['cpu_model']})")


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: python tests/test_behaviour_identity.py --record")
    _record()
