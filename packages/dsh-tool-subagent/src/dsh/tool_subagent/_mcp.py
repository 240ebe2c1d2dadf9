"""``dsh mcp``: serve a profile's tools over MCP stdio (extra ``dsh-tool-subagent[mcp]``).

This module imports without the ``mcp`` SDK so the command can name the extra to install; the
server itself lives in :mod:`dsh.tool_subagent._mcp_server`.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import signal
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["MCP_MISSING", "load_server_module", "main"]

MCP_MISSING = (
    "dsh mcp needs the MCP Python SDK, which is not installed;"
    ' install it with: pip install "dsh-tool-subagent[mcp]"'
)

EXIT_OK, EXIT_MISSING_SDK, EXIT_INTERRUPTED = 0, 1, 130

logger = logging.getLogger("dsh.tool_subagent.mcp")


def load_server_module() -> ModuleType:
    """Import the MCP server module; a missing SDK raises an ``ImportError`` naming the extra."""
    try:
        module = importlib.import_module("dsh.tool_subagent._mcp_server")
    except ImportError as exc:
        if exc.name is not None and (exc.name == "mcp" or exc.name.startswith("mcp.")):
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


async def _serve(server: ModuleType, profile: str | None, cwd: str) -> int:
    loop = asyncio.get_running_loop()
    main_task = asyncio.current_task()
    assert main_task is not None
    terminated = False

    def on_sigterm() -> None:
        nonlocal terminated
        terminated = True
        main_task.cancel("SIGTERM")

    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    try:
        await server.serve_stdio(profile, cwd=cwd)
    except asyncio.CancelledError:
        if not terminated:
            raise
        # The harness was closed (trees exited) on the way out; SIGTERM is a clean stop.
        return EXIT_OK
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGTERM)
    return EXIT_OK


def main(profile: str | None = None, cwd: str | None = None) -> int:
    """Run the MCP stdio server until the client closes the connection; return the exit code.

    ``cwd`` is the subagents' working directory for this connection (default: the server's own
    working directory). An invalid profile raises ``ProfileError`` (the ``dsh`` command exits 2).
    """
    try:
        server = load_server_module()
    except ImportError as exc:
        if str(exc) != MCP_MISSING:
            raise
        print(f"dsh: {exc}", file=sys.stderr)
        return EXIT_MISSING_SDK
    _log_to_stderr()
    workdir = str(Path(cwd).absolute() if cwd else Path.cwd())
    try:
        return asyncio.run(_serve(server, profile, workdir))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
