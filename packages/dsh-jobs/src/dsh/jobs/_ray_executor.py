"""The Ray executor: each job's whole run in an async actor on some node of a Ray cluster.

The only dsh module that imports Ray (an import contract in the root ``pyproject.toml``). The
harness keeps the job's record; an actor calls its ``worker_setup`` names when it starts (the
orphan reaper), then runs one :class:`PortableWork` (plain data) at a time. An actor whose job
ended cleanly serves the next job (``_worker_pool``); one whose job was killed or lost is stopped.

- **Capacity.** Every node that runs jobs declares one unit of the custom resource
  :data:`NODE_RESOURCE`; each job's actor asks for ``1 / max_runs_per_node`` of it (rounded down
  to Ray's 4 decimals), so at most ``max_runs_per_node`` jobs run on a node at once. An actor that
  waits for a share is a ``queued`` job. The actor asks for no CPU: the share is the limit.
- **Cancel.** A cancelled :meth:`RayExecutor.execute` calls ``ray.cancel`` on the run; the actor's
  coroutine gets ``CancelledError`` and runs the work's own cancel path (the run's whole-tree
  close) on its node; ``execute`` waits for that to end before it re-raises.
- **Loss.** A worker or node that dies raises :class:`JobExecutorError` (category
  ``workerLost``); Ray's text stays on ``__cause__``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from typing import Any, ClassVar

from dsh.jobs._executor import Executor, JobStarted, JobWork, PortableWork, resolve
from dsh.jobs._ray_placement import NODE_RESOURCE, run_share
from dsh.jobs._types import JobOutcome
from dsh.jobs._worker_pool import Worker, WorkerPool
from dsh.jobs.errors import JobExecutorError

# Ray replicates a driver started by ``uv run`` onto its workers: it packages the driver's working
# directory, uploads it and runs every worker through uv. dsh workers use each node's own
# installed dsh instead (see the deployment guide), so that stays off unless the operator set it.
# Ray reads the switch once, when it is first imported.
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

try:
    import ray
    from ray import exceptions as ray_errors
except ImportError as exc:  # pragma: no cover - the [ray] extra is missing
    raise ImportError(
        'the Ray executor needs Ray; install it with pip install "dsh-jobs[ray]"', name="ray"
    ) from exc

__all__ = ["IDLE_S", "RayExecutor"]

logger = logging.getLogger("dsh.jobs")

#: How long an actor whose job ended waits for the next job before it stops (and frees its
#: node's share): a job started meanwhile skips the actor's start (a process and its imports).
IDLE_S = 30.0

#: A Ray Client (``ray://``) connection whose server-side start failed is tried this many times
#: in all. Ray's client proxy starts one server process per client by forking from a threaded
#: process and running Python in the child before ``exec``; on a loaded machine that child now
#: and then dies at once or hangs, and the client gets ``ConnectionAbortedError`` (at once, or
#: after Ray's own 30 s wait). Each try takes a fresh client id, so a fresh server.
CLIENT_INIT_ATTEMPTS = 4
CLIENT_INIT_PAUSE_S = 0.5


class _JobActor:
    """Runs one job on a worker: setup at start, then one :class:`PortableWork`."""

    def __init__(self, worker_setup: tuple[str, ...]) -> None:
        for name in worker_setup:
            try:
                resolve(name)()
            except Exception:
                logger.warning("a worker setup step of the Ray executor failed")
                logger.debug("worker setup %s failed", name, exc_info=True)

    async def ready(self) -> str:
        """The node this actor runs on (its hex id), once the actor has capacity and started."""
        return str(ray.get_runtime_context().get_node_id())

    async def run(self, target: str, arguments: dict[str, Any]) -> JobOutcome:
        return await PortableWork(target, arguments)()


_RemoteJobActor: Any = ray.remote(_JobActor)


def _kill(actor: Any) -> None:
    try:
        ray.kill(actor, no_restart=True)
    except Exception:
        logger.debug("the Ray executor could not kill a job's actor", exc_info=True)


def _lost(exc: BaseException) -> JobExecutorError:
    logger.debug("the Ray executor lost a job's worker", exc_info=exc)
    # Ray's memory monitor kills workers when a node runs short of memory: say so, as a category.
    oom = isinstance(exc, ray_errors.OutOfMemoryError)
    error = JobExecutorError("ray", "workerOutOfMemory" if oom else "workerLost")
    error.__cause__ = exc
    return error


def _cancelled(exc: BaseException) -> bool:
    if isinstance(exc, ray_errors.TaskCancelledError):
        return True
    return isinstance(exc, ray_errors.RayTaskError) and isinstance(
        exc.cause, ray_errors.TaskCancelledError
    )


class RayExecutor(Executor):
    """Runs each job in a fresh async actor on a Ray cluster (``[jobs] executor = "ray"``).

    Building it connects to nothing; the first :meth:`execute` calls ``ray.init(address)`` (in a
    thread) unless Ray is already initialised in this process, with the workers' output kept out
    of this process's stdout (``log_to_driver=False``: ``dsh mcp`` speaks on stdout).
    """

    name: ClassVar[str] = "ray"
    portable: ClassVar[bool] = True
    queues: ClassVar[bool] = True

    def __init__(
        self, *, address: str, max_runs_per_node: int, worker_setup: tuple[str, ...] = ()
    ) -> None:
        self.address = address
        self.max_runs_per_node = max_runs_per_node
        self.share = run_share(max_runs_per_node)
        self.worker_setup = worker_setup
        self._connect_lock = threading.Lock()
        self._connected_here = False
        self._pool: WorkerPool[Any] = WorkerPool(_kill, idle_s=IDLE_S)

    # -- connecting -------------------------------------------------------------------------

    def _connect(self) -> None:
        with self._connect_lock:
            if not ray.is_initialized():
                self._init_ray()
                self._connected_here = True
            resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
            if resources.get(NODE_RESOURCE, 0.0) < self.share:
                raise LookupError(f"no node declares the {NODE_RESOURCE} resource")

    def _init_ray(self) -> None:
        """``ray.init``; a Ray Client server that failed to start the client's own server is
        asked again, a bounded number of times (a new client gets a new server)."""
        for attempt in range(1, CLIENT_INIT_ATTEMPTS + 1):
            try:
                ray.init(
                    address=self.address,
                    log_to_driver=False,
                    logging_level=logging.WARNING,
                    namespace="dsh",
                )
                return
            except ConnectionAbortedError:
                if attempt == CLIENT_INIT_ATTEMPTS:
                    raise
                logger.debug("the Ray Client server failed to start a server for dsh; retrying")
                time.sleep(CLIENT_INIT_PAUSE_S)

    async def _ensure_connected(self) -> None:
        try:
            await asyncio.to_thread(self._connect)
        except LookupError as exc:
            logger.debug("the Ray cluster has no node for dsh jobs", exc_info=exc)
            raise JobExecutorError("ray", "noNodeForJobs") from exc
        except Exception as exc:
            logger.debug("cannot connect to the Ray cluster", exc_info=exc)
            raise JobExecutorError("ray", "clusterUnavailable") from exc

    # -- running ----------------------------------------------------------------------------

    def _new_actor(self) -> Any:
        return _RemoteJobActor.options(
            resources={NODE_RESOURCE: self.share},
            num_cpus=0,
            scheduling_strategy="SPREAD",
            max_restarts=0,
            max_task_retries=0,
        ).remote(self.worker_setup)

    def _submit(self, actor: Any, work: PortableWork) -> Any:
        """The actor call that carries the work (its target and plain arguments, nothing else)."""
        return actor.run.remote(work.target, dict(work.arguments))

    async def execute(self, work: JobWork, started: JobStarted) -> JobOutcome:
        if not isinstance(work, PortableWork):
            raise TypeError("the Ray executor runs only a PortableWork")
        await self._ensure_connected()
        worker = self._pool.take() or await self._start_worker()  # queued while this waits
        started(worker.where)
        try:
            outcome = await self._run(worker.handle, work)
        except BaseException:
            self._pool.discard(worker.handle)
            raise
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            self._pool.discard(worker.handle)  # a killed job's actor runs no other job
        else:
            self._pool.release(worker)
        return outcome

    async def _start_worker(self) -> Worker[Any]:
        """A new actor once Ray has placed it, or a worker another job released first."""
        actor = self._new_actor()
        ready = asyncio.ensure_future(self._ready(actor))
        handoff = self._pool.wait()
        try:
            await asyncio.wait({ready, handoff}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # killed while queued: nothing ran
            self._settle_race(actor, ready, handoff)
            raise
        if handoff.done() and not handoff.cancelled():
            self._settle_race(actor, ready, None)
            return handoff.result()
        handoff.cancel()
        return ready.result()

    def _settle_race(
        self,
        actor: Any,
        ready: asyncio.Future[Worker[Any]],
        handoff: asyncio.Future[Worker[Any]] | None,
    ) -> None:
        """Give back what a start that no longer needs them holds: the new actor (idle if it
        already started, else stopped) and a handed-over worker."""
        if handoff is not None:
            if handoff.done() and not handoff.cancelled():
                self._pool.release(handoff.result())
            handoff.cancel()
        if ready.done() and not ready.cancelled() and ready.exception() is None:
            self._pool.release(ready.result())
        else:
            ready.cancel()
            self._pool.discard(actor)

    @staticmethod
    async def _ready(actor: Any) -> Worker[Any]:
        try:
            where = await actor.ready.remote()
        except ray_errors.RayError as exc:
            raise _lost(exc) from None
        return Worker(actor, str(where))

    async def _run(self, actor: Any, work: PortableWork) -> JobOutcome:
        ref = self._submit(actor, work)
        result = asyncio.wrap_future(ref.future())
        try:
            finished = await self._outcome(asyncio.shield(result))
        except asyncio.CancelledError:
            if result.done():
                raise
            # job_kill or an owner close: the worker runs the work's own cancel path (the run's
            # whole-tree close) and this waits for it, however often it is cancelled meanwhile.
            ray.cancel(ref)
            outcome: JobOutcome | None = await _uninterrupted(self._outcome(result))
            if outcome is None:
                raise
            return outcome
        if finished is None:  # cancelled on the worker by someone else: a kill all the same
            raise asyncio.CancelledError
        return finished

    @staticmethod
    async def _outcome(result: asyncio.Future[Any]) -> JobOutcome | None:
        """The work's outcome; ``None`` when it was cancelled; the work's own error re-raised."""
        try:
            outcome = await result
        except ray_errors.RayTaskError as exc:
            if _cancelled(exc):
                return None
            cause = exc.cause
            if isinstance(cause, Exception) and not isinstance(cause, ray_errors.RayError):
                raise cause from exc
            raise _lost(exc) from None
        except ray_errors.TaskCancelledError:
            return None
        except ray_errors.RayError as exc:
            raise _lost(exc) from None
        if not isinstance(outcome, JobOutcome):
            raise TypeError("a portable work's target must return a JobOutcome")
        return outcome

    async def aclose(self) -> None:
        """Stop the idle actors; disconnect if this executor connected (not if Ray was up)."""
        self._pool.close()
        if self._connected_here:
            self._connected_here = False
            await asyncio.to_thread(ray.shutdown)


async def _uninterrupted(awaitable: Any) -> Any:
    """Await ``awaitable`` to its end even when this task is cancelled meanwhile, then re-raise."""
    task: asyncio.Task[Any] = asyncio.ensure_future(awaitable)
    cancelled: asyncio.CancelledError | None = None
    while True:
        try:
            result = await asyncio.shield(task)
        except asyncio.CancelledError as error:
            if task.done():
                raise
            cancelled = cancelled or error
            continue
        if cancelled is not None:
            raise cancelled
        return result
