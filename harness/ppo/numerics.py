"""What decides a run's floating-point results on a CPU, and the setting that makes them the same on
every x86-64 processor.

A seeded run gives the same numbers every time on one machine. Across processors it does not, even with
the same torch: ATen dispatches vectorised kernels by the widest instruction set the CPU has (AVX-512 on
one Xeon or EPYC, AVX2 on another), MKL and oneDNN choose their own code paths per processor, and a
reduction summed 16 lanes at a time rounds differently from one summed 8 at a time. The difference is in
the last bits of one update, then a sampled token flips and the runs part. Measured: a seeded `tiny`
run agreed to the bit with its recorded metrics on AVX-512 machines (Intel and AMD) and parted at step 1
on an AVX2-only AMD EPYC (`clip_frac` 0.011525 against 0.011747); on an AVX-512 machine with
``ATEN_CPU_CAPABILITY=avx2`` the run gave the AVX2 machine's value to the bit.

:data:`PORTABLE_MATH` pins each of those choices. Set in the environment before the process starts
(torch and MKL read them once, at their first use), a run gives the same bits on any x86-64 processor
with AVX2 and the same number of torch threads, at some cost in speed. The run records what was in force (:func:`numeric_environment`: the
``numerics`` event of ``events.jsonl``), so two runs that disagree can be told apart from two that
should not.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

PORTABLE_MATH: dict[str, str] = {
    # ATen's own kernels (softmax, norms, reductions, element-wise, CPU attention) at AVX2 width on
    # every processor that has it, AVX-512 ones included. Requires AVX2 (x86-64 servers since 2013).
    "ATEN_CPU_CAPABILITY": "avx2",
    # MKL's matrix products (torch's float32 CPU GEMM): its conditional-numerical-reproducibility
    # branch. COMPATIBLE (SSE2) is the only branch MKL documents as giving the same results on Intel
    # and non-Intel processors alike; CNR mode also fixes MKL's cache-size blocking and reductions.
    "MKL_CBWR": "COMPATIBLE",
    # oneDNN's JIT kernels (torch uses them for some CPU ops) capped at AVX2 code.
    "ONEDNN_MAX_CPU_ISA": "AVX2",
}
# Not in it: the thread count, which must match too (a reduction split over another number of threads
# sums in another order, and MKL promises its results only for a fixed count). Presets pin it with
# ``torch_threads`` (``tiny``: 1); ``torch_threads: 0`` takes one per core.

# The variables reported with a run, whether set or not (unset: the library chooses per processor).
_REPORTED = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def cpu_model() -> str | None:
    """The processor's model name from ``/proc/cpuinfo`` (None where there is none, e.g. macOS)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def numeric_environment() -> dict[str, Any]:
    """What this process's float results depend on: torch's version, the CPU kernels ATen dispatches
    (``AVX512``, ``AVX2``, ``DEFAULT``...), the processor, torch's threads, each reproducibility variable
    (None when unset) and whether every :data:`PORTABLE_MATH` setting is in force (``portable``).
    Call it after the run has set its thread count."""
    env = {k: os.environ.get(k) for k in _REPORTED}
    return {
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_model": cpu_model(),
        "torch_threads": torch.get_num_threads(),
        "env": env,
        "portable": all(os.environ.get(k) == v for k, v in PORTABLE_MATH.items()),
    }


def describe(doc: dict[str, Any]) -> str:
    """One log line for :func:`numeric_environment`'s document."""
    mode = (
        "portable math (the same bits on any x86-64 with AVX2)" if doc["portable"] else "this processor's own kernels"
    )
    return (
        f"numerics: torch {doc['torch']}, CPU kernels {doc['cpu_capability']}, {doc['torch_threads']} thread(s), "
        f"{mode}; processor {doc['cpu_model'] or 'unknown'}"
    )
