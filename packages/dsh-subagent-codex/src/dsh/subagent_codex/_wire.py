"""Newline-delimited JSON-RPC over a child's stdio, in our own id space (``"dsh-<n>"``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from dsh.subprocess import BoundedLines, LineTooLong

__all__ = [
    "ACTIVITY_ONLY",
    "MAX_LINE_BYTES",
    "LineTooLong",
    "RpcError",
    "Wire",
    "WireClosed",
    "read_frames",
]

MAX_LINE_BYTES = 8 * 1024 * 1024
# ``LineTooLong`` (a stdout line exceeded the framing cap) is dsh.subprocess's, re-exported here
# for the run's ``except`` clause.


ACTIVITY_ONLY: dict[str, Any] = {}
"""Yielded (by identity) for a streaming notification: it says the product is active, and
nothing in it is read, so it is not parsed (a model's answer streams one per token)."""

_METHOD_PREFIX = b'{"method":"'
_STREAMING_METHODS = frozenset(
    {
        b"item/agentMessage/delta",
        b"item/reasoning/summaryTextDelta",
        b"item/reasoning/summaryPartAdded",
        b"item/reasoning/textDelta",
        b"item/commandExecution/outputDelta",
        b"item/fileChange/outputDelta",
        b"item/plan/delta",
        b"command/exec/outputDelta",
    }
)


class WireClosed(Exception):
    """The wire closed before a response arrived."""


class RpcError(Exception):
    """A JSON-RPC error response (raw; only ever used as a ``__cause__``)."""

    def __init__(self, code: Any, message: Any) -> None:
        super().__init__(f"JSON-RPC error {code!r}")
        self.code = code
        self.raw_message = message


async def read_frames(stream: asyncio.StreamReader, max_line: int) -> AsyncIterator[dict[str, Any]]:
    """Yield each stdout line that parses as a JSON object; skip others; end at EOF.

    A streaming notification (a delta) is yielded as ``ACTIVITY_ONLY`` without being parsed.

    ``BoundedLines`` reads in chunks (independent of the stream's own line limit) and raises
    ``LineTooLong`` as soon as a pending line exceeds ``max_line`` bytes, so memory stays bounded.
    An unterminated last line is dropped (the app-server ends every frame with a newline).
    """
    async for line in BoundedLines(stream, max_line):
        frame = _parse(line)
        if frame is not None:
            yield frame


def _parse(line: bytes) -> dict[str, Any] | None:
    if line.startswith(_METHOD_PREFIX):
        start = len(_METHOD_PREFIX)
        if line[start : line.find(b'"', start)] in _STREAMING_METHODS:
            return ACTIVITY_ONLY
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class Wire:
    """Writes requests, notifications and responses; matches our responses by id."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self._next = 0
        self._pending: dict[str, Callable[[dict[str, Any] | None, BaseException | None], None]] = {}
        self.closed = False

    def _send(self, message: dict[str, Any]) -> None:
        if self.closed:
            raise WireClosed
        try:
            # ASCII escapes keep any str (even a lone surrogate) encodable.
            self._writer.write(json.dumps(message).encode("ascii") + b"\n")
        except (ConnectionError, RuntimeError) as exc:
            raise WireClosed from exc

    def request_cb(
        self,
        method: str,
        params: dict[str, Any],
        callback: Callable[[dict[str, Any] | None, BaseException | None], None],
        trace: Mapping[str, str] | None = None,
    ) -> str:
        """Send a request; ``callback(result, error)`` runs on its answer or on close.

        ``trace`` is a W3C trace context (``traceparent``, ``tracestate``): the app-server takes
        it as the request's top-level ``trace`` field.
        """
        self._next += 1
        request_id = f"dsh-{self._next}"
        self._pending[request_id] = callback
        message: dict[str, Any] = {"id": request_id, "method": method, "params": params}
        if trace:
            message["trace"] = dict(trace)
        try:
            self._send(message)
        except WireClosed:
            del self._pending[request_id]
            raise
        return request_id

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any] | None:
        """Send a request and await its result (None when it is not an object).

        Raises ``RpcError`` for an error response and ``WireClosed`` when the wire closes first.
        """
        future: asyncio.Future[dict[str, Any] | None] = asyncio.get_running_loop().create_future()

        def done(result: dict[str, Any] | None, error: BaseException | None) -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

        request_id = self.request_cb(method, params, done)
        try:
            return await future
        finally:
            self._pending.pop(request_id, None)

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"method": method}
        if params is not None:
            message["params"] = params
        self._send(message)

    def respond(self, request_id: Any, result: dict[str, Any]) -> None:
        self._send({"id": request_id, "result": result})

    def respond_error(self, request_id: Any, code: int, message: str) -> None:
        self._send({"id": request_id, "error": {"code": code, "message": message}})

    def on_response(self, frame: dict[str, Any]) -> bool:
        """Route a response frame to its waiter; False when the id is not one of ours."""
        request_id = frame.get("id")
        callback = self._pending.pop(request_id, None) if isinstance(request_id, str) else None
        if callback is None:
            return False
        if "error" in frame:
            error = frame["error"]
            code = error.get("code") if isinstance(error, dict) else None
            message = error.get("message") if isinstance(error, dict) else None
            callback(None, RpcError(code, message))
        else:
            result = frame.get("result")
            callback(result if isinstance(result, dict) else None, None)
        return True

    def close(self) -> None:
        """Close our side: pending requests fail with ``WireClosed``; stdin is closed."""
        if self.closed:
            return
        self.closed = True
        pending, self._pending = self._pending, {}
        for callback in pending.values():
            callback(None, WireClosed())
        with contextlib.suppress(ConnectionError, RuntimeError):
            self._writer.close()
