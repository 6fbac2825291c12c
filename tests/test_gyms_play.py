"""``eau play``: the real console script driven through stdin (symbolic and LLM users)."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest
from typer.testing import CliRunner

from harness.cli.main import app

EAU = shutil.which("eau")
needs_eau = pytest.mark.skipif(EAU is None, reason="the eau console script is not installed")
ASPECT_PREFIX = {"flight": "F", "hotel": "H", "restaurant": "R", "car": "C", "tour": "T"}


def eau(*args: str, stdin: str = "", timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([EAU, *args], input=stdin, capture_output=True, text=True, timeout=timeout)


@needs_eau
def test_symbolic_episode_shows_observations_facts_rewards_and_summary():
    # seed 1 draws the same task as an in-process reset: learn it to play the best booking.
    from gyms_support import env_of

    env = env_of("travel")
    env.reset(seed=1)
    task = env.task
    fact = task.facts[0]
    aspect = fact.key.split(".")[1]
    lines = [
        f"ASK: Do you have a preference for the {aspect} {fact.keywords[1]}?",
        "hello?",
        f"SEARCH: {aspect}",
        f"ANSWER: {task.secret.split(', ')[0]},\\",
        " " + ", ".join(task.secret.split(", ")[1:]),
    ]
    res = eau("play", "travel", "--seed", "1", stdin="\n".join(lines) + "\n")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert task.prompt in out and "user symbolic" in out
    assert f"revealed {fact.key} (preference): {fact.text}" in out
    assert "Format error (no_action_tag)" in out and "format_error -0.100" in out
    assert f"{ASPECT_PREFIX[aspect]}1:" in out  # the search listing
    assert "=== episode summary ===" in out and "success: True" in out and "format_errors: 1" in out


@needs_eau
def test_json_output_and_end_of_input_before_an_answer():
    res = eau("play", "function", "--seed", "4", "--split", "eval", "--json", stdin="ASK: f(1, 2, 3, 4)?\n")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    ep = doc["episode"]
    assert doc["ok"] and ep["task"]["split"] == "eval" and ep["answered"] is False and ep["questions"] == 1
    assert "end of input" in res.stderr and "f(1, 2, 3, 4) = " in res.stderr


@needs_eau
def test_tool_call_format_and_multiline_answer():
    call = '<tool_call>{"name": "interact", "arguments": {"choice": "ask", "content": "Is it alive?"}}</tool_call>'
    res = eau("play", "telepathy", "--format", "tool_call", "--seed", "2", stdin=call + "\nANSWER: a\\\nunicorn\n")
    assert res.returncode == 0, res.stderr
    assert "Use the interact tool" in res.stdout and "revealed attr.alive" in res.stdout
    assert "That is not something I know" in res.stdout and "answered: True" in res.stdout


@pytest.mark.parametrize(
    "args,code,msg",
    [
        (["play", "chess"], 5, "unknown gym 'chess'"),
        (["play", "travel", "--user", "robot"], 2, "--user 'robot' is not allowed"),
        (["play", "travel", "--split", "test"], 2, "--split 'test' is not allowed"),
        (["play", "travel", "--user", "llm"], 2, "needs an OpenAI-compatible endpoint"),
    ],
)
def test_bad_options_exit_with_clear_errors(args, code, msg):
    # In process (typer's runner) to keep the file fast; the episodes above run the real console script.
    res = CliRunner().invoke(app, args)
    assert res.exit_code == code and msg in res.stderr


def test_invalid_knobs_folder_is_refused(knobs_dir):
    (knobs_dir / "env.yaml").write_text("max_steps: -4\n")
    res = CliRunner().invoke(app, ["play", "travel", "--knobs-dir", str(knobs_dir), "--json"])
    assert res.exit_code == 4 and "max_steps" in res.stderr and json.loads(res.stdout)["ok"] is False


class _ChatHandler(BaseHTTPRequestHandler):
    """A minimal OpenAI-compatible /v1/chat/completions endpoint that answers with a fixed reply."""

    reply = "Honestly, I mostly care about having a pool at the hotel."
    requests: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        doc = {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": self.reply}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
        data = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def chat_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ChatHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


@needs_eau
def test_llm_user_through_an_openai_compatible_endpoint(chat_server):
    _ChatHandler.requests.clear()
    res = eau(
        "play",
        "travel",
        "--user",
        "llm",
        "--llm-url",
        chat_server,
        "--llm-model",
        "tiny-user",
        "--seed",
        "1",
        stdin="ASK: What matters most to you about the hotel?\n",
    )
    assert res.returncode == 0, res.stderr
    assert "user llm" in res.stdout and _ChatHandler.reply in res.stdout
    assert _ChatHandler.requests and _ChatHandler.requests[0]["model"] == "tiny-user"
