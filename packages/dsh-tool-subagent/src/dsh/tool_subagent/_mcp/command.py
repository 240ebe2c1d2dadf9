"""``dsh mcp``: serve a profile's tools over MCP stdio (extra ``dsh-tool-subagent[mcp]``).

This module imports without the ``mcp`` SDK so the command can name the extra to install; the
server itself lives in :mod:`dsh.tool_subagent._mcp.server`.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

from dsh.tool_subagent._mcp.stdin import stdin_is_a_stream

__all__ = ["MCP_MISSING", "load_server_module", "main"]

MCP_MISSING = (
    "dsh mcp needs the MCP Python SDK, which is not installed;"
    ' install it with: pip install "dsh-tool-subagent[mcp]"'
)

EXIT_OK, EXIT_MISSING_SDK, EXIT_INTERRUPTED = 0, 1, 130
# Top-level modules the ``mcp`` extra brings; without the extra (a ``[codex]``-only install)
# the server module's first import of one of them fails.
_EXTRA_MODULES = frozenset({"mcp", "mcp_types", "anyio"})
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

logger = logging.getLogger("dsh.tool_subagent.mcp")


def _missing_extra(exc: ImportError) -> bool:
    top = (exc.name or "").partition(".")[0]
    if isinstance(exc, ModuleNotFoundError) and top in _EXTRA_MODULES:
        return True
    try:
        return importlib.util.find_spec("mcp") is None
    except (ImportError, ValueError):
        return True


def load_server_module() -> ModuleType:
    """Import the MCP server module; a missing SDK raises an ``ImportError`` naming the extra."""
    try:
        module = importlib.import_module("dsh.tool_subagent._mcp.server")
    except ImportError as exc:
        if _missing_extra(exc):
            raise ImportError(MCP_MISSING, name=exc.name) from exc
        raise
    return module


def _log_to_stderr() -> None:
    """Logs go to stderr (fd 2): stdout carries protocol frames only."""
    root = logging.getLogger()
    if not any(getattr(h, "_dsh_mcp", False) for h in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler._dsh_mcp = True  # type: ignore[attr-defined]
        handler.setFormatter(logging.Formatter("dsh mcp: %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
    if root.level == logging.NOTSET or root.level > logging.WARNING:
        root.setLevel(logging.WARNING)


class _Stop:
    """SIGINT and SIGTERM, handled from before serving until the process exits.

    The first signal cancels the serving task (the owner's trees exit, then the harness
    closes); later ones change nothing. Claude Code stops a server with SIGINT and, 100 ms
    later, SIGTERM: the second must not kill the process by its default action mid-teardown.
    The handlers are plain ``signal.signal`` handlers, not loop handlers, because the event
    loop removes its own handlers (restoring the default action) when it closes.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        # A session ran to its end, or was stopped before it began: nothing is left to tear
        # down, so the process may end at once.
        self.served = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[Any] | None = None
        self._previous: dict[int, Any] = {}

    @property
    def exit_code(self) -> int:
        # SIGTERM is how a client closes its server normally; Ctrl-C keeps the shell's 130.
        return EXIT_INTERRUPTED if self.signum == signal.SIGINT else EXIT_OK

    def install(self) -> None:
        for signum in _STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)

    def restore(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()

    def attach(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None:
        self._loop, self._task = loop, task

    def detach(self) -> None:
        self._loop = self._task = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:
            return
        self.signum = signum
        loop, task = self._loop, self._task
        if loop is not None and task is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(task.cancel, "dsh mcp: stop signal")


async def _serve(
    server: ModuleType, profile: str | None, cwd: str, stop: _Stop, opening: Any = None
) -> int:
    task = asyncio.current_task()
    assert task is not None
    stop.attach(asyncio.get_running_loop(), task)
    try:
        if stop.signum is None:
            await server.serve_stdio(profile, cwd=cwd, opening=opening)
        elif opening is not None:
            await opening.harness.aclose()
    except asyncio.CancelledError:
        if stop.signum is None:
            raise
        # The harness was closed (trees exited) on the way out: a stop signal is a clean stop.
    except Exception as exc:
        if stop.signum is None:
            raise
        # A stop right after the handshake can break the SDK's replay of the opening request
        # (an ExceptionGroup of anyio.BrokenResourceError, measured: 12 of 30 stops with no
        # pause after `initialized`). The harness closed on the way out all the same, so it is
        # the same clean stop; a traceback would only delay the exit past the next signal.
        logging.getLogger("dsh.tool_subagent").debug("stopping raised in the SDK", exc_info=exc)
    finally:
        stop.detach()
    return EXIT_OK if stop.signum is None else stop.exit_code


def _exit_now(code: int) -> None:
    """End the process at once: the teardown is done, and interpreter finalization (about
    0.3 s with the SDK loaded) is what made a stopped server outlive its client's grace."""
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def main(profile: str | None = None, cwd: str | None = None, *, exit_process: bool = False) -> int:
    """Run the MCP stdio server until the client closes the connection; return the exit code.

    ``cwd`` is the subagents' working directory for this connection (default: the server's own
    working directory). An invalid profile raises ``ProfileError`` (the ``dsh`` command exits 2).
    With ``exit_process`` (the ``dsh`` command) a session that was served ends the process
    itself, with SIGINT and SIGTERM still handled up to the last instruction; errors before
    serving (a missing SDK, an invalid profile) still return or raise.
    """
    stop = _Stop()
    stop.install()  # before the (slow) SDK import: a stop signal during it ends the run cleanly
    try:
        code = _run(profile, cwd, stop)
    except BaseException:
        stop.restore()
        raise
    if exit_process and stop.served:
        _exit_now(code)
    stop.restore()
    return code


def _sdk_installed() -> bool:
    """Whether the ``mcp`` extra's modules can be imported, without importing them."""
    for name in sorted(_EXTRA_MODULES):
        if name in sys.modules:
            if sys.modules[name] is None:
                return False
            continue
        try:
            if importlib.util.find_spec(name) is None:
                return False
        except (ImportError, ValueError):
            return False
    return True


def _opened(profile: str | None, stop: _Stop) -> tuple[ModuleType, Any]:
    """Answer the connection's opening from the harness while the SDK loads in a thread
    (:mod:`.opening`); return the server module and the opening to hand over."""
    from dsh.tool_subagent._mcp.opening import Opening, prepared

    harness = prepared(profile)
    try:
        harness.open_job_store()  # a store that cannot be used stops the server at once
    except BaseException:
        asyncio.run(harness.aclose())
        raise
    loaded = threading.Event()
    found: list[ModuleType | BaseException] = []

    def load() -> None:
        try:
            found.append(load_server_module())
        except BaseException as exc:  # handed to the main thread
            found.append(exc)
        finally:
            loaded.set()

    def start() -> None:
        threading.Thread(target=load, name="dsh-mcp-sdk", daemon=True).start()

    opening = Opening(harness)
    try:
        opening.serve((0, 1), loaded, start, lambda: stop.signum is not None)
        if stop.signum is None and isinstance(found[0], BaseException):
            raise found[0]
    except BaseException:
        asyncio.run(harness.aclose())
        raise
    return (found[0] if found else None), opening  # type: ignore[return-value]


def _run(profile: str | None, cwd: str | None, stop: _Stop) -> int:
    opening: Any = None
    try:
        if _sdk_installed() and stdin_is_a_stream(0):
            server, opening = _opened(profile, stop)
        else:
            server = load_server_module()
    except ImportError as exc:
        if str(exc) != MCP_MISSING:
            raise
        print(f"dsh: {exc}", file=sys.stderr)
        return EXIT_MISSING_SDK
    if stop.signum is not None:  # stopped before serving: nothing was started
        if opening is not None:
            asyncio.run(opening.harness.aclose())
        stop.served = True
        return stop.exit_code
    _log_to_stderr()
    workdir = str(Path(cwd).absolute() if cwd else Path.cwd())
    try:
        code = asyncio.run(_serve(server, profile, workdir, stop, opening))
        stop.served = True
        return code
    except asyncio.CancelledError:
        # The stop signal's cancel landed as the server was returning by itself (stdin EOF).
        if stop.signum is None:
            raise
        stop.served = True
        return stop.exit_code
