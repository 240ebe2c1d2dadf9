"""A loopback Anthropic Messages API for keyless runs of the real Claude Code CLI.

It scripts like every dsh fake model server (``dsh.subagent.testing.ScriptedModelServer``): an
ordered queue of replies, ``match=`` per task, an optional ``route``, a ``default``, then an HTTP
500.
"""

from __future__ import annotations

import json
import os
import re
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dsh.subagent.testing import (
    NO_REPLY_MESSAGE,
    ModelRequest,
    ModelRequestHandler,
    ThreadedModelServer,
)
from dsh.subagent_claude_code.config import CLAUDE_CREDENTIAL_ENV

__all__ = ["Behaviour", "FakeMessagesServer", "RecordedRequest", "hermetic_env"]

_DEFAULT_MODEL = "claude-sonnet-5-5"
_USAGE = {"input_tokens": 10, "output_tokens": 5}
_NOT_FOUND = {"type": "error", "error": {"type": "not_found_error", "message": "no"}}
_MAX_TRICKLE_S = 10.0
"""The longest pause between two words of a ``trickle``."""


@dataclass(frozen=True, slots=True)
class Behaviour:
    """One scripted reply: ``text``, ``tool_use``, ``http_error``, ``drop``, ``stall``, ``trickle``.

    A ``stall`` lasts ``seconds`` when set, else until ``release_stalls()`` or ``close()``. A
    ``trickle`` streams ``text`` one word at a time, one every ``seconds`` (default 1): a slow
    model that never stops talking.
    """

    kind: Literal["text", "tool_use", "http_error", "drop", "stall", "trickle"]
    text: str = ""
    tool_name: str = ""
    tool_input: Mapping[str, Any] = field(default_factory=dict)
    status: int = 0
    body: str = ""
    seconds: float | None = None


@dataclass(frozen=True)
class RecordedRequest(ModelRequest):
    """One request as the server saw it (see ``ModelRequest``: ``body`` is the parsed JSON)."""

    @property
    def stream(self) -> bool:
        return bool(self.body and self.body.get("stream"))

    @property
    def model(self) -> str | None:
        value = (self.body or {}).get("model")
        return value if isinstance(value, str) else None

    @property
    def task(self) -> str | None:
        """The last text block of the first user message (where Claude Code puts the task)."""
        return _task_of(self.body)

    @property
    def tool_results(self) -> list[str]:
        """The text of every ``tool_result`` block in the conversation, in order (what a host
        model scripted from the tool results it has been sent reads)."""
        return [
            _text_of(block.get("content"))
            for message in (self.body or {}).get("messages") or []
            if isinstance(message, dict)
            and message.get("role") == "user"
            and isinstance(message.get("content"), list)
            for block in message["content"]
            if isinstance(block, dict) and block.get("type") == "tool_result"
        ]

    @property
    def answers_tool(self) -> bool:
        """True when the last message is a user message carrying a ``tool_result`` block."""
        messages = (self.body or {}).get("messages") or []
        if not messages or not isinstance(messages[-1], dict):
            return False
        last = messages[-1]
        content = last.get("content")
        return (
            last.get("role") == "user"
            and isinstance(content, list)
            and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
        )


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else []
    return "\n".join(str(part.get("text", "")) for part in parts if isinstance(part, dict))


def _task_of(body: dict[str, Any] | None) -> str | None:
    for message in (body or {}).get("messages") or []:
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        texts = [
            b.get("text")
            for b in content or []
            if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        ]
        return texts[-1] if texts else None
    return None


