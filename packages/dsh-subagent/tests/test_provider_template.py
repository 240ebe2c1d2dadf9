"""``kit.ProductProvider`` and ``kit.ProductRun`` on a product of plain objects (no process).

The real products run the same algorithm in their packages' suites; here each rule of the
template is pinned alone: the order of the start steps, the rollback's error shapes, the warm
take-over with its cold fallback, and the close contract.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path

import pytest

from dsh.subagent import (
    ProductFailure,
    ResolvedStartRequest,
    StopReason,
    SubagentResult,
    TextBlock,
)
from dsh.subagent.kit import (
    FailureFacts,
    Launch,
    ProcessHandle,
    ProductInstall,
    ProductProvider,
    ProductRun,
    ProviderConfigBase,
    spawning_warm,
)
from dsh.subagent.testing import start_request

PREFIX = "subagent-toy"
START_LINE = "subagent-toy: Product subagent failure (product: Toy; stage: boot; category: unknown)"
TEARDOWN_LINE = (
    "subagent-toy: Product subagent failure (product: Toy; stage: teardown; category: unknown)"
)


class ToyConfig(ProviderConfigBase):
    provider_name: str = "toy"


class StartupBroke(Exception):
    pass


class ToyProcess:
    def __init__(self) -> None:
        self.busy: list[bool] = []
        self.killed = False

    def set_busy(self, busy: bool) -> None:
        self.busy.append(busy)

    def kill_now(self) -> bool:
        self.killed = True
        return True


class ToyRun(ProductRun):
    prefix = PREFIX
    product = "Toy"

    def __init__(self, log: list[str], *, teardown_fails: bool = False) -> None:
        super().__init__()
        self.log = log
        self.teardown_fails = teardown_fails
        self.teardowns = 0
        self.published = False
        self.dead = False
        self._process = ToyProcess()

    def _stop(self, aborted: bool) -> None:
        self.log.append(f"stop aborted={aborted}")

    async def _teardown(self) -> None:
        self.teardowns += 1
        await asyncio.sleep(0.01)
        if self.teardown_fails:
            raise RuntimeError("exit not proven")

    async def publish(self, request: ResolvedStartRequest) -> None:
        if self.dead:
            raise StartupBroke("died while idle")
        self.published = True
        answer = TextBlock(" ".join(request.texts))
        self._latch.settle(SubagentResult(StopReason.COMPLETED, (answer,)))

    def warm_usable(self) -> bool:
        return not self.published

    @property
    def process(self) -> ProcessHandle:
        return self._process

    def startup_failure(self, error: Exception) -> tuple[FailureFacts, BaseException] | None:
        if isinstance(error, StartupBroke):
            return (FailureFacts("Toy", "handshake", "process-exit", exit_code=3), error)
        return None


class ToyForwarding:
    def names(self) -> tuple[str, ...]:
        return ()

    def credential_names(self, environ: Mapping[str, str]) -> list[str]:
        return []


class ToyProvider(ProductProvider[ToyConfig, ToyRun]):
    config_class = ToyConfig
    install = ProductInstall("v", "toy", "p", lambda: "/toy", "TOY_HOME", ".toy", "login")
    prefix = PREFIX
    product = "Toy"
    start_stage = "boot"
    owned_dir_tag = "toy"
    log = logging.getLogger("dsh.test.toy")

    def __init__(self, config: ToyConfig | None = None, *, fail: str = "") -> None:
        super().__init__(config)
        self.steps: list[str] = []
        self.fail = fail
        self.runs: list[ToyRun] = []
        self.warm_spawns: list[bool] = []
        self.teardown_fails = False
        self.prepared = asyncio.Event()

    def env_forwarding(self) -> ToyForwarding:
        return ToyForwarding()

    def limits_problem(self) -> str | None:
        self.steps.append("limits")
        return "limits.memory cannot be enforced" if self.fail == "limits" else None

    async def reap_orphans(self) -> None:
        self.steps.append("reap")

    def launch(self, cwd: str, request: ResolvedStartRequest) -> Launch:
        self.steps.append("launch")
        return (["toy"], {"A": "1"})

    async def new_run(self, cwd: str, argv: list[str], env: dict[str, str | None]) -> ToyRun:
        self.steps.append("new_run")
        self.warm_spawns.append(spawning_warm())
        run = ToyRun(self.steps, teardown_fails=self.teardown_fails)
        self.runs.append(run)
        return run

    async def prepare_run(self, run: ToyRun, cwd: str, *, warm: bool) -> None:
        self.steps.append(f"prepare warm={warm}")
        self.prepared.set()
        if self.fail == "known":
            raise StartupBroke("exit 3")
        if self.fail == "other":
            raise OSError("raw, never shown")
        if self.fail == "hang":
            await asyncio.sleep(30)


def request(cwd: Path | str) -> ResolvedStartRequest:
    return start_request(str(cwd), "hello", "there", provider="toy")


async def test_a_cold_start_runs_the_steps_in_order(tmp_path: Path) -> None:
    provider = ToyProvider()
    run = await provider.start(request(tmp_path))
    assert provider.steps == ["limits", "reap", "launch", "new_run", "prepare warm=False"]
    assert (await run.result()).text == "hello there"
    await run.aclose()
    await run.aclose()
    assert run.teardowns == 1


async def test_the_limits_problem_is_refused_before_anything_starts(tmp_path: Path) -> None:
    provider = ToyProvider(fail="limits")
    with pytest.raises(ProductFailure) as info:
        await provider.start(request(tmp_path))
    assert str(info.value) == (
        "subagent-toy: limits.memory cannot be enforced; "
        "set limits_best_effort = true to run anyway"
    )
    assert provider.steps == ["limits"]


async def test_an_unusable_cwd_is_the_generic_start_failure(tmp_path: Path) -> None:
    with pytest.raises(ProductFailure) as info:
        await ToyProvider().start(request("relative"))
    assert str(info.value) == START_LINE


@pytest.mark.parametrize(
    ("fail", "line"),
    [
        ("known", "stage: handshake; category: process-exit; exit code: 3)"),
        ("other", "stage: boot; category: unknown)"),
    ],
)
async def test_a_failed_start_is_rolled_back_into_the_safe_failure(
    tmp_path: Path, fail: str, line: str
) -> None:
    provider = ToyProvider(fail=fail)
    with pytest.raises(ProductFailure) as info:
        await provider.start(request(tmp_path))
    assert str(info.value).endswith(line)
    assert "raw" not in str(info.value)
    (run,) = provider.runs
    assert run.teardowns == 1
    assert (await run.result()).stop_reason is StopReason.ABORTED


async def test_a_failed_start_and_teardown_raise_an_exception_group(tmp_path: Path) -> None:
    provider = ToyProvider(fail="other")
    provider.teardown_fails = True
    with pytest.raises(ExceptionGroup) as info:
        await provider.start(request(tmp_path))
    assert info.value.message == f"{START_LINE}; {TEARDOWN_LINE}"
    assert [str(e) for e in info.value.exceptions] == [START_LINE, TEARDOWN_LINE]


@pytest.mark.parametrize("teardown_fails", [False, True])
async def test_a_cancelled_start_propagates_or_shows_the_teardown_failure(
    tmp_path: Path, teardown_fails: bool
) -> None:
    provider = ToyProvider(fail="hang")
    provider.teardown_fails = teardown_fails
    task = asyncio.create_task(provider.start(request(tmp_path)))
    await provider.prepared.wait()
    task.cancel()
    if teardown_fails:
        with pytest.raises(ProductFailure, match="stage: teardown"):
            await task
    else:
        with pytest.raises(asyncio.CancelledError):
            await task
    assert provider.runs[0].teardowns == 1


async def test_a_warm_process_is_taken_and_a_dead_one_falls_back_cold(tmp_path: Path) -> None:
    provider = ToyProvider(ToyConfig(prewarm=1))
    first = await provider.start(request(tmp_path))
    await first.result()
    pool = provider.warm_pool
    await asyncio.sleep(0.05)
    # Replacements start once the run is closed (its tree gone), not at its result.
    assert not pool.idle()
    assert not provider.warm_spawns[1:]
    await first.aclose()
    for _ in range(200):
        if pool.idle():
            break
        await asyncio.sleep(0.01)
    (warm,) = pool.idle()
    assert warm._process.busy == [False]
    second = await provider.start(request(tmp_path))
    assert second is warm
    assert warm._process.busy == [False, True]
    await second.aclose()
    for _ in range(200):
        if pool.idle():
            break
        await asyncio.sleep(0.01)
    (dying,) = pool.idle()
    dying.dead = True
    third = await provider.start(request(tmp_path))
    assert third is not dying
    assert dying.teardowns == 1
    assert (await third.result()).text == "hello there"
    # Only the pool's spawns are warm ones (a provider spawns them idle: SpawnSpec.busy).
    assert provider.warm_spawns == [False, True, True, False]  # cold, warm, warm, cold third
    # Let the pool's replenish task await the result it was handed (a task cancelled before its
    # first step leaves that coroutine unawaited: WarmPool's, not the template's).
    await asyncio.sleep(0.05)
    await provider.aclose()
    for run in provider.runs:
        await run.aclose()


async def test_result_is_not_affected_by_a_cancelled_awaiter() -> None:
    run = ToyRun([])
    waiter = asyncio.create_task(run.result())
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await run.publish(start_request("/", "done", provider="toy"))
    assert (await run.result()).text == "done"
    async with run:
        pass
    assert run.log == ["stop aborted=False"]


async def test_a_failed_teardown_raises_the_teardown_line_for_every_caller() -> None:
    run = ToyRun([], teardown_fails=True)
    outcomes = await asyncio.gather(run.aclose(), run.aclose(), return_exceptions=True)
    assert [str(o) for o in outcomes] == [TEARDOWN_LINE, TEARDOWN_LINE]
    assert all(isinstance(o, ProductFailure) for o in outcomes)
    assert run.teardowns == 1
    assert run.log == ["stop aborted=True", "stop aborted=False"]
