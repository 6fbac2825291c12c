"""A scripted model on loopback for the real agent CLIs (Claude Code, Codex).

It speaks the two wire protocols the CLIs use with a custom base URL:

* the Anthropic Messages API (``POST /v1/messages``, plain JSON or streamed server-sent events;
  ``POST /v1/messages/count_tokens``) — Claude Code with ``ANTHROPIC_BASE_URL=http://127.0.0.1:PORT``;
* the OpenAI Responses API (``POST /v1/responses``, streamed) and Chat Completions API
  (``POST /v1/chat/completions``) — Codex with a model provider whose ``base_url`` is
  ``http://127.0.0.1:PORT/v1``.

It plays a script: a list of model turns, each one of

* ``{"tool_calls": [{"name": "Bash", "input": {...}}, ...], "text": "optional preamble"}``;
* ``{"text": "final answer"}`` (the turn ends the agent loop);
* ``{"error": {"status": 400, "type": "invalid_request_error", "message": "..."}}`` (an API error);
* a callable ``turn(request_body) -> one of the above`` (to pick a tool name from the request's
  ``tools``).

Which turn a request gets is read from the request itself: the number of assistant turns already
in the conversation it carries (the CLIs send the whole conversation each time), so retries and
the CLIs' side requests (titles, quota checks: requests without tools) never shift the script. A
side request gets a short text answer. When the script is used up the answer is a final text that
says so and the request is marked ``exhausted``.

Every request is recorded (:attr:`ModelServer.requests`, and a JSON line per request in
``log_path`` when given): path, the headers that identify the client, the body, and the turn played.

Standalone (for trying a CLI by hand)::

    python tests/agents/model_server.py --script turns.json [--port 8765] [--log requests.jsonl]
"""

from __future__ import annotations

import argparse
import itertools
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Sequence, Union

Turn = Union[dict[str, Any], Callable[[dict[str, Any]], dict[str, Any]]]

DEFAULT_USAGE = {"input_tokens": 1200, "output_tokens": 80}
SIDE_TEXT = "ok"
_ids = itertools.count(1)


def _id(prefix: str) -> str:
    return f"{prefix}_{next(_ids):06d}"


# ------------------------------------------------------------------------------ turn counting
def anthropic_turns_done(body: dict[str, Any]) -> int:
    """Assistant turns already in a Messages request."""
    return sum(1 for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "assistant")


def responses_turns_done(body: dict[str, Any]) -> int:
    """Assistant turns already in a Responses request: runs of consecutive model output items
    (assistant messages, function calls, reasoning) in ``input``."""
    items = body.get("input")
    if not isinstance(items, list):
        return 0
    turns, in_turn = 0, False
    for it in items:
        if not isinstance(it, dict):
            continue
        model_item = it.get("type") in ("function_call", "reasoning", "custom_tool_call", "local_shell_call") or (
            it.get("type", "message") == "message" and it.get("role") == "assistant"
        )
        if model_item and not in_turn:
            turns += 1
        in_turn = model_item
    return turns


