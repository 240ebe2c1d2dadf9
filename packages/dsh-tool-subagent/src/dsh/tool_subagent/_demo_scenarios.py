"""The scenarios of ``dsh demo``: each drives a real product through the harness tools.

A scenario is an async function of the :class:`Stage` that returns ``(ok, outcome)``: ``ok`` is
whether it behaved exactly as expected (answer text, status lines, diagnostic text, process
counts) and ``outcome`` is the short text shown in the table. Concurrent scenarios are told apart
on the loopback model servers by a token in their task text.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from dsh.subprocess import marked_processes
from dsh.tool_subagent._harness import Harness
from dsh.tool_subagent._tool import Caller

__all__ = [
    "CLAUDE",
    "CODEX",
    "Scenario",
    "Stage",
    "owned_marked_processes",
    "scenario_phases",
]

CODEX = "Codex"
CLAUDE = "Claude Code"
TOOL_NAMES = {CODEX: "subagent_codex", CLAUDE: "subagent_claude_code"}

#: Bounds every wait on the model servers and on jobs (each scenario is also bounded as a whole).
WAIT_S = 10.0
_POLL_S = 0.05
KILL_REASON = "stopped by the demo"
#: A secret-looking error body: it must never reach the model-visible text.
ERROR_BODY = "demo-error-body sk-demo-never-shown"

CODEX_FAILURE = (
    "Product subagent failure (product: Codex; stage: turn; category: httpConnectionFailed;"
    " HTTP status: 503)"
)
CLAUDE_FAILURE = (
    "Product subagent failure (product: Claude Code; stage: query-run; category: authentication;"
    " HTTP status: 401; exit code: 1)"
)


def owned_marked_processes(owner_pid: int | None = None) -> list[int]:
    """Pids carrying a dsh tree marker that names this process (or ``owner_pid``) as owner.

    A marker starts with its owner's pid, so processes of other dsh programs running at the same
    time (another demo, a test suite) are not counted. This scans the process table (blocking
    briefly).
    """
    return marked_processes(owner_pid=os.getpid() if owner_pid is None else owner_pid)


@dataclass
class Stage:
    """What every scenario shares: the harness, the loopback servers and the calling session.

    ``script_codex(token, behaviour)`` and ``script_claude(token, kind, **fields)`` queue a model
    behaviour for the requests that carry ``token`` in their task; ``codex_tasks`` /
    ``claude_tasks`` list the task texts the servers have seen.
    """

    harness: Harness
    caller: Caller
    script_codex: Callable[[str, Any], None]
    script_claude: Callable[..., None]
    codex_tasks: Callable[[], list[str]]
    claude_tasks: Callable[[], list[str]]

    async def call(self, product: str, arguments: dict[str, Any]) -> Any:
        return await self.harness.tool(TOOL_NAMES[product]).call(arguments, self.caller)

    async def job_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        return await self.harness.tool(name).call(arguments, self.caller)

    async def live_processes(self) -> list[int]:
        """Pids carrying a dsh tree marker owned by this process (scanned off the loop)."""
        return sorted(await asyncio.to_thread(owned_marked_processes))

    async def request_seen(self, product: str, token: str) -> None:
        """Wait (bounded) until the product's request for ``token`` reached its model server."""
        tasks = self.codex_tasks if product == CODEX else self.claude_tasks
        async with asyncio.timeout(WAIT_S):
            while not any(token in task for task in tasks()):  # noqa: ASYNC110 - bounded poll
                await asyncio.sleep(_POLL_S)


Scenario = tuple[str, str, Callable[[Stage], Awaitable[tuple[bool, str]]]]


def _shown(text: str, limit: int = 120) -> str:
    one_line = text.replace("\n", " ⏎ ")
    return one_line if len(one_line) <= limit else one_line[: limit - 1] + "…"


def _unexpected(expected: str, got: str) -> tuple[bool, str]:
    return False, f"expected {_shown(expected)!r}, got {_shown(got)!r}"


def _script_answer(stage: Stage, product: str, token: str, answer: str) -> None:
    if product == CODEX:
        from dsh.subagent_codex.testing import MessageItem, Reply

        stage.script_codex(token, Reply((MessageItem(answer),)))
    else:
        stage.script_claude(token, "text", text=answer)


def _script_busy_turn(stage: Stage, product: str, token: str) -> None:
    """Codex is told to run a long ``sleep``; the Claude Code model request stalls."""
    if product == CODEX:
        from dsh.subagent_codex.testing import FunctionCallItem, Reply

        command = {"cmd": "sleep 30", "login": False, "yield_time_ms": 20000}
        stage.script_codex(token, Reply((FunctionCallItem("exec_command", command),)))
    else:
        stage.script_claude(token, "stall")


def _task(token: str, ask: str) -> dict[str, Any]:
    return {"description": f"demo {token.lower()}", "prompt": f"{ask} (demo task {token})"}


def foreground(product: str) -> Callable[[Stage], Awaitable[tuple[bool, str]]]:
    async def scenario(stage: Stage) -> tuple[bool, str]:
        token = f"FG-{product.split()[0].upper()}"
        answer = f"Hello from {product}."
        _script_answer(stage, product, token, answer)
        result = await stage.call(product, _task(token, "Say hello in one sentence."))
        if result.is_error or result.text != answer:
            return _unexpected(answer, result.text)
        return True, f'answer: "{answer}"'

    return scenario


