"""A loopback Relay model API for keyless runs of ``relay-agent``.

It scripts like every dsh fake model server (``dsh.subagent.testing.ScriptedModelServer``): an
ordered queue of replies, ``match=`` per task, an optional ``route``, a ``default``, then an HTTP
500 carrying ``NO_REPLY_MESSAGE``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from dsh.subagent.testing import (
    NO_REPLY_MESSAGE,
    ModelRequest,
    ModelRequestHandler,
    ThreadedModelServer,
)
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


class _Handler(ModelRequestHandler):
    fake: FakeRelayServer

    def do_POST(self) -> None:
        released = self.fake.stalls_released()  # taken first: a release once seen ends it
        record = self.read_request(RecordedRequest)
        if record.path != "/v1/reply":
            self.fake._record(record, model_call=False)
            self.send_json(404, {"error": {"message": "not found"}})
            return
        behaviour = self.fake._answer(record)
        if behaviour is None:
            self.send_json(500, {"error": {"message": NO_REPLY_MESSAGE}})
        elif behaviour.kind == "http_error":
            self.send_json(behaviour.status, {"error": {"message": behaviour.text}})
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
            self.send_json(200, {"output_text": behaviour.text, "usage": _USAGE})


class FakeRelayServer(ThreadedModelServer[Behaviour, RecordedRequest]):
    """``POST /v1/reply`` on 127.0.0.1, in a background thread; ``async with`` or start/close."""

    handler = _Handler

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
