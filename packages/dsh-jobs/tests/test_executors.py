"""The execution-backend seam: executors, portable work, the queued status, the [jobs] keys.

``GatedExecutor`` is a scripted stand-in for an executor that queues (the Ray executor's capacity
wait), so the registry's side of the contract is checked without a cluster; the Ray executor
itself is exercised on a real local cluster in ``tests-e2e/ray``.
"""

from __future__ import annotations

import asyncio
import re
import sys
from dataclasses import dataclass
from typing import Any, ClassVar

import pydantic
import pytest

from dsh.jobs import (
    MAX_RUNS_PER_NODE,
    Executor,
    JobOutcome,
    JobRegistry,
    JobsConfig,
    JobStarted,
    JobStatus,
    JobWork,
    LocalExecutor,
    PortableWork,
    RecordFilter,
    executor_for,
)
from dsh.jobs._ray_placement import run_share
from dsh.jobs._worker_pool import Worker, WorkerPool
from dsh.jobs.errors import JobArgumentError, JobExecutorError, JobLimitError
from dsh.jobs.tools import JobListTool


@dataclass(frozen=True)
class Owner:
    session_id: str


A = Owner("session-a")


async def echo(text: str) -> JobOutcome:
    """A portable work's target (``test_executors:echo`` is not importable; see ``TARGET``)."""
    return JobOutcome(JobStatus.COMPLETED, output=text)


# Test modules are imported by path (importlib mode), so the target is found through sys.modules.
TARGET = f"{__name__}:echo"


class GatedExecutor(Executor):
    """Runs work only once ``gate`` is set; the job is ``queued`` until then."""

    name: ClassVar[str] = "gated"
    queues: ClassVar[bool] = True

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.ran = 0
        self.closed = 0

    async def execute(self, work: JobWork, started: JobStarted) -> JobOutcome:
        await self.gate.wait()
        started("node-1")
        self.ran += 1
        return await work()

    async def aclose(self) -> None:
        self.closed += 1


class PortableOnly(LocalExecutor):
    name: ClassVar[str] = "portable-only"
    portable: ClassVar[bool] = True


async def finish(text: str = "done") -> JobOutcome:
    return JobOutcome(JobStatus.COMPLETED, output=text)


# ---- the default and the queued status ------------------------------------------------------


async def test_the_default_executor_is_local_and_a_job_starts_running() -> None:
    async with JobRegistry() as jobs:
        assert type(jobs.executor) is LocalExecutor
        job_id = jobs.start("subagent", "local", A, finish)
        assert jobs.get(job_id, A).status is JobStatus.RUNNING
        snapshot = await jobs.wait(job_id, 5, A)
        assert (snapshot.status, snapshot.where) == (JobStatus.COMPLETED, None)


async def test_a_job_waiting_for_capacity_is_queued_then_running() -> None:
    executor = GatedExecutor()
    async with JobRegistry(executor=executor) as jobs:
        job_id = jobs.start("subagent", "waits", A, finish)
        await asyncio.sleep(0.01)
        assert jobs.get(job_id, A).status is JobStatus.QUEUED
        listed = await JobListTool(jobs).call({}, A)
        assert listed.text == f"{job_id} [subagent] queued — waits"
        executor.gate.set()
        snapshot = await jobs.wait(job_id, 5, A)
        assert (snapshot.status, snapshot.where) == (JobStatus.COMPLETED, "node-1")
    assert executor.closed == 1


async def test_a_queued_job_killed_never_runs_and_counts_against_admission() -> None:
    executor = GatedExecutor()
    async with JobRegistry(JobsConfig(max_concurrent_jobs_per_owner=1), executor=executor) as jobs:
        job_id = jobs.start("subagent", "waits", A, finish)
        with pytest.raises(JobLimitError):  # a queued job counts against admission
            jobs.start("subagent", "second", A, finish)
        assert jobs.kill(job_id, A, "no longer needed") == "requested"
        assert jobs.get(job_id, A).status is JobStatus.STOPPING
        snapshot = await jobs.wait(job_id, 5, A)
        assert (snapshot.status, snapshot.detail) == (JobStatus.KILLED, "no longer needed")
        assert executor.ran == 0


async def test_an_executor_failure_shows_its_safe_message_as_the_detail() -> None:
    class Losing(LocalExecutor):
        async def execute(self, work: JobWork, started: JobStarted) -> JobOutcome:
            started("node-2")
            raise JobExecutorError("gated", "workerLost") from RuntimeError("raw /secret/path")

    async with JobRegistry(executor=Losing()) as jobs:
        snapshot = await jobs.wait(jobs.start("subagent", "lost", A, finish), 5, A)
    assert snapshot.status is JobStatus.FAILED
    assert snapshot.detail == (
        "job executor failure (executor: gated; stage: executor; category: workerLost)"
    )


# ---- portable work --------------------------------------------------------------------------


async def test_portable_work_runs_its_target_with_its_plain_arguments() -> None:
    work = PortableWork(TARGET, {"text": "hi"})
    assert await work() == JobOutcome(JobStatus.COMPLETED, output="hi")
    async with JobRegistry(executor=PortableOnly()) as jobs:
        snapshot = await jobs.wait(jobs.start("subagent", "portable", A, work), 5, A)
        assert snapshot.status is JobStatus.COMPLETED
        assert jobs.read(snapshot.id, A) == "hi"


