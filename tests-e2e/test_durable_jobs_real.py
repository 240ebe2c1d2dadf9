"""Jobs that outlive their process, with the REAL products against the loopback models.

- ``dsh run --detach`` returns while the job runs on in a detached dsh process; another
  process collects the answer with ``dsh jobs output --wait`` and the usage with ``dsh jobs
  show --json``.
- ``dsh mcp`` SIGKILLed while it holds running and finished jobs: a new process reads the
  finished outputs intact and the running ones ``failed`` with the fixed detail, and a walk of
  ``/proc`` that does not trust dsh's bookkeeping finds none of their product processes.
- ``[jobs] keep_on_close``: a session's job runs on after the session ends and a later session
  of the same scope collects it; another scope gets the unknown-id answer.

The tests play the user's shell for the ``dsh`` commands, so they start them with asyncio's
plain child processes: a dsh-contained spawn would end a detached worker with its starter's
tree, which is containment doing its job (a detach from inside a contained run stays inside it).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client, types

from dsh.jobs import HOLDER_GONE_DETAIL
from dsh.subagent_claude_code.testing import FakeMessagesServer
from dsh.subagent_claude_code.testing import hermetic_env as claude_env
from dsh.subagent_codex import testing as codex_testing
from dsh.subagent_codex.testing import hermetic_env as codex_env
from dsh.subprocess.testing import processes_naming

pytestmark = pytest.mark.real_product

DSH = Path(sys.executable).with_name("dsh")
COMMAND_LIMIT_S = 60.0
KILLED_HERE = "[status: killed, stopped by dsh jobs kill]"


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str


@dataclass(frozen=True)
class Setup:
    root: Path
    profile: Path
    workspace: Path
    env: Mapping[str, str]
    codex: codex_testing.FakeResponsesServer
    claude: FakeMessagesServer

    async def dsh(self, *args: str) -> Ran:
        """One ``dsh`` command, as the user's shell would run it."""
        proc = await asyncio.create_subprocess_exec(  # noqa: TID251 - the user's shell, see above
            str(DSH),
            *args,
            cwd=self.workspace,
            env=dict(self.env),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            async with asyncio.timeout(COMMAND_LIMIT_S):
                out, err = await proc.communicate()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert proc.returncode is not None
        return Ran(proc.returncode, out.decode(), err.decode())

    async def job(self, job_id: str) -> dict[str, Any]:
        shown = await self.dsh("jobs", "show", job_id, "--json", "--profile", str(self.profile))
        assert shown.code == 0, shown.err
        record: dict[str, Any] = json.loads(shown.out)
        return record


def _toml(value: str) -> str:
    return json.dumps(value)


def _env_table(env: Mapping[str, str]) -> str:
    return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in env.items()) + " }"


def write_profile(root: Path, codex_url: str, claude_url: str, jobs: str = "") -> Path:
    home = codex_testing.write_codex_home(root / "codex-home", codex_url, "durable-model")
    profile = root / f"profile{len(list(root.glob('profile*.toml')))}.toml"
    lines = [
        '[[provider]]\nkind = "codex"\n[provider.config]\nstderr = "discard"',
        f"dispose_grace_ms = 1000\nenv = {_env_table(codex_env(home))}",
        '[[provider]]\nkind = "claude-code"\n[provider.config]\nstderr = "discard"',
        f"dispose_grace_ms = 1000\nenv = {_env_table(claude_env(root / 'claude', claude_url))}",
        f"[jobs]\nstore = {_toml(str(root / 'state' / 'jobs.sqlite3'))}\n{jobs}",
    ]
    profile.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return profile


def codex_route(
    request: codex_testing.RecordedRequest,
) -> codex_testing.Reply | codex_testing.Stall | codex_testing.Trickle | None:
    """``SLOW ...`` trickles for about 2 s, ``HANG ...`` never answers, others answer at once."""
    task = request.task or ""
    if task.startswith("SLOW"):
        return codex_testing.Trickle(pieces=("codex ", "slow ", "answer ", "done"), interval_s=0.5)
    if task.startswith("HANG"):
        return codex_testing.Stall(seconds=120.0)
    return codex_testing.Reply((codex_testing.MessageItem(f"codex says: {task}"),))


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[Setup]:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSH_")}
    env["XDG_STATE_HOME"] = str(tmp_path / "xdg-state")  # the default store is not used here
    async with (
        codex_testing.FakeResponsesServer(route=codex_route) as codex,
        FakeMessagesServer() as claude,
    ):
        codex.usage = dict(codex_testing.SAMPLE_USAGE)
        profile = write_profile(tmp_path, codex.base_url, claude.base_url)
        yield Setup(tmp_path, profile, workspace, env, codex, claude)


