"""A detached dsh process: one that is meant to outlive the process that started it.

Used for a detached delegation (``dsh run --detach``, a ``dsh mcp`` job kept past its
connection): the child is a dsh host of its own, which contains its own product trees with
their own supervisors. It starts in a new session with no terminal and the null device for its
standard streams, so closing the starting terminal or killing the starter's process group does
not reach it.

It is not an escape hatch: the child inherits the starter's environment unchanged (a tree
marker included), so a detached process started from inside a contained run is still that
run's descendant, and the run's supervisor and orphan reap still end it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping, Sequence

from dsh.subprocess._procfs import read_info
from dsh.subprocess.errors import SpawnError

__all__ = ["DetachedProcess", "spawn_detached"]


class DetachedProcess:
    """A started detached process: its pid and start time, and a way to wait for or signal it
    that a reused pid cannot fool (a pidfd, while the starter keeps it)."""

    def __init__(self, pid: int, start: float, pidfd: int | None) -> None:
        self.pid = pid
        #: Start time in clock ticks since boot (``/proc/<pid>/stat`` field 22).
        self.start = int(start)
        self._pidfd = pidfd
        self.returncode: int | None = None

    def signal(self, signum: int) -> bool:
        """Send ``signum`` if the process still runs; returns whether it was sent."""
        if self.returncode is not None or self._pidfd is None:
            return False
        try:
            signal.pidfd_send_signal(self._pidfd, signum)
        except ProcessLookupError:
            return False
        return True

    async def wait(self) -> int:
        """Wait for the process to exit and reap it; returns its exit status (``-N`` for a
        signal N). Cancelling the wait leaves the process running."""
        if self.returncode is not None:
            return self.returncode
        if self._pidfd is None:
            raise RuntimeError("this process was let go; it cannot be waited for")
        loop = asyncio.get_running_loop()
        exited: asyncio.Future[None] = loop.create_future()

        def readable() -> None:
            if not exited.done():
                exited.set_result(None)

        loop.add_reader(self._pidfd, readable)
        try:
            await exited
        finally:
            loop.remove_reader(self._pidfd)
        # The pidfd is readable once the process has exited: the reap does not block.
        _, status = os.waitpid(self.pid, os.WNOHANG)  # noqa: ASYNC222 - it has exited
        self.returncode = os.waitstatus_to_exitcode(status)
        self.release()
        return self.returncode

    def release(self) -> None:
        """Let the process go: this process no longer waits for or signals it. Its exit is
        then reaped by init (or the nearest subreaper) once this process is gone."""
        if self._pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self._pidfd)
            self._pidfd = None


def spawn_detached(argv: Sequence[str], *, env: Mapping[str, str]) -> DetachedProcess:
    """Start ``argv`` (``argv[0]`` a path) in a new session, in this process's working
    directory, with stdin, stdout and stderr on the null device.

    Raises :class:`~dsh.subprocess.SpawnError` (its cause the OS error) when it cannot start.
    """
    if not argv:
        raise SpawnError("spawn_detached needs a program")
    null = os.devnull
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, null, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, null, os.O_WRONLY, 0),
        (os.POSIX_SPAWN_OPEN, 2, null, os.O_WRONLY, 0),
    ]
    try:
        pid = os.posix_spawn(argv[0], list(argv), dict(env), file_actions=actions, setsid=True)
    except OSError as exc:
        raise SpawnError(f"cannot start a detached process ({exc.strerror or 'error'})") from exc
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except OSError:
        pidfd = None
    info = read_info(pid)
    return DetachedProcess(pid, info.start if info is not None else 0.0, pidfd)
