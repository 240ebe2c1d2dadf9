"""Support code for the keyed DeepSeek tier and its keyless bridge test (test-private, not shipped).

- ``ResponsesBridge``: a loopback OpenAI Responses API (``POST .../responses``, SSE) that turns
  each request Codex makes into one Chat Completions request (``POST {upstream}/chat/completions``,
  streaming or not) and turns the answer back into the Responses SSE events Codex accepts
  (``response.created``, ``response.output_item.added``, ``response.output_text.delta``,
  ``response.output_item.done``, ``response.completed``). Text only: tools, reasoning and tool
  results are dropped. It forwards the ``Authorization`` header Codex sent and holds no credential
  itself. It is a test helper, never a production proxy.
- ``FakeChatServer``: a loopback Chat Completions API with queued answers that records every
  request, so the bridge can be proven keylessly against the real Codex.

Tests reach both through the ``make_bridge`` and ``fake_chat`` fixtures (never by importing this
file). The only non-loopback address anything here may talk to is DeepSeek, and only when a test
passes ``allow_remote=True`` (the keyed tier, which skips itself without ``DEEPSEEK_API_KEY``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import ssl
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 32 * 1024 * 1024
MAX_RECORDED = 200
READ_TIMEOUT_S = 30.0
UPSTREAM_TIMEOUT_S = 240.0
_LOOPBACK = frozenset({"127.0.0.1"})
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found"}
_REASONS |= {429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway"}


# -- minimal HTTP/1.1 plumbing (asyncio streams, bounded) ---------------------------------------
@dataclass(frozen=True)
class HttpRequest:
    """One request as a loopback server saw it. ``headers`` has lower-cased names."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes
    json: Any = field(default=None)


async def _read_head(
    reader: asyncio.StreamReader, limit_s: float = READ_TIMEOUT_S
) -> tuple[str, dict[str, str]]:
    async with asyncio.timeout(limit_s):
        head = await reader.readuntil(b"\r\n\r\n")
    if len(head) > MAX_HEADER_BYTES:
        raise ValueError("header too large")
    lines = head.decode("latin-1").split("\r\n")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    return lines[0], headers


async def _iter_body(
    reader: asyncio.StreamReader, headers: Mapping[str, str], *, until_eof: bool
) -> AsyncIterator[bytes]:
    """The body as it arrives: chunked, by content-length, or (responses only) up to EOF."""
    total = 0
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
            if size == 0:
                with contextlib.suppress(asyncio.IncompleteReadError):
                    await reader.readuntil(b"\r\n")
                return
            total += size
            if total > MAX_BODY_BYTES:
                raise ValueError("body too large")
            yield await reader.readexactly(size)
            await reader.readexactly(2)
    if "content-length" in headers:
        length = int(headers["content-length"] or 0)
        if length > MAX_BODY_BYTES:
            raise ValueError("body too large")
        if length:
            yield await reader.readexactly(length)
        return
    if until_eof:
        while chunk := await reader.read(65536):
            total += len(chunk)
            if total > MAX_BODY_BYTES:
                raise ValueError("body too large")
            yield chunk


async def _read_request(reader: asyncio.StreamReader) -> HttpRequest:
    start, headers = await _read_head(reader)
    method, path, _version = start.split(" ", 2)
    async with asyncio.timeout(READ_TIMEOUT_S):
        body = b"".join([chunk async for chunk in _iter_body(reader, headers, until_eof=False)])
    parsed: Any = None
    if body:
        with contextlib.suppress(ValueError, UnicodeDecodeError):
            parsed = json.loads(body)
    return HttpRequest(method, path, headers, body, parsed)


async def _plain(writer: asyncio.StreamWriter, status: int, payload: Mapping[str, Any]) -> None:
    body = json.dumps(payload).encode()
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    writer.write(head.encode() + body)
    await writer.drain()


async def _sse_lines(chunks: AsyncIterator[bytes]) -> AsyncGenerator[str, None]:
    """Split an SSE byte stream into decoded lines (a line may span chunks)."""
    buffer = b""
    async for chunk in chunks:
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield line.rstrip(b"\r").decode("utf-8")
    if buffer:
        yield buffer.rstrip(b"\r").decode("utf-8")


