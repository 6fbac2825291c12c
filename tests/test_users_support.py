"""Shared helpers of the users tests (no tests here): hand-built tasks of several gyms' fact kinds,
a minimal gym around a given task, and knob dictionaries."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from harness.envs.base import UserCentricEnv
from harness.knobs.folder import defaults_dir
from harness.knobs.snapshot import KnobSnapshot
from harness.types import Action, AnswerResult, EpisodeState, Fact, Task, TurnRecord
from harness.users.rules import load_user_rules_file

COLBENCH_FILE = Path(__file__).resolve().parents[2] / "shared" / "colbench" / "backend_test.jsonl"
RULES_DIR = defaults_dir() / "rules" / "users"


def user_knobs(**over: Any) -> dict[str, Any]:
    """The repository's user knobs with overrides."""
    k = KnobSnapshot.read_dir(defaults_dir()).area("user")
    k.update(over)
    return k


def env_knobs(**over: Any) -> dict[str, Any]:
    k = KnobSnapshot.read_dir(defaults_dir()).area("env")
    k.update(over)
    return k


def rules(gym: str):
    return load_user_rules_file(RULES_DIR / f"{gym}.yaml")


def travel_task() -> Task:
    return Task(
        "travel",
        "travel-1",
        "train",
        "Book me a trip to Lisbon.",
        [
            Fact(
                "pref.hotel.budget",
                "preference",
                "My hotel budget is under 150 euros a night.",
                ("budget", "hotel", "price"),
            ),
            Fact("pref.flight.airline", "preference", "I prefer flying with TAP.", ("airline", "flight", "carrier")),
            Fact(
                "pref.flight.time", "preference", "I want a morning departure.", ("time", "morning", "depart", "flight")
            ),
            Fact(
                "pref.hotel.stars",
                "preference",
                "The hotel should have at least four stars.",
                ("star", "rating", "hotel", "quality"),
            ),
            Fact("pref.car.size", "preference", "A compact rental car is enough.", ("car", "rental", "size")),
        ],
        secret="flight=F3 hotel=H2 car=C1",
    )


def persuade_task() -> Task:
    """A real persuade task (UserRL's first training task): the claim and reasons a persuadable
    user needs in ``task.data``."""
    from harness.envs.persuade import make_task

    return make_task("userrl", "train", 0)


def task_for(gym: str) -> Task:
    """A task a user of ``gym``'s rule file can serve: persuade's users need a claim and reasons;
    every other gym's users work on any task with facts (the travel one)."""
    return persuade_task() if gym == "persuade" else travel_task()


def intention_task() -> Task:
    return Task(
        "intention",
        "int-1",
        "train",
        "Help me plan a birthday party.",
        [
            Fact(
                "detail.guests", "detail", "About twenty guests are coming.", ("guest", "people", "many", "number"), 1
            ),
            Fact("detail.budget", "detail", "The budget is 300 dollars.", ("budget", "cost", "money", "spend"), 1),
            Fact(
                "detail.venue", "detail", "It will be in our back garden.", ("venue", "where", "place", "location"), 2
            ),
            Fact("detail.theme", "detail", "The theme is pirates.", ("theme", "style", "decoration"), 3),
        ],
        secret="guests: 20; budget: 300; venue: garden; theme: pirates",
    )


def colbench_task(code: str | None = None, prompt: str | None = None) -> Task:
    code = code or (
        "def scale_scores(scores, factor, cap):\n    out = []\n    for s in scores:\n"
        "        v = s * factor\n        out.append(min(v, cap))\n    return out"
    )
    prompt = prompt or "Write a function that scales scores. The signature is: def scale_scores(scores, factor, cap)"
    return Task(
        "colbench",
        "cb-1",
        "train",
        prompt,
        [
            Fact(
                "signature",
                "signature",
                "The function takes the scores, a factor and a cap.",
                ("signature", "argument", "parameter", "input"),
            ),
            Fact(
                "shape", "shape", "The scores come as a list of numbers.", ("list", "input", "type", "format", "score")
            ),
            Fact("return", "return", "It returns a new list with each score scaled.", ("return", "output", "result")),
            Fact(
                "edge",
                "edge_case",
                "Scaled values above the cap are set to the cap.",
                ("cap", "limit", "maximum", "edge"),
            ),
        ],
        secret=code,
        data={"reference": code},
    )


