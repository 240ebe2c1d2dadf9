"""The leak guard for every cross-package test module, a job store of the session's own, and
both products behind their loopback model servers (``loopback``).

After each module, no process this session spawned may carry a dsh tree marker and no private
temporary home (``dsh-claude-*`` / ``dsh-codex-*`` of a session pid, or a ``claude-*`` scratch
directory that appeared during the module) may remain. Module scope with a short settle, since
the ``dsh`` commands these tests run are reaped a moment after they exit.

Test modules never import this file; what they share comes through fixtures.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from dsh.subagent_claude_code.testing import FakeMessagesServer
from dsh.subagent_claude_code.testing import hermetic_env as claude_env
from dsh.subagent_codex.testing import (
    FakeResponsesServer,
    FunctionCallItem,
    Reply,
    write_codex_home,
)
from dsh.subagent_codex.testing import hermetic_env as codex_env
from dsh.subprocess import marked_processes
from dsh.subprocess.pytest_plugin import dsh_session, leak_guard_fixture  # noqa: F401
from dsh.subprocess.testing import run_to_exit
from dsh.tool_subagent import Caller, Harness, ToolResult

dsh_leak_guard = leak_guard_fixture(scope="module", settle_s=3.0)

CODEX, CLAUDE = "codex", "claude-code"
#: The delegation tool each product's provider gets by default.
TOOLS = {CODEX: "subagent_codex", CLAUDE: "subagent_claude_code"}
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
BENCHMARKS = Path(__file__).resolve().parent / "benchmarks"


@pytest.fixture(scope="session", autouse=True)
def private_state_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The session's job store (``$XDG_STATE_HOME/dsh``) is its own, for every registry and
    every ``dsh`` command the tests start, never the user's."""
    before = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state"))
    yield
    if before is None:
        del os.environ["XDG_STATE_HOME"]
    else:
        os.environ["XDG_STATE_HOME"] = before


async def _benchmark_report(
    script: str, *args: str, out: Path, timeout_s: float | None = None
) -> dict[str, Any]:
    ran = await run_to_exit(
        [sys.executable, str(BENCHMARKS / script), *args, "--json", str(out)], timeout_s=timeout_s
    )
    assert ran.exit_code == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    report: dict[str, Any] = json.loads(await asyncio.to_thread(out.read_text, encoding="utf-8"))
    return report


@pytest.fixture
def benchmark_report() -> Callable[..., Awaitable[dict[str, Any]]]:
    """``await benchmark_report(script, *args, out=path)``: run ``benchmarks/<script>`` as a
    program with ``args`` and ``--json path``; it must exit 0; the report it wrote."""
    return _benchmark_report


def _toml_value(value: Any) -> str:
    if isinstance(value, Mapping):
        pairs = ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items())
        return f"{{ {pairs} }}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    return json.dumps(value)


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key)


def profile_toml(profile: Mapping[str, Any]) -> str:
    """A profile mapping as TOML: a list of tables as ``[[name]]`` rows, a table as ``[name]``,
    nested tables inline."""
    lines = []
    for name, body in profile.items():
        rows, header = ([body], f"[{name}]") if isinstance(body, Mapping) else (body, f"[[{name}]]")
        for row in rows:
            lines += [header, *(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in row.items()), ""]
    return "\n".join(lines)


def own_trees() -> list[int]:
    """A /proc walk: live processes of the trees this test process spawned."""
    return marked_processes(owner_pid=os.getpid())


def sleep_running() -> bool:
    """Whether a ``sleep 30`` (what :meth:`Session.hold_mid_turn` has Codex run) is live in one
    of this test process's trees."""
    for pid in own_trees():
        try:
            if psutil.Process(pid).cmdline()[:2] == ["sleep", "30"]:
                return True
        except psutil.Error:
            continue
    return False


