"""The opening answers ``dsh mcp`` gives before the SDK loads are the SDK's own bytes.

Each case sends the same opening to the SDK's server (in-process, over memory streams) and to
:class:`Opening`, and compares the SDK's frame, written as its stdio transport writes it, with
the opening's. No product runs here: the harness uses ``FakeProvider``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.shared.memory import create_client_server_memory_streams
from mcp.shared.message import SessionMessage
from mcp.types import JSONRPCNotification, JSONRPCRequest
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from dsh.jobs import JobRegistry
from dsh.jobs.tools import job_tools
from dsh.subagent import Capabilities, SubagentService
from dsh.subagent.testing import FakeProvider
from dsh.subprocess.testing import run_to_exit
from dsh.tool_subagent import Harness, SubagentTool, SubagentToolConfig
from dsh.tool_subagent._mcp.opening import HANDSHAKE_VERSIONS, Opening
from dsh.tool_subagent._mcp.server import serve_connection

SCHEMA = {
    "type": "object",
    "properties": {"failing": {"type": "array", "items": {"type": "string"}}},
    "required": ["failing"],
    "additionalProperties": False,
}


def _harness(*, typed: bool) -> Harness:
    service = SubagentService()
    harness_jobs = JobRegistry()
    provider = FakeProvider("fake", capabilities=Capabilities(output_schema=True))
    service.register(provider)
    extra: dict[str, Any] = (
        {"output_schema": SCHEMA, "enable_run_in_background": False} if typed else {}
    )
    config = SubagentToolConfig(
        provider="fake", tool_name="subagent_fake", max_depth="provider-managed", **extra
    )
    tools: list[Any] = [SubagentTool(config, service, harness_jobs), *job_tools(harness_jobs)]
    return Harness(service, harness_jobs, tuple(tools), {"fake": "fake"})


def _opening_lines(version: str) -> list[dict[str, Any]]:
    params = {
        "protocolVersion": version,
        "capabilities": {},
        "clientInfo": {"name": "c", "version": "1"},
    }
    return [
        {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": "list", "method": "tools/list", "params": {}},
    ]


def _session_message(line: dict[str, Any]) -> SessionMessage:
    if "id" not in line:
        return SessionMessage(JSONRPCNotification(**line))
    return SessionMessage(JSONRPCRequest(**line))


async def _sdk_frames(harness: Harness, lines: list[dict[str, Any]]) -> list[bytes]:
    """The SDK's answers, as its stdio transport writes them."""
    frames: list[bytes] = []
    async with (
        create_client_server_memory_streams() as (client, server),
        anyio.create_task_group() as group,
    ):
        group.start_soon(lambda: serve_connection(harness, *server))
        client_read, client_write = client
        for line in lines:
            await client_write.send(_session_message(line))
        with anyio.fail_after(10):
            async for item in client_read:
                assert isinstance(item, SessionMessage)
                dumped = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                frames.append(dumped.encode("utf-8") + b"\n")
                if len(frames) == 2:
                    break
        await client_write.aclose()
    return frames


def _opening_frames(harness: Harness, lines: list[dict[str, Any]]) -> tuple[list[bytes], Opening]:
    opening = Opening(harness)
    frames = []
    for line in lines:
        frame, _ = opening.take(json.dumps(line).encode("utf-8"))
        if frame is not None:
            frames.append(frame)
    return frames, opening


def test_the_handshake_versions_are_the_sdks() -> None:
    assert HANDSHAKE_VERSIONS == HANDSHAKE_PROTOCOL_VERSIONS


@pytest.mark.parametrize("typed", [False, True])
@pytest.mark.parametrize("version", [*HANDSHAKE_VERSIONS, "2026-07-28", "1999-01-01"])
async def test_initialize_and_tools_list_are_the_sdks_bytes(version: str, typed: bool) -> None:
    lines = _opening_lines(version)
    async with _harness(typed=typed) as harness:
        ours, opening = _opening_frames(harness, lines)
        theirs = await _sdk_frames(harness, lines)
    assert ours == theirs
    assert (b'"outputSchema"' in ours[1]) is typed
    # The SDK still reads the handshake (its answer to it is dropped), not the tool list.
    assert opening.answered == 0
    assert bytes(opening.replay).count(b"\n") == 2


def test_an_opening_that_is_not_a_handshake_is_left_to_the_sdk_whole() -> None:
    harness = _harness(typed=False)
    opening = Opening(harness)
    discover = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}}
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    assert opening.take(json.dumps(discover).encode()) == (None, True)
    assert opening.take(json.dumps(listing).encode()) == (None, True)
    assert opening.answered is None
    assert bytes(opening.replay).count(b"\n") == 2


_NO_SDK = """
import json, sys
from dsh.tool_subagent._mcp.opening import Opening, prepared

harness = prepared(sys.argv[1])
opening = Opening(harness)
client = {"name": "c", "version": "1"}
params = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": client}
for line in (
    {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params},
    {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
):
    frame, _ = opening.take(json.dumps(line).encode())
    assert frame is not None
sdk = ("mcp", "mcp_types", "anyio", "opentelemetry")
loaded = sorted(m for m in sys.modules if m.split(".")[0] in sdk)
print(loaded, "dsh.tool_subagent._mcp.server" in sys.modules)
"""


async def test_the_opening_answers_import_no_mcp_sdk_nor_opentelemetry(tmp_path: Path) -> None:
    script = tmp_path / "no_sdk.py"
    script.write_text(_NO_SDK, encoding="utf-8")
    # The job tools alone: this package's tests run without any product installed (CI runs
    # each package alone). That building the Codex provider imports no MCP SDK either is
    # tests-e2e/test_startup_imports.py's (its run_codex path).
    profile = tmp_path / "jobs-only.toml"
    profile.write_text("provider = []\ntool = []\n", encoding="utf-8")
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)}
    done = await run_to_exit([sys.executable, str(script), str(profile)], env=env, timeout_s=60)
    assert (done.exit_code, done.stdout) == (0, "[] False\n"), done.stderr


def test_serve_answers_from_the_pipe_and_leaves_the_rest_to_the_sdk() -> None:
    """Over a real pipe: the opening is answered, the SDK's load starts once the tool list is
    answered, and what the SDK must read (the handshake, then the unanswered lines and a partial
    one) is kept in order."""
    harness = _harness(typed=False)
    lines = _opening_lines("2025-06-18")
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "job_list"}}
    wire = b"".join(json.dumps(line).encode() + b"\n" for line in [*lines, call]) + b'{"partial'
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    os.write(stdin_w, wire)
    loaded = threading.Event()
    loads: list[int] = []

    def load() -> None:
        loads.append(1)
        loaded.set()

    opening = Opening(harness)
    try:
        opening.serve((stdin_r, stdout_w), loaded, load, lambda: False)
        os.close(stdout_w)
        written = os.read(stdout_r, 1 << 20)
    finally:
        for fd in (stdin_r, stdin_w, stdout_r):
            os.close(fd)
    answers = [json.loads(frame) for frame in written.splitlines()]
    assert [answer["id"] for answer in answers] == [0, "list"]
    assert loads == [1]
    replay = bytes(opening.replay)
    assert replay.startswith(json.dumps(lines[0]).encode() + b"\n")
    assert replay.endswith(json.dumps(call).encode() + b'\n{"partial')
    assert b"tools/list" not in replay
    assert opening.answered == 0
    assert not opening.eof
