"""``ScriptedModelServer`` on its own: queue order, ``match``, ``route``, default, views."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from dsh.subagent.testing import MAX_RECORDED_REQUESTS, ModelRequest, ScriptedModelServer


@dataclass(frozen=True)
class TaskRequest(ModelRequest):
    @property
    def task(self) -> str | None:
        return self.body.get("task") if isinstance(self.body, dict) else None


class Script(ScriptedModelServer[str, TaskRequest]):
    """The script alone: replies are plain strings and nothing is served over HTTP."""

    def queue_text(self, text: str, *, match: str | None = None) -> None:
        self.queue(text, match=match)

    def queue_tool_call(
        self, name: str, arguments: Mapping[str, Any], *, match: str | None = None
    ) -> None:
        self.queue(f"call {name}", match=match)

    def queue_http_error(
        self, status: int, message: str = "fake error", *, match: str | None = None
    ) -> None:
        self.queue(f"HTTP {status}", match=match)

    def queue_drop(self, partial_text: str = "partial", *, match: str | None = None) -> None:
        self.queue("drop", match=match)

    def queue_stall(self, *, seconds: float | None = None, match: str | None = None) -> None:
        self.queue("stall", match=match)

    def release_stalls(self) -> None:
        pass

    def answer(self, task: str | None) -> str | None:
        return self._answer(_request(task))


def _request(task: str | None, path: str = "/model") -> TaskRequest:
    return TaskRequest("POST", path, "", {}, {"task": task}, b"")


def test_the_queue_is_ordered_and_match_keeps_a_reply_for_its_task() -> None:
    script = Script()
    script.queue("for beta", match="BETA")
    script.queue("one", "two")
    assert script.pending == 3
    assert script.answer("ALPHA task") == "one"  # the BETA reply is skipped, not used up
    assert script.answer("the BETA task") == "for beta"
    assert script.answer(None) == "two"
    assert script.answer("BETA again") is None  # dry, no default
    assert script.pending == 0
    assert [r.task for r in script.requests] == ["ALPHA task", "the BETA task", None, "BETA again"]


def test_route_comes_first_is_never_used_up_and_default_ends_a_dry_script() -> None:
    def route(request: TaskRequest) -> str | None:
        return "routed" if request.task == "ROUTE" else None

    script = Script(default="fallback", route=route)
    script.queue("queued")
    assert [script.answer("ROUTE"), script.answer("ROUTE")] == ["routed", "routed"]
    assert script.pending == 1
    assert [script.answer("x"), script.answer("y")] == ["queued", "fallback"]


def test_requests_are_the_model_calls_and_all_requests_everything_bounded() -> None:
    script = Script()
    script._record(_request(None, "/other"), model_call=False)
    script.answer("t")
    assert [r.path for r in script.all_requests] == ["/other", "/model"]
    assert [r.path for r in script.requests] == ["/model"]
    for index in range(MAX_RECORDED_REQUESTS + 5):
        script.answer(f"n{index}")
    assert len(script.requests) == len(script.all_requests) == MAX_RECORDED_REQUESTS
    assert script.requests[-1].task == f"n{MAX_RECORDED_REQUESTS + 4}"  # the newest are kept


async def test_wait_for_requests_wakes_on_a_request_from_another_thread() -> None:
    script = Script()
    waiting = asyncio.ensure_future(script.wait_for_requests(2, timeout=10))
    await asyncio.sleep(0)
    worker = threading.Thread(target=lambda: [script.answer("a"), script.answer("b")])
    worker.start()
    seen = await waiting
    worker.join(5)
    assert [r.task for r in seen] == ["a", "b"]
    with pytest.raises(TimeoutError):
        await script.wait_for_requests(3, timeout=0.05)
    assert script._waiters == []  # every waiter is removed, a timed-out one too
