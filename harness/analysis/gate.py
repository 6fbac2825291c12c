"""``eau gate``: check candidate knob and rule files before they go live, without applying them.

Each candidate is a full replacement of one file of a knobs folder: an area file (``env.yaml``,
``user.yaml``, ``reward.yaml``, ``agent.yaml``) or a rule file (``rules/users/<gym>.yaml``,
``rules/rewards/<stem>.yaml``). Its target is read from its path (the file name for areas; the
``rules/users`` or ``rules/rewards`` folders above it for rules), or given as ``FILE=TARGET``.

1. **Validation** through the knob store's own checks (``KnobStore.check_cells``: schema, range,
   gym scope, max delta, x-requires against the run's recent metrics; ``KnobStore.rule_file_problem``
   for rule files), against the run's values in force (``knobs_in_force.json``) and gyms.
2. **Replay** of the run's recent recorded episodes (the last ``steps`` steps, within a time budget):
   reward candidates recompute every turn's reward (:func:`~harness.analysis.replay.replay_rewards`);
   user and env candidates re-play the episodes with the symbolic user
   (:func:`~harness.analysis.replay.replay_episodes`). Agent knobs act through training: validated only.

A plug-in candidate (``FILE=plugins/<name>.py``, or a ``.py`` file in a ``plugins/`` folder) goes
through the plug-in gate (:func:`harness.plugins.gate.gate_plugin`: import in a separate process
under a time limit, the override points' checks, the recorded decisions it changes), then, when it
passes, the recorded episodes are re-played with it in force (outcomes, deadlocks, rewards).

Nothing is written: the store is opened without an event log and the knobs folder is only read.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from harness.analysis.replay import replay_episodes, replay_rewards
from harness.analysis.run_data import RunData
from harness.envs.registry import gym_class
from harness.gyms import BUILTIN_GYMS
from harness.io import yamlio
from harness.knobs.events import EventLog
from harness.knobs.schema import RULE_MISSING, RULE_SCHEMA, RULE_UNKNOWN
from harness.knobs.snapshot import AREAS
from harness.plugins.folder import PluginFolder, check_name
from harness.rewards import RewardRuleError

DEFAULT_STEPS = 5  # recent steps replayed: a few batches, seconds of work
DEFAULT_TIME_BUDGET_S = 30.0


class GateUsageError(ValueError):
    """A candidate whose target cannot be told, or a missing file (the CLI exits 2 / 5)."""


@dataclass(frozen=True)
class Candidate:
    """One candidate file and the knobs-folder file it would replace."""

    path: Path
    kind: str  # "area" | "rules" | "plugin"
    key: str  # area name, or "users/<gym>" | "rewards/<stem>", or the plug-in's name

    @property
    def target(self) -> str:
        if self.kind == "plugin":
            return f"plugins/{self.key}.py"
        return f"{self.key}.yaml" if self.kind == "area" else f"rules/{self.key}.yaml"


def identify(arg: str) -> Candidate:
    """``FILE`` or ``FILE=TARGET`` -> the candidate (target from the path when not given)."""
    file_part, eq, target = arg.partition("=")
    path = Path(file_part)
    ref = Path(target) if eq else path
    parts = ref.parts
    name = ref.name
    if name.endswith(".py") and len(parts) >= 2 and parts[-2] == "plugins":
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such candidate file")
        return Candidate(path, "plugin", name[:-3])
    if not name.endswith(".yaml"):
        raise GateUsageError(
            f"{arg}: a candidate is a .yaml knob or rule file, or a plug-in (FILE=plugins/<name>.py); got {name!r}"
        )
    stem = name[:-5]
    if len(parts) >= 3 and parts[-3] == "rules" and parts[-2] in ("users", "rewards"):
        cand = Candidate(path, "rules", f"{parts[-2]}/{stem}")
    elif len(parts) >= 2 and parts[-2] in ("users", "rewards") and eq:
        cand = Candidate(path, "rules", f"{parts[-2]}/{stem}")
    elif stem in AREAS:
        cand = Candidate(path, "area", stem)
    else:
        raise GateUsageError(
            f"{arg}: cannot tell which knob file this replaces; name it after an area ({', '.join(f'{a}.yaml' for a in AREAS)}), "
            "put it under rules/users/ or rules/rewards/, or say FILE=TARGET (e.g. cand.yaml=rules/users/travel.yaml)"
        )
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such candidate file")
    return cand


def _check_area(store: Any, area: str, path: Path, value: Any, metrics: list[dict[str, Any]]) -> dict[str, Any]:
    if not isinstance(value, dict):
        return {
            "refusals": [
                {
                    "knob": path.name,
                    "rule": RULE_SCHEMA,
                    "line": 1,
                    "message": f"{path.name} must be a mapping of knob names to values",
                }
            ],
            "changes": [],
        }
    specs = store.schemas[area].knobs
    refusals, changes = [], []
    for key in value:
        if key not in specs:
            refusals.append(
                {
                    "knob": f"{area}.{key}",
                    "rule": RULE_UNKNOWN,
                    "line": None,
                    "message": f"unknown knob {area}.{key}; a new knob needs its schema entry (eau knobs add)",
                }
            )
    for name, spec in specs.items():
        if name not in value:
            refusals.append(
                {
                    "knob": spec.full_name,
                    "rule": RULE_MISSING,
                    "line": None,
                    "message": f"{spec.full_name} is missing; a candidate replaces the whole {area}.yaml",
                }
            )
            continue
        in_force = store.in_force[area].get(name)
        if value[name] == in_force:
            continue
        changed, refusal = store.check_cells(spec, in_force, value[name], recent_metrics=metrics)
        if refusal:
            refusals.append({"knob": spec.full_name, "rule": refusal.rule, "line": None, "message": refusal.message})
            continue
        for g, old, new in changed:
            changes.append(
                {
                    "knob": spec.full_name,
                    "gym": g,
                    "old": old,
                    "new": new,
                    "applies": "live" if spec.hot else "next_run",
                }
            )
    return {"refusals": refusals, "changes": changes}


def rule_summary(kind: str, value: Any) -> Any:
    """A short view of a rule file for change listings: reward rules as ``{name: value}``, user rules
    as ``{intent: disclosure}`` plus, for a persuadable user, ``persuasion``: its moves and thresholds
    (what decides how the stance moves)."""
    if not isinstance(value, dict):
        return value
    if kind == "rewards":
        return {r.get("name"): r.get("value") for r in value.get("rules") or [] if isinstance(r, dict)}
    out = {i.get("name"): i.get("disclosure") for i in value.get("intents") or [] if isinstance(i, dict)}
    p = value.get("persuasion")
    if isinstance(p, dict):
        keys = ("min_term_hits", "min_content_terms", "repeat_overlap")
        out["persuasion"] = {"moves": p.get("moves"), **{k: p.get(k) for k in keys}}
    return out


def validate(
    store: Any, cand: Candidate, metrics: list[dict[str, Any]], rules_in_force: dict[str, dict[str, Any]]
) -> tuple[dict[str, Any], Any]:
    """The validation result of one candidate and its parsed value (None when unreadable)."""
    out: dict[str, Any] = {"file": str(cand.path), "target": cand.target}
    lines: dict[Any, int] = {}
    try:
        doc, _ = yamlio.read_yaml(cand.path, lines)
    except yamlio.FileProblem as exc:
        out.update(
            {
                "status": "refused",
                "refusals": [{"knob": cand.target, "rule": exc.kind, "line": exc.line, "message": exc.message}],
                "changes": [],
            }
        )
        return out, None
    value = yamlio.plain(doc)
    if cand.kind == "area":
        res = _check_area(store, cand.key, cand.path, value, metrics)
        if isinstance(doc, dict):
            for r in res["refusals"]:
                if r["line"] is None and "." in r["knob"]:
                    r["line"] = yamlio.key_line(doc, r["knob"].split(".", 1)[1])
    else:
        kind, key = cand.key.split("/", 1)
        problem = store.rule_file_problem(kind, key, value, lines)
        old = rules_in_force.get(kind, {}).get(key)
        res = {
            "refusals": [
                {"knob": f"rules.{kind}.{key}", "rule": RULE_SCHEMA, "line": problem[1], "message": problem[0]}
            ]
            if problem
            else [],
            "changes": []
            if problem or old == value
            else [
                {
                    "knob": f"rules.{kind}.{key}",
                    "gym": None,
                    "old": rule_summary(kind, old),
                    "new": rule_summary(kind, value),
                    "applies": "live",
                }
            ],
        }
    out.update(res)
    out["status"] = "refused" if res["refusals"] else "accepted"
    return out, value


def validate_plugin(
    knobs_dir: Path, cand: Candidate, episodes: Sequence[dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The plug-in gate's result for a candidate (as a candidate entry of the gate document) and,
    when it passes, its override points' entries for the episode replay."""
    for name in BUILTIN_GYMS:  # every override point declared
        gym_class(name)
    out: dict[str, Any] = {"file": str(cand.path), "target": cand.target, "changes": []}
    try:
        check_name(cand.key)
        source = cand.path.read_text(encoding="utf-8")
    except (ValueError, OSError, UnicodeDecodeError) as exc:
        out.update(
            status="refused",
            refusals=[{"knob": f"plugins.{cand.key}", "rule": "plugin file", "line": None, "message": str(exc)}],
        )
        return out, {}
    log = EventLog(None)
    folder = PluginFolder(knobs_dir, lambda: log)
    res = folder.check(cand.key, source, episodes)
    out["plugin"] = res.to_dict()
    if not res.ok:
        out.update(
            status="refused",
            refusals=[{"knob": f"plugins.{cand.key}", "rule": res.rule, "line": res.line, "message": res.message}],
        )
        return out, {}
    out.update(
        status="accepted",
        refusals=[],
        changes=[
            {
                "knob": f"plugins.{cand.key}",
                "gym": None,
                "old": folder.file_sha(folder.dir / f"{cand.key}.py"),
                "new": res.sha,
                "applies": "live",
                "summary": res.summary(),
            }
        ],
    )
    entry = {"plugin": cand.key, "sha": res.sha, "file": str(folder.dir / f"{cand.key}.py"), "source": source}
    return out, {point: entry for point in res.points}


