"""A tool command that escapes, then kills dsh's own machinery (run as a program, never imported).

``kill_machinery.py MODE DIR NONCE``:

1. starts an escapee with ``setsid -f env -i python escape_tricks.py sleep DIR NONCE``: no tree
   marker, a new session nobody watches; it touches ``DIR/<pid>.ready`` once it runs;
2. waits (bounded) until the escapee is running;
3. walks up its own ancestry in /proc to the host: the nearest ancestor running
   ``_spawner_main.py`` is the supervisor, the next one the spawner, its parent the host;
4. writes ``DIR/targets`` (``<role> <pid>`` lines), waits (bounded) for ``DIR/go`` from the
   test, which proves the escapee alive first, then kills:
   - ``supervisor``: SIGKILL the supervisor;
   - ``both``: SIGKILL the supervisor, then the spawner;
   - ``pkill``: ``pkill -9 -f`` the spawner script's name. The pattern is narrowed to this host's
     spawner and supervisors (their argv names the host's pid), because the test machine is
     shared: a bare ``pkill -9 -f _spawner_main`` would also take other users' runs down. It is
     the same attack, by pattern, for one host.
5. writes ``DIR/killed`` and exits 0.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPT = b"_spawner_main.py"


def _stat(pid: int) -> tuple[int, bytes]:
    data = Path(f"/proc/{pid}/stat").read_bytes()
    return int(data[data.rindex(b")") + 2 :].split()[1]), Path(f"/proc/{pid}/cmdline").read_bytes()


def ancestry() -> list[tuple[str, int]]:
    """(role, pid) of the supervisor, the spawner and the host, nearest first."""
    found: list[tuple[str, int]] = []
    pid = os.getppid()
    while pid > 1 and len(found) < 2:
        parent, cmdline = _stat(pid)
        if SCRIPT in cmdline:
            found.append(("supervisor" if not found else "spawner", pid))
        pid = parent
    if len(found) == 2:
        found.append(("host", _stat(found[1][1])[0]))
    return found


def run(argv: list[str]) -> int:
    """Run ``argv`` with its stdio on /dev/null (a plain fork and exec; this is the tool)."""
    pid = os.fork()
    if pid == 0:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        try:
            os.execvp(argv[0], argv)
        finally:
            os._exit(127)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def main() -> None:
    mode, directory, nonce = sys.argv[1:4]
    ready = Path(directory)
    escape = [sys.executable, str(HERE / "escape_tricks.py"), "sleep", directory, nonce]
    if run(["setsid", "-f", "env", "-i", *escape]) != 0:
        raise SystemExit("setsid failed")
    deadline = time.monotonic() + 10
    while not any(ready.glob("*.ready")) and time.monotonic() < deadline:
        time.sleep(0.01)
    targets = ancestry()
    staged = ready / "targets.tmp"
    staged.write_text("".join(f"{role} {pid}\n" for role, pid in targets))
    staged.rename(ready / "targets")
    # The test proves the escapee alive before the machinery dies (bounded wait for its go).
    deadline = time.monotonic() + 30
    while not (ready / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    roles = dict(targets)
    if mode == "supervisor":
        os.kill(roles["supervisor"], signal.SIGKILL)
    elif mode == "both":
        os.kill(roles["supervisor"], signal.SIGKILL)
        os.kill(roles["spawner"], signal.SIGKILL)
    elif mode == "pkill":
        pattern = f"_spawner_main.py [0-9]+ {roles['host']}:"
        run(["pkill", "-9", "-f", pattern])
    else:
        raise SystemExit(f"unknown mode {mode}")
    (ready / "killed").write_text(mode)


if __name__ == "__main__":
    main()
