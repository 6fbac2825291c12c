"""The fixed evaluation protocol: one YAML file (default ``eval/protocol.yaml``) plus the frozen files it
names (knob schemas, user and reward rule files, optional task data), all independent of ``knobs/``.

:func:`load_protocol` reads and checks the file and builds the :class:`~harness.knobs.snapshot.KnobSnapshot`
the gyms see during evaluation *from the protocol alone* (the training knob folder is never opened).

``protocol_hash`` is the sha256 of the canonical JSON (sorted keys, no spaces, ASCII) of the
protocol's parsed content in which every file reference is replaced by ``{"sha256": <digest>}``, the
digest of that file's parsed content (YAML/JSON) or bytes (anything else). So comments, layout and
where the files live do not change the hash; any value that can change a score does. The harness
version is deliberately *not* in it: results record ``harness_version`` and ``scorer_hash`` (see
:func:`scorer_hash`) next to it, so a code change is visible without renaming the protocol.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import jsonschema
import yaml

from harness.envs.registry import gym_class, names
from harness.knobs.snapshot import DEFAULT_KEY, KnobSnapshot, resolve
from harness.rewards.rules import RewardRuleError, compile_rule_files
from harness.users.rules import RuleFileError, compile_user_rules

FORMAT_VERSION = 1
AREAS = ("env", "user", "reward")
RENDERINGS = ("tagged", "tool_call", "run")
SPLITS = ("train", "eval")
TOP_LEVEL = (
    "version",
    "name",
    "split",
    "seed",
    "trials",
    "rendering",
    "sampling",
    "limits",
    "batch_size",
    "gyms",
    "knob_schemas",
    "knobs",
    "rules",
)
GYM_FIELDS = ("tasks", "held_out", "data_file")
SYMBOLIC_ONLY_MIX = 1.0


class ProtocolError(ValueError):
    """A protocol file (or a file it names) that cannot be used; the message names file, field and value."""


def repo_root() -> Path:
    """The repository root (source checkout or editable install)."""
    return Path(__file__).resolve().parents[2]


def default_protocol_path() -> Path:
    """``eval/protocol.yaml`` of the repository."""
    return repo_root() / "eval" / "protocol.yaml"


def canonical_json(obj: Any) -> str:
    """The one JSON text of ``obj`` that the hashes are computed over."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class GymPlan:
    """One gym of the protocol: task indices ``0..tasks-1`` of the split, each played ``trials`` times."""

    name: str
    tasks: int
    held_out: bool = False
    data_file: Path | None = None  # a task file in the gym's own format (colbench JSONL); None: procedural


@dataclass(frozen=True)
class Protocol:
    """A loaded, checked protocol. Build it with :func:`load_protocol`."""

    path: Path
    name: str
    split: str
    seed: int
    trials: int
    rendering: str  # tagged | tool_call | run (the run's own rendering)
    temperature: float
    top_p: float
    max_new_tokens_per_turn: int
    max_episode_tokens: int
    batch_size: int
    gyms: tuple[GymPlan, ...]
    knobs: KnobSnapshot  # env/user/reward values and rule files of the protocol; agent area empty
    hash: str
    file_digests: Mapping[str, str] = field(default_factory=dict)  # "rules.users.travel" -> sha256

    @property
    def gym_names(self) -> list[str]:
        return [g.name for g in self.gyms]

    def describe(self) -> dict[str, Any]:
        """What defines the protocol, JSON-ready (``eau eval --describe``, stored with every result)."""
        return {
            "name": self.name,
            "path": str(self.path),
            "protocol_hash": self.hash,
            "split": self.split,
            "seed": self.seed,
            "trials": self.trials,
            "rendering": self.rendering,
            "sampling": {"temperature": self.temperature, "top_p": self.top_p},
            "limits": {
                "max_new_tokens_per_turn": self.max_new_tokens_per_turn,
                "max_episode_tokens": self.max_episode_tokens,
                "max_steps": copy.deepcopy(self.knobs.values["env"]["max_steps"]),
            },
            "batch_size": self.batch_size,
            "gyms": {
                g.name: {
                    "tasks": g.tasks,
                    "held_out": g.held_out,
                    **({"data_file": str(g.data_file)} if g.data_file else {}),
                }
                for g in self.gyms
            },
            "files": dict(self.file_digests),
        }


