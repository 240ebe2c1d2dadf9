"""A scripted ``codex app-server`` stand-in that plays a frame script (run as a program).

``BAD_FRAMES_SCRIPT`` names a JSON file holding a list of steps:

- ``["expect", method]``: read requests until one with that method arrives (remember its id);
  gives up after a short while, so the script always moves on and always ends;
- ``["reply", obj]`` / ``["send", obj]``: write ``obj`` as one line (any string ``"$ID"`` in it is
  replaced by the remembered request id);
- ``["raw", text]``: write ``text`` and a newline; ``["bytes", hex]``: write raw bytes;
- ``["exit", code]``: exit now.

At the end of the script the stand-in exits (stdout EOF).
"""

import json
import os
import select
import time
from pathlib import Path
from typing import Any

EXPECT_S = 0.3


class Stdin:
    def __init__(self) -> None:
        self.buffer = b""
        self.closed = False

    def line(self, deadline: float) -> bytes | None:
        while b"\n" not in self.buffer:
            if self.closed:
                return None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([0], [], [], remaining)
            if not ready:
                return None
            chunk = os.read(0, 65536)
            if not chunk:
                self.closed = True
                continue
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line


def substitute(value: Any, request_id: Any) -> Any:
    if value == "$ID":
        return request_id
    if isinstance(value, dict):
        return {k: substitute(v, request_id) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, request_id) for v in value]
    return value


def write(data: bytes) -> None:
    try:
        os.write(1, data)
    except OSError:
        os._exit(0)


def main() -> None:
    script = json.loads(Path(os.environ["BAD_FRAMES_SCRIPT"]).read_text(encoding="utf-8"))
    stdin = Stdin()
    request_id = None
    for kind, arg in script:
        if kind == "expect":
            deadline = time.monotonic() + EXPECT_S
            while (line := stdin.line(deadline)) is not None:
                try:
                    frame = json.loads(line)
                except ValueError:
                    continue
                if isinstance(frame, dict) and frame.get("method") == arg and "id" in frame:
                    request_id = frame["id"]
                    break
        elif kind in ("reply", "send"):
            write(json.dumps(substitute(arg, request_id)).encode() + b"\n")
        elif kind == "raw":
            write(arg.encode("utf-8", "surrogatepass") + b"\n")
        elif kind == "bytes":
            write(bytes.fromhex(arg))
        elif kind == "exit":
            os._exit(int(arg) & 0xFF)
    os._exit(0)


if __name__ == "__main__":
    main()
