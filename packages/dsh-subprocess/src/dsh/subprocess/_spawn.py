"""The spawn mechanism: how a ``SpawnSpec`` becomes a running child (``Child``).

Under a supervisor from the spawner (``_spawner``) where the platform has one, from the loop's
thread (``_loop_start``) or a worker thread; else a plain ``Popen`` in a new session. A failed
start is mapped to a ``SpawnError`` that names no path. The whole lifecycle after the spawn is
``ManagedProcess``'s (``_process``); ``_launch`` joins the two.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import os
import subprocess
import uuid

from dsh.subprocess import _procfs
from dsh.subprocess._cgroup import kernel_layer, limits_problem
from dsh.subprocess._loop_start import start_on_loop
from dsh.subprocess._marker import format_marker
from dsh.subprocess._owned_dir import make_owned_dir
from dsh.subprocess._priority import lower_priority
from dsh.subprocess._spawner import (
    GroupJoinFailed,
    OwnedDirFailed,
    SpawnerUnavailable,
    SupervisedChild,
)
from dsh.subprocess._spec import Collect, SpawnSpec, StreamSpec
from dsh.subprocess._start_request import spawn_supervised
from dsh.subprocess.errors import SpawnError

__all__ = [
    "Child",
    "check_cwd",
    "new_marker",
    "spawn_child",
    "spawn_error",
    "start_from_loop",
]

_log = logging.getLogger("dsh.subprocess")

_owner: tuple[int, str] | None = None
_SUPERVISED = _procfs._IS_LINUX
"""Spawn through a subreaper supervisor (Linux); elsewhere a plain ``Popen`` in a new session."""

Child = subprocess.Popen[bytes] | SupervisedChild


def _owner_identity() -> str:
    """``<pid>:<create time>`` of the calling process (cached per pid, so forks recompute)."""
    global _owner
    pid = os.getpid()
    if _owner is None or _owner[0] != pid:
        _owner = (pid, f"{pid}:{_procfs.owner_create_time(pid) or 0.0:.3f}")
    return _owner[1]


def new_marker() -> str:
    """A fresh tree marker: ``<owner pid>:<owner start time>:<uuid>``."""
    return format_marker(_owner_identity(), uuid.uuid4().hex)


def check_cwd(cwd: str | os.PathLike[str] | None) -> str | None:
    # No stat here: the program's own start reports a cwd it cannot enter, by errno (two stats
    # of a cold path cost a spawn about 0.1 ms).
    return None if cwd is None else os.fspath(cwd)


def spawn_error(exc: OSError, cwd: str | None) -> SpawnError:
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
            raise spawn_error(exc, cwd) from exc
    if strict:
        raise _limits_error(spec, "no supervisor could be started")
    try:
        make_owned_dir(spec)
    except OSError as exc:
        _log.debug("owned_dir could not be made", exc_info=True)
        failed = OwnedDirFailed(exc.errno, exc.strerror)
        raise spawn_error(failed, cwd) from failed
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
        raise spawn_error(exc, cwd) from exc
    except ValueError as exc:
        raise SpawnError("spawn failed: invalid argument") from exc


def start_from_loop(
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
        fallback=functools.partial(spawn_child, spec, env, cwd),
    )


def spawn_child(spec: SpawnSpec, env: dict[str, str], cwd: str | None) -> Child:
    """The worker-thread half of a spawn: fork and exec, then the requested priority.

    ``spec.nice`` is resolved here (never ``"auto"``). A supervised child has set its own
    priority between fork and exec.
    """
    popen = _popen(spec, env, cwd)
    if isinstance(spec.nice, int) and not isinstance(popen, SupervisedChild):
        lower_priority(popen.pid, spec.nice)
    return popen
