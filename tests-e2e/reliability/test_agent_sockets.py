"""Agent sockets are credentials (issue 24): ``SSH_AUTH_SOCK`` and ``GPG_AGENT_INFO`` no longer
pass the default scrub; a profile forwards them by name.

A real tool command (Codex's ``exec_command``, Claude Code's Bash) prints its whole environment,
which goes back to the model in the next request. Under the default scrub the canary socket
paths reach no request; forwarded by name (``inherit_env``, and ``tool_env`` so tool commands
such as ``git push`` see it) the SSH canary is in the tool's output, which proves the command
did print its environment.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from dsh.subagent import StopReason
from dsh.subagent_codex.testing import FunctionCallItem, MessageItem, Reply

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(120)]


async def _tool_env_output(codex: Any, **fields: Any) -> tuple[str, list[bytes]]:
    call = {"cmd": "env", "login": False, "yield_time_ms": 10_000}
    codex.server.queue(Reply((FunctionCallItem("exec_command", call),)))
    codex.server.queue(Reply((MessageItem("done"),)))
    before = len(codex.server.requests)
    async with await codex.provider(**fields).start(codex.request("show env")) as run:
        result = await run.result()
    assert result.stop_reason is StopReason.COMPLETED, result.diagnostic
    requests = codex.server.requests[before:]
    assert len(requests) == 2
    tool_output = json.dumps(requests[1].body)
    assert "PATH=" in tool_output, "the tool did print its environment"
    return tool_output, [r.raw_body for r in requests]


async def test_agent_sockets_reach_a_child_only_when_forwarded_by_name(
    codex: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ssh = f"/tmp/ssh-CANARY-{uuid.uuid4().hex}/agent.1"
    gpg = f"/run/user/0/gnupg/S.gpg-agent-CANARY-{uuid.uuid4().hex}:0:1"
    monkeypatch.setenv("SSH_AUTH_SOCK", ssh)
    monkeypatch.setenv("GPG_AGENT_INFO", gpg)

    _, bodies = await _tool_env_output(codex)
    assert not any(ssh.encode() in body or gpg.encode() in body for body in bodies)

    forwarded = {"inherit_env": ["SSH_AUTH_SOCK"], "tool_env": ["SSH_AUTH_SOCK"]}
    tool_output, bodies = await _tool_env_output(codex, **forwarded)
    assert f"SSH_AUTH_SOCK={ssh}" in tool_output
    assert not any(gpg.encode() in body for body in bodies), "only the named socket passes"


async def test_claude_code_bash_sees_an_agent_socket_only_when_forwarded(
    claude: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ssh = f"/tmp/ssh-CANARY-{uuid.uuid4().hex}/agent.1"
    monkeypatch.setenv("SSH_AUTH_SOCK", ssh)
    outputs = []
    for fields in ({}, {"inherit_env": ["SSH_AUTH_SOCK"], "tool_env": ["SSH_AUTH_SOCK"]}):
        claude.server.queue_tool_call("Bash", {"command": "env", "description": "show env"})
        claude.server.queue_text("done")
        before = len(claude.server.requests)
        provider = claude.provider(
            permission_mode="bypassPermissions", env={"IS_SANDBOX": "1"}, **fields
        )
        async with await provider.start(claude.request("show env")) as run:
            result = await run.result()
        assert result.stop_reason is StopReason.COMPLETED, result.diagnostic
        requests = claude.server.requests[before:]
        assert len(requests) >= 2
        output = json.dumps(requests[-1].body)
        assert "PATH=" in output, "the tool did print its environment"
        outputs.append((output, [r.raw_body for r in requests]))
    (_, scrubbed_bodies), (forwarded_output, _) = outputs
    assert not any(ssh.encode() in body for body in scrubbed_bodies)
    assert f"SSH_AUTH_SOCK={ssh}" in forwarded_output
