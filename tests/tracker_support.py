"""Reading back what the experiment trackers wrote (harness/runs/trackers.py): W&B's offline run file,
TensorBoard's event files and trackio's local database, each through its own format.

Importing this module points trackio at a fresh temporary folder (``TRACKIO_DIR``, which trackio
reads once, when it is first imported), so the tests never write into ``~/.cache``; training runs
started as subprocesses inherit it.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

from extras_support import require  # noqa: F401  (the tests call ts.require)

if "trackio" not in sys.modules:
    os.environ["TRACKIO_DIR"] = tempfile.mkdtemp(prefix="eau-trackio-")


# ---------------------------------------------------------------------------------------------- W&B
WANDB_BLOCK = 32 * 1024  # W&B's run file is a LevelDB-style log: 32 KiB blocks of checksummed chunks
WANDB_HEADER = 7  # ":W&B", a 2-byte magic and a version byte
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def wandb_run_file(run_dir: Path) -> Path:
    files = sorted(Path(run_dir).glob("wandb/offline-run-*/run-*.wandb"))
    assert files, f"no offline W&B run file under {run_dir}/wandb"
    return files[-1]


def wandb_records(path: Path) -> Iterator[Any]:
    """Every record of a W&B run file (``wandb_internal_pb2.Record``), chunks joined."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    pos, pieces = WANDB_HEADER, b""
    while pos + 7 <= len(data):
        room = WANDB_BLOCK - pos % WANDB_BLOCK
        if room < 7:  # a block's tail too short for a chunk header is padding
            pos += room
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0:  # zero padding up to the block's end
            pos += room
            continue
        pieces += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (FULL, LAST):
            rec = pb.Record()
            rec.ParseFromString(pieces)
            pieces = b""
            yield rec


def wait_for_wandb_exit(run_dir: Path, timeout: float = 60.0) -> None:
    """Wait until W&B's service has written the run's exit record: ``run.finish()`` returns before
    the service's last writes reach the offline run file."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(rec.WhichOneof("record_type") == "exit" for rec in wandb_records(wandb_run_file(run_dir))):
            return
        time.sleep(0.2)
    raise AssertionError(f"W&B's run file under {run_dir} has no exit record after {timeout:.0f}s")


def wandb_history(run_dir: Path) -> dict[int, dict[str, Any]]:
    """``{step: {key: value}}`` of the logged history (nested keys joined with ``/``)."""
    out: dict[int, dict[str, Any]] = {}
    for rec in wandb_records(wandb_run_file(run_dir)):
        if rec.WhichOneof("record_type") != "history":
            continue
        items = {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in rec.history.item}
        out.setdefault(int(items["_step"]), {}).update(items)
    return out


def wandb_alerts(run_dir: Path) -> list[tuple[str, str]]:
    return [
        (rec.alert.title, rec.alert.text)
        for rec in wandb_records(wandb_run_file(run_dir))
        if rec.WhichOneof("record_type") == "alert"
    ]


def wandb_config(run_dir: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for rec in wandb_records(wandb_run_file(run_dir)):
        kind = rec.WhichOneof("record_type")
        update = rec.run.config.update if kind == "run" else rec.config.update if kind == "config" else []
        for item in update:
            out[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
    return out


def wandb_table(run_dir: Path, entry: dict[str, Any], key: str) -> dict[str, Any]:
    """The table a history entry points at (``<key>/path`` under the run's ``files/``)."""
    return json.loads((wandb_run_file(run_dir).parent / "files" / entry[f"{key}/path"]).read_text())


# ------------------------------------------------------------------------------------- TensorBoard
def tensorboard(run_dir: Path) -> Any:
    """An event accumulator over ``runs/<id>/tensorboard`` with every event kept."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(Path(run_dir) / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def tensorboard_texts(acc: Any, tag: str) -> list[tuple[int, str]]:
    """``(step, text)`` of a text tag (add_text stores a string tensor under ``<tag>/text_summary``)."""
    return [(e.step, e.tensor_proto.string_val[0].decode()) for e in acc.Tensors(f"{tag}/text_summary")]


# ------------------------------------------------------------------------------------------ trackio
def trackio_logs(run: str) -> list[dict[str, Any]]:
    from trackio.sqlite_storage import SQLiteStorage

    from harness.runs.trackers import PROJECT

    return SQLiteStorage.get_logs(PROJECT, run)


def trackio_alerts(run: str) -> list[dict[str, Any]]:
    from trackio.sqlite_storage import SQLiteStorage

    from harness.runs.trackers import PROJECT

    return SQLiteStorage.get_alerts(PROJECT, run_name=run)


def trackio_config(run: str) -> dict[str, Any]:
    from trackio.sqlite_storage import SQLiteStorage

    from harness.runs.trackers import PROJECT

    return SQLiteStorage.get_run_config(PROJECT, run) or {}