class FakeMessagesServer(ThreadedModelServer[Behaviour, RecordedRequest]):
    """An Anthropic Messages API on 127.0.0.1, in a background thread.

    Answers ``POST /v1/messages`` (with or without ``?beta=true``) with scripted replies
    (``Behaviour``): ``queue(...)`` or the ``queue_*`` helpers (each takes ``match=``),
    ``route=`` and ``default=`` as ``ScriptedModelServer`` describes. Streaming requests get SSE,
    the CLI's non-streaming fallback gets plain JSON. ``requests`` lists the ``/v1/messages``
    calls. Use as a context manager (sync or async) or call :meth:`start` and :meth:`close`.
    """

    def __init__(
        self,
        *,
        default: Behaviour | None = None,
        route: Callable[[RecordedRequest], Behaviour | None] | None = None,
        usage: Mapping[str, int] | None = None,
    ) -> None:
        super().__init__(default=default, route=route)
        self.usage: dict[str, int] = dict(_USAGE if usage is None else usage)
        """The Messages API ``usage`` every reply reports (``output_tokens`` also in the delta)."""
        self.headers: dict[str, str] = {}
        """Extra response headers on every answer (an HTTP error's too): the account's rate-limit
        headers the real endpoint sends (``anthropic-ratelimit-unified-status``, ...), or
        ``retry-after``. An error answer sends ``x-should-retry: false`` unless this names
        ``x-should-retry`` itself (``"true"`` lets the CLI retry under its own settings)."""

    # ---- scripting helpers (the names every dsh fake model server offers) ------------------

    def queue_text(self, text: str, *, match: str | None = None) -> None:
        """An answer: one text block."""
        self.queue(Behaviour("text", text=text), match=match)

    def queue_tool_call(
        self, name: str, arguments: Mapping[str, Any], *, match: str | None = None
    ) -> None:
        """A ``tool_use`` block calling ``name`` with ``arguments`` as its input."""
        self.queue(Behaviour("tool_use", tool_name=name, tool_input=dict(arguments)), match=match)

    def queue_http_error(
        self, status: int, message: str = "fake error", *, match: str | None = None
    ) -> None:
        """An HTTP error with an Anthropic-shaped JSON error body carrying ``message``."""
        self.queue(Behaviour("http_error", status=status, body=message), match=match)

    def queue_drop(self, partial_text: str = "partial", *, match: str | None = None) -> None:
        """Send the start of an answer, then close the connection mid-stream."""
        self.queue(Behaviour("drop", text=partial_text), match=match)

    def queue_stall(self, *, seconds: float | None = None, match: str | None = None) -> None:
        """Accept the request and go silent (for ``seconds``, or until released or closed)."""
        self.queue(Behaviour("stall", seconds=seconds), match=match)

    def queue_trickle(
        self, text: str, *, interval_s: float = 1.0, match: str | None = None
    ) -> None:
        """An answer streamed one word every ``interval_s`` (a slow, live model)."""
        self.queue(Behaviour("trickle", text=text, seconds=interval_s), match=match)


