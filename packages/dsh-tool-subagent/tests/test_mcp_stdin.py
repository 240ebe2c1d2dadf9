"""``dsh mcp``'s stdin lines: what ``readline()`` gave, now read through ``BoundedLines``."""

from __future__ import annotations

import asyncio
import os

import pytest

from dsh.subprocess import LineTooLong
from dsh.tool_subagent._mcp import stdin as mcp_stdin
from dsh.tool_subagent._mcp.stdin import stdin_lines


async def _lines_through_a_pipe(data: bytes) -> list[str]:
    read_fd, write_fd = os.pipe()
    os.write(write_fd, data)
    os.close(write_fd)
    try:
        async with stdin_lines(read_fd) as source:
            assert source is not None  # a pipe is claimed
            return [line async for line in source]
    finally:
        os.close(read_fd)


async def test_lines_keep_their_newline_and_the_last_may_lack_it() -> None:
    data = b'{"a": 1}\n\n{"b": "\xc3\xa9"}\nlast'
    assert await _lines_through_a_pipe(data) == ['{"a": 1}\n', "\n", '{"b": "é"}\n', "last"]


async def test_no_tail_means_no_extra_line() -> None:
    assert await _lines_through_a_pipe(b"one\n") == ["one\n"]


async def test_a_line_over_the_bound_raises_a_value_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(mcp_stdin, "MAX_LINE_BYTES", 16)
    with pytest.raises(ValueError) as caught:  # noqa: PT011 - readline() raised a bare ValueError too
        await asyncio.wait_for(_lines_through_a_pipe(b"x" * 40 + b"\n"), 10)
    assert isinstance(caught.value, LineTooLong)
