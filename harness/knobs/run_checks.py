"""Checks of a knob value against the run it would apply to: values that pass their schema but that
this run cannot work with are refused at write time, never accepted and then fatal at the next reset.

The facts come from the run's frozen config (``runs/<id>/config.yaml``): the trainer gives them to
its store, and ``eau knobs set`` reads them from the live run's folder. A store outside a run has no
facts and skips these checks (the value is checked again when a run starts: :meth:`KnobStore.run_problems`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

from harness.io import yamlio
from harness.knobs.schema import RULE_RUN, KnobSpec, Refusal, cells

RunFacts = Mapping[str, Any]  # {"llm_user": bool, "config": "<path of the run's config.yaml>"}


def facts_from_config(config: Mapping[str, Any], source: str = "the run config") -> dict[str, Any]:
    """What the checks need to know about a run, from its config (a mapping as in config.yaml)."""
    return {"llm_user": bool(config.get("user_llm")), "config": source}


def read_run_facts(run_dir: Path) -> dict[str, Any] | None:
    """Facts of the run in ``run_dir`` from its ``config.yaml`` (None when it cannot be read)."""
    path = Path(run_dir) / "config.yaml"
    try:
        config = yamlio.load_plain(path)
    except yamlio.FileProblem:
        return None
    return facts_from_config(config, str(path)) if isinstance(config, dict) else None


def _needs_llm_user(spec: KnobSpec, value: Any, facts: RunFacts) -> Refusal | None:
    if facts.get("llm_user", True):
        return None
    low = {g or "default": v for g, v in cells(value).items() if isinstance(v, (int, float)) and v < 1}
    if not low:
        return None
    return Refusal(
        RULE_RUN,
        f"{spec.full_name} = {value!r} draws the LLM user for a share of episodes, but this run "
        f"has no LLM user (no user_llm in {facts.get('config', 'its config')}); only 1.0 "
        "(symbolic user only) can work in this run",
    )


# full knob name -> check(spec, whole raw value, facts)
RUN_CHECKS: dict[str, Callable[[KnobSpec, Any, RunFacts], Refusal | None]] = {
    "user.user_strategy_mix": _needs_llm_user,
}


def run_refusal(spec: KnobSpec, value: Any, facts: RunFacts | None) -> Refusal | None:
    """Why ``value`` cannot work in the run with ``facts`` (None: it can, or no run is known)."""
    check = RUN_CHECKS.get(spec.full_name)
    return check(spec, value, facts) if check is not None and facts else None
