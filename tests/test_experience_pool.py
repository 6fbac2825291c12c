"""Experience pool: finding files, ids, validation, list filters, search ranking, retraction, INDEX.md,
concurrent writers, and ``eau finding`` through the real CLI (in-process runner; a subprocess for the
console script and ``--body -`` from stdin)."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli.main import app
from harness.experience.finding import Finding, FindingError, parse_steps, read_finding, slugify
from harness.experience.pool import ExperiencePool, filter_findings
from harness.experience.search import query_terms, rank, score, words

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()


def _eau(pool: Path, *args: str, input: str | None = None):
    return runner.invoke(app, [*args, "--pool-dir", str(pool)], input=input)


def _add(pool: Path, title: str, *extra: str) -> dict:
    res = _eau(pool, "finding", "add", "--title", title, "--change", "x -> y", "--json", *extra)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)["finding"]


def _finding(**kw) -> Finding:
    base = dict(id="F-0001", title="t", verdict="n/a", change="c")
    return Finding(**{**base, **kw})


# --------------------------------------------------------------------------- the finding file
def test_render_and_read_round_trip(tmp_path):
    f = _finding(
        title="Lowering max_steps hurt colbench",
        verdict="harmed",
        measured="success -0.25 (noise 0.05)",
        run="run-1",
        steps=[120, 180],
        knobs=["env.max_steps"],
        predicted="success -0.05",
        tags=["colbench", "difficulty"],
        events=["k-3fa2c91b0d"],
        created="2026-12-02T12:00:00Z",
        body="Evidence:\n\n- episode s000120-e003\n",
    )
    path = tmp_path / f.file_name()
    path.write_text(f.render(), encoding="utf-8")
    back = read_finding(path)
    assert path.name == "F-0001-lowering-max-steps-hurt-colbench.md"
    for field in (
        "id",
        "title",
        "verdict",
        "status",
        "run",
        "steps",
        "knobs",
        "change",
        "predicted",
        "measured",
        "tags",
        "events",
        "created",
    ):
        assert getattr(back, field) == getattr(f, field), field
    assert back.body == "Evidence:\n\n- episode s000120-e003"
    assert path.read_text().startswith("---\nid: F-0001\ntitle: Lowering max_steps hurt colbench\nstatus: active\n")


@pytest.mark.parametrize(
    "kw, needle",
    [
        (dict(verdict="better"), "verdict 'better' is not allowed; use one of improved, harmed, inconclusive, n/a"),
        (dict(status="closed"), "status 'closed' is not allowed; use one of active, retracted"),
        (dict(verdict="harmed"), "measured is required with verdict 'harmed'"),
        (dict(knobs=["max_steps"]), "knob 'max_steps' is not a knob name"),
        (dict(knobs=["envs.max_steps"]), "knob 'envs.max_steps' is not a knob name"),
        (dict(tags=["Deadlock"]), "tag 'Deadlock' is not allowed"),
        (dict(events=["3fa2"]), "event '3fa2' is not a knob event id"),
        (dict(title=""), "title is required"),
        (dict(title="x" * 121), "at most 120 characters"),
        (dict(change=" "), "change is required"),
        (dict(id="F-1"), "finding id 'F-1' is not valid"),
        (dict(status="retracted"), "a retracted finding needs retracted_reason"),
        (dict(run="my run"), "run 'my run' is not a run id"),
        (dict(author="bot"), "author 'bot' is not allowed"),
    ],
)
def test_validation_names_field_value_and_allowed(kw, needle):
    with pytest.raises(FindingError) as exc:
        _finding(**kw).validate("F.md")
    assert needle in str(exc.value)
    assert str(exc.value).startswith("F.md:")


def test_knob_names_accepted():
    _finding(
        knobs=[
            "env.max_steps",
            "user.reveal_kinds",
            "rules.users.colbench",
            "rules.rewards.default",
            "agent.lr",
            "reward.per_gym_scale",
        ]
    ).validate()


def test_parse_steps():
    assert parse_steps("120:180") == [120, 180]
    assert parse_steps("120-180") == [120, 180]
    assert parse_steps(" 7 ") == [7, 7]
    assert parse_steps([3, 4]) == [3, 4]
    for bad in ("180:120", "a:b", "1:2:3", -1, True, [1]):
        with pytest.raises(FindingError, match="steps"):
            parse_steps(bad)


def test_slugify():
    assert slugify("max_reveals ignores repeats!") == "max-reveals-ignores-repeats"
    assert slugify("!!!") == "finding"
    assert len(slugify("word " * 40)) <= 48


@pytest.mark.parametrize(
    "text, needle",
    [
        ("id: F-0001\n", "must start with a '---' line"),
        ("---\nid: F-0001\n", "never closed"),
        ("---\nid: [F-0001\n---\n", "not valid YAML"),
        ("---\n- a\n---\n", "must be a mapping"),
        ("---\nid: F-0001\ntitle: t\nverdict: n/a\nchange: c\nmood: happy\n---\n", "unknown field(s) ['mood']"),
        ("---\nid: F-0001\ntitle: t\nverdict: n/a\n---\n", "field 'change' is missing"),
        ("---\nid: F-0002\ntitle: t\nverdict: n/a\nchange: c\n---\n", "does not match the file name"),
    ],
)
def test_bad_files_name_file_and_problem(tmp_path, text, needle):
    path = tmp_path / "F-0001-x.md"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(FindingError) as exc:
        read_finding(path)
    assert needle in str(exc.value) and str(path) in str(exc.value)


def test_unquoted_timestamp_kept_as_text(tmp_path):
    path = tmp_path / "F-0001-x.md"
    path.write_text("---\nid: F-0001\ntitle: t\nverdict: n/a\nchange: c\ncreated: 2026-12-02T12:00:00Z\n---\n")
    assert read_finding(path).created == "2026-12-02T12:00:00Z"


# --------------------------------------------------------------------------- pool: ids, index, retraction
def test_ids_are_sequential_and_never_reused(tmp_path):
    pool = ExperiencePool(tmp_path / "pool")
    a = pool.add(_finding(title="first"))
    b = pool.add(_finding(title="second"))
    assert (a.id, b.id) == ("F-0001", "F-0002")
    pool.retract("F-0002", "wrong attribution")
    assert pool.add(_finding(title="third")).id == "F-0003"
    # an unreadable file still holds its id
    (pool.root / "F-0009-broken.md").write_text("no front matter")
    assert pool.next_id() == "F-0010"


def test_index_regenerated_on_every_change(tmp_path):
    pool = ExperiencePool(tmp_path / "pool")
    pool.add(_finding(title="Deadlocks from the counter", knobs=["env.min_questions"], tags=["deadlock"]))
    idx = pool.index_path.read_text()
    assert "## Active (1)" in idx
    assert (
        "| [F-0001](F-0001-deadlocks-from-the-counter.md) | n/a | Deadlocks from the counter | `env.min_questions` | deadlock |"
        in idx
    )
    pool.retract("F-0001", "inside the noise band")
    idx = pool.index_path.read_text()
    assert "## Active (0)" in idx and "## Retracted (1)" in idx
    assert (
        "| [F-0001](F-0001-deadlocks-from-the-counter.md) | Deadlocks from the counter | inside the noise band |" in idx
    )
    assert pool.index_is_current()
    # a hand edit that breaks a file shows up in the index after `index`, not silently dropped
    (pool.root / "F-0002-bad.md").write_text("---\nid: F-0002\ntitle: t\nverdict: maybe\nchange: c\n---\n")
    assert not pool.index_is_current()
    contents = pool.write_index()
    assert len(contents.problems) == 1
    idx = pool.index_path.read_text()
    assert "## Unreadable files (1)" in idx and "`F-0002-bad.md`" in idx and "verdict 'maybe' is not allowed" in idx
    assert str(tmp_path) not in idx  # no absolute paths in a committed file


def test_retract_twice_and_unknown(tmp_path):
    pool = ExperiencePool(tmp_path / "pool")
    pool.add(_finding())
    pool.retract("F-0001", "confounded by a second change")
    with pytest.raises(FindingError, match="already retracted"):
        pool.retract("F-0001", "again")
    with pytest.raises(KeyError, match="no finding F-0007"):
        pool.retract("F-0007", "x")
    with pytest.raises(FindingError, match="--reason is required"):
        pool.retract("F-0001", " ")
    f = read_finding(next(pool.root.glob("F-0001-*.md")))
    assert f.status == "retracted" and f.retracted_reason == "confounded by a second change" and f.retracted_time


def _add_many(root: str, worker: int, n: int) -> None:
    pool = ExperiencePool(root)
    for i in range(n):
        pool.add(_finding(title=f"worker {worker} finding {i}"))


def test_concurrent_writers_get_distinct_ids(tmp_path):
    root = tmp_path / "pool"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_add_many, args=(str(root), w, 5)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    contents = ExperiencePool(root).read()
    assert not contents.problems
    assert [f.id for f in contents.findings] == [f"F-{i:04d}" for i in range(1, 21)]
    assert "## Active (20)" in (root / "INDEX.md").read_text()
    assert not list(root.glob(".*.tmp"))


# --------------------------------------------------------------------------- filters and search
def _sample_findings() -> list[Finding]:
    return [
        _finding(
            id="F-0001",
            title="facts_per_reply 3 leaks references",
            knobs=["user.facts_per_reply"],
            tags=["leakage", "colbench"],
            verdict="harmed",
            measured="leak +0.3",
            run="r1",
        ),
        _finding(
            id="F-0002",
            title="entropy bonus raised entropy but not diversity",
            knobs=["agent.entropy_coeff"],
            tags=["entropy"],
            verdict="harmed",
            measured="entropy +50%",
            body="lag longer than the window",
        ),
        _finding(
            id="F-0003",
            title="reveal filter named the wrong kind",
            knobs=["user.reveal_kinds"],
            tags=["leakage"],
            body="the leak was of return facts, the filter removed shape; leak leak leak leak",
        ),
        _finding(
            id="F-0004", title="old leakage claim", tags=["leakage"], status="retracted", retracted_reason="noise"
        ),
    ]


def test_filters():
    fs = _sample_findings()
    ids = lambda sel: [f.id for f in sel]  # noqa: E731
    assert ids(filter_findings(fs)) == ["F-0001", "F-0002", "F-0003"]
    assert ids(filter_findings(fs, "retracted")) == ["F-0004"]
    assert ids(filter_findings(fs, None, tags=["leakage"])) == ["F-0001", "F-0003", "F-0004"]
    assert ids(filter_findings(fs, "active", tags=["leakage", "colbench"])) == ["F-0001"]
    assert ids(filter_findings(fs, knob="user.")) == ["F-0001", "F-0003"]
    assert ids(filter_findings(fs, knob="entropy_coeff")) == ["F-0002"]
    assert ids(filter_findings(fs, knob="agent.entropy_coeff")) == ["F-0002"]
    assert ids(filter_findings(fs, verdict="harmed", run="r1")) == ["F-0001"]


def test_words_and_terms():
    assert words("Lowering user.max_reveals") == [
        "lowering",
        "user.max_reveals",
        "user",
        "max_reveals",
        "max",
        "reveals",
    ]
    assert query_terms("the leak of a KL") == ["leak", "kl"]


def test_search_score_follows_the_documented_weights():
    f1, f2, f3, _ = _sample_findings()
    # "leak": title 'leaks' (prefix) +3, tag 'leakage' (prefix) +3, measured 'leak' +2, and the whole
    # query 'leak' occurs in the title +2 -> 10
    assert score(f1, "leak").score == 10
    # f3: tag +3, body 'leak' x5 capped at 3 -> +3; no title word starts with 'leak' -> 6
    assert score(f3, "leak").score == 6
    # "entropy": title +3, tag +3, knob part +3, measured +2 -> 11; "lag": body +1 -> 12
    assert score(f2, "entropy lag").score == 12
    # "wrong": title +3; "kind": title +3 and knob part 'kinds' of user.reveal_kinds +3; whole query in title +2
    assert score(f3, "wrong kind").score == 3 + 3 + 3 + 2
    assert score(f1, "kl").score == 0  # short terms match whole words only


def test_rank_orders_by_score_then_newer():
    fs = _sample_findings()[:3]
    hits = rank(fs, "leak")
    assert [h.finding.id for h in hits] == ["F-0001", "F-0003"]
    tie = [_finding(id="F-0005", title="deadlock"), _finding(id="F-0006", title="deadlock")]
    assert [h.finding.id for h in rank(tie, "deadlock")] == ["F-0006", "F-0005"]
    assert rank(fs, "leak", limit=1)[0].finding.id == "F-0001"


# --------------------------------------------------------------------------- the CLI
def test_cli_add_list_search_show_retract(tmp_path):
    pool = tmp_path / "pool"
    a = _add(
        pool,
        "facts_per_reply 3 leaks references",
        "--verdict",
        "harmed",
        "--measured",
        "leak +0.31",
        "--knob",
        "user.facts_per_reply",
        "--tag",
        "leakage,colbench",
        "--run",
        "run-7",
        "--steps",
        "120:160",
        "--event",
        "k-3fa2c91b0d",
        "--predicted",
        "success +0.05",
        "--body",
        "Evidence: s000121-e002",
    )
    assert a["id"] == "F-0001" and a["steps"] == [120, 160] and a["tags"] == ["leakage", "colbench"]
    _add(
        pool,
        "entropy bonus lagged past the window",
        "--verdict",
        "n/a",
        "--knob",
        "agent.entropy_coeff",
        "--tag",
        "entropy",
    )
    res = _eau(pool, "finding", "list", "--json")
    assert res.exit_code == 0
    doc = json.loads(res.stdout)
    assert [f["id"] for f in doc["findings"]] == ["F-0002", "F-0001"] and doc["total"] == 2
    res = _eau(pool, "finding", "list", "--tag", "leakage", "--knob", "user.facts_per_reply", "--json")
    assert [f["id"] for f in json.loads(res.stdout)["findings"]] == ["F-0001"]
    res = _eau(pool, "finding", "search", "leakage references", "--json")
    doc = json.loads(res.stdout)
    assert doc["terms"] == ["leakage", "references"] and doc["results"][0]["id"] == "F-0001"
    assert doc["results"][0]["matched"]["leakage"] == ["tag"]
    res = _eau(pool, "finding", "show", "F-0001")
    assert res.exit_code == 0 and "Evidence: s000121-e002" in res.stdout and "measured: leak +0.31" in res.stdout
    res = _eau(pool, "finding", "retract", "F-0001", "--reason", "inside the gap band", "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["finding"]["status"] == "retracted"
    res = _eau(pool, "finding", "list")
    assert "F-0001" not in res.stdout and "1 retracted not shown; --status all" in res.stdout
    res = _eau(pool, "finding", "list", "--status", "all")
    assert "F-0001" in res.stdout and "(RETRACTED)" in res.stdout
    res = _eau(pool, "finding", "index", "--check")
    assert res.exit_code == 0


@pytest.mark.parametrize(
    "args, code, needle",
    [
        (
            ["finding", "add", "--title", "t", "--change", "c", "--verdict", "better"],
            1,
            "verdict 'better' is not allowed",
        ),
        (["finding", "add", "--title", "t", "--change", "c", "--verdict", "improved"], 1, "measured is required"),
        (["finding", "add", "--title", "t", "--change", "c", "--verdict", "n/a", "--steps", "9:3"], 1, "--steps"),
        (["finding", "add", "--title", "t", "--change", "c", "--verdict", "n/a", "--knob", "lr"], 1, "knob 'lr'"),
        (["finding", "list", "--status", "open"], 2, "--status 'open' is not allowed"),
        (["finding", "list", "--verdict", "good"], 2, "--verdict 'good' is not allowed"),
        (["finding", "search", "a of"], 2, "no searchable words"),
        (["finding", "show", "F-0042"], 5, "no finding F-0042"),
        (["finding", "retract", "F-0042", "--reason", "x"], 5, "no finding F-0042"),
        (["finding", "show", "42"], 4, "finding id '42' is not valid"),
    ],
)
def test_cli_errors(tmp_path, args, code, needle):
    pool = tmp_path / "pool"
    _add(pool, "seed", "--verdict", "n/a")
    res = _eau(pool, *args)
    assert res.exit_code == code, res.output
    assert needle in res.stderr


def test_a_title_that_is_not_utf8_leaves_neither_file(tmp_path):
    """The issue's case through a real process: a byte 0xff in --title (Python keeps it as a lone
    surrogate). Exit 1 with a sentence naming the field; no finding file, no INDEX.md, no folder."""
    pool = tmp_path / "pool"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli.main",
            "finding",
            "add",
            b"--title",
            b"t \xff",
            "--change",
            "c",
            "--verdict",
            "n/a",
            "--pool-dir",
            str(pool),
        ],
        capture_output=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert b"title is not valid text" in proc.stderr and b"byte 0xff" in proc.stderr
    assert b"Traceback" not in proc.stderr and not pool.exists()


@pytest.mark.parametrize(
    "option", ["--title", "--change", "--measured", "--predicted", "--source", "--body", "--knob", "--tag", "--run"]
)
def test_any_field_that_is_not_text_leaves_the_pool_as_it_was(tmp_path, option):
    pool = tmp_path / "pool"
    _add(pool, "seed", "--verdict", "n/a")
    before = {p.name: p.read_bytes() for p in pool.iterdir()}
    args = {"--title": "t", "--change": "c", "--verdict": "n/a", option: "x\udcfe"}
    res = _eau(pool, "finding", "add", *[a for kv in args.items() for a in kv], "--json")
    assert res.exit_code == 1 and json.loads(res.stdout)["exit_code"] == 1, res.output
    assert option.lstrip("-") in res.stderr.replace("knobs", "knob").replace("tags", "tag")
    assert {p.name: p.read_bytes() for p in pool.iterdir()} == before


def test_a_write_that_fails_half_way_is_rolled_back(tmp_path):
    """INDEX.md that cannot be replaced (a folder there): add leaves no finding file, retract leaves
    the finding active, byte for byte; both exit 1 naming the file."""
    pool_dir = tmp_path / "pool"
    _add(pool_dir, "first", "--verdict", "n/a")
    (pool_dir / "INDEX.md").unlink()
    (pool_dir / "INDEX.md").mkdir()
    files = sorted(p.name for p in pool_dir.iterdir())
    res = _eau(pool_dir, "finding", "add", "--title", "second", "--change", "c", "--verdict", "n/a")
    assert res.exit_code == 1 and "INDEX.md" in res.stderr, res.output
    assert sorted(p.name for p in pool_dir.iterdir()) == files
    first = next(pool_dir.glob("F-0001-*.md"))
    text = first.read_bytes()
    res = _eau(pool_dir, "finding", "retract", "F-0001", "--reason", "wrong")
    assert res.exit_code == 1 and "INDEX.md" in res.stderr, res.output
    assert first.read_bytes() == text and read_finding(first).status == "active"
    (pool_dir / "INDEX.md").rmdir()
    pool = ExperiencePool(pool_dir)
    pool.write_index()
    added = pool.add(_finding(id="F-0000", title="second"))
    assert added.id == "F-0002" and pool.index_is_current()


def test_cli_missing_pool_is_not_found(tmp_path):
    res = _eau(tmp_path / "nowhere", "finding", "list", "--json")
    assert res.exit_code == 5
    assert json.loads(res.stdout)["ok"] is False and "no experience pool at" in res.stderr


def test_cli_list_skips_bad_file_with_warning(tmp_path):
    pool = tmp_path / "pool"
    _add(pool, "good one", "--verdict", "n/a")
    (pool / "F-0002-bad.md").write_text("not a finding")
    res = _eau(pool, "finding", "list", "--json")
    assert res.exit_code == 0
    doc = json.loads(res.stdout)
    assert [f["id"] for f in doc["findings"]] == ["F-0001"] and len(doc["problems"]) == 1
    assert "warning: skipped" in res.stderr and "F-0002-bad.md" in res.stderr
    assert _eau(pool, "finding", "index").exit_code == 4
    assert _eau(pool, "finding", "index", "--check").exit_code == 4


def test_console_script_with_env_pool_and_body_from_stdin(tmp_path):
    env = {**os.environ, "EAU_POOL_DIR": str(tmp_path / "pool")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli.main",
            "finding",
            "add",
            "--title",
            "from stdin",
            "--change",
            "c",
            "--verdict",
            "n/a",
            "--body",
            "-",
            "--json",
        ],
        input="line one\nline two\n",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    path = Path(json.loads(proc.stdout)["finding"]["path"])
    assert path.parent == tmp_path / "pool"
    assert read_finding(path).body == "line one\nline two"


def test_committed_pool_is_valid_and_indexed():
    pool = ExperiencePool(REPO / "experience_pool")
    contents = pool.read()
    assert not contents.problems
    assert pool.index_is_current(), "experience_pool/INDEX.md is stale; run `eau finding index`"
    for f in contents.findings:  # seeds from the paper say so
        if "paper" in f.tags:
            assert f.source.startswith("EAU paper") and f.run == "paper-colbench"
