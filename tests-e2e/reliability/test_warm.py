"""Warm starts (``prewarm = N``, issue 16) against the real products and the loopback models.

Every check of "nothing is left" walks /proc for tree markers (``marked_processes``,
``Kit.own_marked``) and never trusts the pool's own bookkeeping. The pool's counters (taken,
missed, dead while idle) are read only to tell a warm start from a cold one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pydantic
import pytest

from dsh.subagent import ResolvedStartRequest, StopReason
from dsh.subagent_claude_code import ClaudeCodeProvider
from dsh.subagent_claude_code._run import WARM_INITIALIZE
from dsh.subagent_claude_code._transport import DshTransport
from dsh.subagent_codex import CodexProvider
from dsh.subprocess import Collect, SpawnSpec, default_runtime, marked_processes
from dsh.tool_subagent import Harness
from dsh.tool_subagent.errors import ProfileError

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(180)]


@dataclass
class Product:
    """One product's side of a test: its provider, requests and the model server's script."""

    name: str
    make: Callable[..., Any]
    request: Callable[[Path, str], ResolvedStartRequest]
    workspace: Path
    answer: Callable[[], None]
    stall: Callable[[], None]
    seen: Callable[[], int]
    base_url: str
    root: Path
    private: bool = False


PRIVATE_HOME_NAMES = ("HOME", "CODEX_HOME", "CODEX_SQLITE_HOME", "CLAUDE_CONFIG_DIR")


def _private(make: Callable[..., Any], template: Path | None) -> Callable[..., Any]:
    """``make`` under ``isolation = "private"`` (issue 24): the kit's hermetic homes dropped from
    ``env``, the Codex home used as the template, so every warm guarantee is checked again with a
    private home per process."""

    def make_private(**fields: Any) -> Any:
        provider = make(**fields)
        native = provider.config
        env = {k: v for k, v in native.env.items() if k not in PRIVATE_HOME_NAMES}
        extra = {"home_template": str(template)} if template is not None else {}
        update = {"env": env, "isolation": "private", **extra}
        config = type(native).model_validate({**native.model_dump(), **update})
        return type(provider)(config)

    return make_private


@pytest.fixture(params=["codex", "claude-code", "codex-private", "claude-code-private"])
def product(request: pytest.FixtureRequest, kit: Any, codex: Any, claude: Any) -> Product:
    private = request.param.endswith("-private")
    if request.param.startswith("codex"):
        return Product(
            "codex",
            _private(codex.provider, codex.home) if private else codex.provider,
            lambda cwd, text: kit.request(cwd, text, "codex"),
            codex.workspace,
            lambda: codex.server.queue_text("WARM-OK", phase="final_answer"),
            lambda: codex.server.queue_stall(seconds=60),
            lambda: len(codex.server.requests),
            codex.server.base_url,
            codex.home,
            private,
        )
    return Product(
        "claude-code",
        _private(claude.provider, None) if private else claude.provider,
        lambda cwd, text: kit.request(cwd, text, "claude-code"),
        claude.workspace,
        lambda: claude.server.queue_text("WARM-OK"),
        claude.server.queue_stall,
        lambda: len(claude.server.requests),
        claude.server.base_url,
        claude.root,
        private,
    )


async def _complete(provider: Any, product: Product, cwd: Path | None = None) -> int:
    """One delegation to completion; returns the pid of the product process that served it."""
    product.answer()
    async with await provider.start(product.request(cwd or product.workspace, "task")) as run:
        pid = int(run.process.pid)
        tree = run.process.tree_id
        result = await run.result()
    assert result.stop_reason is StopReason.COMPLETED, result.diagnostic
    assert result.text == "WARM-OK"
    assert await asyncio.to_thread(marked_processes, tree) == []  # one run, then it exited
    return pid


async def _idle(kit: Any, provider: Any, count: int) -> list[Any]:
    pool = provider.warm_pool
    await kit.wait_until(lambda: len(pool.idle()) >= count, 60.0, f"{count} warm processes")
    return list(pool.idle())


async def _gone(kit: Any, tree: str) -> None:
    await kit.wait_until(lambda: marked_processes(tree) == [], 10.0, "the tree to exit")


async def test_each_warm_process_serves_exactly_one_run(kit: Any, product: Product) -> None:
    provider = product.make(prewarm=1)
    try:
        cold_pid = await _complete(provider, product)
        [warm] = await _idle(kit, provider, 1)
        pool = provider.warm_pool
        assert warm.process.pid != cold_pid
        product.stall()
        second = await provider.start(product.request(product.workspace, "second"))
        try:
            assert second.process.pid == warm.process.pid
            assert pool.taken == 1
            await kit.wait_until(lambda: product.seen() >= 2, 60.0, "the second model request")
            # While the warm process is busy with its run, another start never lands on it.
            third_pid = await _complete(provider, product)
            assert third_pid not in (cold_pid, warm.process.pid)
        finally:
            # Cancelling a run that took a warm process is an ordinary cancel: aborted, and
            # its whole tree is gone when aclose() returns.
            second.cancel()
            await second.aclose()
        assert (await second.result()).stop_reason is StopReason.ABORTED
        assert await asyncio.to_thread(marked_processes, second.process.tree_id) == []
        # The replacement came in the background, and it is yet another process.
        [replacement] = await _idle(kit, provider, 1)
        assert replacement.process.pid not in (cold_pid, warm.process.pid, third_pid)
    finally:
        await provider.aclose()
    assert await asyncio.to_thread(kit.own_marked) == []


@asynccontextmanager
async def _warmed(kit: Any, product: Product, prewarm: int) -> AsyncIterator[Any]:
    """A provider with ``prewarm`` warm processes after one completed run; once it is closed,
    none of this test's processes is left."""
    provider = product.make(prewarm=prewarm)
    try:
        await _complete(provider, product)
        yield provider
    finally:
        await provider.aclose()
    assert await asyncio.to_thread(kit.own_marked) == []


