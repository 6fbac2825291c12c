"""What a knobs folder holds and how a path in it is named (shared by the store's loading, polling
and writing)::

    <area>.yaml                     area = env | user | reward | agent (one knob per key)
    schema/<area>.schema.json       one JSON Schema per area (harness keywords: harness/knobs/schema.py)
    schema/user_rules.schema.json   schema of rules/users/<gym>.yaml
    schema/reward_rules.schema.json schema of rules/rewards/<stem>.yaml
    rules/users/<gym>.yaml          symbolic-user rules of a gym
    rules/rewards/<stem>.yaml       reward rules
    plugins/<name>.py               plug-ins (harness.plugins)
    .pending/                       attribution notes of CLI writes waiting for a run (harness/knobs/notes.py)
    .history/knob_events.jsonl      the event log of a project folder (a run's is runs/<id>/knob_events.jsonl)
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from harness.knobs.snapshot import AREAS

RULE_KINDS = ("users", "rewards")
RULE_SCHEMAS = {"users": "user_rules.schema.json", "rewards": "reward_rules.schema.json"}
HISTORY = Path(".history") / "knob_events.jsonl"
SCHEMA_FILES = {f"{area}.schema.json": ("schema", area) for area in AREAS}
SCHEMA_FILES |= {fname: ("rule_schema", kind) for kind, fname in RULE_SCHEMAS.items()}


def area_path(knobs_dir: Path, area: str) -> Path:
    return Path(knobs_dir) / f"{area}.yaml"


def rule_path(knobs_dir: Path, kind: str, key: str) -> Path:
    return Path(knobs_dir) / "rules" / kind / f"{key}.yaml"


def file_key(path: Path) -> Path:
    """A knob file's identity: its folder resolved, its own name kept (a symlink in place of a knob
    file is that file, refused as such, never the file it points to)."""
    path = Path(os.path.abspath(path))
    return path.parent.resolve() / path.name


def sha(data: str | bytes) -> str:
    raw = data.encode("utf-8") if isinstance(data, str) else data
    return hashlib.sha256(raw).hexdigest()[:16]


def classify(knobs_dir: Path, path: Path) -> tuple[str, str] | None:
    """(kind, key) of a path in the knobs folder: ('area', 'env') / ('schema', 'env') /
    ('rules', 'users/travel') / ('rule_schema', 'users'); None for anything else (swap files, ...)."""
    try:
        rel = file_key(path).relative_to(Path(knobs_dir).resolve())
    except (ValueError, OSError):
        return None
    parts = rel.parts
    if len(parts) == 1 and parts[0].endswith(".yaml") and parts[0][:-5] in AREAS:
        return "area", parts[0][:-5]
    if len(parts) == 2 and parts[0] == "schema":
        return SCHEMA_FILES.get(parts[1])
    if len(parts) == 3 and parts[0] == "rules" and parts[1] in RULE_KINDS:
        name = parts[2]
        if name.endswith(".yaml") and not name.startswith(".") and len(name) > 5:
            return "rules", f"{parts[1]}/{name[:-5]}"
    return None
