"""Run analysis: what ``eau status``, ``eau sample``, ``eau diagnose``, ``eau effect`` and ``eau gate``
compute, as functions over a run folder (``harness.cli.analysis`` is the command-line layer).

* :mod:`~harness.analysis.run_data` — reading a run folder (bounded; trajectories per step on demand)
* :mod:`~harness.analysis.detectors` — the registered detectors and their thresholds
* :mod:`~harness.analysis.diagnose` — detectors over a window of recent steps
* :mod:`~harness.analysis.effect` — before/after a knob event with a bootstrap noise floor
* :mod:`~harness.analysis.status` — the one-screen summary
* :mod:`~harness.analysis.sample` — selecting and rendering trajectories
* :mod:`~harness.analysis.gate` / :mod:`~harness.analysis.replay` — candidate files: validation and replay
* :mod:`~harness.analysis.tasks` / :mod:`~harness.analysis.leakage` — rebuilt tasks and leak measures
"""

from harness.analysis.diagnose import diagnose, run_detectors, window_input
from harness.analysis.effect import effect
from harness.analysis.run_data import RunData, RunNotFound, load_run, load_run_dir

__all__ = ["RunData", "RunNotFound", "load_run", "load_run_dir", "diagnose", "run_detectors", "window_input", "effect"]
