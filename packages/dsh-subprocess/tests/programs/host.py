"""A host program: spawns a TERM-ignoring tree via default_runtime, reports it, then exits.

argv[1] == "exit": exit normally (status 3) after a line on stdin; "hang": sleep until killed.
argv[2] == "plain" spawns without a supervisor (the fallback path), so a host SIGKILL orphans the
tree and only reap_orphans() can clean it up. ``HOST_OWNED_DIR`` in the env names the tree's
``owned_dir``.
"""

import asyncio
import json
import os
import sys

from dsh.subprocess import SpawnSpec, _spawn, default_runtime

if sys.argv[2:] == ["plain"]:
    _spawn._SUPERVISED = False

CHILD = (
    "import os, signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "if os.fork() == 0:\n"
    "    time.sleep(60)\n"
    "    os._exit(0)\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


async def main() -> None:
    proc = await default_runtime().spawn(
        SpawnSpec(
            [sys.executable, "-c", CHILD],
            stdout="pipe",
            grace_ms=5000,
            owned_dir=os.environ.get("HOST_OWNED_DIR"),
        )
    )
    assert proc.stdout is not None
    assert await proc.stdout.readline() == b"ready\n"
    print(json.dumps({"tree_id": proc.tree_id, "pid": proc.pid}), flush=True)
    if sys.argv[1] == "hang":
        await asyncio.sleep(60)


asyncio.run(main())
sys.stdin.readline()
sys.exit(3)
