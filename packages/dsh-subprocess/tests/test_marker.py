"""The tree marker round-trips through its one builder and parser."""

from __future__ import annotations

import pytest

from dsh.subprocess._marker import format_marker, parse_marker


def test_marker_round_trips() -> None:
    assert parse_marker(format_marker("4242:1700000000.125", "ab12")) == (4242, 1700000000.125)


@pytest.mark.parametrize("value", ["", "1:2", "1:2:", "x:2:u", "1:y:u", "0:2:u", "1:2:u:v"])
def test_malformed_marker_is_none(value: str) -> None:
    assert parse_marker(value) is None