def telepathy_task() -> Task:
    return Task(
        "telepathy",
        "tp-1",
        "train",
        "I am thinking of something. Guess it.",
        [
            Fact("attr.alive", "attribute", "It is alive.", ("alive", "living", "animal")),
        ],
        secret="elephant",
    )


class ToyGym(UserCentricEnv):
    """A minimal gym around a fixed task (name set per instance), for driving users through the env.
    ``dynamic`` (question -> facts or None) plays the gym's ``dynamic_facts`` hook."""

    name = "toy"

    def __init__(self, gym: str, task: Task, dynamic=None, **kw: Any):
        self.name = gym  # instance attribute: the users read env.name
        self._task = task
        self._dynamic = dynamic
        super().__init__(**kw)

    def generate_task(self, split: str, index: int) -> Task:
        return self._task

    def on_answer(self, content: str) -> AnswerResult:
        ok = content.strip() == self._task.secret
        return AnswerResult(float(ok), ok, True, "Thanks.")

    def dynamic_facts(self, question: str):
        return self._dynamic(question) if self._dynamic else None


def telepathy_dynamic(question: str) -> list[Fact]:
    """Yes/no facts for the telepathy task: 'alive'/'animal' questions are yes, others no."""
    m = re.search(r"\bis it (an? )?(\w+)", question.lower())
    if not m:
        return []
    word = m.group(2)
    yes = word in ("alive", "animal", "big", "grey", "gray", "mammal")
    return [Fact(f"q.{word}", "attribute", "Yes." if yes else "No.", (word,))]


def state_with(
    disclosures: int = 0, revealed: dict[str, int] | None = None, turn: int = 0, since: int = 0
) -> EpisodeState:
    return EpisodeState(turn=turn, disclosures=disclosures, revealed=dict(revealed or {}), turns_since_disclosure=since)


def ask_record(turn: int, q: str) -> TurnRecord:
    return TurnRecord(turn, Action("ask", q, f"ASK: {q}"), "", "user")


def colbench_rows(limit: int | None = None) -> list[dict[str, Any]]:
    rows = []
    with COLBENCH_FILE.open() as fh:
        for line in fh:
            rows.append(json.loads(line))
            if limit and len(rows) >= limit:
                break
    return rows


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


class ChatServer:
    """A real OpenAI-compatible ``/v1/chat/completions`` server on loopback (stdlib http.server in a
    thread). ``reply(request_json) -> str`` makes the assistant text; the first ``fail_first``
    requests get HTTP ``fail_status`` and the first ``stall_first`` sleep ``stall_s`` before answering.
    Every request body is kept in ``requests``."""

    def __init__(
        self, reply=None, *, fail_first: int = 0, fail_status: int = 500, stall_first: int = 0, stall_s: float = 0.0
    ):
        import threading
        import time
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.requests: list[dict[str, Any]] = []
        self.reply = reply or (lambda req: "I prefer flying with TAP.")
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                n = len(server.requests)
                server.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
                if n < stall_first:
                    time.sleep(stall_s)
                if n < fail_first:
                    self._send(fail_status, {"error": {"message": "scripted failure", "type": "server_error"}})
                    return
                text = server.reply(body)
                self._send(
                    200,
                    {
                        "id": f"c{n}",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body.get("model"),
                        "choices": [
                            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
                        ],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    },
                )

            def _send(self, status: int, obj: dict[str, Any]) -> None:
                data = json.dumps(obj).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and left

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> ChatServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def tiny_chat_model(chat_template: bool = True):
    """A random 1-layer Llama with a word-level tokenizer built here from ``tokenizers`` (no download)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = (
        "i prefer flying with tap my hotel budget is under 150 euros a night yes no the want morning "
        "departure you user assistant system what which do airline sure maybe not sure it".split()
    )
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[BOS]", "[EOS]", ":", ".", "?", ","] + sorted(set(words)))}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace()])
    tk.decoder = decoders.WordPiece(prefix="##")  # joins word tokens with spaces
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]", bos_token="[BOS]", eos_token="[EOS]"
    )
    if chat_template:
        tok.chat_template = (
            "{% for m in messages %}{{ m['role'] }} : {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}assistant :{% endif %}"
        )
    cfg = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    return model, tok
