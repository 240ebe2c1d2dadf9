"""ManagedProcess: one spawned child, its pipes, and its whole tree."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import functools
import logging
import os
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from types import TracebackType
from typing import IO, Literal, TypeVar

import psutil

from dsh.subprocess import _procfs
from dsh.subprocess._cgroup import kernel_layer, limits_problem
from dsh.subprocess._contention import contention
from dsh.subprocess._env import build_child_env
from dsh.subprocess._loop_start import start_on_loop
from dsh.subprocess._marker import format_marker
from dsh.subprocess._owned_dir import make_owned_dir, remove_owned_dir
from dsh.subprocess._priority import lower_priority, lower_running
from dsh.subprocess._procfs import TREE_MARKER_ENV, Snapshot, read_info, scan
from dsh.subprocess._spawner import (
    GroupJoinFailed,
    OwnedDirFailed,
    SpawnerUnavailable,
    SupervisedChild,
)
from dsh.subprocess._spec import Collect, CollectedText, ProcessOutcome, SpawnSpec, StreamSpec
from dsh.subprocess._start_request import spawn_supervised
from dsh.subprocess._trace_context import apply_trace_context
from dsh.subprocess._tree import Tree
from dsh.subprocess._workers import offload, submit
from dsh.subprocess.errors import SpawnError, TeardownError

__all__ = ["ManagedProcess", "launch"]

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
_READ_CHUNK = 65536

_owner: tuple[int, str] | None = None
_T = TypeVar("_T")
_SUPERVISED = _procfs._IS_LINUX
"""Spawn through a subreaper supervisor (Linux); elsewhere a plain ``Popen`` in a new session."""

Child = subprocess.Popen[bytes] | SupervisedChild


def _owner_identity() -> str:
    """``<pid>:<create time>`` of the calling process (cached per pid, so forks recompute)."""
    global _owner
    pid = os.getpid()
    if _owner is None or _owner[0] != pid:
        _owner = (pid, f"{pid}:{psutil.Process(pid).create_time():.3f}")
    return _owner[1]


def new_marker() -> str:
    """A fresh tree marker: ``<owner pid>:<owner start time>:<uuid>``."""
    return format_marker(_owner_identity(), uuid.uuid4().hex)


class _Tail:
    """The last ``max_bytes`` bytes of a stream."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.data = bytearray()
        self.truncated = False

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        excess = len(self.data) - self.max_bytes
        if excess > 0:
            del self.data[:excess]
            self.truncated = True

    def text(self) -> CollectedText:
        data = bytes(self.data)
        if self.truncated:
            skip = 0  # do not start the text in the middle of a UTF-8 sequence
            while skip < min(3, len(data)) and data[skip] & 0xC0 == 0x80:
                skip += 1
            data = data[skip:]
        return CollectedText(data.decode("utf-8", "replace"), self.truncated)


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
        self._transports: list[asyncio.BaseTransport] = []
        self._tails: dict[str, _Tail] = {}
        self._collectors: list[asyncio.Task[None]] = []
        self._feeder: asyncio.Task[None] | None = None
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
        tail = self._tails.get(name)
        if tail is None:
            raise ValueError(
                "collected() needs 'stdout' or 'stderr' spawned with Collect(max_bytes)"
            )
        return tail.text()

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
        pending = [task for task in self._collectors if not task.done()]
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
            self._close_stdin()
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
                self._close_transports()
                self._closed = True
            raise
        finally:
            if not clean:
                self.kill_now()
        self._close_transports()
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
        loop = self._loop
        popen = self._popen
        self._watch_exit()
        if popen.stdin is not None:
            stdin_pipe, popen.stdin = popen.stdin, None
            writer = await _connect_writer(loop, stdin_pipe)
            self._transports.append(writer.transport)
            if isinstance(self.spec.stdin, bytes):
                self._feeder = loop.create_task(_feed(writer, self.spec.stdin))
            else:
                self.stdin = writer
        for name in ("stdout", "stderr"):
            pipe: IO[bytes] | None = getattr(popen, name)
            if pipe is None:
                continue
            setattr(popen, name, None)
            reader, transport = await _connect_reader(loop, pipe)
            self._transports.append(transport)
            mode: StreamSpec = getattr(self.spec, name)
            if isinstance(mode, Collect):
                tail = self._tails[name] = _Tail(mode.max_bytes)
                self._collectors.append(loop.create_task(_collect(reader, tail)))
            else:
                setattr(self, name, reader)
        self._sampler = loop.create_task(self._sample_loop())

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
        self._close_transports()
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
        tasks = list(self._collectors)
        if self._feeder is not None:
            tasks.append(self._feeder)
        if self._sampler is not None:
            tasks.append(self._sampler)
        return tasks

    def _close_stdin(self) -> None:
        if self.stdin is not None and not self.stdin.is_closing():
            self.stdin.close()
        if self._feeder is not None and not self._feeder.done():
            self._feeder.cancel()

    async def _finish_tasks(self) -> None:
        pending = [task for task in self._collectors if not task.done()]
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

    def _close_transports(self) -> None:
        for transport in self._transports:
            with contextlib.suppress(Exception):
                transport.close()


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


