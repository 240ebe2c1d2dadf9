"""SubprocessRuntime, the process-wide default runtime, and the host-exit hook."""

from __future__ import annotations

import asyncio
import atexit
import os
import threading
import time
from types import TracebackType

from dsh.subprocess._launch import launch
from dsh.subprocess._owned_dir import remove_owned_dir
from dsh.subprocess._process import _KILL_CONFIRM_S, ManagedProcess, finish_despite_cancel
from dsh.subprocess._procfs import scan
from dsh.subprocess._record import record
from dsh.subprocess._spec import SpawnSpec
from dsh.subprocess._workers import offload
from dsh.subprocess.errors import SpawnError, TeardownError

__all__ = ["SubprocessRuntime", "default_runtime"]

# Every live tree of this process, across all runtimes, for the atexit hook.
_registry_lock = threading.Lock()
_registry: dict[int, ManagedProcess] = {}
_hook_pid: int | None = None


def _register(proc: ManagedProcess) -> None:
    global _hook_pid
    with _registry_lock:
        _registry[id(proc)] = proc
        if _hook_pid is None:
            atexit.register(_kill_live_trees_at_exit)
            _hook_pid = os.getpid()


def _unregister(proc: ManagedProcess) -> None:
    global _hook_pid
    with _registry_lock:
        _registry.pop(id(proc), None)
        if not _registry and _hook_pid is not None:
            atexit.unregister(_kill_live_trees_at_exit)
            _hook_pid = None
            record.remove()  # no live tree is left for a crash to orphan


def _kill_all_sync(procs: list[ManagedProcess]) -> None:
    """SIGKILL every given tree synchronously, re-scanning briefly for members forked meanwhile."""
    for _ in range(5):
        snap = scan(0.0, full=True)
        fresh = False
        for proc in procs:
            fresh = proc.kill_now(snap) or fresh
        if not fresh:
            return
        time.sleep(0.01)


def _kill_live_trees_at_exit() -> None:
    """atexit: SIGKILL every live tree. No tasks, no output, never changes the exit code."""
    try:
        if _hook_pid != os.getpid():
            return  # a forked child inherited the hook; the trees are not its own
        with _registry_lock:
            procs = list(_registry.values())
        _kill_all_sync(procs)
        record.remove()
    except BaseException:  # an exit hook must never print or alter the exit status
        pass


def _reset_after_fork() -> None:
    global _registry_lock, _registry, _hook_pid, _default
    _registry_lock = threading.Lock()
    _registry = {}
    if _hook_pid is not None:
        atexit.unregister(_kill_live_trees_at_exit)
    _hook_pid = None
    _default = None


class SubprocessRuntime:
    """Spawns processes and tracks every live tree until the whole tree has exited."""

    def __init__(self) -> None:
        self._live: dict[ManagedProcess, None] = {}
        self._spawning: set[asyncio.Future[None]] = set()
        self._closed = False

    @property
    def live(self) -> tuple[ManagedProcess, ...]:
        """Processes whose whole tree has not yet been observed gone, in spawn order."""
        return tuple(self._live)

    @property
    def closed(self) -> bool:
        return self._closed

    async def spawn(self, spec: SpawnSpec) -> ManagedProcess:
        """Start ``spec`` (never through a shell) in a new session, carrying a fresh tree marker."""
        if not isinstance(spec, SpawnSpec):
            raise TypeError("spawn() takes a SpawnSpec")
        if self._closed:
            if spec.owned_dir is not None:
                await finish_despite_cancel(offload(remove_owned_dir, spec.owned_dir))
            raise SpawnError("spawn failed: runtime is closed")
        # The fork runs in a worker thread, so aclose() can begin meanwhile: it waits for this
        # spawn, and a spawn that finds the runtime closed takes its own tree down first.
        spawning = asyncio.get_running_loop().create_future()
        self._spawning.add(spawning)
        try:
            proc = await launch(spec, on_spawned=self._track, on_gone=self._untrack)
            if self._closed:
                await proc.aclose()
                raise SpawnError("spawn failed: runtime is closed")
            return proc
        finally:
            self._spawning.discard(spawning)
            spawning.set_result(None)

    def _track(self, proc: ManagedProcess) -> None:
        self._live[proc] = None
        _register(proc)

    def _untrack(self, proc: ManagedProcess) -> None:
        self._live.pop(proc, None)
        _unregister(proc)

    async def aclose(self) -> None:
        """Terminate every live tree and wait for each to exit.

        On failure every remaining tree is SIGKILLed synchronously first; failures raise one
        ``TeardownError`` (an ``ExceptionGroup`` of them when there are several). If cancelled, it
        SIGKILLs every live tree and still waits (bounded, absorbing further cancellations) until
        each is proven gone, then re-raises the cancellation.
        """
        self._closed = True
        errors: list[Exception] = []

        async def close_one(proc: ManagedProcess) -> None:
            try:
                await proc.aclose()
            except Exception as exc:
                errors.append(exc)

        try:
            if self._spawning:
                await asyncio.wait(list(self._spawning))
            procs = list(self._live)
            if not procs:
                return
            async with asyncio.TaskGroup() as group:
                for proc in procs:
                    group.create_task(close_one(proc))
        except asyncio.CancelledError:
            live = list(self._live)
            _kill_all_sync(live)
            await finish_despite_cancel(_all_gone(live))
            raise
        except BaseException:
            _kill_all_sync(list(self._live))
            raise
        if not errors:
            return
        _kill_all_sync(list(self._live))
        wrapped = [_as_teardown(exc) for exc in errors]
        if len(wrapped) == 1:
            raise wrapped[0]
        raise ExceptionGroup("process teardown failed", wrapped)

    async def __aenter__(self) -> SubprocessRuntime:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


async def _all_gone(procs: list[ManagedProcess]) -> None:
    """Wait (bounded per tree) until every given tree is proven gone."""
    if procs:
        await asyncio.gather(*(proc.wait_for_exit(_KILL_CONFIRM_S) for proc in procs))


def _as_teardown(exc: Exception) -> TeardownError:
    if isinstance(exc, TeardownError):
        return exc
    error = TeardownError("process teardown failed")
    error.__cause__ = exc
    return error


_default_lock = threading.Lock()
_default: SubprocessRuntime | None = None


def default_runtime() -> SubprocessRuntime:
    """The process-wide runtime (a fresh one replaces it once it has been closed)."""
    global _default
    with _default_lock:
        if _default is None or _default.closed:
            _default = SubprocessRuntime()
        return _default


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)
