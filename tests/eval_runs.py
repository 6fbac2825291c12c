"""Shared inputs of the eval, runs-CLI and plot tests: a really trained tiny run, and small protocols.

``trained_run()`` trains the tiny preset (a 2-layer, 64-wide model) for one PPO step in this process,
once per test process, so every test file that needs a checkpoint reuses it. ``small_protocol()``
writes a copy of ``eval/protocol.yaml`` with few tasks and small budgets that still points at the
repository's frozen files (absolute paths), so it hashes like a protocol file and loads in seconds.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

import yaml

from harness.knobs.folder import defaults_dir

REPO = Path(__file__).resolve().parents[1]
EVAL = REPO / "eval"
RUN_ID = "evalrun"
SMALL_MODEL = {"policy.tiny.num_hidden_layers": 2, "policy.tiny.hidden_size": 64, "policy.tiny.intermediate_size": 128}
TRAIN_OVERRIDES = {
    "steps": 1,
    "tasks_per_step": 2,
    "samples_per_task": 1,
    "progress": False,
    "agent_knobs.max_new_tokens_per_turn": 16,
    "agent_knobs.max_episode_tokens": 512,
    "env_knobs.max_steps": 3,
    **SMALL_MODEL,
}

_ROOT: Path | None = None
_TRAINED: dict[str, Path] = {}


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """Run torch on one intra-op thread. The tiny model's matrices are small: on a shared, busy
    machine two contending threads made an evaluation 20x slower than one."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def recording_opens() -> Iterator[list[str]]:
    """Every path this process opens inside the block (an audit hook; hooks cannot be removed, so it
    stops recording when the block ends)."""
    opened: list[str] = []
    watching = {"on": True}

    def audit(event: str, args: tuple[Any, ...]) -> None:
        if watching["on"] and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
            opened.append(os.fsdecode(args[0]))

    sys.addaudithook(audit)
    try:
        yield opened
    finally:
        watching["on"] = False


def scratch() -> Path:
    """A private temporary folder for this test process (removed at exit)."""
    global _ROOT
    if _ROOT is None:
        _ROOT = Path(tempfile.mkdtemp(prefix="eau-eval-tests-"))
        atexit.register(shutil.rmtree, _ROOT, True)
    return _ROOT


def copy_knobs(dst: Path) -> Path:
    shutil.copytree(defaults_dir(), dst, ignore=shutil.ignore_patterns(".pending", ".history", "__pycache__"))
    return dst


def trained_run() -> tuple[Path, Path]:
    """``(run folder, knobs folder)`` of a tiny run trained for one step (checkpoint step_000000).
    Read-only for callers: several tests share it."""
    if RUN_ID not in _TRAINED:
        from harness.ppo.config import build_config
        from harness.ppo.trainer import train

        root = scratch()
        kdir = copy_knobs(root / "knobs")
        cfg = build_config("tiny", None, {**TRAIN_OVERRIDES, "run_id": RUN_ID})
        with one_torch_thread():
            train(cfg, root / "runs", kdir)
        _TRAINED[RUN_ID] = root / "runs" / RUN_ID
    return _TRAINED[RUN_ID], scratch() / "knobs"


def protocol_doc(**changes: Any) -> dict[str, Any]:
    """``eval/protocol.yaml`` parsed, file references made absolute, top-level ``changes`` applied."""
    doc = yaml.safe_load((EVAL / "protocol.yaml").read_text())
    for area in doc["knob_schemas"]:
        doc["knob_schemas"][area] = str(EVAL / doc["knob_schemas"][area])
    for kind in ("users", "rewards"):
        for k in doc["rules"][kind]:
            doc["rules"][kind][k] = str(EVAL / doc["rules"][kind][k])
    doc.update(changes)
    return doc


def small_protocol(path: Path, **changes: Any) -> Path:
    """A quick protocol: intention x2, colbench x1, telepathy x1 (held out), 3 turns, 16 tokens a turn."""
    doc = protocol_doc(
        name="eval-test-small",
        trials=1,
        batch_size=8,
        gyms={"intention": {"tasks": 2}, "colbench": {"tasks": 1}, "telepathy": {"tasks": 1, "held_out": True}},
        limits={"max_new_tokens_per_turn": 16, "max_episode_tokens": 1024},
    )
    doc["knobs"]["env"]["max_steps"] = 3
    doc.update(changes)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path
