"""The loopback Messages fixture on its own (stdlib HTTP client, no product)."""

from __future__ import annotations

import asyncio
import http.client
import json
from pathlib import Path
from typing import Any

from dsh.subagent_claude_code.testing import (
    Behaviour,
    FakeMessagesServer,
    RecordedRequest,
    hermetic_env,
)


def _post(
    server: FakeMessagesServer, body: dict[str, Any], query: str = "?beta=true"
) -> tuple[int, dict[str, str], bytes]:
    port = int(server.base_url.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(
            "POST",
            f"/v1/messages{query}",
            json.dumps(body),
            {"x-api-key": "k", "anthropic-version": "2023-06-01"},
        )
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def _body(task: str, stream: bool) -> dict[str, Any]:
    return {
        "model": "m-1",
        "stream": stream,
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "<reminder>"}, {"type": "text", "text": task}],
            },
            {"role": "system", "content": "env"},
        ],
    }


def _events(raw: bytes) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in raw.decode().splitlines() if line.startswith("data: ")]


def test_sse_json_errors_tool_use_and_recording(tmp_path: Path) -> None:
    with FakeMessagesServer() as server:
        server.queue_text("hello ✓", match="second")
        server.queue_tool_call("Write", {"file_path": "a", "content": "b"})
        server.queue_http_error(429, "slow down")
        status, headers, raw = _post(server, _body("second task", True))
        assert status == 200
        assert headers["Content-Type"] == "text/event-stream"
        events = _events(raw)
        assert [e["type"] for e in events] == [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
        assert events[2]["delta"] == {"type": "text_delta", "text": "hello ✓"}
        status, _, raw = _post(server, _body("first", False), query="")
        message = json.loads(raw)
        assert status == 200
        assert message["content"][0]["name"] == "Write"
        assert message["content"][0]["input"] == {"file_path": "a", "content": "b"}
        assert message["stop_reason"] == "tool_use"
        status, _, raw = _post(server, _body("third", True))
        assert status == 429
        assert json.loads(raw)["error"]["message"] == "slow down"
        status, _, _ = _post(server, _body("none left", True))
        assert status == 500
        requests = server.requests
        assert [r.task for r in requests] == ["second task", "first", "third", "none left"]
        assert [r.query for r in requests] == ["beta=true", "", "beta=true", "beta=true"]
        assert requests[0].headers["x-api-key"] == "k"
        assert requests[0].stream
        assert not requests[1].stream
        assert requests[0].model == "m-1"
    env = hermetic_env(tmp_path, "http://127.0.0.1:9")
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert env["CLAUDE_CODE_MAX_RETRIES"] == "0"
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9"
    assert env["ANTHROPIC_API_KEY"]
    assert int(env["API_TIMEOUT_MS"]) > 0
    assert Path(env["HOME"]).is_dir()
    assert Path(env["CLAUDE_CONFIG_DIR"]).is_dir()


def test_drop_and_stall_release() -> None:
    with FakeMessagesServer(default=Behaviour("text", text="fallback")) as server:
        server.queue_drop("part")
        port = int(server.base_url.rsplit(":", 1)[1])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("POST", "/v1/messages?beta=true", json.dumps(_body("t", True)))
        response = conn.getresponse()
        data = b""
        try:
            data = response.read()
        except http.client.IncompleteRead as error:
            data = error.partial
        conn.close()
        assert b"message_stop" not in data
        assert b"message_start" in data
        server.queue_stall()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("POST", "/v1/messages", json.dumps(_body("t", True)))
        assert asyncio.run(server.wait_for_requests(2, timeout=5))
        server.release_stalls()
        try:
            conn.getresponse()
            stalled_answered = True
        except (http.client.RemoteDisconnected, ConnectionError):
            stalled_answered = False
        conn.close()
        assert not stalled_answered
        _, _, raw = _post(server, _body("t", True))
        assert _events(raw)[2]["delta"]["text"] == "fallback"


def test_tool_results_are_the_tool_result_texts_in_order() -> None:
    body = {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "the task"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "x"}]},
            {"role": "user", "content": [{"type": "tool_result", "content": "first"}]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "content": [{"type": "text", "text": "second"}]},
                    {"type": "text", "text": "not a result"},
                ],
            },
        ]
    }
    request = RecordedRequest("POST", "/v1/messages", "", {}, body, b"")
    assert request.tool_results == ["first", "second"]
    assert RecordedRequest("POST", "/v1/messages", "", {}, None, b"").tool_results == []
