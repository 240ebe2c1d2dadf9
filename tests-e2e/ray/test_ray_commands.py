"""``dsh run --background`` and ``dsh mcp`` with ``[jobs] executor = "ray"``, the REAL products.

``dsh mcp`` is driven twice: by the ``mcp`` SDK's client, and by the real Claude Code CLI as
its MCP host against a loopback model of its own.

Each command is a Ray driver of its own (``address = "auto"`` through ``RAY_ADDRESS``, the
cluster's token in its environment); the job runs on a worker node, and the model sees what it
sees with the local executor.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client, types

from dsh.subagent_claude_code._command import bundled_cli
from dsh.subagent_claude_code.testing import Behaviour, FakeMessagesServer, host_tmp
from dsh.subagent_claude_code.testing import RecordedRequest as ClaudeRequest
from dsh.subagent_claude_code.testing import hermetic_env as claude_env
from dsh.subprocess import Collect, SpawnSpec, default_runtime
from dsh.tool_subagent._demo.serve import to_toml

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(240)]

#: A background start's text; job ids are random (``subagent-<12 hex>``).
STARTED = re.compile(r"started background subagent job (subagent-[0-9a-f]{12})")

DSH = Path(sys.executable).with_name("dsh")


def write_profile(setup: Any, path: Path, address: str = "auto") -> Path:
    jobs = {"executor": "ray", "address": address, "max_runs_per_node": setup.runs_per_node}
    table = {**setup.profile, "jobs": jobs}
    path.write_text(to_toml(table), encoding="utf-8")
    return path


async def dsh_run_background(
    setup: Any, env: dict[str, str], profile: Path, task: str
) -> tuple[int | None, str, str]:
    """``dsh run --background`` of ``task`` with Codex: (exit code, stdout, stderr)."""
    argv = [str(DSH), "-vv", "run", "--background", "--profile", str(profile)]
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
    assert STARTED.search(stderr), stderr
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
    # The head's client server started a server of its own for this client (its log file); more
    # than one when Ray lost the first ones (the executor asks again, a bounded number of times).
    assert len(ray_kit.client_servers() - servers_before) >= 1


async def test_dsh_mcp_serves_background_jobs_run_on_the_cluster(
    setup: Any, ray_kit: Any, tmp_path: Path
) -> None:
    profile = write_profile(setup, tmp_path / "profile.toml")
    env = {"PATH": os.environ["PATH"], "HOME": os.environ["HOME"], **ray_kit.driver_env()}
    env["XDG_STATE_HOME"] = os.environ["XDG_STATE_HOME"]  # the session's job store
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
            match = STARTED.fullmatch(started)
            assert match is not None, started
            job_id = match.group(1)
            listed = await call(session, "job_list", {})
            assert listed.split(" ", 1)[0] == job_id
            output = await call(session, "job_output", {"job_id": job_id, "wait": True})
            assert output == "claude says: mcp job\n[status: completed]"
    assert "Traceback" not in stderr_path.read_text(encoding="utf-8")


async def call(session: ClientSession, name: str, arguments: dict[str, Any]) -> str:
    result = await session.call_tool(name, arguments, read_timeout_seconds=120)
    (block,) = result.content
    assert isinstance(block, types.TextContent)
    assert not result.is_error, block.text
    return block.text


# ---- a real MCP host: the Claude Code CLI drives ``dsh mcp`` on the Ray executor -----------

NAMESPACE = "mcp__dsh"
HOST_DONE = "host done"


class HostModel:
    """The host CLI's model: start a background Codex job, poll ``job_list`` until a tool result
    carries the completion notice, read the job with ``job_output``, then answer."""

    def __init__(self) -> None:
        self.deadline = time.monotonic() + 150.0
        self.seen: list[list[str]] = []

    def route(self, request: ClaudeRequest) -> Behaviour | None:
        results = request.tool_results
        self.seen.append(results)
        if not results:
            arguments = {"description": "bg job", "prompt": "host job", "run_in_background": True}
            return self._call("subagent_codex", arguments)
        if not any("finished [status:" in text for text in results):
            if time.monotonic() > self.deadline:
                return Behaviour("text", text=HOST_DONE)
            time.sleep(0.1)  # the route runs on the loopback server's own thread
            return self._call("job_list", {})
        noticed = next(i for i, text in enumerate(results) if "finished [status:" in text)
        if len(results) == noticed + 1:
            match = STARTED.search(results[0])
            if match is None:  # no job id to read: end here (the test's checks then fail)
                return Behaviour("text", text=HOST_DONE)
            return self._call("job_output", {"job_id": match.group(1)})
        return Behaviour("text", text=HOST_DONE)

    @staticmethod
    def _call(name: str, arguments: dict[str, Any]) -> Behaviour:
        return Behaviour("tool_use", tool_name=f"{NAMESPACE}__{name}", tool_input=arguments)

    @property
    def results(self) -> list[str]:
        return max(self.seen, key=len, default=[])


async def test_claude_code_as_mcp_host_runs_a_background_job_on_the_cluster(
    setup: Any, ray_kit: Any, tmp_path: Path
) -> None:
    profile = write_profile(setup, tmp_path / "profile.toml")
    server = {
        "command": str(DSH),
        "args": ["mcp", "--profile", str(profile), "--cwd", str(setup.workspace)],
        "env": ray_kit.driver_env(),
    }
    mcp_json = tmp_path / "dsh-mcp.json"
    mcp_json.write_text(json.dumps({"mcpServers": {"dsh": server}}), encoding="utf-8")
    model = HostModel()
    with FakeMessagesServer(route=model.route) as host, ray_kit.nodes_running_marked() as nodes:
        env = claude_env(tmp_path / "host-claude", host.base_url)
        env |= host_tmp(tmp_path / "host-tmp")
        argv = [str(bundled_cli()), "-p", "delegate it", "--mcp-config", str(mcp_json)]
        argv += ["--strict-mcp-config", "--permission-mode", "bypassPermissions"]
        argv += ["--allowedTools", f"{NAMESPACE}__*", "--no-session-persistence"]
        process = await default_runtime().spawn(
            SpawnSpec(
                argv=argv,
                cwd=str(setup.workspace),
                env={**env, "IS_SANDBOX": "1"},  # bypassPermissions as root needs it
                stdout=Collect(1 << 20),
                stderr=Collect(1 << 20),
            )
        )
        try:
            with anyio.fail_after(200):
                outcome = await process.wait()
        finally:
            await process.aclose()
    stderr = process.collected("stderr").text
    assert outcome.exit_code == 0, stderr[-3000:]
    assert process.collected("stdout").text.strip() == HOST_DONE, stderr[-3000:]
    results = model.results
    match = STARTED.search(results[0])
    assert match is not None, results
    notice = (
        f"background job {match.group(1)} (subagent: bg job) finished [status: completed]."
        " Read its output with job_output."
    )
    assert sum(notice in text for text in results) == 1, results  # in a tool result, once
    assert "codex says: host job\n[status: completed]" in results[-1], results
    (request,) = [r for r in setup.codex.requests if r.task == "host job"]
    assert request.headers["authorization"] == f"Bearer {ray_kit.canary}"
    assert nodes, "the product never ran below a raylet"
    assert nodes <= {node.node_id for node in ray_kit.workers}
