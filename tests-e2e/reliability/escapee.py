"""A product-side descendant that tries to outlive its run (run as a program, never imported).

``escapee.py <dir> <nonce> <kind>...`` starts one daemon per kind and returns at once:

- ``setsid``: double fork with ``setsid()`` in between, so it leaves the product's session and
  process group and is re-parented away from the product;
- ``ignore``: a descendant that ignores SIGTERM (only SIGKILL stops it). It moves to its own
  process group (the product reaps the tool command's group when the command returns) and is
  re-parented by a double fork, but it stays in the product's session.

Each daemon detaches its stdio, writes ``<dir>/<kind>.ready`` and sleeps (bounded). The nonce is
only there so the test can find the daemons in the process table by their command line.
"""

import os
import signal
import sys
import time
from pathlib import Path

LIFETIME_S = 120.0


def detach_stdio() -> None:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)


def live(directory: Path, kind: str) -> None:
    detach_stdio()
    (directory / f"{kind}.ready").write_text(str(os.getpid()))
    deadline = time.monotonic() + LIFETIME_S
    while time.monotonic() < deadline:
        time.sleep(0.2)
    os._exit(0)


def start(directory: Path, kind: str) -> None:
    if os.fork() != 0:
        return
    try:
        if kind == "setsid":
            os.setsid()
        elif kind == "ignore":
            os.setpgid(0, 0)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if os.fork() != 0:
            os._exit(0)
        live(directory, kind)
    finally:
        os._exit(0)


def main() -> None:
    directory = Path(sys.argv[1])
    for kind in sys.argv[3:]:
        start(directory, kind)
    # Reap the intermediate child of the double fork, then return so the tool call finishes.
    for _ in sys.argv[3:]:
        try:
            os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break


if __name__ == "__main__":
    main()
