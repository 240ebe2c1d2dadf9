"""``ThreadedModelServer``: a ``ScriptedModelServer`` served on 127.0.0.1 from a thread.

A product whose model API is plain HTTP/1.1 (one answer per connection) writes only its handler,
a ``ModelRequestHandler`` subclass (``do_POST`` and its wire format), and its reply kinds; the
server's lifecycle (``start`` / ``close``, ``with`` and ``async with``, ``base_url``) and its
stalls (``release_stalls``) are written here once. Claude Code's Messages API and the stand-in
Relay provider of the tests serve this way (Codex's serves on an event loop of its own).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, ClassVar, Self, TypeVar
from urllib.parse import urlsplit

from dsh.subagent._model_script import ModelRequest, ReplyT, RequestT, ScriptedModelServer

__all__ = ["ModelRequestHandler", "ThreadedModelServer"]

_RecordT = TypeVar("_RecordT", bound=ModelRequest)


class ModelRequestHandler(BaseHTTPRequestHandler):
    """The request handler of a ``ThreadedModelServer``: quiet, HTTP/1.1, and one answer per
    connection. A subclass names its server as ``fake`` (the server sets it) and answers."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def read_request(self, kind: type[_RecordT], *, body: bool = True) -> _RecordT:
        """The request as ``kind`` records it: the body (``Content-Length`` bytes, none when
        ``body`` is false) kept as received and parsed when it is a JSON object."""
        length = int(self.headers.get("Content-Length") or 0) if body else 0
        raw = self.rfile.read(length) if length > 0 else b""
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        url = urlsplit(self.path)
        return kind(
            method=self.command,
            path=url.path,
            query=url.query,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=parsed if isinstance(parsed, dict) else None,
            raw_body=raw,
        )

    def send_json(self, status: int, payload: Mapping[str, Any]) -> None:
        """Answer ``status`` with ``payload`` as JSON, then close the connection."""
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.send_extra_headers(status)
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True

    def send_extra_headers(self, status: int) -> None:
        """Headers the product's server adds to an answer of ``status`` (none here)."""


class ThreadedModelServer(ScriptedModelServer[ReplyT, RequestT]):
    """A scripted model server on 127.0.0.1, in a background thread, answering with
    ``handler`` (a ``ModelRequestHandler`` subclass, one handler thread per connection).

    Use as a context manager (sync or async) or call :meth:`start` and :meth:`close`. A stalled
    request waits on the event :meth:`stalls_released` returned when the request arrived (take it
    before recording the request: a ``release_stalls()`` once the request is seen must end it).
    """

    handler: ClassVar[type[ModelRequestHandler]]

    def __init__(
        self,
        *,
        default: ReplyT | None = None,
        route: Callable[[RequestT], ReplyT | None] | None = None,
    ) -> None:
        super().__init__(default=default, route=route)
        self._released = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        if self._httpd is not None:
            return self
        handler = type(self.handler.__name__, (self.handler,), {"fake": self})
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        httpd.daemon_threads = True
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving; stalled requests are released (their connections are closed)."""
        self._released.set()
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self.start()

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def base_url(self) -> str:
        if self._httpd is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def stalls_released(self) -> threading.Event:
        """The event the stalls that begin now wait on (set by ``release_stalls`` or ``close``)."""
        return self._released

    def release_stalls(self) -> None:
        """Let every stalled request end (its connection is closed); later stalls stall again."""
        released, self._released = self._released, threading.Event()
        released.set()
