"""The host's side of the spawner: one spawner process per host, one supervised child per spawn.

``_start_request.spawn_supervised`` hands a spawn to a standby supervisor that the spawner
(``_spawner_main``) forked ahead of time, a subreaper that forks the program. The host keeps the
parent ends of the pipes and a control socket to the supervisor; ``SupervisedChild`` reads the
supervisor's reports from it and looks like the part of ``subprocess.Popen`` that
``ManagedProcess`` uses. Everything here blocks briefly and runs in the package's worker threads
or the standby refill thread, except ``SupervisedChild.read_reports`` and ``take_waiting``.
"""

from __future__ import annotations

import array
import contextlib
import logging
import marshal
import os
import select
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
import weakref
from pathlib import Path

from dsh.subprocess._cgroup import RunGroup, kernel_layer
from dsh.subprocess._workers import submit

__all__ = [
    "SPAWNER_OWNER_ENV",
    "SPAWNER_SCRIPT_NAME",
    "GroupJoinFailed",
    "OwnedDirFailed",
    "SpawnerUnavailable",
    "Standby",
    "SupervisedChild",
]

_log = logging.getLogger("dsh.subprocess")

SPAWNER_OWNER_ENV = "DSH_SPAWNER_OWNER"
"""Carried by the spawner and its supervisors: ``<owner pid>:<owner start time>``."""

SPAWNER_SCRIPT_NAME = "_spawner_main.py"
_SCRIPT = Path(__file__).with_name(SPAWNER_SCRIPT_NAME)
_HEADER = struct.Struct("!I")
REPORT_SIZE = 256
"""The most one read of a supervisor's reports takes."""
_STANDBY = 2
"""Supervisors kept forked and waiting, so a spawn never waits for a fork of its own."""
_REFILL_DELAY_S = 1.0
"""While a standby is left, the refill waits this long: a fork and its warm-up right after a
spawn compete for the CPU with the new product's own start-up."""


class SpawnerUnavailable(Exception):
    """The spawner process could not be started or reached; spawn without it."""


class GroupJoinFailed(Exception):
    """The supervisor could not join the run's cgroup; nothing was started."""


class OwnedDirFailed(OSError):
    """The supervisor could not create the spec's owned dir or its files; nothing was started."""


Standby = tuple[socket.socket, RunGroup | None]
"""A waiting supervisor's control socket, and the run group it already sits in."""