def chat_turns_done(body: dict[str, Any]) -> int:
    return sum(1 for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "assistant")


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool results a request carries, in order, as ``{"id", "content" (text), "is_error"}``:
    Messages ``tool_result`` blocks, Responses ``function_call_output`` items, Chat ``tool`` messages."""
    out: list[dict[str, Any]] = []
    for m in body.get("messages") or []:
        if not isinstance(m, dict):
            continue
        if m.get("role") == "tool":  # chat completions
            out.append({"id": m.get("tool_call_id"), "content": _text(m.get("content")), "is_error": None})
        content = m.get("content")
        if isinstance(content, list):
            for b in content:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    out.append(
                        {"id": b.get("tool_use_id"), "content": _text(b.get("content")), "is_error": b.get("is_error")}
                    )
    for it in body.get("input") or [] if isinstance(body.get("input"), list) else []:
        if isinstance(it, dict) and it.get("type") in ("function_call_output", "custom_tool_call_output"):
            out.append({"id": it.get("call_id"), "content": _text(it.get("output")), "is_error": None})
    return out


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text(c.get("text", c.get("content", "")) if isinstance(c, dict) else c) for c in content)
    if isinstance(content, dict):
        return _text(content.get("content", content.get("text", json.dumps(content))))
    return "" if content is None else str(content)


# ------------------------------------------------------------------------------ the server
class ModelServer:
    """A threaded HTTP server on 127.0.0.1 playing ``script``; use as a context manager.

    ``usage``: token counts reported for every scripted answer (Claude Code prices them into
    ``total_cost_usd``). ``model``: the model name reported back (default: the one requested).
    """

    def __init__(
        self,
        script: Sequence[Turn],
        *,
        port: int = 0,
        usage: dict[str, int] | None = None,
        model: str | None = None,
        log_path: Path | None = None,
    ):
        self.script = list(script)
        self.usage = dict(usage or DEFAULT_USAGE)
        self.model = model
        self.log_path = Path(log_path) if log_path else None
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="model-server", daemon=True)

    # -- lifecycle
    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """Base URL without a path (Claude Code's ANTHROPIC_BASE_URL); Codex wants ``url + "/v1"``."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ModelServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- what was asked
    def main_requests(self) -> list[dict[str, Any]]:
        """Recorded requests that played a scripted turn (not side requests)."""
        return [r for r in self.requests if r.get("turn") is not None]

    def _record(self, rec: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(rec)
            if self.log_path is not None:
                with open(self.log_path, "a", encoding="utf-8") as f:
                    f.write(json.dumps(rec, default=str) + "\n")

    # -- choosing a turn
    def _turn(self, index: int, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        if index >= len(self.script):
            return {"text": f"(scripted model: the script has only {len(self.script)} turns)"}, True
        t = self.script[index]
        return (t(body) if callable(t) else t), False

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt: str, *args: Any) -> None:  # quiet: requests are recorded instead
                pass

            def _read_body(self) -> dict[str, Any]:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                try:
                    doc = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    doc = {"_raw": raw.decode("utf-8", "replace")}
                return doc if isinstance(doc, dict) else {"_doc": doc}

            def _send_json(self, status: int, doc: dict[str, Any]) -> None:
                data = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _start_sse(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True

            def _sse(self, event: str | None, data: dict[str, Any] | str) -> None:
                payload = data if isinstance(data, str) else json.dumps(data)
                head = f"event: {event}\n" if event else ""
                self.wfile.write(f"{head}data: {payload}\n\n".encode())
                self.wfile.flush()

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                server._record({"time": time.time(), "method": "GET", "path": self.path, "turn": None})
                if self.path.rstrip("/").endswith("/models"):
                    self._send_json(200, {"object": "list", "data": [], "models": []})
                else:
                    self._send_json(404, {"error": {"type": "not_found_error", "message": f"no {self.path}"}})

            def do_HEAD(self) -> None:  # noqa: N802
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self) -> None:  # noqa: N802
                body = self._read_body()
                path = self.path.split("?")[0].rstrip("/")
                rec: dict[str, Any] = {
                    "time": time.time(),
                    "method": "POST",
                    "path": path,
                    "user_agent": self.headers.get("User-Agent"),
                    "auth": bool(self.headers.get("x-api-key") or self.headers.get("Authorization")),
                    "body": body,
                    "turn": None,
                }
                if path.endswith("/messages/count_tokens"):
                    server._record(rec)
                    return self._send_json(200, {"input_tokens": server.usage["input_tokens"]})
                if path.endswith("/messages"):
                    return self._messages(body, rec)
                if path.endswith("/responses"):
                    return self._responses(body, rec)
                if path.endswith("/chat/completions"):
                    return self._chat(body, rec)
                server._record(rec)
                self._send_json(404, {"error": {"type": "not_found_error", "message": f"no {path}"}})

            # ---------------------------------------------------------- Anthropic Messages
            def _messages(self, body: dict[str, Any], rec: dict[str, Any]) -> None:
                model = server.model or body.get("model") or "scripted"
                if body.get("tools"):
                    rec["turn"] = anthropic_turns_done(body)
                    turn, rec["exhausted"] = server._turn(rec["turn"], body)
                else:
                    turn = {"text": SIDE_TEXT}
                server._record(rec)
                if "error" in turn:
                    e = turn["error"]
                    return self._send_json(
                        int(e.get("status", 400)),
                        {
                            "type": "error",
                            "error": {"type": e.get("type", "invalid_request_error"), "message": e["message"]},
                        },
                    )
                blocks: list[dict[str, Any]] = []
                if turn.get("text"):
                    blocks.append({"type": "text", "text": turn["text"]})
                for c in turn.get("tool_calls", []):
                    blocks.append({"type": "tool_use", "id": _id("toolu"), "name": c["name"], "input": c["input"]})
                stop = "tool_use" if turn.get("tool_calls") else "end_turn"
                usage = {**server.usage, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
                msg_id = _id("msg")
                if not body.get("stream"):
                    return self._send_json(
                        200,
                        {
                            "id": msg_id,
                            "type": "message",
                            "role": "assistant",
                            "model": model,
                            "content": blocks,
                            "stop_reason": stop,
                            "stop_sequence": None,
                            "usage": usage,
                        },
                    )
                self._start_sse()
                start = {**usage, "output_tokens": 1}
                self._sse(
                    "message_start",
                    {
                        "type": "message_start",
                        "message": {
                            "id": msg_id,
                            "type": "message",
                            "role": "assistant",
                            "model": model,
                            "content": [],
                            "stop_reason": None,
                            "stop_sequence": None,
                            "usage": start,
                        },
                    },
                )
                for i, b in enumerate(blocks):
                    if b["type"] == "text":
                        self._sse(
                            "content_block_start",
                            {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}},
                        )
                        self._sse(
                            "content_block_delta",
                            {
                                "type": "content_block_delta",
                                "index": i,
                                "delta": {"type": "text_delta", "text": b["text"]},
                            },
                        )
                    else:
                        self._sse(
                            "content_block_start",
                            {
                                "type": "content_block_start",
                                "index": i,
                                "content_block": {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}},
                            },
                        )
                        js = json.dumps(b["input"])
                        for k in range(0, len(js), 16):  # in pieces, as a real stream sends them
                            self._sse(
                                "content_block_delta",
                                {
                                    "type": "content_block_delta",
                                    "index": i,
                                    "delta": {"type": "input_json_delta", "partial_json": js[k : k + 16]},
                                },
                            )
                    self._sse("content_block_stop", {"type": "content_block_stop", "index": i})
                self._sse(
                    "message_delta",
                    {
                        "type": "message_delta",
                        "delta": {"stop_reason": stop, "stop_sequence": None},
                        "usage": {"output_tokens": usage["output_tokens"]},
                    },
                )
                self._sse("message_stop", {"type": "message_stop"})

            # ---------------------------------------------------------- OpenAI Responses
            def _responses(self, body: dict[str, Any], rec: dict[str, Any]) -> None:
                model = server.model or body.get("model") or "scripted"
                if body.get("tools"):
                    rec["turn"] = responses_turns_done(body)
                    turn, rec["exhausted"] = server._turn(rec["turn"], body)
                else:
                    turn = {"text": SIDE_TEXT}
                server._record(rec)
                if "error" in turn:
                    e = turn["error"]
                    return self._send_json(
                        int(e.get("status", 400)),
                        {
                            "error": {
                                "type": e.get("type", "invalid_request_error"),
                                "message": e["message"],
                                "code": None,
                            }
                        },
                    )
                items: list[dict[str, Any]] = []
                if turn.get("text"):
                    items.append(
                        {
                            "type": "message",
                            "id": _id("msg"),
                            "role": "assistant",
                            "status": "completed",
                            "content": [{"type": "output_text", "text": turn["text"], "annotations": []}],
                        }
                    )
                for c in turn.get("tool_calls", []):
                    items.append(
                        {
                            "type": "function_call",
                            "id": _id("fc"),
                            "call_id": _id("call"),
                            "name": c["name"],
                            "arguments": json.dumps(c["input"]),
                            "status": "completed",
                        }
                    )
                u = server.usage
                usage = {
                    "input_tokens": u["input_tokens"],
                    "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens": u["output_tokens"],
                    "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": u["input_tokens"] + u["output_tokens"],
                }
                resp_id = _id("resp")
                response = {"id": resp_id, "object": "response", "model": model, "status": "in_progress", "output": []}
                if not body.get("stream"):
                    return self._send_json(200, {**response, "status": "completed", "output": items, "usage": usage})
                self._start_sse()
                self._sse("response.created", {"type": "response.created", "response": response})
                for i, it in enumerate(items):
                    self._sse(
                        "response.output_item.added",
                        {"type": "response.output_item.added", "output_index": i, "item": it},
                    )
                    if it["type"] == "message":
                        self._sse(
                            "response.output_text.delta",
                            {
                                "type": "response.output_text.delta",
                                "item_id": it["id"],
                                "output_index": i,
                                "content_index": 0,
                                "delta": it["content"][0]["text"],
                            },
                        )
                    self._sse(
                        "response.output_item.done",
                        {"type": "response.output_item.done", "output_index": i, "item": it},
                    )
                done = {**response, "status": "completed", "output": items, "usage": usage}
                self._sse("response.completed", {"type": "response.completed", "response": done})

            # ---------------------------------------------------------- OpenAI Chat Completions
            def _chat(self, body: dict[str, Any], rec: dict[str, Any]) -> None:
                model = server.model or body.get("model") or "scripted"
                if body.get("tools"):
                    rec["turn"] = chat_turns_done(body)
                    turn, rec["exhausted"] = server._turn(rec["turn"], body)
                else:
                    turn = {"text": SIDE_TEXT}
                server._record(rec)
                if "error" in turn:
                    e = turn["error"]
                    return self._send_json(
                        int(e.get("status", 400)),
                        {
                            "error": {
                                "type": e.get("type", "invalid_request_error"),
                                "message": e["message"],
                                "code": None,
                            }
                        },
                    )
                calls = [
                    {
                        "id": _id("call"),
                        "type": "function",
                        "function": {"name": c["name"], "arguments": json.dumps(c["input"])},
                    }
                    for c in turn.get("tool_calls", [])
                ]
                msg: dict[str, Any] = {"role": "assistant", "content": turn.get("text") or None}
                if calls:
                    msg["tool_calls"] = calls
                finish = "tool_calls" if calls else "stop"
                u = server.usage
                usage = {
                    "prompt_tokens": u["input_tokens"],
                    "completion_tokens": u["output_tokens"],
                    "total_tokens": u["input_tokens"] + u["output_tokens"],
                }
                cid = _id("chatcmpl")
                if not body.get("stream"):
                    return self._send_json(
                        200,
                        {
                            "id": cid,
                            "object": "chat.completion",
                            "model": model,
                            "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
                            "usage": usage,
                        },
                    )
                self._start_sse()
                base = {"id": cid, "object": "chat.completion.chunk", "model": model}
                delta: dict[str, Any] = {"role": "assistant"}
                if msg["content"]:
                    delta["content"] = msg["content"]
                if calls:
                    delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(calls)]
                self._sse(None, {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
                self._sse(
                    None, {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}], "usage": usage}
                )
                self._sse(None, "[DONE]")

        return Handler


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Serve a scripted model on 127.0.0.1 (Messages, Responses, Chat APIs).")
    ap.add_argument("--script", required=True, type=Path, help="JSON file: a list of turns")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--log", type=Path, default=None, help="append each request here as a JSON line")
    a = ap.parse_args(argv)
    script = json.loads(a.script.read_text(encoding="utf-8"))
    if not isinstance(script, list):
        ap.error(f"{a.script}: the script must be a JSON list of turns")
    srv = ModelServer(script, port=a.port, log_path=a.log)
    print(f"scripted model on {srv.url} (Claude Code: ANTHROPIC_BASE_URL={srv.url}; Codex: base_url {srv.url}/v1)")
    print("Ctrl-C stops", flush=True)
    try:
        srv._httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
