"""What an answer that ignores its input earns on a colbench task set, checked through real scoring.

``eau tasks check colbench`` reports, per task, ``constant_share``: the share of tests that one
program returning a single value from every function passes, read from the reference's values
(``harness.envs.colbench.taskcheck.constant_answer_share``; a lower bound). This benchmark checks
that figure against the gym's own scoring: for every task whose share is at least ``--min-share``, it
builds a constant program (the reference, then the task's function replaced by one that returns the
reference's value of one of the tests' calls, computed once at load) and scores it with
``score_answer`` against the reference's outcomes, trying each test's first direct call in turn until
one scores at least the share. It reports how many tasks scored below their share (the bound failed),
and the mean of real score minus share.

    python benchmarks/bench_constant_answers.py [--data FILE] [--min-share 0.5] [--limit N]

Prints one JSON document.
"""

from __future__ import annotations

import argparse
import ast
import json
import time

from harness.envs.colbench import score_answer
from harness.envs.colbench.taskcheck import check_item, items_for_gym, limits_for
from harness.sandbox import OK, run_source
from harness.sandbox.probes import probe_kind, probe_set


def constant_program(reference: str, call: str) -> str:
    """The reference, then its function (the callee of ``call``) replaced by one returning the
    value of ``call``, computed once when the module loads."""
    name = ast.parse(call, mode="eval").body.func.id  # a direct call (probe_kind == "call")
    return f"{reference}\n_CONSTANT = {call}\n\n\ndef {name}(*args, **kwargs):\n    return _CONSTANT\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=None, help="a ColBench JSONL file (default: the procedural tasks)")
    ap.add_argument("--min-share", type=float, default=0.5, help="check tasks whose constant share is at least this")
    ap.add_argument("--limit", type=int, default=None, help="only the first N tasks")
    args = ap.parse_args()
    t0 = time.monotonic()
    items = items_for_gym("colbench", args.data, args.limit)
    limits = limits_for("colbench", args.data)
    checked, below, excess, no_call = 0, [], [], 0
    for item in items:
        res = check_item(item, limits)
        if not res.passed or res.constant_share is None or res.constant_share < args.min_share:
            continue
        probes = probe_set(item.calls)
        expected = probes.per_test(run_source(item.reference, probes.calls, limits).calls)
        calls = [
            next((p for p, o in zip(plan.probes, outs) if probe_kind(p) == "call" and o.status == OK), None)
            for plan, outs in zip(probes.plans, expected)
        ]
        best = None
        for call in filter(None, calls):
            score = score_answer(constant_program(item.reference, call), item.calls, expected, limits).task_reward
            best = score if best is None else max(best, score)
            if round(score, 4) >= res.constant_share:  # the check rounds its share to 4 places
                break
        if best is None:  # only print(...) tests: any answer passes them
            no_call += 1
            continue
        checked += 1
        excess.append(best - res.constant_share)
        if round(best, 4) < res.constant_share:
            below.append({"index": item.index, "task_id": item.task_id, "share": res.constant_share, "score": best})
    print(
        json.dumps(
            {
                "source": args.data or "procedural",
                "tasks": len(items),
                "min_share": args.min_share,
                "checked": checked,
                "print_only": no_call,
                "scored_below_share": below,
                "mean_excess": round(sum(excess) / len(excess), 4) if excess else None,
                "seconds": round(time.monotonic() - t0, 1),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