async def _connect_reader(
    loop: asyncio.AbstractEventLoop, pipe: IO[bytes]
) -> tuple[asyncio.StreamReader, asyncio.BaseTransport]:
    reader = asyncio.StreamReader(loop=loop)
    protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
    try:
        transport, _ = await loop.connect_read_pipe(lambda: protocol, pipe)
    except BaseException:
        pipe.close()
        raise
    return reader, transport


async def _connect_writer(loop: asyncio.AbstractEventLoop, pipe: IO[bytes]) -> asyncio.StreamWriter:
    protocol = asyncio.StreamReaderProtocol(asyncio.StreamReader(loop=loop), loop=loop)
    try:
        transport, _ = await loop.connect_write_pipe(lambda: protocol, pipe)
    except BaseException:
        pipe.close()
        raise
    return asyncio.StreamWriter(transport, protocol, None, loop)


async def _feed(writer: asyncio.StreamWriter, data: bytes) -> None:
    try:
        if data:
            writer.write(data)
            await writer.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the child closed its stdin early: EPIPE is expected and ignored
    finally:
        writer.close()


async def _collect(reader: asyncio.StreamReader, tail: _Tail) -> None:
    while chunk := await reader.read(_READ_CHUNK):
        tail.add(chunk)


def _check_cwd(cwd: str | os.PathLike[str] | None) -> str | None:
    # No stat here: the program's own start reports a cwd it cannot enter, by errno (two stats
    # of a cold path cost a spawn about 0.1 ms).
    return None if cwd is None else os.fspath(cwd)


def _spawn_error(exc: OSError, cwd: str | None) -> SpawnError:
    if isinstance(exc, OwnedDirFailed):
        code = errno.errorcode.get(exc.errno or 0, "unknown error")
        return SpawnError(f"spawn failed: cannot create owned_dir ({code})")
    kind = type(exc).__name__
    if cwd is not None and exc.filename == cwd:
        if exc.errno == errno.ENOENT:
            return SpawnError("spawn failed: cwd does not exist")
        if exc.errno == errno.ENOTDIR:
            return SpawnError("spawn failed: cwd is not a directory")
        return SpawnError(f"spawn failed: cannot enter cwd ({kind})")
    if isinstance(exc, FileNotFoundError | NotADirectoryError):
        return SpawnError("spawn failed: executable not found (argv[0])")
    if isinstance(exc, PermissionError):
        return SpawnError("spawn failed: executable not permitted (argv[0])")
    return SpawnError(f"spawn failed: cannot execute argv[0] ({kind})")


def _stream_arg(mode: StreamSpec) -> int | None:
    if isinstance(mode, Collect) or mode == "pipe":
        return subprocess.PIPE
    return None if mode == "inherit" else subprocess.DEVNULL


