"""A loopback Relay model API for keyless runs of ``relay-agent``.

It scripts like every dsh fake model server (``dsh.subagent.testing.ScriptedModelServer``): an
ordered queue of replies, ``match=`` per task, an optional ``route``, a ``default``, then an HTTP
500 carrying ``NO_REPLY_MESSAGE``.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Literal
from urllib.parse import urlsplit

from dsh.subagent.testing import NO_REPLY_MESSAGE, ModelRequest, ScriptedModelServer
from dsh.subagent_relay.config import RELAY_CREDENTIAL_ENV

__all__ = ["FAKE_API_KEY", "Behaviour", "FakeRelayServer", "RecordedRequest", "hermetic_env"]

FAKE_API_KEY = "relay-dsh-fake-key"
_USAGE = {"input_tokens": 12, "output_tokens": 4}


@dataclass(frozen=True, slots=True)
class Behaviour:
    """One scripted reply: ``text``, ``http_error``, ``drop`` or ``stall`` (for ``seconds``, or
    until ``release_stalls()`` or ``close()``)."""

    kind: Literal["text", "http_error", "drop", "stall"]
    text: str = ""
    status: int = 0
    seconds: float | None = None


@dataclass(frozen=True)
class RecordedRequest(ModelRequest):
    """One request as the server saw it (``body`` is the parsed JSON)."""

    @property
    def task(self) -> str | None:
        """The text parts of the input, joined with nothing added (where Relay puts the task)."""
        parts = (self.body or {}).get("input")
        if not isinstance(parts, list):
            return None
        return "".join(str(part.get("text", "")) for part in parts if isinstance(part, dict))


class FakeRelayServer(ScriptedModelServer[Behaviour, RecordedRequest]):
    """``POST /v1/reply`` on 127.0.0.1, in a background thread; ``async with`` or start/close."""

    def __init__(
        self,
        *,
        default: Behaviour | None = None,
        route: Callable[[RecordedRequest], Behaviour | None] | None = None,
    ) -> None:
        super().__init__(default=default, route=route)
        self._released = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle ------------------------------------------------------------------------
    def start(self) -> FakeRelayServer:
        if self._httpd is None:
            server = self

            class Handler(_Handler):
                fake = server

            httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
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

    async def __aenter__(self) -> FakeRelayServer:
        return self.start()

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def base_url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("FakeRelayServer is not started")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    # ---- scripting helpers (the names every dsh fake model server offers) ------------------
    def queue_text(self, text: str, *, match: str | None = None) -> None:
        self.queue(Behaviour("text", text=text), match=match)

    def queue_tool_call(
        self, name: str, arguments: Mapping[str, Any], *, match: str | None = None
    ) -> None:
        """Relay's model has no tools: a tool call is answered as text naming it."""
        self.queue(Behaviour("text", text=f"(tool {name} {json.dumps(arguments)})"), match=match)

    def queue_http_error(
        self, status: int, message: str = "fake error", *, match: str | None = None
    ) -> None:
        self.queue(Behaviour("http_error", status=status, text=message), match=match)

    def queue_drop(self, partial_text: str = "partial", *, match: str | None = None) -> None:
        self.queue(Behaviour("drop", text=partial_text), match=match)

    def queue_stall(self, *, seconds: float | None = None, match: str | None = None) -> None:
        self.queue(Behaviour("stall", seconds=seconds), match=match)

    def release_stalls(self) -> None:
        released, self._released = self._released, threading.Event()
        released.set()


class _Handler(BaseHTTPRequestHandler):
    fake: FakeRelayServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        released = self.fake._released  # taken first: a release once the request is seen ends it
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        url = urlsplit(self.path)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        record = RecordedRequest(
            method=self.command,
            path=url.path,
            query=url.query,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body if isinstance(body, dict) else None,
            raw_body=raw,
        )
        if url.path != "/v1/reply":
            self.fake._record(record, model_call=False)
            self._json(404, {"error": {"message": "not found"}})
            return
        behaviour = self.fake._answer(record)
        if behaviour is None:
            self._json(500, {"error": {"message": NO_REPLY_MESSAGE}})
        elif behaviour.kind == "http_error":
            self._json(behaviour.status, {"error": {"message": behaviour.text}})
        elif behaviour.kind == "stall":
            released.wait(behaviour.seconds)
            self.close_connection = True
        elif behaviour.kind == "drop":
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(json.dumps({"output_text": behaviour.text}).encode()[:10])
            self.close_connection = True
        else:
            self._json(200, {"output_text": behaviour.text, "usage": _USAGE})

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True


def hermetic_env(
    root: str | os.PathLike[str], base_url: str, *, api_key: str = FAKE_API_KEY
) -> dict[str, str]:
    """The env overlay for a keyless run against ``base_url`` with homes under ``root``.

    Creates ``<root>/home`` and ``<root>/relay``. Every other credential name of Relay's is set
    empty, which wins over the ambient value.
    """
    home, config = Path(root) / "home", Path(root) / "relay"
    home.mkdir(parents=True, exist_ok=True)
    config.mkdir(parents=True, exist_ok=True)
    return dict.fromkeys(RELAY_CREDENTIAL_ENV, "") | {
        "RELAY_BASE_URL": base_url,
        "RELAY_API_KEY": api_key,
        "HOME": str(home),
        "RELAY_HOME": str(config),
    }
