# mypy: ignore-errors
"""A scripted stand-in for ``codex app-server`` (run as a program, never imported).

The scenario comes from ``STANDIN_SCENARIO``; replies to server requests are appended as JSON lines
to ``STANDIN_LOG``. Only for protocol branches the real product cannot be made to produce.
"""

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

SCENARIO = os.environ.get("STANDIN_SCENARIO", "ok")
ARG = os.environ.get("STANDIN_ARG", "")
LOG = os.environ.get("STANDIN_LOG")
# After an answered server request: "" ends the turn with an answer, "fail" fails it.
THEN = os.environ.get("STANDIN_THEN", "")
THREAD = "thread-1"
TURN = "turn-1"


def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def raw(text):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def read():
    try:
        line = sys.stdin.readline()
    except BlockingIOError:  # terminating and nothing more is pending
        line = ""
    if not line:
        sys.exit(0)
    return json.loads(line)


def log(obj):
    if LOG:
        with Path(LOG).open("a") as f:
            f.write(json.dumps(obj) + "\n")


def _finish_pending_input_then_exit(signum, frame):
    # The provider may answer a server request and tear down at once; under load SIGTERM can land
    # before this program has read (or logged) the answer, and the answer may already sit in
    # sys.stdin's buffers. So do not exit here: make stdin non-blocking and let the scenario go on
    # reading (and logging) whatever is pending; read() exits at EOF or once nothing is left.
    os.set_blocking(0, False)


signal.signal(signal.SIGTERM, _finish_pending_input_then_exit)


def note(method, params):
    send({"method": method, "params": params, "emittedAtMs": 1})


def item(it, turn=TURN, thread=THREAD):
    note("item/completed", {"threadId": thread, "turnId": turn, "item": it})


def message(text, phase=None):
    return {"type": "agentMessage", "id": "m", "text": text, "phase": phase}


def done(status="completed", error=None, turn=TURN):
    note(
        "turn/completed",
        {"threadId": THREAD, "turn": {"id": turn, "items": [], "status": status, "error": error}},
    )


def after_request(text):
    if THEN == "fail":
        done("failed", {"message": "m", "codexErrorInfo": "internalServerError"})
    else:
        item(message(text, "final_answer"))
        done()


def server_request(method, params, rid=0):
    send({"id": rid, "method": method, "params": params})
    while True:
        reply = read()
        if reply.get("id") == rid:
            log(reply)
            return reply


def handshake():
    init = read()
    log({"initialize": init})
    if SCENARIO == "init_bad":
        send({"id": init["id"], "result": "not an object"})
    elif SCENARIO == "init_error":
        send({"id": init["id"], "error": {"code": -32600, "message": "SECRET-CANARY"}})
    else:
        send({"id": init["id"], "result": {"userAgent": "standin"}})
    nxt = read()
    if nxt.get("method") == "initialized":
        nxt = read()
    if nxt.get("method") == "account/read":
        # A model provider that needs no OpenAI auth (every stand-in scenario).
        send({"id": nxt["id"], "result": {"account": None, "requiresOpenaiAuth": False}})
        nxt = read()
    log({"thread/start": nxt})
    if SCENARIO == "thread_not_ephemeral":
        send({"id": nxt["id"], "result": {"thread": {"id": THREAD, "ephemeral": False}}})
    elif SCENARIO == "thread_no_id":
        send({"id": nxt["id"], "result": {"thread": {"id": "", "ephemeral": True}}})
    elif SCENARIO == "thread_error":
        send({"id": nxt["id"], "error": {"code": -32600, "message": "bad"}})
    else:
        send({"id": nxt["id"], "result": {"thread": {"id": THREAD, "ephemeral": True}}})
    return read()


def flood():
    chunk = ("x" * 8191 + "\n").encode()
    end = time.monotonic() + 1.0
    for _ in range(4096):  # at most 32 MiB, at most about a second
        if time.monotonic() > end:
            break
        os.write(2, chunk)


