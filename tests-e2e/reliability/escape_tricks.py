"""Programs that try to outlive their run: ``escape_tricks.py MODE READY_DIR NONCE``.

Every escapee runs ``sleep_forever`` with an **empty environment** (so it carries no tree marker)
and the nonce in its argv, and touches ``READY_DIR/<its pid>.ready`` once it runs, so a test
knows it escaped before it checks that nothing survived.

- ``double-fork``: fork, setsid, fork, execve with an empty env; the intermediate exits at once
  and is reaped at once; then this program exits normally.
- ``on-sigterm``: the same double fork from inside a SIGTERM handler, during teardown.
- ``half-exit``: the main thread exits while another thread runs (``Z`` in /proc/<pid>/stat).
- ``half-exit-child``: forks a child that runs ``half-exit``, then exits normally.
- ``sleep``: the escapee itself (for a shell to start with ``setsid -f env -i`` or ``nohup``).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from pathlib import Path

SLEEP_FOREVER = (
    "import pathlib, os, sys, time\n"
    "pathlib.Path(sys.argv[1], f'{os.getpid()}.ready').touch()\n"
    "time.sleep(25)\n"
)


def _double_fork(ready: str, nonce: str) -> None:
    intermediate = os.fork()
    if intermediate == 0:
        os.setsid()
        if os.fork() == 0:
            argv = [sys.executable, "-c", SLEEP_FOREVER, ready, nonce]
            os.execve(sys.executable, argv, {})
        os._exit(0)
    os.waitpid(intermediate, 0)  # reaped at once: the escapee's parent is gone


def _half_exit(ready: str, nonce: str) -> None:
    def linger() -> None:
        Path(ready, f"{os.getpid()}.ready").write_text(nonce)
        time.sleep(25)

    threading.Thread(target=linger).start()
    time.sleep(0.2)
    ctypes.CDLL(None).pthread_exit(None)  # only the main thread ends


def main() -> None:
    mode, ready, nonce = sys.argv[1:4]
    if mode == "sleep":
        sys.argv[1:] = [ready, nonce]
    if mode == "double-fork":
        _double_fork(ready, nonce)
    elif mode == "on-sigterm":

        def escape(*_: object) -> None:
            _double_fork(ready, nonce)
            os._exit(0)

        signal.signal(signal.SIGTERM, escape)
        print("armed", flush=True)
        time.sleep(30)
    elif mode == "half-exit":
        _half_exit(ready, nonce)
    elif mode == "sleep":
        exec(SLEEP_FOREVER, {"__name__": "escapee"})
    elif mode == "half-exit-child":
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, __file__, "half-exit", ready, nonce])
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
