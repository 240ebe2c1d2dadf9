"""``BoundedLines``: newline-delimited frames from a stream, with memory bounded per line.

Every JSON-lines peer dsh reads (the Codex app-server's stdout, the Claude Code CLI's stdout, an
MCP client's stdin) is untrusted for size: one endless line must fail the reader, not fill the
heap. ``asyncio.StreamReader.readline`` bounds a line by the reader's ``limit``, but that limit is
fixed at construction and also sizes the transport's buffering; this reader reads fixed chunks
and bounds each line on its own, so the three peers share one rule.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from dsh.subprocess.errors import LineTooLong

__all__ = ["READ_CHUNK_BYTES", "BoundedLines"]

READ_CHUNK_BYTES = 256 * 1024
"""How much one read asks the stream for."""


class BoundedLines:
    """``async for line in BoundedLines(stream, max_line)``: each line, without its ``\\n``.

    Raises ``LineTooLong`` as soon as a line (complete, or still pending) holds more than
    ``max_line`` bytes, so at most ``max_line`` plus one chunk is ever buffered. Iteration ends at
    EOF; bytes after the last newline are not yielded but kept in :attr:`tail` for a peer whose
    last frame may lack its newline.
    """

    def __init__(
        self, stream: asyncio.StreamReader, max_line: int, *, chunk: int = READ_CHUNK_BYTES
    ) -> None:
        if max_line < 1 or chunk < 1:
            raise ValueError("max_line and chunk must be positive")
        self._stream = stream
        self._max_line = max_line
        self._chunk = chunk
        self.tail = b""
        """The unterminated bytes left at EOF (empty until then)."""

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[bytes]:
        buffer = bytearray()
        while True:
            chunk = await self._stream.read(self._chunk)
            if not chunk:
                self.tail = bytes(buffer)
                return
            start = len(buffer)
            buffer += chunk
            newline = buffer.find(b"\n", start)
            begin = 0
            while newline != -1:
                if newline - begin > self._max_line:
                    raise LineTooLong
                line = bytes(buffer[begin:newline])
                begin = newline + 1
                yield line
                newline = buffer.find(b"\n", begin)
            del buffer[:begin]
            if len(buffer) > self._max_line:
                raise LineTooLong
