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


def write_profile(setup: Any, path: Path, address: str = "auto") -> Path:
    jobs = {"executor": "ray", "address": address, "max_runs_per_node": setup.runs_per_node}
    table = {**setup.profile, "jobs": jobs}
    path.write_text("".join(f"{k} = {toml_value(v)}\n" for k, v in table.items()), "utf-8")
    return path


async def dsh_run_background(
    setup: Any, env: dict[str, str], profile: Path, task: str
) -> tuple[int | None, str, str]:
    """``dsh run --background`` of ``task`` with Codex: (exit code, stdout, stderr)."""
    argv = [str(DSH), "run", "--background", "--profile", str(profile)]
    argv += ["--cwd", str(setup.workspace), "--tool", "subagent_codex", task]
    spec = SpawnSpec(
        argv=argv,
        cwd=str(setup.workspace),
        env=env,
        stdout=Collect(1 << 16),
        stderr=Collect(1 << 16),
    )
    process = await default_runtime().spawn(spec)
    try:
        with anyio.fail_after(180):
            outcome = await process.wait()
    finally:
        await process.aclose()
    stdout, stderr = process.collected("stdout").text, process.collected("stderr").text
    return outcome.exit_code, stdout, stderr


async def test_dsh_run_background_runs_the_job_on_a_worker_node(
    setup: Any, ray_kit: Any, tmp_path: Path
) -> None:
    profile = write_profile(setup, tmp_path / "profile.toml")
    code, stdout, stderr = await dsh_run_background(
        setup, ray_kit.driver_env(), profile, "cli on ray"
    )
    assert code == 0, stderr
    assert stdout == "codex says: cli on ray\n"
    assert "started background subagent job subagent-1" in stderr
    (request,) = [r for r in setup.codex.requests if r.task == "cli on ray"]
    assert request.headers["authorization"] == f"Bearer {ray_kit.canary}"


async def test_a_ray_client_address_runs_the_job_on_a_worker_node(
    setup: Any, ray_kit: Any, tmp_path: Path
) -> None:
    """``address = "ray://127.0.0.1:<port>"``: the command is a Ray Client of the head's client
    server, and the job still runs on a worker node. It has no ``RAY_ADDRESS`` and a
    ``RAY_TMPDIR`` of its own, so nothing but that address can lead it to the cluster."""
    profile = write_profile(setup, tmp_path / "profile.toml", address=ray_kit.client_address)
    (tmp_path / "client-tmp").mkdir()
    env = {**ray_kit.driver_env(), "RAY_TMPDIR": str(tmp_path / "client-tmp")}
    del env["RAY_ADDRESS"]
    servers_before = ray_kit.client_servers()
    with ray_kit.nodes_running_marked() as nodes:
        code, stdout, stderr = await dsh_run_background(setup, env, profile, "ray client")
    assert code == 0, stderr
    assert stdout == "codex says: ray client\n"
    (request,) = [r for r in setup.codex.requests if r.task == "ray client"]
    assert request.headers["authorization"] == f"Bearer {ray_kit.canary}"
    assert nodes, "the product never ran below a raylet"
    assert nodes <= {node.node_id for node in ray_kit.workers}
    # The head's client server started a server of its own for this client (its log file).
    assert len(ray_kit.client_servers() - servers_before) == 1


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
