"""The scenarios of ``dsh demo``: each drives a real product through the harness tools.

A scenario is an async function of the :class:`Stage` that returns ``(ok, outcome)``: ``ok`` is
whether it behaved exactly as expected (answer text, status lines, diagnostic text, process
counts) and ``outcome`` is the short text shown in the table. Concurrent scenarios are told apart
on the loopback model servers by a token in their task text. The scenarios are product-neutral:
each installed provider's ``demo()`` plan (``dsh.subagent.DemoPlan``) says which ones it takes
part in and scripts its own model for them.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dsh.subagent import DemoModel, DemoScenario
from dsh.subprocess import marked_processes
from dsh.tool_subagent._harness import Harness
from dsh.tool_subagent._tool import Caller

__all__ = [
    "Scenario",
    "Stage",
    "owned_marked_processes",
    "scenario_phases",
]

#: Bounds every wait on the model servers and on jobs (each scenario is also bounded as a whole).
WAIT_S = 10.0
_POLL_S = 0.05
KILL_REASON = "stopped by the demo"


def owned_marked_processes(owner_pid: int | None = None) -> list[int]:
    """Pids carrying a dsh tree marker that names this process (or ``owner_pid``) as owner.

    A marker starts with its owner's pid, so processes of other dsh programs running at the same
    time (another demo, a test suite) are not counted. This scans the process table (blocking
    briefly).
    """
    return marked_processes(owner_pid=os.getpid() if owner_pid is None else owner_pid)


@dataclass
class Stage:
    """What every scenario shares: the harness, the calling session and each product's model.

    ``models`` and ``tools`` map a product to its scripted loopback model and the name of its
    delegation tool; ``leftover()`` lists the demo's product processes still alive (wherever
    they were spawned on this machine). ``wait_s`` bounds each wait on a model or a job.
    """

    harness: Harness
    caller: Caller
    models: dict[str, DemoModel]
    tools: dict[str, str]
    leftover: Callable[[], list[int]]
    wait_s: float = WAIT_S

    async def call(self, product: str, arguments: dict[str, Any]) -> Any:
        return await self.harness.tool(self.tools[product]).call(arguments, self.caller)

    async def job_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        return await self.harness.tool(name).call(arguments, self.caller)

    async def live_processes(self) -> list[int]:
        """Pids the plans' leftover checks find (scanned off the loop)."""
        return sorted(await asyncio.to_thread(self.leftover))

    async def request_seen(self, product: str, token: str) -> None:
        """Wait (bounded) until the product's request for ``token`` reached its model server."""
        tasks = self.models[product].tasks_seen
        async with asyncio.timeout(self.wait_s):
            while not any(token in task for task in tasks()):  # noqa: ASYNC110 - bounded poll
                await asyncio.sleep(_POLL_S)


Scenario = tuple[str, str, Callable[[Stage], Awaitable[tuple[bool, str]]]]


_SHARED_KEPT = 20
"""Characters of a shared beginning kept before the point where two texts differ."""


def _shown(text: str, limit: int = 120) -> str:
    one_line = text.replace("\n", " ⏎ ")
    return one_line if len(one_line) <= limit else one_line[: limit - 1] + "…"


def _unexpected(expected: str, got: str) -> tuple[bool, str]:
    # Two long texts that differ late would look the same once cut: show both from shortly
    # before the first character where they part.
    common = next(
        (i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b),
        min(len(expected), len(got)),
    )
    if common > _SHARED_KEPT:
        cut = common - _SHARED_KEPT
        expected, got = "…" + expected[cut:], "…" + got[cut:]
    return False, f"expected {_shown(expected)!r}, got {_shown(got)!r}"


def _task(token: str, ask: str) -> dict[str, Any]:
    return {"description": f"demo {token.lower()}", "prompt": f"{ask} (demo task {token})"}


def foreground(product: str) -> Callable[[Stage], Awaitable[tuple[bool, str]]]:
    async def scenario(stage: Stage) -> tuple[bool, str]:
        token = f"FG-{product.split()[0].upper()}"
        answer = f"Hello from {product}."
        stage.models[product].answer(token, answer)
        result = await stage.call(product, _task(token, "Say hello in one sentence."))
        if result.is_error or result.text != answer:
            return _unexpected(answer, result.text)
        return True, f'answer: "{answer}"'

    return scenario


