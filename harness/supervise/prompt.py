"""The prompt of one ``eau supervise`` session, from a template.

Templates use ``$name`` placeholders (Python :class:`string.Template`; ``$$`` is a literal dollar).
Placeholders (all filled by the supervisor):

    $run           run id
    $step          steps the run has completed when the session starts
    $total_steps   the run's planned steps ("?" when unknown)
    $session       session number (1, 2, ...)
    $session_dir   the session's folder (runs/<id>/meta/session_NNN), for scratch files
    $skill         the skill's name (front matter of skill/SKILL.md)
    $runs_dir      runs folder (also in EAU_RUNS_DIR)
    $knobs_dir     knobs folder the run trains from (also in EAU_KNOBS_DIR)
    $timeout_min   minutes before the session is stopped

A template naming any other placeholder is refused with the list above.
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Mapping

PLACEHOLDERS = ("run", "step", "total_steps", "session", "session_dir", "skill", "runs_dir", "knobs_dir", "timeout_min")

DEFAULT_TEMPLATE = """\
You are the meta-agent of the live EAU training run `$run` (session $session of `eau supervise`).
The run has completed $step of $total_steps PPO steps. It keeps training while you work; a knob
change you make is applied at its next step boundary.

Use the `$skill` skill (SKILL.md under .claude/skills/$skill/ or .agents/skills/$skill/, or skill/SKILL.md
in this repository) and follow its session routine and intervention protocol. Every `eau` command
already points at this run's folders (EAU_RUNS_DIR=$runs_dir, EAU_KNOBS_DIR=$knobs_dir); pass
`--run $run` and `--json` where a command takes them.

Rules for this session:
1. Evaluation data is off-limits: never run `eau eval`, never read eval_results/, never choose
   anything by an evaluation score. Use training-side evidence only (eau status, diagnose, sample,
   effect, knobs history).
2. If a change of yours is still being measured (author agent in `eau knobs history --run $run`),
   measure it first with `eau effect --event ID --json`; on `not_enough_data` make no new change.
   Revert a harmful change with `eau knobs revert ID --author agent --reason "..."`.
3. Make at most ONE intervention, or none when nothing is diagnosed. Consult the experience pool
   first (`eau finding search ...`). Apply it only through
   `eau knobs set NAME VALUE --author agent --reason "<diagnosis>; predict <metric> <direction> <size> after lag <L>" --run $run`
   (rule files: gate a candidate with `eau gate` first). A refused write (exit 3) is an answer:
   do not work around it.
4. Record what you learned with `eau finding add ... --run $run` (verdict improved, harmed or
   inconclusive after a measurement; n/a for a diagnosis without a measured change).
5. Change nothing outside knobs/ and experience_pool/. Scratch files (gate candidates) go under
   $session_dir.
6. You have $timeout_min minutes; the session is stopped after that.

Finish with a short report: the diagnosis, the intervention (knob, old -> new, event id) or
"no intervention" and why, and the id of the finding you recorded.
"""


class TemplateError(ValueError):
    """A prompt template that cannot be used; the message names the file, placeholder and the allowed ones."""


def check_template(text: str, where: str = "<template>") -> string.Template:
    """A parsed template whose placeholders are all known."""
    tpl = string.Template(text)
    if not tpl.is_valid():
        raise TemplateError(f"{where}: invalid placeholder syntax (use $name or $${{name}}; $$ for a dollar sign)")
    unknown = sorted(set(tpl.get_identifiers()) - set(PLACEHOLDERS))
    if unknown:
        raise TemplateError(
            f"{where}: unknown placeholder(s) {', '.join('$' + u for u in unknown)}; "
            f"allowed: {', '.join('$' + p for p in PLACEHOLDERS)}"
        )
    return tpl


def load_template(path: Path | None) -> tuple[string.Template, str]:
    """(template, where it came from): ``path`` or the built-in default."""
    if path is None:
        return check_template(DEFAULT_TEMPLATE, "built-in template"), "built-in"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TemplateError(f"--prompt-template {path}: no such file") from None
    except UnicodeDecodeError:
        raise TemplateError(f"--prompt-template {path}: not UTF-8 text") from None
    if not text.strip():
        raise TemplateError(f"--prompt-template {path}: the file is empty")
    return check_template(text, str(path)), str(path)


def render(tpl: string.Template, fields: Mapping[str, object]) -> str:
    """The prompt text; every placeholder must have a value."""
    missing = [p for p in PLACEHOLDERS if p not in fields]
    if missing:
        raise TemplateError(f"prompt fields missing: {', '.join(missing)}")
    return tpl.substitute({k: str(v) for k, v in fields.items()})
