"""``dsh demo --serve``: loopback models and a profile for them, until a signal stops it.

The server runs as a program through ``dsh.subprocess``. The test reads the printed profile,
runs ``dsh run --profile`` against it with each real product, stops the server with a signal and
checks that it exited 0 and that its directory (homes and profile) and processes are gone.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import tomllib
from pathlib import Path

import pytest

from dsh.subagent_claude_code._demo import SERVE_ANSWER as CLAUDE_ANSWER
from dsh.subagent_codex._demo import SERVE_ANSWER as CODEX_ANSWER
from dsh.subprocess import Collect, ManagedProcess, SpawnSpec, default_runtime
from dsh.tool_subagent._demo.scenarios import owned_marked_processes
from dsh.tool_subagent._demo.serve import END_OF_PROFILE

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(150)]

LIMIT_S = 60.0
CLI = [sys.executable, "-m", "dsh.tool_subagent._cli"]


async def _read_profile(server: ManagedProcess) -> str:
    assert server.stdout is not None
    lines: list[str] = []
    async with asyncio.timeout(LIMIT_S):
        while not lines or lines[-1] != END_OF_PROFILE + "\n":
            line = (await server.stdout.readline()).decode()
            assert line, f"the server closed stdout early: {server.collected('stderr').text}"
            lines.append(line)
    return "".join(lines)


async def _dsh_run(profile: Path, workspace: Path, tool: str) -> tuple[int | None, str, str]:
    spec = SpawnSpec(
        argv=[
            *CLI,
            "run",
            "--profile",
            str(profile),
            "--tool",
            tool,
            "--cwd",
            str(workspace),
            "hi",
        ],
        cwd=str(workspace),
        stdout=Collect(1 << 16),
        stderr=Collect(1 << 16),
    )
    async with await default_runtime().spawn(spec) as proc:
        async with asyncio.timeout(LIMIT_S):
            outcome = await proc.wait()
        leftover = await asyncio.to_thread(owned_marked_processes, proc.pid)
    assert leftover == []
    return outcome.exit_code, proc.collected("stdout").text, proc.collected("stderr").text


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
async def test_demo_serve_profile_drives_dsh_run_then_stops_clean(
    tmp_path: Path, signum: signal.Signals
) -> None:
    spec = SpawnSpec(
        argv=[*CLI, "demo", "--serve"], stdout="pipe", stderr=Collect(1 << 16), grace_ms=5000
    )
    server = await default_runtime().spawn(spec)
    try:
        text = await _read_profile(server)
        profile_data = tomllib.loads(text)
        assert [p["kind"] for p in profile_data["provider"]] == ["codex", "claude-code"]
        codex_home = Path(profile_data["provider"][0]["config"]["env"]["CODEX_HOME"])
        served_dir = codex_home.parent
        assert served_dir.name.startswith("dsh-demo-serve-")
        assert (served_dir / "profile.toml").read_text(encoding="utf-8") == text
        profile = tmp_path / "demo.toml"
        profile.write_text(text, encoding="utf-8")
        workspace = tmp_path / "workspace"
        workspace.mkdir()
        assert await _dsh_run(profile, workspace, "subagent_codex") == (0, CODEX_ANSWER + "\n", "")
        assert await _dsh_run(profile, workspace, "subagent_claude_code") == (
            0,
            CLAUDE_ANSWER + "\n",
            "",
        )
        os.kill(server.pid, signum)
        async with asyncio.timeout(LIMIT_S):
            outcome = await server.wait()
        assert outcome.exit_code == 0, server.collected("stderr").text
        assert server.collected("stderr").text.endswith("dsh demo --serve: stopped\n")
        assert not served_dir.exists()
        assert await asyncio.to_thread(owned_marked_processes, server.pid) == []
    finally:
        await server.aclose()
