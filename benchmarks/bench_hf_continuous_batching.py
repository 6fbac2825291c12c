"""Is transformers' own continuous batching a CPU path for the rollout engine? (issue "The trainer")

The engine's turn-synchronous decoding is what keeps it under the rollout targets (BENCHMARKS.md,
"Rollout, why the targets are missed"); continuous batching removes it. This measures, side by side
in one process and alternating over ``--repeats``, the same B prompts x N new tokens (sampling, no
early stop) through

(a) one batched ``model.generate`` (left-padded, the engine's transformers backend), and
(b) ``model.generate_batch`` (transformers' continuous-batching manager, paged KV cache).

The model is the untrained tiny model (the same shapes as the tiny preset); prompts have 3 lengths.
Reports the median wall time of each side and the ratio cb / generate (above 1: continuous batching
is slower). Manager set-up counts once: the first call of (b) is reported apart and not in the median.

    python benchmarks/bench_hf_continuous_batching.py [--batch 16] [--new-tokens 48] [--repeats 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch
from _common import alternate, emit, load_average, load_tiny, machine, median, set_threads
from transformers import GenerationConfig


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__
    )
    ap.add_argument("--batch", type=int, default=16, help="prompts (default 16, the rollout benchmark's episodes)")
    ap.add_argument(
        "--new-tokens", type=int, default=48, help="new tokens per prompt (default 48, the tiny turn budget)"
    )
    ap.add_argument("--repeats", type=int, default=3, help="alternating repeats of both sides (default 3)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1; 0 = torch's default)")
    args = ap.parse_args()

    load_start = load_average()
    threads = set_threads(args.threads)
    model, tok = load_tiny(None)
    model.eval()
    words = "ASK: what should i know about the trip"
    prompts = [tok(" ".join([words] * (1 + i % 3)))["input_ids"] for i in range(args.batch)]
    pad = tok.pad_token_id
    gc = GenerationConfig(
        max_new_tokens=args.new_tokens,
        min_new_tokens=args.new_tokens,
        do_sample=True,
        temperature=1.0,
        pad_token_id=pad,
        eos_token_id=None,
    )
    width = max(map(len, prompts))
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    am = (ids != pad).long() if pad is not None else torch.ones_like(ids)

    def raw(_r: int) -> float:
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=am, generation_config=gc)
        assert out.shape[1] - width == args.new_tokens
        return time.perf_counter() - t0

    def cb(_r: int) -> float:
        t0 = time.perf_counter()
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = model.generate_batch(inputs=prompts, generation_config=gc, progress_bar=False)
        assert len(res) == args.batch and all(len(r.generated_tokens) == args.new_tokens for r in res.values())
        return time.perf_counter() - t0

    first_cb = cb(-1)  # manager set-up and first compile of the paged path
    times = alternate({"generate": raw, "generate_batch": cb}, args.repeats)
    t_raw, t_cb = median(times["generate"]), median(times["generate_batch"])
    emit(
        {
            "benchmark": "hf_continuous_batching",
            "batch": args.batch,
            "new_tokens": args.new_tokens,
            "threads": threads,
            "generate_s": t_raw,
            "generate_batch_s": t_cb,
            "generate_batch_first_call_s": first_cb,
            "cb_over_generate": t_cb / t_raw,
            "repeats": times,
            "machine": machine(),
            "load_start": load_start,
            "load_end": load_average(),
        }
    )


if __name__ == "__main__":
    main()
