"""Checks that keep the skill folder honest: its format limits and the ``eau`` commands it names.

* ``SKILL.md`` front matter: ``name`` (lowercase letters, digits and single hyphens, at most 64
  characters) and ``description`` (at most 1,024 characters); the whole file under 500 lines.
* References one level deep: every file in ``references/`` is linked from ``SKILL.md`` and every
  relative link in the skill resolves.
* Every ``eau <command> [<sub>]`` written in code (inline spans and fenced blocks) of ``SKILL.md``
  and the references exists in the CLI, and every ``--option`` written after it is an option of
  that command, so the instructions cannot drift from the CLI.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

NAME_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
NAME_MAX = 64
DESCRIPTION_MAX = 1024
SKILL_MAX_LINES = 500  # the Agent Skills guidance: keep SKILL.md under 500 lines, details in references

_FENCE_RE = re.compile(r"^(```|~~~)")
_SPAN_RE = re.compile(r"`([^`\n]+)`")
_LINK_RE = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_CMD_WORD = re.compile(r"^[a-z][a-z0-9-]*$")


@dataclass
class Mention:
    """One ``eau ...`` invocation written in the skill: where, the words, and the options used."""

    file: str
    line: int
    text: str
    words: list[str]  # command words after "eau" (placeholders and arguments included)
    options: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def code_snippets(text: str) -> list[tuple[int, str]]:
    """(line number, code) for each fenced-block line and each inline code span of a markdown text."""
    out: list[tuple[int, str]] = []
    in_fence = False
    pending: tuple[int, str] | None = None  # a fenced line continued with a trailing backslash
    for i, line in enumerate(text.splitlines(), 1):
        if _FENCE_RE.match(line.strip()):
            in_fence = not in_fence
            continue
        if in_fence:
            start, code = (pending[0], pending[1] + " " + line.strip()) if pending else (i, line)
            if code.rstrip().endswith("\\"):
                pending = (start, code.rstrip()[:-1])
            else:
                pending = None
                out.append((start, code))
        else:
            out += [(i, m.group(1)) for m in _SPAN_RE.finditer(line)]
    return out


def _commands(code: str) -> list[list[str]]:
    """The simple commands of a shell snippet as word lists (split at ``;``, ``&&``, ``|``, parentheses;
    quotes respected, ``#`` comments dropped)."""
    lex = shlex.shlex(code, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    try:
        tokens = list(lex)
    except ValueError:  # an unbalanced quote in a prose snippet: fall back to whitespace
        tokens = code.split()
    out: list[list[str]] = [[]]
    for tok in tokens:
        if tok and all(c in "();<>|&" for c in tok):
            out.append([])
        else:
            out[-1].append(tok)
    return [c for c in out if c]


def mentions_in(text: str, file: str) -> list[Mention]:
    """Every ``eau`` invocation in the code of a markdown text."""
    found: list[Mention] = []
    for line_no, code in code_snippets(text):
        for words in _commands(code.strip().removeprefix("$ ")):
            while words and "=" in words[0] and not words[0].startswith("-"):
                words = words[1:]  # VAR=value prefixes
            if not words or words[0] != "eau":
                continue
            rest = words[1:]
            options = [w.split("=", 1)[0] for w in rest if w.startswith("--") and len(w) > 2]
            found.append(Mention(file, line_no, " ".join(words), rest, options))
    return found


def skill_mentions(skill_dir: Path) -> list[Mention]:
    """Mentions in SKILL.md and every markdown file under ``references/``."""
    files = [skill_dir / "SKILL.md", *sorted((skill_dir / "references").glob("*.md"))]
    out: list[Mention] = []
    for f in files:
        if f.is_file():
            out += mentions_in(f.read_text(encoding="utf-8"), str(f.relative_to(skill_dir)))
    return out


def _is_group(cmd: Any) -> bool:
    # Duck-typed: typer >= 0.29 vendors its own click, so isinstance checks against click.Group fail.
    return callable(getattr(cmd, "list_commands", None)) and callable(getattr(cmd, "get_command", None))


def _ctx(cmd: Any) -> Any:
    return cmd.context_class(cmd)


@dataclass
class Resolved:
    """A mention resolved against the CLI: the command path and the command object (None when missing)."""

    path: list[str]
    command: Any
    problem: str | None = None


def subcommands(group: Any) -> list[str]:
    """Names of a command group's subcommands."""
    return list(group.list_commands(_ctx(group)))


def resolve(root: Any, words: list[str]) -> Resolved:
    """Follow ``words`` down the command tree (a click/typer group) as far as they name commands."""
    cmd = root
    path: list[str] = []
    for w in words:
        if not _is_group(cmd) or not _CMD_WORD.match(w):
            break
        sub = cmd.get_command(_ctx(cmd), w)
        if sub is None:
            known = ", ".join(sorted(subcommands(cmd)))
            what = f"eau {' '.join(path)}".strip()
            return Resolved(path + [w], None, f"`{what} {w}`: no such command (known: {known})")
        path.append(w)
        cmd = sub
    return Resolved(path, cmd)


def option_names(cmd: Any) -> set[str]:
    """Every option spelling a command accepts (``--help`` included)."""
    names = {"--help"}
    for p in cmd.params:
        names.update(getattr(p, "opts", []))
        names.update(getattr(p, "secondary_opts", []))
    return names


def check_mention(root: Any, m: Mention) -> list[str]:
    """Problems with one mention: a command that does not exist or an option it does not take."""
    res = resolve(root, m.words)
    if res.command is None:
        return [f"{m.where}: {res.problem}"]
    if not res.path:
        return []
    known = option_names(res.command)
    return [
        f"{m.where}: `eau {' '.join(res.path)}` has no option {opt} (options: {', '.join(sorted(known))})"
        for opt in m.options
        if opt not in known
    ]


def check_commands(skill_dir: Path, root: Any) -> list[str]:
    """Problems with every ``eau`` command the skill names (see :func:`check_mention`); ``root``: the
    CLI's click group (``typer.main.get_command(app)``)."""
    problems: list[str] = []
    for m in skill_mentions(skill_dir):
        problems += check_mention(root, m)
    return problems


def parse_front_matter(text: str) -> dict[str, Any] | None:
    """The YAML front matter of a markdown text, or None when there is none."""
    m = re.match(r"---\n(.*?)\n---\n", text, re.S)
    if not m:
        return None
    fm = yaml.safe_load(m.group(1))
    return fm if isinstance(fm, dict) else None


def check_format(skill_dir: Path, installed_name: str | None = None) -> list[str]:
    """Problems with SKILL.md's front matter, its length and the skill's relative links."""
    problems: list[str] = []
    skill_md = skill_dir / "SKILL.md"
    if not skill_md.is_file():
        return [f"{skill_md}: missing"]
    text = skill_md.read_text(encoding="utf-8")
    fm = parse_front_matter(text)
    if fm is None:
        return [f"{skill_md}: must start with YAML front matter (name, description) between '---' lines"]
    name, desc = fm.get("name"), fm.get("description")
    if not isinstance(name, str) or not NAME_RE.match(name) or len(name) > NAME_MAX:
        problems.append(
            f"{skill_md}: name {name!r} must be lowercase letters/digits with single hyphens, "
            f"at most {NAME_MAX} characters"
        )
    elif installed_name is not None and name != installed_name:
        problems.append(f"{skill_md}: name {name!r} differs from its folder name {installed_name!r}")
    if not isinstance(desc, str) or not desc.strip():
        problems.append(f"{skill_md}: description is required (what the skill does and when to use it)")
    elif len(desc) > DESCRIPTION_MAX:
        problems.append(f"{skill_md}: description has {len(desc)} characters; at most {DESCRIPTION_MAX}")
    n_lines = len(text.splitlines())
    if n_lines >= SKILL_MAX_LINES:
        problems.append(f"{skill_md}: {n_lines} lines; keep it under {SKILL_MAX_LINES} (move detail to references/)")
    linked = set()
    for md in [skill_md, *sorted((skill_dir / "references").glob("*.md"))]:
        for target in _LINK_RE.findall(md.read_text(encoding="utf-8")):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue  # URLs and same-page anchors
            path = (md.parent / target.split("#", 1)[0]).resolve()
            if not path.exists():
                problems.append(f"{md.relative_to(skill_dir)}: link {target!r} does not resolve")
            if md == skill_md:
                linked.add(path)
    for ref in sorted((skill_dir / "references").glob("*")):
        if ref.resolve() not in linked:
            problems.append(f"references/{ref.name}: not linked from SKILL.md (references stay one level deep)")
    return problems
