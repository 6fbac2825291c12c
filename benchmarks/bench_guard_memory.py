"""Memory the numeric guard (harness/ppo/guards.py) adds to one PPO update, on a preset's real models.

    python benchmarks/bench_guard_memory.py --preset cpu-gemma --updates 4

Builds the preset's policy, critic and optimisers as the trainer does (the Gemma 3 270M GGUF and its
LoRA adapters for cpu-gemma), then runs ``--updates`` real updates (a forward and backward pass over a
random batch, clip and step through the guard) twice: once through the guard, once with the guard's
copy left out. Figures (JSON on stdout):

* ``trainable_mb``: the trainable parameters (what the optimisers step);
* ``guard_copy_mb``: the tensors the guard keeps to undo an update (parameters and optimiser state);
* ``guard_extra_peak_mb``: peak resident memory during a guarded update minus that of an unguarded
  one (the median over the updates after the first, whose optimiser state is still empty), sampled
  from ``/proc/self/statm`` every 2 ms;
* ``fresh_allocations_per_update_mb``: what the guard allocates anew at each update.

Memory figures do not depend on the machine's load; the time per update does (not reported).
"""

from __future__ import annotations

import argparse
import json
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

from harness.ppo import guards  # noqa: E402
from harness.ppo.config import build_config  # noqa: E402
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
    knobs = {**cfg.agent_knobs, "max_grad_norm": 1.0, "lr_warmup_steps": 0}
    knobs.setdefault("critic_lr", knobs.get("lr", 1e-5))
    optimizers, train_policy, train_critic = make_optimizers(policy, critic, shared, knobs)
    vocab = policy.config.vocab_size if hasattr(policy, "config") else 1000
    ids = torch.randint(0, min(vocab, 32000), (args.rows, args.tokens))
    am = torch.ones_like(ids)
    net = train_critic if shared else train_policy
    dist = SimpleNamespace(world=1, main=True, device=torch.device("cpu"))
    guard = guards.NumericGuard(SimpleNamespace(optimizers=optimizers, dist=dist, writer=None, stop_requested=False))
    batch = SimpleNamespace(attention_mask=am)

    def run_update(_batch: Any, _step: int) -> dict[str, float]:
        for opt in optimizers.values():
            opt.zero_grad(set_to_none=True)
        st = forward_token_stats(net, ids, am, score_mask=am)
        loss = -st.logprobs.mean() + (st.values.float().pow(2).mean() if st.values is not None else 0.0)
        loss.backward()
        stats = guard.clip_and_step(optimizers, knobs)
        return {**stats, "actor/pg_loss": float(loss.detach())}

    params = [p for opt in optimizers.values() for g in opt.param_groups for p in g["params"]]
    trainable = sum(p.numel() * p.element_size() for p in params)
    run_update(batch, -1)  # the optimiser state exists from here on (a later update copies it)
    guarded, plain, copy_bytes = [], [], 0
    for step in range(args.updates):
        with PeakRss() as g:
            guard.update(step, batch, run_update)
        guarded.append(g.peak - g.base)
        with PeakRss() as p:
            run_update(batch, step)
        plain.append(p.peak - p.base)
    copy_bytes = tensor_bytes(guard._copy_state())
    extra = [a - b for a, b in zip(guarded, plain)]
    print(
        json.dumps(
            {
                "benchmark": "numeric guard memory",
                "preset": args.preset,
                "guard": guards.__name__,
                "trainable_params": sum(p.numel() for p in params),
                "trainable_mb": round(trainable / MB, 2),
                "guard_copy_mb": round(copy_bytes / MB, 2),
                "guard_extra_peak_mb": round(statistics.median(extra) / MB, 2),
                "guard_extra_peak_mb_each": [round(x / MB, 2) for x in extra],
                "fresh_allocations_per_update_mb": round(copy_bytes / MB, 2),
                "rss_mb": round(rss() / MB, 1),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
