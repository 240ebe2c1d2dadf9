"""A Codex run's start-up handshake, driven by the provider: ``initialize``, the account check,
``thread/start``, then ``turn/start`` (publication).
"""

from __future__ import annotations

import asyncio
from typing import Any

from dsh.subagent import ResolvedStartRequest
from dsh.subagent_codex._auth import login_stamp
from dsh.subagent_codex._mapping import turn_start_params
from dsh.subagent_codex._reader import RunReader
from dsh.subagent_codex._turn import StartupFailure
from dsh.subagent_codex._wire import RpcError, WireClosed
from dsh.subprocess import ManagedProcess, current_trace_context

__all__ = ["Handshake"]

_LOCAL_REPLY_S = 30.0
"""How long an account exchange may take (Codex answers from its own state in milliseconds)."""
_TURN_START_REPLY_S = 30.0
"""How long the ``turn/start`` reply may take. Codex answers it at once (in milliseconds, before
the model is called), but it drops a request it cannot deserialize without any answer, and the
run would then wait at ``turn-start`` forever. This bounds one protocol exchange, not the run:
the turn itself still has no wall-clock limit of ours."""


class Handshake(RunReader):
    """The start-up steps of a Codex run, before and at its publication."""

    # -- startup (driven by the provider) --------------------------------------------------
    async def initialize(self, client_info: dict[str, Any], capabilities: dict[str, Any]) -> None:
        """initialize → initialized: all a warm process does before a request takes it."""
        self._reader = asyncio.get_running_loop().create_task(self._read())
        init = await self._call(
            "initialize", {"clientInfo": client_info, "capabilities": capabilities}
        )
        if init is None:
            raise StartupFailure("initialize")
        self._send_or_fail(lambda: self._wire.notify("initialized"))
        self._stage = "thread-start"

    async def authenticate(self, login_key: str | None) -> None:
        """``account/read``; log ``login_key`` in when an OpenAI account is required and missing.

        Raises ``StartupFailure("auth", "unauthorized")`` when one is required and there is no
        account and no key: an unauthenticated turn would wait forever (see ``_auth``).
        """
        self._stage = "auth"
        state = await self._call_bounded("account/read", {"refreshToken": True})
        if state is None:
            raise StartupFailure("auth")
        if state.get("account") is not None or state.get("requiresOpenaiAuth") is not True:
            self._stage = "thread-start"
            return
        if not login_key:
            raise StartupFailure("auth", "unauthorized")
        login = {"type": "apiKey", "apiKey": login_key}
        reply = await self._call_bounded("account/login/start", login)
        if reply is None or reply.get("type") != "apiKey":
            raise StartupFailure("auth", "unauthorized")
        self._stage = "thread-start"

    async def _call_bounded(self, method: str, params: dict[str, Any]) -> dict[str, Any] | None:
        """``_call`` for an exchange Codex answers locally: a silent product cannot hold it."""
        try:
            async with asyncio.timeout(_LOCAL_REPLY_S):
                return await self._call(method, params)
        except TimeoutError as exc:
            raise StartupFailure(self._stage, "timeout") from exc

    def warm_usable(self) -> bool:
        """Thread started, not taken, and nothing has ended it since (a warm process's check)."""
        return (
            self._thread_id is not None
            and not self._published
            and not self._dead
            and not self._wire.closed
            and self._proc.outcome is None
            and (self._auth is None or login_stamp(self._auth.home) == self._auth.stamp)
        )

    @property
    def process(self) -> ManagedProcess:
        return self._proc

    async def start_thread(self, thread: dict[str, Any]) -> None:
        """thread/start after ``initialize``; raise ``StartupFailure`` on any problem."""
        if self._startup_error is not None:
            raise self._startup_error
        started = await self._call("thread/start", thread)
        thread_obj = started.get("thread") if started else None
        thread_id = thread_obj.get("id") if isinstance(thread_obj, dict) else None
        if (
            not isinstance(thread_id, str)
            or not thread_id
            or not isinstance(thread_obj, dict)
            or thread_obj.get("ephemeral") is not True
        ):
            raise StartupFailure("thread-start")
        if self._startup_error is not None:
            # The reader failed on a frame that arrived in the same read as this reply.
            raise self._startup_error
        self._thread_id = thread_id

    def begin_turn(self, request: ResolvedStartRequest) -> None:
        """Publish: send ``turn/start``; its reply and early frames are handled by the reader."""
        self._published = True
        self._stage = "turn-start"
        self._early = []
        params = turn_start_params(self._thread_id, request)
        try:
            # The turn continues the delegation's trace when one is current (docs/observability.md).
            trace = current_trace_context()
            self._wire.request_cb("turn/start", params, self._on_turn_started, trace)
        except WireClosed as exc:
            self._fail("turn-start", cause=exc)
            return
        self._turn_start_timer = asyncio.get_running_loop().call_later(
            _TURN_START_REPLY_S, self._turn_start_unanswered
        )

    def _turn_start_unanswered(self) -> None:
        if self._turn_id is None:
            self._fail("turn-start", cause=TimeoutError("no turn/start reply"))

    async def _call(self, method: str, params: dict[str, Any]) -> dict[str, Any] | None:
        stage = self._stage
        try:
            return await self._wire.request(method, params)
        except (RpcError, WireClosed) as exc:
            if self._startup_error is not None:
                raise self._startup_error from exc
            raise StartupFailure(stage) from exc

    def _send_or_fail(self, send: Any) -> None:
        try:
            send()
        except WireClosed as exc:
            raise StartupFailure(self._stage) from exc
