"""``isolation = "private"`` (issue 24) against the real products and the loopback models.

A planted host home holds each product's own setup with canaries: for Claude Code a
``CLAUDE.md``, a ``settings.json`` hook that writes a file, an MCP server in ``.claude.json`` (a
command that writes a file when started) and a skill; for Codex a ``config.toml`` with an MCP
server and a ``notify`` command (each writes a file) and an ``AGENTS.md``. The ambient ``HOME``
points at it, as a deployment user's would. Under ``native`` the run observes them (a canary in
a model request, a marker file written): the planted setup is reachable. Under ``private`` no
canary reaches any model request, no marker is written, and every file under the planted home
hashes the same after the run. Private homes are looked for by name in the temporary directory
(``dsh-<product>-<pid>-*``), never through dsh's own bookkeeping.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dsh.subagent import StopReason
from dsh.subagent_claude_code import ClaudeCodeProvider, ClaudeCodeProviderConfig
from dsh.subagent_codex import CodexProvider, CodexProviderConfig
from dsh.subagent_codex.testing import FAKE_API_KEY, FAKE_KEY_ENV, write_codex_home
from dsh.subprocess import Collect, SpawnSpec, default_runtime

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(240)]

CODEX_MODEL = "mock-model"


def tree_hashes(root: Path) -> dict[str, str]:
    """Every file and link under ``root``: its relative path and a hash of its bytes (or target)."""
    hashes = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*filenames, *dirnames]:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                hashes[rel] = f"link:{path.readlink()}"
            elif path.is_file():
                hashes[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                hashes[rel] = "dir"
    return hashes


def private_dirs(tag: str) -> list[str]:
    """This process's owner-named dirs of ``tag`` in the temporary directory (found by name)."""
    return sorted(str(p) for p in Path(tempfile.gettempdir()).glob(f"dsh-{tag}-{os.getpid()}-*"))


@dataclass
class Planted:
    home: Path
    markers: Path
    canaries: tuple[str, ...]

    def markers_written(self) -> list[str]:
        return sorted(p.name for p in self.markers.iterdir())

    @property
    def project(self) -> Path:
        """A workspace inside the planted home (``~/project``): the runs' cwd, so the product's
        walk up from its cwd (project settings, skills, ``AGENTS.md``) passes the home too."""
        return self.home / "project"

    def canaries_in(self, bodies: list[bytes]) -> set[str]:
        return {c for c in self.canaries if any(c.encode() in body for body in bodies)}


def _touch(path: Path) -> str:
    return f"touch {path}"


def plant_claude_home(root: Path) -> Planted:
    home, markers = root / "host-home", root / "markers"
    markers.mkdir(parents=True)
    memory, skill = f"CANARY-MD-{uuid.uuid4().hex}", f"CANARY-SKILL-{uuid.uuid4().hex}"
    claude = home / ".claude"
    (claude / "skills" / "canary-skill").mkdir(parents=True)
    (claude / "CLAUDE.md").write_text(f"Always mention {memory}.\n")
    hook = {"type": "command", "command": _touch(markers / "hook")}
    settings = {
        "hooks": {
            "UserPromptSubmit": [{"hooks": [hook]}],
            "SessionStart": [{"hooks": [{**hook, "command": _touch(markers / "session-hook")}]}],
        }
    }
    (claude / "settings.json").write_text(json.dumps(settings))
    (claude / "skills" / "canary-skill" / "SKILL.md").write_text(
        f"---\nname: canary-skill\ndescription: Use for {skill} requests.\n---\nSay {skill}.\n"
    )
    server = {"type": "stdio", "command": "sh", "args": ["-c", _touch(markers / "mcp")]}
    (home / ".claude.json").write_text(json.dumps({"mcpServers": {"canary": server}}))
    (home / "project").mkdir()
    return Planted(home, markers, (memory, skill))


def plant_codex_home(root: Path, base_url: str) -> Planted:
    home, markers = root / "host-home", root / "markers"
    markers.mkdir(parents=True)
    agents = f"CANARY-AGENTS-{uuid.uuid4().hex}"
    codex_home = write_codex_home(home / ".codex", base_url, CODEX_MODEL)
    config = codex_home / "config.toml"
    notify = json.dumps(["sh", "-c", _touch(markers / "notify")])
    mcp = json.dumps(["-c", _touch(markers / "mcp")])
    text = config.read_text()
    # Top-level keys go before the first table.
    config.write_text(
        f'notify = {notify}\n{text}\n[mcp_servers.canary]\ncommand = "sh"\nargs = {mcp}\n'
    )
    (codex_home / "AGENTS.md").write_text(f"Always mention {agents}.\n")
    (home / "project").mkdir()
    return Planted(home, markers, (agents,))


