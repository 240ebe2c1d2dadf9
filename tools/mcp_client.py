"""The client side of a test's MCP session, shared by the tests that drive one: in process
(``packages/dsh-tool-subagent/tests/test_mcp.py``) and ``dsh mcp`` as a process
(``tests-e2e/test_mcp_real.py``). Repository tooling: no distribution ships it.

``LogInbox``: the log notifications the client has received, in order. Pass ``inbox.receive`` as
the SDK client's ``logging_callback``; ``await inbox.next()`` takes the oldest one not taken yet,
waiting (bounded) for one to arrive. ``SessionClient``: the SDK's session and its inbox, the base
of each test's client (which adds its own ``call``).
"""

from __future__ import annotations

from dataclasses import dataclass

import anyio
from mcp import ClientSession, types

__all__ = ["LogInbox", "SessionClient"]


class LogInbox:
    """The log notifications received and not yet taken (``logs``, oldest first)."""

    def __init__(self, *, timeout_s: float) -> None:
        self.logs: list[types.LoggingMessageNotificationParams] = []
        self._timeout_s = timeout_s
        self._arrived = anyio.Event()

    async def receive(self, params: types.LoggingMessageNotificationParams) -> None:
        """The client's ``logging_callback``."""
        self.logs.append(params)
        self._arrived.set()

    async def next(self, timeout: float | None = None) -> types.LoggingMessageNotificationParams:  # noqa: ASYNC109
        """The oldest notification not taken yet; ``TimeoutError`` after ``timeout`` seconds (the
        inbox's ``timeout_s`` by default) without one."""
        with anyio.fail_after(self._timeout_s if timeout is None else timeout):
            while not self.logs:
                await self._arrived.wait()
                self._arrived = anyio.Event()
        return self.logs.pop(0)


@dataclass
class SessionClient:
    """An MCP session a test drives: the SDK's ``session`` and the log notifications it received
    (``inbox``, given to the session as its ``logging_callback``)."""

    session: ClientSession
    inbox: LogInbox
