"""Chaos: many real runs over both products with random cancel points and model-side faults.

Every run settles with a valid stop reason consistent with what happened, and afterwards no
process, file descriptor or temporary directory of ours is left. The plan is drawn from one
seed, printed first; set ``DSH_CHAOS_SEED`` to replay a failing plan.

The README's command runs 54 runs; ``DSH_FULL_VOLUME=1`` runs the full 200 (docs/architecture.md,
"CI time").
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import random
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dsh.subagent import StopReason, SubagentResult, TextBlock
from dsh.subagent_claude_code.testing import FakeMessagesServer
from dsh.subagent_codex.testing import (
    Behaviour,
    Drop,
    FakeResponsesServer,
    HttpStatus,
    MessageItem,
    RecordedRequest,
    Reply,
    Stall,
    write_codex_home,
)
from dsh.subprocess import SpawnChecks, SpawnSpec, SubprocessRuntime
from dsh.subprocess.testing import describe_processes

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(900)]

FULL_VOLUME = os.environ.get("DSH_FULL_VOLUME") == "1"
CODEX_RUNS = 110 if FULL_VOLUME else 30
CLAUDE_RUNS = 90 if FULL_VOLUME else 24
CONCURRENCY = 5
RUN_LIMIT_S = 60.0
FD_TOLERANCE = 4
FAULTS = ("good", "http", "drop", "stall")
CANCELS = ("none", "before-spawn", "during-start", "mid-turn", "after-answer")
CODEX_STATUSES = (500, 503, 429, 401)
CLAUDE_STATUSES = (500, 529, 429, 401)


@dataclass(frozen=True)
class Plan:
    index: int
    product: str
    fault: str
    cancel: str
    status: int
    delay: float

    @property
    def tag(self) -> str:
        return f"CHAOS-{self.index:03d}"

    @property
    def answer(self) -> str:
        return f"answer {self.tag} “exact” ✓\n  spaced  "


def make_plans(seed: int) -> list[Plan]:
    rng = random.Random(seed)
    products = ["codex"] * CODEX_RUNS + ["claude-code"] * CLAUDE_RUNS
    rng.shuffle(products)
    plans = []
    for index, product in enumerate(products):
        statuses = CODEX_STATUSES if product == "codex" else CLAUDE_STATUSES
        start_time = 0.4 if product == "codex" else 1.5
        plans.append(
            Plan(
                index=index,
                product=product,
                fault=rng.choice(FAULTS),
                cancel=rng.choice(CANCELS),
                status=rng.choice(statuses),
                delay=round(rng.uniform(0.0, start_time), 3),
            )
        )
    return plans


def codex_behaviour(plan: Plan) -> Behaviour:
    if plan.fault == "good":
        return Reply((MessageItem(plan.answer, "final_answer"),))
    if plan.fault == "http":
        return HttpStatus(plan.status, {"error": {"message": f"chaos {plan.tag}"}})
    if plan.fault == "drop":
        return Drop((MessageItem("partial"),))
    return Stall((), seconds=30)


def queue_claude(server: FakeMessagesServer, plan: Plan) -> None:
    if plan.fault == "good":
        server.queue_text(plan.answer, match=plan.tag)
    elif plan.fault == "http":
        server.queue_http_error(plan.status, f"chaos {plan.tag}", match=plan.tag)
    elif plan.fault == "drop":
        server.queue_drop(match=plan.tag)
    else:
        server.queue_stall(match=plan.tag)


@dataclass
class Observed:
    plan: Plan
    entered_start: bool = False
    start_cancelled: bool = False
    settled_before_cancel: SubagentResult | None = None
    cancelled: bool = False
    result: SubagentResult | None = None


def check(kit: Any, seen: Observed, spawns: int, arrived: bool) -> None:
    plan = seen.plan
    where = f"{plan} -> {seen.result!r} (spawns: {spawns}, model request: {arrived})"
    if plan.cancel == "before-spawn":
        # start() was entered and cancelled at its first suspension point, before any spawn.
        assert seen.entered_start, f"start() was never entered: {where}"
        assert spawns == 0, f"a process was spawned: {where}"
        assert not arrived, f"a model request was made: {where}"
    if seen.start_cancelled:
        assert plan.cancel in ("before-spawn", "during-start"), where
        assert seen.result is None, where
        return
    assert spawns == 1, f"a published run spawned {spawns} processes: {where}"
    assert plan.cancel != "before-spawn", f"start() was not cancelled: {where}"
    result = seen.result
    assert result is not None, where
    assert result.stop_reason in (StopReason.COMPLETED, StopReason.ERROR, StopReason.ABORTED)
    if seen.settled_before_cancel is not None:
        assert result == seen.settled_before_cancel, f"a late cancel changed the result: {where}"
    if result.stop_reason is StopReason.ABORTED:
        assert seen.cancelled, f"aborted without a cancel: {where}"
        assert seen.settled_before_cancel is None, where
        assert result.output == (), where
        assert result.diagnostic is None, where
    elif plan.fault == "good":
        assert result.stop_reason is StopReason.COMPLETED, where
        assert result.text == plan.answer, where
        assert result.diagnostic is None, where
    else:
        assert result.stop_reason is StopReason.ERROR, where
        # A Codex failure keeps a message Codex completed before it (the dropped stream's
        # "partial" item) as partial output; otherwise a failure has no output.
        kept = plan.product == "codex" and plan.fault == "drop"
        assert result.output in (((TextBlock("partial"),), ()) if kept else ((),)), where
        assert kit.is_safe_diagnostic(result.diagnostic), where
        product = "Codex" if plan.product == "codex" else "Claude Code"
        assert f"(product: {product};" in (result.diagnostic or ""), where
        if plan.fault == "http" and not plan.cancel.startswith("during"):
            assert f"HTTP status: {plan.status}" in (result.diagnostic or "") or (
                plan.status == 500 and "internalServerError" in (result.diagnostic or "")
            ), where


async def drive(
    provider: Any, request: Any, plan: Plan, arrived: Callable[[str], bool]
) -> Observed:
    seen = Observed(plan)
    starting = provider.start(request)
    start = asyncio.ensure_future(starting)
    if plan.cancel == "before-spawn":
        # One loop step: start() runs up to its first suspension point (before the spawn).
        await asyncio.sleep(0)
        seen.entered_start = inspect.getcoroutinestate(starting) == inspect.CORO_SUSPENDED
        start.cancel()
    elif plan.cancel == "during-start":
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(start), plan.delay)
        start.cancel()
    try:
        run = await start
    except asyncio.CancelledError:
        if not start.cancelled():
            raise
        seen.start_cancelled = True
        return seen
    try:
        pending = asyncio.ensure_future(run.result())
        try:
            if plan.cancel == "mid-turn":
                # Mid-turn: the model request has reached the server (bounded poll).
                deadline = time.monotonic() + 20
                while not arrived(plan.tag) and not pending.done():
                    assert time.monotonic() < deadline, f"no model request for {plan}"
                    await asyncio.sleep(0.01)
            elif plan.cancel == "during-start":
                await asyncio.wait([pending], timeout=plan.delay / 2)
            elif plan.cancel == "after-answer":
                await pending
            if plan.cancel != "none":
                if pending.done():
                    seen.settled_before_cancel = pending.result()
                seen.cancelled = True
                run.cancel()
            seen.result = await run.result()
        finally:
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pending
    finally:
        await run.aclose()
    return seen


async def test_chaos_runs_settle_validly_and_leak_nothing(
    kit: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed = int(os.environ.get("DSH_CHAOS_SEED") or random.SystemRandom().randrange(2**32))
    print(f"chaos seed: {seed} (replay with DSH_CHAOS_SEED={seed})")
    plans = make_plans(seed)
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private_tmp))
    by_tag = {plan.tag: plan for plan in plans}
    # Which run spawned: each run has its own cwd, named after its tag.
    spawned: list[str] = []
    real_spawn = SubprocessRuntime.spawn

    async def spawn_spy(self: SubprocessRuntime, spec: SpawnSpec) -> Any:
        spawned.append(Path(spec.cwd or "").name)
        return await real_spawn(self, spec)

    monkeypatch.setattr(SubprocessRuntime, "spawn", spawn_spy)
    # In both providers, start() awaits reap_orphans() (SpawnChecks': reap_orphans_once()) and
    # then spawns with no suspension point in between (the orphan check itself runs in the
    # background and never suspends). Add one real suspension point there for every start(), so
    # a "before-spawn" cancel lands inside start() (entered, suspended), before the spawn.
    real_reap = SpawnChecks.reap_orphans

    async def yielding_reap(self: SpawnChecks) -> None:
        await asyncio.sleep(0)
        await real_reap(self)

    monkeypatch.setattr(SpawnChecks, "reap_orphans", yielding_reap)

    def route(request: RecordedRequest) -> Behaviour | None:
        task = request.task or ""
        plan = by_tag.get(task.split(" ")[0])
        if plan is None:
            return Reply((MessageItem("warm-up", "final_answer"),))
        return codex_behaviour(plan)

    async with FakeResponsesServer(route=route) as responses, FakeMessagesServer() as messages:
        home = write_codex_home(
            tmp_path / "codex-home", responses.base_url, "mock-model", stream_idle_timeout_ms=1500
        )
        workspace = tmp_path / "ws"
        workspace.mkdir()
        tmp_env = {"TMPDIR": str(private_tmp)}
        codex = kit.codex_provider(home, env=tmp_env)
        claude = kit.claude_provider(
            tmp_path / "claude-root",
            messages.base_url,
            env={**tmp_env, "API_TIMEOUT_MS": "2500"},
        )
        try:
            # Warm up both products (lazy imports, executor threads) before the fd baseline.
            for provider, name in ((codex, "codex"), (claude, "claude-code")):
                messages.queue_text("warm-up", match="WARMUP")
                async with await provider.start(kit.request(workspace, "WARMUP", name)) as run:
                    assert (await run.result()).text == "warm-up"
            fds_before = await asyncio.to_thread(kit.settle_fds, 0, 10**6)
            for plan in plans:
                if plan.product == "claude-code":
                    queue_claude(messages, plan)
            gate = asyncio.Semaphore(CONCURRENCY)

            def arrived(tag: str) -> bool:
                return any((r.task or "").startswith(tag) for r in responses.requests) or any(
                    (r.task or "").startswith(tag) for r in messages.requests
                )

            async def one(plan: Plan) -> Observed:
                provider = codex if plan.product == "codex" else claude
                cwd = workspace / plan.tag
                cwd.mkdir()
                request = kit.request(cwd, f"{plan.tag} do the task", plan.product)
                async with gate, asyncio.timeout(RUN_LIMIT_S):
                    return await drive(provider, request, plan, arrived)

            began = time.monotonic()
            observed = await asyncio.gather(*(one(plan) for plan in plans))
            elapsed = time.monotonic() - began
        finally:
            messages.release_stalls()
    print(f"{len(plans)} runs in {elapsed:.1f}s")
    for seen in observed:
        stop = (
            "start-cancelled" if seen.start_cancelled else seen.result and seen.result.stop_reason
        )
        plan = seen.plan
        print(f"  {plan.tag} {plan.product:11} {plan.fault:5} {plan.cancel:12} {stop}")
    failures = []
    for seen in observed:
        try:
            check(kit, seen, spawned.count(seen.plan.tag), arrived(seen.plan.tag))
        except AssertionError as error:
            failures.append(f"{error}")
    assert not failures, f"seed {seed}:\n" + "\n".join(failures)
    assert len(observed) >= 50
    assert {s.plan.product for s in observed} == {"codex", "claude-code"}
    leaked = await asyncio.to_thread(kit.own_marked)
    assert leaked == [], f"seed {seed}: processes leaked: {describe_processes(leaked)}"
    fds_after = await asyncio.to_thread(kit.settle_fds, fds_before, FD_TOLERANCE)
    assert fds_after <= fds_before + FD_TOLERANCE, f"seed {seed}: fds {fds_before}->{fds_after}"
    assert list(private_tmp.iterdir()) == [], f"seed {seed}: temporary directories leaked"
    mine = f"dsh-claude-{os.getpid()}-"
    shared = await asyncio.to_thread(lambda: [p.name for p in Path("/tmp").iterdir()])
    assert [name for name in shared if name.startswith(mine)] == []