async def test_runtime_aclose_leaves_no_warm_process(kit: Any, product: Product) -> None:
    async with _warmed(kit, product, 2) as provider:
        warm = await _idle(kit, provider, 2)
        trees = [w.process.tree_id for w in warm]
        assert all(marked_processes(tree) for tree in trees)  # alive and marked before
        await default_runtime().aclose()
        # aclose() of the runtime returns after whole-tree exit: checked at once, by a walk.
        assert await asyncio.to_thread(kit.own_marked) == []
        # Dead while idle: never used; the next start is cold and completes with no error.
        await _complete(provider, product)
        assert provider.warm_pool.dead_idle >= 1


async def test_a_cwd_miss_starts_cold_in_the_requested_cwd(
    kit: Any, product: Product, tmp_path: Path
) -> None:
    other = tmp_path / "other-ws"
    other.mkdir()
    async with _warmed(kit, product, 1) as provider:
        [warm] = await _idle(kit, provider, 1)
        pool = provider.warm_pool
        missed = pool.missed
        product.stall()
        run = await provider.start(product.request(other, "elsewhere"))
        try:
            assert run.process.pid != warm.process.pid
            assert pool.missed == missed + 1
            assert psutil.Process(run.process.pid).cwd() == str(other)
        finally:
            await run.aclose()
        await _gone(kit, warm.process.tree_id)  # the pool moved to the new cwd
        [moved] = await _idle(kit, provider, 1)
        assert psutil.Process(moved.process.pid).cwd() == str(other)


async def test_a_warm_process_that_died_while_idle_is_not_used(kit: Any, product: Product) -> None:
    async with _warmed(kit, product, 1) as provider:
        [warm] = await _idle(kit, provider, 1)
        os.kill(warm.process.pid, signal.SIGKILL)
        await kit.wait_until(lambda: not psutil.pid_exists(warm.process.pid) or _zombie(warm))
        await kit.wait_until(lambda: warm.process.outcome is not None, 10.0, "the exit report")
        pid = await _complete(provider, product)  # no error reaches the caller
        assert pid != warm.process.pid
        assert provider.warm_pool.dead_idle == 1
        assert provider.warm_pool.taken == 0


