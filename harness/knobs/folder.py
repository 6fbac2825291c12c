"""The knobs folder a command works on, and the packaged defaults it starts from.

The defaults (knob values, their JSON Schemas, symbolic-user and reward rule files) ship inside the
package, in ``harness/knobs/defaults/``: they are the same for every checkout and every install.
The *project* folder, ``knobs/`` in the working directory (or ``--knobs-dir`` / ``$EAU_KNOBS_DIR``),
is what persists across runs: every run starts from it (its own copy, ``runs/<id>/knobs/``, made by
:func:`copy_folder`), and ``eau knobs promote`` carries a run's values back to it. It is a working
copy: created from the defaults by the first command that needs it (or ``eau knobs init``), put back
by ``eau knobs reset``, and git-ignored, so neither runs nor edits change what the repository ships.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from harness.io import yamlio
from harness.knobs.snapshot import changed_cells

DEFAULTS_DIR = Path(__file__).resolve().parent / "defaults"
KNOBS_ENV = "EAU_KNOBS_DIR"
# what a knobs folder holds besides its bookkeeping (.history/, .pending/, .lock) and plug-ins (plugins/)
CONTENT = ("agent.yaml", "env.yaml", "user.yaml", "reward.yaml", "schema", "rules")
AREA_FILES = ("agent.yaml", "env.yaml", "user.yaml", "reward.yaml")
# which packaged files a folder was made from (path -> sha256), so that an upgrade can tell a file
# nobody edited (safe to replace with a newer default) from one a person or agent changed
MADE_FROM = ".defaults.json"


def defaults_dir() -> Path:
    """The packaged default knobs folder (read-only: copy it, never edit it)."""
    return DEFAULTS_DIR


def is_knobs_dir(path: Path) -> bool:
    """Whether ``path`` looks like a knobs folder (it has ``schema/``)."""
    return (Path(path) / "schema").is_dir()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def packaged_files() -> dict[str, str]:
    """Every packaged default file (relative path -> sha256)."""
    out = {}
    for name in CONTENT:
        src = DEFAULTS_DIR / name
        paths = sorted(p for p in src.rglob("*") if p.is_file()) if src.is_dir() else [src]
        for p in paths:
            out[p.relative_to(DEFAULTS_DIR).as_posix()] = _sha(p)
    return out


def _record_made_from(dst: Path, files: dict[str, str]) -> None:
    (Path(dst) / MADE_FROM).write_text(json.dumps({"files": files}, indent=1, sort_keys=True) + "\n")


def made_from(dst: Path) -> dict[str, str] | None:
    """The packaged files ``dst`` was made from or last upgraded to (None: a folder made before this
    was recorded, or an unreadable record)."""
    try:
        doc = json.loads((Path(dst) / MADE_FROM).read_text())
        files = doc["files"]
        return {str(k): str(v) for k, v in files.items()} if isinstance(files, dict) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def copy_defaults(dst: Path) -> Path:
    """Write the packaged defaults into ``dst`` (created; existing knob files are replaced,
    the folder's history and other files are kept) and record what it was made from. Returns ``dst``."""
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
    _record_made_from(dst, packaged_files())
    return dst


def copy_folder(src: Path, dst: Path) -> Path:
    """A run's own knobs folder ``dst`` made from the knobs folder ``src`` (a project's, or a parent
    run's): values, schemas, rule files and plug-ins; no bookkeeping (history, notes, locks)."""
    src, dst = Path(src), Path(dst)
    dst.mkdir(parents=True)
    for name in (*CONTENT, "plugins"):
        if (src / name).is_dir():
            shutil.copytree(src / name, dst / name, ignore=shutil.ignore_patterns(".pending", ".*.tmp"))
        elif (src / name).is_file():
            shutil.copyfile(src / name, dst / name)
    return dst


def stale_files(dst: Path) -> list[str]:
    """Packaged default files that changed (or are new) since ``dst`` was made or last upgraded; for a
    folder with no record, the packaged files it lacks or holds with other content."""
    dst, now, then = Path(dst), packaged_files(), made_from(dst)
    if then is not None:
        return sorted(rel for rel, sha in now.items() if then.get(rel) != sha)
    return sorted(rel for rel, sha in now.items() if not (dst / rel).is_file() or _sha(dst / rel) != sha)


def upgrade_hint(dst: Path) -> str | None:
    """One line for an error about invalid files in ``dst`` when the packaged defaults changed since
    the folder was made (an older default may be what no longer validates); None otherwise."""
    try:
        stale = stale_files(dst)
    except OSError:
        return None
    if not stale:
        return None
    shown = ", ".join(stale[:4]) + (f" and {len(stale) - 4} more" if len(stale) > 4 else "")
    return (
        f"the packaged defaults changed since {dst} was made ({shown}): `eau knobs upgrade --knobs-dir {dst}` "
        "brings it up to date and keeps your edits (`--dry-run` first shows what it would do)"
    )


def upgrade_from_defaults(dst: Path, *, dry_run: bool = False) -> dict[str, list[Any]]:
    """Bring a knobs folder made from older packaged defaults up to date without losing an edit.

    * a packaged file the folder lacks (a new gym's rule file, say) is copied in: ``added``;
    * a file nobody edited since the folder was made (its content is what it was made from) is
      replaced by the newer default: ``updated``;
    * an edited file is kept as it is: ``kept`` (compare it with the packaged one, named there);
      for the four value files, knobs the newer default has and the file lacks are added to it,
      comments kept (``knobs_added``: ``area.name``), so a new knob's schema finds its value.
    A folder made before the record existed cannot tell an edit from an older default: every file
    that differs is ``kept``. The record then names the packaged files, so the next upgrade can tell.
    """
    dst, now, then = Path(dst), packaged_files(), made_from(dst)
    report: dict[str, list[Any]] = {"added": [], "updated": [], "kept": [], "knobs_added": []}
    for rel, sha in sorted(now.items()):
        src, out = DEFAULTS_DIR / rel, dst / rel
        if not out.exists():
            report["added"].append(rel)
            if not dry_run:
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, out)
            continue
        if not out.is_file() or _sha(out) == sha:
            continue
        if then is not None and then.get(rel) is not None and _sha(out) == then[rel]:
            report["updated"].append(rel)
            if not dry_run:
                yamlio.atomic_write_text(out, src.read_text(encoding="utf-8"))
            continue
        report["kept"].append({"file": rel, "packaged": str(src)})
        if rel in AREA_FILES:
            try:
                doc, _ = yamlio.read_yaml(out)
                new = yamlio.plain(yamlio.read_yaml(src)[0]) or {}
            except yamlio.FileProblem:
                continue  # an unreadable file is reported by `eau knobs validate`; nothing is merged into it
            if not hasattr(doc, "keys"):
                continue
            missing = [k for k in new if k not in doc]
            report["knobs_added"] += [f"{rel[:-5]}.{k}" for k in missing]
            if missing and not dry_run:
                for k in missing:
                    yamlio.assign(doc, k, new[k])
                yamlio.atomic_write_text(out, yamlio.dump(doc))
    if not dry_run:
        _record_made_from(dst, now)
    return report


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