def stubborn():
    """Ignore SIGTERM and stdin EOF, with one child that ignores SIGTERM too: only SIGKILL ends
    this tree, so a close that returns before the ladder's SIGKILL is seen with the tree alive."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if os.fork() == 0:
        time.sleep(60)
        os._exit(0)
    time.sleep(60)
    os._exit(0)


def main():
    turn_start = handshake()
    rid = turn_start["id"]
    if SCENARIO == "early":
        note("turn/started", {"threadId": THREAD, "turn": {"id": TURN}})
        item(message("early answer", "final_answer"))
        done()
        send({"id": rid, "result": {"turn": {"id": TURN}}})
    elif SCENARIO == "conflict":
        note("turn/started", {"threadId": THREAD, "turn": {"id": TURN}})
        item(message("x", "final_answer"), turn="turn-2")
        send({"id": rid, "result": {"turn": {"id": TURN}}})
    elif SCENARIO == "mismatch":
        note("turn/started", {"threadId": THREAD, "turn": {"id": "turn-9"}})
        send({"id": rid, "result": {"turn": {"id": TURN}}})
    elif SCENARIO == "no_turn_id":
        send({"id": rid, "result": {"turn": {}}})
    else:
        send({"id": rid, "result": {"turn": {"id": TURN}}})
    if SCENARIO == "malformed":
        raw("not json at all {")
        raw("[1, 2, 3]")
        raw('"a string"')
        raw("")
        send({"id": "dsh-999", "result": {}})
        item(message("foreign", "final_answer"), thread="other-thread")
        item(message("other turn", "final_answer"), turn="other-turn")
        done(turn="other-turn")
        item(message("the answer", "final_answer"))
        done()
    elif SCENARIO == "oversized":
        raw(json.dumps({"method": "x", "params": {"pad": "y" * int(ARG or 5000)}}))
        item(message("never", "final_answer"))
        done()
    elif SCENARIO == "phase":
        it = message("text", ARG)
        item(it)
        done()
    elif SCENARIO == "rate_limits":
        # As Codex 0.163.0 sends it: account-wide, naming no thread or turn.
        window = {"usedPercent": 43, "windowDurationMins": 300, "resetsAt": 1900000000}
        note("account/rateLimits/updated", {"rateLimits": {"limitId": "codex", "primary": window}})
        item(message("limited", "final_answer"))
        done()
    elif SCENARIO == "missing_phase":
        item({"type": "agentMessage", "id": "m", "text": "no phase"})
        done()
    elif SCENARIO == "select":
        for text, phase in json.loads(ARG):
            item(message(text, phase))
        done()
    elif SCENARIO == "errinfo":
        item(message("partial text", "final_answer"))
        error = {"message": "raw product message SECRET-CANARY", "codexErrorInfo": json.loads(ARG)}
        note("error", {"threadId": THREAD, "turnId": TURN, "willRetry": True, "error": error})
        done("failed", error)
    elif SCENARIO == "errinfo_missing":
        done("failed", {"message": "m"})
    elif SCENARIO == "status":
        done(ARG)
    elif SCENARIO == "approval":
        params = {"threadId": THREAD, "turnId": TURN, "itemId": "c1", "startedAtMs": 1}
        if ARG != "absent":
            params["availableDecisions"] = json.loads(ARG)
        server_request("item/commandExecution/requestApproval", params)
        after_request("after approval")
    elif SCENARIO == "fixed_request":
        params = {"threadId": THREAD, "turnId": TURN, "itemId": "c1", "startedAtMs": 1}
        server_request(ARG, params)
        after_request("after request")
    elif SCENARIO == "unknown_request":
        server_request(ARG or "item/tool/call", {"threadId": THREAD, "turnId": TURN})
        item(message("should not win", "final_answer"))
        done()
    elif SCENARIO == "misassociated":
        params = {"threadId": THREAD, "turnId": "other-turn", "itemId": "c1", "startedAtMs": 1}
        server_request("item/fileChange/requestApproval", params)
        item(message("should not win", "final_answer"))
        done()
    elif SCENARIO == "declined_then_fail":
        item({"type": "fileChange", "id": "f", "changes": [], "status": "declined"})
        item({"type": "commandExecution", "id": "c", "command": "x", "status": "declined"})
        done("failed", {"message": "m", "codexErrorInfo": "internalServerError"})
    elif SCENARIO == "flood":
        worker = threading.Thread(target=flood)
        worker.start()
        time.sleep(0.3)
        item(message("flood answer", "final_answer"))
        done()
        worker.join()
    elif SCENARIO == "exit":
        sys.stderr.write("stderr SECRET-CANARY\n")
        sys.stderr.flush()
        os._exit(int(ARG or 3))
    elif SCENARIO == "completed_then_exit":
        item(message("queued answer", "final_answer"))
        done()
        os._exit(7)
    elif SCENARIO == "hang":
        pass
    elif SCENARIO == "stubborn":
        stubborn()
    # Stay up until stdin closes (EOF), answering nothing further.
    while True:
        msg = read()
        log(msg)
        if msg.get("method") == "turn/interrupt":
            send({"id": msg["id"], "result": {}})
            done("interrupted")


if __name__ == "__main__":
    main()
