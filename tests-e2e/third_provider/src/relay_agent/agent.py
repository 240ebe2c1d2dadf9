#!/usr/bin/env python3
"""relay-agent 1.0.0: one task per process over stdio, answered by its model over HTTP.

The protocol, one JSON object per line:

- stdout ``{"type": "ready"}`` once it can take a task;
- stdin ``{"type": "task", "texts": [...]}``: the task, one text part per prompt block;
- it then asks its model: ``POST $RELAY_BASE_URL/v1/reply`` with
  ``{"input": [{"type": "text", "text": ...}, ...]}`` and ``Authorization: Bearer $RELAY_API_KEY``;
  the model answers ``{"output_text": ..., "usage": {...}}`` or an HTTP error;
- stdout ``{"type": "answer", "text": ..., "usage": {...}}`` and exit 0, or
  ``{"type": "error", "stage": "reply", "status": <HTTP status or null>}`` and exit 1.

The error line carries the status only, never the model's error text. Stdlib only.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any


def emit(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def ask(texts: list[str]) -> dict[str, Any]:
    base = os.environ.get("RELAY_BASE_URL", "").rstrip("/")
    body = json.dumps({"input": [{"type": "text", "text": text} for text in texts]}).encode()
    request = urllib.request.Request(
        f"{base}/v1/reply",
        data=body,
        headers={
            "Content-Type": "application/json",
            "Authorization": f"Bearer {os.environ.get('RELAY_API_KEY', '')}",
        },
    )
    with urllib.request.urlopen(request) as response:
        reply: dict[str, Any] = json.loads(response.read())
    return reply


def main() -> int:
    emit({"type": "ready"})
    line = sys.stdin.readline()
    if not line:
        return 0  # closed before a task: nothing to do
    task = json.loads(line)
    texts = [str(text) for text in task.get("texts", [])]
    try:
        reply = ask(texts)
    except urllib.error.HTTPError as error:
        emit({"type": "error", "stage": "reply", "status": error.code})
        return 1
    except (OSError, ValueError):
        emit({"type": "error", "stage": "reply", "status": None})
        return 1
    emit({"type": "answer", "text": reply.get("output_text", ""), "usage": reply.get("usage")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
