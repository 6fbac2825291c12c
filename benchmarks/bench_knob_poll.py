"""Benchmark ``KnobStore.poll``: with no change, and validating + applying one changed file.

Targets (issue "Foundation"): under 1 ms per poll with no change; under 20 ms to validate and apply
one changed file. Uses a private copy of knobs/ and the real watchdog observer.

    python benchmarks/bench_knob_poll.py [--repeats 200]
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from harness.io.yamlio import atomic_write_text
from harness.knobs.folder import defaults_dir
from harness.knobs.watcher import KnobWatcher
from harness.stores import open_store

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=200)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    kdir = tmp / "knobs"
    shutil.copytree(defaults_dir(), kdir, ignore=shutil.ignore_patterns(".pending", ".history"))
    store = open_store(kdir, events_path=tmp / "events.jsonl", run_gyms=["travel", "function"], debounce_s=0.0)
    path = kdir / "agent.yaml"
    base = path.read_text()
    nochange, changed = [], []
    with KnobWatcher(store):
        for _ in range(args.repeats * 10):
            t = time.perf_counter()
            store.poll(1, [])
            nochange.append((time.perf_counter() - t) * 1e3)
        for i in range(args.repeats):
            value = 1.0 - 0.001 * (i % 2 + 1)
            atomic_write_text(path, base.replace("\ngamma: 1.0", f"\ngamma: {value}"))  # as an editor saving
            t0 = time.monotonic()
            while not store.pending_paths() and time.monotonic() - t0 < 5:
                time.sleep(0.001)
            t = time.perf_counter()
            res = store.poll(2 + i, [])
            changed.append((time.perf_counter() - t) * 1e3)
            assert res.applied and res.applied[0]["knob"] == "agent.gamma", res
    out = {
        "benchmark": "knob_poll",
        "machine": f"{platform.machine()} {platform.processor() or ''} python {platform.python_version()}".strip(),
        "poll_no_change_ms": {
            "median": statistics.median(nochange),
            "p95": sorted(nochange)[int(0.95 * len(nochange))],
        },
        "poll_one_changed_file_ms": {
            "median": statistics.median(changed),
            "p95": sorted(changed)[int(0.95 * len(changed))],
        },
        "targets_ms": {"no_change": 1.0, "one_changed_file": 20.0},
    }
    out["meets_targets"] = out["poll_no_change_ms"]["median"] < 1.0 and out["poll_one_changed_file_ms"]["median"] < 20.0
    print(json.dumps(out, indent=2))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
