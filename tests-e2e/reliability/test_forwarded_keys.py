"""A key the provider forwards to the product never reaches a tool command or the model.

Each product gets canary credentials from the ambient env, by the provider's default credential
names (Codex: ``OPENAI_API_KEY``, ``CODEX_API_KEY``; Claude Code: ``ANTHROPIC_API_KEY``) and by
``inherit_env``. A tool command prints its whole environment and the named variables; what it
printed goes back to the model in the next request. "Every model request" means each request's
body (prompt, tool outputs, instructions): the canary must be absent from all of them. Headers
are checked separately: the product's own key is its auth header there (its legitimate use),
which also proves that the default really forwarded it.
"""

from __future__ import annotations

import json
import re
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest

from dsh.subagent import StopReason
from dsh.subagent_claude_code import ClaudeCodeProvider, ClaudeCodeProviderConfig
from dsh.subagent_claude_code.testing import hermetic_env as claude_env
from dsh.subagent_codex import CodexProvider, CodexProviderConfig
from dsh.subagent_codex.testing import (
    FunctionCallItem,
    MessageItem,
    Reply,
    hermetic_env,
    write_codex_home,
)

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(120)]

SHOW = (
    'env; echo "seen=${OPENAI_API_KEY:-unset}/${CODEX_API_KEY:-unset}/${ANTHROPIC_API_KEY:-unset}"'
)


def _canary() -> str:
    return f"sk-CANARY-{uuid.uuid4().hex}"


async def test_codex_tool_never_sees_a_forwarded_key(
    codex: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key, other = _canary(), _canary()
    monkeypatch.setenv("OPENAI_API_KEY", key)
    monkeypatch.setenv("CODEX_API_KEY", other)
    monkeypatch.setenv("FORWARDED_EXTRA", key)
    call = {"cmd": SHOW, "login": False, "yield_time_ms": 10_000}
    codex.server.queue(Reply((FunctionCallItem("exec_command", call),)))
    codex.server.queue(Reply((MessageItem("done"),)))
    # The mock provider reads its key from OPENAI_API_KEY, as the real OpenAI provider does;
    # the hermetic kit's blanks are dropped so the default forwarding is what is tested.
    home = write_codex_home(
        tmp_path / "keyed-home", codex.server.base_url, "mock-model", env_key="OPENAI_API_KEY"
    )
    env = {k: v for k, v in hermetic_env(home).items() if v != ""}
    provider = CodexProvider(
        CodexProviderConfig(env=env, inherit_env=("FORWARDED_EXTRA",), stderr="discard")
    )
    async with await provider.start(codex.request("show env")) as run:
        result = await run.result()
    assert result.stop_reason is StopReason.COMPLETED, result.diagnostic
    bodies = [request.raw_body for request in codex.server.requests]
    assert len(bodies) == 2
    tool_output = json.dumps(codex.server.requests[1].body)
    assert "seen=unset/unset/unset" in tool_output, re.findall(r"seen=[^\\]*", tool_output)
    assert "PATH=" in tool_output, "the tool did print its environment"
    for body in bodies:
        assert key.encode() not in body
        assert other.encode() not in body
    assert all(r.headers.get("authorization") == f"Bearer {key}" for r in codex.server.requests), (
        "OPENAI_API_KEY was forwarded by default and used as the product's own auth header"
    )


@pytest.mark.parametrize("private_tmp", [True, False])
async def test_claude_code_tool_never_sees_a_forwarded_key(
    claude: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, private_tmp: bool
) -> None:
    # The run's own dir (private TMPDIR and/or the env script) goes here, to be checked below.
    run_dirs = tmp_path / "run-dirs"
    run_dirs.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(run_dirs))
    # Without a private TMPDIR the CLI writes its scratch (``claude-<uid>/``) under the ambient
    # one, which the run does not own: point that at the test's own dir, not the machine's /tmp.
    ambient_tmp = tmp_path / "ambient-tmp"
    ambient_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(ambient_tmp))
    key = _canary()
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    monkeypatch.setenv("FORWARDED_EXTRA", key)
    claude.server.queue_tool_call("Bash", {"command": SHOW, "description": "show env"})
    claude.server.queue_text("done")
    env = claude_env(claude.root, claude.server.base_url)
    del env["ANTHROPIC_API_KEY"]  # the ambient one must come through the default forwarding
    provider = ClaudeCodeProvider(
        ClaudeCodeProviderConfig(
            permission_mode="bypassPermissions",
            env={**env, "IS_SANDBOX": "1"},
            inherit_env=["FORWARDED_EXTRA"],
            stderr="discard",
            private_tmp=private_tmp,
        )
    )
    async with await provider.start(claude.request("show env")) as run:
        result = await run.result()
    assert result.stop_reason is StopReason.COMPLETED, result.diagnostic
    assert len(claude.server.requests) >= 2
    tool_output = json.dumps(claude.server.requests[-1].body)
    assert "seen=unset/unset/unset" in tool_output, re.findall(r"seen=[^\\]*", tool_output)
    assert "PATH=" in tool_output, "the tool did print its environment"
    for request in claude.server.requests:
        assert key.encode() not in request.raw_body
    assert all(r.headers.get("x-api-key") == key for r in claude.server.requests), (
        "ANTHROPIC_API_KEY was forwarded by default and used as the product's own auth header"
    )
    assert list(run_dirs.iterdir()) == [], "the run's dir is removed with the run"
    scratch = [p.name for p in ambient_tmp.iterdir()]
    if private_tmp:
        assert scratch == [], "a private TMPDIR keeps the product out of the ambient one"
    else:
        assert any(name.startswith("claude-") for name in scratch), scratch


SHOW_PLAIN = 'echo "plain=${AMBIENT_PLAIN:-unset} path=${PATH:+set}"'


async def test_core_policy_runs_both_products_without_the_rest_of_the_ambient_env(
    codex: Any, claude: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``env_policy = "core"``: the products still answer; an ambient plain name is gone."""
    monkeypatch.setenv("AMBIENT_PLAIN", "ambient-plain-value")
    call = {"cmd": SHOW_PLAIN, "login": False, "yield_time_ms": 10_000}
    codex.server.queue(Reply((FunctionCallItem("exec_command", call),)))
    codex.server.queue(Reply((MessageItem("done"),)))
    claude.server.queue_tool_call("Bash", {"command": SHOW_PLAIN, "description": "show"})
    claude.server.queue_text("done")
    runs: list[tuple[Any, Any, str]] = [
        (codex.provider(env_policy="core"), codex.request("core"), "codex"),
        (
            claude.provider(
                env_policy="core", permission_mode="bypassPermissions", env={"IS_SANDBOX": "1"}
            ),
            claude.request("core"),
            "claude",
        ),
    ]
    for provider, request, product in runs:
        async with await provider.start(request) as run:
            result = await run.result()
        assert result.stop_reason is StopReason.COMPLETED, result.diagnostic
        bodies = (
            [r.body for r in codex.server.requests]
            if product == "codex"
            else [r.body for r in claude.server.requests]
        )
        tool_output = json.dumps(bodies)
        assert "plain=unset path=set" in tool_output, re.findall(r"plain=[^\\]*", tool_output)
