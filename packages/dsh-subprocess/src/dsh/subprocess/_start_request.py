"""A spawn request to a standby supervisor, and the supervisor's first report.

``spawn_supervised`` does both in a worker thread (it blocks until the report); the event loop's
path (``_loop_start``) sends with ``send_request`` and reads the report itself. Either way the
request carries the program's argv, env, cwd, stdio descriptors and cgroups, and the owned dir
to make and remove.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import select
import socket
import sys
import time
import uuid
from pathlib import Path

from dsh.subprocess._cgroup import RunGroup, kernel_layer
from dsh.subprocess._spawner import (
    REPORT_SIZE,
    GroupJoinFailed,
    OwnedDirFailed,
    SpawnerUnavailable,
    Standby,
    SupervisedChild,
    _send_frame,
    _spawner,
)
from dsh.subprocess._spec import SpawnSpec, StreamSpec

__all__ = [
    "START_TIMEOUT_S",
    "SentRequest",
    "parse_start",
    "send_request",
    "spawn_supervised",
    "take_waiting_standby",
]

START_TIMEOUT_S = 10.0
"""How long a spawn waits for the supervisor's first report."""

_FS_ENCODING = sys.getfilesystemencoding()


def _encode_env(env: dict[str, str]) -> dict[bytes, bytes]:
    """``os.fsencode`` of every name and value (POSIX), without its per-call type checks: a spawn
    encodes some 50 variables on the host, and this is its largest share of building a request."""
    encoding = _FS_ENCODING
    return {
        name.encode(encoding, "surrogateescape"): value.encode(encoding, "surrogateescape")
        for name, value in env.items()
    }


def _stdio_source(mode: StreamSpec | str, index: int, pipes: dict[str, int]) -> int | None:
    """The child's end for stdio slot ``index``; the host's end goes into ``pipes``."""
    name = ("stdin", "stdout", "stderr")[index]
    if mode == "ignore":
        return None
    if mode == "inherit":
        return os.dup(index)
    read_end, write_end = os.pipe()
    if index == 0:
        pipes[name] = write_end
        return read_end
    pipes[name] = read_end
    return write_end


def spawn_supervised(
    spec: SpawnSpec, env: dict[str, str], cwd: str | None, owner: str, *, use_groups: bool
) -> SupervisedChild:
    """Start ``spec`` under a supervisor; OSError (errno, and the cwd as filename) if it cannot.

    With ``use_groups`` the program starts in its run's cgroup: the one the standby supervisor
    already sits in (else a new one), plus the v1 limit groups of ``spec.limits``, which the
    supervisor joins before it starts the program (``GroupJoinFailed`` if it cannot). Without,
    a standby that sits in a group leaves it first. Blocks until the supervisor reports.
    """
    sent = send_request(spec, env, cwd, owner, _spawner.take_standby(owner), use_groups=use_groups)
    try:
        received = _await_start(sent.control)
        pid, supervisor_pid, early = parse_start(received, cwd)
    except BaseException:
        sent.abandon()
        raise
    finally:
        sent.settle()
    return sent.child(pid, supervisor_pid, early)


class SentRequest:
    """A spawn request a standby supervisor holds, before its first report is read."""

    def __init__(
        self,
        control: socket.socket,
        group: RunGroup | None,
        stale: RunGroup | None,
        pipes: dict[str, int],
        owner: str,
    ) -> None:
        self.control = control
        self.group = group
        self._stale = stale
        self._pipes = pipes
        self._owner = owner

    def child(self, pid: int, supervisor_pid: int, early: bytes) -> SupervisedChild:
        """The started program (``early``: reports that came with the start report)."""
        child = SupervisedChild(pid, supervisor_pid, self.control, self._pipes)
        child.group = self.group
        child.take_reports(early)
        return child

    def abandon(self) -> None:
        """Nothing started: close the pipes and the control socket (a supervisor still running
        then kills whatever it started) and remove the run's group (best effort: one still
        holding the supervisor is left to the sweep)."""
        _close_all(list(self._pipes.values()))
        self.control.close()
        if self.group is not None:
            self.group.remove()

    def settle(self) -> None:
        """After the first report, either way: refill the standbys, and remove the group a
        standby left because this spawn runs without the kernel layer."""
        _spawner.refill_soon(self._owner)  # after the spawn, so the fork never competes with it
        if self._stale is not None:
            self._stale.remove()  # the supervisor left it before starting the program


