"""Per-spawn cost of dsh.subprocess: supervised (the default on Linux) vs a plain ``Popen``.

Each sample is ``spawn()`` of ``/bin/true`` until it returns (the program has exec'd), the two
paths alternating so they see the same machine. The host's memory does not enter into either:
the plain path uses vfork, and the supervised path forks nothing in the host.
"""

from __future__ import annotations

import asyncio
import statistics
import time

from dsh.subprocess import SpawnSpec, SubprocessRuntime
from dsh.subprocess import _process as process_module

SAMPLES = 40


async def _one(runtime: SubprocessRuntime, supervised: bool) -> float:
    process_module._SUPERVISED = supervised
    began = time.perf_counter()
    proc = await runtime.spawn(SpawnSpec(["true"], stdout="ignore", stderr="ignore"))
    took = time.perf_counter() - began
    await proc.wait()
    await proc.aclose()
    await asyncio.sleep(0.01)  # the standby supervisor is replaced off the measured path
    return took


async def spawn_cost_ms(samples: int = SAMPLES) -> dict[str, float]:
    """Median milliseconds per spawn for each path, and the difference."""
    default = process_module._SUPERVISED
    times: dict[bool, list[float]] = {True: [], False: []}
    try:
        async with SubprocessRuntime() as runtime:
            for supervised in (True, False):
                await _one(runtime, supervised)  # warm: the spawner starts once per host
            for _ in range(samples):
                for supervised in (True, False):
                    times[supervised].append(await _one(runtime, supervised))
    finally:
        process_module._SUPERVISED = default
    supervised_ms = statistics.median(times[True]) * 1000
    plain_ms = statistics.median(times[False]) * 1000
    return {
        "supervised": round(supervised_ms, 2),
        "plain": round(plain_ms, 2),
        "added": round(supervised_ms - plain_ms, 2),
        "samples": samples,
    }
