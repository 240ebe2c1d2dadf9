"""Start ``dsh`` through ``probe.py`` in a fresh process and measure its start-up.

:func:`start_up` runs one command (``version``, ``run`` or ``mcp``) and returns the probe's
report (what ``sys.modules`` held, dsh's own time since the interpreter started) with the
times this side measured from the spawn. ``mcp`` is driven with raw JSON-RPC over stdio, the
way a host starts it: ``initialize``, then ``notifications/initialized`` and ``tools/list``;
once the listing arrives the probe is told (SIGUSR1) to report and end.

The process is started with ``subprocess.Popen``, not ``dsh.subprocess``: the figure is the
time from a plain spawn, and the measuring side must not add its own spawner to it.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROBE = Path(__file__).resolve().parent / "probe.py"
TIMEOUT_S = 60.0
#: What ``dsh mcp`` is asked for; the server answers with the version it speaks.
PROTOCOL_VERSION = "2025-06-18"


@dataclass
class StartUp:
    """One start: the probe's report and the times from the spawn measured by this side."""

    elapsed_s: float  # dsh's own time: the interpreter's start to the spawn / report
    modules: list[str]
    wall_s: float  # the spawn to the report (``run``, ``version``)
    initialize_s: float | None = None  # ``mcp``: the spawn to the initialize response
    tools_s: float | None = None  # ``mcp``: the spawn to the tools/list response
    tools: list[dict[str, Any]] = field(default_factory=list)

    def imported(self, forbidden: str) -> list[str]:
        """The modules in ``modules`` that ``forbidden`` names: a module and its submodules,
        or, ending in ``*``, every module whose name starts with the rest."""
        if forbidden.endswith("*"):
            prefix = forbidden[:-1]
            return [name for name in self.modules if name.startswith(prefix)]
        return [m for m in self.modules if m == forbidden or m.startswith(forbidden + ".")]


class _Lines:
    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = b""

    def next(self, deadline: float) -> bytes:
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("dsh mcp did not answer in time")
            ready, _, _ = select.select([self._fd], [], [], left)
            if ready:
                chunk = os.read(self._fd, 1 << 16)
                if not chunk:
                    raise EOFError("dsh mcp closed stdout")
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def response(self, request_id: int, deadline: float) -> dict[str, Any]:
        while True:
            message: dict[str, Any] = json.loads(self.next(deadline))
            if message.get("id") == request_id and "method" not in message:
                return message


def _send(proc: Any, message: Mapping[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(message).encode() + b"\n")
    proc.stdin.flush()


def _drive_mcp(proc: Any, began: float) -> tuple[float, float, list[Any]]:
    assert proc.stdout is not None
    lines = _Lines(proc.stdout.fileno())
    deadline = time.monotonic() + TIMEOUT_S
    client = {"name": "dsh-startup-probe", "version": "0"}
    params = {"protocolVersion": PROTOCOL_VERSION, "capabilities": {}, "clientInfo": client}
    _send(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params})
    answer = lines.response(1, deadline)
    initialized = time.perf_counter() - began
    assert "result" in answer, answer
    _send(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    _send(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}})
    listing = lines.response(2, deadline)
    listed = time.perf_counter() - began
    assert "result" in listing, listing
    return initialized, listed, list(listing["result"]["tools"])


def library_floor(start: StartUp, *, env: Mapping[str, str]) -> StartUp:
    """The libraries ``start`` imported, imported in a fresh interpreter without dsh (the
    probe's ``floor``): what any program importing them pays before its own code runs."""
    with tempfile.TemporaryDirectory(prefix="dsh-startup-floor-") as scratch:
        listing = Path(scratch) / "modules.json"
        listing.write_text(json.dumps(start.modules), encoding="utf-8")
        return start_up("floor", [], env={**env, "DSH_STARTUP_MODULES": str(listing)})


def start_up(
    command: str, args: list[str], *, env: Mapping[str, str], cwd: str | None = None
) -> StartUp:
    """Run ``probe.py command args`` in a fresh interpreter; ``env`` is its whole environment."""
    with tempfile.TemporaryDirectory(prefix="dsh-startup-") as scratch:
        report_path = Path(scratch) / "report.json"
        full_env = {**env, "DSH_STARTUP_REPORT": str(report_path)}
        began = time.perf_counter()
        proc = subprocess.Popen(  # noqa: TID251 - a plain spawn is what is measured (module doc)
            [sys.executable, str(PROBE), command, *args],
            env=full_env,
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        initialized = listed = None
        tools: list[Any] = []
        try:
            if command == "mcp":
                initialized, listed, tools = _drive_mcp(proc, began)
                proc.send_signal(signal.SIGUSR1)
            _, err = proc.communicate(timeout=TIMEOUT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        wall = time.perf_counter() - began
        if not report_path.is_file():
            raise AssertionError(f"probe {command} wrote no report: {err.decode()[-2000:]}")
        report = json.loads(report_path.read_text(encoding="utf-8"))
    return StartUp(
        elapsed_s=float(report["elapsed_s"]),
        modules=list(report["modules"]),
        wall_s=wall,
        initialize_s=initialized,
        tools_s=listed,
        tools=tools,
    )