class SupervisedChild:
    """The program of one supervised spawn, as ``ManagedProcess`` sees it."""

    def __init__(
        self,
        pid: int,
        supervisor_pid: int,
        control: socket.socket,
        pipes: dict[str, int],
    ) -> None:
        self.pid = pid
        self.supervisor_pid = supervisor_pid
        self.returncode: int | None = None
        self.empty = False
        """The supervisor reported that nothing is left below it."""
        self.groups_removed = False
        """The supervisor removed the run's cgroup directories (empty, so the kernel let it)."""
        self.lost = False
        """The control socket closed without that report (the supervisor was killed)."""
        self.group: RunGroup | None = None
        """The run's cgroup (the kernel layer), when the program was started inside one."""
        self._control = control
        self._buffer = b""
        self.stdin = os.fdopen(pipes["stdin"], "wb", buffering=0) if "stdin" in pipes else None
        self.stdout = os.fdopen(pipes["stdout"], "rb", buffering=0) if "stdout" in pipes else None
        self.stderr = os.fdopen(pipes["stderr"], "rb", buffering=0) if "stderr" in pipes else None
        _open_controls.add(self)

    def fileno(self) -> int:
        """The control socket's descriptor (for ``loop.add_reader``)."""
        return self._control.fileno()

    @property
    def finished(self) -> bool:
        """True once no further report can arrive."""
        return self.empty or self.lost

    def read_reports(self) -> None:
        """Take every report already waiting (never blocks)."""
        while not self.finished:
            try:
                report = self._control.recv(REPORT_SIZE, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                report = b""
            if not report:
                self.lost = True
                _log.debug("supervisor of pid %d ended without a report", self.pid)
                return
            self.take_reports(report)

    def take_reports(self, data: bytes) -> None:
        """Take the newline-framed reports in ``data`` (a partial last line waits for more)."""
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            self._take(line)

    def _take(self, report: bytes) -> None:
        if report.startswith(b"X "):
            self.returncode = os.waitstatus_to_exitcode(int(report[2:]))
        elif report == b"E":
            self.empty = True
        elif report == b"G":
            self.groups_removed = True

    def poll(self) -> int | None:
        self.read_reports()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Block until the program's exit is reported (``TimeoutExpired`` after ``timeout``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if self.lost:
                raise subprocess.TimeoutExpired("supervised child", timeout or 0.0)
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise subprocess.TimeoutExpired("supervised child", timeout or 0.0)
            select.select([self._control], [], [], remaining)
        assert self.returncode is not None
        return self.returncode

    def send(self, command: bytes) -> None:
        """``T`` (SIGTERM every descendant) or ``K`` (SIGKILL until none is left); best effort."""
        with contextlib.suppress(OSError):
            self._control.send(command, socket.MSG_DONTWAIT)

    def close(self) -> None:
        """Close the control socket: a supervisor still running then kills its whole tree."""
        _open_controls.discard(self)
        with contextlib.suppress(OSError):
            self._control.close()


_open_controls: weakref.WeakSet[SupervisedChild] = weakref.WeakSet()


class _Spawner:
    """The spawner process of this host, started on first use and again if it died."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._standby: list[Standby] = []
        self._refill_due = threading.Condition(self._lock)
        self._refill_at: float | None = None
        self._refill_owner = ""
        self._refiller: threading.Thread | None = None

    def _start(self, owner: str) -> socket.socket:
        if not _SCRIPT.is_file():
            raise SpawnerUnavailable("spawner script missing")
        host_end, spawner_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-S", str(_SCRIPT), str(spawner_end.fileno()), owner],
                pass_fds=(spawner_end.fileno(),),
                env={SPAWNER_OWNER_ENV: owner},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            host_end.close()
            raise SpawnerUnavailable("spawner could not start") from exc
        finally:
            spawner_end.close()
        self._sock = host_end
        return host_end

    def new_supervisor(self, owner: str) -> Standby:
        """A control socket to a fresh standby supervisor (a dead spawner is replaced once),
        and the cgroup it joins while on standby (the kernel layer; None where it is off).

        Joining a cgroup costs about 7 ms here (the kernel waits out an RCU grace period before
        the first move in a while), so the standby pays it ahead of time, off every spawn. It
        makes the group too (about 0.3 ms of CPU per run, which was the host's): one it could
        not make it cannot join, which its spawn reports as ``GroupJoinFailed``.
        """
        host_end, supervisor_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        group = kernel_layer().planned_group(uuid.uuid4().hex)
        order: dict[str, object] = {"cgroups": group.pairs() if group is not None else []}
        if group is not None:
            order["make"] = group.make_dirs()
        try:
            with self._lock:
                for attempt in (1, 2):
                    sock = self._sock or self._start(owner)
                    try:
                        _send_frame(sock, marshal.dumps(order), [supervisor_end.fileno()])
                        return host_end, group
                    except OSError as exc:
                        _log.debug("spawner unreachable (attempt %d)", attempt, exc_info=True)
                        self._discard()
                        if attempt == 2:
                            raise SpawnerUnavailable("spawner unreachable") from exc
        except BaseException:
            host_end.close()
            if group is not None:
                group.remove()
            raise
        finally:
            supervisor_end.close()
        raise AssertionError("unreachable")

    def take_standby(self, owner: str) -> Standby:
        """A waiting supervisor's control socket; the pool is refilled off the caller's path."""
        with self._lock:
            if self._process is not None and self._process.poll() is not None:
                # The spawner died (a tool killed it): its standbys are no longer below a
                # subreaper, so a tree under one would go to init if its supervisor died too.
                _log.debug("spawner gone; its standby supervisors are dropped")
                self._discard()
            ready = self._standby.pop() if self._standby else None
        return ready if ready is not None else self.new_supervisor(owner)

    def take_waiting(self, in_group: bool) -> Standby | None:
        """A waiting standby that sits in a group (or not) as asked, without any blocking work;
        None when there is none, or the spawner died (``take_standby`` deals with that)."""
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                return None
            for index in range(len(self._standby) - 1, -1, -1):
                if (self._standby[index][1] is not None) == in_group:
                    return self._standby.pop(index)
        return None

    def refill_soon(self, owner: str) -> None:
        """Refill now if no standby is left, else after ``_REFILL_DELAY_S`` (off every caller).

        One long-lived thread keeps the deadline: a timer thread per spawn cost about 0.2 ms
        of the host's CPU each.
        """
        with self._lock:
            if self._standby:
                due = time.monotonic() + _REFILL_DELAY_S
                if self._refill_at is None or due < self._refill_at:
                    self._refill_at = due
                self._refill_owner = owner
                if self._refiller is None:
                    self._refiller = threading.Thread(
                        target=self._refill_later, name="dsh-standby-refill", daemon=True
                    )
                    self._refiller.start()
                self._refill_due.notify()
                return
        submit(self.refill, owner)

    def _refill_later(self) -> None:
        due = self._refill_due
        with due:
            while True:
                at = self._refill_at
                if at is None:
                    due.wait()
                    continue
                remaining = at - time.monotonic()
                if remaining > 0:
                    due.wait(remaining)
                    continue
                self._refill_at = None
                owner = self._refill_owner
                due.release()
                try:
                    self.refill(owner)  # here: a hand-off to a worker thread costs more
                finally:
                    due.acquire()

    def refill(self, owner: str) -> None:
        try:
            while True:
                with self._lock:
                    if len(self._standby) >= _STANDBY:
                        return
                control = self.new_supervisor(owner)
                with self._lock:
                    self._standby.append(control)
        except (SpawnerUnavailable, OSError):
            _log.debug("could not refill the standby supervisors", exc_info=True)

    def _discard(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()
        standby, self._standby = self._standby, []
        for control, group in standby:
            control.close()
            if group is not None:
                group.remove()  # empty once the supervisor has left; else the exit or the sweep
        process, self._process = self._process, None
        if process is not None:
            with contextlib.suppress(OSError):
                process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired, OSError):
                process.wait(timeout=1.0)

    def reset_after_fork(self) -> None:
        # A forked copy of the host must not hold the spawner open: its exit would go unseen.
        self._lock = threading.Lock()
        self._refill_due = threading.Condition(self._lock)
        self._refill_at = None
        self._refiller = None
        sock, self._sock = self._sock, None
        self._process = None
        standby, self._standby = self._standby, []
        for each in (sock, *(control for control, _ in standby)):
            if each is not None:
                with contextlib.suppress(OSError):
                    each.close()


_spawner = _Spawner()


def _send_frame(sock: socket.socket, payload: bytes, fds: list[int]) -> None:
    frame = _HEADER.pack(len(payload)) + payload
    rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    sent = sock.sendmsg([frame], rights)
    if sent < len(frame):
        sock.sendall(frame[sent:])


def _reset_after_fork() -> None:
    _spawner.reset_after_fork()
    for child in list(_open_controls):
        with contextlib.suppress(OSError):
            child._control.close()
    _open_controls.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)