def send_request(
    spec: SpawnSpec,
    env: dict[str, str],
    cwd: str | None,
    owner: str,
    standby: Standby,
    *,
    use_groups: bool,
) -> SentRequest:
    """Hand ``spec`` to the ``standby`` supervisor (one short send; the cgroup work of limits
    and of a standby without a group blocks briefly). On failure everything is closed and the
    standbys are refilled before it raises (``SpawnerUnavailable`` if the send failed)."""
    pipes: dict[str, int] = {}
    sources: list[int] = []
    host_control, group = standby
    stale = None if use_groups else group
    group = group if use_groups else None
    joins: list[tuple[bytes, bytes]] = []
    prejoined = group is not None  # the standby sits in it already
    try:
        layer = kernel_layer()
        if use_groups and group is None:
            group = layer.new_group(uuid.uuid4().hex, spec.limits)
            joins = group.pairs() if group is not None else []
        elif group is not None:
            layer.add_limits(group, spec.limits)
            joins = group.pairs(v1_only=True)
        layout = _open_stdio(spec, pipes, sources)
        request = {
            "argv": [os.fsencode(arg) for arg in spec.argv],
            "env": _encode_env(env),
            "cwd": os.fsencode(cwd if cwd is not None else Path.cwd()),  # the host's, as Popen
            "nice": spec.nice,
            "stdio": layout,
            "cgroups": joins,
            "in_group": prejoined,
            "leave": stale is not None,
            "remove": None if spec.owned_dir is None else os.fsencode(spec.owned_dir),
            "make": _owned_files(spec),
            # Without limits there is nothing to read from the groups at the end: the
            # supervisor removes them once the tree is gone, off the host's CPU.
            "drop": [os.fsencode(p) for p in group.created]
            if group is not None and spec.limits is None
            else None,
        }
        try:
            _send_frame(host_control, marshal.dumps(request), sources)
        except OSError as exc:
            raise SpawnerUnavailable("standby supervisor unreachable") from exc
        finally:
            _close_all(sources)  # the supervisor holds its own copies now
            sources.clear()
    except BaseException:
        _close_all([*sources, *pipes.values()])
        host_control.close()
        if group is not None:
            group.remove()
        _spawner.refill_soon(owner)
        if stale is not None:
            stale.remove()
        raise
    return SentRequest(host_control, group, stale, pipes, owner)


def take_waiting_standby(*, in_group: bool) -> Standby | None:
    """A standby that is forked and waiting already, sitting in a group or not as asked; None
    when there is none (the caller then spawns in a worker thread: that path may fork one)."""
    return _spawner.take_waiting(in_group)


def _owned_files(spec: SpawnSpec) -> dict[bytes, bytes] | None:
    """The files the supervisor writes into the owned dir it creates (None: it creates none)."""
    if spec.owned_files is None:
        return None
    return {os.fsencode(name): content for name, content in spec.owned_files.items()}


def _open_stdio(spec: SpawnSpec, pipes: dict[str, int], sources: list[int]) -> list[int | None]:
    """The child's stdio layout: an index into ``sources`` per slot, or None for /dev/null."""
    layout: list[int | None] = []
    stdin_mode = "ignore" if spec.stdin == "ignore" else "pipe"
    for index, mode in enumerate((stdin_mode, spec.stdout, spec.stderr)):
        source = _stdio_source(mode, index, pipes)
        if source is None:
            layout.append(None)
        else:
            layout.append(len(sources))
            sources.append(source)
    return layout


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _await_start(control: socket.socket) -> bytes:
    """Block until the supervisor's first report is in (or the socket closed, or time is up)."""
    received = b""
    deadline = time.monotonic() + START_TIMEOUT_S
    while b"\n" not in received:
        remaining = deadline - time.monotonic()
        readable, _, _ = select.select([control], [], [], max(0.0, remaining))
        chunk = control.recv(REPORT_SIZE) if readable else b""
        if not chunk:
            break
        received += chunk
    return received


def parse_start(received: bytes, cwd: str | None) -> tuple[int, int, bytes]:
    """The supervisor's first report: (pid, its own pid, the later reports that came with it).

    ``F`` raises: ``GroupJoinFailed``, ``OwnedDirFailed``, or ``OSError`` (errno, and the cwd as
    filename for ``cwd``); no complete report raises ``SpawnerUnavailable``.
    """
    report, newline, rest = received.partition(b"\n")
    if newline and report.startswith(b"S "):
        pid, supervisor_pid = (int(part) for part in report[2:].split())
        return pid, supervisor_pid, rest
    if newline and report.startswith(b"F "):
        stage, _, code = report[2:].partition(b" ")
        number = int(code or 0) or 0
        if stage == b"cgroup":
            raise GroupJoinFailed(os.strerror(number) if number else "cgroup join failed")
        if stage == b"dir":
            raise OwnedDirFailed(number, os.strerror(number) if number else "owned_dir failed")
        message = os.strerror(number) if number else "spawn failed"
        raise OSError(number, message, cwd if stage == b"cwd" else None)
    raise SpawnerUnavailable("spawner gave no answer")
