"""A tool that runs into a limit, bounded in count and time (run as a program, never imported).

- ``hog.py memory MAX_MB DIR``: allocates (and touches) 16 MiB at a time, up to ``MAX_MB``,
  writing the MiB held so far to ``DIR/held``; stops at ``MAX_MB`` or after 20 s.
- ``hog.py forks MAX DIR``: a fork bomb of at most ``MAX`` forks in at most 10 s; each child
  sleeps (at most 15 s) and exits; ``DIR/forks`` holds ``<forked> <refused>`` after each
  attempt. Run these only inside a limited group.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

CHUNK = 16 << 20


def record(path: Path, text: str) -> None:
    staged = path.with_suffix(".tmp")
    staged.write_text(text)
    staged.rename(path)


def memory(limit_mb: int, directory: Path) -> None:
    held: list[bytearray] = []
    deadline = time.monotonic() + 20
    while len(held) * 16 < limit_mb and time.monotonic() < deadline:
        block = bytearray(CHUNK)
        for offset in range(0, CHUNK, 4096):
            block[offset] = 1  # touch every page: charged for real
        held.append(block)
        record(directory / "held", str(len(held) * 16))
        time.sleep(0.01)
    time.sleep(5)


def forks(limit: int, directory: Path) -> None:
    forked = refused = 0
    deadline = time.monotonic() + 10
    while forked + refused < limit and time.monotonic() < deadline:
        try:
            pid = os.fork()
        except BlockingIOError:
            refused += 1
        else:
            if pid == 0:
                time.sleep(15)
                os._exit(0)
            forked += 1
        record(directory / "forks", f"{forked} {refused}")
    time.sleep(5)


def main() -> None:
    mode, bound, directory = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    if mode == "memory":
        memory(bound, directory)
    elif mode == "forks":
        forks(bound, directory)
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
