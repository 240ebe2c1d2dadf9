"""A loopback OpenAI Responses API (``POST .../responses`` with SSE) built on asyncio streams.

It scripts like every dsh fake model server (``dsh.subagent.testing.ScriptedModelServer``): an
ordered queue of replies, ``match=`` per task, an optional ``route``, a ``default``, then an HTTP
500. Everything is bounded: header and body sizes, the number of recorded requests, read timeouts
and stall durations.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self, TypeAlias

from dsh.subagent.testing import NO_REPLY_MESSAGE, ModelRequest, ScriptedModelServer

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 32 * 1024 * 1024
READ_TIMEOUT_S = 30.0
MAX_STALL_S = 120.0


_USAGE = {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}


@dataclass(frozen=True)
class MessageItem:
    """An assistant message output item, with an optional Codex ``phase``."""

    text: str
    phase: str | None = None


@dataclass(frozen=True)
class FunctionCallItem:
    """A function-call output item, e.g. ``exec_command`` with ``{"cmd": "..."}``.

    ``namespace`` names the tool namespace of the call: Codex offers an MCP server's tools in
    the namespace ``mcp__<server>`` and rejects a call to one of them that carries none.
    """

    name: str
    arguments: Mapping[str, Any] | str
    call_id: str | None = None
    namespace: str | None = None


OutputItem: TypeAlias = MessageItem | FunctionCallItem


@dataclass(frozen=True)
class Reply:
    """A 200 SSE stream: one ``response.output_item.done`` per item, then ``response.completed``."""

    items: Sequence[OutputItem] = ()


@dataclass(frozen=True)
class HttpStatus:
    """A plain HTTP error status with a body (a mapping is sent as JSON)."""

    status: int
    body: Mapping[str, Any] | str | bytes = b""


@dataclass(frozen=True)
class ResponseFailed:
    """A 200 SSE stream ending in ``response.failed`` with ``error.code``."""

    code: str
    message: str = "the fake model failed"
    items: Sequence[OutputItem] = ()


@dataclass(frozen=True)
class Drop:
    """A 200 SSE stream that sends ``items`` and closes the socket before ``response.completed``."""

    items: Sequence[OutputItem] = ()


@dataclass(frozen=True)
class Stall:
    """A 200 SSE stream that sends ``items`` and then goes silent for ``seconds`` (bounded)."""

    items: Sequence[OutputItem] = ()
    seconds: float = 60.0


@dataclass(frozen=True)
class Trickle:
    """A 200 SSE stream that sends one assistant message as ``pieces``, one every ``interval_s``
    (``response.output_text.delta`` events), then the message and ``response.completed``: a
    slow model that never stops talking. At most ``MAX_STALL_S`` in all."""

    pieces: Sequence[str]
    interval_s: float = 1.0


Behaviour: TypeAlias = Reply | HttpStatus | ResponseFailed | Drop | Stall | Trickle


@dataclass(frozen=True)
class RecordedRequest(ModelRequest):
    """One request as the server saw it (see ``ModelRequest``: ``body`` is the parsed JSON)."""

    @property
    def task(self) -> str | None:
        """The last text part of the last ``user`` message in ``input``: the run's task.

        A follow-up request of the same turn (after a function call) carries the same task.
        """
        items = self.body.get("input") if isinstance(self.body, dict) else None
        for item in reversed(items if isinstance(items, list) else []):
            if isinstance(item, dict) and item.get("role") == "user":
                return _last_text(item.get("content"))
        return None


def _last_text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else []
    texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
    return texts[-1] if texts else None


_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found"}
_REASONS |= {426: "Upgrade Required"}
_REASONS |= {413: "Payload Too Large", 429: "Too Many Requests", 500: "Internal Server Error"}
_REASONS |= {502: "Bad Gateway", 503: "Service Unavailable"}


class FakeResponsesServer(ScriptedModelServer[Behaviour, RecordedRequest]):
    """An OpenAI Responses API on 127.0.0.1 serving scripted replies (``Behaviour``).

    Use ``async with FakeResponsesServer() as server:`` (or ``await start()`` / ``await stop()``),
    point Codex at ``server.base_url`` (e.g. through ``write_codex_home``), script it with
    ``queue(...)`` or the ``queue_*`` helpers (each takes ``match=``), ``route=`` and ``default=``
    as ``ScriptedModelServer`` describes, and read ``requests`` (the ``POST .../responses``
    calls) afterwards. A stall ends after its ``seconds`` (at most ``MAX_STALL_S``), at
    ``release_stalls()`` or at ``stop()``.

    Codex's built-in ``openai`` provider first asks for a WebSocket (``GET .../responses`` with
    ``Upgrade: websocket``); the server answers ``websocket_status`` (426 by default, after which
    Codex falls back to HTTP at once; a 404 costs it about 6.5 s of retries first). The upgrade
    requests are recorded with the other non-model requests, never in ``requests``.
    """

    def __init__(
        self,
        *,
        default: Behaviour | None = None,
        route: Callable[[RecordedRequest], Behaviour | None] | None = None,
        websocket_status: int = 426,
        usage: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(default=default, route=route)
        self.usage: dict[str, Any] = dict(_USAGE if usage is None else usage)
        """The Responses API ``usage`` every ``response.completed`` reports."""
        self.headers: dict[str, str] = {}
        """Extra response headers on every answer (an HTTP error's too): the account's rate-limit
        headers the real endpoint sends (``x-codex-primary-used-percent``, ...), for example."""
        self._websocket_status = websocket_status
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._stalls_released = asyncio.Event()
        self._ids = itertools.count(1)
        self._port = 0

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        if self._server is not None:
            return
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self._port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        server, self._server = self._server, None
        self._stalls_released.set()
        if server is None:
            return
        server.close()
        handlers = list(self._handlers)
        if handlers:
            # Released stalls end on their own first; cancelling a handler that is still in
            # its stall makes asyncio log the cancelled connection task as an ERROR.
            await asyncio.wait(handlers, timeout=0.5)
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        await server.wait_closed()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    @property
    def port(self) -> int:
        if not self._port:
            raise RuntimeError("FakeResponsesServer is not started")
        return self._port

    @property
    def base_url(self) -> str:
        """The provider ``base_url`` Codex should use (ends in ``/v1``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    # -- scripting helpers (the names every dsh fake model server offers) -------------------
    def queue_text(self, text: str, *, phase: str | None = None, match: str | None = None) -> None:
        """An answer: one assistant message (with an optional Codex ``phase``)."""
        self.queue(Reply((MessageItem(text, phase),)), match=match)

    def queue_tool_call(
        self,
        name: str,
        arguments: Mapping[str, Any] | str,
        *,
        call_id: str | None = None,
        match: str | None = None,
    ) -> None:
        """A function call (e.g. ``exec_command`` with ``{"cmd": "..."}``)."""
        self.queue(Reply((FunctionCallItem(name, arguments, call_id),)), match=match)

    def queue_http_error(
        self, status: int, message: str = "fake error", *, match: str | None = None
    ) -> None:
        """An HTTP error with an OpenAI-shaped JSON error body carrying ``message``."""
        self.queue(HttpStatus(status, _error_body(message)), match=match)

    def queue_drop(self, partial_text: str = "partial", *, match: str | None = None) -> None:
        """Send the start of an answer, then close the connection mid-stream."""
        self.queue(Drop((MessageItem(partial_text),)), match=match)

    def queue_stall(self, *, seconds: float | None = None, match: str | None = None) -> None:
        """Accept the request and go silent: for ``seconds`` if set, else until released or
        stopped (either way at most ``MAX_STALL_S``)."""
        self.queue(Stall((), MAX_STALL_S if seconds is None else seconds), match=match)

    def queue_trickle(
        self, pieces: Sequence[str], *, interval_s: float = 1.0, match: str | None = None
    ) -> None:
        """An answer streamed as ``pieces``, one every ``interval_s`` (a slow, live model)."""
        self.queue(Trickle(tuple(pieces), interval_s), match=match)

    def queue_failed(
        self, code: str, message: str = "the fake model failed", *, match: str | None = None
    ) -> None:
        """A stream ending in ``response.failed`` with ``error.code`` (Codex only)."""
        self.queue(ResponseFailed(code, message), match=match)

    def release_stalls(self) -> None:
        """End every stalled request now; call it on the server's loop."""
        released, self._stalls_released = self._stalls_released, asyncio.Event()
        released.set()

    # -- HTTP ------------------------------------------------------------------------------
    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._serve(reader, writer)
        except (
            ConnectionError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            TimeoutError,
            ValueError,
        ):
            pass
        finally:
            self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async with asyncio.timeout(READ_TIMEOUT_S):
            head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > MAX_HEADER_BYTES:
            raise ValueError("header too large")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _version = lines[0].split(" ", 2)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        async with asyncio.timeout(READ_TIMEOUT_S):
            body = await self._read_body(reader, headers)
        parsed: Any = None
        if body:
            with contextlib.suppress(ValueError, UnicodeDecodeError):
                parsed = json.loads(body)
        route, _, query = path.partition("?")
        request = RecordedRequest(method, route, query, headers, parsed, body)
        if not _is_responses(method, route):
            self._record(request, model_call=False)
            if _is_websocket_upgrade(method, route, headers):
                body = json.dumps(_error_body("websocket not offered")).encode()
                await _plain(writer, self._websocket_status, body)
                return
            await _plain(writer, 404, b'{"error":{"message":"not found"}}')
            return
        behaviour = self._answer(request)
        if behaviour is None:
            await _plain(writer, 500, json.dumps(_error_body(NO_REPLY_MESSAGE)).encode())
            return
        await self._respond(writer, behaviour)

    async def _read_body(self, reader: asyncio.StreamReader, headers: Mapping[str, str]) -> bytes:
        if headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = bytearray()
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await reader.readuntil(b"\r\n")
                    return bytes(chunks)
                if len(chunks) + size > MAX_BODY_BYTES:
                    raise ValueError("body too large")
                chunks += await reader.readexactly(size)
                await reader.readexactly(2)
        length = int(headers.get("content-length", "0") or 0)
        if length > MAX_BODY_BYTES:
            raise ValueError("body too large")
        return await reader.readexactly(length) if length else b""

    async def _respond(self, writer: asyncio.StreamWriter, behaviour: Behaviour) -> None:
        if isinstance(behaviour, HttpStatus):
            body = behaviour.body
            if isinstance(body, Mapping):
                body = json.dumps(body).encode()
            elif isinstance(body, str):
                body = body.encode()
            await _plain(writer, behaviour.status, body, self.headers)
            return
        response_id = f"resp_{next(self._ids)}"
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"cache-control: no-cache\r\nconnection: close\r\n"
            + _header_lines(self.headers)
            + b"\r\n"
        )
        _event(writer, "response.created", {"response": {"id": response_id}})
        if isinstance(behaviour, Trickle):
            await _trickle(writer, behaviour, f"{response_id}_0")
            behaviour = Reply((MessageItem("".join(behaviour.pieces)),))
        for index, item in enumerate(behaviour.items):
            done = {"output_index": index, "item": _item_json(item, f"{response_id}_{index}")}
            _event(writer, "response.output_item.done", done)
        await writer.drain()
        if isinstance(behaviour, Drop):
            return
        if isinstance(behaviour, Stall):
            released = self._stalls_released
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(max(behaviour.seconds, 0.0), MAX_STALL_S)):
                    await released.wait()
            return
        if isinstance(behaviour, ResponseFailed):
            error = {"code": behaviour.code, "message": behaviour.message}
            failed = {"id": response_id, "status": "failed", "error": error}
            _event(writer, "response.failed", {"response": failed})
        else:
            completed = {"id": response_id, "status": "completed", "usage": dict(self.usage)}
            _event(writer, "response.completed", {"response": completed})
        await writer.drain()