@dataclass
class Session:
    """A harness built from a profile of :class:`Loopback`'s, the caller its tools are called
    as, and both products' loopback model servers, scripted per product."""

    harness: Harness
    caller: Caller
    codex: FakeResponsesServer
    claude: FakeMessagesServer
    workspace: Path
    #: What the harness was built from: a profile mapping, or a TOML file for ``dsh`` commands.
    profile: Any
    own_trees = staticmethod(own_trees)
    sleep_running = staticmethod(sleep_running)

    async def call(self, name: str, **arguments: Any) -> ToolResult:
        result: ToolResult = await self.harness.tool(name).call(arguments, self.caller)
        return result

    async def delegate(self, product: str, prompt: str, **extra: Any) -> ToolResult:
        return await self.call(TOOLS[product], description="flow task", prompt=prompt, **extra)

    def server(self, product: str) -> Any:
        """The product's model server (both script answers, errors and stalls alike)."""
        return self.codex if product == CODEX else self.claude

    def answer(self, product: str, text: str) -> None:
        self.server(product).queue_text(text)

    def stall(self, product: str, seconds: float | None = None) -> None:
        self.server(product).queue_stall(seconds=seconds)

    def hold_mid_turn(self, product: str) -> None:
        """The next turn stays busy: Codex runs ``sleep 30``, the Claude request stalls."""
        if product == CODEX:
            command = {"cmd": "sleep 30", "login": False, "yield_time_ms": 20000}
            self.codex.queue(Reply((FunctionCallItem("exec_command", command),)))
        else:
            self.claude.queue_stall()

    async def request_arrived(self, product: str, timeout: float = 30) -> float:  # noqa: ASYNC109
        """When the product's first model request reached its server (``monotonic``)."""
        assert await self.server(product).wait_for_requests(1, timeout=timeout)
        return time.monotonic()

    def tasks(self, product: str) -> list[str | None]:
        return [request.task for request in self.server(product).requests]


@dataclass
class Loopback:
    """Both real products pointed at loopback model servers, with hermetic homes under ``root``.

    ``profile()`` is a profile mapping with one provider per product; ``write()`` writes a
    profile mapping as TOML, for a ``dsh`` command; ``session()`` builds a harness from one.
    """

    root: Path
    workspace: Path
    codex: FakeResponsesServer
    claude: FakeMessagesServer
    codex_env: dict[str, str]
    claude_env: dict[str, str]
    #: Asked first for each model request of Codex or Claude Code (the servers' ``route``).
    codex_route: Callable[[Any], Any] | None = None
    claude_route: Callable[[Any], Any] | None = None
    products = (CODEX, CLAUDE)
    tools = TOOLS

    @classmethod
    def under(cls, root: Path, codex: FakeResponsesServer, claude: FakeMessagesServer) -> Loopback:
        """The homes and ``workspace`` directories under ``root``, for the two servers."""
        (root / "workspace").mkdir(exist_ok=True)
        home = write_codex_home(root / "codex-home", codex.base_url, "mock-model")
        claude_vars = claude_env(root / "claude", claude.base_url)
        return cls(root, root / "workspace", codex, claude, codex_env(home), claude_vars)

    def profile(
        self,
        common: Mapping[str, Any] | None = None,
        *,
        codex: Mapping[str, Any] | None = None,
        claude: Mapping[str, Any] | None = None,
        **tables: Any,
    ) -> dict[str, Any]:
        """A provider per product: its hermetic ``env``, then ``common``, then its own fields
        (``stderr = "discard"`` and a 2 s dispose grace unless ``common`` is given)."""
        shared = {"stderr": "discard", "dispose_grace_ms": 2000} if common is None else common
        return {
            "provider": [
                {"kind": CODEX, "config": {"env": self.codex_env, **shared, **(codex or {})}},
                {"kind": CLAUDE, "config": {"env": self.claude_env, **shared, **(claude or {})}},
            ],
            **tables,
        }

    def unattended(self) -> dict[str, dict[str, Any]]:
        """``profile()``'s per-product fields that let each product run its tools unasked
        (``IS_SANDBOX``: ``bypassPermissions`` as root needs it)."""
        return {
            "codex": {"permission_mode": "dangerously-bypass-approvals-and-sandbox"},
            "claude": {
                "permission_mode": "bypassPermissions",
                "env": {**self.claude_env, "IS_SANDBOX": "1"},
            },
        }

    def write(self, profile: Mapping[str, Any], path: Path | None = None) -> Path:
        """``profile`` as a TOML file (``root/profile.toml`` unless ``path`` is given)."""
        target = path or self.root / "profile.toml"
        target.write_text(profile_toml(profile), encoding="utf-8")
        return target

    @asynccontextmanager
    async def session(self, profile: Any, caller: Caller) -> AsyncIterator[Session]:
        """A harness built from ``profile`` (a mapping or a TOML file), called as ``caller``."""
        async with Harness.from_profile(profile) as harness:
            yield Session(harness, caller, self.codex, self.claude, self.workspace, profile)


@pytest.fixture
async def loopback(tmp_path: Path) -> AsyncIterator[Loopback]:
    """Both products' loopback model servers, a ``workspace`` and each product's hermetic env."""
    found: list[Loopback] = []

    def codex_route(request: Any) -> Any:
        routed = found[0].codex_route
        return None if routed is None else routed(request)

    def claude_route(request: Any) -> Any:
        routed = found[0].claude_route
        return None if routed is None else routed(request)

    async with (
        FakeResponsesServer(route=codex_route) as codex,
        FakeMessagesServer(route=claude_route) as claude,
    ):
        found.append(Loopback.under(tmp_path, codex, claude))
        yield found[0]