@pytest.mark.parametrize(
    "arguments",
    [{"when": object()}, {"pair": (1, 2)}, {"nan": float("nan")}, {"key": {1: "x"}}],
)
def test_portable_work_accepts_only_json_values(arguments: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="plain JSON values"):
        PortableWork(TARGET, arguments)


@pytest.mark.parametrize("target", ["module", "module:", ":name", "module:not-a-name"])
def test_portable_work_names_a_module_and_a_function(target: str) -> None:
    with pytest.raises(ValueError, match=r"package\.module:function"):
        PortableWork(target, {})


async def test_an_executor_that_runs_elsewhere_refuses_a_closure_before_any_id() -> None:
    async with JobRegistry(executor=PortableOnly()) as jobs:
        with pytest.raises(JobArgumentError, match="portable-only executor runs only portable"):
            jobs.start("subagent", "closure", A, finish)
        store = jobs.store
        assert store.flush(5)
        assert store.count(RecordFilter()) == 0  # the refused start left no record, no id
        work = PortableWork(TARGET, {"text": "x"})
        job_id = jobs.start("subagent", "portable", A, work)
        assert re.fullmatch(r"subagent-[0-9a-f]{12}", job_id)
        assert (await jobs.wait(job_id, 5, A)).status is JobStatus.COMPLETED
        assert jobs.read(job_id, A) == "x"
        assert store.flush(5)
        assert store.count(RecordFilter()) == 1


# ---- the [jobs] keys ------------------------------------------------------------------------


def test_jobs_config_defaults_to_the_local_executor() -> None:
    config = JobsConfig()
    assert (config.executor, config.address, config.max_runs_per_node) == ("local", None, None)
    assert type(executor_for(config)) is LocalExecutor


@pytest.mark.parametrize("address", ["auto", "ray://head:10001", "10.0.0.5:6379", "head:6379"])
def test_jobs_config_accepts_the_ray_addresses(address: str) -> None:
    config = JobsConfig(executor="ray", address=address, max_runs_per_node=4)
    assert config.address == address


@pytest.mark.parametrize(
    ("table", "field", "text"),
    [
        ({"executor": "dask"}, "executor", "'local' or 'ray'"),
        ({"executor": "ray", "address": "http://x"}, "address", '"auto", "ray://'),
        ({"executor": "ray", "address": "head"}, "address", '"auto", "ray://'),
        ({"executor": "ray", "max_runs_per_node": 0}, "max_runs_per_node", "greater than"),
        ({"executor": "ray", "max_runs_per_node": 65}, "max_runs_per_node", "less than"),
        ({"executor": "ray", "max_runs_per_node": "2"}, "max_runs_per_node", "integer"),
        ({"address": "auto"}, None, 'address is a setting of executor = "ray"'),
        ({"max_runs_per_node": 2}, None, 'max_runs_per_node is a setting of executor = "ray"'),
    ],
)
def test_jobs_config_rejects_bad_executor_keys_naming_them(
    table: dict[str, Any], field: str | None, text: str
) -> None:
    with pytest.raises(pydantic.ValidationError) as caught:
        JobsConfig.model_validate(table)
    (error,) = caught.value.errors()
    assert error["loc"] == ((field,) if field else ())
    assert text in str(caught.value)


def test_asking_for_ray_without_it_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    monkeypatch.delitem(sys.modules, "dsh.jobs._ray_executor", raising=False)
    with pytest.raises(ImportError, match=r'pip install "dsh-jobs\[ray\]"'):
        executor_for(JobsConfig(executor="ray"))


@pytest.mark.parametrize("runs", range(1, MAX_RUNS_PER_NODE + 1))
def test_a_run_share_fits_exactly_max_runs_per_node_times_in_one_node(runs: int) -> None:
    scaled = run_share(runs) * 10_000  # Ray counts resources in whole units of 0.0001
    units = int(scaled)
    assert round(scaled) == units  # the same whether Ray truncates or rounds
    assert runs * units <= 10_000 < (runs + 1) * units


# ---- the worker pool ------------------------------------------------------------------------


async def test_a_released_worker_goes_to_a_waiting_job_first_then_idles_and_expires() -> None:
    stopped: list[str] = []
    pool: WorkerPool[str] = WorkerPool(stopped.append, idle_s=0.05)
    waiting = pool.wait()
    pool.release(Worker("actor-1", "node-1"))
    assert waiting.result() == Worker("actor-1", "node-1")
    assert pool.idle == 0
    pool.release(Worker("actor-2", "node-1"))
    assert (pool.idle, pool.take(), pool.take()) == (1, Worker("actor-2", "node-1"), None)
    pool.release(Worker("actor-3", "node-2"))
    await asyncio.sleep(0.2)
    assert (pool.idle, stopped) == (0, ["actor-3"])


async def test_a_closed_pool_stops_its_idle_workers_and_every_later_release() -> None:
    stopped: list[str] = []
    pool: WorkerPool[str] = WorkerPool(stopped.append, idle_s=60)
    pool.release(Worker("idle", "n"))
    waiting = pool.wait()
    pool.close()
    assert waiting.cancelled()
    pool.release(Worker("late", "n"))
    pool.discard("lost")
    assert stopped == ["idle", "late", "lost"]
