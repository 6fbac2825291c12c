"""Where evaluation results live: ``eval_results/<run_id>/`` (``--eval-dir``, env ``EAU_EVAL_DIR``).

    step_NNNNNN.json            result of the latest evaluation of checkpoint step_NNNNNN (init.json:
                                the starting policy); re-evaluating overwrites it
    step_NNNNNN.records.jsonl   every evaluated episode of that result (full transcripts)
    history.jsonl               one summary line per evaluation ever made (any protocol), append-only

The folder is outside ``runs/`` on purpose: the skill's commands (and the permissions it installs)
never read it, so evaluation cannot leak into training-side decisions.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

from harness.io import jsonl

EVAL_DIR_ENV = "EAU_EVAL_DIR"


def eval_root(value: str | Path | None = None) -> Path:
    """``value``, else ``$EAU_EVAL_DIR``, else ``./eval_results``."""
    if value is not None:
        return Path(value)
    env = os.environ.get(EVAL_DIR_ENV)
    return Path(env) if env else Path.cwd() / "eval_results"


def result_paths(root: Path, run_id: str, label: str) -> tuple[Path, Path]:
    """``(result json, records jsonl)`` of checkpoint ``label`` of ``run_id``."""
    folder = Path(root) / run_id
    return folder / f"{label}.json", folder / f"{label}.records.jsonl"


def write_result(root: Path, result: Mapping[str, Any], records: Iterable[Mapping[str, Any]]) -> Path:
    """Write a result, its records and a history line; returns the result file. The records file is
    written first and each file atomically (temp + rename), so a result never points at torn records."""
    main, recs = result_paths(root, str(result["run_id"]), str(result["checkpoint"]))
    main.parent.mkdir(parents=True, exist_ok=True)
    tmp = recs.with_name(recs.name + f".tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as fh:
        for r in records:
            fh.write(jsonl.dumps(r) + "\n")
    os.replace(tmp, recs)
    tmp = main.with_name(main.name + f".tmp-{os.getpid()}")
    tmp.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, main)
    summary = {
        k: result[k]
        for k in ("time", "run_id", "checkpoint", "step", "protocol_name", "protocol_hash", "scorer_hash", "seed")
        if k in result
    }
    summary["overall"] = result.get("overall", {}).get("all")
    jsonl.append(main.parent / "history.jsonl", summary)
    return main


def read_result(root: Path, run_id: str, label: str) -> dict[str, Any] | None:
    """A stored result, or None."""
    path, _ = result_paths(root, run_id, label)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
