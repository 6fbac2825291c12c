"""A scripted meta-agent for ``eau supervise --agent "python tests/agents/scripted_agent.py"``.

It does what the skill asks of a session, with fixed decisions, through real ``eau`` commands:

* reads the prompt on stdin (as supervise hands it to a custom command) and checks it names the
  run and the evaluation rule;
* ``eau status`` / ``eau knobs history``: is a change of mine (author agent) applied and not yet
  recorded in the pool?
  - yes: ``eau effect --event ID`` (window/lag from the environment); once it has data, ``eau
    finding add`` with the measured effect;
  - no change of mine at all: ``eau diagnose``, ``eau finding search``, then one intervention,
    ``eau knobs set agent.entropy_coeff 0.003 --author agent --reason ...``;
  - a write of mine still waiting for the step boundary: nothing.
* optionally stays busy after an intervention: a slow agent (``SCRIPTED_AGENT_SLEEP`` seconds, then
  until the run has completed ``SCRIPTED_AGENT_WAIT_STEPS`` more steps).

Prints one JSON object at the end in Claude Code's result shape (``total_cost_usd`` 0: no model).
Environment: EAU_RUN, EAU_RUNS_DIR, EAU_KNOBS_DIR, EAU_POOL_DIR (set by eau supervise);
SCRIPTED_AGENT_WINDOW (default 2), SCRIPTED_AGENT_LAG (default 0), SCRIPTED_AGENT_SLEEP (default 0),
SCRIPTED_AGENT_WAIT_STEPS (default 0).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

KNOB, NEW = "agent.entropy_coeff", "0.003"
REASON = "scripted agent: entropy falling; predict entropy higher after lag 1, success_rate not lower"


def eau(*args: str, ok: tuple[int, ...] = (0,)) -> dict:
    """Run ``eau ARGS --json`` (this interpreter's harness CLI) and return its JSON document."""
    p = subprocess.run([sys.executable, "-m", "harness.cli.main", *args, "--json"], capture_output=True, text=True)
    if p.returncode not in ok:
        sys.stderr.write(f"eau {' '.join(args)} exited {p.returncode}: {p.stderr}\n")
        raise SystemExit(2)
    print(f"$ eau {' '.join(args)} -> {p.returncode}", file=sys.stderr)
    return json.loads(p.stdout) if p.stdout.strip() else {}


def completed(run: str) -> int:
    """Steps the run has completed (from eau status)."""
    last = eau("status", "--run", run, "--no-detectors").get("last_metrics_step")
    return last + 1 if isinstance(last, int) else 0


def main() -> int:
    prompt = sys.stdin.read()
    run = os.environ["EAU_RUN"]
    if run not in prompt or "eau eval" not in prompt:
        print(f"prompt does not name the run {run!r} and the evaluation rule", file=sys.stderr)
        return 3
    window, lag = os.environ.get("SCRIPTED_AGENT_WINDOW", "2"), os.environ.get("SCRIPTED_AGENT_LAG", "0")
    turns = 0
    eau("status", "--run", run, "--no-detectors")
    history = eau("knobs", "history", KNOB, "--run", run, "--limit", "0")["events"]
    mine = [
        e
        for e in history
        if e.get("author") == "agent"
        and e.get("reason") == REASON
        and e.get("status") == "accepted"
        and isinstance(e.get("step_effective"), int)
    ]
    pool = eau("finding", "list", "--limit", "0", ok=(0, 5))
    recorded = {ev for f in pool.get("findings", []) for ev in f.get("events", [])}
    summary = "no intervention: a change of mine is waiting for the run's next step boundary"
    if mine and mine[-1]["id"] not in recorded:
        ev = mine[-1]
        eff = eau("effect", "--event", ev["id"], "--run", run, "--window", window, "--lag", lag)
        turns += 1
        if eff["verdict"] == "not_enough_data":
            summary = f"measuring {ev['id']}: {eff['explanation']}"
        else:
            verdict = eff["verdict"] if eff["verdict"] in ("improved", "harmed", "inconclusive") else "inconclusive"
            measured = (
                f"{eff['metric']} {eff['pre']['mean']:.4f} -> {eff['post']['mean']:.4f}, difference "
                f"{eff['difference']:+.4f}, noise floor {eff['noise_floor']:.4f}"
            )
            f = eau(
                "finding",
                "add",
                "--title",
                f"scripted agent: {KNOB} {ev['old']} -> {ev['new']}: {verdict}",
                "--change",
                f"{ev['old']} -> {ev['new']} (all gyms)",
                "--verdict",
                verdict,
                "--knob",
                KNOB,
                "--run",
                run,
                "--steps",
                f"{eff['pre']['steps'][0]}:{eff['post']['steps'][-1]}",
                "--predicted",
                "entropy higher after lag 1",
                "--measured",
                measured,
                "--event",
                ev["id"],
                "--tag",
                "scripted",
                "--body",
                "Measured by the scripted test agent.",
            )
            summary = f"recorded {f['finding']['id']} for {ev['id']} ({verdict})"
    elif not mine and not any(e.get("reason") == REASON for e in history):
        eau("diagnose", "--run", run, "--window", "3")
        eau("finding", "search", "entropy_coeff entropy", ok=(0, 5))
        res = eau("knobs", "set", KNOB, NEW, "--author", "agent", "--reason", REASON, "--run", run)
        turns += 1
        summary = f"intervention: {KNOB} -> {NEW} ({'pending' if res.get('pending') else 'applied'})"
        time.sleep(float(os.environ.get("SCRIPTED_AGENT_SLEEP", "0")))
        wait_steps = int(os.environ.get("SCRIPTED_AGENT_WAIT_STEPS", "0"))
        if wait_steps:  # a slow agent: still busy while the run completes more steps
            start = completed(run)
            while completed(run) < start + wait_steps and eau("status", "--run", run, "--no-detectors")["live"]:
                time.sleep(2)
    print(
        json.dumps(
            {
                "type": "result",
                "subtype": "success",
                "is_error": False,
                "result": summary,
                "num_turns": turns,
                "total_cost_usd": 0.0,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
