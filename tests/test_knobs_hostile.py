"""Hostile knob and rule edits (issue 28): every value finite and well-formed, YAML read bounded,
only regular files read, user-rule patterns on a linear-time engine (RE2), every refusal naming file
and line.

The generated suite is ``benchmarks/bench_knob_hostile.py`` (1,000+ edits during live tiny runs);
here a seeded subset of ~110 edits runs against the store, and one short live run is slow-marked."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.io import yamlio
from harness.knobs.store import KnobError, KnobStore
from harness.stores import open_store
from harness.users.rules import RuleFileError, compile_pattern, load_user_rules_file, validate_rule_file

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import bench_knob_hostile  # noqa: E402  (benchmarks/ is put on sys.path just above)
from hostile_knobs import Generator  # noqa: E402


@pytest.fixture
def store(knobs_dir, tmp_path):
    s = open_store(knobs_dir, events_path=tmp_path / "events.jsonl", run_gyms=["intention", "travel"], debounce_s=0)
    s.run_facts = {"llm_user": False, "config": "runs/x/config.yaml"}
    return s


def poll_edit(store: KnobStore, path: Path, step: int = 1):
    store.mark_dirty(path, t=0)
    return store.poll(step, [])


def replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


# ---------------------------------------------------------------------- YAML reading bounds
def test_billion_laughs_recursive_alias_and_deep_nesting_refused_fast(tmp_path):
    laughs = "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
        f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]\n" for i in range(1, 9)
    )
    cases = {
        "alias": [laughs, "x: &a [1, *a]\n", "x: &m {k: *m}\n"],
        "depth": ["x: " + "[" * 600 + "]" * 600 + "\n", "x: " + "{a: " * 100 + "1" + "}" * 100 + "\n"],
    }
    for kind, texts in cases.items():
        for text in texts:
            path = tmp_path / "f.yaml"
            path.write_text(text)
            t0 = time.monotonic()
            with pytest.raises(yamlio.FileProblem) as exc:
                yamlio.read_yaml(path)
            assert time.monotonic() - t0 < 2.0
            assert exc.value.kind == kind and exc.value.line, (text[:40], exc.value)
    # aliases that expand to a modest size are fine (sharing is not an attack)
    ok = tmp_path / "ok.yaml"
    ok.write_text("base: &b [1, 2]\nx: *b\ny: *b\n")
    assert yamlio.load_plain(ok) == {"base": [1, 2], "x": [1, 2], "y": [1, 2]}


def test_only_regular_files_are_read(tmp_path):
    (tmp_path / "real.yaml").write_text("a: 1\n")
    os.symlink(tmp_path / "real.yaml", tmp_path / "link.yaml")
    os.mkfifo(tmp_path / "fifo.yaml")
    (tmp_path / "dir.yaml").mkdir()
    for name, what in (("link.yaml", "symbolic link"), ("fifo.yaml", "FIFO"), ("dir.yaml", "directory")):
        done = threading.Event()
        err: list[BaseException] = []

        def read(name=name, err=err, done=done):
            try:
                yamlio.read_capped(tmp_path / name)
            except yamlio.FileProblem as exc:
                err.append(exc)
            done.set()

        threading.Thread(target=read, daemon=True).start()
        assert done.wait(5), f"reading {name} hung"
        assert err and err[0].kind == "not a file" and what in err[0].message
    big = tmp_path / "big.yaml"
    big.write_text("a: 1\n" * 60_000)
    with pytest.raises(yamlio.FileProblem) as exc:
        yamlio.read_yaml(big)
    assert exc.value.kind == "size" and exc.value.line == 52429


# ---------------------------------------------------------------------- values
def test_nan_and_inf_refused_in_scalars_lists_cells_and_rule_values(store, knobs_dir):
    reward = knobs_dir / "reward.yaml"
    for bad in ("[-1.0, .nan]", "[.nan, 2.0]", "[-.inf, 2.0]"):
        replace(reward, "turn_reward_clip: [-1.0, 2.0]", f"turn_reward_clip: {bad}")
        res = poll_edit(store, reward)
        assert [e["rule"] for e in res.refused] == ["range"] and "not a finite number" in res.refused[0]["message"]
        assert res.refused[0]["line"] == 11 and res.refused[0]["file"].endswith("reward.yaml")
        replace(reward, f"turn_reward_clip: {bad}", "turn_reward_clip: [-1.0, 2.0]")
        poll_edit(store, reward)
    replace(reward, "  default: 1.0", "  default: 1.0\n  intention: .inf")
    assert poll_edit(store, reward).refused[0]["message"].startswith("reward.per_gym_scale[intention]: inf")
    res = store.set("reward.turn_reward_clip", [-1.0, float("nan")], author="agent", reason="test")
    clip_line = next(i for i, line in enumerate(reward.read_text().splitlines(), 1) if line.startswith("turn_reward"))
    assert not res.ok and res.event["line"] == clip_line == 12  # one line lower now: intention's line above it
    rules = knobs_dir / "rules" / "rewards" / "extra.yaml"
    rules.write_text("rules:\n  - name: extra\n    predicate: question_asked\n    value: .nan\n")
    res = poll_edit(store, rules)
    assert res.refused[0]["rule"] == "range" and res.refused[0]["line"] == 4
    assert store.get("reward.turn_reward_clip") == [-1.0, 2.0] and "extra" not in store.rules["rewards"]


def test_ranges_per_element_and_ordered_clip(store, knobs_dir):
    reward = knobs_dir / "reward.yaml"
    for bad, words in (
        ("[-5.0, 2.0]", "less than the minimum"),
        ("[2.0, -1.0]", "strictly increasing"),
        ("[0.5, 0.5]", "strictly increasing"),
    ):
        res = store.set(
            "reward.turn_reward_clip", yamlio.plain(yamlio.parse_text(Path("v"), bad)), author="human", reason="test"
        )
        assert not res.ok and words in res.event["message"], res.event
    replace(reward, "turn_reward_clip: [-1.0, 2.0]", "turn_reward_clip: [1.0, 0.0]")
    assert poll_edit(store, reward).refused[0]["line"] == 11
    assert store.get("reward.turn_reward_clip") == [-1.0, 2.0]


@pytest.mark.parametrize("key", ["5", "true", "null", "1.5", "[a, b]"])
def test_per_gym_key_that_is_not_a_gym_name_is_refused_not_a_crash(store, knobs_dir, key):
    env = knobs_dir / "env.yaml"
    entry = f"  ? {key}\n  : 12" if key.startswith("[") else f"  {key}: 12"
    replace(env, "  colbench: 10", "  colbench: 10\n" + entry)
    res = poll_edit(store, env)
    assert [e["rule"] for e in res.refused] in (["wrong gym"], ["syntax"], ["type"]) and res.refused[0]["line"]
    assert store.get("env.max_steps", "colbench") == 10


def test_reward_rule_name_duplicated_in_a_second_file_is_refused_at_the_gate(store, knobs_dir):
    second = knobs_dir / "rules" / "rewards" / "second.yaml"
    second.write_text(
        "rules:\n  - name: mine\n    predicate: question_asked\n    value: 0.1\n"
        "  - name: format_error\n    predicate: format_error\n    value: -0.2\n"
    )
    res = poll_edit(store, second)
    assert res.refused and "already defined in knobs/rules/rewards/default.yaml" in res.refused[0]["message"]
    assert res.refused[0]["line"] == 5 and "second" not in store.rules["rewards"]
    from harness.rewards import compile_rule_files

    compile_rule_files(store.snapshot().reward_rule_files())  # what a reset compiles still compiles
    second.write_text(second.read_text().replace("name: format_error", "name: second_format"))
    assert [e["knob"] for e in poll_edit(store, second, 2).applied] == ["rules.rewards.second"]
    # and a folder that starts with a clash is refused at load, naming the file and line
    with pytest.raises(KnobError) as exc:
        second.write_text(second.read_text().replace("name: second_format", "name: format_error"))
        open_store(knobs_dir, events_path=None)
    assert any(p["line"] == 5 and "second.yaml" in p["file"] for p in exc.value.problems)


def test_value_this_run_cannot_use_is_refused_at_write_time(store, knobs_dir):
    res = store.set("user.user_strategy_mix", 0.75, author="agent", reason="more LLM user")
    assert not res.ok and res.event["rule"] == "this run" and "no LLM user" in res.event["message"]
    replace(knobs_dir / "user.yaml", "user_strategy_mix: 1.0", "user_strategy_mix: {default: 1.0, intention: 0.8}")
    assert poll_edit(store, knobs_dir / "user.yaml").refused[0]["rule"] == "this run"
    store.run_facts = {"llm_user": True}
    assert store.set("user.user_strategy_mix", 0.75, author="agent", reason="an LLM user is configured").ok


# ---------------------------------------------------------------------- files that are not files
@pytest.mark.parametrize(
    "rel",
    [
        "agent.yaml",
        "rules/rewards/default.yaml",
        "rules/users/travel.yaml",
        "schema/env.schema.json",
        "schema/user_rules.schema.json",
    ],
)
@pytest.mark.parametrize("kind", ["symlink", "fifo", "dir"])
def test_symlink_fifo_or_folder_in_place_of_a_file_is_refused_and_logged(store, knobs_dir, rel, kind):
    path = knobs_dir / rel
    valid_copy = path.read_text()
    path.unlink()
    if kind == "symlink":
        os.symlink("/etc/passwd", path)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    out: dict = {}
    th = threading.Thread(target=lambda: out.setdefault("res", poll_edit(store, path)), daemon=True)
    th.start()
    th.join(10)
    assert "res" in out, "poll hung"
    refused = out["res"].refused
    assert len(refused) == 1 and refused[0]["rule"] == "not a file" and refused[0]["file"].endswith(rel)
    assert {"symlink": "symbolic link", "fifo": "FIFO", "dir": "directory"}[kind] in refused[0]["message"]
    assert store.get("agent.lr") == 1e-5 and "default" in store.rules["rewards"]
    if path.is_dir() and not path.is_symlink():
        path.rmdir()
    else:
        path.unlink()
    path.write_text(valid_copy)
    assert not poll_edit(store, path, 2).refused  # the file back: nothing refused


def test_schema_with_nan_is_refused_with_its_line(store, knobs_dir):
    schema = knobs_dir / "schema" / "reward.schema.json"
    text = schema.read_text()
    schema.write_text(text.replace('"maximum": 2.0', '"maximum": NaN', 1))
    res = poll_edit(store, schema)
    assert res.refused and "NaN is not a finite number" in res.refused[0]["message"] and res.refused[0]["line"]


# ---------------------------------------------------------------------- regexes
@pytest.mark.parametrize(
    "pattern",
    [r"show(?!\s+me)", r"(?=a)a", r"(?<=x)y", r"(?<!x)y", r"(\w+)\s+\1", r"(?>a+)b"],
)
def test_lookaround_and_backreferences_are_refused_at_the_gate_with_file_and_line(store, knobs_dir, pattern):
    travel = knobs_dir / "rules" / "users" / "travel.yaml"
    line = f"      - '{pattern}'"
    replace(travel, "    patterns:\n", f"    patterns:\n{line}\n")
    res = poll_edit(store, travel)
    assert res.refused and not res.applied
    ev = res.refused[0]
    assert ev["file"] == str(travel) and ev["line"] == travel.read_text().splitlines().index(line) + 1
    msg = ev["message"]
    assert "intents[0].patterns[0]" in msg and repr(pattern) in msg, msg
    assert "RE2" in msg and "no lookaround" in msg and "no backreferences" in msg, msg


def test_a_refused_unless_pattern_names_its_field_and_line(store, knobs_dir):
    function = knobs_dir / "rules" / "users" / "function.yaml"
    replace(function, "    unless:\n", "    unless:\n      - 'show(?=me)'\n")
    res = poll_edit(store, function)
    ev = res.refused[0]
    assert "intents[1].unless[0]" in ev["message"] and "no lookaround" in ev["message"]
    assert ev["line"] == function.read_text().splitlines().index("      - 'show(?=me)'") + 1


def test_catastrophic_backtracking_pattern_runs_in_linear_time(store, knobs_dir):
    """A pattern that backtracks exponentially elsewhere is valid RE2: accepted, and correct on a
    100,000-character question (RE2 has no backtracking to explode)."""
    travel = knobs_dir / "rules" / "users" / "travel.yaml"
    replace(travel, "    patterns:\n", "    patterns:\n      - '(a+)+$'\n")
    res = poll_edit(store, travel)
    assert not res.refused
    rules = load_user_rules_file(travel)
    first = rules.intents[0]
    assert first.matches("a" * 100_000)
    assert not first.patterns[0].search("a" * 100_000 + "!")  # the case that hangs a backtracking engine
    assert compile_pattern(r"(\w+\s?)+$").search("word " * 20_000 + "!") is None
    assert compile_pattern(r"(x+x+)+y").search("x" * 100_000) is None


def test_invalid_pattern_and_template_name_their_line(store, knobs_dir):
    travel = knobs_dir / "rules" / "users" / "travel.yaml"
    good = travel.read_text()

    def line_of(text: str) -> int:
        return travel.read_text().splitlines().index(text) + 1

    replace(travel, "    patterns:\n", "    patterns:\n      - '(unclosed'\n")
    res = poll_edit(store, travel)
    assert "not a valid regular expression" in res.refused[0]["message"]
    assert res.refused[0]["line"] == line_of("      - '(unclosed'")
    travel.write_text(good)
    replace(travel, "    replies:\n", "    replies:\n      - 'Hi {name}'\n")
    res = poll_edit(store, travel, 2)
    assert "unknown placeholder" in res.refused[0]["message"]
    assert res.refused[0]["line"] == line_of("      - 'Hi {name}'")
    with pytest.raises(RuleFileError) as exc:
        validate_rule_file({**yamlio.plain(yamlio.parse_text(travel, good)), "fallback_intent": "nosuch"}, gym="travel")
    assert exc.value.path == ("fallback_intent",)


# ---------------------------------------------------------------------- the CLI
def test_cli_set_nan_clip_is_refused_with_exit_3(knobs_dir):
    env = {**os.environ, "EAU_KNOBS_DIR": str(knobs_dir)}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli.main",
            "knobs",
            "set",
            "reward.turn_reward_clip",
            "[-1.0, .nan]",
            "--reason",
            "hostile",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 3, out.stderr
    assert "not a finite number" in out.stderr and "Traceback" not in out.stderr
    assert "[-1.0, 2.0]" in (knobs_dir / "reward.yaml").read_text()


# ---------------------------------------------------------------------- the generated subset
def test_generated_hostile_edits_against_the_store(tmp_path):
    figures = bench_knob_hostile.store_phase(tmp_path / "store", 110, seed=7)
    assert figures["edits"] == 110
    assert (figures["crashes"], figures["hangs"], figures["invalid_values_in_force"], figures["internal_errors"]) == (
        0,
        0,
        0,
        0,
    ), figures
    assert figures["refusals"] == figures["refusals_with_file_and_line"] + figures["refusals_of_non_files"], figures
    assert set(figures["by_class"]) == set(Generator.CLASSES)
    assert figures["unexpected"] == [], figures["unexpected"]


@pytest.mark.slow
def test_generated_hostile_edits_during_a_live_tiny_run(tmp_path):
    figures = bench_knob_hostile.live_phase(tmp_path / "live", 60, seed=3, steps=2000)
    assert figures["edits"] == 60 and figures["run_state"] == "interrupted", figures
    assert (figures["crashes"], figures["hangs"], figures["invalid_values_in_force"], figures["internal_errors"]) == (
        0,
        0,
        0,
        0,
    ), figures
    assert figures["refusals"] == figures["refusals_with_file_and_line"] + figures["refusals_of_non_files"]
    assert figures["log_refusals"] >= figures["refusals"] - sum(figures["cli_returncodes"].values())
