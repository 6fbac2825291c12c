"""The fixed evaluation protocol: its frozen files, its hash, its checks, and its scoring (no model needed)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from eval_runs import EVAL, copy_knobs, protocol_doc
from typer.testing import CliRunner

from harness.agents.scripted import run_episode
from harness.cli.main import app
from harness.envs.registry import make
from harness.eval.protocol import ProtocolError, load_protocol
from harness.eval.runner import pass_hat_k
from harness.eval.scoring import answer_pass_rate, score_records
from harness.ppo.config import load_preset

runner = CliRunner()


def describe(*args: str, env: dict | None = None) -> dict:
    res = runner.invoke(app, ["eval", "--describe", "--json", *args], env=env)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def write(path: Path, doc: dict) -> Path:
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


# ------------------------------------------------------------------------------ the shipped protocol
def test_default_protocol_is_frozen_inside_eval_and_holds_out_a_gym():
    p = load_protocol()
    assert p.path == (EVAL / "protocol.yaml").resolve() and len(p.hash) == 64
    refs = [Path(v) for v in yaml.safe_load((EVAL / "protocol.yaml").read_text())["rules"]["users"].values()]
    assert all(not r.is_absolute() and (EVAL / r).is_file() for r in refs)
    # every referenced file is a copy inside eval/, none is read from knobs/
    doc = yaml.safe_load((EVAL / "protocol.yaml").read_text())
    for ref in [*doc["knob_schemas"].values(), *doc["rules"]["users"].values(), *doc["rules"]["rewards"].values()]:
        assert (EVAL / ref).resolve().is_relative_to(EVAL.resolve()), ref
    held = [g.name for g in p.gyms if g.held_out]
    assert held == ["telepathy"]
    for preset in ("tiny", "cpu-small", "cpu-gemma"):
        assert not set(held) & set(load_preset(preset)["gyms"]), preset
    assert "colbench" in p.gym_names and p.split == "eval"
    # symbolic user only, a value for every knob the frozen schemas define
    assert p.knobs.get("user", "user_strategy_mix", "travel") == 1.0
    for area in ("env", "user", "reward"):
        props = json.loads((EVAL / "schema" / f"{area}.schema.json").read_text())["properties"]
        assert set(p.knobs.values[area]) == set(props)


def test_cpu_protocol_shares_the_frozen_files_and_is_a_different_protocol():
    full, cpu = load_protocol(), load_protocol(EVAL / "protocol-cpu.yaml")
    assert cpu.file_digests == full.file_digests and cpu.gym_names == full.gym_names
    assert cpu.name != full.name and cpu.hash != full.hash
    assert sum(g.tasks for g in cpu.gyms) < sum(g.tasks for g in full.gyms)
    assert cpu.max_new_tokens_per_turn < full.max_new_tokens_per_turn
    assert {k: v for k, v in cpu.knobs.values["user"].items()} == dict(full.knobs.values["user"])


def test_frozen_rule_files_compile_for_their_gyms():
    p = load_protocol()
    for gym in p.gym_names:
        env = make(gym, knobs=p.knobs, split="eval")
        env.reset(seed=1, options={"task_index": 0, "split": "eval"})
        assert env.arm == "symbolic" and env.task.split == "eval"


# ------------------------------------------------------------------------------ the hash
def test_protocol_hash_is_unchanged_by_knob_edits(tmp_path):
    kdir = copy_knobs(tmp_path / "knobs")
    before = describe("--knobs-dir", str(kdir))["protocol_hash"]
    # a training knob write through the validating store, a hand edit, a rule edit, garbage
    res = runner.invoke(app, ["knobs", "set", "env.max_steps", "17", "--reason", "test", "--knobs-dir", str(kdir)])
    assert res.exit_code == 0, res.output
    assert yaml.safe_load((kdir / "env.yaml").read_text())["max_steps"]["default"] == 17
    (kdir / "user.yaml").write_text(
        (kdir / "user.yaml").read_text().replace("facts_per_reply: 1", "facts_per_reply: 3")
    )
    (kdir / "rules" / "users" / "travel.yaml").write_text("gym: travel\nintents: [broken")
    assert describe("--knobs-dir", str(kdir))["protocol_hash"] == before
    assert describe(env={"EAU_KNOBS_DIR": str(tmp_path / "missing")})["protocol_hash"] == before
    assert describe()["protocol_hash"] == before == load_protocol().hash


def test_hash_ignores_comments_layout_and_location_but_not_values(tmp_path):
    base = load_protocol().hash
    # the same protocol moved elsewhere with its files, comments dropped and keys reordered
    moved = tmp_path / "moved"
    shutil.copytree(EVAL, moved)
    doc = yaml.safe_load((moved / "protocol.yaml").read_text())
    write(moved / "protocol.yaml", dict(reversed(list(doc.items()))))
    (moved / "rules" / "users" / "travel.yaml").write_text(
        yaml.safe_dump(yaml.safe_load((EVAL / "rules" / "users" / "travel.yaml").read_text()))
    )
    assert load_protocol(moved / "protocol.yaml").hash == base
    # absolute references to the same files: same hash
    assert load_protocol(write(tmp_path / "abs.yaml", protocol_doc())).hash == base
    # any value, in the file or in a referenced file, is a different protocol
    changed = {
        "seed": protocol_doc(seed=1),
        "tasks": protocol_doc(gyms={**protocol_doc()["gyms"], "travel": {"tasks": 15}}),
        "temperature": protocol_doc(sampling={"temperature": 0.7, "top_p": 1.0}),
    }
    d = protocol_doc()
    d["knobs"]["env"]["max_steps"] = {"default": 17, "colbench": 10}
    changed["max_steps"] = d
    hashes = {k: load_protocol(write(tmp_path / f"{k}.yaml", v)).hash for k, v in changed.items()}
    assert base not in hashes.values() and len(set(hashes.values())) == len(hashes)
    rules = yaml.safe_load((moved / "rules" / "rewards" / "default.yaml").read_text())
    rules["rules"][0]["value"] = float(rules["rules"][0]["value"]) + 0.01
    (moved / "rules" / "rewards" / "default.yaml").write_text(yaml.safe_dump(rules))
    assert load_protocol(moved / "protocol.yaml").hash != base


def test_loading_never_touches_the_knob_store(monkeypatch):
    from harness.knobs import snapshot, store

    def boom(*a, **k):
        raise AssertionError("the protocol read the training knobs")

    monkeypatch.setattr(snapshot.KnobSnapshot, "read_dir", classmethod(boom))
    monkeypatch.setattr(store.KnobStore, "__init__", boom)
    p = load_protocol()
    assert p.knobs.get("env", "max_steps", "colbench") == 10


# ------------------------------------------------------------------------------ bad protocols
def _bad(tmp_path, mutate) -> str:
    doc = protocol_doc()
    mutate(doc)
    path = write(tmp_path / "bad.yaml", doc)
    with pytest.raises(ProtocolError) as exc:
        load_protocol(path)
    msg = str(exc.value)
    assert str(path) in msg
    return msg


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda d: d.update(extra=1), "unknown key(s) extra"),
        (lambda d: d.pop("seed"), "missing key(s) seed"),
        (lambda d: d.update(trials=0), "field trials: = 0: must be an integer >= 1"),
        (lambda d: d.update(split="test"), "field split: = 'test': allowed: train, eval"),
        (lambda d: d.update(rendering="xml"), "allowed: tagged, tool_call, run"),
        (lambda d: d["gyms"].update(chess={"tasks": 1}), "field gyms.chess: unknown gym 'chess'"),
        (lambda d: d["gyms"]["travel"].update(tasks=0), "field gyms.travel.tasks: = 0"),
        (lambda d: d["gyms"]["travel"].update(data_file="x.jsonl"), "gym travel does not load task files"),
        (lambda d: d["knobs"]["user"].update(user_strategy_mix=0.5), "symbolic user only; it must be 1.0"),
        (lambda d: d["knobs"]["env"].pop("min_questions"), "missing value(s) for min_questions"),
        (lambda d: d["knobs"]["env"].update(max_step=3), "unknown knob(s) max_step"),
        (lambda d: d["knobs"]["env"].update(max_steps={"travel": 3}), "needs a 'default' entry"),
        (lambda d: d["knobs"]["env"].update(max_steps={"default": 3, "chess": 4}), "unknown gym(s) chess"),
        (lambda d: d["knobs"]["env"].update(max_steps={"default": 3, "travel": 0}), "knobs.env.max_steps.travel: = 0"),
        (lambda d: d["knobs"]["user"].update(reveal_kinds=["secrets"]), "knobs.user.reveal_kinds: = ['secrets']"),
        (lambda d: d["rules"]["users"].pop("telepathy"), "no user rule file for evaluated gym(s) telepathy"),
        (
            lambda d: d["rules"]["users"].update(travel="nowhere.yaml"),
            "field rules.users.travel: = 'nowhere.yaml': no such file",
        ),
    ],
)
def test_bad_protocols_name_the_field_and_what_is_allowed(tmp_path, mutate, expected):
    assert expected in _bad(tmp_path, mutate)


def test_a_broken_frozen_rule_file_fails_at_load(tmp_path):
    bad = tmp_path / "travel.yaml"
    rules = yaml.safe_load((EVAL / "rules" / "users" / "travel.yaml").read_text())
    rules["gym"] = "function"
    bad.write_text(yaml.safe_dump(rules))
    msg = _bad(tmp_path, lambda d: d["rules"]["users"].update(travel=str(bad)))
    assert "rules.users.travel" in msg and "serves gym 'travel'" in msg


def test_cli_reports_a_bad_protocol_with_exit_code_4(tmp_path):
    path = write(tmp_path / "p.yaml", protocol_doc(trials=-1))
    res = runner.invoke(app, ["eval", "--describe", "--protocol", str(path), "--json"])
    assert res.exit_code == 4
    out = json.loads(res.stdout)
    assert out["ok"] is False and "field trials" in out["error"]


# ------------------------------------------------------------------------------ scoring
def test_pass_hat_k_estimator():
    assert pass_hat_k(3, 3, 3) == 1.0 and pass_hat_k(0, 4, 1) == 0.0
    assert pass_hat_k(2, 4, 1) == 0.5
    assert pass_hat_k(2, 4, 2) == pytest.approx(1 / 6)  # C(2,2)/C(4,2)
    with pytest.raises(ValueError):
        pass_hat_k(1, 2, 3)


def _colbench_records(p, answers):
    """Real colbench episodes on the protocol's knobs: each answer is 'ref', 'wrong' or None (no answer)."""
    out = []
    for i, kind in enumerate(answers):
        env = make("colbench", knobs=p.knobs, split="eval")

        def act(e, kind=kind):
            if kind is None or e.state.turn == 0:
                return "ASK: What should the function return?"
            ref = e.task.data["reference"]
            if kind == "wrong":
                return f"ANSWER: def {e.task.data['function']}(*args, **kwargs):\n    return None"
            return "ANSWER:\n```python\n" + ref + "```"

        rec = run_episode(env, act, seed=i, options={"task_index": i // 2, "split": "eval"})
        rec["group"], rec["sample"] = f"colbench/eval/{i // 2}", i % 2
        out.append(rec)
    return out


def test_colbench_pass_and_success_and_pass_hat_k_from_real_episodes():
    p = load_protocol()
    recs = _colbench_records(p, ["ref", "ref", "ref", "wrong", None, "wrong"])
    rates = [answer_pass_rate(r) for r in recs]
    assert rates[:3] == [1.0, 1.0, 1.0] and rates[4] == 0.0 and 0.0 <= rates[3] < 1.0
    scores = score_records(recs, ["colbench"], trials=2)
    cb = scores["gyms"]["colbench"]
    assert cb["tasks"] == 3 and cb["episodes"] == 6
    assert cb["pass"] == pytest.approx(np.mean(rates))
    assert cb["success"] == cb["success_rate"] == pytest.approx(3 / 6)
    # task 0: 2/2 successes, task 1: 1/2, task 2: 0/2
    assert cb["pass_hat_k"]["1"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert cb["pass_hat_k"]["2"] == pytest.approx((1 + 0 + 0) / 3)
    assert scores["overall"]["all"]["success_rate"] == cb["success_rate"]


def test_non_code_gyms_have_no_pass_and_held_out_means_are_split():
    p = load_protocol()
    recs = []
    for gym in ("intention", "telepathy"):
        for i in range(2):
            env = make(gym, knobs=p.knobs, split="eval")
            rec = run_episode(env, "oracle" if i == 0 else "random", seed=i, options={"task_index": i, "split": "eval"})
            rec["group"], rec["sample"] = f"{gym}/eval/{i}", 0
            recs.append(rec)
    scores = score_records(recs, ["intention", "telepathy"], trials=1, held_out=["telepathy"])
    assert "pass" not in scores["gyms"]["intention"] and "pass_hat_k" not in scores["gyms"]["intention"]
    assert scores["gyms"]["intention"]["success_rate"] == 0.5  # the oracle succeeds, the random agent does not
    o = scores["overall"]
    assert o["held_out"]["gyms"] == ["telepathy"] and o["in_distribution"]["gyms"] == ["intention"]
    assert o["held_out"]["reward_mean"] == pytest.approx(scores["gyms"]["telepathy"]["reward_mean"])


def test_usergym_protocol_scores_persuade_on_userrls_test_file():
    """eau-eval-usergym-v1: its own frozen files under eval/usergym/, the method's held-out gyms, and
    persuade on all 42 tasks of UserRL's test file (task_split userrl), which the oracle solves."""
    from harness.agents.scripted import run_episode
    from harness.envs.persuade.data import load_rows

    path = EVAL / "protocol-usergym.yaml"
    p = load_protocol(path)
    assert p.name == "eau-eval-usergym-v1" and p.hash != load_protocol().hash
    doc = yaml.safe_load(path.read_text())
    for ref in [*doc["knob_schemas"].values(), *doc["rules"]["users"].values(), *doc["rules"]["rewards"].values()]:
        assert (EVAL / ref).resolve().is_relative_to((EVAL / "usergym").resolve()), ref
    assert sorted(g.name for g in p.gyms if g.held_out) == ["intention", "telepathy"]
    for area in ("env", "user", "reward"):
        props = json.loads((EVAL / "usergym" / "schema" / f"{area}.schema.json").read_text())["properties"]
        assert set(p.knobs.values[area]) == set(props)
    assert p.knobs.get("env", "task_split", "persuade") == "userrl"
    tasks = next(g.tasks for g in p.gyms if g.name == "persuade")
    env = make("persuade", knobs=p.knobs, split="eval")
    recs = [run_episode(env, "oracle", 0, options={"task_index": i, "split": "eval"}) for i in range(tasks)]
    assert {r["task"]["task_id"] for r in recs} == {f"persuade-userrl-{row.id}" for row in load_rows("test")}
    assert sum(r["success"] for r in recs) >= 0.9 * tasks