class _Handler(ModelRequestHandler):
    fake: FakeMessagesServer

    def do_HEAD(self) -> None:
        self._recorded(body=False)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def do_GET(self) -> None:
        self._recorded(body=False)
        self.send_json(404, _NOT_FOUND)

    def do_POST(self) -> None:
        # Taken before the request is recorded: a release_stalls() called once the request is
        # seen (wait_for_requests) must end this stall, even if it swaps the event before the
        # stall begins to wait.
        released = self.fake.stalls_released()
        record = self._recorded()
        if record is None:
            self.send_json(404, _NOT_FOUND)
            return
        behaviour = self.fake._answer(record)
        model = record.model or _DEFAULT_MODEL
        if behaviour is None:
            self.send_json(500, _error_body(500, NO_REPLY_MESSAGE))
        elif behaviour.kind == "http_error":
            self.send_json(behaviour.status, _error_body(behaviour.status, behaviour.body))
        elif behaviour.kind == "stall":
            released.wait(behaviour.seconds)
            self.close_connection = True
        elif behaviour.kind == "drop":
            self._drop(record.stream, behaviour, model)
        elif behaviour.kind == "trickle" and record.stream:
            self._trickle(behaviour, model, released)
        elif record.stream:
            self._sse(list(_events(behaviour, model, self.fake.usage)))
        else:
            self.send_json(200, _message(behaviour, model, self.fake.usage))

    def _recorded(self, *, body: bool = True) -> RecordedRequest | None:
        """The request as recorded; a ``POST /v1/messages`` is returned for the script to
        answer, anything else is recorded as it is and gives ``None``."""
        record = self.read_request(RecordedRequest, body=body)
        if self.command == "POST" and record.path.rstrip("/") == "/v1/messages":
            return record
        self.fake._record(record, model_call=False)
        return None

    def _sse_head(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.send_extra_headers(200)
        self.end_headers()

    def send_extra_headers(self, status: int) -> None:
        if status >= 400 and "x-should-retry" not in self.fake.headers:
            self.send_header("x-should-retry", "false")
        for name, value in self.fake.headers.items():
            self.send_header(name, value)

    def _sse(self, events: list[tuple[str, dict[str, Any]]]) -> None:
        self._sse_head()
        self.wfile.write(b"".join(_frame(name, data) for name, data in events))
        self.wfile.flush()
        self.close_connection = True

    def _trickle(self, behaviour: Behaviour, model: str, released: threading.Event) -> None:
        """The text block's events with one ``text_delta`` per word, ``seconds`` apart."""
        interval = min(max(behaviour.seconds or 1.0, 0.0), _MAX_TRICKLE_S)
        events = list(_events(Behaviour("text", text=behaviour.text), model, self.fake.usage))
        self._sse_head()
        for name, data in events[:2]:  # message_start, content_block_start
            self.wfile.write(_frame(name, data))
        for index, word in enumerate(re.findall(r"\S+\s*", behaviour.text)):
            if index and released.wait(interval):
                break
            delta = {"type": "text_delta", "text": word}
            self.wfile.write(
                _frame(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": 0, "delta": delta},
                )
            )
            self.wfile.flush()
        self.wfile.write(b"".join(_frame(n, d) for n, d in events[3:]))
        self.wfile.flush()
        self.close_connection = True

    def _drop(self, stream: bool, behaviour: Behaviour, model: str) -> None:
        if stream:
            self._sse_head()
            partial = Behaviour("text", text=behaviour.text or "partial")
            events = list(_events(partial, model, self.fake.usage))
            self.wfile.write(b"".join(_frame(n, d) for n, d in events[:3]))
            self.wfile.flush()
        self.close_connection = True
        self.connection.shutdown(2)


FakeMessagesServer.handler = _Handler  # defined below the server it serves


def _frame(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def _error_body(status: int, message: str) -> dict[str, Any]:
    kind = {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        429: "rate_limit_error",
        529: "overloaded_error",
    }.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def _blocks(behaviour: Behaviour) -> tuple[list[dict[str, Any]], str]:
    if behaviour.kind == "tool_use":
        block = {
            "type": "tool_use",
            "id": f"toolu_{uuid.uuid4().hex[:20]}",
            "name": behaviour.tool_name,
            "input": dict(behaviour.tool_input),
        }
        return [block], "tool_use"
    return [{"type": "text", "text": behaviour.text}], "end_turn"


def _message(behaviour: Behaviour, model: str, usage: Mapping[str, int]) -> dict[str, Any]:
    blocks, stop = _blocks(behaviour)
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": dict(usage),
    }


def _events(
    behaviour: Behaviour, model: str, usage: Mapping[str, int]
) -> Iterator[tuple[str, dict[str, Any]]]:
    message = _message(behaviour, model, usage)
    blocks = message["content"]
    start = {**message, "content": [], "stop_reason": None}
    yield "message_start", {"type": "message_start", "message": start}
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            yield (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {**block, "text": ""},
                },
            )
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            yield (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {**block, "input": {}},
                },
            )
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": usage.get("output_tokens", 0)},
        },
    )
    yield "message_stop", {"type": "message_stop"}


def hermetic_env(
    root: str | os.PathLike[str],
    base_url: str,
    *,
    api_key: str = "sk-ant-dsh-fake-key",
    api_timeout_ms: int = 20_000,
) -> dict[str, str]:
    """The env overlay for a keyless run against ``base_url`` with homes under ``root``.

    Creates ``<root>/home`` and ``<root>/claude-config``. Pass the result as the provider's
    ``env``. ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`` is the one switch that stops all other
    traffic; retries are off so a model-side failure surfaces at once. Claude Code's other
    credential and base-URL names (``CLAUDE_CREDENTIAL_ENV``, forwarded by default) are set to
    empty values, which win over the ambient ones: a test never picks up the developer's real
    token. The CLI treats an empty value as unset.
    """
    base = Path(root)
    home = base / "home"
    config = base / "claude-config"
    home.mkdir(parents=True, exist_ok=True)
    config.mkdir(parents=True, exist_ok=True)
    return dict.fromkeys(CLAUDE_CREDENTIAL_ENV, "") | {
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": api_key,
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(config),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",
        "API_TIMEOUT_MS": str(api_timeout_ms),
    }


def host_tmp(root: str | os.PathLike[str]) -> dict[str, str]:
    """The env overlay that keeps a CLI run outside a provider (an MCP host) out of ``/tmp``.

    A provider gives each run a private ``TMPDIR`` itself; a CLI a test starts directly would
    otherwise make its ``claude-<uid>`` scratch dir in ``/tmp`` (measured with the pinned CLI),
    which the leak guard reports. Creates ``root``.
    """
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return {"TMPDIR": str(path), "CLAUDE_CODE_TMPDIR": str(path)}
