"""A scripted stand-in for the Claude Code CLI's stream-json protocol (run as a program).

Only for protocol branches the real CLI cannot be made to produce. The scenario comes from the
STANDIN_SCENARIO env var; what the SDK side answered is appended to STANDIN_LOG.
"""

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any


def send(frame: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(frame) + "\n")
    sys.stdout.flush()


def receive() -> Any:
    line = sys.stdin.readline()
    return json.loads(line) if line else None


def result(subtype: str = "success", is_error: bool = False, text: str | None = "ok") -> None:
    send(
        {
            "type": "result",
            "subtype": subtype,
            "duration_ms": 1,
            "duration_api_ms": 1,
            "is_error": is_error,
            "num_turns": 1,
            "session_id": "s",
            "result": text,
        }
    )


def log(entry: Any) -> None:
    with Path(os.environ["STANDIN_LOG"]).open("a") as handle:
        handle.write(json.dumps(entry) + "\n")


def elicit() -> None:
    """Ask an MCP elicitation and log the answer."""
    send(
        {
            "type": "control_request",
            "request_id": "e1",
            "request": {
                "subtype": "elicitation",
                "mcp_server_name": "srv",
                "message": "your name?",
            },
        }
    )
    log(receive())


if os.environ["STANDIN_SCENARIO"] == "die-at-start":
    sys.exit(3)
if os.environ["STANDIN_SCENARIO"] == "slow-start":
    time.sleep(30)  # never answers initialize (SIGTERM ends it)
init = receive()
send(
    {
        "type": "control_response",
        "response": {"subtype": "success", "request_id": init["request_id"], "response": {}},
    }
)
prompt = receive()
content = prompt["message"]["content"]
if isinstance(content, list):  # one text block per prompt block; logged joined, as the tests read
    content = "".join(block["text"] for block in content)
log({"prompt": content})
send({"type": "system", "subtype": "init", "session_id": "s"})
scenario = os.environ["STANDIN_SCENARIO"]
if scenario in ("elicitation-only", "elicitation-then-success"):
    elicit()
    if scenario == "elicitation-only":
        result("error_during_execution", True, None)
        sys.exit(1)
    result(text="after the elicitation")
elif scenario == "elicitation-dialog":
    elicit()
    send(
        {
            "type": "control_request",
            "request_id": "d1",
            "request": {"subtype": "request_user_dialog", "dialog_kind": "refusal_fallback_prompt"},
        }
    )
    log(receive())
    result("error_during_execution", True, None)
    sys.exit(1)
elif scenario == "stubborn":
    # Only SIGKILL ends this tree (the CLI and its child ignore SIGTERM and stdin EOF).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if os.fork() == 0:
        time.sleep(60)
        os._exit(0)
    time.sleep(60)
elif scenario == "blank":
    result(text="   ")
elif scenario == "no-result":
    pass
elif scenario == "bad-frame":
    sys.stdout.write("{not json " + os.environ.get("STANDIN_SECRET", "") + "\n")
    sys.stdout.flush()
    time.sleep(30)
elif scenario == "oversized-result":
    result(text="x" * 5000)  # one complete frame, larger than the test's 1 KiB bound
elif scenario == "endless-line":
    sys.stdout.write('{"type": "assistant", "text": "' + "x" * 5000)  # no newline, ever
    sys.stdout.flush()
    time.sleep(30)
elif scenario == "late-results":
    result(text="FIRST-SUCCESS")
    time.sleep(30)
elif scenario == "success-then-error":
    result(text="FIRST-SUCCESS")
    result("error_max_budget_usd", True, None)
    sys.exit(1)
elif scenario == "success-then-exit":
    result(text="A-SUCCESS")
    sys.exit(3)
elif scenario == "error-then-signal":
    result("error_max_turns", True, None)
    os.kill(os.getpid(), 9)
