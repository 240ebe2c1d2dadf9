"""``dsh run --background`` and ``dsh mcp`` with ``[jobs] executor = "ray"``, the REAL products.

Each command is a Ray driver of its own (``address = "auto"`` through ``RAY_ADDRESS``, the
cluster's token in its environment); the job runs on a worker node, and the model sees what it
sees with the local executor.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client, types

from dsh.subprocess import Collect, SpawnSpec, default_runtime

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(240)]

DSH = Path(sys.executable).with_name("dsh")


def toml_value(value: Any) -> str:
    """Inline TOML for the plain values a profile holds (a JSON string is a TOML string)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    items = (f"{json.dumps(key)} = {toml_value(item)}" for key, item in value.items())
    return "{ " + ", ".join(items) + " }"


def write_profile(setup: Any, path: Path) -> Path:
    jobs = {"executor": "ray", "address": "auto", "max_runs_per_node": setup.runs_per_node}
    table = {**setup.profile, "jobs": jobs}
    path.write_text("".join(f"{k} = {toml_value(v)}\n" for k, v in table.items()), "utf-8")
    return path


async def test_dsh_run_background_runs_the_job_on_a_worker_node(
    setup: Any, ray_kit: Any, tmp_path: Path
) -> None:
    profile = write_profile(setup, tmp_path / "profile.toml")
    argv = [str(DSH), "run", "--background", "--profile", str(profile)]
    argv += ["--cwd", str(setup.workspace), "--tool", "subagent_codex", "cli on ray"]
    spec = SpawnSpec(
        argv=argv,
        cwd=str(setup.workspace),
        env=ray_kit.driver_env(),
        stdout=Collect(1 << 16),
        stderr=Collect(1 << 16),
    )
    process = await default_runtime().spawn(spec)
    try:
        with anyio.fail_after(180):
            outcome = await process.wait()
    finally:
        await process.aclose()
    stderr = process.collected("stderr").text
    assert outcome.exit_code == 0, stderr
    assert process.collected("stdout").text == "codex says: cli on ray\n"
    assert "started background subagent job subagent-1" in stderr
    (request,) = [r for r in setup.codex.requests if r.task == "cli on ray"]
    assert request.headers["authorization"] == f"Bearer {ray_kit.canary}"


async def test_dsh_mcp_serves_background_jobs_run_on_the_cluster(
    setup: Any, ray_kit: Any, tmp_path: Path
) -> None:
    profile = write_profile(setup, tmp_path / "profile.toml")
    env = {"PATH": os.environ["PATH"], "HOME": os.environ["HOME"], **ray_kit.driver_env()}
    params = StdioServerParameters(
        command=str(DSH),
        args=["mcp", "--profile", str(profile), "--cwd", str(setup.workspace)],
        cwd=str(setup.workspace),
        env=env,
    )
    stderr_path = tmp_path / "dsh-mcp.stderr"
    with stderr_path.open("w", encoding="utf-8") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read_stream, write_stream),
            ClientSession(read_stream, write_stream) as session,
        ):
            with anyio.fail_after(60):
                await session.initialize()
            started = await call(
                session,
                "subagent_claude_code",
                {"description": "mcp on ray", "prompt": "mcp job", "run_in_background": True},
            )
            assert started == "started background subagent job subagent-1"
            listed = await call(session, "job_list", {})
            assert listed.split(" ", 1)[0] == "subagent-1"
            output = await call(session, "job_output", {"job_id": "subagent-1", "wait": True})
            assert output == "claude says: mcp job\n[status: completed]"
    assert "Traceback" not in stderr_path.read_text(encoding="utf-8")


async def call(session: ClientSession, name: str, arguments: dict[str, Any]) -> str:
    result = await session.call_tool(name, arguments, read_timeout_seconds=120)
    (block,) = result.content
    assert isinstance(block, types.TextContent)
    assert not result.is_error, block.text
    return block.text