def _popen(spec: SpawnSpec, env: dict[str, str], cwd: str | None) -> Child:
    """Start the child: under a supervisor where possible (in the run's cgroup where the
    machine allows it), else a plain ``Popen``."""
    strict = spec.limits is not None and not spec.limits.best_effort
    if _SUPERVISED:
        problem = limits_problem(spec.limits)
        if problem is not None:
            raise SpawnError(f"{problem}; allow best effort to run without the limits")
        owner = _owner_identity()
        try:
            try:
                use_groups = kernel_layer().active
                child = spawn_supervised(spec, env, cwd, owner, use_groups=use_groups)
            except GroupJoinFailed:
                _log.debug("joining the run's cgroup failed", exc_info=True)
                if strict:
                    raise _limits_error(spec, "the run's cgroup could not be joined") from None
                child = spawn_supervised(spec, env, cwd, owner, use_groups=False)
            if child.group is None and strict and kernel_layer().active:
                child.close()  # the supervisor kills what it started
                raise _limits_error(spec, "the run's cgroup could not be created")
            return child
        except SpawnerUnavailable:
            _log.debug("spawner unavailable; spawning without a supervisor", exc_info=True)
        except OSError as exc:
            _log.debug("spawn failed", exc_info=True)
            raise _spawn_error(exc, cwd) from exc
    if strict:
        raise _limits_error(spec, "no supervisor could be started")
    try:
        make_owned_dir(spec)
    except OSError as exc:
        _log.debug("owned_dir could not be made", exc_info=True)
        failed = OwnedDirFailed(exc.errno, exc.strerror)
        raise _spawn_error(failed, cwd) from failed
    return _plain_popen(spec, env, cwd)


def _limits_error(spec: SpawnSpec, reason: str) -> SpawnError:
    key = spec.limits.requested[0] if spec.limits is not None and spec.limits.requested else "?"
    return SpawnError(
        f"limits.{key} cannot be enforced on this machine ({reason}); "
        "allow best effort to run without the limits"
    )


def _plain_popen(spec: SpawnSpec, env: dict[str, str], cwd: str | None) -> subprocess.Popen[bytes]:
    stdin = subprocess.DEVNULL if spec.stdin == "ignore" else subprocess.PIPE
    try:
        return subprocess.Popen(
            list(spec.argv),
            cwd=cwd,
            env=env,
            stdin=stdin,
            stdout=_stream_arg(spec.stdout),
            stderr=_stream_arg(spec.stderr),
            start_new_session=True,
            close_fds=True,
            bufsize=0,
        )
    except OSError as exc:
        _log.debug("spawn failed", exc_info=True)
        raise _spawn_error(exc, cwd) from exc
    except ValueError as exc:
        raise SpawnError("spawn failed: invalid argument") from exc


def _start_from_loop(
    spec: SpawnSpec, env: dict[str, str], cwd: str | None
) -> asyncio.Future[Child] | None:
    """The spawn without a worker thread (``_loop_start``), where it applies; else None."""
    if not _SUPERVISED:
        return None
    return start_on_loop(
        spec,
        env,
        cwd,
        _owner_identity(),
        use_groups=kernel_layer().active,
        fallback=functools.partial(_spawn_child, spec, env, cwd),
    )


def _spawn_child(spec: SpawnSpec, env: dict[str, str], cwd: str | None) -> Child:
    """The worker-thread half of a spawn: fork and exec, then the requested priority.

    ``spec.nice`` is resolved here (never ``"auto"``). A supervised child has set its own
    priority between fork and exec.
    """
    popen = _popen(spec, env, cwd)
    if isinstance(spec.nice, int) and not isinstance(popen, SupervisedChild):
        lower_priority(popen.pid, spec.nice)
    return popen


