"""Does co-evolution pay? The same tiny-preset training, per scenario and seed, in three arms.

Arms (each a real ``eau train --preset tiny-warm`` run from the learning benchmark's warm start, a
fixed budget of PPO steps, then ``eau eval`` of its last checkpoint on the fixed protocol
``eval/protocol-intention-cpu.yaml``, 64 held-out intention tasks):

* ``fixed``: no meta-agent.
* ``autopilot``: ``eau autopilot`` beside the run, ticking at its own interval (every 5 steps) with
  the packaged intervention table.
* ``hparams``: the same autopilot with the table restricted to agent knobs (``agent.*``): the method's
  "generic meta-agent" ablation, which can touch neither the user, the environment nor the reward.

The ``code_defect`` scenario has two more: ``agent``, a scripted agent that follows the skill's
plug-in protocol (diagnose, list plug-ins, write a repaired version of the one in force, ``eau knobs
plugin check``, ``eau knobs plugin set --author agent``) in the live run; and ``restart``, a new run
from the warm start with that repair in place from its first step, given the steps the ``agent``
arm had left after its repair took effect (the cost of stopping and restarting instead).

Scenarios: ``healthy`` plus faults planted only through the run's private knobs folder (knob files,
rule files, a plug-in), never through the harness's code:

* ``user_leak``: the intention user's rule file answers every question with the next hidden details,
  whatever was asked, three per reply (``disclosure: next`` in the catch-all intent, with
  ``user.facts_per_reply`` 3: the method's 1 -> 3 change).
* ``reward_farm``: a rule file paying 0.6 for every question, a behaviour success does not need.
* ``turn_deadlock``: three turns with two questions required before an answer (``env.max_steps`` 3,
  ``env.min_questions`` 2): most tasks cannot be finished.
* ``threshold``: ``env.success_threshold`` 1.0: every detail must be covered, which the warm-start
  policy never does, so an answer never earns its success bonus.
* ``code_defect``: two questions required before an answer (``env.min_questions`` 2) and a plug-in in
  force for ``base.counts_as_question`` that counts nothing (it strips the question mark it then
  looks for): every answer is refused, the method's question-counter deadlock. Lowering
  ``min_questions`` to 1 does not help; only repairing the counter does.

(A silently failing tool is not among them: intention has no tool, and travel, the gym with a search
tool, is beyond the tiny policy at this budget; tests/test_planted_faults_training.py measured a
healthy travel run that solved nothing.)

    python benchmarks/bench_coevolution.py --seeds 0 1 2 --steps 40 [--init runs/sft-tiny] \
        [--scenarios ...] [--arms ...] [--work DIR]
    python benchmarks/bench_coevolution.py --report DIR      # the document of a --work folder

Prints one JSON document (per run: held-out success, the meta-agent's ticks, interventions and
verdicts, the step of its first intervention; per scenario and arm: mean and per-seed success) and,
on stderr, the markdown table recorded in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from _common import REPO, eau_cmd, emit, machine, stderr_log, temp_root

from harness.knobs.folder import defaults_dir
from harness.ppo.config import load_preset

PROTOCOL = REPO / "eval" / "protocol-intention-cpu.yaml"
ARMS = ("fixed", "autopilot", "hparams")
CODE_ARMS = ("agent", "restart")
# The learning benchmark's warm start (BENCHMARKS.md, PPO learning): the public planner's student,
# which asks well-formed questions but stops at random (held-out success ~0.2)
SFT = ["--preset", "tiny", "--set", "demonstrator=public", "--set", "give_up=0.3"]
SFT += ["--set", "episodes=1024", "--set", "epochs=14"]
# tiny-warm's own agent/env values (harness/ppo/presets/tiny-warm.yaml) are written into each private
# knobs folder instead of lent at start, so that a planted value is what the run starts from (a
# preset's values would overwrite it)
PRESET = load_preset("tiny-warm")
BASE_AGENT = dict(PRESET["agent_knobs"])
BASE_ENV = {k: ({"default": v} if k == "max_steps" else v) for k, v in PRESET["env_knobs"].items()}
TRAIN = ["train", "--preset", "tiny-warm", "--no-progress", "--set", "agent_knobs={}", "--set", "env_knobs={}"]

DEFECT_PLUGIN = '''"""Count an ask as a question only when it ends with a question mark (planted defect: it tests the
text after stripping the punctuation, so nothing ever counts)."""


def counts_as_question(question, gym):
    return question.strip().rstrip("?!.").endswith("?")


OVERRIDES = {"base.counts_as_question": counts_as_question}
'''
REPAIRED_PLUGIN = '''"""Count every non-empty ask as a question (repairs the counter, which counted nothing)."""


def counts_as_question(question, gym):
    return bool(question.strip())


OVERRIDES = {"base.counts_as_question": counts_as_question}
'''
POINT = "base.counts_as_question"


def leaky_user_rules() -> dict[str, Any]:
    """The packaged intention rules with the catch-all question intent disclosing the next hidden
    details whatever was asked."""
    doc = yaml.safe_load((defaults_dir() / "rules" / "users" / "intention.yaml").read_text())
    for intent in doc["intents"]:
        if intent["name"] == "question":
            intent["disclosure"] = "next"
            intent["description"] = "planted: every question gets the next hidden details"
    return doc


SCENARIOS: dict[str, dict[str, Any]] = {
    "healthy": {},
    "user_leak": {"user_rules": {"intention": leaky_user_rules}, "user": {"facts_per_reply": 3}},
    "reward_farm": {
        "reward_rules": {
            "farm": lambda: {
                "description": "planted: pays for every question",
                "rules": [{"name": "ask_bonus", "predicate": "question_asked", "value": 0.6}],
            }
        }
    },
    "turn_deadlock": {"env": {"max_steps": {"default": 3}, "min_questions": 2}},
    "threshold": {"env": {"success_threshold": 1.0}},
    "code_defect": {"env": {"min_questions": 2}, "plugins": {"question_counter": DEFECT_PLUGIN}},
}


# ------------------------------------------------------------------------------------------ set-up
def _update_yaml(path: Path, values: dict[str, Any]) -> None:
    doc = yaml.safe_load(path.read_text()) or {}
    doc.update(values)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def knobs_folder(dst: Path, scenario: str, repaired: bool = False) -> Path:
    """The packaged knobs with the base values, then the scenario's plant (``repaired``: the code
    defect's plug-in already repaired, for the restart arm)."""
    plant = SCENARIOS[scenario]
    shutil.copytree(defaults_dir(), dst, ignore=shutil.ignore_patterns(".pending", ".history"))
    _update_yaml(dst / "agent.yaml", BASE_AGENT)
    _update_yaml(dst / "env.yaml", {**BASE_ENV, **plant.get("env", {})})
    if plant.get("user"):
        _update_yaml(dst / "user.yaml", plant["user"])
    for gym, make in plant.get("user_rules", {}).items():
        (dst / "rules" / "users" / f"{gym}.yaml").write_text(yaml.safe_dump(make(), sort_keys=False))
    for stem, make in plant.get("reward_rules", {}).items():
        (dst / "rules" / "rewards" / f"{stem}.yaml").write_text(yaml.safe_dump(make(), sort_keys=False))
    for name, code in plant.get("plugins", {}).items():
        (dst / "plugins").mkdir(exist_ok=True)
        (dst / "plugins" / f"{name}.py").write_text(REPAIRED_PLUGIN if repaired else code)
    return dst


