"""Both loopback model servers script the same way (issue 15), over HTTP and without a product.

One scenario runs against ``FakeResponsesServer`` and ``FakeMessagesServer`` alike, through the
names they share: ``queue_text(..., match=)``, ``route=``, ``default=``, the HTTP 500 of a dry
script, ``requests`` / ``all_requests`` / ``pending`` / ``wait_for_requests``.
"""

from __future__ import annotations

import asyncio
import http.client
import json
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

import pytest

from dsh.subagent.testing import NO_REPLY_MESSAGE, ScriptedModelServer
from dsh.subagent_claude_code.testing import Behaviour as ClaudeReply
from dsh.subagent_claude_code.testing import FakeMessagesServer
from dsh.subagent_codex.testing import FakeResponsesServer, MessageItem, Reply

Server = Any  # either fake; both are ScriptedModelServer subclasses with the same helpers


@dataclass(frozen=True)
class Wire:
    """How to reach one fake: its model path, a request body for a task, the answer text."""

    path: str
    body: Callable[[str], dict[str, Any]]
    answer: Callable[[bytes], str]
    reply: Callable[[str], Any]
    make: Callable[..., AbstractAsyncContextManager[Server]]


def _codex_answer(raw: bytes) -> str:
    for line in raw.decode().splitlines():
        if line.startswith("data: ") and '"response.output_item.done"' in line:
            return str(json.loads(line[6:])["item"]["content"][0]["text"])
    raise AssertionError(raw)


CODEX = Wire(
    path="/v1/responses",
    body=lambda task: {
        "model": "m",
        "stream": True,
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "ctx"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": task}]},
        ],
    },
    answer=_codex_answer,
    reply=lambda text: Reply((MessageItem(text),)),
    make=FakeResponsesServer,
)
CLAUDE = Wire(
    path="/v1/messages",
    body=lambda task: {
        "model": "m",
        "stream": False,
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "<r>"}, {"type": "text", "text": task}],
            }
        ],
    },
    answer=lambda raw: str(json.loads(raw)["content"][0]["text"]),
    reply=lambda text: ClaudeReply("text", text=text),
    make=FakeMessagesServer,
)


def _call(server: Server, method: str, path: str, body: dict[str, Any] | None) -> tuple[int, bytes]:
    port = int(server.base_url.split(":")[2].split("/")[0])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, None if body is None else json.dumps(body))
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


async def _ask(server: Server, wire: Wire, task: str) -> tuple[int, bytes]:
    return await asyncio.to_thread(_call, server, "POST", wire.path, wire.body(task))


@pytest.mark.parametrize("wire", [CODEX, CLAUDE], ids=["codex", "claude-code"])
async def test_queue_match_dry_script_and_the_recorded_views(wire: Wire) -> None:
    async with wire.make() as server:
        assert isinstance(server, ScriptedModelServer)
        server.queue_text("for beta", match="BETA")
        server.queue_text("first")
        waiting = asyncio.ensure_future(server.wait_for_requests(3, timeout=20))
        answers = []
        for task in ("ALPHA task", "the BETA task"):
            status, raw = await _ask(server, wire, task)
            assert status == 200
            answers.append(wire.answer(raw))
        assert answers == ["first", "for beta"]
        status, raw = await _ask(server, wire, "GAMMA")
        assert status == 500
        assert NO_REPLY_MESSAGE in raw.decode()
        assert [r.task for r in await waiting] == ["ALPHA task", "the BETA task", "GAMMA"]
        assert server.pending == 0
        status, _ = await asyncio.to_thread(_call, server, "GET", "/elsewhere", None)
        assert status == 404
        assert [r.path for r in server.all_requests][-1] == "/elsewhere"
        assert [r.task for r in server.requests] == ["ALPHA task", "the BETA task", "GAMMA"]
        assert all(r.body["model"] == "m" and r.raw_body for r in server.requests)


@pytest.mark.parametrize("wire", [CODEX, CLAUDE], ids=["codex", "claude-code"])
async def test_route_first_then_the_queue_then_the_default(wire: Wire) -> None:
    def route(request: Any) -> Any:
        return wire.reply("routed") if request.task == "ROUTE" else None

    async with wire.make(default=wire.reply("fallback"), route=route) as server:
        server.queue_text("queued")
        answers = [wire.answer((await _ask(server, wire, t))[1]) for t in ("ROUTE", "x", "y")]
        assert answers == ["routed", "queued", "fallback"]
        with pytest.raises(TimeoutError):
            await server.wait_for_requests(4, timeout=0.1)
