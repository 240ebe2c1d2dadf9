"""``BoundedLines``: the one bounded JSON-lines reader (Codex wire, Claude transport, MCP stdin)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh.subprocess import BoundedLines, DroppingReader, LineTooLong, SubprocessError


def _stream(*pieces: bytes) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    for piece in pieces:
        reader.feed_data(piece)
    reader.feed_eof()
    return reader


async def _read(lines: BoundedLines) -> list[bytes]:
    return [line async for line in lines]


async def test_lines_without_newlines_and_the_tail_kept_apart() -> None:
    lines = BoundedLines(_stream(b'{"a":1}\n\n{"b"', b":2}\nlast"), 64, chunk=3)
    assert await _read(lines) == [b'{"a":1}', b"", b'{"b":2}']
    assert lines.tail == b"last"


async def test_a_line_of_exactly_the_bound_passes_and_one_more_byte_fails() -> None:
    assert await _read(BoundedLines(_stream(b"x" * 8 + b"\n"), 8)) == [b"x" * 8]
    with pytest.raises(LineTooLong):
        await _read(BoundedLines(_stream(b"x" * 9 + b"\n"), 8))


async def test_a_pending_line_fails_before_its_newline_arrives() -> None:
    # An endless line must fail while at most the bound plus one chunk is buffered.
    reader = asyncio.StreamReader()
    reader.feed_data(b"ok\n" + b"x" * 20)
    lines = aiter(BoundedLines(reader, 8, chunk=4))
    assert await anext(lines) == b"ok"
    with pytest.raises(LineTooLong):
        await asyncio.wait_for(anext(lines), 5)


async def test_a_complete_line_over_the_bound_fails_even_inside_one_chunk() -> None:
    with pytest.raises(LineTooLong):
        await _read(BoundedLines(_stream(b"x" * 20 + b"\nok\n"), 8, chunk=1024))


def test_line_too_long_is_in_the_error_tree_and_a_value_error() -> None:
    assert issubclass(LineTooLong, SubprocessError)
    assert issubclass(LineTooLong, ValueError)


@pytest.mark.parametrize(("max_line", "chunk"), [(0, 1), (1, 0)])
async def test_bounds_must_be_positive(max_line: int, chunk: int) -> None:
    with pytest.raises(ValueError, match="must be positive"):
        BoundedLines(asyncio.StreamReader(), max_line, chunk=chunk)


@given(
    st.lists(st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"")), max_size=8),
    st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"")),
    st.integers(1, 7),
)
def test_any_split_gives_the_same_lines(lines: list[bytes], tail: bytes, chunk: int) -> None:
    data = b"".join(line + b"\n" for line in lines) + tail

    async def main() -> tuple[list[bytes], bytes]:
        reader = BoundedLines(_stream(data), 12, chunk=chunk)
        return await _read(reader), reader.tail

    assert asyncio.run(main()) == (lines, tail)


def _dropping(prefix: bytes = b"{drop", max_line: int = 64) -> tuple[DroppingReader, list[int]]:
    reader = DroppingReader()
    drops: list[int] = []
    reader.drop_lines(prefix, lambda: drops.append(1), max_line)
    return reader, drops


async def test_dropped_lines_never_reach_the_reader_in_any_split() -> None:
    data = b'{drop 1}\n{"keep":1}\n{drop 2}\n{dro\n{"keep":2}\n{drop 3}\n'
    for cut_a in range(len(data)):
        for cut_b in range(cut_a, len(data)):
            reader, drops = _dropping()
            for piece in (data[:cut_a], data[cut_a:cut_b], data[cut_b:]):
                reader.feed_data(piece)
            reader.feed_eof()
            lines = await _read(BoundedLines(reader, 64))
            # A line whose prefix came split may pass (the consumer drops it by its prefix
            # too); a kept line is never lost or cut.
            assert [line for line in lines if not line.startswith(b"{drop")] == [
                b'{"keep":1}',
                b"{dro",
                b'{"keep":2}',
            ]
            assert len(drops) + sum(line.startswith(b"{drop") for line in lines) == 3


async def test_a_chunk_of_dropped_lines_wakes_no_reader() -> None:
    reader, drops = _dropping()
    reader.feed_data(b"{drop a}\n{drop b}\n")
    assert drops == [1, 1]
    assert not reader._buffer  # type: ignore[attr-defined]
    reader.feed_data(b"{drop c")  # a line's start is enough
    assert drops == [1, 1, 1]
    reader.feed_data(b" more}\nkept\n")
    reader.feed_eof()
    assert await _read(BoundedLines(reader, 64)) == [b"kept"]


async def test_an_endless_dropped_line_still_fails_the_bounded_reader() -> None:
    reader, _ = _dropping(max_line=16)
    reader.feed_data(b"{drop" + b"x" * 40)
    assert reader._buffer  # type: ignore[attr-defined]  # past the bound: fed, not dropped
    reader.feed_data(b"\n")
    reader.feed_eof()
    with pytest.raises(LineTooLong):
        await _read(BoundedLines(reader, 16))


async def test_installed_mid_line_the_partial_line_is_kept() -> None:
    reader = DroppingReader()
    reader.feed_data(b'{"a":')
    reader.drop_lines(b"{drop", lambda: None, 64)
    reader.feed_data(b'1}\n{drop}\n{"b":2}\n')
    reader.feed_eof()
    assert await _read(BoundedLines(reader, 64)) == [b'{"a":1}', b'{"b":2}']