async def _trickle(writer: asyncio.StreamWriter, behaviour: Trickle, item_id: str) -> None:
    """The message item's ``added`` event, then one text delta per piece, spaced in time."""
    added = {"type": "message", "id": item_id, "role": "assistant", "status": "in_progress"}
    _event(
        writer, "response.output_item.added", {"output_index": 0, "item": added | {"content": []}}
    )
    interval = min(max(behaviour.interval_s, 0.0), MAX_STALL_S / max(len(behaviour.pieces), 1))
    for index, piece in enumerate(behaviour.pieces):
        if index:
            await asyncio.sleep(interval)
        delta = {"item_id": item_id, "output_index": 0, "content_index": 0, "delta": piece}
        _event(writer, "response.output_text.delta", delta)
        await writer.drain()


def _is_responses(method: str, path: str) -> bool:
    return method == "POST" and path.rstrip("/").endswith("/responses")


def _is_websocket_upgrade(method: str, path: str, headers: Mapping[str, str]) -> bool:
    upgrade = headers.get("upgrade", "").lower() == "websocket"
    return method == "GET" and upgrade and path.rstrip("/").endswith("/responses")


def _error_body(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "fake_server"}}


def _item_json(item: OutputItem, item_id: str) -> dict[str, Any]:
    if isinstance(item, MessageItem):
        message: dict[str, Any] = {
            "type": "message",
            "id": item_id,
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": item.text, "annotations": []}],
        }
        if item.phase is not None:
            message["phase"] = item.phase
        return message
    arguments = item.arguments if isinstance(item.arguments, str) else json.dumps(item.arguments)
    call: dict[str, Any] = {
        "type": "function_call",
        "id": item_id,
        "call_id": item.call_id or f"call_{item_id}",
        "name": item.name,
        "arguments": arguments,
        "status": "completed",
    }
    if item.namespace is not None:
        call["namespace"] = item.namespace
    return call


def _event(writer: asyncio.StreamWriter, kind: str, payload: Mapping[str, Any]) -> None:
    data = json.dumps({"type": kind, **payload}, ensure_ascii=False)
    writer.write(f"event: {kind}\ndata: {data}\n\n".encode())


def _header_lines(headers: Mapping[str, str]) -> bytes:
    return "".join(f"{name}: {value}\r\n" for name, value in headers.items()).encode()


async def _plain(
    writer: asyncio.StreamWriter,
    status: int,
    body: bytes,
    headers: Mapping[str, str] | None = None,
) -> None:
    reason = _REASONS.get(status, "Status")
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n"
    )
    writer.write(head.encode() + _header_lines(headers or {}) + b"\r\n" + body)
    await writer.drain()
