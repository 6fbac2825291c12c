"""A generator of malformed and hostile knob and rule edits (issue 28), and the checks of what must
hold after each: the store refuses it, names the file and the line, and keeps only valid values in force.

An :class:`Edit` is one change to one *slot* of a knobs folder (an area file, a rule file, a schema
file), made by a file write (``via="file"``: new bytes, or a symlink, FIFO or folder in place of the
file) or by ``eau knobs set`` (``via="cli"``). :func:`generate` yields a seeded mix of every class
below; each batch holds at most one edit per slot, so every edit is seen by the step boundary that
follows it. Valid edits are mixed in (``expect="accept"``) so that the store is seen to go on applying
good values between the hostile ones.

Classes: nan_scalar, nan_list, nan_per_gym, nan_rule_value, out_of_range_element, unordered_clip,
bad_per_gym_key, duplicate_across_files, impossible_for_run, deep_nesting, recursive_alias,
billion_laughs, huge_file, symlink, fifo, directory, non_utf8, catastrophic_regex (patterns that backtrack
elsewhere, accepted and harmless on RE2; patterns RE2 cannot take, refused), wrong_type,
schema_hostile, syntax, valid.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from harness.io import yamlio
from harness.knobs.checks import run_refusal
from harness.knobs.schema import validate_value
from harness.knobs.store import KnobStore

AREA_SLOTS = ["agent.yaml", "env.yaml", "user.yaml", "reward.yaml"]
REWARD_SLOTS = ["rules/rewards/default.yaml", "rules/rewards/zz_fuzz_1.yaml", "rules/rewards/zz_fuzz_2.yaml"]
USER_SLOTS = [f"rules/users/{g}.yaml" for g in ("intention", "travel", "function", "telepathy", "colbench")]
SCHEMA_SLOTS = [
    "schema/agent.schema.json",
    "schema/env.schema.json",
    "schema/user.schema.json",
    "schema/reward.schema.json",
    "schema/reward_rules.schema.json",
    "schema/user_rules.schema.json",
]
SLOTS = AREA_SLOTS + REWARD_SLOTS + USER_SLOTS + SCHEMA_SLOTS
EXTRA_REWARD_FILE = "description: a slot the hostile-edit benchmark writes to\nrules: []\n"

# numeric knobs by area, with a value each that is valid and close to the default
NUMERIC = {
    "agent.yaml": [
        "lr",
        "critic_lr",
        "entropy_coeff",
        "kl_coef",
        "clip_ratio",
        "gamma",
        "lam",
        "top_p",
        "temperature",
        "max_grad_norm",
        "vf_coef",
    ],
    "env.yaml": ["success_threshold", "human_response_char_limit", "max_repeated_probes"],
    "user.yaml": ["match_threshold", "temperature", "user_strategy_mix"],
    "reward.yaml": ["default_scale", "per_gym_scale", "predicate_weight"],
}
NON_FINITE = [".nan", ".NaN", ".inf", "-.inf", ".Inf", "1e400", "-1e400", "+.inf"]
CATASTROPHIC = [
    r"(a+)+$",
    r"(\w+\s?)+$",
    r"(x+x+)+y",
    r"(a|aa)+b",
    r"^(([a-z])+.)+[A-Z]([a-z])+$",
    r"(.*a){20}",
    r"(\d+)*x",
    r"^(a|a?)+$",
    r"((ab)*|a)*c",
    r"(\s*\w+\s*)*!",
]
# what RE2 cannot take (lookaround, backreferences, repetition past its limits, a program past
# max_mem): each must be refused at the gate with its file and line
RE2_REFUSED = [
    r"(?=a)a",
    r"show(?!\s+me)",
    r"(?<=x)y",
    r"(?<!x)y",
    r"(a)\1",
    r"(\w+)\s+\1",
    r"a{1001}",
    r"((a{1000}){1000}){1000}",
    r"(\pL{100}){10}",  # a program past max_mem
    r"(?>a+)b",
    r"a++b",
]
WRONG_TYPES = {
    "agent.yaml": [
        ("ppo_epochs", "two"),
        ("lr", "[1.0e-3]"),
        ("whiten_advantages", "3"),
        ("kl_estimator", "k9"),
        ("mini_batch_size", "1.5"),
        ("temperature", "'hot'"),
        ("max_new_tokens_per_turn", "{default: x}"),
        ("gamma", "null"),
    ],
    "env.yaml": [
        ("min_questions", "'one'"),
        ("success_threshold", "[0.5, 0.6]"),
        ("human_response_char_limit", "true"),
    ],
    "user.yaml": [
        ("persona", "7"),
        ("reveal_kinds", "preference"),
        ("facts_per_reply", "1.5"),
        ("reveal_kinds", "[preference, secrets]"),
    ],
    "reward.yaml": [
        ("turn_reward_clip", "1.0"),
        ("turn_reward_clip", "[-1.0]"),
        ("turn_reward_clip", "['-1', '2']"),
        ("default_scale", "'1.0'"),
    ],
}


@dataclass
class Edit:
    """One hostile (or valid) edit of one slot."""

    cls: str
    slot: str  # path inside the knobs folder
    via: str = "file"  # file | cli
    kind: str = "write"  # write | symlink | fifo | dir
    content: bytes = b""
    link_to: str = ""
    cli: tuple[str, str, str | None] | None = None  # (knob, value text, gym)
    expect: str = "refuse"  # refuse | accept

    def describe(self) -> str:
        if self.via == "cli":
            return f"{self.cls}: eau knobs set {self.cli[0]} {self.cli[1]!r}" + (
                f" --gym {self.cli[2]}" if self.cli[2] else ""
            )
        return f"{self.cls}: {self.kind} {self.slot}" + (
            f" ({len(self.content)} bytes)" if self.kind == "write" else ""
        )


def _set_key(text: str, key: str, value: str) -> str:
    """``text`` with the top-level ``key:`` set to ``value`` (a block value under it is replaced too)."""
    lines = text.splitlines()
    out, skipping = [], False
    for line in lines:
        if skipping and (line.startswith((" ", "\t", "-")) or not line.strip()):
            continue
        skipping = False
        if re.match(rf"^{re.escape(key)}\s*:", line):
            out.append(f"{key}: {value}")
            skipping = True
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def _reward_rule(name: str, value: str, predicate: str = "question_asked") -> str:
    return f"  - name: {name}\n    predicate: {predicate}\n    value: {value}\n"


def _billion_laughs(levels: int, key: str = "lr") -> str:
    lol = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, levels):
        lol.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    return "\n".join(lol) + f"\n{key}: *a{levels - 1}\n"


class Generator:
    """Seeded hostile edits against the slots of a knobs folder whose valid texts are ``base``."""

    def __init__(self, base: dict[str, str], seed: int = 0, tmp: Path | None = None, cli: bool = True):
        self.base, self.rng, self.tmp, self.cli = dict(base), random.Random(seed), tmp, cli

    # ------------------------------------------------------------------ one edit per class
    def area(self, slot: str, key: str, value: str, cls: str, expect: str = "refuse") -> Edit:
        return Edit(cls, slot, content=_set_key(self.base[slot], key, value).encode(), expect=expect)

    def make(self, cls: str) -> Edit:
        r = self.rng
        if cls == "nan_scalar":
            slot = r.choice(AREA_SLOTS)
            return self.area(slot, r.choice(NUMERIC[slot]), r.choice(NON_FINITE), cls)
        if cls == "nan_list":
            bad = r.choice(NON_FINITE)
            value = r.choice([f"[-1.0, {bad}]", f"[{bad}, 2.0]", f"[{bad}, {bad}]"])
            if r.random() < 0.5:
                return self.area("reward.yaml", "turn_reward_clip", value, cls)
            return self.area("reward.yaml", "turn_reward_clip", "\n  - -1.0\n  - " + bad, cls)
        if cls == "nan_per_gym":
            slot = r.choice(["env.yaml", "reward.yaml", "user.yaml"])
            key = r.choice(NUMERIC[slot])
            bad = r.choice(NON_FINITE)
            gym = (
                "intention"
                if key not in ("success_threshold", "max_repeated_probes", "predicate_weight")
                else {
                    "success_threshold": "intention",
                    "max_repeated_probes": "function",
                    "predicate_weight": "function",
                }[key]
            )
            return self.area(slot, key, r.choice([f"{{default: {bad}}}", f"\n  default: 1\n  {gym}: {bad}"]), cls)
        if cls == "nan_rule_value":
            slot = r.choice(REWARD_SLOTS[1:])
            bad = r.choice(NON_FINITE)
            text = "rules:\n" + _reward_rule(f"fuzz_nan_{r.randrange(10**6)}", bad)
            if r.random() < 0.3:
                text = (
                    "rules:\n"
                    + _reward_rule(f"fuzz_q_{r.randrange(10**6)}", "0.1", "questions_over")
                    + f"    params: {{limit: {bad}}}\n"
                )
            return Edit(cls, slot, content=text.encode())
        if cls == "out_of_range_element":
            choice = r.randrange(5)
            if choice == 0:
                return self.area(
                    "reward.yaml", "turn_reward_clip", r.choice(["[-5.0, 2.0]", "[-1.0, 3.5]", "[-1.0e9, 0.0]"]), cls
                )
            if choice == 1:
                return self.area("user.yaml", "reveal_kinds", "[preference, passwords]", cls)
            if choice == 2:
                return self.area(
                    "env.yaml",
                    "max_steps",
                    r.choice(["{default: 16, intention: 999}", "{default: -3, colbench: 10}"]),
                    cls,
                )
            if choice == 3:
                return Edit(
                    cls,
                    r.choice(REWARD_SLOTS[1:]),
                    content=(
                        "rules:\n" + _reward_rule(f"fuzz_big_{r.randrange(10**6)}", r.choice(["5.0", "-2", "1e300"]))
                    ).encode(),
                )
            return self.area("agent.yaml", r.choice(["lr", "clip_ratio", "top_p"]), r.choice(["-0.1", "1e9", "0"]), cls)
        if cls == "unordered_clip":
            return self.area(
                "reward.yaml",
                "turn_reward_clip",
                r.choice(["[2.0, -1.0]", "[0.5, 0.5]", "[1.0, 0.0]", "[-0.5, -1.0]"]),
                cls,
            )
        if cls == "bad_per_gym_key":
            slot = r.choice(["env.yaml", "reward.yaml"])
            key = "max_steps" if slot == "env.yaml" else "per_gym_scale"
            v = "16" if slot == "env.yaml" else "1.0"
            bad = r.choice(["5", "true", "false", "null", "1.5", "'Intention!'", "[a, b]", "~", "0x10", "nogym"])
            if bad == "[a, b]":
                return self.area(slot, key, f"\n  default: {v}\n  ? [a, b]\n  : {v}", cls)
            return self.area(slot, key, f"{{default: {v}, {bad}: {v}}}", cls)
        if cls == "duplicate_across_files":
            name = r.choice(["format_error", "new_fact_disclosed", "repeated_question", "intention_deadlock"])
            text = "rules:\n" + _reward_rule(f"fuzz_ok_{r.randrange(10**6)}", "0.01") + _reward_rule(name, "0.02")
            return Edit(cls, r.choice(REWARD_SLOTS[1:]), content=text.encode())
        if cls == "impossible_for_run":
            if self.cli and r.random() < 0.5:
                return Edit(
                    cls,
                    "user.yaml",
                    via="cli",
                    cli=("user.user_strategy_mix", r.choice(["0.75", "0.8", "0.9", "0.99"]), None),
                )
            return self.area(
                "user.yaml",
                "user_strategy_mix",
                r.choice(["0.75", "0.9", "0.99", "{default: 1.0, intention: 0.8}", "{default: 0.8}"]),
                cls,
            )
        if cls == "deep_nesting":
            depth = r.choice([65, 100, 600, 5000])
            slot = r.choice(AREA_SLOTS + REWARD_SLOTS[1:] + USER_SLOTS)
            if r.random() < 0.5:
                value = "[" * depth + "]" * depth
            else:
                value = "{a: " * depth + "1" + "}" * depth
            if slot in AREA_SLOTS:
                return self.area(slot, r.choice(NUMERIC[slot]), value, cls)
            return Edit(cls, slot, content=(self.base[slot] + f"\ndeep: {value}\n").encode())
        if cls == "recursive_alias":
            slot = r.choice(AREA_SLOTS + REWARD_SLOTS[1:] + USER_SLOTS)
            form = r.choice(["&a [*a]", "&a {x: *a}", "&a [1, [2, *a]]"])
            if slot in AREA_SLOTS:
                return self.area(slot, r.choice(NUMERIC[slot]), form, cls)
            if slot in USER_SLOTS:
                return Edit(
                    cls, slot, content=self.base[slot].replace("intents:", "loop: &r [*r]\nintents:", 1).encode()
                )
            return Edit(cls, slot, content=f"rules: {form}\n".encode())
        if cls == "billion_laughs":
            slot = r.choice(AREA_SLOTS + REWARD_SLOTS[1:] + USER_SLOTS)
            levels = r.choice([6, 8, 9, 12])
            if slot in AREA_SLOTS:
                return Edit(cls, slot, content=(self.base[slot] + "\n" + _billion_laughs(levels, "zz_lol")).encode())
            return Edit(cls, slot, content=(_billion_laughs(levels, "rules")).encode())
        if cls == "huge_file":
            slot = r.choice(SLOTS)
            n = r.choice([300_000, 1_000_000, 5_000_000])
            pad = r.choice(["comment", "string", "keys"])
            if slot.endswith(".json"):
                return Edit(cls, slot, content=(self.base[slot][:-2] + " " * n + "}\n").encode())
            if pad == "comment":
                data = self.base[slot] + "#" + "x" * n + "\n"
            elif pad == "string":
                data = self.base[slot] + "zz_text: '" + "y" * n + "'\n"
            else:
                data = self.base[slot] + "".join(f"zz_k{i}: {i}\n" for i in range(n // 10))
            return Edit(cls, slot, content=data.encode())
        if cls == "symlink":
            slot = r.choice(SLOTS)
            target = r.choice(["/etc/passwd", "/dev/zero", "/nonexistent/dangling.yaml", "valid-copy"])
            if target == "valid-copy" and self.tmp is not None:
                copy = self.tmp / f"valid-{slot.replace('/', '_')}"
                copy.write_text(self.base[slot])
                target = str(copy)
            return Edit(cls, slot, kind="symlink", link_to=target)
        if cls == "fifo":
            return Edit(cls, r.choice(SLOTS), kind="fifo")
        if cls == "directory":
            return Edit(cls, r.choice(SLOTS), kind="dir")
        if cls == "non_utf8":
            slot = r.choice(SLOTS)
            data = self.base[slot].encode()
            how = r.randrange(4)
            if how == 0:
                i = r.randrange(len(data))
                data = data[:i] + b"\xff\xfe" + data[i:]
            elif how == 1:
                data = self.base[slot].replace("e", "\xe9", 3).encode("latin-1", "replace")
                if data == self.base[slot].encode():
                    data = b"\x80" + data
            elif how == 2:
                data = self.base[slot].encode("utf-16")
            else:
                data = data + b"\n# \xc3\x28 broken sequence\n"
            return Edit(cls, slot, content=data)
        if cls == "catastrophic_regex":
            # half are patterns that backtrack catastrophically elsewhere: RE2 takes them and runs them in
            # linear time (accepted; the live phase then searches questions with them); half are patterns
            # RE2 cannot take, refused at the gate
            slot = r.choice(USER_SLOTS)
            refused = r.random() < 0.5
            pat = r.choice(RE2_REFUSED if refused else CATASTROPHIC).replace("'", "''")
            text = self.base[slot].replace("    patterns:\n", f"    patterns:\n      - '{pat}'\n", 1)
            return Edit(cls, slot, content=text.encode(), expect="refuse" if refused else "accept")
        if cls == "wrong_type":
            choice = r.randrange(6)
            if choice < 3:
                slot = r.choice(AREA_SLOTS)
                key, value = r.choice(WRONG_TYPES[slot])
                if self.cli and r.random() < 0.4:
                    return Edit(cls, slot, via="cli", cli=(f"{slot[:-5]}.{key}", value, None))
                return self.area(slot, key, value, cls)
            if choice == 3:
                return Edit(cls, r.choice(AREA_SLOTS), content=r.choice([b"- a\n- b\n", b"just a string\n", b"42\n"]))
            if choice == 4:
                return Edit(
                    cls,
                    r.choice(REWARD_SLOTS[1:]),
                    content=r.choice(
                        [
                            b"rules: {}\n",
                            b"rules:\n  - name: x\n    predicate: question_asked\n    value: high\n",
                            b"rules:\n  - name: Bad-Name\n    predicate: question_asked\n    value: 0.1\n",
                            b"rules:\n  - name: nopred\n    predicate: no_such_predicate\n    value: 0.1\n",
                            b"rules:\n  - 1\n  - 2\n",
                            b"5: 1\nrules: []\n",
                        ]
                    ),
                )
            slot = r.choice(USER_SLOTS)
            return Edit(
                cls,
                slot,
                content=r.choice(
                    [
                        self.base[slot].replace("disclosure: none", "disclosure: always", 1),
                        self.base[slot].replace("fallback_intent:", "fallback_intent: nosuch\nold_fallback:", 1),
                        self.base[slot].replace("    patterns:\n", "    patterns:\n      - '(unclosed'\n", 1),
                        "gym: 5\n" + self.base[slot],
                    ]
                ).encode(),
            )
        if cls == "schema_hostile":
            slot = r.choice(SCHEMA_SLOTS)
            raw = self.base[slot]
            choice = r.randrange(5)
            if choice == 0:
                data = raw.replace('"minimum": 0.0', '"minimum": NaN', 1).replace(
                    '"type": "object"', '"type": "object", "x": NaN', 1
                )
            elif choice == 1:
                data = raw[: len(raw) // 2]
            elif choice == 2:
                data = "[" * 100_000 + "]" * 100_000
            elif choice == 3:
                data = json.dumps({"type": "objekt", "properties": {"lr": {"type": 5}}})
            else:
                data = (
                    raw.replace('"x-hot": true', '"x-hot": "yes"', 1)
                    if '"x-hot"' in raw
                    else raw.replace('"type": "object"', '"type": 7', 1)
                )
            return Edit(cls, slot, content=data.encode())
        if cls == "syntax":
            slot = r.choice(AREA_SLOTS + REWARD_SLOTS + USER_SLOTS)
            lines = self.base[slot].splitlines()
            tops = [i for i, line in enumerate(lines) if line[:1].isalpha()]  # a top-level key's line
            i = r.choice(tops)
            lines.insert(i, r.choice(["{", "[unclosed", "\t- x: ]", "'open", ": :", "key: [1, 2", "- item"]))
            return Edit(cls, slot, content=("\n".join(lines) + "\n").encode())
        if cls == "huge_integer":  # longer than Python converts to text (4,300 digits), decimal or hex
            big = r.choice(["7" * r.randrange(4_400, 20_000), "0x" + "f" * r.randrange(3_600, 12_000)])
            if r.random() < 0.3:
                return Edit(
                    cls, r.choice(REWARD_SLOTS[1:]), content=("rules:\n" + _reward_rule("fuzz_big_int", big)).encode()
                )
            slot = r.choice(AREA_SLOTS)
            if self.cli and r.random() < 0.3:
                return Edit(cls, slot, via="cli", cli=(f"{slot[:-5]}.{r.choice(NUMERIC[slot])}", big, None))
            return self.area(slot, r.choice(NUMERIC[slot]), big, cls)
        if cls == "yaml_tag":  # a YAML value that is not plain data: a set, a date, binary
            value = r.choice(["!!set {detail: null}", "2026-12-07", "!!binary aGVsbG8=", "!!set {a, b}"])
            key = r.choice(["reveal_kinds", "persona"])
            if self.cli and r.random() < 0.4:
                return Edit(cls, "user.yaml", via="cli", cli=(f"user.{key}", value, None))
            return self.area("user.yaml", key, value, cls)
        if cls == "valid":
            return self.valid()
        raise ValueError(f"unknown class {cls!r}")

    def valid(self) -> Edit:
        """A good edit that toggles between two valid values (the store must go on applying them)."""
        options = [
            ("agent.yaml", "entropy_coeff", ["0.002", "0.001"]),
            ("reward.yaml", "turn_reward_clip", ["[-1.0, 1.9]", "[-1.0, 2.0]"]),
            ("user.yaml", "persona", ["terse", "neutral"]),
            ("env.yaml", "human_response_char_limit", ["500", "600"]),
        ]
        slot, key, values = self.rng.choice(options)
        now = re.search(rf"^{key}:\s*(.*)$", self.base[slot], re.MULTILINE)
        value = values[1] if now and now.group(1).strip() == values[0] else values[0]
        return self.area(slot, key, value, "valid", expect="accept")

    CLASSES = [
        "nan_scalar",
        "nan_list",
        "nan_per_gym",
        "nan_rule_value",
        "out_of_range_element",
        "unordered_clip",
        "bad_per_gym_key",
        "duplicate_across_files",
        "impossible_for_run",
        "deep_nesting",
        "recursive_alias",
        "billion_laughs",
        "huge_file",
        "symlink",
        "fifo",
        "directory",
        "non_utf8",
        "catastrophic_regex",
        "wrong_type",
        "schema_hostile",
        "syntax",
        "huge_integer",
        "yaml_tag",
        "valid",
    ]

    def batches(self, n_edits: int, per_batch: int = len(SLOTS)) -> Iterator[list[Edit]]:
        """Batches of edits, at most one per slot, covering every class in turn (round robin, then seeded)."""
        made, k = 0, 0
        while made < n_edits:
            batch: list[Edit] = []
            used: set[str] = set()
            tries = 0
            while len(batch) < per_batch and made + len(batch) < n_edits and tries < 200:
                tries += 1
                cls = (
                    self.CLASSES[k % len(self.CLASSES)] if k < 3 * len(self.CLASSES) else self.rng.choice(self.CLASSES)
                )
                edit = self.make(cls)
                if edit.via == "file" and edit.slot in used:
                    continue
                k += 1
                if edit.via == "file":
                    used.add(edit.slot)
                batch.append(edit)
            made += len(batch)
            yield batch


# ---------------------------------------------------------------------- applying and checking
def clear_slot(path: Path) -> None:
    """Remove whatever is at ``path`` (file, symlink, FIFO, folder)."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def apply_file_edit(knobs_dir: Path, edit: Edit) -> None:
    """Make a file edit in ``knobs_dir``: new bytes written in place (as an editor does, not atomically
    when the slot is a regular file), or a symlink, FIFO or folder put where the file was."""
    path = knobs_dir / edit.slot
    if edit.kind == "write":
        if path.is_symlink() or (path.exists() and not path.is_file()):
            clear_slot(path)
        with open(path, "wb") as f:  # never blocks: the slot is a regular file or absent here
            f.write(edit.content)
        return
    clear_slot(path)
    if edit.kind == "symlink":
        os.symlink(edit.link_to, path)
    elif edit.kind == "fifo":
        os.mkfifo(path)
    elif edit.kind == "dir":
        path.mkdir()
        (path / "inner.yaml").write_text("lr: 1.0\n")


