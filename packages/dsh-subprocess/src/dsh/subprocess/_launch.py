"""``launch``: spawn a ``SpawnSpec`` (``_spawn``) and adopt the child as a ``ManagedProcess``."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import logging
from collections.abc import Callable
from concurrent.futures import Future

from dsh.subprocess._contention import contention
from dsh.subprocess._env import build_child_env
from dsh.subprocess._owned_dir import remove_owned_dir
from dsh.subprocess._process import (
    ManagedProcess,
    abort_start,
    finish_despite_cancel,
    start_process,
)
from dsh.subprocess._procfs import TREE_MARKER_ENV, read_info
from dsh.subprocess._spawn import (
    Child,
    check_cwd,
    new_marker,
    spawn_child,
    spawn_error,
    start_from_loop,
)
from dsh.subprocess._spawner import OwnedDirFailed, SupervisedChild
from dsh.subprocess._spec import SpawnSpec
from dsh.subprocess._trace_context import apply_trace_context
from dsh.subprocess._tree import Tree
from dsh.subprocess._workers import offload, submit

__all__ = ["launch"]

_log = logging.getLogger("dsh.subprocess")


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
    cwd = check_cwd(spec.cwd)
    started_at = contention.start_nice() if spec.nice == "auto" else spec.nice
    # Nice 0 asks for nothing: a child never runs above the caller's priority anyway, and asking
    # costs the supervisor a fork instead of a vfork.
    resolved = dataclasses.replace(spec, nice=started_at or None)
    job: Future[Child] | None = None
    spawning = start_from_loop(resolved, env, cwd)
    if spawning is None:
        job = submit(spawn_child, resolved, env, cwd)
        spawning = asyncio.wrap_future(job)
    try:
        popen = await asyncio.shield(spawning)
    except OSError as exc:  # from the loop-side start (the worker-thread one maps its own)
        _log.debug("spawn failed", exc_info=True)
        raise spawn_error(exc, cwd) from exc
    except asyncio.CancelledError:
        if job is not None and job.cancel():
            raise  # still queued: no fork happened
        # The fork may already have happened: finish it, then take the child down with the
        # ordinary half-started path, so a cancelled spawn never leaves a process behind.
        late = await _finish_spawn(spawning)
        if late is not None:
            abort_start(_adopt(late, spec, marker, loop, on_spawned, on_gone))
        raise
    proc = _adopt(popen, spec, marker, loop, on_spawned, on_gone)
    if spec.nice == "auto":
        if spec.busy:
            contention.busy(proc, started_at=started_at or 0)
        else:
            contention.started_idle(proc, started_at or 0)
    await start_process(proc)
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