class _LoopbackServer:
    """An asyncio server on 127.0.0.1 whose connection handlers are owned and cancelled on stop."""

    def __init__(self) -> None:
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._port = 0
        #: The requests served, the first ``MAX_RECORDED``.
        self.requests: list[HttpRequest] = []

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self._port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        handlers = list(self._handlers)
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        await server.wait_closed()

    @property
    def port(self) -> int:
        if not self._port:
            raise RuntimeError("the server is not started")
        return self._port

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self.serve(await _read_request(reader), writer)
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

    async def serve(self, request: HttpRequest, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    async def _recorded_post(
        self, request: HttpRequest, writer: asyncio.StreamWriter, suffix: str
    ) -> bool:
        """Record ``request`` (the first ``MAX_RECORDED``); whether it is a POST to a path that
        ends in ``suffix``, which ``serve`` then answers; anything else got a 404."""
        if len(self.requests) < MAX_RECORDED:
            self.requests.append(request)
        path = request.path.split("?", 1)[0].rstrip("/")
        if request.method != "POST" or not path.endswith(suffix):
            await _plain(writer, 404, {"error": {"message": "not found"}})
            return False
        return True


# -- the fake Chat Completions server -----------------------------------------------------------
@dataclass(frozen=True)
class ChatAnswer:
    """A queued answer: ``text`` (streamed in ``piece``-sized deltas) or an HTTP ``status``.

    ``drop`` cuts a streamed answer after its content deltas: no finish chunk, no ``[DONE]``.
    """

    text: str = ""
    status: int = 200
    piece: int = 3
    drop: bool = False


class FakeChatServer(_LoopbackServer):
    """``POST .../chat/completions`` on 127.0.0.1: queued answers, every request recorded."""

    def __init__(self) -> None:
        super().__init__()
        self._queue: deque[ChatAnswer] = deque()
        self._ids = itertools.count(1)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def queue_text(self, text: str, *, piece: int = 3) -> None:
        self._queue.append(ChatAnswer(text=text, piece=max(piece, 1)))

    def queue_drop(self, text: str) -> None:
        self._queue.append(ChatAnswer(text=text, drop=True))

    def queue_status(self, status: int) -> None:
        self._queue.append(ChatAnswer(status=status))

    async def serve(self, request: HttpRequest, writer: asyncio.StreamWriter) -> None:
        if not await self._recorded_post(request, writer, "/chat/completions"):
            return
        answer = self._queue.popleft() if self._queue else ChatAnswer(status=500)
        if answer.status != 200:
            await _plain(writer, answer.status, {"error": {"message": "fake chat failure"}})
            return
        ident = f"chatcmpl-{next(self._ids)}"
        model = request.json.get("model") if isinstance(request.json, dict) else None
        usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
        if isinstance(request.json, dict) and request.json.get("stream") is True:
            await self._stream(writer, ident, model, answer, usage)
            return
        message = {"role": "assistant", "content": answer.text}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        payload = {"id": ident, "object": "chat.completion", "model": model}
        await _plain(writer, 200, {**payload, "choices": [choice], "usage": usage})

    async def _stream(
        self,
        writer: asyncio.StreamWriter,
        ident: str,
        model: Any,
        answer: ChatAnswer,
        usage: Mapping[str, int],
    ) -> None:
        # Chunked transfer encoding, as real gateways send it, so the bridge's decoder is exercised.
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        )
        base = {"id": ident, "object": "chat.completion.chunk", "model": model}
        text = answer.text
        pieces = [text[i : i + answer.piece] for i in range(0, len(text), answer.piece)]
        events: list[dict[str, Any]] = [
            {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
        ]
        events += [
            {**base, "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]}
            for p in pieces
        ]
        done = {"index": 0, "delta": {}, "finish_reason": "stop"}
        if not answer.drop:
            events.append({**base, "choices": [done], "usage": dict(usage)})
        for event in events:
            _chunk(writer, f"data: {json.dumps(event, ensure_ascii=False)}\n\n".encode())
            await writer.drain()
        if answer.drop:
            writer.write(b"0\r\n\r\n")  # a clean end of the body, but an unfinished stream
            await writer.drain()
            return
        _chunk(writer, b"data: [DONE]\n\n")
        writer.write(b"0\r\n\r\n")
        await writer.drain()


def _chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")


# -- the Responses → Chat Completions bridge ----------------------------------------------------
def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = [
        part.get("text", "")
        for part in content
        if isinstance(part, dict) and part.get("type") in ("input_text", "output_text", "text")
    ]
    return "".join(p for p in parts if isinstance(p, str))


def responses_to_chat(body: Mapping[str, Any], *, stream: bool) -> dict[str, Any]:
    """Translate a Responses request body into a Chat Completions body (text only).

    ``instructions`` and ``developer``/``system`` messages become one leading system message;
    ``user``/``assistant`` messages keep their order. Tools, reasoning and tool calls are dropped.
    """
    system: list[str] = []
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        system.append(instructions)
    items = body.get("input")
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict) or item.get("type", "message") != "message":
            continue
        role, text = item.get("role"), _text_of(item.get("content"))
        if role in ("developer", "system"):
            system.append(text)
        elif role in ("user", "assistant") and text:
            messages.append({"role": role, "content": text})
    if system:
        messages.insert(0, {"role": "system", "content": "\n\n".join(system)})
    chat: dict[str, Any] = {"model": body.get("model"), "messages": messages, "stream": stream}
    if stream:
        chat["stream_options"] = {"include_usage": True}
    return chat


class UpstreamError(Exception):
    """The upstream answered with a non-200 status (the status only; no body is kept)."""

    def __init__(self, status: int) -> None:
        super().__init__(f"upstream status {status}")
        self.status = status


@contextlib.asynccontextmanager
async def _post(
    url: str, headers: Mapping[str, str], body: bytes, *, allow_remote: bool
) -> AsyncIterator[tuple[dict[str, str], AsyncIterator[bytes]]]:
    """POST ``body`` to ``url`` (HTTP/1.1, ``connection: close``); yield headers and body chunks."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme not in ("http", "https") or not host:
        raise ValueError("upstream must be an http(s) URL")
    if host not in _LOOPBACK and not allow_remote:
        raise ValueError("a non-loopback upstream needs allow_remote=True (keyed tier only)")
    tls = ssl.create_default_context() if parts.scheme == "https" else None
    port = parts.port or (443 if tls else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    reader, writer = await asyncio.open_connection(
        host, port, ssl=tls, server_hostname=host if tls else None
    )
    try:
        lines = [f"POST {path} HTTP/1.1", f"host: {parts.netloc}", "connection: close"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        lines.append(f"content-length: {len(body)}")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        await writer.drain()
        # A non-streaming upstream sends its head only once the answer is ready.
        start, response_headers = await _read_head(reader, UPSTREAM_TIMEOUT_S)
        status = int(start.split(" ", 2)[1])
        if status != 200:
            raise UpstreamError(status)
        yield response_headers, _iter_body(reader, response_headers, until_eof=True)
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


class ResponsesBridge(_LoopbackServer):
    """A loopback Responses API in front of a Chat Completions upstream (see the module docs)."""

    def __init__(
        self, upstream: str, *, upstream_stream: bool = True, allow_remote: bool = False
    ) -> None:
        super().__init__()
        self.upstream = upstream.rstrip("/")
        self.upstream_stream = upstream_stream
        self.allow_remote = allow_remote
        self._ids = itertools.count(1)
        if urlsplit(self.upstream).hostname not in _LOOPBACK and not allow_remote:
            raise ValueError("a non-loopback upstream needs allow_remote=True (keyed tier only)")

    @property
    def base_url(self) -> str:
        """The Codex provider ``base_url`` (Codex POSTs ``{base_url}/responses``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    async def serve(self, request: HttpRequest, writer: asyncio.StreamWriter) -> None:
        if not await self._recorded_post(request, writer, "/responses"):
            return
        if not isinstance(request.json, dict):
            await _plain(writer, 400, {"error": {"message": "the body is not a JSON object"}})
            return
        chat = responses_to_chat(request.json, stream=self.upstream_stream)
        headers = {
            "content-type": "application/json",
            "accept": "text/event-stream" if self.upstream_stream else "application/json",
            "user-agent": "dsh-keyed-bridge",
        }
        if "authorization" in request.headers:
            headers["authorization"] = request.headers["authorization"]
        events = _ResponsesEvents(writer, f"resp_bridge_{next(self._ids)}")
        try:
            async with asyncio.timeout(UPSTREAM_TIMEOUT_S):
                await self._relay(events, chat, headers)
        except UpstreamError as exc:
            await _plain(writer, exc.status, {"error": {"message": str(exc)}})
        except Exception:
            # Anything else (unreachable, malformed, too slow). Before the SSE head: a gateway
            # error. After it: the stream just ends, without response.completed, which Codex
            # reports as a failed turn. CancelledError is not an Exception and propagates.
            if not events.started:
                await _plain(writer, 502, {"error": {"message": "upstream unreachable"}})

    async def _relay(
        self, events: _ResponsesEvents, chat: Mapping[str, Any], headers: Mapping[str, str]
    ) -> None:
        url = f"{self.upstream}/chat/completions"
        body = json.dumps(chat).encode()
        async with _post(url, headers, body, allow_remote=self.allow_remote) as (_h, chunks):
            await events.begin()
            if self.upstream_stream:
                finished = False
                async with contextlib.aclosing(_sse_lines(chunks)) as lines:
                    async for line in lines:
                        if not line.startswith("data:"):
                            continue  # comments / keep-alives
                        data = line[5:].strip()
                        if data == "[DONE]":
                            finished = True
                            break
                        chunk = json.loads(data)
                        if not isinstance(chunk, dict):
                            continue
                        events.usage(chunk.get("usage"))
                        for choice in chunk.get("choices") or ():
                            finished = finished or choice.get("finish_reason") is not None
                            content = (choice.get("delta") or {}).get("content")
                            if isinstance(content, str) and content:
                                await events.delta(content)
                if not finished:
                    # A cut upstream stream must not pass for a complete answer.
                    raise ValueError("the upstream stream ended before it finished")
            else:
                reply = json.loads(b"".join([c async for c in chunks]))
                if not isinstance(reply, dict):
                    raise ValueError("the upstream reply is not a JSON object")
                events.usage(reply.get("usage"))
                for choice in reply.get("choices") or ():
                    content = (choice.get("message") or {}).get("content")
                    if isinstance(content, str) and content:
                        await events.delta(content)
            await events.finish()


class _ResponsesEvents:
    """Writes the Responses SSE event sequence for one assistant message."""

    def __init__(self, writer: asyncio.StreamWriter, ident: str) -> None:
        self._writer = writer
        self.started = False
        self._id = ident
        self._item = f"msg_{ident}"
        self._text: list[str] = []
        self._usage = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}

    def usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            prompt = int(usage.get("prompt_tokens") or 0)
            completion = int(usage.get("completion_tokens") or 0)
            self._usage = {
                "input_tokens": prompt,
                "output_tokens": completion,
                "total_tokens": prompt + completion,
            }

    def _event(self, kind: str, payload: Mapping[str, Any]) -> None:
        data = json.dumps({"type": kind, **payload}, ensure_ascii=False)
        self._writer.write(f"event: {kind}\ndata: {data}\n\n".encode())

    def _message(self, status: str) -> dict[str, Any]:
        content = []
        if status == "completed":
            content = [{"type": "output_text", "text": "".join(self._text), "annotations": []}]
        return {
            "type": "message",
            "id": self._item,
            "role": "assistant",
            "status": status,
            "content": content,
        }

    async def begin(self) -> None:
        self.started = True
        self._writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"cache-control: no-cache\r\nconnection: close\r\n\r\n"
        )
        self._event("response.created", {"response": {"id": self._id, "status": "in_progress"}})
        added = {"output_index": 0, "item": self._message("in_progress")}
        self._event("response.output_item.added", added)
        await self._writer.drain()

    async def delta(self, text: str) -> None:
        self._text.append(text)
        payload = {"item_id": self._item, "output_index": 0, "content_index": 0, "delta": text}
        self._event("response.output_text.delta", payload)
        await self._writer.drain()

    async def finish(self) -> None:
        done = {"output_index": 0, "item": self._message("completed")}
        self._event("response.output_item.done", done)
        completed = {"id": self._id, "status": "completed", "usage": self._usage}
        self._event("response.completed", {"response": completed})
        await self._writer.drain()


# -- fixtures -----------------------------------------------------------------------------------
MakeBridge = Callable[..., Awaitable[ResponsesBridge]]


@pytest.fixture
async def fake_chat() -> AsyncIterator[FakeChatServer]:
    server = FakeChatServer()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def make_bridge() -> AsyncIterator[MakeBridge]:
    """``await make_bridge(upstream, **options)`` (see ``ResponsesBridge``); stopped at teardown."""
    started: list[ResponsesBridge] = []

    async def make(upstream: str, **options: Any) -> ResponsesBridge:
        bridge = ResponsesBridge(upstream, **options)
        await bridge.start()
        started.append(bridge)
        return bridge

    try:
        yield make
    finally:
        for bridge in started:
            await bridge.stop()


def _files_containing(root: Path, secret: bytes) -> list[str]:
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            with contextlib.suppress(OSError):
                if secret in path.read_bytes():
                    found.append(str(path.relative_to(root)))
    return found


@pytest.fixture
def files_containing() -> Callable[[Path, str], Awaitable[list[str]]]:
    """``await files_containing(root, secret)``: the files under ``root`` whose bytes hold it."""

    async def scan(root: Path, secret: str) -> list[str]:
        return await asyncio.to_thread(_files_containing, root, secret.encode())

    return scan