def restore_slots(knobs_dir: Path, base: dict[str, str]) -> None:
    for slot, text in base.items():
        path = knobs_dir / slot
        if path.is_symlink() or not path.is_file() or path.read_text(errors="replace") != text:
            clear_slot(path)
            path.write_text(text)


def invalid_in_force(reference: KnobStore, doc: dict[str, Any], llm_user: bool = False) -> list[str]:
    """What is wrong with a store's in-force document (``in_force_document()`` or a run's
    ``knobs_in_force.json``), checked against ``reference`` (a store of the packaged defaults): every
    value valid under its schema, finite, usable by a run with(out) an LLM user; every rule file valid,
    reward rule names unique across files."""
    bad = []
    facts = {"llm_user": llm_user}
    for area, values in doc["values"].items():
        for name, value in values.items():
            spec = reference.schemas[area].knobs.get(name)
            if spec is None:
                bad.append(f"{area}.{name}: not a knob")
                continue
            ref = validate_value(spec, value) or run_refusal(spec, value, facts)
            if ref:
                bad.append(f"{area}.{name} = {value!r}: {ref.message}")
    for kind, files in doc["rules"].items():
        reference.rules[kind] = {}
        for key in sorted(files):
            err = reference.rule_file_problem(kind, key, files[key])
            if err:
                bad.append(f"rules/{kind}/{key}: {err[0]}")
            reference.rules[kind][key] = files[key]
    return bad


def read_base(knobs_dir: Path) -> dict[str, str]:
    return {slot: (knobs_dir / slot).read_text() for slot in SLOTS}


def plain_text(value: Any) -> str:
    return yamlio.dump(yamlio.to_rt(value))
