"""Fuzz: 1,000 seeded malformed edits. No crash, never an invalid value in force, every refusal logged."""

from __future__ import annotations

import random

from harness.io import jsonl
from harness.knobs.schema import validate_value
from harness.stores import open_store

WRONG_VALUES = [
    "-1",
    "1e9",
    "'text'",
    "[1, 2, 3]",
    "{default: 1, nogym: 2}",
    "{travel: 3}",
    "null",
    "true",
    ".nan",
    "-.inf",
    "{default: [}",
    "0x1F",
    "~",
    "[]",
    "{}",
    "99999999999999999999999",
]


def mutate(text: str, rng: random.Random, names: list[str]) -> bytes | None:
    """A malformed (or occasionally valid) version of a knob file; None deletes the file."""
    data = text.encode()
    kind = rng.randrange(12)
    if kind == 0 and data:  # flip a byte
        i = rng.randrange(len(data))
        return data[:i] + bytes([rng.randrange(256)]) + data[i + 1 :]
    if kind == 1:  # truncated (partial write)
        return data[: rng.randrange(len(data) + 1)]
    if kind == 2:  # inserted garbage, possibly not UTF-8
        i = rng.randrange(len(data) + 1)
        return data[:i] + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 20))) + data[i:]
    if kind in (3, 4, 5):  # a wrong value for a knob
        name = rng.choice(names)
        lines = text.splitlines()
        for j, line in enumerate(lines):
            if line.startswith(name + ":"):
                lines[j] = f"{name}: {rng.choice(WRONG_VALUES)}"
        return ("\n".join(lines) + "\n").encode()
    if kind == 6:  # duplicate key
        name = rng.choice(names)
        return (text + f"\n{name}: 1\n").encode()
    if kind == 7:  # unknown knob
        return (text + f"\nnot_a_knob_{rng.randrange(100)}: 1\n").encode()
    if kind == 8 and rng.random() < 0.2:  # huge
        return data + b"#" + b"y" * 300_000 + b"\n"
    if kind == 9 and rng.random() < 0.3:
        return None
    if kind == 10:  # indentation and tabs
        return text.replace("\n", "\n\t", rng.randrange(1, 4)).encode()
    return text.encode()  # unchanged content (a touch)


def test_fuzz_1000_malformed_edits(knobs_dir, tmp_path):
    rng = random.Random(1234)
    log = tmp_path / "events.jsonl"
    store = open_store(knobs_dir, events_path=log, run_gyms=["travel", "function", "colbench"])
    areas = ["env", "user", "reward", "agent"]
    last_valid = {a: (knobs_dir / f"{a}.yaml").read_text() for a in areas}
    metrics = [{f"gym/{g}/success_rate": 0.9 for g in ("travel", "function", "colbench")}] * 5
    refused_returned = 0
    accepted = 0
    for i in range(1000):
        area = rng.choice(areas)
        path = knobs_dir / f"{area}.yaml"
        names = list(store.schemas[area].knobs)
        new = mutate(last_valid[area], rng, names)
        if new is None:
            path.unlink(missing_ok=True)
        else:
            path.write_bytes(new)
        res = store.poll(i, metrics, rescan=True, wait_debounce=False)
        refused_returned += len(res.refused)
        accepted += len(res.applied)
        for ev in res.refused:
            assert ev["status"] == "rejected" and ev["file"] and ev["rule"] and ev["message"], ev
        for spec in store.specs():  # the store never holds an invalid value
            assert validate_value(spec, store.raw(spec.full_name)) is None, (i, spec.full_name)
        if i % 7 == 0:  # restore a valid file now and then (and the store must take it back)
            path.write_text(last_valid[area])
            store.poll(i, metrics, rescan=True, wait_debounce=False)
    logged = [e for e in jsonl.read(log) if e["status"] == "rejected"]
    assert len(logged) >= refused_returned > 300
    assert accepted > 0
    # after the storm, the original files are accepted again and the store matches them
    for a in areas:
        (knobs_dir / f"{a}.yaml").write_text(last_valid[a])
    store.poll(10_000, metrics, rescan=True, wait_debounce=False)
    fresh = open_store(knobs_dir, events_path=None)
    assert store.in_force == fresh.in_force
