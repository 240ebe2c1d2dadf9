"""The benchmark's loopback model servers, run as a program in a process of their own.

Started by ``run.py`` through ``dsh.subprocess`` (``sys.executable model_servers.py``), so their
CPU time and event-loop work never count against the parent being measured. It serves both fakes
on 127.0.0.1, prints one JSON line ``{"codex": <base_url>, "claude": <base_url>}`` and then
answers control lines on stdin, one reply line each:

- ``wait <token>``: ``yes`` once a model request whose task contains ``<token>`` has arrived
  (``no`` after 30 s);
- ``claude-tool <token>``: queue one Claude ``Bash`` tool_use (a long ``python3`` sleep) for
  ``<token>``;
- ``claude-stall <token>``: queue one Claude stall for ``<token>``.

Codex behaviours are routed by task text: ``BENCH-TOOL`` gets an ``exec_command`` of a long
``python3`` sleep on the first request, ``BENCH-STALL`` stalls, anything else gets ``BENCH-OK``.
stdin EOF stops both servers and exits.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from dsh.subagent_claude_code.testing import Behaviour as ClaudeReply
from dsh.subagent_claude_code.testing import FakeMessagesServer
from dsh.subagent_codex import testing as codex_testing

ANSWER = "BENCH-OK"
# A long-running tool process with a distinctive argv. Not a bare ``sleep``: Claude Code's Bash
# tool refuses standalone long sleeps.
TOOL_COMMAND = 'python3 -c "import time; time.sleep(37)"'
TOOL_MARK = "time.sleep(37)"
WAIT_S = 30.0


class _Seen:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tasks: list[str] = []

    def add(self, task: str | None) -> None:
        if task:
            with self._lock:
                self._tasks.append(task)

    def contains(self, token: str) -> bool:
        with self._lock:
            return any(token in task for task in self._tasks)


def _codex_route(
    seen: _Seen,
) -> Callable[[codex_testing.RecordedRequest], codex_testing.Behaviour | None]:
    def route(request: codex_testing.RecordedRequest) -> codex_testing.Behaviour | None:
        task = request.task
        seen.add(task)
        items = (request.body or {}).get("input") or []
        answered_tool = any(
            isinstance(i, dict) and i.get("type") == "function_call_output" for i in items
        )
        if task and "BENCH-TOOL" in task and not answered_tool:
            arguments = {"cmd": TOOL_COMMAND, "login": False, "yield_time_ms": 120_000}
            return codex_testing.Reply((codex_testing.FunctionCallItem("exec_command", arguments),))
        if task and "BENCH-STALL" in task:
            return codex_testing.Stall((), seconds=60.0)
        return codex_testing.Reply((codex_testing.MessageItem(ANSWER, "final_answer"),))

    return route


def _wait_seen(claude: FakeMessagesServer, seen: _Seen, token: str) -> bool:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if seen.contains(token) or any(token in (r.task or "") for r in claude.requests):
            return True
        time.sleep(0.002)
    return False


def _control(claude: FakeMessagesServer, seen: _Seen, done: threading.Event) -> None:
    try:
        for raw in sys.stdin:
            command, _, token = raw.strip().partition(" ")
            if command == "wait":
                reply = "yes" if _wait_seen(claude, seen, token) else "no"
            elif command == "claude-tool":
                tool_input = {"command": TOOL_COMMAND, "description": "hold"}
                claude.queue_tool_call("Bash", tool_input, match=token)
                reply = "ok"
            elif command == "claude-stall":
                claude.queue_stall(match=token)
                reply = "ok"
            else:
                reply = "error"
            sys.stdout.write(reply + "\n")
            sys.stdout.flush()
    finally:
        done.set()


def _quiet_cancelled(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    # On Python 3.11, stopping the Codex fake cancels stalled handlers, and asyncio's stream
    # callback then reports each CancelledError as "Exception in callback". Expected here.
    if isinstance(context.get("exception"), asyncio.CancelledError):
        return
    loop.default_exception_handler(context)


async def _main() -> None:
    asyncio.get_running_loop().set_exception_handler(_quiet_cancelled)
    seen = _Seen()
    route = _codex_route(seen)
    done = threading.Event()
    with FakeMessagesServer(default=ClaudeReply("text", text=ANSWER)) as claude:
        async with codex_testing.FakeResponsesServer(route=route) as codex:
            print(json.dumps({"codex": codex.base_url, "claude": claude.base_url}), flush=True)
            reader = threading.Thread(target=_control, args=(claude, seen, done), daemon=True)
            reader.start()
            await asyncio.to_thread(done.wait)


if __name__ == "__main__":
    asyncio.run(_main())
