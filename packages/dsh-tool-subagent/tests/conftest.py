"""Each test gets a job store of its own: the default store lives under ``XDG_STATE_HOME``.

Test modules never import this file; the helpers they share come through fixtures.
"""

from __future__ import annotations

import io
import re
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from dsh.tool_subagent import Harness, ToolResult
from dsh.tool_subagent._cli import run_command


@pytest.fixture(autouse=True)
def private_state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    return state


def _started_id(started: ToolResult) -> str:
    """The id a background start returned: its text names it, and its value carries it."""
    match = re.fullmatch(r"started background subagent job (subagent-[0-9a-f]{12})", started.text)
    assert not started.is_error, started.text
    assert match is not None, started.text
    assert started.value == {"job_id": match.group(1)}
    return match.group(1)


@pytest.fixture
def started_id() -> Callable[[ToolResult], str]:
    """``started_id(result)``: the job id of a background start, checked in text and value."""
    return _started_id


async def _run_fake(
    outcome: str, task: str = "task", background: bool = False
) -> tuple[int, str, str, int]:
    """``dsh run`` (``run_command``) on one ``fake`` provider that ends with ``outcome``: the exit
    code, stdout, stderr, and how many runs the harness started."""
    profile = {
        "provider": [{"kind": "fake", "config": {"outcome": outcome}}],
        "tool": [{"provider": "fake", "max_depth": "provider-managed"}],
    }
    out, err = io.StringIO(), io.StringIO()
    async with Harness.from_profile(profile) as harness:
        rc = await run_command(
            harness, task, cwd="/tmp", background=background, stdout=out, stderr=err
        )
        starts: int = harness.describe()["starts"]
    return rc, out.getvalue(), err.getvalue(), starts


@pytest.fixture
def run_fake() -> Callable[..., Awaitable[tuple[int, str, str, int]]]:
    """``await run_fake(outcome, task, background)``: ``dsh run`` on a ``fake`` provider."""
    return _run_fake
