"""Our implementation of the SDK's public ``Transport`` ABC: dsh owns the CLI process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from claude_agent_sdk import CLIConnectionError, CLIJSONDecodeError, ProcessError, Transport

from dsh.subagent.kit import ActivityStamp, CloseOnce
from dsh.subprocess import (
    BoundedLines,
    DroppingReader,
    LineTooLong,
    ManagedProcess,
    ProcessOutcome,
    SpawnSpec,
    SubprocessRuntime,
)

__all__ = ["DshTransport"]

_log = logging.getLogger("dsh.subagent_claude_code")

MAX_LINE_BYTES = 64 * 1024 * 1024
"""One stdout frame may be this large (the asyncio ``readline()`` default of 64 KiB is not)."""
_EOF_AFTER_EXIT_S = 0.5
"""How long stdout may stay open after the CLI exited (a descendant holding the pipe)."""

_WARM_INIT_ID = "dsh_warm_initialize"
"""The request id of a warm process's own ``initialize`` (the SDK's are ``req_<n>_<hex>``)."""

ControlHandler = Callable[[dict[str, Any]], dict[str, Any] | None]


_STREAM_EVENT = b'{"type":"stream_event"'


def _is_retry_notice(message: dict[str, Any]) -> bool:
    """The CLI's ``system`` / ``api_retry`` line: the product waiting to retry, not activity.

    By default the CLI retries a failed request 10 times (about 180 s) and, against an endpoint
    that accepts and never answers, each attempt waits ``API_TIMEOUT_MS`` (600 s): were its
    retry notices activity, the caller's stall limit could never end that run.
    """
    return message.get("type") == "system" and message.get("subtype") == "api_retry"


class DshTransport(Transport):
    """Spawns the CLI through ``dsh.subprocess``; ``close()`` starts the SIGTERM-first ladder.

    ``on_control`` may answer a CLI control request itself (it returns the response payload);
    the request is then never shown to the SDK. ``on_spawned`` runs once the CLI is live,
    ``on_prompt_sent`` once the SDK has written the first user message (the handshake is done).
    """

    def __init__(
        self,
        spec: SpawnSpec,
        runtime: SubprocessRuntime,
        *,
        on_control: ControlHandler,
        on_spawned: Callable[[ManagedProcess], None],
        on_prompt_sent: Callable[[], None],
    ) -> None:
        self._spec = spec
        self._runtime = runtime
        self._on_control = on_control
        self._on_spawned = on_spawned
        self._on_prompt_sent = on_prompt_sent
        self.process: ManagedProcess | None = None
        self.spawn_attempted = False
        self._write_lock = asyncio.Lock()
        self._ready = False
        self._stdin_closed = False
        self._stopped_by_us = False
        self._prompt_sent = False
        self._eof_task: asyncio.Task[None] | None = None
        self._closed = False
        self._closing = CloseOnce()
        self.close_failure: BaseException | None = None
        self._lines: BoundedLines | None = None
        self._line_iter: AsyncIterator[bytes] | None = None
        self._early: list[dict[str, Any]] = []
        self.activity = ActivityStamp()
        """Moved by every stdout line read from the CLI (the run's ``last_activity``)."""

    # ---- ladder (sync, usable from cancel()) ----------------------------------------------

    @property
    def stopped_by_us(self) -> bool:
        return self._stopped_by_us

    @property
    def outcome(self) -> ProcessOutcome | None:
        return None if self.process is None else self.process.outcome

    def terminate(self) -> None:
        """Start the ladder now (SIGTERM to the whole tree, SIGKILL after the grace)."""
        self._stopped_by_us = True
        if self.process is not None:
            self.process.terminate()

    # ---- Transport ------------------------------------------------------------------------

    async def connect(self) -> None:
        if self.process is not None:
            return
        if self._stopped_by_us:
            raise CLIConnectionError("the run was stopped before the CLI started")
        self.spawn_attempted = True  # from here on the spawn owns ``spec.owned_dir``
        process = await self._runtime.spawn(self._spec)
        self.process = process
        if isinstance(process.stdout, DroppingReader):
            # Before anyone reads: a stream_event line is activity only (see ``_parse``), so it
            # is dropped as it arrives and wakes no reader.
            process.stdout.drop_lines(_STREAM_EVENT, self.activity.touch, MAX_LINE_BYTES)
        self._ready = True
        self._eof_task = asyncio.get_running_loop().create_task(self._eof_after_exit(process))
        self._on_spawned(process)

    async def write(self, data: str) -> None:
        async with self._write_lock:
            process = self.process
            if not self._ready or process is None or process.stdin is None or self._stdin_closed:
                raise CLIConnectionError("the CLI's stdin is not open")
            if process.outcome is not None:
                raise CLIConnectionError("the CLI has exited")
            try:
                process.stdin.write(data.encode("utf-8"))
                await process.stdin.drain()
            except (OSError, RuntimeError) as error:
                self._ready = False
                raise CLIConnectionError("writing to the CLI's stdin failed") from error
        if not self._prompt_sent and _is_user_message(data):
            self._prompt_sent = True
            self._on_prompt_sent()

    async def end_input(self) -> None:
        async with self._write_lock:
            self._close_stdin()

    def is_ready(self) -> bool:
        return self._ready

    def read_messages(self) -> AsyncIterator[dict[str, Any]]:
        return self._read()

    async def close(self) -> None:
        """Idempotent: ladder, then whole-tree exit. Never raises a teardown failure.

        Both the SDK (when its query ends) and the run's ``aclose()`` call this. The process is
        closed once (``CloseOnce``), so an interrupted SDK close cannot cut it short. A failure is
        kept in :attr:`close_failure` for the run to report: raised into the SDK, it would turn a
        teardown failure after a success result into a failed query.
        """
        self._ready = False
        self.terminate()
        if self.process is None:
            return
        failure = await self._closing.run(self._close_process)
        if failure is not None:
            self.close_failure = failure

    async def _close_process(self) -> None:
        assert self.process is not None
        try:
            await self.process.aclose()
        finally:
            await self._stop_tasks()
            self._closed = True

    # ---- internals ------------------------------------------------------------------------

    def _close_stdin(self) -> None:
        self._stdin_closed = True
        process = self.process
        if process is not None and process.stdin is not None and not process.stdin.is_closing():
            process.stdin.close()

    def _stdout_lines(self) -> tuple[BoundedLines, AsyncIterator[bytes]]:
        """stdout's one line reader: ``preinitialize`` and ``_read`` share its buffer."""
        process = self.process
        if process is None or process.stdout is None:
            raise CLIConnectionError("not connected")
        if self._lines is None or self._line_iter is None:
            self._lines = BoundedLines(process.stdout, MAX_LINE_BYTES)
            self._line_iter = aiter(self._lines)
        return self._lines, self._line_iter

    async def preinitialize(self, request: dict[str, Any]) -> None:
        """A warm process: send ``request`` (the SDK's own ``initialize``) before any run.

        Returns once the CLI answered it with success; frames that came before the answer are
        kept and yielded first by ``read_messages()``. The run's SDK query sends its own
        ``initialize`` later, which the CLI answers again at once (measured: about 10 ms, against
        about 450 ms for the first one, which loads the CLI's tools, plugins and settings).
        """
        line_iter = self._stdout_lines()[1]
        frame = {"type": "control_request", "request_id": _WARM_INIT_ID, "request": request}
        await self.write(json.dumps(frame) + "\n")
        while True:
            try:
                line = await anext(line_iter)
            except StopAsyncIteration:
                raise CLIConnectionError("the CLI ended before answering initialize") from None
            except LineTooLong:
                raise CLIJSONDecodeError(
                    "<oversized stdout frame>", ValueError("frame too large")
                ) from None
            message = self._parse(line)
            if message is None:
                continue
            response = message.get("response")
            if (
                message.get("type") == "control_response"
                and isinstance(response, dict)
                and response.get("request_id") == _WARM_INIT_ID
            ):
                if response.get("subtype") != "success":
                    raise CLIConnectionError("the CLI refused initialize")
                return
            self._early.append(message)

    async def _read(self) -> AsyncIterator[dict[str, Any]]:
        process = self.process
        lines, line_iter = self._stdout_lines()
        assert process is not None
        early, self._early = self._early, []
        for frame in early:
            if not await self._intercept(frame):
                yield frame
        try:
            async for line in line_iter:
                message = self._parse(line)
                if message is not None and not await self._intercept(message):
                    yield message
        except LineTooLong:
            raise CLIJSONDecodeError(
                "<oversized stdout frame>", ValueError("frame too large")
            ) from None
        if lines.tail.strip():
            with contextlib.suppress(CLIJSONDecodeError):
                message = self._parse(lines.tail)
                if message is not None and not await self._intercept(message):
                    yield message
        outcome = await process.wait()
        if self._stopped_by_us:
            return  # our own ladder: no ProcessError, or the SDK logs an ERROR for the 143
        if outcome.exit_code == 0:
            return
        code = outcome.exit_code if outcome.exit_code is not None else -_signum(outcome.signal)
        raise ProcessError("Command failed", exit_code=code)

    def _parse(self, line: bytes) -> dict[str, Any] | None:
        text = line.strip()
        if not text or not text.startswith(b"{") or text.startswith(_STREAM_EVENT):
            # A stream_event line (one per model SSE event) is activity only: nothing reads its
            # content, so it is neither parsed here nor handed to the SDK. Most never get here:
            # stdout drops them as they arrive (``connect``); this is for one that came first.
            self.activity.touch()
            return None
        try:
            data = json.loads(text)
        except ValueError as error:
            # Never let raw product text into an exception message (the SDK logs it at ERROR).
            _log.debug("undecodable CLI frame", exc_info=True)
            raise CLIJSONDecodeError("<undecodable stdout frame>", error) from None
        if not isinstance(data, dict):
            self.activity.touch()
            return None
        if not _is_retry_notice(data):
            self.activity.touch()
        return data

    async def _intercept(self, message: dict[str, Any]) -> bool:
        if message.get("type") != "control_request":
            return False
        request = message.get("request")
        if not isinstance(request, dict):
            return False
        answer = self._on_control(request)
        if answer is None:
            return False
        response = {
            "type": "control_response",
            "response": {
                "subtype": "success",
                "request_id": message.get("request_id"),
                "response": answer,
            },
        }
        with contextlib.suppress(CLIConnectionError):
            await self.write(json.dumps(response) + "\n")
        return True

    async def _eof_after_exit(self, process: ManagedProcess) -> None:
        await process.wait()
        await asyncio.sleep(_EOF_AFTER_EXIT_S)
        if process.stdout is not None and not process.stdout.at_eof():
            process.stdout.feed_eof()

    async def _stop_tasks(self) -> None:
        task = self._eof_task
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def _is_user_message(data: str) -> bool:
    try:
        frame = json.loads(data)
    except ValueError:
        return False
    return isinstance(frame, dict) and frame.get("type") == "user"


def _signum(name: str | None) -> int:
    import signal

    try:
        return int(signal.Signals[name]) if name else 0
    except KeyError:
        return 0