def background(product: str) -> Callable[[Stage], Awaitable[tuple[bool, str]]]:
    async def scenario(stage: Stage) -> tuple[bool, str]:
        token = f"BG-{product.split()[0].upper()}"
        answer = f"{product} finished in the background."
        _script_answer(stage, product, token, answer)
        arguments = _task(token, "Finish a task in the background.")
        started = await stage.call(product, {**arguments, "run_in_background": True})
        if started.is_error or not started.text.startswith("started background subagent job "):
            return _unexpected("started background subagent job <id>", started.text)
        job_id = started.value["job_id"]
        read = await stage.job_tool(
            "job_output", {"job_id": job_id, "wait": True, "timeout_ms": WAIT_S * 1000}
        )
        expected = f"{answer}\n[status: completed]"
        if read.is_error or read.text != expected:
            return _unexpected(expected, read.text)
        return True, f'{job_id} → job_output: "{answer}" [status: completed]'

    return scenario


def failure(product: str) -> Callable[[Stage], Awaitable[tuple[bool, str]]]:
    async def scenario(stage: Stage) -> tuple[bool, str]:
        token = f"FAIL-{product.split()[0].upper()}"
        if product == CODEX:
            from dsh.subagent_codex.testing import HttpStatus

            body = {"error": {"message": ERROR_BODY, "code": "server_error"}}
            stage.script_codex(token, HttpStatus(503, body))
            diagnostic, cause = CODEX_FAILURE, "HTTP 503"
        else:
            stage.script_claude(token, "http_error", status=401, body=ERROR_BODY)
            diagnostic, cause = CLAUDE_FAILURE, "HTTP 401"
        result = await stage.call(product, _task(token, "Try a task the model rejects."))
        expected = f"subagent run failed\nDiagnostic: {diagnostic}"
        if not result.is_error or result.text != expected:
            return _unexpected(expected, result.text)
        return True, f"{cause} → {diagnostic}"

    return scenario


async def cancel_with_job_kill(stage: Stage, product: str) -> tuple[bool, str]:
    """Background run stalled mid-turn, stopped with ``job_kill``; then no process is left."""
    token = f"KILL-{product.split()[0].upper()}"
    _script_busy_turn(stage, product, token)
    arguments = {**_task(token, "Work on a long task."), "run_in_background": True}
    started = await stage.call(product, arguments)
    if started.is_error:
        return _unexpected("started background subagent job <id>", started.text)
    job_id = started.value["job_id"]
    await stage.request_seen(product, token)
    during = await stage.live_processes()
    killed = await stage.job_tool("job_kill", {"job_id": job_id, "reason": KILL_REASON})
    if killed.text != f"requested cancellation of job {job_id}":
        return _unexpected(f"requested cancellation of job {job_id}", killed.text)
    read = await stage.job_tool(
        "job_output", {"job_id": job_id, "wait": True, "timeout_ms": WAIT_S * 1000}
    )
    expected = f"(no new output)\n[status: killed, {KILL_REASON}]"
    if read.text != expected:
        return _unexpected(expected, read.text)
    return await _tree_clean(stage, during, f"job_kill {job_id} → [status: killed]")


async def cancel_tool_call(stage: Stage, product: str) -> tuple[bool, str]:
    """A foreground tool call stalled mid-turn and cancelled by its caller leaves no process."""
    token = f"CANCEL-{product.split()[0].upper()}"
    _script_busy_turn(stage, product, token)
    call = asyncio.create_task(stage.call(product, _task(token, "Work on a long task.")))
    try:
        await stage.request_seen(product, token)
        during = await stage.live_processes()
    finally:
        call.cancel()
        try:
            await call
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
    if not call.cancelled():
        return False, "the tool call returned instead of being cancelled"
    return await _tree_clean(stage, during, "tool call cancelled")


async def _tree_clean(stage: Stage, during: list[int], what: str) -> tuple[bool, str]:
    after = await stage.live_processes()
    counts = f"dsh-marked processes: {len(during)} mid-turn → {len(after)} after"
    if not during:
        return False, f"{what}, but no product process was seen mid-turn ({counts})"
    if after:
        return False, f"{what}, but processes were left behind ({counts})"
    return True, f"{what}; {counts}"


def scenario_phases() -> list[list[Scenario]]:
    """Phases run one after another; the scenarios of one phase run concurrently.

    The first phase's Codex run bootstraps the shared ``CODEX_HOME`` (two cold Codex processes
    racing on one home fail to initialise its sqlite state). Each cancellation runs alone, so
    the process count it shows afterwards is its own.
    """

    async def kill_codex(stage: Stage) -> tuple[bool, str]:
        return await cancel_with_job_kill(stage, CODEX)

    async def cancel_claude(stage: Stage) -> tuple[bool, str]:
        return await cancel_tool_call(stage, CLAUDE)

    both = (CODEX, CLAUDE)
    return [
        [("foreground answer", product, foreground(product)) for product in both],
        [("background job", product, background(product)) for product in both]
        + [("model failure", product, failure(product)) for product in both],
        [("cancel via job_kill", CODEX, kill_codex)],
        [("cancel the tool call", CLAUDE, cancel_claude)],
    ]