def host_home(monkeypatch: pytest.MonkeyPatch, planted: Planted) -> None:
    """The ambient env of a deployment user whose home is the planted one."""
    monkeypatch.setenv("HOME", str(planted.home))
    for name in ("CODEX_HOME", "CODEX_SQLITE_HOME", "CLAUDE_CONFIG_DIR"):
        monkeypatch.delenv(name, raising=False)


def claude_env(base_url: str) -> dict[str, str]:
    return {
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "sk-ant-dsh-fake-key",
        "ANTHROPIC_AUTH_TOKEN": "",
        "CLAUDE_CODE_OAUTH_TOKEN": "",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",
        "API_TIMEOUT_MS": "20000",
    }


CODEX_ENV = {
    FAKE_KEY_ENV: FAKE_API_KEY,
    "OPENAI_API_KEY": "",
    "CODEX_API_KEY": "",
    "CODEX_APP_SERVER_DISABLE_MANAGED_CONFIG": "1",
    "RUST_LOG": "error",
}


def claude_provider(base_url: str, **fields: Any) -> ClaudeCodeProvider:
    config = {"env": claude_env(base_url), "dispose_grace_ms": 1500, "stderr": "discard"}
    return ClaudeCodeProvider(ClaudeCodeProviderConfig.model_validate({**config, **fields}))


def codex_provider(**fields: Any) -> CodexProvider:
    config = {"env": CODEX_ENV, "dispose_grace_ms": 1500, "stderr": "discard"}
    return CodexProvider(CodexProviderConfig.model_validate({**config, **fields}))


async def _complete(provider: Any, request: Any) -> None:
    async with await provider.start(request) as run:
        result = await run.result()
    assert result.stop_reason is StopReason.COMPLETED, result.diagnostic


async def _wait_for_markers(planted: Planted, limit: float = 10.0) -> None:
    """Hooks and notify commands are started by the product, maybe after the answer: wait."""
    async with asyncio.timeout(limit):
        while not planted.markers_written():  # noqa: ASYNC110 - test-side polling
            await asyncio.sleep(0.05)


