"""Can a model that installs here answer turtle questions better than the symbolic user?

The symbolic turtle user's accuracy on unseen stories is far below the 0.85 target
(``bench_turtle_user.py``, blind set). The other way to a better answerer is the LLM user arm. This
benchmark asks whether any model that can be installed on a machine without a model hub does the
job: each packaged model (``harness/ppo/packaged.py``: SmolLM2-135M-Instruct, Gemma 3 270M base) gets
the LLM user's own instructions (``harness.envs.turtle.user_role``: surface and hidden story) and a
labelled question, and its answer is the most likely of the next tokens ``Yes``, ``No`` and
``Irrelevant`` (one forward pass; sampling could only do worse). Compared with the labels of
``benchmarks/data/turtle_questions_blind.jsonl`` (or ``--questions``) and with the share of the
commonest label (what always giving one answer scores).

    python benchmarks/bench_turtle_model_judge.py [--models smollm2-135m gemma3-270m] [--questions FILE] [--limit N]

Prints one JSON document; ~10 minutes per model for the 241 blind questions on one busy core.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from _common import emit, machine, set_threads, stderr_log

from harness.envs.turtle import user_role
from harness.envs.turtle.data import load_turtle
from harness.ppo.packaged import model_folder

LABELS = ("Yes", "No", "Irrelevant")
BLIND = Path(__file__).resolve().parent / "data" / "turtle_questions_blind.jsonl"


def judge(name: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The model's accuracy on ``rows``, overall and per label."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = model_folder(name)  # builds the float32 cache from the packaged GGUF on first use
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    first = [tok.encode(label, add_special_tokens=False)[0] for label in LABELS]
    if len(set(first)) != len(LABELS):
        raise SystemExit(f"{name}: the labels share a first token ({first}); this probe needs distinct ones")
    stories = load_turtle().stories
    per: dict[str, list[int]] = {label: [0, 0] for label in LABELS}
    answers: Counter[str] = Counter()
    t0 = time.perf_counter()
    for row in rows:
        role = user_role(stories[row["story"]])
        question = f"Question: {row['question']}\nAnswer with one word: Yes, No or Irrelevant."
        if tok.chat_template:
            text = tok.apply_chat_template(
                [{"role": "system", "content": role}, {"role": "user", "content": question}],
                tokenize=False,
                add_generation_prompt=True,
            )
        else:  # a base model: the instructions, the question and an answer cue
            text = f"{role}\n\n{question}\nAnswer:"
        with torch.no_grad():
            logits = model(**tok(text, return_tensors="pt")).logits[0, -1]
        got = LABELS[int(torch.argmax(logits[first]))]
        answers[got] += 1
        per[row["label"]][1] += 1
        per[row["label"]][0] += got == row["label"]
    right = sum(v[0] for v in per.values())
    return {
        "model": name,
        "accuracy": round(right / len(rows), 4),
        "by_label": {k: round(a / n, 4) if n else None for k, (a, n) in per.items()},
        "answers": dict(answers),
        "seconds": round(time.perf_counter() - t0, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["smollm2-135m", "gemma3-270m"])
    ap.add_argument("--questions", type=Path, default=BLIND, help="labelled questions (JSON lines)")
    ap.add_argument("--limit", type=int, default=0, help="first N questions only (0: all)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    set_threads(args.threads)
    rows = [json.loads(x) for x in args.questions.read_text().splitlines() if x.strip()]
    rows = rows[: args.limit] if args.limit else rows
    labels = Counter(r["label"] for r in rows)
    results = []
    for name in args.models:
        stderr_log(f"judging {len(rows)} questions with {name}")
        results.append(judge(name, rows))
    emit(
        {
            "command": "python benchmarks/bench_turtle_model_judge.py --models " + " ".join(args.models),
            "machine": machine(),
            "questions": str(args.questions.name),
            "n": len(rows),
            "labels": dict(labels),
            "always_commonest_label": round(labels.most_common(1)[0][1] / len(rows), 4),
            "models": results,
        }
    )


if __name__ == "__main__":
    main()
