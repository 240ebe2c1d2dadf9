"""A supervised spawn started from the event loop's thread, with no worker thread involved.

With a standby supervisor waiting and no limits to set up, a spawn is one short ``sendmsg`` of
the request and then a wait for the supervisor's first report, which a loop reader takes. A
round trip through a worker thread costs about 0.2 ms of the host's CPU (a queue, two thread
wake-ups, the loop's self-pipe); this path has none. Anything else, and any start that fails
for want of a supervisor or a cgroup, goes to the worker-thread path (``_spawn_child``), which
deals with every case.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import subprocess
from collections.abc import Callable
from typing import TypeAlias

from dsh.subprocess._spawner import (
    REPORT_SIZE,
    GroupJoinFailed,
    SpawnerUnavailable,
    SupervisedChild,
)
from dsh.subprocess._spec import SpawnSpec
from dsh.subprocess._start_request import (
    START_TIMEOUT_S,
    SentRequest,
    parse_start,
    send_request,
    take_waiting_standby,
)
from dsh.subprocess._workers import offload

__all__ = ["Started", "start_on_loop"]

_log = logging.getLogger("dsh.subprocess")

Started: TypeAlias = SupervisedChild | subprocess.Popen[bytes]
"""A started program: supervised, or (the worker-thread path's last resort) a plain child."""


def start_on_loop(
    spec: SpawnSpec,
    env: dict[str, str],
    cwd: str | None,
    owner: str,
    *,
    use_groups: bool,
    fallback: Callable[[], Started],
) -> asyncio.Future[Started] | None:
    """Start ``spec`` under a waiting standby from the running loop; None when this path does
    not apply (limits asked, or no matching standby waits): spawn in a worker thread then.

    The future gives a ``SupervisedChild``, raises ``OSError``
    for a program that could not start (the worker-thread path raises ``SpawnError`` itself),
    and when the supervisor or its cgroup failed, takes ``fallback()``'s outcome from a worker
    thread. It is never cancelled by this module; the caller shields it.
    """
    if spec.limits is not None:
        return None
    standby = take_waiting_standby(in_group=use_groups)
    if standby is None:
        return None
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Started] = loop.create_future()
    try:
        sent = send_request(spec, env, cwd, owner, standby, use_groups=use_groups)
    except SpawnerUnavailable:
        _log.debug("the waiting standby was unreachable", exc_info=True)
        return None  # closed already; the worker-thread path takes another
    except OSError as exc:  # no pipes left, say: as the worker-thread path would report it
        future.set_exception(exc)
        return future
    _StartReader(loop, sent, cwd, future, fallback).begin()
    return future


class _StartReader:
    """Reads the first report off ``sent.control`` on the loop, then settles ``future``."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sent: SentRequest,
        cwd: str | None,
        future: asyncio.Future[Started],
        fallback: Callable[[], Started],
    ) -> None:
        self._loop = loop
        self._sent = sent
        self._cwd = cwd
        self._future = future
        self._fallback = fallback
        self._received = b""
        self._fd = sent.control.fileno()
        self._timer: asyncio.TimerHandle | None = None

    def begin(self) -> None:
        try:
            self._loop.add_reader(self._fd, self._readable)
        except BaseException:
            self._sent.abandon()
            self._sent.settle()
            raise
        self._timer = self._loop.call_later(START_TIMEOUT_S, self._finish)

    def _readable(self) -> None:
        try:
            chunk = self._sent.control.recv(REPORT_SIZE, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        self._received += chunk
        if chunk and b"\n" not in self._received:
            return
        self._finish()

    def _finish(self) -> None:
        self._loop.remove_reader(self._fd)
        if self._timer is not None:
            self._timer.cancel()
        sent, future = self._sent, self._future
        sent.settle()
        try:
            pid, supervisor_pid, early = parse_start(self._received, self._cwd)
        except (GroupJoinFailed, SpawnerUnavailable):
            _log.debug("supervised start from the loop failed; retrying", exc_info=True)
            sent.abandon()
            _settle_from(future, offload(self._fallback))
        except Exception as exc:  # the program could not start, or a malformed report
            sent.abandon()
            future.set_exception(exc)
        else:
            future.set_result(sent.child(pid, supervisor_pid, early))


def _settle_from(future: asyncio.Future[Started], source: asyncio.Future[Started]) -> None:
    """Settle ``future`` with ``source``'s outcome once it has one (both on this loop)."""

    def copy(done: asyncio.Future[Started]) -> None:
        if future.done():
            return
        error = done.exception()
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(done.result())

    source.add_done_callback(copy)
