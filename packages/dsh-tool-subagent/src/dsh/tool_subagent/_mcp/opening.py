"""A connection's opening answers (``initialize``, ``tools/list``), given before the SDK loads.

Importing the MCP SDK takes about 0.4 s, and an MCP host does not always wait that long for a
server (docs/mcp.md, "Start-up"). So ``dsh mcp`` builds the harness, answers the handshake and
the tool list from it in plain JSON, and only then loads the SDK's server, in a thread while
the opening goes on; the SDK then takes the connection over (:class:`Opening` holds what it
needs for that: the lines to replay and the response to drop). The answers are the SDK's own
bytes: the same fields, the same key order, the same compact JSON
(``packages/dsh-tool-subagent/tests/test_mcp_opening.py`` compares them with the SDK's).

Only a handshake-era opening is answered here: a first line that is not a well-formed
``initialize`` (a 2026-07-28 client's ``server/discover``, a bad frame) is left to the SDK
whole, as is every request but ``tools/list``.
"""

from __future__ import annotations

import json
import os
import select
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dsh.jobs.tools import JOB_TOOL_NAMES, ToolBase
from dsh.tool_subagent._agent_session import instructions_for, result_schema
from dsh.tool_subagent._contract import Tool
from dsh.tool_subagent._harness import Harness
from dsh.tool_subagent._mcp.stdin import MAX_LINE_BYTES
from dsh.tool_subagent._version import __version__

__all__ = [
    "CAPABILITIES",
    "HANDSHAKE_VERSIONS",
    "NO_DELEGATION_WARNING",
    "SERVER_NAME",
    "Opening",
    "initialize_result",
    "list_tools_result",
    "prepared",
    "wire_annotations",
    "wire_tool",
]

SERVER_NAME = "dsh"
#: The protocol revisions reached by the ``initialize`` handshake, oldest first: the SDK's
#: ``mcp_types.version.HANDSHAKE_PROTOCOL_VERSIONS`` (a test checks they are the same).
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
#: What the SDK's server advertises for dsh's handlers (tools, and ``logging/setLevel``).
CAPABILITIES: Mapping[str, Any] = {"logging": {}, "tools": {"listChanged": False}}
_POLL_S = 0.02
NO_DELEGATION_WARNING = (
    f"dsh mcp: warning: the profile serves no delegation tool (only {', '.join(JOB_TOOL_NAMES)});"
    " add a [[provider]] or install a provider extra"
)


def prepared(profile: str | None) -> Harness:
    """The harness ``dsh mcp`` serves, built; a warning on stderr when it serves no delegation
    tool. Its job store is not open yet (the caller opens it, and closes the harness)."""
    harness = Harness.from_profile(profile)
    if not harness.delegation_tools:
        print(NO_DELEGATION_WARNING, file=sys.stderr, flush=True)
    return harness


def _sorted(fields: Mapping[str, Any]) -> dict[str, Any]:
    # The SDK writes a result model's fields in name order; schemas keep their own order.
    return dict(sorted(fields.items()))


def _schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    # The SDK's result surface declares these keys of a tool's schemas, in this order, and
    # keeps the others after them, in their own order.
    known = {key: schema[key] for key in _SCHEMA_KEYS if key in schema}
    return known | {key: value for key, value in schema.items() if key not in known}


_SCHEMA_KEYS = ("properties", "required", "type")


def wire_annotations(tool: Tool) -> dict[str, bool] | None:
    """A tool's MCP behaviour hints, as on the wire (``readOnlyHint``...), or None."""
    hints = tool.behaviour_hints if isinstance(tool, ToolBase) else None
    if hints is None:
        return None
    wire: dict[str, bool] = {}
    for name, value in hints.items():
        first, *rest = name.split("_")
        wire[first + "".join(part.capitalize() for part in rest) + "Hint"] = value
    return _sorted(wire)


def wire_tool(tool: Tool) -> dict[str, Any]:
    """A harness tool as an MCP tool on the wire: name, description, input schema, its
    answer's schema when it declares one, and its annotations."""
    fields: dict[str, Any] = {
        "name": tool.name,
        "description": tool.description,
        "inputSchema": _schema(tool.input_schema),
    }
    output = result_schema(tool)
    if output is not None:
        fields["outputSchema"] = _schema(output)
    hints = wire_annotations(tool)
    if hints is not None:
        fields["annotations"] = hints
    return _sorted(fields)