async def test_claude_code_private_run_never_sees_or_touches_the_planted_home(
    claude: Any, kit: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    planted = plant_claude_home(tmp_path)
    host_home(monkeypatch, planted)
    before = tree_hashes(planted.home)
    template = tmp_path / "template"
    template.mkdir()

    claude.server.queue_text("PRIVATE-OK")
    private = claude_provider(
        claude.server.base_url, isolation="private", home_template=str(template)
    )
    await _complete(private, kit.request(planted.project, "what?", "claude-code"))
    private_bodies = [r.raw_body for r in claude.server.requests]
    assert len(private_bodies) == 1
    await asyncio.sleep(1.0)  # a hook or MCP server that did start has had time to write
    assert planted.canaries_in(private_bodies) == set()
    assert planted.markers_written() == []
    assert tree_hashes(planted.home) == before
    assert private_dirs("claude") == []

    # Native: the same planted home is the product's own setup, and reaches the run.
    claude.server.queue_text("NATIVE-OK")
    native = claude_provider(claude.server.base_url)
    await _complete(native, kit.request(planted.project, "and now?", "claude-code"))
    await _wait_for_markers(planted)
    native_bodies = [r.raw_body for r in claude.server.requests[1:]]
    assert planted.canaries_in(native_bodies) == set(planted.canaries), "native saw the home"
    assert {"hook", "mcp"} <= set(planted.markers_written())


async def test_codex_private_run_never_sees_or_touches_the_planted_home(
    codex: Any, kit: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    planted = plant_codex_home(tmp_path, codex.server.base_url)
    host_home(monkeypatch, planted)
    before = tree_hashes(planted.home)
    template = write_codex_home(tmp_path / "template", codex.server.base_url, CODEX_MODEL)

    codex.server.queue_text("PRIVATE-OK", phase="final_answer")
    private = codex_provider(isolation="private", home_template=str(template))
    await _complete(private, kit.request(planted.project, "what?", "codex"))
    private_bodies = [r.raw_body for r in codex.server.requests]
    assert len(private_bodies) == 1
    await asyncio.sleep(1.0)  # a notify command or MCP server that did start has had time
    assert planted.canaries_in(private_bodies) == set()
    assert planted.markers_written() == []
    assert tree_hashes(planted.home) == before
    assert private_dirs("codex") == []

    # Native: the planted ~/.codex is the product's own setup, and reaches the run. Codex runs
    # ``notify`` after the turn, so the run is kept open until both markers are there.
    codex.server.queue_text("NATIVE-OK", phase="final_answer")
    request = kit.request(planted.project, "and now?", "codex")
    async with await codex_provider().start(request) as run:
        result = await run.result()
        assert result.stop_reason is StopReason.COMPLETED, result.diagnostic
        async with asyncio.timeout(20):
            while {"notify", "mcp"} - set(planted.markers_written()):  # noqa: ASYNC110
                await asyncio.sleep(0.05)
    native_bodies = [r.raw_body for r in codex.server.requests[1:]]
    assert planted.canaries_in(native_bodies) == set(planted.canaries), "native saw the home"


# ---- many runs, cancel, a killed host, warm processes ------------------------------------


@dataclass
class Private:
    """One product under ``isolation = "private"``: its provider, script and dir tag."""

    tag: str
    make: Any
    request: Any
    answer: Any
    stall: Any
    seen: Any


@pytest.fixture(params=["codex", "claude-code"])
def private(request: pytest.FixtureRequest, codex: Any, claude: Any, tmp_path: Path) -> Private:
    if request.param == "codex":
        template = write_codex_home(tmp_path / "template", codex.server.base_url, CODEX_MODEL)
        return Private(
            "codex",
            lambda **f: codex_provider(isolation="private", home_template=str(template), **f),
            codex.request,
            lambda: codex.server.queue_text("PRIVATE-OK", phase="final_answer"),
            lambda: codex.server.queue_stall(seconds=60),
            lambda: len(codex.server.requests),
        )
    return Private(
        "claude",
        lambda **f: claude_provider(claude.server.base_url, isolation="private", **f),
        claude.request,
        lambda: claude.server.queue_text("PRIVATE-OK"),
        claude.server.queue_stall,
        lambda: len(claude.server.requests),
    )


def _private_home_of(pid: int) -> str:
    """The product process's own ``HOME`` (read from /proc, not from dsh)."""
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return next(e[5:].decode() for e in environ if e.startswith(b"HOME="))


async def test_eight_concurrent_private_runs_complete_and_leave_no_home(
    kit: Any, private: Private
) -> None:
    provider = private.make()
    for _ in range(8):
        private.answer()
    runs = await asyncio.gather(*(provider.start(private.request(f"t{i}")) for i in range(8)))
    try:
        results = await asyncio.gather(*(run.result() for run in runs))
        if private.tag == "codex":
            # Each run had its own private dir, kept until its tree has exited, and the product
            # wrote its state databases there.
            dirs = private_dirs(private.tag)
            assert len(dirs) == 8, dirs
            assert all((Path(d) / "sqlite/state_5.sqlite").is_file() for d in dirs)
        else:
            # Each run had its own run dir, the spawn's owned dir: the supervisor removes it as
            # soon as the CLI has exited after its answer, so only the specs can still show them
            # (the product's use of its private home: test_a_cancelled_private_run_leaves_no_home).
            owned = {run.process.spec.owned_dir for run in runs}
            assert len(owned) == 8, owned
            assert all(
                str(d).startswith(f"{tempfile.gettempdir()}/dsh-claude-{os.getpid()}-")
                for d in owned
            ), owned
    finally:
        await asyncio.gather(*(run.aclose() for run in runs))
    assert [r.stop_reason for r in results] == [StopReason.COMPLETED] * 8, [
        r.diagnostic for r in results
    ]
    assert private.seen() == 8
    assert private_dirs(private.tag) == []
    assert await asyncio.to_thread(kit.own_marked) == []


async def test_a_cancelled_private_run_leaves_no_home(kit: Any, private: Private) -> None:
    private.stall()
    run = await private.make().start(private.request("stall"))
    await kit.wait_until(lambda: private.seen() >= 1, 60.0, "the model request")
    home = Path(_private_home_of(int(run.process.pid)))
    assert await asyncio.to_thread(home.is_dir)
    run.cancel()
    await run.aclose()
    assert (await run.result()).stop_reason is StopReason.ABORTED
    assert not await asyncio.to_thread(home.exists)
    assert private_dirs(private.tag) == []
    assert await asyncio.to_thread(kit.own_marked) == []


async def test_private_homes_of_a_killed_host_are_swept_at_the_next_start(
    kit: Any, private: Private, codex: Any, claude: Any, tmp_path: Path
) -> None:
    host_tmp = tmp_path / "host-tmp"
    host_tmp.mkdir()
    is_codex = private.tag == "codex"
    base_url = codex.server.base_url if is_codex else claude.server.base_url
    root = str(tmp_path / "template") if is_codex else str(claude.root)
    workspace = str(codex.workspace if is_codex else claude.workspace)

    async def host(*flags: str) -> Any:
        argv = [
            sys.executable,
            str(kit.here / "crash_host.py"),
            private.tag.replace("claude", "claude-code"),
        ]
        spec = SpawnSpec(
            argv=[*argv, base_url, root, workspace, "t", "private", *flags],
            env={"TMPDIR": str(host_tmp)},
            stdout="pipe",
            stderr=Collect(16_384),
            grace_ms=1000,
        )
        return await default_runtime().spawn(spec)

    private.stall()
    crashed = await host()
    try:
        assert crashed.stdout is not None
        async with asyncio.timeout(60):
            assert await crashed.stdout.readline() == b"started\n", crashed.collected("stderr")
        await kit.wait_until(lambda: private.seen() >= 1, 60.0, "the model request")
        os.kill(crashed.pid, signal.SIGKILL)
        assert (await crashed.wait()).signal == "SIGKILL"
        await kit.wait_until(lambda: kit.owned_by(crashed.pid) == [], 10.0, "the tree to die")
    finally:
        await crashed.aclose()
    left = [p.name for p in host_tmp.iterdir()]
    if not is_codex:
        # Claude Code's private home lives in its run dir, the spawn's owned dir: the supervisor
        # removed it once the tree it killed was gone (the sweep of a dir left by an unsupervised
        # host is test_crash.py's "plain" case).
        assert left == [], left
        return
    assert left, "the killed host left its private home"
    assert all(n.startswith(f"dsh-{private.tag}-{crashed.pid}-") for n in left), left

    private.answer()
    following = await host("complete")
    try:
        assert following.stdout is not None
        async with asyncio.timeout(90):
            lines = [await following.stdout.readline() for _ in range(2)]
        assert lines == [b"started\n", b"done completed\n"], following.collected("stderr")
        assert (await following.wait()).exit_code == 0
    finally:
        await following.aclose()
    assert list(host_tmp.iterdir()) == [], "the next start swept the dead host's private home"


async def test_private_warm_processes_each_get_their_own_home(kit: Any, private: Private) -> None:
    provider = private.make(prewarm=2)
    try:
        private.answer()
        async with await provider.start(private.request("cold")) as run:
            assert (await run.result()).stop_reason is StopReason.COMPLETED
        pool = provider.warm_pool
        await kit.wait_until(lambda: len(pool.idle()) >= 2, 60.0, "two warm processes")
        warm = list(pool.idle())
        homes = {int(w.process.pid): _private_home_of(int(w.process.pid)) for w in warm}
        assert len(set(homes.values())) == 2
        assert all(map(os.path.isdir, homes.values()))
        assert len(private_dirs(private.tag)) == 2, "only the warm processes' homes are left"
        private.answer()
        async with await provider.start(private.request("warm")) as run:
            assert int(run.process.pid) in homes
            assert pool.taken == 1
            used = homes[int(run.process.pid)]
            assert (await run.result()).stop_reason is StopReason.COMPLETED
        assert not await asyncio.to_thread(Path(used).exists), (
            "the warm process's home went with its run"
        )
        await kit.wait_until(lambda: len(pool.idle()) >= 2, 60.0, "the replacement")
        fresh = {_private_home_of(int(w.process.pid)) for w in pool.idle()}
        assert used not in fresh
        assert len(fresh) == 2
    finally:
        await provider.aclose()
    assert private_dirs(private.tag) == []
    assert await asyncio.to_thread(kit.own_marked) == []


async def test_claude_code_template_settings_apply_in_the_private_home(
    claude: Any, kit: Any, tmp_path: Path
) -> None:
    """The template is copied in (a regular file, never a link back), and its ``settings.json``
    applies although no setting source is read (dsh hands it over with ``--settings``)."""
    marker = tmp_path / "template-hook-ran"
    template = tmp_path / "template"
    template.mkdir()
    hook = {"type": "command", "command": _touch(marker)}
    (template / "settings.json").write_text(
        json.dumps({"hooks": {"UserPromptSubmit": [{"hooks": [hook]}]}})
    )
    before = tree_hashes(template)
    claude.server.queue_text("TEMPLATE-OK")
    provider = claude_provider(
        claude.server.base_url, isolation="private", home_template=str(template)
    )
    async with await provider.start(claude.request("hook?")) as run:
        [run_dir] = private_dirs("claude")
        copied = Path(run_dir) / "claude-config" / "settings.json"
        assert copied.is_file()
        assert not copied.is_symlink()
        assert (await run.result()).stop_reason is StopReason.COMPLETED
    assert marker.exists(), "the template's hook ran"
    assert tree_hashes(template) == before
    assert private_dirs("claude") == []
