"""The child's pipes as asyncio streams (``Pipes``): connecting them, feeding stdin, and the
bounded tail a ``Collect`` stream keeps."""

from __future__ import annotations

import asyncio
import contextlib
from typing import IO, Literal

from dsh.subprocess._lines import DroppingReader
from dsh.subprocess._spawn import Child
from dsh.subprocess._spec import Collect, CollectedText, SpawnSpec, StreamSpec

__all__ = ["Pipes"]

_READ_CHUNK = 65536


class _Tail:
    """The last ``max_bytes`` bytes of a stream."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.data = bytearray()
        self.truncated = False

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        excess = len(self.data) - self.max_bytes
        if excess > 0:
            del self.data[:excess]
            self.truncated = True

    def text(self) -> CollectedText:
        data = bytes(self.data)
        if self.truncated:
            skip = 0  # do not start the text in the middle of a UTF-8 sequence
            while skip < min(3, len(data)) and data[skip] & 0xC0 == 0x80:
                skip += 1
            data = data[skip:]
        return CollectedText(data.decode("utf-8", "replace"), self.truncated)


async def _connect_reader(
    loop: asyncio.AbstractEventLoop, pipe: IO[bytes]
) -> tuple[asyncio.StreamReader, asyncio.BaseTransport]:
    reader = DroppingReader(loop=loop)
    protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
    try:
        transport, _ = await loop.connect_read_pipe(lambda: protocol, pipe)
    except BaseException:
        pipe.close()
        raise
    return reader, transport


async def _connect_writer(loop: asyncio.AbstractEventLoop, pipe: IO[bytes]) -> asyncio.StreamWriter:
    protocol = asyncio.StreamReaderProtocol(asyncio.StreamReader(loop=loop), loop=loop)
    try:
        transport, _ = await loop.connect_write_pipe(lambda: protocol, pipe)
    except BaseException:
        pipe.close()
        raise
    return asyncio.StreamWriter(transport, protocol, None, loop)


async def _feed(writer: asyncio.StreamWriter, data: bytes) -> None:
    try:
        if data:
            writer.write(data)
            await writer.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the child closed its stdin early: EPIPE is expected and ignored
    finally:
        writer.close()


async def _collect(reader: asyncio.StreamReader, tail: _Tail) -> None:
    while chunk := await reader.read(_READ_CHUNK):
        tail.add(chunk)


class Pipes:
    """A child's pipes once connected, and the tasks that serve them (collectors, stdin feeder)."""

    def __init__(self) -> None:
        self.stdin: asyncio.StreamWriter | None = None
        self.stdout: asyncio.StreamReader | None = None
        self.stderr: asyncio.StreamReader | None = None
        self.transports: list[asyncio.BaseTransport] = []
        self.tails: dict[str, _Tail] = {}
        self.collectors: list[asyncio.Task[None]] = []
        self.feeder: asyncio.Task[None] | None = None

    async def connect(self, popen: Child, spec: SpawnSpec, loop: asyncio.AbstractEventLoop) -> None:
        """Take ``popen``'s pipes over as streams; a ``Collect`` stream gets a collector task."""
        if popen.stdin is not None:
            stdin_pipe, popen.stdin = popen.stdin, None
            writer = await _connect_writer(loop, stdin_pipe)
            self.transports.append(writer.transport)
            if isinstance(spec.stdin, bytes):
                self.feeder = loop.create_task(_feed(writer, spec.stdin))
            else:
                self.stdin = writer
        for name in ("stdout", "stderr"):
            pipe: IO[bytes] | None = getattr(popen, name)
            if pipe is None:
                continue
            setattr(popen, name, None)
            reader, transport = await _connect_reader(loop, pipe)
            self.transports.append(transport)
            mode: StreamSpec = getattr(spec, name)
            if isinstance(mode, Collect):
                tail = self.tails[name] = _Tail(mode.max_bytes)
                self.collectors.append(loop.create_task(_collect(reader, tail)))
            else:
                setattr(self, name, reader)

    def collected(self, name: Literal["stdout", "stderr"]) -> CollectedText:
        tail = self.tails.get(name)
        if tail is None:
            raise ValueError(
                "collected() needs 'stdout' or 'stderr' spawned with Collect(max_bytes)"
            )
        return tail.text()

    def tasks(self) -> list[asyncio.Task[None]]:
        tasks = list(self.collectors)
        if self.feeder is not None:
            tasks.append(self.feeder)
        return tasks

    def close_stdin(self) -> None:
        if self.stdin is not None and not self.stdin.is_closing():
            self.stdin.close()
        if self.feeder is not None and not self.feeder.done():
            self.feeder.cancel()

    def close_transports(self) -> None:
        for transport in self.transports:
            with contextlib.suppress(Exception):
                transport.close()
