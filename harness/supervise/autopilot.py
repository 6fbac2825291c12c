"""``eau autopilot``: the rule-based meta-agent, the baseline a coding agent has to beat.

Each turn (a *tick*) follows the skill's protocol with the same ``eau`` commands an agent runs
(:class:`~harness.supervise.cli_client.EauCLI`, one subprocess each):

1. ``eau status`` — the run's step, gyms, whether it is live.
2. A change of its own still pending? Find the event the run applied (``eau knobs history``),
   measure it after its lag (``eau effect --event ID``; its guard metrics too), revert it when harmed
   or inconclusive (``eau knobs revert``: an inconclusive tuning change is noise the next
   measurement does not need), and record a finding either way (``eau finding add``). On
   ``not_enough_data`` it waits for a later tick. One change at a time: nothing new meanwhile.
3. Otherwise, on a live run: ``eau diagnose``; flagged detectors are taken causes first
   (:data:`CAUSES_FIRST`); for the first with an entry in the intervention table
   (:mod:`harness.supervise.interventions`) that applies — its ``when`` evidence holds, the knob
   governs a gym of the run and is not at its limit, and no active finding says the same change
   harmed — it writes a candidate area file and runs ``eau gate`` on it, then applies the change
   with ``eau knobs set --author agent --reason "autopilot: <detector>: <prediction> (lag L, window
   W)"``. A rule-file entry (``restore_user_rules``, ``disable_dominant_rule``) gates the candidate
   rule file and writes it with ``eau knobs set-rules``; a ``repair`` entry is kept when its
   measurement is inconclusive (only harmed reverts it).

State lives in ``runs/<id>/meta/autopilot_state.json`` (the pending change, past interventions);
every tick is appended to ``runs/<id>/meta/autopilot.jsonl`` with the commands it ran; gate
candidates go to ``runs/<id>/meta/autopilot/candidate_NNN/``. With ``dry_run`` nothing is written
anywhere (candidates go to a temporary folder that is removed): the tick reports what it would do.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import yaml

from harness.experience.pool import atomic_write
from harness.io import jsonl, yamlio
from harness.knobs.folder import defaults_dir
from harness.runs import reader
from harness.runs.metrics import SPLIT_METRICS
from harness.supervise.cli_client import CommandFailed, EauCLI
from harness.supervise.interventions import Intervention, load_table, next_value, when_holds
from harness.supervise.runwatch import Schedule, ended_text, progress
from harness.supervise.session import now_iso

STATE_FILE = "autopilot_state.json"
LOG_FILE = "autopilot.jsonl"
CANDIDATES_DIR = "autopilot"
GATE_STEPS = 3  # recent steps the gate replays: a few batches, seconds of work
DIAGNOSE_WINDOW = 10  # as eau diagnose's default
# Metrics that metrics.jsonl splits per gym (gym/<g>/<m>); a per-gym change is judged on its gym.
PER_GYM_METRICS = frozenset(SPLIT_METRICS)
# Which flagged detector gets the turn: causes before the symptoms they produce, and the world the
# policy learns in (user, reward, environment) before the policy's own optimisation. A leaking user or
# a reward rule paid for something else changes what the policy learns, and the policy then deadlocks,
# stops asking or solves nothing (tests/test_planted_faults_training.py, COLLATERAL, measured those
# second flags on real runs); tuning the symptom's knob first wastes a measurement and can feed the
# cause (more turns for a policy farming a question bonus). A policy whose every episode fails also
# collapses onto one opening: sampling hotter does not give it turns it lacks (bench_coevolution,
# turn_deadlock seed 0: two temperature changes, both inconclusive, while max_steps 3 stayed).
# Detectors not listed keep eau diagnose's order after these.
CAUSES_FIRST = (
    "user_leakage",
    "user_unreliable",
    "reward_hacking",
    "silent_tool_failures",
    "deadlock",
    "unreachable_tasks",
    "question_rate_drop",
    "entropy_collapse",
    "template_collapse",
)
_CHANGE_RE = re.compile(r"(-?\d+(?:\.\d+)?(?:e-?\d+)?)\s*->\s*(-?\d+(?:\.\d+)?(?:e-?\d+)?)")


@dataclass
class AutopilotConfig:
    """Settings of ``eau autopilot`` (each is a CLI option).

    run: run id under ``runs_dir``.
    runs_dir / knobs_dir / pool_dir: folders given to every command (EAU_RUNS_DIR, EAU_KNOBS_DIR,
        EAU_POOL_DIR); knobs_dir None: the folder the run trains from; pool_dir None: not set (the
        commands use ``cwd/experience_pool``).
    cwd: folder the commands run in.
    table: intervention table file (None: the packaged one).
    window: steps ``eau diagnose`` looks at.
    thresholds: ``eau diagnose --threshold`` overrides (NAME.KEY=VALUE).
    lag / effect_window: override every entry's lag / window (None: the table's values).
    gate_steps: steps ``eau gate`` replays.
    max_interventions: stop making new changes after this many (0: no limit).
    dry_run: report what would be done; write nothing.
    """

    run: str
    runs_dir: Path
    knobs_dir: Path | None = None
    pool_dir: Path | None = None
    cwd: Path = field(default_factory=Path.cwd)
    table: Path | None = None
    window: int = DIAGNOSE_WINDOW
    thresholds: list[str] = field(default_factory=list)
    lag: int | None = None
    effect_window: int | None = None
    gate_steps: int = GATE_STEPS
    max_interventions: int = 0
    dry_run: bool = False

    def validate(self) -> None:
        if self.window < 1:
            raise ValueError(f"--window must be at least 1 step, got {self.window}")
        if self.lag is not None and self.lag < 0:
            raise ValueError(f"--lag must be >= 0, got {self.lag}")
        if self.effect_window is not None and self.effect_window < 2:
            raise ValueError(f"--effect-window must be at least 2 steps, got {self.effect_window}")
        if self.gate_steps < 0 or self.max_interventions < 0:
            raise ValueError("--gate-steps and --max-interventions must be >= 0")


def cli_value(v: Any) -> str:
    """A number as ``eau knobs set`` reads it (YAML): floats always with a dot, never exponent form."""
    if isinstance(v, bool) or not isinstance(v, float):
        return json.dumps(v)
    # positional with the shortest digits that round-trip: 1e-05 -> "0.00001" (PyYAML reads "1e-05" as text)
    return np.format_float_positional(v, unique=True, trim="0")


def change_direction(finding: dict[str, Any]) -> str | None:
    """raise | lower for a finding: its direction tag (the autopilot's), else its ``change`` text
    ("3 -> 5"); None when neither tells."""
    tags = set(finding.get("tags") or [])
    for d in ("raise", "lower"):
        if d in tags:
            return d
    m = _CHANGE_RE.search(str(finding.get("change") or ""))
    if m:
        a, b = float(m.group(1)), float(m.group(2))
        return "raise" if b > a else "lower" if b < a else None
    return None


class Autopilot:
    """The rule-based meta-agent of one run. :meth:`tick` does one turn and returns its record."""

    def __init__(self, cfg: AutopilotConfig, cli: EauCLI | None = None):
        cfg.validate()
        self.cfg = cfg
        self.table: list[Intervention] = load_table(cfg.table)
        self.run_dir = reader.find_run(Path(cfg.runs_dir), cfg.run)
        if self.run_dir is None or not (self.run_dir / "status.json").exists():
            raise FileNotFoundError(f"no run {cfg.run!r} in {cfg.runs_dir}")
        st = reader.status(self.run_dir) or {}
        kdir = cfg.knobs_dir or (Path(st["knobs_dir"]) if st.get("knobs_dir") else None)
        env = {"EAU_RUNS_DIR": str(Path(cfg.runs_dir).resolve())}
        if kdir is not None:
            env["EAU_KNOBS_DIR"] = str(Path(kdir).resolve())
        if cfg.pool_dir is not None:
            env["EAU_POOL_DIR"] = str(Path(cfg.pool_dir).resolve())
        self.cli = cli or EauCLI(env=env, cwd=cfg.cwd)
        # the folder rule-file actions read: the run's own, which the commands write (--run), whatever
        # folder is exported to them
        self.knobs_dir = Path(st["knobs_dir"]) if st.get("knobs_dir") else self.run_dir / "knobs"
        self.meta = self.run_dir / "meta"
        self.state = self.load_state()

    # ------------------------------------------------------------------ state
    @property
    def state_path(self) -> Path:
        return self.meta / STATE_FILE

    def load_state(self) -> dict[str, Any]:
        doc = reader.read_json(self.state_path)
        if doc is None:
            return {"run": self.run_dir.name, "pending": None, "history": [], "interventions": 0, "ticks": 0}
        for key, default in (("pending", None), ("history", []), ("interventions", 0), ("ticks", 0)):
            doc.setdefault(key, default)
        return doc

    def save_state(self) -> None:
        if self.cfg.dry_run:
            return
        self.meta.mkdir(parents=True, exist_ok=True)
        self.state["updated"] = now_iso()
        atomic_write(self.state_path, json.dumps(self.state, indent=2, default=str) + "\n")

    def _lag_window(self, e: Intervention) -> tuple[int, int]:
        return (
            self.cfg.lag if self.cfg.lag is not None else e.lag,
            self.cfg.effect_window if self.cfg.effect_window is not None else e.window,
        )

    # ------------------------------------------------------------------ one turn
    def tick(self) -> dict[str, Any]:
        """One turn of the protocol; the record says what it did (``action``) and which commands it ran."""
        self.state = self.load_state()
        rec: dict[str, Any] = {
            "tick": self.state["ticks"] + 1,
            "time": now_iso(),
            "run": self.run_dir.name,
            "dry_run": self.cfg.dry_run,
            "action": "none",
            "skipped": [],
        }
        try:
            st = self.cli.run("status", "--run", self.cfg.run, "--no-detectors").doc
            last = st.get("last_metrics_step")
            rec["step"] = last + 1 if isinstance(last, int) else 0
            rec["live"] = bool(st.get("live"))
            if self.state["pending"]:
                self._measure(st, rec)
            elif not st.get("live") and not self.cfg.dry_run:
                rec["message"] = f"run is {st.get('state')}: no new change (a change would not reach it)"
            elif self.cfg.max_interventions and self.state["interventions"] >= self.cfg.max_interventions:
                rec["message"] = f"made {self.state['interventions']} interventions (--max-interventions)"
            else:
                self._intervene(st, rec)
        except CommandFailed as exc:
            rec.update({"action": "error", "message": str(exc)})
        rec["commands"] = self.cli.take_log()
        if not self.cfg.dry_run:
            self.state["ticks"] += 1
            self.save_state()
            jsonl.append(self.meta / LOG_FILE, rec)
        return rec

    # ------------------------------------------------------------------ new change
    def _intervene(self, st: dict[str, Any], rec: dict[str, Any]) -> None:
        args = ["diagnose", "--run", self.cfg.run, "--window", str(self.cfg.window)]
        for t in self.cfg.thresholds:
            args += ["--threshold", t]
        diag = self.cli.run(*args).doc
        flagged = list(diag.get("flagged") or [])
        rec["flagged"] = flagged
        rank = {d: i for i, d in enumerate(CAUSES_FIRST)}
        flagged = sorted(flagged, key=lambda d: rank.get(d, len(rank)))
        if not flagged:
            rec["message"] = "nothing flagged: no change (an intervention without a diagnosis only adds noise)"
            return
        findings = {f.get("name"): f for f in diag.get("findings") or [] if isinstance(f, dict)}
        for det in flagged:
            entries = [e for e in self.table if e.detector == det]
            if not entries:
                rec["skipped"].append({"detector": det, "why": "no known intervention in the table"})
                continue
            metrics = ((findings.get(det) or {}).get("evidence") or {}).get("metrics") or {}
            for e in entries:
                why = self._when_fails(e, metrics, list(st.get("gyms") or []))
                if why:
                    rec["skipped"].append({"detector": det, "knob": e.knob or e.action, "why": why})
                    continue
                if self._try_rules(e, st, rec, metrics) if e.action != "knob" else self._try(e, st, rec):
                    return
        rec["message"] = "flagged, but no table entry applies (see skipped)"

    def _target(self, e: Intervention, spec: dict[str, Any], gyms: list[str]) -> tuple[str | None, Any, str | None]:
        """(gym or None for the default value, current value, why not applicable)."""
        governs = spec.get("gyms") or []
        governed = [g for g in gyms if "*" in governs or g in governs]
        if not governed:
            return None, None, f"{e.knob} governs {', '.join(governs)}, no gym of this run ({', '.join(gyms)})"
        raw = spec.get("raw")
        if isinstance(raw, dict):
            own = [g for g in governed if g in raw]
            # a gym with its own value: the default would not reach it
            return (own[0], raw[own[0]], None) if own else (None, raw.get("default"), None)
        return None, raw, None

    @staticmethod
    def _when_fails(e: Intervention, metrics: dict[str, Any], gyms: list[str]) -> str | None:
        """Why the entry's ``when`` conditions hold for no gym of the run (None: they hold, or none)."""
        if not e.when:
            return None
        whys = []
        for g in gyms or [None]:
            ok, why = when_holds(e, metrics, g)
            if ok:
                return None
            whys.append(f"{g}: {why}" if g else str(why))
        return "evidence does not fit: " + "; ".join(whys)

    def _harmful(self, e: Intervention, knob: str | None = None) -> list[str]:
        """Ids of active findings that say this knob (or rule file), moved this way, harmed (in any run),
        or changed nothing on this run (inconclusive: trying it again here only spends another
        measurement on the same result; another entry gets the turn)."""
        knob = knob or e.knob
        res = self.cli.run("finding", "search", f"{knob} {e.detector}", "--limit", "0", ok=(0, 5))
        if res.rc == 5:  # no pool yet
            return []
        return [
            r["id"]
            for r in res.doc.get("results", [])
            if (
                r.get("verdict") == "harmed"
                or (r.get("verdict") == "inconclusive" and r.get("run") == self.run_dir.name)
            )
            and knob in (r.get("knobs") or [])
            and (not e.direction or change_direction(r) in (None, e.direction))
        ]

    def _candidate_dir(self) -> Path:
        if self.cfg.dry_run:
            return Path(tempfile.mkdtemp(prefix="eau-autopilot-"))
        base = self.meta / CANDIDATES_DIR
        base.mkdir(parents=True, exist_ok=True)
        n = len(list(base.glob("candidate_*"))) + 1
        while (base / f"candidate_{n:03d}").exists():
            n += 1
        path = base / f"candidate_{n:03d}"
        path.mkdir()
        return path

    def _gate(self, e: Intervention, gym: str | None, new: Any) -> tuple[bool, dict[str, Any]]:
        rows = self.cli.run("knobs", "list", "--run", self.cfg.run).doc["knobs"]
        values = {r["name"].split(".", 1)[1]: r["value"] for r in rows if r["name"].startswith(e.area + ".")}
        cur = values[e.name]
        if isinstance(cur, dict):
            values[e.name] = {**cur, (gym or "default"): new}
        else:
            values[e.name] = {"default": cur, gym: new} if gym else new
        folder = self._candidate_dir()
        try:
            path = folder / f"{e.area}.yaml"
            path.write_text(yaml.safe_dump(values, sort_keys=False), encoding="utf-8")
            return self._run_gate(path)
        finally:
            if self.cfg.dry_run:
                shutil.rmtree(folder, ignore_errors=True)

    def _run_gate(self, path: Path) -> tuple[bool, dict[str, Any]]:
        """``eau gate`` on a candidate file: (passed, the record kept in the tick)."""
        g = self.cli.run("gate", str(path), "--run", self.cfg.run, "--steps", str(self.cfg.gate_steps), ok=(0, 3))
        refusals = [r for c in g.doc.get("candidates", []) for r in c.get("refusals", [])]
        return g.rc == 0, {
            "candidate": None if self.cfg.dry_run else str(path),
            "ok": g.rc == 0,
            "refusals": refusals,
            "replays": len(g.doc.get("replays", [])),
        }

    def _try(self, e: Intervention, st: dict[str, Any], rec: dict[str, Any]) -> bool:
        """Gate and apply ``e``; True when applied (or, dry, when it would be)."""
        skip = lambda why: rec["skipped"].append({"detector": e.detector, "knob": e.knob, "why": why}) or False  # noqa: E731
        got = self.cli.run("knobs", "get", e.knob, "--run", self.cfg.run, ok=(0, 5))
        if got.rc == 5:
            return skip(got.error or f"unknown knob {e.knob}")
        spec = got.doc
        gym, current, why = self._target(e, spec, list(st.get("gyms") or []))
        if why:
            return skip(why)
        new, why = next_value(e, current, spec)
        if why:
            return skip(why)
        harmful = self._harmful(e)
        if harmful:
            return skip(
                f"finding(s) {', '.join(harmful)} record that {e.direction} {e.knob} harmed (or changed nothing on this run)"
            )
        ok, gate = self._gate(e, gym, new)
        rec["gate"] = gate
        if not ok:
            return skip("gate refused: " + "; ".join(f"[{r.get('rule')}] {r.get('message')}" for r in gate["refusals"]))
        lag, window = self._lag_window(e)
        reason = f"autopilot: {e.detector}: {e.predicted} (lag {lag}, window {window})"
        change = {
            "detector": e.detector,
            "knob": e.knob,
            "gym": gym,
            "old": current,
            "new": new,
            "direction": e.direction,
            "reason": reason,
        }
        if self.cfg.dry_run:
            rec.update({"action": "would_apply", **change})
            if not st.get("live"):
                rec["message"] = (
                    f"run is {st.get('state')}: a real turn would not apply this (it would not reach the run)"
                )
            return True
        args = ["knobs", "set", e.knob, cli_value(new), "--author", "agent", "--reason", reason, "--run", self.cfg.run]
        if gym:
            args += ["--gym", gym]
        res = self.cli.run(*args, ok=(0, 3, 5))  # 5: the knob was removed since the get above
        if res.rc in (3, 5):
            ev = (res.doc or {}).get("event") or {}
            return skip(f"write refused ({ev.get('rule') or 'refused'}): {ev.get('message') or res.error}")
        self._pend(e, change, rec, lag, window, rule_file=False)
        return True

    # ------------------------------------------------------------------ rule-file actions
    def _rule_candidates(self, e: Intervention, st: dict[str, Any], metrics: dict[str, Any]) -> tuple[list, list]:
        """[(kind, key, new document, what)] the action would write, and why not for the others."""
        out, skipped = [], []
        if e.action == "restore_user_rules":
            for gym in st.get("gyms") or []:
                cur_path = self.knobs_dir / "rules" / "users" / f"{gym}.yaml"
                default_path = defaults_dir() / "rules" / "users" / f"{gym}.yaml"
                if not default_path.is_file():
                    skipped.append(f"{gym}: no packaged user rule file")
                    continue
                default = yamlio.plain(yamlio.read_yaml(default_path)[0])
                try:
                    current = yamlio.plain(yamlio.read_yaml(cur_path)[0])
                except yamlio.FileProblem as exc:
                    current = f"unreadable: {exc}"
                if current == default:
                    skipped.append(f"rules/users/{gym}.yaml is the packaged default")
                    continue
                out.append(("users", gym, default, f"rules/users/{gym}.yaml back to the packaged default"))
        elif e.action == "disable_dominant_rule":
            dominant = [str(x) for x in metrics.get("dominant_rules") or []]
            if not dominant:
                skipped.append("the finding names no dominant rule")
            for name in dominant[:1]:
                for path in sorted((self.knobs_dir / "rules" / "rewards").glob("*.yaml")):
                    try:
                        doc = yamlio.plain(yamlio.read_yaml(path)[0])
                    except yamlio.FileProblem:
                        continue
                    rules = doc.get("rules") if isinstance(doc, dict) else None
                    if not isinstance(rules, list) or not any(
                        isinstance(r, dict) and r.get("name") == name for r in rules
                    ):
                        continue
                    # value 0 keeps the rule (and its file) in place, visible and revertible, earning nothing
                    new_rules = [{**r, "value": 0.0} if r.get("name") == name else r for r in rules]
                    out.append(("rewards", path.stem, {**doc, "rules": new_rules}, f"rule {name} in {path.name} to 0"))
                    break
                else:
                    skipped.append(f"no reward rule file holds rule {name!r}")
        return out, skipped

    def _try_rules(self, e: Intervention, st: dict[str, Any], rec: dict[str, Any], metrics: dict[str, Any]) -> bool:
        """Gate and write a rule file for ``e`` (restore a gym's user rules, zero a dominant reward rule)."""
        skip = lambda why: rec["skipped"].append({"detector": e.detector, "knob": e.action, "why": why}) or False  # noqa: E731
        cands, whys = self._rule_candidates(e, st, metrics)
        for why in whys:
            skip(why)
        for kind, key, doc, what in cands:
            knob = f"rules.{kind}.{key}"
            harmful = self._harmful(e, knob)
            if harmful:
                skip(f"finding(s) {', '.join(harmful)} record that changing {knob} harmed")
                continue
            folder = self._candidate_dir()
            path = folder / "rules" / kind / f"{key}.yaml"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(yamlio.dump(yamlio.to_rt(doc)), encoding="utf-8")
            try:
                ok, rec["gate"] = self._run_gate(path)
                if not ok:
                    refusals = rec["gate"]["refusals"]
                    skip("gate refused: " + "; ".join(f"[{r.get('rule')}] {r.get('message')}" for r in refusals))
                    continue
                lag, window = self._lag_window(e)
                reason = f"autopilot: {e.detector}: {what}: {e.predicted} (lag {lag}, window {window})"
                change = {
                    "detector": e.detector,
                    "knob": knob,
                    "gym": None,
                    "old": "file as it was",
                    "new": what,
                    "direction": "",
                    "reason": reason,
                }
                if self.cfg.dry_run:
                    rec.update({"action": "would_apply", **change})
                    return True
                res = self.cli.run(
                    "knobs", "set-rules", f"{kind}/{key}", str(path), "--author", "agent", "--reason", reason,
                    "--run", self.cfg.run, ok=(0, 3),
                )  # fmt: skip
            finally:
                if self.cfg.dry_run:
                    shutil.rmtree(folder, ignore_errors=True)
            if res.rc == 3:
                ev = (res.doc or {}).get("event") or {}
                skip(f"write refused ({ev.get('rule') or 'refused'}): {ev.get('message') or res.error}")
                continue
            self._pend(e, change, rec, lag, window, rule_file=True)
            return True
        return False

    def _pend(
        self, e: Intervention, change: dict[str, Any], rec: dict[str, Any], lag: int, window: int, rule_file: bool
    ) -> None:
        self.state["pending"] = {
            **change,
            "event": None,
            "written_step": rec.get("step"),
            "written": now_iso(),
            "metric": e.metric,
            "better": e.better,
            "guards": [list(g) for g in e.guards],
            "lag": lag,
            "window": window,
            "predicted": e.predicted,
            "why": e.why,
            "repair": e.repair,
            "rule_file": rule_file,
        }
        self.state["interventions"] += 1
        rec.update({"action": "applied", **change})

    # ------------------------------------------------------------------ measuring a change
    def _metric(self, name: str, gym: str | None) -> str:
        return f"gym/{gym}/{name}" if gym and name in PER_GYM_METRICS else name

    def _find_event(self, p: dict[str, Any]) -> dict[str, Any] | None:
        evs = self.cli.run("knobs", "history", p["knob"], "--run", self.cfg.run, "--limit", "0").doc["events"]
        for e in reversed(evs):
            if (
                e.get("author") == "agent"
                and e.get("reason") == p["reason"]
                and (p.get("rule_file") or e.get("new") == p["new"])
                and e.get("gym") == p["gym"]
                and (e.get("status") == "rejected" or isinstance(e.get("step_effective"), int))
            ):
                return e
        return None

    def _effect(self, p: dict[str, Any], metric: str, better: str) -> dict[str, Any]:
        return self.cli.run(
            "effect",
            "--event",
            p["event"],
            "--metric",
            metric,
            "--direction",
            better,
            "--lag",
            str(p["lag"]),
            "--window",
            str(p["window"]),
            "--run",
            self.cfg.run,
        ).doc

    def _measure(self, st: dict[str, Any], rec: dict[str, Any]) -> None:
        p = self.state["pending"]
        rec.update({k: p.get(k) for k in ("detector", "knob", "gym", "old", "new")})
        if not p.get("event"):
            ev = self._find_event(p)
            if ev is None:
                if st.get("live"):
                    rec.update({"action": "waiting", "message": "the run has not applied the change yet"})
                    return
                rec.update({"action": "abandoned", "message": f"the run ended ({st.get('state')}) before applying it"})
                self._close(p, None)
                return
            if ev.get("status") == "rejected":
                rec.update(
                    {
                        "action": "refused",
                        "message": f"the run refused it at its step boundary ([{ev.get('rule')}] {ev.get('message')})",
                    }
                )
                self._close(p, None)
                return
            p.update({"event": ev["id"], "step_effective": ev["step_effective"]})
        rec["event"] = p["event"]
        main = self._effect(p, self._metric(p["metric"], p["gym"]), p["better"])
        if main.get("verdict") == "not_enough_data" and st.get("live"):
            rec.update({"action": "waiting", "message": main.get("explanation")})
            if not self.cfg.dry_run:
                self.save_state()
            return
        guards = (
            [self._effect(p, self._metric(m, p["gym"]), b) for m, b in p.get("guards") or []]
            if main.get("state") == "ok"
            else []
        )
        verdict = main["verdict"] if main.get("state") == "ok" else "inconclusive"
        if any(g.get("verdict") == "harmed" for g in guards):
            verdict = "harmed"
        measured = self._measured_text(main, guards)
        rec.update({"verdict": verdict, "measured": measured})
        # a repair of a diagnosed defect (restoring a file) stays unless it measurably harmed
        keep = verdict == "improved" or (bool(p.get("repair")) and verdict == "inconclusive")
        if self.cfg.dry_run:
            rec.update({"action": "would_measure", "would_revert": not keep})
            return
        revert = None
        if not keep:
            r = self.cli.run(
                "knobs",
                "revert",
                p["event"],
                "--author",
                "agent",
                "--run",
                self.cfg.run,
                "--reason",
                f"autopilot: {verdict}: {measured}"[:500],
                ok=(0, 3, 5),
            )
            revert = {
                "ok": r.rc == 0,
                "pending": (r.doc or {}).get("pending"),
                "message": ((r.doc or {}).get("event") or {}).get("message") or r.error,
            }
        finding = self._record(p, main, verdict, measured, revert)
        rec.update({"action": "measured", "reverted": revert, "finding": finding})
        self._close(p, {"verdict": verdict, "measured": measured, "reverted": revert, "finding": finding})

    def _measured_text(self, main: dict[str, Any], guards: list[dict[str, Any]]) -> str:
        def one(d: dict[str, Any]) -> str:
            if d.get("state") != "ok":
                return f"{d.get('metric')}: not enough data ({d.get('explanation')})"
            return (
                f"{d['metric']} {d['pre']['mean']:.4f} -> {d['post']['mean']:.4f}, difference "
                f"{d['difference']:+.4f}, noise floor {d['noise_floor']:.4f} ({d['verdict']})"
            )

        return "; ".join([one(main)] + [f"guard {one(g)}" for g in guards])

    def _record(
        self, p: dict[str, Any], main: dict[str, Any], verdict: str, measured: str, revert: dict[str, Any] | None
    ) -> str | None:
        """``eau finding add`` for the measured change; its id."""
        where = f"gym {p['gym']}" if p.get("gym") else "all gyms"
        pre, post = (main.get("pre") or {}).get("steps") or [], (main.get("post") or {}).get("steps") or []
        steps = f"{(pre or post)[0]}:{(post or pre)[-1]}" if (pre or post) else None
        title = f"autopilot: {p['knob']} {p['old']} -> {p['new']} for {p['detector']}: {verdict}"[:120]
        body = "\n".join(
            [
                f"Detector `{p['detector']}` was flagged at step {p.get('written_step')}; the intervention table's entry "
                f"for it: {p.get('why') or '-'}.",
                "",
                f"- change: `{p['knob']}` {p['old']} -> {p['new']} ({where}), event {p['event']}, effective from step "
                f"{p.get('step_effective')}",
                f"- reason written: {p['reason']}",
                f"- measured with eau effect (lag {p['lag']}, window {p['window']}): {measured}",
                f"- decision: {'reverted' if revert else 'kept'}" + (f" ({revert.get('message')})" if revert else ""),
            ]
        )
        args = [
            "finding",
            "add",
            "--title",
            title,
            "--change",
            f"{p['old']} -> {p['new']} ({where})",
            "--verdict",
            verdict,
            "--knob",
            p["knob"],
            "--run",
            self.run_dir.name,
            "--predicted",
            f"{p['predicted']} (lag {p['lag']}, window {p['window']})",
            "--measured",
            measured,
            "--tag",
            "autopilot",
            "--tag",
            p["detector"],
            "--tag",
            p.get("direction") or "rule-file",
            "--event",
            p["event"],
            "--author",
            "agent",
            "--body",
            "-",
        ]
        if steps:
            args += ["--steps", steps]
        res = self.cli.run(*args, stdin=body)
        return ((res.doc or {}).get("finding") or {}).get("id")

    def _close(self, p: dict[str, Any], outcome: dict[str, Any] | None) -> None:
        if self.cfg.dry_run:
            return
        self.state["history"].append({**p, "outcome": outcome, "closed": now_iso()})
        self.state["pending"] = None


def run_loop(
    ap: Autopilot, every: int, poll_s: float = 2.0, sleep: Callable[[float], None] = time.sleep
) -> dict[str, Any]:
    """Tick each time the run completes a multiple of ``every`` steps, until it is no longer live
    (then one last tick measures a change still pending, with the data there is) or SIGINT/SIGTERM.
    Ticks run in this process; the trainer never waits on them."""
    schedule = Schedule(every)
    ticks: list[dict[str, Any]] = []
    stop: list[str] = []
    handler = lambda signum, _f: stop.append(signal.Signals(signum).name)  # noqa: E731
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in old:
        signal.signal(s, handler)
    try:
        while True:
            if stop:
                why = f"signal {stop[0]}"
                break
            prog = progress(ap.run_dir)
            if not prog.live:
                if ap.load_state()["pending"]:
                    ticks.append(ap.tick())
                why = ended_text(prog)
                break
            if schedule.due(prog.completed):
                ticks.append(ap.tick())
                schedule.pass_busy(progress(ap.run_dir).completed)
            sleep(poll_s)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    state = ap.load_state()
    findings = [t["finding"] for t in ticks if t.get("finding")]
    return {
        "ok": True,
        "run": ap.run_dir.name,
        "stopped": why,
        "dry_run": ap.cfg.dry_run,
        "every": every,
        "ticks": ticks,
        "applied": sum(1 for t in ticks if t["action"] == "applied"),
        "findings": findings,
        "pending": state["pending"],
        "schedule": schedule.to_json(),
        "state_file": None if ap.cfg.dry_run else str(ap.state_path),
    }