def _zombie(warm: Any) -> bool:
    try:
        return bool(psutil.Process(warm.process.pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return True


async def test_provider_aclose_closes_idle_warm_processes(kit: Any, product: Product) -> None:
    provider = product.make(prewarm=1)
    try:
        await _complete(provider, product)
        [warm] = await _idle(kit, provider, 1)
        await provider.aclose()
        assert await asyncio.to_thread(marked_processes, warm.process.tree_id) == []
        # Later starts are cold and warm nothing.
        await _complete(provider, product)
        await asyncio.sleep(0.5)
        assert provider.warm_pool.idle() == []
        assert await asyncio.to_thread(kit.own_marked) == []
    finally:
        await provider.aclose()


async def test_closing_the_harness_closes_its_providers_warm_processes(
    kit: Any, product: Product
) -> None:
    config = product.make().config.model_dump(
        include={"env", "stderr", "isolation", "home_template"}
    )
    profile = {"provider": [{"kind": product.name, "config": {**config, "prewarm": 1}}]}
    async with Harness.from_profile(profile) as harness:
        provider = harness.subagents.get(product.name)
        await _complete(provider, product)
        [warm] = await _idle(kit, provider, 1)
    assert await asyncio.to_thread(marked_processes, warm.process.tree_id) == []
    assert await asyncio.to_thread(kit.own_marked) == []


@pytest.mark.parametrize("kind", ["codex", "claude-code"])
@pytest.mark.parametrize("value", [-1, 17, True, "2", 1.5])
async def test_bad_prewarm_values_are_rejected_before_spawning(
    kit: Any, kind: str, value: Any
) -> None:
    cls = CodexProvider if kind == "codex" else ClaudeCodeProvider
    with pytest.raises(pydantic.ValidationError) as caught:
        cls.from_config({"prewarm": value})
    assert caught.value.errors()[0]["loc"] == ("prewarm",)
    with pytest.raises(ProfileError, match=r"provider\[0\]\.config\.prewarm"):
        Harness.from_profile({"provider": [{"kind": kind, "config": {"prewarm": value}}]})
    assert await asyncio.to_thread(kit.own_marked) == []


async def test_prewarm_is_read_from_a_profile_file(kit: Any, tmp_path: Path) -> None:
    profile = tmp_path / "profile.toml"
    profile.write_text(
        '[[provider]]\nkind = "codex"\n[provider.config]\nprewarm = 2\n\n'
        '[[provider]]\nkind = "claude-code"\n[provider.config]\nprewarm = 1\n',
        encoding="utf-8",
    )
    async with Harness.from_profile(profile) as harness:
        codex, claude = (harness.subagents.get(n) for n in ("codex", "claude-code"))
        assert isinstance(codex, CodexProvider)
        assert isinstance(claude, ClaudeCodeProvider)
        assert (codex.config.prewarm, claude.config.prewarm) == (2, 1)
    assert await asyncio.to_thread(kit.own_marked) == []  # loading spawned nothing


async def test_claude_codes_warm_initialize_is_the_sdks_own(
    kit: Any, claude: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    written: list[dict[str, Any]] = []
    original = DshTransport.write

    async def recording(self: DshTransport, data: str) -> None:
        frame = json.loads(data)
        if frame.get("type") == "control_request":
            written.append(frame)
        await original(self, data)

    monkeypatch.setattr(DshTransport, "write", recording)
    provider = claude.provider(prewarm=1)
    try:
        claude.server.queue_text("WARM-OK")
        async with await provider.start(claude.request("cold")) as run:
            await run.result()
        await _idle(kit, provider, 1)
        claude.server.queue_text("WARM-OK")
        async with await provider.start(claude.request("warm")) as run:
            assert (await run.result()).stop_reason is StopReason.COMPLETED
        assert provider.warm_pool.taken == 1
    finally:
        await provider.aclose()
    inits = [f for f in written if f["request"].get("subtype") == "initialize"]
    ours = [f for f in inits if f["request_id"] == "dsh_warm_initialize"]
    sdks = [f for f in inits if f["request_id"] != "dsh_warm_initialize"]
    assert len(ours) >= 1
    assert len(sdks) == 2  # the cold run's and the warm run's
    assert all(f["request"] == WARM_INITIALIZE for f in ours + sdks)


# ---- a SIGKILLed host ----------------------------------------------------------------------


async def test_warm_processes_of_a_killed_host_are_gone(
    kit: Any, product: Product, tmp_path: Path, supervised: bool
) -> None:
    async def attempt(n: int) -> None:
        host_tmp = tmp_path / f"host-tmp-{n}"
        await asyncio.to_thread(host_tmp.mkdir)
        spec = SpawnSpec(
            argv=[
                sys.executable,
                str(kit.here / "warm_host.py"),
                product.name,
                product.base_url,
                str(product.root),
                str(product.workspace),
                "2",
                *(() if supervised else ("plain",)),
                *(("private",) if product.private else ()),
            ],
            env={"TMPDIR": str(host_tmp)},
            stdout="pipe",
            stderr=Collect(16_384),
            grace_ms=1000,
        )
        product.answer()
        host = await kit.spawn_host(spec, supervised=supervised)
        holder = 0
        try:
            assert host.stdout is not None
            async with asyncio.timeout(90):
                line = await host.stdout.readline()
            assert line, host.collected("stderr").text
            report = json.loads(line)
            holder = report["holder"]
            warm = set(report["warm"])
            assert len(warm) == 2
            owned = set(await asyncio.to_thread(kit.owned_by, host.pid))
            assert warm <= owned  # the warm processes carry the host's tree marker
            if supervised:
                os.kill(host.pid, signal.SIGKILL)
                assert (await host.wait()).signal == "SIGKILL"
                # Each supervisor sees its host's socket close and kills its tree: no reaper.
                await kit.wait_until(lambda: kit.owned_by(host.pid) == [], 3.0, "the warm trees")
                await kit.reap_in_fresh_process()  # asserts the reaper exited 0
                assert await asyncio.to_thread(kit.owned_by, host.pid) == []
                return
            async with kit.fresh_reaper() as reap:
                os.kill(host.pid, signal.SIGKILL)
                assert (await host.wait()).signal == "SIGKILL"
                await asyncio.sleep(0.5)
                survivors = set(await asyncio.to_thread(kit.owned_by, host.pid))
                if not survivors:
                    raise kit.ReapedElsewhere  # another dsh process on the machine was first
                assert warm <= survivors, [
                    (p, psutil.pid_exists(p) and psutil.Process(p).status()) for p in warm
                ]
                reaped = await reap()  # asserts the reaper exited 0
            if not warm <= reaped and await asyncio.to_thread(kit.owned_by, host.pid) == []:
                raise kit.ReapedElsewhere  # taken between the scan above and this reaper's
            assert warm <= reaped, (warm, reaped)
            assert await asyncio.to_thread(kit.owned_by, host.pid) == []
        finally:
            if holder:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(holder, signal.SIGKILL)
            await host.aclose()

    await kit.until_not_reaped_elsewhere(attempt)
