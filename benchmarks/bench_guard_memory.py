"""Memory the numeric guard (harness/ppo/guards.py) adds to one PPO update, on a preset's real models.

    python benchmarks/bench_guard_memory.py --preset cpu-gemma --updates 4

Builds the preset's policy, critic and optimisers as the trainer does (the Gemma 3 270M GGUF and its
LoRA adapters for cpu-gemma), then runs ``--updates`` real updates (a forward and backward pass over a
random batch, clip and step through the guard) twice: once through the guard, once with the guard's
copy left out. Figures (JSON on stdout):

* ``trainable_mb``: the trainable parameters (what the optimisers step);
* ``optimizer_steps_per_update``: the preset's plan (episodes a step / mini_batch_size, times ppo_epochs);
* ``guard_copy_mb``: the tensors the guard copies at each update to be able to undo it (parameters and
  optimiser state), measured on what its copy returns (0: no copy taken);
* ``guard_extra_peak_mb``: peak resident memory during a guarded update minus that of an unguarded
  one (the median over the updates), sampled from ``/proc/self/statm`` every 2 ms (noisy: the
  forward pass dominates the peak; ``guard_copy_mb`` is the exact figure).

Memory figures do not depend on the machine's load; the time per update does (not reported).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from harness.knobs.folder import defaults_dir  # noqa: E402
from harness.knobs.snapshot import KnobSnapshot  # noqa: E402
from harness.ppo import guards  # noqa: E402
from harness.ppo.config import build_config  # noqa: E402
from harness.ppo.hyperparams import AgentKnobs  # noqa: E402
from harness.ppo.models import build_critic, forward_token_stats, load_policy  # noqa: E402
from harness.ppo.optim import make_optimizers  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")
MB = 1024 * 1024


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


class PeakRss:
    """Highest resident set size seen while the block runs (a 2 ms sampling thread)."""

    def __enter__(self) -> PeakRss:
        self.base = self.peak = rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss())
            time.sleep(0.002)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss())


def tensor_bytes(obj: Any) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v) for v in obj)
    return sum(tensor_bytes(v) for v in vars(obj).values()) if hasattr(obj, "__dict__") else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="cpu-gemma")
    ap.add_argument("--updates", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=64, help="Sequence length of the random batch.")
    ap.add_argument("--rows", type=int, default=2)
    args = ap.parse_args()
    torch.manual_seed(0)
    cfg = build_config(args.preset, None, ["progress=false"])
    policy, _tok = load_policy(cfg.policy)
    critic = build_critic(policy, cfg.critic)
    shared = critic is not policy and hasattr(critic, "values_from_hidden")
    knobs = AgentKnobs.from_values({**KnobSnapshot.read_dir(defaults_dir()).area("agent"), **cfg.agent_knobs})
    optimizers, train_policy, train_critic = make_optimizers(policy, critic, shared, knobs)
    episodes = cfg.tasks_per_step * cfg.samples_per_task
    steps = math.ceil(episodes / knobs.mini_batch_size) * knobs.ppo_epochs
    vocab = policy.config.vocab_size if hasattr(policy, "config") else 1000
    ids = torch.randint(0, min(vocab, 32000), (args.rows, args.tokens))
    am = torch.ones_like(ids)
    net = train_critic if shared else train_policy
    guard = guards.NumericGuard(SimpleNamespace(world=1, main=True, device=torch.device("cpu")))
    guard.optimizers = optimizers
    copied: list[int] = []
    copy_state = guard._copy_state
    guard._copy_state = lambda: (lambda c: (copied.append(tensor_bytes(c)), c)[1])(copy_state())
    batch = SimpleNamespace(attention_mask=am)

    def run_update(_batch: Any, _step: int) -> dict[str, float]:
        for _ in range(steps):
            for opt in optimizers.values():
                opt.zero_grad(set_to_none=True)
            st = forward_token_stats(net, ids, am, score_mask=am)
            loss = -st.logprobs.mean() + (st.values.float().pow(2).mean() if st.values is not None else 0.0)
            loss.backward()
            stats = guard.clip_and_step(optimizers, knobs, {"actor/pg_loss": float(loss.detach())})
        return {**stats, "actor/pg_loss": float(loss.detach())}

    params = [p for opt in optimizers.values() for g in opt.param_groups for p in g["params"]]
    trainable = sum(p.numel() * p.element_size() for p in params)
    run_update(batch, -1)  # the optimiser state exists from here on (a later update copies it)
    guarded, plain = [], []
    for step in range(args.updates):
        with PeakRss() as g:
            guard.update(step, batch, run_update, optimizer_steps=steps)
        guarded.append(g.peak - g.base)
        with PeakRss() as p:
            run_update(batch, step)
        plain.append(p.peak - p.base)
    extra = [a - b for a, b in zip(guarded, plain)]
    print(
        json.dumps(
            {
                "benchmark": "numeric guard memory",
                "preset": args.preset,
                "trainable_params": sum(p.numel() for p in params),
                "trainable_mb": round(trainable / MB, 2),
                "optimizer_steps_per_update": steps,
                "guard_copy_mb": round((statistics.median(copied) if copied else 0) / MB, 2),
                "copies_taken": len(copied),
                "guard_extra_peak_mb": round(statistics.median(extra) / MB, 2),
                "guard_extra_peak_mb_each": [round(x / MB, 2) for x in extra],
                "rss_mb": round(rss() / MB, 1),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