def list_tools_result(harness: Harness) -> dict[str, Any]:
    return {"tools": [wire_tool(tool) for tool in harness.tools]}


def initialize_result(harness: Harness, requested: str) -> dict[str, Any]:
    """The ``initialize`` result: the requested revision if it is a handshake one, else the
    newest, as the SDK negotiates."""
    version = requested if requested in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[-1]
    return _sorted(
        {
            "protocolVersion": version,
            "capabilities": CAPABILITIES,
            "serverInfo": {"name": SERVER_NAME, "version": __version__},
            "instructions": instructions_for(harness),
        }
    )


def _is_initialize(message: Any) -> bool:
    """A well-formed handshake ``initialize`` request (anything else is the SDK's to judge)."""
    if not isinstance(message, dict) or message.get("method") != "initialize":
        return False
    params = message.get("params")
    if not isinstance(params, dict) or not isinstance(message.get("id"), int | str):
        return False
    info = params.get("clientInfo")
    return (
        isinstance(params.get("protocolVersion"), str)
        and isinstance(params.get("capabilities"), dict)
        and isinstance(info, dict)
        and isinstance(info.get("name"), str)
        and isinstance(info.get("version"), str)
    )


def _is_tools_list(message: Any) -> bool:
    if not isinstance(message, dict) or message.get("method") != "tools/list":
        return False
    return isinstance(message.get("id"), int | str) and message.get("jsonrpc") == "2.0"


def _frame(request_id: Any, result: Mapping[str, Any]) -> bytes:
    text = json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}, **_COMPACT)
    return text.encode("utf-8") + b"\n"


_COMPACT: dict[str, Any] = {"separators": (",", ":"), "ensure_ascii": False}


@dataclass
class Opening:
    """What was read and answered before the SDK took over.

    ``replay`` is every byte the SDK must still read, in order: the ``initialize`` request
    (its answer, :attr:`answered`, is already sent: the SDK's own must be dropped), the lines
    this module did not answer, and any partial line. ``eof``: stdin closed meanwhile.
    """

    harness: Harness
    replay: bytearray = field(default_factory=bytearray)
    answered: Any = None
    eof: bool = False
    _initialized: bool = False
    _answering: bool = True

    def take(self, line: bytes) -> tuple[bytes | None, bool]:
        """One complete line (without its newline): the frame to send for it, if any, and
        whether the SDK is needed now."""
        message: Any
        try:
            message = json.loads(line) if self._answering else None
        except ValueError:
            message = None
        if not self._initialized and self._answering and _is_initialize(message):
            self._initialized = True
            self.answered = message["id"]
            self.replay += line + b"\n"
            requested = message["params"]["protocolVersion"]
            return _frame(message["id"], initialize_result(self.harness, requested)), False
        if self._initialized and _is_tools_list(message):
            return _frame(message["id"], list_tools_result(self.harness)), True
        self.replay += line + b"\n"
        if not self._initialized:
            self._answering = False  # not a handshake opening: the SDK answers everything
        if isinstance(message, dict) and message.get("method") == "notifications/initialized":
            return None, False
        return None, True

    def serve(
        self,
        fds: tuple[int, int],
        loaded: threading.Event,
        load: Callable[[], None],
        stopped: Callable[[], bool],
    ) -> None:
        """Answer from ``fds`` (stdin, stdout) until ``loaded`` is set, stdin closes (then wait
        for it) or ``stopped()``. ``load`` starts loading the SDK; it is called once, when a
        request first needs it (the tool list was answered, or a request only the SDK
        answers), or at EOF."""
        fd_in, fd_out = fds
        pending = bytearray()
        started = False
        while not loaded.is_set() and not stopped():
            readable, _, _ = select.select([fd_in], [], [], _POLL_S)
            if not readable:
                continue
            chunk = os.read(fd_in, 1 << 16)
            if not chunk:
                self.eof = True
                break
            pending += chunk
            while (end := pending.find(b"\n")) >= 0:
                line = bytes(pending[:end])
                del pending[: end + 1]
                frame, needed = self.take(line)
                if frame is not None:
                    _write_all(fd_out, frame)
                if needed and not started:
                    started = True
                    load()
            if len(pending) > MAX_LINE_BYTES:
                break  # the SDK's reader rejects the line as it always does
        self.replay += pending
        if stopped():
            return
        if not started:
            load()
        while not loaded.wait(_POLL_S) and not stopped():
            pass


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
