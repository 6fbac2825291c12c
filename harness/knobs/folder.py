"""The knobs folder a command works on, and the packaged defaults it starts from.

The defaults (knob values, their JSON Schemas, symbolic-user and reward rule files) ship inside the
package, in ``harness/knobs/defaults/``: they are the same for every checkout and every install.
The *live* folder, ``knobs/`` in the working directory (or ``--knobs-dir`` / ``$EAU_KNOBS_DIR``),
is where a person, an agent and the trainer read and edit knobs. It is a working copy: created from
the defaults by the first command that needs it (or ``eau knobs init``), put back by ``eau knobs
reset``, and git-ignored, so neither runs nor edits change what the repository ships.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

DEFAULTS_DIR = Path(__file__).resolve().parent / "defaults"
KNOBS_ENV = "EAU_KNOBS_DIR"
# what a knobs folder holds besides its bookkeeping (.history/, .pending/, .lease.json)
CONTENT = ("agent.yaml", "env.yaml", "user.yaml", "reward.yaml", "schema", "rules")


def defaults_dir() -> Path:
    """The packaged default knobs folder (read-only: copy it, never edit it)."""
    return DEFAULTS_DIR


def is_knobs_dir(path: Path) -> bool:
    """Whether ``path`` looks like a knobs folder (it has ``schema/``)."""
    return (Path(path) / "schema").is_dir()


def copy_defaults(dst: Path) -> Path:
    """Write the packaged defaults into ``dst`` (created; existing knob files are replaced,
    the folder's history and other files are kept). Returns ``dst``."""
    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    for name in CONTENT:
        src, out = DEFAULTS_DIR / name, dst / name
        if out.is_dir():
            shutil.rmtree(out)
        if src.is_dir():
            shutil.copytree(src, out)
        else:
            shutil.copyfile(src, out)
    return dst


def resolve_knobs_dir(explicit: Path | str | None, *, create: bool = True, notice=None) -> Path:
    """The knobs folder a command uses: ``explicit`` (``--knobs-dir``), else ``$EAU_KNOBS_DIR``,
    else ``./knobs``. ``./knobs`` is created from the packaged defaults when missing (``notice``
    receives one line saying so); an explicit folder must already exist (a typo should not start a
    fresh folder silently): ValueError naming it and how to make one."""
    given = explicit if explicit is not None else os.environ.get(KNOBS_ENV) or None
    if given is not None:
        path = Path(given)
        if not is_knobs_dir(path):
            src = "--knobs-dir" if explicit is not None else f"${KNOBS_ENV}"
            raise ValueError(
                f"{src} {path}: not a knobs folder (no schema/ inside); make one from the packaged "
                f"defaults with `eau knobs init {path}`"
            )
        return path
    path = Path.cwd() / "knobs"
    if not is_knobs_dir(path) and create:
        if path.exists() and any(path.iterdir()):
            raise ValueError(
                f"{path} exists but is not a knobs folder (no schema/ inside): move it away, or pass --knobs-dir"
            )
        copy_defaults(path)
        if notice is not None:
            notice(f"created {path} from the packaged defaults (eau knobs reset puts them back at any time)")
    return path


def reset_to_defaults(dst: Path) -> list[dict]:
    """Put the packaged defaults back into the knobs folder ``dst`` (values, schemas, rule files;
    added knobs and rule files are removed). Returns what changed: one entry per knob cell
    (``{knob, gym, old, new, file}``) and per file added, changed or removed (``{knob: "file", file}``)."""
    from harness.io import yamlio
    from harness.knobs.store import changed_cells

    def read(path: Path):
        try:
            return yamlio.plain(yamlio.read_yaml(path)[0]) or {}
        except yamlio.FileProblem:
            return None

    dst = Path(dst)
    changes: list[dict] = []
    for area in ("agent", "env", "user", "reward"):
        path = dst / f"{area}.yaml"
        now, new = read(path), read(DEFAULTS_DIR / f"{area}.yaml")
        if not isinstance(now, dict):
            changes.append({"knob": f"{area}.yaml", "file": str(path)})
            continue
        for name in sorted(set(now) | set(new)):
            for g, o, n in changed_cells(now.get(name), new.get(name)):
                changes.append({"knob": f"{area}.{name}", "gym": g, "old": o, "new": n, "file": str(path)})
    for sub in ("schema", "rules"):
        mine = {p.relative_to(dst): p for p in (dst / sub).rglob("*") if p.is_file()} if (dst / sub).is_dir() else {}
        theirs = {p.relative_to(DEFAULTS_DIR): p for p in (DEFAULTS_DIR / sub).rglob("*") if p.is_file()}
        for rel in sorted(set(mine) | set(theirs)):
            if rel not in mine or rel not in theirs or mine[rel].read_bytes() != theirs[rel].read_bytes():
                changes.append({"knob": ".".join(rel.with_suffix("").parts), "file": str(dst / rel)})
    copy_defaults(dst)
    return changes