# ------------------------------------------------------------------------------------------- checks
class _Checker:
    """Error messages that name the protocol file and the field."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, where: str, msg: str) -> ProtocolError:
        return ProtocolError(f"{self.path}: field {where}: {msg}")

    def mapping(self, value: Any, where: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(where, f"must be a mapping, got {_show(value)}")
        return value

    def int_at_least(self, value: Any, where: str, low: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise self.fail(where, f"= {_show(value)}: must be an integer >= {low}")
        return value

    def number_in(self, value: Any, where: str, low: float, high: float) -> float:
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or not low <= value <= high
        ):
            raise self.fail(where, f"= {_show(value)}: must be a number in [{low}, {high}]")
        return float(value)

    def choice(self, value: Any, where: str, allowed: tuple[str, ...]) -> str:
        if value not in allowed:
            raise self.fail(where, f"= {_show(value)}: allowed: {', '.join(allowed)}")
        return str(value)

    def keys(self, value: Mapping[str, Any], where: str, allowed: tuple[str, ...], required: tuple[str, ...]) -> None:
        unknown = sorted(set(value) - set(allowed))
        if unknown:
            raise self.fail(where, f"unknown key(s) {', '.join(map(str, unknown))}; allowed: {', '.join(allowed)}")
        missing = [k for k in required if k not in value]
        if missing:
            raise self.fail(where, f"missing key(s) {', '.join(missing)}")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _file_digest(path: Path) -> str:
    """sha256 of a referenced file: of its parsed content for YAML/JSON (comments and layout do not
    count), of its bytes otherwise."""
    if path.suffix in (".yaml", ".yml", ".json"):
        data = (
            json.loads(path.read_text(encoding="utf-8"))
            if path.suffix == ".json"
            else yaml.safe_load(path.read_text(encoding="utf-8"))
        )
        return sha256_text(canonical_json(data))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _load_ref(ck: _Checker, base: Path, value: Any, where: str, digests: dict[str, str]) -> tuple[Path, Any]:
    """Resolve a file reference (relative to the protocol's folder), record its digest, parse it."""
    if not isinstance(value, str) or not value:
        raise ck.fail(where, f"= {_show(value)}: must be a file path (relative to {base})")
    path = Path(value) if Path(value).is_absolute() else base / value
    if not path.is_file():
        raise ck.fail(where, f"= {value!r}: no such file {path}")
    try:
        digests[where] = _file_digest(path)
        if path.suffix == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
        elif path.suffix in (".yaml", ".yml"):
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        else:
            data = None
    except (yaml.YAMLError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ck.fail(where, f"{path} cannot be parsed: {exc}") from None
    return path, data


def _check_knob_values(
    ck: _Checker, area: str, values: Mapping[str, Any], schema: Mapping[str, Any], schema_path: Path, gyms: list[str]
) -> None:
    """Every knob of the frozen schema has a value here, each (per-gym) cell valid against it."""
    props = schema.get("properties")
    if not isinstance(props, Mapping) or not props:
        raise ck.fail(f"knob_schemas.{area}", f"{schema_path} has no 'properties'")
    unknown = sorted(set(values) - set(props))
    if unknown:
        raise ck.fail(
            f"knobs.{area}",
            f"unknown knob(s) {', '.join(unknown)}; the frozen schema {schema_path} defines: {', '.join(props)}",
        )
    missing = [k for k in props if k not in values]
    if missing:
        raise ck.fail(
            f"knobs.{area}",
            f"missing value(s) for {', '.join(missing)}: the protocol needs a frozen "
            "value for every knob its schema defines (gyms would fall back to "
            "code defaults otherwise)",
        )

    known = set(names())
    for name, raw in values.items():
        cells = raw.items() if isinstance(raw, Mapping) else [(None, raw)]
        if isinstance(raw, Mapping):
            if DEFAULT_KEY not in raw:
                raise ck.fail(
                    f"knobs.{area}.{name}", f"a per-gym value needs a '{DEFAULT_KEY}' entry, got {_show(raw)}"
                )
            bad = sorted(str(g) for g in raw if g != DEFAULT_KEY and g not in known)
            if bad:
                raise ck.fail(
                    f"knobs.{area}.{name}", f"unknown gym(s) {', '.join(bad)}; known: {', '.join(sorted(known))}"
                )
        validator = jsonschema.Draft202012Validator(props[name])
        for gym, cell in cells:
            errors = list(validator.iter_errors(cell))
            if errors:
                cell_name = f"knobs.{area}.{name}" + (f".{gym}" if gym is not None else "")
                raise ck.fail(cell_name, f"= {_show(cell)}: {errors[0].message}")
    if area == "user":
        for gym in gyms:
            mix = resolve(values["user_strategy_mix"], gym)
            if float(mix) != SYMBOLIC_ONLY_MIX:
                raise ck.fail(
                    "knobs.user.user_strategy_mix",
                    f"= {_show(mix)} for gym {gym}: evaluation uses the symbolic user only; it must be 1.0",
                )


def _compile_rules(ck: _Checker, users: Mapping[str, Any], rewards: Mapping[str, Any]) -> None:
    """Compile the frozen rule files now, so a bad file fails at load with its protocol field."""
    for gym, data in users.items():
        try:
            compile_user_rules(data, f"rules.users.{gym}", gym=gym)
        except RuleFileError as exc:
            raise ck.fail(f"rules.users.{gym}", str(exc)) from None
    try:
        compile_rule_files(dict(rewards), name_files=True)
    except RewardRuleError as exc:
        raise ck.fail("rules.rewards", str(exc)) from None


# ------------------------------------------------------------------------------------------- loading
def load_protocol(path: str | Path | None = None) -> Protocol:
    """Read, check and hash a protocol file (default :func:`default_protocol_path`).

    Raises :class:`ProtocolError` naming the file, the field, the value and what is allowed.
    """
    path = Path(path) if path is not None else default_protocol_path()
    path = path.resolve()
    if not path.is_file():
        raise ProtocolError(f"{path}: no such protocol file")
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"{path}: not valid YAML: {exc}") from None
    ck = _Checker(path)
    doc = ck.mapping(doc, "(top level)")
    ck.keys(doc, "(top level)", TOP_LEVEL, TOP_LEVEL)
    if doc["version"] != FORMAT_VERSION:
        raise ck.fail("version", f"= {_show(doc['version'])}: this harness reads protocol version {FORMAT_VERSION}")
    if not isinstance(doc["name"], str) or not doc["name"].strip():
        raise ck.fail("name", f"= {_show(doc['name'])}: must be a non-empty string")
    split = ck.choice(doc["split"], "split", SPLITS)
    seed = ck.int_at_least(doc["seed"], "seed", 0)
    trials = ck.int_at_least(doc["trials"], "trials", 1)
    rendering = ck.choice(doc["rendering"], "rendering", RENDERINGS)
    sampling = ck.mapping(doc["sampling"], "sampling")
    ck.keys(sampling, "sampling", ("temperature", "top_p"), ("temperature", "top_p"))
    temperature = ck.number_in(sampling["temperature"], "sampling.temperature", 0.0, 10.0)
    top_p = ck.number_in(sampling["top_p"], "sampling.top_p", 1e-6, 1.0)
    limits = ck.mapping(doc["limits"], "limits")
    ck.keys(
        limits,
        "limits",
        ("max_new_tokens_per_turn", "max_episode_tokens"),
        ("max_new_tokens_per_turn", "max_episode_tokens"),
    )
    per_turn = ck.int_at_least(limits["max_new_tokens_per_turn"], "limits.max_new_tokens_per_turn", 1)
    per_episode = ck.int_at_least(limits["max_episode_tokens"], "limits.max_episode_tokens", 2)
    batch_size = ck.int_at_least(doc["batch_size"], "batch_size", 1)

    base = path.parent
    digests: dict[str, str] = {}
    try:
        hashed = json.loads(canonical_json(doc))  # a deep, JSON-typed copy whose file refs get replaced
    except (TypeError, ValueError) as exc:
        raise ck.fail("(top level)", f"holds a value JSON cannot represent (dates, NaN, ...): {exc}") from None
    gyms_doc = ck.mapping(doc["gyms"], "gyms")
    if not gyms_doc:
        raise ck.fail("gyms", "must name at least one gym")
    plans: list[GymPlan] = []
    for gname, spec in gyms_doc.items():
        where = f"gyms.{gname}"
        if gname not in names():
            raise ck.fail(where, f"unknown gym {gname!r}; known gyms: {', '.join(names())}")
        spec = ck.mapping(spec, where)
        ck.keys(spec, where, GYM_FIELDS, ("tasks",))
        tasks = ck.int_at_least(spec["tasks"], f"{where}.tasks", 1)
        held = spec.get("held_out", False)
        if not isinstance(held, bool):
            raise ck.fail(f"{where}.held_out", f"= {_show(held)}: must be true or false")
        data_file = None
        if "data_file" in spec:
            if "data_file" not in inspect.signature(gym_class(gname).__init__).parameters:
                raise ck.fail(f"{where}.data_file", f"gym {gname} does not load task files (procedural only)")
            data_file, _ = _load_ref(ck, base, spec["data_file"], f"{where}.data_file", digests)
            hashed["gyms"][gname]["data_file"] = {"sha256": digests[f"{where}.data_file"]}
        plans.append(GymPlan(gname, tasks, held, data_file))
    gym_list = [p.name for p in plans]

    schemas_doc = ck.mapping(doc["knob_schemas"], "knob_schemas")
    ck.keys(schemas_doc, "knob_schemas", AREAS, AREAS)
    knobs_doc = ck.mapping(doc["knobs"], "knobs")
    ck.keys(knobs_doc, "knobs", AREAS, AREAS)
    values: dict[str, dict[str, Any]] = {"agent": {}}
    for area in AREAS:
        spath, schema = _load_ref(ck, base, schemas_doc[area], f"knob_schemas.{area}", digests)
        hashed["knob_schemas"][area] = {"sha256": digests[f"knob_schemas.{area}"]}
        if not isinstance(schema, Mapping):
            raise ck.fail(f"knob_schemas.{area}", f"{spath} must hold a JSON Schema object")
        area_values = ck.mapping(knobs_doc[area], f"knobs.{area}")
        _check_knob_values(ck, area, area_values, schema, spath, gym_list)
        values[area] = json.loads(canonical_json(area_values))

    rules_doc = ck.mapping(doc["rules"], "rules")
    ck.keys(rules_doc, "rules", ("users", "rewards"), ("users", "rewards"))
    users_doc = ck.mapping(rules_doc["users"], "rules.users")
    missing = [g for g in gym_list if g not in users_doc]
    if missing:
        raise ck.fail("rules.users", f"no user rule file for evaluated gym(s) {', '.join(missing)}")
    user_rules: dict[str, Any] = {}
    for gname, ref in users_doc.items():
        if gname not in names():
            raise ck.fail(f"rules.users.{gname}", f"unknown gym {gname!r}; known gyms: {', '.join(names())}")
        _, user_rules[gname] = _load_ref(ck, base, ref, f"rules.users.{gname}", digests)
        hashed["rules"]["users"][gname] = {"sha256": digests[f"rules.users.{gname}"]}
    rewards_doc = ck.mapping(rules_doc["rewards"], "rules.rewards")
    reward_rules: dict[str, Any] = {}
    for stem, ref in rewards_doc.items():
        _, reward_rules[stem] = _load_ref(ck, base, ref, f"rules.rewards.{stem}", digests)
        hashed["rules"]["rewards"][stem] = {"sha256": digests[f"rules.rewards.{stem}"]}
    _compile_rules(ck, user_rules, reward_rules)

    snapshot = KnobSnapshot(values=values, user_rules=user_rules, reward_rules=reward_rules, version=0)
    return Protocol(
        path=path,
        name=doc["name"].strip(),
        split=split,
        seed=seed,
        trials=trials,
        rendering=rendering,
        temperature=temperature,
        top_p=top_p,
        max_new_tokens_per_turn=per_turn,
        max_episode_tokens=per_episode,
        batch_size=batch_size,
        gyms=tuple(plans),
        knobs=snapshot,
        hash=sha256_text(canonical_json({"format": FORMAT_VERSION, "protocol": hashed})),
        file_digests=dict(sorted(digests.items())),
    )


# Source folders whose code decides an episode and its score; their digest is recorded with results.
SCORER_PACKAGES = ("envs", "users", "rewards", "rollout", "eval")


def scorer_hash() -> str:
    """sha256 over the source of the harness modules that play and score evaluation episodes
    (``harness/{envs,users,rewards,rollout,eval}/*.py``): differs when scoring code differs."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for pkg in SCORER_PACKAGES:
        for p in sorted((root / pkg).glob("*.py")):
            h.update(f"{pkg}/{p.name}\0".encode())
            h.update(p.read_bytes())
            h.update(b"\0")
    return h.hexdigest()
