"""A cancellable stdin line source for the MCP stdio transport.

The SDK reads stdin in a worker thread that cannot be interrupted, so a server that is told to
stop (SIGTERM, Ctrl-C) while its client keeps stdin open would wait for EOF. When stdin is a
pipe or a socket (how MCP clients start servers), this module claims fd 0 the way the SDK does
(a private duplicate serves the wire; fd 0 points at the null device) and reads the duplicate
on the event loop. Any other stdin (a terminal, a regular file) is left to the SDK.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import stat
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, cast

from dsh.subprocess import BoundedLines

if TYPE_CHECKING:
    import anyio

__all__ = ["MAX_LINE_BYTES", "stdin_is_a_stream", "stdin_lines"]

#: The longest JSON-RPC frame (one line) accepted from the client.
MAX_LINE_BYTES = 64 * 1024 * 1024


class _LineSource:
    """``async for line in source`` over a stream reader, decoded as UTF-8 (what the SDK reads).

    Each line keeps its newline and the last one may lack it, as ``readline()`` gives them; a line
    over ``MAX_LINE_BYTES`` raises ``LineTooLong``, a ``ValueError`` as ``readline()`` raises.
    """

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._lines = BoundedLines(reader, MAX_LINE_BYTES)
        self._iterator = aiter(self._lines)
        self._ended = False

    def __aiter__(self) -> _LineSource:
        return self

    async def __anext__(self) -> str:
        if self._ended:
            raise StopAsyncIteration
        try:
            line = await anext(self._iterator) + b"\n"
        except StopAsyncIteration:
            self._ended = True
            line = self._lines.tail
            if not line:
                raise
        return line.decode("utf-8", errors="replace")


def stdin_is_a_stream(fd: int) -> bool:
    """Whether ``fd`` is a pipe or a socket (how MCP clients connect their servers)."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


@contextlib.asynccontextmanager
async def stdin_lines(
    fd: int = 0, prefix: bytes = b""
) -> AsyncIterator[anyio.AsyncFile[str] | None]:
    """Yield a cancellable line source for ``fd``, or ``None`` to let the SDK read stdin.

    ``prefix``: bytes already read from ``fd`` (the opening's, :mod:`.opening`), read first.
    """
    if not stdin_is_a_stream(fd):
        yield None
        return
    private = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE_BYTES)
    if prefix:
        reader.feed_data(prefix)
    try:
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(private, "rb", buffering=0)
        )
    except BaseException:
        os.dup2(private, fd)
        os.close(private)
        raise
    try:
        yield cast("anyio.AsyncFile[str]", _LineSource(reader))
    finally:
        with contextlib.suppress(OSError):
            os.dup2(private, fd)  # give fd 0 its wire back before the transport closes ours
        transport.close()
