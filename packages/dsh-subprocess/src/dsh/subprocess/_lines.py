"""``BoundedLines``: newline-delimited frames from a stream, with memory bounded per line.

Every JSON-lines peer dsh reads (the Codex app-server's stdout, the Claude Code CLI's stdout, an
MCP client's stdin) is untrusted for size: one endless line must fail the reader, not fill the
heap. ``asyncio.StreamReader.readline`` bounds a line by the reader's ``limit``, but that limit is
fixed at construction and also sizes the transport's buffering; this reader reads fixed chunks
and bounds each line on its own, so the three peers share one rule.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from typing import SupportsIndex

from dsh.subprocess.errors import LineTooLong

__all__ = ["READ_CHUNK_BYTES", "BoundedLines", "DroppingReader"]

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


class DroppingReader(asyncio.StreamReader):
    """A child's ``stdout`` or ``stderr`` (``"pipe"``): a ``StreamReader`` that can drop lines.

    After :meth:`drop_lines`, each line that starts with ``prefix`` is dropped as its bytes
    arrive, before any reader is woken: ``on_drop`` is called once per dropped line (when its
    start arrives) and the reader never sees it. A chunk of dropped lines only costs the pipe's
    callback, not a wake-up of the task that reads (on a small machine about as dear as the
    line's handling). Without it, a plain ``StreamReader``.

    A dropped line is never buffered; past ``max_line`` bytes it stops being dropped and its
    remainder is fed, so a bounded reader (``BoundedLines``) still fails an endless line.
    """

    _drop_prefix: bytes | None = None
    _on_drop: Callable[[], None] | None = None
    _max_line = 0
    _at_line_start = True
    _dropping = False
    _dropped_bytes = 0

    def drop_lines(self, prefix: bytes, on_drop: Callable[[], None], max_line: int) -> None:
        """From now on drop the lines that start with ``prefix`` (see the class docstring).

        Install it before anyone reads: a line the consumer has partly read already is never
        dropped (the start of a line is known from what is still buffered here).
        """
        if not prefix or max_line < 1:
            raise ValueError("prefix must be non-empty and max_line positive")
        self._drop_prefix = prefix
        self._on_drop = on_drop
        self._max_line = max_line
        buffered: bytearray = self._buffer  # type: ignore[attr-defined]
        self._at_line_start = not buffered or buffered.endswith(b"\n")

    def feed_data(self, data: Iterable[SupportsIndex]) -> None:
        prefix = self._drop_prefix
        if prefix is None or not data:
            super().feed_data(data)
            return
        data = data if isinstance(data, bytes) else bytes(data)
        kept: list[bytes] = []
        pos, end = 0, len(data)
        while pos < end:
            if self._dropping:
                newline = data.find(b"\n", pos)
                stop = end if newline == -1 else newline + 1
                self._dropped_bytes += stop - pos
                if self._dropped_bytes > self._max_line:
                    self._dropping = False  # too long to drop: the reader sees the rest
                    self._at_line_start = False
                    continue
                if newline == -1:
                    break
                pos = stop
                self._dropping = False
                self._at_line_start = True
                continue
            if self._at_line_start and data.startswith(prefix, pos):
                self._dropping = True
                self._dropped_bytes = 0
                assert self._on_drop is not None
                self._on_drop()
                continue
            newline = data.find(b"\n", pos)
            if newline == -1:
                kept.append(data[pos:])
                self._at_line_start = False
                break
            kept.append(data[pos : newline + 1])
            pos = newline + 1
            self._at_line_start = True
        if kept:
            super().feed_data(kept[0] if len(kept) == 1 else b"".join(kept))
