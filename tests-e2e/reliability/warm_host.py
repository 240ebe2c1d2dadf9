"""A host that keeps warm product processes and then waits to be killed (run as a program).

``warm_host.py <codex|claude-code> <base_url> <root> <workspace> <prewarm> [plain] [private]``:
builds the provider with ``prewarm`` (``private``: under ``isolation = "private"``), runs one
delegation to completion (a cold start; it triggers the warming), waits until ``prewarm`` warm
processes are idle, prints their pids as one JSON line, and sleeps (bounded) so the test can
SIGKILL it. It first forks a child that holds the warm processes' stdin open, so they do not see
the EOF that would end them when the host dies (both products exit on stdin EOF when idle): only
their supervisors, or without supervisors (``plain``, dsh.subprocess's fallback) only
``reap_orphans()``, can remove them then. It prints that child's pid too (the test kills it).
"""

import asyncio
import json
import os
import sys
import time
from pathlib import Path

from crash_host import build_provider

from dsh.subagent import Descriptor, Parent, ResolvedStartRequest, TextBlock

LIFETIME_S = 60.0


async def main() -> None:
    kind, base_url, root, workspace, prewarm = sys.argv[1:6]
    private = "private" in sys.argv[6:]
    provider = build_provider(kind, base_url, root, prewarm=int(prewarm), private=private)
    request = ResolvedStartRequest(
        prompt=(TextBlock("warm-host"),),
        parent=Parent(session_id="warm-host", cwd=workspace),
        descriptor=Descriptor(provider=provider.name),
    )
    async with await provider.start(request) as run:
        await run.result()
    pool = provider.warm_pool
    for _ in range(800):  # bounded: 40 s
        if len(pool.idle()) >= int(prewarm):
            break
        await asyncio.sleep(0.05)
    pids = [warm.process.pid for warm in pool.idle()]
    holder = os.fork()  # the child inherits every pipe end, the warm stdins included
    if holder == 0:
        time.sleep(LIFETIME_S)  # noqa: ASYNC251 (a forked child: no loop runs here)
        os._exit(0)
    print(json.dumps({"warm": pids, "holder": holder}), flush=True)
    await asyncio.sleep(LIFETIME_S)  # the test SIGKILLs us long before this


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    if "plain" in sys.argv[6:]:
        from dsh.subprocess import _spawn

        _spawn._SUPERVISED = False
    asyncio.run(main())