def hparams_table(dst: Path) -> Path:
    """The packaged intervention table, agent-knob entries only."""
    from harness.supervise.interventions import TABLE_PATH

    doc = yaml.safe_load(TABLE_PATH.read_text())
    doc["interventions"] = [e for e in doc["interventions"] if str(e.get("knob", "")).startswith("agent.")]
    dst.write_text(yaml.safe_dump(doc, sort_keys=False))
    return dst


def env_for(knobs: Path, runs: Path, threads: int) -> dict[str, str]:
    return {
        **os.environ,
        "EAU_KNOBS_DIR": str(knobs),
        "EAU_RUNS_DIR": str(runs),
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
    }


def eau(args: list[str], env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(eau_cmd(*args), env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO)


def eau_json(args: list[str], env: dict[str, str], ok: tuple[int, ...] = (0,)) -> dict[str, Any]:
    proc = eau([*args, "--json"], env)
    if proc.returncode not in ok:
        raise RuntimeError(f"eau {' '.join(args)}: exit {proc.returncode}: {proc.stderr[-1500:]}")
    return json.loads(proc.stdout) if proc.stdout.strip() else {}


def warm_start(work: Path, init: Path | None) -> Path:
    if init is not None:
        if not (init / "policy.pt").is_file():
            raise SystemExit(f"--init {init}: no policy.pt in it")
        return init
    out = work / "sft"
    if (out / "policy.pt").is_file():
        return out
    knobs = knobs_folder(work / "knobs-sft", "healthy")
    t0 = time.perf_counter()
    proc = eau(["sft", *SFT, "--out", str(out), "--json"], env_for(knobs, work / "runs", os.cpu_count() or 1), 3600)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    stderr_log(f"warm start in {time.perf_counter() - t0:.0f}s")
    return out


# ------------------------------------------------------------------------------------------ one run
class Run:
    """One arm of one scenario and seed: the training process and its meta-agent, then the score."""

    def __init__(self, work: Path, scenario: str, arm: str, seed: int, steps: int, sft: Path, threads: int):
        self.scenario, self.arm, self.seed, self.steps = scenario, arm, seed, steps
        self.id = f"{scenario}-{arm}-s{seed}"
        self.root = work / self.id
        self.runs = work / "runs"
        self.sft, self.threads = sft, threads
        self.result: dict[str, Any] = {"scenario": scenario, "arm": arm, "seed": seed, "run": self.id}

    def start(self, steps: int | None = None, repaired: bool = False) -> None:
        for old in (self.root, self.runs / self.id):  # a re-run of the same work folder starts clean
            if old.exists():
                shutil.rmtree(old)
        self.root.mkdir(parents=True)
        self.knobs = knobs_folder(self.root / "knobs", self.scenario, repaired=repaired)
        self.env = env_for(self.knobs, self.runs, self.threads)
        steps = steps or self.steps
        self.result["steps_budget"] = steps
        args = [*TRAIN, "--steps", str(steps), "--run-id", self.id, "--set", f"init_checkpoint={self.sft}"]
        args += ["--set", f"seed={self.seed}", "--set", f"torch_threads={self.threads}"]
        args += ["--set", f"checkpoint_every={steps}", "--set", "keep_checkpoints=1"]
        self.t0 = time.perf_counter()
        self.log = open(self.root / "train.err", "w")
        self.proc = subprocess.Popen(eau_cmd(*args), env=self.env, stdout=subprocess.DEVNULL, stderr=self.log, cwd=REPO)
        self.meta: subprocess.Popen | None = None
        if self.arm in ("autopilot", "hparams"):
            ap = ["autopilot", "--run", self.id, "--json", "--cwd", str(self.root), "--wait", "600"]
            ap += ["--pool-dir", str(self.root / "pool")]
            if self.arm == "hparams":
                ap += ["--table", str(hparams_table(self.root / "table-hparams.yaml"))]
            self.meta_out = open(self.root / "meta.json", "w")
            self.meta = subprocess.Popen(
                eau_cmd(*ap),
                env={**self.env, "OMP_NUM_THREADS": "1"},
                stdout=self.meta_out,
                stderr=open(self.root / "meta.err", "w"),
                cwd=REPO,
            )
        self.agent_state: dict[str, Any] = {"next_look": 5, "repaired": None, "looks": []}

    def poll(self) -> bool:
        """True while the training process runs; the scripted agent takes its turns here."""
        if self.arm == "agent" and self.proc.poll() is None:
            try:
                self._agent_turn()
            except (RuntimeError, ValueError, KeyError, StopIteration, subprocess.TimeoutExpired) as exc:
                # a failed command is the agent's turn failing, recorded; the run goes on
                self.agent_state["looks"].append({"step": self._completed(), "error": str(exc)[-500:]})
        return self.proc.poll() is None

    # ------------------------------------------------------------------ the scripted skill agent
    def _completed(self) -> int:
        path = self.runs / self.id / "metrics.jsonl"
        return sum(1 for _ in path.open()) if path.exists() else 0

    def _agent_turn(self) -> None:
        st = self.agent_state
        done = self._completed()
        if st["repaired"] is not None or done < st["next_look"]:
            return
        st["next_look"] = done + 5
        look: dict[str, Any] = {"step": done}
        st["looks"].append(look)
        diag = eau_json(["diagnose", "--run", self.id, "--window", "5"], self.env)
        look["flagged"] = diag.get("flagged", [])
        if "deadlock" not in look["flagged"]:
            return  # the skill: nothing flagged that points at the logic, change nothing
        dead = next(f for f in diag["findings"] if f["name"] == "deadlock")
        look["evidence"] = dead.get("summary")
        # the skill's decision tree: episodes that asked enough but never answered -> counter defect.
        # Its plug-in protocol, step 1: is a plug-in already in force for that point?
        plugs = eau_json(["knobs", "plugin", "list", "--run", self.id], self.env)
        holder = next(
            (name for name, p in (plugs.get("in_force") or {}).items() if POINT in (p.get("points") or [])),
            None,
        )
        look["plugin_in_force"] = holder
        if holder is None:
            return
        draft = self.knobs / "plugins" / "drafts" / f"{holder}.py"
        draft.parent.mkdir(parents=True, exist_ok=True)
        draft.write_text(REPAIRED_PLUGIN)
        check = eau(["knobs", "plugin", "check", holder, str(draft), "--run", self.id, "--json"], self.env)
        look["check_rc"] = check.returncode
        if check.returncode != 0:
            return
        reason = (
            "deadlock: asks are never counted, so every answer is refused; the counter strips the '?' it "
            "looks for. Predict deadlock_rate down by 0.3+ within 2 steps"
        )
        set_ = eau_json(
            ["knobs", "plugin", "set", holder, str(draft), "--author", "agent", "--reason", reason]
            + ["--run", self.id],
            self.env,
        )
        st["repaired"] = {"written_at_step": done, "event": (set_.get("event") or {}).get("id")}

    # ------------------------------------------------------------------ after training
    def finish(self) -> None:
        rc = self.proc.wait()
        self.log.close()
        self.result["train_s"] = round(time.perf_counter() - self.t0, 1)
        self.result["train_rc"] = rc
        if self.meta is not None:
            try:
                self.meta.wait(timeout=300)
            except subprocess.TimeoutExpired:
                self.meta.send_signal(signal.SIGTERM)
                self.meta.wait(timeout=60)
            self.meta_out.close()
        self.result.update(run_record(self.runs / self.id, self.arm))
        if self.arm == "agent":
            self.result["meta"]["looks"] = self.agent_state["looks"]
            self.result["meta"]["repaired"] = self.agent_state["repaired"]
        if rc != 0:
            self.result["error"] = (self.root / "train.err").read_text()[-1500:]
        else:
            self.result["held_out"] = score(self.id, self.runs, self.root / "eval", self.threads)
        with open(self.root.parent / "results.jsonl", "a") as f:  # kept as it goes: a cut-short run still reports
            f.write(json.dumps(self.result, default=str) + "\n")


TICK_FIELDS = ("tick", "step", "action", "flagged", "detector", "knob", "old", "new", "verdict", "measured")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a JSON-lines file; none when a run was cut short before writing it."""
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def run_record(run_dir: Path, arm: str) -> dict[str, Any]:
    """What a finished run shows: steps, training success at the end, and the meta-agent's turns
    (diagnoses, interventions with their step and verdict)."""
    metrics, events = read_jsonl(run_dir / "metrics.jsonl"), read_jsonl(run_dir / "knob_events.jsonl")
    agent_events = [
        {
            "knob": e.get("knob"),
            "gym": e.get("gym"),
            "status": e.get("status"),
            "step_effective": e.get("step_effective"),
            "reason": (e.get("reason") or "")[:160],
            "new": e.get("new") if not isinstance(e.get("new"), (dict, list)) else "(file)",
        }
        for e in events
        if e.get("author") == "agent"
    ]
    applied = [e for e in agent_events if isinstance(e["step_effective"], int) and e["status"] == "accepted"]
    meta: dict[str, Any] = {
        "events": agent_events,
        "first_effective_step": min((e["step_effective"] for e in applied), default=None),
    }
    log = run_dir / "meta" / "autopilot.jsonl"
    if log.exists():
        ticks = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
        meta["ticks"] = [
            {k: t.get(k) for k in TICK_FIELDS} | {"skipped": [s.get("why") for s in t.get("skipped") or []][:4]}
            for t in ticks
        ]
        meta["verdicts"] = [t.get("verdict") for t in ticks if t.get("verdict")]
    return {
        "steps_done": len(metrics),
        "train_success_last5": (
            round(statistics.mean(m["success_rate"] for m in metrics[-5:]), 3) if metrics else None
        ),
        "meta": meta,
    }


def rebuild(work: Path) -> tuple[list[dict[str, Any]], dict[int, float]]:
    """Results and warm-start scores from a work folder's runs and eval results (for a benchmark
    cut short before it printed its document)."""
    import re

    results, init = [], {}
    pat = re.compile(rf"^({'|'.join(SCENARIOS)})-({'|'.join((*ARMS, *CODE_ARMS))})-s(\d+)$")
    for run_dir in sorted((work / "runs").iterdir()):
        m = pat.match(run_dir.name)
        if not m or not (run_dir / "metrics.jsonl").exists():
            continue
        scen, arm, seed = m.group(1), m.group(2), int(m.group(3))
        scores = sorted((work / run_dir.name / "eval" / run_dir.name).glob("step_*[0-9].json"))
        rec = {"scenario": scen, "arm": arm, "seed": seed, "run": run_dir.name, **run_record(run_dir, arm)}
        if scores:
            doc = json.loads(scores[-1].read_text())
            rec["held_out"] = {"success_rate": doc["gyms"]["intention"]["success_rate"]}
        results.append(rec)
        for f in (work / run_dir.name / "eval-init").glob("*/*.json"):
            doc = json.loads(f.read_text())
            if doc.get("checkpoint") == "init":
                init[seed] = doc["gyms"]["intention"]["success_rate"]
    return results, init


def score(run_id: str, runs: Path, eval_dir: Path, threads: int, checkpoint: str | None = None) -> dict[str, Any]:
    """``eau eval`` of the run's last checkpoint (or ``checkpoint``) on the fixed protocol."""
    env = {**os.environ, "EAU_RUNS_DIR": str(runs), "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    args = ["eval", "--run", run_id, "--protocol", str(PROTOCOL), "--eval-dir", str(eval_dir), "--device", "cpu"]
    if checkpoint:
        args += ["--checkpoint", checkpoint]
    doc = eau_json(args, env)
    gym = doc["gyms"]["intention"]
    return {
        "success_rate": gym["success_rate"],
        "reward_mean": gym.get("reward_mean"),
        "protocol_hash": doc.get("protocol_hash"),
    }


def run_batch(runs: list[Run], parallel: int, poll_s: float = 3.0) -> None:
    """Run ``runs`` with at most ``parallel`` training processes at once."""
    queue, live = list(runs), []
    while queue or live:
        while queue and len(live) < parallel:
            r = queue.pop(0)
            stderr_log(f"start {r.id}")
            r.start(**getattr(r, "start_kwargs", {}))
            live.append(r)
        for r in list(live):
            if not r.poll():
                r.finish()
                live.remove(r)
                ho = (r.result.get("held_out") or {}).get("success_rate")
                stderr_log(f"done {r.id}: held-out {ho}, {r.result.get('steps_done')} steps in {r.result['train_s']}s")
        time.sleep(poll_s)


# ------------------------------------------------------------------------------------------ report
def summarise(results: list[dict[str, Any]], init: dict[int, float]) -> dict[str, Any]:
    table: dict[str, dict[str, Any]] = {}
    for r in results:
        s = (r.get("held_out") or {}).get("success_rate")
        cell = table.setdefault(r["scenario"], {}).setdefault(r["arm"], {"per_seed": {}})
        cell["per_seed"][r["seed"]] = s
    for arms in table.values():
        for cell in arms.values():
            vals = [v for v in cell["per_seed"].values() if v is not None]
            cell["mean"] = round(statistics.mean(vals), 3) if vals else None
    # the targets: the meta-agent's arm (the scripted plug-in agent for the code defect) against
    # fixed and against hyperparameters only, per seed and on the mean
    gaps: dict[str, dict[str, Any]] = {}
    for scen, arms in table.items():
        meta = "agent" if "agent" in arms else "autopilot"
        for other in ("fixed", "hparams"):
            if meta not in arms or other not in arms:
                continue
            a, b = arms[meta]["per_seed"], arms[other]["per_seed"]
            per = {k: round(a[k] - b[k], 3) for k in a if k in b and a[k] is not None and b[k] is not None}
            if per:
                gaps.setdefault(scen, {})[f"{meta}-{other}"] = {
                    "mean": round(statistics.mean(per.values()), 3),
                    "per_seed": per,
                }
    return {"init_held_out": init, "table": table, "gaps": gaps}


def markdown(summary: dict[str, Any]) -> str:
    arms = [*ARMS, *CODE_ARMS]
    lines = ["| scenario | " + " | ".join(arms) + " | meta-agent minus |", "|---|" + "---|" * (len(arms) + 1)]
    for scen, cells in summary["table"].items():
        row = []
        for a in arms:
            c = cells.get(a)
            if not c:
                row.append("")
                continue
            seeds = "/".join("-" if v is None else f"{v:.2f}" for _, v in sorted(c["per_seed"].items()))
            row.append(f"**{c['mean']:.3f}** ({seeds})" if c["mean"] is not None else seeds)
        gap = summary.get("gaps", {}).get(scen, {})
        row.append(
            "; ".join(
                f"{k} {g['mean']:+.3f} ({'/'.join(f'{v:+.2f}' for _, v in sorted(g['per_seed'].items()))})"
                for k, g in gap.items()
            )
        )
        lines.append(f"| {scen} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=40, help="PPO steps per run (the same for every arm)")
    ap.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=list(SCENARIOS))
    ap.add_argument("--arms", nargs="+", default=[*ARMS, *CODE_ARMS], choices=[*ARMS, *CODE_ARMS])
    ap.add_argument("--init", type=Path, default=None, help="warm start folder (policy.pt); default: made once")
    ap.add_argument("--work", type=Path, default=None, help="keep runs here (default: a temp folder)")
    ap.add_argument("--parallel", type=int, default=2, help="training runs at once (one torch thread each)")
    ap.add_argument(
        "--report", type=Path, default=None, help="print the document of an earlier --work folder; run nothing"
    )
    args = ap.parse_args()
    if args.report is not None:
        results, init = rebuild(args.report)
        summary = summarise(results, init)
        print(markdown(summary), file=sys.stderr)
        emit({"work": str(args.report), "summary": summary, "markdown": markdown(summary), "runs": results})
        return
    work = args.work or temp_root("eau-coevolution-")
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    sft = warm_start(work, args.init)
    threads = max(1, (os.cpu_count() or 1) // args.parallel)
    results: list[dict[str, Any]] = []
    init: dict[int, float] = {}
    for seed in args.seeds:
        batch = [
            Run(work, scen, arm, seed, args.steps, sft, threads)
            for scen in args.scenarios
            for arm in args.arms
            if arm in ARMS or (scen == "code_defect" and arm == "agent")
        ]
        run_batch(batch, args.parallel)
        results += [r.result for r in batch]
        if "code_defect" in args.scenarios and "restart" in args.arms:
            agent = next((r for r in batch if r.arm == "agent"), None)
            rep = (agent.result["meta"].get("repaired") if agent else None) or {}
            first = agent.result["meta"].get("first_effective_step") if agent else None
            if first is not None:
                restart = Run(work, "code_defect", "restart", seed, args.steps - first, sft, threads)
                restart.start_kwargs = {"repaired": True}
                run_batch([restart], 1)
                restart.result["restart_after_step"] = first
                results.append(restart.result)
            else:
                stderr_log(f"seed {seed}: the agent never repaired the plug-in ({rep}); no restart arm")
        first_run = next((r for r in batch if r.result.get("held_out")), None)
        if first_run is not None:
            init[seed] = score(first_run.id, first_run.runs, first_run.root / "eval-init", threads, "init")[
                "success_rate"
            ]
        stderr_log(f"seed {seed} done; warm start held-out {init.get(seed)}")
    summary = summarise(results, init)
    table = markdown(summary)
    print(table, file=sys.stderr)
    emit(
        {
            "command": " ".join(sys.argv),
            "machine": machine(),
            "steps": args.steps,
            "protocol": str(PROTOCOL.relative_to(REPO)),
            "wall_s": round(time.perf_counter() - t0, 1),
            "summary": summary,
            "markdown": table,
            "runs": results,
        }
    )


if __name__ == "__main__":
    main()