async def launch(
    spec: SpawnSpec,
    *,
    on_spawned: Callable[[ManagedProcess], None],
    on_gone: Callable[[ManagedProcess], None],
) -> ManagedProcess:
    """Spawn ``spec`` and return its ManagedProcess (``on_spawned`` runs once the child exists).

    The fork and exec run in a worker thread (``_workers``): on the loop thread, under CPU load, one
    ``fork_exec`` stalls every other task for 5 to 30 ms (measured: 8 products starting at once).
    A spawn that fails (or is cancelled) removes ``spec.owned_dir`` before it raises, unless it
    was to create the dir and found something at the path.
    """
    try:
        return await _launch(spec, on_spawned=on_spawned, on_gone=on_gone)
    except BaseException as error:
        if spec.owned_dir is not None and not _found_in_the_way(error):
            await finish_despite_cancel(offload(remove_owned_dir, spec.owned_dir))
        raise


def _found_in_the_way(error: BaseException) -> bool:
    """The spawn was to create ``owned_dir`` and something was at the path: not ours to remove."""
    cause = error.__cause__
    return isinstance(cause, OwnedDirFailed) and cause.errno == errno.EEXIST


async def _launch(
    spec: SpawnSpec,
    *,
    on_spawned: Callable[[ManagedProcess], None],
    on_gone: Callable[[ManagedProcess], None],
) -> ManagedProcess:
    loop = asyncio.get_running_loop()
    marker = new_marker()
    env = build_child_env(spec.env)
    apply_trace_context(env, spec.env)
    env[TREE_MARKER_ENV] = marker
    cwd = _check_cwd(spec.cwd)
    started_at = contention.start_nice() if spec.nice == "auto" else spec.nice
    # Nice 0 asks for nothing: a child never runs above the caller's priority anyway, and asking
    # costs the supervisor a fork instead of a vfork.
    resolved = dataclasses.replace(spec, nice=started_at or None)
    job: Future[Child] | None = None
    spawning = _start_from_loop(resolved, env, cwd)
    if spawning is None:
        job = submit(_spawn_child, resolved, env, cwd)
        spawning = asyncio.wrap_future(job)
    try:
        popen = await asyncio.shield(spawning)
    except OSError as exc:  # from the loop-side start (the worker-thread one maps its own)
        _log.debug("spawn failed", exc_info=True)
        raise _spawn_error(exc, cwd) from exc
    except asyncio.CancelledError:
        if job is not None and job.cancel():
            raise  # still queued: no fork happened
        # The fork may already have happened: finish it, then take the child down with the
        # ordinary half-started path, so a cancelled spawn never leaves a process behind.
        late = await _finish_spawn(spawning)
        if late is not None:
            _adopt(late, spec, marker, loop, on_spawned, on_gone)._abort_start()
        raise
    proc = _adopt(popen, spec, marker, loop, on_spawned, on_gone)
    if spec.nice == "auto":
        contention.busy(proc, started_at=started_at or 0)
    try:
        await proc._start()
    except BaseException:
        proc._abort_start()
        raise
    return proc


def _adopt(
    popen: Child,
    spec: SpawnSpec,
    marker: str,
    loop: asyncio.AbstractEventLoop,
    on_spawned: Callable[[ManagedProcess], None],
    on_gone: Callable[[ManagedProcess], None],
) -> ManagedProcess:
    anchor = None
    if isinstance(popen, SupervisedChild):
        anchor = read_info(popen.supervisor_pid)
    group = popen.group if isinstance(popen, SupervisedChild) else None
    tree = Tree(read_info(popen.pid), popen.pid, marker, anchor, group)
    proc = ManagedProcess(popen=popen, spec=spec, tree=tree, loop=loop, on_gone=on_gone)
    on_spawned(proc)
    return proc


async def _finish_spawn(
    spawning: asyncio.Future[Child],
) -> Child | None:
    """Wait out a spawn whose caller was cancelled (bounded: one fork and exec); None if it failed.

    Further cancellations are absorbed here; the caller re-raises the first one.
    """
    while not spawning.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(spawning)
    if spawning.cancelled() or spawning.exception() is not None:
        return None
    return spawning.result()
