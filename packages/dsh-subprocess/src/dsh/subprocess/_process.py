"""ManagedProcess: one spawned child, its pipes, and its whole tree, from its start to its close.

The spawn itself is ``_spawn``'s, and ``_launch`` makes a ManagedProcess of the child.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Literal, TypeVar

from dsh.subprocess import _procfs
from dsh.subprocess._contention import contention
from dsh.subprocess._owned_dir import remove_owned_dir
from dsh.subprocess._pipes import Pipes
from dsh.subprocess._priority import lower_running
from dsh.subprocess._procfs import Snapshot, read_info, scan
from dsh.subprocess._spawn import Child
from dsh.subprocess._spawner import SupervisedChild
from dsh.subprocess._spec import CollectedText, ProcessOutcome, SpawnSpec
from dsh.subprocess._tree import Tree
from dsh.subprocess._workers import offload
from dsh.subprocess.errors import TeardownError

__all__ = ["ManagedProcess", "abort_start", "finish_despite_cancel", "start_process"]

_log = logging.getLogger("dsh.subprocess")

_IDLE_S = 0.1
"""Sampling interval while nobody waits: descendants are observed at least this often."""
_SUPERVISED_IDLE_S = 1.0
"""The same while a live supervisor holds the tree. Its subreaper keeps every descendant and kills
them all when the host goes, so scans are only the backstop (marked processes outside it, the
member record). At 0.1 s they were more than half of the parent's CPU in a Claude Code run, and
each scan reads every process on the machine (docs/performance.md)."""
_FAST_S = 0.015
"""Polling interval while someone waits or the ladder runs."""
_SUPERVISED_FAST_S = 0.1
"""The same while a live supervisor holds the tree: its ``E`` report, which wakes the sampler at
once, is what ends the wait; scans until then only look for marked processes outside it."""
_KILL_CONFIRM_S = 5.0
"""How long after SIGKILL aclose() waits for the tree before giving up with TeardownError."""

_T = TypeVar("_T")


class ManagedProcess:
    """A spawned child and its whole tree, from ``SubprocessRuntime.spawn``; close with aclose()."""

    def __init__(
        self,
        *,
        popen: Child,
        spec: SpawnSpec,
        tree: Tree,
        loop: asyncio.AbstractEventLoop,
        on_gone: Callable[[ManagedProcess], None],
    ) -> None:
        self.pid: int = popen.pid
        self.tree_id: str = tree.marker
        self.spec = spec
        self.stdin: asyncio.StreamWriter | None = None
        self.stdout: asyncio.StreamReader | None = None
        self.stderr: asyncio.StreamReader | None = None
        self._popen = popen
        self._supervised = popen if isinstance(popen, SupervisedChild) else None
        self._group = self._supervised.group if self._supervised is not None else None
        self.kernel_contained = self._group is not None
        """True when the tree ran in its own cgroup (the kernel layer)."""
        self.limits_hit: tuple[str, ...] = ()
        """The limits (``memory``, ``tasks``) the tree ran into; the run was ended for it."""
        self._tree = tree
        self._loop = loop
        self._on_gone = on_gone
        self._grace_s = spec.grace_ms / 1000.0
        self._outcome: ProcessOutcome | None = None
        self._exit_time: float | None = None
        self._exited = asyncio.Event()
        self._gone_event = asyncio.Event()
        self._wake = asyncio.Event()
        self._waiters = 0
        self._term_at: float | None = None
        self._kill_at: float | None = None
        self._pidfd: int | None = None
        self._pipes = Pipes()
        self._sampler: asyncio.Task[None] | None = None
        self._gone_notified = False
        self._reported_empty = False
        """The supervisor, alive throughout, reported the tree empty (see Tree.settle_by_report)."""
        self._groups_removed = False
        """The supervisor removed the run's cgroup directories before that report (so empty)."""
        self._owned_dir_removed = False
        self._closed = False
        self._auto_nice = spec.nice == "auto"

    def __repr__(self) -> str:
        return f"<ManagedProcess pid={self.pid} tree_id={self.tree_id}>"

    # ---- public surface -------------------------------------------------------------------

    @property
    def outcome(self) -> ProcessOutcome | None:
        """The direct child's ``ProcessOutcome`` once known, else None."""
        return self._outcome

    @property
    def tree_gone(self) -> bool:
        """True once the whole tree has been observed gone."""
        return self._tree.gone

    def set_busy(self, busy: bool) -> None:
        """Whether this tree counts as a run in flight for ``nice = "auto"`` (see SpawnSpec).

        An auto tree is busy from its spawn; an owner that keeps it idle on purpose (a warm
        process waiting for a delegation) says so, and says again when it is put to work. A
        no-op for any other ``nice`` and once the tree is gone.
        """
        if not self._auto_nice or self._gone_notified:
            return  # once gone it was forgotten; counting it again would never end
        if busy:
            contention.busy(self)
        else:
            contention.idle(self)

    def lower_priority(self, nice: int) -> None:
        """Lower every live member of the tree (each thread, and its autogroup) to ``nice`` now.

        Never raises a priority. Blocking (one process-table scan): call it off the event loop.
        """
        if not self._tree.gone:
            lower_running(self._tree.live_pids(scan(0.0, refresh=self._tree.watched_pids())), nice)

    def collected(self, name: Literal["stdout", "stderr"]) -> CollectedText:
        """The bounded tail (so far) of a ``Collect`` stream."""
        return self._pipes.collected(name)

    async def wait(self) -> ProcessOutcome:
        """Wait for the direct child to exit; Collect draining after exit is bounded by grace_ms."""
        if not self._exited.is_set():
            polled = self._pidfd is None and self._supervised is None
            if polled:
                self._waiters += 1
                self._wake_sampler()
            try:
                await self._exited.wait()
            finally:
                if polled:
                    self._waiters -= 1
        pending = [task for task in self._pipes.collectors if not task.done()]
        if pending and self._exit_time is not None:
            remaining = self._exit_time + self._grace_s - time.monotonic()
            if remaining > 0:
                await asyncio.wait(pending, timeout=remaining)
        assert self._outcome is not None
        return self._outcome

    def terminate(self) -> None:
        """Start the ladder (idempotent): SIGTERM to the tree now, SIGKILL after grace_ms."""
        if self._term_at is not None:
            return
        now = time.monotonic()
        self._term_at = now
        self._kill_at = now + self._grace_s
        if self._tree.gone:
            return
        self._tree.term_known()
        self._delegate_term()
        self._wake_sampler()

    async def wait_for_exit(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        """True once the whole tree is gone; False if it is not gone within ``timeout`` seconds."""
        if self._tree.gone:
            self._notify_gone()
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        self._waiters += 1
        self._wake_sampler()
        try:
            while not self._tree.gone:
                if self._sampler is None or self._sampler.done():
                    if await offload(self._sample_once):
                        break
                    step = _FAST_S
                else:
                    step = 0.25
                if deadline is not None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    step = min(step, remaining)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(step):
                        await self._gone_event.wait()
        finally:
            self._waiters -= 1
        self._notify_gone()
        return True

    async def aclose(self) -> None:
        """Close stdin, terminate(), wait for the whole tree, reap the child. Idempotent.

        If this fails, a synchronous SIGKILL of the whole tree runs before the exception
        propagates. If it is cancelled, it SIGKILLs the tree and still waits (bounded, absorbing
        further cancellations) until the tree is proven gone, then re-raises the cancellation.
        Either way ``spec.owned_dir`` is gone when it returns (its supervisor removed it, else a
        worker thread does now).
        """
        if self._closed:
            return
        try:
            await self._close_tree()
        finally:
            removal = self._owned_dir_removal()
            if removal is not None:
                await finish_despite_cancel(removal)

    def _owned_dir_removal(self) -> asyncio.Future[None] | None:
        """The removal of ``spec.owned_dir`` still owed (None once done or done by the supervisor,
        whose ``E`` report follows its own removal)."""
        path = self.spec.owned_dir
        if path is None or self._owned_dir_removed:
            return None
        self._owned_dir_removed = True
        if self._reported_empty:
            return None
        return offload(remove_owned_dir, path)

    async def _close_tree(self) -> None:
        clean = False
        try:
            self._pipes.close_stdin()
            self.terminate()
            if not await self.wait_for_exit(self._grace_s + _KILL_CONFIRM_S):
                raise TeardownError("process tree still alive after SIGKILL")
            self._poll_exit()
            if not self._exited.is_set():
                try:
                    async with asyncio.timeout(_KILL_CONFIRM_S):
                        await self._exited.wait()
                except TimeoutError as exc:
                    raise TeardownError("direct child could not be reaped") from exc
            await self._finish_tasks()
            clean = True
        except asyncio.CancelledError:
            self.kill_now()
            if await finish_despite_cancel(self.wait_for_exit(_KILL_CONFIRM_S)):
                for task in self._tasks():
                    task.cancel()
                self._pipes.close_transports()
                self._closed = True
            raise
        finally:
            if not clean:
                self.kill_now()
        self._pipes.close_transports()
        self._closed = True

    async def __aenter__(self) -> ManagedProcess:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def kill_now(self, snap: Snapshot | None = None) -> bool:
        """Last resort, no awaits: SIGKILL the whole tree now. True when a new member was hit.

        For synchronous paths only (the host-exit hook); ``aclose()`` is the normal close. ``snap``
        lets a caller killing several trees share one process-table scan.
        """
        if self._tree.gone:
            return False
        now = time.monotonic()
        if self._term_at is None:
            self._term_at = now
        self._kill_at = now
        if self._group is not None:
            self._group.kill()
        if self._supervised is not None:
            self._supervised.send(b"K")
        try:
            return self._tree.kill_new(
                snap if snap is not None else scan(0.0, refresh=self._tree.watched_pids())
            )
        finally:
            with contextlib.suppress(Exception):
                self._wake_sampler()

    # ---- internals ------------------------------------------------------------------------

    def _wake_sampler(self) -> None:
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._wake.set()
        elif not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake.set)

    def _sample_once(self) -> bool:
        """One observation (runs off the loop thread). True once the whole tree is gone."""
        if self._reported_empty and self._tree.settle_by_report(self._groups_removed):
            return True  # _release_group still records the limits it hit
        now = time.monotonic()
        urgent = self._term_at is not None or self._waiters > 0
        max_age = 0.0 if urgent else max(0.0, min(self._idle_s() / 2, now - self._tree.created))
        snap = scan(max_age, refresh=self._tree.watched_pids())
        self._check_limits()
        if self._kill_at is not None and now >= self._kill_at:
            if self._group is not None:
                self._group.kill()
            if self._supervised is not None:
                self._supervised.send(b"K")
            return self._tree.kill(snap)
        if self._term_at is not None:
            gone = self._tree.term(snap)
            self._delegate_term()
            return gone
        return self._tree.observe(snap)

    def _check_limits(self) -> None:
        """A tree that ran into a limit is ended: the run reports it, rather than limping on."""
        group = self._group
        if group is None or self.limits_hit or self.spec.limits is None:
            return
        hit = group.hit()
        if hit:
            _log.debug("process tree hit its limits: %s", ", ".join(hit))
            self.limits_hit = hit
            group.kill()

    def _release_group(self) -> None:
        """The tree is gone: keep what limits it hit, and remove its cgroup directories."""
        group, self._group = self._group, None
        if group is None or self._groups_removed:
            return  # the supervisor removed it; it asks to only when there are no limits
        if not self.limits_hit and self.spec.limits is not None:
            self.limits_hit = group.hit()
        if not group.remove():
            group.kill()  # populated again? never leave a member; sweep removes the rest

    def _idle_s(self) -> float:
        return _SUPERVISED_IDLE_S if self._supervision_live() else _IDLE_S

    def _supervision_live(self) -> bool:
        return self._supervised is not None and not self._supervised.finished

    def _scan_interval(self) -> float:
        if self._term_at is not None or self._waiters > 0:
            return _SUPERVISED_FAST_S if self._supervision_live() else _FAST_S
        return self._idle_s()

    def _delegate_term(self) -> None:
        """Ask the supervisor for the SIGTERMs the tree left to it (it signals each pid once)."""
        if self._supervised is not None and self._tree.term_pending:
            self._tree.term_pending = False
            self._supervised.send(b"T")

    async def _sample_loop(self) -> None:
        # A supervised tree cannot be gone before its supervisor's E report, so a wake before the
        # next scan is due (terminate(), a new waiter) scans only once supervision has ended or
        # the SIGKILL is due. Unsupervised trees scan on every wake.
        next_scan = time.monotonic() + (_SUPERVISED_IDLE_S if self._supervision_live() else 0.0)
        while True:
            self._wake.clear()
            now = time.monotonic()
            kill_due = self._kill_at is not None and now >= self._kill_at
            gone = False
            if self._reported_empty and self._tree.settle_by_report(self._groups_removed):
                gone = True  # proven by the report: no scan, so no hop to a worker thread
            elif now >= next_scan or kill_due or not self._supervision_live():
                next_scan = now + self._scan_interval()
                try:
                    gone = await offload(self._sample_once)
                except Exception:
                    _log.debug("process tree sample failed", exc_info=True)
            if self._pidfd is None and self._supervised is None:
                self._poll_exit()
            elif self._supervised is not None and self._supervised.lost:
                self._end_supervision()
            if gone:
                self._notify_gone()
                return
            delay = min(self._scan_interval(), max(0.0, next_scan - time.monotonic()))
            if not self._supervision_live():
                delay = self._scan_interval()
            if self._kill_at is not None:
                delay = min(delay, max(0.0, self._kill_at - time.monotonic()))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wake.wait()

    def _notify_gone(self) -> None:
        if self._gone_notified:
            return
        self._gone_notified = True
        if self._auto_nice:
            contention.forget(self)
        self._release_group()
        self._gone_event.set()
        self._poll_exit()
        self._on_gone(self)

    def _watch_exit(self) -> None:
        if self._supervised is not None:
            self._loop.add_reader(self._supervised.fileno(), self._on_report)
            self._on_report()
            return
        if not _procfs.HAS_PIDFD:
            return
        try:
            fd = os.pidfd_open(self.pid)
        except OSError:
            return
        try:
            self._loop.add_reader(fd, self._poll_exit)
        except Exception:
            os.close(fd)
            return
        self._pidfd = fd

    def _on_report(self) -> None:
        """The supervisor wrote: the program's exit, or the end of the whole tree."""
        child = self._supervised
        assert child is not None
        child.read_reports()
        self._poll_exit()
        if child.finished:
            self._end_supervision()

    def _end_supervision(self) -> None:
        """Stop listening to the supervisor and let scans alone decide (idempotent)."""
        child = self._supervised
        if child is None:
            return
        with contextlib.suppress(Exception):
            self._loop.remove_reader(child.fileno())
        child.close()
        self._reported_empty = child.empty and not child.lost
        self._groups_removed = self._reported_empty and child.groups_removed
        if child.lost and self._group is not None:
            # A tool killed the supervisor: whatever it started is still in the run's group.
            # The run cannot be supervised any more, so end it the way the spawner would.
            self._group.kill()
        self._tree.release_anchor()
        if child.returncode is None and self._outcome is None:
            # The supervisor was killed before it could report: the status is unknowable.
            info = read_info(self.pid)
            if info is None or info.zombie:
                self._outcome = ProcessOutcome(exit_code=None, signal=None)
                self._exit_time = time.monotonic()
                self._exited.set()
        self._wake_sampler()

    def _stop_exit_watch(self) -> None:
        fd, self._pidfd = self._pidfd, None
        if fd is not None:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(fd)
            os.close(fd)

    def _poll_exit(self) -> None:
        if self._outcome is not None:
            return
        returncode = self._popen.poll()
        if returncode is None:
            return
        self._stop_exit_watch()
        self._outcome = ProcessOutcome.from_returncode(returncode)
        self._exit_time = time.monotonic()
        self._exited.set()

    async def _start(self) -> None:
        """Connect the pipes and start the owned tasks (exit watch, collectors, feeder, sampler)."""
        self._watch_exit()
        pipes = self._pipes
        await pipes.connect(self._popen, self.spec, self._loop)
        self.stdin, self.stdout, self.stderr = pipes.stdin, pipes.stdout, pipes.stderr
        self._sampler = self._loop.create_task(self._sample_loop())

    def _abort_start(self) -> None:
        """Undo a half-finished start without awaiting: kill, close, reap, confirm (bounded)."""
        for task in self._tasks():
            task.cancel()
        deadline = time.monotonic() + 1.0
        while self.kill_now() or not self._tree.gone:
            if time.monotonic() >= deadline:
                break
            time.sleep(0.01)
            if self._supervised is not None:
                self._supervised.read_reports()
                if self._supervised.finished:
                    self._tree.release_anchor()
            self._tree.observe(scan(0.0, refresh=self._tree.watched_pids()))
        for pipe in (self._popen.stdin, self._popen.stdout, self._popen.stderr):
            if pipe is not None:
                pipe.close()
        self._pipes.close_transports()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._popen.wait(timeout=max(0.0, deadline - time.monotonic()))
        self._poll_exit()
        self._stop_exit_watch()
        if self._supervised is not None:
            self._end_supervision()
            self._tree.observe(scan(0.0, refresh=self._tree.watched_pids()))
        if self._tree.gone:
            self._notify_gone()

    def _tasks(self) -> list[asyncio.Task[None]]:
        tasks = self._pipes.tasks()
        if self._sampler is not None:
            tasks.append(self._sampler)
        return tasks

    async def _finish_tasks(self) -> None:
        pending = [task for task in self._pipes.collectors if not task.done()]
        if pending and self._exit_time is not None:
            remaining = self._exit_time + self._grace_s - time.monotonic()
            if remaining > 0:
                await asyncio.wait(pending, timeout=remaining)
        tasks = self._tasks()
        for task in tasks:
            if not task.done():
                task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        for task in tasks:
            if not task.cancelled() and task.exception() is not None:
                _log.debug("process task failed", exc_info=task.exception())


async def finish_despite_cancel(work: Awaitable[_T]) -> _T:
    """Await ``work`` to its end even if the caller is cancelled meanwhile (again and again).

    For bounded teardown work only: the caller re-raises its cancellation afterwards.
    """
    task = asyncio.ensure_future(work)
    while True:
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done():
                return task.result()


async def start_process(proc: ManagedProcess) -> None:
    """Connect a new ``proc``'s pipes and start its tasks; a failed start is undone, then raised."""
    try:
        await proc._start()
    except BaseException:
        proc._abort_start()
        raise


def abort_start(proc: ManagedProcess) -> None:
    """Undo the start of a ``proc`` whose spawn was cancelled after its fork, without awaiting."""
    proc._abort_start()
