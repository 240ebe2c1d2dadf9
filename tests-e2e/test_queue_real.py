"""The fair queue on the REAL product (keyless Codex through the loopback model): 3 owners start
10 background jobs each on a provider with ``max_concurrent = 2``.

A thread walks ``/proc`` every 20 ms the whole time and counts the Codex processes
below this test process (a Codex process whose parent is no Codex process is one run's product);
it reads the kernel's process table, never dsh's bookkeeping. The starts interleave the owners,
a queued job reads ``queued`` with its place and a ``job_kill`` of it returns in under 50 ms
without starting anything, and the walk never sees more than two runs at once.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from dsh.jobs import JobStatus
from dsh.subagent_codex.testing import (
    FakeResponsesServer,
    MessageItem,
    RecordedRequest,
    Reply,
    hermetic_env,
    write_codex_home,
)
from dsh.tool_subagent import Caller, Harness
from dsh.tool_subagent._demo.scenarios import owned_marked_processes

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(180)]

OWNERS = ("owner-a", "owner-b", "owner-c")
JOBS_EACH = 10
LIMIT = 2
TOOL = "queued_codex"


def _route(request: RecordedRequest) -> Reply:
    return Reply((MessageItem("done"),))


def _proc_table() -> dict[int, tuple[int, str]]:
    """pid → (parent pid, program name) of every process, from ``/proc`` alone."""
    table: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text(encoding="utf-8", errors="replace")
            argv0 = (entry / "cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        ppid = int(text[text.rindex(")") + 2 :].split()[1])
        table[int(entry.name)] = (ppid, Path(argv0).name)
    return table


def _product_runs(root: int) -> int:
    """Codex processes below ``root`` whose parent is no Codex process: one per run."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    runs, stack = 0, list(children.get(root, []))
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        ppid, name = table[pid]
        if name.startswith("codex") and not table.get(ppid, (0, ""))[1].startswith("codex"):
            runs += 1
    return runs


class Walker:
    """Samples :func:`_product_runs` in a thread until stopped: the peak and the sample count."""

    def __init__(self) -> None:
        self.peak = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._walk, daemon=True)

    def _walk(self) -> None:
        root = os.getpid()
        while not self._stop.is_set():
            self.peak = max(self.peak, _product_runs(root))
            self.samples += 1
            self._stop.wait(0.02)  # a run lasts 0.4 s or more: a third run cannot hide

    def __enter__(self) -> Walker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    async with FakeResponsesServer(route=_route) as codex:
        home = write_codex_home(tmp_path / "codex-home", codex.base_url, "queue-model")
        profile: dict[str, Any] = {
            "provider": [
                {
                    "kind": "codex",
                    "max_concurrent": LIMIT,
                    "config": {
                        "stderr": "discard",
                        "permission_mode": "dangerously-bypass-approvals-and-sandbox",
                        "env": hermetic_env(home),
                    },
                }
            ],
            "tool": [{"provider": "codex", "tool_name": TOOL, "max_depth": "provider-managed"}],
            "jobs": {"store": "memory", "max_concurrent_jobs_per_owner": JOBS_EACH},
        }
        async with Harness.from_profile(profile) as built:
            yield built


async def test_three_owners_ten_jobs_each_share_two_slots_in_turn(
    harness: Harness, tmp_path: Path
) -> None:
    tool = harness.tool(TOOL)
    callers = {owner: Caller(owner, str(tmp_path)) for owner in OWNERS}
    jobs: dict[str, str] = {}  # job id → owner
    began = time.monotonic()
    with Walker() as walker:
        for owner in OWNERS:  # owner a asks for all of its jobs first, then b, then c
            for n in range(JOBS_EACH):
                arguments = {"description": f"{owner} {n}", "prompt": "say done"}
                started = await tool.call({**arguments, "run_in_background": True}, callers[owner])
                assert started.value is not None, started.text
                jobs[str(started.value["job_id"])] = owner
        await asyncio.sleep(0.05)
        # The last job of owner c waits: it reads queued with its place.
        victim = list(jobs)[-1]
        snapshot = harness.jobs.get(victim, callers["owner-c"])
        assert snapshot.status is JobStatus.QUEUED, snapshot
        assert (snapshot.detail or "").startswith("place "), snapshot
        kill_began = time.perf_counter()
        killed = await harness.tool("job_kill").call({"job_id": victim}, callers["owner-c"])
        kill_took = time.perf_counter() - kill_began
        assert killed.text.startswith(f"stopped job {victim} [status: killed"), killed.text
        assert kill_took < 0.05, kill_took
        for job_id, owner in jobs.items():
            await harness.jobs.wait(job_id, 120, callers[owner])
    took = time.monotonic() - began
    order: dict[int, str] = {}
    for job_id, owner in jobs.items():
        snapshot = harness.jobs.get(job_id, callers[owner])
        if job_id == victim:
            assert snapshot.status is JobStatus.KILLED
            assert snapshot.meta is None or "queue" not in snapshot.meta
            continue
        assert snapshot.status is JobStatus.COMPLETED, snapshot
        assert snapshot.meta is not None
        facts = snapshot.meta["queue"]
        assert facts["max_concurrent"] == LIMIT
        order[facts["order"]] = owner
    starts = [order[n] for n in sorted(order)]
    print(
        f"\n{len(starts)} runs in {took:.2f} s; kill of a queued job {kill_took * 1000:.1f} ms;"
        f" /proc walk: peak {walker.peak} of {walker.samples} samples; starts: {starts}"
    )
    assert sorted(order) == list(range(1, len(starts) + 1))
    # Owner a's first two found free slots while the others had not asked yet; from then on
    # every three consecutive starts are the three owners, until owner a has none left.
    assert starts[:LIMIT] == ["owner-a"] * LIMIT
    for i in range(LIMIT, LIMIT + 3 * (JOBS_EACH - LIMIT), 3):
        assert sorted(starts[i : i + 3]) == sorted(OWNERS), starts
    assert walker.peak == LIMIT, walker.peak  # the walk saw two at once, never more
    assert walker.samples > 50
    assert await asyncio.to_thread(owned_marked_processes) == []