def gate(
    run: RunData | None,
    store: Any,
    args: Sequence[str],
    *,
    steps: int = DEFAULT_STEPS,
    time_budget_s: float = DEFAULT_TIME_BUDGET_S,
) -> dict[str, Any]:
    """The ``eau gate`` document; ``ok`` is False when any candidate is refused."""
    t0 = time.perf_counter()
    cands = [identify(a) for a in args]
    targets = [c.target for c in cands]
    dup = sorted({t for t in targets if targets.count(t) > 1})
    if dup:
        raise GateUsageError(f"two candidates replace the same file: {', '.join(dup)}")
    metrics = run.metrics[-100:] if run else []
    in_force_doc = run.in_force if run else {}
    if isinstance(in_force_doc.get("values"), dict):
        store.load_in_force(in_force_doc["values"])
    rules_in_force = copy.deepcopy(in_force_doc.get("rules")) if isinstance(in_force_doc.get("rules"), dict) else None
    if rules_in_force is None:
        rules_in_force = copy.deepcopy(store.rules)
    results, values = [], {}
    plugins: dict[str, Any] = {}
    rec_steps = run.trajectory_steps()[-steps:] if run is not None and steps > 0 else []
    episodes = run.episodes(rec_steps) if run is not None else []
    for c in cands:
        if c.kind == "plugin":
            res, entries = validate_plugin(store.dir, c, episodes)
            results.append(res)
            plugins.update(entries)
            continue
        res, value = validate(store, c, metrics, rules_in_force)
        results.append(res)
        if res["status"] == "accepted":
            values[c] = value
    doc: dict[str, Any] = {
        "run": run.run_id if run else None,
        "knobs_dir": str(store.dir),
        "candidates": results,
        "ok": all(r["status"] == "accepted" for r in results),
        "replays": [],
    }
    if run is None:
        doc["replays_note"] = "no run given or found: validated against the knobs folder, nothing replayed"
        doc["elapsed_s"] = round(time.perf_counter() - t0, 3)
        return doc
    # what the accepted candidates change, merged over the values in force
    areas = {c.key: v for c, v in values.items() if c.kind == "area"}
    user_rules = dict(rules_in_force.get("users") or {})
    reward_rules = dict(rules_in_force.get("rewards") or {})
    for c, v in values.items():
        if c.kind == "rules":
            kind, key = c.key.split("/", 1)
            (user_rules if kind == "users" else reward_rules)[key] = v
    reward_changed = "reward" in areas or any(c.kind == "rules" and c.key.startswith("rewards/") for c in values)
    behaviour_changed = (
        any(a in areas for a in ("env", "user"))
        or any(c.kind == "rules" and c.key.startswith("users/") for c in values)
        or bool(plugins)
    )
    doc["replayed_steps"] = [rec_steps[0], rec_steps[-1]] if rec_steps else None
    budget_left = lambda: max(0.0, time_budget_s - (time.perf_counter() - t0))  # noqa: E731
    if not episodes and (reward_changed or behaviour_changed):
        doc["replays_note"] = "the run has no recorded trajectories to replay"
    if reward_changed and episodes:
        try:
            doc["replays"].append(
                replay_rewards(episodes, reward_rules, areas.get("reward"), time_budget_s=budget_left())
            )
        except RewardRuleError as exc:
            for r in results:
                if r["target"].startswith("rules/rewards/") or r["target"] == "reward.yaml":
                    r["status"] = "refused"
                    r["refusals"].append(
                        {
                            "knob": r["target"],
                            "rule": RULE_SCHEMA,
                            "line": None,
                            "message": f"with the other reward rule files: {exc}",
                        }
                    )
            doc["ok"] = False
    if behaviour_changed and episodes:
        overrides = {a: v for a, v in areas.items() if a in ("env", "user", "reward")}
        doc["replays"].append(
            replay_episodes(
                episodes,
                overrides=overrides,
                user_rules=user_rules,
                reward_rules=reward_rules,
                time_budget_s=budget_left(),
                plugins=plugins,
            )
        )
    if "agent" in areas:
        doc["agent_note"] = "agent knobs act through training; validated only, nothing to replay"
    doc["elapsed_s"] = round(time.perf_counter() - t0, 3)
    return doc