def product_processes(root: Path) -> list[int]:
    """Live processes whose command line, working directory or environment names ``root``:
    a walk of ``/proc`` that reads no dsh marker or record."""
    return processes_naming(str(root))


async def gone(pids: list[int], timeout_s: float = 10.0) -> list[int]:
    """The pids of ``pids`` still alive after a bounded wait."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        alive = [p for p in pids if psutil.pid_exists(p) and _not_zombie(p)]
        if not alive or asyncio.get_running_loop().time() > deadline:
            return alive
        await asyncio.sleep(0.05)


def _not_zombie(pid: int) -> bool:
    try:
        status: str = psutil.Process(pid).status()
    except psutil.Error:
        return False
    return bool(status != psutil.STATUS_ZOMBIE)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("tool", ["subagent_codex", "subagent_claude_code"])
async def test_a_detached_run_returns_at_once_and_another_process_collects_it(
    setup: Setup, tool: str
) -> None:
    setup.claude.queue_trickle("claude slow answer done", interval_s=0.5)
    started = await setup.dsh(
        "run", "--profile", str(setup.profile), "--tool", tool, "--detach", "SLOW task"
    )
    assert started.code == 0, started.err
    job_id = started.out.strip()
    assert job_id.startswith("subagent-"), started.out
    assert f"dsh jobs output {job_id} --wait" in started.err
    # The starter has exited; the job runs on in a worker that is not the starter.
    running = await setup.job(job_id)
    assert running["status"] == "running"
    worker = running["holder_pid"]
    assert isinstance(worker, int)
    assert psutil.pid_exists(worker)

    collected = await setup.dsh(
        "jobs", "output", job_id, "--wait", "--timeout", "90", "--profile", str(setup.profile)
    )
    assert collected.code == 0, collected.err
    expected = "codex slow answer done" if tool == "subagent_codex" else "claude slow answer done"
    assert collected.out == expected + "\n"
    shown = await setup.job(job_id)
    assert shown["status"] == "completed"
    usage = shown["usage"]
    assert usage is not None
    assert usage["model_requests"] == 1
    assert usage["output_tokens"] > 0
    assert await gone([worker]) == []
    assert await gone(product_processes(setup.root)) == []


@pytest.mark.timeout(120)
async def test_dsh_jobs_kill_returns_once_the_detached_run_s_processes_are_gone(
    setup: Setup,
) -> None:
    setup.claude.queue_trickle(" ".join(["word"] * 200), interval_s=0.5)
    started = await setup.dsh(
        "run", "--profile", str(setup.profile), "--tool", "subagent_claude_code", "--detach", "x"
    )
    assert started.code == 0, started.err
    job_id = started.out.strip()
    await setup.claude.wait_for_requests(1, timeout=60)  # the product is mid-answer
    worker = (await setup.job(job_id))["holder_pid"]
    tree = [p for p in product_processes(setup.root) if p != worker]
    assert tree, "the product's processes were not found before the kill"
    killed = await setup.dsh("jobs", "kill", job_id, "--profile", str(setup.profile))
    assert (killed.code, killed.out) == (0, f"stopped job {job_id} {KILLED_HERE}\n")
    # Settled means the tree exited first: nothing of it is left the moment kill returns.
    assert [p for p in tree if psutil.pid_exists(p) and _not_zombie(p)] == []
    assert await gone([worker]) == []
    again = await setup.dsh("jobs", "kill", job_id, "--profile", str(setup.profile))
    assert again.out == f"job {job_id} had already finished {KILLED_HERE}\n"


@asynccontextmanager
async def mcp_session(setup: Setup, profile: Path) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=str(DSH),
        args=["mcp", "--profile", str(profile), "--cwd", str(setup.workspace)],
        cwd=str(setup.workspace),
        env=dict(setup.env),
    )
    with (setup.root / "dsh-mcp.stderr").open("a", encoding="utf-8") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            with anyio.fail_after(60):
                await session.initialize()
            yield session


async def call(session: ClientSession, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
    result = await session.call_tool(name, arguments, read_timeout_seconds=120)
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text, bool(result.is_error)


def _job_id(started: tuple[str, bool]) -> str:
    text, is_error = started
    assert not is_error, text
    assert text.startswith("started background subagent job "), text
    return text.rsplit(" ", 1)[1]


def _server_pid(profile: Path) -> int:
    for child in psutil.Process().children(recursive=True):
        try:
            cmdline = child.cmdline()
        except psutil.Error:
            continue
        if "mcp" in cmdline and str(profile) in cmdline:
            pid: int = child.pid
            return pid
    raise AssertionError("the dsh mcp server process was not found")


@pytest.mark.timeout(180)
async def test_a_sigkilled_mcp_server_leaves_true_records_and_no_product_process(
    setup: Setup,
) -> None:
    for _ in range(2):
        setup.claude.queue_stall(match="HANG")
    setup.claude.queue_text("claude finished", match="DONE")
    finished: dict[str, str] = {}
    running: list[str] = []
    server = 0
    try:
        async with mcp_session(setup, setup.profile) as session:
            for tool, task in [
                ("subagent_codex", "DONE one"),
                ("subagent_codex", "DONE two"),
                ("subagent_claude_code", "DONE three"),
            ]:
                job_id = _job_id(
                    await call(
                        session,
                        tool,
                        {"description": task, "prompt": task, "run_in_background": True},
                    )
                )
                text, _ = await call(session, "job_output", {"job_id": job_id, "wait": True})
                finished[job_id] = text.split("\n[status:")[0]
            for tool, task in [
                ("subagent_codex", "HANG one"),
                ("subagent_claude_code", "HANG two"),
                ("subagent_claude_code", "HANG three"),
            ]:
                running.append(
                    _job_id(
                        await call(
                            session,
                            tool,
                            {"description": task, "prompt": task, "run_in_background": True},
                        )
                    )
                )
            # Every stalled run has reached its model: the products are alive before the kill.
            await setup.codex.wait_for_requests(3, timeout=60)
            await setup.claude.wait_for_requests(3, timeout=60)
            products = product_processes(setup.root)
            server = _server_pid(setup.profile)
            assert [p for p in products if p != server], "the attack found no product process"
            os.kill(server, signal.SIGKILL)
            await gone([server])
    except Exception:  # the client sees its server vanish; what it raises is not under test
        assert server, "the session failed before the kill"

    listed = await setup.dsh("jobs", "list", "--json", "--profile", str(setup.profile))
    assert listed.code == 0, listed.err
    records = {r["job_id"]: r for r in json.loads(listed.out)["jobs"]}
    assert set(records) == set(finished) | set(running)
    for job_id in running:
        assert (records[job_id]["status"], records[job_id]["detail"]) == (
            "failed",
            HOLDER_GONE_DETAIL,
        )
    for job_id, text in finished.items():
        assert records[job_id]["status"] == "completed"
        output = await setup.dsh("jobs", "output", job_id, "--profile", str(setup.profile))
        assert (output.code, output.out.rstrip("\n")) == (0, text)
    assert sorted(finished.values()) == [
        "claude finished",
        "codex says: DONE one",
        "codex says: DONE two",
    ]
    assert await gone(product_processes(setup.root)) == []


@pytest.mark.timeout(180)
async def test_a_kept_job_outlives_its_session_for_the_same_scope_only(setup: Setup) -> None:
    state = _toml(str(setup.root / "state" / "jobs.sqlite3"))
    kept = write_profile(
        setup.root,
        setup.codex.base_url,
        setup.claude.base_url,
        'keep_on_close = true\nscope = "proj"',
    )
    other = write_profile(
        setup.root, setup.codex.base_url, setup.claude.base_url, 'scope = "elsewhere"'
    )
    assert state in kept.read_text()
    assert state in other.read_text()
    async with mcp_session(setup, kept) as first:
        job_id = _job_id(
            await call(
                first,
                "subagent_codex",
                {"description": "kept", "prompt": "SLOW kept job", "run_in_background": True},
            )
        )
    # The first session is over and its server has exited; the job is still running.
    running = await setup.job(job_id)
    assert running["status"] == "running"
    async with mcp_session(setup, kept) as second:
        listing, _ = await call(second, "job_list", {})
        assert job_id in listing
        collected = await call(
            second, "job_output", {"job_id": job_id, "wait": True, "timeout_ms": 90000}
        )
    assert collected == ("codex slow answer done\n[status: completed]", False)
    async with mcp_session(setup, other) as stranger:
        foreign = await call(stranger, "job_output", {"job_id": job_id})
        unknown = await call(stranger, "job_output", {"job_id": "subagent-000000000000"})
    assert foreign == (f"unknown job {job_id}", True)
    assert unknown == ("unknown job subagent-000000000000", True)
    assert await gone(product_processes(setup.root)) == []
