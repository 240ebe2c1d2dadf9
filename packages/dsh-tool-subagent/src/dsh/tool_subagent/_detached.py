"""Detached jobs: each background delegation runs in a dsh process of its own.

:class:`DetachedExecutor` is the executor behind ``dsh run --detach`` and a ``dsh mcp`` profile
with ``[jobs] keep_on_close = true``. For each job it starts ``python -m
dsh.tool_subagent._detached`` (:func:`main`) with the store's path and the job's id; that worker
claims the job's record, runs the job's portable work under the usual containment (its own
supervisor, cgroup and limits), records the outcome, and exits. The starting process may wait
for it (the job settles here too), stop it (SIGTERM: the worker's teardown runs, whole-tree
exit first), or let it go (:meth:`dsh.jobs.JobRegistry.detach_owner`), and then exit itself.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Sequence
from typing import ClassVar

from dsh.jobs import (
    HOLDER_GONE_DETAIL,
    Executor,
    Holder,
    JobOutcome,
    JobRecord,
    JobRegistry,
    JobsConfig,
    JobStarted,
    JobStatus,
    JobStore,
    JobWork,
    LocalExecutor,
    PortableWork,
    SqliteJobStore,
    current_job_id,
    detach_requested,
    this_process,
)
from dsh.subprocess import spawn_detached

__all__ = ["CLAIM_WAIT_S", "DetachedExecutor", "main"]

#: How long a worker waits for its job's record to be written before it gives up.
CLAIM_WAIT_S = 10.0
_CLAIM_POLL_S = 0.02
WORKER_MODULE = "dsh.tool_subagent._detached"


class DetachedExecutor(Executor):
    """Runs each job in a detached dsh worker process that records its own outcome."""

    name: ClassVar[str] = "detached"
    portable: ClassVar[bool] = True
    detaches: ClassVar[bool] = True
    runs_from_store: ClassVar[bool] = True

    def __init__(self, config: JobsConfig) -> None:
        self._config = config
        self._store: JobStore | None = None

    def attach(self, store: JobStore) -> None:
        if store.path is None:
            raise ValueError("detached jobs need a file job store, not the memory store")
        self._store = store

    def _argv(self, store: JobStore, job_id: str) -> list[str]:
        assert store.path is not None
        return [
            sys.executable,
            "-m",
            WORKER_MODULE,
            "--store",
            store.path,
            "--job",
            job_id,
            "--retention-days",
            repr(self._config.retention_days),
            "--retention-count",
            str(self._config.retention_count),
        ]

    async def execute(self, work: JobWork, started: JobStarted) -> JobOutcome:
        store, job_id = self._store, current_job_id()
        if store is None or job_id is None:
            raise RuntimeError("the detached executor runs only a registry's jobs")
        # The worker is a dsh host like this one, with this process's environment: it scrubs
        # each product's env as every host does (and needs the product keys to forward).
        worker = spawn_detached(self._argv(store, job_id), env=os.environ)
        # The worker holds the job from now on, so a reader never takes this process's exit
        # (``dsh run --detach`` exits at once) for the job's end.
        store.update(job_id, {"holder": Holder(worker.pid, worker.start)})
        started(None)
        try:
            await worker.wait()
        except asyncio.CancelledError:
            if detach_requested():
                worker.release()
                raise
            worker.signal(signal.SIGTERM)
            # The worker's own teardown is bounded (whole-tree exit, then its record); a further
            # cancellation does not cut this wait short.
            waiting = asyncio.ensure_future(worker.wait())
            while not waiting.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(waiting)
            raise
        return _outcome(store, job_id)


def _outcome(store: JobStore, job_id: str) -> JobOutcome:
    record = store.get(job_id)
    if record is None or not record.terminal:
        # The worker ended before it recorded an outcome (it was killed, or never claimed it).
        return JobOutcome(JobStatus.FAILED, detail=HOLDER_GONE_DETAIL)
    return JobOutcome(record.status, detail=record.detail, output=record.output, meta=record.meta)


# -- the worker ------------------------------------------------------------------------------


def _claim(store: SqliteJobStore, job_id: str) -> JobRecord | None:
    deadline = time.monotonic() + CLAIM_WAIT_S
    while True:
        record = store.get(job_id)
        if record is not None:
            if record.terminal or record.work is None:
                return None
            return store.claim(job_id, this_process())
        if time.monotonic() >= deadline:
            return None
        time.sleep(_CLAIM_POLL_S)


async def _work(store_path: str, job_id: str, days: float, count: int) -> int:
    store = SqliteJobStore(store_path, retention_days=days, retention_count=count)
    record = await asyncio.to_thread(_claim, store, job_id)
    if record is None or record.work is None:
        store.close()
        return 1
    config = JobsConfig(store=store_path, retention_days=days, retention_count=count)
    registry = JobRegistry(config, executor=LocalExecutor(), store=store)
    async with registry:
        registry.adopt(record, PortableWork.from_json(record.work))
        await registry.join(job_id)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"python -m {WORKER_MODULE}")
    parser.add_argument("--store", required=True)
    parser.add_argument("--job", required=True)
    parser.add_argument("--retention-days", type=float, default=7.0)
    parser.add_argument("--retention-count", type=int, default=1000)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one detached job to its end. SIGTERM, SIGINT and SIGHUP stop it (killed)."""
    args = _parser().parse_args(argv)

    async def body() -> int:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(signum, task.cancel)
        try:
            return await _work(args.store, args.job, args.retention_days, args.retention_count)
        except asyncio.CancelledError:
            return 128 + signal.SIGTERM  # the registry closed: the job is recorded killed

    return asyncio.run(body())


if __name__ == "__main__":
    raise SystemExit(main())
