"""The scripted model server (tests/agents/model_server.py) speaks each API the way a real client reads
it: the OpenAI SDK for the Responses and Chat Completions APIs (streamed and not), and the Anthropic
Messages API's server-sent events, parsed here as Claude Code parses them. The agent CLIs themselves
run against it in tests/test_supervise_clients.py."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import openai
import pytest
from agents.model_server import ModelServer, tool_results

TOOL = {"type": "function", "name": "exec_command", "parameters": {"type": "object", "properties": {}}}
CHAT_TOOL = {"type": "function", "function": {"name": "exec_command", "parameters": {"type": "object"}}}
SCRIPT = [
    {"text": "Looking first.", "tool_calls": [{"name": "exec_command", "input": {"cmd": "eau status --json"}}]},
    {"text": "Done: no intervention."},
    {"error": {"status": 400, "type": "invalid_request_error", "message": "scripted refusal"}},
]


def post(url: str, body: dict) -> tuple[int, bytes]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def sse_events(raw: bytes) -> list[tuple[str, dict]]:
    out = []
    for block in raw.decode().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.strip().splitlines() if ": " in line)
        if "data" in lines:
            out.append((lines.get("event", ""), json.loads(lines["data"])))
    return out


def test_responses_api_through_the_openai_sdk():
    with ModelServer(SCRIPT, usage={"input_tokens": 10, "output_tokens": 3}) as srv:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="k", max_retries=0)
        user = [{"role": "user", "content": "supervise"}]
        events = list(client.responses.create(model="m", input=user, tools=[TOOL], stream=True))
        done = [e.item for e in events if e.type == "response.output_item.done"]
        assert [i.type for i in done] == ["message", "function_call"]
        assert done[0].content[0].text == "Looking first."
        call = done[1]
        assert call.name == "exec_command" and json.loads(call.arguments) == {"cmd": "eau status --json"}
        assert events[-1].type == "response.completed" and events[-1].response.usage.total_tokens == 13
        # the next request carries the call and its output: the second turn is played
        history = user + [
            {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
            {"type": "function_call_output", "call_id": call.call_id, "output": "ok: step 3"},
        ]
        second = client.responses.create(model="m", input=history, tools=[TOOL])
        assert second.output_text == "Done: no intervention."
        with pytest.raises(openai.BadRequestError, match="scripted refusal"):
            client.responses.create(model="m", input=history + [{"role": "assistant", "content": "x"}], tools=[TOOL])
        side = client.responses.create(model="m", input="a title please")  # no tools: a side request
        assert side.output_text == "ok"
    assert [r["turn"] for r in srv.requests] == [0, 1, 2, None]
    assert tool_results(srv.requests[1]["body"]) == [{"id": call.call_id, "content": "ok: step 3", "is_error": None}]


def test_chat_completions_through_the_openai_sdk():
    with ModelServer(SCRIPT) as srv:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="k", max_retries=0)
        msgs = [{"role": "user", "content": "supervise"}]
        chunks = list(client.chat.completions.create(model="m", messages=msgs, tools=[CHAT_TOOL], stream=True))
        calls = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or []) if c.choices]
        assert calls[0].function.name == "exec_command"
        assert chunks[-1].choices[0].finish_reason == "tool_calls"
        msgs += [
            {"role": "assistant", "content": None, "tool_calls": [calls[0].model_dump(exclude={"index"})]},
            {"role": "tool", "tool_call_id": calls[0].id, "content": "ok"},
        ]
        final = client.chat.completions.create(model="m", messages=msgs, tools=[CHAT_TOOL])
        assert final.choices[0].message.content == "Done: no intervention." and final.usage.prompt_tokens > 0
    assert [r["turn"] for r in srv.requests] == [0, 1]


def test_messages_api_streams_tool_use_as_claude_code_reads_it():
    body = {"model": "claude-x", "max_tokens": 100, "stream": True, "tools": [{"name": "Bash"}]}
    body["messages"] = [{"role": "user", "content": "supervise"}]
    with ModelServer(SCRIPT) as srv:
        status, raw = post(srv.url + "/v1/messages", body)
        assert status == 200
        events = sse_events(raw)
        kinds = [k for k, _ in events]
        assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
        assert all(k == d["type"] for k, d in events)
        # the tool input arrives in pieces; joined they are the scripted input
        start = next(d for k, d in events if k == "content_block_start" and d["content_block"]["type"] == "tool_use")
        idx = start["index"]
        parts = [d["delta"]["partial_json"] for k, d in events if k == "content_block_delta" and d["index"] == idx]
        assert len(parts) > 1 and json.loads("".join(parts)) == {"cmd": "eau status --json"}
        assert events[-2][1]["delta"]["stop_reason"] == "tool_use"
        # plain JSON (not streamed), the next turn: the assistant turn is in the history
        tool_id = start["content_block"]["id"]
        body2 = {**body, "stream": False}
        body2["messages"] = body["messages"] + [
            {"role": "assistant", "content": [{"type": "tool_use", "id": tool_id, "name": "Bash", "input": {}}]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": "denied", "is_error": True}],
            },
        ]
        status, raw = post(srv.url + "/v1/messages", body2)
        doc = json.loads(raw)
        assert status == 200 and doc["content"] == [{"type": "text", "text": "Done: no intervention."}]
        assert doc["stop_reason"] == "end_turn" and doc["usage"]["input_tokens"] > 0
        body3 = {**body2, "messages": body2["messages"] + [{"role": "assistant", "content": "x"}]}
        status, raw = post(srv.url + "/v1/messages", body3)
        assert status == 400 and json.loads(raw)["error"]["message"] == "scripted refusal"
        status, raw = post(srv.url + "/v1/messages", {**body3, "messages": body3["messages"] * 2})
        assert json.loads(raw)["content"][0]["text"].startswith("(scripted model: the script has only 3 turns)")
        status, raw = post(srv.url + "/v1/messages/count_tokens", body)
        assert status == 200 and json.loads(raw)["input_tokens"] > 0
    assert [r["turn"] for r in srv.main_requests()] == [0, 1, 2, 4] and srv.requests[3]["exhausted"]
    assert tool_results(srv.requests[1]["body"]) == [{"id": tool_id, "content": "denied", "is_error": True}]
