"""The two stream shapes an MCP connection is served over, declared here instead of imported.

The MCP SDK declares these protocols only in a private module (``mcp.shared._stream_protocols``),
which may move in any release. They are structural, so this copy of the part the server relies on
accepts the SDK's streams and the wrappers of :mod:`._mcp_drain`, and those wrappers still satisfy
what ``Server.run`` asks for. :class:`Wrapper` is the base of those wrappers.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, Protocol, Self, TypeVar

__all__ = ["ReadStream", "Wrapper", "WriteStream"]

T_co = TypeVar("T_co", covariant=True)
T_contra = TypeVar("T_contra", contravariant=True)


class _Closable(Protocol):
    """Closing and ``async with``, which both directions have."""

    async def aclose(self) -> None: ...
    async def __aenter__(self) -> Self: ...
    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None: ...


class ReadStream(_Closable, Protocol[T_co]):
    """A stream of received items (the SDK's memory streams and their context wrappers)."""

    async def receive(self) -> T_co: ...
    def __aiter__(self) -> ReadStream[T_co]: ...
    async def __anext__(self) -> T_co: ...


class WriteStream(_Closable, Protocol[T_contra]):
    """A stream items are sent to."""

    async def send(self, item: T_contra, /) -> None: ...


class Wrapper:
    """A stream wrapper's closing and context management: they delegate to the wrapped stream
    (``_inner``, which a subclass sets)."""

    _inner: ReadStream[object] | WriteStream[Any]

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        await self.aclose()
        return None
