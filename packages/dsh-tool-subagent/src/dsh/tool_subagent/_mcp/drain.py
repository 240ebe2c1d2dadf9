"""Answer every request already received before a closed input ends the connection.

The SDK's dispatcher cancels its in-flight handlers as soon as the read side reaches EOF, and a
handler cancelled before its first step writes nothing: a client that sends ``tools/list`` and
closes stdin gets no reply. :func:`draining` wraps the connection's streams so the EOF is held
back until every request read so far has been answered (or cancelled by the client), bounded by
:data:`DRAIN_TIMEOUT_S`. ``on_eof`` runs when the input closes, before the wait; the server uses
it to cancel running tool calls, which then answer at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Self

import anyio
from mcp.shared.message import SessionMessage
from mcp.types import JSONRPCError, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse

from dsh.tool_subagent._mcp.streams import ReadStream, Wrapper, WriteStream

__all__ = ["DRAIN_TIMEOUT_S", "draining"]

logger = logging.getLogger("dsh.tool_subagent.mcp")

#: The longest the server waits at EOF for the answers of requests already received.
DRAIN_TIMEOUT_S = 30.0

_Item = SessionMessage | Exception


class _Open:
    """The ids of requests read and not yet answered."""

    def __init__(self) -> None:
        self.ids: set[Any] = set()
        self.changed = anyio.Event()

    def discard(self, request_id: Any) -> None:
        self.ids.discard(request_id)
        self.changed.set()

    async def wait_empty(self, timeout: float) -> None:  # noqa: ASYNC109
        with anyio.move_on_after(timeout) as scope:
            while self.ids:
                self.changed = anyio.Event()
                await self.changed.wait()
        if scope.cancelled_caught:
            logger.warning("%d request(s) were still unanswered at EOF", len(self.ids))


class _Reader(Wrapper):
    def __init__(
        self, inner: ReadStream[_Item], open_: _Open, on_eof: Callable[[], None], timeout: float
    ) -> None:
        self._inner: ReadStream[_Item] = inner
        self._open = open_
        self._on_eof = on_eof
        self._timeout = timeout

    @property
    def last_context(self) -> Any:  # the dispatcher propagates the sender's contextvars
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> _Item:
        try:
            item = await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            self._on_eof()
            await self._open.wait_empty(self._timeout)
            raise
        if isinstance(item, SessionMessage):
            message = item.message
            if isinstance(message, JSONRPCRequest):
                self._open.ids.add(message.id)
            elif (
                isinstance(message, JSONRPCNotification)
                and message.method == "notifications/cancelled"
            ):
                # A request the client cancelled is never answered (MCP spec).
                self._open.discard((message.params or {}).get("requestId"))
        return item

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> _Item:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None


class _Writer(Wrapper):
    def __init__(self, inner: WriteStream[SessionMessage], open_: _Open) -> None:
        self._inner: WriteStream[SessionMessage] = inner
        self._open = open_

    async def send(self, item: SessionMessage, /) -> None:
        message = item.message
        try:
            await self._inner.send(item)
        finally:
            # Even a failed write settles the request: nobody can receive its answer now.
            if isinstance(message, JSONRPCResponse | JSONRPCError) and message.id is not None:
                self._open.discard(message.id)


def draining(
    read_stream: ReadStream[_Item],
    write_stream: WriteStream[SessionMessage],
    on_eof: Callable[[], None],
    *,
    timeout: float = DRAIN_TIMEOUT_S,
) -> tuple[ReadStream[_Item], WriteStream[SessionMessage]]:
    """The connection's streams, with EOF held back until the received requests are answered."""
    open_ = _Open()
    return _Reader(read_stream, open_, on_eof, timeout), _Writer(write_stream, open_)