def background(product: str) -> Callable[[Stage], Awaitable[tuple[bool, str]]]:
    async def scenario(stage: Stage) -> tuple[bool, str]:
        token = f"BG-{product.split()[0].upper()}"
        answer = f"{product} finished in the background."
        stage.models[product].answer(token, answer)
        arguments = _task(token, "Finish a task in the background.")
        started = await stage.call(product, {**arguments, "run_in_background": True})
        if started.is_error or not started.text.startswith("started background subagent job "):
            return _unexpected("started background subagent job <id>", started.text)
        job_id = started.value["job_id"]
        read = await stage.job_tool(
            "job_output", {"job_id": job_id, "wait": True, "timeout_ms": stage.wait_s * 1000}
        )
        expected = f"{answer}\n[status: completed]"
        if read.is_error or read.text != expected:
            return _unexpected(expected, read.text)
        return True, f'{job_id} → job_output: "{answer}" [status: completed]'

    return scenario


def failure(product: str) -> Callable[[Stage], Awaitable[tuple[bool, str]]]:
    async def scenario(stage: Stage) -> tuple[bool, str]:
        token = f"FAIL-{product.split()[0].upper()}"
        failed = stage.models[product].fail(token)
        result = await stage.call(product, _task(token, "Try a task the model rejects."))
        expected = f"subagent run failed\nDiagnostic: {failed.diagnostic}"
        if not result.is_error or result.text != expected:
            return _unexpected(expected, result.text)
        return True, f"{failed.cause} → {failed.diagnostic}"

    return scenario


async def cancel_with_job_kill(stage: Stage, product: str) -> tuple[bool, str]:
    """Background run stalled mid-turn, stopped with ``job_kill``; then no process is left."""
    token = f"KILL-{product.split()[0].upper()}"
    stage.models[product].busy(token)
    arguments = {**_task(token, "Work on a long task."), "run_in_background": True}
    started = await stage.call(product, arguments)
    if started.is_error:
        return _unexpected("started background subagent job <id>", started.text)
    job_id = started.value["job_id"]
    await stage.request_seen(product, token)
    during = await stage.live_processes()
    killed = await stage.job_tool("job_kill", {"job_id": job_id, "reason": KILL_REASON})
    # job_kill returns once the job has settled (its processes gone), with its status line.
    stopped = f"stopped job {job_id} [status: killed, {KILL_REASON}]"
    if killed.is_error or killed.text != stopped:
        return _unexpected(stopped, killed.text)
    read = await stage.job_tool(
        "job_output", {"job_id": job_id, "wait": True, "timeout_ms": stage.wait_s * 1000}
    )
    expected = f"(no new output)\n[status: killed, {KILL_REASON}]"
    if read.text != expected:
        return _unexpected(expected, read.text)
    return await _tree_clean(stage, during, f"job_kill {job_id} → [status: killed]")


async def cancel_tool_call(stage: Stage, product: str) -> tuple[bool, str]:
    """A foreground tool call stalled mid-turn and cancelled by its caller leaves no process."""
    token = f"CANCEL-{product.split()[0].upper()}"
    stage.models[product].busy(token)
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


def cancel_via_job_kill(product: str) -> Callable[[Stage], Awaitable[tuple[bool, str]]]:
    async def scenario(stage: Stage) -> tuple[bool, str]:
        return await cancel_with_job_kill(stage, product)

    return scenario


def cancel_the_tool_call(product: str) -> Callable[[Stage], Awaitable[tuple[bool, str]]]:
    async def scenario(stage: Stage) -> tuple[bool, str]:
        return await cancel_tool_call(stage, product)

    return scenario


_BUILDERS: dict[DemoScenario, Callable[[str], Callable[[Stage], Awaitable[tuple[bool, str]]]]] = {
    "foreground answer": foreground,
    "background job": background,
    "model failure": failure,
    "cancel via job_kill": cancel_via_job_kill,
    "cancel the tool call": cancel_the_tool_call,
}
#: Phases of scenarios run together; each cancellation then runs alone.
_TOGETHER: tuple[tuple[DemoScenario, ...], ...] = (
    ("foreground answer",),
    ("background job", "model failure"),
)
_ALONE: tuple[DemoScenario, ...] = ("cancel via job_kill", "cancel the tool call")


def scenario_phases(
    takes_part: Sequence[tuple[str, Sequence[DemoScenario]]],
) -> list[list[Scenario]]:
    """Phases run one after another; the scenarios of one phase run concurrently.

    ``takes_part`` lists each product (in table order) with the scenarios its plan names. The
    first phase's runs bootstrap each product's shared home (two cold Codex processes racing on
    one home fail to initialise its sqlite state). Each cancellation runs alone, so the process
    count it shows afterwards is its own.
    """

    def phase(names: Sequence[DemoScenario]) -> list[Scenario]:
        return [
            (name, product, _BUILDERS[name](product))
            for name in names
            for product, scenarios in takes_part
            if name in scenarios
        ]

    together = [phase(names) for names in _TOGETHER]
    alone = [[scenario] for name in _ALONE for scenario in phase((name,))]
    return [p for p in together if p] + alone
