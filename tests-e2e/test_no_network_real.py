"""No network, under each product's DEFAULT retry settings: every run still settles.

The model endpoint refuses connections (a closed loopback port). Measured at the pinned versions
(docs/liveness.md, "No network"):

- Codex (built-in ``openai`` provider, default features) retries forever: stream retries, a
  WebSocket-to-HTTP fallback at about 8 s, then "Reconnecting... waiting for network" notices at
  growing intervals (3, 8, 13, 23, 43, 63 s ...). The stall limit settles it, because retry
  notices are not activity.
- Claude Code retries 10 times (about 180 s) and then fails with ``category: connection``; each
  retry is an ``api_retry`` line. The stall limit settles it sooner, for the same reason.

With the notices counted as activity these runs stop much later (Codex at about 30 s, Claude
Code at about 14 s with the limits below), which is what each test tells apart.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from dsh.subagent_claude_code.testing import hermetic_env as claude_env
from dsh.tool_subagent import Caller, Harness
from dsh.tool_subagent._demo.scenarios import owned_marked_processes

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(180)]


def _closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _profile(kind: str, env: dict[str, str], stall_s: int) -> dict[str, Any]:
    return {
        "provider": [{"kind": kind, "config": {"stderr": "discard", "env": env}}],
        "tool": [{"provider": kind, "tool_name": "delegate", "stall_timeout_s": stall_s}],
    }


async def _settle(profile: dict[str, Any], workspace: Path) -> tuple[str, float]:
    async with Harness.from_profile(profile) as harness:
        began = time.monotonic()
        result = await harness.tool("delegate").call(
            {"description": "offline", "prompt": "hello"}, Caller("offline", str(workspace))
        )
        elapsed = time.monotonic() - began
    assert await asyncio.to_thread(owned_marked_processes, None) == []
    return result.text, elapsed


async def test_codex_with_no_network_settles_by_the_stall_limit(tmp_path: Path) -> None:
    home = tmp_path / "codex-home"
    home.mkdir()
    config = f'model = "gpt-5"\nopenai_base_url = {json.dumps(_closed_port_url() + "/v1")}\n'
    (home / "config.toml").write_text(config, encoding="utf-8")
    env = {
        "CODEX_HOME": str(home),
        "HOME": str(home),
        "OPENAI_API_KEY": "sk-dsh-offline-0000",
        "CODEX_API_KEY": "",
        "CODEX_APP_SERVER_DISABLE_MANAGED_CONFIG": "1",
        "RUST_LOG": "error",
    }
    workspace = tmp_path / "ws"
    workspace.mkdir()
    text, elapsed = await _settle(_profile("codex", env, 10), workspace)
    assert text == "subagent run stopped: no product activity for 10 s (stall_timeout_s)"
    # The last activity is the fallback warning (about 8 s in); notices counted would reach 30 s.
    assert 10 <= elapsed < 24, elapsed


async def test_claude_code_with_no_network_settles_by_the_stall_limit(tmp_path: Path) -> None:
    env = claude_env(tmp_path / "claude", _closed_port_url())
    del env["CLAUDE_CODE_MAX_RETRIES"]  # the CLI's default: 10 retries
    del env["API_TIMEOUT_MS"]
    workspace = tmp_path / "ws"
    workspace.mkdir()
    text, elapsed = await _settle(_profile("claude-code", env, 5), workspace)
    assert text == "subagent run stopped: no product activity for 5 s (stall_timeout_s)"
    # Retries at 0.6, 1.8, 4.2, 8.7, 17 s: counted as activity, the limit would fire near 14 s.
    assert 5 <= elapsed < 11, elapsed
